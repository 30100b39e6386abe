/* posix_file - a file-backed tier: the reference storage plugin.
 *
 * All regions live in one file (file_regions.c, shared with the NVMe tiers):
 * by default a fresh `fgcore-<pid>-<n>.tier` in `dir`, unlinked right after
 * it is opened so that nothing is left behind after a crash; or the file
 * named by `file` (kept).  Regions are extents of that file, 4096-byte
 * aligned, handed out first-fit from a free list; the file grows (fallocate,
 * so running out of disk shows at allocation time) and shrinks as regions
 * come and go, unless `size` fixes it up front.
 *
 * I/O is pread/pwrite.  With `o_direct = true` the file is opened O_DIRECT and
 * requests whose offset, length or buffer are not 4096-aligned go through an
 * aligned bounce buffer, so any request still works.  submit/reap run the
 * requests on a pool of `workers` threads.
 *
 * Fault injection for tests, without interposing on libc: the environment
 * variable FGCORE_POSIX_FILE_FAULT, read at open, holds one or more
 * comma-separated rules "read:EIO:N" / "write:ENOSPC:N": the Nth read (or
 * write) request of this tier, counting from 1 and across read/write and
 * submit, fails with that errno (a name such as EIO or a number) instead of
 * reaching the file.  A malformed value makes open fail.
 *
 * A slow disk, for tests of the callers' ordering: FGCORE_POSIX_FILE_DELAY_US
 * (read at open, 0..1000000) makes every asynchronous request wait that many
 * microseconds in its worker before it touches the file, so that a caller
 * that reuses a buffer before reaping its request sees the damage every time
 * instead of once in a thousand runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#include "plugins/storage/fault_rules.h"
#include "plugins/storage/file_regions.h"

#define PF_BLOCK FILE_REGIONS_BLOCK /* O_DIRECT alignment */
#define PF_BOUNCE (1u << 20)    /* bytes per bounce buffer */
#define PF_STRIPES 64           /* locks for read-modify-write of partial blocks */
#define PF_FAULT_ENV "FGCORE_POSIX_FILE_FAULT"
#define PF_DELAY_ENV "FGCORE_POSIX_FILE_DELAY_US"

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

struct pf_bounce {
	struct pf_bounce *next;
};

struct posix_file {
	const struct fg_host *host;
	struct file_regions fr; /* the file and its regions */
	bool fr_open;

	pthread_mutex_t bounce_lock;
	struct pf_bounce *bounce_pool;
	pthread_mutex_t stripe[PF_STRIPES];

	struct fault_rules faults;
	atomic_uint_fast64_t count[2]; /* requests seen, per op */
	unsigned delay_us;             /* PF_DELAY_ENV: a slow disk for tests */

	/* Worker pool: requests are linked through io->priv[0]. */
	pthread_mutex_t qlock;
	pthread_cond_t qwork, qdone;
	struct fg_io *todo_head, *todo_tail;
	struct fg_io *done_head, *done_tail;
	uint64_t ndone;
	uint64_t outstanding;   /* submitted, not yet reaped */
	bool stopping;
	pthread_t *threads;
	int nthreads;
};

static void pf_report(struct posix_file *pf, bool async, const char *fmt, ...) FG_PRINTF(3, 4);

