/* plugins/storage/nvme_tier.c - requests cut into pieces, bounce buffers,
 * read-modify-write of partial blocks, completion bookkeeping and fault
 * injection for the queue-driven file tiers (see nvme_tier.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "plugins/storage/fault_rules.h"
#include "plugins/storage/file_regions.h"
#include "plugins/storage/nvme_tier.h"

#define NT_BLOCK FILE_REGIONS_BLOCK
#define NT_SMALL (2 * NT_BLOCK)          /* bounce buffers for partial blocks */
#define NT_BOUNCE_MAX ((size_t)1 << 20)  /* largest bounce buffer */
#define NT_MAX_BIG 4u
#define NT_MAX_SMALL 256u
#define NT_MAX_REQUEST ((uint64_t)1 << 30)
#define NT_MAX_RETRIES 1000u

/* fg_io.priv while a request is ours */
#define NT_LINK 0     /* next request in the work list or the done list */
#define NT_CURSOR 1   /* bytes already cut into pieces */
#define NT_STATE 2    /* pieces not yet completed (low 32 bits) | NT_F_* */
#define NT_ERROFF 3   /* file offset where its first error happened */

#define NT_PENDING ((uint64_t)0xffffffffu)
#define NT_F_SYNC ((uint64_t)1 << 32)     /* a synchronous call waits for it */
#define NT_F_DONE ((uint64_t)1 << 33)     /* (sync) completed */
#define NT_F_QUEUED ((uint64_t)1 << 34)   /* in the work list: not fully cut yet */
#define NT_F_INJECTED ((uint64_t)1 << 35) /* its error came from fault injection */

struct nvme_tier {
	const struct fg_host *host;
	const struct nvme_engine *eng;
	void *eng_priv;
	struct file_regions fr;
	bool fr_open;
	bool o_direct;
	unsigned qd;
	size_t rs;        /* request_size */
	size_t bsz;       /* bytes of a large bounce buffer */

	pthread_mutex_t lock;
	struct nvme_piece *pieces;  /* qd of them */
	struct nvme_piece *free_pieces, *retry_head, *retry_tail;
	unsigned nflight;           /* pieces the engine holds */
	unsigned nprepped;          /* pieces given to the engine since its last wait */

	char *bounce_mem;
	struct iovec *bounce_iov;   /* [0, nbig): bsz bytes; [nbig, nbounce): NT_SMALL */
	unsigned nbounce, nbig;
	int *free_big, *free_small;
	unsigned nfree_big, nfree_small;

	uint64_t *rmw_blocks;       /* file blocks under read-modify-write */
	unsigned nrmw;

	struct fg_io *work_head, *work_tail; /* not fully cut into pieces yet */
	struct fg_io *done_head, *done_tail; /* completed asynchronous requests */
	uint64_t ndone, outstanding;         /* outstanding: submitted, not reaped */
	int broken;                          /* fatal engine error, or 0 */

	struct fault_rules faults;
	uint64_t count[2];                   /* pieces started, per op */
};

/* ---- accessors for engines ------------------------------------------------ */

const struct fg_host *nvme_tier_host(const struct nvme_tier *nt)
{
	return nt->host;
}

int nvme_tier_fd(const struct nvme_tier *nt)
{
	return nt->fr.fd;
}

const char *nvme_tier_path(const struct nvme_tier *nt)
{
	return nt->fr.path;
}

unsigned nvme_tier_queue_depth(const struct nvme_tier *nt)
{
	return nt->qd;
}

const struct iovec *nvme_tier_bounce_iov(const struct nvme_tier *nt, unsigned *n)
{
	*n = nt->nbounce;
	return nt->bounce_iov;
}

/* ---- fault injection ---------------------------------------------------- */

static int nt_parse_faults(struct nvme_tier *nt, const char *val)
{
	if (!fault_rules_parse(&nt->faults, val, true))
		return 0;
	fg_error(nt->host, "%s: %s=\"%s\": expected up to %d comma-separated rules "
		 "read|write:ERRNO:N (ERRNO a name such as EIO or ENOSPC, a number, or SHORT "
		 "for a short transfer; N >= 1), e.g. read:EIO:3", nt->eng->name,
		 nt->eng->fault_env, val, FAULT_RULES_MAX);
	return -EINVAL;
}

