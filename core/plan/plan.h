/* core/plan/plan.h - the memory plan: every byte a run holds, per tier.
 *
 * Computed once per run from the family's tensor table, the policy and the
 * batch shape, without allocating anything: where each weight (or row range
 * of one) lives and at which offset of its block's region, and the size of
 * every run buffer — workspaces, weight slots, the KV cache of each tier,
 * activations, cache and activation slots, bounce buffers, host staging.  The
 * engine allocates exactly this (core/exec/model.c, core/exec/buffers.c);
 * the cost model, the optimizer and `bench --predict` price exactly this. */
#ifndef FG_PLAN_PLAN_H
#define FG_PLAN_PLAN_H

#include <stdint.h>

#include "core/arch/arch.h"
#include "core/plan/policy.h"

#define FG_PLAN_SLOTS 2         /* double buffers of the schedule (with overlap) */

/* Rows [row0, row0 + rows) of a tensor, stored on one tier. */
struct fg_plan_piece {
	enum fg_role role;
	uint64_t offset; /* in the block's region on that tier */
	int64_t row0, rows;
	uint64_t bytes;
};

struct fg_plan_tensor {
	const struct fg_tensor_def *def;
	int64_t expert;      /* the expert whose tensor it is (FG_TD_EXPERTS), else -1 */
	int present;         /* 0: an optional tensor this config does not have (no pieces) */
	int64_t rows, cols;
	enum fg_dtype dtype; /* F16, or Q4_ROWS for compressed linear weights */
	int npieces;
	struct fg_plan_piece piece[FG_ROLES];
	/* gathered: a split tensor assembled whole in the weight slot, at `gather`
	 * bytes into the block's staged area, so its products have the shape of
	 * an unsplit run (a GPU's GEMMs round differently by shape). */
	int gathered;
	uint64_t gather;
	/* by_rows: the input block's token table on the host tier, staged whole
	 * (at `gather`, as a gathered tensor) but filled only with the rows of
	 * the step's token ids when they are few (a decode step's). */
	int by_rows;
};

/* A block's tensors placed by the policy's weight shares: FlexGen's rule puts
 * a whole tensor on the tier whose cumulative share holds its midpoint;
 * `placement = exact` splits linear weights by rows so the byte shares match.
 * Every layer's blocks of a kind are placed alike.  This is the block's
 * summary, the same size whatever the model: its tensors (a mixture's MLP
 * block has one per expert and matrix, hundreds) are an array of their own,
 * filled only for whoever reads them (fg_plan_block's `t`): the engine, once
 * a run; the cost model prices placements by these bytes alone. */
struct fg_plan_block {
	enum fg_block_kind kind;
	int64_t ntensors;         /* its tensors: fg_plan_block_tensors */
	uint64_t bytes[FG_ROLES]; /* the block's region on each tier */
	/* Staged in a weight slot: the first bulk[host] bytes of the host region,
	 * then the first bulk[disk] of the disk region (the tensors kept whole),
	 * then each gathered tensor. */
	uint64_t bulk[FG_ROLES];
	uint64_t staged;          /* the slot bytes all that takes */
};

/* Does a step of `ids` token ids stage only their rows of a by_rows table
 * of `rows` rows (few ids), rather than the whole table? */
static inline int fg_plan_rows_staged(double ids, double rows)
{
	return ids * 16 <= rows;
}

/* The tensors of the blocks of a kind (fg_tensor_list_block's list). */
int64_t fg_plan_block_tensors(const struct fg_model_config *c, enum fg_block_kind kind);
/* Place the blocks of a kind: the summary into *out and, unless t is NULL,
 * each tensor into t[0 .. fg_plan_block_tensors) in the list's order.
 * gather: split tensors are assembled whole in the slot (a device compute
 * tier: core/exec/weight_slots.c); their pieces follow the unsplit
 * tensors' in each region. */
void fg_plan_block(const struct fg_model_config *c, const struct fg_policy *p,
		   enum fg_block_kind kind, int gather, struct fg_plan_block *out,
		   struct fg_plan_tensor *t);
/* Where piece k of a gathered tensor goes in the whole one: n (1 or 2)
 * ranges of len[i] bytes from src[i] in the piece to at[i] in the whole.
 * 4-bit and fp8 rows are two ranges, codes and group parameters (row
 * scales), which the whole tensor keeps apart; 4-bit pieces start at a
 * group boundary. */
int fg_plan_gather_ranges(const struct fg_plan_tensor *t, int k, uint64_t src[2], uint64_t at[2],
			  uint64_t len[2]);
/* Bytes of rows of a tensor in its encoding. */
uint64_t fg_plan_tensor_bytes(const struct fg_plan_tensor *t, int64_t rows);

/* The linear weights' dtype under p: fp16, or compress_weight's codec's. */
enum fg_dtype fg_plan_weight_dtype(const struct fg_policy *p);

/* The KV cache's dtype under p: the activations' (act), or compress_cache's
 * codec's (Q4_COLS, F8_COLS). */
enum fg_dtype fg_plan_cache_dtype(const struct fg_policy *p, enum fg_dtype act);

/* The codec plugin that encodes weights of dtype t (NULL for fp16). */
const char *fg_plan_weight_codec(enum fg_dtype t);

