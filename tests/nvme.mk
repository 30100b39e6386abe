# tests/nvme.mk: the NVMe file tiers (io_uring_nvme, libaio_nvme), a plugin
# that was not built being skipped at run time, and the file-tier queue core
# they share, compiled in here under a scripted engine.
check_PROGRAMS += tests/test_nvme
TESTS += tests/test_nvme

tests_test_nvme_SOURCES = tests/test_nvme.c \
	plugins/storage/file_queue.c plugins/storage/file_queue.h \
	plugins/storage/file_regions.c plugins/storage/file_regions.h
tests_test_nvme_CFLAGS = $(TEST_CFLAGS)
tests_test_nvme_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
