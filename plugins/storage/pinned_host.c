/* pinned_host - the host memory tier.
 *
 * Regions are plain host memory.  With CUDA (HAVE_CUDA) and a GPU present at
 * open, they are page-locked through cudaHostAlloc so that copies to and from
 * the device run at full DMA speed; otherwise they come from posix_memalign,
 * optionally locked with mlock(2) (`mlock = true`).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PINNED_HOST_ALIGN 64
/* Large regions start on a page so that O_DIRECT file tiers can use them
 * as I/O buffers without bouncing. */
#define PINNED_HOST_PAGE_ALIGN 4096
#define PINNED_HOST_LARGE (1u << 20)

/* fg_region.handle: how the region was obtained, so free undoes it exactly. */
enum pinned_host_kind {
	PINNED_HOST_MALLOC = 1,
	PINNED_HOST_MLOCKED = 2,
	PINNED_HOST_CUDA = 3,
};

struct pinned_host_opts {
	int mlock;
	int cuda_pinned;
};

struct pinned_host {
	const struct fg_host *host;
	struct pinned_host_opts opts;
	bool use_cuda;
	uint64_t capacity;
	size_t page;
};

static const struct fg_option pinned_host_options[] = {
	{ .key = "mlock", .type = FG_OPT_BOOL, .def = "false",
	  .help = "lock regions in RAM with mlock(2) when CUDA page-locked memory is not used "
		  "(needs a large enough RLIMIT_MEMLOCK, see ulimit -l)",
	  .offset = offsetof(struct pinned_host_opts, mlock) },
	{ .key = "cuda_pinned", .type = FG_OPT_BOOL, .def = "true",
	  .help = "allocate page-locked memory with cudaHostAlloc when a GPU is present",
	  .offset = offsetof(struct pinned_host_opts, cuda_pinned) },
	{ .key = NULL },
};

static uint64_t pinned_host_phys_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES);
	long psize = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psize <= 0)
		return 0;
	return (uint64_t)pages * (uint64_t)psize;
}

static bool pinned_host_cuda_usable(void)
{
#ifdef HAVE_CUDA
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		/* Clear the sticky "no device" status so later calls start clean. */
		(void)cudaGetLastError();
		return false;
	}
	return n > 0;
#else
	return false;
#endif
}

static int pinned_host_open(const struct fg_host *host, const void *opts, void **ctx,
			    struct fg_storage_info *info)
{
	struct pinned_host *ph;

	ph = calloc(1, sizeof(*ph));
	if (!ph) {
		fg_error(host, "pinned_host: out of memory opening the tier");
		return -ENOMEM;
	}
	ph->host = host;
	if (opts) {
		memcpy(&ph->opts, opts, sizeof(ph->opts));
	} else {
		ph->opts.mlock = 0;
		ph->opts.cuda_pinned = 1;
	}
	ph->use_cuda = ph->opts.cuda_pinned && pinned_host_cuda_usable();
	ph->capacity = pinned_host_phys_bytes();
	ph->page = sysconf(_SC_PAGESIZE) > 0 ? (size_t)sysconf(_SC_PAGESIZE) : 4096;

	info->capacity = ph->capacity;
	info->flags = FG_STORAGE_ADDRESSABLE | FG_STORAGE_HOST_MEMORY;
	if (ph->use_cuda || ph->opts.mlock)
		info->flags |= FG_STORAGE_PAGE_LOCKED;
	info->alignment = 1;
	fg_log(host, FG_LOG_DEBUG, "pinned_host: %s memory, capacity %llu bytes",
	       ph->use_cuda ? "CUDA page-locked" : ph->opts.mlock ? "mlocked" : "pageable",
	       (unsigned long long)ph->capacity);
	*ctx = ph;
	return 0;
}

static void pinned_host_close(void *ctx)
{
	free(ctx);
}

static int pinned_host_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct pinned_host *ph = ctx;
	size_t bytes, align;
	void *p = NULL;
	int err;

	if (ph->capacity && size > ph->capacity) {
		fg_error(ph->host, "pinned_host: cannot allocate %llu bytes: the machine has "
			 "%llu bytes of RAM", (unsigned long long)size,
			 (unsigned long long)ph->capacity);
		return -ENOMEM;
	}
	if (size > SIZE_MAX - ph->page) {
		fg_error(ph->host, "pinned_host: region size %llu is too large",
			 (unsigned long long)size);
		return -EINVAL;
	}
	/* A zero-byte region still gets a distinct, valid address. */
	bytes = size ? (size_t)size : 1;

