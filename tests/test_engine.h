/* tests/test_engine.h - an engine on a trained checkpoint of FGCORE_TESTDATA
 * (or a folder named by its absolute path) for the executor tests: GPU
 * batches of bs rows (nb of them when nb > 0),
 * the disk tier in /var/tmp, the settings given ("section.key=value", NULL
 * ends them) and, with a backend (the test's reading of FGCORE_TEST_BACKEND),
 * that compute plugin on cuda_mem (a 4 GiB pool).  Check assertions: for a
 * test's body. */
#ifndef FG_TESTS_TEST_ENGINE_H
#define FG_TESTS_TEST_ENGINE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include <fgcore/fgcore.h>

static void test_engine_set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static struct fg_engine *test_engine_open(const char *model, int bs, int nb,
					  const char *const *settings, const char *backend)
{
	struct fg_config *c;
	struct fg_engine *e;
	char kv[4400];

	ck_assert_int_eq(fg_config_new(&c), 0);
	if (model[0] == '/') /* a folder of its own (tests/window_model.h) */
		snprintf(kv, sizeof(kv), "model.path=%s", model);
	else
		snprintf(kv, sizeof(kv), "model.path=%s/%s", getenv("FGCORE_TESTDATA"), model);
	test_engine_set(c, kv);
	snprintf(kv, sizeof(kv), "policy.gpu_batch_size=%d", bs);
	test_engine_set(c, kv);
	if (nb > 0) {
		snprintf(kv, sizeof(kv), "policy.num_gpu_batches=%d", nb);
		test_engine_set(c, kv);
	}
	test_engine_set(c, "tier.disk.dir=/var/tmp");
	for (; settings && *settings; settings++)
		test_engine_set(c, *settings);
	if (backend) {
		snprintf(kv, sizeof(kv), "compute.plugin=%s", backend);
		test_engine_set(c, kv);
		test_engine_set(c, "tier.compute.plugin=cuda_mem");
		test_engine_set(c, "tier.compute.pool=4G");
	}
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_config_free(c);
	return e;
}

#endif
