/* fgcore/q4.h - the byte layout of 4-bit group quantization (codec
 * int4_group64, tensor dtypes FG_DTYPE_Q4_ROWS / FG_DTYPE_Q4_COLS).
 *
 * A logical [rows, cols] tensor of reals is cut into groups of 64 values along
 * one dimension: along dimension 0 a group is 64 consecutive rows of one
 * column (weights, stored [out, in]); along dimension 1 it is 64 consecutive
 * values of one row (the KV cache, grouped along the head dimension).  A last
 * partial group holds the remaining values only.
 *
 * Per group: mn = min, mx = max over its values; scale = (mx - mn) / 15, both
 * stored as fp16; each value x becomes q = round((x - mn) / scale) clamped to
 * 0..15 (q = 0 when scale is 0, so a constant group decodes exactly to mn);
 * it decodes as q * scale + mn (in fp32, from the fp16 scale and min).
 * Rounding: mn is the largest fp16 <= min and scale the smallest fp16 with
 * mn + 15 * scale >= max (min and max clamped to ±65504 first, so finite values
 * beyond it saturate like infinities), and q = (x - mn) * (1 / scale) computed
 * in fp32 from these stored values, rounded to nearest with ties to even.
 * Non-finite inputs: NaN values are ignored when finding min and max and
 * encode as q = 0; +inf/-inf clamp the group's range to the fp16 limits
 * (±65504).  A group of only NaNs encodes mn = 0, scale = 0.
 *
 * Bytes, in this order:
 *   data:   the q values of the tensor in row-major order, two per byte, element
 *           e = r * cols + c in byte e / 2, even e in the high nibble; rounded
 *           up to a multiple of 64 bytes (padding zero);
 *   params: per group a pair (scale, mn) of fp16, groups in row-major order of
 *           the group grid [grid_rows, grid_cols]: dimension 0 grouping gives a
 *           grid of [ceil(rows / 64), cols], dimension 1 [rows, ceil(cols / 64)].
 *
 * The rule, once, for every encoder and decoder (the int4_group64 codec,
 * cpu_blas, cublas's kernels, out-of-tree plugins): header-only, and
 * __host__ __device__ under nvcc.
 *   fg_q4_param_of      (min, max) of a group -> stored fp16 scale and mn, and
 *                       the fp32 mn and 1 / scale that codes are computed with;
 *   fg_q4_code          one value -> its q;
 *   fg_q4_encode_group  a whole group: range, parameters, one q per byte;
 *   fg_q4_value         one q -> its decoded value, q * scale + mn in fp32;
 *   fg_q4_param_store / fg_q4_param_load / fg_q4_nibble / fg_q4_set_nibble
 *                       the bytes of the layout above.
 * They assume IEEE fp32 arithmetic in round-to-nearest (no -ffast-math).  A
 * build that fuses q * scale + mn into one FMA (-ffp-contract=fast together
 * with -mfma) decodes within an fp32 rounding of the rule, not bit-exactly;
 * -std=c11 keeps it apart.
 */
#ifndef FGCORE_Q4_H
#define FGCORE_Q4_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/half.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define FG_Q4_FN static inline __host__ __device__
#else
#define FG_Q4_FN static inline
#endif

#define FG_Q4_GROUP 64
#define FG_Q4_F16_MAX 65504.0f      /* the largest finite fp16 */
#define FG_Q4_F16_MAX_BITS 0x7bffu

FG_Q4_FN uint64_t fg_q4_data_bytes(uint64_t rows, uint64_t cols)
{
	return ((rows * cols + 1) / 2 + 63) & ~(uint64_t)63;
}

FG_Q4_FN uint64_t fg_q4_grid_rows(uint64_t rows, int group_dim)
{
	return group_dim == 0 ? (rows + FG_Q4_GROUP - 1) / FG_Q4_GROUP : rows;
}

