/* plugins/storage/file_regions.h - the tier file of a file-backed storage plugin:
 * creating it, reserving its space and handing out regions of it.
 *
 * A helper compiled into each file plugin (posix_file, io_uring_nvme,
 * libaio_nvme); plugins build with -fvisibility=hidden, so none of these
 * symbols leaves the plugin.
 *
 * All regions live in one file: by default a fresh `fgcore-<pid>-<n>.tier` in
 * `dir`, unlinked right after it is created so that nothing is left behind
 * after a crash; or the file named by `file` (truncated, kept).  Regions are
 * extents of that file at 4096-byte aligned offsets, handed out first-fit
 * from a free list sorted by offset.  The file grows (fallocate, so running
 * out of disk shows at allocation time) and shrinks as regions come and go,
 * and freed extents have their blocks punched out; with `size` > 0 the file
 * is reserved once, up front, and never changes size.  What was never written
 * reads as zeros.
 *
 * Messages start with the plugin's name and the file's path.  alloc and free
 * are thread-safe; open and close are not.
 */
#ifndef FG_PLUGINS_STORAGE_FILE_REGIONS_H
#define FG_PLUGINS_STORAGE_FILE_REGIONS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#define FILE_REGIONS_BLOCK 4096u /* region granularity and O_DIRECT alignment */

struct file_extent;

struct file_regions {
	const struct fg_host *host;
	const char *who;          /* plugin name: the first word of every message */
	char path[PATH_MAX];
	char dir[PATH_MAX];       /* the directory holding the file, for messages */
	int fd;
	bool o_direct;
	bool fixed;               /* `size` set: never grow or shrink */
	uint64_t fixed_size;

	pthread_mutex_t lock;
	struct file_extent *free_list; /* sorted by offset, coalesced */
	uint64_t file_end;        /* the file's size */
};

/* Create the tier file in `dir` (temporary, unlinked) or open and truncate
 * `file` when it is not empty; O_DIRECT when asked (a file system that refuses
 * it is -ENOTSUP with a line naming the directory).  size > 0 reserves that
 * many bytes (rounded down to 4096) up front: more than the file system has
 * free is -ENOSPC.  On failure everything is released (close is not needed). */
int file_regions_open(struct file_regions *fr, const struct fg_host *host, const char *who,
		      const char *dir, const char *file, bool o_direct, uint64_t size);
void file_regions_close(struct file_regions *fr);

/* Physical capacity: the fixed size, or the free disk space plus the file. */
uint64_t file_regions_capacity(struct file_regions *fr);

/* Reserve `size` bytes: r->handle is the region's file offset (4096-aligned),
 * r->addr NULL.  -ENOSPC (no room), -EINVAL, -EFBIG; the error line is set. */
int file_regions_alloc(struct file_regions *fr, uint64_t size, struct fg_region *r);
/* Give a region back; a region that is not allocated is logged and ignored. */
void file_regions_free(struct file_regions *fr, struct fg_region *r);

/* Validate a request against its region: 0, or -EINVAL with the reason in
 * why[n] ("... is outside the 100-byte region ...").  On success *foff is the
 * request's file offset. */
int file_regions_check(const struct file_regions *fr, int op, const struct fg_region *r,
		       uint64_t off, size_t len, const void *buf, uint64_t *foff, char *why,
		       size_t n);

static inline bool file_regions_aligned(uint64_t v)
{
	return (v & (FILE_REGIONS_BLOCK - 1)) == 0;
}

#endif
