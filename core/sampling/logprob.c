/* core/sampling/logprob.c - log-probabilities out of a row of logits: the
 * log-softmax of one id, and the most likely ids with theirs. */
#include <math.h>

#include "core/sampling/logprob.h"

double fg_logsumexp(const float *x, int64_t n)
{
	float mx = -INFINITY;
	double z = 0;

	for (int64_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	if (!isfinite(mx))
		return mx;
	/* Terms in float (they are at most 1), their sum in double: a vocabulary
	 * of 10^5 terms loses nothing a log-probability shows. */
	for (int64_t i = 0; i < n; i++)
		z += (double)expf(x[i] - mx);
	return (double)mx + log(z);
}

void fg_top_logprobs(const float *x, int64_t n, double lse, int k, struct fg_logprob *out)
{
	int have = 0;

	if (k <= 0)
		return;
	/* Insertion into the k best so far, most likely first; ties keep the
	 * smaller id first (it came first), as a stable sort would. */
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		int at;

		if (have == k && !(v > out[k - 1].logprob))
			continue;
		at = have < k ? have++ : k - 1;
		while (at > 0 && v > out[at - 1].logprob) {
			out[at] = out[at - 1];
			at--;
		}
		out[at].id = (int32_t)i;
		out[at].logprob = v;
	}
	for (int i = 0; i < have; i++)
		out[i].logprob = (float)((double)out[i].logprob - lse);
	for (int i = have; i < k; i++)
		out[i] = (struct fg_logprob){ -1, -INFINITY };
}

void fg_logprob_row(const float *x, int64_t n, int32_t id, int k, float *lp,
		    struct fg_logprob *top)
{
	double lse = fg_logsumexp(x, n);

	*lp = (float)((double)x[id] - lse);
	fg_top_logprobs(x, n, lse, k, top);
}
