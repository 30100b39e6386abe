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
 *
 * The 4-bit kernels (FG_DTYPE_Q4_ROWS, fgcore/q4.h) work the same way on 32
 * nibbles per step: unpacked to bytes, widened to int32, converted and
 * decoded as q * scale + min with one FMA (q * scale is exact in fp32, so this
 * is the tile path's value), the caller having converted the group's fp16
 * (scale, min) pairs to fp32 arrays once.  A plain C version (16 lanes)
 * serves isa = none.
 *
 * The fp8 kernels (FG_DTYPE_F8_ROWS, fgcore/f8.h) take 16 codes per step, one
 * scale per w row, decoded in registers exactly (f8_avx2.h).  AVX-512
 * machines run these AVX2 kernels too (8 lanes, 4 rows of x): an AVX-512
 * version waits for a machine to test it on.  A plain C version (16 lanes,
 * fg_f8_value) serves isa = none.  Lanes past k weigh +0 whatever the scale.
 */
#include <stdint.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include "plugins/compute/cpu_blas/f8_avx2.h"
#include <fgcore/fp16_simd.h>

#if FG_FP16_SIMD_X86
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

/* ---- 4-bit weights: 32 nibbles (16 bytes) per step --------------------------------------- */

typedef void (*cb_q4dot_fn)(const float *x, int64_t ldx, const uint8_t *w, int64_t ldw,
			    const float *s, const float *mn, int64_t k, int flags, float *state,
			    float acc[8][3]);

/* The 32 values of 16 bytes (even element in the high nibble) as bytes, in element order. */
CB_INLINE CB_AVX2 void cb_q4_unpack(__m128i v, __m128i *lo, __m128i *hi)
{
	const __m128i m = _mm_set1_epi8(15);
	__m128i e = _mm_and_si128(_mm_srli_epi16(v, 4), m), o = _mm_and_si128(v, m);

	*lo = _mm_unpacklo_epi8(e, o);
	*hi = _mm_unpackhi_epi8(e, o);
}

/* Bytes for elements [kk, k) of each row (k - kk < 32), zero-padded to 16. */
CB_INLINE CB_AVX2 __m128i cb_q4_tail(const uint8_t *w, int64_t kk, int64_t k)
{
	uint8_t t[16] = { 0 };

	memcpy(t, w + kk / 2, (size_t)(k - kk + 1) / 2);
	return _mm_loadu_si128((const __m128i *)t);
}

/* acc[i][j] += x[i, kk + lane] * (q[j] * s + mn)[lane] for one vector of lanes. */
CB_INLINE CB_AVX2 void cb_q4step256(const int RM, const int RN, const __m128i q[3],
				    const float *x, int64_t ldx, const float *s, const float *mn,
				    int64_t kk, __m256 acc[4][3])
{
	__m256 wv[3], xv, sv = _mm256_loadu_ps(s + kk), mv = _mm256_loadu_ps(mn + kk);
	int i, j;

	CB_UNROLL
	for (j = 0; j < RN; j++)
		wv[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q[j])), sv, mv);
	CB_UNROLL
	for (i = 0; i < RM; i++) {
		xv = _mm256_loadu_ps(x + i * ldx + kk);
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
	}
}

/* Steps of 8 lanes over the 32 values of q (elements kk .. kk + 31). */
CB_INLINE CB_AVX2 void cb_q4steps256(const int RM, const int RN, const __m128i q[3][2],
				     int steps, const float *x, int64_t ldx, const float *s,
				     const float *mn, int64_t kk, __m256 acc[4][3])
{
	__m128i b[3];
	int j;

	CB_UNROLL
	for (int h = 0; h < 4; h++) {
		if (h >= steps)
			break;
		CB_UNROLL
		for (j = 0; j < RN; j++)
			b[j] = h & 1 ? _mm_unpackhi_epi64(q[j][h >> 1], q[j][h >> 1]) : q[j][h >> 1];
		cb_q4step256(RM, RN, b, x, ldx, s, mn, kk + 8 * h, acc);
	}
}

