/* fgcore/half.h - portable IEEE binary16 and bfloat16 conversions.
 *
 * Header-only (static inline) so that the core and plugins share one
 * reference conversion without a plugin calling a core symbol.
 *
 *  fg_half_to_float   exact for every bit pattern; a NaN keeps its payload in
 *                     the top mantissa bits and comes out quiet (as x86 F16C does).
 *  fg_float_to_half   round to nearest, ties to even; overflow to infinity;
 *                     subnormal results correctly rounded; NaN stays NaN, quiet,
 *                     keeping the top bits of its payload.
 *  fg_bf16_to_float   exact (bfloat16 is the top half of a binary32).
 *
 * Under nvcc (__CUDACC__) the functions are __host__ __device__, so CUDA
 * kernels (fgcore/q4.h's encoder) use the same conversions as the host.
 */
#ifndef FGCORE_HALF_H
#define FGCORE_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define FG_HALF_FN static inline __host__ __device__
#else
#define FG_HALF_FN static inline
#endif

FG_HALF_FN float fg_bits_to_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

FG_HALF_FN uint32_t fg_float_to_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

FG_HALF_FN float fg_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf, or NaN made quiet */
		return fg_bits_to_float(sign | 0x7f800000u | (man ? 0x400000u : 0) | (man << 13));
	if (exp != 0)
		return fg_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
	if (man == 0)
		return fg_bits_to_float(sign);
	/* Subnormal: man * 2^-24; normalise so the leading one becomes implicit. */
	exp = 113;
	while (!(man & 0x400u)) {
		man <<= 1;
		exp--;
	}
	return fg_bits_to_float(sign | (exp << 23) | ((man & 0x3ffu) << 13));
}

FG_HALF_FN uint16_t fg_float_to_half(float f)
{
	uint32_t x = fg_float_to_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t a = x & 0x7fffffffu;
	uint32_t exp = a >> 23;
	uint32_t h, rem, halfway, shift, man;

	if (exp == 0xff) {
		if (a == 0x7f800000u)
			return sign | 0x7c00u;
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	}
	if (a >= 0x477ff000u) /* >= 65520: rounds past 65504 */
		return sign | 0x7c00u;
	if (exp >= 113) { /* normal half */
		h = ((exp - 112) << 10) | ((a >> 13) & 0x3ffu);
		rem = a & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++; /* a carry into the exponent is still correct */
		return (uint16_t)(sign | h);
	}
	/* Subnormal half (or zero): round (1.m * 2^(exp-127)) * 2^24 to an integer. */
	if (exp < 102)
		return sign; /* below 2^-25: rounds to zero */
	man = (a & 0x7fffffu) | 0x800000u;
	shift = 126 - exp; /* 14 .. 24 */
	h = man >> shift;
	rem = man & ((1u << shift) - 1);
	halfway = 1u << (shift - 1);
	if (rem > halfway || (rem == halfway && (h & 1u)))
		h++; /* may become 0x400, the smallest normal */
	return (uint16_t)(sign | h);
}

FG_HALF_FN float fg_bf16_to_float(uint16_t b)
{
	return fg_bits_to_float((uint32_t)b << 16);
}

#ifdef __cplusplus
}
#endif
#endif
