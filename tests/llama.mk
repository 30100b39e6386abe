# tests/llama.mk - the Llama family against Hugging Face's references.
check_PROGRAMS += tests/test_golden_llama
TESTS += tests/test_golden_llama
tests_test_golden_llama_SOURCES = tests/test_golden_llama.c
tests_test_golden_llama_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_golden_llama_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)
