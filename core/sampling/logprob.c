/* core/sampling/logprob.c - log-probabilities on the host, as
 * fgcore/logprob.h defines them: one row, or many over the CPUs. */
#include <fgcore/fanout.h>
#include <fgcore/logprob.h>

#include "core/sampling/logprob.h"

void fg_logprob_row(const float *x, int64_t n, int32_t id, int k, float *lp,
		    struct fg_logprob *top)
{
	int32_t ids[FG_LOGPROB_TOP_MAX];
	float lps[FG_LOGPROB_TOP_MAX];

	fg_logprob_row_of(x, n, id, k, lp, ids, lps);
	for (int j = 0; j < k && j < FG_LOGPROB_TOP_MAX; j++)
		top[j] = (struct fg_logprob){ ids[j], lps[j] };
}

struct lp_rows {
	const float *x;
	int64_t n, r0, r1;
	const int32_t *target;
	int k;
	float *lp;
	int32_t *top_id;
	float *top_lp;
};

static void lp_rows(void *arg)
{
	const struct lp_rows *w = arg;

	for (int64_t r = w->r0; r < w->r1; r++)
		if (w->target[r] >= 0)
			fg_logprob_row_of(w->x + r * w->n, w->n, w->target[r], w->k, &w->lp[r],
					  w->k ? w->top_id + r * w->k : NULL,
					  w->k ? w->top_lp + r * w->k : NULL);
}

void fg_logprob_rows(const float *x, int64_t rows, int64_t n, const int32_t *target, int k,
		     float *lp, int32_t *top_id, float *top_lp)
{
	struct lp_rows w[FG_FANOUT_MAX];
	/* A million logits a thread at least. */
	int t = fg_fanout_threads(0, (uint64_t)rows * (uint64_t)n, 1u << 20);
	int64_t per = (rows + t - 1) / t;

	for (int i = 0; i < t; i++) {
		int64_t r0 = i * per < rows ? i * per : rows, r1 = r0 + per < rows ? r0 + per : rows;
		w[i] = (struct lp_rows){ x, n, r0, r1, target, k, lp, top_id, top_lp };
	}
	fg_fanout(lp_rows, w, sizeof(*w), t);
}
