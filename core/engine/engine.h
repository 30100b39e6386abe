/* core/engine/engine.h - what an open engine holds (struct fg_engine). */
#ifndef FG_ENGINE_ENGINE_H
#define FG_ENGINE_ENGINE_H

#include <stdint.h>

#include "core/backend/backend.h"
#include "core/engine/forward.h"
#include "core/engine/model.h"
#include "core/plan/policy.h"
#include "core/tier/tier.h"
#include "core/tokenizer/tokenizer.h"

struct fg_dist;

struct fg_engine {
	struct fg_policy policy;
	struct fg_dist *dist;        /* a pipeline stage's transport; NULL: one process */
	struct fg_backend be;        /* computes on the compute tier */
	struct fg_backend host_be;   /* cpu_cache_compute with a device compute tier */
	struct fg_tier tiers[FG_ROLES];
	struct fg_tier *tier[FG_ROLES]; /* NULL where not opened */
	struct fg_tier_budget host_mem; /* the host-memory tiers' one RAM */
	struct fg_codec q4;          /* compress_weight */
	struct fg_model model;
	struct fg_tokenizer *tok;    /* NULL when the model has no tokenizer files */
	char tok_error[512];         /* why tok is NULL */
	double load_s;               /* seconds spent loading weights */
	uint64_t positions;          /* token positions fg_generate computed (fg_engine_positions) */
	uint64_t dead_positions;     /* of them, finished rows of running GPU batches */
	uint64_t cache_bytes;        /* KV cache bytes moved between tiers */
	uint64_t cache_skipped;      /* and not moved, being finished rows' */
};

/* The forward-pass environment of this engine, for `nb` GPU batches. */
void fg_engine_forward_env(struct fg_engine *e, int64_t nb, struct fg_forward_env *env);

#endif
