/* fgcore/fp16_simd.h - bulk fp16 <-> fp32 conversion for plugins.
 *
 * F16C (vcvtph2ps / vcvtps2ph, round to nearest even) on x86-64 CPUs that
 * have it, chosen at run time; fgcore/half.h otherwise and for tails.  Both
 * paths give bit-identical results (half.h mirrors F16C, NaNs included), so
 * the choice never changes a computed value.  Header-only: plugins cannot
 * call each other or the core, so each one compiles its own copy.
 *
 *  fg_fp16_simd_to_f32      dst[i] = (float)src[i]
 *  fg_fp16_simd_from_f32    dst[i] = (half)src[i], round to nearest even
 *  fg_fp16_simd_have_f16c   whether this CPU takes the F16C path (0 when
 *                           FG_FP16_SIMD_X86 is 0: not x86-64 with GCC/Clang)
 *  fg_fp16_simd_f16c_to_f32, fg_fp16_simd_f16c_from_f32
 *                           the F16C loops themselves (x86-64 only; call them
 *                           only where fg_fp16_simd_have_f16c() said yes)
 * On x86-64 the header includes <immintrin.h>.
 */
#ifndef FGCORE_FP16_SIMD_H
#define FGCORE_FP16_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/half.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define FG_FP16_SIMD_X86 1
#include <immintrin.h>
#else
#define FG_FP16_SIMD_X86 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if FG_FP16_SIMD_X86
static inline int fg_fp16_simd_have_f16c(void)
{
	/* Cheap (reads libgcc's table, filled when the object was loaded);
	 * "avx" also says the OS saves the ymm registers. */
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx,f16c")))
static inline void fg_fp16_simd_f16c_to_f32(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	for (; i < n; i++)
		dst[i] = fg_half_to_float(src[i]);
}

__attribute__((target("avx,f16c")))
static inline void fg_fp16_simd_f16c_from_f32(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = fg_float_to_half(src[i]);
}
#else
static inline int fg_fp16_simd_have_f16c(void)
{
	return 0;
}
#endif

static inline void fg_fp16_simd_to_f32(float *dst, const uint16_t *src, size_t n)
{
#if FG_FP16_SIMD_X86
	if (fg_fp16_simd_have_f16c()) {
		fg_fp16_simd_f16c_to_f32(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = fg_half_to_float(src[i]);
}

static inline void fg_fp16_simd_from_f32(uint16_t *dst, const float *src, size_t n)
{
#if FG_FP16_SIMD_X86
	if (fg_fp16_simd_have_f16c()) {
		fg_fp16_simd_f16c_from_f32(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = fg_float_to_half(src[i]);
}

#ifdef __cplusplus
}
#endif
#endif
