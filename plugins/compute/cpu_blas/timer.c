/* plugins/compute/cpu_blas/timer.c - timers of a synchronous backend: every
 * op has finished when it returns, so a mark is the time of the call. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

int cpu_blas_timer_create(void *ctx, void **timer)
{
	(void)ctx;
	*timer = calloc(1, sizeof(double));
	return *timer ? 0 : -ENOMEM;
}

void cpu_blas_timer_destroy(void *ctx, void *timer)
{
	(void)ctx;
	free(timer);
}

int cpu_blas_timer_record(void *ctx, void *timer, void *stream)
{
	struct timespec ts;

	(void)ctx;
	(void)stream;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*(double *)timer = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
	return 0;
}

int cpu_blas_timer_elapsed(void *ctx, void *start, void *end, double *seconds)
{
	(void)ctx;
	*seconds = *(const double *)end - *(const double *)start;
	return 0;
}
