/* tests/test_compression.c - 4-bit weights and KV cache through the engine:
 *  - against Hugging Face's fp32 reference, within bounds derived from the
 *    int4 rounding error: prefill logits of the golden prompts, and the
 *    teacher-forced perplexity of the trained checkpoint's held-out text
 *    (decode steps: the compressed cache is read back at every step);
 *  - compressed runs agree with each other bit for bit whatever the placement;
 *  - OPT-175B with compress_weight accounts about 4.5/16 of its fp16 bytes.
 * The reference cases need FGCORE_TESTDATA: without it they are not run and
 * the program exits 77 (skip) unless something else failed.
 * FGCORE_TEST_BACKEND=cublas runs it all on the GPU (the compute tier in
 * cuda_mem) with the fp16 tolerances where the fp32 ones are stated. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include <fgcore/half.h>
#include "core/backend/backend.h"
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "core/arch/arch.h"
#include "core/plan/plan.h"
#include "tests/heldout.h"

#define ROWS 4
#define PLEN 8     /* the random checkpoints' golden prompts, and test_placements_agree's */
#define MAXPLEN 32 /* opt-py-128x4's are 25 long */
#define GEN 32
#define TINY_VOCAB 512 /* the in-tree models' (tests/reference/hf_golden.py) */

static char tmpdir[256] = "/var/tmp";
static const char *gpu_backend; /* FGCORE_TEST_BACKEND, when not cpu_blas */

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static struct fg_config *config(const char *model, const char *const *extra)
{
	struct fg_config *c;
	char kv[4400];
	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s", model);
	set(c, kv);
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmpdir);
	set(c, kv);
	set(c, "policy.gpu_batch_size=4");
	if (gpu_backend) {
		snprintf(kv, sizeof(kv), "compute.plugin=%s", gpu_backend);
		set(c, kv);
		set(c, "tier.compute.plugin=cuda_mem");
	}
	for (int i = 0; extra && extra[i]; i++)
		set(c, extra[i]);
	return c;
}

/* Prefill logits [ROWS, vocab] and GEN greedy tokens of the golden prompts;
 * with steps, every step's logits too ([GEN][ROWS][vocab], step 0 the
 * prefill's). */
static void run_golden_steps(struct fg_config *c, int plen, const int32_t *ids,
			     const int32_t *pad, float **logits, int32_t tokens[ROWS][GEN],
			     float **steps)
{
	struct fg_engine *e;
	struct fg_forward_env env;
	struct fg_forward *f;
	int32_t top[ROWS];

	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	size_t V = (size_t)e->model.cfg.vocab;
	*logits = malloc(sizeof(float) * ROWS * V);
	float *all = steps ? malloc(sizeof(float) * GEN * ROWS * V) : NULL;
	ck_assert(*logits && (all || !steps));
	fg_engine_forward_env(e, 1, &env);
	ck_assert_msg(fg_forward_new(&f, &env, plen, GEN) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_forward_prefill(f, ids, pad, *logits, top) == 0, "%s", fg_last_error_text());
	if (all)
		memcpy(all, *logits, sizeof(float) * ROWS * V);
	for (int t = 0; t < GEN; t++) {
		for (int r = 0; r < ROWS; r++)
			tokens[r][t] = top[r];
		if (t + 1 < GEN)
			ck_assert_msg(fg_forward_decode(f, top, all ? all + (size_t)(t + 1) * ROWS * V : NULL, top) == 0,
				      "%s", fg_last_error_text());
	}
	if (steps)
		*steps = all;
	fg_forward_free(f);
	fg_engine_close(e);
}

static void run_golden(struct fg_config *c, int plen, const int32_t *ids, const int32_t *pad,
		       float **logits, int32_t tokens[ROWS][GEN])
{
	run_golden_steps(c, plen, ids, pad, logits, tokens, NULL);
}

/* The golden prompts (rows of *plen ids, flat), their pads, the greedy
 * tokens and the prefill logits of the reference. */
static void load_prompts(const char *dir, int32_t *ids, int *plen, int32_t pad[ROWS],
			 int32_t greedy[ROWS][GEN], float **ref, int64_t vocab)
{
	char path[4400];
	json_error_t err;
	snprintf(path, sizeof(path), "%s/golden.json", dir);
	json_t *root = json_load_file(path, 0, &err);
	ck_assert_msg(root, "%s: %s", path, err.text);
	json_t *in = json_object_get(root, "input_ids"), *mask = json_object_get(root, "attention_mask");
	ck_assert_msg(json_array_size(in) == ROWS, "%s: not %d prompts", path, ROWS);
	*plen = (int)json_array_size(json_array_get(in, 0));
	ck_assert_msg(*plen > 0 && *plen <= MAXPLEN, "%s: prompts of %d tokens", path, *plen);
	for (int r = 0; r < ROWS; r++) {
		pad[r] = 0;
		ck_assert((int)json_array_size(json_array_get(in, r)) == *plen);
		for (int i = 0; i < *plen; i++) {
			ids[r * *plen + i] = (int32_t)json_integer_value(json_array_get(json_array_get(in, r), i));
			pad[r] += !json_integer_value(json_array_get(json_array_get(mask, r), i));
		}
		for (int t = 0; t < GEN; t++)
			greedy[r][t] = (int32_t)json_integer_value(json_array_get(
				json_array_get(json_object_get(root, "greedy_new_tokens"), r), t));
	}
	json_decref(root);
	snprintf(path, sizeof(path), "%s/golden_prefill_last_logits.f32", dir);
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	*ref = malloc(sizeof(float) * ROWS * (size_t)vocab);
	ck_assert(fread(*ref, sizeof(float), ROWS * (size_t)vocab, f) == ROWS * (size_t)vocab);
	fclose(f);
}

