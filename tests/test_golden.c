/* tests/test_golden.c - the engine against Hugging Face's reference outputs
 * ($FGCORE_TESTDATA/<family>/<model>/golden.json, and the in-tree
 * tests/data/qwen2-tiny made by tests/reference/make_qwen2.py; computed by
 * transformers in fp32 from the checkpoint's fp16 weights).  Comparison rules
 * from the data's README, for an fp32 compute path:
 *   - prefill logits: max |engine - reference| <= 1e-3;
 *   - greedy tokens equal at every step up to the first whose top1-top2
 *     margin is below 1e-3 (from there on a correct engine may diverge);
 *   - teacher forcing with the reference tokens: the logits at the five
 *     listed ids match within 1e-3 at every step. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "tests/argmax.h"
#include "core/sampling/sample.h"

/* fp32 compute path; FGCORE_TEST_BACKEND=cublas runs the fp16 GPU path with
 * the README's fp16 tolerance instead. */
static double TOL = 1e-3;
static const char *gpu_backend;
#define ROWS 4
#define PLEN 32 /* the longest golden prompt (llama-py-128x4's: 25) */
#define GEN 32

/* models[] by name; the in-tree ones last */
enum { OPT_TINY_64, OPT_TINY_128, OPT_PY, LLAMA_PY, MIXTRAL_PY, QWEN3_PY, QWEN2_TINY, MISTRAL_WINDOW,
       QWEN2_WINDOW, QWEN2_MOE, QWEN3_MOE, QWEN2_MOE_WIDE, QWEN3_MOE_WIDE, GEMMA2_TINY, NMODELS };

static const struct model {
	const char *dir;  /* below $FGCORE_TESTDATA, or (intree) below tests/data */
	int intree;       /* in the source tree: runs without FGCORE_TESTDATA */
	int plen;         /* its golden prompts' (padded) length */
	double tf_tol;    /* teacher forcing, fp32 path (0: TOL) */
	/* teacher forcing, fp16 path: Hugging Face's own fp16 error against its
	 * fp32 reference where that is beyond TOL (tests/reference/hf_fp16.py:
	 * opt-tiny-128x4 0.0656; the others 0.0049, 0.0203, 0.0104) */
	double hf_fp16;
} models[] = {
	[OPT_TINY_64] = { "opt/opt-tiny-64x2", 0, 8, 0, 0 },
	[OPT_TINY_128] = { "opt/opt-tiny-128x4", 0, 8, 0, 0.0656 },
	[OPT_PY] = { "opt/opt-py-128x4", 0, 25, 0, 0 },
	[LLAMA_PY] = { "llama/llama-py-128x4", 0, 25, 2e-3, 0 },
	/* Mixtral: 4 experts, 2 per token, grouped-query heads, untied head */
	[MIXTRAL_PY] = { "moe/mixtral-py-128x4", 0, 25, 0, 0 },
	/* Qwen3: each head's q and k RMS-normalised before rotary, tied head */
	[QWEN3_PY] = { "llama/qwen3-py-128x4", 0, 25, 0, 0 },
	/* Qwen2 with q, k, v biases, grouped-query heads, an untied lm_head and
	 * config.json's layer_types (hf_fp16 0.0077 on the CPU) */
	[QWEN2_TINY] = { "qwen2-tiny", 1, 25, 0, 0 },
	/* Sliding windows of 8 over runs of up to 57 positions
	 * (tests/reference/make_window.py): every layer of the Mistral, the
	 * second of the Qwen2 (max_window_layers 1) */
	[MISTRAL_WINDOW] = { "mistral-window-tiny", 1, 25, 0, 0 },
	[QWEN2_WINDOW] = { "qwen2-window-tiny", 1, 25, 0, 0 },
	/* Qwen's mixtures of 8 experts, 2 per token (tests/reference/make_qwen_moe.py):
	 * Qwen2-MoE's weights over all experts and its gated shared expert,
	 * Qwen3-MoE's renormalised weights and per-head q/k norms */
	[QWEN2_MOE] = { "qwen2-moe-tiny", 1, 25, 0, 0 },
	[QWEN3_MOE] = { "qwen3-moe-tiny", 1, 25, 0, 0 },
	/* wide mixtures of narrow experts, as the published ones: 60 experts,
	 * 4 per token and a shared one (Qwen1.5-MoE's); 64 experts, 8 per token */
	[QWEN2_MOE_WIDE] = { "qwen2-moe-wide-tiny", 1, 25, 0, 0 },
	[QWEN3_MOE_WIDE] = { "qwen3-moe-wide-tiny", 1, 25, 0, 0 },
	/* Gemma 2 (tests/reference/make_gemma2.py): embedding scaled by
	 * sqrt(hidden), norms of 1 + w before and after each block, GeGLU,
	 * head_dim 32 of hidden 64 over 4 heads, scores scaled by
	 * query_pre_attn_scalar^-0.5 and soft-capped at 5, sliding (window 8),
	 * full and sliding layers, final logits capped at 3, tied head */
	[GEMMA2_TINY] = { "gemma2-tiny", 1, 25, 0, 0 },
};
_Static_assert(sizeof(models) / sizeof(models[0]) == NMODELS, "one models[] entry per name");

