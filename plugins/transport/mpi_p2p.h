/* plugins/transport/mpi_p2p.h - MPI point-to-point over host memory, shared
 * by the mpi transport and by nccl (which bootstraps and sends control
 * messages over MPI). */
#ifndef FG_TRANSPORT_MPI_P2P_H
#define FG_TRANSPORT_MPI_P2P_H

#include <stddef.h>

#include <fgcore/transport.h>

/* MPI_Init (once per process) and the job's rank and size. */
int mpi_p2p_open(const struct fg_host *host, struct fg_transport_info *info);
void mpi_p2p_close(void);
/* 1 when the MPI library moves GPU memory itself (CUDA-aware, asked at run
 * time), else 0. */
int mpi_p2p_cuda_aware(void);
int mpi_p2p_isend(const struct fg_host *host, int peer, int tag, const void *buf, size_t len,
		  void **req);
int mpi_p2p_irecv(const struct fg_host *host, int peer, int tag, void *buf, size_t len,
		  void **req);
int mpi_p2p_test(const struct fg_host *host, void *req);
void mpi_p2p_cancel(void *req);
void mpi_p2p_abort(int code);

#endif
