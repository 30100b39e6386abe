/* core/util/utf8.c - well-formed UTF-8: the length of a sequence, and text
 * repaired with U+FFFD (for the tokenizer's decode and the JSON writers). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/utf8.h"

size_t fg_utf8_seq(const unsigned char *s, size_t len, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, k;

	*bad = 1;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 1;
	else if (c >= 0xE0 && c <= 0xEF)
		need = 2;
	else if (c >= 0xF0 && c <= 0xF4)
		need = 3;
	else
		return 0;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (len < 2 || s[1] < lo || s[1] > hi)
		return 0;
	for (k = 2; k <= need; k++)
		if (k >= len || (s[k] & 0xC0) != 0x80)
			break;
	if (k > need)
		return need + 1;
	*bad = k;
	return 0;
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
		size_t bad, k = p[i] ? fg_utf8_seq(p + i, len - i, &bad) : (bad = 1, 0);

		if (k) {
			memcpy(o, p + i, k);
			o += k;
			i += k;
		} else {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += bad;
		}
	}
	*o = '\0';
	return out;
}

size_t fg_utf8_chars(const char *s, size_t len)
{
	size_t c = 0;

	for (size_t i = 0; i < len; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

int fg_utf8_nul_free(char **s, size_t len)
{
	char *f;

	if (!memchr(*s, 0, len))
		return 0;
	if (!(f = fg_utf8_repair(*s, len)))
		return -ENOMEM;
	free(*s);
	*s = f;
	return 0;
}
