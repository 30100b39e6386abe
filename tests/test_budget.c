/* tests/test_budget.c - memory is refused before it is taken:
 *   - bench checks its measured run against the tiers before its warm-up
 *     (the tiers' peaks prove that no run buffer, so no warm-up, was made);
 *   - the host's copies of the logits (gpu_batch_size x vocab) are in the
 *     plan and come from the host tier, so a host tier too small for them
 *     refuses with the largest batch that fits (checked against a count
 *     written here), and generate sizes its batch to the requests (one
 *     prompt with gpu_batch_size 16384 runs a batch of 1: the tiers' peaks
 *     are exactly that batch's plan, the tokens those of a batch-1 engine);
 *   - host-memory tiers share one budget, the smallest physical size their
 *     plugins report (storage_skeleton's max_bytes fakes it here): weights or
 *     run buffers whose shares fit each tier but not both together are
 *     refused in one line naming both tiers; a split that fits runs and
 *     gives the tokens of the all-on-pinned_host run. */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/config/config.h"
#include "core/engine/bench.h"
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "core/util/error.h"

#define MiB (1024ull * 1024)

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

/* The skeleton plugins too (storage_skeleton: host memory of a given size). */
static void use_skeletons(void)
{
	const char *b = getenv("FGCORE_BUILDDIR"), *old = getenv("FGCORE_PLUGIN_PATH");
	static char path[4 * PATH_MAX];

	snprintf(path, sizeof(path), "%s/plugins/skeleton/.libs:%s", b && *b ? b : ".",
		 old ? old : "");
	ck_assert_int_eq(setenv("FGCORE_PLUGIN_PATH", path, 1), 0);
}

static struct fg_config *cpu_config(void)
{
	struct fg_config *c;

	use_skeletons();
	ck_assert_int_eq(fg_config_new(&c), 0);
	set(c, "model.path=dummy:opt-125m");
	set(c, "compute.plugin=cpu_blas");
	set(c, "tier.compute.plugin=pinned_host");
	set(c, "tier.host.plugin=pinned_host");
	set(c, "policy.percent=100 0 100 0 100 0");
	return c;
}

static struct fg_engine *open_ok(struct fg_config *c)
{
	struct fg_engine *e = NULL;
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	return e;
}

/* "... the largest gpu_batch_size that fits is N ..." -> N */
static long long advised(const char *msg)
{
	const char *k = "the largest gpu_batch_size that fits is ";
	const char *p = strstr(msg, k);
	ck_assert_msg(p != NULL, "no advice in: %s", msg);
	return strtoll(p + strlen(k), NULL, 10);
}

static int check_bs(struct fg_engine *e, int64_t bs, int64_t nb, int64_t plen, int64_t glen)
{
	struct fg_forward_env env;
	fg_engine_forward_env(e, nb, &env);
	env.policy.gpu_batch_size = bs;
	return fg_forward_check(&env, plen, glen);
}

static uint64_t align64(uint64_t x)
{
	return (x + 63) / 64 * 64;
}

/* ---- bench: the check before the warm-up --------------------------------- */

