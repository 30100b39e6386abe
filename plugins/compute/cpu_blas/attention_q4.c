/* plugins/compute/cpu_blas/attention_q4.c - decode attention over a 4-bit KV
 * cache (FG_DTYPE_Q4_COLS, fgcore/q4.h), read in place, never widened to fp32.
 *
 * A head's columns meet one or more 4-bit groups: its "segments", each with one
 * (scale sc, min m) pair per cache row, the codes c in 0..15.  With q rounded
 * per head to int16, qi = round(q / qs), qs = max|q| / 32767:
 *   scores  q . k_t = qs * sum_g (sc_tg * I_tg + m_tg * QI_g),
 *           I_tg = sum_{d in g} qi_d c_td and QI_g = sum_{d in g} qi_d;
 *   output  o_d = (sum_t w_tg c_td + sum_t p_t m_tg) / sum_t p_t, w_tg = p_t sc_tg,
 *           w rounded per (head, segment, block of Q4_BLOCK positions) to
 *           int16 W with a power-of-two scale 2^-k: sum_t W_t c_td is below
 *           2^24, so exact in fp32, and 2^-k times it exact too.
 * The integer sums use codes widened to int16 and vpmaddwd; Q4_BLOCK keeps
 * them far from overflow however long the column.  Rounding q costs at most
 * max|q| / 65534 a value.  W keeps 15 bits of its block's largest weight,
 * which a peaked softmax would show (1e-4 of the output): a block holding a
 * weight of 1/64 of the softmax sum or more is rounded to 30 bits instead,
 * its W split into high and low int16 rows summed alike.
 *
 * Every kernel has an AVX2 version and a plain C one that make the same IEEE
 * operations on each value (FMA written out in both, fmaf in C), with sums
 * across positions kept in 8 lanes that C keeps too; the integer sums are
 * exact.  So the ISA and the thread count never change a bit (for finite
 * inputs; NaNs propagate, their payloads may differ).
 *
 * Tasks: (batch row, block of adjacent key/value heads, part of their groups
 * of query heads).  A block's columns are one run of bytes in each cache row,
 * and a task walks Q4_BLOCK rows at a time through every head of its block,
 * prefetching the same head's columns of the next Q4_BLOCK rows: the cache
 * streams past nearly in address order, not a row width apart per head.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>
#include <fgcore/q4.h>

#define Q4_BLOCK 16 /* positions a block: even (pairs), and 16 * 32768 * 15 < 2^24 */
#define Q4_SCORE_BUDGET ((int64_t)1 << 18) /* scores (floats) one task may hold */

/* Columns [d0, d0 + len) of a head, inside group g of its row. */
struct q4_seg {
	int64_t d0, len, g;
};

/* The most segments a head of hd columns meets. */
static int64_t q4_max_segs(int64_t hd)
{
	return (hd + FG_Q4_GROUP - 2) / FG_Q4_GROUP + 1;
}

/* The segments of columns [kc, kc + hd); returns their count. */
static int q4_segs(int64_t kc, int64_t hd, struct q4_seg *s)
{
	int n = 0;

	for (int64_t d = 0; d < hd; d += s[n++].len) {
		int64_t g = (kc + d) / FG_Q4_GROUP, end = (g + 1) * FG_Q4_GROUP - kc;

		s[n].d0 = d;
		s[n].len = (end < hd ? end : hd) - d;
		s[n].g = g;
	}
	return n;
}

/* 2^k as a float, -126 <= k <= 127. */
static inline float q4_pow2(int k)
{
	return fg_bits_to_float((uint32_t)(127 + k) << 23);
}

/* A block of Q4_BLOCK positions of one cache: where each row starts.  Past
 * the nr rows the entries repeat the last (whose codes then weigh 0). */
struct q4_rows {
	int nr;
	uint64_t re[Q4_BLOCK];       /* element */
	uint64_t rg[Q4_BLOCK];       /* group */
	const uint8_t *rb[Q4_BLOCK]; /* byte (exact when re is even) */
	const uint8_t *rp[Q4_BLOCK]; /* parameters */
};

/* One key/value head over a block of rows, as the kernels see it.  The code of
 * column d of row t is element r->re[t] + kc + d of data; the parameters of
 * its segment g are group r->rg[t] + sg[0].g + g.  Arrays per (query head i,
 * segment g) hold Q4_BLOCK entries: [(i * ns + g) * Q4_BLOCK + t]. */
struct q4_blk {
	const uint8_t *data;
	const struct q4_rows *r;
	int64_t kc;
	const struct q4_seg *sg;
	int ns;
	float *sc, *mn; /* [g * Q4_BLOCK + t]: the rows' scale and min */
};

/* ---- plain C ------------------------------------------------------------------------ */

/* k->sc, k->mn of every row and segment (exact conversions) */
static void q4_params_c(const uint8_t *params, struct q4_blk *k)
{
	for (int g = 0; g < k->ns; g++)
		for (int t = 0; t < Q4_BLOCK; t++)
			fg_q4_param_load(params, k->r->rg[t] + (uint64_t)(k->sg[0].g + g),
					 &k->sc[g * Q4_BLOCK + t], &k->mn[g * Q4_BLOCK + t]);
}

/* I[i][g][t] = sum over segment g of q_i[d] c_t[d] for t < nr (0 past it),
 * i < nq; q_i at q + i * ldq in column order. */
static void q4_scores_c(const struct q4_blk *k, const int16_t *q, int64_t ldq, int nq, int32_t *I)
{
	for (int i = 0; i < nq; i++)
		for (int g = 0; g < k->ns; g++)
			for (int t = 0; t < Q4_BLOCK; t++) {
				uint64_t e = k->r->re[t] + (uint64_t)k->kc;
				int32_t s = 0;

				for (int64_t d = k->sg[g].d0; t < k->r->nr && d < k->sg[g].d0 + k->sg[g].len;
				     d++)
					s += q[i * ldq + d] * (int32_t)fg_q4_nibble(k->data, e + (uint64_t)d);
				I[(i * k->ns + g) * Q4_BLOCK + t] = s;
			}
}

/* s[t] = qsc * sum_g (sc_tg I_tg + mn_tg qI_g) for t < Q4_BLOCK, FMAs in g order. */
static void q4_finish_scores_c(const struct q4_blk *k, const int32_t *I, const float *qI,
			       float qsc, float *s)
{
	for (int t = 0; t < Q4_BLOCK; t++) {
		float f = 0;

		for (int g = 0; g < k->ns; g++) {
			f = fmaf(k->sc[g * Q4_BLOCK + t], (float)I[g * Q4_BLOCK + t], f);
			f = fmaf(k->mn[g * Q4_BLOCK + t], qI[g], f);
		}
		s[t] = f * qsc;
	}
}

