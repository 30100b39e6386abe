/* cuda_mem - GPU memory as a storage tier.
 *
 * At open the tier takes one pool with cudaMalloc (all free device memory
 * less `reserve`, or `pool` bytes) and sub-allocates regions from it,
 * first-fit over an offset-sorted free list that coalesces on free, in units
 * of 256 bytes - so the executor's allocations never call the CUDA allocator
 * (which would synchronise the device).  Region addresses are device
 * pointers (FG_STORAGE_DEVICE_MEMORY) for the cublas backend.
 *
 * read/write are synchronous cudaMemcpy (any host memory).  submit/reap run
 * cudaMemcpyAsync on one copy stream per direction, each request tagged with
 * an event; reap returns requests whose events completed, waiting on the
 * oldest when it must.  Copies only overlap compute and each other when the
 * host buffers are page-locked (the pinned_host tier's regions); with
 * pageable buffers the CUDA runtime stages them and the copy is effectively
 * synchronous, but still correct.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#define CUDA_MEM_ALIGN 256
#define CUDA_MEM_GiB (1024ull * 1024ull * 1024ull)

struct cuda_mem_opts {
	int64_t device;
	uint64_t pool;
	uint64_t reserve;
};

struct cuda_mem_extent {
	uint64_t off, len;
};

/* An asynchronous request in flight. */
struct cuda_mem_req {
	struct fg_io *io;
	cudaEvent_t ev;  /* NULL: already complete (result set at submit) */
};

struct cuda_mem {
	const struct fg_host *host;
	int device;
	uint8_t *base;
	uint64_t size;
	pthread_mutex_t lock;
	struct cuda_mem_extent *free; /* sorted by offset, never adjacent */
	size_t nfree, free_cap;
	uint64_t free_bytes;
	cudaStream_t h2d, d2h;
	struct cuda_mem_req *q;       /* FIFO ring of requests in flight */
	size_t q_cap, q_head, q_len;
	cudaEvent_t *evs;             /* idle events; room for every event there is */
	size_t nev, ev_cap, ev_total;
};

static const struct fg_option cuda_mem_options[] = {
	{ .key = "device", .type = FG_OPT_INT, .def = "0",
	  .help = "CUDA device index whose memory this tier manages.",
	  .offset = offsetof(struct cuda_mem_opts, device), .min = 0, .max = 1023 },
	{ .key = "pool", .type = FG_OPT_SIZE, .def = "0",
	  .help = "Bytes taken from the device at open; 0 = all free memory less `reserve`.",
	  .offset = offsetof(struct cuda_mem_opts, pool) },
	{ .key = "reserve", .type = FG_OPT_SIZE, .def = "2G",
	  .help = "With pool = 0: device memory left free for the CUDA context and the "
		  "compute backend's workspaces.",
	  .offset = offsetof(struct cuda_mem_opts, reserve) },
	{ .key = NULL },
};