/* The model's folder: in-tree data below the source tree ($FGCORE_SRCDIR
 * under make check, else the one this test was configured from). */
static const char *model_dir(const struct model *m)
{
	static char path[4096];
	const char *src = getenv("FGCORE_SRCDIR");

	if (!m->intree)
		snprintf(path, sizeof(path), "%s/%s", getenv("FGCORE_TESTDATA"), m->dir);
	else
		snprintf(path, sizeof(path), "%s/tests/data/%s", src && *src ? src : FG_TEST_SRCDIR,
			 m->dir);
	return path;
}

struct golden {
	int plen;
	int32_t ids[ROWS * PLEN]; /* row r at r * plen */
	int32_t pad[ROWS];
	int32_t greedy[ROWS][GEN];
	double margin[ROWS][GEN];
	int32_t top_id[ROWS][GEN][5];
	double top_logit[ROWS][GEN][5];
	float *prefill; /* [ROWS, vocab] */
};

static char dir[4096];

static int load_golden(const struct model *m, struct golden *g, int64_t vocab)
{
	char path[4200];
	json_error_t err;

	g->plen = m->plen;
	snprintf(dir, sizeof(dir), "%s", model_dir(m));
	snprintf(path, sizeof(path), "%s/golden.json", dir);
	json_t *root = json_load_file(path, 0, &err);
	ck_assert_msg(root, "%s: %s", path, err.text);
	json_t *ids = json_object_get(root, "input_ids"), *mask = json_object_get(root, "attention_mask");
	json_t *greedy = json_object_get(root, "greedy_new_tokens");
	json_t *margin = json_object_get(root, "greedy_top1_top2_margin");
	json_t *top5 = json_object_get(json_object_get(root, "greedy_step_top5"), "rows");
	ck_assert(json_array_size(ids) == ROWS && json_array_size(greedy) == ROWS);
	for (int r = 0; r < ROWS; r++) {
		g->pad[r] = 0;
		ck_assert(json_array_size(json_array_get(ids, r)) == (size_t)g->plen);
		for (int i = 0; i < g->plen; i++) {
			g->ids[r * g->plen + i] =
				(int32_t)json_integer_value(json_array_get(json_array_get(ids, r), i));
			g->pad[r] += !json_integer_value(json_array_get(json_array_get(mask, r), i));
		}
		for (int t = 0; t < GEN; t++) {
			g->greedy[r][t] = (int32_t)json_integer_value(json_array_get(json_array_get(greedy, r), t));
			g->margin[r][t] = json_number_value(json_array_get(json_array_get(margin, r), t));
			json_t *step = json_array_get(json_array_get(top5, r), t);
			for (int k = 0; k < 5; k++) {
				json_t *pair = json_array_get(step, k);
				g->top_id[r][t][k] = (int32_t)json_integer_value(json_array_get(pair, 0));
				g->top_logit[r][t][k] = json_number_value(json_array_get(pair, 1));
			}
		}
	}
	json_decref(root);

	snprintf(path, sizeof(path), "%s/golden_prefill_last_logits.f32", dir);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "%s: %s", path, strerror(errno));
	g->prefill = malloc(sizeof(float) * ROWS * (size_t)vocab);
	ck_assert(fread(g->prefill, sizeof(float), ROWS * (size_t)vocab, f) == ROWS * (size_t)vocab);
	fclose(f);
	return 0;
}