/* Errors of a worker thread cannot reach the submitter's error slot; log them. */
static void pf_report(struct posix_file *pf, bool async, const char *fmt, ...)
{
	char line[PATH_MAX + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (async)
		fg_log(pf->host, FG_LOG_ERROR, "%s", line);
	else
		fg_error(pf->host, "%s", line);
}

/* ---- fault injection -------------------------------------------------- */

static int pf_parse_faults(struct posix_file *pf, const char *val)
{
	/* An empty value sets no rule. */
	if (!*val || !fault_rules_parse(&pf->faults, val, false))
		return 0;
	fg_error(pf->host, "posix_file: %s=\"%s\": expected up to %d comma-separated rules "
		 "read|write:ERRNO:N (ERRNO a name like EIO or ENOSPC, or a number; N >= 1), "
		 "e.g. read:EIO:3", PF_FAULT_ENV, val, FAULT_RULES_MAX);
	return -EINVAL;
}

static int pf_parse_delay(struct posix_file *pf, const char *val)
{
	uint64_t v;

	if (!val || !*val)
		return 0;
	if (!fault_rules_u64(val, strlen(val), &v) || v > 1000000) {
		fg_error(pf->host, "posix_file: %s=\"%s\": expected microseconds, 0..1000000",
			 PF_DELAY_ENV, val);
		return -EINVAL;
	}
	pf->delay_us = (unsigned)v;
	return 0;
}

/* Count this request; return the errno to inject, or 0. */
static int pf_fault_check(struct posix_file *pf, int op)
{
	if (!pf->faults.n)
		return 0;
	return fault_rules_match(&pf->faults, op, atomic_fetch_add(&pf->count[op], 1) + 1);
}

/* ---- raw I/O ---------------------------------------------------------- */

/* Read exactly len bytes; what lies past the end of the file reads as zeros. */
static int pf_pread_full(int fd, void *buf, size_t len, uint64_t foff)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)foff);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0) {
			memset(p, 0, len);
			return 0;
		}
		p += n;
		len -= (size_t)n;
		foff += (uint64_t)n;
	}
	return 0;
}

static int pf_pwrite_full(int fd, const void *buf, size_t len, uint64_t foff)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)foff);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		foff += (uint64_t)n;
	}
	return 0;
}

static void *pf_bounce_get(struct posix_file *pf)
{
	struct pf_bounce *b;
	void *p = NULL;

	pthread_mutex_lock(&pf->bounce_lock);
	b = pf->bounce_pool;
	if (b)
		pf->bounce_pool = b->next;
	pthread_mutex_unlock(&pf->bounce_lock);
	if (b)
		return b;
	if (posix_memalign(&p, PF_BLOCK, PF_BOUNCE))
		return NULL;
	return p;
}

static void pf_bounce_put(struct posix_file *pf, void *p)
{
	struct pf_bounce *b = p;

	pthread_mutex_lock(&pf->bounce_lock);
	b->next = pf->bounce_pool;
	pf->bounce_pool = b;
	pthread_mutex_unlock(&pf->bounce_lock);
}

/* O_DIRECT transfer of any shape: partial blocks go through the bounce buffer
 * (read-modify-write under a stripe lock for writes, since two requests may
 * share a block); runs of whole blocks go straight from/to the caller's buffer
 * when it is aligned, through the bounce buffer otherwise. */
static int pf_direct_io(struct posix_file *pf, int op, uint64_t foff, char *buf, size_t len)
{
	char *bounce = NULL;
	int err = 0;

	while (len && !err) {
		uint64_t blk = foff & ~(uint64_t)(PF_BLOCK - 1);
		size_t in_blk = (size_t)(foff - blk), n;

		if (in_blk || len < PF_BLOCK) {
			pthread_mutex_t *m = &pf->stripe[(blk / PF_BLOCK) % PF_STRIPES];

			n = PF_BLOCK - in_blk < len ? PF_BLOCK - in_blk : len;
			if (!bounce && !(bounce = pf_bounce_get(pf)))
				return -ENOMEM;
			if (op == FG_IO_WRITE)
				pthread_mutex_lock(m);
			err = pf_pread_full(pf->fr.fd, bounce, PF_BLOCK, blk);
			if (!err && op == FG_IO_READ) {
				memcpy(buf, bounce + in_blk, n);
			} else if (!err) {
				memcpy(bounce + in_blk, buf, n);
				err = pf_pwrite_full(pf->fr.fd, bounce, PF_BLOCK, blk);
			}
			if (op == FG_IO_WRITE)
				pthread_mutex_unlock(m);
		} else if (((uintptr_t)buf & (PF_BLOCK - 1)) == 0) {
			n = len & ~(size_t)(PF_BLOCK - 1);
			err = op == FG_IO_READ ? pf_pread_full(pf->fr.fd, buf, n, foff)
					       : pf_pwrite_full(pf->fr.fd, buf, n, foff);
		} else {
			n = len & ~(size_t)(PF_BLOCK - 1);
			if (n > PF_BOUNCE)
				n = PF_BOUNCE;
			if (!bounce && !(bounce = pf_bounce_get(pf)))
				return -ENOMEM;
			if (op == FG_IO_READ) {
				err = pf_pread_full(pf->fr.fd, bounce, n, foff);
				if (!err)
					memcpy(buf, bounce, n);
			} else {
				memcpy(bounce, buf, n);
				err = pf_pwrite_full(pf->fr.fd, bounce, n, foff);
			}
		}
		foff += n;
		buf += n;
		len -= n;
	}
	if (bounce)
		pf_bounce_put(pf, bounce);
	return err;
}

