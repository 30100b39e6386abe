/* tests/test_tokenizer_json.c - Hugging Face tokenizer.json: the two BPE forms
 * of LLaMA-family checkpoints against tokenizers' own ids (golden.json),
 * random round trips, the Llama test checkpoint's prompts, decoding of
 * unknown ids and cut UTF-8, the pipeline's steps on small hand-made files,
 * and one clear line for each malformed file.
 * The reference data needs FGCORE_TESTDATA: without it only the self-contained
 * cases run, and the test reports a skip (77). */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_tmpdir.h"
#include "tests/test_tokenizer_utf8.h"

static const char *testdata;

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

static struct fg_tokenizer *load_data(const char *sub)
{
	char dir[PATH_MAX];
	struct fg_tokenizer *t = NULL;
	int rc;

	snprintf(dir, sizeof(dir), "%s/%s", testdata, sub);
	rc = fg_tokenizer_load_dir(dir, &t);
	ck_assert_msg(rc == 0, "load %s: %d %s", dir, rc, fg_last_error());
	return t;
}

static void encode_ok(const struct fg_tokenizer *t, const char *s, size_t len, int32_t **ids,
		      size_t *n)
{
	int rc = fg_tokenizer_encode(t, s, len, ids, n);

	ck_assert_msg(rc == 0, "encode: %d %s", rc, fg_last_error());
}

static char *decode_ok(const struct fg_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
	char *s;
	int rc = fg_tokenizer_decode(t, ids, n, &s, len);

	ck_assert_msg(rc == 0, "decode: %d %s", rc, fg_last_error());
	ck_assert_int_eq(s[*len], '\0');
	return s;
}

static void expect_ids(const struct fg_tokenizer *t, const char *s, size_t len,
		       const int32_t *want, size_t nwant)
{
	int32_t *ids;
	size_t n;

	encode_ok(t, s, len, &ids, &n);
	for (size_t i = 0; i < n && i < nwant; i++)
		ck_assert_msg(ids[i] == want[i], "\"%.*s\": id %zu is %d, want %d", (int)len, s, i,
			      ids[i], want[i]);
	ck_assert_msg(n == nwant, "\"%.*s\": %zu ids, want %zu", (int)len, s, n, nwant);
	free(ids);
}

#define EXPECT(t, s, ...)                                                                       \
	do {                                                                                    \
		static const int32_t w_[] = { __VA_ARGS__ };                                    \
		expect_ids(t, s, strlen(s), w_, sizeof(w_) / sizeof(w_[0]));                    \
	} while (0)

#define EXPECT_NONE(t, s) expect_ids(t, s, strlen(s), NULL, 0)

/* ---- Hugging Face's ids ---- */

static void run_golden(const char *sub, size_t min_cases)
{
	struct fg_tokenizer *t = load_data(sub);
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *g, *cases, *c;
	size_t i;

	snprintf(path, sizeof(path), "%s/%s/golden.json", testdata, sub);
	g = json_load_file(path, JSON_ALLOW_NUL, &jerr);
	ck_assert_msg(g != NULL, "%s: %s", path, jerr.text);
	cases = json_object_get(g, "cases");
	ck_assert(json_is_array(cases));
	ck_assert_uint_ge(json_array_size(cases), min_cases);
	json_array_foreach(cases, i, c) {
		json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
		const char *text = json_string_value(jt);
		size_t len = json_string_length(jt), n, k;
		int32_t *ids;
		json_t *e;

		ck_assert(text && json_is_array(jids));
		encode_ok(t, text, len, &ids, &n);
		json_array_foreach(jids, k, e) {
			ck_assert_msg(k < n, "%s case %zu: %zu ids, want %zu", sub, i, n,
				      json_array_size(jids));
			ck_assert_msg(ids[k] == json_integer_value(e),
				      "%s case %zu \"%s\": id[%zu] = %d, want %lld", sub, i, text, k,
				      ids[k], (long long)json_integer_value(e));
		}
		ck_assert_msg(n == json_array_size(jids), "%s case %zu: %zu ids, want %zu", sub, i,
			      n, json_array_size(jids));
		free(ids);
	}
	json_decref(g);
	fg_tokenizer_free(t);
}

START_TEST(test_golden_bytelevel)
{
	run_golden("tokenizer/bytelevel-llama3", 20);
}
END_TEST

START_TEST(test_golden_spm)
{
	run_golden("tokenizer/spm-bpe-bytefallback", 20);
}
END_TEST

/* The forms' roles and what the files say about bos. */
START_TEST(test_roles)
{
	struct fg_tokenizer *t = load_data("tokenizer/bytelevel-llama3");

	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 50257);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 50256);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 50256);
	/* post_processor ByteLevel, no tokenizer_config.json: nothing said */
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_UNSAID);
	fg_tokenizer_free(t);
	t = load_data("tokenizer/spm-bpe-bytefallback");
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 8000);
	ck_assert_int_eq(fg_tokenizer_unk_id(t), 0);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 1);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 2);
	ck_assert_int_eq(fg_tokenizer_pad_id(t), -1);
	/* post_processor null, no tokenizer_config.json: nothing said (the
	 * model family's default decides, not the form's) */
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_UNSAID);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- round trips ---- */

/* A random text of valid UTF-8 from pieces and random code points. */
static uint32_t cp_limit = 0x110000;

static size_t random_text(char *buf, size_t cap, bool spm)
{
	static const char *const pool[] = {
		"the", " the", " quick", "Hello", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", "'",
		"123", " 4567", ".", "!!", "?", "\xc3\xa9", "\xc3\xbc", "\xe6\x9d\xb1",
		"\xe4\xba\xac", "\xf0\x9f\x98\x80", "\xe2\x80\x8b", "\xe3\x80\x80", "\xc2\xa0",
		"e\xcc\x81", "aaaaaaaa", "x", "def f(x):\n    return x", "<0x41>", "\0", "\x01",
		"<|endoftext|>", "<s>", "</s>", "<unk>",
	};
	size_t npool = sizeof(pool) / sizeof(pool[0]) - (spm ? 4 : 0);
	size_t len = 0, target = rnd() % 300;

	while (len + 8 < cap && len < target) {
		uint64_t r = rnd();

		if (r % 5 == 0) {
			/* any scalar value but surrogates (and U+2581 "▁", which
			 * the SentencePiece form decodes as a space) */
			uint32_t cp = (uint32_t)(r >> 8) % (r % 3 ? 0x3000 : cp_limit);
			char *o = buf + len;

			if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581)
				cp = 'z';
			if (cp < 0x80) {
				*o = (char)cp;
				len += 1;
			} else if (cp < 0x800) {
				o[0] = (char)(0xC0 | cp >> 6);
				o[1] = (char)(0x80 | (cp & 0x3F));
				len += 2;
			} else if (cp < 0x10000) {
				o[0] = (char)(0xE0 | cp >> 12);
				o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
				o[2] = (char)(0x80 | (cp & 0x3F));
				len += 3;
			} else {
				o[0] = (char)(0xF0 | cp >> 18);
				o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
				o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
				o[3] = (char)(0x80 | (cp & 0x3F));
				len += 4;
			}
		} else {
			const char *p = pool[(r >> 8) % npool];
			size_t pl = p[0] ? strlen(p) : 1;

			if (len + pl >= cap)
				break;
			memcpy(buf + len, p, pl);
			len += pl;
		}
	}
	return len;
}

