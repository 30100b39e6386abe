/* core/optimizer/layout.h - the bytes a policy makes the engine allocate on
 * each tier, computed without allocating anything.
 *
 * It mirrors fg_model_load (the placement of every weight block) and
 * fg_forward_new (workspace, weight slots, KV cache, activations, bounce
 * buffers) allocation for allocation, so the cost model's memory prediction
 * is the engine's accounting, not an estimate.  tests/test_optimizer.c checks
 * it against a real engine.  fg_forward_new can take its sizes from
 * fg_run_layout() so that the two can never drift apart. */
#ifndef FG_OPTIMIZER_LAYOUT_H
#define FG_OPTIMIZER_LAYOUT_H

#include <stdint.h>

#include "core/engine/model.h"
#include "core/engine/policy.h"
#include "core/model/opt_config.h"

#define FG_LAYOUT_SLOTS 2 /* forward.c's double buffers */

/* How the compute tier and backend look to the executor. */
struct fg_layout_env {
	unsigned act_bytes; /* the backend's activation size: 2 (f16) or 4 (f32) */
	int device;         /* compute-tier memory is not host memory (bounce buffers) */
};

/* Block kinds as fg_model_load builds them; every layer's blocks are alike. */
enum { FG_LAYOUT_INPUT, FG_LAYOUT_ATTN, FG_LAYOUT_MLP, FG_LAYOUT_OUTPUT, FG_LAYOUT_KINDS };

/* Bytes of one block of each kind on each tier, as fg_model_load places them
 * (per-tensor pieces aligned to 64 bytes, per-tier block regions to 4096). */
void fg_layout_blocks(const struct fg_opt_config *c, const struct fg_policy *p,
		      uint64_t bytes[FG_LAYOUT_KINDS][FG_ROLES]);

/* Everything fg_forward_new allocates, by buffer. */
struct fg_run_layout {
	int64_t ccount[FG_ROLES];     /* sequences of each GPU batch by cache tier */
	int64_t acount[FG_ROLES];     /* GPU batches by activation tier */
	int64_t n_off;                /* sequences held in the KV cache slots */
	int delegate;                 /* host attention for host-cache sequences */
	int nslots;                   /* weight slots: 2 with overlap */
	uint64_t scratch;             /* compute: x, q, k, v, a, ffn, logits */
	uint64_t hidden;              /* one GPU batch's activations (hsz) */
	uint64_t wslot, wbounce;      /* each weight slot (compute) / its bounce (host) */
	uint64_t cslot, cbounce;      /* each KV cache slot (compute) / bounce (host) */
	uint64_t hslot, hbounce;      /* each activation slot (compute) / bounce (host) */
	uint64_t hstage;              /* host staging of delegated attention */
	uint64_t cache[FG_ROLES];     /* one layer's K and V of one GPU batch, per tier */
	uint64_t run[FG_ROLES];       /* total of the above per tier: fg_forward_bytes() */
};

/* The run buffers of a policy over a model whose blocks are placed as
 * `blocks` says; 0, or -EINVAL for sizes the engine would refuse. */
int fg_run_layout(const struct fg_opt_config *c, const struct fg_policy *p,
		  const struct fg_layout_env *env, const uint64_t blocks[FG_LAYOUT_KINDS][FG_ROLES],
		  int64_t prompt_len, int64_t gen_len, struct fg_run_layout *out);

/* Model weights plus run buffers per tier: what bench reports as `placed`. */
struct fg_layout_total {
	uint64_t weights[FG_ROLES];
	uint64_t total[FG_ROLES];
	struct fg_run_layout run;
};

int fg_layout_total(const struct fg_opt_config *c, const struct fg_policy *p,
		    const struct fg_layout_env *env, int64_t prompt_len, int64_t gen_len,
		    struct fg_layout_total *out);

/* Bytes of one KV cache tensor (K or V) of nseq sequences of `total` positions. */
uint64_t fg_layout_kv_bytes(int64_t nseq, int64_t total, int64_t hidden, unsigned act_bytes,
			    int compress);

#endif
