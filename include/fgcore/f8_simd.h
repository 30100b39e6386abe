/* fgcore/f8_simd.h - bulk fp8 (E4M3) encoding by fgcore/f8.h's rule, for
 * plugins.
 *
 * AVX2 on x86-64 CPUs that have it, chosen at run time; f8.h's own functions
 * otherwise and for tails.  Both give the same bytes for every input (NaN,
 * infinities, values past 65504, subnormal results and ties included): the
 * vector path makes f8.h's integer steps on 8 lanes, and its one fp32
 * product and its rounding of subnormals (to nearest, ties to even, the
 * default rounding mode f8.h assumes too) are the same IEEE operations.
 * Header-only, like fgcore/fp16_simd.h: each plugin compiles its own copy.
 *
 *  fg_f8_simd_amax(x, n)             fg_f8_amax(x, n)
 *  fg_f8_simd_codes(dst, x, inv, n)  dst[i] = fg_f8_code(x[i], inv)
 *  fg_f8c_simd_store_row(...)        fg_f8c_store_row (an fp8 KV cache's row)
 *  fg_f8_simd_have_avx2()            whether this CPU takes the AVX2 path
 */
#ifndef FGCORE_F8_SIMD_H
#define FGCORE_F8_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/fp16_simd.h>

#ifdef __cplusplus
extern "C" {
#endif

#if FG_FP16_SIMD_X86
static inline int fg_f8_simd_have_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

/* fg_f8_mag on 8 lanes: |x| clamped to 65504, NaN kept (min returns its
 * second operand when either is NaN). */
__attribute__((target("avx2")))
static inline __m256 fg_f8_simd_mag8(__m256 x)
{
	__m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));

	return _mm256_min_ps(_mm256_set1_ps(FG_F8_CLAMP), a);
}

__attribute__((target("avx2")))
static inline float fg_f8_simd_amax_avx2(const float *x, size_t n)
{
	__m256 m = _mm256_setzero_ps();
	float l[8], r = 0.0f;
	size_t i = 0;

	/* max returns its second operand when either is NaN: a NaN never wins */
	for (; i + 8 <= n; i += 8)
		m = _mm256_max_ps(fg_f8_simd_mag8(_mm256_loadu_ps(x + i)), m);
	_mm256_storeu_ps(l, m);
	for (int j = 0; j < 8; j++)
		r = l[j] > r ? l[j] : r;
	for (; i < n; i++) {
		float a = fg_f8_mag(x[i]);

		r = a > r ? a : r;
	}
	return r;
}

/* fg_f8_code of 8 lanes, as int32 codes. */
__attribute__((target("avx2")))
static inline __m256i fg_f8_simd_code8(__m256 x, __m256 inv)
{
	const __m256i absm = _mm256_set1_epi32(0x7fffffff);
	__m256i sx = _mm256_andnot_si256(absm, _mm256_castps_si256(x));
	__m256 t = _mm256_mul_ps(_mm256_or_ps(fg_f8_simd_mag8(x), _mm256_castsi256_ps(sx)), inv);
	__m256i b = _mm256_castps_si256(t), a = _mm256_and_si256(b, absm);
	__m256i sign = _mm256_and_si256(_mm256_srli_epi32(b, 24), _mm256_set1_epi32(0x80));
	/* normal results: keep 3 of 23 mantissa bits, to nearest even */
	__m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
	__m256i up = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7ffff)), odd);
	__m256i cn = _mm256_min_epi32(_mm256_sub_epi32(_mm256_srli_epi32(up, 20),
						       _mm256_set1_epi32(120 << 3)),
				      _mm256_set1_epi32(0x7e));
	/* subnormal results: multiples of 2^-9, rounded by the current mode */
	__m256i cs = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a),
						      _mm256_set1_ps(512.0f)));
	__m256i normal = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x3c800000 - 1));
	__m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
	__m256i code = _mm256_or_si256(_mm256_blendv_epi8(cs, cn, normal), sign);

	return _mm256_blendv_epi8(code, _mm256_set1_epi32(FG_F8_NAN), nan);
}

__attribute__((target("avx2")))
static inline void fg_f8_simd_codes_avx2(uint8_t *dst, const float *x, float inv, size_t n)
{
	const __m256i low = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
					     -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
					     -1, -1, -1, -1);
	__m256 iv = _mm256_set1_ps(inv);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256i c = _mm256_shuffle_epi8(fg_f8_simd_code8(_mm256_loadu_ps(x + i), iv), low);
		uint32_t lo = (uint32_t)_mm256_extract_epi32(c, 0);
		uint32_t hi = (uint32_t)_mm256_extract_epi32(c, 4);

		memcpy(dst + i, &lo, 4); /* (byte j of each: lane j's code, little-endian) */
		memcpy(dst + i + 4, &hi, 4);
	}
	for (; i < n; i++)
		dst[i] = fg_f8_code(x[i], inv);
}
#else
static inline int fg_f8_simd_have_avx2(void)
{
	return 0;
}
#endif

static inline float fg_f8_simd_amax(const float *x, size_t n)
{
#if FG_FP16_SIMD_X86
	if (fg_f8_simd_have_avx2())
		return fg_f8_simd_amax_avx2(x, n);
#endif
	return fg_f8_amax(x, n);
}

static inline void fg_f8_simd_codes(uint8_t *dst, const float *x, float inv, size_t n)
{
#if FG_FP16_SIMD_X86
	if (fg_f8_simd_have_avx2()) {
		fg_f8_simd_codes_avx2(dst, x, inv, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = fg_f8_code(x[i], inv);
}

/* fg_f8c_store_row with the group's amax and codes in bulk. */
static inline void fg_f8c_simd_store_row(uint8_t *base, uint64_t rows, uint64_t cols, uint64_t r,
					 const float *x)
{
	uint8_t *codes = base + r * cols, *scales = base + fg_f8_data_bytes(rows, cols);

	for (uint64_t g = 0; g < fg_f8c_grid_cols(cols); g++) {
		uint64_t c0 = g * FG_F8_GROUP;
		size_t w = (size_t)(cols - c0 < FG_F8_GROUP ? cols - c0 : FG_F8_GROUP);
		float scale, inv;

		fg_f8_scale_of(fg_f8_simd_amax(x + c0, w), &scale, &inv);
		fg_f8_scale_store(scales, fg_f8c_scale_index(cols, r, g), scale);
		fg_f8_simd_codes(codes + c0, x + c0, inv, w);
	}
}

#ifdef __cplusplus
}
#endif
#endif
