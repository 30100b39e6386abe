/* core/exec/forward_int.h - the state of a run, shared by the files that
 * make up the forward pass:
 *   buffers.c        allocate and free what the memory plan sizes;
 *   schedule.c       the block schedule: its loop, its slots and its waits;
 *   weight_slots.c   staging a unit's weights, the bodies' views of them;
 *   kv_cache.c       the KV cache's byte layout, its moves, `attend`;
 *   host_attention.c attention delegated to the host (cpu_cache_compute);
 *   prefix.c         shared prompt prefixes: a prefill in steps;
 *   join.c           rows joining a running batch (continuous batching);
 *   logits.c         logits and greedy tokens out of the compute tier. */
#ifndef FG_EXEC_FORWARD_INT_H
#define FG_EXEC_FORWARD_INT_H

#include <pthread.h>

#include "core/arch/block.h"
#include "core/exec/devtime.h"
#include "core/exec/forward.h"
#include "core/exec/mover.h"
#include "core/exec/pipe.h"
#include "core/plan/plan.h"

#define SLOTS FG_PLAN_SLOTS

struct gpu_batch {
	int32_t *pad;
	enum fg_role hidden_role;
	struct fg_region hidden_home;      /* [bs * prompt_len, hidden] on hidden_role's tier */
	struct fg_region *cache[FG_ROLES]; /* per layer: K then V of this role's sequences */
};

/* The host's side of the read-out: one GPU batch's logits and positions,
 * one region of the host tier. */
struct fg_read_out {
	struct fg_region scratch;
	int32_t *pos;
	void *logits;  /* bs rows of logits in the activation type */
	float *argmax; /* bs rows of float logits for the host's argmax */
};

/* Device timing: the step's marks on the compute stream, reused. */
struct fg_dev_marks {
	void **timer;
	enum fg_dev_phase *phase;
	int n, cap;
};

/* Decode steps' finished rows (fg_forward_set_live_rows). */
struct fg_row_mask {
	unsigned char *row_live; /* rows to compute (NULL: all) */
	unsigned char *live;     /* GPU batches with a row to compute (in row_live's block) */
	int32_t *attn_pad;       /* each row's pad, a finished row's at len */
};

/* The step's token ids, for staging a token table's rows. */
struct fg_step_ids {
	const int32_t *ids;      /* NULL: not this stage's */
	int64_t n;
	unsigned char *seen;     /* vocab flags: rows staged this step */
};

/* Scoring prompt positions: the chunks' logits in the compute tier (rows
 * of them at a time), and their host copies where the backend has no
 * logprob op.  Made at the run's first scored prefill. */
struct fg_score_buf {
	struct fg_region dev;
	struct fg_tensor logits; /* [rows, vocab] act */
	float *host;             /* rows x vocab, or NULL */
	int64_t rows;
};

