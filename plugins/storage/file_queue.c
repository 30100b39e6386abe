/* plugins/storage/file_queue.c - requests cut into pieces, bounce buffers,
 * read-modify-write of partial blocks and completion bookkeeping: the queue
 * core of every file tier (see file_queue.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "plugins/storage/file_regions.h"
#include "plugins/storage/file_queue.h"

#define FQ_BLOCK FILE_REGIONS_BLOCK
#define FQ_SMALL (2 * FQ_BLOCK)          /* bounce buffers for partial blocks */
#define FQ_BOUNCE_MAX ((size_t)1 << 20)  /* largest bounce buffer */
#define FQ_MAX_BIG 4u
#define FQ_MAX_SMALL 256u
#define FQ_MAX_REQUEST ((uint64_t)1 << 30)
#define FQ_MAX_RETRIES 1000u

/* fg_io.priv while a request is ours */
#define FQ_LINK 0     /* next request in the work list or the done list */
#define FQ_CURSOR 1   /* bytes already cut into pieces */
#define FQ_STATE 2    /* pieces not yet completed (low 32 bits) | FQ_F_* */
#define FQ_ERROFF 3   /* file offset where its first error happened */

#define FQ_PENDING ((uint64_t)0xffffffffu)
#define FQ_F_SYNC ((uint64_t)1 << 32)     /* a synchronous call waits for it */
#define FQ_F_DONE ((uint64_t)1 << 33)     /* (sync) completed */
#define FQ_F_QUEUED ((uint64_t)1 << 34)   /* in the work list: not fully cut yet */

struct file_queue {
	const struct fg_host *host;
	const struct file_engine *eng;
	void *eng_priv;
	struct file_regions fr;
	bool fr_open;
	bool o_direct;
	unsigned qd;
	size_t rs;        /* request_size */
	size_t bsz;       /* bytes of a large bounce buffer */

	pthread_mutex_t lock;
	pthread_cond_t progress;    /* file_queue_done: pieces completed */
	uint64_t ncompleted;        /* pieces completed, ever */
	struct file_piece *pieces;  /* qd of them */
	struct file_piece *free_pieces, *retry_head, *retry_tail;
	unsigned nflight;           /* pieces the engine holds */
	unsigned nprepped;          /* pieces given to the engine since its last wait */

	char *bounce_mem;
	struct iovec *bounce_iov;   /* [0, nbig): bsz bytes; [nbig, nbounce): FQ_SMALL */
	unsigned nbounce, nbig;
	int *free_big, *free_small;
	unsigned nfree_big, nfree_small;

	uint64_t *rmw_blocks;       /* file blocks under read-modify-write */
	unsigned nrmw;

	struct fg_io *work_head, *work_tail; /* not fully cut into pieces yet */
	struct fg_io *done_head, *done_tail; /* completed asynchronous requests */
	uint64_t ndone, outstanding;         /* outstanding: submitted, not reaped */
	int broken;                          /* fatal engine error, or 0 */
};

/* ---- accessors for engines ------------------------------------------------ */

const struct fg_host *file_queue_host(const struct file_queue *q)
{
	return q->host;
}

int file_queue_fd(const struct file_queue *q)
{
	return q->fr.fd;
}

const char *file_queue_path(const struct file_queue *q)
{
	return q->fr.path;
}

bool file_queue_o_direct(const struct file_queue *q)
{
	return q->o_direct;
}

unsigned file_queue_queue_depth(const struct file_queue *q)
{
	return q->qd;
}

const struct iovec *file_queue_bounce_iov(const struct file_queue *q, unsigned *n)
{
	*n = q->nbounce;
	return q->bounce_iov;
}

/* ---- messages ---------------------------------------------------------------- */

static void fq_describe(const struct file_queue *q, const struct fg_io *io, char *buf, size_t n)
{
	int err = -io->result;

	snprintf(buf, n, "%s: %s: %s of %zu bytes at offset %" PRIu64 " (file offset %" PRIu64
		 ") failed at file offset %" PRIu64 ": %s%s", q->eng->name, q->fr.path,
		 io->op == FG_IO_READ ? "read" : "write", io->len, io->offset,
		 io->region->handle + io->offset, io->priv[FQ_ERROFF], strerror(err),
		 err == ENOSPC || err == EDQUOT ? "; free disk space or move this tier's dir" :
		 err == EINVAL && q->o_direct ? "; the file system may refuse O_DIRECT: choose "
		 "a disk-backed dir or set o_direct = false" : "");
}

