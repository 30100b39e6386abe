/* core/engine/sample.h - choosing the next token from logits: greedy, or
 * temperature + top-k + top-p sampling with a per-request random stream. */
#ifndef FG_ENGINE_SAMPLE_H
#define FG_ENGINE_SAMPLE_H

#include <stdint.h>

struct fg_rng {
	uint64_t s[4]; /* xoshiro256** state */
};

void fg_rng_seed(struct fg_rng *r, uint64_t seed);
/* Uniform in [0, 1). */
double fg_rng_uniform(struct fg_rng *r);

struct fg_sampling {
	float temperature; /* 0: greedy (first index of the largest logit) */
	int top_k;         /* 0: all */
	float top_p;       /* >= 1 or 0: all */
};

/* Index of the largest of x[0..n) (the first on ties): greedy decoding. */
int32_t fg_argmax(const float *x, int64_t n);

struct fg_sampler; /* scratch for one vocabulary size */
int fg_sampler_new(struct fg_sampler **out, int64_t vocab);
void fg_sampler_free(struct fg_sampler *s);
/* The next token; one uniform draw from rng when temperature > 0. */
int32_t fg_sample(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
		  struct fg_rng *rng);
/* The same token by sorting the whole vocabulary: the definition fg_sample
 * must equal bit for bit (tests, benchmarks, and its own rare cases). */
int32_t fg_sample_sorted(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
			 struct fg_rng *rng);

#endif
