# tests/tokenizer.mk: the GPT-2 files and tokenizer.json against the Hugging
# Face golden ids (needs FGCORE_TESTDATA), round trips and malformed files;
# the Metaspace and Unigram forms against tokenizers' ids for the small files
# in tests/data/tokenizer (made by tests/reference/make_tokenizer_refs.py).
check_PROGRAMS += tests/test_tokenizer tests/test_tokenizer_json tests/test_decode_offsets \
	tests/test_tokenizer_unigram
TESTS += tests/test_tokenizer tests/test_tokenizer_json tests/test_decode_offsets \
	tests/test_tokenizer_unigram
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

tests_test_tokenizer_unigram_SOURCES = tests/test_tokenizer_unigram.c
tests_test_tokenizer_unigram_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS) \
	-DFG_TEST_SRCDIR='"$(abs_top_srcdir)"'
tests_test_tokenizer_unigram_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)
EXTRA_DIST += tests/reference/make_tokenizer_refs.py \
	tests/data/tokenizer/unigram-metaspace/tokenizer.json \
	tests/data/tokenizer/unigram-metaspace/golden.json \
	tests/data/tokenizer/unigram-bytefallback/tokenizer.json \
	tests/data/tokenizer/unigram-bytefallback/golden.json \
	tests/data/tokenizer/bpe-metaspace-legacy/tokenizer.json \
	tests/data/tokenizer/bpe-metaspace-legacy/golden.json \
	tests/data/tokenizer/bpe-metaspace-first/tokenizer.json \
	tests/data/tokenizer/bpe-metaspace-first/golden.json
