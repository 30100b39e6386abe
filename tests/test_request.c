/* tests/test_request.c - the request layer (fg_run, fg_generate) on the
 * trained llama-py-128x4 (needs FGCORE_TESTDATA, else exit 77):
 *  - the bos rule: a tokenizer that says nothing (the family's default:
 *    bos), one whose template adds bos, one whose template adds none; in
 *    each, a text prompt gives exactly what its token ids give (the ids as
 *    Hugging Face's tokenizer for that folder encodes the text with special
 *    tokens);
 *  - fg_run hands every request's result back once, as fg_generate and the
 *    request alone give it, keeps one run across batches of one shape, and
 *    reports its progress;
 *  - no batch's longest prompt plus largest budget exceeds the model's
 *    positions (such a batch used to fail and be rerun one by one);
 *  - a refused request is marked as such; a stop flag stops before any batch. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "tests/test_tmpdir.h"

#define MODEL "llama/llama-py-128x4"
#define BOS 8191

static const char *td;

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

/* The model with a tokenizer (NULL: its own), batches of bs x nb, and one
 * more setting (NULL: none). */
static struct fg_engine *open_engine_with(const char *tokenizer, int bs, int nb, const char *more)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4400];

	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s/%s", td, MODEL);
	set(c, kv);
	if (tokenizer) {
		snprintf(kv, sizeof(kv), "model.tokenizer=%s", tokenizer);
		set(c, kv);
	}
	snprintf(kv, sizeof(kv), "policy.gpu_batch_size=%d", bs);
	set(c, kv);
	snprintf(kv, sizeof(kv), "policy.num_gpu_batches=%d", nb);
	set(c, kv);
	if (more)
		set(c, more);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	return e;
}

static struct fg_engine *open_engine(const char *tokenizer, int bs, int nb)
{
	return open_engine_with(tokenizer, bs, nb, NULL);
}

/* The model's tokenizer.json with post_processor replaced, in dir. */
static void write_tokenizer(const char *dir, json_t *post)
{
	char in[4400], out[4400];
	json_error_t err;

	snprintf(in, sizeof(in), "%s/%s/tokenizer.json", td, MODEL);
	json_t *t = json_load_file(in, 0, &err);
	ck_assert_msg(t != NULL, "%s: %s", in, err.text);
	ck_assert_int_eq(json_object_set_new(t, "post_processor", post), 0);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(out, sizeof(out), "%s/tokenizer.json", dir);
	ck_assert_int_eq(json_dump_file(t, out, 0), 0);
	json_decref(t);
}

/* A TemplateProcessing whose single sequence is [bos] A, or A alone. */
static json_t *template(int with_bos)
{
	json_t *single = json_array();

	if (with_bos)
		json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id",
							"<|endoftext|>", "type_id", 0));
	json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A",
						"type_id", 0));
	return json_pack("{s:s, s:o, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}",
			 "type", "TemplateProcessing", "single", single, "pair", "Sequence", "id",
			 "A", "type_id", 0, "Sequence", "id", "B", "type_id", 1, "special_tokens",
			 "<|endoftext|>", "id", "<|endoftext|>", "ids", BOS, "tokens",
			 "<|endoftext|>");
}

static const char *const prompts[] = { "def main(args):\n    return", "import os\nimport",
				       "class Tree:\n    def __init__(self" };
#define NP (int)(sizeof(prompts) / sizeof(prompts[0]))

/* 0: the model's own tokenizer (says nothing); 1: a template adding bos;
 * 2: a template adding none. */
