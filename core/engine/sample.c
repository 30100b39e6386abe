/* core/engine/sample.c - next-token selection.
 * Sampling follows the usual order: logits / temperature, keep the top_k
 * largest, keep the smallest prefix of them (by descending probability) whose
 * mass reaches top_p, renormalise, draw. */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/engine/sample.h"
#include "core/util/error.h"

struct fg_sampler {
	int64_t vocab;
	int32_t *idx;
	float *prob;
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
	}
	if (!s || !s->idx || !s->prob) {
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

int32_t fg_sample(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
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
	double maxl = logits[s->idx[0]], sum = 0;
	for (int64_t i = 0; i < keep; i++) {
		double e = exp(((double)logits[s->idx[i]] - maxl) / p->temperature);
		s->prob[i] = (float)e;
		sum += e;
	}
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
	double u = fg_rng_uniform(rng) * sum, acc = 0;
	for (int64_t i = 0; i < keep; i++) {
		acc += s->prob[i];
		if (u < acc)
			return s->idx[i];
	}
	return s->idx[keep - 1];
}
