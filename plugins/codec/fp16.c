/* plugins/codec/fp16.c - the "fp16" codec: IEEE binary16, row-major, 2 bytes a value.
 *
 * The reference codec: every other codec and every backend that reads fp16
 * natively is tested against it.  float -> half rounds to nearest even.
 * F16C is used where the CPU has it (same results as the portable path).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/fp16_simd.h>
#include <fgcore/plugin.h>

/* Number of values, or 0 with *err set when the shape is unusable. */
static size_t fp16_count(const struct fg_codec_shape *s, int *err)
{
	*err = 0;
	if (!s) {
		*err = -EINVAL;
		return 0;
	}
	/* Two bytes a value must fit both uint64_t and size_t. */
	if (s->rows && s->cols > (UINT64_MAX / 2) / s->rows) {
		*err = -EINVAL;
		return 0;
	}
	if (s->rows * s->cols > SIZE_MAX / 2) {
		*err = -EINVAL;
		return 0;
	}
	return (size_t)(s->rows * s->cols);
}

static uint64_t fp16_encoded_size(const struct fg_codec_shape *shape)
{
	int err;
	size_t n = fp16_count(shape, &err);

	return err ? 0 : (uint64_t)n * 2;
}

static int fp16_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst)
{
	int err;
	size_t n = fp16_count(shape, &err);

	if (err)
		return err;
	if (n && (!src || !dst))
		return -EINVAL;
	fg_fp16_simd_from_f32(dst, src, n);
	return 0;
}

static int fp16_decode_f32(const struct fg_codec_shape *shape, const void *src, float *dst)
{
	int err;
	size_t n = fp16_count(shape, &err);

	if (err)
		return err;
	if (n && (!src || !dst))
		return -EINVAL;
	fg_fp16_simd_to_f32(dst, src, n);
	return 0;
}

static int fp16_copy(const struct fg_codec_shape *shape, const void *src, void *dst)
{
	int err;
	size_t n = fp16_count(shape, &err);

	if (err)
		return err;
	if (n && (!src || !dst))
		return -EINVAL;
	if (n)
		memmove(dst, src, n * 2);
	return 0;
}

static int fp16_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst)
{
	return fp16_copy(shape, src, dst);
}

static int fp16_decode_f16(const struct fg_codec_shape *shape, const void *src, uint16_t *dst)
{
	return fp16_copy(shape, src, dst);
}

static const struct fg_codec_ops fp16_ops = {
	.encoded_size	= fp16_encoded_size,
	.encode_f32	= fp16_encode_f32,
	.decode_f32	= fp16_decode_f32,
	.encode_f16	= fp16_encode_f16,
	.decode_f16	= fp16_decode_f16,
};

/* Usable everywhere.  Whether this CPU converts with F16C is a fact of the
 * machine, not of the file, so it is logged (`fgcore -v plugins`) rather
 * than written into the constant descriptor; the bytes are the same either way. */
static int fp16_probe(const struct fg_host *host)
{
	if (fg_fp16_simd_have_f16c())
		fg_log(host, FG_LOG_INFO, "fp16: converting with F16C (vcvtph2ps, vcvtps2ph)");
	else
		fg_log(host, FG_LOG_INFO, "fp16: no F16C on this CPU (or not an x86-64 build): "
		       "converting with the portable fgcore/half.h loops, same results");
	return 1;
}

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "fp16",
	.description	= "IEEE binary16, row-major, round to nearest even (F16C where the CPU has it)",
	.probe		= fp16_probe,
	.ops		= &fp16_ops,
	.options	= NULL,
	.opts_size	= 0,
	.capabilities	= NULL,
};