/* Count a new piece of this op; the errno to inject, FAULT_SHORT, or 0. */
static int nt_fault_check(struct nvme_tier *nt, int op)
{
	if (!nt->faults.n)
		return 0;
	return fault_rules_match(&nt->faults, op, ++nt->count[op]);
}

/* ---- messages ---------------------------------------------------------------- */

static void nt_describe(const struct nvme_tier *nt, const struct fg_io *io, char *buf, size_t n)
{
	int err = -io->result;

	snprintf(buf, n, "%s: %s: %s of %zu bytes at offset %" PRIu64 " (file offset %" PRIu64
		 ") failed at file offset %" PRIu64 ": %s%s%s%s", nt->eng->name, nt->fr.path,
		 io->op == FG_IO_READ ? "read" : "write", io->len, io->offset,
		 io->region->handle + io->offset, io->priv[NT_ERROFF], strerror(err),
		 io->priv[NT_STATE] & NT_F_INJECTED ? " (injected by " : "",
		 io->priv[NT_STATE] & NT_F_INJECTED ? nt->eng->fault_env : "",
		 io->priv[NT_STATE] & NT_F_INJECTED ? ")" :
		 err == ENOSPC || err == EDQUOT ? "; free disk space or move this tier's dir" :
		 err == EINVAL && nt->o_direct ? "; the file system may refuse O_DIRECT: choose "
		 "a disk-backed dir or set o_direct = false" : "");
}

/* ---- bounce buffers and block locks ------------------------------------ */

/* A bounce buffer for len bytes, or -1 if none is free. */
static int nt_bounce_get(struct nvme_tier *nt, size_t len)
{
	if (len <= NT_SMALL && nt->nfree_small)
		return nt->free_small[--nt->nfree_small];
	if (nt->nfree_big)
		return nt->free_big[--nt->nfree_big];
	return -1;
}

static void nt_bounce_put(struct nvme_tier *nt, int i)
{
	if ((unsigned)i < nt->nbig)
		nt->free_big[nt->nfree_big++] = i;
	else
		nt->free_small[nt->nfree_small++] = i;
}

static bool nt_rmw_busy(const struct nvme_tier *nt, uint64_t blk)
{
	for (unsigned i = 0; i < nt->nrmw; i++)
		if (nt->rmw_blocks[i] == blk)
			return true;
	return false;
}

static void nt_rmw_unlock(struct nvme_tier *nt, uint64_t blk)
{
	for (unsigned i = 0; i < nt->nrmw; i++) {
		if (nt->rmw_blocks[i] == blk) {
			nt->rmw_blocks[i] = nt->rmw_blocks[--nt->nrmw];
			return;
		}
	}
}

/* ---- requests ------------------------------------------------------------ */

static void nt_retry(struct nvme_tier *nt, struct nvme_piece *p)
{
	p->next = NULL;
	if (nt->retry_tail)
		nt->retry_tail->next = p;
	else
		nt->retry_head = p;
	nt->retry_tail = p;
}

/* A request with no piece left to cut or to complete is done. */
static void nt_maybe_finish(struct nvme_tier *nt, struct fg_io *io)
{
	uint64_t st = io->priv[NT_STATE];
	char line[PATH_MAX + 512];

	if ((st & NT_PENDING) || (st & NT_F_QUEUED))
		return;
	if (st & NT_F_SYNC) {
		io->priv[NT_STATE] |= NT_F_DONE;
		return;
	}
	if (io->result) {
		/* Whoever reaps it may be another thread: the log always names the file. */
		nt_describe(nt, io, line, sizeof(line));
		fg_log(nt->host, FG_LOG_ERROR, "%s", line);
	}
	io->priv[NT_LINK] = 0;
	if (nt->done_tail)
		nt->done_tail->priv[NT_LINK] = (uintptr_t)io;
	else
		nt->done_head = io;
	nt->done_tail = io;
	nt->ndone++;
}

