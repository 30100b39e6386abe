# plugins/storage: storage tier plugins (libtool modules, one exported symbol each).

pkglib_LTLIBRARIES += plugins/storage/pinned_host.la
plugins_storage_pinned_host_la_SOURCES = plugins/storage/pinned_host.c
plugins_storage_pinned_host_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_storage_pinned_host_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
if HAVE_CUDA
plugins_storage_pinned_host_la_CFLAGS += $(CUDA_CFLAGS) -DHAVE_CUDA
plugins_storage_pinned_host_la_LIBADD = $(CUDA_LIBS)
endif

# What every file tier compiles in (hidden there): the tier file and its
# regions, and the queue core; each plugin adds only its engine.
FILE_TIER_SOURCES = \
	plugins/storage/file_regions.c plugins/storage/file_regions.h \
	plugins/storage/file_queue.c plugins/storage/file_queue.h

pkglib_LTLIBRARIES += plugins/storage/posix_file.la
plugins_storage_posix_file_la_SOURCES = plugins/storage/posix_file.c $(FILE_TIER_SOURCES)
plugins_storage_posix_file_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_storage_posix_file_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_storage_posix_file_la_LIBADD = $(PTHREAD_LIBS)

include $(srcdir)/plugins/storage/nvme.mk

if HAVE_CUDA
# cuda_mem: GPU memory tier (H6).
pkglib_LTLIBRARIES += plugins/storage/cuda_mem.la
plugins_storage_cuda_mem_la_SOURCES = plugins/storage/cuda_mem.c
plugins_storage_cuda_mem_la_CFLAGS = $(PLUGIN_CFLAGS) $(CUDA_CFLAGS)
plugins_storage_cuda_mem_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_storage_cuda_mem_la_LIBADD = $(CUDA_LIBS) $(PTHREAD_LIBS)
endif
