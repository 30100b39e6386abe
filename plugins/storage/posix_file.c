/* posix_file - a file-backed tier: the reference storage plugin.
 *
 * All regions live in one file: by default a fresh `fgcore-<pid>-<n>.tier` in
 * `dir`, unlinked right after it is opened so that nothing is left behind
 * after a crash; or the file named by `file` (kept).  Regions are extents of
 * that file, 4096-byte aligned, handed out first-fit from a free list; the
 * file grows (fallocate, so running out of disk shows at allocation time)
 * and shrinks as regions come and go, unless `size` fixes it up front.
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
#include <fcntl.h>
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
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#define PF_BLOCK 4096u          /* region granularity and O_DIRECT alignment */
#define PF_BOUNCE (1u << 20)    /* bytes per bounce buffer */
#define PF_STRIPES 64           /* locks for read-modify-write of partial blocks */
#define PF_MAX_FAULTS 8
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

struct pf_extent {
	uint64_t off, len;
	struct pf_extent *next;
};

struct pf_bounce {
	struct pf_bounce *next;
};

struct pf_fault {
	int op;     /* FG_IO_READ or FG_IO_WRITE */
	int err;    /* positive errno */
	uint64_t nth;
};

struct posix_file {
	const struct fg_host *host;
	char path[PATH_MAX];
	int fd;
	bool o_direct;
	bool fixed;             /* `size` set: never grow or shrink */
	uint64_t fixed_size;

	/* Extents: free list sorted by offset; file_end is the file's size. */
	pthread_mutex_t alloc_lock;
	struct pf_extent *free_list;
	uint64_t file_end;

	pthread_mutex_t bounce_lock;
	struct pf_bounce *bounce_pool;
	pthread_mutex_t stripe[PF_STRIPES];

	struct pf_fault faults[PF_MAX_FAULTS];
	int nfaults;
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

static atomic_uint pf_serial;

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

static uint64_t pf_round_up(uint64_t v)
{
	return (v + PF_BLOCK - 1) & ~(uint64_t)(PF_BLOCK - 1);
}

/* ---- fault injection -------------------------------------------------- */

static const struct {
	const char *name;
	int err;
} pf_errnames[] = {
	{ "EIO", EIO }, { "ENOSPC", ENOSPC }, { "ENOMEM", ENOMEM }, { "EROFS", EROFS },
	{ "EDQUOT", EDQUOT }, { "EFBIG", EFBIG }, { "EBADF", EBADF }, { "EINVAL", EINVAL },
	{ "EAGAIN", EAGAIN }, { "ENXIO", ENXIO }, { "ETIMEDOUT", ETIMEDOUT },
	{ "EPERM", EPERM }, { "EACCES", EACCES },
};

static bool pf_parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

static bool pf_parse_rule(const char *s, size_t n, struct pf_fault *f)
{
	const char *c1 = memchr(s, ':', n), *c2;
	size_t oplen, errlen;
	uint64_t v;

	if (!c1)
		return false;
	c2 = memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - s));
	if (!c2)
		return false;
	oplen = (size_t)(c1 - s);
	errlen = (size_t)(c2 - c1 - 1);
	if (oplen == 4 && !memcmp(s, "read", 4))
		f->op = FG_IO_READ;
	else if (oplen == 5 && !memcmp(s, "write", 5))
		f->op = FG_IO_WRITE;
	else
		return false;
	f->err = 0;
	for (size_t i = 0; i < sizeof(pf_errnames) / sizeof(pf_errnames[0]); i++) {
		if (strlen(pf_errnames[i].name) == errlen &&
		    !memcmp(pf_errnames[i].name, c1 + 1, errlen))
			f->err = pf_errnames[i].err;
	}
	if (!f->err) {
		if (!pf_parse_u64(c1 + 1, errlen, &v) || v == 0 || v > 4095)
			return false;
		f->err = (int)v;
	}
	if (!pf_parse_u64(c2 + 1, n - (size_t)(c2 + 1 - s), &f->nth) || f->nth == 0)
		return false;
	return true;
}

