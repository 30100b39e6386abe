/* plugins/compute/cpu_blas/logprob.c - log-probabilities of rows of fp32
 * logits (the logprob op, compute ABI 1.6): fgcore/logprob.h's definition,
 * rows spread over the pool. */
#include <pthread.h>

#include <fgcore/logprob.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

static void cb_logprob_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fg_logprob_args *a = arg;
	int64_t k = a->k;

	(void)tid;
	for (int64_t r = b; r < e; r++)
		if (a->target[r] >= 0)
			fg_logprob_row_of((const float *)a->logits.data + r * a->logits.ld,
					  a->logits.cols, a->target[r], a->k, &a->lp[r],
					  k ? a->top_id + r * k : NULL, k ? a->top_lp + r * k : NULL);
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_logprob(void *ctx, void *stream, const struct fg_logprob_args *a)
{
	struct cpu_blas_ctx *c = ctx;

	(void)stream;
	if (a->logits.rows == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	/* A row is a pass or two over the vocabulary: a few rows a thread at least. */
	cpu_blas_pool_run(c->pool, a->logits.rows, 1 + (1 << 18) / (a->logits.cols + 1),
			  cb_logprob_rows, (void *)a);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