static struct fg_engine *open_engine(const struct model *m, int bs, int nb)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4300];

	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s", model_dir(m));
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s", fg_last_error_text());
	if (gpu_backend) {
		snprintf(kv, sizeof(kv), "compute.plugin=%s", gpu_backend);
		ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
		ck_assert_int_eq(fg_config_set(c, "tier.compute.plugin=cuda_mem", "test"), 0);
		/* several engines share the GPU in one test */
		ck_assert_int_eq(fg_config_set(c, "tier.compute.pool=4G", "test"), 0);
	}
	snprintf(kv, sizeof(kv), "policy.gpu_batch_size=%d", bs);
	ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
	snprintf(kv, sizeof(kv), "policy.num_gpu_batches=%d", nb);
	ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	return e;
}

/* Steps up to (excluding) the first low-margin one must agree. */
static void check_greedy(const struct golden *g, int r, const int32_t *got, const char *what)
{
	for (int t = 0; t < GEN; t++) {
		if (g->margin[r][t] < TOL)
			break;
		ck_assert_msg(got[t] == g->greedy[r][t], "%s: row %d step %d: token %d, reference %d",
			      what, r, t, got[t], g->greedy[r][t]);
	}
}

/* Prefill logits, free-running greedy and teacher-forced top-5 logits. */
START_TEST(test_reference)
{
	const struct model *m = &models[_i];
	const char *name = strchr(m->dir, '/') ? strchr(m->dir, '/') + 1 : m->dir;
	double tf_tol = gpu_backend ? fmax(TOL, m->hf_fp16) : m->tf_tol ? m->tf_tol : TOL;
	struct fg_engine *e = open_engine(m, ROWS, 1);
	int64_t V = e->model.cfg.vocab;
	struct golden *g = calloc(1, sizeof(*g));
	float *logits = malloc(sizeof(float) * ROWS * (size_t)V);
	int32_t next[ROWS], got[ROWS][GEN];
	struct fg_forward *f;
	struct fg_forward_env env;
	double worst = 0;

	load_golden(m, g, V);
	fg_engine_forward_env(e, 1, &env);
	/* free-running greedy */
	ck_assert_int_eq(fg_forward_new(&f, &env, g->plen, GEN), 0);
	int32_t top[ROWS];
	ck_assert_int_eq(fg_forward_prefill(f, g->ids, g->pad, logits, top), 0);
	for (int r = 0; r < ROWS; r++) /* the greedy path picks what the logits say */
		ck_assert_int_eq(top[r], argmax(logits + r * V, V));
	for (int64_t i = 0; i < ROWS * V; i++)
		worst = fmax(worst, fabs((double)logits[i] - g->prefill[i]));
	printf("%s: prefill logits max |error| %.3g (limit %.0e)\n", name, worst, TOL);
	ck_assert_msg(worst <= TOL, "prefill logits differ by %g", worst);
	for (int t = 0; t < GEN; t++) {
		for (int r = 0; r < ROWS; r++)
			got[r][t] = next[r] = argmax(logits + r * V, V);
		if (t + 1 < GEN)
			ck_assert_int_eq(fg_forward_decode(f, next, logits, NULL), 0);
	}
	for (int r = 0; r < ROWS; r++)
		check_greedy(g, r, got[r], name);
	fg_forward_free(f);

	/* teacher forcing */
	worst = 0;
	ck_assert_int_eq(fg_forward_new(&f, &env, g->plen, GEN), 0);
	ck_assert_int_eq(fg_forward_prefill(f, g->ids, g->pad, logits, NULL), 0);
	for (int t = 0; t < GEN; t++) {
		for (int r = 0; r < ROWS; r++) {
			for (int k = 0; k < 5; k++) {
				double d = fabs(logits[r * V + g->top_id[r][t][k]] - g->top_logit[r][t][k]);
				worst = fmax(worst, d);
				ck_assert_msg(d <= tf_tol + 1e-5, "%s: row %d step %d id %d: logit %g, reference %g",
					      name, r, t, g->top_id[r][t][k],
					      logits[r * V + g->top_id[r][t][k]], g->top_logit[r][t][k]);
			}
			next[r] = g->greedy[r][t];
		}
		if (t + 1 < GEN)
			ck_assert_int_eq(fg_forward_decode(f, next, logits, NULL), 0);
	}
	/* the reference prints logits with 5 decimals, hence the 1e-5 above */
	printf("%s: teacher-forced top-5 logits max |error| %.3g over %d steps\n", name, worst, GEN);
	fg_forward_free(f);
	free(logits);
	free(g->prefill);
	free(g);
	fg_engine_close(e);
}
END_TEST