static void roundtrip(const char *sub, bool spm, uint64_t seed)
{
	struct fg_tokenizer *t = load_data(sub);
	char buf[2048];

	rng_state = seed;
	for (int iter = 0; iter < 2000; iter++) {
		size_t len = random_text(buf, sizeof(buf), spm), n, dlen;
		int32_t *ids;
		char *back;

		encode_ok(t, buf, len, &ids, &n);
		back = decode_ok(t, ids, n, &dlen);
		ck_assert_msg(dlen == len && !memcmp(back, buf, len),
			      "%s: round trip %d differs: \"%.*s\" -> \"%s\"", sub, iter, (int)len,
			      buf, back);
		free(back);
		free(ids);
	}
	fg_tokenizer_free(t);
}

START_TEST(test_roundtrip_bytelevel)
{
	roundtrip("tokenizer/bytelevel-llama3", false, 77);
}
END_TEST

START_TEST(test_roundtrip_spm)
{
	roundtrip("tokenizer/spm-bpe-bytefallback", true, 1234);
}
END_TEST

/* Byte-level BPE keeps any bytes: the tokens' bytes are the text, and
 * decode repairs it the way Python's errors="replace" does. */
START_TEST(test_bytelevel_invalid_utf8)
{
	struct fg_tokenizer *t = load_data("tokenizer/bytelevel-llama3");
	char buf[600];

	rng_state = 99;
	for (int iter = 0; iter < 1000; iter++) {
		size_t len = rnd() % sizeof(buf), n, dlen, o = 0, rlen;
		char *back, *want, raw[sizeof(buf)];
		int32_t *ids;

		for (size_t i = 0; i < len; i++)
			buf[i] = rnd() % 4 ? "ab \xe6\x9d\xb1\xc3"[rnd() % 7] : (char)rnd();
		encode_ok(t, buf, len, &ids, &n);
		for (size_t i = 0; i < n; i++) {
			size_t bl;
			const char *b = fg_tokenizer_token_bytes(t, ids[i], &bl);

			ck_assert_ptr_nonnull(b);
			ck_assert_uint_le(o + bl, len);
			memcpy(raw + o, b, bl);
			o += bl;
		}
		ck_assert(o == len && !memcmp(raw, buf, len));
		back = decode_ok(t, ids, n, &dlen);
		rlen = ref_utf8_repair(buf, len, &want);
		ck_assert_msg(dlen == rlen && !memcmp(back, want, rlen), "iteration %d", iter);
		free(want);
		free(back);
		free(ids);
	}
	fg_tokenizer_free(t);
}
END_TEST

/* ---- the Llama test checkpoint: its prompts give its prompt ids ---- */

START_TEST(test_llama_checkpoint)
{
	struct fg_tokenizer *t = load_data("llama/llama-py-128x4");
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *g, *texts, *rows, *masks, *jt;
	size_t i;

	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 8192);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 8191);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 8191);
	snprintf(path, sizeof(path), "%s/llama/llama-py-128x4/golden.json", testdata);
	g = json_load_file(path, 0, &jerr);
	ck_assert_msg(g != NULL, "%s: %s", path, jerr.text);
	texts = json_object_get(g, "prompt_texts");
	rows = json_object_get(g, "input_ids");
	masks = json_object_get(g, "attention_mask");
	ck_assert(json_is_array(texts) && json_array_size(texts) == 4);
	json_array_foreach(texts, i, jt) {
		json_t *row = json_array_get(rows, i), *mask = json_array_get(masks, i);
		size_t n, first = 0, dlen;
		int32_t *ids;
		char *back;

		/* Left padding, then bos, then the text's ids. */
		while (first < json_array_size(mask) &&
		       json_integer_value(json_array_get(mask, first)) == 0)
			first++;
		ck_assert_int_eq(json_integer_value(json_array_get(row, first)), 8191);
		encode_ok(t, json_string_value(jt), json_string_length(jt), &ids, &n);
		ck_assert_uint_eq(n, json_array_size(row) - first - 1);
		for (size_t k = 0; k < n; k++)
			ck_assert_msg(ids[k] == json_integer_value(json_array_get(row, first + 1 + k)),
				      "prompt %zu id %zu: %d", i, k, ids[k]);
		back = decode_ok(t, ids, n, &dlen);
		ck_assert_str_eq(back, json_string_value(jt));
		free(back);
		free(ids);
	}
	json_decref(g);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- decoding never fails ---- */

START_TEST(test_decode_unknown_and_cut)
{
	struct fg_tokenizer *t = load_data("tokenizer/bytelevel-llama3");
	int32_t ids[3] = { 15496, 50266, -5 };
	int32_t cut[2];
	size_t len;
	char *s;

	/* The model's vocabulary may be larger than the tokenizer's. */
	s = decode_ok(t, ids, 3, &len);
	ck_assert_str_eq(s, "Hello\xEF\xBF\xBD\xEF\xBF\xBD");
	free(s);
	/* Bytes E6 9D of U+6771 without the last: one U+FFFD, as Python. */
	cut[0] = t->byte_id[0xE6];
	cut[1] = t->byte_id[0x9D];
	s = decode_ok(t, cut, 2, &len);
	ck_assert_str_eq(s, "\xEF\xBF\xBD");
	free(s);
	ck_assert_ptr_nonnull(fg_tokenizer_token_bytes(t, cut[0], &len));
	ck_assert_uint_eq(len, 1);
	ck_assert_ptr_null(fg_tokenizer_token_bytes(t, 50257, &len));
	fg_tokenizer_free(t);

	t = load_data("tokenizer/spm-bpe-bytefallback");
	cut[0] = fg_tokenizer_lookup(t, "<0xE6>");
	cut[1] = fg_tokenizer_lookup(t, "<0x9D>");
	ck_assert(cut[0] > 0 && cut[1] > 0);
	/* tokenizers' ByteFallback: one U+FFFD per byte of an invalid run. */
	s = decode_ok(t, cut, 2, &len);
	ck_assert_str_eq(s, "\xEF\xBF\xBD\xEF\xBF\xBD");
	free(s);
	ids[0] = fg_tokenizer_lookup(t, "\xe2\x96\x81H");	/* "▁H" */
	ids[1] = 8000;
	ids[2] = fg_tokenizer_lookup(t, "ello");
	ck_assert(ids[0] > 0 && ids[2] > 0);
	s = decode_ok(t, ids, 3, &len);
	ck_assert_str_eq(s, "H\xEF\xBF\xBD" "ello");
	free(s);
	/* token_bytes: the raw bytes of one token, leading space included. */
	ck_assert_ptr_nonnull(fg_tokenizer_token_bytes(t, ids[0], &len));
	ck_assert(len == 2 && !memcmp(fg_tokenizer_token_bytes(t, ids[0], &len), " H", 2));
	ck_assert(fg_tokenizer_token_bytes(t, cut[0], &len)[0] == '\xE6' && len == 1);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- PCRE2 running GPT-2's pattern splits as the hand-written scanner ---- */

START_TEST(test_pcre2_matches_gpt2_scanner)
{
	static const char pat[] =
		"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
	struct fg_regex_scratch sc = { 0 };
	struct fg_regex *re;
	char msg[200], buf[2048];

	ck_assert_int_eq(fg_regex_compile(pat, strlen(pat), false, "gpt2", &re, msg, sizeof(msg)),
			 0);
	/* Below U+3000: the scanner's tables (Unicode 14) and PCRE2's may
	 * differ on characters assigned since. */
	cp_limit = 0x3000;
	rng_state = 4242;
	for (int iter = 0; iter < 2000; iter++) {
		size_t len = random_text(buf, sizeof(buf), false), pos = 0;

		fg_regex_allow(&sc, len);
		while (pos < len) {
			size_t ms, me, end = fg_pretok_next(buf, len, pos);

			ck_assert_int_eq(fg_regex_next(re, &sc, buf, len, pos, &ms, &me), 1);
			ck_assert_msg(ms == pos && me == end, "\"%.*s\" at %zu: PCRE2 [%zu, %zu), "
				      "scanner [%zu, %zu)", (int)len, buf, pos, ms, me, pos, end);
			pos = end;
		}
	}
	fg_regex_scratch_free(&sc);
	fg_regex_free(re);
}
END_TEST

/* ---- windowed matching: the same matches as one search over the text ---- */

/* Every non-empty match of pat in s by PCRE2 alone: one search after
 * another over the whole text, past empty matches one character, with its
 * JIT or its interpreter (which differ on \z before an invalid byte). */
static size_t pcre2_matches(const char *pat, const char *s, size_t len, bool no_jit,
			    size_t *out, size_t cap)
{
	pcre2_code *code;
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	PCRE2_SIZE erroff, *ov;
	size_t pos = 0, n = 0;
	uint32_t cp;
	int err;

	code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
			     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
	ck_assert(code && md);
	if (!no_jit)
		pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);	/* the interpreter where none */
	while (pos < len && n + 2 <= cap &&
	       pcre2_match(code, (PCRE2_SPTR)s, len, pos, no_jit ? PCRE2_NO_JIT : 0, md, NULL) >= 0) {
		ov = pcre2_get_ovector_pointer(md);
		if (ov[1] > ov[0]) {
			out[n++] = ov[0];
			out[n++] = ov[1];
			pos = ov[1];
		} else if (ov[0] < len) {
			pos = ov[0] + fg_utf8_next((const unsigned char *)s + ov[0], len - ov[0], &cp);
		} else {
			break;
		}
	}
	pcre2_match_data_free(md);
	pcre2_code_free(code);
	return n;
}