struct fg_forward {
	struct fg_forward_env env;
	struct fg_model *m;
	const struct fg_model_config *cfg;
	struct fg_backend *be, *hb;
	struct fg_tier **tier;
	struct fg_plan plan;
	struct fg_mover mv;
	void *stream;           /* the compute stream (of the item being computed) */
	/* Decode steps with host attention (policy.host_overlap): GPU batches
	 * on two compute streams in turn, so that the host attends to one while
	 * the device computes the other (schedule.c, host_attention.c). */
	struct fg_two_streams {
		int on;                 /* this step */
		int cur;                /* the stream of the item being computed */
		void *stream[2];        /* [0]: mv.compute_stream */
		void *ev[2];            /* each stream's mark, for the other to wait for */
		struct fg_region scratch;       /* the second stream's workspaces */
		struct fg_tensor ws[FG_WS_MAX], logits;
		pthread_mutex_t lock;   /* one host attention at a time (the host's pool) */
		int lock_made;
		int rc;                 /* the first host attention's failure, */
		char err[256];          /* and its message (its thread's) */
	} two;
	enum fg_dtype act, cdt; /* activations; KV cache (act, Q4_COLS or F8_COLS) */
	enum fg_dtype hid;      /* the residual stream (hidden states) */
	unsigned asz;
	int64_t bs, nb, plen, total, step;
	int64_t cols;           /* cache columns a row: total, or a ring of the window's
				 * length (fg_plan_cache_cols); position t at column t % cols
				 * once the positions pass them */
	int64_t cap_plen;       /* the prompt length the buffers hold (fg_forward_reuse) */
	int64_t kvw;            /* K (or V) row width: kv_heads * head_dim */
	struct gpu_batch *gb;
	int64_t nunits, *ufirst, *ucount;
	int nslots;
	struct fg_region wslot[SLOTS], wbounce[SLOTS], cslot[SLOTS], cbounce[SLOTS];
	struct fg_region hslot[SLOTS], hbounce[SLOTS];
	struct fg_xfer wload[SLOTS], cload[SLOTS], cstore[SLOTS], hload, hstore[SLOTS];
	void *wdone[SLOTS], *cdone[SLOTS]; /* compute finished reading the slot */
	void *hloaded;                     /* an activation reload's copies are done */
	struct fg_region hstage;           /* host staging of delegated attention */
	struct fg_region scratch;
	struct fg_tensor ws[FG_WS_MAX];    /* the family's workspaces */
	struct fg_wview *views;            /* a block's tensors as the bodies see them
					    * (as many as the largest block has) */
	struct fg_tensor logits;           /* the "logits" workspace */
	struct fg_read_out out;
	int xfer_ready;
	/* the item being computed (for attend) */
	int64_t cur_k;
	int cur_slot;
	struct fg_dev_marks dt;
	struct fg_pipe_run *pipe;       /* a pipeline stage's transfers (NULL: one process) */
	int64_t ngroups;                /* micro-batches: groups of GPU batches */
	struct fg_row_mask mask;
	int64_t filled;                 /* rows holding a sequence (fg_forward_set_filled_rows; 0: all) */
	int prefill_masked;             /* this prefill leaves the rows after `filled` out */
	const struct fg_row_sampling *sampling; /* top drawn by the backend (NULL: argmax) */
	struct fg_step_ids in;
	int graphing;                   /* the step's ops are being recorded as a graph */
	int graph_piece;                /* which piece of the step (0: its first) */
	const struct fg_prompt_scores *score;  /* set during a scored prefill */
	struct fg_score_buf sbuf;
	const struct fg_token_scores *tok_scores; /* next tokens' log-probabilities */
	const struct fg_prefix_share *share; /* the next prefill's shared prefixes */
	int sharing;                    /* this step takes shared prefixes' cache (prefix.c): */
	const int32_t *share_src;       /* each row's source, */
	int64_t share_end;              /* up to this column */
	int32_t *chunk_pad;             /* bs pads of one query position (fg_attend_chunk) */
	int joining;                    /* this step computes joining rows' prompts (join.c): */
	int32_t *join_pad;              /* each row's pad within the step's columns (n: none) */
	int join_dense;                 /* the joining rows gathered at each GPU batch's first: */
	int32_t *join_row;              /* the step's row i of a GPU batch is its row join_row[i], */
	const unsigned char *join_on;   /* whose cache (by its own rows) is the step's */
	struct fg_forward_stats stats;
};

static inline struct fg_tensor fg_view(void *addr, enum fg_dtype dt, int64_t rows, int64_t cols)
{
	return (struct fg_tensor){ .data = addr, .dtype = dt, .rows = rows, .cols = cols, .ld = cols };
}

/* Does this step leave finished rows out (fg_forward_set_live_rows)?  Decode
 * steps and joins, a prefill of a partly filled batch of one process
 * (fg_forward_set_filled_rows), a prefill's steps with shared prefixes.  A
 * pipeline's stages hold the same masks: rank 0's commands carry them. */
static inline int fg_rows_masked(const struct fg_forward *f)
{
	return f->mask.row_live && (f->step > 0 || f->prefill_masked);
}

/* Is row s of GPU batch k left out of this step? */
static inline int fg_row_dead(const struct fg_forward *f, int64_t k, int64_t s)
{
	return fg_rows_masked(f) && !f->mask.row_live[k * f->bs + s];
}

/* Is the cache of row s of GPU batch k left alone this step?  Its row's
 * mask, but in a join that gathers its rows, whether the row joins. */
static inline int fg_cache_dead(const struct fg_forward *f, int64_t k, int64_t s)
{
	if (f->joining && f->join_dense)
		return !f->join_on[k * f->bs + s];
	return fg_row_dead(f, k, s);
}

