/* fgcore/transport.h - the ops of a transport plugin: messages between the
 * ranks of a pipeline (one process per stage, launched by mpirun).
 *
 * A transport moves bytes between ranks and never interprets them.  Every
 * transfer is non-blocking: isend/irecv start it and hand back a request that
 * `test` polls; the core bounds every wait with its own timeout, so a
 * transport never blocks.  Messages between two ranks with one tag arrive in
 * the order they were sent.
 *
 * Buffers are host memory (FG_TRANSPORT_HOST) or, for a transport whose info
 * has FG_TRANSPORT_DEVICE, device memory (FG_TRANSPORT_DEVICE): such
 * transfers are ordered on `stream` (the compute backend's stream, a
 * cudaStream_t for cublas) like any op issued there, and complete in stream
 * order; `test` reports when they did.  A transport whose info has
 * FG_TRANSPORT_DEVICE_SYNC instead (CUDA-aware MPI) moves device memory
 * outside any stream: the caller has the bytes ready (its stream
 * synchronized) before isend, and reads a received buffer only once `test`
 * says the transfer finished.
 *
 * ABI history, in the transports' own minor (FG_TRANSPORT_ABI_MINOR below):
 *   1.2  the kind arrives (the minor every kind shared then): every member
 *        of struct fg_transport_ops below, all required.
 *   1.3 to 1.10  nothing: compute's additions moved the shared minor.
 * The next addition here is transport 1.11 and leaves the other kinds alone. */
#ifndef FGCORE_TRANSPORT_H
#define FGCORE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The transport ABI of this header: a transport plugin declares
 * `.abi_version = FG_TRANSPORT_ABI_VERSION`.  Bumped by additions to this
 * header only (and by a change to what every kind shares, fgcore/plugin.h). */
#define FG_TRANSPORT_ABI_MINOR 10
#define FG_TRANSPORT_ABI_VERSION FG_ABI(FG_ABI_MAJOR, FG_TRANSPORT_ABI_MINOR)

enum fg_transport_mem {
	FG_TRANSPORT_HOST = 1u << 0,   /* host memory */
	FG_TRANSPORT_DEVICE = 1u << 1, /* GPU memory, stream-ordered */
	FG_TRANSPORT_DEVICE_SYNC = 1u << 2, /* GPU memory, ordered by the caller */
};

struct fg_transport_info {
	int rank, size;  /* this process among `size` */
	unsigned mem;    /* enum fg_transport_mem: the buffers it moves */
	char library[96]; /* what carries the bytes, e.g. "Open MPI v4.1.4" */
};

struct fg_transport_ops {
	/* Join the job (MPI_Init and the like); fills info. */
	int (*open)(const struct fg_host *host, const void *opts, void **ctx,
		    struct fg_transport_info *info);
	/* Leave it in order (every rank calls it). */
	void (*close)(void *ctx);
	/* Start sending (receiving) len bytes to (from) rank `peer` under `tag`
	 * (0 <= tag < 32768); mem is FG_TRANSPORT_HOST, _DEVICE or _DEVICE_SYNC. */
	int (*isend)(void *ctx, int peer, int tag, const void *buf, size_t len, unsigned mem,
		     void *stream, void **req);
	int (*irecv)(void *ctx, int peer, int tag, void *buf, size_t len, unsigned mem,
		     void *stream, void **req);
	/* 1: the transfer finished and req is freed; 0: not yet; a negative errno
	 * (with an error line) when it failed, req freed too. */
	int (*test)(void *ctx, void *req);
	/* Give up on a request that will never finish (the job is stopping). */
	void (*cancel)(void *ctx, void *req);
	/* Stop every rank of the job with this exit code; does not return. */
	void (*abort)(void *ctx, int code);
};

#ifdef __cplusplus
}
#endif
#endif