/* Every match of re in s, as fg_regex_next gives them with first window w,
 * with PCRE2's JIT or its interpreter. */
static size_t all_matches(const struct fg_regex *re, const char *s, size_t len, size_t w,
			  bool no_jit, size_t *out, size_t cap)
{
	struct fg_regex_scratch sc = { .window = w, .budget = SIZE_MAX, .no_jit = no_jit };
	size_t pos = 0, n = 0, ms, me;
	int rc;

	while ((rc = fg_regex_next(re, &sc, s, len, pos, &ms, &me)) == 1 && n + 2 <= cap) {
		ck_assert(ms >= pos && me > ms && me <= len);
		out[n++] = ms;
		out[n++] = me;
		pos = me;
	}
	ck_assert_msg(rc >= 0, "%s", fg_last_error());
	fg_regex_scratch_free(&sc);
	return n;
}

START_TEST(test_regex_windows)
{
	/* Look-ahead, look-behind, ends, word boundaries, empty matches,
	 * laziness, \K, back references, graphemes: each must see through a
	 * window's end exactly as through no end at all. */
	static const char *const pats[] = {
		"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
		"\\w(?=\\w*$)", "a+?", "(?<=a)b+", "\\bb\\w*", "a*", "(?=b)", "a|ab", "b(?:a|b)*?a",
		"\\z|b", "$", "(a)\\1", "a\\Kb", "(?>a+)b", "a++", "[^\\s]+$", "\\X", ".",
		"\\p{L}+\\n?", "(?<![ab])a", "\\B.", "(?:ab|a)(?=b{3})", "\\s+(?!\\S)|\\s+",
	};
	static const char *const alpha[] = {
		"a", "b", "a", "b", " ", "\n", "1", "'s", "\xc3\xa9", "e\xcc\x81", "\xe4\xb8\xad",
		"\xf0\x9f\x98\x80", "\xff", "\x80", "bbb", "aaaa",
	};
	size_t ref[1024], got[1024];
	char msg[200], s[400];

	rng_state = 77;
	for (size_t k = 0; k < sizeof(pats) / sizeof(pats[0]); k++) {
		struct fg_regex *re;

		ck_assert_int_eq(fg_regex_compile(pats[k], strlen(pats[k]), false, "test", &re, msg,
						  sizeof(msg)), 0);
		for (int iter = 0; iter < 150; iter++) {
			size_t len = 0, target = rnd() % 300, nref;

			while (len < target) {
				const char *p = alpha[rnd() % (sizeof(alpha) / sizeof(alpha[0]))];

				memcpy(s + len, p, strlen(p));
				len += strlen(p);
			}
			/* The interpreter differs from JIT at invalid bytes (\z). */
			for (int interp = 0; interp < 2; interp++) {
				nref = pcre2_matches(pats[k], s, len, interp, ref, 1024);
				for (size_t w = 1; w <= 65; w += w < 9 ? 2 : 56) {
					size_t n = all_matches(re, s, len, w, interp, got, 1024);

					ck_assert_msg(n == nref &&
						      !memcmp(ref, got, n * sizeof(*got)),
						      "pattern %s, window %zu, %s: %zu bounds, "
						      "want %zu", pats[k], w,
						      interp ? "interpreter" : "JIT", n, nref);
				}
			}
		}
		fg_regex_free(re);
	}
}
END_TEST

/* ---- small hand-made files: the steps one by one ---- */

static char dir[PATH_MAX];

static void setup(void)
{
	tmp_make("fgtokjson");
	snprintf(dir, sizeof(dir), "%s", tmp_root);
}

static const char *path_of(const char *name)
{
	static char p[2][PATH_MAX + 64];
	static int k;
	char *b = p[k++ % 2];

	snprintf(b, sizeof(p[0]), "%s/%s", dir, name);
	return b;
}

