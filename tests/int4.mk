# tests/int4.mk - the int4_group64 codec: layout, error bound, non-finite values, NMSE,
# and its threaded encoder (tests/int4_threads.c builds the plugin's source in).
check_PROGRAMS += tests/test_int4_codec
TESTS += tests/test_int4_codec
noinst_HEADERS += tests/int4_threads.h

tests_test_int4_codec_SOURCES = tests/test_int4_codec.c tests/int4_threads.c
tests_test_int4_codec_CFLAGS = $(TEST_CFLAGS) $(PTHREAD_LIBS)
tests_test_int4_codec_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