/* x rounded as cvtps2dq does: to nearest, ties to even; out of range or NaN
 * 0x80000000. */
static inline int32_t q4_cvt(float x)
{
	return fabsf(x) < 2147483648.0f ? (int32_t)lrintf(x) : INT32_MIN;
}

/* x saturated to int16, as packssdw does. */
static inline int16_t q4_sat16(int32_t x)
{
	return (int16_t)(x > 32767 ? 32767 : x < -32768 ? -32768 : x);
}

/* One row of int16 weights of a block over one segment, for q4_values_*:
 * acc[d] += ks * sum_t W[t] c_t[d]. */
struct q4_wrow {
	const int16_t *W;
	float ks;   /* a power of two */
	float *acc; /* the head's sums, column order */
};

/* The weights of one head over segment g of a block: w[t] = p[t] sc_tg as
 * W[t] 2^-k.  Rounded to 15 bits (k the largest with max|w| 2^k < 2^15), one
 * row r[0]; where the block holds a weight p_t >= psum / 64, whose rounding
 * errors would show, to 30 bits (max|w| 2^k < 2^30) as two rows, the high 15
 * bits (r[0], 2^(15-k)) then the low 15 (r[1], 2^-k).  k is at most 115:
 * weights that small add nothing.  Returns the rows; W: 2 * Q4_BLOCK entries.
 * And ml[t % 8] += p[t] mn_tg, t in order. */
static int q4_weights_c(const struct q4_blk *k, int g, const float *p, float psum, int16_t *W,
			float *acc, struct q4_wrow *r, float *ml)
{
	const float *sc = k->sc + g * Q4_BLOCK, *mn = k->mn + g * Q4_BLOCK;
	float w[Q4_BLOCK], mw = 0, mp = 0, two;
	int e, fine;

	for (int t = 0; t < Q4_BLOCK; t++) {
		w[t] = p[t] * sc[t];
		mw = fabsf(w[t]) > mw ? fabsf(w[t]) : mw;
		mp = p[t] > mp ? p[t] : mp;
	}
	for (int t = 0; t < Q4_BLOCK; t++)
		ml[t % 8] = fmaf(p[t], mn[t], ml[t % 8]);
	fine = mp * 64 >= psum;
	/* 15 (or 30) - frexp's exponent of mw */
	e = (fine ? 156 : 141) - (int)(fg_float_to_bits(mw) >> 23 & 255);
	e = e < 115 ? e : 115;
	two = q4_pow2(e);
	if (!fine) {
		for (int t = 0; t < Q4_BLOCK; t++)
			W[t] = q4_sat16(q4_cvt(w[t] * two));
		r[0] = (struct q4_wrow){ W, q4_pow2(-e), acc };
		return 1;
	}
	for (int t = 0; t < Q4_BLOCK; t++) {
		int32_t x = q4_cvt(w[t] * two);

		W[t] = q4_sat16((x - (x & 32767)) / 32768); /* x >> 15, as vpsrad */
		W[Q4_BLOCK + t] = (int16_t)(x & 32767);
	}
	r[0] = (struct q4_wrow){ W, q4_pow2(15 - e), acc };
	r[1] = (struct q4_wrow){ W + Q4_BLOCK, q4_pow2(-e), acc };
	return 2;
}

/* For each row r[j] in order: r[j].acc[d] += ks * sum_{t < nr} W[t] c_t[d],
 * d in segment g.  The sum is exact in fp32 and ks a power of two. */
static void q4_values_c(const struct q4_blk *k, int g, const struct q4_wrow *r, int n)
{
	for (int j = 0; j < n; j++)
		for (int64_t d = k->sg[g].d0; d < k->sg[g].d0 + k->sg[g].len; d++) {
			int32_t s = 0;

			for (int t = 0; t < k->r->nr; t++)
				s += r[j].W[t] * (int32_t)fg_q4_nibble(k->data, k->r->re[t] +
									   (uint64_t)(k->kc + d));
			r[j].acc[d] += (float)s * r[j].ks;
		}
}

/* ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): the AVX2 reduction's order */
static float q4_sum8(const float *l)
{
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* e^x from 2^n e^r, n = rint(x log2 e), r = x - n ln 2 (two FMAs, ln 2 split)
 * and the Taylor polynomial of degree 7 (|r| <= 0.35: error 5e-9), for x <= 0;
 * below -87 as at -87 (1.6e-38: nothing beside the largest weight, 1). */
#define Q4_LOG2E 1.44269504f
#define Q4_LN2_HI 0.693145751953125f /* few bits: n * Q4_LN2_HI is exact */
#define Q4_LN2_LO 1.42860677e-6f
static const float q4_exp_poly[8] = { 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
				      1.0f / 6,    0.5f,        1.0f,        1.0f };

static float q4_exp_c(float x)
{
	float n, r, p;

	if (x != x)
		return x;
	x = -87.0f > x ? -87.0f : x;
	n = rintf(x * Q4_LOG2E);
	r = fmaf(-n, Q4_LN2_HI, x);
	r = fmaf(-n, Q4_LN2_LO, r);
	p = q4_exp_poly[0];
	for (int k = 1; k < 8; k++)
		p = fmaf(p, r, q4_exp_poly[k]);
	return p * q4_pow2((int)n);
}

/* The largest of s[0..n). */
static float q4_max_c(const float *s, int64_t n)
{
	float mx = -INFINITY;

	for (int64_t j = 0; j < n; j++)
		mx = s[j] > mx ? s[j] : mx;
	return mx;
}

/* s[j] = e^(s[j] - mx) for j < n, 0 for n <= j < lds (a multiple of 8);
 * returns their sum, in 8 lanes (j % 8) then q4_sum8. */
static float q4_softmax_c(float *s, int64_t n, int64_t lds, float mx)
{
	float l[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

	for (int64_t j = 0; j < lds; j++) {
		s[j] = j < n ? q4_exp_c(s[j] - mx) : 0;
		l[j % 8] += s[j];
	}
	return q4_sum8(l);
}

/* ---- AVX2 (with FMA and F16C) ---------------------------------------------------------
 * Whole bytes only (every e[t] even).  32 codes (16 bytes) widen to 16 words,
 * word k = c[2k] << 4 | c[2k + 1]: its low nibble meets q[2k + 1], its high
 * one q[2k], so q is stored in that order (q4_quant_q's kernel order). */
#if FG_FP16_SIMD_X86

/* lane t = the sum of the 8 lanes of v[t] */
__attribute__((target("avx2")))
static inline __m256i q4_reduce8(const __m256i *v)
{
	__m256i a0 = _mm256_hadd_epi32(v[0], v[1]), a1 = _mm256_hadd_epi32(v[2], v[3]);
	__m256i a2 = _mm256_hadd_epi32(v[4], v[5]), a3 = _mm256_hadd_epi32(v[6], v[7]);
	__m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);

	return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
				_mm256_permute2x128_si256(b0, b1, 0x31));
}

