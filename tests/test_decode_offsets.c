/* tests/test_decode_offsets.c - fg_tokenizer_decode_offsets against its
 * definition: chars[i] is the code points of fg_tokenizer_decode(ids[0..i)),
 * for every i.  The one-pass form (GPT-2's files, ByteLevel tokenizer.json)
 * and the prefix-by-prefix form (a SentencePiece-style decoder chain) over
 * random ids, runs of single-byte tokens that cut characters (and ill-formed
 * bytes) at every point, and ids the tokenizer does not know.  Needs
 * FGCORE_TESTDATA; skips (77) when it is unset. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_rng.h"

static const char *testdata;

static struct fg_tokenizer *load(const char *sub)
{
	char dir[PATH_MAX];
	struct fg_tokenizer *t = NULL;

	snprintf(dir, sizeof(dir), "%s/%s", testdata, sub);
	ck_assert_msg(fg_tokenizer_load_dir(dir, &t) == 0, "load %s: %s", dir, fg_last_error());
	return t;
}

/* The definition, prefix by prefix. */
static size_t chars_of_prefix(const struct fg_tokenizer *t, const int32_t *ids, size_t i)
{
	char *text;
	size_t len, c = 0;

	ck_assert_int_eq(fg_tokenizer_decode(t, ids, i, &text, &len), 0);
	for (size_t k = 0; k < len; k++)
		c += ((unsigned char)text[k] & 0xC0) != 0x80;
	free(text);
	return c;
}

static void check_ids(const struct fg_tokenizer *t, const int32_t *ids, size_t n, const char *what)
{
	size_t *chars = malloc((n + 1) * sizeof(*chars));

	ck_assert_ptr_nonnull(chars);
	ck_assert_int_eq(fg_tokenizer_decode_offsets(t, ids, n, chars), 0);
	for (size_t i = 0; i <= n; i++) {
		size_t want = chars_of_prefix(t, ids, i);
		ck_assert_msg(chars[i] == want, "%s: %zu tokens: offset %zu is %zu, decoding gives %zu",
			      what, n, i, chars[i], want);
	}
	free(chars);
}

/* Ids whose bytes are one byte at or above 0x80 (they cut characters). */
static size_t high_bytes(const struct fg_tokenizer *t, int32_t *out, size_t max)
{
	size_t n = 0, v = fg_tokenizer_vocab_size(t);

	for (size_t id = 0; id < v && n < max; id++) {
		size_t len;
		const char *b = fg_tokenizer_token_bytes(t, (int32_t)id, &len);
		if (b && len == 1 && (unsigned char)b[0] >= 0x80)
			out[n++] = (int32_t)id;
	}
	return n;
}

static void check_tokenizer(const char *sub, int unknown)
{
	struct fg_tokenizer *t = load(sub);
	size_t v = fg_tokenizer_vocab_size(t);
	int32_t hi[128], ids[96];
	size_t nh = high_bytes(t, hi, 128);

	rng_state = 0x9E3779B97F4A7C15ull;
	check_ids(t, ids, 0, sub);
	for (int round = 0; round < 60; round++) {
		size_t n = 1 + rnd() % 96;
		for (size_t i = 0; i < n; i++) {
			uint64_t kind = rnd() % 8;
			if (nh && kind < 4) /* a byte that may begin, go on or break a character */
				ids[i] = hi[rnd() % nh];
			else if (unknown && kind == 4)
				ids[i] = (int32_t)(v + rnd() % 16);
			else
				ids[i] = (int32_t)(rnd() % v);
		}
		check_ids(t, ids, n, sub);
	}
	/* A character of 2, 3 and 4 bytes cut after each of its bytes. */
	static const unsigned char chs[][4] = { { 0xC3, 0xA9 }, { 0xE2, 0x82, 0xAC },
						{ 0xF0, 0x9F, 0x98, 0x80 } };
	for (size_t c = 0; nh && c < 3; c++) {
		size_t n = 0;
		for (size_t b = 0; b < c + 2; b++)
			for (size_t k = 0; k < nh; k++) {
				size_t len;
				const char *s = fg_tokenizer_token_bytes(t, hi[k], &len);
				if ((unsigned char)s[0] == chs[c][b]) {
					ids[n++] = hi[k];
					break;
				}
			}
		if (n == c + 2)
			check_ids(t, ids, n, sub);
	}
	fg_tokenizer_free(t);
}

START_TEST(test_gpt2_files)
{
	check_tokenizer("tokenizer/gpt2", 1);
}
END_TEST

START_TEST(test_bytelevel_json)
{
	check_tokenizer("tokenizer/bytelevel-llama3", 1);
	check_tokenizer("llama/qwen3-py-128x4", 0);
}
END_TEST

START_TEST(test_sentencepiece_chain)
{
	check_tokenizer("tokenizer/spm-bpe-bytefallback", 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("decode_offsets");
	TCase *tc = tcase_create("offsets");
	SRunner *sr;
	int failed;

	testdata = getenv("FGCORE_TESTDATA");
	if (!testdata || !*testdata) {
		printf("FGCORE_TESTDATA is not set: skipping the decode offsets tests "
		       "(set it to the shared/testdata folder)\n");
		return 77;
	}
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gpt2_files);
	tcase_add_test(tc, test_bytelevel_json);
	tcase_add_test(tc, test_sentencepiece_chain);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
