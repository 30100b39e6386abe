/* core/sampling/logprob.h - log-probabilities of the model's distribution
 * (the log-softmax of the raw logits: before temperature, top-k, top-p). */
#ifndef FG_SAMPLING_LOGPROB_H
#define FG_SAMPLING_LOGPROB_H

#include <stdint.h>

#include <fgcore/fgcore.h>

/* log(sum(exp(x[0..n)))). */
double fg_logsumexp(const float *x, int64_t n);
/* The k most likely ids of x (k <= FG_TOP_LOGPROBS_MAX) with their
 * log-probabilities (x - lse), most likely first, ties by smaller id. */
void fg_top_logprobs(const float *x, int64_t n, double lse, int k, struct fg_logprob *out);
/* Both for one row: *lp = log p(id), top[k] as above. */
void fg_logprob_row(const float *x, int64_t n, int32_t id, int k, float *lp,
		    struct fg_logprob *top);

#endif