static void write_str(const char *name, const char *s)
{
	FILE *f = fopen(path_of(name), "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(s, 1, strlen(s), f), strlen(s));
	ck_assert_int_eq(fclose(f), 0);
}

/* GPT-2's byte -> character table, spelled out independently of the core. */
static void byte_char(int b, char out[3])
{
	int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
	unsigned cp = (unsigned)b;

	if (!printable) {
		cp = 0x100;
		for (int x = 0; x < b; x++)
			if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
				cp++;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = '\0';
	} else {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		out[2] = '\0';
	}
}

/* A byte-level file: ids 0..255 the bytes, then "ab" 256, "Ġab" 257, and
 * "<x>" 258 as an added token; `pre` is the pre_tokenizer JSON. */
static json_t *bytelevel_file(const char *pre)
{
	json_t *root = json_object(), *model = json_object(), *vocab = json_object();
	json_error_t jerr;
	char c[3];

	for (int b = 0; b < 256; b++) {
		byte_char(b, c);
		json_object_set_new(vocab, c, json_integer(b));
	}
	json_object_set_new(vocab, "ab", json_integer(256));
	json_object_set_new(vocab, "\xc4\xa0" "ab", json_integer(257));
	json_object_set_new(model, "type", json_string("BPE"));
	json_object_set_new(model, "vocab", vocab);
	json_object_set_new(model, "merges", json_pack("[s, [s, s]]", "a b", "\xc4\xa0", "ab"));
	json_object_set_new(root, "model", model);
	json_object_set_new(root, "pre_tokenizer", json_loads(pre, 0, &jerr));
	json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
	json_object_set_new(root, "added_tokens",
			    json_pack("[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}]", "id", 258,
				      "content", "<x>", "special", 1, "lstrip", 0, "rstrip", 0,
				      "single_word", 0, "normalized", 0));
	return root;
}

static int load_tmp(json_t *root, struct fg_tokenizer **t)
{
	ck_assert_int_eq(json_dump_file(root, path_of("tokenizer.json"), 0), 0);
	json_decref(root);
	fg_clear_error();
	*t = NULL;
	return fg_tokenizer_load_dir(dir, t);
}

#define BL_PLAIN "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"

START_TEST(test_pipeline_steps)
{
	struct fg_tokenizer *t;
	json_t *f, *tok;
	size_t len;
	char *s;

	/* NFC (Qwen2's normalizer): e + combining acute composes to U+00E9 (bytes
	 * c3 a9), invalid bytes pass through; without it the three bytes stay. */
	ck_assert_msg(load_tmp(bytelevel_file(BL_PLAIN), &t) == 0, "%s", fg_last_error());
	EXPECT(t, "e\xcc\x81", 'e', 0xcc, 0x81);
	fg_tokenizer_free(t);
	f = bytelevel_file(BL_PLAIN);
	json_object_set_new(f, "normalizer", json_pack("{ss}", "type", "NFC"));
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	EXPECT(t, "e\xcc\x81", 0xc3, 0xa9);
	EXPECT(t, "\xff" "e\xcc\x81", 0xff, 0xc3, 0xa9);
	fg_tokenizer_free(t);

	/* No regex: the whole text is one pre-token. */
	ck_assert_msg(load_tmp(bytelevel_file(BL_PLAIN), &t) == 0, "%s", fg_last_error());
	EXPECT(t, "ab ab", 256, 257);
	EXPECT(t, "ab<x>ab", 256, 258, 256);
	fg_tokenizer_free(t);
	/* GPT-2's regex and add_prefix_space. */
	ck_assert(load_tmp(bytelevel_file("{\"type\": \"ByteLevel\", \"add_prefix_space\": true}"),
			   &t) == 0);
	EXPECT(t, "ab", 257);
	EXPECT(t, "ab<x> ab", 257, 258, 257);
	fg_tokenizer_free(t);
	/* Split's behaviours (with "bb" 258 and its merge added). */
	ck_assert(load_tmp(bytelevel_file("[0]"), &t) < 0);	/* not an object */
	ck_assert(strstr(fg_last_error(), "pre_tokenizer"));
	{
		static const char *const beh[] = { "Isolated", "Removed", "MergedWithPrevious",
						    "MergedWithNext", "Contiguous" };
		char pre[400];

		for (int k = 0; k < 5; k++) {
			snprintf(pre, sizeof(pre), "{\"type\": \"Sequence\", \"pretokenizers\": ["
				 "{\"type\": \"Split\", \"pattern\": {\"String\": \"%s\"}, "
				 "\"behavior\": \"%s\", \"invert\": false}, " BL_PLAIN "]}",
				 k == 3 ? "a" : "b", beh[k]);
			f = bytelevel_file(pre);
			json_object_set_new(json_object_get(json_object_get(f, "model"), "vocab"),
					    "bb", json_integer(258));
			json_object_set_new(json_array_get(json_object_get(f, "added_tokens"), 0),
					    "id", json_integer(259));
			json_array_append_new(json_object_get(json_object_get(f, "model"), "merges"),
					      json_string("b b"));
			ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
			/* "abbab" */
			switch (k) {
			case 0: EXPECT(t, "abbab", 'a', 'b', 'b', 'a', 'b'); break;
			case 1: EXPECT(t, "abbab", 'a', 'a'); break;
			case 2: EXPECT(t, "abbab", 256, 'b', 256); break;	/* ab|b|ab */
			case 3: EXPECT(t, "abbab", 256, 'b', 256); break;	/* abb|ab */
			case 4: EXPECT(t, "abbab", 'a', 258, 'a', 'b'); break;	/* a|bb|a|b */
			}
			fg_tokenizer_free(t);
		}
		/* invert: the gaps are the matches ("a" pieces removed). */
		f = bytelevel_file("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
				   "\"Split\", \"pattern\": {\"Regex\": \"b+\"}, \"behavior\": "
				   "\"Removed\", \"invert\": true}, " BL_PLAIN "]}");
		ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
		EXPECT(t, "abbab", 'b', 'b', 'b');
		fg_tokenizer_free(t);
	}
	/* An added token's lstrip/rstrip/single_word. */
	f = bytelevel_file(BL_PLAIN);
	tok = json_array_get(json_object_get(f, "added_tokens"), 0);
	json_object_set_new(tok, "lstrip", json_true());
	json_object_set_new(tok, "rstrip", json_true());
	ck_assert(load_tmp(f, &t) == 0);
	EXPECT(t, "ab  <x>  ab", 256, 258, 256);
	fg_tokenizer_free(t);
	f = bytelevel_file(BL_PLAIN);
	tok = json_array_get(json_object_get(f, "added_tokens"), 0);
	json_object_set_new(tok, "single_word", json_true());
	ck_assert(load_tmp(f, &t) == 0);
	EXPECT(t, "ab <x> ab", 256, ' ', 258, 257);
	EXPECT(t, "ab<x>", 256, '<', 'x', '>');
	fg_tokenizer_free(t);
	/* ignore_merges: a pre-token that is a token is that token. */
	f = bytelevel_file(BL_PLAIN);
	json_object_set_new(json_object_get(f, "model"), "merges", json_array());
	ck_assert(load_tmp(f, &t) == 0);
	EXPECT(t, "ab", 'a', 'b');
	fg_tokenizer_free(t);
	f = bytelevel_file(BL_PLAIN);
	json_object_set_new(json_object_get(f, "model"), "merges", json_array());
	json_object_set_new(json_object_get(f, "model"), "ignore_merges", json_true());
	ck_assert(load_tmp(f, &t) == 0);
	EXPECT(t, "ab", 256);
	EXPECT(t, "abc", 'a', 'b', 'c');
	/* The null decoder joins tokens with spaces (as tokenizers does). */
	fg_tokenizer_free(t);
	f = bytelevel_file(BL_PLAIN);
	json_object_del(f, "decoder");
	ck_assert(load_tmp(f, &t) == 0);
	{
		int32_t ids[2] = { 'a', 256 };

		s = decode_ok(t, ids, 2, &len);
		ck_assert_str_eq(s, "a ab");
		free(s);
	}
	fg_tokenizer_free(t);
}
END_TEST

/* A pattern that rescans the rest of the text from every position is cut
 * off, in proportion to the text; real patterns' long runs are not. */
START_TEST(test_regex_budget)
{
	static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
		"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
	size_t len = 100000, pos, ms, me;
	char *s = malloc(len), msg[200];
	struct fg_regex_scratch sc = { 0 };
	struct fg_tokenizer *t;
	struct fg_regex *re;
	struct timespec a, b;
	int32_t *ids = NULL;
	size_t n;
	double secs;
	int rc;

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(fg_regex_compile(llama3, strlen(llama3), false, "llama3", &re, msg,
					  sizeof(msg)), 0);
	for (int k = 0; k < 3; k++) {
		/* one run of spaces, of letters, of punctuation: one long match each */
		memset(s, " a!"[k], len);
		fg_regex_allow(&sc, len);
		for (pos = 0; (rc = fg_regex_next(re, &sc, s, len, pos, &ms, &me)) == 1; pos = me)
			;
		ck_assert_msg(rc == 0 && pos == len, "run %d: %s", k, fg_last_error());
	}
	fg_regex_scratch_free(&sc);
	fg_regex_free(re);

	/* \w(?=\w*$) on 100 KB of letters took 13 s before the bound (O(n^2)). */
	ck_assert_int_eq(load_tmp(bytelevel_file("{\"type\": \"Sequence\", \"pretokenizers\": ["
						 "{\"type\": \"Split\", \"pattern\": {\"Regex\": "
						 "\"\\\\w(?=\\\\w*$)\"}, \"behavior\": \"Isolated\"}, "
						 BL_PLAIN "]}"), &t), 0);
	memset(s, 'a', len);
	clock_gettime(CLOCK_MONOTONIC, &a);
	rc = fg_tokenizer_encode(t, s, len, &ids, &n);
	clock_gettime(CLOCK_MONOTONIC, &b);
	secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(ids);
	ck_assert_msg(strstr(fg_last_error(), "tokenizer.json: pre_tokenizer.pretokenizers[0]: "
				 "the pattern reads ahead too far"), "%s", fg_last_error());
	ck_assert_msg(!strchr(fg_last_error(), '\n'), "%s", fg_last_error());
	printf("test_regex_budget: \\w(?=\\w*$) on %zu bytes refused in %.3f s\n", len, secs);
	/* The same pattern on words: nothing to rescan, so no refusal. */
	for (size_t i = 0; i < len; i++)
		s[i] = i % 8 == 7 ? ' ' : 'a';
	rc = fg_tokenizer_encode(t, s, len, &ids, &n);
	ck_assert_msg(rc == 0, "%s", fg_last_error());
	free(ids);
	fg_tokenizer_free(t);
	free(s);
}
END_TEST

/* A SentencePiece-style file: unk, fuse_unk, byte fallback, normalized
 * added tokens, TemplateProcessing and tokenizer_config.json. */
static json_t *spm_file(bool fallback, bool fuse)
{
	json_error_t jerr;
	json_t *root = json_loads(
		"{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
		" {\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
		" {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
		" \"pre_tokenizer\": null,"
		" \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
		"  {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
		"  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [],"
		"  \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1],"
		"   \"tokens\": [\"<s>\"]}}},"
		" \"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
		"  {\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"},"
		"  {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
		"  {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
		" \"added_tokens\": ["
		"  {\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
		"  {\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
		"  {\"id\": 9, \"content\": \"hi you\", \"special\": false, \"normalized\": true}],"
		" \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\","
		"  \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"\\u2581\": 2, \"a\": 3, \"b\": 4,"
		"   \"\\u2581a\": 5, \"<0xC3>\": 6, \"<0xA9>\": 7},"
		"  \"merges\": [\"\\u2581 a\"]}}", 0, &jerr);

	ck_assert_msg(root != NULL, "%s", jerr.text);
	json_object_set_new(json_object_get(root, "model"), "byte_fallback", json_boolean(fallback));
	json_object_set_new(json_object_get(root, "model"), "fuse_unk", json_boolean(fuse));
	return root;
}