#ifdef HAVE_CUDA
	if (ph->use_cuda) {
		cudaError_t ce = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);

		if (ce != cudaSuccess) {
			(void)cudaGetLastError();
			fg_error(ph->host, "pinned_host: cudaHostAlloc of %zu bytes failed: %s; "
				 "lower the host tier's share or set cuda_pinned = false",
				 bytes, cudaGetErrorString(ce));
			return -ENOMEM;
		}
		r->addr = p;
		r->handle = PINNED_HOST_CUDA;
		r->size = size;
		return 0;
	}
#endif
	align = bytes >= PINNED_HOST_LARGE ? PINNED_HOST_PAGE_ALIGN : PINNED_HOST_ALIGN;
	if (ph->opts.mlock) {
		/* Locks do not nest: a locked region must own its pages, or freeing
		 * a neighbour would unlock it. */
		align = ph->page;
		bytes = (bytes + ph->page - 1) / ph->page * ph->page;
	}
	err = posix_memalign(&p, align, bytes);
	if (err) {
		fg_error(ph->host, "pinned_host: cannot allocate %zu bytes of host memory: %s",
			 bytes, strerror(err));
		return -err;
	}
	if (ph->opts.mlock) {
		if (mlock(p, bytes) != 0) {
			err = errno;
			free(p);
			fg_error(ph->host, "pinned_host: mlock of %zu bytes failed: %s; raise the "
				 "locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) or set mlock = false",
				 bytes, strerror(err));
			return err == ENOMEM || err == EPERM || err == EAGAIN ? -ENOMEM : -err;
		}
		r->handle = PINNED_HOST_MLOCKED;
	} else {
		r->handle = PINNED_HOST_MALLOC;
	}
	r->addr = p;
	r->size = size;
	return 0;
}

static void pinned_host_free(void *ctx, struct fg_region *r)
{
	struct pinned_host *ph = ctx;

	if (!r->addr)
		return;
	switch (r->handle) {
	case PINNED_HOST_CUDA:
#ifdef HAVE_CUDA
		cudaFreeHost(r->addr);
#endif
		break;
	case PINNED_HOST_MLOCKED:
		munlock(r->addr, r->size ? (size_t)r->size : 1);	/* whole pages */
		free(r->addr);
		break;
	case PINNED_HOST_MALLOC:
		free(r->addr);
		break;
	default:
		fg_log(ph->host, FG_LOG_ERROR,
		       "pinned_host: free of a region this tier did not allocate (handle %llu); "
		       "ignored", (unsigned long long)r->handle);
		return;
	}
	r->addr = NULL;
	r->handle = 0;
}

static int pinned_host_check(struct pinned_host *ph, const struct fg_region *r, uint64_t off,
			     size_t len, const void *buf, const char *what)
{
	if (!r || !r->addr) {
		fg_error(ph->host, "pinned_host: %s on a region that is not allocated", what);
		return -EINVAL;
	}
	if (off > r->size || len > r->size - off) {
		fg_error(ph->host, "pinned_host: %s of %zu bytes at offset %llu is outside the "
			 "%llu-byte region", what, len, (unsigned long long)off,
			 (unsigned long long)r->size);
		return -EINVAL;
	}
	if (len && !buf) {
		fg_error(ph->host, "pinned_host: %s of %zu bytes with a NULL buffer", what, len);
		return -EINVAL;
	}
	return 0;
}

static int pinned_host_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst,
			    size_t len)
{
	int err = pinned_host_check(ctx, r, off, len, dst, "read");

	if (err)
		return err;
	if (len)
		memcpy(dst, (const char *)r->addr + off, len);
	return 0;
}

static int pinned_host_write(void *ctx, const struct fg_region *r, uint64_t off,
			     const void *src, size_t len)
{
	int err = pinned_host_check(ctx, r, off, len, src, "write");

	if (err)
		return err;
	if (len)
		memcpy((char *)r->addr + off, src, len);
	return 0;
}

static int pinned_host_probe(const struct fg_host *host)
{
	return 1;
}

static const struct fg_storage_ops pinned_host_ops = {
	.open	= pinned_host_open,
	.close	= pinned_host_close,
	.alloc	= pinned_host_alloc,
	.free	= pinned_host_free,
	.read	= pinned_host_read,
	.write	= pinned_host_write,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "pinned_host",
	.description	= "host memory tier (CUDA page-locked when a GPU is present)",
	.probe		= pinned_host_probe,
	.ops		= &pinned_host_ops,
	.options	= pinned_host_options,
	.opts_size	= sizeof(struct pinned_host_opts),
#ifdef HAVE_CUDA
	.capabilities	= "addressable,mlock,page_locked_with_cuda",
#else
	.capabilities	= "addressable,mlock",
#endif
};
