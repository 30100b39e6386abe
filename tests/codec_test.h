/* tests/codec_test.h - what the codec tests (test_int4_codec, test_fp8_codec)
 * share: the plugin under test, loaded per test by the fixture, per-value
 * checks that write no checkpoint, and seeded distributions over
 * tests/test_rng.h. */
#ifndef FG_TESTS_CODEC_TEST_H
#define FG_TESTS_CODEC_TEST_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <fgcore/codec.h>

#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/test_rng.h"

/* ck_assert records a checkpoint (a write to Check's pipe) on every pass;
 * checks made per value use this instead. */
#define EXPECT(expr, ...)                          \
	do {                                       \
		if (!(expr))                       \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)
#define GUARD 64 /* bytes past encoded_size that must stay untouched */

static struct fg_plugin_handle ph;
static const struct fg_codec_ops *ops;
static uint64_t seed = 4242; /* FGCORE_TEST_SEED */

/* The fixture's setup: the codec `name`, with both fp16 entry points. */
static inline void codec_load(const char *name)
{
	int rc = fg_plugin_load(name, FG_PLUGIN_CODEC, &ph);

	ck_assert_msg(rc == 0, "cannot load %s (FGCORE_PLUGIN_PATH=%s): %s", name,
		      getenv("FGCORE_PLUGIN_PATH"), fg_last_error());
	ops = ph.plugin->ops;
	ck_assert_ptr_nonnull(ops->encode_f16);
	ck_assert_ptr_nonnull(ops->decode_f16);
}

static inline void codec_unload(void)
{
	fg_plugin_close(&ph);
}

static inline void rng_seed(uint64_t s)
{
	rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

/* Uniform in (0, 1). */
static inline double unif(void)
{
	return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
}

static inline double gauss(void)
{
	return sqrt(-2.0 * log(unif())) * cos(2.0 * M_PI * unif());
}

#endif
