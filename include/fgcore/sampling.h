/* fgcore/sampling.h - what a sampled token is, bit for bit.
 *
 * The core's host sampler and a compute backend's `sample` op (compute.h,
 * minor 4) must draw the same token from the same logits and the same draw,
 * so that where the logits are never changes a result.  Floating-point sums
 * depend on their order (a loop on the host, a tree on a GPU); integer sums do
 * not.  So the softmax weights are integers, computed from the logits with
 * nothing but correctly rounded operations (+ - * /, fma, rint, ldexp), which
 * every IEEE machine evaluates alike, and every sum after that is exact.
 *
 * For one row of n logits l[i], temperature T > 0, top_k (0: off), top_p
 * (off unless 0 < top_p < 1) and a draw u (53 random bits):
 *  1. order: every id by fg_sample_key ascending (largest logit first, the
 *     smaller id first on ties; NaN counts as -inf);
 *  2. weights: w[i] = fg_sample_weight(l[i], max, T, S) with max the largest
 *     logit (NaN left out) and S = fg_sample_scale(n); the largest gets 2^S,
 *     and ids outside fg_sample_in_window (below 2^-(S+2) of it) get 0;
 *  3. keep the first top_k ids of the order (all when off); sum = their weight;
 *     when sum is 0 the row has no logit above -inf (NaN counts as -inf):
 *     it says nothing (an overflow upstream), and the token is -1;
 *  4. with top_p, keep the shortest prefix of those whose weight reaches
 *     fg_sample_top_p_target(sum, top_p); mass = its weight (else mass = sum);
 *  5. r = fg_sample_point(u, mass); the token is the first id of the kept
 *     prefix whose running weight exceeds r.
 * A row whose largest logit is +inf gives 2^S to each +inf and 0 to the rest.
 * Greedy decoding (T <= 0) takes the first largest logit, NaN left out, and
 * -1 as well for a row with nothing above -inf.
 * The weights themselves are monotone in l only up to rounding; nothing
 * relies on that. */
#ifndef FGCORE_SAMPLING_H
#define FGCORE_SAMPLING_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FG_SAMPLING_FN static inline __host__ __device__
#else
#define FG_SAMPLING_FN static inline
#endif

/* S for a vocabulary of n: n weights of at most 2^S (a little over, by the
 * polynomial's rounding) sum to less than 2^63. */
FG_SAMPLING_FN int fg_sample_scale(int64_t n)
{
	int bits = 0;
	while (bits < 62 && ((int64_t)1 << bits) < n)
		bits++;
	return 62 - bits;
}

/* A float's bits as an unsigned number that ascends with it (-0 below +0,
 * the NaNs outside [-inf, +inf]). */
