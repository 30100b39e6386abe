/* tests/fp8_threads.h - the fp8_e4m3_rows encoder with a chosen thread count.
 *
 * The plugin's hooks pick their thread count themselves (one per CPU for a
 * large tensor); tests/fp8_threads.c compiles the plugin's source into the
 * test to reach the entry point underneath, so that one thread and many can
 * be compared on any machine.  threads <= 0 picks as the hooks do. */
#ifndef FG_TESTS_FP8_THREADS_H
#define FG_TESTS_FP8_THREADS_H

#include <stdint.h>

#include <fgcore/codec.h>

int fp8_test_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst,
			int threads);
int fp8_test_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst,
			int threads);

#endif