START_TEST(test_bos_rule)
{
	char dir[300];
	struct fg_engine *e;
	struct fg_model_info mi;

	tmp_make("fgcore_request");
	if (_i == 0) {
		e = open_engine(NULL, 4, 1);
	} else {
		snprintf(dir, sizeof(dir), "%s/tok", tmp_root);
		write_tokenizer(dir, _i == 1 ? template(1) : json_pack("{s:s, s:[{s:{s:s, s:i}}], s:[], s:{}}",
			"type", "TemplateProcessing", "single", "Sequence", "id", "A", "type_id", 0,
			"pair", "special_tokens"));
		e = open_engine(dir, 4, 1);
	}
	ck_assert_int_eq(fg_engine_info(e, &mi), 0);
	ck_assert_int_eq(mi.text_bos, _i == 2 ? -1 : BOS);
	for (int p = 0; p < NP; p++) {
		struct fg_request rt = { .prompt = prompts[p], .max_new_tokens = 8 };
		struct fg_request ri = { .max_new_tokens = 8 };
		struct fg_result a, b;
		int32_t *ids, *with;
		size_t n, lead = _i == 2 ? 0 : 1;

		ck_assert_int_eq(fg_tokenize(e, prompts[p], &ids, &n), 0);
		with = malloc((n + 1) * sizeof(*with));
		ck_assert_ptr_nonnull(with);
		with[0] = BOS;
		memcpy(with + lead, ids, n * sizeof(*ids));
		ri.prompt_ids = with;
		ri.n_prompt_ids = n + lead;
		ck_assert_msg(fg_generate(e, &rt, 1, &a) == 0, "%s", fg_last_error_text());
		ck_assert_msg(fg_generate(e, &ri, 1, &b) == 0, "%s", fg_last_error_text());
		ck_assert_uint_eq(a.n_prompt_tokens, n + lead);
		ck_assert_mem_eq(a.prompt_ids, with, (n + lead) * sizeof(int32_t));
		ck_assert_uint_eq(a.n_tokens, b.n_tokens);
		ck_assert_mem_eq(a.token_ids, b.token_ids, a.n_tokens * sizeof(int32_t));
		ck_assert_str_eq(a.text, b.text);
		fg_result_clear(&a);
		fg_result_clear(&b);
		free(ids);
		free(with);
	}
	fg_engine_close(e);
	tmp_teardown();
}
END_TEST

struct seen {
	struct fg_result *res;
	int *count;
	size_t n, batches;
	struct fg_run_progress last;
};

static int on_result(void *arg, size_t index, struct fg_result *res)
{
	struct seen *s = arg;

	ck_assert_uint_lt(index, s->n);
	ck_assert_int_eq(s->count[index]++, 0);
	s->res[index] = *res;
	return 0;
}

static int on_batch_end(void *arg, const struct fg_run_progress *p)
{
	struct seen *s = arg;

	ck_assert_uint_ge(p->work_done, s->last.work_done);
	s->last = *p;
	s->batches++;
	return 0;
}

/* Eight requests, three lengths, greedy and sampled, in batches of 2 (no
 * request joins a running batch: [policy] refill 0). */
START_TEST(test_run_results)
{
	enum { N = 8 };
	struct fg_engine *e = open_engine_with(NULL, 2, 1, "policy.refill=0");
	struct fg_request req[N];
	struct fg_result got[N], all[N], alone;
	int count[N] = { 0 };
	struct seen s = { got, count, N, 0, { 0 } };
	struct fg_run_opts o = { .on_result = on_result, .on_batch_end = on_batch_end, .arg = &s };
	struct fg_run_stats st0, st1;

	memset(req, 0, sizeof(req));
	for (int i = 0; i < N; i++) {
		req[i].prompt = prompts[i % NP];
		req[i].max_new_tokens = 6;
		req[i].temperature = i % 3 == 0 ? 0.8f : 0;
		req[i].seed = (uint64_t)i;
	}
	fg_engine_stats(e, &st0);
	ck_assert_int_eq(fg_run(e, req, N, &o), N);
	fg_engine_stats(e, &st1);
	ck_assert_uint_eq(s.last.requests_done, N);
	ck_assert_uint_eq(s.last.work_done, s.last.work_total);
	ck_assert_uint_eq(st1.requests - st0.requests, N);
	ck_assert_uint_eq(st1.batches - st0.batches, s.batches);
	/* batches of 2 rows, each of one prompt length (one bucket): one run for
	 * each prompt length at most, never one a batch */
	ck_assert_uint_ge(s.batches, 4);
	ck_assert_uint_lt(st1.runs - st0.runs, st1.batches - st0.batches);
	ck_assert_uint_eq(st1.positions - st0.positions,
			  st1.useful_positions - st0.useful_positions + st1.dead_positions -
				  st0.dead_positions + st1.padding_positions - st0.padding_positions);
	ck_assert_msg(fg_generate(e, req, N, all) == 0, "%s", fg_last_error_text());
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(count[i], 1);
		ck_assert_msg(fg_generate(e, &req[i], 1, &alone) == 0, "%s", fg_last_error_text());
		ck_assert_uint_eq(got[i].n_tokens, 6);
		ck_assert_mem_eq(got[i].token_ids, all[i].token_ids, 6 * sizeof(int32_t));
		ck_assert_mem_eq(got[i].token_ids, alone.token_ids, 6 * sizeof(int32_t));
		fg_result_clear(&got[i]);
		fg_result_clear(&all[i]);
		fg_result_clear(&alone);
	}
	fg_engine_close(e);
}
END_TEST