static const char *const modes[3][3] = {
	{ "policy.compress_weight=true", NULL },
	{ "policy.compress_cache=true", NULL },
	{ "policy.compress_weight=true", "policy.compress_cache=true", NULL },
};
static const char *const mode_names[3] = { "int4 weights", "int4 cache", "int4 weights + cache" };

/* One row of logits against a reference row: adds the squared differences
 * to *se and the reference's squared spread around its mean to *sr (the RMS
 * ratio the bounds below are stated in); returns the largest |difference|. */
static double spread_error(const float *ref, const float *got, int64_t V, double *se, double *sr)
{
	double mean = 0, worst = 0;

	for (int64_t i = 0; i < V; i++)
		mean += ref[i];
	mean /= (double)V;
	for (int64_t i = 0; i < V; i++) {
		double e = (double)got[i] - ref[i];
		worst = fmax(worst, fabs(e));
		*se += e * e;
		*sr += (ref[i] - mean) * (ref[i] - mean);
	}
	return worst;
}

/* Prefill logits against the reference.
 *
 * The bound.  int4 rounds each weight to one of 16 levels spanning its group
 * of 64 (min to max): the error is uniform within half a step, RMS
 * step / sqrt(12), step = range / 15.  64 near-Gaussian values span about
 * 4.9 sigma, so each quantized matrix carries a relative error
 * rho = 4.9 / (15 sqrt(12)) = 0.094 (0.088-0.090 measured on these three
 * checkpoints with the reference's rounding).  A linear layer passes that
 * relative error on to its output; the 6 quantized matrices of each of the L
 * layers add theirs independently, so the logits' RMS error, relative to
 * their RMS spread around each row's mean, is about sqrt(6 L) rho: 0.33 for
 * 2 layers, 0.46 for 4.  That is the bound for the trained checkpoint
 * (measured 0.10).  The random checkpoints amplify errors more (their
 * activations are small against the biases that LayerNorm rescales:
 * measured 0.16 and 0.51), so they get 1.6 times the estimate.  A codec that
 * scrambles the 4-bit values (nibbles swapped, groups along the input
 * dimension) leaves errors as large as the logits' own spread: ratio 0.93 to
 * 1.46 when tried, above every bound.  The int4 cache does not enter prefill
 * logits (attention reads the fresh keys and values; the cache is read back
 * from the first decode step, see test_heldout): the fp32 tolerance holds. */
START_TEST(test_golden_error)
{
	const char *td = getenv("FGCORE_TESTDATA");
	static const char *models[] = { "opt-tiny-64x2", "opt-tiny-128x4", "opt-py-128x4" };
	static const int64_t vocabs[] = { 50272, 50272, 8192 };
	static const double bounds[] = { 1.6 * 0.33, 1.6 * 0.46, 0.46 };
	char dir[4300];
	int32_t ids[ROWS * MAXPLEN], pad[ROWS], greedy[ROWS][GEN], got[ROWS][GEN];
	float *ref, *lg;
	int64_t V = vocabs[_i / 3];
	int plen, weights = _i % 3 != 1;

	snprintf(dir, sizeof(dir), "%s/opt/%s", td, models[_i / 3]);
	load_prompts(dir, ids, &plen, pad, greedy, &ref, V);
	struct fg_config *c = config(dir, modes[_i % 3]);
	run_golden(c, plen, ids, pad, &lg, got);
	double worst = 0, se = 0, sr = 0;
	for (int r = 0; r < ROWS; r++)
		worst = fmax(worst, spread_error(ref + r * V, lg + r * V, V, &se, &sr));
	double ratio = sqrt(se / sr);
	int agree = 0;
	for (int r = 0; r < ROWS; r++) {
		int t = 0;
		while (t < GEN && got[r][t] == greedy[r][t])
			t++;
		agree += t;
	}
	printf("%s, %s: prefill logits max |error| %.4f, RMS error / RMS spread %.4f (bound %.2f); greedy tokens agreeing before the first divergence: %d of %d\n",
	       models[_i / 3], mode_names[_i % 3], worst, ratio, weights ? bounds[_i / 3] : 0.0,
	       agree, ROWS * GEN);
	if (weights) {
		ck_assert_msg(ratio <= bounds[_i / 3], "%s, %s: RMS logit error %.4f of the spread, above %.2f",
			      models[_i / 3], mode_names[_i % 3], ratio, bounds[_i / 3]);
		/* and the weights were compressed: not the fp32 logits */
		ck_assert_msg(worst > 1e-2, "%s, %s: logits equal the fp32 reference (max error %g)",
			      models[_i / 3], mode_names[_i % 3], worst);
	} else {
		/* fp32's 1e-3; fp16 activations: test_golden's 5e-2 */
		ck_assert_msg(worst <= (gpu_backend ? 5e-2 : 1e-3),
			      "%s, int4 cache: prefill logits off by %g", models[_i / 3], worst);
	}
	free(ref);
	free(lg);
	fg_config_free(c);
}
END_TEST