/* ---- bounce buffers and block locks ------------------------------------ */

/* A bounce buffer for len bytes, or -1 if none is free. */
static int fq_bounce_get(struct file_queue *q, size_t len)
{
	if (len <= FQ_SMALL && q->nfree_small)
		return q->free_small[--q->nfree_small];
	if (q->nfree_big)
		return q->free_big[--q->nfree_big];
	return -1;
}

static void fq_bounce_put(struct file_queue *q, int i)
{
	if ((unsigned)i < q->nbig)
		q->free_big[q->nfree_big++] = i;
	else
		q->free_small[q->nfree_small++] = i;
}

static bool fq_rmw_busy(const struct file_queue *q, uint64_t blk)
{
	for (unsigned i = 0; i < q->nrmw; i++)
		if (q->rmw_blocks[i] == blk)
			return true;
	return false;
}

static void fq_rmw_unlock(struct file_queue *q, uint64_t blk)
{
	for (unsigned i = 0; i < q->nrmw; i++) {
		if (q->rmw_blocks[i] == blk) {
			q->rmw_blocks[i] = q->rmw_blocks[--q->nrmw];
			return;
		}
	}
}

/* ---- requests ------------------------------------------------------------ */

static void fq_retry(struct file_queue *q, struct file_piece *p)
{
	p->next = NULL;
	if (q->retry_tail)
		q->retry_tail->next = p;
	else
		q->retry_head = p;
	q->retry_tail = p;
}

/* A request with no piece left to cut or to complete is done. */
static void fq_maybe_finish(struct file_queue *q, struct fg_io *io)
{
	uint64_t st = io->priv[FQ_STATE];
	char line[PATH_MAX + 512];

	if ((st & FQ_PENDING) || (st & FQ_F_QUEUED))
		return;
	if (st & FQ_F_SYNC) {
		io->priv[FQ_STATE] |= FQ_F_DONE;
		return;
	}
	if (io->result) {
		/* Whoever reaps it may be another thread: the log always names the file. */
		fq_describe(q, io, line, sizeof(line));
		fg_log(q->host, FG_LOG_ERROR, "%s", line);
	}
	io->priv[FQ_LINK] = 0;
	if (q->done_tail)
		q->done_tail->priv[FQ_LINK] = (uintptr_t)io;
	else
		q->done_head = io;
	q->done_tail = io;
	q->ndone++;
}

/* The piece is finished (err 0 or -errno): give back what it holds. */
static void fq_piece_end(struct file_queue *q, struct file_piece *p, int err)
{
	struct fg_io *io = p->io;

	if (p->bounce >= 0)
		fq_bounce_put(q, p->bounce);
	if (p->kind == FILE_PIECE_RMW)
		fq_rmw_unlock(q, p->foff);
	if (err && !io->result) {
		io->result = err;
		io->priv[FQ_ERROFF] = p->foff + p->done;
	}
	io->priv[FQ_STATE]--;
	p->io = NULL;
	p->next = q->free_pieces;
	q->free_pieces = p;
	fq_maybe_finish(q, io);
}

