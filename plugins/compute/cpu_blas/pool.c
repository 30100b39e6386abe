/* plugins/compute/cpu_blas/pool.c - a fixed pool of pthreads running one
 * parallel-for at a time.  Chunks are handed out through an atomic counter so
 * uneven work balances; the caller works too and returns only once every
 * worker taking part has left the job.  Small jobs ask for fewer threads:
 * waking a thread costs more than a few microseconds of work. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

struct cpu_blas_worker {
	struct cpu_blas_pool *pool;
	pthread_t thread;
	int tid;
};

struct cpu_blas_pool {
	pthread_mutex_t lock;
	pthread_cond_t work;  /* a new job (gen changed) or stop */
	pthread_cond_t done;  /* active dropped to 0 */
	uint64_t gen;
	int stop;
	int active;           /* workers still inside the current job */
	int nthreads;         /* threads taking part in the current job (caller included) */
	int nworkers;
	struct cpu_blas_worker *workers;

	/* the current job */
	cpu_blas_task_fn fn;
	void *arg;
	int64_t n, grain;
	atomic_int_fast64_t next;
};

static void cpu_blas_pool_work(struct cpu_blas_pool *p, int tid)
{
	for (;;) {
		int64_t b = atomic_fetch_add_explicit(&p->next, p->grain, memory_order_relaxed);

		if (b >= p->n)
			return;
		p->fn(p->arg, b, b + p->grain < p->n ? b + p->grain : p->n, tid);
	}
}

static void *cpu_blas_pool_main(void *arg)
{
	struct cpu_blas_worker *w = arg;
	struct cpu_blas_pool *p = w->pool;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		if (w->tid >= p->nthreads)
			continue; /* not needed for this job */
		pthread_mutex_unlock(&p->lock);
		cpu_blas_pool_work(p, w->tid);
		pthread_mutex_lock(&p->lock);
		if (--p->active == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int cpu_blas_pool_create(struct cpu_blas_pool **out, int threads)
{
	struct cpu_blas_pool *p;
	int i, rc;

	*out = NULL;
	if (threads < 1)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->workers = calloc((size_t)threads, sizeof(*p->workers));
	if (!p->workers) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	atomic_init(&p->next, 0);
	for (i = 0; i < threads - 1; i++) {
		p->workers[i].pool = p;
		p->workers[i].tid = i + 1;
		rc = pthread_create(&p->workers[i].thread, NULL, cpu_blas_pool_main, &p->workers[i]);
		if (rc) {
			cpu_blas_pool_destroy(p);
			return -rc;
		}
		p->nworkers++;
	}
	*out = p;
	return 0;
}

void cpu_blas_pool_destroy(struct cpu_blas_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i].thread, NULL);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->work);
	pthread_mutex_destroy(&p->lock);
	free(p->workers);
	free(p);
}

void cpu_blas_pool_run(struct cpu_blas_pool *p, int64_t n, int64_t grain,
		       cpu_blas_task_fn fn, void *arg)
{
	cpu_blas_pool_run_on(p, p->nworkers + 1, n, grain, fn, arg);
}

void cpu_blas_pool_run_on(struct cpu_blas_pool *p, int threads, int64_t n, int64_t grain,
			  cpu_blas_task_fn fn, void *arg)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	if (threads > p->nworkers + 1)
		threads = p->nworkers + 1;
	if (threads <= 1 || n <= grain) {
		fn(arg, 0, n, 0);
		return;
	}
	pthread_mutex_lock(&p->lock);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	p->grain = grain;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	p->nthreads = threads;
	p->active = threads - 1;
	p->gen++;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);

	cpu_blas_pool_work(p, 0);

	pthread_mutex_lock(&p->lock);
	while (p->active > 0)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}
