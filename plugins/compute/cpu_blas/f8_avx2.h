/* plugins/compute/cpu_blas/f8_avx2.h - E4M3 codes to fp32 in AVX2 registers,
 * exactly fgcore/f8.h's decode: the fp8 products (fused.c) and attention
 * over an fp8 cache read in place (attention.c) share it.
 *
 * A code becomes the fp16 pattern of its E4M3 value / 256 (sign kept, the 7
 * exponent-and-mantissa bits shifted under fp16's wider exponent; subnormals
 * land on fp16 subnormals; S.1111.111 becomes an fp16 NaN), vcvtph2ps widens
 * it exactly, and (v * 256) * scale is fg_f8_value's one rounded product
 * (the 256 not folded into the scale, which could overflow where the
 * product does not). */
#ifndef FG_CPU_BLAS_F8_AVX2_H
#define FG_CPU_BLAS_F8_AVX2_H

#include <fgcore/fp16_simd.h>

#if FG_FP16_SIMD_X86
#include <immintrin.h>

#define CB_F8_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 16 codes -> the fp16 bits of their values / 256: code << 8 shifted right
 * arithmetically puts the sign in bits 15 and 14 and the rest in 13..7; bit 14
 * cleared leaves fp16 exponent e (bias 15 for E4M3's 7) and mantissa m << 7. */
CB_F8_AVX2 __m256i cb_f8_halves(__m128i codes)
{
	const __m256i em = _mm256_set1_epi16(0x3f80);
	__m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8);
	__m256i nan;

	h = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16((short)0xbf80));
	nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, em), em); /* S.1111.111 */
	return _mm256_or_si256(h, nan);                        /* all ones: an fp16 NaN */
}

/* Eight of them (half 0 or 1) as fp32 values: (v * 256) * scale, the first
 * product exact, so one rounding as fg_f8_value. */
CB_F8_AVX2 __m256 cb_f8_values(__m256i h, int half, __m256 sv)
{
	__m128i q = half ? _mm256_extracti128_si256(h, 1) : _mm256_castsi256_si128(h);

	return _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(q), _mm256_set1_ps(256.0f)), sv);
}
#endif
#endif
