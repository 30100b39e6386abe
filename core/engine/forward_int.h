/* core/engine/forward_int.h - the state of a run, shared by the files that
 * make up the forward pass:
 *   buffers.c        allocate and free what the memory plan sizes;
 *   schedule.c       the block schedule: its loop, its slots and its waits;
 *   weight_slots.c   staging a unit's weights, the bodies' views of them;
 *   kv_cache.c       the KV cache's byte layout, its moves, `attend`;
 *   host_attention.c attention delegated to the host (cpu_cache_compute);
 *   logits.c         logits and greedy tokens out of the compute tier. */
#ifndef FG_ENGINE_FORWARD_INT_H
#define FG_ENGINE_FORWARD_INT_H

#include "core/arch/block.h"
#include "core/engine/devtime.h"
#include "core/engine/forward.h"
#include "core/engine/mover.h"
#include "core/plan/plan.h"

#define SLOTS FG_PLAN_SLOTS

struct gpu_batch {
	int32_t *pad;
	enum fg_role hidden_role;
	struct fg_region hidden_home;      /* [bs * prompt_len, hidden] on hidden_role's tier */
	struct fg_region *cache[FG_ROLES]; /* per layer: K then V of this role's sequences */
};

struct fg_forward {
	struct fg_forward_env env;
	struct fg_model *m;
	const struct fg_model_config *cfg;
	struct fg_backend *be, *hb;
	struct fg_tier **tier;
	struct fg_plan plan;
	struct fg_mover mv;
	void *stream;           /* the compute stream */
	enum fg_dtype act, cdt; /* activations; KV cache (act or Q4_COLS) */
	unsigned asz;
	int64_t bs, nb, plen, total, step;
	int64_t kvw;            /* K (or V) row width: kv_heads * head_dim */
	struct gpu_batch *gb;
	int64_t nunits, *ufirst, *ucount;
	int nslots;
	struct fg_region wslot[SLOTS], wbounce[SLOTS], cslot[SLOTS], cbounce[SLOTS];
	struct fg_region hslot[SLOTS], hbounce[SLOTS];
	struct fg_xfer wload[SLOTS], cload[SLOTS], cstore[SLOTS], hload, hstore[SLOTS];
	void *wdone[SLOTS], *cdone[SLOTS]; /* compute finished reading the slot */
	struct fg_region hstage;           /* host staging of delegated attention */
	struct fg_region scratch;
	struct fg_tensor ws[FG_WS_MAX];    /* the family's workspaces */
	struct fg_tensor logits;           /* the "logits" workspace */
	struct fg_region host_scratch; /* host tier: the three below */
	int32_t *pos;
	void *host_logits;  /* bs rows of logits in the activation type */
	float *host_argmax; /* bs rows of float logits for the host's argmax */
	int xfer_ready;
	/* the item being computed (for attend) */
	int64_t cur_k;
	int cur_slot;
	void **dt_timer;        /* device timing: the step's marks, reused */
	enum fg_dev_phase *dt_phase;
	int dt_n, dt_cap;
	fg_position_logits_fn score_fn; /* set during a scored prefill */
	void *score_arg;
	struct fg_forward_stats stats;
};

static inline struct fg_tensor fg_view(void *addr, enum fg_dtype dt, int64_t rows, int64_t cols)
{
	return (struct fg_tensor){ .data = addr, .dtype = dt, .rows = rows, .cols = cols, .ld = cols };
}

/* weight_slots.c */
int fg_unit_weights_load(struct fg_forward *f, int64_t u, int slot);
/* The block's tensors as compute-tier views in weight slot `slot`. */
void fg_block_views(const struct fg_forward *f, int64_t bi, int slot, struct fg_wview *out);

/* kv_cache.c */
uint64_t fg_kv_bytes(const struct fg_forward *f, int64_t nseq);
void fg_kv_views(const struct fg_forward *f, void *base, int64_t nseq, struct fg_tensor *k,
		 struct fg_tensor *v);
/* Move rows [r0, r0 + nr) of every slot-held sequence of layer l of GPU
 * batch b between its home and cache slot `slot`. */
int fg_kv_move(struct fg_forward *f, struct fg_xfer *x, int load, int64_t b, int64_t l, int slot,
	       int64_t r0, int64_t nr);
/* The bodies' `attend`. */
int fg_kv_attend(struct fg_block_ctx *x, struct fg_tensor q, struct fg_tensor k,
		 struct fg_tensor v, struct fg_tensor out);

/* host_attention.c: the host-cache sequences of GPU batch k, layer l, n new tokens. */
int fg_host_attention(struct fg_forward *f, const struct fg_block_ctx *x, struct fg_tensor q,
		      struct fg_tensor k, struct fg_tensor v, struct fg_tensor out);

/* logits.c */
int fg_logits_out(struct fg_forward *f, float *logits, int32_t *top);
/* A scored prefill: every earlier prompt position's logits of GPU batch k
 * through the output body `body`, to f->score_fn. */
int fg_logits_score(struct fg_forward *f, struct fg_block_ctx *x, int64_t k,
		    int (*body)(struct fg_block_ctx *x));

#endif
