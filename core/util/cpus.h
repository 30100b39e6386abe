/* core/util/cpus.h - how many CPUs this process may run on: its affinity
 * mask (which taskset and container cpusets narrow), else the online CPUs,
 * at least 1.  Header-only, so that plugins (built apart from libfgcore)
 * share it; a file including it defines _GNU_SOURCE before any system
 * header, for sched_getaffinity. */
#ifndef FG_UTIL_CPUS_H
#define FG_UTIL_CPUS_H

#include <limits.h>
#include <sched.h>
#include <unistd.h>

static inline int fg_cpus(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)(n < INT_MAX ? n : INT_MAX) : 1;
}

#endif
