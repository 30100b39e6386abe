/* tests/argmax.h - the greedy token of a row of logits, as the tests read it. */
#ifndef FG_TESTS_ARGMAX_H
#define FG_TESTS_ARGMAX_H

#include <stdint.h>

/* The first largest of x[0..n). */
static inline int32_t argmax(const float *x, int64_t n)
{
	int64_t best = 0;

	for (int64_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int32_t)best;
}

#endif
