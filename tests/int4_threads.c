/* tests/int4_threads.c - the int4_group64 encoder with a chosen thread count
 * (tests/int4_threads.h), from the plugin's own source.  Its entry symbol is
 * renamed so the test program never holds a second fg_plugin_entry. */
#define fg_plugin_entry int4_threads_entry
#include "plugins/codec/int4_group64.c"
#include "tests/int4_threads.h"

int int4_test_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst,
			 int threads)
{
	struct int4_io io = { .f32_in = src };

	return int4_encode_threads(shape, &io, dst, threads);
}

int int4_test_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst,
			 int threads)
{
	struct int4_io io = { .f16_in = src };

	return int4_encode_threads(shape, &io, dst, threads);
}