/* fg_generate: each prompt alone, all four together, and split over GPU
 * batches all give the same tokens, which match the reference. */
START_TEST(test_batch_independence)
{
	struct golden *g = calloc(1, sizeof(*g));
	struct fg_request req[ROWS];
	struct fg_result together[ROWS], split[ROWS], alone;
	const struct model *m = &models[_i];
	struct fg_engine *e4 = open_engine(m, ROWS, 1);
	struct fg_engine *e1 = open_engine(m, 1, 1);
	struct fg_engine *e22 = open_engine(m, 2, 2);

	load_golden(m, g, e4->model.cfg.vocab);
	memset(req, 0, sizeof(req));
	for (int r = 0; r < ROWS; r++) {
		req[r].prompt_ids = g->ids + r * g->plen + g->pad[r];
		req[r].n_prompt_ids = (size_t)(g->plen - g->pad[r]);
		req[r].max_new_tokens = GEN;
	}
	ck_assert_int_eq(fg_generate(e4, req, ROWS, together), 0);
	ck_assert_int_eq(fg_generate(e22, req, ROWS, split), 0);
	for (int r = 0; r < ROWS; r++) {
		ck_assert_int_eq(fg_generate(e1, &req[r], 1, &alone), 0);
		ck_assert_int_eq(together[r].n_tokens, GEN);
		ck_assert_int_eq(together[r].n_prompt_tokens, g->plen - g->pad[r]);
		ck_assert_int_eq(together[r].finish_reason, FG_FINISH_LENGTH);
		if (!gpu_backend) {
			ck_assert_mem_eq(alone.token_ids, together[r].token_ids, GEN * sizeof(int32_t));
			ck_assert_mem_eq(split[r].token_ids, together[r].token_ids,
					 GEN * sizeof(int32_t));
		}
		/* fp16 GEMMs of other shapes may round differently: there, each run is held
		 * to the reference up to its first low-margin step instead. */
		check_greedy(g, r, alone.token_ids, "alone");
		check_greedy(g, r, split[r].token_ids, "split over GPU batches");
		check_greedy(g, r, together[r].token_ids, "fg_generate");
		fg_result_clear(&alone);
		fg_result_clear(&together[r]);
		fg_result_clear(&split[r]);
	}
	free(g->prefill);
	free(g);
	fg_engine_close(e4);
	fg_engine_close(e1);
	fg_engine_close(e22);
}
END_TEST

/* Text in, text out, for the checkpoints that ship a tokenizer (the Llama
 * one's tokenizer.json): fg_generate on each prompt text — tokenized, bos
 * prepended as the model's config says — completes it with Hugging Face's
 * greedy text, for the rows whose margins never fall below the tolerance. */
START_TEST(test_text)
{
	const struct model *m = &models[LLAMA_PY];
	struct fg_engine *e = open_engine(m, ROWS, 1);
	char path[4400];
	json_error_t err;

	snprintf(path, sizeof(path), "%s/golden.json", model_dir(m));
	json_t *root = json_load_file(path, 0, &err);
	ck_assert_msg(root, "%s: %s", path, err.text);
	json_t *prompts = json_object_get(root, "prompt_texts"), *texts = json_object_get(root, "greedy_texts");
	json_t *margin = json_object_get(root, "greedy_top1_top2_margin");
	ck_assert(json_array_size(prompts) == ROWS && json_array_size(texts) == ROWS);
	for (int r = 0; r < ROWS; r++) {
		double low = INFINITY;
		for (int t = 0; t < GEN; t++)
			low = fmin(low, json_number_value(json_array_get(json_array_get(margin, r), t)));
		if (low < TOL)
			continue; /* a near-tie: the texts may part */
		struct fg_request req = { .prompt = json_string_value(json_array_get(prompts, r)),
					  .max_new_tokens = GEN };
		struct fg_result res;
		ck_assert_msg(fg_generate(e, &req, 1, &res) == 0, "%s", fg_last_error_text());
		ck_assert_msg(res.finish_reason != FG_FINISH_ERROR, "row %d: %s", r, res.error);
		ck_assert_str_eq(res.text, json_string_value(json_array_get(texts, r)));
		fg_result_clear(&res);
	}
	json_decref(root);
	fg_engine_close(e);
}
END_TEST

