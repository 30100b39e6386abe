/* plugins/transport/mpi.c - the mpi transport: MPI point-to-point messages
 * in host memory (Open MPI from the distribution; any MPI 3 library), and in
 * GPU memory when the library is CUDA-aware (asked at run time). */
#include <stdio.h>
#include <string.h>

#include <fgcore/plugin.h>
#include <fgcore/transport.h>

#include "plugins/transport/mpi_p2p.h"

static int mpi_open(const struct fg_host *host, const void *opts, void **ctx,
		    struct fg_transport_info *info)
{
	(void)opts;
	int rc;

	*ctx = (void *)host;
	info->mem = FG_TRANSPORT_HOST;
	if ((rc = mpi_p2p_open(host, info)))
		return rc;
	if (mpi_p2p_cuda_aware()) {
		size_t n = strlen(info->library);
		info->mem |= FG_TRANSPORT_DEVICE_SYNC;
		snprintf(info->library + n, sizeof(info->library) - n, ", CUDA-aware");
	}
	return 0;
}

static void mpi_close(void *ctx)
{
	(void)ctx;
	mpi_p2p_close();
}

static int mpi_isend(void *ctx, int peer, int tag, const void *buf, size_t len, unsigned mem,
		     void *stream, void **req)
{
	(void)mem;
	(void)stream;
	return mpi_p2p_isend(ctx, peer, tag, buf, len, req);
}

static int mpi_irecv(void *ctx, int peer, int tag, void *buf, size_t len, unsigned mem,
		     void *stream, void **req)
{
	(void)mem;
	(void)stream;
	return mpi_p2p_irecv(ctx, peer, tag, buf, len, req);
}

static int mpi_test(void *ctx, void *req)
{
	return mpi_p2p_test(ctx, req);
}

static void mpi_cancel(void *ctx, void *req)
{
	(void)ctx;
	mpi_p2p_cancel(req);
}

static void mpi_abort(void *ctx, int code)
{
	(void)ctx;
	mpi_p2p_abort(code);
}

static const struct fg_transport_ops mpi_ops = {
	.open	= mpi_open,
	.close	= mpi_close,
	.isend	= mpi_isend,
	.irecv	= mpi_irecv,
	.test	= mpi_test,
	.cancel	= mpi_cancel,
	.abort	= mpi_abort,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_TRANSPORT_ABI_VERSION,
	.kind		= FG_PLUGIN_TRANSPORT,
	.name		= "mpi",
	.description	= "MPI point-to-point messages between pipeline stages: host memory, and GPU memory with a CUDA-aware MPI",
	.ops		= &mpi_ops,
	.capabilities	= "host,device_when_cuda_aware",
};
