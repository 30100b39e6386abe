/* fgcore/storage.h - storage tier plugins (kind FG_PLUGIN_STORAGE).
 *
 * A storage plugin moves bytes between its own regions and host memory; it
 * never interprets them.  Memory tiers (pinned_host, cuda_mem) hand out an
 * address for each region; file tiers (posix_file, io_uring_nvme, ...) do not.
 * The core accounts every tier (used, peak, `capacity =` caps) around these
 * hooks, so plugins only report the physical capacity they see.
 *
 * ABI history, in storage's own minor (FG_STORAGE_ABI_MINOR below):
 *   1.0  every member of struct fg_storage_ops below; submit and reap
 *        optional, as a pair.
 *   1.1 to 1.10  nothing: every kind shared one minor then, and compute's
 *        additions moved it.  A storage plugin that says any of them is a
 *        1.0 one, and loads.
 * The next addition here is storage 1.11 and leaves the other kinds alone.
 */
#ifndef FGCORE_STORAGE_H
#define FGCORE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The storage ABI of this header: a storage plugin declares
 * `.abi_version = FG_STORAGE_ABI_VERSION`.  Bumped by additions to this
 * header only (and by a change to what every kind shares, fgcore/plugin.h). */
#define FG_STORAGE_ABI_MINOR 10
#define FG_STORAGE_ABI_VERSION FG_ABI(FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR)

/* fg_storage_info.flags */
#define FG_STORAGE_ADDRESSABLE (1u << 0) /* regions have an address (fg_region.addr) */
#define FG_STORAGE_HOST_MEMORY (1u << 1) /* ... and that address is host memory */
#define FG_STORAGE_DEVICE_MEMORY (1u << 2) /* ... device memory of the compute backend */
#define FG_STORAGE_PAGE_LOCKED (1u << 3) /* host memory is pinned (fast DMA) */

struct fg_storage_info {
	uint64_t capacity;  /* bytes this tier can hold (physical: RAM, device, free disk) */
	uint32_t flags;     /* FG_STORAGE_* */
	uint32_t alignment; /* buffer address, offset and length alignment read/write need
	                       for their fast path (e.g. 4096 with O_DIRECT); 1 if none */
};

/* One allocation in a tier. */
struct fg_region {
	uint64_t size;   /* bytes, as asked */
	uint64_t handle; /* plugin-defined (a file offset, an index, ...) */
	void *addr;      /* memory tiers: the region's address; NULL for file tiers */
};

enum fg_io_op {
	FG_IO_READ = 0,  /* region -> buf */
	FG_IO_WRITE = 1, /* buf -> region */
};

/* An asynchronous request.  The caller owns it until it is reaped. */
struct fg_io {
	enum fg_io_op op;
	const struct fg_region *region;
	uint64_t offset; /* within the region */
	void *buf;       /* host memory */
	size_t len;
	void *user;      /* caller's cookie */
	int result;      /* set on completion: 0 or -errno */
	uint64_t priv[4]; /* plugin scratch */
};

struct fg_storage_ops {
	/* Open the tier with its parsed options; fill *info. */
	int (*open)(const struct fg_host *host, const void *opts, void **ctx,
		    struct fg_storage_info *info);
	void (*close)(void *ctx);

	/* Reserve `size` bytes; fill r->handle and (memory tiers) r->addr.
	 * Regions of memory tiers are aligned to at least 64 bytes. */
	int (*alloc)(void *ctx, uint64_t size, struct fg_region *r);
	void (*free)(void *ctx, struct fg_region *r);

	/* Synchronous copies between a region and host memory.  Any offset, length
	 * and buffer address within the region must work (unaligned ones may be slower). */
	int (*read)(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len);
	int (*write)(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
		     size_t len);

	/* optional: queue n requests; returns 0 once all are queued (each then
	 * completes exactly once), or -errno if none was queued.
	 * The core's default performs them synchronously. */
	int (*submit)(void *ctx, struct fg_io *const *ios, unsigned n);
	/* optional (required with submit): wait until at least `min` requests
	 * completed, store up to `max` of them in done[]; returns the count or -errno. */
	int (*reap)(void *ctx, struct fg_io **done, unsigned min, unsigned max);
};

#ifdef __cplusplus
}
#endif
#endif