FG_Q4_FN uint64_t fg_q4_grid_cols(uint64_t cols, int group_dim)
{
	return group_dim == 0 ? cols : (cols + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
}

/* The q value of element e (row-major index) in the data bytes. */
FG_Q4_FN unsigned fg_q4_nibble(const uint8_t *data, uint64_t e)
{
	return e & 1 ? data[e / 2] & 15u : data[e / 2] >> 4u;
}

/* Set element e's nibble to q (0..15), keeping the other nibble of its byte. */
FG_Q4_FN void fg_q4_set_nibble(uint8_t *data, uint64_t e, unsigned q)
{
	uint8_t *b = data + e / 2;

	*b = e & 1 ? (uint8_t)((*b & 0xf0u) | (q & 15u)) : (uint8_t)((*b & 0x0fu) | (q & 15u) << 4);
}

/* Total encoded bytes: data, then 4 bytes (scale, min) per group. */
FG_Q4_FN uint64_t fg_q4_bytes(uint64_t rows, uint64_t cols, int group_dim)
{
	return fg_q4_data_bytes(rows, cols) +
	       4 * fg_q4_grid_rows(rows, group_dim) * fg_q4_grid_cols(cols, group_dim);
}

/* ---- the encoder's rule ------------------------------------------------------ */

/* One group's parameters: what is stored, and what codes are computed with. */
struct fg_q4_param {
	uint16_t scale, min; /* the stored fp16 bits */
	float m;             /* min as fp32 */
	float inv;           /* 1 / scale in fp32; 0 when scale is 0 */
};

/* |v| <= 65504 as fp16 magnitude bits rounded toward zero; *inexact says
 * whether that dropped anything.  Branch-free in the value's fraction. */
FG_Q4_FN uint32_t fg_q4_half_trunc(float v, uint32_t *inexact)
{
	uint32_t a = fg_float_to_bits(v) & 0x7fffffffu;
	float f;
	uint32_t k;

	if (a >= 0x38800000u) { /* 2^-14 and up: a normal fp16 */
		*inexact = (a & 0x1fffu) != 0;
		return ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu);
	}
	f = fg_bits_to_float(a) * 16777216.0f; /* in units of 2^-24, exact */
	k = (uint32_t)f;
	*inexact = (float)k != f;
	return k;
}

/* The largest fp16 <= v, for -65504 <= v <= 65504 (v not -0). */
FG_Q4_FN uint16_t fg_q4_half_floor(float v)
{
	uint32_t inexact, mag = fg_q4_half_trunc(v, &inexact);
	uint32_t neg = fg_float_to_bits(v) >> 31;

	return (uint16_t)(neg << 15 | (mag + (neg & inexact)));
}

/* The smallest fp16 >= v, for 0 <= v <= 65504. */
FG_Q4_FN uint16_t fg_q4_half_ceil(float v)
{
	uint32_t inexact, mag = fg_q4_half_trunc(v, &inexact);

	return (uint16_t)(mag + inexact);
}

/* mn + 15 * scale >= hi, exactly: both are fp16, so the double sum is exact. */
FG_Q4_FN int fg_q4_covers(double m, uint16_t scale, float hi)
{
	return m + 15.0 * (double)fg_half_to_float(scale) >= (double)hi;
}

/* The parameters of a group whose non-NaN values span [lo, hi] (lo > hi, or
 * a NaN bound: no such value). */
