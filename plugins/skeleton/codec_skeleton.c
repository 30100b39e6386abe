/* plugins/skeleton/codec_skeleton.c - the commented example of a codec plugin.
 *
 * A codec says how a logical 2-D tensor of real values [rows, cols] is laid
 * out in bytes.  This one stores the values as raw 32-bit floats, row-major,
 * in the machine's byte order: the simplest codec that works, and a template
 * for real ones (fp16, int4_group64).
 *
 * A codec has no state and no options: its hooks are pure functions of the
 * shape and the data.  The core supplies encode_f16/decode_f16 through float
 * when a codec leaves them NULL, as this one does.
 *
 * Out of tree, with only the installed headers:
 *     cc -shared -fPIC -fvisibility=hidden $(pkg-config --cflags fgcore) \
 *        codec_skeleton.c -o codec_skeleton.so
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/plugin.h>

/* Elements of the tensor, or 0 when rows * cols * 4 bytes does not fit in 64 bits. */
static uint64_t skeleton_codec_count(const struct fg_codec_shape *s)
{
	if (s->cols != 0 && s->rows > UINT64_MAX / 4 / s->cols)
		return 0;
	return s->rows * s->cols;
}

/* Bytes of the encoded tensor.  0 means "this shape cannot be encoded"
 * (here: its size overflows); the core refuses such a tensor. */
static uint64_t skeleton_codec_encoded_size(const struct fg_codec_shape *shape)
{
	return skeleton_codec_count(shape) * sizeof(float);
}

static int skeleton_codec_encode_f32(const struct fg_codec_shape *shape, const float *src,
				     void *dst)
{
	uint64_t n = skeleton_codec_count(shape);

	if (n == 0 && shape->rows != 0 && shape->cols != 0)
		return -EINVAL;
	if (n > SIZE_MAX / sizeof(float))
		return -EINVAL;
	/* A real codec converts here (to fp16, to 4-bit groups ...); group_dim
	 * tells grouping codecs which dimension to group along. */
	memcpy(dst, src, (size_t)n * sizeof(float));
	return 0;
}

static int skeleton_codec_decode_f32(const struct fg_codec_shape *shape, const void *src,
				     float *dst)
{
	uint64_t n = skeleton_codec_count(shape);

	if (n == 0 && shape->rows != 0 && shape->cols != 0)
		return -EINVAL;
	if (n > SIZE_MAX / sizeof(float))
		return -EINVAL;
	memcpy(dst, src, (size_t)n * sizeof(float));
	return 0;
}

static const struct fg_codec_ops skeleton_codec_ops = {
	.encoded_size	= skeleton_codec_encoded_size,
	.encode_f32	= skeleton_codec_encode_f32,
	.decode_f32	= skeleton_codec_decode_f32,
	/* .encode_f16 and .decode_f16 are optional: the core goes through float. */
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION, /* the codecs' own version (fgcore/codec.h) */
	.kind		= FG_PLUGIN_CODEC,
	.name		= "codec_skeleton",
	.description	= "example codec: raw fp32, row-major (plugins/skeleton: copy it to write a codec)",
	/* no probe: a codec is plain C and works everywhere */
	.ops		= &skeleton_codec_ops,
	/* no options: .options = NULL, .opts_size = 0 */
};