/* Same seed, same tokens, whatever the batch; other seeds, other tokens. */
START_TEST(test_seeded_sampling)
{
	struct fg_engine *e = open_engine(&models[OPT_TINY_64], 2, 1);
	int32_t p1[] = { 2, 100, 200, 300 }, p2[] = { 2, 9, 8 };
	struct fg_request req[3] = {
		{ .prompt_ids = p1, .n_prompt_ids = 4, .max_new_tokens = 24, .temperature = 1.0f,
		  .top_k = 50, .top_p = 0.9f, .seed = 7 },
		{ .prompt_ids = p2, .n_prompt_ids = 3, .max_new_tokens = 24, .temperature = 1.0f,
		  .seed = 7 },
		{ .prompt_ids = p1, .n_prompt_ids = 4, .max_new_tokens = 24, .temperature = 1.0f,
		  .top_k = 50, .top_p = 0.9f, .seed = 8 },
	};
	struct fg_result a[3], b;

	ck_assert_int_eq(fg_generate(e, req, 3, a), 0);
	ck_assert_int_eq(fg_generate(e, &req[0], 1, &b), 0);
	ck_assert_mem_eq(a[0].token_ids, b.token_ids, 24 * sizeof(int32_t));
	ck_assert_msg(memcmp(a[0].token_ids, a[2].token_ids, 24 * sizeof(int32_t)),
		      "seeds 7 and 8 sampled the same 24 tokens");
	fg_result_clear(&b);
	/* top_k = 1 is greedy */
	struct fg_request gk = req[0], gg = req[0];
	gk.top_k = 1;
	gg.temperature = 0;
	ck_assert_int_eq(fg_generate(e, &gk, 1, &b), 0);
	fg_result_clear(&a[1]);
	ck_assert_int_eq(fg_generate(e, &gg, 1, &a[1]), 0);
	ck_assert_mem_eq(a[1].token_ids, b.token_ids, 24 * sizeof(int32_t));
	for (int i = 0; i < 3; i++)
		fg_result_clear(&a[i]);
	fg_result_clear(&b);
	fg_engine_close(e);
}
END_TEST

/* Stop ids end generation with "stop"; stop strings cut the text exactly. */
START_TEST(test_stops)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4300];
	struct golden *g = calloc(1, sizeof(*g));

	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s", model_dir(&models[OPT_TINY_64]));
	ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
	/* the tiny models ship no tokenizer; GPT-2's covers the ids they produce here */
	snprintf(kv, sizeof(kv), "model.tokenizer=%s/tokenizer/gpt2", getenv("FGCORE_TESTDATA"));
	ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	load_golden(&models[OPT_TINY_64], g, e->model.cfg.vocab);

	struct fg_request r = { .prompt_ids = g->ids, .n_prompt_ids = (size_t)g->plen,
				.max_new_tokens = GEN };
	struct fg_result full, cut;
	ck_assert_int_eq(fg_generate(e, &r, 1, &full), 0);
	ck_assert_int_gt(strlen(full.text), 8);

	/* stop at the 6th generated token's id */
	int32_t stop_id = full.token_ids[5];
	int first = 0;
	while (full.token_ids[first] != stop_id)
		first++;
	r.stop_ids = &stop_id;
	r.n_stop_ids = 1;
	ck_assert_int_eq(fg_generate(e, &r, 1, &cut), 0);
	ck_assert_int_eq(cut.finish_reason, FG_FINISH_STOP);
	ck_assert_int_eq(cut.n_tokens, first + 1);
	ck_assert_mem_eq(cut.token_ids, full.token_ids, (size_t)(first + 1) * sizeof(int32_t));
	fg_result_clear(&cut);

	/* a stop string from the middle of the text: the text ends right before it */
	size_t len = strlen(full.text);
	char stop[8];
	memcpy(stop, full.text + len / 2, 3);
	stop[3] = '\0';
	const char *hit = strstr(full.text, stop);
	const char *stops[] = { stop };
	r.stop_ids = NULL;
	r.n_stop_ids = 0;
	r.stop = stops;
	r.n_stop = 1;
	ck_assert_int_eq(fg_generate(e, &r, 1, &cut), 0);
	ck_assert_int_eq(cut.finish_reason, FG_FINISH_STOP);
	ck_assert_uint_eq(strlen(cut.text), (size_t)(hit - full.text));
	ck_assert(!strncmp(cut.text, full.text, (size_t)(hit - full.text)));
	ck_assert_int_le(cut.n_tokens, full.n_tokens);
	fg_result_clear(&cut);
	fg_result_clear(&full);
	free(g->prefill);
	free(g);
	fg_engine_close(e);
}
END_TEST