/* A 1000-token prompt with 4 new tokens and a short one with 100 would make
 * a batch of 1100 positions over the model's 1024: they run apart, no batch
 * fails. */
START_TEST(test_positions_limit)
{
	struct fg_engine *e = open_engine(NULL, 2, 1);
	static int32_t longp[1000], shortp[10];
	struct fg_request req[2] = { { .prompt_ids = longp, .n_prompt_ids = 1000, .max_new_tokens = 4 },
				     { .prompt_ids = shortp, .n_prompt_ids = 10, .max_new_tokens = 100 } };
	struct fg_result res[2];
	struct fg_run_stats st0, st1;
	struct fg_model_info mi;

	fg_engine_info(e, &mi);
	ck_assert_int_eq(mi.max_positions, 1024);
	for (int i = 0; i < 1000; i++)
		longp[i] = i ? 100 + i % 7000 : BOS;
	for (int i = 0; i < 10; i++)
		shortp[i] = i ? 300 + i : BOS;
	fg_engine_stats(e, &st0);
	ck_assert_msg(fg_generate(e, req, 2, res) == 0, "%s", fg_last_error_text());
	fg_engine_stats(e, &st1);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(res[i].finish_reason == FG_FINISH_LENGTH, "%s", res[i].error);
		fg_result_clear(&res[i]);
	}
	ck_assert_uint_eq(st1.batches - st0.batches, 2);
	ck_assert_uint_eq(st1.retried_batches - st0.retried_batches, 0);
	fg_engine_close(e);
}
END_TEST

static int keep(void *arg, size_t index, struct fg_result *res)
{
	struct fg_result *all = arg;

	all[index] = *res;
	return 0;
}

/* A refused request is answered at once and marked refused; a stop flag
 * already raised runs nothing else. */
START_TEST(test_refused_and_stop)
{
	struct fg_engine *e = open_engine(NULL, 2, 1);
	int32_t bad[2] = { BOS, 9000 }, good[2] = { BOS, 400 };
	struct fg_request req[2] = { { .prompt_ids = bad, .n_prompt_ids = 2, .max_new_tokens = 2 },
				     { .prompt_ids = good, .n_prompt_ids = 2, .max_new_tokens = 2 } };
	struct fg_result res[2];
	volatile sig_atomic_t stop = 1;
	struct fg_run_opts o = { .on_result = keep, .arg = res, .stop = &stop };

	memset(res, 0, sizeof(res));
	ck_assert_int_eq(fg_run(e, req, 2, &o), 1);
	ck_assert_int_eq(res[0].finish_reason, FG_FINISH_ERROR);
	ck_assert_int_eq(res[0].refused, 1);
	ck_assert_msg(strstr(res[0].error, "9000"), "%s", res[0].error);
	ck_assert_ptr_null(res[1].token_ids);
	fg_result_clear(&res[0]);
	stop = 0;
	ck_assert_int_eq(fg_run(e, req + 1, 1, &o), 1);
	ck_assert_int_eq(res[0].finish_reason, FG_FINISH_LENGTH);
	ck_assert_uint_eq(res[0].n_tokens, 2);
	fg_result_clear(&res[0]);
	o.on_result = NULL;
	ck_assert_int_eq(fg_run(e, req, 2, &o), -EINVAL);
	fg_engine_close(e);
}
END_TEST

/* keep_run: a second call's batches of the same shape use the run the
 * first left in the engine; fg_generate takes it and frees it. */