void file_queue_complete(struct file_queue *q, struct file_piece *p, long res)
{
	size_t before = p->done;

	q->nflight--;
	q->ncompleted++;
	if (res == -EAGAIN || res == -EINTR) {
		if (++p->retries <= FQ_MAX_RETRIES) {
			fq_retry(q, p);
			return;
		}
	}
	if (res < 0) {
		fq_piece_end(q, p, res < -4095 ? -EIO : (int)res);
		return;
	}
	if (res == 0) {
		if (p->op == FG_IO_WRITE) {
			fq_piece_end(q, p, -EIO); /* no progress: never loop */
			return;
		}
		/* The end of the file: what lies past it reads as zeros. */
		memset(p->mem + p->done, 0, p->len - p->done);
		p->done = p->len;
	} else {
		p->done += (size_t)res < p->len - p->done ? (size_t)res : p->len - p->done;
		if (p->done < p->len && q->o_direct && !file_regions_aligned(p->done)) {
			if (p->op == FG_IO_READ) {
				/* O_DIRECT stops inside a block only at the end of the file. */
				memset(p->mem + p->done, 0, p->len - p->done);
				p->done = p->len;
			} else {
				/* The rest must start aligned: write that block again. */
				p->done &= ~(size_t)(FQ_BLOCK - 1);
			}
		}
		if (p->done < p->len) {
			if (p->done <= before && ++p->retries > FQ_MAX_RETRIES) {
				fq_piece_end(q, p, -EIO);
				return;
			}
			fq_retry(q, p);
			return;
		}
	}
	if (p->kind == FILE_PIECE_RMW && p->op == FG_IO_READ) {
		/* The block as it is on disk: merge our bytes and write it back. */
		memcpy(p->mem + p->skip, p->user, p->ulen);
		p->op = FG_IO_WRITE;
		p->done = 0;
		p->retries = 0;
		fq_retry(q, p);
		return;
	}
	if (p->kind == FILE_PIECE_BOUNCE && p->op == FG_IO_READ)
		memcpy(p->user, p->mem + p->skip, p->ulen);
	fq_piece_end(q, p, 0);
}

static uint64_t fq_round_up(uint64_t v)
{
	return (v + FQ_BLOCK - 1) & ~(uint64_t)(FQ_BLOCK - 1);
}

/* Plan the next piece of io (at its cursor) into p; *n: the request's bytes it
 * covers.  false when a bounce buffer or block lock it needs is taken. */
static bool fq_plan(struct file_queue *q, struct fg_io *io, struct file_piece *p, size_t *n)
{
	size_t cur = (size_t)io->priv[FQ_CURSOR], rem = io->len - cur;
	uint64_t pos = io->region->handle + io->offset + cur;
	uint64_t end = io->region->handle + io->offset + io->len;
	uint64_t blk = pos & ~(uint64_t)(FQ_BLOCK - 1);
	char *ubuf = (char *)io->buf + cur;
	bool ubuf_aligned = file_regions_aligned((uintptr_t)ubuf);
	int b;

	p->io = io;
	p->op = (int)io->op;
	p->done = 0;
	p->retries = 0;
	p->bounce = -1;
	p->user = ubuf;
	p->skip = 0;
	if (!q->o_direct) {
		*n = rem < q->rs ? rem : q->rs;
		p->kind = FILE_PIECE_DIRECT;
		p->foff = pos;
		p->len = *n;
		p->mem = ubuf;
		p->ulen = *n;
		return true;
	}
	if (io->op == FG_IO_READ &&
	    (!file_regions_aligned(pos) || rem < FQ_BLOCK || !ubuf_aligned)) {
		/* Whole blocks into a bounce buffer; copy out our part. */
		uint64_t cend = fq_round_up(end);

		if (cend - blk > q->bsz)
			cend = blk + q->bsz;
		if ((b = fq_bounce_get(q, (size_t)(cend - blk))) < 0)
			return false;
		*n = (size_t)((end < cend ? end : cend) - pos);
		p->kind = FILE_PIECE_BOUNCE;
		p->bounce = b;
		p->foff = blk;
		p->len = (size_t)(cend - blk);
		p->mem = q->bounce_iov[b].iov_base;
		p->skip = (size_t)(pos - blk);
		p->ulen = *n;
		return true;
	}
	if (io->op == FG_IO_WRITE && (!file_regions_aligned(pos) || rem < FQ_BLOCK)) {
		/* Part of one block: read it, merge, write it back, alone on that block. */
		uint64_t bend = blk + FQ_BLOCK < end ? blk + FQ_BLOCK : end;

		if (fq_rmw_busy(q, blk) || (b = fq_bounce_get(q, FQ_BLOCK)) < 0)
			return false;
		q->rmw_blocks[q->nrmw++] = blk;
		*n = (size_t)(bend - pos);
		p->kind = FILE_PIECE_RMW;
		p->op = FG_IO_READ;
		p->bounce = b;
		p->foff = blk;
		p->len = FQ_BLOCK;
		p->mem = q->bounce_iov[b].iov_base;
		p->skip = (size_t)(pos - blk);
		p->ulen = *n;
		return true;
	}
	/* Whole blocks from an aligned file offset. */
	*n = rem & ~(size_t)(FQ_BLOCK - 1);
	if (ubuf_aligned) {
		if (*n > q->rs)
			*n = q->rs;
		p->kind = FILE_PIECE_DIRECT;
		p->mem = ubuf;
	} else {
		if (*n > q->bsz)
			*n = q->bsz;
		if ((b = fq_bounce_get(q, *n)) < 0)
			return false;
		p->kind = FILE_PIECE_BOUNCE;
		p->bounce = b;
		p->mem = q->bounce_iov[b].iov_base;
		memcpy(p->mem, ubuf, *n);
	}
	p->foff = pos;
	p->len = *n;
	p->ulen = *n;
	return true;
}

