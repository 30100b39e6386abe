/* tests/test_scoring.c - log-probabilities out of fg_generate (the C API
 * that run-batch, serve and score use), against Hugging Face:
 *  - score_prompt on the trained checkpoints' held-out text: every token's
 *    log-probability and the perplexity against heldout.json, rows of
 *    different lengths sharing left-padded batches (a row's scores must not
 *    depend on its padding), fp32 and with 4-bit weights;
 *  - the top_logprobs lists: sorted, the scored token placed where its
 *    log-probability says;
 *  - completion log-probabilities (greedy and sampled) equal the prompt
 *    scores of the same text fed back, and a greedy token is its top one;
 *  - the numbers do not depend on how many positions are scored at a time
 *    ([policy] score_chunk), nor on which rows of a batch score.
 * FGCORE_TEST_BACKEND=cublas runs the fp16 GPU path with the README's fp16
 * tolerances (3e-2 a log-probability, 0.5 % the perplexity).
 * Needs FGCORE_TESTDATA: without it the program exits 77 (skip). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "tests/heldout.h"

#define TOPK 5

static const char *gpu_backend;
static double TOL_LP = 1e-3, TOL_PPL = 1e-3, TOL_SAME = 1e-4;

static const char *const models[2] = { "opt/opt-py-128x4", "llama/llama-py-128x4" };

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static struct fg_engine *open_engine(const char *dir, const char *extra)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4400];

	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s", dir);
	set(c, kv);
	set(c, "policy.gpu_batch_size=4");
	set(c, "policy.num_gpu_batches=2");
	if (gpu_backend) {
		snprintf(kv, sizeof(kv), "compute.plugin=%s", gpu_backend);
		set(c, kv);
		set(c, "tier.compute.plugin=cuda_mem");
		set(c, "tier.compute.pool=4G");
	}
	if (extra)
		set(c, extra);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	return e;
}

/* A top list: sorted, log-probabilities <= 0, distinct ids; the scored token
 * (log-probability lp) is in it exactly when lp beats its last entry. */
static void check_top(const struct fg_logprob *top, int32_t id, float lp, const char *where)
{
	int found = 0;

	for (int i = 0; i < TOPK; i++) {
		ck_assert_msg(top[i].id >= 0 && top[i].logprob <= 1e-6f, "%s: entry %d is (%d, %g)",
			      where, i, top[i].id, top[i].logprob);
		if (i)
			ck_assert_msg(top[i].logprob <= top[i - 1].logprob, "%s: not sorted", where);
		for (int k = 0; k < i; k++)
			ck_assert_msg(top[k].id != top[i].id, "%s: id %d twice", where, top[i].id);
		if (top[i].id == id) {
			found = 1;
			ck_assert_msg(fabsf(top[i].logprob - lp) < 1e-6f, "%s: %g in top, %g scored",
				      where, top[i].logprob, lp);
		}
	}
	if (lp > top[TOPK - 1].logprob + 1e-6f)
		ck_assert_msg(found, "%s: token %d (%g) missing from a top list ending at %g", where, id,
			      lp, top[TOPK - 1].logprob);
}

/* Rows of different lengths (256 - 13 r tokens) share left-padded batches;
 * the log-probability of token t depends only on the tokens before it, so
 * each row's must be Hugging Face's for the full sequence's first tokens.
 * Loop: model x {fp32, int4 weights}. */
