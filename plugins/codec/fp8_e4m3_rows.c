/* plugins/codec/fp8_e4m3_rows.c - the "fp8_e4m3_rows" codec: E4M3 codes with
 * one fp32 scale per row, the byte layout of fgcore/f8.h.
 *
 * The rule is f8.h's, through its helpers only (fg_f8_amax, fg_f8_scale_of,
 * fg_f8_code, fg_f8_value, fg_f8_scale_store/load; amax and codes in bulk by
 * fgcore/f8_simd.h, the same bytes on 8 lanes): the codec, the compute
 * backends and out-of-tree readers then agree to the bit, and the codes a
 * weight gets here are those cublas's fp8 products would give it.
 *  - A row is an output channel of a weight [out, in] and has one scale:
 *    the group is the whole row, so the shape's group_dim must be 1 (along
 *    a row); any other group_dim is refused rather than read as another
 *    layout.
 *  - fp16 input is widened exactly (fg_half_to_float) and then encoded as
 *    fp32, so both entry points give the same bytes; decode_f16 narrows the
 *    fp32 value decode_f32 gives (fg_float_to_half).
 *  - The padding of the data area is zero.  A tensor with rows but no
 *    columns still has its rows' scales (1, as for any row whose amax is
 *    0): encoded_size is fg_f8_bytes() for every shape it accepts.
 *
 * The hooks are pure functions of their arguments and use small stack tiles,
 * so they are safe to call from many threads at once.  Encoding a large
 * tensor (2^21 values or more) spreads its rows over one thread per CPU
 * (fgcore/fanout.h); rows are independent, so the bytes are those of one
 * thread for any count.  A bad shape (group_dim not 1, sizes that overflow)
 * gives -EINVAL, and encoded_size 0; codec hooks get no fg_host, so the
 * core's wrapper writes the error line.
 */
#define _GNU_SOURCE /* fgcore/fanout.h: sched_getaffinity */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/f8.h>
#include <fgcore/f8_simd.h>
#include <fgcore/fanout.h>
#include <fgcore/half.h>
#include <fgcore/plugin.h>

#define F8_TILE 256 /* values widened at a time from fp16 */
#define F8_PER_THREAD ((size_t)1 << 20) /* values: a few ms of work, far above a thread's start */

/* The shape, checked, in the units the loops use. */
struct f8_dims {
	size_t rows, cols;
	size_t n;     /* rows * cols */
	size_t data;  /* fg_f8_data_bytes(): the codes and their padding */
	size_t total; /* fg_f8_bytes() */
};

/* Values come from fp32 or fp16; exactly one is set. */
struct f8_in {
	const float *f32;
	const uint16_t *f16;
};

static int f8_dims_of(const struct fg_codec_shape *s, struct f8_dims *d)
{
	if (!s || s->group_dim != 1)
		return -EINVAL;
	/* The fp32 side must be addressable: rows * cols * 4 bytes fits size_t. */
	if (s->rows && s->cols > (SIZE_MAX / sizeof(float)) / s->rows)
		return -EINVAL;
	d->rows = (size_t)s->rows;
	d->cols = (size_t)s->cols;
	d->n = d->rows * d->cols;
	d->data = (size_t)fg_f8_data_bytes(s->rows, s->cols); /* <= n + 63: no wrap */
	/* the scales: 4 bytes a row, which cols 0 leaves unbounded by the check above */
	if (s->rows > (SIZE_MAX - d->data) / 4)
		return -EINVAL;
	d->total = d->data + 4 * d->rows;
	return 0;
}

static uint64_t f8_encoded_size(const struct fg_codec_shape *shape)
{
	struct f8_dims d;

	/* 0 tells the core the shape cannot be encoded; an empty tensor also
	 * takes 0 bytes. */
	if (f8_dims_of(shape, &d) < 0)
		return 0;
	return d.total;
}

/* ---- encode ------------------------------------------------------------------ */

/* w values from element e as floats: in place for fp32, else widened into buf
 * (w <= F8_TILE). */
static const float *f8_load(const struct f8_in *in, size_t e, size_t w, float *buf)
{
	if (in->f32)
		return in->f32 + e;
	for (size_t j = 0; j < w; j++)
		buf[j] = fg_half_to_float(in->f16[e + j]);
	return buf;
}

/* Row r: its amax, then its codes, tile by tile.  The largest of the tiles'
 * amax is the row's (a maximum, exact; a tile of NaNs gives 0, as the row's
 * start does), so fp32 and fp16 input take the same path. */
