/* core/sampling/logprob.h - log-probabilities of the model's distribution
 * (the log-softmax of the raw logits: before temperature, top-k, top-p) on
 * the host, as fgcore/logprob.h defines them. */
#ifndef FG_SAMPLING_LOGPROB_H
#define FG_SAMPLING_LOGPROB_H

#include <stdint.h>

#include <fgcore/fgcore.h>

/* One row: *lp = log p(id), top[k] its k most likely ids (k <= FG_TOP_LOGPROBS_MAX). */
void fg_logprob_row(const float *x, int64_t n, int32_t id, int k, float *lp,
		    struct fg_logprob *top);
/* rows rows of n logits: those with target[r] >= 0 as the logprob op
 * (fgcore/compute.h) does them, over the CPUs. */
void fg_logprob_rows(const float *x, int64_t rows, int64_t n, const int32_t *target, int k,
		     float *lp, int32_t *top_id, float *top_lp);

#endif
