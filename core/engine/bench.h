/* core/engine/bench.h - FlexGen's throughput benchmark on an open engine. */
#ifndef FG_ENGINE_BENCH_H
#define FG_ENGINE_BENCH_H

#include <stdint.h>

#include "core/exec/forward.h"
#include "core/plan/policy.h"

struct fg_engine;

struct fg_bench_params {
	int64_t prompt_len, gen_len;
	int64_t cut_gen_len; /* > 0: run this many tokens and project the rest, as FlexGen does */
	int warmup;          /* one run with prompt 32 and one new token first, as FlexGen does */
	int device_timing;   /* stats.dev_s of the measured run */
};

struct fg_bench_result {
	int64_t batch;                      /* gpu_batch_size x num_gpu_batches */
	uint64_t model_bytes, cache_bytes, hidden_bytes; /* FlexGen's fp16 sizes */
	uint64_t peak[FG_ROLES];            /* per tier, during the measured run */
	uint64_t capacity[FG_ROLES];
	uint64_t placed[FG_ROLES];          /* weights + run buffers as placed (the prediction) */
	double prefill_s, decode_s;
	double prefill_tps, decode_tps, total_tps;
	struct fg_forward_stats stats;      /* where the time went */
	int projected;                      /* decode time projected from cut_gen_len steps */
};

int fg_bench_run(struct fg_engine *e, const struct fg_bench_params *p, struct fg_bench_result *r);

#endif