/* The low halves of the 8 words of v widened in lo, the high halves in hi. */
__attribute__((target("avx2,f16c")))
static inline void q4_split_halves(__m256i v, __m256 *lo, __m256 *hi)
{
	const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
					       0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);

	v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, order), 0xd8);
	*lo = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
	*hi = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

/* q4_params_c.  Two segments (head_dim 128): rows t and t + 4 side by side,
 * widened, transposed 4 x 4 in each half.  Else the pairs of 8 rows at once,
 * gathered (their byte offsets fit an int32, checked by the caller). */
__attribute__((target("avx2,f16c")))
static void q4_params_avx2(const uint8_t *params, struct q4_blk *k)
{
	const uint8_t *const *rp = k->r->rp;
	int64_t g0 = 4 * k->sg[0].g;
	int32_t o[Q4_BLOCK];

	if (k->ns == 2) {
		for (int t = 0; t < Q4_BLOCK; t += 8) {
			__m256 r[4], u0, u1, u2, u3;

			for (int i = 0; i < 4; i++) {
				__m128i x = _mm_loadl_epi64((const __m128i *)(rp[t + i] + g0));

				x = _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(x),
								  (const double *)(rp[t + i + 4] + g0)));
				r[i] = _mm256_cvtph_ps(x); /* s0 m0 s1 m1 of rows t + i, t + i + 4 */
			}
			u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpacklo_ps(r[2], r[3]);
			u2 = _mm256_unpackhi_ps(r[0], r[1]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
			_mm256_storeu_ps(k->sc + t, _mm256_shuffle_ps(u0, u1, 0x44));
			_mm256_storeu_ps(k->mn + t, _mm256_shuffle_ps(u0, u1, 0xee));
			_mm256_storeu_ps(k->sc + Q4_BLOCK + t, _mm256_shuffle_ps(u2, u3, 0x44));
			_mm256_storeu_ps(k->mn + Q4_BLOCK + t, _mm256_shuffle_ps(u2, u3, 0xee));
		}
		return;
	}
	for (int t = 0; t < Q4_BLOCK; t++)
		o[t] = (int32_t)(rp[t] - params + g0);
	for (int t = 0; t < Q4_BLOCK; t += 8) {
		__m256i off = _mm256_loadu_si256((const __m256i *)(o + t));

		for (int g = 0; g < k->ns; g++) {
			__m256i v = _mm256_i32gather_epi32((const int *)(params + 4 * g), off, 1);
			__m256 sc, mn;

			q4_split_halves(v, &sc, &mn);
			_mm256_storeu_ps(k->sc + g * Q4_BLOCK + t, sc);
			_mm256_storeu_ps(k->mn + g * Q4_BLOCK + t, mn);
		}
	}
}

/* q4_scores_c's sums for NH heads as 8 partial sums each, part[i][g][t][8],
 * any segments. */
__attribute__((target("avx2"), always_inline))
static inline void q4_scores_avx2_n(const int NH, const struct q4_blk *k, const int16_t *q,
				    int64_t ldq, int32_t *part)
{
	const __m256i m15 = _mm256_set1_epi16(15);

	for (int t = 0; t < k->r->nr; t++) {
		const uint8_t *p = k->r->rb[t] + k->kc / 2;

		for (int g = 0; g < k->ns; g++) {
			int64_t d = k->sg[g].d0, end = d + k->sg[g].len;
			__m256i acc[4];
			int32_t rest[4] = { 0, 0, 0, 0 };

			_Pragma("GCC unroll 4")
			for (int h = 0; h < NH; h++)
				acc[h] = _mm256_setzero_si256();
			for (; d + 32 <= end; d += 32) {
				__m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + d / 2)));
				__m256i lo = _mm256_and_si256(x, m15), hi = _mm256_srli_epi16(x, 4);

				_Pragma("GCC unroll 4")
				for (int h = 0; h < NH; h++) {
					const int16_t *qh = q + h * ldq + d;
					__m256i s = _mm256_madd_epi16(lo, _mm256_loadu_si256((const __m256i *)qh));

					s = _mm256_add_epi32(s, _mm256_madd_epi16(hi, _mm256_loadu_si256((const __m256i *)(qh + 16))));
					acc[h] = _mm256_add_epi32(acc[h], s);
				}
			}
			if (d + 16 <= end) {
				__m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(p + d / 2)));
				__m128i lo = _mm_and_si128(x, _mm256_castsi256_si128(m15));
				__m128i hi = _mm_srli_epi16(x, 4);

				_Pragma("GCC unroll 4")
				for (int h = 0; h < NH; h++) {
					const int16_t *qh = q + h * ldq + d;
					__m128i s = _mm_madd_epi16(lo, _mm_loadu_si128((const __m128i *)qh));

					s = _mm_add_epi32(s, _mm_madd_epi16(hi, _mm_loadu_si128((const __m128i *)(qh + 8))));
					acc[h] = _mm256_add_epi32(acc[h], _mm256_zextsi128_si256(s));
				}
				d += 16;
			}
			for (; d < end; d++) { /* the last codes, in column order */
				int32_t c = (int32_t)fg_q4_nibble(p, (uint64_t)d);

				_Pragma("GCC unroll 4")
				for (int h = 0; h < NH; h++)
					rest[h] += q[h * ldq + d] * c;
			}
			_Pragma("GCC unroll 4")
			for (int h = 0; h < NH; h++) {
				int32_t *o = part + ((h * k->ns + g) * Q4_BLOCK + t) * 8;

				_mm256_storeu_si256((__m256i *)o, acc[h]);
				o[0] += rest[h];
			}
		}
	}
}