START_TEST(test_bench_refused_before_warmup)
{
	struct fg_config *c = cpu_config();
	set(c, "tier.compute.capacity=600M");
	set(c, "policy.gpu_batch_size=32");
	struct fg_engine *e = open_ok(c);
	struct fg_bench_params p = { .prompt_len = 512, .gen_len = 8, .warmup = 1 };
	struct fg_bench_result r;
	uint64_t weights[FG_ROLES];

	for (int i = 0; i < FG_ROLES; i++)
		weights[i] = e->tier[i] ? e->tier[i]->peak : 0;
	/* The warm-up alone (32 tokens, one step) would fit: an engine that ran
	 * it first would have allocated its buffers before refusing. */
	ck_assert_msg(check_bs(e, 32, 1, 32, 1) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(fg_bench_run(e, &p, &r), -ENOSPC);
	const char *msg = fg_last_error_text();
	printf("bench refusal: %s\n", msg);
	ck_assert_msg(strstr(msg, "tier compute (pinned_host)") && strstr(msg, "512 + 8 tokens") &&
			      !strchr(msg, '\n'),
		      "%s", msg);
	long long fit = advised(msg);
	/* Nothing ran: no tier ever held more than the weights, no stats, nothing placed. */
	for (int i = 0; i < FG_ROLES; i++) {
		if (e->tier[i])
			ck_assert_uint_eq(e->tier[i]->peak, weights[i]);
		ck_assert_uint_eq(r.placed[i], 0);
	}
	ck_assert(r.stats.compute_s == 0 && r.stats.weight_bytes == 0 && r.prefill_s == 0);
	/* The advice is exact: that batch passes the check, one more does not. */
	ck_assert_int_gt(fit, 0);
	ck_assert_int_lt(fit, 32);
	ck_assert_msg(check_bs(e, fit, 1, 512, 8) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(check_bs(e, fit + 1, 1, 512, 8), -ENOSPC);
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* ---- the host's logits buffers -------------------------------------------- */

/* With everything on the compute tier, a CPU run's host tier holds only the
 * logits for a host argmax (bs x vocab floats; cpu_blas computes in f32, so
 * no f16 copy) and the positions (bs x prompt_len int32). */
static uint64_t host_bytes(int64_t bs, int64_t vocab, int64_t plen)
{
	return align64((uint64_t)(bs * vocab) * 4) + align64((uint64_t)(bs * plen) * 4);
}

START_TEST(test_host_logits_accounted)
{
	struct fg_config *c = cpu_config();
	set(c, "tier.host.capacity=8M");
	set(c, "policy.gpu_batch_size=64");
	struct fg_engine *e = open_ok(c);
	int64_t V = e->model.cfg.vocab, plen = 16, glen = 4;
	struct fg_plan_env pe = { 4, 0, 4, 0, 0 };
	struct fg_plan pl;

	ck_assert_int_eq(fg_plan_make(&e->model.cfg, &e->policy, &pe, plen, glen, &pl), 0);
	ck_assert_uint_eq(pl.run[FG_ROLE_HOST], host_bytes(64, V, plen));
	ck_assert_uint_eq(e->tier[FG_ROLE_HOST]->used, 0);

	ck_assert_int_eq(check_bs(e, 64, 1, plen, glen), -ENOSPC);
	const char *msg = fg_last_error_text();
	printf("host logits refusal: %s\n", msg);
	ck_assert_msg(strstr(msg, "tier host (pinned_host)") && strstr(msg, "8.00 MiB are free"),
		      "%s", msg);
	long long want = 0;
	while (host_bytes(want + 1, V, plen) <= 8 * MiB)
		want++;
	ck_assert_int_eq(advised(msg), want);

	/* At that batch the forward's host bytes are the plan's, on the host tier. */
	struct fg_forward_env env;
	struct fg_forward *f;
	uint64_t run[FG_ROLES];
	fg_engine_forward_env(e, 1, &env);
	env.policy.gpu_batch_size = want;
	ck_assert_msg(fg_forward_new(&f, &env, plen, glen) == 0, "%s", fg_last_error_text());
	fg_forward_bytes(f, run);
	ck_assert_uint_eq(run[FG_ROLE_HOST], host_bytes(want, V, plen));
	ck_assert_uint_eq(e->tier[FG_ROLE_HOST]->used, host_bytes(want, V, plen));
	fg_forward_free(f);
	ck_assert_uint_eq(e->tier[FG_ROLE_HOST]->used, 0);
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* Peaks of a run that held exactly a bs x nb batch of plen + glen tokens
 * (plus `extra` host bytes) above the weights. */
static void assert_run_was(struct fg_engine *e, const uint64_t w[FG_ROLES], int64_t bs, int64_t nb,
			   int64_t plen, int64_t glen, uint64_t extra)
{
	struct fg_policy q = e->policy;
	struct fg_plan_env pe = { 4, 0, 4, 0, 0 };
	struct fg_plan pl;
	q.gpu_batch_size = bs;
	q.num_gpu_batches = nb;
	ck_assert_int_eq(fg_plan_make(&e->model.cfg, &q, &pe, plen, glen, &pl), 0);
	ck_assert_uint_eq(e->tier[FG_ROLE_COMPUTE]->peak, w[FG_ROLE_COMPUTE] + pl.run[FG_ROLE_COMPUTE]);
	ck_assert_uint_eq(e->tier[FG_ROLE_HOST]->peak, w[FG_ROLE_HOST] + pl.run[FG_ROLE_HOST] + extra);
}

static void reset_peaks(struct fg_engine *e, uint64_t w[FG_ROLES])
{
	for (int r = 0; r < FG_ROLES; r++)
		if (e->tier[r])
			w[r] = e->tier[r]->peak = e->tier[r]->used;
}

/* One 2-token prompt with gpu_batch_size 16384 runs a batch of 1 within a
 * 64 MiB host tier (the 16384-row logits alone would take 3 GiB), greedy
 * and sampled, with the tokens of a gpu_batch_size = 1 engine. */
START_TEST(test_batch_sized_to_requests)
{
	struct fg_config *c = cpu_config(), *c1 = cpu_config();
	set(c, "tier.host.capacity=64M");
	set(c, "policy.gpu_batch_size=16384");
	set(c1, "policy.gpu_batch_size=1");
	struct fg_engine *e = open_ok(c), *e1 = open_ok(c1);
	int64_t V = e->model.cfg.vocab;
	int32_t prompt[2] = { 2, 3000 };
	uint64_t w[FG_ROLES];

	ck_assert_int_eq(check_bs(e, 16384, 1, 2, 6), -ENOSPC);
	for (int sampled = 0; sampled <= 1; sampled++) {
		struct fg_request req = { .prompt_ids = prompt, .n_prompt_ids = 2,
					  .max_new_tokens = 6, .seed = 5 };
		struct fg_result a, b;
		if (sampled) {
			req.temperature = 1.0f;
			req.top_k = 40;
		}
		reset_peaks(e, w);
		ck_assert_msg(fg_generate(e, &req, 1, &a) == 0, "%s", fg_last_error_text());
		ck_assert_int_eq(a.finish_reason, FG_FINISH_LENGTH);
		/* The sampled run also held one row of float logits for sampling. */
		assert_run_was(e, w, 1, 1, 2, 6, sampled ? (uint64_t)V * 4 : 0);
		ck_assert_uint_eq(e->tier[FG_ROLE_HOST]->used, w[FG_ROLE_HOST]);
		ck_assert_msg(fg_generate(e1, &req, 1, &b) == 0, "%s", fg_last_error_text());
		ck_assert_int_eq(a.n_tokens, 6);
		ck_assert_int_eq(b.n_tokens, 6);
		ck_assert_mem_eq(a.token_ids, b.token_ids, 6 * sizeof(int32_t));
		fg_result_clear(&a);
		fg_result_clear(&b);
	}
	fg_engine_close(e);
	fg_engine_close(e1);
	fg_config_free(c);
	fg_config_free(c1);
}
END_TEST

/* Five requests with a policy of 2 x 4 run as 2 x 3 rows, each with the
 * tokens it has alone. */
START_TEST(test_batch_shrinks_per_gpu_batch)
{
	struct fg_config *c = cpu_config(), *c1 = cpu_config();
	set(c, "policy.gpu_batch_size=4");
	set(c, "policy.num_gpu_batches=2");
	set(c1, "policy.gpu_batch_size=1");
	struct fg_engine *e = open_ok(c), *e1 = open_ok(c1);
	int32_t ids[5][4] = { { 2, 10, 20, 30 }, { 2, 11 }, { 2, 12, 22 }, { 2, 13, 23, 33 }, { 2, 14 } };
	size_t n[5] = { 4, 2, 3, 4, 2 };
	struct fg_request req[5];
	struct fg_result res[5], alone;
	uint64_t w[FG_ROLES];

	memset(req, 0, sizeof(req));
	for (int i = 0; i < 5; i++)
		req[i] = (struct fg_request){ .prompt_ids = ids[i], .n_prompt_ids = n[i],
					      .max_new_tokens = 4 };
	reset_peaks(e, w);
	ck_assert_msg(fg_generate(e, req, 5, res) == 0, "%s", fg_last_error_text());
	assert_run_was(e, w, 3, 2, 4, 4, 0);
	for (int i = 0; i < 5; i++) {
		ck_assert_msg(fg_generate(e1, &req[i], 1, &alone) == 0, "%s", fg_last_error_text());
		ck_assert_int_eq(res[i].n_tokens, 4);
		ck_assert_mem_eq(res[i].token_ids, alone.token_ids, 4 * sizeof(int32_t));
		fg_result_clear(&alone);
		fg_result_clear(&res[i]);
	}
	fg_engine_close(e);
	fg_engine_close(e1);
	fg_config_free(c);
	fg_config_free(c1);
}
END_TEST

/* ---- host-memory tiers share one budget ----------------------------------- */

static struct fg_config *skeleton_config(const char *max_bytes)
{
	struct fg_config *c = cpu_config();
	char kv[96];
	set(c, "tier.compute.plugin=storage_skeleton");
	set(c, "tier.host.plugin=storage_skeleton");
	snprintf(kv, sizeof(kv), "tier.compute.max_bytes=%s", max_bytes);
	set(c, kv);
	snprintf(kv, sizeof(kv), "tier.host.max_bytes=%s", max_bytes);
	set(c, kv);
	return c;
}

static void open_tier(const struct fg_config *c, const char *role, struct fg_tier *t)
{
	struct fg_plugin_handle ph;
	void *opts;
	char section[32];
	snprintf(section, sizeof(section), "tier.%s", role);
	ck_assert_msg(fg_config_open_plugin(c, section, FG_PLUGIN_STORAGE, &ph, &opts) == 0, "%s",
		      fg_last_error_text());
	ck_assert_msg(fg_tier_open(t, role, &ph, opts, 0) == 0, "%s", fg_last_error_text());
}

/* The tiers' accounting: each allocation checks its own tier and the budget. */
START_TEST(test_budget_accounting)
{
	struct fg_config *c = skeleton_config("1M");
	struct fg_tier comp, host;
	struct fg_tier_budget b;
	struct fg_region x, y;

	set(c, "tier.host.max_bytes=3M"); /* the smaller report is the budget */
	open_tier(c, "compute", &comp);
	open_tier(c, "host", &host);
	struct fg_tier *ts[3] = { NULL, &host, &comp };
	ck_assert_int_eq(fg_tier_budget_init(&b, ts, 3), 2);
	ck_assert_uint_eq(b.capacity, 1 * MiB);
	ck_assert_ptr_eq(comp.budget, &b);
	ck_assert_uint_eq(fg_tier_room(&host), 1 * MiB);

	ck_assert_int_eq(fg_tier_alloc(&comp, 600 * 1024, &x), 0);
	ck_assert_uint_eq(fg_tier_room(&host), 424 * 1024);
	ck_assert_int_eq(fg_tier_alloc(&host, 600 * 1024, &y), -ENOSPC);
	ck_assert_str_eq(fg_last_error(),
			 "tiers host (storage_skeleton) and compute (storage_skeleton) share one host "
			 "memory of 1.00 MiB: cannot allocate 600.00 KiB on tier host: 424.00 KiB free "
			 "(in use: host 0 B, compute 600.00 KiB); give these tiers smaller shares "
			 "together ([policy] percent: the disk tier takes the rest)");
	ck_assert_uint_eq(host.used, 0);
	ck_assert_uint_eq(b.used, 600 * 1024);
	ck_assert_int_eq(fg_tier_alloc(&host, 424 * 1024, &y), 0);
	ck_assert_uint_eq(b.used, 1 * MiB);
	fg_tier_free(&comp, &x);
	ck_assert_uint_eq(b.used, 424 * 1024);
	ck_assert_int_eq(fg_tier_alloc(&host, 600 * 1024, &x), 0);
	fg_tier_free(&host, &x);
	fg_tier_free(&host, &y);
	ck_assert_uint_eq(b.used, 0);
	ck_assert_uint_eq(b.peak, 1 * MiB);
	fg_tier_budget_fini(&b);
	ck_assert_ptr_null(comp.budget);
	/* One host-memory tier alone has no budget to share. */
	struct fg_tier *one[3] = { NULL, &host, NULL };
	ck_assert_int_eq(fg_tier_budget_init(&b, one, 3), 0);
	ck_assert_ptr_null(host.budget);
	fg_tier_close(&comp);
	fg_tier_close(&host);
	fg_config_free(c);
}
END_TEST

/* OPT-125M's ~240 MiB of weights split 50/50 fit each 200 MiB tier but not
 * the 200 MiB of memory both are. */
START_TEST(test_budget_refuses_weights)
{
	struct fg_config *c = skeleton_config("200M");
	struct fg_engine *e = NULL;
	set(c, "policy.percent=50 50 100 0 100 0");
	ck_assert_int_eq(fg_engine_open(c, &e), -ENOSPC);
	const char *msg = fg_last_error_text();
	printf("weights refusal: %s\n", msg);
	ck_assert_msg(strstr(msg, "tiers compute (storage_skeleton) and host (storage_skeleton) share one host memory of 200.00 MiB") &&
			      strstr(msg, "percent") && !strchr(msg, '\n'),
		      "%s", msg);
	fg_config_free(c);
}
END_TEST

/* Weights fit the 1 GiB both tiers share; a batch whose run buffers fit
 * each tier's own room but not what is left of the memory is refused in one
 * line naming both tiers, with the largest batch that fits; that batch runs,
 * with the tokens of the same split on pinned_host. */
START_TEST(test_budget_refuses_run_and_runs_a_fit)
{
	struct fg_config *c = skeleton_config("1G"), *ref = cpu_config();
	set(c, "policy.percent=50 50 50 50 50 50");
	set(c, "policy.gpu_batch_size=2");
	set(c, "policy.num_gpu_batches=2");
	set(ref, "policy.percent=50 50 50 50 50 50");
	set(ref, "policy.gpu_batch_size=2");
	set(ref, "policy.num_gpu_batches=2");
	struct fg_engine *e = open_ok(c), *er = open_ok(ref);
	struct fg_tier_budget *b = &e->host_mem;
	ck_assert_int_eq(b->n, 2);
	ck_assert_uint_eq(b->capacity, 1024 * MiB);
	uint64_t room = b->capacity - b->used;
	int64_t plen = 512, glen = 8, bs = 0;
	struct fg_policy q = e->policy;
	struct fg_plan_env pe = { 4, 0, 4, 0, 0 };
	struct fg_plan pl;
	/* The case this test is about: a batch whose run buffers fit on each
	 * tier alone but not on both together. */
	for (int64_t t = 1; t <= 256 && !bs; t++) {
		q.gpu_batch_size = t;
		ck_assert_int_eq(fg_plan_make(&e->model.cfg, &q, &pe, plen, glen, &pl), 0);
		if (pl.run[FG_ROLE_COMPUTE] <= room && pl.run[FG_ROLE_HOST] <= room &&
		    pl.run[FG_ROLE_COMPUTE] + pl.run[FG_ROLE_HOST] > room)
			bs = t;
	}
	ck_assert_int_gt(bs, 1);
	printf("batch %lld: compute %llu + host %llu bytes, %llu free in the shared memory\n",
	       (long long)bs, (unsigned long long)pl.run[FG_ROLE_COMPUTE],
	       (unsigned long long)pl.run[FG_ROLE_HOST], (unsigned long long)room);

	ck_assert_int_eq(check_bs(e, bs, 2, plen, glen), -ENOSPC);
	const char *msg = fg_last_error_text();
	printf("run refusal: %s\n", msg);
	char what[96];
	snprintf(what, sizeof(what), "2 x %lld batch of %lld + %lld tokens", (long long)bs,
		 (long long)plen, (long long)glen);
	ck_assert_msg(strstr(msg, "tiers compute (storage_skeleton) and host (storage_skeleton) share one host memory") &&
			      strstr(msg, what) && !strchr(msg, '\n'),
		      "%s", msg);
	long long fit = advised(msg);
	ck_assert_int_gt(fit, 0);
	ck_assert_int_lt(fit, bs);
	ck_assert_msg(check_bs(e, fit, 2, plen, glen) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(check_bs(e, fit + 1, 2, plen, glen), -ENOSPC);

	/* A split that fits runs, as on pinned_host. */
	int32_t p1[3] = { 2, 50, 60 }, p2[2] = { 2, 70 }, p3[4] = { 2, 80, 90, 100 };
	struct fg_request req[3] = {
		{ .prompt_ids = p1, .n_prompt_ids = 3, .max_new_tokens = 5 },
		{ .prompt_ids = p2, .n_prompt_ids = 2, .max_new_tokens = 5 },
		{ .prompt_ids = p3, .n_prompt_ids = 4, .max_new_tokens = 5 },
	};
	struct fg_result a[3], r[3];
	ck_assert_msg(fg_generate(e, req, 3, a) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_generate(er, req, 3, r) == 0, "%s", fg_last_error_text());
	ck_assert_uint_le(b->peak, b->capacity);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(a[i].n_tokens, 5);
		ck_assert_mem_eq(a[i].token_ids, r[i].token_ids, 5 * sizeof(int32_t));
		fg_result_clear(&a[i]);
		fg_result_clear(&r[i]);
	}
	fg_engine_close(e);
	fg_engine_close(er);
	fg_config_free(c);
	fg_config_free(ref);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("budget");
	TCase *tc = tcase_create("budget");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_bench_refused_before_warmup);
	tcase_add_test(tc, test_host_logits_accounted);
	tcase_add_test(tc, test_batch_sized_to_requests);
	tcase_add_test(tc, test_batch_shrinks_per_gpu_batch);
	tcase_add_test(tc, test_budget_accounting);
	tcase_add_test(tc, test_budget_refuses_weights);
	tcase_add_test(tc, test_budget_refuses_run_and_runs_a_fit);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