/* Give the piece's next transfer to the engine. */
static void fq_stage(struct file_queue *q, struct file_piece *p)
{
	p->xfer = p->len - p->done;
	q->eng->prep(q, q->eng_priv, p);
	q->nflight++;
	q->nprepped++;
}

/* Hand the engine what can go now: pieces to resume, then new ones, in order. */
static void fq_dispatch(struct file_queue *q)
{
	struct file_piece *p;
	struct fg_io *io;
	size_t n;

	do {
		if (q->broken)
			return;
		while ((p = q->retry_head)) {
			q->retry_head = p->next;
			if (!q->retry_head)
				q->retry_tail = NULL;
			fq_stage(q, p);
		}
		while ((io = q->work_head)) {
			if (io->result || io->priv[FQ_CURSOR] >= io->len) {
				/* Fully cut (or failed: cut no more). */
				q->work_head = (struct fg_io *)(uintptr_t)io->priv[FQ_LINK];
				if (!q->work_head)
					q->work_tail = NULL;
				io->priv[FQ_STATE] &= ~FQ_F_QUEUED;
				fq_maybe_finish(q, io);
				continue;
			}
			p = q->free_pieces;
			if (!p || !fq_plan(q, io, p, &n))
				break;
			q->free_pieces = p->next;
			io->priv[FQ_CURSOR] += n;
			io->priv[FQ_STATE]++;
			fq_stage(q, p);
		}
		/* A piece completed within prep may have queued a retry just now. */
	} while (q->retry_head);
}

/* The engine failed for good: fail every request (nothing is dispatched any more). */
static void fq_break(struct file_queue *q, int err, const char *why)
{
	struct fg_io *io;

	fg_log(q->host, FG_LOG_ERROR, "%s: %s: %s: %s; every pending request fails, reopen the "
	       "tier", q->eng->name, q->fr.path, why, strerror(-err));
	q->broken = err;
	pthread_cond_broadcast(&q->progress);
	q->retry_head = q->retry_tail = NULL;
	q->nflight = 0;
	for (unsigned i = 0; i < q->qd; i++)
		if (q->pieces[i].io)
			fq_piece_end(q, &q->pieces[i], err);
	while ((io = q->work_head)) {
		q->work_head = (struct fg_io *)(uintptr_t)io->priv[FQ_LINK];
		if (!io->result) {
			io->result = err;
			io->priv[FQ_ERROFF] = io->region->handle + io->offset;
		}
		io->priv[FQ_STATE] &= ~FQ_F_QUEUED;
		fq_maybe_finish(q, io);
	}
	q->work_tail = NULL;
}

/* Move every request forward; block: wait for at least one piece to finish.
 * Pieces started after a wait are handed to the kernel before returning.
 * 0, or the fatal error that broke the tier. */
static int fq_progress(struct file_queue *q, bool block)
{
	unsigned min = block ? 1 : 0;
	int n;

	fq_dispatch(q);
	if (q->broken || !q->nflight)
		return q->broken;
	do {
		q->nprepped = 0;
		n = q->eng->wait(q, q->eng_priv, min);
		if (n < 0) {
			fq_break(q, n, "waiting for completions failed");
			break;
		}
		min = 0;
		fq_dispatch(q);
	} while (!q->broken && q->nflight && q->nprepped);
	return q->broken;
}