/* The same where every segment is a whole group: 64 codes, 32 bytes. */
__attribute__((target("avx2"), always_inline))
static inline void q4_scores_avx2_g(const int NH, const struct q4_blk *k, const int16_t *q,
				    int64_t ldq, int32_t *part)
{
	const __m256i m15 = _mm256_set1_epi16(15);

	for (int t = 0; t < k->r->nr; t++) {
		const uint8_t *p = k->r->rb[t] + k->kc / 2;

		for (int g = 0; g < k->ns; g++, p += 32) {
			__m256i x0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
			__m256i x1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + 16)));
			__m256i l0 = _mm256_and_si256(x0, m15), h0 = _mm256_srli_epi16(x0, 4);
			__m256i l1 = _mm256_and_si256(x1, m15), h1 = _mm256_srli_epi16(x1, 4);

			_Pragma("GCC unroll 4")
			for (int h = 0; h < NH; h++) {
				const __m256i *qh = (const __m256i *)(q + h * ldq + 64 * g);
				__m256i s0 = _mm256_madd_epi16(l0, _mm256_loadu_si256(qh));
				__m256i s1 = _mm256_madd_epi16(h0, _mm256_loadu_si256(qh + 1));

				s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(l1, _mm256_loadu_si256(qh + 2)));
				s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(h1, _mm256_loadu_si256(qh + 3)));
				_mm256_storeu_si256((__m256i *)(part + ((h * k->ns + g) * Q4_BLOCK + t) * 8),
						    _mm256_add_epi32(s0, s1));
			}
		}
	}
}

/* q4_scores_c with AVX2; part: nq * ns * Q4_BLOCK * 8 int32, 32-byte aligned. */
__attribute__((target("avx2")))
static void q4_scores_avx2(const struct q4_blk *k, const int16_t *q, int64_t ldq, int nq,
			   int32_t *I, int32_t *part)
{
	int i = 0, whole = k->sg[0].len == 64 && k->sg[k->ns - 1].len == 64;

	if (whole) { /* head_dim a multiple of 64: whole groups throughout */
		for (; i + 4 <= nq; i += 4)
			q4_scores_avx2_g(4, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
		for (; i + 2 <= nq; i += 2)
			q4_scores_avx2_g(2, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
		if (i < nq)
			q4_scores_avx2_g(1, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
	} else {
		for (; i + 4 <= nq; i += 4)
			q4_scores_avx2_n(4, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
		for (; i + 2 <= nq; i += 2)
			q4_scores_avx2_n(2, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
		if (i < nq)
			q4_scores_avx2_n(1, k, q + i * ldq, ldq, part + i * k->ns * Q4_BLOCK * 8);
	}
	for (int r = 0; r < nq * k->ns; r++) {
		__m256i *v = (__m256i *)(part + r * Q4_BLOCK * 8);

		for (int t = k->r->nr; t < Q4_BLOCK; t++) /* rows past the last: zeros */
			v[t] = _mm256_setzero_si256();
		_mm256_storeu_si256((__m256i *)(I + r * Q4_BLOCK), q4_reduce8(v));
		_mm256_storeu_si256((__m256i *)(I + r * Q4_BLOCK + 8), q4_reduce8(v + 8));
	}
}

__attribute__((target("avx2,fma")))
static void q4_finish_scores_avx2(const struct q4_blk *k, const int32_t *I, const float *qI,
				  float qsc, float *s)
{
	for (int t = 0; t < Q4_BLOCK; t += 8) {
		__m256 f = _mm256_setzero_ps();

		for (int g = 0; g < k->ns; g++) {
			__m256 x = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(I + g * Q4_BLOCK + t)));

			f = _mm256_fmadd_ps(_mm256_loadu_ps(k->sc + g * Q4_BLOCK + t), x, f);
			f = _mm256_fmadd_ps(_mm256_loadu_ps(k->mn + g * Q4_BLOCK + t), _mm256_set1_ps(qI[g]), f);
		}
		_mm256_storeu_ps(s + t, _mm256_mul_ps(f, _mm256_set1_ps(qsc)));
	}
}

/* The largest lane of v (all >= 0 or NaN). */
__attribute__((target("avx2")))
static inline float q4_hmax(__m256 v)
{
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 0x55)));
}

__attribute__((target("avx2,fma")))
static int q4_weights_avx2(const struct q4_blk *k, int g, const float *p, float psum, int16_t *W,
			   float *acc, struct q4_wrow *r, float *ml)
{
	const float *sc = k->sc + g * Q4_BLOCK, *mn = k->mn + g * Q4_BLOCK;
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 p0 = _mm256_loadu_ps(p), p1 = _mm256_loadu_ps(p + 8), two, l;
	__m256 w0 = _mm256_mul_ps(p0, _mm256_loadu_ps(sc));
	__m256 w1 = _mm256_mul_ps(p1, _mm256_loadu_ps(sc + 8));
	float mw = q4_hmax(_mm256_max_ps(_mm256_and_ps(w0, abs), _mm256_and_ps(w1, abs)));
	int fine = q4_hmax(_mm256_max_ps(p0, p1)) * 64 >= psum;
	int e = (fine ? 156 : 141) - (int)(fg_float_to_bits(mw) >> 23 & 255);
	__m256i x0, x1;

	l = _mm256_fmadd_ps(p0, _mm256_loadu_ps(mn), _mm256_loadu_ps(ml));
	_mm256_storeu_ps(ml, _mm256_fmadd_ps(p1, _mm256_loadu_ps(mn + 8), l));
	e = e < 115 ? e : 115;
	two = _mm256_set1_ps(q4_pow2(e));
	x0 = _mm256_cvtps_epi32(_mm256_mul_ps(w0, two));
	x1 = _mm256_cvtps_epi32(_mm256_mul_ps(w1, two));
	if (!fine) {
		_mm256_storeu_si256((__m256i *)W,
				    _mm256_permute4x64_epi64(_mm256_packs_epi32(x0, x1), 0xd8));
		r[0] = (struct q4_wrow){ W, q4_pow2(-e), acc };
		return 1;
	}
	_mm256_storeu_si256((__m256i *)W,
			    _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_srai_epi32(x0, 15),
									_mm256_srai_epi32(x1, 15)), 0xd8));
	x0 = _mm256_and_si256(x0, _mm256_set1_epi32(32767));
	x1 = _mm256_and_si256(x1, _mm256_set1_epi32(32767));
	_mm256_storeu_si256((__m256i *)(W + Q4_BLOCK),
			    _mm256_permute4x64_epi64(_mm256_packs_epi32(x0, x1), 0xd8));
	r[0] = (struct q4_wrow){ W, q4_pow2(15 - e), acc };
	r[1] = (struct q4_wrow){ W + Q4_BLOCK, q4_pow2(-e), acc };
	return 2;
}

/* dst[0..16) += s * (the sums of columns 2k in even, 2k + 1 in odd, k < 8):
 * s a power of two and the sums below 2^24, so each product is exact. */
__attribute__((target("avx2")))
static inline void q4_flush16(float *dst, __m256i even, __m256i odd, __m256 s)
{
	__m256 ev = _mm256_mul_ps(_mm256_cvtepi32_ps(even), s);
	__m256 od = _mm256_mul_ps(_mm256_cvtepi32_ps(odd), s);
	__m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);

	_mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), _mm256_permute2f128_ps(lo, hi, 0x20)));
	_mm256_storeu_ps(dst + 8, _mm256_add_ps(_mm256_loadu_ps(dst + 8),
						_mm256_permute2f128_ps(lo, hi, 0x31)));
}

