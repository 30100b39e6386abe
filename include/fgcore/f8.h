/* fgcore/f8.h - the byte layouts of fp8 weights with a scale per row (codec
 * fp8_e4m3_rows, tensor dtype FG_DTYPE_F8_ROWS) and of an fp8 KV cache with a
 * scale per group of 64 values along a row (FG_DTYPE_F8_COLS, [policy]
 * cache_codec = fp8_e4m3_group64; at the end of this file).
 *
 * A logical [rows, cols] tensor of reals (a weight stored [out, in]: a row
 * is an output channel) keeps one fp32 scale per row and one E4M3 code per
 * value (the "FN" form of fp8: 1 sign, 4 exponent bits of bias 7, 3
 * mantissa bits; no infinities, S.1111.111 is NaN; the largest finite
 * magnitude 448, the smallest subnormal 2^-9).
 *
 * Per row: amax = the largest |x| over its values, NaN ignored, a magnitude
 * above 65504 (the fp16 limit; infinities too) counted as 65504;
 * scale = amax / 448 and inv = 448 / amax, each one fp32 division (1 and 1
 * when amax is below 2^-64, where 448 / amax could overflow: such a row's
 * values all code 0, as a row of zeros); each value x (clamped to +-65504, as amax is) becomes the
 * E4M3 code of t = x * inv (one fp32 product), rounded to nearest with ties
 * to even, magnitudes above 448 saturating to 448, NaN coded 0x7f.  A code
 * decodes as its E4M3 value times scale (one fp32 product).  This is the
 * rule cublas's fp8 products quantize by (__nv_cvt_float_to_fp8 with
 * __NV_SATFINITE), so one weight encoded here multiplies on the fp8 tensor
 * cores as it is.
 *
 * Bytes, in this order:
 *   data:   the codes in row-major order, one byte each, element e = r * cols
 *           + c in byte e; rounded up to a multiple of 64 bytes (padding
 *           zero), so the scales are aligned for any reader;
 *   scales: per row its fp32 scale, little-endian.
 *
 * The rule, once, for every encoder and decoder (the codec, cpu_blas,
 * cublas's kernels, out-of-tree plugins): header-only, and __host__
 * __device__ under nvcc.  It assumes IEEE fp32 arithmetic in
 * round-to-nearest (no -ffast-math, no contraction of the decode's product).
 *   fg_f8_amax        a row's amax by the rule above;
 *   fg_f8_scale_of    amax -> the stored scale and the inv codes are made with;
 *   fg_f8_code        one value -> its code;
 *   fg_f8_e4m3        one code -> its E4M3 value (exact);
 *   fg_f8_value       one code and its row's scale -> the decoded value;
 *   fg_f8_scale_store / fg_f8_scale_load   the scales' bytes.
 */
#ifndef FGCORE_F8_H
#define FGCORE_F8_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/half.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define FG_F8_FN static inline __host__ __device__
#else
#define FG_F8_FN static inline
#endif

#define FG_F8_MAX 448.0f    /* the largest finite E4M3 magnitude */
#define FG_F8_CLAMP 65504.0f /* inputs saturate here first (fp16's largest finite) */
#define FG_F8_NAN 0x7fu
#define FG_F8_AMAX_MIN 0x1p-64f /* a smaller amax scales as 0 does */

/* Bytes of the codes, padded so that the scales start 64-byte aligned. */
FG_F8_FN uint64_t fg_f8_data_bytes(uint64_t rows, uint64_t cols)
{
	return (rows * cols + 63) & ~(uint64_t)63;
}

/* Total encoded bytes: codes, then 4 bytes (an fp32 scale) per row. */
FG_F8_FN uint64_t fg_f8_bytes(uint64_t rows, uint64_t cols)
{
	return fg_f8_data_bytes(rows, cols) + 4 * rows;
}

/* |x| clamped to FG_F8_CLAMP; NaN stays NaN. */
FG_F8_FN float fg_f8_mag(float x)
{
	float a = fg_bits_to_float(fg_float_to_bits(x) & 0x7fffffffu);

	return a > FG_F8_CLAMP ? FG_F8_CLAMP : a;
}

/* The largest clamped magnitude of x[0..n), NaN skipped (0 when none). */
FG_F8_FN float fg_f8_amax(const float *x, size_t n)
{
	float m = 0.0f;

	for (size_t j = 0; j < n; j++) {
		float a = fg_f8_mag(x[j]);

		m = a > m ? a : m; /* a NaN never wins */
	}
	return m;
}

/* A row's stored scale (amax / 448) and the inv its codes are made with. */
FG_F8_FN void fg_f8_scale_of(float amax, float *scale, float *inv)
{
#ifdef __CUDA_ARCH__
	*scale = amax >= FG_F8_AMAX_MIN ? __fdiv_rn(amax, FG_F8_MAX) : 1.0f;
	*inv = amax >= FG_F8_AMAX_MIN ? __fdiv_rn(FG_F8_MAX, amax) : 1.0f;
#else
	*scale = amax >= FG_F8_AMAX_MIN ? amax / FG_F8_MAX : 1.0f;
	*inv = amax >= FG_F8_AMAX_MIN ? FG_F8_MAX / amax : 1.0f;
#endif
}

