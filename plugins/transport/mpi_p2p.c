/* plugins/transport/mpi_p2p.c - MPI point-to-point over host memory.
 *
 * Errors come back as return codes (MPI_ERRORS_RETURN), never as MPI's own
 * abort, so the core names the rank and the transfer that failed. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI's MPIX_Query_cuda_support */
#endif
#endif

#include "plugins/transport/mpi_p2p.h"

static int mpi_p2p_error(const struct fg_host *host, const char *what, int rc)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
		snprintf(text, sizeof(text), "MPI error %d", rc);
	fg_error(host, "%s: %s", what, text);
	return -EIO;
}

/* Open MPI's own components are modules that resolve libmpi's symbols
 * globally; this plugin was opened with RTLD_LOCAL, so make libmpi global. */
static void mpi_p2p_promote(void)
{
	Dl_info di;
	if (dladdr((void *)MPI_Init, &di) && di.dli_fname)
		dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

int mpi_p2p_open(const struct fg_host *host, struct fg_transport_info *info)
{
	int inited = 0, provided, rc, len = 0;
	char version[MPI_MAX_LIBRARY_VERSION_STRING];

	int fin = 0;
	MPI_Finalized(&fin);
	if (fin) {
		fg_error(host, "MPI was finalized: a pipeline job opens one engine per process (bench --ab does not run in a pipeline)");
		return -ENOTSUP;
	}
	MPI_Initialized(&inited);
	if (!inited) {
		mpi_p2p_promote();
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
		if (rc != MPI_SUCCESS)
			return mpi_p2p_error(host, "MPI_Init_thread", rc);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &info->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &info->size);
	MPI_Get_library_version(version, &len);
	/* The first line only ("Open MPI v4.1.4, package: ..." -> up to the comma). */
	version[strcspn(version, ",\n")] = '\0';
	snprintf(info->library, sizeof(info->library), "%.*s", (int)sizeof(info->library) - 1,
		 version);
	return 0;
}

int mpi_p2p_cuda_aware(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
	/* built with CUDA support: whether this run's library has it */
	return MPIX_Query_cuda_support() == 1;
#else
	return 0;
#endif
}

void mpi_p2p_close(void)
{
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
}

static int mpi_p2p_start(const struct fg_host *host, int send, int peer, int tag, void *buf,
			 size_t len, void **req)
{
	MPI_Request *r;
	int rc;

	if (len > INT_MAX) {
		fg_error(host, "a message of %zu bytes is more than MPI's %d: use smaller GPU batches",
			 len, INT_MAX);
		return -EINVAL;
	}
	r = malloc(sizeof(*r));
	if (!r) {
		fg_error(host, "out of memory");
		return -ENOMEM;
	}
	rc = send ? MPI_Isend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r)
		  : MPI_Irecv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r);
	if (rc != MPI_SUCCESS) {
		free(r);
		return mpi_p2p_error(host, send ? "MPI_Isend" : "MPI_Irecv", rc);
	}
	*req = r;
	return 0;
}

int mpi_p2p_isend(const struct fg_host *host, int peer, int tag, const void *buf, size_t len,
		  void **req)
{
	return mpi_p2p_start(host, 1, peer, tag, (void *)buf, len, req);
}

int mpi_p2p_irecv(const struct fg_host *host, int peer, int tag, void *buf, size_t len,
		  void **req)
{
	return mpi_p2p_start(host, 0, peer, tag, buf, len, req);
}

int mpi_p2p_test(const struct fg_host *host, void *req)
{
	MPI_Request *r = req;
	MPI_Status st;
	int done = 0, rc = MPI_Test(r, &done, &st);

	if (rc != MPI_SUCCESS) {
		free(r);
		return mpi_p2p_error(host, "MPI_Test", rc);
	}
	if (done)
		free(r);
	return done;
}

void mpi_p2p_cancel(void *req)
{
	MPI_Request *r = req;
	if (*r != MPI_REQUEST_NULL) {
		MPI_Cancel(r);
		MPI_Request_free(r);
	}
	free(r);
}

void mpi_p2p_abort(int code)
{
	MPI_Abort(MPI_COMM_WORLD, code);
	_Exit(code); /* MPI_Abort does not return; if it did, stop this rank all the same */
}
