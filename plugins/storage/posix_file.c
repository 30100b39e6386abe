/* posix_file - a file-backed tier: the reference storage plugin.
 *
 * The tier file, its regions and the request queue are those of every file
 * tier (file_regions.c, file_queue.c): by default a fresh
 * `fgcore-<pid>-<n>.tier` in `dir`, unlinked right after it is opened so that
 * nothing is left behind after a crash, or the file named by `file` (kept);
 * regions are 4096-aligned extents of it, the file grows (fallocate, so
 * running out of disk shows at allocation time) and shrinks as regions come
 * and go, unless `size` fixes it up front.  With `o_direct = true` the file is
 * opened O_DIRECT and requests whose offset, length or buffer are not
 * 4096-aligned go through aligned bounce buffers, so any request still works.
 *
 * This file is the engine: a pool of `workers` threads doing pread/pwrite, one
 * piece (at most PF_PIECE bytes) at a time, each completing its piece into
 * the queue itself so that requests move on while nobody waits for them.
 *
 * Fault injection and a slow disk (FGCORE_POSIX_FILE_FAULT,
 * FGCORE_POSIX_FILE_DELAY_US) come from the core's shim over every tier
 * (core/tier/fault_shim.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#include "plugins/storage/file_queue.h"

#define PF_NAME "posix_file"
#define PF_PIECE (1u << 20)    /* bytes per pread/pwrite */
#define PF_PIECES_PER_WORKER 8 /* queue depth per worker: work in hand for each */

struct posix_file_opts {
	char dir[FG_OPT_STRING_MAX];
	char file[FG_OPT_STRING_MAX];
	int o_direct;
	uint64_t size;
	int64_t workers;
};

static const struct fg_option posix_file_options[] = {
	{ .key = "dir", .type = FG_OPT_STRING, .def = "/var/tmp",
	  .help = "directory of the tier file (created there and unlinked at once)",
	  .offset = offsetof(struct posix_file_opts, dir) },
	{ .key = "file", .type = FG_OPT_STRING, .def = NULL,
	  .help = "use this file instead of a temporary one in dir (truncated, kept after exit)",
	  .offset = offsetof(struct posix_file_opts, file) },
	{ .key = "o_direct", .type = FG_OPT_BOOL, .def = "false",
	  .help = "open the file with O_DIRECT (bypass the page cache); unaligned requests "
		  "are bounced",
	  .offset = offsetof(struct posix_file_opts, o_direct) },
	{ .key = "size", .type = FG_OPT_SIZE, .def = "0",
	  .help = "reserve this many bytes up front (fallocate) and never grow; 0 grows the "
		  "file as regions are allocated",
	  .offset = offsetof(struct posix_file_opts, size) },
	{ .key = "workers", .type = FG_OPT_INT, .def = "4",
	  .help = "threads serving asynchronous requests",
	  .offset = offsetof(struct posix_file_opts, workers), .min = 1, .max = 64 },
	{ .key = NULL },
};

static const struct posix_file_opts posix_file_defaults = {
	.dir = "/var/tmp",
	.workers = 4,
};

/* The worker pool: pieces wait in a FIFO linked through file_piece.next. */
struct pf_pool {
	struct file_queue *q;
	int fd;
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct file_piece *head, *tail;
	bool stopping;
	pthread_t *threads;
	int nthreads;
};

static void posix_file_queue_opts(const void *opts, struct file_queue_opts *out)
{
	const struct posix_file_opts *o = opts;
	int64_t w = o->workers < 1 ? 1 : o->workers > 64 ? 64 : o->workers;

	memset(out, 0, sizeof(*out));
	memcpy(out->dir, o->dir, sizeof(out->dir));
	memcpy(out->file, o->file, sizeof(out->file));
	out->size = o->size;
	out->o_direct = o->o_direct;
	out->queue_depth = w * PF_PIECES_PER_WORKER;
	out->request_size = PF_PIECE;
}