/* The E4M3 code of t: nearest, ties to even, saturating at 448; NaN 0x7f. */
FG_F8_FN uint8_t fg_f8_e4m3_of(float t)
{
	uint32_t b = fg_float_to_bits(t), sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
	uint32_t code;

	if (a > 0x7f800000u)
		return FG_F8_NAN;
	if (a >= 0x3c800000u) { /* 2^-6 and up: normal; keep 3 of 23 mantissa bits */
		a += 0x7ffffu + ((a >> 20) & 1u);
		code = (a >> 20) - (120u << 3); /* exponent bias 127 -> 7 */
		code = code > 0x7eu ? 0x7eu : code;
	} else { /* subnormal: multiples of 2^-9, up to 2^-6 (code 8, the first normal) */
		float f = fg_bits_to_float(a) * 512.0f; /* exact */
#ifdef __CUDA_ARCH__
		code = (uint32_t)__float2int_rn(f);
#else
		code = (uint32_t)(int)((f + 12582912.0f) - 12582912.0f);
#endif
	}
	return (uint8_t)(sign | code);
}

/* One value's code: x clamped to +-65504, times inv, to E4M3. */
FG_F8_FN uint8_t fg_f8_code(float x, float inv)
{
	float a = fg_f8_mag(x);
	float c = fg_float_to_bits(x) >> 31 ? -a : a; /* NaN stays NaN */

#ifdef __CUDA_ARCH__
	return fg_f8_e4m3_of(__fmul_rn(c, inv));
#else
	return fg_f8_e4m3_of(c * inv);
#endif
}

/* The exact E4M3 value of a code. */
FG_F8_FN float fg_f8_e4m3(uint8_t code)
{
	uint32_t e = (code >> 3) & 15u, m = code & 7u;
	float v;

	if ((code & 0x7fu) == FG_F8_NAN)
		return fg_bits_to_float(0x7fc00000u);
	v = e ? fg_bits_to_float((e + 120u) << 23 | m << 20) : (float)m * 0.001953125f; /* 2^-9 */
	return code & 0x80u ? -v : v;
}

/* The decoded value: E4M3 value times the row's scale, one fp32 product. */
FG_F8_FN float fg_f8_value(uint8_t code, float scale)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(fg_f8_e4m3(code), scale);
#else
	return fg_f8_e4m3(code) * scale;
#endif
}

/* Row r's scale in the scales area, little-endian bytes whatever the host. */
FG_F8_FN void fg_f8_scale_store(uint8_t *scales, uint64_t r, float scale)
{
	uint32_t u = fg_float_to_bits(scale);
	uint8_t *b = scales + 4 * r;

	b[0] = (uint8_t)u;
	b[1] = (uint8_t)(u >> 8);
	b[2] = (uint8_t)(u >> 16);
	b[3] = (uint8_t)(u >> 24);
}

FG_F8_FN float fg_f8_scale_load(const uint8_t *scales, uint64_t r)
{
	const uint8_t *b = scales + 4 * r;

	return fg_bits_to_float((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
				(uint32_t)b[3] << 24);
}

/* ---- the KV cache: FG_DTYPE_F8_COLS ----------------------------------------
 * A logical [rows, cols] cache (a row is one position's keys or values over
 * the key/value heads) is cut into groups of FG_F8_GROUP consecutive values
 * of a row (the last group of a row may be shorter), the grid [rows,
 * ceil(cols / 64)]: with heads of 64 or 128 values, one or two scales a head
 * and position.  Each group is encoded by the rule above as if it were a
 * row: its amax, scale and inv, its values' codes.  Bytes: the codes
 * row-major, one a value, padded to 64 (fg_f8_data_bytes), then one
 * little-endian fp32 scale per group, row-major over the grid: group g of
 * row r is scale r * ceil(cols / 64) + g. */
#define FG_F8_GROUP 64

FG_F8_FN uint64_t fg_f8c_grid_cols(uint64_t cols)
{
	return (cols + FG_F8_GROUP - 1) / FG_F8_GROUP;
}

FG_F8_FN uint64_t fg_f8c_bytes(uint64_t rows, uint64_t cols)
{
	return fg_f8_data_bytes(rows, cols) + 4 * rows * fg_f8c_grid_cols(cols);
}

/* Where group g of row r of a [rows, cols] F8_COLS tensor keeps its scale
 * (in the scales area at base + fg_f8_data_bytes: its index there). */
FG_F8_FN uint64_t fg_f8c_scale_index(uint64_t cols, uint64_t r, uint64_t g)
{
	return r * fg_f8c_grid_cols(cols) + g;
}

/* Encode x[0..cols) as row r of a [rows, cols] F8_COLS tensor at base. */
FG_F8_FN void fg_f8c_store_row(uint8_t *base, uint64_t rows, uint64_t cols, uint64_t r,
			       const float *x)
{
	uint8_t *codes = base + r * cols, *scales = base + fg_f8_data_bytes(rows, cols);

	for (uint64_t g = 0; g < fg_f8c_grid_cols(cols); g++) {
		uint64_t c0 = g * FG_F8_GROUP, w = cols - c0 < FG_F8_GROUP ? cols - c0 : FG_F8_GROUP;
		float scale, inv;

		fg_f8_scale_of(fg_f8_amax(x + c0, (size_t)w), &scale, &inv);
		fg_f8_scale_store(scales, fg_f8c_scale_index(cols, r, g), scale);
		for (uint64_t j = 0; j < w; j++)
			codes[c0 + j] = fg_f8_code(x[c0 + j], inv);
	}
}

/* Decode columns [c0, c0 + n) of row r of a [rows, cols] F8_COLS tensor. */
FG_F8_FN void fg_f8c_load(const uint8_t *base, uint64_t rows, uint64_t cols, uint64_t r,
			  uint64_t c0, uint64_t n, float *y)
{
	const uint8_t *codes = base + r * cols, *scales = base + fg_f8_data_bytes(rows, cols);

	for (uint64_t c = c0; c < c0 + n; c++)
		y[c - c0] = fg_f8_value(codes[c], fg_f8_scale_load(scales, fg_f8c_scale_index(
								     cols, r, c / FG_F8_GROUP)));
}

#ifdef __cplusplus
}
#endif
#endif
