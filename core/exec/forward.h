/* core/exec/forward.h - the forward pass of any family over an effective
 * batch of num_gpu_batches x gpu_batch_size left-padded sequences, in
 * FlexGen's block schedule (core/exec/schedule.c), with every buffer the
 * memory plan sizes (core/exec/buffers.c). */
#ifndef FG_EXEC_FORWARD_H
#define FG_EXEC_FORWARD_H

#include <stdint.h>

#include "core/backend/backend.h"
#include "core/exec/model.h"
#include "core/plan/plan.h"
#include "core/plan/policy.h"

struct fg_forward;

/* Seconds spent per kind of work (wall time of the issuing thread). */
struct fg_forward_stats {
	double compute_s;      /* issuing and finishing ops */
	double wait_weight_s;  /* waiting for weights to arrive */
	double wait_cache_s;   /* waiting for KV cache loads and stores */
	double wait_hidden_s;  /* waiting for activations */
	double host_attn_s;    /* attention delegated to the host (cpu_cache_compute) */
	double host_attn_wait_s; /* of it: waiting for the device to hand over q, k, v */
	double host_append_s;  /* of it: appending the new rows to the host cache */
	double logits_s;       /* copying logits out */
	double wait_stage_s;   /* pipeline: waiting for other stages (activations, results) */
	uint64_t weight_bytes, cache_bytes, hidden_bytes; /* moved between tiers */
	uint64_t positions;    /* token positions computed (rows x tokens, padding included;
				* a GPU batch's rows up to its last live one) */
	uint64_t dead_positions; /* of them, finished rows before a live one (their
				  * matrix-product rows only: fg_forward_set_live_rows) */
	uint64_t cache_skipped;  /* KV cache bytes of finished rows not moved */
	uint64_t disk_read_bytes; /* read from the disk tier */
	uint64_t loaded[FG_ROLES], stored[FG_ROLES]; /* bytes moved from / to each role's tier */
	double disk_busy_s;      /* some disk request in flight (until reaped) */
	uint64_t graph_steps;    /* decode steps launched as graphs (compute ABI 1.5) */
	uint64_t shared_positions; /* prompt positions not computed: their K/V cache was
				    * taken from a GPU batch mate (fg_forward_set_shared_prefix) */
	/* With device_timing: the compute stream's time by phase (devtime.h:
	 * compute, wait weights, cache, activations, host attention, logits). */
	double dev_s[6];
};

struct fg_dist;

struct fg_forward_env {
	struct fg_model *model;
	struct fg_dist *dist;       /* a pipeline stage's transport (NULL: one process) */
	struct fg_backend *be;      /* computes on the compute tier */
	struct fg_backend *host_be; /* attention on the host (cpu_cache_compute); may be be */
	struct fg_policy policy;
	int device_timing;          /* stats.dev_s: the device's time by phase */
};

int fg_forward_new(struct fg_forward **out, const struct fg_forward_env *env,
		   int64_t prompt_len, int64_t gen_len);
void fg_forward_free(struct fg_forward *f);
/* Make the run ready for a new batch of nb GPU batches of bs rows, the
 * run's own shape, with prompt_len <= the run's and prompt_len + gen_len <=
 * its positions: the plan, buffers and slots are kept (the next call is a
 * prefill).  -EAGAIN, with no error line, when the batch does not fit (or
 * in a pipeline of stages): free the run and make a new one. */
int fg_forward_reuse(struct fg_forward *f, int64_t nb, int64_t bs, int64_t prompt_len,
		     int64_t gen_len);
/* What fg_forward_new checks before it allocates anything: 0 when the run's
 * buffers fit the tiers' free room, or its -EINVAL / -ENOSPC and line. */
int fg_forward_check(const struct fg_forward_env *env, int64_t prompt_len, int64_t gen_len);

/* ids: nb*bs rows of prompt_len token ids, left-padded; pad: left pad count of
 * each row.  Writes the next-token logits of every row to logits [nb*bs, vocab]
 * and/or (when top is not NULL) each row's most likely next token to top[nb*bs]. */
