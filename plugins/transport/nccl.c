/* plugins/transport/nccl.c - the nccl transport: activations between GPUs
 * with NCCL send/recv, ordered on the compute backend's stream; host-memory
 * messages (commands, tokens) and the communicator's bootstrap over MPI.
 *
 * A request for a device transfer is a CUDA event recorded on the stream
 * right after the NCCL call; `test` polls it, and NCCL's asynchronous error
 * of the communicator, so a dead peer is reported rather than waited on.
 * NCCL refuses two ranks of one communicator on one GPU: each rank needs
 * its own device (option `device`, which must equal [compute] device). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <fgcore/plugin.h>
#include <fgcore/transport.h>

#include "plugins/transport/mpi_p2p.h"

struct nccl_opts {
	int64_t device;
};

struct nccl_ctx {
	const struct fg_host *host;
	ncclComm_t comm;
	int device;
};

/* A request: MPI's (host) or an event after an NCCL call (device). */
struct nccl_req {
	int device;
	cudaEvent_t done;
	void *mpi;
};

static const struct fg_option nccl_options[] = {
	{ .key = "device", .type = FG_OPT_INT, .def = "0",
	  .help = "CUDA device of this rank (the same as [compute] device); NCCL needs one GPU per rank.",
	  .offset = offsetof(struct nccl_opts, device), .min = 0, .max = 1023 },
	{ .key = NULL },
};

static int nccl_fail(const struct fg_host *host, const char *what, ncclResult_t r)
{
	fg_error(host, "%s: %s", what, ncclGetErrorString(r));
	return -EIO;
}

static int cuda_fail(const struct fg_host *host, const char *what, cudaError_t e)
{
	fg_error(host, "%s: %s", what, cudaGetErrorString(e));
	return -EIO;
}

/* Usable only with a GPU: without one (no driver, no device, CUDA_VISIBLE_DEVICES
 * hiding them all) the CUDA runtime counts none, or fails to count.  The
 * runtime itself is linked: where it is missing the plugin does not load. */
static int nccl_probe(const struct fg_host *host)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n < 1) {
		char why[256];

		if (e != cudaSuccess)
			(void)cudaGetLastError(); /* clear it */
		snprintf(why, sizeof(why), "nccl: no CUDA device (%s%s): NCCL moves data between GPUs; "
			 "on a machine without one use [distributed] transport = mpi",
			 e != cudaSuccess ? "cudaGetDeviceCount: " : "cudaGetDeviceCount found 0",
			 e != cudaSuccess ? cudaGetErrorString(e) : "");
		fg_error(host, "%s", why);
		fg_log(host, FG_LOG_INFO, "%s", why);
		return 0;
	}
	return 1;
}

static int nccl_open(const struct fg_host *host, const void *opts, void **out,
		     struct fg_transport_info *info)
{
	const struct nccl_opts *o = opts;
	struct nccl_ctx *c = calloc(1, sizeof(*c));
	ncclUniqueId id;
	ncclResult_t r;
	cudaError_t e;
	int rc, ver = 0;

	if (!c) {
		fg_error(host, "out of memory");
		return -ENOMEM;
	}
	c->host = host;
	c->device = (int)o->device;
	if ((rc = mpi_p2p_open(host, info)))
		goto fail;
	if ((e = cudaSetDevice(c->device)) != cudaSuccess) {
		rc = cuda_fail(host, "cudaSetDevice", e);
		goto fail;
	}
	if (info->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
		rc = nccl_fail(host, "ncclGetUniqueId", r);
		goto fail;
	}
	if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
		fg_error(host, "MPI_Bcast of the NCCL id failed");
		rc = -EIO;
		goto fail;
	}
	if ((r = ncclCommInitRank(&c->comm, info->size, id, info->rank)) != ncclSuccess) {
		rc = nccl_fail(host, "ncclCommInitRank (one GPU per rank: set device)", r);
		goto fail;
	}
	ncclGetVersion(&ver);
	size_t n = strlen(info->library);
	snprintf(info->library + n, sizeof(info->library) - n, " + NCCL %d.%d.%d", ver / 10000,
		 ver / 100 % 100, ver % 100);
	info->mem = FG_TRANSPORT_HOST | FG_TRANSPORT_DEVICE;
	*out = c;
	return 0;
fail:
	free(c);
	return rc;
}