/* The piece is finished (err 0 or -errno): give back what it holds. */
static void nt_piece_end(struct nvme_tier *nt, struct nvme_piece *p, int err)
{
	struct fg_io *io = p->io;

	if (p->bounce >= 0)
		nt_bounce_put(nt, p->bounce);
	if (p->kind == NVME_PIECE_RMW)
		nt_rmw_unlock(nt, p->foff);
	if (err && !io->result) {
		io->result = err;
		io->priv[NT_ERROFF] = p->foff + p->done;
		if (p->injected)
			io->priv[NT_STATE] |= NT_F_INJECTED;
	}
	io->priv[NT_STATE]--;
	p->io = NULL;
	p->next = nt->free_pieces;
	nt->free_pieces = p;
	nt_maybe_finish(nt, io);
}

void nvme_tier_complete(struct nvme_tier *nt, struct nvme_piece *p, long res)
{
	size_t before = p->done;

	nt->nflight--;
	if (res == -EAGAIN || res == -EINTR) {
		if (++p->retries <= NT_MAX_RETRIES) {
			p->injected = false; /* what comes next is real */
			nt_retry(nt, p);
			return;
		}
	}
	if (res < 0) {
		nt_piece_end(nt, p, res < -4095 ? -EIO : (int)res);
		return;
	}
	if (res == 0) {
		if (p->op == FG_IO_WRITE) {
			nt_piece_end(nt, p, -EIO); /* no progress: never loop */
			return;
		}
		/* The end of the file: what lies past it reads as zeros. */
		memset(p->mem + p->done, 0, p->len - p->done);
		p->done = p->len;
	} else {
		p->done += (size_t)res < p->len - p->done ? (size_t)res : p->len - p->done;
		if (p->done < p->len && nt->o_direct && !file_regions_aligned(p->done)) {
			if (p->op == FG_IO_READ) {
				/* O_DIRECT stops inside a block only at the end of the file. */
				memset(p->mem + p->done, 0, p->len - p->done);
				p->done = p->len;
			} else {
				/* The rest must start aligned: write that block again. */
				p->done &= ~(size_t)(NT_BLOCK - 1);
			}
		}
		if (p->done < p->len) {
			if (p->done <= before && ++p->retries > NT_MAX_RETRIES) {
				nt_piece_end(nt, p, -EIO);
				return;
			}
			nt_retry(nt, p);
			return;
		}
	}
	if (p->kind == NVME_PIECE_RMW && p->op == FG_IO_READ) {
		/* The block as it is on disk: merge our bytes and write it back. */
		memcpy(p->mem + p->skip, p->user, p->ulen);
		p->op = FG_IO_WRITE;
		p->done = 0;
		p->retries = 0;
		nt_retry(nt, p);
		return;
	}
	if (p->kind == NVME_PIECE_BOUNCE && p->op == FG_IO_READ)
		memcpy(p->user, p->mem + p->skip, p->ulen);
	nt_piece_end(nt, p, 0);
}

static uint64_t nt_round_up(uint64_t v)
{
	return (v + NT_BLOCK - 1) & ~(uint64_t)(NT_BLOCK - 1);
}

/* Plan the next piece of io (at its cursor) into p; *n: the request's bytes it
 * covers.  false when a bounce buffer or block lock it needs is taken. */