START_TEST(test_heldout_scores)
{
	static struct heldout h;
	struct fg_request req[HROWS];
	struct fg_result res[HROWS];
	const char *name = strchr(models[_i / 2], '/') + 1;
	int int4 = _i % 2;
	char dir[4300];
	double sum = 0, worst = 0;
	long count = 0;

	snprintf(dir, sizeof(dir), "%s/%s", getenv("FGCORE_TESTDATA"), models[_i / 2]);
	load_heldout(dir, &h);
	struct fg_engine *e = open_engine(dir, int4 ? "policy.compress_weight=true" : NULL);
	memset(req, 0, sizeof(req));
	for (int r = 0; r < HROWS; r++) {
		req[r].prompt_ids = h.ids[r];
		req[r].n_prompt_ids = (size_t)(HLEN - 13 * r);
		req[r].score_prompt = 1;
		req[r].top_logprobs = TOPK;
	}
	ck_assert_msg(fg_generate(e, req, HROWS, res) == 0, "%s", fg_last_error_text());
	for (int r = 0; r < HROWS; r++) {
		const struct fg_result *x = &res[r];
		ck_assert_msg(x->finish_reason != FG_FINISH_ERROR, "row %d: %s", r, x->error);
		ck_assert_int_eq(x->n_tokens, 0);
		ck_assert_int_eq(x->n_prompt_tokens, req[r].n_prompt_ids);
		ck_assert(x->prompt_logprobs && x->prompt_top && x->prompt_ids);
		ck_assert_msg(isnan(x->prompt_logprobs[0]) && x->prompt_top[0].id == -1,
			      "the first token has a log-probability");
		for (size_t t = 1; t < x->n_prompt_tokens; t++) {
			char where[64];
			ck_assert_int_eq(x->prompt_ids[t], h.ids[r][t]);
			double d = fabs((double)x->prompt_logprobs[t] - h.lp[r][t - 1]);
			worst = fmax(worst, d);
			sum += x->prompt_logprobs[t];
			count++;
			snprintf(where, sizeof(where), "row %d token %zu", r, t);
			check_top(x->prompt_top + t * TOPK, x->prompt_ids[t], x->prompt_logprobs[t], where);
		}
	}
	/* Hugging Face's perplexity over the same tokens */
	double ref = 0;
	for (int r = 0; r < HROWS; r++)
		for (int t = 0; t < HLEN - 13 * r - 1; t++)
			ref += h.lp[r][t];
	double ppl = exp(-sum / (double)count), ref_ppl = exp(-ref / (double)count);
	printf("%s, %s: scored %ld tokens in padded batches: perplexity %.4f (Hugging Face fp32 %.4f over the same tokens); max |log-probability - Hugging Face| %.2e\n",
	       name, int4 ? "int4 weights" : "fp32", count, ppl, ref_ppl, worst);
	fflush(stdout); /* a failed check below ends this forked test without flushing */
	if (!int4) {
		/* The README's fp32 1e-3, but llama-py-128x4's reference is itself
		 * up to 4.28e-3 off float64 (tests/reference/llama_f64.py). */
		/* fp16 activations: the README's 3e-2.  Hugging Face's own fp16
		 * OPT misses it on opt-py-128x4 (0.0369: tests/reference/hf_fp16.py),
		 * whose residual stream is fp16; cublas keeps it in fp32. */
		double tol = gpu_backend ? TOL_LP : _i / 2 ? 5e-3 : 1e-3;
		ck_assert_msg(worst <= tol, "%s: a log-probability off by %g", name, worst);
		ck_assert_msg(fabs(ppl / ref_ppl - 1) <= TOL_PPL, "%s: perplexity %.4f, Hugging Face %.4f",
			      name, ppl, ref_ppl);
	} else {
		/* At most 1.5 % above the simulated 4-bit figure (the full
		 * sequences'; these rows' prefixes are predicted no better than
		 * the whole, so the full figure is scaled by the fp32 ratio). */
		double bound = h.sim_ppl / h.ppl * ref_ppl * 1.015;
		ck_assert_msg(ppl <= bound, "%s, int4: perplexity %.4f above %.4f", name, ppl, bound);
		ck_assert_msg(worst > 1e-2, "%s, int4: log-probabilities equal fp32's", name);
	}
	for (int r = 0; r < HROWS; r++)
		fg_result_clear(&res[r]);
	fg_engine_close(e);
}
END_TEST

static void on_token(void *arg, int32_t id)
{
	int32_t *seen = arg;
	seen[1 + seen[0]++] = id;
}

/* Completion log-probabilities: of the raw distribution whatever the
 * sampling; they equal the scores of the prompt + completion fed back as a
 * prompt (decode path against the prefill path); a greedy token is the top of
 * its list.  The streaming callback sees every token in order.  Loop: model
 * x {greedy, temperature 0.8 + top_p 0.9}. */
