# tests/tokenizer.mk: the GPT-2 files and tokenizer.json against the Hugging
# Face golden ids (needs FGCORE_TESTDATA), round trips and malformed files.
check_PROGRAMS += tests/test_tokenizer tests/test_tokenizer_json tests/test_decode_offsets
TESTS += tests/test_tokenizer tests/test_tokenizer_json tests/test_decode_offsets
noinst_HEADERS += tests/test_tokenizer_utf8.h

tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS) $(PTHREAD_LIBS)
tests_test_tokenizer_LDADD = $(TEST_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS)

tests_test_tokenizer_json_SOURCES = tests/test_tokenizer_json.c
tests_test_tokenizer_json_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS)
tests_test_tokenizer_json_LDADD = $(TEST_LIBS) $(JANSSON_LIBS) $(PCRE2_LIBS)

tests_test_decode_offsets_SOURCES = tests/test_decode_offsets.c
tests_test_decode_offsets_CFLAGS = $(TEST_CFLAGS)
tests_test_decode_offsets_LDADD = $(TEST_LIBS)
