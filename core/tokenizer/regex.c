/* core/tokenizer/regex.c - the pre-tokenizer patterns of a tokenizer.json, on PCRE2.
 *
 * Patterns are compiled with UTF and UCP (\p{L}, \s and \w follow Unicode, as
 * in the Oniguruma engine Hugging Face uses) and MATCH_INVALID_UTF: the text
 * may hold any bytes, and bytes that are not UTF-8 match nothing, so they end
 * up in the gaps between matches.  JIT is used when the library has it.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <pcre2.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

struct fg_regex {
	pcre2_code *code;
	bool jit;
};

int fg_regex_compile(const char *pat, size_t len, bool literal, struct fg_regex **out,
		     char *msg, size_t msgsz)
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
	if (!re)
		return -ENOMEM;
	re->code = pcre2_compile((PCRE2_SPTR)pat, len, opts, &code, &erroff, NULL);
	if (!re->code) {
		pcre2_get_error_message(code, err, sizeof(err));
		snprintf(msg, msgsz, "at offset %zu: %s", (size_t)erroff, (const char *)err);
		free(re);
		return -EINVAL;
	}
	re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
	*out = re;
	return 0;
}

void fg_regex_free(struct fg_regex *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	free(re);
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
	return 0;
}

void fg_regex_scratch_free(struct fg_regex_scratch *sc)
{
	pcre2_match_data_free(sc->md);
	pcre2_match_context_free(sc->mctx);
	pcre2_jit_stack_free(sc->jit);
	memset(sc, 0, sizeof(*sc));
}

int fg_regex_next(const struct fg_regex *re, struct fg_regex_scratch *sc, const char *s,
		  size_t len, size_t pos, size_t *ms, size_t *me)
{
	int rc = scratch_init(sc);

	if (rc)
		return rc;
	while (pos < len) {
		PCRE2_SIZE *ov;
		uint32_t cp;

		rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, 0, sc->md, sc->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc < 0) {
			PCRE2_UCHAR err[160];

			pcre2_get_error_message(rc, err, sizeof(err));
			FG_ERR("tokenizer: the pre-tokenizer regex failed at byte %zu of a %zu-byte "
			       "text: %s", pos, len, (const char *)err);
			return -EINVAL;
		}
		ov = pcre2_get_ovector_pointer(sc->md);
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