static int cuda_mem_fail(struct cuda_mem *cm, const char *what, cudaError_t e)
{
	fg_error(cm->host, "cuda_mem: %s failed on device %d: %s (%s)", what, cm->device,
		 cudaGetErrorString(e), cudaGetErrorName(e));
	(void)cudaGetLastError();
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int cuda_mem_probe(const struct fg_host *host)
{
	int n = 0;

	(void)host;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n > 0 ? 1 : 0;
}

static void cuda_mem_close(void *ctx)
{
	struct cuda_mem *cm = ctx;

	if (!cm)
		return;
	(void)cudaSetDevice(cm->device);
	if (cm->h2d) {
		(void)cudaStreamSynchronize(cm->h2d);
		cudaStreamDestroy(cm->h2d);
	}
	if (cm->d2h) {
		(void)cudaStreamSynchronize(cm->d2h);
		cudaStreamDestroy(cm->d2h);
	}
	for (size_t i = 0; i < cm->q_len; i++) {
		struct cuda_mem_req *r = &cm->q[(cm->q_head + i) % cm->q_cap];

		if (r->ev)
			cudaEventDestroy(r->ev);
	}
	for (size_t i = 0; i < cm->nev; i++)
		cudaEventDestroy(cm->evs[i]);
	if (cm->base)
		cudaFree(cm->base);
	pthread_mutex_destroy(&cm->lock);
	free(cm->free);
	free(cm->q);
	free(cm->evs);
	free(cm);
}

static int cuda_mem_open(const struct fg_host *host, const void *opts, void **ctx,
			 struct fg_storage_info *info)
{
	static const struct cuda_mem_opts defaults = { .device = 0, .pool = 0,
						       .reserve = 2 * CUDA_MEM_GiB };
	const struct cuda_mem_opts *o = opts ? opts : &defaults;
	struct cuda_mem *cm;
	size_t free_b = 0, total_b = 0;
	uint64_t pool;
	cudaError_t e;
	int n = 0, rc;

	*ctx = NULL;
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n < 1) {
		(void)cudaGetLastError();
		fg_error(host, "cuda_mem: no usable CUDA device (%s); put the compute tier in host "
			 "memory (pinned_host) on this machine",
			 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return -ENODEV;
	}
	if (o->device < 0 || o->device >= n) {
		fg_error(host, "cuda_mem: device = %lld, but this machine has %d CUDA device%s",
			 (long long)o->device, n, n == 1 ? "" : "s");
		return -EINVAL;
	}
	cm = calloc(1, sizeof(*cm));
	if (!cm) {
		fg_error(host, "cuda_mem: out of host memory opening the tier");
		return -ENOMEM;
	}
	cm->host = host;
	cm->device = (int)o->device;
	pthread_mutex_init(&cm->lock, NULL);
	if ((e = cudaSetDevice(cm->device)) != cudaSuccess ||
	    (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
		rc = cuda_mem_fail(cm, "querying device memory", e);
		goto fail;
	}
	if (o->pool) {
		pool = o->pool;
		if (pool > free_b) {
			fg_error(host, "cuda_mem: pool = %" PRIu64 " bytes, but device %d has only %zu "
				 "bytes free; lower `pool` (0 = all free memory less `reserve`)",
				 pool, cm->device, free_b);
			rc = -ENOMEM;
			goto fail;
		}
	} else {
		if (free_b <= o->reserve + CUDA_MEM_ALIGN) {
			fg_error(host, "cuda_mem: device %d has %zu bytes free, not more than the "
				 "reserve of %" PRIu64 "; lower `reserve` or set `pool`", cm->device,
				 free_b, o->reserve);
			rc = -ENOMEM;
			goto fail;
		}
		pool = free_b - o->reserve;
	}
	pool &= ~(uint64_t)(CUDA_MEM_ALIGN - 1);
	if (pool == 0) {
		fg_error(host, "cuda_mem: pool of %" PRIu64 " bytes is smaller than one %d-byte unit",
			 o->pool, CUDA_MEM_ALIGN);
		rc = -EINVAL;
		goto fail;
	}
	e = cudaMalloc((void **)&cm->base, (size_t)pool);
	if (e != cudaSuccess) {
		cm->base = NULL;
		fg_error(host, "cuda_mem: cudaMalloc of a %" PRIu64 "-byte pool on device %d failed: "
			 "%s; lower `pool` or raise `reserve`", pool, cm->device,
			 cudaGetErrorString(e));
		(void)cudaGetLastError();
		rc = -ENOMEM;
		goto fail;
	}
	cm->size = pool;
	cm->free = malloc(16 * sizeof(*cm->free));
	if (!cm->free) {
		fg_error(host, "cuda_mem: out of host memory opening the tier");
		rc = -ENOMEM;
		goto fail;
	}
	cm->free_cap = 16;
	cm->free[0] = (struct cuda_mem_extent){ 0, pool };
	cm->nfree = 1;
	cm->free_bytes = pool;
	if ((e = cudaStreamCreateWithFlags(&cm->h2d, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&cm->d2h, cudaStreamNonBlocking)) != cudaSuccess) {
		rc = cuda_mem_fail(cm, "cudaStreamCreate", e);
		goto fail;
	}
	info->capacity = pool;
	info->flags = FG_STORAGE_ADDRESSABLE | FG_STORAGE_DEVICE_MEMORY;
	info->alignment = 1;
	fg_log(host, FG_LOG_DEBUG, "cuda_mem: device %d, pool %" PRIu64 " of %zu bytes (%zu free)",
	       cm->device, pool, total_b, free_b);
	*ctx = cm;
	return 0;
fail:
	cuda_mem_close(cm);
	return rc;
}

/* ---- the pool ------------------------------------------------------------------------- */

static int cuda_mem_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct cuda_mem *cm = ctx;
	uint64_t need;
	size_t i, largest = 0;

	if (size > cm->size) {
		fg_error(cm->host, "cuda_mem: cannot allocate %" PRIu64 " bytes: the pool on device "
			 "%d holds %" PRIu64, size, cm->device, cm->size);
		return -ENOSPC;
	}
	/* A zero-byte region still gets a distinct address. */
	need = size ? (size + CUDA_MEM_ALIGN - 1) & ~(uint64_t)(CUDA_MEM_ALIGN - 1)
		    : CUDA_MEM_ALIGN;
	pthread_mutex_lock(&cm->lock);
	for (i = 0; i < cm->nfree; i++) {
		if (cm->free[i].len >= need)
			break;
		if (cm->free[i].len > largest)
			largest = cm->free[i].len;
	}
	if (i == cm->nfree) {
		uint64_t fb = cm->free_bytes;

		pthread_mutex_unlock(&cm->lock);
		fg_error(cm->host, "cuda_mem: cannot allocate %" PRIu64 " bytes on device %d: %"
			 PRIu64 " bytes free but the largest free block is %zu (fragmented); "
			 "allocate large tensors first or raise `pool`", size, cm->device, fb,
			 largest);
		return -ENOSPC;
	}
	r->handle = cm->free[i].off;
	r->addr = cm->base + cm->free[i].off;
	r->size = size;
	cm->free[i].off += need;
	cm->free[i].len -= need;
	if (cm->free[i].len == 0) {
		memmove(&cm->free[i], &cm->free[i + 1], (cm->nfree - i - 1) * sizeof(*cm->free));
		cm->nfree--;
	}
	cm->free_bytes -= need;
	pthread_mutex_unlock(&cm->lock);
	return 0;
}

static void cuda_mem_free(void *ctx, struct fg_region *r)
{
	struct cuda_mem *cm = ctx;
	uint64_t off, len;
	size_t lo = 0, hi;

	if (!r || !r->addr)
		return;
	off = r->handle;
	len = r->size ? (r->size + CUDA_MEM_ALIGN - 1) & ~(uint64_t)(CUDA_MEM_ALIGN - 1)
		      : CUDA_MEM_ALIGN;
	if ((uint8_t *)r->addr != cm->base + off || off % CUDA_MEM_ALIGN || off > cm->size ||
	    len > cm->size - off) {
		fg_log(cm->host, FG_LOG_ERROR, "cuda_mem: free of a region this tier did not "
		       "allocate (offset %" PRIu64 ", %" PRIu64 " bytes); ignored", off, r->size);
		return;
	}
	pthread_mutex_lock(&cm->lock);
	hi = cm->nfree;
	while (lo < hi) { /* first extent after off */
		size_t mid = (lo + hi) / 2;

		if (cm->free[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if ((lo > 0 && cm->free[lo - 1].off + cm->free[lo - 1].len > off) ||
	    (lo < cm->nfree && off + len > cm->free[lo].off)) {
		pthread_mutex_unlock(&cm->lock);
		fg_log(cm->host, FG_LOG_ERROR, "cuda_mem: double free of the region at offset %"
		       PRIu64 "; ignored", off);
		return;
	}
	int join_prev = lo > 0 && cm->free[lo - 1].off + cm->free[lo - 1].len == off;
	int join_next = lo < cm->nfree && off + len == cm->free[lo].off;

	if (join_prev && join_next) {
		cm->free[lo - 1].len += len + cm->free[lo].len;
		memmove(&cm->free[lo], &cm->free[lo + 1], (cm->nfree - lo - 1) * sizeof(*cm->free));
		cm->nfree--;
	} else if (join_prev) {
		cm->free[lo - 1].len += len;
	} else if (join_next) {
		cm->free[lo].off = off;
		cm->free[lo].len += len;
	} else {
		if (cm->nfree == cm->free_cap) {
			size_t cap = cm->free_cap * 2;
			struct cuda_mem_extent *f = realloc(cm->free, cap * sizeof(*f));

			if (!f) {
				/* The block stays lost until close; nothing else breaks. */
				pthread_mutex_unlock(&cm->lock);
				fg_log(cm->host, FG_LOG_ERROR, "cuda_mem: out of host memory "
				       "recording a free block of %" PRIu64 " bytes", len);
				return;
			}
			cm->free = f;
			cm->free_cap = cap;
		}
		memmove(&cm->free[lo + 1], &cm->free[lo], (cm->nfree - lo) * sizeof(*cm->free));
		cm->free[lo] = (struct cuda_mem_extent){ off, len };
		cm->nfree++;
	}
	cm->free_bytes += len;
	pthread_mutex_unlock(&cm->lock);
	r->addr = NULL;
}

/* ---- copies ---------------------------------------------------------------------------- */

static int cuda_mem_check(struct cuda_mem *cm, const struct fg_region *r, uint64_t off,
			  size_t len, const void *buf, const char *what)
{
	if (!r || !r->addr) {
		fg_error(cm->host, "cuda_mem: %s on a region that is not allocated", what);
		return -EINVAL;
	}
	if (off > r->size || len > r->size - off) {
		fg_error(cm->host, "cuda_mem: %s of %zu bytes at offset %" PRIu64 " is outside the %"
			 PRIu64 "-byte region", what, len, off, r->size);
		return -EINVAL;
	}
	if (len && !buf) {
		fg_error(cm->host, "cuda_mem: %s of %zu bytes with a NULL buffer", what, len);
		return -EINVAL;
	}
	return 0;
}

static int cuda_mem_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst,
			 size_t len)
{
	struct cuda_mem *cm = ctx;
	int rc = cuda_mem_check(cm, r, off, len, dst, "read");
	cudaError_t e;

	if (rc || !len)
		return rc;
	if ((e = cudaSetDevice(cm->device)) != cudaSuccess ||
	    (e = cudaMemcpy(dst, (const uint8_t *)r->addr + off, len, cudaMemcpyDeviceToHost)) !=
		    cudaSuccess)
		return cuda_mem_fail(cm, "read (cudaMemcpy device to host)", e);
	return 0;
}

static int cuda_mem_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
			  size_t len)
{
	struct cuda_mem *cm = ctx;
	int rc = cuda_mem_check(cm, r, off, len, src, "write");
	cudaError_t e;

	if (rc || !len)
		return rc;
	if ((e = cudaSetDevice(cm->device)) != cudaSuccess ||
	    (e = cudaMemcpy((uint8_t *)r->addr + off, src, len, cudaMemcpyHostToDevice)) !=
		    cudaSuccess)
		return cuda_mem_fail(cm, "write (cudaMemcpy host to device)", e);
	return 0;
}

/* Room for n more requests in the ring and n idle events (lock held). */
static int cuda_mem_reserve(struct cuda_mem *cm, size_t n)
{
	cudaError_t e;

	if (cm->q_len + n > cm->q_cap) {
		size_t cap = cm->q_cap ? cm->q_cap : 64;
		struct cuda_mem_req *q;

		while (cap < cm->q_len + n)
			cap *= 2;
		q = malloc(cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		for (size_t i = 0; i < cm->q_len; i++)
			q[i] = cm->q[(cm->q_head + i) % cm->q_cap];
		free(cm->q);
		cm->q = q;
		cm->q_cap = cap;
		cm->q_head = 0;
	}
	/* Events in flight come back to evs[] when reaped: it must hold them all. */
	size_t total = cm->ev_total + (n > cm->nev ? n - cm->nev : 0);

	if (cm->ev_cap < total) {
		size_t cap = cm->ev_cap ? cm->ev_cap : 64;
		cudaEvent_t *evs;

		while (cap < total)
			cap *= 2;
		evs = realloc(cm->evs, cap * sizeof(*evs));
		if (!evs)
			return -ENOMEM;
		cm->evs = evs;
		cm->ev_cap = cap;
	}
	while (cm->nev < n) {
		e = cudaEventCreateWithFlags(&cm->evs[cm->nev], cudaEventDisableTiming);
		if (e != cudaSuccess)
			return cuda_mem_fail(cm, "cudaEventCreate", e);
		cm->nev++;
		cm->ev_total++;
	}
	return 0;
}

static int cuda_mem_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct cuda_mem *cm = ctx;
	cudaError_t e;
	unsigned i;
	int rc;

	if (!n)
		return 0;
	if (!ios) {
		fg_error(cm->host, "cuda_mem: submit of %u requests with a NULL array", n);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		const struct fg_io *io = ios[i];

		if (!io) {
			fg_error(cm->host, "cuda_mem: submit: request %u is NULL", i);
			return -EINVAL;
		}
		if (io->op != FG_IO_READ && io->op != FG_IO_WRITE) {
			fg_error(cm->host, "cuda_mem: submit: request %u has unknown op %d", i,
				 (int)io->op);
			return -EINVAL;
		}
		rc = cuda_mem_check(cm, io->region, io->offset, io->len, io->buf,
				    io->op == FG_IO_READ ? "read" : "write");
		if (rc)
			return rc;
	}
	if ((e = cudaSetDevice(cm->device)) != cudaSuccess)
		return cuda_mem_fail(cm, "cudaSetDevice", e);
	pthread_mutex_lock(&cm->lock);
	if ((rc = cuda_mem_reserve(cm, n))) {
		pthread_mutex_unlock(&cm->lock);
		if (rc == -ENOMEM)
			fg_error(cm->host, "cuda_mem: out of host memory queueing %u requests", n);
		return rc;
	}
	for (i = 0; i < n; i++) {
		struct fg_io *io = ios[i];
		struct cuda_mem_req *rq = &cm->q[(cm->q_head + cm->q_len) % cm->q_cap];
		uint8_t *dev = (uint8_t *)io->region->addr + io->offset;
		cudaStream_t s = io->op == FG_IO_READ ? cm->d2h : cm->h2d;

		rq->io = io;
		rq->ev = NULL;
		io->result = 0;
		if (io->len) {
			e = io->op == FG_IO_READ
				    ? cudaMemcpyAsync(io->buf, dev, io->len, cudaMemcpyDeviceToHost, s)
				    : cudaMemcpyAsync(dev, io->buf, io->len, cudaMemcpyHostToDevice, s);
			if (e == cudaSuccess) {
				rq->ev = cm->evs[--cm->nev];
				e = cudaEventRecord(rq->ev, s);
				if (e != cudaSuccess) {
					/* Without its event the copy is waited for here. */
					cm->evs[cm->nev++] = rq->ev;
					rq->ev = NULL;
					e = cudaStreamSynchronize(s);
				}
			}
			if (e != cudaSuccess) {
				if (i == 0) {
					pthread_mutex_unlock(&cm->lock);
					return cuda_mem_fail(cm, "submit (cudaMemcpyAsync)", e);
				}
				/* Later requests still complete exactly once, as failures. */
				fg_log(cm->host, FG_LOG_ERROR, "cuda_mem: submit: request %u failed: %s",
				       i, cudaGetErrorString(e));
				(void)cudaGetLastError();
				io->result = -EIO;
			}
		}
		cm->q_len++;
	}
	pthread_mutex_unlock(&cm->lock);
	return 0;
}

/* Move every completed request (up to max) from the queue to done[] (lock held). */
static unsigned cuda_mem_collect(struct cuda_mem *cm, struct fg_io **done, unsigned got,
				 unsigned max)
{
	size_t i = 0;

	while (i < cm->q_len && got < max) {
		size_t at = (cm->q_head + i) % cm->q_cap;
		struct cuda_mem_req *rq = &cm->q[at];
		cudaError_t e = rq->ev ? cudaEventQuery(rq->ev) : cudaSuccess;

		if (e == cudaErrorNotReady) {
			i++;
			continue;
		}
		if (e != cudaSuccess) {
			rq->io->result = -EIO;
			fg_log(cm->host, FG_LOG_ERROR, "cuda_mem: a copy failed: %s",
			       cudaGetErrorString(e));
			(void)cudaGetLastError();
		}
		if (rq->ev)
			cm->evs[cm->nev++] = rq->ev;
		done[got++] = rq->io;
		/* Close the gap: shift the requests before it one slot up. */
		for (size_t j = i; j > 0; j--)
			cm->q[(cm->q_head + j) % cm->q_cap] = cm->q[(cm->q_head + j - 1) % cm->q_cap];
		cm->q_head = (cm->q_head + 1) % cm->q_cap;
		cm->q_len--;
	}
	return got;
}

static int cuda_mem_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct cuda_mem *cm = ctx;
	unsigned got = 0;
	cudaError_t e;

	if (min > max || (max && !done)) {
		fg_error(cm->host, "cuda_mem: reap with min %u > max %u or a NULL array", min, max);
		return -EINVAL;
	}
	if ((e = cudaSetDevice(cm->device)) != cudaSuccess)
		return cuda_mem_fail(cm, "cudaSetDevice", e);
	pthread_mutex_lock(&cm->lock);
	if (min > got + cm->q_len) {
		unsigned have = (unsigned)cm->q_len;

		pthread_mutex_unlock(&cm->lock);
		fg_error(cm->host, "cuda_mem: reap waits for %u requests but only %u are in flight",
			 min, have);
		return -EINVAL;
	}
	for (;;) {
		got = cuda_mem_collect(cm, done, got, max);
		if (got >= min || cm->q_len == 0)
			break;
		/* Wait for the oldest, without holding the lock. */
		cudaEvent_t ev = cm->q[cm->q_head].ev;

		if (!ev)
			continue;
		pthread_mutex_unlock(&cm->lock);
		(void)cudaEventSynchronize(ev); /* its status is read by the next collect */
		pthread_mutex_lock(&cm->lock);
	}
	pthread_mutex_unlock(&cm->lock);
	return (int)got;
}

static const struct fg_storage_ops cuda_mem_ops = {
	.open	= cuda_mem_open,
	.close	= cuda_mem_close,
	.alloc	= cuda_mem_alloc,
	.free	= cuda_mem_free,
	.read	= cuda_mem_read,
	.write	= cuda_mem_write,
	.submit	= cuda_mem_submit,
	.reap	= cuda_mem_reap,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "cuda_mem",
	.description	= "GPU memory tier: one cudaMalloc pool, sub-allocated; async copies on "
			  "dedicated streams",
	.probe		= cuda_mem_probe,
	.ops		= &cuda_mem_ops,
	.options	= cuda_mem_options,
	.opts_size	= sizeof(struct cuda_mem_opts),
	.capabilities	= "device,async",
};