/* W[t] | W[t + 1] << 16 in every lane: the weights of a pair of rows. */
__attribute__((target("avx2")))
static inline __m256i q4_pair(const int16_t *w)
{
	int32_t x;

	memcpy(&x, w, sizeof(x));
	return _mm256_set1_epi32(x);
}

/* q4_values_c for one or two heads (W1, acc1 NULL: one), 32 columns from d:
 * the codes of rows t and t + 1 interleaved bytewise, then widened, so each
 * 32-bit lane holds one column of both rows, which vpmaddwd weighs by the
 * pair's W (an odd last row pairs with a weight of 0).  Plain variables:
 * arrays of vectors end up on the stack. */
__attribute__((target("avx2"), always_inline))
static inline void q4_values32(const uint8_t *const *bp, int np, int64_t d, const int16_t *W0,
			       const int16_t *W1, __m256 ks0, __m256 ks1, float *acc0, float *acc1)
{
	const __m256i m15 = _mm256_set1_epi16(15);
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	__m256i c0 = a0, c1 = a0, c2 = a0, c3 = a0;

	for (int u = 0; u < np; u++) {
		__m128i b0 = _mm_loadu_si128((const __m128i *)(bp[2 * u] + d / 2));
		__m128i b1 = _mm_loadu_si128((const __m128i *)(bp[2 * u + 1] + d / 2));
		__m256i x0 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b0, b1));
		__m256i x1 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(b0, b1));
		__m256i v0 = _mm256_and_si256(x0, m15), v1 = _mm256_srli_epi16(x0, 4);
		__m256i v2 = _mm256_and_si256(x1, m15), v3 = _mm256_srli_epi16(x1, 4);
		__m256i w = q4_pair(W0 + 2 * u);

		a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(v0, w));
		a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(v1, w));
		a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(v2, w));
		a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(v3, w));
		if (W1) {
			w = q4_pair(W1 + 2 * u);
			c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(v0, w));
			c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(v1, w));
			c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(v2, w));
			c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(v3, w));
		}
	}
	q4_flush16(acc0 + d, a1, a0, ks0);
	q4_flush16(acc0 + d + 16, a3, a2, ks0);
	if (W1) {
		q4_flush16(acc1 + d, c1, c0, ks1);
		q4_flush16(acc1 + d + 16, c3, c2, ks1);
	}
}

/* The same for 16 columns. */
__attribute__((target("avx2"), always_inline))
static inline void q4_values16(const uint8_t *const *bp, int np, int64_t d, const int16_t *W0,
			       const int16_t *W1, __m256 ks0, __m256 ks1, float *acc0, float *acc1)
{
	const __m256i m15 = _mm256_set1_epi16(15);
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, c0 = a0, c1 = a0;

	for (int u = 0; u < np; u++) {
		__m128i b0 = _mm_loadl_epi64((const __m128i *)(bp[2 * u] + d / 2));
		__m128i b1 = _mm_loadl_epi64((const __m128i *)(bp[2 * u + 1] + d / 2));
		__m256i x = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b0, b1));
		__m256i v0 = _mm256_and_si256(x, m15), v1 = _mm256_srli_epi16(x, 4);
		__m256i w = q4_pair(W0 + 2 * u);

		a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(v0, w));
		a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(v1, w));
		if (W1) {
			w = q4_pair(W1 + 2 * u);
			c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(v0, w));
			c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(v1, w));
		}
	}
	q4_flush16(acc0 + d, a1, a0, ks0);
	if (W1)
		q4_flush16(acc1 + d, c1, c0, ks1);
}

/* q4_values_c with AVX2, rows two at a time. */
__attribute__((target("avx2")))
static void q4_values_avx2(const struct q4_blk *k, int g, const struct q4_wrow *r, int n)
{
	const uint8_t *bp[Q4_BLOCK];
	int np = (k->r->nr + 1) / 2;
	int64_t d0 = k->sg[g].d0, end = d0 + k->sg[g].len;

	for (int t = 0; t < Q4_BLOCK; t++)
		bp[t] = k->r->rb[t] + k->kc / 2;
	for (int j = 0; j < n; j += 2) {
		const struct q4_wrow *r1 = j + 1 < n ? &r[j + 1] : NULL;
		__m256 s0 = _mm256_set1_ps(r[j].ks), s1 = _mm256_set1_ps(r1 ? r1->ks : 0);
		int64_t d = d0;

		for (; d + 32 <= end; d += 32)
			q4_values32(bp, np, d, r[j].W, r1 ? r1->W : NULL, s0, s1, r[j].acc,
				    r1 ? r1->acc : NULL);
		if (d + 16 <= end) {
			q4_values16(bp, np, d, r[j].W, r1 ? r1->W : NULL, s0, s1, r[j].acc,
				    r1 ? r1->acc : NULL);
			d += 16;
		}
		for (; d < end; d++) /* the last columns, one at a time */
			for (int h = j; h < j + 1 + (r1 != NULL); h++) {
				int32_t x = 0;

				for (int t = 0; t < k->r->nr; t++)
					x += r[h].W[t] * (int32_t)fg_q4_nibble(bp[t], (uint64_t)d);
				r[h].acc[d] += (float)x * r[h].ks;
			}
	}
}

/* q4_exp_c, 8 lanes. */
__attribute__((target("avx2,fma")))
static inline __m256 q4_exp_avx2(__m256 x)
{
	__m256 n, r, p;
	__m256i e;

	x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN stays */
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(Q4_LOG2E)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(Q4_LN2_HI), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(Q4_LN2_LO), r);
	p = _mm256_set1_ps(q4_exp_poly[0]);
	for (int k = 1; k < 8; k++)
		p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(q4_exp_poly[k]));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2")))
static float q4_max_avx2(const float *s, int64_t n)
{
	__m256 m = _mm256_set1_ps(-INFINITY);
	int64_t j = 0;
	float mx;

	for (; j + 8 <= n; j += 8)
		m = _mm256_max_ps(_mm256_loadu_ps(s + j), m);
	mx = q4_hmax(m);
	for (; j < n; j++)
		mx = s[j] > mx ? s[j] : mx;
	return mx;
}

__attribute__((target("avx2,fma")))
static float q4_softmax_avx2(float *s, int64_t n, int64_t lds, float mx)
{
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256 l = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
	float ls[8];

	for (int64_t j = 0; j < lds; j += 8) {
		__m256 e = q4_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
		__m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j < 8 ? n - j : 8)), lane);

		e = _mm256_and_ps(e, _mm256_castsi256_ps(live));
		_mm256_storeu_ps(s + j, e);
		l = _mm256_add_ps(l, e);
	}
	_mm256_storeu_ps(ls, l);
	return q4_sum8(ls);
}
#endif

