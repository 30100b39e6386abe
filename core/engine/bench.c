/* core/engine/bench.c - FlexGen's benchmark: synthetic prompts, greedy
 * decoding, the first step timed as prefill and the rest as decode;
 * total throughput = generated tokens / (prefill + decode time). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/bench.h"
#include "core/engine/engine.h"
#include "core/sampling/sample.h"
#include "core/arch/arch.h"
#include "core/util/clock.h"
#include "core/util/error.h"

static void reset_peaks(struct fg_engine *e)
{
	for (int r = 0; r < FG_ROLES; r++)
		if (e->tier[r]) {
			pthread_mutex_lock(&e->tier[r]->lock);
			e->tier[r]->peak = e->tier[r]->used;
			pthread_mutex_unlock(&e->tier[r]->lock);
		}
}

/* FlexGen's projection from a cut run: the first two decode steps as
 * measured, the mean of the later ones for every remaining step. */
static double project(const double *cost, int64_t steps, int64_t gen_len)
{
	double sum = 0, rest = 0;
	int64_t warm = steps < 3 ? steps : 2;
	for (int64_t i = 0; i < warm; i++)
		sum += cost[i];
	for (int64_t i = warm; i < steps; i++)
		rest += cost[i];
	double mean = steps > warm ? rest / (double)(steps - warm) : sum / (double)warm;
	return sum + mean * (double)(gen_len - 1 - warm);
}

/* Rows whose logits said nothing (argmax -1) get an ordinary id, so the
 * next step can run; how many. */
static int64_t feedable(int32_t *next, int64_t rows)
{
	int64_t n = 0;

	for (int64_t r = 0; r < rows; r++)
		if (next[r] < 0) {
			next[r] = 4;
			n++;
		}
	return n;
}

/* One generation of `gen` tokens (of which `run` are computed) after `plen`
 * synthetic prompt tokens. */
static int bench_once(struct fg_engine *e, int64_t plen, int64_t gen, int64_t run,
		      int device_timing, struct fg_bench_result *r)
{
	const struct fg_model_config *c = &e->model.cfg;
	int64_t bs = e->policy.gpu_batch_size, nb = e->policy.num_gpu_batches, rows = bs * nb;
	struct fg_forward_env env;
	struct fg_forward *f = NULL;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)(rows * plen));
	int32_t *pad = calloc((size_t)rows, sizeof(int32_t));
	int32_t *next = malloc(sizeof(int32_t) * (size_t)rows);
	double *cost = malloc(sizeof(double) * (size_t)(run + 1));
	struct fg_rng rng;
	int64_t nan_rows = 0;
	int rc;

	if (!ids || !pad || !next || !cost) {
		FG_ERR("bench: out of host memory for a batch of %lld x %lld tokens", (long long)rows,
		       (long long)plen);
		rc = -ENOMEM;
		goto out;
	}
	/* Deterministic prompts of ordinary token ids (no padding: every position counts). */
	fg_rng_seed(&rng, 42);
	for (int64_t i = 0; i < rows * plen; i++)
		ids[i] = 4 + (int32_t)(fg_rng_uniform(&rng) * (double)(c->vocab - 4));
	fg_engine_forward_env(e, nb, &env);
	env.device_timing = device_timing;
	if ((rc = fg_forward_new(&f, &env, plen, gen)))
		goto out;
	uint64_t placed[FG_ROLES];
	fg_forward_bytes(f, placed);
	for (int i = 0; i < FG_ROLES; i++)
		r->placed[i] = e->model.bytes[i] + placed[i];
	double t0 = fg_now();
	/* Greedy decoding, as FlexGen's benchmark does. */
	if ((rc = fg_forward_prefill(f, ids, pad, NULL, next)))
		goto out;
	nan_rows += feedable(next, rows);
	double t1 = fg_now();
	for (int64_t t = 1; t < run; t++) {
		double ts = fg_now();
		if ((rc = fg_forward_decode(f, next, NULL, next)))
			goto out;
		cost[t - 1] = fg_now() - ts;
		nan_rows += feedable(next, rows);
	}
	if (nan_rows)
		FG_LOG(FG_LOG_WARN, "bench: %lld rows' logits had no number above -inf (the weights "
		       "overflow the activation type?): fed id 4 instead; the timing stands",
		       (long long)nan_rows);
	r->prefill_s = t1 - t0;
	r->decode_s = run < gen ? project(cost, run - 1, gen) : fg_now() - t1;
	r->projected = run < gen;
	r->stats = *fg_forward_stats(f);
out:
	fg_forward_free(f);
	free(ids);
	free(pad);
	free(next);
	free(cost);
	return rc;
}

int fg_bench_run(struct fg_engine *e, const struct fg_bench_params *p, struct fg_bench_result *r)
{
	const struct fg_model_config *c = &e->model.cfg;
	int64_t rows = e->policy.gpu_batch_size * e->policy.num_gpu_batches;
	int64_t seq = p->prompt_len + p->gen_len;
	int64_t run = p->cut_gen_len > 0 && p->cut_gen_len < p->gen_len ? p->cut_gen_len : p->gen_len;
	int rc;

	memset(r, 0, sizeof(*r));
	if (p->cut_gen_len > 0 && p->cut_gen_len < 4 && p->cut_gen_len < p->gen_len) {
		FG_ERR("cut_gen_len %lld: at least 4 tokens are needed to project the decode time",
		       (long long)p->cut_gen_len);
		return -EINVAL;
	}
	/* The measured run must fit before anything runs: a warm-up of a batch
	 * the tiers then refuse costs its whole time and memory for nothing.
	 * (The warm-up's shorter prompt and single token need less than this.) */
	struct fg_forward_env env;
	fg_engine_forward_env(e, e->policy.num_gpu_batches, &env);
	if ((rc = fg_forward_check(&env, p->prompt_len, p->gen_len)))
		return rc;
	if (p->warmup) {
		int64_t wp = p->prompt_len < 32 ? p->prompt_len : 32;
		if ((rc = bench_once(e, wp, 1, 1, 0, r)))
			return rc;
	}
	reset_peaks(e); /* the measured run's peaks, not the warm-up's */
	if ((rc = bench_once(e, p->prompt_len, p->gen_len, run, p->device_timing, r)))
		return rc;
	r->batch = rows;
	r->model_bytes = fg_model_param_count(c) * 2;
	/* FlexGen's fp16 figure, over the key/value width (grouped-query heads) */
	r->cache_bytes = 2 * (uint64_t)(rows * seq * c->layers * fg_dim_value(c, FG_DIM_KV)) * 2;
	r->hidden_bytes = (uint64_t)(rows * seq * c->hidden) * 2;
	for (int i = 0; i < FG_ROLES; i++)
		if (e->tier[i]) {
			r->peak[i] = e->tier[i]->peak;
			r->capacity[i] = e->tier[i]->capacity;
		}
	r->prefill_tps = (double)(rows * p->prompt_len) / r->prefill_s;
	r->decode_tps = p->gen_len > 1 ? (double)(rows * (p->gen_len - 1)) / r->decode_s : 0;
	r->total_tps = (double)(rows * p->gen_len) / (r->prefill_s + r->decode_s);
	return 0;
}
