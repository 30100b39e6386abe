/* plugins/storage/file_regions.c - the tier file and its first-fit region
 * allocator, shared by the file-backed storage plugins (see file_regions.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "plugins/storage/file_regions.h"

struct file_extent {
	uint64_t off, len;
	struct file_extent *next;
};

/* Distinguishes the temporary files of several tiers of one process. */
static atomic_uint file_regions_serial;

static uint64_t fr_round_up(uint64_t v)
{
	return (v + FILE_REGIONS_BLOCK - 1) & ~(uint64_t)(FILE_REGIONS_BLOCK - 1);
}

static uint64_t fr_free_disk(const struct file_regions *fr)
{
	struct statvfs sv;

	if (fstatvfs(fr->fd, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

uint64_t file_regions_capacity(struct file_regions *fr)
{
	uint64_t end;

	if (fr->fixed)
		return fr->fixed_size;
	pthread_mutex_lock(&fr->lock);
	end = fr->file_end;
	pthread_mutex_unlock(&fr->lock);
	return fr_free_disk(fr) + end;
}

/* Claim disk blocks for [off, off+len); the file grows when that passes its end.
 * Without fallocate the file only grows (sparse): ENOSPC then shows at write time. */
static int fr_reserve(struct file_regions *fr, uint64_t off, uint64_t len)
{
	/* Some file systems fill up before failing a too-large fallocate: ask first,
	 * so that a refused region never leaves the disk full for everyone else. */
	struct statvfs sv;

	if (fstatvfs(fr->fd, &sv) == 0 && len > (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize)
		return -ENOSPC;
	if (fallocate(fr->fd, 0, (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOSYS) {
		if (off + len <= fr->file_end || ftruncate(fr->fd, (off_t)(off + len)) == 0)
			return 0;
	}
	return -errno;
}

/* ---- open / close -------------------------------------------------------- */

static void fr_set_dir(struct file_regions *fr, const char *dir, const char *file)
{
	const char *slash;

	if (!file[0]) {
		snprintf(fr->dir, sizeof(fr->dir), "%s", dir);
		return;
	}
	slash = strrchr(file, '/');
	if (!slash)
		snprintf(fr->dir, sizeof(fr->dir), ".");
	else if (slash == file)
		snprintf(fr->dir, sizeof(fr->dir), "/");
	else
		snprintf(fr->dir, sizeof(fr->dir), "%.*s", (int)(slash - file), file);
}

static int fr_refuses_direct(struct file_regions *fr, int err)
{
	fg_error(fr->host, "%s: %s: the file system of %s refuses O_DIRECT (%s); choose a dir "
		 "on a disk-backed file system (e.g. /var/tmp; tmpfs may refuse it) or set "
		 "o_direct = false", fr->who, fr->path, fr->dir, strerror(err));
	return -ENOTSUP;
}

/* Some file systems accept O_DIRECT at open and refuse it at the first
 * transfer: write one aligned block now rather than fail in the middle of a run. */
static int fr_probe_direct(struct file_regions *fr)
{
	void *blk;
	ssize_t n;
	int err = 0;

	if (posix_memalign(&blk, FILE_REGIONS_BLOCK, FILE_REGIONS_BLOCK)) {
		fg_error(fr->host, "%s: out of memory", fr->who);
		return -ENOMEM;
	}
	memset(blk, 0, FILE_REGIONS_BLOCK);
	do
		n = pwrite(fr->fd, blk, FILE_REGIONS_BLOCK, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		err = errno;
	free(blk);
	if (err == EINVAL)
		return fr_refuses_direct(fr, err);
	if (err) {
		fg_error(fr->host, "%s: %s: cannot write the tier file: %s; check the file system "
			 "of %s", fr->who, fr->path, strerror(err), fr->dir);
		return -err;
	}
	if (ftruncate(fr->fd, 0) != 0) {
		err = errno;
		fg_error(fr->host, "%s: %s: cannot truncate the tier file: %s", fr->who, fr->path,
			 strerror(err));
		return -err;
	}
	return 0;
}

static int fr_open_file(struct file_regions *fr, const char *dir, const char *file)
{
	int flags = O_RDWR | O_CREAT | O_CLOEXEC | (fr->o_direct ? O_DIRECT : 0);
	bool temp = !file[0];
	struct stat st;
	int n, err;

	if (temp) {
		if (!dir[0]) {
			fg_error(fr->host, "%s: dir is empty; set dir = <directory> or file = "
				 "<path>", fr->who);
			return -EINVAL;
		}
		n = snprintf(fr->path, sizeof(fr->path), "%s/fgcore-%ld-%u.tier", dir,
			     (long)getpid(), atomic_fetch_add(&file_regions_serial, 1));
		flags |= O_EXCL;
	} else {
		n = snprintf(fr->path, sizeof(fr->path), "%s", file);
	}
	if (n < 0 || (size_t)n >= sizeof(fr->path)) {
		fg_error(fr->host, "%s: tier file path is too long (dir = \"%s\", file = \"%s\")",
			 fr->who, dir, file);
		return -ENAMETOOLONG;
	}
	fr_set_dir(fr, dir, file);
	fr->fd = open(fr->path, flags, 0600);
	if (fr->fd < 0) {
		err = errno;
		if (fr->o_direct && err == EINVAL)
			return fr_refuses_direct(fr, err);
		fg_error(fr->host, "%s: %s: cannot create the tier file: %s; %s", fr->who,
			 fr->path, strerror(err), temp ? "check that dir exists and is writable"
			 : "check the file = path");
		return -err;
	}
	if (temp && unlink(fr->path) != 0)
		fg_log(fr->host, FG_LOG_WARN, "%s: %s: cannot unlink the tier file: %s; remove it "
		       "after this run", fr->who, fr->path, strerror(errno));
	if (fstat(fr->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		fg_error(fr->host, "%s: %s: not a regular file; file = must name a regular file",
			 fr->who, fr->path);
		return -EINVAL;
	}
	/* The file holds scratch regions only: start from empty. */
	if (!temp && ftruncate(fr->fd, 0) != 0) {
		err = errno;
		fg_error(fr->host, "%s: %s: cannot truncate the tier file: %s", fr->who, fr->path,
			 strerror(err));
		return -err;
	}
	return fr->o_direct ? fr_probe_direct(fr) : 0;
}

static int fr_open_fixed(struct file_regions *fr, uint64_t size)
{
	struct file_extent *e;
	uint64_t avail;
	int err;

	size &= ~(uint64_t)(FILE_REGIONS_BLOCK - 1);
	if (!size || size > (uint64_t)INT64_MAX) {
		fg_error(fr->host, "%s: %s: size = %" PRIu64 " is out of range; use 0 (grow as "
			 "needed) or at least %u bytes", fr->who, fr->path, size,
			 FILE_REGIONS_BLOCK);
		return -EINVAL;
	}
	avail = fr_free_disk(fr);
	if (size > avail) {
		fg_error(fr->host, "%s: %s: cannot reserve size = %" PRIu64 " bytes: only %" PRIu64
			 " bytes are free on its file system; lower size = or choose a dir with "
			 "more space", fr->who, fr->path, size, avail);
		return -ENOSPC;
	}
	err = fr_reserve(fr, 0, size);
	if (err) {
		if (ftruncate(fr->fd, 0) != 0)
			fg_log(fr->host, FG_LOG_WARN, "%s: %s: cannot truncate: %s", fr->who,
			       fr->path, strerror(errno));
		fg_error(fr->host, "%s: %s: cannot reserve size = %" PRIu64 " bytes: %s; lower "
			 "size = or choose a dir with more space", fr->who, fr->path, size,
			 strerror(-err));
		return err;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		fg_error(fr->host, "%s: out of memory", fr->who);
		return -ENOMEM;
	}
	e->off = 0;
	e->len = size;
	e->next = NULL;
	fr->free_list = e;
	fr->file_end = size;
	fr->fixed = true;
	fr->fixed_size = size;
	return 0;
}

int file_regions_open(struct file_regions *fr, const struct fg_host *host, const char *who,
		      const char *dir, const char *file, bool o_direct, uint64_t size)
{
	int err;

	memset(fr, 0, sizeof(*fr));
	fr->host = host;
	fr->who = who;
	fr->fd = -1;
	fr->o_direct = o_direct;
	pthread_mutex_init(&fr->lock, NULL);
	err = fr_open_file(fr, dir ? dir : "", file ? file : "");
	if (!err && size)
		err = fr_open_fixed(fr, size);
	if (err)
		file_regions_close(fr);
	return err;
}

void file_regions_close(struct file_regions *fr)
{
	struct file_extent *e;

	if (fr->fd >= 0)
		close(fr->fd);
	fr->fd = -1;
	while ((e = fr->free_list)) {
		fr->free_list = e->next;
		free(e);
	}
	pthread_mutex_destroy(&fr->lock);
}

/* ---- regions --------------------------------------------------------------- */

int file_regions_alloc(struct file_regions *fr, uint64_t size, struct fg_region *r)
{
	struct file_extent **pp, *e, *last = NULL, **lastp = NULL;
	uint64_t alen, off, base;
	int err;

	if (size > (uint64_t)INT64_MAX / 2) {
		fg_error(fr->host, "%s: %s: region size %" PRIu64 " is too large", fr->who,
			 fr->path, size);
		return -EINVAL;
	}
	alen = fr_round_up(size ? size : 1);

	pthread_mutex_lock(&fr->lock);
	for (pp = &fr->free_list; (e = *pp); pp = &e->next) {
		if (e->len >= alen)
			break;
		last = e;
		lastp = pp;
	}
	if (e) {
		off = e->off;
		/* Freed extents had their blocks punched out: claim them again. */
		if (!fr->fixed && (err = fr_reserve(fr, off, alen)))
			goto fail;
		e->off += alen;
		e->len -= alen;
		if (!e->len) {
			*pp = e->next;
			free(e);
		}
		goto done;
	}
	if (fr->fixed) {
		pthread_mutex_unlock(&fr->lock);
		fg_error(fr->host, "%s: %s: no free range of %" PRIu64 " bytes in the %" PRIu64
			 "-byte tier file; raise this tier's size = or lower its share", fr->who,
			 fr->path, alen, fr->fixed_size);
		return -ENOSPC;
	}
	/* Grow: start in a free tail, if there is one, and extend the file. */
	base = fr->file_end;
	if (last && last->off + last->len == fr->file_end)
		base = last->off;
	if (base > (uint64_t)INT64_MAX - alen) {
		err = -EFBIG;
		goto fail;
	}
	off = base;
	/* From base: a free tail had its blocks punched out, too. */
	err = fr_reserve(fr, base, alen);
	if (err) {
		/* fallocate may have extended the file part of the way: take that back. */
		if (ftruncate(fr->fd, (off_t)fr->file_end) != 0)
			fg_log(fr->host, FG_LOG_WARN, "%s: %s: cannot shrink back to %" PRIu64
			       " bytes: %s", fr->who, fr->path, fr->file_end, strerror(errno));
		goto fail;
	}
	if (base != fr->file_end) {
		*lastp = last->next;
		free(last);
	}
	fr->file_end = base + alen;
done:
	pthread_mutex_unlock(&fr->lock);
	r->size = size;
	r->handle = off;
	r->addr = NULL;
	return 0;
fail:
	pthread_mutex_unlock(&fr->lock);
	fg_error(fr->host, "%s: %s: cannot allocate a region of %" PRIu64 " bytes: %s; %s",
		 fr->who, fr->path, size, strerror(-err),
		 err == -ENOSPC || err == -EDQUOT ? "free disk space, move this tier's dir or "
		 "lower its share" : "check the tier's file system");
	return err;
}

void file_regions_free(struct file_regions *fr, struct fg_region *r)
{
	struct file_extent **pp, **ep, *prev = NULL, *e, *n;
	uint64_t off = r->handle, alen;

	if (r->size > (uint64_t)INT64_MAX / 2)
		goto bad;
	alen = fr_round_up(r->size ? r->size : 1);
	pthread_mutex_lock(&fr->lock);
	if (!file_regions_aligned(off) || off > fr->file_end || alen > fr->file_end - off)
		goto bad_locked;
	for (pp = &fr->free_list; *pp && (*pp)->off < off; pp = &(*pp)->next)
		prev = *pp;
	/* Overlapping a free extent means a double free: refuse it. */
	if ((prev && prev->off + prev->len > off) || (*pp && (*pp)->off < off + alen))
		goto bad_locked;
	if (prev && prev->off + prev->len == off) {
		/* ep: the link that points at the extent now holding the range */
		for (ep = &fr->free_list; *ep != prev; ep = &(*ep)->next)
			;
		prev->len += alen;
		e = prev;
	} else {
		e = malloc(sizeof(*e));
		if (!e) {
			/* Lose the range rather than corrupt the list. */
			pthread_mutex_unlock(&fr->lock);
			fg_log(fr->host, FG_LOG_WARN, "%s: %s: out of memory freeing %" PRIu64
			       " bytes at file offset %" PRIu64 "; that range stays unused",
			       fr->who, fr->path, alen, off);
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
	if (!fr->fixed) {
		if (!e->next && e->off + e->len == fr->file_end &&
		    ftruncate(fr->fd, (off_t)e->off) == 0) {
			/* A free tail: give the space back by shrinking the file. */
			fr->file_end = e->off;
			*ep = NULL;
			free(e);
		} else {
			/* Give the blocks back; alloc claims them again.  Failing only
			 * costs disk space. */
			(void)fallocate(fr->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					(off_t)off, (off_t)alen);
		}
	}
	pthread_mutex_unlock(&fr->lock);
	r->handle = 0;
	r->size = 0;
	return;
bad_locked:
	pthread_mutex_unlock(&fr->lock);
bad:
	fg_log(fr->host, FG_LOG_ERROR, "%s: %s: free of a region that is not allocated (file "
	       "offset %" PRIu64 ", %" PRIu64 " bytes); ignored", fr->who, fr->path, off, r->size);
}

int file_regions_check(const struct file_regions *fr, int op, const struct fg_region *r,
		       uint64_t off, size_t len, const void *buf, uint64_t *foff, char *why,
		       size_t n)
{
	const char *what = op == FG_IO_READ ? "read" : "write";

	if (op != FG_IO_READ && op != FG_IO_WRITE) {
		snprintf(why, n, "%s: %s: unknown request type %d", fr->who, fr->path, op);
		return -EINVAL;
	}
	if (!r) {
		snprintf(why, n, "%s: %s: %s without a region", fr->who, fr->path, what);
		return -EINVAL;
	}
	if (off > r->size || len > r->size - off || r->handle > (uint64_t)INT64_MAX - r->size ||
	    !file_regions_aligned(r->handle)) {
		snprintf(why, n, "%s: %s: %s of %zu bytes at offset %" PRIu64 " is outside the %"
			 PRIu64 "-byte region at file offset %" PRIu64, fr->who, fr->path, what,
			 len, off, r->size, r->handle);
		return -EINVAL;
	}
	if (len && !buf) {
		snprintf(why, n, "%s: %s: %s of %zu bytes with a NULL buffer", fr->who, fr->path,
			 what, len);
		return -EINVAL;
	}
	*foff = r->handle + off;
	return 0;
}