START_TEST(test_keep_run)
{
	struct fg_engine *e = open_engine(NULL, 2, 1);
	int32_t ids[2][3] = { { BOS, 500, 600 }, { BOS, 501, 601 } };
	struct fg_request req[2] = { { .prompt_ids = ids[0], .n_prompt_ids = 3, .max_new_tokens = 3 },
				     { .prompt_ids = ids[1], .n_prompt_ids = 3, .max_new_tokens = 3 } };
	struct fg_result res[2], again[2];
	struct fg_run_opts o = { .on_result = keep, .arg = res, .keep_run = 1 };
	struct fg_run_stats s0, s1, s2, s3;

	fg_engine_stats(e, &s0);
	ck_assert_int_eq(fg_run(e, req, 2, &o), 2);
	fg_engine_stats(e, &s1);
	o.arg = again;
	ck_assert_int_eq(fg_run(e, req, 2, &o), 2);
	fg_engine_stats(e, &s2);
	ck_assert_uint_eq(s1.runs - s0.runs, 1);
	ck_assert_uint_eq(s2.runs - s1.runs, 0);
	ck_assert_uint_eq(s2.batches - s1.batches, 1);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(res[i].n_tokens, 3);
		ck_assert_mem_eq(res[i].token_ids, again[i].token_ids, 3 * sizeof(int32_t));
		fg_result_clear(&res[i]);
		fg_result_clear(&again[i]);
	}
	ck_assert_msg(fg_generate(e, req, 2, res) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_generate(e, req, 2, again) == 0, "%s", fg_last_error_text());
	fg_engine_stats(e, &s3);
	/* the kept run served the first fg_generate, which freed it */
	ck_assert_uint_eq(s3.runs - s2.runs, 1);
	for (int i = 0; i < 2; i++) {
		fg_result_clear(&res[i]);
		fg_result_clear(&again[i]);
	}
	fg_engine_close(e);
}
END_TEST

/* What a run moved, per tier: weights on the host and the disk, the cache
 * and activations on the host, all through the compute tier's slots; the
 * per-tier counts add up to the per-kind ones. */
START_TEST(test_bytes_per_tier)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4400];
	int32_t ids[4] = { BOS, 500, 600, 700 };
	struct fg_request req = { .prompt_ids = ids, .n_prompt_ids = 4, .max_new_tokens = 4 };
	struct fg_result res;
	struct fg_run_stats a, b;

	tmp_make("fgcore_request");
	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s/%s", td, MODEL);
	set(c, kv);
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmp_root);
	set(c, kv);
	set(c, "policy.percent=0 50 0 100 0 100");
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	fg_engine_stats(e, &a);
	ck_assert_msg(fg_generate(e, &req, 1, &res) == 0, "%s", fg_last_error_text());
	fg_result_clear(&res);
	fg_engine_stats(e, &b);
	uint64_t rd = 0, wr = 0;
	for (int t = 0; t < 3; t++) {
		rd += b.read_bytes[t] - a.read_bytes[t];
		wr += b.written_bytes[t] - a.written_bytes[t];
		printf("tier %d: read %llu, written %llu\n", t,
		       (unsigned long long)(b.read_bytes[t] - a.read_bytes[t]),
		       (unsigned long long)(b.written_bytes[t] - a.written_bytes[t]));
	}
	uint64_t kinds = (b.weight_bytes - a.weight_bytes) + (b.cache_bytes - a.cache_bytes) +
			 (b.hidden_bytes - a.hidden_bytes);
	printf("kinds: weights %llu, cache %llu, activations %llu\n",
	       (unsigned long long)(b.weight_bytes - a.weight_bytes),
	       (unsigned long long)(b.cache_bytes - a.cache_bytes),
	       (unsigned long long)(b.hidden_bytes - a.hidden_bytes));
	ck_assert_uint_gt(b.read_bytes[1] - a.read_bytes[1], 0); /* host: weights, cache */
	ck_assert_uint_gt(b.read_bytes[2] - a.read_bytes[2], 0); /* disk: weights */
	ck_assert_uint_gt(b.written_bytes[1] - a.written_bytes[1], 0); /* host: cache */
	ck_assert_uint_eq(b.read_bytes[0] - a.read_bytes[0], 0);
	ck_assert_uint_eq(rd + wr, kinds);
	fg_engine_close(e);
	tmp_teardown();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("request");
	TCase *tc = tcase_create("request");

	td = getenv("FGCORE_TESTDATA");
	if (!td || !*td) {
		printf("FGCORE_TESTDATA is not set: the request layer's cases are skipped\n");
		return 77;
	}
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_bos_rule, 0, 3);
	tcase_add_test(tc, test_run_results);
	tcase_add_test(tc, test_positions_limit);
	tcase_add_test(tc, test_refused_and_stop);
	tcase_add_test(tc, test_bytes_per_tier);
	tcase_add_test(tc, test_keep_run);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
