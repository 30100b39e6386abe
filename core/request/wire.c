/* core/request/wire.c - requests, results and run counts as bytes (wire.h).
 * Every field is written byte by byte, little-endian, and read back the same
 * way: no struct is copied whole and nothing is read unaligned.  A message
 * begins with a byte naming its kind.  An array or a string goes as a u64,
 * 0 for NULL and else its count + 1, then its elements (a string's bytes
 * without a NUL); a count is checked against the bytes that remain before
 * anything is allocated for it, so that a corrupt message costs an error and
 * not a huge malloc. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/request/wire.h"
#include "core/util/error.h"

enum { TAG_REQUEST = 'Q', TAG_RESULT = 'R', TAG_STATS = 'S' };

void fg_wire_free(struct fg_wire *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

/* ---- writing ---------------------------------------------------------- */

/* n (> 0) more bytes at the end, or NULL: oom set, the message lost. */
static unsigned char *room(struct fg_wire *w, size_t n)
{
	if (!w->oom && n > w->cap - w->len) {
		size_t cap = w->cap ? w->cap : 256;
		unsigned char *b = NULL;

		while (cap - w->len < n && cap <= SIZE_MAX / 2)
			cap *= 2;
		if (cap - w->len >= n)
			b = realloc(w->buf, cap);
		if (b) {
			w->buf = b;
			w->cap = cap;
		} else {
			w->oom = 1;
		}
	}
	if (w->oom) {
		FG_ERR("out of memory writing a replica message");
		return NULL;
	}
	unsigned char *p = w->buf + w->len;
	w->len += n;
	return p;
}

static void to_le(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> 8 * i);
}

/* The writers below return nothing: oom stays set, the message's put_*
 * says it once at the end. */
static void put(struct fg_wire *w, uint64_t v, int bytes)
{
	unsigned char *p = room(w, (size_t)bytes);

	if (p)
		to_le(p, v, bytes);
}

static uint32_t float_bits(const float *f)
{
	uint32_t u;

	memcpy(&u, f, sizeof(u));
	return u;
}

static void put_count(struct fg_wire *w, const void *p, size_t n)
{
	put(w, p ? (uint64_t)n + 1 : 0, 8);
}

/* n elements of size bytes each: where they go, or NULL (none or oom). */
static unsigned char *put_array(struct fg_wire *w, const void *a, size_t n, size_t size)
{
	put_count(w, a, n);
	if (!a || !n)
		return NULL;
	return room(w, n > SIZE_MAX / size ? SIZE_MAX : n * size);
}

static void put_ids(struct fg_wire *w, const int32_t *a, size_t n)
{
	unsigned char *p = put_array(w, a, n, 4);

	for (size_t i = 0; p && i < n; i++)
		to_le(p + 4 * i, (uint32_t)a[i], 4);
}

static void put_floats(struct fg_wire *w, const float *a, size_t n)
{
	unsigned char *p = put_array(w, a, n, 4);

	for (size_t i = 0; p && i < n; i++)
		to_le(p + 4 * i, float_bits(&a[i]), 4);
}

static void put_tops(struct fg_wire *w, const struct fg_logprob *a, size_t n)
{
	unsigned char *p = put_array(w, a, n, 8);

	for (size_t i = 0; p && i < n; i++) {
		to_le(p + 8 * i, (uint32_t)a[i].id, 4);
		to_le(p + 8 * i + 4, float_bits(&a[i].logprob), 4);
	}
}

static void put_str(struct fg_wire *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	unsigned char *p = put_array(w, s, n, 1);

	if (p)
		memcpy(p, s, n);
}

static void put_int(struct fg_wire *w, int v)
{
	put(w, (uint32_t)v, 4);
}

int fg_wire_put_u64(struct fg_wire *w, uint64_t v)
{
	put(w, v, 8);
	return w->oom ? -ENOMEM : 0;
}

int fg_wire_put_request(struct fg_wire *w, const struct fg_request *r)
{
	put(w, TAG_REQUEST, 1);
	put_str(w, r->prompt);
	put_ids(w, r->prompt_ids, r->n_prompt_ids);
	put_int(w, r->max_new_tokens);
	put(w, float_bits(&r->temperature), 4);
	put_int(w, r->top_k);
	put(w, float_bits(&r->top_p), 4);
	put(w, r->seed, 8);
	put_ids(w, r->stop_ids, r->n_stop_ids);
	put_count(w, r->stop, r->n_stop);
	for (size_t i = 0; r->stop && i < r->n_stop; i++)
		put_str(w, r->stop[i]);
	put_int(w, r->logprobs);
	put_int(w, r->score_prompt);
	put_int(w, r->top_logprobs);
	put(w, r->on_token != NULL, 1);
	put_int(w, r->known);
	return w->oom ? -ENOMEM : 0;
}