/* Teacher forcing: prefill on each row's first token, then decode the
 * reference tokens one by one; lp[r][t] = log p(ids[r][t+1] | ids[r][..t]),
 * in double from the engine's logits.  Returns the perplexity. */
static double score(struct fg_config *c, const struct heldout *h, double lp[HROWS][HLEN - 1])
{
	struct fg_engine *e;
	struct fg_forward_env env;
	struct fg_forward *f;
	int32_t tok[HROWS], pad[HROWS] = { 0 };
	double sum = 0;

	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	int64_t V = e->model.cfg.vocab;
	float *l = malloc(sizeof(float) * HROWS * (size_t)V);
	fg_engine_forward_env(e, e->policy.num_gpu_batches, &env);
	ck_assert_int_eq(e->policy.gpu_batch_size * e->policy.num_gpu_batches, HROWS);
	ck_assert_msg(fg_forward_new(&f, &env, 1, HLEN - 2) == 0, "%s", fg_last_error_text());
	for (int t = 0; t < HLEN - 1; t++) {
		for (int r = 0; r < HROWS; r++)
			tok[r] = h->ids[r][t];
		int rc = t == 0 ? fg_forward_prefill(f, tok, pad, l, NULL) : fg_forward_decode(f, tok, l, NULL);
		ck_assert_msg(rc == 0, "step %d: %s", t, fg_last_error_text());
		for (int r = 0; r < HROWS; r++) {
			const float *x = l + (size_t)r * (size_t)V;
			double mx = -INFINITY, z = 0;
			for (int64_t i = 0; i < V; i++)
				mx = fmax(mx, x[i]);
			for (int64_t i = 0; i < V; i++)
				z += exp((double)x[i] - mx);
			lp[r][t] = (double)x[h->ids[r][t + 1]] - mx - log(z);
			sum += lp[r][t];
		}
	}
	fg_forward_free(f);
	free(l);
	fg_engine_close(e);
	return exp(-sum / (HROWS * (HLEN - 1)));
}

#define FP8_WEIGHTS "policy.compress_weight=true", "policy.weight_codec=fp8_e4m3_rows"
#define FP8_CACHE "policy.compress_cache=true", "policy.cache_codec=fp8_e4m3_group64"
#define HMODES 7
static const char *const hmodes[HMODES][5] = {
	{ NULL },
	{ "policy.compress_weight=true", NULL },
	{ "policy.compress_cache=true", NULL },
	{ "policy.compress_weight=true", "policy.compress_cache=true", NULL },
	{ FP8_WEIGHTS, NULL },
	{ FP8_CACHE, NULL },
	{ FP8_WEIGHTS, FP8_CACHE, NULL },
};
static const char *const hmode_names[HMODES] = { "fp32", "int4 weights", "int4 cache",
						 "int4 weights + cache", "fp8 weights",
						 "fp8 cache", "fp8 weights + cache" };

/* Perplexity of opt-py-128x4 on its 16 held-out sequences of 256 tokens,
 * against Hugging Face's (fp32: 8.7438; 4-bit weights simulated in PyTorch
 * with the layout's rule: 9.1196).  4 GPU batches of 4 rows.
 *  - fp32: every log-probability within 1e-3, the perplexity within 0.1 %
 *    (the README's fp32 tolerances; this proves the scoring itself).
 *  - int4 weights: at most 1.5 % above the simulated figure (the README's
 *    bound: the engine's fp16 rounding of scale and min may differ).
 *  - int4 cache: the keys and values go through the same 4-bit rounding in
 *    groups of 64 (along the head dimension), so each carries the same
 *    relative error (rho ~ 0.09) as a quantized weight matrix; but only 2
 *    tensors per layer are quantized instead of 6, a key error is damped by
 *    the softmax and a value error averaged over the attended positions.  Its
 *    cost is thus at most that of the weights: perplexity <= the simulated
 *    int4-weights figure (measured 8.90, +1.8 %, against +4.3 %).
 *  - both: the two costs compound at most multiplicatively: <= 1.015 x
 *    simulated x (simulated / fp32) (measured 9.29, bound 9.65).
 * Tried: weights with swapped nibbles or grouped along the input dimension
 * give perplexities above 30000, a cache with swapped nibbles 377, a cache
 * row decoded with its other group's scale and min 20.5.  Compressed modes must also differ
 * from fp32 (max |log-probability error| > 1e-2): compression took effect. */