int fg_forward_prefill(struct fg_forward *f, const int32_t *ids, const int32_t *pad,
		       float *logits, int32_t *top);
/* A scored prefill: what each prompt position's logits say of the token
 * after it, taken where the logits are (the backend's logprob op, else on
 * the host from copies), a chunk of positions at a time.  Arrays of
 * nb * bs * prompt_len entries (times k for the tops), position p of row r
 * at r * prompt_len + p (padding included); written where target >= 0, as
 * fgcore/logprob.h defines the values. */
struct fg_prompt_scores {
	const int32_t *target; /* the id position p is scored on (the prompt's
				* token p + 1), or -1: not scored */
	int k;                 /* most likely ids per scored position, <= FG_LOGPROB_TOP_MAX */
	float *lp;
	int32_t *top_id;       /* NULL when k is 0 */
	float *top_lp;
};
/* The prefill above that also scores the prompt positions s names. */
int fg_forward_prefill_scored(struct fg_forward *f, const int32_t *ids, const int32_t *pad,
			      float *logits, int32_t *top, const struct fg_prompt_scores *s);
/* One decode step: ids holds the new token of every row; outputs as above. */
int fg_forward_decode(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top);

const struct fg_forward_stats *fg_forward_stats(const struct fg_forward *f);

/* Before decode steps: row_live[r] 0 (nb * bs entries; row r is row r % bs
 * of GPU batch r / bs) says row r has finished.  Its KV cache is no longer
 * loaded into or stored from the cache slot and its attention sees no
 * position (the op gets pad = len: zeros), so what scales with its length
 * costs nothing more; its rows of the matrix products, norms and cache
 * appends are still computed with its GPU batch.  A GPU batch with no live
 * row is left out altogether (its cache is not extended, its outputs are not
 * written).  A finished row's outputs are garbage, and it stays finished
 * (a later 1 does not revive it: its cache has gaps) until the next
 * prefill, which computes every row again; a live row's results never
 * depend on the finished ones.  In a pipeline of stages, rank 0's decode
 * commands carry the mask to the others. */
void fg_forward_set_live_rows(struct fg_forward *f, const unsigned char *row_live);
/* The rows that hold a sequence: the following prefills compute only the
 * first `rows` rows (a GPU batch after them is left out, as a finished one),
 * and the others stay finished in the decode steps after, until one joins
 * (fg_forward_join); 0: every row.  A partly filled batch costs its
 * sequences only.  A pipeline's prefill computes every row. */
void fg_forward_set_filled_rows(struct fg_forward *f, int64_t rows);

/* Continuous batching: between decode steps, each row r with join[r] takes
 * a new sequence (a finished row's place; its old cache is not read
 * again).  ids holds nb * bs rows of n token ids, left-padded: row r's
 * prompt is ids[r * n + pad[r] .. n), and it ends at the run's current
 * column, which must hold n (n <= the positions computed so far), with room
 * left for new tokens.  The joining prompts are computed in one step over
 * the last n columns, the other rows left out: a live row's cache and
 * results are untouched, and a joined row's are what it would have got
 * alone.  Outputs as fg_forward_prefill's, for the joined rows (s: their
 * prompts' scores, as fg_forward_prefill_scored's with n columns, or
 * NULL); rows drawn by the backend (fg_forward_set_sampling) take their
 * draws from its arrays, by their rows.  The joined rows are live for the
 * next decode steps.  Under every placement; in a pipeline, rank 0's join
 * makes the same join on the other stages, whose ids are NULL (stage 0
 * embeds them); s must be NULL there (-ENOTSUP). */
int fg_forward_join(struct fg_forward *f, const unsigned char *join, const int32_t *ids,
		    const int32_t *pad, int64_t n, float *logits, int32_t *top,
		    const struct fg_prompt_scores *s);