START_TEST(test_spm_steps)
{
	struct fg_tokenizer *t;
	size_t len;
	char *s;

	ck_assert_msg(load_tmp(spm_file(true, true), &t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_ADD);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 1);
	EXPECT(t, "a b", 5, 2, 4);
	EXPECT(t, "\xc3\xa9", 2, 6, 7);		/* é by its bytes */
	EXPECT(t, "a\xc3\xb6\xc3\xb6" "b", 5, 0, 4);	/* ö ö unknown: one fused unk */
	EXPECT(t, "<s>a", 1, 5);			/* each stretch gets its ▁ */
	/* "hi you" is normalized too ("▁hi▁you") and matched in the
	 * normalized text. */
	EXPECT(t, "hi you", 9);
	EXPECT(t, "a hi you", 5, 9);
	EXPECT_NONE(t, "");
	{
		int32_t ids[4] = { 5, 2, 4, 1 };

		s = decode_ok(t, ids, 4, &len);
		ck_assert_str_eq(s, "a b<s>");
		free(s);
	}
	fg_tokenizer_free(t);
	ck_assert(load_tmp(spm_file(true, false), &t) == 0);
	EXPECT(t, "a\xc3\xb6\xc3\xb6" "b", 5, 0, 0, 4);	/* one unk each */
	fg_tokenizer_free(t);
	ck_assert(load_tmp(spm_file(false, true), &t) == 0);
	EXPECT(t, "\xc3\xa9", 2, 0);			/* no fallback: unk */
	fg_tokenizer_free(t);
	/* The template decides over tokenizer_config.json's add_bos_token, as
	 * transformers 5 does (test_bos_rule). */
	write_str("tokenizer_config.json", "{\"add_bos_token\": false, \"eos_token\": \"</s>\"}");
	ck_assert(load_tmp(spm_file(true, true), &t) == 0);
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_ADD);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 10);	/* added after the largest id */
	EXPECT(t, "a</s>", 5, 10);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- whether a text starts with bos ---- */

/* bytelevel_file with <s> 259 and </s> 260 added and `post` as its
 * post_processor. */
static json_t *bos_file(const char *post)
{
	json_t *f = bytelevel_file(BL_PLAIN), *added = json_object_get(f, "added_tokens");
	json_error_t jerr;
	json_t *pp = json_loads(post, JSON_DECODE_ANY, &jerr);

	ck_assert_msg(pp != NULL, "%s: %s", post, jerr.text);
	json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b}", "id", 259, "content", "<s>",
					       "special", 1, "normalized", 0));
	json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b}", "id", 260, "content",
					       "</s>", "special", 1, "normalized", 0));
	json_object_set_new(f, "post_processor", pp);
	return f;
}

/* TemplateProcessing with `single` and the special tokens <s> and </s>. */
#define TPL(single)                                                                     \
	"{\"type\": \"TemplateProcessing\", \"single\": [" single "], \"pair\": [],"    \
	" \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [259],"                \
	" \"tokens\": [\"<s>\"]}, \"</s>\": {\"id\": \"</s>\", \"ids\": [260],"          \
	" \"tokens\": [\"</s>\"]}}}"
#define SP(name) "{\"SpecialToken\": {\"id\": \"" name "\", \"type_id\": 0}}"
#define SEQ_A "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}"
#define POST_BL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true}"

/* The rule for `post` with tokenizer_config.json `cfg` (NULL: none). */
static enum fg_tok_bos rule_of(const char *post, const char *cfg, int32_t *bos)
{
	struct fg_tokenizer *t;
	enum fg_tok_bos r;

	if (cfg)
		write_str("tokenizer_config.json", cfg);
	else
		unlink(path_of("tokenizer_config.json"));
	ck_assert_msg(load_tmp(bos_file(post), &t) == 0, "%s: %s", post, fg_last_error());
	r = fg_tokenizer_bos_rule(t);
	*bos = fg_tokenizer_bos_id(t);
	EXPECT(t, "ab", 256);	/* encoding never adds bos: the caller does */
	fg_tokenizer_free(t);
	return r;
}