/* ---- the task ---------------------------------------------------------------------------- */

struct q4_plan {
	struct cpu_blas_ctx *c;
	const struct fg_attention_args *a;
	int simd;        /* the AVX2 kernels: whole bytes (even head_dim and row lengths) */
	int gather;      /* AVX2: parameter offsets fit an int32 */
	int64_t group;   /* query heads per key/value head */
	int64_t kvh;     /* key/value heads */
	int64_t kb;      /* key/value heads a block (the last may have fewer) */
	int64_t nblk;    /* blocks per batch row */
	int64_t part;    /* query heads of a group a task (the last part may have fewer) */
	int64_t parts;   /* parts per group */
	int64_t lds;     /* score row: cpu_blas_attn_keys rounded up to Q4_BLOCK */
	int64_t nseg;    /* q4_max_segs(head_dim) */
	int64_t hdp;     /* head_dim rounded up to 16 */
};

/* A task's scratch, nh = kb * part query heads. */
struct q4_ws {
	float *s;          /* [nh][lds] scores, then exp(score - max) */
	float *acc;        /* [nh][hdp] sum_t w c, column order */
	float *ml;         /* [nh][nseg][8] sum_t p_t m_tg in 8 lanes */
	float *qI;         /* [nh][nseg] QI_g */
	float *qsc;        /* [nh] qs * scale */
	float *sum;        /* [nh] */
	float *qf;         /* [hdp] a head's q, then its output, in fp32 */
	int16_t *qi;       /* [nh][hdp] qi, column order (C) or kernel order (AVX2) */
	struct q4_seg *sg; /* [kb][nseg] each key/value head's segments */
	int *ns;           /* [kb] their count */
	float *sc, *mn;    /* [nseg][Q4_BLOCK] */
	int32_t *I;        /* [part][nseg][Q4_BLOCK] */
	int16_t *W;        /* [part][2 * Q4_BLOCK] a segment's weights */
	struct q4_wrow *wr; /* [2 * part] their rows */
	int32_t *part;     /* AVX2: [part][nseg][Q4_BLOCK][8] */
};

/* n bytes at offset *off of base, 64-byte aligned (NULL when base is: only
 * measuring); moves *off past them. */
static void *q4_take(char *base, size_t *off, size_t n)
{
	void *r = base ? base + *off : NULL;

	*off += (n + 63) & ~(size_t)63;
	return r;
}

/* Lay out a task's scratch at base (64-byte aligned; NULL: only measure);
 * returns its size in bytes. */
static size_t q4_ws_layout(const struct q4_plan *P, char *base, struct q4_ws *w)
{
	size_t nh = (size_t)(P->kb * P->part), ns = (size_t)P->nseg, hdp = (size_t)P->hdp;
	size_t pt = (size_t)P->part, f = sizeof(float), o = 0;

	w->s = q4_take(base, &o, nh * (size_t)P->lds * f);
	w->acc = q4_take(base, &o, nh * hdp * f);
	w->ml = q4_take(base, &o, nh * ns * 8 * f);
	w->qI = q4_take(base, &o, nh * ns * f);
	w->qsc = q4_take(base, &o, nh * f);
	w->sum = q4_take(base, &o, nh * f);
	w->qf = q4_take(base, &o, hdp * f);
	w->qi = q4_take(base, &o, nh * hdp * sizeof(int16_t));
	w->sg = q4_take(base, &o, (size_t)P->kb * ns * sizeof(struct q4_seg));
	w->ns = q4_take(base, &o, (size_t)P->kb * sizeof(int));
	w->sc = q4_take(base, &o, ns * Q4_BLOCK * f);
	w->mn = q4_take(base, &o, ns * Q4_BLOCK * f);
	w->I = q4_take(base, &o, pt * ns * Q4_BLOCK * sizeof(int32_t));
	w->W = q4_take(base, &o, pt * 2 * Q4_BLOCK * sizeof(int16_t));
	w->wr = q4_take(base, &o, pt * 2 * sizeof(struct q4_wrow));
	w->part = q4_take(base, &o, P->simd ? pt * ns * Q4_BLOCK * 8 * sizeof(int32_t) : 0);
	return o;
}

/* q (hd floats) as int16: qi = round(q * 32767 / max|q|); qI[g] = the sum of
 * qi over segment g; *qsc = max|q| / 32767 * scale (NaN when q is not
 * finite; 0 when max|q| < 2^-100: scores that small are 0).  Stored in column
 * order (C kernels) or in the AVX2 kernels' order: per segment, 32 columns at
 * a time as [q[2k + 1] k < 16][q[2k] k < 16], then 16 as [q[2k + 1] k < 8]
 * [q[2k] k < 8], then the rest in column order.  Shared by both paths. */
static void q4_quant_q(const float *q, int64_t hd, const struct q4_seg *sg, int ns, float scale,
		       int kernel_order, int16_t *qi, float *qI, float *qsc)
{
	float amax = 0, inv;
	int finite = 1;

	for (int64_t d = 0; d < hd; d++) {
		float v = fabsf(q[d]);

		finite &= v <= FLT_MAX;
		amax = v > amax ? v : amax;
	}
	inv = finite && amax >= 0x1p-100f ? 32767.0f / amax : 0;
	for (int g = 0; g < ns; g++) {
		int64_t d0 = sg[g].d0, end = d0 + sg[g].len, d = d0;
		int32_t sum = 0;

		for (int64_t j = d0; j < end; j++) {
			/* |q * inv| <= 32767 (1 + 2^-23): no clamp; 1.5 * 2^23 rounds */
			int32_t v = inv > 0 ? (int32_t)((q[j] * inv + 12582912.0f) - 12582912.0f) : 0;

			sum += v;
			qi[j] = (int16_t)v; /* column order; reordered below */
		}
		qI[g] = (float)sum; /* |sum| <= 64 * 32767 < 2^24: exact */
		if (!kernel_order)
			continue;
		for (; d + 32 <= end; d += 32) {
			int16_t t[32];

			for (int k = 0; k < 16; k++)
				t[k] = qi[d + 2 * k + 1], t[16 + k] = qi[d + 2 * k];
			memcpy(qi + d, t, sizeof(t));
		}
		if (d + 16 <= end) {
			int16_t t[16];

			for (int k = 0; k < 8; k++)
				t[k] = qi[d + 2 * k + 1], t[8 + k] = qi[d + 2 * k];
			memcpy(qi + d, t, sizeof(t));
		}
	}
	*qsc = !finite ? NAN : inv > 0 ? amax / 32767.0f * scale : 0;
}

