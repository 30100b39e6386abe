/* cli/utf8.c - replace ill-formed UTF-8 by U+FFFD (see utf8.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/utf8.h"

/* Length of the well-formed sequence at p (at most n bytes), or 0; *sub gets
 * the maximal subpart of an ill-formed one (at least 1). */
static size_t utf8_seq(const unsigned char *p, size_t n, size_t *sub)
{
	unsigned char lo = 0x80, hi = 0xBF;
	size_t need, i;

	*sub = 1;
	if (p[0] >= 0x01 && p[0] <= 0x7F)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		need = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		need = 3;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		need = 4;
	else
		return 0; /* NUL, a continuation byte, C0, C1, F5..FF */
	/* The second byte's range excludes overlongs, surrogates and > U+10FFFF. */
	if (p[0] == 0xE0)
		lo = 0xA0;
	else if (p[0] == 0xED)
		hi = 0x9F;
	else if (p[0] == 0xF0)
		lo = 0x90;
	else if (p[0] == 0xF4)
		hi = 0x8F;
	for (i = 1; i < need; i++) {
		if (i >= n || p[i] < lo || p[i] > hi) {
			*sub = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}

char *fg_utf8_repair(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out, *o;
	size_t i = 0;

	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(3 * len + 1); /* each U+FFFD (3 bytes) stands for >= 1 byte */
	if (!out)
		return NULL;
	o = out;
	while (i < len) {
		size_t sub, k = utf8_seq(p + i, len - i, &sub);

		if (k) {
			memcpy(o, p + i, k);
			o += k;
			i += k;
		} else {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += sub;
		}
	}
	*o = '\0';
	return out;
}