/* The same folders, rebuilt in Python, gave these with transformers 5.25
 * (AutoTokenizer.from_pretrained(dir)("ab")), but for the one marked:
 * core/tokenizer/special.c lists what was seen. */
START_TEST(test_bos_rule)
{
	int32_t bos;

	/* A template that adds bos; one that adds nothing before the text
	 * (an eos after it is not bos); one inside a Sequence. */
	ck_assert_int_eq(rule_of(TPL(SP("<s>") ", " SEQ_A), NULL, &bos), FG_TOK_BOS_ADD);
	ck_assert_int_eq(bos, 259);	/* the template's token is the bos */
	ck_assert_int_eq(rule_of(TPL(SEQ_A), NULL, &bos), FG_TOK_BOS_NONE);
	ck_assert_int_eq(rule_of(TPL(SEQ_A ", " SP("</s>")), NULL, &bos), FG_TOK_BOS_NONE);
	ck_assert_int_eq(rule_of("{\"type\": \"Sequence\", \"processors\": [" POST_BL ", "
				 TPL(SP("<s>") ", " SEQ_A) "]}", NULL, &bos), FG_TOK_BOS_ADD);
	ck_assert_int_eq(bos, 259);
	/* Nothing said: ByteLevel or no post-processor, no tokenizer_config.json. */
	ck_assert_int_eq(rule_of(POST_BL, NULL, &bos), FG_TOK_BOS_UNSAID);
	ck_assert_int_eq(rule_of("null", NULL, &bos), FG_TOK_BOS_UNSAID);
	ck_assert_int_eq(rule_of(POST_BL, "{\"bos_token\": \"<s>\"}", &bos), FG_TOK_BOS_UNSAID);
	ck_assert_int_eq(bos, 259);
	/* The template wins over add_bos_token (transformers 5 drops
	 * add_bos_token when a tokenizer.json is there). */
	ck_assert_int_eq(rule_of(TPL(SP("<s>") ", " SEQ_A), "{\"add_bos_token\": false}", &bos),
			 FG_TOK_BOS_ADD);
	ck_assert_int_eq(rule_of(TPL(SEQ_A), "{\"add_bos_token\": true, \"bos_token\": \"<s>\"}",
				 &bos), FG_TOK_BOS_NONE);
	/* No template: an explicit add_bos_token decides (for true, 5.25 adds
	 * no bos; 4.57's LlamaTokenizerFast adds it). */
	ck_assert_int_eq(rule_of(POST_BL, "{\"add_bos_token\": true, \"bos_token\": \"<s>\"}",
				 &bos), FG_TOK_BOS_ADD);
	ck_assert_int_eq(bos, 259);
	ck_assert_int_eq(rule_of("null", "{\"add_bos_token\": false, \"bos_token\": \"<s>\"}",
				 &bos), FG_TOK_BOS_NONE);
	/* ... with no bos token to add (byte-level's <|endoftext|> is absent). */
	ck_assert_int_eq(rule_of(POST_BL, "{\"add_bos_token\": true}", &bos), FG_TOK_BOS_NONE);
	ck_assert_int_eq(bos, -1);
	unlink(path_of("tokenizer_config.json"));
}
END_TEST

/* A refused folder: one line naming `file`, n1 and n2. */
static void expect_refused_in(json_t *root, const char *file, const char *n1, const char *n2)
{
	struct fg_tokenizer *t;
	const char *e;
	int rc = load_tmp(root, &t);

	e = fg_last_error();
	ck_assert_msg(rc == -EINVAL, "expected -EINVAL naming \"%s\", got %d", n1, rc);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(e, file), "error \"%s\" does not name %s", e, file);
	ck_assert_msg(strstr(e, n1), "error \"%s\" lacks \"%s\"", e, n1);
	ck_assert_msg(!n2 || strstr(e, n2), "error \"%s\" lacks \"%s\"", e, n2);
	ck_assert_msg(!strchr(e, '\n'), "error \"%s\" is not one line", e);
}

START_TEST(test_bos_rule_refused)
{
	/* add_bos_token neither true, false nor null. */
	write_str("tokenizer_config.json", "{\"add_bos_token\": \"yes\"}");
	expect_refused_in(bos_file(POST_BL), "tokenizer_config.json", "\"add_bos_token\" must be "
			  "true or false", NULL);
	write_str("tokenizer_config.json", "{\"add_bos_token\": 1}");
	expect_refused_in(bos_file(TPL(SP("<s>") ", " SEQ_A)), "tokenizer_config.json",
			  "add_bos_token", NULL);
	/* The template puts a token other than the folder's bos first. */
	write_str("tokenizer_config.json", "{\"bos_token\": \"</s>\"}");
	expect_refused_in(bos_file(TPL(SP("<s>") ", " SEQ_A)), "tokenizer.json", "post_processor",
			  "\"<s>\" (id 259) before the text, but the bos token the folder names "
			  "is \"</s>\" (id 260)");
	write_str("tokenizer_config.json", "{\"bos_token\": null}");
	expect_refused_in(bos_file(TPL(SP("<s>") ", " SEQ_A)), "tokenizer.json", "post_processor",
			  "names no bos token");
	unlink(path_of("tokenizer_config.json"));
	/* Two tokens before the text. */
	expect_refused_in(bos_file(TPL(SP("<s>") ", " SP("<s>") ", " SEQ_A)), "tokenizer.json",
			  "post_processor", "2 tokens before the text");
	/* A special token the template does not define (tokenizers panics on
	 * encoding it), ids that are not integers or not tokens. */
	expect_refused_in(bos_file(TPL(SP("<unk>") ", " SEQ_A)), "tokenizer.json",
			  "post_processor.single[0].SpecialToken", "\"<unk>\" is not in");
	expect_refused_in(bos_file("{\"type\": \"TemplateProcessing\", \"single\": [" SP("<s>")
				   "], \"special_tokens\": {\"<s>\": {\"ids\": [\"259\"]}}}"),
			  "tokenizer.json", "post_processor.single[0]", "integers");
	expect_refused_in(bos_file("{\"type\": \"TemplateProcessing\", \"single\": [" SP("<s>")
				   "], \"special_tokens\": {\"<s>\": {\"ids\": [70000]}}}"),
			  "tokenizer.json", "post_processor", "id 70000, which is not a token");
	expect_refused_in(bos_file("{\"type\": \"TemplateProcessing\", \"single\": \"<s> $A\"}"),
			  "tokenizer.json", "post_processor", "array \"single\"");
	/* Two templates. */
	expect_refused_in(bos_file("{\"type\": \"Sequence\", \"processors\": ["
				   TPL(SP("<s>") ", " SEQ_A) ", " TPL(SEQ_A) "]}"),
			  "tokenizer.json", "post_processor.processors[1]",
			  "second TemplateProcessing");
}
END_TEST

/* ---- malformed files: one clear line each ---- */

static void expect_refused(json_t *root, const char *n1, const char *n2)
{
	struct fg_tokenizer *t;
	const char *e;
	int rc = load_tmp(root, &t);

	e = fg_last_error();
	ck_assert_msg(rc < 0, "expected a refusal naming \"%s\"", n1);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(e, "tokenizer.json"), "error \"%s\" names no file", e);
	ck_assert_msg(strstr(e, n1), "error \"%s\" lacks \"%s\"", e, n1);
	ck_assert_msg(!n2 || strstr(e, n2), "error \"%s\" lacks \"%s\"", e, n2);
	ck_assert_msg(!strchr(e, '\n'), "error \"%s\" is not one line", e);
}

