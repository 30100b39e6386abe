/* plugins/compute/cpu_blas/fused.c - dot products of fp32 rows (x) with fp16
 * rows (w), widening w in registers (vcvtph2ps) as it streams.
 *
 * One call computes a block of im x jn outputs (im <= 4 with AVX2, <= 8 with
 * AVX-512; jn <= 3) with one vector accumulator per output, so every row of
 * x shares each widened vector of w.  A long k is cut into blocks whose x and
 * w stay in L1; the accumulators are parked in `state` between blocks, which
 * leaves every lane's chain of FMAs unchanged.  Lane l of an accumulator sums
 * the products at k = l (mod lanes) in k order, tails padded with zeros, and
 * the lanes are added last in a fixed order: a result depends on the ISA but
 * never on im, jn, the k blocking, the block's position or the thread.
 */
#include <stdint.h>
#include <string.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include "plugins/codec/fp16_simd.h"

#if FP16_SIMD_X86
#define CB_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CB_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define CB_INLINE static inline __attribute__((always_inline))
/* RM and RN are constants after inlining: unroll so acc[][] lives in registers. */
#define CB_UNROLL _Pragma("GCC unroll 8")

typedef void (*cb_dot_fn)(const float *x, int64_t ldx, const uint16_t *w, int64_t ldw,
			  int64_t k, int flags, float *state, float acc[8][3]);

/* ---- AVX2: 8 lanes, up to 4 x 3 ------------------------------------------------------ */

CB_INLINE CB_AVX2 float cb_hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
	return _mm_cvtss_f32(s);
}

CB_INLINE CB_AVX2 void cb_dot256(const int RM, const int RN, const float *x, int64_t ldx,
				 const uint16_t *w, int64_t ldw, int64_t k, int flags,
				 float *state, float out[8][3])
{
	__m256 acc[4][3], wv[3], xv;
	int64_t kk = 0;
	int i, j;

	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = (flags & CPU_BLAS_DOT_FIRST) ? _mm256_setzero_ps()
				    : _mm256_loadu_ps(state + (i * 3 + j) * 8);
	for (; kk + 8 <= k; kk += 8) {
		CB_UNROLL
		for (j = 0; j < RN; j++)
			wv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j * ldw + kk)));
		CB_UNROLL
		for (i = 0; i < RM; i++) {
			xv = _mm256_loadu_ps(x + i * ldx + kk);
			CB_UNROLL
			for (j = 0; j < RN; j++)
				acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
		}
	}
	if (kk < k) {
		int r = (int)(k - kk);
		__m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(r),
						  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

		CB_UNROLL
		for (j = 0; j < RN; j++) {
			uint16_t t[8] = { 0 };

			memcpy(t, w + j * ldw + kk, (size_t)r * sizeof(uint16_t));
			wv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
		}
		CB_UNROLL
		for (i = 0; i < RM; i++) {
			xv = _mm256_maskload_ps(x + i * ldx + kk, mask);
			CB_UNROLL
			for (j = 0; j < RN; j++)
				acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
		}
	}
	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++) {
			if (flags & CPU_BLAS_DOT_LAST)
				out[i][j] = cb_hsum256(acc[i][j]);
			else
				_mm256_storeu_ps(state + (i * 3 + j) * 8, acc[i][j]);
		}
}

/* ---- AVX-512: 16 lanes, up to 8 x 3 -------------------------------------------------- */

CB_INLINE CB_AVX512 float cb_hsum512(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
	return _mm_cvtss_f32(s);
}

CB_INLINE CB_AVX512 void cb_dot512(const int RM, const int RN, const float *x, int64_t ldx,
				   const uint16_t *w, int64_t ldw, int64_t k, int flags,
				   float *state, float out[8][3])
{
	__m512 acc[8][3], wv[3], xv;
	int64_t kk = 0;
	int i, j;

	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = (flags & CPU_BLAS_DOT_FIRST) ? _mm512_setzero_ps()
				    : _mm512_loadu_ps(state + (i * 3 + j) * 16);
	for (; kk + 16 <= k; kk += 16) {
		CB_UNROLL
		for (j = 0; j < RN; j++)
			wv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + j * ldw + kk)));
		CB_UNROLL
		for (i = 0; i < RM; i++) {
			xv = _mm512_loadu_ps(x + i * ldx + kk);
			CB_UNROLL
			for (j = 0; j < RN; j++)
				acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
		}
	}
	if (kk < k) {
		int r = (int)(k - kk);
		__mmask16 mask = (__mmask16)((1u << r) - 1);

		CB_UNROLL
		for (j = 0; j < RN; j++) {
			uint16_t t[16] = { 0 };

			memcpy(t, w + j * ldw + kk, (size_t)r * sizeof(uint16_t));
			wv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)t));
		}
		CB_UNROLL
		for (i = 0; i < RM; i++) {
			xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + kk);
			CB_UNROLL
			for (j = 0; j < RN; j++)
				acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
		}
	}
	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++) {
			if (flags & CPU_BLAS_DOT_LAST)
				out[i][j] = cb_hsum512(acc[i][j]);
			else
				_mm512_storeu_ps(state + (i * 3 + j) * 16, acc[i][j]);
		}
}