CB_INLINE CB_AVX2 void cb_q4dot256(const int RM, const int RN, const float *x, int64_t ldx,
				   const uint8_t *w, int64_t ldw, const float *s, const float *mn,
				   int64_t k, int flags, float *state, float out[8][3])
{
	__m256 acc[4][3];
	__m128i q[3][2];
	int64_t kk = 0;
	int i, j;

	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = (flags & CPU_BLAS_DOT_FIRST) ? _mm256_setzero_ps()
				    : _mm256_loadu_ps(state + (i * 3 + j) * 8);
	for (; kk + 32 <= k; kk += 32) {
		CB_UNROLL
		for (j = 0; j < RN; j++)
			cb_q4_unpack(_mm_loadu_si128((const __m128i *)(w + j * ldw + kk / 2)),
				     &q[j][0], &q[j][1]);
		cb_q4steps256(RM, RN, q, 4, x, ldx, s, mn, kk, acc);
	}
	if (kk < k) {
		/* Lanes past k see x = 0, s = mn = 0 (padding): they add +0. */
		CB_UNROLL
		for (j = 0; j < RN; j++)
			cb_q4_unpack(cb_q4_tail(w + j * ldw, kk, k), &q[j][0], &q[j][1]);
		cb_q4steps256(RM, RN, q, (int)(k - kk + 7) / 8, x, ldx, s, mn, kk, acc);
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

CB_INLINE CB_AVX512 void cb_q4step512(const int RM, const int RN, const __m128i q[3][2],
				      int h, const float *x, int64_t ldx, const float *s,
				      const float *mn, int64_t kk, __m512 acc[8][3])
{
	__m512 wv[3], xv, sv = _mm512_loadu_ps(s + kk), mv = _mm512_loadu_ps(mn + kk);
	int i, j;

	CB_UNROLL
	for (j = 0; j < RN; j++)
		wv[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q[j][h])), sv, mv);
	CB_UNROLL
	for (i = 0; i < RM; i++) {
		xv = _mm512_loadu_ps(x + i * ldx + kk);
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
	}
}

CB_INLINE CB_AVX512 void cb_q4dot512(const int RM, const int RN, const float *x, int64_t ldx,
				     const uint8_t *w, int64_t ldw, const float *s,
				     const float *mn, int64_t k, int flags, float *state,
				     float out[8][3])
{
	__m512 acc[8][3];
	__m128i q[3][2];
	int64_t kk = 0;
	int i, j;

	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = (flags & CPU_BLAS_DOT_FIRST) ? _mm512_setzero_ps()
				    : _mm512_loadu_ps(state + (i * 3 + j) * 16);
	for (; kk + 32 <= k; kk += 32) {
		CB_UNROLL
		for (j = 0; j < RN; j++)
			cb_q4_unpack(_mm_loadu_si128((const __m128i *)(w + j * ldw + kk / 2)),
				     &q[j][0], &q[j][1]);
		cb_q4step512(RM, RN, q, 0, x, ldx, s, mn, kk, acc);
		cb_q4step512(RM, RN, q, 1, x, ldx, s, mn, kk + 16, acc);
	}
	if (kk < k) {
		/* Lanes past k see x = 0, s = mn = 0 (padding): they add +0. */
		CB_UNROLL
		for (j = 0; j < RN; j++)
			cb_q4_unpack(cb_q4_tail(w + j * ldw, kk, k), &q[j][0], &q[j][1]);
		cb_q4step512(RM, RN, q, 0, x, ldx, s, mn, kk, acc);
		if (k - kk > 16)
			cb_q4step512(RM, RN, q, 1, x, ldx, s, mn, kk + 16, acc);
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

#define CB_Q4DEF(ISA, TGT, RM, RN)                                                          \
	static TGT void cb_q4dot##ISA##_##RM##_##RN(const float *x, int64_t ldx,            \
						     const uint8_t *w, int64_t ldw,           \
						     const float *s, const float *mn,         \
						     int64_t k, int flags, float *state,      \
						     float acc[8][3])                         \
	{                                                                                   \
		cb_q4dot##ISA(RM, RN, x, ldx, w, ldw, s, mn, k, flags, state, acc);         \
	}
#define CB_Q4DEF3(ISA, TGT, RM) CB_Q4DEF(ISA, TGT, RM, 1) CB_Q4DEF(ISA, TGT, RM, 2) \
	CB_Q4DEF(ISA, TGT, RM, 3)
#define CB_Q4REF3(ISA, RM) \
	{ cb_q4dot##ISA##_##RM##_1, cb_q4dot##ISA##_##RM##_2, cb_q4dot##ISA##_##RM##_3 }

CB_Q4DEF3(256, CB_AVX2, 1)
CB_Q4DEF3(256, CB_AVX2, 2)
CB_Q4DEF3(256, CB_AVX2, 3)
CB_Q4DEF3(256, CB_AVX2, 4)
CB_Q4DEF3(512, CB_AVX512, 1)
CB_Q4DEF3(512, CB_AVX512, 2)
CB_Q4DEF3(512, CB_AVX512, 3)
CB_Q4DEF3(512, CB_AVX512, 4)
CB_Q4DEF3(512, CB_AVX512, 5)
CB_Q4DEF3(512, CB_AVX512, 6)
CB_Q4DEF3(512, CB_AVX512, 7)
CB_Q4DEF3(512, CB_AVX512, 8)

static const cb_q4dot_fn cb_q4dot256_fns[4][3] = {
	CB_Q4REF3(256, 1), CB_Q4REF3(256, 2), CB_Q4REF3(256, 3), CB_Q4REF3(256, 4),
};

static const cb_q4dot_fn cb_q4dot512_fns[8][3] = {
	CB_Q4REF3(512, 1), CB_Q4REF3(512, 2), CB_Q4REF3(512, 3), CB_Q4REF3(512, 4),
	CB_Q4REF3(512, 5), CB_Q4REF3(512, 6), CB_Q4REF3(512, 7), CB_Q4REF3(512, 8),
};

static CB_AVX512 int64_t cb_q4_decode512(const uint8_t *w, const float *s, const float *mn,
					 int64_t k, float *dst)
{
	int64_t c = 0;
	__m128i q[2];

	for (; c + 32 <= k; c += 32) {
		cb_q4_unpack(_mm_loadu_si128((const __m128i *)(w + c / 2)), &q[0], &q[1]);
		for (int h = 0; h < 2; h++)
			_mm512_storeu_ps(dst + c + 16 * h,
					 _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q[h])),
							 _mm512_loadu_ps(s + c + 16 * h),
							 _mm512_loadu_ps(mn + c + 16 * h)));
	}
	return c;
}