START_TEST(test_completion_logprobs)
{
	static struct heldout h;
	enum { N = 6, PL = 20, GEN = 12 };
	struct fg_request req[N], again[N];
	struct fg_result res[N], back[N];
	static int32_t seen[N][GEN + 1], fed[N][PL + GEN];
	int sampled = _i % 2;
	char dir[4300];
	double worst = 0;

	snprintf(dir, sizeof(dir), "%s/%s", getenv("FGCORE_TESTDATA"), models[_i / 2]);
	load_heldout(dir, &h);
	struct fg_engine *e = open_engine(dir, NULL);
	memset(req, 0, sizeof(req));
	memset(seen, 0, sizeof(seen));
	for (int r = 0; r < N; r++) {
		req[r].prompt_ids = h.ids[r];
		req[r].n_prompt_ids = (size_t)(PL - r);
		req[r].max_new_tokens = GEN;
		req[r].logprobs = 1;
		req[r].top_logprobs = TOPK;
		req[r].temperature = sampled ? 0.8f : 0;
		req[r].top_p = sampled ? 0.9f : 1;
		req[r].seed = (uint64_t)r + 7;
		req[r].on_token = on_token;
		req[r].on_token_arg = seen[r];
	}
	ck_assert_msg(fg_generate(e, req, N, res) == 0, "%s", fg_last_error_text());
	memset(again, 0, sizeof(again));
	for (int r = 0; r < N; r++) {
		ck_assert_int_eq(res[r].n_tokens, GEN);
		ck_assert_int_eq(seen[r][0], GEN);
		ck_assert(!memcmp(seen[r] + 1, res[r].token_ids, sizeof(int32_t) * GEN));
		ck_assert(res[r].token_logprobs && res[r].token_top && !res[r].prompt_logprobs);
		memcpy(fed[r], res[r].prompt_ids, sizeof(int32_t) * res[r].n_prompt_tokens);
		memcpy(fed[r] + res[r].n_prompt_tokens, res[r].token_ids, sizeof(int32_t) * GEN);
		again[r].prompt_ids = fed[r];
		again[r].n_prompt_ids = res[r].n_prompt_tokens + GEN;
		again[r].score_prompt = 1;
	}
	ck_assert_msg(fg_generate(e, again, N, back) == 0, "%s", fg_last_error_text());
	for (int r = 0; r < N; r++)
		for (int t = 0; t < GEN; t++) {
			char where[64];
			float lp = res[r].token_logprobs[t];
			const struct fg_logprob *top = res[r].token_top + t * TOPK;
			snprintf(where, sizeof(where), "row %d completion token %d", r, t);
			check_top(top, res[r].token_ids[t], lp, where);
			if (!sampled)
				ck_assert_msg(top[0].id == res[r].token_ids[t], "%s: greedy token %d is not the top %d",
					      where, res[r].token_ids[t], top[0].id);
			double d = fabs((double)lp - back[r].prompt_logprobs[res[r].n_prompt_tokens + t]);
			worst = fmax(worst, d);
		}
	printf("%s, %s: completion log-probabilities against the same text rescored: max difference %.2e\n",
	       strchr(models[_i / 2], '/') + 1, sampled ? "sampled" : "greedy", worst);
	fflush(stdout);
	ck_assert_msg(worst <= TOL_SAME, "completion and rescored log-probabilities differ by %g", worst);
	for (int r = 0; r < N; r++) {
		fg_result_clear(&res[r]);
		fg_result_clear(&back[r]);
	}
	fg_engine_close(e);
}
END_TEST

/* Equal within fp32 rounding of products of different shapes. */
static int near(float a, float b)
{
	return fabsf(a - b) <= 1e-5f * (1 + fabsf(b));
}

/* Score the held-out rows (every other one scored, the rest generating a
 * token) with [policy] score_chunk set to `chunk` (NULL: the default). */
static void score_rows(const char *dir, const struct heldout *h, const char *chunk,
		       struct fg_result *res)
{
	struct fg_request req[HROWS];
	struct fg_engine *e = open_engine(dir, chunk);

	memset(req, 0, sizeof(req));
	for (int r = 0; r < HROWS; r++) {
		req[r].prompt_ids = h->ids[r];
		req[r].n_prompt_ids = (size_t)(HLEN - 13 * r);
		req[r].score_prompt = r % 2 == 0;
		req[r].max_new_tokens = 1;
		req[r].logprobs = 1;
		req[r].top_logprobs = r % 3 ? TOPK : FG_TOP_LOGPROBS_MAX;
	}
	ck_assert_msg(fg_generate(e, req, HROWS, res) == 0, "%s", fg_last_error_text());
	fg_engine_close(e);
}

/* The positions are scored a chunk at a time: one row per sequence of a
 * GPU batch, chunks across sequences' boundaries, a GPU batch at once; the
 * numbers must not depend on it, and rows that do not score (or ask for
 * fewer top ids than their batch's largest) get exactly what they asked. */