/* Bytes of one GPU batch's hidden states for n tokens a row. */
static inline size_t fg_hidden_len(const struct fg_forward *f, int64_t n)
{
	return (size_t)(f->bs * n * f->cfg->hidden) * fg_dtype_size(f->hid);
}

/* How many of the cnt sequences from `first` on lie within the first `rows`. */
static inline int64_t fg_rows_within(int64_t first, int64_t cnt, int64_t rows)
{
	int64_t n = rows - first;
	return n <= 0 ? 0 : n < cnt ? n : cnt;
}

/* The rows of GPU batch k this step computes at all: up to its last live
 * one (the finished rows after it cost nothing, not even their products). */
static inline int64_t fg_rows_computed(const struct fg_forward *f, int64_t k)
{
	int64_t n = f->bs;
	while (n > 0 && fg_row_dead(f, k, n - 1))
		n--;
	return n;
}

/* host_attention.c: does the staging hold two decode steps' (one for each
 * stream of fg_two_streams)? */
int fg_host_stage_halves(const struct fg_forward *f);

/* schedule.c: one step of n tokens a row from column f->step on. */
int fg_step(struct fg_forward *f, const int32_t *ids, int64_t n, float *logits, int32_t *top);
/* Does the next step run GPU batch k: one with a row to compute, or the
 * first of a micro-batch with none (it computes nothing)?  A pipeline's
 * transfers are those of the batches run. */
int fg_step_runs(const struct fg_forward *f, int64_t k);
/* The row mask's arrays (every row live at first); -ENOMEM. */
int fg_mask_alloc(struct fg_forward *f);

/* buffers.c: the family's workspaces as views for f->plen tokens a row. */
int fg_workspace_views(struct fg_forward *f);

/* prefix.c: a prefill in steps, f->share's rows taking their shared
 * prefixes' cache from batch mates. */
int fg_prefill_shared(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top);

/* weight_slots.c */
int fg_unit_weights_load(struct fg_forward *f, int64_t u, int slot);
/* The block's tensors as compute-tier views in weight slot `slot`. */
void fg_block_views(const struct fg_forward *f, int64_t bi, int slot, struct fg_wview *out);

/* kv_cache.c */
uint64_t fg_kv_bytes(const struct fg_forward *f, int64_t nseq);
/* Where positions [p0, p0 + n) lie in the cache's columns: up to two runs
 * {first column, count}, the second from column 0 where the positions wrap
 * past the cache's columns (fg_forward_wraps, a window's ring); their
 * number.  More positions than columns: only the last f->cols of them are
 * kept, and *skip (when not NULL) says how many come first; with skip NULL
 * (moves, where any order will do) that is one run of every column. */
int64_t fg_kv_columns(const struct fg_forward *f, int64_t p0, int64_t n, int64_t seg[2][2],
		      int64_t *skip);
/* Append n new K (or V) rows of each of sequences [s, s + seqs) of a cache
 * c (all its sequences, as fg_kv_views gives them) on backend be, from
 * position f->step on; src holds seqs * n rows. */
int fg_kv_append_cols(struct fg_forward *f, struct fg_backend *be, void *stream, int64_t layer,
		      const char *what, struct fg_tensor src, struct fg_tensor c, int64_t s,
		      int64_t seqs, int64_t n);
void fg_kv_views(const struct fg_forward *f, void *base, int64_t nseq, struct fg_tensor *k,
		 struct fg_tensor *v);
/* Move rows [r0, r0 + nr) of every slot-held sequence of layer l of GPU
 * batch b between its home and cache slot `slot` (a finished row's are not
 * moved: stats.cache_skipped). */
int fg_kv_move(struct fg_forward *f, struct fg_xfer *x, int load, int64_t b, int64_t l, int slot,
	       int64_t r0, int64_t nr);
/* The pads the attention of the item being computed sees: x->pad, with a
 * finished row's at len (it attends to no position: zeros). */
const int32_t *fg_kv_attend_pad(const struct fg_forward *f, const struct fg_block_ctx *x);
/* Attention of n new tokens a row over the cache (a decode step's when n
 * is 1): d is the decode op's arguments for the last token (len, pad) with
 * q and out holding batch * n rows; query i of a row sees up to column
 * len - n + i.  The backend's prefill over the cache (compute ABI 1.8), else
 * one decode op per token. */
