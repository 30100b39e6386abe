/* tests/test_utf8_repair.c - cli/utf8.c: ill-formed UTF-8 becomes U+FFFD as
 * Python's bytes.decode("utf-8", "replace") does it (the expected strings were
 * produced by CPython 3, one U+FFFD per maximal subpart), and whatever the
 * bytes, jansson (an independent validator) accepts the result. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/util/utf8.h"
#include "tests/test_rng.h"

static const struct {
	const char *in;
	size_t len;
	const char *want;
} cases[] = {
	{ "\x70\x6c\x61\x69\x6e\x20\x61\x73\x63\x69\x69", 11, "\x70\x6c\x61\x69\x6e\x20\x61\x73\x63\x69\x69" },
	{ "\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x82\xac\x20\xf0\x9f\x98\x80", 15, "\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x82\xac\x20\xf0\x9f\x98\x80" },
	{ "\xe2\x82", 2, "\xef\xbf\xbd" },
	{ "\x61\xe2\x82", 3, "\x61\xef\xbf\xbd" },
	{ "\xe2\x82\x61", 3, "\xef\xbf\xbd\x61" },
	{ "\xf0\x9f\x98", 3, "\xef\xbf\xbd" },
	{ "\xf0\x9f\x98\x80\xf0", 5, "\xf0\x9f\x98\x80\xef\xbf\xbd" },
	{ "\x80\xbf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xc1\xbf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xed\x9f\xbf", 3, "\xed\x9f\xbf" },
	{ "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xf4\x8f\xbf\xbf", 4, "\xf4\x8f\xbf\xbf" },
	{ "\xf5\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xff\xfe", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\xf0\x90\x80\x41", 4, "\xef\xbf\xbd\x41" },
	{ "\xe1\x80\xe1\x80\x80", 5, "\xef\xbf\xbd\xe1\x80\x80" },
	{ "\x78\xc3", 2, "\x78\xef\xbf\xbd" },
	{ "", 0, "" },
};

START_TEST(test_python_cases)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = fg_utf8_repair(cases[i].in, cases[i].len);

		ck_assert_ptr_nonnull(got);
		ck_assert_msg(strcmp(got, cases[i].want) == 0, "case %zu", i);
		free(got);
	}
}
END_TEST

/* Random bytes (biased toward UTF-8 lead and continuation bytes): the result
 * is valid UTF-8 to jansson; valid input comes back unchanged. */
START_TEST(test_random_bytes)
{
	static const unsigned char pick[] = { 'a', 0x80, 0x9f, 0xa0, 0xbf, 0xc2, 0xdf, 0xe0,
					      0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0xc0 };

	rng_state = 0x16a16a16a16aull;
	for (int it = 0; it < 20000; it++) {
		unsigned char buf[24];
		size_t len = rnd() % sizeof(buf);
		json_t *j;
		char *got;

		for (size_t k = 0; k < len; k++) {
			uint64_t r = rnd();
			buf[k] = r & 1 ? pick[(r >> 1) % sizeof(pick)] : (unsigned char)(1 + (r >> 8) % 255);
		}
		got = fg_utf8_repair((const char *)buf, len);
		ck_assert_ptr_nonnull(got);
		j = json_stringn((const char *)buf, len);
		if (j && memchr(buf, 0, len) == NULL)
			ck_assert_msg(strlen(got) == len && memcmp(got, buf, len) == 0,
				      "valid UTF-8 changed at iteration %d", it);
		json_decref(j);
		j = json_string(got);
		ck_assert_msg(j != NULL, "result not valid UTF-8 at iteration %d", it);
		json_decref(j);
		free(got);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("utf8_repair");
	TCase *tc = tcase_create("utf8_repair");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_python_cases);
	tcase_add_test(tc, test_random_bytes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