static bool nt_plan(struct nvme_tier *nt, struct fg_io *io, struct nvme_piece *p, size_t *n)
{
	size_t cur = (size_t)io->priv[NT_CURSOR], rem = io->len - cur;
	uint64_t pos = io->region->handle + io->offset + cur;
	uint64_t end = io->region->handle + io->offset + io->len;
	uint64_t blk = pos & ~(uint64_t)(NT_BLOCK - 1);
	char *ubuf = (char *)io->buf + cur;
	bool ubuf_aligned = file_regions_aligned((uintptr_t)ubuf);
	int b;

	p->io = io;
	p->op = (int)io->op;
	p->done = 0;
	p->retries = 0;
	p->injected = false;
	p->short_fault = false;
	p->bounce = -1;
	p->user = ubuf;
	p->skip = 0;
	if (!nt->o_direct) {
		*n = rem < nt->rs ? rem : nt->rs;
		p->kind = NVME_PIECE_DIRECT;
		p->foff = pos;
		p->len = *n;
		p->mem = ubuf;
		p->ulen = *n;
		return true;
	}
	if (io->op == FG_IO_READ &&
	    (!file_regions_aligned(pos) || rem < NT_BLOCK || !ubuf_aligned)) {
		/* Whole blocks into a bounce buffer; copy out our part. */
		uint64_t cend = nt_round_up(end);

		if (cend - blk > nt->bsz)
			cend = blk + nt->bsz;
		if ((b = nt_bounce_get(nt, (size_t)(cend - blk))) < 0)
			return false;
		*n = (size_t)((end < cend ? end : cend) - pos);
		p->kind = NVME_PIECE_BOUNCE;
		p->bounce = b;
		p->foff = blk;
		p->len = (size_t)(cend - blk);
		p->mem = nt->bounce_iov[b].iov_base;
		p->skip = (size_t)(pos - blk);
		p->ulen = *n;
		return true;
	}
	if (io->op == FG_IO_WRITE && (!file_regions_aligned(pos) || rem < NT_BLOCK)) {
		/* Part of one block: read it, merge, write it back, alone on that block. */
		uint64_t bend = blk + NT_BLOCK < end ? blk + NT_BLOCK : end;

		if (nt_rmw_busy(nt, blk) || (b = nt_bounce_get(nt, NT_BLOCK)) < 0)
			return false;
		nt->rmw_blocks[nt->nrmw++] = blk;
		*n = (size_t)(bend - pos);
		p->kind = NVME_PIECE_RMW;
		p->op = FG_IO_READ;
		p->bounce = b;
		p->foff = blk;
		p->len = NT_BLOCK;
		p->mem = nt->bounce_iov[b].iov_base;
		p->skip = (size_t)(pos - blk);
		p->ulen = *n;
		return true;
	}
	/* Whole blocks from an aligned file offset. */
	*n = rem & ~(size_t)(NT_BLOCK - 1);
	if (ubuf_aligned) {
		if (*n > nt->rs)
			*n = nt->rs;
		p->kind = NVME_PIECE_DIRECT;
		p->mem = ubuf;
	} else {
		if (*n > nt->bsz)
			*n = nt->bsz;
		if ((b = nt_bounce_get(nt, *n)) < 0)
			return false;
		p->kind = NVME_PIECE_BOUNCE;
		p->bounce = b;
		p->mem = nt->bounce_iov[b].iov_base;
		memcpy(p->mem, ubuf, *n);
	}
	p->foff = pos;
	p->len = *n;
	p->ulen = *n;
	return true;
}

/* Give the piece's next transfer to the engine. */
static void nt_stage(struct nvme_tier *nt, struct nvme_piece *p)
{
	p->xfer = p->len - p->done;
	if (p->short_fault) {
		/* Injected: the kernel really moves only half (whole blocks with
		 * O_DIRECT); the rest must be resubmitted. */
		size_t half = p->xfer / 2;

		if (nt->o_direct)
			half &= ~(size_t)(NT_BLOCK - 1);
		if (half) {
			p->xfer = half;
			p->short_fault = false;
		}
	}
	nt->eng->prep(nt, nt->eng_priv, p);
	nt->nflight++;
	nt->nprepped++;
}