/* Requests the model cannot run get an error of their own; the rest run. */
START_TEST(test_refused_requests)
{
	struct fg_engine *e = open_engine(&models[OPT_TINY_64], 2, 1);
	int32_t ok[] = { 2, 5, 6 }, bad[] = { 2, 99999999 };
	struct fg_request req[3] = {
		{ .prompt_ids = ok, .n_prompt_ids = 3, .max_new_tokens = 4 },
		{ .prompt_ids = bad, .n_prompt_ids = 2, .max_new_tokens = 4 },
		{ .prompt_ids = ok, .n_prompt_ids = 3, .max_new_tokens = 4000 },
	};
	struct fg_result res[3];

	ck_assert_int_eq(fg_generate(e, req, 3, res), 0);
	ck_assert_int_eq(res[0].finish_reason, FG_FINISH_LENGTH);
	ck_assert_int_eq(res[0].n_tokens, 4);
	ck_assert_int_eq(res[1].finish_reason, FG_FINISH_ERROR);
	ck_assert_ptr_nonnull(strstr(res[1].error, "99999999"));
	ck_assert_int_eq(res[2].finish_reason, FG_FINISH_ERROR);
	ck_assert_ptr_nonnull(strstr(res[2].error, "positions"));
	/* a text prompt without a tokenizer is refused, not crashed on */
	struct fg_request text = { .prompt = "hello", .max_new_tokens = 2 };
	struct fg_result tr;
	ck_assert_int_eq(fg_generate(e, &text, 1, &tr), 0);
	ck_assert_int_eq(tr.finish_reason, FG_FINISH_ERROR);
	ck_assert_ptr_nonnull(strstr(tr.error, "tokenizer"));
	fg_result_clear(&tr);
	for (int i = 0; i < 3; i++)
		fg_result_clear(&res[i]);
	fg_engine_close(e);
}
END_TEST

/* Without FGCORE_TESTDATA, the in-tree models only. */
static Suite *golden_suite(int testdata)
{
	Suite *s = suite_create("golden");
	TCase *tc = tcase_create("hf");
	int first = testdata ? 0 : QWEN2_TINY;
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_reference, first, NMODELS);
	tcase_add_loop_test(tc, test_batch_independence, first, NMODELS);
	if (testdata) {
		tcase_add_test(tc, test_text);
		tcase_add_test(tc, test_seeded_sampling);
		tcase_add_test(tc, test_stops);
		tcase_add_test(tc, test_refused_requests);
	}
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	const char *b = getenv("FGCORE_TEST_BACKEND");
	if (b && *b && strcmp(b, "cpu_blas")) {
		gpu_backend = b;
		TOL = 5e-2;
		printf("backend %s: fp16 tolerance %g\n", b, TOL);
	}
	if (!td || !*td)
		printf("FGCORE_TESTDATA is not set: the in-tree models (%s) only\n",
		       "qwen2-tiny, mistral-window-tiny, qwen2-window-tiny, qwen2-moe-tiny, qwen3-moe-tiny, "
		       "qwen2-moe-wide-tiny, qwen3-moe-wide-tiny, "
		       "gemma2-tiny");
	SRunner *sr = srunner_create(golden_suite(td && *td));
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
