/* core/engine/sample.c - next-token selection.
 * Sampling follows the usual order: logits / temperature, keep the top_k
 * largest, keep the smallest prefix of them (by descending probability) whose
 * mass reaches top_p, renormalise, draw.
 *
 * fg_sample_sorted is the definition: every logit sorted, the softmax summed
 * in that order.  fg_sample gives the same token from the same random stream
 * without sorting the whole vocabulary.  With a top_k (up to 4096) only the
 * first top_k of the order count: a heap finds them.  Otherwise only logits
 * within 41.6 x temperature of the largest (e^-41.6 < 2^-60) are sorted.  Every other one has
 * exp((l - max) / T) < 2^-60 and comes after them in the sorted order, where
 * the running sum is already >= 1 (the largest contributes exactly 1), so
 * adding it rounds back to the same double: the sums, the top_p cut and the
 * draw are bit for bit those of the full sort.  Where that argument does not
 * cover a case (a non-finite logit, the top_p mass not reached among the
 * candidates, the draw falling past them), the full sort runs. */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/sample.h"
#include "core/util/error.h"

struct fg_sampler {
	int64_t vocab;
	int32_t *idx;
	float *prob;
	uint64_t *key, *tmp; /* the candidates' sort keys, and the radix sort's other buffer */
	uint32_t count[3][2048]; /* the radix sort's digit counts */
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void fg_rng_seed(struct fg_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

double fg_rng_uniform(struct fg_rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return (double)(out >> 11) * 0x1.0p-53;
}

int fg_sampler_new(struct fg_sampler **out, int64_t vocab)
{
	struct fg_sampler *s = calloc(1, sizeof(*s));
	if (s) {
		s->vocab = vocab;
		s->idx = malloc(sizeof(int32_t) * (size_t)vocab);
		s->prob = malloc(sizeof(float) * (size_t)vocab);
		s->key = malloc(sizeof(uint64_t) * (size_t)vocab);
		s->tmp = malloc(sizeof(uint64_t) * (size_t)vocab);
	}
	if (!s || !s->idx || !s->prob || !s->key || !s->tmp) {
		fg_sampler_free(s);
		FG_ERR("sampler: out of memory for %lld logits", (long long)vocab);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

void fg_sampler_free(struct fg_sampler *s)
{
	if (!s)
		return;
	free(s->idx);
	free(s->prob);
	free(s->key);
	free(s->tmp);
	free(s);
}

int32_t fg_argmax(const float *x, int64_t n)
{
	int64_t best = 0;
	for (int64_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int32_t)best;
}

/* Sort candidates by descending logit; ties by ascending id so the order, and
 * hence the draw, never depends on the sort's stability. */
static int by_logit_desc(const void *a, const void *b, void *ctx)
{
	const float *l = ctx;
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	if (l[i] != l[j])
		return l[i] > l[j] ? -1 : 1;
	return (i > j) - (i < j);
}

/* The softmax weights of the first k candidates s->idx[0..k) at temperature
 * T into s->prob, in double and in that order; returns their sum. */
static double cand_weights(struct fg_sampler *s, const float *logits, int64_t k, double maxl,
			   float t)
{
	double sum = 0;
	for (int64_t i = 0; i < k; i++) {
		double e = exp(((double)logits[s->idx[i]] - maxl) / t);
		s->prob[i] = (float)e;
		sum += e;
	}
	return sum;
}

/* The candidate a draw u (already scaled by the sum) lands on among the
 * first k, or -1 when it falls past them (u rounded up to the float sum). */
static int64_t cand_draw(const struct fg_sampler *s, int64_t k, double u)
{
	double acc = 0;
	for (int64_t i = 0; i < k; i++) {
		acc += s->prob[i];
		if (u < acc)
			return i;
	}
	return -1;
}

int32_t fg_sample_sorted(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
		  struct fg_rng *rng)
{
	int64_t n = s->vocab, keep;

	if (p->temperature <= 0)
		return fg_argmax(logits, n);
	/* Candidates: the top_k largest (all when off), in descending order. */
	for (int64_t i = 0; i < n; i++)
		s->idx[i] = (int32_t)i;
	qsort_r(s->idx, (size_t)n, sizeof(int32_t), by_logit_desc, (void *)logits);
	keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;

	/* Softmax over the candidates at this temperature, in double for stability. */
	double maxl = logits[s->idx[0]], sum = cand_weights(s, logits, keep, maxl, p->temperature);
	if (p->top_p > 0 && p->top_p < 1) {
		double mass = 0;
		int64_t i;
		for (i = 0; i < keep; i++) {
			mass += s->prob[i] / sum;
			if (mass >= p->top_p)
				break;
		}
		keep = i < keep ? i + 1 : keep;
		sum = 0;
		for (i = 0; i < keep; i++)
			sum += s->prob[i];
	}
	int64_t at = cand_draw(s, keep, fg_rng_uniform(rng) * sum);
	return s->idx[at >= 0 ? at : keep - 1];
}

/* Sort key: ascending key = descending logit, then ascending id (the order of
 * by_logit_desc; -0 is 0 there, so it is made 0 here). */
static uint64_t sort_key(float l, int64_t id)
{
	union {
		float f;
		uint32_t u;
	} v = { .f = l == 0 ? 0.0f : l };
	uint32_t up = v.u & 0x80000000u ? ~v.u : v.u | 0x80000000u; /* ascending with l */
	return (uint64_t)~up << 32 | (uint32_t)id;
}

/* Stable LSD radix sort of n keys by their upper 32 bits (the logit part),
 * 11 bits a pass, skipping the passes whose digit is the same in every key.
 * The keys come in ascending id order and the sort is stable, so equal logits
 * stay in ascending id order without sorting the id bits.  Returns the buffer
 * that holds the result. */
static uint64_t *radix_sort(uint32_t count[3][2048], uint64_t *a, uint64_t *b, int64_t n)
{
	static const int shift[3] = { 32, 43, 54 };

	memset(count, 0, sizeof(uint32_t) * 3 * 2048);
	for (int64_t i = 0; i < n; i++)
		for (int d = 0; d < 3; d++)
			count[d][(a[i] >> shift[d]) & 0x7ff]++;
	for (int d = 0; d < 3; d++) {
		uint32_t *c = count[d], at = 0;
		if (c[(a[0] >> shift[d]) & 0x7ff] == (uint32_t)n)
			continue; /* one digit value throughout: the order stands */
		for (int v = 0; v < 2048; v++) {
			uint32_t k = c[v];
			c[v] = at;
			at += k;
		}
		for (int64_t i = 0; i < n; i++)
			b[c[(a[i] >> shift[d]) & 0x7ff]++] = a[i];
		uint64_t *t = a;
		a = b;
		b = t;
	}
	return a;
}

static int cmp_key(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

/* Restore the max-heap a[0..k) below position i. */
static void sift_down(uint64_t *a, int64_t k, int64_t i)
{
	for (;;) {
		int64_t l = 2 * i + 1, big = i;
		if (l < k && a[l] > a[big])
			big = l;
		if (l + 1 < k && a[l + 1] > a[big])
			big = l + 1;
		if (big == i)
			return;
		uint64_t t = a[i];
		a[i] = a[big];
		a[big] = t;
		i = big;
	}
}

/* The k first of the full order (largest logits, smallest ids on ties) into
 * a[0..k), sorted: a max-heap of their keys, whose top is the k-th so far.
 * Ids come in ascending order, so a logit equal to the top's is later in the
 * order and stays out: one float comparison for most of the vocabulary. */
static void top_k_keys(uint64_t *a, const float *l, int64_t n, int64_t k)
{
	for (int64_t i = 0; i < k; i++)
		a[i] = sort_key(l[i], i);
	for (int64_t i = k / 2 - 1; i >= 0; i--)
		sift_down(a, k, i);
	float worst = l[(uint32_t)a[0]];
	for (int64_t i = k; i < n; i++) {
		if (!(l[i] > worst))
			continue;
		a[0] = sort_key(l[i], i);
		sift_down(a, k, 0);
		worst = l[(uint32_t)a[0]];
	}
	qsort(a, (size_t)k, sizeof(uint64_t), cmp_key);
}

int32_t fg_sample(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
		  struct fg_rng *rng)
{
	int64_t n = s->vocab, keep, kc, m = 0, last = 0;
	float maxf = logits[0], minf = logits[0];

	if (p->temperature <= 0)
		return fg_argmax(logits, n);
	for (int64_t i = 0; i < n; i++) {
		float l = logits[i];
		if (!isfinite(l))
			return fg_sample_sorted(s, logits, p, rng);
		if (l > maxf)
			maxf = l;
		if (l <= minf) { /* the last of the full order: smallest, then largest id */
			minf = l;
			last = i;
		}
	}
	double maxl = maxf;
	keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
	if (keep < n && keep <= 4096) {
		/* top_k: exactly the first keep of the full order, nothing else counts */
		top_k_keys(s->key, logits, n, keep);
		kc = keep;
		for (int64_t i = 0; i < kc; i++)
			s->idx[i] = (int32_t)(uint32_t)s->key[i];
	} else {
		double cut = maxl - 41.6 * (double)p->temperature;
		for (int64_t i = 0; i < n; i++)
			if ((double)logits[i] >= cut)
				s->key[m++] = sort_key(logits[i], i);
		const uint64_t *sorted = radix_sort(s->count, s->key, s->tmp, m);
		kc = keep < m ? keep : m; /* the kept candidates; the rest of keep adds nothing */
		for (int64_t i = 0; i < kc; i++)
			s->idx[i] = (int32_t)(uint32_t)sorted[i];
	}

	/* From here on the same arithmetic as fg_sample_sorted, in the same order. */
	double sum = cand_weights(s, logits, kc, maxl, p->temperature);
	if (p->top_p > 0 && p->top_p < 1) {
		double mass = 0;
		int64_t i;
		for (i = 0; i < kc; i++) {
			mass += s->prob[i] / sum;
			if (mass >= p->top_p)
				break;
		}
		if (i == kc && kc < keep)
			return fg_sample_sorted(s, logits, p, rng); /* the cut lies past the candidates */
		keep = i < kc ? i + 1 : keep;
		sum = 0;
		for (i = 0; i < keep; i++)
			sum += s->prob[i];
		int64_t at = cand_draw(s, keep, fg_rng_uniform(rng) * sum);
		return s->idx[at >= 0 ? at : keep - 1];
	}
	int64_t at = cand_draw(s, kc, fg_rng_uniform(rng) * sum);
	if (at >= 0)
		return s->idx[at];
	/* Past every candidate (u rounded up to the float sum): the last kept one. */
	if (keep == kc)
		return s->idx[keep - 1];
	if (keep == n)
		return (int32_t)last;
	for (int64_t i = 0; i < n; i++)
		s->idx[i] = (int32_t)i;
	qsort_r(s->idx, (size_t)n, sizeof(int32_t), by_logit_desc, (void *)logits);
	return s->idx[keep - 1];
}