void file_queue_done(struct file_queue *q, struct file_piece *p, long res)
{
	pthread_mutex_lock(&q->lock);
	if (q->broken) {
		/* The queue failed every piece already; this one is history. */
		pthread_mutex_unlock(&q->lock);
		return;
	}
	file_queue_complete(q, p, res);
	fq_dispatch(q);
	pthread_cond_broadcast(&q->progress);
	pthread_mutex_unlock(&q->lock);
}

int file_queue_sleep(struct file_queue *q, unsigned min)
{
	uint64_t start = q->ncompleted;

	/* Others may move the queue while we sleep; nothing left with the
	 * engine means nothing more can complete. */
	while (q->ncompleted - start < min && q->nflight)
		pthread_cond_wait(&q->progress, &q->lock);
	return (int)(q->ncompleted - start);
}

/* Call after a blocking fq_progress when the caller still waits for a
 * request: with nothing in flight now, nothing could ever finish it. */
static void fq_check_stall(struct file_queue *q)
{
	if (!q->broken && !q->nflight)
		fq_break(q, -EIO, "internal error: a request waits with nothing in flight");
}

static void fq_enqueue(struct file_queue *q, struct fg_io *io, uint64_t flags)
{
	io->result = 0;
	io->priv[FQ_LINK] = 0;
	io->priv[FQ_CURSOR] = 0;
	io->priv[FQ_STATE] = flags | FQ_F_QUEUED;
	io->priv[FQ_ERROFF] = 0;
	if (q->work_tail)
		q->work_tail->priv[FQ_LINK] = (uintptr_t)io;
	else
		q->work_head = io;
	q->work_tail = io;
}

static int fq_check(struct file_queue *q, int op, const struct fg_region *r, uint64_t off,
		    size_t len, const void *buf)
{
	char why[PATH_MAX + 256];
	uint64_t foff;
	int err = file_regions_check(&q->fr, op, r, off, len, buf, &foff, why, sizeof(why));

	if (err)
		fg_error(q->host, "%s", why);
	return err;
}

static int fq_broken_error(struct file_queue *q)
{
	fg_error(q->host, "%s: %s: the tier failed earlier (%s); close and reopen it",
		 q->eng->name, q->fr.path, strerror(-q->broken));
	return q->broken;
}

/* A synchronous transfer: one request through the queue, waited for. */
static int fq_run(struct file_queue *q, int op, const struct fg_region *r, uint64_t off,
		  void *buf, size_t len)
{
	struct fg_io io = { .op = (enum fg_io_op)op, .region = r, .offset = off, .buf = buf,
			    .len = len };
	char line[PATH_MAX + 512];
	int err;

	if ((err = fq_check(q, op, r, off, len, buf)))
		return err;
	pthread_mutex_lock(&q->lock);
	if (q->broken) {
		err = fq_broken_error(q);
		pthread_mutex_unlock(&q->lock);
		return err;
	}
	fq_enqueue(q, &io, FQ_F_SYNC);
	/* A broken tier completes every request, ours included. */
	while (!(io.priv[FQ_STATE] & FQ_F_DONE) && !q->broken) {
		fq_progress(q, true);
		if (!(io.priv[FQ_STATE] & FQ_F_DONE))
			fq_check_stall(q);
	}
	pthread_mutex_unlock(&q->lock);
	if (!(io.priv[FQ_STATE] & FQ_F_DONE) && !io.result)
		io.result = -EIO; /* lost by an internal error (logged) */
	if (io.result) {
		fq_describe(q, &io, line, sizeof(line));
		fg_error(q->host, "%s", line);
	}
	return io.result;
}

static int file_queue_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	return fq_run(ctx, FG_IO_READ, r, off, dst, len);
}

static int file_queue_write(void *ctx, const struct fg_region *r, uint64_t off,
			   const void *src, size_t len)
{
	return fq_run(ctx, FG_IO_WRITE, r, off, (void *)src, len);
}

