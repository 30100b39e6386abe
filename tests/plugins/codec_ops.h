/* tests/plugins/codec_ops.h - a valid codec ops table for the broken test
 * plugins, so that each of them is wrong in exactly one way. */
#ifndef FG_TESTS_CODEC_OPS_H
#define FG_TESTS_CODEC_OPS_H

#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/plugin.h>

static uint64_t test_encoded_size(const struct fg_codec_shape *s)
{
	return s->rows * s->cols * 4;
}

static int test_encode(const struct fg_codec_shape *s, const float *src, void *dst)
{
	memcpy(dst, src, s->rows * s->cols * 4);
	return 0;
}

static int test_decode(const struct fg_codec_shape *s, const void *src, float *dst)
{
	memcpy(dst, src, s->rows * s->cols * 4);
	return 0;
}

static const struct fg_codec_ops test_codec_ops = {
	.encoded_size	= test_encoded_size,
	.encode_f32	= test_encode,
	.decode_f32	= test_decode,
};

#endif
