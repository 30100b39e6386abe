/* tests/test_compression.c - 4-bit weights and KV cache through the engine:
 *  - compressed runs agree with each other bit for bit whatever the placement;
 *  - the error against Hugging Face's fp32 reference is measured and printed
 *    (prefill-logit error, greedy agreement) — a report, not a tuned threshold;
 *  - OPT-175B with compress_weight accounts about 4.5/16 of its fp16 bytes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "core/engine/engine.h"
#include "core/engine/forward.h"
#include "core/arch/arch.h"
#include "core/plan/plan.h"

#define ROWS 4
#define PLEN 8
#define GEN 32

static char tmpdir[256] = "/var/tmp";

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
	for (int i = 0; extra && extra[i]; i++)
		set(c, extra[i]);
	return c;
}

/* Prefill logits [ROWS, vocab] and GEN greedy tokens of the golden prompts. */
static void run_golden(struct fg_config *c, const int32_t *ids, const int32_t *pad, float **logits,
		       int32_t tokens[ROWS][GEN])
{
	struct fg_engine *e;
	struct fg_forward_env env;
	struct fg_forward *f;
	int32_t top[ROWS];

	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	*logits = malloc(sizeof(float) * ROWS * (size_t)e->model.cfg.vocab);
	fg_engine_forward_env(e, 1, &env);
	ck_assert_msg(fg_forward_new(&f, &env, PLEN, GEN) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_forward_prefill(f, ids, pad, *logits, top) == 0, "%s", fg_last_error_text());
	for (int t = 0; t < GEN; t++) {
		for (int r = 0; r < ROWS; r++)
			tokens[r][t] = top[r];
		if (t + 1 < GEN)
			ck_assert_msg(fg_forward_decode(f, top, NULL, top) == 0, "%s", fg_last_error_text());
	}
	fg_forward_free(f);
	fg_engine_close(e);
}

static void load_prompts(const char *dir, int32_t ids[ROWS][PLEN], int32_t pad[ROWS],
			 int32_t greedy[ROWS][GEN], float **ref, int64_t vocab)
{
	char path[4400];
	json_error_t err;
	snprintf(path, sizeof(path), "%s/golden.json", dir);
	json_t *root = json_load_file(path, 0, &err);
	ck_assert_msg(root, "%s: %s", path, err.text);
	for (int r = 0; r < ROWS; r++) {
		pad[r] = 0;
		for (int i = 0; i < PLEN; i++) {
			ids[r][i] = (int32_t)json_integer_value(
				json_array_get(json_array_get(json_object_get(root, "input_ids"), r), i));
			pad[r] += !json_integer_value(json_array_get(
				json_array_get(json_object_get(root, "attention_mask"), r), i));
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

/* Error against the reference, reported. */
START_TEST(test_golden_error)
{
	const char *td = getenv("FGCORE_TESTDATA");
	static const char *models[] = { "opt-tiny-64x2", "opt-tiny-128x4" };
	char dir[4300];
	int32_t ids[ROWS][PLEN], pad[ROWS], greedy[ROWS][GEN], got[ROWS][GEN];
	float *ref, *lg;

	if (!td || !*td)
		return;
	snprintf(dir, sizeof(dir), "%s/opt/%s", td, models[_i / 3]);
	load_prompts(dir, ids, pad, greedy, &ref, 50272);
	struct fg_config *c = config(dir, modes[_i % 3]);
	run_golden(c, &ids[0][0], pad, &lg, got);
	double worst = 0;
	for (int i = 0; i < ROWS * 50272; i++)
		worst = fmax(worst, fabs((double)lg[i] - ref[i]));
	ck_assert(isfinite(worst));
	int agree = 0;
	for (int r = 0; r < ROWS; r++) {
		int t = 0;
		while (t < GEN && got[r][t] == greedy[r][t])
			t++;
		agree += t;
	}
	printf("%s, %s: prefill logits max |error| %.4f; greedy tokens agreeing before the first divergence: %d of %d\n",
	       models[_i / 3], mode_names[_i % 3], worst, agree, ROWS * GEN);
	free(ref);
	free(lg);
	fg_config_free(c);
}
END_TEST

/* Compressed runs agree bit for bit whatever the placement. */
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
	float *lw, *lg;

	snprintf(model, sizeof(model), td && *td ? "%s/opt/opt-tiny-128x4" : "dummy:opt-125m", td);
	struct fg_config *c = config(model, modes[2]);
	run_golden(c, &ids[0][0], pad, &lw, want);
	for (size_t p = 0; p < sizeof(placements) / sizeof(placements[0]); p++) {
		struct fg_config *cp = config(model, modes[2]);
		for (int i = 0; placements[p][i]; i++)
			set(cp, placements[p][i]);
		run_golden(cp, &ids[0][0], pad, &lg, got);
		printf("int4 weights + cache, %s%s%s: %s\n", placements[p][0],
		       placements[p][1] ? ", " : "", placements[p][1] ? placements[p][1] : "",
		       memcmp(want, got, sizeof(want)) ? "DIFFERENT" : "same tokens");
		ck_assert_msg(!memcmp(want, got, sizeof(want)), "%s: tokens differ", placements[p][0]);
		ck_assert_msg(!memcmp(lw, lg, sizeof(float) * ROWS * 50272),
			      "%s: prefill logits differ", placements[p][0]);
		free(lg);
		fg_config_free(cp);
	}
	free(lw);
	fg_config_free(c);
}
END_TEST

/* OPT-175B: compressed weight bytes against fp16 ones, from the placement. */
START_TEST(test_175b_bytes)
{
	struct fg_model_config c;
	struct fg_policy p = { .gpu_batch_size = 32, .num_gpu_batches = 1,
			       .weight = { 0, 0, 100 }, .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
			       .overlap = 1, .sep_layer = 1, .attn_sparsity = 1 };
	struct fg_plan_env le = { 2, 1 };
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
	Suite *s = suite_create("compression");
	TCase *tc = tcase_create("int4");
	tcase_set_timeout(tc, 900);
	tcase_add_loop_test(tc, test_golden_error, 0, 6);
	tcase_add_test(tc, test_placements_agree);
	tcase_add_test(tc, test_175b_bytes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