/* A 4-bit cache as the task reads it. */
struct q4_cache {
	const uint8_t *data, *params;
	uint64_t cols, gcols;
};

static struct q4_cache q4_cache(const struct fg_tensor *t)
{
	struct q4_cache c = { t->data, NULL, (uint64_t)t->cols, fg_q4_grid_cols((uint64_t)t->cols, 1) };

	c.params = c.data + fg_q4_data_bytes((uint64_t)t->rows, c.cols);
	return c;
}

/* r = the rows of positions [j0, j0 + Q4_BLOCK) up to hi in c (none past hi). */
static void q4_rows(const struct fg_attention_args *a, const struct q4_cache *c, int64_t krow,
		    int64_t j0, int64_t hi, struct q4_rows *r)
{
	int n = 0;

	for (int64_t j = j0; j <= hi && n < Q4_BLOCK; j++, n++) {
		uint64_t row = (uint64_t)krow + cpu_blas_key_row(j, a->ring);

		r->re[n] = row * c->cols;
		r->rg[n] = row * c->gcols;
		r->rb[n] = c->data + r->re[n] / 2;
		r->rp[n] = c->params + 4 * r->rg[n];
	}
	r->nr = n;
	for (int t = n; n > 0 && t < Q4_BLOCK; t++) {
		r->re[t] = r->re[n - 1], r->rg[t] = r->rg[n - 1];
		r->rb[t] = r->rb[n - 1], r->rp[t] = r->rp[n - 1];
	}
}

/* Prefetch the lines of columns [kc, kc + hd) of rows r and of their first
 * parameters (segment groups g0.., 16 bytes at most: one line or two).  A
 * block's rows are a cache width apart: too many streams for the hardware
 * prefetcher to follow. */
static void q4_prefetch(const struct q4_rows *r, int64_t kc, int64_t hd, int64_t g0)
{
	for (int t = 0; t < r->nr; t++) {
		uintptr_t l0 = (uintptr_t)(r->rb[t] + kc / 2) >> 6;
		uintptr_t l1 = (uintptr_t)(r->rb[t] + (kc + hd - 1) / 2) >> 6;

		for (uintptr_t l = l0; l <= l1; l++)
			__builtin_prefetch((const void *)(l << 6));
		__builtin_prefetch(r->rp[t] + 4 * g0);
	}
}

/* k = key/value head kk's view of rows r; its rows' parameters decoded. */
static void q4_block(const struct q4_plan *P, const struct q4_cache *c, const struct q4_rows *r,
		     const struct q4_ws *w, int64_t kk, int64_t kc, struct q4_blk *k)
{
	k->data = c->data;
	k->r = r;
	k->kc = kc;
	k->sg = w->sg + kk * P->nseg;
	k->ns = w->ns[kk];
#if FG_FP16_SIMD_X86
	if (P->simd && (P->gather || k->ns == 2)) {
		q4_params_avx2(c->params, k);
		return;
	}
#endif
	q4_params_c(c->params, k);
}

/* Query heads h(kk, i) = (k0 + kk) * group + p0 + i (kk < kn, i < pn) of batch
 * row b: one task. */
static void q4_task(const struct q4_plan *P, int64_t b, int64_t k0, int64_t kn, int64_t p0,
		    int64_t pn, char *base)
{
	const struct fg_attention_args *a = P->a;
	int64_t hd = a->head_dim, hdp = P->hdp, nseg = P->nseg, lds = P->lds, nh = kn * pn;
	int64_t krow = b * a->cache_stride, hi = a->len - 1, lo = cpu_blas_attn_first_key(a, b, hi);
	int64_t n = hi - lo + 1;
	struct q4_cache K = q4_cache(&a->k), V = q4_cache(&a->v);
	struct q4_rows rows[2];
	struct q4_blk k;
	struct q4_ws w;
	int cur = 0;

	q4_ws_layout(P, base, &w);
	k.sc = w.sc, k.mn = w.mn;
	for (int64_t kk = 0; kk < kn; kk++)
		w.ns[kk] = q4_segs((k0 + kk) * hd, hd, w.sg + kk * nseg);
	for (int64_t kk = 0; kk < kn && n > 0; kk++)
		for (int64_t i = 0; i < pn; i++) {
			int64_t hh = kk * pn + i, h = (k0 + kk) * P->group + p0 + i;
			const float *q = cpu_blas_load(&a->q, b, h * hd, hd, w.qf);

			q4_quant_q(q, hd, w.sg + kk * nseg, w.ns[kk], a->scale, P->simd,
				   w.qi + hh * hdp, w.qI + hh * nseg, &w.qsc[hh]);
		}

	/* scores, Q4_BLOCK positions at a time, every head of the block */
	q4_rows(a, &K, krow, lo, hi, &rows[cur]);
	for (int64_t j0 = lo; j0 <= hi; j0 += Q4_BLOCK, cur ^= 1) {
		q4_rows(a, &K, krow, j0 + Q4_BLOCK, hi, &rows[cur ^ 1]);
		for (int64_t kk = 0; kk < kn; kk++) {
			const int16_t *q = w.qi + kk * pn * hdp;
			int64_t kc = (k0 + kk) * hd;

			q4_prefetch(&rows[cur ^ 1], kc, hd, w.sg[kk * nseg].g);
			q4_block(P, &K, &rows[cur], &w, kk, kc, &k);
#if FG_FP16_SIMD_X86
			if (P->simd) {
				q4_scores_avx2(&k, q, hdp, (int)pn, w.I, w.part);
				for (int64_t i = 0; i < pn; i++)
					q4_finish_scores_avx2(&k, w.I + i * k.ns * Q4_BLOCK,
							      w.qI + (kk * pn + i) * nseg, w.qsc[kk * pn + i],
							      w.s + (kk * pn + i) * lds + (j0 - lo));
				continue;
			}
#endif
			q4_scores_c(&k, q, hdp, (int)pn, w.I);
			for (int64_t i = 0; i < pn; i++)
				q4_finish_scores_c(&k, w.I + i * k.ns * Q4_BLOCK, w.qI + (kk * pn + i) * nseg,
						   w.qsc[kk * pn + i], w.s + (kk * pn + i) * lds + (j0 - lo));
		}
	}
	for (int64_t hh = 0; hh < nh && n > 0; hh++) { /* weights; 0 past the last position */
		float *s = w.s + hh * lds, cap = a->softcap;

		for (int64_t j = 0; cap > 0 && j < n; j++) /* compute ABI 1.12: Gemma 2 */
			s[j] = tanhf(s[j] / cap) * cap;
#if FG_FP16_SIMD_X86
		if (P->simd) {
			w.sum[hh] = q4_softmax_avx2(s, n, lds, q4_max_avx2(s, n));
			continue;
		}
#endif
		w.sum[hh] = q4_softmax_c(s, n, lds, q4_max_c(s, n));
	}

	/* values: per (head, segment, block) the weights p sc as int16 W */
	memset(w.acc, 0, (size_t)(nh * hdp) * sizeof(float));
	memset(w.ml, 0, (size_t)(nh * nseg * 8) * sizeof(float));
	q4_rows(a, &V, krow, lo, hi, &rows[cur]);
	for (int64_t j0 = lo; j0 <= hi; j0 += Q4_BLOCK, cur ^= 1) {
		q4_rows(a, &V, krow, j0 + Q4_BLOCK, hi, &rows[cur ^ 1]);
		for (int64_t kk = 0; kk < kn; kk++) {
			float *acc = w.acc + kk * pn * hdp;
			int64_t kc = (k0 + kk) * hd;

			q4_prefetch(&rows[cur ^ 1], kc, hd, w.sg[kk * nseg].g);
			q4_block(P, &V, &rows[cur], &w, kk, kc, &k);
			for (int g = 0; g < k.ns; g++) {
				int nw = 0;

				for (int64_t i = 0; i < pn; i++) {
					int64_t hh = kk * pn + i;
					const float *p = w.s + hh * lds + (j0 - lo);
					int16_t *W = w.W + i * 2 * Q4_BLOCK;
					float *ml = w.ml + (hh * nseg + g) * 8;
#if FG_FP16_SIMD_X86
					if (P->simd) {
						nw += q4_weights_avx2(&k, g, p, w.sum[hh], W, acc + i * hdp,
								      w.wr + nw, ml);
						continue;
					}
#endif
					nw += q4_weights_c(&k, g, p, w.sum[hh], W, acc + i * hdp, w.wr + nw,
							   ml);
				}
#if FG_FP16_SIMD_X86
				if (P->simd) {
					q4_values_avx2(&k, g, w.wr, nw);
					continue;
				}
#endif
				q4_values_c(&k, g, w.wr, nw);
			}
		}
	}

	for (int64_t kk = 0; kk < kn; kk++)
		for (int64_t i = 0; i < pn; i++) {
			int64_t hh = kk * pn + i, h = (k0 + kk) * P->group + p0 + i;
			const struct q4_seg *sg = w.sg + kk * nseg;
			float *o = a->out.dtype == FG_DTYPE_F32 ?
					   (float *)a->out.data + b * a->out.ld + h * hd : w.qf;

			if (n > 0) {
				float inv = 1.0f / w.sum[hh];

				for (int g = 0; g < w.ns[kk]; g++) {
					float m = q4_sum8(w.ml + (hh * nseg + g) * 8);

					for (int64_t d = sg[g].d0; d < sg[g].d0 + sg[g].len; d++)
						o[d] = (w.acc[hh * hdp + d] + m) * inv;
				}
			} else { /* no key to see (all pads): zeros */
				memset(o, 0, (size_t)hd * sizeof(float));
			}
			if (o == w.qf)
				fg_fp16_simd_from_f32((uint16_t *)a->out.data + b * a->out.ld + h * hd,
						      w.qf, (size_t)hd);
		}
}