static CB_AVX2 int64_t cb_q4_decode256(const uint8_t *w, const float *s, const float *mn,
				       int64_t k, float *dst)
{
	int64_t c = 0;
	__m128i q[2];

	for (; c + 32 <= k; c += 32) {
		cb_q4_unpack(_mm_loadu_si128((const __m128i *)(w + c / 2)), &q[0], &q[1]);
		for (int h = 0; h < 4; h++) {
			__m128i b = h & 1 ? _mm_unpackhi_epi64(q[h >> 1], q[h >> 1]) : q[h >> 1];

			_mm256_storeu_ps(dst + c + 8 * h,
					 _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)),
							 _mm256_loadu_ps(s + c + 8 * h),
							 _mm256_loadu_ps(mn + c + 8 * h)));
		}
	}
	return c;
}

/* (scale, mn) fp16 pairs -> two fp32 arrays; little-endian like the codec's bytes. */
static CB_AVX512 int64_t cb_q4_params512(const uint8_t *p, int64_t k, float *s, float *mn)
{
	int64_t c = 0;

	for (; c + 16 <= k; c += 16) {
		__m512i v = _mm512_loadu_si512((const void *)(p + 4 * c));

		_mm512_storeu_ps(s + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
		_mm512_storeu_ps(mn + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))));
	}
	return c;
}

static CB_AVX2 int64_t cb_q4_params256(const uint8_t *p, int64_t k, float *s, float *mn)
{
	int64_t c = 0;

	for (; c + 8 <= k; c += 8) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(p + 4 * c));
		/* per 128-bit lane: 4 scales then 4 mins; then the lanes' scales together */
		__m256i h = _mm256_packus_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
						_mm256_srli_epi32(v, 16));

		h = _mm256_permute4x64_epi64(h, 0xd8);
		_mm256_storeu_ps(s + c, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
		_mm256_storeu_ps(mn + c, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
	}
	return c;
}

/* ---- fp8 weights: 16 codes per step (AVX2, also on AVX-512 machines) -------------------- */

typedef void (*cb_f8dot_fn)(const float *x, int64_t ldx, const uint8_t *w, int64_t ldw,
			    const float *s, int64_t k, int flags, float *state, float acc[8][3]);

/* Codes [kk, k) of a row (k - kk < 16), zero-padded to 16. */
CB_INLINE CB_AVX2 __m128i cb_f8_tail(const uint8_t *w, int64_t kk, int64_t k)
{
	uint8_t t[16] = { 0 };

	memcpy(t, w + kk, (size_t)(k - kk));
	return _mm_loadu_si128((const __m128i *)t);
}

