/* fgcore/fanout.h - how many CPUs this process may run on, and a fan-out of
 * jobs over threads for work that splits into independent pieces.
 *
 * Header-only (static inline): the core and plugins, in tree or out of it,
 * share it without a plugin calling a core symbol.  Link with -pthread.
 *
 *  fg_cpus            the CPUs of the affinity mask (taskset, container
 *                     cpusets), else the online CPUs; at least 1.  The mask
 *                     needs sched_getaffinity: define _GNU_SOURCE before any
 *                     system header, or fg_cpus counts the online CPUs.
 *  fg_fanout_threads  a thread count for n units of work;
 *  fg_fanout          run n jobs, one on the calling thread, the others on
 *                     threads of their own, and wait for all.
 */
#ifndef FGCORE_FANOUT_H
#define FGCORE_FANOUT_H

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FG_FANOUT_MAX 64 /* most jobs of one fan-out */

static inline int fg_cpus(void)
{
	long n;
#ifdef CPU_COUNT /* <sched.h> with _GNU_SOURCE */
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
#endif
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)(n < INT_MAX ? n : INT_MAX) : 1;
}

/* Threads for n units of work: `threads` when positive, else one per CPU
 * with at least per_thread (> 0) units each; at least 1, at most FG_FANOUT_MAX. */
static inline int fg_fanout_threads(int threads, uint64_t n, uint64_t per_thread)
{
	if (threads <= 0) {
		uint64_t most = n / per_thread;

		threads = fg_cpus();
		threads = (uint64_t)threads > most ? (int)most : threads;
	}
	threads = threads < FG_FANOUT_MAX ? threads : FG_FANOUT_MAX;
	return threads > 1 ? threads : 1;
}

struct fg_fanout_job {
	void (*fn)(void *);
	void *arg;
};

static inline void *fg_fanout_main(void *p)
{
	struct fg_fanout_job *j = (struct fg_fanout_job *)p;

	j->fn(j->arg);
	return NULL;
}

/* fn on each of the n jobs of `size` bytes at jobs (n <= FG_FANOUT_MAX): job
 * 0 on the calling thread, the others on threads of their own; a job whose
 * thread cannot start runs on the caller afterwards.  Returns when all are done. */
static inline void fg_fanout(void (*fn)(void *), void *jobs, size_t size, int n)
{
	struct fg_fanout_job job[FG_FANOUT_MAX];
	pthread_t th[FG_FANOUT_MAX];
	int started[FG_FANOUT_MAX];

	for (int k = 1; k < n; k++) {
		job[k].fn = fn;
		job[k].arg = (char *)jobs + (size_t)k * size;
		started[k] = pthread_create(&th[k], NULL, fg_fanout_main, &job[k]) == 0;
	}
	fn(jobs);
	for (int k = 1; k < n; k++) {
		if (started[k])
			pthread_join(th[k], NULL);
		else
			fn(job[k].arg); /* no thread to spare: do it here */
	}
}

#ifdef __cplusplus
}
#endif
#endif
