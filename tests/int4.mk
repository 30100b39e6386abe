# tests/int4.mk - the int4_group64 codec: layout, error bound, non-finite values, NMSE.
check_PROGRAMS += tests/test_int4_codec
TESTS += tests/test_int4_codec

tests_test_int4_codec_SOURCES = tests/test_int4_codec.c
tests_test_int4_codec_CFLAGS = $(TEST_CFLAGS) $(PTHREAD_LIBS)
tests_test_int4_codec_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