FG_Q4_FN struct fg_q4_param fg_q4_param_of(float lo, float hi)
{
	struct fg_q4_param p;
	double m;
	float s;
	uint16_t hs;

	if (!(lo <= hi))
		lo = hi = 0.0f; /* only NaNs: mn = 0, scale = 0 */
	lo = lo < -FG_Q4_F16_MAX ? -FG_Q4_F16_MAX : lo > FG_Q4_F16_MAX ? FG_Q4_F16_MAX : lo;
	hi = hi < -FG_Q4_F16_MAX ? -FG_Q4_F16_MAX : hi > FG_Q4_F16_MAX ? FG_Q4_F16_MAX : hi;
	/* -0 + 0 = +0: which zero wins min/max depends on the order a kernel
	 * visits values; this keeps the bytes the same for every kernel. */
	lo += 0.0f;
	hi += 0.0f;
	p.min = fg_q4_half_floor(lo);
	p.m = fg_half_to_float(p.min);
	m = p.m;
	/* The fp16 above (hi - m) / 15 is nearly always the answer; the loops,
	 * exact, fix the rare case where rounding that quotient to float moved it
	 * across an fp16 value.  (hi - m) / 15 <= 131008 / 15 keeps all finite. */
	hs = fg_q4_half_ceil((float)(((double)hi - m) / 15.0));
	while (hs < FG_Q4_F16_MAX_BITS && !fg_q4_covers(m, hs, hi))
		hs++;
	while (hs > 0 && fg_q4_covers(m, (uint16_t)(hs - 1), hi))
		hs--;
	p.scale = hs;
	s = fg_half_to_float(hs);
	p.inv = s > 0.0f ? 1.0f / s : 0.0f;
	return p;
}

/* q of one value: (x - m) * inv clamped to [0, 15] (a NaN to 0), rounded to
 * nearest, ties to even.  On the host, adding 1.5 * 2^23 leaves no fraction
 * bits, so the FPU's default rounding does the work. */
FG_Q4_FN unsigned fg_q4_code(float x, float m, float inv)
{
	float t = (x - m) * inv;

	t = t > 0.0f ? t : 0.0f; /* also maps NaN (x NaN, or inf * 0) to 0 */
	t = t < 15.0f ? t : 15.0f;
#ifdef __CUDA_ARCH__
	return (unsigned)__float2int_rn(t);
#else
	return (unsigned)(int)((t + 12582912.0f) - 12582912.0f);
#endif
}

/* The decoded value of q: q * scale + mn, two fp32 roundings. */
FG_Q4_FN float fg_q4_value(unsigned q, float scale, float min)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(__fmul_rn((float)q, scale), min); /* no FMA: the host's bits */
#else
	return (float)q * scale + min;
#endif
}

/* Minimum and maximum of x[0..n), NaN skipped (lo > hi when all are NaN). */
FG_Q4_FN void fg_q4_range(const float *x, size_t n, float *lo, float *hi)
{
	float l = INFINITY, h = -INFINITY;

	for (size_t j = 0; j < n; j++) {
		l = x[j] < l ? x[j] : l; /* a NaN never wins */
		h = x[j] > h ? x[j] : h;
	}
	*lo = l;
	*hi = h;
}

/* One group of n <= FG_Q4_GROUP values: its parameters and q[j] of x[j]. */
FG_Q4_FN void fg_q4_encode_group(const float *x, size_t n, struct fg_q4_param *p, uint8_t *q)
{
	float lo, hi;

	fg_q4_range(x, n, &lo, &hi);
	*p = fg_q4_param_of(lo, hi);
	for (size_t j = 0; j < n; j++)
		q[j] = (uint8_t)fg_q4_code(x[j], p->m, p->inv);
}

/* Group g's (scale, min) pair in the params area: fp16 little-endian,
 * written bytewise so the layout never depends on the host. */
FG_Q4_FN void fg_q4_param_store(uint8_t *params, uint64_t g, const struct fg_q4_param *p)
{
	uint8_t *b = params + 4 * g;

	b[0] = (uint8_t)p->scale;
	b[1] = (uint8_t)(p->scale >> 8);
	b[2] = (uint8_t)p->min;
	b[3] = (uint8_t)(p->min >> 8);
}

/* Group g's scale and min as fp32, for fg_q4_value. */
FG_Q4_FN void fg_q4_param_load(const uint8_t *params, uint64_t g, float *scale, float *min)
{
	const uint8_t *b = params + 4 * g;

	*scale = fg_half_to_float((uint16_t)(b[0] | b[1] << 8));
	*min = fg_half_to_float((uint16_t)(b[2] | b[3] << 8));
}

#ifdef __cplusplus
}
#endif
#endif