START_TEST(test_score_chunks)
{
	static struct heldout h;
	static struct fg_result res[3][HROWS];
	char dir[4300], mid[64];
	struct fg_model_info mi;

	snprintf(dir, sizeof(dir), "%s/%s", getenv("FGCORE_TESTDATA"), models[_i]);
	load_heldout(dir, &h);
	struct fg_engine *e = open_engine(dir, NULL);
	ck_assert_int_eq(fg_engine_info(e, &mi), 0);
	fg_engine_close(e);
	/* 37 rows of fp32 logits (fp16: 74): chunks end mid-sequence */
	snprintf(mid, sizeof(mid), "policy.score_chunk=%lld", (long long)(mi.vocab * 4 * 37));
	score_rows(dir, &h, "policy.score_chunk=1", res[0]);
	score_rows(dir, &h, mid, res[1]);
	score_rows(dir, &h, NULL, res[2]);
	for (int v = 0; v < 2; v++)
		for (int r = 0; r < HROWS; r++) {
			const struct fg_result *a = &res[v][r], *b = &res[2][r];
			int k = r % 3 ? TOPK : FG_TOP_LOGPROBS_MAX;
			ck_assert_msg(a->finish_reason != FG_FINISH_ERROR, "row %d: %s", r, a->error);
			ck_assert_int_eq(a->n_tokens, 1);
			ck_assert_int_eq(a->token_ids[0], b->token_ids[0]);
			ck_assert(near(a->token_logprobs[0], b->token_logprobs[0]));
			ck_assert(!!a->prompt_logprobs == (r % 2 == 0));
			for (size_t t = 1; a->prompt_logprobs && t < a->n_prompt_tokens; t++) {
				ck_assert_msg(near(a->prompt_logprobs[t], b->prompt_logprobs[t]),
					      "chunking %d, row %d, token %zu: %g against %g", v, r, t,
					      a->prompt_logprobs[t], b->prompt_logprobs[t]);
				for (int i = 0; i < k; i++) {
					const struct fg_logprob *x = &a->prompt_top[t * (size_t)k + (size_t)i],
								*y = &b->prompt_top[t * (size_t)k + (size_t)i];
					ck_assert_msg(near(x->logprob, y->logprob),
						      "chunking %d, row %d, token %zu, top %d: (%d, %g) against (%d, %g)",
						      v, r, t, i, x->id, x->logprob, y->id, y->logprob);
					/* the ids of equal values may swap within rounding */
					ck_assert(x->id == y->id || near(x->logprob, y->logprob));
				}
			}
		}
	for (int v = 0; v < 3; v++)
		for (int r = 0; r < HROWS; r++)
			fg_result_clear(&res[v][r]);
}
END_TEST

/* Out-of-range top_logprobs is refused per request; the others run. */
START_TEST(test_refused)
{
	static struct heldout h;
	struct fg_request req[2];
	struct fg_result res[2];
	char dir[4300];

	snprintf(dir, sizeof(dir), "%s/%s", getenv("FGCORE_TESTDATA"), models[0]);
	load_heldout(dir, &h);
	struct fg_engine *e = open_engine(dir, NULL);
	memset(req, 0, sizeof(req));
	for (int r = 0; r < 2; r++) {
		req[r].prompt_ids = h.ids[r];
		req[r].n_prompt_ids = 8;
		req[r].max_new_tokens = 2;
		req[r].logprobs = 1;
		req[r].top_logprobs = r ? FG_TOP_LOGPROBS_MAX + 1 : FG_TOP_LOGPROBS_MAX;
	}
	ck_assert_msg(fg_generate(e, req, 2, res) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(res[0].finish_reason, FG_FINISH_LENGTH);
	ck_assert_int_eq(res[1].finish_reason, FG_FINISH_ERROR);
	ck_assert_msg(strstr(res[1].error, "top_logprobs"), "%s", res[1].error);
	for (int r = 0; r < 2; r++)
		fg_result_clear(&res[r]);
	fg_engine_close(e);
}
END_TEST

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	Suite *s = suite_create("scoring");
	TCase *tc = tcase_create("logprobs");

	const char *b = getenv("FGCORE_TEST_BACKEND");
	if (b && *b && strcmp(b, "cpu_blas")) {
		/* fp16: the decode path (completion scores) and the prefill path
		 * (rescored) round differently, within the fp16 tolerance */
		gpu_backend = b;
		TOL_LP = TOL_SAME = 3e-2;
		TOL_PPL = 5e-3;
		printf("backend %s: fp16 tolerances %g, %g\n", b, TOL_LP, TOL_PPL);
	}
	if (!td || !*td) {
		printf("FGCORE_TESTDATA is not set: the Hugging Face reference cases are skipped\n");
		return 77;
	}
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_heldout_scores, 0, 4);
	tcase_add_loop_test(tc, test_completion_logprobs, 0, 4);
	tcase_add_loop_test(tc, test_score_chunks, 0, 2);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
