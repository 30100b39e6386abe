/* core/tokenizer/regex.c - the patterns of a tokenizer.json, on PCRE2.
 *
 * Patterns are compiled with UTF and UCP (\p{L}, \s and \w follow Unicode, as
 * in the Oniguruma engine Hugging Face uses) and MATCH_INVALID_UTF: the text
 * may hold any bytes, and bytes that are not UTF-8 match nothing, so they end
 * up in the gaps between matches.  JIT is used when the library has it.
 *
 * The work per text is bounded.  PCRE2's limits count backtracking, not the
 * bytes that a repeat or a look-ahead scans, so \w(?=\w*$) rescans the rest
 * of the text from every position (O(n^2)) within them.  So a search sees a
 * window of the text with PCRE2_PARTIAL_HARD: a complete result never needed
 * a byte past the window's end, so it is the result on the whole text; a
 * search that reaches the end ("partial") is retried anchored where that
 * attempt began, over windows that double, and those windows are charged to
 * the scratch's budget: a constant per text (per scratch) plus what the
 * callers give in proportion to the bytes they scan (fg_regex_allow).  A
 * first search costs at most its window per byte it moves on, and the match
 * limit grows with the window, so one text's work is linear in its length.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <pcre2.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

/* The first window of a search: longer than nearly all pre-tokens. */
#define RX_WINDOW		64u
/* Backtracking allowed per call: a base plus so much per byte of window. */
#define RX_FRAMES_BASE		1000u
#define RX_FRAMES_PER_BYTE	16u

struct fg_regex {
	pcre2_code *code;
	pcre2_code *anchored;	/* the same, anchored (retries) */
	bool jit;
	char *where;	/* "file: JSON path", for errors */
};

int fg_regex_compile(const char *pat, size_t len, bool literal, const char *where,
		     struct fg_regex **out, char *msg, size_t msgsz)
{
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
	PCRE2_UCHAR err[160];
	PCRE2_SIZE erroff;
	struct fg_regex *re;
	int code;

