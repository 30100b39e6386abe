/* core/util/clock.h - seconds on the monotonic clock, for timing. */
#ifndef FG_UTIL_CLOCK_H
#define FG_UTIL_CLOCK_H

#include <time.h>

static inline double fg_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