static int file_queue_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct file_queue *q = ctx;
	int err;

	if (!n)
		return 0;
	if (!ios) {
		fg_error(q->host, "%s: %s: submit of %u requests without an array", q->eng->name,
			 q->fr.path, n);
		return -EINVAL;
	}
	/* All or nothing: check every request before queueing any. */
	for (unsigned i = 0; i < n; i++) {
		if (!ios[i]) {
			fg_error(q->host, "%s: %s: submit: request %u of %u is NULL",
				 q->eng->name, q->fr.path, i, n);
			return -EINVAL;
		}
		err = fq_check(q, (int)ios[i]->op, ios[i]->region, ios[i]->offset, ios[i]->len,
			       ios[i]->buf);
		if (err)
			return err;
	}
	pthread_mutex_lock(&q->lock);
	if (q->broken) {
		err = fq_broken_error(q);
		pthread_mutex_unlock(&q->lock);
		return err;
	}
	for (unsigned i = 0; i < n; i++)
		fq_enqueue(q, ios[i], 0);
	q->outstanding += n;
	fq_progress(q, false);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

static int file_queue_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct file_queue *q = ctx;
	struct fg_io *failed = NULL;
	char line[PATH_MAX + 512];
	unsigned k = 0;

	if (!max)
		return 0;
	if (!done) {
		fg_error(q->host, "%s: %s: reap without an array", q->eng->name, q->fr.path);
		return -EINVAL;
	}
	if (min > max)
		min = max;
	pthread_mutex_lock(&q->lock);
	fq_progress(q, false);
	/* Wait only for requests that exist: never for more than are outstanding.
	 * A broken tier has completed them all, so this ends. */
	while (q->ndone < min && q->ndone < q->outstanding && !q->broken) {
		fq_progress(q, true);
		if (q->ndone < min && q->ndone < q->outstanding)
			fq_check_stall(q);
	}
	while (k < max && q->done_head) {
		struct fg_io *io = q->done_head;

		q->done_head = (struct fg_io *)(uintptr_t)io->priv[FQ_LINK];
		if (!q->done_head)
			q->done_tail = NULL;
		if (io->result)
			failed = io;
		done[k++] = io;
	}
	q->ndone -= k;
	q->outstanding -= k;
	if (failed)
		fq_describe(q, failed, line, sizeof(line));
	pthread_mutex_unlock(&q->lock);
	if (failed)
		fg_error(q->host, "%s", line);
	return (int)k;
}

/* ---- regions -------------------------------------------------------------- */

static int file_queue_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct file_queue *q = ctx;

	return file_regions_alloc(&q->fr, size, r);
}

static void file_queue_free(void *ctx, struct fg_region *r)
{
	struct file_queue *q = ctx;

	file_regions_free(&q->fr, r);
}

/* ---- open / close ------------------------------------------------------------ */