int fg_attend_chunk(struct fg_forward *f, struct fg_backend *be, void *stream, int64_t layer,
		    const char *what, const struct fg_attention_args *d, int64_t n);
/* Shared prefixes: the first `rows` rows of GPU batch kb that take their
 * cache from a batch mate this step (f->share_src, up to f->share_end) get
 * it, layer l, before the step's appends, wherever either row's cache is. */
int fg_kv_share(struct fg_forward *f, int64_t kb, int64_t l, int64_t rows);
/* The bodies' `attend`. */
int fg_kv_attend(struct fg_block_ctx *x, struct fg_tensor q, struct fg_tensor k,
		 struct fg_tensor v, struct fg_tensor out);

/* host_attention.c: the host-cache sequences of GPU batch k, layer l, n new tokens. */
int fg_host_attention(struct fg_forward *f, const struct fg_block_ctx *x, struct fg_tensor q,
		      struct fg_tensor k, struct fg_tensor v, struct fg_tensor out);

/* pipeline.c: a stage's side of the block schedule (f->pipe set). */
struct fg_pipe_run;
/* Rank 0: tell the other stages to make a run of this shape. */
int fg_pipe_announce_new(const struct fg_forward_env *env, int64_t prompt_len, int64_t gen_len);
int fg_pipe_run_new(struct fg_forward *f);
void fg_pipe_run_free(struct fg_forward *f);
/* Rank 0: tell the other stages what this step computes (before any transfer). */
int fg_pipe_step_command(struct fg_forward *f, const int32_t *pad, int want_logits, int want_top);
/* Rank 0: tell them that the rows join[r] join with n prompt columns, pads pad. */
int fg_pipe_join_command(struct fg_forward *f, const unsigned char *join, const int32_t *pad,
			 int64_t n, int want_logits, int want_top);
/* Every stage, once a run is made: what all of them allow a join
 * (fg_join_own_caps ANDed over the stages); then fg_pipe_join_caps. */
void fg_pipe_agree_join_caps(struct fg_forward *f);
unsigned fg_pipe_join_caps(const struct fg_forward *f);
/* Post the step's receives (activations from the previous stage; on rank 0,
 * the last stage's results into logits/top). */
void fg_pipe_step_begin(struct fg_forward *f, int64_t n, float *logits, int32_t *top);
/* The previous stage's activations of GPU batch k into h (first unit). */
void fg_pipe_recv_hidden(struct fg_forward *f, int64_t k, void *h, size_t len);
/* h of GPU batch k to the next stage (last unit). */
void fg_pipe_send_hidden(struct fg_forward *f, int64_t k, const void *h, size_t len);
/* The last stage: GPU batch k's results to rank 0. */
void fg_pipe_send_results(struct fg_forward *f, int64_t k);
/* Wait for the step's transfers (and, on rank 0, the results). */
void fg_pipe_step_end(struct fg_forward *f);
/* The stage's result buffers (last stage, not rank 0): logits, top. */
void fg_pipe_results(struct fg_forward *f, float **logits, int32_t **top);
/* A step failed on this stage: one line naming it, then every rank stops. */
void fg_pipe_fatal(struct fg_forward *f);
/* Is this stage the first / last one? */
int fg_pipe_has_prev(const struct fg_forward *f);
int fg_pipe_has_next(const struct fg_forward *f);

/* join.c: what this stage's run allows a join (a pipeline's stages agree). */
enum { FG_JOIN_DENSE = 1, FG_JOIN_RING = 2 };
unsigned fg_join_own_caps(const struct fg_forward *f);

/* logits.c */
/* The first `rows` sequences' logits and/or greedy tokens of the GPU batch
 * just computed (the rows after them were not computed: finished). */
int fg_logits_out(struct fg_forward *f, int64_t row0, int64_t rows, float *logits, int32_t *top);
/* The scoring buffers (made at the first scored prefill), freed with the run. */
void fg_logits_free(struct fg_forward *f);
/* A scored prefill: GPU batch k's prompt positions f->score asks for, in
 * chunks of rows through the output body `body`, then log-probabilities. */
int fg_logits_score(struct fg_forward *f, struct fg_block_ctx *x, int64_t k,
		    int (*body)(struct fg_block_ctx *x));

#endif
