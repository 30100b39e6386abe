/* core/sampling/sample.h - choosing the next token from logits: greedy, or
 * temperature + top-k + top-p sampling with a per-request random stream. */
#ifndef FG_SAMPLING_SAMPLE_H
#define FG_SAMPLING_SAMPLE_H

#include <stdint.h>

struct fg_rng {
	uint64_t s[4]; /* xoshiro256** state */
};

void fg_rng_seed(struct fg_rng *r, uint64_t seed);
/* 53 random bits: a sampled token's draw (fgcore/sampling.h). */
uint64_t fg_rng_u53(struct fg_rng *r);
/* Uniform in [0, 1): the same bits, scaled. */
double fg_rng_uniform(struct fg_rng *r);

struct fg_sampling {
	float temperature; /* 0: greedy (first index of the largest logit) */
	int top_k;         /* 0: all */
	float top_p;       /* >= 1 or 0: all */
};

/* Index of the largest of x[0..n) (the first on ties, NaN left out; -1 when
 * none is above -inf): greedy decoding, as a backend's argmax op. */
int32_t fg_argmax(const float *x, int64_t n);

struct fg_sampler; /* scratch for one vocabulary size */
int fg_sampler_new(struct fg_sampler **out, int64_t vocab);
void fg_sampler_free(struct fg_sampler *s);
/* The next token as fgcore/sampling.h defines it; takes one fg_rng_u53
 * from rng when temperature > 0, none otherwise. */
int32_t fg_sample(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
		  struct fg_rng *rng);
/* The smallest logit in fgcore/sampling.h's window for a finite max:
 * fg_sample_in_window is monotone in l, so l is in the window exactly when
 * l >= this (one comparison a logit instead of a division). */
float fg_sample_window_floor(float max, float T, int S);
/* The same token by sorting the whole vocabulary, the definition followed
 * literally: what fg_sample and a backend's sample op must equal bit for bit
 * (tests, benchmarks, and fg_sample's rows without a finite largest logit). */
int32_t fg_sample_sorted(struct fg_sampler *s, const float *logits, const struct fg_sampling *p,
			 struct fg_rng *rng);

#endif
