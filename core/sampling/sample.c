/* core/sampling/sample.c - next-token selection on the host.
 * fgcore/sampling.h defines the token (an order, integer softmax weights,
 * top_k, top_p, one draw); a compute backend's sample op must give the same.
 *
 * fg_sample_sorted follows the definition literally: every id sorted.
 * fg_sample gives the same token without sorting the whole vocabulary.  The
 * ids whose weight can be nonzero (those in the window the weight function
 * tests first) form a prefix of the order, because the window is monotone in
 * the logit: past them every kept id weighs 0 and changes no sum, so only the
 * window is sorted.  With a small top_k (up to 4096) a heap finds the first
 * top_k of the order instead. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/sampling.h>

#include "core/sampling/sample.h"
#include "core/util/error.h"

struct fg_sampler {
	int64_t vocab;
	int32_t *idx;
	uint64_t *w;   /* the weights of the ids in idx */
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

uint64_t fg_rng_u53(struct fg_rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out >> 11;
}

double fg_rng_uniform(struct fg_rng *r)
{
	return (double)fg_rng_u53(r) * 0x1.0p-53;
}

int fg_sampler_new(struct fg_sampler **out, int64_t vocab)
{
	struct fg_sampler *s = calloc(1, sizeof(*s));
	if (s) {
		s->vocab = vocab;
		s->idx = malloc(sizeof(int32_t) * (size_t)vocab);
		s->w = malloc(sizeof(uint64_t) * (size_t)vocab);
		s->key = malloc(sizeof(uint64_t) * (size_t)vocab);
		s->tmp = malloc(sizeof(uint64_t) * (size_t)vocab);
	}
	if (!s || !s->idx || !s->w || !s->key || !s->tmp) {
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
	free(s->w);
	free(s->key);
	free(s->tmp);
	free(s);
}

int32_t fg_argmax(const float *x, int64_t n)
{
	int64_t best = 0;
	while (best + 1 < n && x[best] != x[best])
		best++; /* NaN is never the largest */
	for (int64_t i = best + 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return n > 0 && x[best] > -INFINITY ? (int32_t)best : -1;
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
		a[i] = fg_sample_key(l[i], (int32_t)i);
	for (int64_t i = k / 2 - 1; i >= 0; i--)
		sift_down(a, k, i);
	for (int64_t i = k; i < n; i++) {
		float worst = l[(uint32_t)a[0]];
		if (!(l[i] > worst) && worst == worst) /* NaN counts as -inf */
			continue;
		uint64_t key = fg_sample_key(l[i], (int32_t)i);
		if (key > a[0])
			continue;
		a[0] = key;
		sift_down(a, k, 0);
	}
	qsort(a, (size_t)k, sizeof(uint64_t), cmp_key);
}

/* Steps 2-5 of the definition: keys holds the first kc ids of the order
 * (sorted keys), every kept id past them weighs 0. */
static int32_t draw_kept(struct fg_sampler *s, const uint64_t *keys, int64_t kc,
			 const float *l, float max, const struct fg_sampling *p, uint64_t u)
{
	int S = fg_sample_scale(s->vocab);
	uint64_t sum = 0, mass, acc = 0;
	int64_t i;

	for (i = 0; i < kc; i++) {
		s->idx[i] = (int32_t)(uint32_t)keys[i];
		s->w[i] = fg_sample_weight(l[s->idx[i]], max, p->temperature, S);
		sum += s->w[i];
	}
	if (!sum) /* nothing above -inf (fgcore/sampling.h) */
		return -1;
	mass = sum;
	if (p->top_p > 0 && p->top_p < 1) { /* the target is at most sum: reached within kc */
		uint64_t target = fg_sample_top_p_target(sum, p->top_p);
		for (i = 0, mass = 0; mass < target; i++)
			mass += s->w[i];
	}
	uint64_t r = fg_sample_point(u, mass); /* < mass: lands within the prefix */
	for (i = 0; acc <= r; i++)
		acc += s->w[i];
	return s->idx[i - 1];
}

/* The row's largest logit, NaN left out (-inf when every one is NaN). */
static float row_max(const float *l, int64_t n)
{
	float m = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		if (l[i] > m)
			m = l[i];
	return m;
}

/* The float of an fg_sample_rank. */
static float rank_float(uint32_t r)
{
	union {
		uint32_t u;
		float f;
	} v = { .u = r & 0x80000000u ? r & 0x7fffffffu : ~r };
	return v.f;
}

float fg_sample_window_floor(float max, float T, int S)
{
	uint32_t out = fg_sample_rank(-INFINITY), in = fg_sample_rank(max);

	while (in - out > 1) {
		uint32_t mid = out + (in - out) / 2;
		if (fg_sample_in_window(rank_float(mid), max, T, S))
			in = mid;
		else
			out = mid;
	}
	return rank_float(in);
}

static int64_t kept_count(const struct fg_sampler *s, const struct fg_sampling *p)
{
	return p->top_k > 0 && p->top_k < s->vocab ? p->top_k : s->vocab;
}

static int32_t sample_sorted(struct fg_sampler *s, const float *l, const struct fg_sampling *p,
			     uint64_t u)
{
	int64_t n = s->vocab;

	for (int64_t i = 0; i < n; i++)
		s->key[i] = fg_sample_key(l[i], (int32_t)i);
	qsort(s->key, (size_t)n, sizeof(uint64_t), cmp_key);
	return draw_kept(s, s->key, kept_count(s, p), l, row_max(l, n), p, u);
}

int32_t fg_sample_sorted(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
			 struct fg_rng *rng)
{
	if (p->temperature <= 0)
		return fg_argmax(logits, s->vocab);
	return sample_sorted(s, logits, p, fg_rng_u53(rng));
}

int32_t fg_sample(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
		  struct fg_rng *rng)
{
	int64_t n = s->vocab, keep = kept_count(s, p);

	if (p->temperature <= 0)
		return fg_argmax(logits, n);
	uint64_t u = fg_rng_u53(rng);
	float max = row_max(logits, n);
	if (!isfinite(max)) /* +inf, or no finite logit: rare, done literally */
		return sample_sorted(s, logits, p, u);
	if (keep < n && keep <= 4096) {
		top_k_keys(s->key, logits, n, keep);
		return draw_kept(s, s->key, keep, logits, max, p, u);
	}
	/* The window, a prefix of the order (fgcore/sampling.h): only its ids
	 * are sorted, and the first keep of them weighed. */
	int64_t m = 0;
	float lo = fg_sample_window_floor(max, p->temperature, fg_sample_scale(n));
	for (int64_t i = 0; i < n; i++)
		if (logits[i] >= lo)
			s->key[m++] = fg_sample_key(logits[i], (int32_t)i);
	const uint64_t *sorted = radix_sort(s->count, s->key, s->tmp, m);
	return draw_kept(s, sorted, keep < m ? keep : m, logits, max, p, u);
}