static void q4_tasks(void *arg, int64_t t0, int64_t t1, int tid)
{
	const struct q4_plan *P = arg;

	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / (P->nblk * P->parts), blk = t / P->parts % P->nblk;
		int64_t k0 = blk * P->kb, kn = P->kvh - k0 < P->kb ? P->kvh - k0 : P->kb;
		int64_t p0 = t % P->parts * P->part;
		int64_t pn = P->group - p0 < P->part ? P->group - p0 : P->part;

		q4_task(P, b, k0, kn, p0, pn, (char *)P->c->scratch[tid]);
	}
}

/* The core checked the arguments: decode, q/out fp32 or fp16, k and v 4-bit. */
int cpu_blas_attention_q4(struct cpu_blas_ctx *c, const struct fg_attention_args *a)
{
	struct q4_plan P = { .c = c, .a = a };
	int64_t B = a->batch, th = c->threads, want, keys = cpu_blas_attn_keys(a, 1);
	struct q4_ws w;
	size_t need;
	int rc;

	P.kvh = a->kv_heads ? a->kv_heads : a->heads;
	P.group = a->heads / P.kvh;
	P.lds = (keys + Q4_BLOCK - 1) / Q4_BLOCK * Q4_BLOCK;
	P.nseg = q4_max_segs(a->head_dim);
	P.hdp = (a->head_dim + 15) & ~(int64_t)15;
#if FG_FP16_SIMD_X86
	P.simd = c->isa != CPU_BLAS_ISA_NONE && a->head_dim % 2 == 0 && a->k.cols % 2 == 0 &&
		 a->v.cols % 2 == 0;
	P.gather = 4 * (uint64_t)a->k.rows * fg_q4_grid_cols((uint64_t)a->k.cols, 1) <= INT32_MAX &&
		   4 * (uint64_t)a->v.rows * fg_q4_grid_cols((uint64_t)a->v.cols, 1) <= INT32_MAX;
#endif
	/* Blocks of key/value heads as wide as the score budget allows, cut where
	 * fewer than two tasks a thread would leave threads idle; then groups of
	 * query heads split too where that is still too few. */
	want = (2 * th + B - 1) / B;
	P.kb = Q4_SCORE_BUDGET / (P.group * P.lds);
	P.kb = P.kb < 1 ? 1 : P.kb;
	P.nblk = (P.kvh + P.kb - 1) / P.kb;
	P.nblk = P.nblk > want ? P.nblk : want;
	P.nblk = P.nblk < P.kvh ? P.nblk : P.kvh;
	P.kb = (P.kvh + P.nblk - 1) / P.nblk;
	P.nblk = (P.kvh + P.kb - 1) / P.kb;
	P.parts = 1;
	if (P.kb == 1) {
		int64_t budget = (P.group * P.lds + Q4_SCORE_BUDGET - 1) / Q4_SCORE_BUDGET;

		P.parts = (th + B * P.nblk - 1) / (B * P.nblk);
		P.parts = P.parts > budget ? P.parts : budget;
		P.parts = P.parts < P.group ? P.parts : P.group;
	}
	P.part = (P.group + P.parts - 1) / P.parts;
	P.parts = (P.group + P.part - 1) / P.part;
	need = q4_ws_layout(&P, NULL, &w);
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (need + sizeof(float) - 1) / sizeof(float));
	if (!rc)
		cpu_blas_pool_run(c->pool, B * P.nblk * P.parts, 1, q4_tasks, &P);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