static void nccl_close(void *ctx)
{
	struct nccl_ctx *c = ctx;
	if (c->comm)
		ncclCommDestroy(c->comm);
	mpi_p2p_close();
	free(c);
}

static int nccl_start(struct nccl_ctx *c, int send, int peer, int tag, void *buf, size_t len,
		      unsigned mem, void *stream, void **req)
{
	struct nccl_req *q = calloc(1, sizeof(*q));
	ncclResult_t r;
	cudaError_t e;
	int rc;

	if (!q) {
		fg_error(c->host, "out of memory");
		return -ENOMEM;
	}
	if (!(mem & FG_TRANSPORT_DEVICE)) {
		rc = send ? mpi_p2p_isend(c->host, peer, tag, buf, len, &q->mpi)
			  : mpi_p2p_irecv(c->host, peer, tag, buf, len, &q->mpi);
		if (rc)
			free(q);
		else
			*req = q;
		return rc;
	}
	/* NCCL matches sends and receives between two ranks in issue order; the
	 * tag is the core's bookkeeping only. */
	(void)tag;
	q->device = 1;
	r = send ? ncclSend(buf, len, ncclChar, peer, c->comm, (cudaStream_t)stream)
		 : ncclRecv(buf, len, ncclChar, peer, c->comm, (cudaStream_t)stream);
	if (r != ncclSuccess) {
		free(q);
		return nccl_fail(c->host, send ? "ncclSend" : "ncclRecv", r);
	}
	if ((e = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming)) != cudaSuccess ||
	    (e = cudaEventRecord(q->done, (cudaStream_t)stream)) != cudaSuccess) {
		if (q->done)
			cudaEventDestroy(q->done);
		free(q);
		return cuda_fail(c->host, "cudaEventRecord", e);
	}
	*req = q;
	return 0;
}

static int nccl_isend(void *ctx, int peer, int tag, const void *buf, size_t len, unsigned mem,
		      void *stream, void **req)
{
	return nccl_start(ctx, 1, peer, tag, (void *)buf, len, mem, stream, req);
}

static int nccl_irecv(void *ctx, int peer, int tag, void *buf, size_t len, unsigned mem,
		      void *stream, void **req)
{
	return nccl_start(ctx, 0, peer, tag, buf, len, mem, stream, req);
}

static int nccl_test(void *ctx, void *req)
{
	struct nccl_ctx *c = ctx;
	struct nccl_req *q = req;
	ncclResult_t async = ncclSuccess;
	int rc;

	if (!q->device) {
		rc = mpi_p2p_test(c->host, q->mpi);
		if (rc)
			free(q);
		return rc;
	}
	cudaError_t e = cudaEventQuery(q->done);
	if (e == cudaErrorNotReady) {
		if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess &&
		    async != ncclInProgress) {
			cudaEventDestroy(q->done);
			free(q);
			return nccl_fail(c->host, "NCCL transfer", async);
		}
		return 0;
	}
	cudaEventDestroy(q->done);
	free(q);
	return e == cudaSuccess ? 1 : cuda_fail(c->host, "NCCL transfer", e);
}

static void nccl_cancel(void *ctx, void *req)
{
	struct nccl_ctx *c = ctx;
	struct nccl_req *q = req;

	if (q->device) {
		/* A stream-ordered transfer cannot be taken back: abort the communicator. */
		ncclCommAbort(c->comm);
		c->comm = NULL;
		cudaEventDestroy(q->done);
	} else {
		mpi_p2p_cancel(q->mpi);
	}
	free(q);
}

static void nccl_abort(void *ctx, int code)
{
	struct nccl_ctx *c = ctx;
	if (c->comm)
		ncclCommAbort(c->comm);
	mpi_p2p_abort(code);
}

static const struct fg_transport_ops nccl_ops = {
	.open	= nccl_open,
	.close	= nccl_close,
	.isend	= nccl_isend,
	.irecv	= nccl_irecv,
	.test	= nccl_test,
	.cancel	= nccl_cancel,
	.abort	= nccl_abort,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_TRANSPORT_ABI_VERSION,
	.kind		= FG_PLUGIN_TRANSPORT,
	.name		= "nccl",
	.description	= "NCCL send/recv of activations between GPUs, MPI for the rest",
	.probe		= nccl_probe,
	.ops		= &nccl_ops,
	.options	= nccl_options,
	.opts_size	= sizeof(struct nccl_opts),
	.capabilities	= "host,device",
};
