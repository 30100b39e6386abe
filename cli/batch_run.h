/* cli/batch_run.h - many requests through fg_generate one effective batch at a
 * time, so that a stop request is seen between batches, a failing batch
 * costs only the requests that fail, and each batch's results can be kept
 * (journaled) as soon as it ends. */
#ifndef FG_CLI_BATCH_RUN_H
#define FG_CLI_BATCH_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/fgcore.h>

/* What the batches cost, in token positions (rows x positions) the forward
 * pass computed, against those that were a request's own: the rest is
 * padding (shorter prompts left-padded to the longest, rows beyond the
 * requests) and dead rows (finished sequences waiting for their GPU batch
 * mates).  A dead row costs less than a padded one: only its rows of the
 * matrix products (and norms, cache appends) are computed, not its
 * attention nor its cache traffic (fg_forward_set_live_rows). */
struct fg_batch_stats {
	uint64_t computed;   /* positions computed: prefill rows x prompt length + decode rows x steps */
	uint64_t useful;     /* of them, real prompt tokens and generated tokens */
	uint64_t dead;       /* of them, dead rows of decode steps */
	uint64_t generated;  /* completion tokens */
	uint64_t batches;    /* fg_generate calls */
};

/* Called after each batch with the indices (into reqs) it finished; a
 * non-zero return stops the run after this batch. */
typedef int (*fg_batch_done_fn)(void *arg, const size_t *idx, size_t n);

struct fg_batch_opts {
	const volatile sig_atomic_t *stop; /* read before each batch (NULL: never) */
	int input_order;       /* 1: batches in request order (no length buckets) */
	struct fg_batch_stats *stats;      /* added to (NULL: none) */
	fg_batch_done_fn done_fn;          /* NULL: none */
	void *done_arg;
};

/* Run n requests into res (input order), in the engine's effective batches of
 * gpu_batch_size x num_gpu_batches requests.  Length buckets: requests are
 * grouped by prompt length (within ~1/8) and then max_new_tokens, so that a
 * batch's rows pad little and end together.  A batch that fails as a whole
 * is run again one request at a time, so a request the engine cannot run gets
 * its own FG_FINISH_ERROR result and the others their results.  done[i]
 * becomes 1 for every request with a result (a completion or an error).
 * Returns the number done, or -ENOMEM (nothing done). */
long fg_cli_run_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			struct fg_result *res, unsigned char *done, const struct fg_batch_opts *o);

/* The same, with length buckets, no stats and no callback. */
long fg_cli_generate_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			     struct fg_result *res, unsigned char *done,
			     const volatile sig_atomic_t *stop);

#endif
