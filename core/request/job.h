/* core/request/job.h - one request's state inside the request layer, shared
 * by its three files:
 *   prepare.c  a request read once (tokens, the bos rule, checks) and its
 *              result made at the end;
 *   batch.c    one effective batch through a run of the forward pass;
 *   run.c      many requests: buckets, batches, retries, accounting. */
#ifndef FG_REQUEST_JOB_H
#define FG_REQUEST_JOB_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/fgcore.h>
#include "core/sampling/sample.h"

struct fg_engine;
struct fg_forward;

struct fg_job {
	size_t index;          /* position in the caller's array */
	double queued_at;      /* fg_now() when the request layer took it */
	const struct fg_request *req;
	int32_t *prompt;
	size_t n_prompt;
	int32_t *out;          /* generated ids */
	size_t n_out;
	struct fg_rng rng;
	int done;
	int streamed;          /* on_token was called: the request cannot be rerun */
	int handed;            /* its result went out */
	int idle;              /* no request: a free row for arriving ones (run.c) */
	enum fg_finish_reason why;
	size_t cut;            /* stop string: bytes of text to keep; SIZE_MAX: none */
	long nan_at;           /* FG_FINISH_ERROR: the position whose logits held no number
				* (>= 0: a prompt token's, < 0: new token -nan_at - 1) */
	float *plp, *tlp;      /* log-probabilities of the prompt's, the completion's tokens */
	struct fg_logprob *ptop, *ttop; /* and the top_logprobs most likely at each */
};

/* prepare.c: read j->req (j->index and j->req set): its prompt's tokens and
 * the arrays its result needs.  Fails with the request's own error line. */
int fg_job_prepare(struct fg_engine *e, struct fg_job *j);
/* Back to the state fg_job_prepare left (for a rerun). */
void fg_job_rewind(struct fg_job *j);
/* The job fails: the logits at `at` (job.h's nan_at) held no number. */
void fg_job_fail_nan(struct fg_job *j, long at);
/* The job's result (its arrays move to res; a failed job's, its error). */
int fg_job_finish(struct fg_engine *e, struct fg_job *j, struct fg_result *res);
void fg_job_free(struct fg_job *j);
/* Emit tok for a live job; lp and its top (top_logprobs entries) are its
 * log-probabilities, read when the job asks for them.  tok -1 (logits with
 * no number above -inf, fgcore/sampling.h) fails the job. */
void fg_job_accept(struct fg_engine *e, struct fg_job *j, int32_t tok, float lp,
		   const int32_t *top_id, const float *top_lp);
/* Does the job draw its next token (the others take the argmax)? */
static inline int fg_job_samples(const struct fg_job *j)
{
	return !j->done && j->req->temperature > 0;
}

/* batch.c: a run of the forward pass kept across batches of one shape. */
struct fg_batch_run {
	struct fg_forward *f;
	int64_t hint_plen, hint_glen; /* the largest prompt and budget still to come */
	const volatile sig_atomic_t *abandon; /* fg_run_opts.abandon: checked between steps */
	/* Continuous batching ([policy] refill): the jobs waiting after the
	 * batch's, in order; a finished row takes the next one that can join
	 * (swapped into jobs[], the finished job into wait[]: `taken` of them
	 * joined), and the finished job's result goes out at once. */
	struct fg_job **wait;
	size_t n_wait, taken;
	void (*finished)(void *arg, struct fg_job *j);
	/* Requests arriving meanwhile (fg_run_opts.more): appended to wait[]
	 * (n_wait grows); 0 when none came.  NULL: a fixed list. */
	int (*top_up)(void *arg);
	double wait_s; /* fg_run_opts.more_wait_ms */
	double join_end, join_took; /* the last join step's end and seconds (fg_now) */
	void *arg;
	/* Set: the batch takes no more waiting jobs, it ends (a stop). */
	const volatile sig_atomic_t *stop;
	const int *halt;
	/* Called between decode steps (a job of replicas: rank 0 serves the
	 * others while it runs a batch of its own); NULL: none. */
	void (*poll)(void *arg);
	void *poll_arg;
};
/* Run jobs[0..count) (count <= the effective batch) as one batch, through
 * *run (made, reused or remade to fit).  The batch is sized to the jobs: the
 * GPU batches gpu_batch_size needs, each as small as the jobs allow.
 * -ECANCELED: run->abandon was set between two decode steps. */
int fg_batch_run(struct fg_engine *e, struct fg_batch_run *run, struct fg_job **jobs,
		 size_t count);
void fg_batch_run_end(struct fg_engine *e, struct fg_batch_run *run);

/* run.c: a piece of a job of replicas (core/request/replicas.h), run by
 * the replica it was given to: fg_run's (or with fail_fast fg_generate's)
 * rule, poll called between decode steps, the run sized at least for the
 * hinted prompt and budget (those still to come in the whole job). */
struct fg_piece_hooks {
	void (*poll)(void *arg);
	void *arg;
	int64_t hint_plen, hint_glen;
};
long fg_run_piece(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		  const struct fg_run_opts *o, int fail_fast, const struct fg_piece_hooks *h);

/* share.c: shared prompt prefixes ([policy] share_prefix).  The order of
 * two prompts' tokens at their first difference (a walk of their trie); 0
 * when one begins the other. */
int fg_share_token_order(const struct fg_job *x, const struct fg_job *y);
/* Order a GPU
 * batch's n jobs in groups that begin alike for `least` tokens or more
 * (runs in token order), and subgroups alike for `least` more: rank 0 for
 * the groups' leaders (their longest prompts) and jobs of no group, 1 for
 * the other subgroups' leaders, 2 for the rest, in that order. */
void fg_share_group(struct fg_job **jobs, size_t n, int64_t least, unsigned char *rank);
/* A batch's jobs (grouped as above, left-padded to plen) and the arrays
 * that choosing its sharing uses: src (rows entries a level, filled), from
 * and end (count entries a level, scratch). */
struct fg_share_plan {
	struct fg_job **jobs;
	int64_t count, rows, bs, plen, least;
	const int32_t *pad;
	const unsigned char *rank;
	int32_t *src[2], *from[2];
	int64_t *end[2];
};
struct fg_prefix_share;
/* The sharing that computes the fewest positions, in sh (its src pointing
 * into sp's): up to two levels; 0 levels when none saves any. */
int fg_share_plan(struct fg_share_plan *sp, struct fg_prefix_share *sh);

#endif