static int pf_parse_faults(struct posix_file *pf, const char *val)
{
	const char *p = val;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (pf->nfaults == PF_MAX_FAULTS ||
		    !pf_parse_rule(p, n, &pf->faults[pf->nfaults]))
			goto bad;
		pf->nfaults++;
		p += n;
		if (*p == ',' && !*++p)
			n = 0; /* a trailing comma: an empty rule */
		if (!n)
			goto bad;
	}
	return 0;
bad:
	fg_error(pf->host, "posix_file: %s=\"%s\": expected up to %d comma-separated rules "
		 "read|write:ERRNO:N (ERRNO a name like EIO or ENOSPC, or a number; N >= 1), "
		 "e.g. read:EIO:3", PF_FAULT_ENV, val, PF_MAX_FAULTS);
	return -EINVAL;
}

static int pf_parse_delay(struct posix_file *pf, const char *val)
{
	uint64_t v;

	if (!val || !*val)
		return 0;
	if (!pf_parse_u64(val, strlen(val), &v) || v > 1000000) {
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
	uint64_t n;

	if (!pf->nfaults)
		return 0;
	n = atomic_fetch_add(&pf->count[op], 1) + 1;
	for (int i = 0; i < pf->nfaults; i++)
		if (pf->faults[i].op == op && pf->faults[i].nth == n)
			return pf->faults[i].err;
	return 0;
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

static bool pf_aligned(uint64_t v)
{
	return (v & (PF_BLOCK - 1)) == 0;
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
			err = pf_pread_full(pf->fd, bounce, PF_BLOCK, blk);
			if (!err && op == FG_IO_READ) {
				memcpy(buf, bounce + in_blk, n);
			} else if (!err) {
				memcpy(bounce + in_blk, buf, n);
				err = pf_pwrite_full(pf->fd, bounce, PF_BLOCK, blk);
			}
			if (op == FG_IO_WRITE)
				pthread_mutex_unlock(m);
		} else if (((uintptr_t)buf & (PF_BLOCK - 1)) == 0) {
			n = len & ~(size_t)(PF_BLOCK - 1);
			err = op == FG_IO_READ ? pf_pread_full(pf->fd, buf, n, foff)
					       : pf_pwrite_full(pf->fd, buf, n, foff);
		} else {
			n = len & ~(size_t)(PF_BLOCK - 1);
			if (n > PF_BOUNCE)
				n = PF_BOUNCE;
			if (!bounce && !(bounce = pf_bounce_get(pf)))
				return -ENOMEM;
			if (op == FG_IO_READ) {
				err = pf_pread_full(pf->fd, bounce, n, foff);
				if (!err)
					memcpy(buf, bounce, n);
			} else {
				memcpy(bounce, buf, n);
				err = pf_pwrite_full(pf->fd, bounce, n, foff);
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
	uint64_t foff;
	int err;

	if (op != FG_IO_READ && op != FG_IO_WRITE) {
		pf_report(pf, async, "posix_file: %s: unknown request type %d", pf->path, op);
		return -EINVAL;
	}
	if (!r) {
		pf_report(pf, async, "posix_file: %s: %s without a region", pf->path, what);
		return -EINVAL;
	}
	if (off > r->size || len > r->size - off || r->handle > UINT64_MAX - r->size ||
	    !pf_aligned(r->handle)) {
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes at offset %" PRIu64
			  " is outside the %" PRIu64 "-byte region at file offset %" PRIu64,
			  pf->path, what, len, off, r->size, r->handle);
		return -EINVAL;
	}
	if (len && !buf) {
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes with a NULL buffer",
			  pf->path, what, len);
		return -EINVAL;
	}
	foff = r->handle + off;
	err = pf_fault_check(pf, op);
	if (err) {
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes at offset %" PRIu64
			  " (file offset %" PRIu64 ") failed: %s (injected by %s)", pf->path,
			  what, len, off, foff, strerror(err), PF_FAULT_ENV);
		return -err;
	}
	if (!len)
		return 0;
	if (pf->o_direct && !(pf_aligned(foff) && pf_aligned(len) &&
			      ((uintptr_t)buf & (PF_BLOCK - 1)) == 0))
		err = pf_direct_io(pf, op, foff, buf, len);
	else if (op == FG_IO_READ)
		err = pf_pread_full(pf->fd, buf, len, foff);
	else
		err = pf_pwrite_full(pf->fd, buf, len, foff);
	if (err)
		pf_report(pf, async, "posix_file: %s: %s of %zu bytes at offset %" PRIu64
			  " (file offset %" PRIu64 ") failed: %s%s", pf->path, what, len, off,
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

static uint64_t pf_free_disk(struct posix_file *pf)
{
	struct statvfs sv;

	if (fstatvfs(pf->fd, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* Reserve disk blocks for [off, off+len); the file grows when that passes its end. */
static int pf_reserve(struct posix_file *pf, uint64_t off, uint64_t len)
{
	/* Some file systems fill up before failing a too-large fallocate: ask first,
	 * so that a refused region never leaves the disk full for everyone else. */
	struct statvfs sv;

	if (fstatvfs(pf->fd, &sv) == 0 && len > (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize)
		return -ENOSPC;
	if (fallocate(pf->fd, 0, (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOSYS) {
		/* No fallocate here: a sparse file; ENOSPC shows up at write time. */
		if (off + len <= pf->file_end || ftruncate(pf->fd, (off_t)(off + len)) == 0)
			return 0;
	}
	return -errno;
}

static int posix_file_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct posix_file *pf = ctx;
	struct pf_extent **pp, *e, *last = NULL, **lastp = NULL;
	uint64_t alen, off, base;
	int err;

	if (size > UINT64_MAX - PF_BLOCK || size > (uint64_t)INT64_MAX / 2) {
		fg_error(pf->host, "posix_file: %s: region size %" PRIu64 " is too large",
			 pf->path, size);
		return -EINVAL;
	}
	alen = pf_round_up(size ? size : 1);

	pthread_mutex_lock(&pf->alloc_lock);
	for (pp = &pf->free_list; (e = *pp); pp = &e->next) {
		if (e->len >= alen)
			break;
		last = e;
		lastp = pp;
	}
	if (e) {
		off = e->off;
		if (!pf->fixed) {
			/* Freed ranges had their blocks punched out: reserve them again. */
			err = pf_reserve(pf, off, alen);
			if (err)
				goto fail;
		}
		e->off += alen;
		e->len -= alen;
		if (!e->len) {
			*pp = e->next;
			free(e);
		}
		goto done;
	}
	if (pf->fixed) {
		pthread_mutex_unlock(&pf->alloc_lock);
		fg_error(pf->host, "posix_file: %s: no free range of %" PRIu64 " bytes in the %"
			 PRIu64 "-byte tier file; raise this tier's size = or lower its share",
			 pf->path, alen, pf->fixed_size);
		return -ENOSPC;
	}
	/* Grow: reuse a free tail, if any, then extend the file. */
	base = pf->file_end;
	if (last && last->off + last->len == pf->file_end)
		base = last->off;
	if (base > (uint64_t)INT64_MAX - alen) {
		err = -EFBIG;
		goto fail;
	}
	off = base;
	/* From base: a free tail had its blocks punched out, too. */
	err = pf_reserve(pf, base, alen);
	if (err) {
		/* fallocate may have extended the file partly: take that back. */
		if (ftruncate(pf->fd, (off_t)pf->file_end) != 0)
			fg_log(pf->host, FG_LOG_WARN, "posix_file: %s: cannot shrink back to %"
			       PRIu64 " bytes: %s", pf->path, pf->file_end, strerror(errno));
		goto fail;
	}
	if (base != pf->file_end) {
		*lastp = last->next;
		free(last);
	}
	pf->file_end = base + alen;
done:
	pthread_mutex_unlock(&pf->alloc_lock);
	r->size = size;
	r->handle = off;
	r->addr = NULL;
	return 0;
fail:
	pthread_mutex_unlock(&pf->alloc_lock);
	fg_error(pf->host, "posix_file: %s: cannot allocate a region of %" PRIu64 " bytes: %s; "
		 "%s", pf->path, size, strerror(-err),
		 err == -ENOSPC || err == -EDQUOT ? "free disk space, move this tier's dir "
		 "or lower its share" : "check the tier's file system");
	return err;
}

static void posix_file_free(void *ctx, struct fg_region *r)
{
	struct posix_file *pf = ctx;
	struct pf_extent **pp, **ep, *prev = NULL, *e, *n;
	uint64_t off = r->handle, alen;

	if (r->size > UINT64_MAX - PF_BLOCK)
		goto bad;
	alen = pf_round_up(r->size ? r->size : 1);
	pthread_mutex_lock(&pf->alloc_lock);
	if (!pf_aligned(off) || off > pf->file_end || alen > pf->file_end - off)
		goto bad_locked;
	for (pp = &pf->free_list; *pp && (*pp)->off < off; pp = &(*pp)->next)
		prev = *pp;
	/* A range that overlaps a free one is a double free: refuse it. */
	if ((prev && prev->off + prev->len > off) || (*pp && (*pp)->off < off + alen))
		goto bad_locked;
	if (prev && prev->off + prev->len == off) {
		/* ep: the link that points at the extent now holding the range */
		for (ep = &pf->free_list; *ep != prev; ep = &(*ep)->next)
			;
		prev->len += alen;
		e = prev;
	} else {
		e = malloc(sizeof(*e));
		if (!e) {
			/* Leak the range rather than corrupt the list. */
			pthread_mutex_unlock(&pf->alloc_lock);
			return;
		}
		e->off = off;
		e->len = alen;
		e->next = *pp;
		*pp = e;
		ep = pp;
	}
	n = e->next;
	if (n && e->off + e->len == n->off) {
		e->len += n->len;
		e->next = n->next;
		free(n);
	}
	if (!pf->fixed) {
		if (!e->next && e->off + e->len == pf->file_end &&
		    ftruncate(pf->fd, (off_t)e->off) == 0) {
			/* A free tail: give the space back by shrinking the file. */
			pf->file_end = e->off;
			*ep = NULL;
			free(e);
		} else {
			/* Give the blocks back to the file system; alloc reserves them
			 * again.  Failure only costs disk space. */
			(void)fallocate(pf->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					(off_t)off, (off_t)alen);
		}
	}
	pthread_mutex_unlock(&pf->alloc_lock);
	r->handle = 0;
	r->size = 0;
	return;
bad_locked:
	pthread_mutex_unlock(&pf->alloc_lock);
bad:
	fg_log(pf->host, FG_LOG_ERROR, "posix_file: %s: free of a region that is not allocated "
	       "(file offset %" PRIu64 ", %" PRIu64 " bytes); ignored", pf->path, off, r->size);
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
			 pf->path, n);
		return -EINVAL;
	}
	for (unsigned i = 0; i < n; i++) {
		if (!ios[i]) {
			fg_error(pf->host, "posix_file: %s: submit: request %u of %u is NULL",
				 pf->path, i, n);
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
		fg_error(pf->host, "posix_file: %s: reap without an array", pf->path);
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
	struct pf_extent *e;
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
	if (pf->fd >= 0)
		close(pf->fd);
	while ((e = pf->free_list)) {
		pf->free_list = e->next;
		free(e);
	}
	while ((b = pf->bounce_pool)) {
		pf->bounce_pool = b->next;
		free(b);
	}
	for (int i = 0; i < PF_STRIPES; i++)
		pthread_mutex_destroy(&pf->stripe[i]);
	pthread_mutex_destroy(&pf->alloc_lock);
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

static int pf_open_file(struct posix_file *pf, const struct posix_file_opts *o)
{
	int flags = O_RDWR | O_CREAT | O_CLOEXEC | (pf->o_direct ? O_DIRECT : 0);
	bool temp = !o->file[0];
	struct stat st;
	int n, err;

	if (temp) {
		if (!o->dir[0]) {
			fg_error(pf->host, "posix_file: dir is empty; set dir = <directory> or "
				 "file = <path>");
			return -EINVAL;
		}
		n = snprintf(pf->path, sizeof(pf->path), "%s/fgcore-%ld-%u.tier", o->dir,
			     (long)getpid(), atomic_fetch_add(&pf_serial, 1));
		flags |= O_EXCL;
	} else {
		n = snprintf(pf->path, sizeof(pf->path), "%s", o->file);
	}
	if (n < 0 || (size_t)n >= sizeof(pf->path)) {
		fg_error(pf->host, "posix_file: tier file path is too long (dir = \"%s\", "
			 "file = \"%s\")", o->dir, o->file);
		return -ENAMETOOLONG;
	}
	pf->fd = open(pf->path, flags, 0600);
	if (pf->fd < 0) {
		err = errno;
		if (pf->o_direct && err == EINVAL) {
			fg_error(pf->host, "posix_file: %s: the file system does not support "
				 "O_DIRECT; set o_direct = false or choose a dir on another file "
				 "system", pf->path);
			return -ENOTSUP;
		}
		fg_error(pf->host, "posix_file: %s: cannot create the tier file: %s; %s",
			 pf->path, strerror(err), temp ? "check that dir exists and is writable"
			 : "check the file = path");
		return -err;
	}
	if (temp && unlink(pf->path) != 0)
		fg_log(pf->host, FG_LOG_WARN, "posix_file: %s: cannot unlink the tier file: %s; "
		       "remove it after this run", pf->path, strerror(errno));
	if (fstat(pf->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		fg_error(pf->host, "posix_file: %s: not a regular file; file = must name a "
			 "regular file", pf->path);
		return -EINVAL;
	}
	/* The file holds scratch regions only: start from empty. */
	if (!temp && ftruncate(pf->fd, 0) != 0) {
		err = errno;
		fg_error(pf->host, "posix_file: %s: cannot truncate the tier file: %s",
			 pf->path, strerror(err));
		return -err;
	}
	return 0;
}

static int pf_open_fixed(struct posix_file *pf, uint64_t size)
{
	struct pf_extent *e;
	uint64_t avail;
	int err;

	size &= ~(uint64_t)(PF_BLOCK - 1);
	if (!size || size > (uint64_t)INT64_MAX) {
		fg_error(pf->host, "posix_file: %s: size = %" PRIu64 " is out of range; use 0 "
			 "(grow as needed) or at least %u bytes", pf->path, size, PF_BLOCK);
		return -EINVAL;
	}
	avail = pf_free_disk(pf);
	if (size > avail) {
		fg_error(pf->host, "posix_file: %s: cannot reserve size = %" PRIu64 " bytes: "
			 "only %" PRIu64 " bytes are free on its file system; lower size = or "
			 "choose a dir with more space", pf->path, size, avail);
		return -ENOSPC;
	}
	err = pf_reserve(pf, 0, size);
	if (err) {
		if (ftruncate(pf->fd, 0) != 0)
			fg_log(pf->host, FG_LOG_WARN, "posix_file: %s: cannot truncate: %s",
			       pf->path, strerror(errno));
		fg_error(pf->host, "posix_file: %s: cannot reserve size = %" PRIu64 " bytes: %s; "
			 "lower size = or choose a dir with more space", pf->path, size,
			 strerror(-err));
		return err;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		fg_error(pf->host, "posix_file: out of memory");
		return -ENOMEM;
	}
	e->off = 0;
	e->len = size;
	e->next = NULL;
	pf->free_list = e;
	pf->file_end = size;
	pf->fixed = true;
	pf->fixed_size = size;
	return 0;
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
	pf->fd = -1;
	pf->o_direct = o.o_direct;
	pthread_mutex_init(&pf->alloc_lock, NULL);
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
	if ((err = pf_open_file(pf, &o)))
		goto fail;
	if (o.size && (err = pf_open_fixed(pf, o.size)))
		goto fail;

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

	info->capacity = pf->fixed ? pf->fixed_size : pf_free_disk(pf) + pf->file_end;
	info->flags = 0;
	info->alignment = pf->o_direct ? PF_BLOCK : 1;
	fg_log(host, FG_LOG_DEBUG, "posix_file: %s: capacity %" PRIu64 " bytes, %d workers%s",
	       pf->path, info->capacity, pf->nthreads, pf->o_direct ? ", O_DIRECT" : "");
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
