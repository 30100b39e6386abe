# tests/nvme.mk: the queue-driven NVMe file tiers (io_uring_nvme, libaio_nvme);
# a plugin that was not built is skipped at run time.
check_PROGRAMS += tests/test_nvme
TESTS += tests/test_nvme

tests_test_nvme_SOURCES = tests/test_nvme.c
tests_test_nvme_CFLAGS = $(TEST_CFLAGS)
tests_test_nvme_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