/* acc[i][j] += x[i, kk + lane] * w_j[kk + lane] for 8 lanes (half of h[j]);
 * lanes at or past `valid` weigh +0 (tails only). */
CB_INLINE CB_AVX2 void cb_f8step256(const int RM, const int RN, const __m256i h[3], int half,
				    const __m256 sv[3], const float *x, int64_t ldx, int64_t kk,
				    int valid, __m256 acc[4][3])
{
	__m256 wv[3], xv;
	int i, j;

	CB_UNROLL
	for (j = 0; j < RN; j++) {
		wv[j] = cb_f8_values(h[j], half, sv[j]);
		if (valid < 8) {
			__m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid),
							  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

			wv[j] = _mm256_and_ps(wv[j], _mm256_castsi256_ps(keep));
		}
	}
	CB_UNROLL
	for (i = 0; i < RM; i++) {
		xv = _mm256_loadu_ps(x + i * ldx + kk);
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
	}
}

CB_INLINE CB_AVX2 void cb_f8dot256(const int RM, const int RN, const float *x, int64_t ldx,
				   const uint8_t *w, int64_t ldw, const float *s, int64_t k,
				   int flags, float *state, float out[8][3])
{
	__m256 acc[4][3], sv[3];
	__m256i h[3];
	int64_t kk = 0;
	int i, j;

	CB_UNROLL
	for (j = 0; j < RN; j++)
		sv[j] = _mm256_set1_ps(s[j]);
	CB_UNROLL
	for (i = 0; i < RM; i++)
		CB_UNROLL
		for (j = 0; j < RN; j++)
			acc[i][j] = (flags & CPU_BLAS_DOT_FIRST) ? _mm256_setzero_ps()
				    : _mm256_loadu_ps(state + (i * 3 + j) * 8);
	for (; kk + 16 <= k; kk += 16) {
		CB_UNROLL
		for (j = 0; j < RN; j++)
			h[j] = cb_f8_halves(_mm_loadu_si128((const __m128i *)(w + j * ldw + kk)));
		cb_f8step256(RM, RN, h, 0, sv, x, ldx, kk, 8, acc);
		cb_f8step256(RM, RN, h, 1, sv, x, ldx, kk + 8, 8, acc);
	}
	if (kk < k) {
		/* x holds zeros past k (read); the weights there are masked to +0. */
		int r = (int)(k - kk);

		CB_UNROLL
		for (j = 0; j < RN; j++)
			h[j] = cb_f8_halves(cb_f8_tail(w + j * ldw, kk, k));
		cb_f8step256(RM, RN, h, 0, sv, x, ldx, kk, r < 8 ? r : 8, acc);
		if (r > 8)
			cb_f8step256(RM, RN, h, 1, sv, x, ldx, kk + 8, r - 8, acc);
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

#define CB_F8DEF(RM, RN)                                                                    \
	static CB_AVX2 void cb_f8dot256_##RM##_##RN(const float *x, int64_t ldx,            \
						     const uint8_t *w, int64_t ldw,           \
						     const float *s, int64_t k, int flags,    \
						     float *state, float acc[8][3])           \
	{                                                                                   \
		cb_f8dot256(RM, RN, x, ldx, w, ldw, s, k, flags, state, acc);               \
	}
#define CB_F8DEF3(RM) CB_F8DEF(RM, 1) CB_F8DEF(RM, 2) CB_F8DEF(RM, 3)
#define CB_F8REF3(RM) { cb_f8dot256_##RM##_1, cb_f8dot256_##RM##_2, cb_f8dot256_##RM##_3 }

CB_F8DEF3(1)
CB_F8DEF3(2)
CB_F8DEF3(3)
CB_F8DEF3(4)

static const cb_f8dot_fn cb_f8dot256_fns[4][3] = {
	CB_F8REF3(1), CB_F8REF3(2), CB_F8REF3(3), CB_F8REF3(4),
};

static CB_AVX2 int64_t cb_f8_decode256(const uint8_t *w, float scale, int64_t k, float *dst)
{
	__m256 sv = _mm256_set1_ps(scale);
	int64_t c = 0;

	for (; c + 16 <= k; c += 16) {
		__m256i h = cb_f8_halves(_mm_loadu_si128((const __m128i *)(w + c)));

		_mm256_storeu_ps(dst + c, cb_f8_values(h, 0, sv));
		_mm256_storeu_ps(dst + c + 8, cb_f8_values(h, 1, sv));
	}
	return c;
}
#endif

/* ---- plain C: 16 lanes, up to 4 x 3 (the 4-bit and fp8 kernels' shared parts) ---------- */

/* The accumulators: zero on the first k block, else parked in state. */
static void cb_acc16_begin(int im, int jn, int flags, const float *state, float acc[4][3][16])
{
	for (int i = 0; i < im; i++)
		for (int j = 0; j < jn; j++) {
			if (flags & CPU_BLAS_DOT_FIRST)
				memset(acc[i][j], 0, sizeof(acc[i][j]));
			else
				memcpy(acc[i][j], state + (i * 3 + j) * 16, sizeof(acc[i][j]));
		}
}

/* acc[i][j][l] += x[i, kk + l] * wv[j][l] for 16 lanes. */
static void cb_acc16_step(int im, int jn, const float *x, int64_t ldx, int64_t kk,
			  float wv[3][16], float acc[4][3][16])
{
	for (int i = 0; i < im; i++)
		for (int j = 0; j < jn; j++)
			for (int l = 0; l < 16; l++)
				acc[i][j][l] += x[i * ldx + kk + l] * wv[j][l];
}

/* The last k block sums the lanes into out; others park them in state. */
static void cb_acc16_end(int im, int jn, int flags, float acc[4][3][16], float *state,
			 float out[8][3])
{
	for (int i = 0; i < im; i++)
		for (int j = 0; j < jn; j++) {
			if (flags & CPU_BLAS_DOT_LAST) {
				float sum = 0;

				for (int l = 0; l < 16; l++)
					sum += acc[i][j][l];
				out[i][j] = sum;
			} else {
				memcpy(state + (i * 3 + j) * 16, acc[i][j], sizeof(acc[i][j]));
			}
		}
}

/* ---- 4-bit weights, plain C: 16 lanes, up to 4 x 3 ------------------------------------------ */

static void cb_q4dot_c(int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		       int64_t ldw, const float *s, const float *mn, int64_t k, int flags,
		       float *state, float out[8][3])
{
	float acc[4][3][16], wv[3][16];
	int j, l;

	cb_acc16_begin(im, jn, flags, state, acc);
	for (int64_t kk = 0; kk < k; kk += 16) {
		for (j = 0; j < jn; j++) {
			const uint8_t *b = w + j * ldw + kk / 2;
			uint8_t t[8] = { 0 };

			/* Lanes past k see x = 0, s = mn = 0 (padding): they add +0. */
			if (k - kk < 16) {
				memcpy(t, b, (size_t)(k - kk + 1) / 2);
				b = t;
			}
			for (l = 0; l < 8; l++) {
				wv[j][2 * l] = (float)(b[l] >> 4) * s[kk + 2 * l] + mn[kk + 2 * l];
				wv[j][2 * l + 1] = (float)(b[l] & 15) * s[kk + 2 * l + 1] +
						   mn[kk + 2 * l + 1];
			}
		}
		cb_acc16_step(im, jn, x, ldx, kk, wv, acc);
	}
	cb_acc16_end(im, jn, flags, acc, state, out);
}

/* ---- fp8 weights, plain C: 16 lanes, up to 4 x 3 --------------------------------------- */

static void cb_f8dot_c(int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		       int64_t ldw, const float *s, int64_t k, int flags, float *state,
		       float out[8][3])
{
	float acc[4][3][16], wv[3][16];
	int j, l;

	cb_acc16_begin(im, jn, flags, state, acc);
	for (int64_t kk = 0; kk < k; kk += 16) {
		int valid = k - kk < 16 ? (int)(k - kk) : 16;

		/* Lanes past k see x = 0 (padding) and weigh +0. */
		for (j = 0; j < jn; j++)
			for (l = 0; l < 16; l++)
				wv[j][l] = l < valid ? fg_f8_value(w[j * ldw + kk + l], s[j]) : 0.0f;
		cb_acc16_step(im, jn, x, ldx, kk, wv, acc);
	}
	cb_acc16_end(im, jn, flags, acc, state, out);
}

int cpu_blas_isa_supported(int isa)
{
	switch (isa) {
	case CPU_BLAS_ISA_NONE:
		return 1;
#if FG_FP16_SIMD_X86
	case CPU_BLAS_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       fg_fp16_simd_have_f16c();
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
#if FG_FP16_SIMD_X86
	if (isa == CPU_BLAS_ISA_AVX512)
		cb_dot512_fns[im - 1][jn - 1](x, ldx, w, ldw, k, flags, state, acc);
	else
		cb_dot256_fns[im - 1][jn - 1](x, ldx, w, ldw, k, flags, state, acc);
#else
	(void)isa, (void)im, (void)jn, (void)x, (void)ldx, (void)w, (void)ldw, (void)k;
	(void)flags, (void)state, (void)acc;
#endif
}

int cpu_blas_q4_rows(int isa)
{
	return isa == CPU_BLAS_ISA_AVX512 ? 8 : 4;
}

int cpu_blas_q4_lanes(int isa)
{
	return isa == CPU_BLAS_ISA_AVX512 ? 16 : isa == CPU_BLAS_ISA_AVX2 ? 8 : 16;
}

void cpu_blas_q4_params(int isa, const uint8_t *p, int64_t k, float *s, float *mn)
{
	int64_t c = 0, kp = (k + 31) & ~(int64_t)31;

#if FG_FP16_SIMD_X86
	if (isa == CPU_BLAS_ISA_AVX512)
		c = cb_q4_params512(p, k, s, mn);
	else if (isa == CPU_BLAS_ISA_AVX2)
		c = cb_q4_params256(p, k, s, mn);
#else
	(void)isa;
#endif
	for (; c < k; c++) {
		s[c] = fg_half_to_float((uint16_t)(p[4 * c] | p[4 * c + 1] << 8));
		mn[c] = fg_half_to_float((uint16_t)(p[4 * c + 2] | p[4 * c + 3] << 8));
	}
	for (; c < kp; c++)
		s[c] = mn[c] = 0;
}

void cpu_blas_q4_dot(int isa, int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		     int64_t ldw, const float *s, const float *mn, int64_t k, int flags,
		     float *state, float acc[8][3])
{
#if FG_FP16_SIMD_X86
	if (isa == CPU_BLAS_ISA_AVX512) {
		cb_q4dot512_fns[im - 1][jn - 1](x, ldx, w, ldw, s, mn, k, flags, state, acc);
		return;
	}
	if (isa == CPU_BLAS_ISA_AVX2) {
		cb_q4dot256_fns[im - 1][jn - 1](x, ldx, w, ldw, s, mn, k, flags, state, acc);
		return;
	}
#endif
	cb_q4dot_c(im, jn, x, ldx, w, ldw, s, mn, k, flags, state, acc);
}

void cpu_blas_q4_decode(int isa, const uint8_t *w, const float *s, const float *mn, int64_t k,
			float *dst)
{
	int64_t c = 0;

#if FG_FP16_SIMD_X86
	if (isa == CPU_BLAS_ISA_AVX512)
		c = cb_q4_decode512(w, s, mn, k, dst);
	else if (isa == CPU_BLAS_ISA_AVX2)
		c = cb_q4_decode256(w, s, mn, k, dst);
#else
	(void)isa;
#endif
	/* q * s is exact in fp32: with or without a fused multiply-add, one rounding. */
	for (; c < k; c++)
		dst[c] = (float)fg_q4_nibble(w, (uint64_t)c) * s[c] + mn[c];
}

int cpu_blas_f8_rows(int isa)
{
	(void)isa;
	return 4;
}

int cpu_blas_f8_lanes(int isa)
{
	return isa == CPU_BLAS_ISA_NONE ? 16 : 8;
}

void cpu_blas_f8_dot(int isa, int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		     int64_t ldw, const float *s, int64_t k, int flags, float *state,
		     float acc[8][3])
{
#if FG_FP16_SIMD_X86
	if (isa != CPU_BLAS_ISA_NONE) {
		cb_f8dot256_fns[im - 1][jn - 1](x, ldx, w, ldw, s, k, flags, state, acc);
		return;
	}
#else
	(void)isa;
#endif
	cb_f8dot_c(im, jn, x, ldx, w, ldw, s, k, flags, state, acc);
}

void cpu_blas_f8_decode(int isa, const uint8_t *w, float scale, int64_t k, float *dst)
{
	int64_t c = 0;

#if FG_FP16_SIMD_X86
	if (isa != CPU_BLAS_ISA_NONE)
		c = cb_f8_decode256(w, scale, k, dst);
#else
	(void)isa;
#endif
	for (; c < k; c++)
		dst[c] = fg_f8_value(w[c], scale);
}
