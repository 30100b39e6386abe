/* tests/test_engine_checks.c - pairings the engine refuses before it runs:
 * a device-memory compute tier under a host-memory backend (which would
 * fault in its first op), and compressed weights or cache with a backend
 * that does not read them (which used to load and encode every weight
 * first).  Each refusal is one line naming the plugins and the key. */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plan/plan.h"
#include "core/util/error.h"

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

/* The test plugins first, then the build's own. */
static void use_test_plugins(void)
{
	const char *b = getenv("FGCORE_BUILDDIR"), *old = getenv("FGCORE_PLUGIN_PATH");
	static char path[4 * PATH_MAX];

	snprintf(path, sizeof(path), "%s/tests/plugins/.libs:%s", b && *b ? b : ".",
		 old ? old : "");
	ck_assert_int_eq(setenv("FGCORE_PLUGIN_PATH", path, 1), 0);
}

static struct fg_config *config(const char *compute, const char *tier)
{
	struct fg_config *c;
	char kv[128];

	use_test_plugins();
	ck_assert_int_eq(fg_config_new(&c), 0);
	set(c, "model.path=dummy:opt-125m");
	snprintf(kv, sizeof(kv), "compute.plugin=%s", compute);
	set(c, kv);
	snprintf(kv, sizeof(kv), "tier.compute.plugin=%s", tier);
	set(c, kv);
	set(c, "tier.host.plugin=pinned_host");
	set(c, "policy.percent=100 0 100 0 100 0");
	return c;
}

START_TEST(test_device_tier_host_backend)
{
	struct fg_config *c = config("cpu_blas", "fake_device_mem");
	struct fg_engine *e = NULL;

	ck_assert_int_eq(fg_engine_open(c, &e), -EINVAL);
	const char *msg = fg_last_error_text();
	ck_assert_msg(strstr(msg, "fake_device_mem") && strstr(msg, "cpu_blas") &&
			      strstr(msg, "device memory"),
		      "%s", msg);
	fg_config_free(c);
}
END_TEST

/* Refused before a weight is placed: OPT-175B on a 1 GiB compute tier would
 * otherwise fail for want of room (-ENOSPC) after reading its weights. */
START_TEST(test_compress_needs_backend)
{
	static const char *const keys[] = { "policy.compress_weight=true",
					    "policy.compress_cache=true",
					    "policy.weight_codec=fp8_e4m3_rows",
					    "policy.cache_codec=fp8_e4m3_group64" };
	static const char *const named[] = { "compress_weight", "compress_cache", "fp8 weights",
					     "fp8 KV cache" };
	struct fg_config *c = config("compute_abi10", "pinned_host");
	struct fg_engine *e = NULL;

	set(c, "model.path=dummy:opt-175b");
	set(c, "tier.compute.capacity=1G");
	set(c, keys[_i]);
	if (_i >= 2) /* fp8: a 1.0 backend is never asked about it */
		set(c, keys[_i - 2]);
	ck_assert_int_eq(fg_engine_open(c, &e), -ENOTSUP);
	const char *msg = fg_last_error_text();
	ck_assert_msg(strstr(msg, named[_i]) && strstr(msg, "compute_abi10"), "%s", msg);
	fg_config_free(c);
}
END_TEST

/* Without compression the same backend passes the checks and opens. */
START_TEST(test_plain_backend_accepted)
{
	struct fg_config *c = config("compute_abi10", "pinned_host");
	struct fg_engine *e = NULL;

	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* Mistral's sliding window: with a backend that cannot apply it (compute
 * ABI < 1.11), a run longer than the window is refused and a run within it
 * planned; with one that can, the longer run is planned too, and the engine
 * opened on the real cpu_blas computes past the window. */
START_TEST(test_sliding_window)
{
	struct fg_model_config c;
	struct fg_policy p = { .gpu_batch_size = 1, .num_gpu_batches = 1,
			       .weight = { 0, 0, 100 }, .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
			       .attn_sparsity = 1 };
	struct fg_plan_env old = { 2, 1, 4, 1, 0 }, env = { 2, 1, 4, 0, 0 };
	static struct fg_plan plan;

	ck_assert_int_eq(fg_model_preset("mistral-7b", &c), 0);
	ck_assert(fg_layer_window(&c, 0) == 4096 && fg_layer_window(&c, 31) == 4096);
	ck_assert_int_eq(fg_plan_make(&c, &p, &old, 4000, 96, &plan), 0);
	ck_assert_int_eq(fg_plan_make(&c, &p, &old, 4000, 97, &plan), -ENOTSUP);
	ck_assert_msg(strstr(fg_last_error_text(), "sliding_window 4096") &&
		      strstr(fg_last_error_text(), "compute ABI 1.11"), "%s", fg_last_error_text());
	ck_assert_int_eq(fg_plan_make(&c, &p, &env, 4000, 97, &plan), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine_checks");
	TCase *tc = tcase_create("pairings");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_device_tier_host_backend);
	tcase_add_loop_test(tc, test_compress_needs_backend, 0, 4);
	tcase_add_test(tc, test_plain_backend_accepted);
	tcase_add_test(tc, test_sliding_window);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