/* One request, validated: the core of read, write and the workers. */
static int pf_io(struct posix_file *pf, int op, const struct fg_region *r, uint64_t off,
		 void *buf, size_t len, bool async)
{
	const char *what = op == FG_IO_READ ? "read" : "write";
	char why[PATH_MAX + 256];
	uint64_t foff;
	int err;

	err = file_regions_check(&pf->fr, op, r, off, len, buf, &foff, why, sizeof(why));
	if (err) {
		pf_report(pf, async, "%s", why);
		return err;
	}
	err = pf_fault_check(pf, op);
	if (err) {
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes at offset %" PRIu64
			  " (file offset %" PRIu64 ") failed: %s (injected by %s)", pf->fr.path,
			  what, len, off, foff, strerror(err), PF_FAULT_ENV);
		return -err;
	}
	if (!len)
		return 0;
	if (pf->fr.o_direct && !(file_regions_aligned(foff) && file_regions_aligned(len) &&
				 file_regions_aligned((uintptr_t)buf)))
		err = pf_direct_io(pf, op, foff, buf, len);
	else if (op == FG_IO_READ)
		err = pf_pread_full(pf->fr.fd, buf, len, foff);
	else
		err = pf_pwrite_full(pf->fr.fd, buf, len, foff);
	if (err)
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes at offset %" PRIu64
			  " (file offset %" PRIu64 ") failed: %s%s", pf->fr.path, what, len, off,
			  foff, strerror(-err),
			  err == -ENOSPC ? "; free disk space or move this tier's dir" : "");
	return err;
}

static int posix_file_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst,
			   size_t len)
{
	return pf_io(ctx, FG_IO_READ, r, off, dst, len, false);
}

static int posix_file_write(void *ctx, const struct fg_region *r, uint64_t off,
			    const void *src, size_t len)
{
	return pf_io(ctx, FG_IO_WRITE, r, off, (void *)src, len, false);
}

/* ---- regions ---------------------------------------------------------- */

static int posix_file_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct posix_file *pf = ctx;

	return file_regions_alloc(&pf->fr, size, r);
}

static void posix_file_free(void *ctx, struct fg_region *r)
{
	struct posix_file *pf = ctx;

	file_regions_free(&pf->fr, r);
}

/* ---- asynchronous requests ------------------------------------------- */

#define PF_NEXT(io) ((struct fg_io *)(uintptr_t)(io)->priv[0])

