# tests/compute.mk - the codec and compute backend conformance suites.
check_PROGRAMS += tests/test_codec_conformance tests/test_compute_conformance
TESTS += tests/test_codec_conformance tests/test_compute_conformance

tests_test_codec_conformance_SOURCES = tests/test_codec_conformance.c
tests_test_codec_conformance_CFLAGS = $(TEST_CFLAGS)
tests_test_codec_conformance_LDADD = $(TEST_LIBS)

tests_test_compute_conformance_SOURCES = tests/test_compute_conformance.c
tests_test_compute_conformance_CFLAGS = $(TEST_CFLAGS)
tests_test_compute_conformance_LDADD = $(TEST_LIBS)