/* Hand the engine what can go now: pieces to resume, then new ones, in order. */
static void nt_dispatch(struct nvme_tier *nt)
{
	struct nvme_piece *p;
	struct fg_io *io;
	size_t n;
	int fault;

	do {
		if (nt->broken)
			return;
		while ((p = nt->retry_head)) {
			nt->retry_head = p->next;
			if (!nt->retry_head)
				nt->retry_tail = NULL;
			nt_stage(nt, p);
		}
		while ((io = nt->work_head)) {
			if (io->result || io->priv[NT_CURSOR] >= io->len) {
				/* Fully cut (or failed: cut no more). */
				nt->work_head = (struct fg_io *)(uintptr_t)io->priv[NT_LINK];
				if (!nt->work_head)
					nt->work_tail = NULL;
				io->priv[NT_STATE] &= ~NT_F_QUEUED;
				nt_maybe_finish(nt, io);
				continue;
			}
			p = nt->free_pieces;
			if (!p || !nt_plan(nt, io, p, &n))
				break;
			nt->free_pieces = p->next;
			io->priv[NT_CURSOR] += n;
			io->priv[NT_STATE]++;
			fault = nt_fault_check(nt, (int)io->op);
			if (fault > 0) {
				/* It never reaches the file; it completes as if the
				 * kernel had failed it (EAGAIN/EINTR are retried). */
				p->injected = true;
				nt->nflight++;
				nvme_tier_complete(nt, p, -fault);
				continue;
			}
			p->short_fault = fault == FAULT_SHORT;
			nt_stage(nt, p);
		}
		/* An injected EAGAIN may have queued a retry just now. */
	} while (nt->retry_head);
}

/* The engine failed for good: fail every request (nothing is dispatched any more). */
static void nt_break(struct nvme_tier *nt, int err, const char *why)
{
	struct fg_io *io;

	fg_log(nt->host, FG_LOG_ERROR, "%s: %s: %s: %s; every pending request fails, reopen the "
	       "tier", nt->eng->name, nt->fr.path, why, strerror(-err));
	nt->broken = err;
	nt->retry_head = nt->retry_tail = NULL;
	nt->nflight = 0;
	for (unsigned i = 0; i < nt->qd; i++)
		if (nt->pieces[i].io)
			nt_piece_end(nt, &nt->pieces[i], err);
	while ((io = nt->work_head)) {
		nt->work_head = (struct fg_io *)(uintptr_t)io->priv[NT_LINK];
		if (!io->result) {
			io->result = err;
			io->priv[NT_ERROFF] = io->region->handle + io->offset;
		}
		io->priv[NT_STATE] &= ~NT_F_QUEUED;
		nt_maybe_finish(nt, io);
	}
	nt->work_tail = NULL;
}

/* Move every request forward; block: wait for at least one piece to finish.
 * Pieces started after a wait are handed to the kernel before returning.
 * 0, or the fatal error that broke the tier. */
static int nt_progress(struct nvme_tier *nt, bool block)
{
	unsigned min = block ? 1 : 0;
	int n;

	nt_dispatch(nt);
	if (nt->broken || !nt->nflight)
		return nt->broken;
	do {
		nt->nprepped = 0;
		n = nt->eng->wait(nt, nt->eng_priv, min);
		if (n < 0) {
			nt_break(nt, n, "waiting for completions failed");
			break;
		}
		min = 0;
		nt_dispatch(nt);
	} while (!nt->broken && nt->nflight && nt->nprepped);
	return nt->broken;
}

/* Call after a blocking nt_progress when the caller still waits for a
 * request: with nothing in flight now, nothing could ever finish it. */
static void nt_check_stall(struct nvme_tier *nt)
{
	if (!nt->broken && !nt->nflight)
		nt_break(nt, -EIO, "internal error: a request waits with nothing in flight");
}

static void nt_enqueue(struct nvme_tier *nt, struct fg_io *io, uint64_t flags)
{
	io->result = 0;
	io->priv[NT_LINK] = 0;
	io->priv[NT_CURSOR] = 0;
	io->priv[NT_STATE] = flags | NT_F_QUEUED;
	io->priv[NT_ERROFF] = 0;
	if (nt->work_tail)
		nt->work_tail->priv[NT_LINK] = (uintptr_t)io;
	else
		nt->work_head = io;
	nt->work_tail = io;
}