static void *pf_worker(void *arg)
{
	struct posix_file *pf = arg;

	pthread_mutex_lock(&pf->qlock);
	for (;;) {
		struct fg_io *io = pf->todo_head;

		if (!io) {
			if (pf->stopping)
				break;
			pthread_cond_wait(&pf->qwork, &pf->qlock);
			continue;
		}
		pf->todo_head = PF_NEXT(io);
		if (!pf->todo_head)
			pf->todo_tail = NULL;
		pthread_mutex_unlock(&pf->qlock);

		if (pf->delay_us)
			usleep(pf->delay_us);
		io->result = pf_io(pf, (int)io->op, io->region, io->offset, io->buf, io->len,
				   true);

		pthread_mutex_lock(&pf->qlock);
		io->priv[0] = 0;
		if (pf->done_tail)
			pf->done_tail->priv[0] = (uintptr_t)io;
		else
			pf->done_head = io;
		pf->done_tail = io;
		pf->ndone++;
		pthread_cond_broadcast(&pf->qdone);
	}
	pthread_mutex_unlock(&pf->qlock);
	return NULL;
}

static int posix_file_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct posix_file *pf = ctx;

	if (!n)
		return 0;
	if (!ios) {
		fg_error(pf->host, "posix_file: %s: submit of %u requests without an array",
			 pf->fr.path, n);
		return -EINVAL;
	}
	for (unsigned i = 0; i < n; i++) {
		if (!ios[i]) {
			fg_error(pf->host, "posix_file: %s: submit: request %u of %u is NULL",
				 pf->fr.path, i, n);
			return -EINVAL;
		}
	}
	pthread_mutex_lock(&pf->qlock);
	for (unsigned i = 0; i < n; i++) {
		struct fg_io *io = ios[i];

		io->priv[0] = 0;
		if (pf->todo_tail)
			pf->todo_tail->priv[0] = (uintptr_t)io;
		else
			pf->todo_head = io;
		pf->todo_tail = io;
	}
	pf->outstanding += n;
	if (n == 1)
		pthread_cond_signal(&pf->qwork);
	else
		pthread_cond_broadcast(&pf->qwork);
	pthread_mutex_unlock(&pf->qlock);
	return 0;
}

static int posix_file_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct posix_file *pf = ctx;
	unsigned k = 0;

	if (!max)
		return 0;
	if (!done) {
		fg_error(pf->host, "posix_file: %s: reap without an array", pf->fr.path);
		return -EINVAL;
	}
	if (min > max)
		min = max;
	pthread_mutex_lock(&pf->qlock);
	/* Wait only for requests that exist: never for more than are outstanding. */
	while (pf->ndone < min && pf->ndone < pf->outstanding)
		pthread_cond_wait(&pf->qdone, &pf->qlock);
	while (k < max && pf->done_head) {
		struct fg_io *io = pf->done_head;

		pf->done_head = PF_NEXT(io);
		if (!pf->done_head)
			pf->done_tail = NULL;
		io->priv[0] = 0;
		done[k++] = io;
	}
	pf->ndone -= k;
	pf->outstanding -= k;
	pthread_mutex_unlock(&pf->qlock);
	return (int)k;
}

/* ---- open / close ----------------------------------------------------- */

static void pf_destroy(struct posix_file *pf)
{
	struct pf_bounce *b;

	if (pf->threads) {
		pthread_mutex_lock(&pf->qlock);
		pf->stopping = true;
		pthread_cond_broadcast(&pf->qwork);
		pthread_mutex_unlock(&pf->qlock);
		/* Workers drain the queue before they leave: every request completes. */
		for (int i = 0; i < pf->nthreads; i++)
			pthread_join(pf->threads[i], NULL);
		free(pf->threads);
	}
	if (pf->fr_open)
		file_regions_close(&pf->fr);
	while ((b = pf->bounce_pool)) {
		pf->bounce_pool = b->next;
		free(b);
	}
	for (int i = 0; i < PF_STRIPES; i++)
		pthread_mutex_destroy(&pf->stripe[i]);
	pthread_mutex_destroy(&pf->bounce_lock);
	pthread_mutex_destroy(&pf->qlock);
	pthread_cond_destroy(&pf->qwork);
	pthread_cond_destroy(&pf->qdone);
	free(pf);
}