static void f8_encode_row(const struct f8_dims *d, const struct f8_in *in, uint8_t *dst,
			  size_t r)
{
	size_t e0 = r * d->cols;
	float buf[F8_TILE], amax = 0.0f, scale, inv;

	for (size_t c = 0; c < d->cols; c += F8_TILE) {
		size_t w = d->cols - c < F8_TILE ? d->cols - c : F8_TILE;
		float a = fg_f8_simd_amax(f8_load(in, e0 + c, w, buf), w);

		amax = a > amax ? a : amax;
	}
	fg_f8_scale_of(amax, &scale, &inv);
	for (size_t c = 0; c < d->cols; c += F8_TILE) {
		size_t w = d->cols - c < F8_TILE ? d->cols - c : F8_TILE;
		fg_f8_simd_codes(dst + e0 + c, f8_load(in, e0 + c, w, buf), inv, w);
	}
	fg_f8_scale_store(dst + d->data, r, scale);
}

/* Rows [r0, r1): each writes its own codes and scale, nothing else. */
struct f8_job {
	const struct f8_dims *d;
	const struct f8_in *in;
	uint8_t *dst;
	size_t r0, r1;
};

static void f8_run(void *arg)
{
	const struct f8_job *j = arg;

	for (size_t r = j->r0; r < j->r1; r++)
		f8_encode_row(j->d, j->in, j->dst, r);
}

/* threads <= 0: one per CPU, each with at least F8_PER_THREAD values (a
 * small tensor stays on the calling thread). */
static int f8_encode_threads(const struct fg_codec_shape *shape, const struct f8_in *in,
			     void *dst, int threads)
{
	struct f8_job job[FG_FANOUT_MAX];
	struct f8_dims d;
	int rc = f8_dims_of(shape, &d), t;

	if (rc < 0)
		return rc;
	if (d.total == 0)
		return 0;
	if (!dst || (d.n && !in->f32 && !in->f16))
		return -EINVAL;
	memset((uint8_t *)dst + d.n, 0, d.data - d.n); /* the padding */
	t = fg_fanout_threads(threads, (uint64_t)d.n, F8_PER_THREAD);
	t = (size_t)t < d.rows ? t : (int)d.rows;
	/* job k: rows [rows * k / t, rows * (k + 1) / t), without overflow */
	for (int k = 0; k < t; k++) {
		size_t q = d.rows / (size_t)t, m = d.rows % (size_t)t;

		job[k] = (struct f8_job){ &d, in, dst, q * (size_t)k + m * (size_t)k / (size_t)t,
					  q * (size_t)(k + 1) + m * (size_t)(k + 1) / (size_t)t };
	}
	fg_fanout(f8_run, job, sizeof(job[0]), t);
	return 0;
}

static int f8_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst)
{
	struct f8_in in = { .f32 = src };

	return f8_encode_threads(shape, &in, dst, 0);
}

static int f8_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst)
{
	struct f8_in in = { .f16 = src };

	return f8_encode_threads(shape, &in, dst, 0);
}

/* ---- decode ------------------------------------------------------------------ */

/* Any bytes decode: code 0x7f / 0xff gives NaN, a NaN or inf scale NaN or
 * inf values.  Exactly one of f32, f16 is set. */
static int f8_decode(const struct fg_codec_shape *shape, const void *src, float *f32,
		     uint16_t *f16)
{
	struct f8_dims d;
	int rc = f8_dims_of(shape, &d);
	const uint8_t *q = src;

	if (rc < 0)
		return rc;
	if (d.n == 0)
		return 0;
	if (!src || (!f32 && !f16))
		return -EINVAL;
	for (size_t r = 0; r < d.rows; r++) {
		float scale = fg_f8_scale_load(q + d.data, r);

		for (size_t e = r * d.cols; e < (r + 1) * d.cols; e++) {
			float v = fg_f8_value(q[e], scale);

			if (f32)
				f32[e] = v;
			else
				f16[e] = fg_float_to_half(v);
		}
	}
	return 0;
}

static int f8_decode_f32(const struct fg_codec_shape *shape, const void *src, float *dst)
{
	return f8_decode(shape, src, dst, NULL);
}

static int f8_decode_f16(const struct fg_codec_shape *shape, const void *src, uint16_t *dst)
{
	return f8_decode(shape, src, NULL, dst);
}

static const struct fg_codec_ops f8_ops = {
	.encoded_size	= f8_encoded_size,
	.encode_f32	= f8_encode_f32,
	.decode_f32	= f8_decode_f32,
	.encode_f16	= f8_encode_f16,
	.decode_f16	= f8_decode_f16,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "fp8_e4m3_rows",
	.description	= "fp8 E4M3 codes, one fp32 scale per row (group_dim 1; fgcore/f8.h)",
	.probe		= NULL,
	.ops		= &f8_ops,
	.options	= NULL,
	.opts_size	= 0,
	.capabilities	= NULL,
};