START_TEST(test_heldout)
{
	char dir[4300];
	static struct heldout h;
	static double lp[HROWS][HLEN - 1];

	static const char *const hmodels[4] = { "opt/opt-py-128x4", "llama/llama-py-128x4",
						"moe/mixtral-py-128x4", "llama/qwen3-py-128x4" };
	const char *name = strchr(hmodels[_i / HMODES], '/') + 1;
	int mode = _i % HMODES;

	snprintf(dir, sizeof(dir), "%s/%s", getenv("FGCORE_TESTDATA"), hmodels[_i / HMODES]);
	struct fg_config *c = config(dir, hmodes[mode]);
	load_heldout(dir, &h);
	set(c, "policy.num_gpu_batches=4");
	double ppl = score(c, &h, lp);
	double worst = 0;
	for (int r = 0; r < HROWS; r++)
		for (int t = 0; t < HLEN - 1; t++)
			worst = fmax(worst, fabs(lp[r][t] - h.lp[r][t]));
	/* fp16 activations (a GPU backend): the README's 0.5 % for the perplexity */
	double fp = gpu_backend ? 1.005 : 1.001;
	/* The 4-bit bounds start from the simulation, or from fp32 where the
	 * simulated 4-bit weights scored better (mixtral-py-128x4's, 235.45
	 * against 235.88: a weak model's noise); the 4-bit cache, below the
	 * weights' simulation or, where that is lower, 1.5 % above fp32. */
	double sim = fmax(h.sim_ppl, h.ppl);
	/* fp8 weights: E4M3 rounds x within a step of at most |x| / 8, an
	 * error variance <= x^2 / 768, where 4-bit's is range^2 / 2700 per
	 * group of 64 (range about 5 sigma: sigma^2 / 108), so fp8's is at most
	 * 0.14 of 4-bit's; the log-perplexity cost, to first order in that
	 * variance, at most a fifth of the simulated 4-bit cost (or of 1.5 %
	 * where the simulation scored better than fp32). */
	double fp8 = h.ppl * fp * pow(fmax(sim, h.ppl * 1.015) / h.ppl, 0.2);
	/* an fp8 cache: the same rounding on 2 tensors a layer instead of 6,
	 * damped by the softmax and averaged over positions (see the 4-bit
	 * cache above): at most fp8 weights' bound; both compound at most
	 * multiplicatively */
	const double bound[HMODES] = { h.ppl * fp, sim * 1.015,
				       h.sim_ppl > h.ppl ? h.sim_ppl : h.ppl * 1.015,
				       sim * 1.015 * sim / h.ppl, fp8, fp8, fp8 * fp8 / h.ppl };
	printf("%s, %s: perplexity %.4f (bound %.4f; Hugging Face fp32 %.4f, int4 weights simulated %.4f); max |log-probability - fp32| %.4f\n",
	       name, hmode_names[mode], ppl, bound[mode], h.ppl, h.sim_ppl, worst);
	ck_assert_msg(ppl <= bound[mode], "%s, %s: perplexity %.4f above %.4f", name,
		      hmode_names[mode], ppl, bound[mode]);
	if (mode == 0) {
		/* The README's 1e-3, except for llama-py-128x4, whose reference
		 * log-probabilities are themselves up to 4.28e-3 from a float64
		 * recomputation (tests/reference/llama_f64.py; the engine is within
		 * 2e-5 of it). */
		double tol = gpu_backend ? 3e-2 : _i / HMODES == 1 ? 5e-3 : 1e-3;
		ck_assert_msg(worst <= tol, "fp32: a log-probability off by %g", worst);
		ck_assert_msg(ppl >= h.ppl / fp, "fp32: perplexity %.4f below %.4f", ppl, h.ppl);
	} else {
		/* (fp8's errors are smaller: 1e-3 for the weights; the cache's,
		 * on 2 tensors a layer, 1e-4) */
		ck_assert_msg(worst > (mode == 4 || mode == 6 ? 1e-3 : mode == 5 ? 1e-4 : 1e-2),
			      "%s: log-probabilities equal fp32's (max error %g)", hmode_names[mode],
			      worst);
	}
	fg_config_free(c);
}
END_TEST

/* Compressed runs (4-bit or fp8 weights, a 4-bit cache) agree bit for bit
 * whatever the placement: fp8 rows split over tiers are encoded apart and
 * gathered whole (exact placement).  On a GPU,
 * attention on the host (cpu_cache_compute) reads the 4-bit cache in fp32
 * where the GPU computes in fp16: its prefill (attention on the GPU) is
 * still bit for bit, but from the first decode step on the two runs' hidden
 * states differ by fp16's rounding, and a key or value that lies that close
 * to a rounding boundary of its 4-bit group gets the neighbouring code: a
 * whole quantization step.  So the runs drift apart by part of what the
 * 4-bit cache itself costs, and they are held to that cost: while a row has
 * been fed the same tokens, the RMS difference of the step logits, relative
 * to their RMS spread around each row's mean, stays below test_golden_error's
 * estimate for a cache of 4-bit keys and values (2 quantized matrices in
 * each of the 4 layers: sqrt(8) rho = 0.27, times 1.6 for the random
 * checkpoint).  A host attention that reads the wrong codes, positions or
 * scales leaves differences as large as the logits' spread (ratio near 1). */
#define HOST_ATTN_BOUND (1.6 * 0.27)

/* Step logits of the host-attention run against the all-GPU run's, row by
 * row, up to and including the step where the row's tokens part. */