static void *pf_worker(void *arg)
{
	struct pf_pool *pool = arg;

	pthread_mutex_lock(&pool->lock);
	for (;;) {
		struct file_piece *p = pool->head;
		char *mem;
		off_t off;
		ssize_t n;

		if (!p) {
			if (pool->stopping)
				break;
			pthread_cond_wait(&pool->work, &pool->lock);
			continue;
		}
		pool->head = p->next;
		if (!pool->head)
			pool->tail = NULL;
		pthread_mutex_unlock(&pool->lock);

		/* One system call: the queue resubmits the rest of a short one and
		 * retries EINTR/EAGAIN. */
		mem = p->mem + p->done;
		off = (off_t)(p->foff + p->done);
		n = p->op == FG_IO_READ ? pread(pool->fd, mem, p->xfer, off)
					: pwrite(pool->fd, mem, p->xfer, off);
		file_queue_done(pool->q, p, n < 0 ? -(long)errno : (long)n);

		pthread_mutex_lock(&pool->lock);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

static void posix_file_teardown(struct file_queue *q, void *priv)
{
	struct pf_pool *pool = priv;

	pthread_mutex_lock(&pool->lock);
	pool->stopping = true;
	pthread_cond_broadcast(&pool->work);
	pthread_mutex_unlock(&pool->lock);
	/* Workers finish what they hold before they leave. */
	for (int i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i], NULL);
	free(pool->threads);
	pthread_cond_destroy(&pool->work);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

static int posix_file_setup(struct file_queue *q, const void *opts, void **priv)
{
	const struct posix_file_opts *o = opts;
	const struct fg_host *host = file_queue_host(q);
	struct pf_pool *pool;
	int err;

	if (o->workers < 1 || o->workers > 64) {
		fg_error(host, PF_NAME ": workers = %" PRId64 " is out of range; use 1..64",
			 o->workers);
		return -EINVAL;
	}
	pool = calloc(1, sizeof(*pool));
	if (pool)
		pool->threads = calloc((size_t)o->workers, sizeof(*pool->threads));
	if (!pool || !pool->threads) {
		free(pool);
		fg_error(host, PF_NAME ": out of memory starting %" PRId64 " workers", o->workers);
		return -ENOMEM;
	}
	pool->q = q;
	pool->fd = file_queue_fd(q);
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->work, NULL);
	for (int i = 0; i < (int)o->workers; i++) {
		err = pthread_create(&pool->threads[i], NULL, pf_worker, pool);
		if (err) {
			fg_error(host, PF_NAME ": cannot start worker thread %d of %" PRId64
				 ": %s; lower workers =", i + 1, o->workers, strerror(err));
			posix_file_teardown(q, pool);
			return -err;
		}
		pool->nthreads++;
	}
	fg_log(host, FG_LOG_DEBUG, PF_NAME ": %s: %d workers", file_queue_path(q),
	       pool->nthreads);
	*priv = pool;
	return 0;
}

static void posix_file_prep(struct file_queue *q, void *priv, struct file_piece *p)
{
	struct pf_pool *pool = priv;

	pthread_mutex_lock(&pool->lock);
	p->next = NULL;
	if (pool->tail)
		pool->tail->next = p;
	else
		pool->head = p;
	pool->tail = p;
	pthread_cond_signal(&pool->work);
	pthread_mutex_unlock(&pool->lock);
}

/* The workers complete pieces on their own: waiting is sleeping. */
static int posix_file_wait(struct file_queue *q, void *priv, unsigned min)
{
	return file_queue_sleep(q, min);
}

const struct file_engine file_queue_engine = {
	.name		= PF_NAME,
	.defaults	= &posix_file_defaults,
	.queue_opts	= posix_file_queue_opts,
	.setup		= posix_file_setup,
	.teardown	= posix_file_teardown,
	.prep		= posix_file_prep,
	.wait		= posix_file_wait,
};

static int posix_file_probe(const struct fg_host *host)
{
	return 1;
}

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= PF_NAME,
	.description	= "file-backed tier (pread/pwrite, optional O_DIRECT, worker threads)",
	.probe		= posix_file_probe,
	.ops		= &file_queue_ops,
	.options	= posix_file_options,
	.opts_size	= sizeof(struct posix_file_opts),
	.capabilities	= "async,o_direct,sparse",
};