int fg_wire_put_result(struct fg_wire *w, const struct fg_result *r, int top_logprobs)
{
	if (top_logprobs < 0 || top_logprobs > FG_TOP_LOGPROBS_MAX) {
		FG_ERR("replica message: top_logprobs %d outside [0, %d]", top_logprobs,
		       FG_TOP_LOGPROBS_MAX);
		return -EINVAL;
	}
	size_t k = (size_t)top_logprobs;

	put(w, TAG_RESULT, 1);
	put_str(w, r->text);
	put(w, r->n_tokens, 8);
	put(w, r->n_prompt_tokens, 8);
	put(w, (uint32_t)r->finish_reason, 4);
	put_str(w, r->error);
	put_int(w, r->refused);
	put_int(w, top_logprobs);
	put_ids(w, r->token_ids, r->n_tokens);
	put_ids(w, r->prompt_ids, r->n_prompt_tokens);
	put_floats(w, r->prompt_logprobs, r->n_prompt_tokens);
	put_tops(w, r->prompt_top, r->n_prompt_tokens * k);
	put_floats(w, r->token_logprobs, r->n_tokens);
	put_tops(w, r->token_top, r->n_tokens * k);
	return w->oom ? -ENOMEM : 0;
}

/* ---- run counts ------------------------------------------------------- */

/* The fields of a struct fg_run_stats, in their order on the wire: counts
 * that add up, the tiers' peaks, seconds.  A field added to the struct is
 * added here (test_wire checks that every one travels). */
enum { SUMS = 24, PEAKS = 3, SECONDS = 4 };
struct stat_fields {
	uint64_t *sum[SUMS], *peak[PEAKS];
	double *s[SECONDS];
};

static void stat_fields(struct fg_run_stats *st, struct stat_fields *f)
{
	size_t i = 0;

	f->sum[i++] = &st->requests;
	f->sum[i++] = &st->failed;
	f->sum[i++] = &st->batches;
	f->sum[i++] = &st->runs;
	f->sum[i++] = &st->retried_batches;
	f->sum[i++] = &st->prompt_tokens;
	f->sum[i++] = &st->generated_tokens;
	f->sum[i++] = &st->positions;
	f->sum[i++] = &st->useful_positions;
	f->sum[i++] = &st->dead_positions;
	f->sum[i++] = &st->padding_positions;
	f->sum[i++] = &st->joined;
	f->sum[i++] = &st->shared_positions;
	f->sum[i++] = &st->weight_bytes;
	f->sum[i++] = &st->cache_bytes;
	f->sum[i++] = &st->hidden_bytes;
	for (int t = 0; t < 3; t++)
		f->sum[i++] = &st->read_bytes[t];
	for (int t = 0; t < 3; t++)
		f->sum[i++] = &st->written_bytes[t];
	f->sum[i++] = &st->cache_skipped_bytes;
	f->sum[i++] = &st->disk_read_bytes;
	for (int t = 0; t < PEAKS; t++)
		f->peak[t] = &st->peak_bytes[t];
	f->s[0] = &st->run_setup_s;
	f->s[1] = &st->compute_s;
	f->s[2] = &st->logits_s;
	f->s[3] = &st->callback_s;
}

int fg_wire_put_stats(struct fg_wire *w, const struct fg_run_stats *s)
{
	struct fg_run_stats st = *s;
	struct stat_fields f;

	stat_fields(&st, &f);
	put(w, TAG_STATS, 1);
	for (int i = 0; i < SUMS; i++)
		put(w, *f.sum[i], 8);
	for (int i = 0; i < PEAKS; i++)
		put(w, *f.peak[i], 8);
	for (int i = 0; i < SECONDS; i++) {
		uint64_t u;

		memcpy(&u, f.s[i], sizeof(u));
		put(w, u, 8);
	}
	return w->oom ? -ENOMEM : 0;
}