static void check_host_attention(const char *what, const float *want_steps, const float *got_steps,
				 int32_t want[ROWS][GEN], int32_t got[ROWS][GEN], int64_t V)
{
	double se = 0, sr = 0;

	for (int r = 0; r < ROWS; r++) {
		double worst = 0, rse = 0, rsr = 0;
		int t = 0;
		for (; t < GEN; t++) {
			size_t at = ((size_t)t * ROWS + r) * V;
			worst = fmax(worst, spread_error(want_steps + at, got_steps + at, V, &rse, &rsr));
			if (want[r][t] != got[r][t])
				break;
		}
		printf("  row %d: %s%d, logits max |difference| %.3g, RMS difference / RMS spread %.3g\n", r,
		       t < GEN ? "tokens part at step " : "same tokens, steps ", t < GEN ? t : GEN, worst,
		       sqrt(rse / rsr));
		se += rse;
		sr += rsr;
	}
	printf("  all rows: RMS difference / RMS spread %.3g (bound %.2f)\n", sqrt(se / sr), HOST_ATTN_BOUND);
	fflush(stdout);
	ck_assert_msg(sqrt(se / sr) <= HOST_ATTN_BOUND,
		      "%s: step logits off the all-GPU run's by %.3g of their spread (bound %.2f)", what,
		      sqrt(se / sr), HOST_ATTN_BOUND);
}

/* the runs: 4-bit weights and cache, fp8 weights and cache, fp8 weights and
 * a 4-bit cache */
static const char *const agree_modes[3][5] = {
	{ "policy.compress_weight=true", "policy.compress_cache=true", NULL },
	{ FP8_WEIGHTS, FP8_CACHE, NULL },
	{ FP8_WEIGHTS, "policy.compress_cache=true", NULL },
};
static const char *const agree_names[3] = { "int4 weights + cache", "fp8 weights + cache",
					    "fp8 weights + int4 cache" };

START_TEST(test_placements_agree)
{
	static const char *const placements[][4] = {
		{ "policy.percent=0 100 100 0 100 0", NULL },
		{ "policy.percent=0 0 0 0 100 0", NULL },
		{ "policy.percent=30 50 30 50 100 0", "policy.placement=exact", NULL },
		{ "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true", NULL },
		{ "policy.percent=0 50 0 50 0 100", "policy.overlap=false", "policy.sep_layer=false", NULL },
	};
	const char *td = getenv("FGCORE_TESTDATA");
	char model[4300];
	int32_t ids[ROWS][PLEN] = { { 2, 100, 200, 300, 400, 500, 600, 700 },
				    { 1, 1, 1, 1, 2, 31414, 232, 4 },
				    { 1, 1, 2, 9, 8, 7, 6, 5 },
				    { 1, 1, 1, 1, 1, 2, 5000, 42 } };
	int32_t pad[ROWS] = { 0, 4, 2, 5 }, want[ROWS][GEN], got[ROWS][GEN];
	float *lw, *lg, *want_steps = NULL, *got_steps = NULL;
	const int64_t V = 50272;
	int m = _i;

	snprintf(model, sizeof(model), td && *td ? "%s/opt/opt-tiny-128x4" : "dummy:opt-125m", td);
	struct fg_config *c = config(model, agree_modes[m]);
	run_golden_steps(c, PLEN, &ids[0][0], pad, &lw, want, gpu_backend ? &want_steps : NULL);
	for (size_t p = 0; p < sizeof(placements) / sizeof(placements[0]); p++) {
		struct fg_config *cp = config(model, agree_modes[m]);
		int host_attn = 0;
		for (int i = 0; placements[p][i]; i++) {
			set(cp, placements[p][i]);
			host_attn |= strstr(placements[p][i], "cpu_cache_compute=true") != NULL;
		}
		int approx = gpu_backend && host_attn;
		run_golden_steps(cp, PLEN, &ids[0][0], pad, &lg, got, approx ? &got_steps : NULL);
		printf("%s, %s%s%s: %s\n", agree_names[m], placements[p][0],
		       placements[p][1] ? ", " : "", placements[p][1] ? placements[p][1] : "",
		       memcmp(want, got, sizeof(want)) ? "DIFFERENT" : "same tokens");
		fflush(stdout);
		if (approx) {
			check_host_attention(placements[p][0], want_steps, got_steps, want, got, V);
			free(got_steps);
			got_steps = NULL;
		} else {
			ck_assert_msg(!memcmp(want, got, sizeof(want)), "%s: tokens differ", placements[p][0]);
		}
		ck_assert_msg(!memcmp(lw, lg, sizeof(float) * ROWS * V),
			      "%s: prefill logits differ", placements[p][0]);
		free(lg);
		fg_config_free(cp);
	}
	free(want_steps);
	free(lw);
	fg_config_free(c);
}
END_TEST

/* A mixture's MLP block places one tensor per expert and matrix (Mixtral's
 * 8, Qwen1.5-MoE's 60 with a shared expert, Qwen3-30B-A3B's 128), and the
 * summary alone (no tensor array: how the plan and the optimizer ask, whole
 * experts on one tier added at once) is the summary of the full walk, for
 * weight shares all over, both placements, fp16 and 4-bit, gathered or not.
 * The pieces cover each tensor's rows in order and lie apart within their
 * tier's region. */