/* ---- one function per block shape ---------------------------------------------------- */

#define CB_DEF(ISA, TGT, RM, RN)                                                           \
	static TGT void cb_dot##ISA##_##RM##_##RN(const float *x, int64_t ldx,             \
						   const uint16_t *w, int64_t ldw, int64_t k, \
						   int flags, float *state, float acc[8][3])  \
	{                                                                                  \
		cb_dot##ISA(RM, RN, x, ldx, w, ldw, k, flags, state, acc);                 \
	}
#define CB_DEF3(ISA, TGT, RM) CB_DEF(ISA, TGT, RM, 1) CB_DEF(ISA, TGT, RM, 2) \
	CB_DEF(ISA, TGT, RM, 3)
#define CB_REF3(ISA, RM) { cb_dot##ISA##_##RM##_1, cb_dot##ISA##_##RM##_2, cb_dot##ISA##_##RM##_3 }

CB_DEF3(256, CB_AVX2, 1)
CB_DEF3(256, CB_AVX2, 2)
CB_DEF3(256, CB_AVX2, 3)
CB_DEF3(256, CB_AVX2, 4)
CB_DEF3(512, CB_AVX512, 1)
CB_DEF3(512, CB_AVX512, 2)
CB_DEF3(512, CB_AVX512, 3)
CB_DEF3(512, CB_AVX512, 4)
CB_DEF3(512, CB_AVX512, 5)
CB_DEF3(512, CB_AVX512, 6)
CB_DEF3(512, CB_AVX512, 7)
CB_DEF3(512, CB_AVX512, 8)

static const cb_dot_fn cb_dot256_fns[4][3] = {
	CB_REF3(256, 1), CB_REF3(256, 2), CB_REF3(256, 3), CB_REF3(256, 4),
};

static const cb_dot_fn cb_dot512_fns[8][3] = {
	CB_REF3(512, 1), CB_REF3(512, 2), CB_REF3(512, 3), CB_REF3(512, 4),
	CB_REF3(512, 5), CB_REF3(512, 6), CB_REF3(512, 7), CB_REF3(512, 8),
};
#endif

int cpu_blas_isa_supported(int isa)
{
	switch (isa) {
	case CPU_BLAS_ISA_NONE:
		return 1;
#if FP16_SIMD_X86
	case CPU_BLAS_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       fp16_simd_have_f16c();
	case CPU_BLAS_ISA_AVX512:
		__builtin_cpu_init();
		return cpu_blas_isa_supported(CPU_BLAS_ISA_AVX2) &&
		       __builtin_cpu_supports("avx512f");
#endif
	default:
		return 0;
	}
}

int cpu_blas_fused_rows(int isa)
{
	return isa == CPU_BLAS_ISA_AVX512 ? 8 : 4;
}

int cpu_blas_fused_lanes(int isa)
{
	return isa == CPU_BLAS_ISA_AVX512 ? 16 : 8;
}

void cpu_blas_fused_dot(int isa, int im, int jn, const float *x, int64_t ldx, const uint16_t *w,
			int64_t ldw, int64_t k, int flags, float *state, float acc[8][3])
{
#if FP16_SIMD_X86
	if (isa == CPU_BLAS_ISA_AVX512)
		cb_dot512_fns[im - 1][jn - 1](x, ldx, w, ldw, k, flags, state, acc);
	else
		cb_dot256_fns[im - 1][jn - 1](x, ldx, w, ldw, k, flags, state, acc);
#else
	(void)isa, (void)im, (void)jn, (void)x, (void)ldx, (void)w, (void)ldw, (void)k;
	(void)flags, (void)state, (void)acc;
#endif
}
