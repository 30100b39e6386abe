# tests/fp8.mk - the fp8_e4m3_rows codec against a reference of its own, its layout,
# refusals and threaded encoder (tests/fp8_threads.c builds the plugin's source in).
check_PROGRAMS += tests/test_fp8_codec
TESTS += tests/test_fp8_codec
noinst_HEADERS += tests/fp8_threads.h

tests_test_fp8_codec_SOURCES = tests/test_fp8_codec.c tests/fp8_threads.c
tests_test_fp8_codec_CFLAGS = $(TEST_CFLAGS) $(PTHREAD_LIBS)
tests_test_fp8_codec_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