static void posix_file_close(void *ctx)
{
	pf_destroy(ctx);
}

static int posix_file_open(const struct fg_host *host, const void *opts, void **ctx,
			   struct fg_storage_info *info)
{
	struct posix_file_opts o;
	struct posix_file *pf;
	const char *fault;
	int err;

	if (opts) {
		memcpy(&o, opts, sizeof(o));
		o.dir[sizeof(o.dir) - 1] = '\0';
		o.file[sizeof(o.file) - 1] = '\0';
	} else {
		memset(&o, 0, sizeof(o));
		strcpy(o.dir, "/var/tmp");
		o.workers = 4;
	}
	if (o.workers < 1 || o.workers > 64) {
		fg_error(host, "posix_file: workers = %" PRId64 " is out of range; use 1..64",
			 o.workers);
		return -EINVAL;
	}
	pf = calloc(1, sizeof(*pf));
	if (!pf) {
		fg_error(host, "posix_file: out of memory opening the tier");
		return -ENOMEM;
	}
	pf->host = host;
	pthread_mutex_init(&pf->bounce_lock, NULL);
	pthread_mutex_init(&pf->qlock, NULL);
	pthread_cond_init(&pf->qwork, NULL);
	pthread_cond_init(&pf->qdone, NULL);
	for (int i = 0; i < PF_STRIPES; i++)
		pthread_mutex_init(&pf->stripe[i], NULL);

	fault = getenv(PF_FAULT_ENV);
	if (fault && (err = pf_parse_faults(pf, fault)))
		goto fail;
	if ((err = pf_parse_delay(pf, getenv(PF_DELAY_ENV))))
		goto fail;
	err = file_regions_open(&pf->fr, host, "posix_file", o.dir, o.file, o.o_direct, o.size);
	if (err)
		goto fail;
	pf->fr_open = true;

	pf->threads = calloc((size_t)o.workers, sizeof(*pf->threads));
	if (!pf->threads) {
		fg_error(host, "posix_file: out of memory starting %" PRId64 " workers",
			 o.workers);
		err = -ENOMEM;
		goto fail;
	}
	for (int i = 0; i < (int)o.workers; i++) {
		err = pthread_create(&pf->threads[i], NULL, pf_worker, pf);
		if (err) {
			fg_error(host, "posix_file: cannot start worker thread %d of %" PRId64
				 ": %s; lower workers =", i + 1, o.workers, strerror(err));
			err = -err;
			goto fail;
		}
		pf->nthreads++;
	}

	info->capacity = file_regions_capacity(&pf->fr);
	info->flags = 0;
	info->alignment = pf->fr.o_direct ? PF_BLOCK : 1;
	fg_log(host, FG_LOG_DEBUG, "posix_file: %s: capacity %" PRIu64 " bytes, %d workers%s",
	       pf->fr.path, info->capacity, pf->nthreads, pf->fr.o_direct ? ", O_DIRECT" : "");
	*ctx = pf;
	return 0;
fail:
	pf_destroy(pf);
	return err;
}

static int posix_file_probe(const struct fg_host *host)
{
	return 1;
}

static const struct fg_storage_ops posix_file_ops = {
	.open	= posix_file_open,
	.close	= posix_file_close,
	.alloc	= posix_file_alloc,
	.free	= posix_file_free,
	.read	= posix_file_read,
	.write	= posix_file_write,
	.submit	= posix_file_submit,
	.reap	= posix_file_reap,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "posix_file",
	.description	= "file-backed tier (pread/pwrite, optional O_DIRECT, worker threads)",
	.probe		= posix_file_probe,
	.ops		= &posix_file_ops,
	.options	= posix_file_options,
	.opts_size	= sizeof(struct posix_file_opts),
	.capabilities	= "async,o_direct,sparse,fault_injection",
};
