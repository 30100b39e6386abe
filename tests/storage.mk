# tests/storage.mk: the tier wrapper and the storage plugin conformance suite.
check_PROGRAMS += tests/test_tier tests/test_storage_conformance
TESTS += tests/test_tier tests/test_storage_conformance

tests_test_tier_SOURCES = tests/test_tier.c
tests_test_tier_CFLAGS = $(TEST_CFLAGS)
tests_test_tier_LDADD = $(TEST_LIBS)

tests_test_storage_conformance_SOURCES = tests/test_storage_conformance.c
tests_test_storage_conformance_CFLAGS = $(TEST_CFLAGS)
tests_test_storage_conformance_LDADD = $(TEST_LIBS)
