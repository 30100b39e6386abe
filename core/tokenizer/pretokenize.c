/* core/tokenizer/pretokenize.c - GPT-2's pre-tokenizer as a hand-written scanner.
 *
 * It splits text exactly as the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * does with Python's `regex` module, alternatives tried in order at each
 * position.  Code point classes come from the generated unicode_tables.c.
 * Bytes that are not valid UTF-8 count one by one as "other" code points.
 */
#include "core/tokenizer/tok_internal.h"

static const uint8_t ascii_class[128] = {
	['\t'] = FG_UC_WS, ['\n'] = FG_UC_WS, ['\v'] = FG_UC_WS, ['\f'] = FG_UC_WS,
	['\r'] = FG_UC_WS, [' '] = FG_UC_WS,
	['0'] = FG_UC_N, ['1'] = FG_UC_N, ['2'] = FG_UC_N, ['3'] = FG_UC_N, ['4'] = FG_UC_N,
	['5'] = FG_UC_N, ['6'] = FG_UC_N, ['7'] = FG_UC_N, ['8'] = FG_UC_N, ['9'] = FG_UC_N,
	['A'] = FG_UC_L, ['B'] = FG_UC_L, ['C'] = FG_UC_L, ['D'] = FG_UC_L, ['E'] = FG_UC_L,
	['F'] = FG_UC_L, ['G'] = FG_UC_L, ['H'] = FG_UC_L, ['I'] = FG_UC_L, ['J'] = FG_UC_L,
	['K'] = FG_UC_L, ['L'] = FG_UC_L, ['M'] = FG_UC_L, ['N'] = FG_UC_L, ['O'] = FG_UC_L,
	['P'] = FG_UC_L, ['Q'] = FG_UC_L, ['R'] = FG_UC_L, ['S'] = FG_UC_L, ['T'] = FG_UC_L,
	['U'] = FG_UC_L, ['V'] = FG_UC_L, ['W'] = FG_UC_L, ['X'] = FG_UC_L, ['Y'] = FG_UC_L,
	['Z'] = FG_UC_L,
	['a'] = FG_UC_L, ['b'] = FG_UC_L, ['c'] = FG_UC_L, ['d'] = FG_UC_L, ['e'] = FG_UC_L,
	['f'] = FG_UC_L, ['g'] = FG_UC_L, ['h'] = FG_UC_L, ['i'] = FG_UC_L, ['j'] = FG_UC_L,
	['k'] = FG_UC_L, ['l'] = FG_UC_L, ['m'] = FG_UC_L, ['n'] = FG_UC_L, ['o'] = FG_UC_L,
	['p'] = FG_UC_L, ['q'] = FG_UC_L, ['r'] = FG_UC_L, ['s'] = FG_UC_L, ['t'] = FG_UC_L,
	['u'] = FG_UC_L, ['v'] = FG_UC_L, ['w'] = FG_UC_L, ['x'] = FG_UC_L, ['y'] = FG_UC_L,
	['z'] = FG_UC_L,
};

enum fg_uc_class fg_uc_class_of(uint32_t cp)
{
	size_t lo = 0, hi = fg_uc_nranges;

	if (cp < 128)
		return (enum fg_uc_class)ascii_class[cp];
	/* Find the last range whose first code point is <= cp. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((fg_uc_ranges[mid].first_cls >> 2) <= cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || cp > fg_uc_ranges[lo - 1].last)
		return FG_UC_OTHER;
	return (enum fg_uc_class)(fg_uc_ranges[lo - 1].first_cls & 3);
}

static inline int is_cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

size_t fg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xBF;	/* allowed range of the second byte */
	size_t need;
	uint32_t v;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
		v = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		v = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0;	/* no overlong forms */
		else if (c == 0xED)
			hi = 0x9F;	/* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		v = c & 0x07;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;	/* nothing above U+10FFFF */
	} else {
		goto invalid;
	}
	if (len <= need || s[1] < lo || s[1] > hi)
		goto invalid;
	for (size_t i = 1; i <= need; i++) {
		if (!is_cont(s[i]))
			goto invalid;
		v = v << 6 | (s[i] & 0x3F);
	}
	*cp = v;
	return need + 1;
invalid:
	*cp = FG_UC_INVALID;
	return 1;
}

/* Class and length of the code point at s[pos]. */
static inline enum fg_uc_class class_at(const unsigned char *s, size_t len, size_t pos,
					size_t *clen)
{
	uint32_t cp;

	if (s[pos] < 0x80) {
		*clen = 1;
		return (enum fg_uc_class)ascii_class[s[pos]];
	}
	*clen = fg_utf8_next(s + pos, len - pos, &cp);
	return fg_uc_class_of(cp);
}

/* End of the run of code points of class cls starting at pos. */
static size_t run_end(const unsigned char *s, size_t len, size_t pos, enum fg_uc_class cls)
{
	while (pos < len) {
		size_t clen;

		if (class_at(s, len, pos, &clen) != cls)
			break;
		pos += clen;
	}
	return pos;
}

size_t fg_pretok_next(const char *text, size_t len, size_t pos)
{
	const unsigned char *s = (const unsigned char *)text;
	enum fg_uc_class cls;
	size_t clen, k, last;

	/* 's 't 're 've 'm 'll 'd (lower case only, as in GPT-2's pattern) */
	if (s[pos] == '\'' && pos + 1 < len) {
		unsigned char c1 = s[pos + 1];

		if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			return pos + 2;
		if (pos + 2 < len) {
			unsigned char c2 = s[pos + 2];

			if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
			    (c1 == 'l' && c2 == 'l'))
				return pos + 3;
		}
	}
	/* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a run of one class,
	 * optionally led by one space. */
	if (s[pos] == ' ' && pos + 1 < len) {
		cls = class_at(s, len, pos + 1, &clen);
		if (cls != FG_UC_WS)
			return run_end(s, len, pos + 1 + clen, cls);
	} else {
		cls = class_at(s, len, pos, &clen);
		if (cls != FG_UC_WS)
			return run_end(s, len, pos + clen, cls);
	}
	/* '\s+(?!\S)': a white-space run up to the end, or all of it but its
	 * last code point when a non-space follows; else '\s+' (one code point). */
	k = pos;
	last = pos;
	while (k < len) {
		if (class_at(s, len, k, &clen) != FG_UC_WS)
			break;
		last = k;
		k += clen;
	}
	if (k == len || last == pos)
		return k;
	return last;
}
