/* tests/test_tokenizer_utf8.h - a reference for "decode as Python's
 * bytes.decode('utf-8', errors='replace')": Unicode's table of well-formed
 * byte sequences (Table 3-7) and the substitution of maximal subparts,
 * written here table-driven, independently of the core's decoder. */
#ifndef TEST_TOKENIZER_UTF8_H
#define TEST_TOKENIZER_UTF8_H

#include <stdlib.h>
#include <string.h>

struct ref_utf8_row {
	unsigned char lead_lo, lead_hi, n;
	unsigned char lo[3], hi[3];	/* ranges of the following bytes */
};

static const struct ref_utf8_row ref_utf8_rows[] = {
	{ 0xC2, 0xDF, 1, { 0x80 }, { 0xBF } },
	{ 0xE0, 0xE0, 2, { 0xA0, 0x80 }, { 0xBF, 0xBF } },
	{ 0xE1, 0xEC, 2, { 0x80, 0x80 }, { 0xBF, 0xBF } },
	{ 0xED, 0xED, 2, { 0x80, 0x80 }, { 0x9F, 0xBF } },
	{ 0xEE, 0xEF, 2, { 0x80, 0x80 }, { 0xBF, 0xBF } },
	{ 0xF0, 0xF0, 3, { 0x90, 0x80, 0x80 }, { 0xBF, 0xBF, 0xBF } },
	{ 0xF1, 0xF3, 3, { 0x80, 0x80, 0x80 }, { 0xBF, 0xBF, 0xBF } },
	{ 0xF4, 0xF4, 3, { 0x80, 0x80, 0x80 }, { 0x8F, 0xBF, 0xBF } },
};

/* s[0..n) with invalid bytes replaced; *out malloc'd, NUL-terminated. */
static size_t ref_utf8_repair(const char *in, size_t n, char **out)
{
	const unsigned char *s = (const unsigned char *)in;
	char *o = malloc(3 * n + 1);
	size_t i = 0, k = 0;

	while (o && i < n) {
		const struct ref_utf8_row *r = NULL;
		size_t good = 0;

		if (s[i] < 0x80) {
			o[k++] = (char)s[i++];
			continue;
		}
		for (size_t j = 0; j < sizeof(ref_utf8_rows) / sizeof(ref_utf8_rows[0]); j++)
			if (s[i] >= ref_utf8_rows[j].lead_lo && s[i] <= ref_utf8_rows[j].lead_hi)
				r = &ref_utf8_rows[j];
		if (r)
			while (good < r->n && i + 1 + good < n && s[i + 1 + good] >= r->lo[good] &&
			       s[i + 1 + good] <= r->hi[good])
				good++;
		if (r && good == r->n) {
			memcpy(o + k, s + i, good + 1);
			k += good + 1;
			i += good + 1;
		} else {
			memcpy(o + k, "\xEF\xBF\xBD", 3);
			k += 3;
			i += 1 + good;	/* the maximal subpart: lead + valid continuation */
		}
	}
	if (o)
		o[k] = '\0';
	*out = o;
	return k;
}

#endif