static void fq_destroy(struct file_queue *q)
{
	if (q->eng_priv)
		q->eng->teardown(q, q->eng_priv);
	if (q->fr_open)
		file_regions_close(&q->fr);
	free(q->bounce_mem);
	free(q->bounce_iov);
	free(q->free_big);
	free(q->free_small);
	free(q->rmw_blocks);
	free(q->pieces);
	pthread_cond_destroy(&q->progress);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

static void file_queue_close(void *ctx)
{
	struct file_queue *q = ctx;

	/* Requests still queued or in flight complete first (nobody reaps them):
	 * the kernel must be done with every buffer before it goes away. */
	pthread_mutex_lock(&q->lock);
	while (!q->broken && (q->work_head || q->nflight || q->retry_head)) {
		fq_progress(q, true);
		if (q->work_head || q->retry_head)
			fq_check_stall(q);
	}
	pthread_mutex_unlock(&q->lock);
	fq_destroy(q);
}

static int fq_setup_queue(struct file_queue *q)
{
	unsigned nsmall = 0;
	size_t bytes;

	q->pieces = calloc(q->qd, sizeof(*q->pieces));
	q->rmw_blocks = calloc(q->qd, sizeof(*q->rmw_blocks));
	if (!q->pieces || !q->rmw_blocks)
		return -ENOMEM;
	for (unsigned i = q->qd; i-- > 0;) {
		q->pieces[i].slot = i;
		q->pieces[i].next = q->free_pieces;
		q->free_pieces = &q->pieces[i];
	}
	if (!q->o_direct)
		return 0; /* no alignment to keep: nothing is bounced */
	q->bsz = q->rs < FQ_BOUNCE_MAX ? q->rs : FQ_BOUNCE_MAX;
	q->nbig = q->qd < FQ_MAX_BIG ? q->qd : FQ_MAX_BIG;
	nsmall = q->qd < FQ_MAX_SMALL ? q->qd : FQ_MAX_SMALL;
	q->nbounce = q->nbig + nsmall;
	bytes = q->nbig * q->bsz + (size_t)nsmall * FQ_SMALL;
	q->bounce_iov = calloc(q->nbounce, sizeof(*q->bounce_iov));
	q->free_big = calloc(q->nbig, sizeof(int));
	q->free_small = calloc(nsmall, sizeof(int));
	if (!q->bounce_iov || !q->free_big || !q->free_small ||
	    posix_memalign((void **)&q->bounce_mem, FQ_BLOCK, bytes))
		return -ENOMEM;
	for (unsigned i = 0; i < q->nbounce; i++) {
		size_t at = i < q->nbig ? i * q->bsz
					 : q->nbig * q->bsz + (size_t)(i - q->nbig) * FQ_SMALL;

		q->bounce_iov[i].iov_base = q->bounce_mem + at;
		q->bounce_iov[i].iov_len = i < q->nbig ? q->bsz : FQ_SMALL;
		if (i < q->nbig)
			q->free_big[q->nfree_big++] = (int)i;
		else
			q->free_small[q->nfree_small++] = (int)i;
	}
	return 0;
}

static int file_queue_open(const struct fg_host *host, const void *opts, void **ctx,
			  struct fg_storage_info *info)
{
	const struct file_engine *eng = &file_queue_engine;
	const void *plugin_opts = opts ? opts : eng->defaults;
	struct file_queue_opts o;
	struct file_queue *q;
	int err;

	/* The strings may come unterminated. */
	if (eng->queue_opts)
		eng->queue_opts(plugin_opts, &o);
	else
		memcpy(&o, plugin_opts, sizeof(o));
	o.dir[sizeof(o.dir) - 1] = '\0';
	o.file[sizeof(o.file) - 1] = '\0';

	if (o.queue_depth < 1 || o.queue_depth > 4096) {
		fg_error(host, "%s: queue_depth = %" PRId64 " is out of range; use 1..4096",
			 eng->name, o.queue_depth);
		return -EINVAL;
	}
	if (o.request_size < FQ_BLOCK || o.request_size > FQ_MAX_REQUEST ||
	    !file_regions_aligned(o.request_size)) {
		fg_error(host, "%s: request_size = %" PRIu64 " is not a multiple of %u between "
			 "4K and 1G; use e.g. request_size = 1M", eng->name, o.request_size,
			 FQ_BLOCK);
		return -EINVAL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		fg_error(host, "%s: out of memory opening the tier", eng->name);
		return -ENOMEM;
	}
	q->host = host;
	q->eng = eng;
	q->o_direct = o.o_direct;
	q->qd = (unsigned)o.queue_depth;
	q->rs = (size_t)o.request_size;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->progress, NULL);

	err = file_regions_open(&q->fr, host, eng->name, o.dir, o.file, q->o_direct,
				o.size);
	if (err)
		goto fail;
	q->fr_open = true;
	if ((err = fq_setup_queue(q))) {
		fg_error(host, "%s: out of memory for a queue of %u requests of %zu bytes; lower "
			 "queue_depth or request_size", eng->name, q->qd, q->rs);
		goto fail;
	}
	if ((err = eng->setup(q, plugin_opts, &q->eng_priv)))
		goto fail;

	info->capacity = file_regions_capacity(&q->fr);
	info->flags = 0;
	info->alignment = q->o_direct ? FQ_BLOCK : 1;
	fg_log(host, FG_LOG_DEBUG, "%s: %s: capacity %" PRIu64 " bytes, queue depth %u, "
	       "requests of %zu bytes%s", eng->name, q->fr.path, info->capacity, q->qd, q->rs,
	       q->o_direct ? ", O_DIRECT" : "");
	*ctx = q;
	return 0;
fail:
	q->eng_priv = NULL;
	fq_destroy(q);
	return err;
}

const struct fg_storage_ops file_queue_ops = {
	.open	= file_queue_open,
	.close	= file_queue_close,
	.alloc	= file_queue_alloc,
	.free	= file_queue_free,
	.read	= file_queue_read,
	.write	= file_queue_write,
	.submit	= file_queue_submit,
	.reap	= file_queue_reap,
};