static json_t *with(json_t *root, const char *key, const char *json)
{
	json_error_t jerr;
	json_t *v = json_loads(json, JSON_DECODE_ANY, &jerr);

	ck_assert_msg(v != NULL, "%s: %s", json, jerr.text);
	json_object_set_new(root, key, v);
	return root;
}

static json_t *model_with(json_t *root, const char *key, const char *json)
{
	with(json_object_get(root, "model"), key, json);
	return root;
}

START_TEST(test_malformed)
{
	struct fg_tokenizer *t;
	json_t *f;

	expect_refused(model_with(spm_file(1, 1), "type", "\"WordPiece\""), "model.type",
		       "WordPiece");
	expect_refused(model_with(spm_file(1, 1), "type", "\"Word\""), "model.type",
		       "supported: BPE, Unigram");
	/* a Unigram model with a BPE's vocabulary object */
	expect_refused(model_with(spm_file(1, 1), "type", "\"Unigram\""), "model.vocab",
		       "[piece, score] pairs");
	expect_refused(with(spm_file(1, 1), "model", "[]"), "model", NULL);
	expect_refused(with(spm_file(1, 1), "pre_tokenizer",
			    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a|\\\\p{Q})\"},"
			    " \"behavior\": \"Isolated\"}"), "pre_tokenizer", "does not compile");
	expect_refused(with(spm_file(1, 1), "pre_tokenizer",
			    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"},"
			    " \"behavior\": \"Sideways\"}"), "pre_tokenizer", "Sideways");
	expect_refused(with(spm_file(1, 1), "pre_tokenizer", "{\"type\": \"Whitespace\"}"),
		       "pre_tokenizer", "Whitespace");
	expect_refused(with(spm_file(1, 1), "pre_tokenizer",
			    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"},"
			    " {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\":"
			    " \"Isolated\"}]}"), "pre_tokenizer.pretokenizers[1]", "last");
	expect_refused(with(spm_file(1, 1), "normalizer", "{\"type\": \"NFKD\"}"), "normalizer",
		       "NFKD");
	expect_refused(with(spm_file(1, 1), "normalizer",
			    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Replace\","
			    " \"pattern\": {\"String\": \"\"}, \"content\": \"x\"}]}"),
		       "normalizer.normalizers[0].pattern", "empty");
	expect_refused(with(spm_file(1, 1), "normalizer",
			    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\","
			    " \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": [{\"type\":"
			    " \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\":"
			    " []}]}]}]}]}"), "normalizer", "deeper");
	expect_refused(with(spm_file(1, 1), "decoder", "{\"type\": \"WordPiece\"}"), "decoder",
		       "WordPiece");
	expect_refused(with(spm_file(1, 1), "decoder",
			    "{\"type\": \"Strip\", \"content\": \"ab\", \"start\": 1, \"stop\": 0}"),
		       "decoder", "one character");
	expect_refused(with(spm_file(1, 1), "post_processor", "{\"type\": \"RobertaProcessing\"}"),
		       "post_processor", "RobertaProcessing");
	expect_refused(model_with(spm_file(1, 1), "merges", "[\"\\u2581 a\", \"a zz\"]"),
		       "model.merges[1]", "not in model.vocab: token \"zz\"");
	expect_refused(model_with(spm_file(1, 1), "merges", "[[\"a\", \"b\"]]"), "model.merges[0]",
		       "merged token \"ab\"");
	expect_refused(model_with(spm_file(1, 1), "merges", "[\"a  b\"]"), "model.merges[0]",
		       "one space");
	expect_refused(model_with(spm_file(1, 1), "merges", "[[\"a\"]]"), "model.merges[0]", NULL);
	expect_refused(model_with(spm_file(1, 1), "merges", "{}"), "model.merges", NULL);
	expect_refused(model_with(spm_file(1, 1), "unk_token", "\"<nope>\""), "model.unk_token",
		       "<nope>");
	expect_refused(model_with(spm_file(1, 1), "dropout", "0.1"), "model.dropout", NULL);
	expect_refused(model_with(spm_file(1, 1), "continuing_subword_prefix", "\"##\""), "model",
		       "continuing_subword_prefix");
	expect_refused(model_with(spm_file(1, 1), "vocab", "{\"a\": 0, \"b\": 5}"), "model.vocab",
		       "out of range");
	expect_refused(model_with(spm_file(1, 1), "vocab", "{\"a\": 0, \"b\": 0}"), "model.vocab",
		       "already the id");
	expect_refused(model_with(spm_file(1, 1), "vocab", "{\"a\": \"0\"}"), "model.vocab",
		       "not an integer");
	expect_refused(model_with(spm_file(1, 1), "byte_fallback", "1"), "byte_fallback", NULL);
	/* A byte-level vocabulary without a byte. */
	f = bytelevel_file(BL_PLAIN);
	json_object_del(json_object_get(json_object_get(f, "model"), "vocab"), "A");
	json_object_set_new(json_object_get(json_object_get(f, "model"), "vocab"), "zz",
			    json_integer('A'));
	expect_refused(f, "model.vocab", "0x41");
	/* added tokens */
	expect_refused(with(spm_file(1, 1), "added_tokens",
			    "[{\"id\": 3, \"content\": \"<new>\"}]"), "added_tokens[0]", "\"a\"");
	expect_refused(with(spm_file(1, 1), "added_tokens",
			    "[{\"id\": 4, \"content\": \"a\"}]"), "added_tokens[0]",
		       "already token 3");
	expect_refused(with(spm_file(1, 1), "added_tokens",
			    "[{\"id\": 99999999, \"content\": \"<n>\"}]"), "added_tokens[0]",
		       "out of range");
	expect_refused(with(spm_file(1, 1), "added_tokens", "[{\"id\": 20, \"content\": \"\"}]"),
		       "added_tokens[0]", "1 to");
	expect_refused(with(spm_file(1, 1), "added_tokens", "[{\"content\": \"x\"}]"),
		       "added_tokens[0]", "id");
	expect_refused(with(spm_file(1, 1), "added_tokens",
			    "[{\"id\": 20, \"content\": \"x\", \"lstrip\": \"yes\"}]"),
		       "added_tokens[0]", "lstrip");
	/* not JSON, or not the right JSON */
	write_str("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0");
	fg_clear_error();
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "tokenizer.json:1:"));
	ck_assert(strstr(fg_last_error(), "not valid JSON"));
	write_str("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
		  "\"a\": 1}, \"merges\": []}}");
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "duplicate"));
	write_str("tokenizer.json", "[1, 2]");
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "not a JSON object"));
	write_str("tokenizer.json", "");
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "tokenizer.json"));
	/* A FIFO (must not hang) and a folder in its place. */
	ck_assert_int_eq(unlink(path_of("tokenizer.json")), 0);
	ck_assert_int_eq(mkfifo(path_of("tokenizer.json"), 0600), 0);
	fg_clear_error();
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert_ptr_null(t);
	ck_assert(strstr(fg_last_error(), "tokenizer.json: not a regular file"));
	ck_assert_int_eq(unlink(path_of("tokenizer.json")), 0);
	ck_assert_int_eq(mkdir(path_of("tokenizer.json"), 0700), 0);
	fg_clear_error();
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "tokenizer.json: not a regular file"));
	ck_assert_int_eq(rmdir(path_of("tokenizer.json")), 0);
	/* A dangling link. */
	ck_assert_int_eq(symlink("nowhere.json", path_of("tokenizer.json")), 0);
	ck_assert_int_lt(fg_tokenizer_load_dir(dir, &t), 0);
	ck_assert(strstr(fg_last_error(), "cannot open"));
}
END_TEST