static int by_offset(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

START_TEST(test_expert_layout)
{
	static const char *const presets[] = { "mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b" };
	struct fg_model_config c;
	uint32_t seed = 12345;

	for (size_t m = 0; m < sizeof(presets) / sizeof(presets[0]); m++) {
		ck_assert_int_eq(fg_model_preset(presets[m], &c), 0);
		int64_t n = fg_plan_block_tensors(&c, FG_BLOCK_MLP);
		int64_t first = n - 3 * c.experts; /* the norm, the router, the shared expert's */
		ck_assert_int_eq(first, c.shared_ffn ? 6 : strcmp(c.arch->name, "mixtral") ? 6 : 2);
		struct fg_plan_tensor *t = calloc((size_t)n, sizeof(*t));
		uint64_t(*span)[2] = calloc((size_t)n * 3, sizeof(*span));
		ck_assert(t && span);
		for (int trial = 0; trial < 200; trial++) {
			seed = seed * 1103515245u + 12345u;
			int d = (int)(seed >> 8) % 101, h = (int)(seed >> 20) % (101 - d);
			struct fg_policy p = { .gpu_batch_size = 4, .num_gpu_batches = 1,
					       .weight = { [FG_ROLE_DISK] = d, [FG_ROLE_HOST] = h,
							   [FG_ROLE_COMPUTE] = 100 - d - h },
					       .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
					       .exact = trial & 1, .compress_weight = (trial >> 1) & 1,
					       .attn_sparsity = 1 };
			int gather = (trial >> 2) & 1;
			struct fg_plan_block full, sum;
			fg_plan_block(&c, &p, FG_BLOCK_MLP, gather, &full, t);
			fg_plan_block(&c, &p, FG_BLOCK_MLP, gather, &sum, NULL);
			ck_assert_int_eq(full.ntensors, n);
			ck_assert_msg(sum.ntensors == n && sum.staged == full.staged,
				      "%s, trial %d: staged %llu, full walk %llu", presets[m], trial,
				      (unsigned long long)sum.staged, (unsigned long long)full.staged);
			for (int r = 0; r < FG_ROLES; r++)
				ck_assert_msg(sum.bytes[r] == full.bytes[r] && sum.bulk[r] == full.bulk[r],
					      "%s, trial %d (%d %d, exact %d, 4-bit %d): %s tier %llu/%llu, full walk %llu/%llu",
					      presets[m], trial, d, h, p.exact, p.compress_weight,
					      fg_role_name(r), (unsigned long long)sum.bytes[r],
					      (unsigned long long)sum.bulk[r],
					      (unsigned long long)full.bytes[r],
					      (unsigned long long)full.bulk[r]);
			for (int r = 0; r < FG_ROLES; r++) {
				int64_t k = 0;
				for (int64_t i = 0; i < n; i++)
					for (int j = 0; j < t[i].npieces; j++)
						if ((int)t[i].piece[j].role == r) {
							span[k][0] = t[i].piece[j].offset;
							span[k++][1] = t[i].piece[j].bytes;
						}
				qsort(span, (size_t)k, sizeof(*span), by_offset);
				for (int64_t i = 0; i < k; i++)
					ck_assert(span[i][0] + span[i][1] <=
						  (i + 1 < k ? span[i + 1][0] : full.bytes[r]));
			}
			for (int64_t i = 0; i < n; i++) {
				int64_t e = i < first ? -1 : (i - first) / 3, rows = 0;
				ck_assert_int_eq(t[i].expert, e);
				ck_assert_int_eq(!!(t[i].def->flags & FG_TD_EXPERTS), e >= 0);
				for (int j = 0; j < t[i].npieces; j++) {
					ck_assert_int_eq(t[i].piece[j].row0, rows);
					rows += t[i].piece[j].rows;
				}
				ck_assert_int_eq(rows, t[i].present ? t[i].rows : 0);
				ck_assert_int_eq(t[i].gathered, gather && t[i].npieces > 1);
			}
		}
		free(t);
		free(span);
	}
}
END_TEST

/* A wide mixture's experts with 4-bit weights, spread over the tiers by each
 * placement (on the host, on the disk, over all three by share, split by
 * rows at the cuts with placement = exact; the cache and attention moved
 * too): the in-tree models of 60 experts (4 a token, a shared one) and of
 * 64 (8 a token) give the all-compute run's tokens and prefill logits bit
 * for bit.  (Their key/value width, 32, is not a multiple of 64: the cache
 * stays fp16.)  On a GPU, host attention computes in fp32 where the GPU
 * computes in fp16: those placements are not compared there. */
START_TEST(test_experts_placements_agree)
{
	static const char *const models[] = { "qwen2-moe-wide-tiny", "qwen3-moe-wide-tiny" };
	static const char *const placements[][4] = {
		{ "policy.percent=0 100 100 0 100 0", NULL },
		{ "policy.percent=0 0 100 0 100 0", NULL },
		{ "policy.percent=30 50 30 50 100 0", NULL },
		{ "policy.percent=30 50 100 0 100 0", "policy.placement=exact", NULL },
		{ "policy.percent=20 30 0 100 100 0", "policy.cpu_cache_compute=true", NULL },
		{ "policy.percent=0 50 0 50 0 100", "policy.overlap=false", "policy.sep_layer=false", NULL },
	};
	static const char *const int4[] = { "policy.compress_weight=true", NULL };
	const char *src = getenv("FGCORE_SRCDIR");
	char dir[4300];
	int32_t ids[ROWS * MAXPLEN], pad[ROWS], greedy[ROWS][GEN], want[ROWS][GEN], got[ROWS][GEN];
	float *ref, *lw, *lg;
	int plen;

	snprintf(dir, sizeof(dir), "%s/tests/data/%s", src && *src ? src : FG_TEST_SRCDIR, models[_i]);
	struct fg_config *c = config(dir, int4);
	load_prompts(dir, ids, &plen, pad, greedy, &ref, TINY_VOCAB);
	run_golden(c, plen, ids, pad, &lw, want);
	for (size_t p = 0; p < sizeof(placements) / sizeof(placements[0]); p++) {
		struct fg_config *cp = config(dir, int4);
		int host_attn = 0;
		for (int i = 0; placements[p][i]; i++) {
			set(cp, placements[p][i]);
			host_attn |= strstr(placements[p][i], "cpu_cache_compute=true") != NULL;
		}
		if (gpu_backend && host_attn) {
			printf("%s, int4 weights, %s: host attention in fp32, not compared on %s\n",
			       models[_i], placements[p][0], gpu_backend);
			fg_config_free(cp);
			continue;
		}
		run_golden(cp, plen, ids, pad, &lg, got);
		printf("%s, int4 weights, %s%s%s: %s\n", models[_i], placements[p][0],
		       placements[p][1] ? ", " : "", placements[p][1] ? placements[p][1] : "",
		       memcmp(want, got, sizeof(want)) ? "DIFFERENT" : "same tokens");
		fflush(stdout);
		ck_assert_msg(!memcmp(want, got, sizeof(want)), "%s, %s: tokens differ", models[_i],
			      placements[p][0]);
		ck_assert_msg(!memcmp(lw, lg, sizeof(float) * ROWS * TINY_VOCAB),
			      "%s, %s: prefill logits differ", models[_i], placements[p][0]);
		free(lg);
		fg_config_free(cp);
	}
	free(ref);
	free(lw);
	fg_config_free(c);
}
END_TEST

/* OPT-175B: compressed weight bytes against fp16 ones, from the placement. */
/* placement = exact on a device gathers a split tensor whole into the weight
 * slot (core/exec/weight_slots.c): the plan puts the gathered tensors' pieces
 * after the bulk of each region and gives every one a place of its own, and
 * 4-bit and fp8 pieces encoded apart assemble to the bytes of the whole tensor's
 * encoding.  (The gather itself runs on a GPU: test_policy on cublas.) */
START_TEST(test_gather_layout)
{
	struct fg_model_config c;
	struct fg_policy p = { .gpu_batch_size = 4, .num_gpu_batches = 1,
			       .weight = { 20, 50, 30 }, .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
			       .exact = 1, .attn_sparsity = 1 };

	ck_assert_int_eq(fg_model_preset("opt-1.3b", &c), 0);
	for (int cw = 0; cw < 3; cw++) { /* fp16, 4-bit, fp8 */
		p.compress_weight = cw > 0;
		p.weight_fp8 = cw == 2;
		for (int k = FG_BLOCK_ATTN; k <= FG_BLOCK_MLP; k++) {
			struct fg_plan_block plain, g, sum;
			struct fg_plan_tensor pt[32], gt[32];
			uint64_t end = 0;
			int gathered = 0;

			ck_assert_int_le(fg_plan_block_tensors(&c, (enum fg_block_kind)k), 32);
			fg_plan_block(&c, &p, (enum fg_block_kind)k, 0, &plain, pt);
			fg_plan_block(&c, &p, (enum fg_block_kind)k, 1, &g, gt);
			/* the summary alone is the same summary */
			fg_plan_block(&c, &p, (enum fg_block_kind)k, 1, &sum, NULL);
			ck_assert(sum.ntensors == g.ntensors && sum.staged == g.staged);
			for (int r = 0; r < FG_ROLES; r++) {
				ck_assert_uint_eq(sum.bytes[r], g.bytes[r]);
				ck_assert_uint_eq(sum.bulk[r], g.bulk[r]);
				ck_assert_uint_eq(g.bytes[r], plain.bytes[r]);
				ck_assert_uint_le(g.bulk[r], g.bytes[r]);
			}
			end = g.bulk[FG_ROLE_HOST] + g.bulk[FG_ROLE_DISK];
			for (int i = 0; i < g.ntensors; i++) {
				const struct fg_plan_tensor *t = &gt[i];
				ck_assert_int_eq(t->gathered, t->npieces > 1);
				ck_assert_int_eq(pt[i].gathered, 0);
				if (!t->gathered) {
					for (int j = 0; j < t->npieces; j++)
						ck_assert_uint_le(t->piece[j].offset + t->piece[j].bytes,
								  g.bulk[t->piece[j].role]);
					continue;
				}
				gathered++;
				ck_assert_uint_ge(t->gather, end); /* in order, no overlap */
				end = t->gather + fg_plan_tensor_bytes(t, t->rows);
				for (int j = 0; j < t->npieces; j++)
					ck_assert_uint_ge(t->piece[j].offset, g.bulk[t->piece[j].role]);
			}
			ck_assert_int_gt(gathered, 0);
			ck_assert_uint_ge(g.staged, end);
		}
	}

	/* 4-bit and fp8 pieces, encoded apart, assembled by the gather's ranges
	 * (4-bit pieces start at a group of 64 rows; fp8 ones anywhere) */
	static const struct {
		const char *codec;
		enum fg_dtype dtype;
		int group_dim;
		int64_t cut[4];
	} enc[2] = { { "int4_group64", FG_DTYPE_Q4_ROWS, 0, { 0, 64, 128, 200 } },
		     { "fp8_e4m3_rows", FG_DTYPE_F8_ROWS, 1, { 0, 37, 150, 200 } } };
	const int64_t rows = 200, cols = 96;
	uint16_t *x = malloc((size_t)(rows * cols) * 2);
	ck_assert_ptr_nonnull(x);
	for (int64_t i = 0; i < rows * cols; i++)
		x[i] = fg_float_to_half((float)((i * 7919) % 1000) / 250.0f - 2.0f);
	for (int e = 0; e < 2; e++) {
		struct fg_plugin_handle h;
		struct fg_codec cd;
		struct fg_plan_tensor t = { .rows = rows, .cols = cols, .dtype = enc[e].dtype,
					    .npieces = 3, .gathered = 1 };
		const int64_t *cut = enc[e].cut;
		size_t whole_bytes = (size_t)fg_plan_tensor_bytes(&t, rows);
		uint8_t *whole = calloc(1, whole_bytes), *got = calloc(1, whole_bytes);
		uint8_t *piece = malloc(whole_bytes);

		ck_assert(whole && got && piece);
		ck_assert_int_eq(fg_plugin_load(enc[e].codec, FG_PLUGIN_CODEC, &h), 0);
		ck_assert_int_eq(fg_codec_open(&cd, &h), 0);
		struct fg_codec_shape ws = { (uint64_t)rows, (uint64_t)cols, enc[e].group_dim };
		ck_assert_int_eq(fg_codec_encode_f16(&cd, &ws, x, whole), 0);
		for (int k = 0; k < 3; k++)
			t.piece[k] = (struct fg_plan_piece){ .role = (enum fg_role)k, .row0 = cut[k],
							     .rows = cut[k + 1] - cut[k] };
		for (int k = 0; k < 3; k++) {
			struct fg_codec_shape ps = { (uint64_t)t.piece[k].rows, (uint64_t)cols,
						     enc[e].group_dim };
			uint64_t src[2], at[2], len[2];
			memset(piece, 0, whole_bytes);
			ck_assert_int_eq(fg_codec_encode_f16(&cd, &ps, x + cut[k] * cols, piece), 0);
			int n = fg_plan_gather_ranges(&t, k, src, at, len);
			ck_assert_int_eq(n, 2);
			for (int i = 0; i < n; i++) {
				ck_assert_uint_le(at[i] + len[i], whole_bytes);
				memcpy(got + at[i], piece + src[i], len[i]);
			}
		}
		ck_assert_msg(memcmp(got, whole, whole_bytes) == 0,
			      "%s pieces assembled differ from the whole tensor's encoding",
			      enc[e].codec);
		fg_codec_close(&cd);
		free(whole), free(got), free(piece);
	}
	free(x);
}
END_TEST

START_TEST(test_175b_bytes)
{
	struct fg_model_config c;
	struct fg_policy p = { .gpu_batch_size = 32, .num_gpu_batches = 1,
			       .weight = { 0, 0, 100 }, .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
			       .overlap = 1, .sep_layer = 1, .attn_sparsity = 1 };
	struct fg_plan_env le = { 2, 1, 4, 0, 0 };
	struct fg_plan fp16, q4;

	ck_assert_int_eq(fg_model_preset("opt-175b", &c), 0);
	ck_assert_int_eq(fg_plan_make(&c, &p, &le, 512, 32, &fp16), 0);
	p.compress_weight = 1;
	ck_assert_int_eq(fg_plan_make(&c, &p, &le, 512, 32, &q4), 0);
	double ratio = (double)q4.weights[FG_ROLE_COMPUTE] / (double)fp16.weights[FG_ROLE_COMPUTE];
	printf("opt-175b weights: fp16 %.2f GB, int4 %.2f GB, ratio %.4f (4.5/16 = %.4f; the input embedding stays fp16)\n",
	       fp16.weights[FG_ROLE_COMPUTE] / 1e9, q4.weights[FG_ROLE_COMPUTE] / 1e9, ratio, 4.5 / 16);
	ck_assert(ratio > 4.5 / 16 && ratio < 4.5 / 16 + 0.01);
}
END_TEST

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA"), *b = getenv("FGCORE_TEST_BACKEND");
	int reference = td && *td;
	Suite *s = suite_create("compression");

	if (b && *b && strcmp(b, "cpu_blas"))
		gpu_backend = b;
	TCase *tc = tcase_create("int4");
	tcase_set_timeout(tc, 900);
	/* As in test_golden: without FGCORE_TESTDATA the reference cases cannot
	 * run (skip); with it set (CI), missing files fail. */
	if (reference) {
		tcase_add_loop_test(tc, test_golden_error, 0, 9);
		tcase_add_loop_test(tc, test_heldout, 0, 4 * HMODES);
	} else {
		printf("FGCORE_TESTDATA is not set: the Hugging Face reference cases are skipped\n");
	}
	/* (fp8 weights with a 4-bit cache: on a GPU backend, where each
	 * encoding runs its own kernels) */
	tcase_add_loop_test(tc, test_placements_agree, 0, gpu_backend ? 3 : 2);
	tcase_add_loop_test(tc, test_experts_placements_agree, 0, 2);
	tcase_add_test(tc, test_175b_bytes);
	tcase_add_test(tc, test_gather_layout);
	tcase_add_test(tc, test_expert_layout);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : reference ? 0 : 77;
}