/* Do the run's columns wrap: may its steps go past its columns, as long as
 * each live row's positions fit them (the cache a ring; compute ABI 1.9)?
 * Rows then join for as long as a job lasts, not only until the columns
 * run out. */
int fg_forward_wraps(const struct fg_forward *f);
/* The run's current column (the positions computed so far), its columns,
 * and the most prompt columns its buffers hold (a join's n at most). */
void fg_forward_columns(const struct fg_forward *f, int64_t *now, int64_t *total,
			int64_t *prompt_cap);

/* Shared prompt prefixes, for the next prefill only (NULL: none).  Rows
 * whose prompts begin alike compute that beginning once, at up to
 * FG_SHARE_LEVELS levels (a few-shot header shared by a subject's questions,
 * then a question shared by its choices).  The prefill runs in levels + 1
 * steps: step k < levels computes columns [split[k - 1], split[k])
 * (split[-1] = 0) of the rows with src[k][r] == r only; the last one columns
 * [split[levels - 1], prompt_len) of every row.  Before step k > 0, each row
 * r computing it with src[k - 1][r] != r and pad[r] < split[k - 1] takes the
 * K/V cache of its columns [pad[r], split[k - 1]) from row src[k - 1][r] of
 * its GPU batch.  Rules, each level k: where src[k][r] = s != r and pad[r] <
 * split[k], s is in r's GPU batch, src[k][s] == s, pad[s] <= pad[r] and
 * their tokens are the same from each one's pad on, one past split[k] -
 * pad[r] (so that the scores of the shared positions are the source's
 * too); 0 < split[0] < split[1] < ... < prompt_len.  The prefill refuses a
 * sharing that breaks them.  A pipeline of stages runs the same steps on
 * every stage (rank 0's command carries the sharing), each GPU batch in
 * each step (one with no row there computes its first, attending to
 * nothing). */
#define FG_SHARE_LEVELS 4
struct fg_prefix_share {
	int levels;                           /* 1 .. FG_SHARE_LEVELS */
	int64_t split[FG_SHARE_LEVELS];
	const int32_t *src[FG_SHARE_LEVELS]; /* nb * bs entries each */
};
void fg_forward_set_shared_prefix(struct fg_forward *f, const struct fg_prefix_share *s);

/* How the next steps choose `top` (rows = nb * bs entries each, host
 * memory, read at every step, so the caller refills draw before each): a row
 * with temperature > 0 gets the token fgcore/sampling.h defines, drawn by
 * the backend where the logits are, the others the argmax.  NULL: argmax
 * everywhere.  -ENOTSUP where this run cannot (a backend without the sample
 * op, a pipeline of stages): the caller then samples host logits instead,
 * with the same result. */
struct fg_row_sampling {
	const float *temperature;
	const int32_t *top_k;
	const float *top_p;
	const uint64_t *draw;
};
int fg_forward_set_sampling(struct fg_forward *f, const struct fg_row_sampling *s);

/* Each next token's log-probability and top k, taken where the logits are
 * whenever the steps give `top` (nb * bs entries, times k for the tops,
 * written at each step as top is); NULL: off.  -ENOTSUP where this run
 * cannot (a backend without the logprob op, a pipeline of stages): the
 * caller then takes the logits and computes them on the host. */
struct fg_token_scores {
	int k;
	float *lp;
	int32_t *top_id;
	float *top_lp;
};
int fg_forward_set_token_scores(struct fg_forward *f, const struct fg_token_scores *s);

/* A row's KV cache columns: the run's positions, or for a model windowed on
 * every layer a ring of the window's length (fg_plan_cache_cols). */
int64_t fg_forward_cache_columns(const struct fg_forward *f);

/* Bytes this run holds per tier (cache, activations, buffers), as allocated. */
void fg_forward_bytes(const struct fg_forward *f, uint64_t bytes[FG_ROLES]);

/* Wait for every transfer in flight (end of a step, or before freeing). */
int fg_forward_drain(struct fg_forward *f);

#endif
