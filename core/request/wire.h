/* core/request/wire.h - requests, results and run counts as bytes: what rank
 * 0 of an MPI job sends its data-parallel replicas and gets back from them.
 * Little-endian fixed-width fields, floats as their bits (a NaN's payload
 * kept); arrays and strings with their length, NULL apart from empty.  Both
 * ends run the same build: there is no version. */
#ifndef FG_REQUEST_WIRE_H
#define FG_REQUEST_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/fgcore.h>

/* A growing buffer of bytes being written ({0}: empty). */
struct fg_wire {
	unsigned char *buf;
	size_t len, cap;
	int oom;             /* an allocation failed: the bytes are incomplete */
};
/* Bytes being read: p[0..len), at the read position. */
struct fg_wire_reader {
	const unsigned char *p;
	size_t len, at;
};

void fg_wire_free(struct fg_wire *w);

/* Append; 0 or -ENOMEM (with an FG_ERR line).  Once oom is set every append
 * fails. */
int fg_wire_put_u64(struct fg_wire *w, uint64_t v);
/* All of *r but on_token and on_token_arg: only whether on_token is set.  A
 * NULL array goes as NULL whatever its count (it reads back with count 0). */
int fg_wire_put_request(struct fg_wire *w, const struct fg_request *r);
/* top_logprobs: the request's, the entries per position of r's top arrays
 * (they hold n_prompt_tokens and n_tokens positions; the result does not say
 * how many entries each); outside [0, FG_TOP_LOGPROBS_MAX]: -EINVAL. */
int fg_wire_put_result(struct fg_wire *w, const struct fg_result *r, int top_logprobs);
int fg_wire_put_stats(struct fg_wire *w, const struct fg_run_stats *s);

/* Read the next one; -EPROTO with a line "replica message: ... at byte N"
 * when the bytes are not one (truncated, a count larger than what remains, a
 * string holding a NUL byte, a field out of range), -ENOMEM when out of
 * memory.
 * On failure rd->at is where it was, *out is zeroed and nothing leaks. */
int fg_wire_get_u64(struct fg_wire_reader *rd, uint64_t *v);
/* *out's arrays and strings are malloc'd copies (fg_wire_request_free frees
 * them); *streams: 1 when the sender's request had an on_token callback
 * (out->on_token is NULL: the receiver sets its own).  The request's numbers
 * come as sent, in range or not: fg_run refuses them, in its own words. */
int fg_wire_get_request(struct fg_wire_reader *rd, struct fg_request *out, int *streams);
void fg_wire_request_free(struct fg_request *r);
/* *out as fg_result_clear() frees it (every array malloc'd, NULL where the
 * sender's was NULL). */
int fg_wire_get_result(struct fg_wire_reader *rd, struct fg_result *out);
int fg_wire_get_stats(struct fg_wire_reader *rd, struct fg_run_stats *out);

/* dst += src: counts and seconds added, peak_bytes the larger. */
void fg_run_stats_add(struct fg_run_stats *dst, const struct fg_run_stats *src);

#endif
