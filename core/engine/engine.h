/* core/engine/engine.h - what an open engine holds (struct fg_engine). */
#ifndef FG_ENGINE_ENGINE_H
#define FG_ENGINE_ENGINE_H

#include <stdint.h>

#include <fgcore/fgcore.h>

#include "core/backend/backend.h"
#include "core/exec/forward.h"
#include "core/exec/model.h"
#include "core/plan/policy.h"
#include "core/tier/tier.h"
#include "core/tokenizer/tokenizer.h"

struct fg_dist;
struct fg_replicas;

struct fg_engine {
	struct fg_policy policy;
	struct fg_dist *world;       /* the job's ranks (mpirun); NULL: one process */
	struct fg_dist *dist;        /* world, when this replica is a pipeline of stages; else NULL */
	struct fg_replicas *replicas; /* rank 0 of a job of replicas: the others' state */
	void (*replicas_close)(struct fg_engine *e); /* (the request layer's, at close) */
	struct fg_backend be;        /* computes on the compute tier */
	struct fg_backend host_be;   /* cpu_cache_compute with a device compute tier */
	struct fg_tier tiers[FG_ROLES];
	struct fg_tier *tier[FG_ROLES]; /* NULL where not opened */
	struct fg_tier_budget host_mem; /* the host-memory tiers' one RAM */
	struct fg_codec wcodec;      /* compress_weight's (weight_codec) */
	struct fg_model model;
	struct fg_tokenizer *tok;    /* NULL when the model has no tokenizer files */
	char tok_error[512];         /* why tok is NULL */
	int32_t text_bos;            /* the id a text prompt starts with; -1: none */
	double load_s;               /* seconds spent loading weights */
	double end_chance;           /* [bench] end_chance: a new token ends its request */
	struct fg_run_stats stats;   /* what the request layer ran (fg_engine_stats) */
	/* A run kept between fg_run calls (fg_run_opts.keep_run); NULL: none. */
	struct fg_forward *kept;
};

/* A role's index in the public per-tier arrays (fg_model_info.tier_plugin,
 * fg_run_stats' per-tier counts), which run compute, host, disk. */
static inline int fg_public_tier(enum fg_role r)
{
	return FG_ROLES - 1 - (int)r;
}

/* worker.c: a pipeline's later stage follows its stage 0's runs until it
 * closes its engine (fg_engine_follow, core/request/replicas.c, calls it). */
int fg_engine_follow_stage(struct fg_engine *e);

/* The forward-pass environment of this engine, for `nb` GPU batches. */
void fg_engine_forward_env(struct fg_engine *e, int64_t nb, struct fg_forward_env *env);

#endif
