/* tests/fp8_threads.c - the fp8_e4m3_rows encoder with a chosen thread count
 * (tests/fp8_threads.h), from the plugin's own source.  Its entry symbol is
 * renamed so the test program never holds a second fg_plugin_entry. */
#define fg_plugin_entry fp8_threads_entry
#include "plugins/codec/fp8_e4m3_rows.c"
#include "tests/fp8_threads.h"

int fp8_test_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst,
			int threads)
{
	struct f8_in in = { .f32 = src };

	return f8_encode_threads(shape, &in, dst, threads);
}

int fp8_test_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst,
			int threads)
{
	struct f8_in in = { .f16 = src };

	return f8_encode_threads(shape, &in, dst, threads);
}