/* A Replace "a" -> 64 a's, n times over (as a Sequence of normalizers or
 * of decoders). */
static char *replace_chain(const char *kind, int n)
{
	static char buf[2048];
	size_t k = (size_t)snprintf(buf, sizeof(buf), "{\"type\": \"Sequence\", \"%s\": [", kind);

	for (int i = 0; i < n; i++)
		k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s{\"type\": \"Replace\", \"pattern\": "
				      "{\"String\": \"a\"}, \"content\": \"%.64s\"}", i ? ", " : "",
				      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	snprintf(buf + k, sizeof(buf) - k, "]}");
	return buf;
}

/* Normalizers and decoders that could grow a text without bound are
 * refused when the file is read: four Replace "a" -> 64 a's turned one
 * character into 16 MB (a 3 KB file into 5.2 GB) before. */
START_TEST(test_growth_refused)
{
	static char big[16385];
	struct fg_tokenizer *t;
	json_t *f;
	char norm[400];

	memset(big, 'p', 16384);
	/* One such Replace is 64 times: allowed, and it does grow the text. */
	f = with(spm_file(1, 1), "normalizer", replace_chain("normalizers", 1));
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	{
		int32_t *ids;
		size_t n;

		encode_ok(t, "a", 1, &ids, &n);
		ck_assert_uint_eq(n, 64);
		free(ids);
	}
	fg_tokenizer_free(t);
	expect_refused(with(spm_file(1, 1), "normalizer", replace_chain("normalizers", 4)),
		       "normalizer.normalizers[1]", "could make a text 4096 times as long; at most 64");
	/* A regex counts its shortest match: "a{8}" -> 64 bytes is 8 times;
	 * "a" -> 65 bytes, or a pattern that may match one byte, is too much. */
	f = with(spm_file(1, 1), "normalizer", "{\"type\": \"Replace\", \"pattern\": {\"Regex\": "
		 "\"a{8}\"}, \"content\": \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		 "bbbbbbb\"}");
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	fg_tokenizer_free(t);
	expect_refused(with(spm_file(1, 1), "normalizer", "{\"type\": \"Replace\", \"pattern\": "
			    "{\"Regex\": \"a|bb\"}, \"content\": \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
			    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"}"), "normalizer",
		       "a match of as few as 1 byte(s) into 65 bytes");
	/* NFC triples at most: three of them (27) pass, four (81) do not. */
	snprintf(norm, sizeof(norm), "{\"type\": \"Sequence\", \"normalizers\": [%s]}",
		 "{\"type\": \"NFC\"}, {\"type\": \"NFC\"}, {\"type\": \"NFC\"}");
	ck_assert_msg(load_tmp(with(spm_file(1, 1), "normalizer", norm), &t) == 0, "%s",
		      fg_last_error());
	fg_tokenizer_free(t);
	snprintf(norm, sizeof(norm), "{\"type\": \"Sequence\", \"normalizers\": [%s]}",
		 "{\"type\": \"NFC\"}, {\"type\": \"NFC\"}, {\"type\": \"NFC\"}, {\"type\": \"NFC\"}");
	expect_refused(with(spm_file(1, 1), "normalizer", norm), "normalizer.normalizers[3]",
		       "81 * n + 0 bytes long; at most 64 * n + 65536");
	/* Prepends add up: four of 16 KiB are 64 KiB, five are too many. */
	for (int n = 4; n <= 5; n++) {
		json_t *seq = json_array();

		for (int i = 0; i < n; i++)
			json_array_append_new(seq, json_pack("{s:s, s:s%}", "type", "Prepend",
							     "prepend", big, (size_t)16384));
		f = spm_file(1, 1);
		json_array_remove(json_object_get(f, "added_tokens"), 2);	/* "hi you", normalized */
		json_object_set_new(f, "normalizer", json_pack("{s:s, s:o}", "type", "Sequence",
							       "normalizers", seq));
		if (n == 4) {
			ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
			fg_tokenizer_free(t);
		} else {
			expect_refused(f, "normalizer.normalizers[4]",
				       "1 * n + 81920 bytes long; at most 64 * n + 65536");
		}
	}
	/* Decoders: 16 times at most (token_bytes decodes every token at load). */
	f = with(spm_file(1, 1), "decoder", "{\"type\": \"Replace\", \"pattern\": {\"String\": "
		 "\"a\"}, \"content\": \"aaaaaaaaaaaaaaaa\"}");
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	fg_tokenizer_free(t);
	expect_refused(with(spm_file(1, 1), "decoder", replace_chain("decoders", 1)),
		       "decoder.decoders[0]", "1 byte(s) into 64, so the decoders up to here could "
		       "make a token's text 64 times as long; at most 16");
	/* A normalized added token is matched in its normalized form, which
	 * must be a token's length at most: 300 a's become 19200 bytes. */
	memset(big, 'a', 300);
	big[300] = '\0';
	f = with(spm_file(1, 1), "normalizer", replace_chain("normalizers", 1));
	json_array_append_new(json_object_get(f, "added_tokens"),
			      json_pack("{s:i, s:s, s:b}", "id", 12, "content", big, "normalized", 1));
	expect_refused(f, "added token 12 \"aaaa", "19200 bytes long once normalized; at most 16384");
}
END_TEST

static Suite *json_suite(bool data)
{
	Suite *s = suite_create("tokenizer.json");
	TCase *tc = tcase_create("files");
	TCase *td = tcase_create("testdata");

	tcase_add_checked_fixture(tc, setup, tmp_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pcre2_matches_gpt2_scanner);
	tcase_add_test(tc, test_regex_windows);
	tcase_add_test(tc, test_regex_budget);
	tcase_add_test(tc, test_pipeline_steps);
	tcase_add_test(tc, test_spm_steps);
	tcase_add_test(tc, test_bos_rule);
	tcase_add_test(tc, test_bos_rule_refused);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_growth_refused);
	suite_add_tcase(s, tc);
	if (!data)
		return s;
	tcase_set_timeout(td, 120);
	tcase_add_test(td, test_golden_bytelevel);
	tcase_add_test(td, test_golden_spm);
	tcase_add_test(td, test_roles);
	tcase_add_test(td, test_roundtrip_bytelevel);
	tcase_add_test(td, test_roundtrip_spm);
	tcase_add_test(td, test_bytelevel_invalid_utf8);
	tcase_add_test(td, test_llama_checkpoint);
	tcase_add_test(td, test_decode_unknown_and_cut);
	suite_add_tcase(s, td);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	testdata = getenv("FGCORE_TESTDATA");
	if (testdata && !*testdata)
		testdata = NULL;
	sr = srunner_create(json_suite(testdata != NULL));
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		return 1;
	if (!testdata) {
		printf("FGCORE_TESTDATA is not set: the Hugging Face reference cases were skipped "
		       "(set it to the shared/testdata folder)\n");
		return 77;
	}
	return 0;
}