static int nt_check(struct nvme_tier *nt, int op, const struct fg_region *r, uint64_t off,
		    size_t len, const void *buf)
{
	char why[PATH_MAX + 256];
	uint64_t foff;
	int err = file_regions_check(&nt->fr, op, r, off, len, buf, &foff, why, sizeof(why));

	if (err)
		fg_error(nt->host, "%s", why);
	return err;
}

static int nt_broken_error(struct nvme_tier *nt)
{
	fg_error(nt->host, "%s: %s: the tier failed earlier (%s); close and reopen it",
		 nt->eng->name, nt->fr.path, strerror(-nt->broken));
	return nt->broken;
}

/* A synchronous transfer: one request through the queue, waited for. */
static int nt_run(struct nvme_tier *nt, int op, const struct fg_region *r, uint64_t off,
		  void *buf, size_t len)
{
	struct fg_io io = { .op = (enum fg_io_op)op, .region = r, .offset = off, .buf = buf,
			    .len = len };
	char line[PATH_MAX + 512];
	int err;

	if ((err = nt_check(nt, op, r, off, len, buf)))
		return err;
	pthread_mutex_lock(&nt->lock);
	if (nt->broken) {
		err = nt_broken_error(nt);
		pthread_mutex_unlock(&nt->lock);
		return err;
	}
	nt_enqueue(nt, &io, NT_F_SYNC);
	/* A broken tier completes every request, ours included. */
	while (!(io.priv[NT_STATE] & NT_F_DONE) && !nt->broken) {
		nt_progress(nt, true);
		if (!(io.priv[NT_STATE] & NT_F_DONE))
			nt_check_stall(nt);
	}
	pthread_mutex_unlock(&nt->lock);
	if (!(io.priv[NT_STATE] & NT_F_DONE) && !io.result)
		io.result = -EIO; /* lost by an internal error (logged) */
	if (io.result) {
		nt_describe(nt, &io, line, sizeof(line));
		fg_error(nt->host, "%s", line);
	}
	return io.result;
}

static int nvme_tier_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	return nt_run(ctx, FG_IO_READ, r, off, dst, len);
}

static int nvme_tier_write(void *ctx, const struct fg_region *r, uint64_t off,
			   const void *src, size_t len)
{
	return nt_run(ctx, FG_IO_WRITE, r, off, (void *)src, len);
}

static int nvme_tier_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct nvme_tier *nt = ctx;
	int err;

	if (!n)
		return 0;
	if (!ios) {
		fg_error(nt->host, "%s: %s: submit of %u requests without an array", nt->eng->name,
			 nt->fr.path, n);
		return -EINVAL;
	}
	/* All or nothing: check every request before queueing any. */
	for (unsigned i = 0; i < n; i++) {
		if (!ios[i]) {
			fg_error(nt->host, "%s: %s: submit: request %u of %u is NULL",
				 nt->eng->name, nt->fr.path, i, n);
			return -EINVAL;
		}
		err = nt_check(nt, (int)ios[i]->op, ios[i]->region, ios[i]->offset, ios[i]->len,
			       ios[i]->buf);
		if (err)
			return err;
	}
	pthread_mutex_lock(&nt->lock);
	if (nt->broken) {
		err = nt_broken_error(nt);
		pthread_mutex_unlock(&nt->lock);
		return err;
	}
	for (unsigned i = 0; i < n; i++)
		nt_enqueue(nt, ios[i], 0);
	nt->outstanding += n;
	nt_progress(nt, false);
	pthread_mutex_unlock(&nt->lock);
	return 0;
}

