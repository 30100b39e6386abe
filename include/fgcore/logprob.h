/* fgcore/logprob.h - what a log-probability is, for the compute op
 * `logprob` (fgcore/compute.h, minor 6) and the core's host path alike.
 *
 * For a row of n logits l (a NaN counts as -inf):
 *  - with a finite largest logit m: log p(i) = l[i] - m - log(sum_j exp(l[j] - m));
 *  - with c > 0 logits at +inf: log p(i) = -log(c) for those, -inf for the rest
 *    (each +inf carries the same weight, as in fgcore/sampling.h);
 *  - with no logit above -inf there is no distribution: NaN for every id.
 * A row's top k are the first k ids of the sampling order (fg_sample_key
 * ascending: the largest logit first, the smaller id first on ties) with
 * their log p; past the vocabulary's end, id -1 and -inf.
 * The sum may be taken in any order in fp32 or wider, so backends agree on
 * the values within its rounding and on the ids exactly.
 *
 * The inline functions below are the plain single-threaded form: the core's
 * host path and the CPU backend use them. */
#ifndef FGCORE_LOGPROB_H
#define FGCORE_LOGPROB_H

#include <math.h>
#include <stdint.h>

#include <fgcore/sampling.h>

/* The most ids a row's top may hold (the OpenAI API's limit). */
#define FG_LOGPROB_TOP_MAX 20

/* A row's normaliser: its largest logit, and the log-probability offset
 * (log-sum-exp for a finite max, log(c) for c logits at +inf, NaN for none). */
struct fg_logprob_norm {
	float max;
	double lse;
};

static inline struct fg_logprob_norm fg_logprob_norm_of(const float *x, int64_t n)
{
	struct fg_logprob_norm s = { -INFINITY, NAN };
	int64_t ninf = 0, i;
	double z = 0;

	for (i = 0; i < n; i++)
		s.max = x[i] > s.max ? x[i] : s.max; /* false for NaN */
	if (s.max == INFINITY) { /* rare: the +inf are counted only then */
		for (i = 0; i < n; i++)
			ninf += x[i] == INFINITY;
		s.lse = log((double)ninf);
		return s;
	}
	if (s.max == -INFINITY)
		return s;
	/* Terms in float (each at most 1), their sum in double. */
	for (i = 0; i < n; i++)
		if (x[i] == x[i])
			z += (double)expf(x[i] - s.max);
	s.lse = (double)s.max + log(z);
	return s;
}

/* log p of a logit l of the row s normalises (a GPU kernel calls it too). */
#ifdef __CUDACC__
static inline __host__ __device__
#else
static inline
#endif
float fg_logprob_value(struct fg_logprob_norm s, float l)
{
	if (s.max == INFINITY)
		return l == INFINITY ? (float)-s.lse : -INFINITY;
	if (l != l)
		l = -INFINITY;
	return (float)((double)l - s.lse); /* NaN when the row has no distribution */
}

/* One row: *lp = log p(target), and its top k (k <= FG_LOGPROB_TOP_MAX) in
 * top_id / top_lp. */
static inline void fg_logprob_row_of(const float *x, int64_t n, int32_t target, int k, float *lp,
				     int32_t *top_id, float *top_lp)
{
	struct fg_logprob_norm s = fg_logprob_norm_of(x, n);
	uint64_t best[FG_LOGPROB_TOP_MAX];
	int have = 0;

	*lp = fg_logprob_value(s, x[target]);
	if (k > FG_LOGPROB_TOP_MAX)
		k = FG_LOGPROB_TOP_MAX;
	/* Insertion into the k smallest keys so far.  Once k are held, a logit
	 * not above the k-th's value (NaN, an equal one of a larger id) cannot
	 * enter: one comparison for most of the row. */
	float floor_v = -INFINITY;
	for (int64_t i = 0; i < n && k > 0; i++) {
		if (have == k && !(x[i] > floor_v))
			continue;
		uint64_t key = fg_sample_key(x[i], (int32_t)i);
		int at;

		if (have == k && key >= best[k - 1])
			continue;
		at = have < k ? have++ : k - 1;
		while (at > 0 && key < best[at - 1]) {
			best[at] = best[at - 1];
			at--;
		}
		best[at] = key;
		if (have == k) { /* a NaN k-th counts as -inf */
			floor_v = x[(uint32_t)best[k - 1]];
			floor_v = floor_v == floor_v ? floor_v : -INFINITY;
		}
	}
	for (int j = 0; j < k; j++) {
		top_id[j] = j < have ? (int32_t)(uint32_t)best[j] : -1;
		top_lp[j] = j < have ? fg_logprob_value(s, x[top_id[j]]) : -INFINITY;
	}
}

#endif
