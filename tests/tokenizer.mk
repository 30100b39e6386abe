# tests/tokenizer.mk: GPT-2 BPE tokenizer against the Hugging Face golden ids
# (needs FGCORE_TESTDATA), round trips and malformed tokenizer files.
check_PROGRAMS += tests/test_tokenizer
TESTS += tests/test_tokenizer

tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS) $(PTHREAD_LIBS)
tests_test_tokenizer_LDADD = $(TEST_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS)
