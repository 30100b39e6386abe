# plugins/transport: messages between pipeline stages (mpirun -np N fgcore ...).
# Only these modules link MPI (and NCCL): a single process never loads them.
noinst_HEADERS += plugins/transport/mpi_p2p.h
EXTRA_DIST += plugins/transport/mpi.c plugins/transport/mpi_p2p.c plugins/transport/nccl.c

if HAVE_MPI
pkglib_LTLIBRARIES += plugins/transport/mpi.la
plugins_transport_mpi_la_SOURCES = plugins/transport/mpi.c plugins/transport/mpi_p2p.c
plugins_transport_mpi_la_CFLAGS = $(PLUGIN_CFLAGS) $(MPI_CFLAGS)
plugins_transport_mpi_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_transport_mpi_la_LIBADD = $(MPI_LIBS) $(DL_LIBS)
endif

if HAVE_NCCL
pkglib_LTLIBRARIES += plugins/transport/nccl.la
plugins_transport_nccl_la_SOURCES = plugins/transport/nccl.c plugins/transport/mpi_p2p.c
plugins_transport_nccl_la_CFLAGS = $(PLUGIN_CFLAGS) $(MPI_CFLAGS) $(CUDA_CFLAGS)
plugins_transport_nccl_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_transport_nccl_la_LIBADD = $(MPI_LIBS) $(CUDA_LIBS) -lnccl $(DL_LIBS)
endif