FG_SAMPLING_FN uint32_t fg_sample_rank(float f)
{
	union {
		float f;
		uint32_t u;
	} v;
	v.f = f;
	return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

/* Ascending key = sampling order: descending logit (-0 as 0, NaN as -inf),
 * then ascending id. */
FG_SAMPLING_FN uint64_t fg_sample_key(float l, int32_t id)
{
	uint32_t up = fg_sample_rank(l != l ? -INFINITY : l == 0 ? 0.0f : l);
	return (uint64_t)(uint32_t)~up << 32 | (uint32_t)id;
}

#define FG_SAMPLE_LOG2E 0x1.71547652b82fep+0

/* x = (l - max) / T (the subtraction is exact); l's weight is 2^(S + t),
 * rounded, with t = x log2(e). */
FG_SAMPLING_FN double fg_sample_x(float l, float max, float T)
{
	return ((double)l - (double)max) / (double)T;
}

FG_SAMPLING_FN int fg_sample_x_in_window(double x, int S)
{
	return x * FG_SAMPLE_LOG2E >= -(double)(S + 2); /* false for NaN */
}

/* Nonzero when l's weight is computed rather than 0 by definition: a finite
 * max and t >= -(S + 2).  Monotone in l, so for a finite max the ids in the
 * window are a prefix of the order and every id past them weighs 0. */
FG_SAMPLING_FN int fg_sample_in_window(float l, float max, float T, int S)
{
	return max < INFINITY && fg_sample_x_in_window(fg_sample_x(l, max, T), S);
}

/* round(2^(S + t)) for l <= max (max: the row's largest), 0 outside the
 * window.  2^t = 2^n 2^f with n = t rounded to the nearest integer (ties to
 * even), |f| <= 1/2, and 2^f from its Taylor series to degree 12 (error below
 * 2^-52).  Every step is written out (explicit fma, no a * b + c a compiler
 * could fuse differently elsewhere), and the roundings to integers and the
 * scaling by 2^(n + S) are exact double arithmetic (adding and taking away
 * 1.5 * 2^52 or 2^52; a multiplication by a power of two): no library call
 * but fma, which a CPU without it emulates correctly rounded. */
FG_SAMPLING_FN uint64_t fg_sample_weight(float l, float max, float T, int S)
{
	if (max == INFINITY)
		return l == INFINITY ? (uint64_t)1 << S : 0;
	double x = fg_sample_x(l, max, T);
	if (!fg_sample_x_in_window(x, S)) /* also NaN and -inf */
		return 0;
	double t = x * FG_SAMPLE_LOG2E, n = (t + 0x1.8p52) - 0x1.8p52; /* |t| <= 64 */
	double f = fma(x, FG_SAMPLE_LOG2E, -n);
	double p = 0x1.c3bd650fc2986p-36; /* ln(2)^k / k!, k = 12 down to 0 */
	p = fma(p, f, 0x1.e8cac7351bb25p-32);
	p = fma(p, f, 0x1.e4cf5158b8ecap-28);
	p = fma(p, f, 0x1.b5253d395e7c4p-24);
	p = fma(p, f, 0x1.62c0223a5c824p-20);
	p = fma(p, f, 0x1.ffcbfc588b0c7p-17);
	p = fma(p, f, 0x1.430912f86c787p-13);
	p = fma(p, f, 0x1.5d87fe78a6731p-10);
	p = fma(p, f, 0x1.3b2ab6fba4e77p-7);
	p = fma(p, f, 0x1.c6b08d704a0c0p-5);
	p = fma(p, f, 0x1.ebfbdff82c58fp-3);
	p = fma(p, f, 0x1.62e42fefa39efp-1);
	p = fma(p, f, 1.0);
	union {
		uint64_t u;
		double d;
	} scale;
	scale.u = (uint64_t)((int)n + S + 1023) << 52; /* 2^(n + S), n + S in [-2, 62] */
	double v = p * scale.d;
	return v < 0x1p52 ? (uint64_t)((v + 0x1p52) - 0x1p52) : (uint64_t)v;
}

/* The high 64 bits of a * b. */
FG_SAMPLING_FN uint64_t fg_sample_mulhi(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
	return __umul64hi(a, b);
#else
	return (uint64_t)(__extension__((unsigned __int128)a * b) >> 64); /* GCC, Clang */
#endif
}

/* ceil(sum * P / 2^32), P = ceil(top_p * 2^32): the weight a top_p prefix
 * must reach (at least 1 for sum >= 1). */
FG_SAMPLING_FN uint64_t fg_sample_top_p_target(uint64_t sum, float top_p)
{
	uint64_t P = (uint64_t)ceil((double)top_p * 4294967296.0);
	uint64_t hi = fg_sample_mulhi(sum, P), lo = sum * P;
	uint64_t q = hi << 32 | lo >> 32;
	return q + ((lo & 0xffffffffu) != 0);
}

/* floor(u * mass / 2^53) for u < 2^53: the draw's point in [0, mass). */
FG_SAMPLING_FN uint64_t fg_sample_point(uint64_t u, uint64_t mass)
{
	return fg_sample_mulhi(u, mass) << 11 | (u * mass) >> 53;
}

#undef FG_SAMPLING_FN
#endif