static int nvme_tier_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct nvme_tier *nt = ctx;
	struct fg_io *failed = NULL;
	char line[PATH_MAX + 512];
	unsigned k = 0;

	if (!max)
		return 0;
	if (!done) {
		fg_error(nt->host, "%s: %s: reap without an array", nt->eng->name, nt->fr.path);
		return -EINVAL;
	}
	if (min > max)
		min = max;
	pthread_mutex_lock(&nt->lock);
	nt_progress(nt, false);
	/* Wait only for requests that exist: never for more than are outstanding.
	 * A broken tier has completed them all, so this ends. */
	while (nt->ndone < min && nt->ndone < nt->outstanding && !nt->broken) {
		nt_progress(nt, true);
		if (nt->ndone < min && nt->ndone < nt->outstanding)
			nt_check_stall(nt);
	}
	while (k < max && nt->done_head) {
		struct fg_io *io = nt->done_head;

		nt->done_head = (struct fg_io *)(uintptr_t)io->priv[NT_LINK];
		if (!nt->done_head)
			nt->done_tail = NULL;
		if (io->result)
			failed = io;
		done[k++] = io;
	}
	nt->ndone -= k;
	nt->outstanding -= k;
	if (failed)
		nt_describe(nt, failed, line, sizeof(line));
	pthread_mutex_unlock(&nt->lock);
	if (failed)
		fg_error(nt->host, "%s", line);
	return (int)k;
}

/* ---- regions -------------------------------------------------------------- */

static int nvme_tier_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct nvme_tier *nt = ctx;

	return file_regions_alloc(&nt->fr, size, r);
}

static void nvme_tier_free(void *ctx, struct fg_region *r)
{
	struct nvme_tier *nt = ctx;

	file_regions_free(&nt->fr, r);
}

/* ---- open / close ------------------------------------------------------------ */

static void nt_destroy(struct nvme_tier *nt)
{
	if (nt->eng_priv)
		nt->eng->teardown(nt, nt->eng_priv);
	if (nt->fr_open)
		file_regions_close(&nt->fr);
	free(nt->bounce_mem);
	free(nt->bounce_iov);
	free(nt->free_big);
	free(nt->free_small);
	free(nt->rmw_blocks);
	free(nt->pieces);
	pthread_mutex_destroy(&nt->lock);
	free(nt);
}

static void nvme_tier_close(void *ctx)
{
	struct nvme_tier *nt = ctx;

	/* Requests still queued or in flight complete first (nobody reaps them):
	 * the kernel must be done with every buffer before it goes away. */
	pthread_mutex_lock(&nt->lock);
	while (!nt->broken && (nt->work_head || nt->nflight || nt->retry_head)) {
		nt_progress(nt, true);
		if (nt->work_head || nt->retry_head)
			nt_check_stall(nt);
	}
	pthread_mutex_unlock(&nt->lock);
	nt_destroy(nt);
}

static int nt_setup_queue(struct nvme_tier *nt)
{
	unsigned nsmall = 0;
	size_t bytes;

	nt->pieces = calloc(nt->qd, sizeof(*nt->pieces));
	nt->rmw_blocks = calloc(nt->qd, sizeof(*nt->rmw_blocks));
	if (!nt->pieces || !nt->rmw_blocks)
		return -ENOMEM;
	for (unsigned i = nt->qd; i-- > 0;) {
		nt->pieces[i].slot = i;
		nt->pieces[i].next = nt->free_pieces;
		nt->free_pieces = &nt->pieces[i];
	}
	if (!nt->o_direct)
		return 0; /* no alignment to keep: nothing is bounced */
	nt->bsz = nt->rs < NT_BOUNCE_MAX ? nt->rs : NT_BOUNCE_MAX;
	nt->nbig = nt->qd < NT_MAX_BIG ? nt->qd : NT_MAX_BIG;
	nsmall = nt->qd < NT_MAX_SMALL ? nt->qd : NT_MAX_SMALL;
	nt->nbounce = nt->nbig + nsmall;
	bytes = nt->nbig * nt->bsz + (size_t)nsmall * NT_SMALL;
	nt->bounce_iov = calloc(nt->nbounce, sizeof(*nt->bounce_iov));
	nt->free_big = calloc(nt->nbig, sizeof(int));
	nt->free_small = calloc(nsmall, sizeof(int));
	if (!nt->bounce_iov || !nt->free_big || !nt->free_small ||
	    posix_memalign((void **)&nt->bounce_mem, NT_BLOCK, bytes))
		return -ENOMEM;
	for (unsigned i = 0; i < nt->nbounce; i++) {
		size_t at = i < nt->nbig ? i * nt->bsz
					 : nt->nbig * nt->bsz + (size_t)(i - nt->nbig) * NT_SMALL;

		nt->bounce_iov[i].iov_base = nt->bounce_mem + at;
		nt->bounce_iov[i].iov_len = i < nt->nbig ? nt->bsz : NT_SMALL;
		if (i < nt->nbig)
			nt->free_big[nt->nfree_big++] = (int)i;
		else
			nt->free_small[nt->nfree_small++] = (int)i;
	}
	return 0;
}

