/* fgcore/codec.h - codec plugins (kind FG_PLUGIN_CODEC).
 *
 * A codec says how a logical 2-D tensor of real values [rows, cols] is laid out
 * in bytes.  The codec plugin's encode/decode is the reference that compute
 * backends consuming the format natively are tested against.
 *
 * ABI history, in the codecs' own minor (FG_CODEC_ABI_MINOR below):
 *   1.0  every member of struct fg_codec_ops below; the fp16 pair optional.
 *   1.1 to 1.10  nothing: every kind shared one minor then, and compute's
 *        additions moved it.  A codec that says any of them is a 1.0 one,
 *        and loads.
 * The next addition here is codec 1.11 and leaves the other kinds alone.
 */
#ifndef FGCORE_CODEC_H
#define FGCORE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The codec ABI of this header: a codec plugin declares
 * `.abi_version = FG_CODEC_ABI_VERSION`.  Bumped by additions to this
 * header only (and by a change to what every kind shares, fgcore/plugin.h). */
#define FG_CODEC_ABI_MINOR 10
#define FG_CODEC_ABI_VERSION FG_ABI(FG_ABI_MAJOR, FG_CODEC_ABI_MINOR)

/* Shape of the logical tensor and the dimension codecs that group values
 * (e.g. int4_group64) group along: 0 = along rows (columns of 64 rows),
 * 1 = along a row (64 consecutive values of one row). */
struct fg_codec_shape {
	uint64_t rows;
	uint64_t cols;
	int group_dim;
};

struct fg_codec_ops {
	/* Bytes needed to store the tensor. */
	uint64_t (*encoded_size)(const struct fg_codec_shape *shape);
	/* float -> encoded bytes (dst has encoded_size bytes). */
	int (*encode_f32)(const struct fg_codec_shape *shape, const float *src, void *dst);
	/* encoded bytes -> float. */
	int (*decode_f32)(const struct fg_codec_shape *shape, const void *src, float *dst);
	/* optional: fp16 (uint16_t bit patterns) in and out; the core's default goes
	 * through float with the core's reference conversion. */
	int (*encode_f16)(const struct fg_codec_shape *shape, const uint16_t *src, void *dst);
	int (*decode_f16)(const struct fg_codec_shape *shape, const void *src, uint16_t *dst);
};

#ifdef __cplusplus
}
#endif
#endif
