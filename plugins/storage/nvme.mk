# plugins/storage/nvme.mk: the NVMe file tiers, each built only when its
# kernel interface library is found by configure.  Both compile in the file
# tier queue core (FILE_TIER_SOURCES in local.mk, hidden there).
if HAVE_LIBURING
pkglib_LTLIBRARIES += plugins/storage/io_uring_nvme.la
plugins_storage_io_uring_nvme_la_SOURCES = plugins/storage/io_uring_nvme.c $(FILE_TIER_SOURCES)
plugins_storage_io_uring_nvme_la_CFLAGS = $(PLUGIN_CFLAGS) $(URING_CFLAGS)
plugins_storage_io_uring_nvme_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_storage_io_uring_nvme_la_LIBADD = $(URING_LIBS) $(PTHREAD_LIBS)
endif

if HAVE_LIBAIO
pkglib_LTLIBRARIES += plugins/storage/libaio_nvme.la
plugins_storage_libaio_nvme_la_SOURCES = plugins/storage/libaio_nvme.c $(FILE_TIER_SOURCES)
plugins_storage_libaio_nvme_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_storage_libaio_nvme_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_storage_libaio_nvme_la_LIBADD = $(AIO_LIBS) $(PTHREAD_LIBS)
endif