static int nvme_tier_open(const struct fg_host *host, const void *opts, void **ctx,
			  struct fg_storage_info *info)
{
	const struct nvme_engine *eng = &nvme_tier_engine;
	const void *plugin_opts = opts ? opts : eng->defaults;
	struct nvme_tier_opts o;
	struct nvme_tier *nt;
	const char *fault;
	int err;

	/* Our options lead the plugin's; the strings may come unterminated. */
	memcpy(&o, plugin_opts, sizeof(o));
	o.dir[sizeof(o.dir) - 1] = '\0';
	o.file[sizeof(o.file) - 1] = '\0';

	if (o.queue_depth < 1 || o.queue_depth > 4096) {
		fg_error(host, "%s: queue_depth = %" PRId64 " is out of range; use 1..4096",
			 eng->name, o.queue_depth);
		return -EINVAL;
	}
	if (o.request_size < NT_BLOCK || o.request_size > NT_MAX_REQUEST ||
	    !file_regions_aligned(o.request_size)) {
		fg_error(host, "%s: request_size = %" PRIu64 " is not a multiple of %u between "
			 "4K and 1G; use e.g. request_size = 1M", eng->name, o.request_size,
			 NT_BLOCK);
		return -EINVAL;
	}
	nt = calloc(1, sizeof(*nt));
	if (!nt) {
		fg_error(host, "%s: out of memory opening the tier", eng->name);
		return -ENOMEM;
	}
	nt->host = host;
	nt->eng = eng;
	nt->o_direct = o.o_direct;
	nt->qd = (unsigned)o.queue_depth;
	nt->rs = (size_t)o.request_size;
	pthread_mutex_init(&nt->lock, NULL);

	fault = getenv(eng->fault_env);
	if (fault && (err = nt_parse_faults(nt, fault)))
		goto fail;
	err = file_regions_open(&nt->fr, host, eng->name, o.dir, o.file, nt->o_direct,
				o.size);
	if (err)
		goto fail;
	nt->fr_open = true;
	if ((err = nt_setup_queue(nt))) {
		fg_error(host, "%s: out of memory for a queue of %u requests of %zu bytes; lower "
			 "queue_depth or request_size", eng->name, nt->qd, nt->rs);
		goto fail;
	}
	if ((err = eng->setup(nt, plugin_opts, &nt->eng_priv)))
		goto fail;

	info->capacity = file_regions_capacity(&nt->fr);
	info->flags = 0;
	info->alignment = nt->o_direct ? NT_BLOCK : 1;
	fg_log(host, FG_LOG_DEBUG, "%s: %s: capacity %" PRIu64 " bytes, queue depth %u, "
	       "requests of %zu bytes%s", eng->name, nt->fr.path, info->capacity, nt->qd, nt->rs,
	       nt->o_direct ? ", O_DIRECT" : "");
	*ctx = nt;
	return 0;
fail:
	nt->eng_priv = NULL;
	nt_destroy(nt);
	return err;
}

const struct fg_storage_ops nvme_tier_ops = {
	.open	= nvme_tier_open,
	.close	= nvme_tier_close,
	.alloc	= nvme_tier_alloc,
	.free	= nvme_tier_free,
	.read	= nvme_tier_read,
	.write	= nvme_tier_write,
	.submit	= nvme_tier_submit,
	.reap	= nvme_tier_reap,
};