/* How the compute tier and backend look to the run. */
struct fg_plan_env {
	unsigned act_bytes; /* the backend's activation size: 2 (f16) or 4 (f32) */
	int device;         /* compute-tier memory is not host memory (bounce buffers) */
	unsigned hidden_bytes; /* the residual stream's element size; 0: act_bytes */
	int no_window;      /* the backend cannot apply a sliding window (compute ABI < 1.11) */
	/* The run may keep a windowed model's cache as a ring of the window's
	 * length: one process (not a pipeline stage), and the backends that
	 * decode over it run a ring as short as the window (compute ABI 1.12). */
	int window_ring;
};

struct fg_plan {
	struct fg_plan_block block[FG_BLOCK_KINDS];
	uint64_t weights[FG_ROLES];   /* every block's regions */
	int64_t bs, nb, prompt_len, positions; /* positions = prompt_len + gen_len */
	int64_t cols;                 /* cache columns a sequence: positions, or a ring
				       * of the window's length (fg_plan_cache_cols) */
	int64_t cfirst[FG_ROLES], ccount[FG_ROLES]; /* a GPU batch's sequences by cache tier */
	int64_t afirst[FG_ROLES], acount[FG_ROLES]; /* GPU batches by activation tier */
	int64_t n_off;                /* sequences held in the KV cache slots */
	int delegate;                 /* host-cache sequences attend on the host */
	int nslots;                   /* weight slots: 2 with overlap */
	int nws;                      /* the family's workspaces ... */
	uint64_t ws_offset[FG_WS_MAX];/* ... at these offsets of the scratch region */
	uint64_t scratch;             /* compute: the workspaces */
	uint64_t scratch_alt;         /* compute: a decode step's workspaces again, for
				       * GPU batches on a second stream (host attention) */
	uint64_t hidden;              /* one GPU batch's activations */
	uint64_t stage[FG_BLOCK_KINDS]; /* offset of a block's weights in its unit's slot */
	uint64_t wslot, wbounce;      /* each weight slot (compute) / its bounce (host) */
	uint64_t kv_slot;             /* one K (or V) of the slot-held sequences */
	uint64_t cslot, cbounce;      /* each KV cache slot (compute) / bounce (host) */
	uint64_t hslot, hbounce;      /* each activation slot (compute) / bounce (host) */
	uint64_t hstage;              /* host staging of delegated attention */
	uint64_t host_scratch;        /* host: the logits' host copies and positions ... */
	uint64_t hs_logits, hs_pos;   /* ... at these offsets (host argmax floats at 0) */
	uint64_t kv[FG_ROLES];        /* one K (or V) of a GPU batch's sequences on a tier */
	uint64_t cache[FG_ROLES];     /* one layer's K and V of one GPU batch, per tier */
	uint64_t run[FG_ROLES];       /* run buffers per tier (fg_forward_bytes) */
	uint64_t total[FG_ROLES];     /* weights + run */
};

/* The plan of a run; 0, or -EINVAL (with a line) for sizes the engine
 * refuses.  Does not check capacities: fg_plan_fits does. */
int fg_plan_make(const struct fg_model_config *c, const struct fg_policy *p,
		 const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
		 struct fg_plan *out);

/* The sliding window of every layer of c (0: some layer has none, or no
 * window).  Only then can the cache be one ring a row: its layout gives all
 * layers one length, so a model that mixes windowed and full layers (Qwen2
 * with max_window_layers, Gemma 2) keeps every position. */
int64_t fg_plan_ring_window(const struct fg_model_config *c);

/* A sequence's cache columns in a run of `total` positions: the window's,
 * as a ring, where the model, the backends and the policy allow (env's
 * window_ring, [policy] window_ring, no shared prompt prefixes, whose
 * prefill steps attend over the cache many tokens at a time), else total.
 * Decode appends one token and reads the last `window` positions, so a
 * ring of `window` rows holds all it reads; a prefill attends over its
 * fresh K/V and keeps the last `window` of them; joining prompts too. */
int64_t fg_plan_cache_cols(const struct fg_model_config *c, const struct fg_policy *p,
			   const struct fg_plan_env *env, int64_t total);

/* Bytes of one K (or V) tensor of nseq sequences of `total` positions in
 * the cache's dtype cdt (plain elements of act_bytes, Q4_COLS or F8_COLS). */
uint64_t fg_plan_kv_bytes(const struct fg_model_config *c, int64_t nseq, int64_t total,
			  unsigned act_bytes, enum fg_dtype cdt);

/* Would the run buffers fit `avail[r]` free bytes on each tier (UINT64_MAX:
 * unbounded)?  0, or -ENOSPC with a line naming the tier, the bytes asked
 * and the largest gpu_batch_size that would fit. */
int fg_plan_fits(const struct fg_model_config *c, const struct fg_policy *p,
		 const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
		 const uint64_t avail[FG_ROLES], const char *const names[FG_ROLES]);

/* Would the run buffers on the tiers of `mask` (bit 1 << role), which share
 * one memory named `group`, fit its `avail` free bytes together?  0, or
 * -ENOSPC with one line naming the tiers, the bytes asked of each and the
 * largest gpu_batch_size that would fit. */
int fg_plan_fits_shared(const struct fg_model_config *c, const struct fg_policy *p,
			const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
			unsigned mask, uint64_t avail, const char *group);

#endif