	*out = NULL;
	if (literal)
		opts = (opts & ~(uint32_t)PCRE2_UCP) | PCRE2_LITERAL;	/* UCP is refused there */
	re = calloc(1, sizeof(*re));
	if (!re || !(re->where = strdup(where ? where : "tokenizer"))) {
		free(re);
		return -ENOMEM;
	}
	re->code = pcre2_compile((PCRE2_SPTR)pat, len, opts, &code, &erroff, NULL);
	if (!re->code) {
		pcre2_get_error_message(code, err, sizeof(err));
		snprintf(msg, msgsz, "at offset %zu: %s", (size_t)erroff, (const char *)err);
		fg_regex_free(re);
		return -EINVAL;
	}
	re->anchored = pcre2_compile((PCRE2_SPTR)pat, len, opts | PCRE2_ANCHORED, &code, &erroff,
				     NULL);
	if (!re->anchored) {
		fg_regex_free(re);
		return -ENOMEM;
	}
	re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0 &&
		  pcre2_jit_compile(re->anchored, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
	*out = re;
	return 0;
}

void fg_regex_free(struct fg_regex *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	pcre2_code_free(re->anchored);
	free(re->where);
	free(re);
}

size_t fg_regex_min_length(const struct fg_regex *re)
{
	uint32_t n = 0;

	/* In characters, each at least one byte. */
	pcre2_pattern_info(re->code, PCRE2_INFO_MINLENGTH, &n);
	return n;
}

static int scratch_init(struct fg_regex_scratch *sc)
{
	if (sc->md)
		return 0;
	sc->md = pcre2_match_data_create(1, NULL);
	sc->mctx = pcre2_match_context_create(NULL);
	/* A bigger JIT stack than the 32 KiB default: long white-space or
	 * letter runs backtrack deeply in patterns such as \s+(?!\S). */
	sc->jit = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
	if (!sc->md || !sc->mctx) {
		fg_regex_scratch_free(sc);
		return -ENOMEM;
	}
	if (sc->jit)
		pcre2_jit_stack_assign(sc->mctx, NULL, sc->jit);
	sc->budget = sc->budget > SIZE_MAX - FG_REGEX_WORK_PER_TEXT ? SIZE_MAX
								   : sc->budget + FG_REGEX_WORK_PER_TEXT;
	return 0;
}

void fg_regex_scratch_free(struct fg_regex_scratch *sc)
{
	pcre2_match_data_free(sc->md);
	pcre2_match_context_free(sc->mctx);
	pcre2_jit_stack_free(sc->jit);
	memset(sc, 0, sizeof(*sc));
}

void fg_regex_allow(struct fg_regex_scratch *sc, size_t len)
{
	/* Nothing per scan: a scan shorter than the first window never
	 * escalates, and a longer one's windows stop at its end. */
	size_t more = len > SIZE_MAX / FG_REGEX_WORK_PER_BYTE ? SIZE_MAX
							       : len * FG_REGEX_WORK_PER_BYTE;

	sc->budget = more > SIZE_MAX - sc->budget ? SIZE_MAX : sc->budget + more;
}

/* A window of the text: [pos, end); `final` when it is searched as if the
 * text ended there (no partial matching). */
struct win {
	size_t end;
	bool final;
};

/* The window of about w bytes from pos, never ending inside a character (a
 * cut one would read as invalid UTF-8 rather than as "more to come").
 * PCRE2's interpreter mishandles partial matching over invalid UTF-8 (it
 * takes the end of a valid stretch for the end of the text, and goes on in
 * the next stretch even when anchored), so without JIT a window stops at the
 * first invalid byte: the interpreter treats that byte as an end anyway, but
 * for "$" (PCRE2_NOTEOL), so it is searched as final there. */
static struct win window(const struct fg_regex *re, const struct fg_regex_scratch *sc,
			 const char *s, size_t len, size_t pos, size_t w)
{
	struct win v = { .end = len - pos > w ? pos + w : len };
	const unsigned char *u = (const unsigned char *)s;
	uint32_t cp;

	for (int k = 0; k < 3 && v.end < len && (u[v.end] & 0xC0) == 0x80; k++)
		v.end++;
	v.final = v.end == len;
	if (re->jit && !sc->no_jit)
		return v;
	for (size_t k = pos; k < v.end;) {
		size_t n = fg_utf8_next(u + k, len - k, &cp);

		if (cp == FG_UC_INVALID) {
			v.end = k;	/* pos itself when it is an invalid byte */
			v.final = true;
			break;
		}
		k += n;
	}
	return v;
}

/* One pcre2_match over the window from pos, with a match limit that grows
 * with the window. */
static int search(const struct fg_regex *re, struct fg_regex_scratch *sc, const char *s,
		  size_t len, size_t pos, struct win v, bool anchored)
{
	size_t w = v.end - pos;
	uint32_t opts = sc->no_jit || !re->jit ? PCRE2_NO_JIT : 0;	/* one engine throughout */

	if (!v.final)
		opts |= PCRE2_PARTIAL_HARD;
	else if (v.end < len)
		opts |= PCRE2_NOTEOL;
	pcre2_set_match_limit(sc->mctx, w > (UINT32_MAX - RX_FRAMES_BASE) / RX_FRAMES_PER_BYTE
					? UINT32_MAX
					: (uint32_t)(RX_FRAMES_BASE + w * RX_FRAMES_PER_BYTE));
	return pcre2_match(anchored ? re->anchored : re->code, (PCRE2_SPTR)s, v.end, pos, opts,
			   sc->md, sc->mctx);
}

static int failed(const struct fg_regex *re, int rc, size_t pos, size_t len)
{
	PCRE2_UCHAR err[160];

	pcre2_get_error_message(rc, err, sizeof(err));
	FG_ERR("%s: the pattern failed at byte %zu of a %zu-byte text (PCRE2: %s): fix the "
	       "pattern in the tokenizer.json", re->where, pos, len, (const char *)err);
	return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
}

/* The attempt at `at` read past the `seen` bytes it was shown: retry it
 * alone over windows that double, each charged to the budget.  1 and the
 * match in the ovector, 0 when there is none at `at`, or an error. */
static int anchored(const struct fg_regex *re, struct fg_regex_scratch *sc, const char *s,
		    size_t len, size_t at, size_t seen)
{
	size_t w = seen > RX_WINDOW ? seen : RX_WINDOW;

	for (;;) {
		struct win v;
		int rc;

		w = w > SIZE_MAX / 2 ? SIZE_MAX : w * 2;
		v = window(re, sc, s, len, at, w);
		if (v.end - at > sc->budget) {
			FG_ERR("%s: the pattern reads ahead too far from too many places in a "
			       "%zu-byte text (at byte %zu the look-ahead allowed, %u bytes per "
			       "byte of text and %u MiB, is used up): its time would grow with "
			       "the square of the text's length; fix the pattern in the "
			       "tokenizer.json", re->where, len, at, FG_REGEX_WORK_PER_BYTE,
			       FG_REGEX_WORK_PER_TEXT >> 20);
			return -EINVAL;
		}
		sc->budget -= v.end - at;
		rc = search(re, sc, s, len, at, v, true);
		if (rc == PCRE2_ERROR_PARTIAL)
			continue;
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		return rc < 0 ? failed(re, rc, at, len) : 1;
	}
}

int fg_regex_next(const struct fg_regex *re, struct fg_regex_scratch *sc, const char *s,
		  size_t len, size_t pos, size_t *ms, size_t *me)
{
	size_t w0 = sc->window ? sc->window : RX_WINDOW;
	int rc = scratch_init(sc);

	if (rc)
		return rc;
	while (pos < len) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
		struct win v = window(re, sc, s, len, pos, w0);
		size_t at;
		uint32_t cp;

		if (v.end == pos) {
			pos++;	/* an invalid byte: no match starts there */
			continue;
		}
		rc = search(re, sc, s, len, pos, v, false);
		if (rc == PCRE2_ERROR_NOMATCH && v.end < len) {
			pos = v.end;	/* no match starts before the window's end */
			continue;
		}
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc == PCRE2_ERROR_PARTIAL) {
			/* The attempts before this one failed inside the window. */
			at = ov[0] < pos ? pos : ov[0] > v.end ? v.end : ov[0];
			rc = anchored(re, sc, s, len, at, v.end - at);
			if (rc < 0)
				return rc;
			if (rc == 0) {
				if (at >= len)
					return 0;
				pos = at + fg_utf8_next((const unsigned char *)s + at, len - at, &cp);
				continue;
			}
		} else if (rc < 0) {
			return failed(re, rc, pos, len);
		} else if (v.end < len && ov[0] >= v.end) {
			pos = v.end;	/* an empty match where the window cut the text */
			continue;
		}
		if (ov[1] > ov[0]) {
			*ms = ov[0];
			*me = ov[1];
			return 1;
		}
		/* An empty match yields no piece; search on from the next character. */
		if (ov[0] >= len)
			return 0;
		pos = ov[0] + fg_utf8_next((const unsigned char *)s + ov[0], len - ov[0], &cp);
	}
	return 0;
}