void fg_run_stats_add(struct fg_run_stats *dst, const struct fg_run_stats *src)
{
	struct fg_run_stats s = *src;
	struct stat_fields d, a;

	stat_fields(dst, &d);
	stat_fields(&s, &a);
	for (int i = 0; i < SUMS; i++)
		*d.sum[i] += *a.sum[i];
	for (int i = 0; i < PEAKS; i++)
		if (*a.peak[i] > *d.peak[i])
			*d.peak[i] = *a.peak[i];
	for (int i = 0; i < SECONDS; i++)
		*d.s[i] += *a.s[i];
}

/* ---- reading ---------------------------------------------------------- */

static int bad(size_t at, const char *fmt, ...) FG_PRINTF(2, 3);

static int bad(size_t at, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	FG_ERR("replica message: %s at byte %zu", why, at);
	return -EPROTO;
}

static void *alloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		FG_ERR("out of memory reading a replica message");
	return p;
}

/* The next n (> 0) bytes. */
static int take(struct fg_wire_reader *rd, size_t n, const unsigned char **p, const char *what)
{
	if (rd->at > rd->len || n > rd->len - rd->at)
		return bad(rd->at, "%s cut short (%zu bytes wanted, %zu left)", what, n,
			   rd->at > rd->len ? 0 : rd->len - rd->at);
	*p = rd->p + rd->at;
	rd->at += n;
	return 0;
}

static uint64_t from_le(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

static int get(struct fg_wire_reader *rd, int bytes, uint64_t *v, const char *what)
{
	const unsigned char *p = NULL;
	int rc = take(rd, (size_t)bytes, &p, what);

	if (!rc)
		*v = from_le(p, bytes);
	return rc;
}

/* 32 bits as two's complement (without an out-of-range conversion). */
static int32_t s32(uint64_t u)
{
	return u < 0x80000000u ? (int32_t)u : (int32_t)(u - 0x80000000u) + INT32_MIN;
}

static int get_int(struct fg_wire_reader *rd, int *v, const char *what)
{
	uint64_t u;
	int rc = get(rd, 4, &u, what);

	if (!rc)
		*v = s32(u);
	return rc;
}

static int get_float(struct fg_wire_reader *rd, float *f, const char *what)
{
	uint64_t u;
	int rc = get(rd, 4, &u, what);

	if (!rc) {
		uint32_t b = (uint32_t)u;

		memcpy(f, &b, sizeof(b));
	}
	return rc;
}

static int get_size(struct fg_wire_reader *rd, size_t *v, const char *what)
{
	size_t at = rd->at;
	uint64_t u;
	int rc = get(rd, 8, &u, what);

	if (rc)
		return rc;
#if SIZE_MAX < UINT64_MAX
	if (u > SIZE_MAX)
		return bad(at, "%s %llu too large", what, (unsigned long long)u);
#endif
	(void)at;
	*v = (size_t)u;
	return 0;
}

/* An array's or a string's count, at least size bytes an element; *want:
 * the count it must have when present (want NULL: any). */
static int get_count(struct fg_wire_reader *rd, size_t size, const size_t *want, int *present,
		     size_t *n, const char *what)
{
	size_t at = rd->at;
	uint64_t c;
	int rc = get(rd, 8, &c, what);

	*present = 0;
	*n = 0;
	if (rc)
		return rc;
	if (c && c - 1 > (rd->len - rd->at) / size)
		return bad(at, "%s: a count of %llu, more than the %zu bytes left hold", what,
			   (unsigned long long)(c - 1), rd->len - rd->at);
	if (c && want && c - 1 != *want)
		return bad(at, "%s: %llu entries where the result has %zu", what,
			   (unsigned long long)(c - 1), *want);
	*present = c != 0;
	*n = c ? (size_t)(c - 1) : 0;
	return 0;
}

/* An array of n elements of size bytes: *out allocated (NULL when the
 * sender's was), *p its bytes on the wire (NULL when none). */
static int get_array(struct fg_wire_reader *rd, size_t size, const size_t *want, void **out,
		     size_t *n, const unsigned char **p, const char *what)
{
	int present, rc = get_count(rd, size, want, &present, n, what);

	*out = NULL;
	*p = NULL;
	if (rc || !present)
		return rc;
	if (*n)
		take(rd, *n * size, p, what); /* get_count saw them */
	if (!(*out = alloc(*n, size)))
		return -ENOMEM;
	return 0;
}

static int get_ids(struct fg_wire_reader *rd, int32_t **out, size_t *n, const size_t *want,
		   const char *what)
{
	const unsigned char *p;
	void *a;
	int rc = get_array(rd, 4, want, &a, n, &p, what);

	*out = a;
	for (size_t i = 0; !rc && p && i < *n; i++)
		(*out)[i] = s32(from_le(p + 4 * i, 4));
	return rc;
}

static void float_from(float *f, const unsigned char *p)
{
	uint32_t b = (uint32_t)from_le(p, 4);

	memcpy(f, &b, sizeof(b));
}

static int get_floats(struct fg_wire_reader *rd, float **out, const size_t *want,
		      const char *what)
{
	const unsigned char *p;
	void *a;
	size_t n;
	int rc = get_array(rd, 4, want, &a, &n, &p, what);

	*out = a;
	for (size_t i = 0; !rc && p && i < n; i++)
		float_from(&(*out)[i], p + 4 * i);
	return rc;
}

static int get_tops(struct fg_wire_reader *rd, struct fg_logprob **out, const size_t *want,
		    const char *what)
{
	const unsigned char *p;
	void *a;
	size_t n;
	int rc = get_array(rd, 8, want, &a, &n, &p, what);

	*out = a;
	for (size_t i = 0; !rc && p && i < n; i++) {
		(*out)[i].id = s32(from_le(p + 8 * i, 4));
		float_from(&(*out)[i].logprob, p + 8 * i + 4);
	}
	return rc;
}

/* A string: its bytes (none of them NUL) then a NUL of ours. */
static int get_str(struct fg_wire_reader *rd, char **out, const char *what)
{
	size_t n, at;
	int present, rc = get_count(rd, 1, NULL, &present, &n, what);
	const unsigned char *p = NULL, *nul;

	*out = NULL;
	if (rc || !present)
		return rc;
	at = rd->at;
	if (n)
		take(rd, n, &p, what); /* get_count saw them */
	if (n && (nul = memchr(p, 0, n)))
		return bad(at + (size_t)(nul - p), "%s holds a NUL byte", what);
	if (!(*out = alloc(n + 1, 1)))
		return -ENOMEM;
	if (n)
		memcpy(*out, p, n);
	return 0;
}

static int get_tag(struct fg_wire_reader *rd, int tag, const char *kind)
{
	size_t at = rd->at;
	uint64_t b;
	int rc = get(rd, 1, &b, kind);

	if (!rc && b != (uint64_t)tag)
		return bad(at, "not a %s (its first byte is 0x%02x)", kind, (unsigned)b);
	return rc;
}

int fg_wire_get_u64(struct fg_wire_reader *rd, uint64_t *v)
{
	return get(rd, 8, v, "a number");
}

void fg_wire_request_free(struct fg_request *r)
{
	free((void *)r->prompt);
	free((void *)r->prompt_ids);
	free((void *)r->stop_ids);
	for (size_t i = 0; r->stop && i < r->n_stop; i++)
		free((void *)r->stop[i]);
	free((void *)r->stop);
	memset(r, 0, sizeof(*r));
}

static int read_request(struct fg_wire_reader *rd, struct fg_request *r, int *streams)
{
	size_t at, n;
	uint64_t flag;
	int32_t *ids;
	char *s, **stop;
	int present, rc;

	if ((rc = get_tag(rd, TAG_REQUEST, "request")) ||
	    (rc = get_str(rd, &s, "request prompt")))
		return rc;
	r->prompt = s;
	if ((rc = get_ids(rd, &ids, &r->n_prompt_ids, NULL, "request prompt_ids")))
		return rc;
	r->prompt_ids = ids;
	if ((rc = get_int(rd, &r->max_new_tokens, "request max_new_tokens")) ||
	    (rc = get_float(rd, &r->temperature, "request temperature")) ||
	    (rc = get_int(rd, &r->top_k, "request top_k")) ||
	    (rc = get_float(rd, &r->top_p, "request top_p")) ||
	    (rc = get(rd, 8, &r->seed, "request seed")))
		return rc;
	if ((rc = get_ids(rd, &ids, &r->n_stop_ids, NULL, "request stop_ids")))
		return rc;
	r->stop_ids = ids;
	/* each stop string takes its count's 8 bytes at least */
	if ((rc = get_count(rd, 8, NULL, &present, &n, "request stop")))
		return rc;
	if (present) {
		if (!(stop = alloc(n, sizeof(*stop))))
			return -ENOMEM;
		r->stop = (const char *const *)stop;
		r->n_stop = n;
		for (size_t i = 0; i < n; i++)
			if ((rc = get_str(rd, &stop[i], "request stop string")))
				return rc;
	}
	if ((rc = get_int(rd, &r->logprobs, "request logprobs")) ||
	    (rc = get_int(rd, &r->score_prompt, "request score_prompt")) ||
	    (rc = get_int(rd, &r->top_logprobs, "request top_logprobs")))
		return rc;
	at = rd->at;
	if ((rc = get(rd, 1, &flag, "request on_token")))
		return rc;
	if (flag > 1)
		return bad(at, "request on_token flag %u (0 or 1)", (unsigned)flag);
	*streams = (int)flag;
	return get_int(rd, &r->known, "request known");
}

int fg_wire_get_request(struct fg_wire_reader *rd, struct fg_request *out, int *streams)
{
	size_t start = rd->at;
	struct fg_request r;
	int rc;

	memset(&r, 0, sizeof(r));
	*streams = 0;
	if ((rc = read_request(rd, &r, streams))) {
		fg_wire_request_free(&r);
		*streams = 0;
		rd->at = start;
	}
	*out = r;
	return rc;
}

/* n * k, or a count no array can have (more than its bytes) when that does
 * not fit. */
static size_t times(size_t n, size_t k)
{
	return k && n > SIZE_MAX / k ? SIZE_MAX : n * k;
}

static int read_result(struct fg_wire_reader *rd, struct fg_result *r)
{
	size_t at, n, k, ptop, ttop;
	uint64_t v;
	int rc;

	if ((rc = get_tag(rd, TAG_RESULT, "result")) ||
	    (rc = get_str(rd, &r->text, "result text")) ||
	    (rc = get_size(rd, &r->n_tokens, "result n_tokens")) ||
	    (rc = get_size(rd, &r->n_prompt_tokens, "result n_prompt_tokens")))
		return rc;
	at = rd->at;
	if ((rc = get(rd, 4, &v, "result finish_reason")))
		return rc;
	if (v > FG_FINISH_ERROR)
		return bad(at, "result finish_reason %llu out of range", (unsigned long long)v);
	r->finish_reason = (enum fg_finish_reason)v;
	if ((rc = get_str(rd, &r->error, "result error")) ||
	    (rc = get_int(rd, &r->refused, "result refused")))
		return rc;
	at = rd->at;
	if ((rc = get(rd, 4, &v, "result top_logprobs")))
		return rc;
	if (v > FG_TOP_LOGPROBS_MAX)
		return bad(at, "result top_logprobs %d outside [0, %d]", (int)s32(v),
			   FG_TOP_LOGPROBS_MAX);
	k = (size_t)v;
	ptop = times(r->n_prompt_tokens, k);
	ttop = times(r->n_tokens, k);
	if ((rc = get_ids(rd, &r->token_ids, &n, &r->n_tokens, "result token_ids")) ||
	    (rc = get_ids(rd, &r->prompt_ids, &n, &r->n_prompt_tokens, "result prompt_ids")) ||
	    (rc = get_floats(rd, &r->prompt_logprobs, &r->n_prompt_tokens,
			     "result prompt_logprobs")) ||
	    (rc = get_tops(rd, &r->prompt_top, &ptop, "result prompt_top")) ||
	    (rc = get_floats(rd, &r->token_logprobs, &r->n_tokens, "result token_logprobs")) ||
	    (rc = get_tops(rd, &r->token_top, &ttop, "result token_top")))
		return rc;
	return 0;
}

int fg_wire_get_result(struct fg_wire_reader *rd, struct fg_result *out)
{
	size_t start = rd->at;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = read_result(rd, out))) {
		fg_result_clear(out);
		rd->at = start;
	}
	return rc;
}

int fg_wire_get_stats(struct fg_wire_reader *rd, struct fg_run_stats *out)
{
	size_t start = rd->at;
	struct fg_run_stats st;
	struct stat_fields f;
	uint64_t u;
	int rc;

	memset(&st, 0, sizeof(st));
	stat_fields(&st, &f);
	rc = get_tag(rd, TAG_STATS, "run counts");
	for (int i = 0; !rc && i < SUMS; i++)
		rc = get(rd, 8, f.sum[i], "run counts");
	for (int i = 0; !rc && i < PEAKS; i++)
		rc = get(rd, 8, f.peak[i], "run counts");
	for (int i = 0; !rc && i < SECONDS; i++)
		if (!(rc = get(rd, 8, &u, "run counts")))
			memcpy(f.s[i], &u, sizeof(u));
	if (rc) {
		memset(&st, 0, sizeof(st));
		rd->at = start;
	}
	*out = st;
	return rc;
}
