/* tests/test_tokenizer.c - GPT-2 byte-level BPE against the Hugging Face
 * golden ids, round trips, the pre-tokenizer, and every malformed-file path.
 * Needs FGCORE_TESTDATA (the reference data); skips (77) when it is unset. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_tokenizer_utf8.h"
#include "tests/test_rng.h"

static char gpt2_dir[PATH_MAX];
static char vocab_path[PATH_MAX + 32];
static char merges_path[PATH_MAX + 32];

/* ---- helpers ---- */


static struct fg_tokenizer *load_gpt2(void)
{
	struct fg_tokenizer *t = NULL;
	int rc = fg_tokenizer_load(vocab_path, merges_path, &t);

	ck_assert_msg(rc == 0, "load: %d %s", rc, fg_last_error());
	return t;
}

static void encode_ok(const struct fg_tokenizer *t, const char *s, size_t len, int32_t **ids,
		      size_t *n)
{
	int rc = fg_tokenizer_encode(t, s, len, ids, n);

	ck_assert_msg(rc == 0, "encode: %d %s", rc, fg_last_error());
}

/* The tokens' bytes give the input back exactly; decode gives it as valid
 * UTF-8 (invalid bytes replaced as Python's errors="replace" does). */
static void check_roundtrip(const struct fg_tokenizer *t, const char *s, size_t len)
{
	int32_t *ids;
	size_t n, dlen, rlen, o = 0;
	char *back, *want, *raw = malloc(len + 1);
	int rc;

	ck_assert_ptr_nonnull(raw);
	encode_ok(t, s, len, &ids, &n);
	ck_assert_uint_le(n, len);
	for (size_t i = 0; i < n; i++) {
		size_t bl;
		const char *b = fg_tokenizer_token_bytes(t, ids[i], &bl);

		ck_assert_ptr_nonnull(b);
		ck_assert_uint_le(o + bl, len);
		memcpy(raw + o, b, bl);
		o += bl;
	}
	ck_assert_uint_eq(o, len);
	ck_assert_msg(memcmp(raw, s, len) == 0, "token bytes differ from the text (len %zu)", len);
	rc = fg_tokenizer_decode(t, ids, n, &back, &dlen);
	ck_assert_msg(rc == 0, "decode: %d %s", rc, fg_last_error());
	rlen = ref_utf8_repair(s, len, &want);
	ck_assert_ptr_nonnull(want);
	ck_assert_uint_eq(dlen, rlen);
	ck_assert_msg(memcmp(back, want, rlen) == 0, "decode differs from the repaired text "
		      "(len %zu)", len);
	ck_assert_int_eq(back[dlen], '\0');
	free(want);
	free(raw);
	free(back);
	free(ids);
}

/* A scratch directory per test (each runs in its own forked child). */
static char tmpdir[PATH_MAX];

static void make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/fgtok.XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
	static const char *const names[] = {
		"vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
		"tokenizer_config.json",
	};
	char p[PATH_MAX + 64];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
		unlink(p);
	}
	rmdir(tmpdir);
}

/* Rotating buffers: two paths may be passed to one call. */
static const char *tmp_path(const char *name)
{
	static char p[4][PATH_MAX + 64];
	static unsigned k;
	char *b = p[k++ % 4];

	snprintf(b, sizeof(p[0]), "%s/%s", tmpdir, name);
	return b;
}

static void write_file(const char *name, const char *data, size_t len)
{
	FILE *f = fopen(tmp_path(name), "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_str(const char *name, const char *s)
{
	write_file(name, s, strlen(s));
}

/* GPT-2's byte -> character table, written here independently of the core:
 * bytes that are printable Latin-1 stand for themselves, the rest take
 * U+0100 upwards in byte order. */
static void byte_char(int b, char out[3])
{
	int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
	unsigned cp;

	if (printable) {
		cp = (unsigned)b;
	} else {
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

/* A small byte-level vocabulary: id b for byte b, then `extra` tokens
 * (already in byte-level spelling) from id 256 on. */
static json_t *small_vocab(const char *const *extra, size_t nextra)
{
	json_t *v = json_object();

	for (int b = 0; b < 256; b++) {
		char c[3];

		byte_char(b, c);
		json_object_set_new(v, c, json_integer(b));
	}
	for (size_t i = 0; i < nextra; i++)
		json_object_set_new(v, extra[i], json_integer((json_int_t)(256 + i)));
	return v;
}

static const char *const small_extra[] = {
	"ab",		/* 256 */
	"abc",		/* 257 */
	"\xc4\xa0t",	/* 258: " t" */
	"he",		/* 259 */
	"\xc4\xa0the",	/* 260: " the" */
	"bc",		/* 261 */
	"<|endoftext|>",/* 262 */
};
#define N_SMALL (256 + sizeof(small_extra) / sizeof(small_extra[0]))
static const char small_merges[] =
	"#version: 0.2\n"
	"b c\n"		/* rank 0: bc */
	"a b\n"		/* rank 1: ab */
	"ab c\n"	/* rank 2 */
	"\xc4\xa0 t\n"
	"h e\n"
	"\xc4\xa0t he\n"
	"\n\n";

static void write_small(void)
{
	json_t *v = small_vocab(small_extra, sizeof(small_extra) / sizeof(small_extra[0]));

	ck_assert_int_eq(json_dump_file(v, tmp_path("vocab.json"), 0), 0);
	json_decref(v);
	write_str("merges.txt", small_merges);
}

static void expect_ids(const struct fg_tokenizer *t, const char *s, const int32_t *want,
		       size_t nwant)
{
	int32_t *ids;
	size_t n;

	encode_ok(t, s, strlen(s), &ids, &n);
	ck_assert_msg(n == nwant, "\"%s\": %zu ids, want %zu", s, n, nwant);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(ids[i] == want[i], "\"%s\": id %zu is %d, want %d", s, i, ids[i],
			      want[i]);
	free(ids);
	check_roundtrip(t, s, strlen(s));
}

#define EXPECT(t, s, ...)                                                                       \
	do {                                                                                    \
		static const int32_t w_[] = { __VA_ARGS__ };                                    \
		expect_ids(t, s, w_, sizeof(w_) / sizeof(w_[0]));                               \
	} while (0)

static void expect_error(int rc, const char *needle1, const char *needle2)
{
	const char *e = fg_last_error();

	ck_assert_msg(rc < 0, "expected failure, got %d", rc);
	ck_assert_msg(strstr(e, needle1), "error \"%s\" lacks \"%s\"", e, needle1);
	if (needle2)
		ck_assert_msg(strstr(e, needle2), "error \"%s\" lacks \"%s\"", e, needle2);
}

static int load_tmp(struct fg_tokenizer **t)
{
	fg_clear_error();
	*t = NULL;
	return fg_tokenizer_load(tmp_path("vocab.json"), tmp_path("merges.txt"), t);
}

/* ---- golden ids from Hugging Face ---- */

static void run_golden(const struct fg_tokenizer *t)
{
	char gpath[PATH_MAX + 32];
	json_error_t jerr;
	json_t *g, *e;
	size_t i;

	snprintf(gpath, sizeof(gpath), "%s/golden.json", gpt2_dir);
	g = json_load_file(gpath, 0, &jerr);
	ck_assert_msg(g != NULL, "%s: %s", gpath, jerr.text);
	ck_assert(json_is_array(g));
	ck_assert_uint_ge(json_array_size(g), 10);
	json_array_foreach(g, i, e) {
		json_t *jt = json_object_get(e, "text"), *jids = json_object_get(e, "ids");
		const char *text = json_string_value(jt);
		size_t len = json_string_length(jt), n, dlen;
		int32_t *ids;
		char *back;

		ck_assert(text && json_is_array(jids));
		encode_ok(t, text, len, &ids, &n);
		ck_assert_msg(n == json_array_size(jids), "entry %zu \"%s\": %zu ids, want %zu", i,
			      text, n, json_array_size(jids));
		for (size_t k = 0; k < n; k++) {
			json_int_t want = json_integer_value(json_array_get(jids, k));

			ck_assert_msg(ids[k] == want, "entry %zu \"%s\": id[%zu] = %d, want %lld", i,
				      text, k, ids[k], (long long)want);
		}
		ck_assert_int_eq(fg_tokenizer_decode(t, ids, n, &back, &dlen), 0);
		ck_assert_uint_eq(dlen, len);
		ck_assert_msg(!memcmp(back, text, len), "entry %zu: decode differs", i);
		free(back);
		free(ids);
	}
	json_decref(g);
}

START_TEST(test_golden_load)
{
	struct fg_tokenizer *t = load_gpt2();

	run_golden(t);
	fg_tokenizer_free(t);
}
END_TEST

START_TEST(test_golden_load_dir)
{
	struct fg_tokenizer *t = NULL;

	ck_assert_msg(fg_tokenizer_load_dir(gpt2_dir, &t) == 0, "%s", fg_last_error());
	run_golden(t);
	fg_tokenizer_free(t);
}
END_TEST

START_TEST(test_gpt2_tables)
{
	struct fg_tokenizer *t = load_gpt2();
	const char *b;
	size_t len;
	char *text;
	int32_t bad[2] = { 15496, 50257 };

	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 50257);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "<|endoftext|>"), 50256);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "Hello"), 15496);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "\xc4\xa0world"), 995);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "no such token here"), -1);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 50256);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 50256);
	ck_assert_int_eq(fg_tokenizer_unk_id(t), 50256);
	ck_assert_int_eq(fg_tokenizer_pad_id(t), -1);
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_UNSAID);	/* no side files */
	b = fg_tokenizer_token_bytes(t, 995, &len);
	ck_assert_uint_eq(len, 6);
	ck_assert(!memcmp(b, " world", 6));
	b = fg_tokenizer_token_bytes(t, 198, &len);
	ck_assert(len == 1 && b[0] == '\n');
	b = fg_tokenizer_token_bytes(t, 50256, &len);
	ck_assert(len == 13 && !memcmp(b, "<|endoftext|>", 13));
	ck_assert_ptr_null(fg_tokenizer_token_bytes(t, -1, &len));
	ck_assert_ptr_null(fg_tokenizer_token_bytes(t, 50257, &len));
	/* An id past the vocabulary (a model's 50272 over GPT-2's 50257)
	 * decodes to U+FFFD: decoding never fails a job. */
	ck_assert_int_eq(fg_tokenizer_decode(t, bad, 2, &text, &len), 0);
	ck_assert_uint_eq(len, 8);
	ck_assert(!memcmp(text, "Hello\xEF\xBF\xBD", 9));
	free(text);
	bad[1] = -1;
	ck_assert_int_eq(fg_tokenizer_decode(t, bad, 2, &text, &len), 0);
	ck_assert(!strcmp(text, "Hello\xEF\xBF\xBD"));
	free(text);
	/* Byte tokens that stop inside a character: one U+FFFD for the cut
	 * sequence E6 9D (of U+6771), then the next character whole. */
	{
		int32_t cut[3] = { t->byte_id[0xE6], t->byte_id[0x9D], 15496 };

		ck_assert_int_eq(fg_tokenizer_decode(t, cut, 3, &text, &len), 0);
		ck_assert(!strcmp(text, "\xEF\xBF\xBDHello"));
		free(text);
		ck_assert_int_eq(fg_tokenizer_decode(t, cut, 1, &text, &len), 0);
		ck_assert(!strcmp(text, "\xEF\xBF\xBD"));
		free(text);
	}
	ck_assert_int_eq(fg_tokenizer_decode(t, NULL, 0, &text, &len), 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(text[0], '\0');
	free(text);
	/* A special token splits the text: both sides pre-tokenize on their own. */
	EXPECT(t, "a<|endoftext|>b", 64, 50256, 65);
	EXPECT(t, "<|endoftext|><|endoftext|>", 50256, 50256);
	EXPECT(t, "<|endoftext|", 27, 91, 437, 1659, 5239, 91);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- pre-tokenizer, against splits of Python's `regex` with GPT-2's pattern ---- */

static void expect_split(const char *s, size_t len, const char *const *want, size_t nwant)
{
	size_t pos = 0, k = 0;

	while (pos < len) {
		size_t end = fg_pretok_next(s, len, pos);

		ck_assert_msg(end > pos && end <= len, "no progress at %zu", pos);
		ck_assert_msg(k < nwant, "too many pieces for \"%s\"", s);
		ck_assert_msg(strlen(want[k]) == end - pos && !memcmp(want[k], s + pos, end - pos),
			      "\"%s\": piece %zu is \"%.*s\", want \"%s\"", s, k, (int)(end - pos),
			      s + pos, want[k]);
		k++;
		pos = end;
	}
	ck_assert_msg(k == nwant, "\"%s\": %zu pieces, want %zu", s, k, nwant);
}

#define SPLIT(s, ...)                                                                           \
	do {                                                                                    \
		static const char *const w_[] = { __VA_ARGS__ };                                \
		expect_split(s, sizeof(s) - 1, w_, sizeof(w_) / sizeof(w_[0]));                 \
	} while (0)

START_TEST(test_pretokenize)
{
	SPLIT("Hello world", "Hello", " world");
	SPLIT("  leading", " ", " leading");
	SPLIT("a  \n\n b", "a", "  \n\n", " b");
	SPLIT("x\t\ty", "x", "\t", "\t", "y");
	SPLIT("end   ", "end", "   ");
	SPLIT("I'm 'tis", "I", "'m", " '", "tis");
	SPLIT("it's'S", "it", "'s", "'", "S");
	SPLIT("we'LL", "we", "'", "LL");
	SPLIT("3.14", "3", ".", "14");
	SPLIT("abc123", "abc", "123");
	SPLIT(" 123", " 123");
	SPLIT("?!  !!", "?!", " ", " !!");
	SPLIT("\xe6\x9d\xb1\xe4\xba\xac ok", "\xe6\x9d\xb1\xe4\xba\xac", " ok");
	SPLIT("\xe3\x80\x80x", "\xe3\x80\x80", "x");			/* U+3000 */
	SPLIT(" \xe3\x80\x80x", " ", "\xe3\x80\x80", "x");
	SPLIT("x\xc2\xa0y", "x", "\xc2\xa0", "y");			/* U+00A0 */
	SPLIT("\xd9\xa3\xd9\xa4\xc2\xbdx", "\xd9\xa3\xd9\xa4\xc2\xbd", "x");	/* Nd Nd No */
	SPLIT("e\xcc\x81", "e", "\xcc\x81");				/* Mn is not L */
	SPLIT("\n", "\n");
	SPLIT("'", "'");
	SPLIT("'r", "'", "r");
	SPLIT("'ve'll'd", "'ve", "'ll", "'d");
	SPLIT("a\r\n\r\nb", "a", "\r\n\r", "\n", "b");
	SPLIT("   ", "   ");
	SPLIT("x  ", "x", "  ");
	SPLIT("!!!'s", "!!!'", "s");
	SPLIT(" 's", " '", "s");
	SPLIT("\xe2\x80\xa8" "a", "\xe2\x80\xa8", "a");			/* U+2028 */
	SPLIT("\xe2\x85\xab", "\xe2\x85\xab");				/* U+216B Nl */
	SPLIT("a\xe2\x80\x8b" "b", "a", "\xe2\x80\x8b", "b");		/* U+200B is Cf */
	/* Invalid UTF-8: each bad byte is one "other" code point. */
	SPLIT("a\xff" "b", "a", "\xff", "b");
	SPLIT("\xff\xfe!", "\xff\xfe!");
	SPLIT(" \xff", " \xff");
	SPLIT("ab\xc3", "ab", "\xc3");					/* truncated */
	SPLIT("\xed\xa0\x80x", "\xed\xa0\x80", "x");			/* surrogate */
	SPLIT("\xc0\xafz", "\xc0\xaf", "z");				/* overlong */
	SPLIT("\xf4\x90\x80\x80", "\xf4\x90\x80\x80");			/* > U+10FFFF */
	SPLIT("\xe4\xba" "a", "\xe4\xba", "a");
}
END_TEST

START_TEST(test_unicode_classes)
{
	uint32_t cp;

	ck_assert_int_eq(fg_uc_class_of('a'), FG_UC_L);
	ck_assert_int_eq(fg_uc_class_of('7'), FG_UC_N);
	ck_assert_int_eq(fg_uc_class_of(' '), FG_UC_WS);
	ck_assert_int_eq(fg_uc_class_of('_'), FG_UC_OTHER);
	ck_assert_int_eq(fg_uc_class_of(0x00AA), FG_UC_L);	/* ª Lo */
	ck_assert_int_eq(fg_uc_class_of(0x00B2), FG_UC_N);	/* ² No */
	ck_assert_int_eq(fg_uc_class_of(0x0085), FG_UC_WS);
	ck_assert_int_eq(fg_uc_class_of(0x1F600), FG_UC_OTHER);	/* emoji So */
	ck_assert_int_eq(fg_uc_class_of(0x4E00), FG_UC_L);
	ck_assert_int_eq(fg_uc_class_of(0x3000), FG_UC_WS);
	ck_assert_int_eq(fg_uc_class_of(0x10FFFF), FG_UC_OTHER);
	ck_assert_int_eq(fg_uc_class_of(0x20000), FG_UC_L);	/* CJK ext. B */
	ck_assert_int_eq(fg_uc_class_of(FG_UC_INVALID), FG_UC_OTHER);
	/* Ranges sorted, disjoint, non-empty. */
	for (size_t i = 0; i < fg_uc_nranges; i++) {
		ck_assert_uint_le(fg_uc_ranges[i].first_cls >> 2, fg_uc_ranges[i].last);
		ck_assert_uint_ne(fg_uc_ranges[i].first_cls & 3, FG_UC_OTHER);
		if (i)
			ck_assert_uint_gt(fg_uc_ranges[i].first_cls >> 2, fg_uc_ranges[i - 1].last);
	}
	ck_assert_uint_eq(fg_utf8_next((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
	ck_assert_uint_eq(cp, 0x1F600);
	ck_assert_uint_eq(fg_utf8_next((const unsigned char *)"\xf0\x9f\x98", 3, &cp), 1);
	ck_assert_uint_eq(cp, FG_UC_INVALID);
	ck_assert_uint_eq(fg_utf8_next((const unsigned char *)"\xe0\x80\x80", 3, &cp), 1);
	ck_assert_uint_eq(fg_utf8_next((const unsigned char *)"\xef\xbf\xbf", 3, &cp), 3);
	ck_assert_uint_eq(cp, 0xFFFF);
}
END_TEST

/* ---- BPE: both merge paths against the textbook loop ---- */

/* The reference algorithm, spelled out: lowest-ranked adjacent pair, merge
 * all of its non-overlapping occurrences left to right, repeat. */
static size_t naive_bpe(const struct fg_tokenizer *t, const unsigned char *w, size_t n,
			int32_t *ids)
{
	for (size_t i = 0; i < n; i++)
		ids[i] = t->byte_id[w[i]];
	for (;;) {
		uint32_t best = UINT32_MAX;
		int32_t a = -1, b = -1, m = -1;
		size_t o = 0;

		for (size_t i = 0; i + 1 < n; i++) {
			const struct fg_pair_slot *s = fg_pairmap_find(&t->merges, ids[i], ids[i + 1]);

			if (s && s->rank < best) {
				best = s->rank;
				a = ids[i];
				b = ids[i + 1];
				m = s->merged;
			}
		}
		if (best == UINT32_MAX)
			return n;
		for (size_t i = 0; i < n;) {
			if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
				ids[o++] = m;
				i += 2;
			} else {
				ids[o++] = ids[i++];
			}
		}
		n = o;
	}
}

static void compare_paths(const struct fg_tokenizer *t, const unsigned char *w, size_t n)
{
	int32_t *ref = malloc(n * sizeof(*ref)), *a = malloc(n * sizeof(*a)),
		*b = malloc(n * sizeof(*b));
	struct fg_bpe_scratch sc = { 0 };
	size_t nref, na = 0, nb = 0;

	ck_assert(ref && a && b);
	nref = naive_bpe(t, w, n, ref);
	ck_assert_int_eq(fg_bpe_word(t, &sc, w, n, a, &na, 0), 0);
	ck_assert_int_eq(fg_bpe_word(t, &sc, w, n, b, &nb, 1), 0);
	ck_assert_msg(na == nref && !memcmp(a, ref, na * sizeof(*a)),
		      "default path differs from the reference on %zu bytes", n);
	ck_assert_msg(nb == nref && !memcmp(b, ref, nb * sizeof(*b)),
		      "heap path differs from the reference on %zu bytes", n);
	fg_bpe_scratch_free(&sc);
	free(ref);
	free(a);
	free(b);
}

START_TEST(test_bpe_paths)
{
	static const char alpha[] = "etaoinshrdlucmfwypvbgkqjxz ETAOIN";
	struct fg_tokenizer *t = load_gpt2();
	unsigned char w[3000];

	rng_state = 0x9E3779B97F4A7C15ull;
	for (int iter = 0; iter < 3000; iter++) {
		size_t n = 2 + rnd() % (iter < 2950 ? 60 : sizeof(w) - 2);

		for (size_t i = 0; i < n; i++) {
			uint64_t r = rnd();

			/* mostly letters (many merges), some arbitrary bytes */
			w[i] = r % 8 ? (unsigned char)alpha[(r >> 8) % (sizeof(alpha) - 1)]
				     : (unsigned char)(r >> 16);
		}
		compare_paths(t, w, n);
	}
	memset(w, 'a', sizeof(w));
	compare_paths(t, w, sizeof(w));
	memset(w, ' ', sizeof(w));
	compare_paths(t, w, sizeof(w));
	for (size_t i = 0; i < sizeof(w); i++)
		w[i] = "ab"[i % 2];
	compare_paths(t, w, sizeof(w));
	fg_tokenizer_free(t);
}
END_TEST

/* ---- round trips ---- */

START_TEST(test_roundtrip_random)
{
	static const char *const pool[] = {
		"the", " the", " quick", "Hello", " ", "  ", "\t", "\n", "\r\n", "'s", "'ll", "'",
		"123", " 45", ".", "!!", "?", "\xc3\xa9", "\xc3\xbc", "\xe6\x9d\xb1", "\xe4\xba\xac",
		"\xf0\x9f\x98\x80", "\xe2\x80\x8b", "\xe3\x80\x80", "\xc2\xa0", "\xcc\x81",
		"<|endoftext|>", "<|endof", "|>", "\xff", "\xc0", "\x80", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "\xe4\xba", "\0", "\x01", "\x7f", "aaaaaaaa", "x",
	};
	struct fg_tokenizer *t = load_gpt2();
	char buf[600];

	rng_state = 12345;
	check_roundtrip(t, "", 0);
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = 0, target = rnd() % 500;

		if (iter % 3 == 0) {
			/* arbitrary bytes: mostly invalid UTF-8 */
			for (len = 0; len < target; len++)
				buf[len] = (char)rnd();
		} else {
			while (len < target) {
				const char *p = pool[rnd() % (sizeof(pool) / sizeof(pool[0]))];
				size_t pl = p[0] ? strlen(p) : 1;

				memcpy(buf + len, p, pl);
				len += pl;
			}
		}
		check_roundtrip(t, buf, len);
	}
	fg_tokenizer_free(t);
}
END_TEST

START_TEST(test_long_inputs)
{
	struct fg_tokenizer *t = load_gpt2();
	size_t len = 1 << 20;
	char *s = malloc(len);
	int32_t *ids;
	size_t n;

	ck_assert_ptr_nonnull(s);
	/* One pre-token of 1 MiB: the heap path, linear-log time. */
	memset(s, 'a', len);
	check_roundtrip(t, s, len);
	/* 32 a's are 8 ids of "aaaa" (the golden entry), so 2^20 a's are 2^18. */
	encode_ok(t, s, len, &ids, &n);
	ck_assert_uint_eq(n, len / 4);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], 24794);
	free(ids);
	memset(s, ' ', len);
	check_roundtrip(t, s, len);
	for (size_t i = 0; i < len; i++)
		s[i] = (char)(0x80 + i % 64);	/* continuation bytes only */
	check_roundtrip(t, s, len);
	free(s);
	fg_tokenizer_free(t);
}
END_TEST

struct thread_arg {
	const struct fg_tokenizer *t;
	const char *text;
	size_t len;
	int32_t *ids;
	size_t n;
	int rc;
};

static void *encode_thread(void *p)
{
	struct thread_arg *a = p;

	for (int i = 0; i < 20 && !a->rc; i++) {
		free(a->ids);
		a->ids = NULL;
		a->rc = fg_tokenizer_encode(a->t, a->text, a->len, &a->ids, &a->n);
	}
	return NULL;
}

START_TEST(test_threads)
{
	static const char text[] =
		"Paris is the capital city of France. It's got 2,140,526 people (2019) \xe2\x80\x94 "
		"\xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac "
		"\xf0\x9f\x98\x80<|endoftext|>  def f(x):\n    return x**2  # ok\n\n";
	struct fg_tokenizer *t = load_gpt2();
	struct thread_arg a[4] = { 0 };
	pthread_t th[4];
	int32_t *ref;
	size_t nref;

	encode_ok(t, text, sizeof(text) - 1, &ref, &nref);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct thread_arg){ .t = t, .text = text, .len = sizeof(text) - 1 };
		ck_assert_int_eq(pthread_create(&th[i], NULL, encode_thread, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_int_eq(a[i].rc, 0);
		ck_assert_uint_eq(a[i].n, nref);
		ck_assert(!memcmp(a[i].ids, ref, nref * sizeof(*ref)));
		free(a[i].ids);
	}
	free(ref);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- a small hand-made vocabulary ---- */

START_TEST(test_small_vocab)
{
	struct fg_tokenizer *t = NULL;

	make_tmpdir();
	write_small();
	ck_assert_msg(fg_tokenizer_load(tmp_path("vocab.json"), tmp_path("merges.txt"), &t) == 0,
		      "%s", fg_last_error());
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), N_SMALL);
	/* "b c" (rank 0) beats "a b" (rank 1): abc -> a + bc, never ab + c. */
	EXPECT(t, "abc", 'a', 261);
	EXPECT(t, "abab", 256, 256);
	EXPECT(t, "the the", 't', 259, 260);
	EXPECT(t, "x", 'x');
	/* <|endoftext|> is in this vocabulary, hence GPT2Tokenizer's default special. */
	EXPECT(t, "a<|endoftext|>", 'a', 262);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 262);
	fg_tokenizer_free(t);
	rm_tmpdir();
}
END_TEST

/* A merges file whose ranks contradict its order ("ab a" before "a b"): a
 * pair formed during a pass still waits for the next pass. */
START_TEST(test_rank_inversion)
{
	static const char *const extra[] = { "ab", "aba" };
	struct fg_tokenizer *t = NULL;
	unsigned char w[200];
	json_t *v;

	make_tmpdir();
	v = small_vocab(extra, 2);
	ck_assert_int_eq(json_dump_file(v, tmp_path("vocab.json"), 0), 0);
	json_decref(v);
	write_str("merges.txt", "ab a\na b\n");
	ck_assert_msg(load_tmp(&t) == 0, "%s", fg_last_error());
	/* The pass of "a b" merges both pairs before "ab a" is considered. */
	EXPECT(t, "abab", 256, 256);
	EXPECT(t, "aba", 257);
	EXPECT(t, "ababa", 256, 257);
	for (size_t n = 2; n <= sizeof(w); n += 7) {
		for (size_t i = 0; i < n; i++)
			w[i] = "ab"[i % 2];
		compare_paths(t, w, n);
		w[n / 2] = 'a';
		compare_paths(t, w, n);
	}
	fg_tokenizer_free(t);
	unlink(tmp_path("vocab.json"));
	unlink(tmp_path("merges.txt"));
	rm_tmpdir();
}
END_TEST

/* ---- malformed files ---- */

static void vocab_case(const char *json, const char *needle2)
{
	struct fg_tokenizer *t;
	char path[PATH_MAX + 64];

	write_str("vocab.json", json);
	snprintf(path, sizeof(path), "%s", tmp_path("vocab.json"));
	expect_error(load_tmp(&t), path, needle2);
	ck_assert_ptr_null(t);
}

/* The small vocabulary as JSON text with `edit` spliced before its closing brace. */
static char *small_json_with(const char *edit)
{
	json_t *v = small_vocab(small_extra, sizeof(small_extra) / sizeof(small_extra[0]));
	char *s = json_dumps(v, JSON_COMPACT), *out;
	size_t l = strlen(s);

	json_decref(v);
	out = malloc(l + strlen(edit) + 2);
	ck_assert_ptr_nonnull(out);
	memcpy(out, s, l - 1);
	sprintf(out + l - 1, "%s}", edit);
	free(s);
	return out;
}

START_TEST(test_bad_vocab)
{
	struct fg_tokenizer *t;
	char *j;

	make_tmpdir();
	write_small();
	ck_assert_int_eq(load_tmp(&t), 0);
	fg_tokenizer_free(t);

	vocab_case("{\"a\": 1,,}", ":1:");
	vocab_case("", NULL);
	vocab_case("[1, 2, 3]", "not a JSON object");
	vocab_case("{\"a\": 0}", "256");

	j = small_json_with(",\"zz\":\"263\"");
	vocab_case(j, "\"zz\"");
	free(j);
	j = small_json_with(",\"zz\":2.5");
	vocab_case(j, "not an integer");
	free(j);
	j = small_json_with(",\"zz\":261");	/* duplicate id: "bc" has 261 */
	vocab_case(j, "\"bc\"");
	ck_assert(strstr(fg_last_error(), "\"zz\""));
	free(j);
	j = small_json_with(",\"zz\":263");	/* N = 264 entries: 263 is fine... */
	write_str("vocab.json", j);
	ck_assert_int_eq(load_tmp(&t), 0);
	fg_tokenizer_free(t);
	free(j);
	j = small_json_with(",\"zz\":264");	/* ...264 is out of range */
	vocab_case(j, "out of range");
	free(j);
	j = small_json_with(",\"zz\":-1");
	vocab_case(j, "out of range");
	free(j);
	j = small_json_with(",\"zz\":99999999999999");
	vocab_case(j, "out of range");
	free(j);
	j = small_json_with(",\"ab\":263");	/* duplicate key */
	vocab_case(j, "duplicate");
	free(j);
	j = small_json_with(",\"\":263");
	vocab_case(j, "1 to");
	free(j);
	/* A vocabulary without a token for byte 0x41 ('A'). */
	{
		json_t *v = small_vocab(small_extra, 7);

		json_object_del(v, "A");
		json_object_set_new(v, "zz", json_integer('A'));
		ck_assert_int_eq(json_dump_file(v, tmp_path("vocab.json"), 0), 0);
		json_decref(v);
		expect_error(load_tmp(&t), "vocab.json", "0x41");
	}
	/* Missing file. */
	unlink(tmp_path("vocab.json"));
	expect_error(load_tmp(&t), tmp_path("vocab.json"), "cannot open");
	ck_assert_ptr_null(t);
	/* A directory in its place. */
	ck_assert_int_eq(mkdir(tmp_path("vocab.json"), 0700), 0);
	expect_error(load_tmp(&t), "vocab.json", "regular file");
	rmdir(tmp_path("vocab.json"));
	unlink(tmp_path("merges.txt"));
	rm_tmpdir();
}
END_TEST

static void merges_case(const char *txt, const char *where, const char *needle2)
{
	struct fg_tokenizer *t;
	char want[PATH_MAX + 80];

	write_str("merges.txt", txt);
	snprintf(want, sizeof(want), "%s%s", tmp_path("merges.txt"), where);
	expect_error(load_tmp(&t), want, needle2);
	ck_assert_ptr_null(t);
}

START_TEST(test_bad_merges)
{
	struct fg_tokenizer *t;

	make_tmpdir();
	write_small();
	merges_case("#version: 0.2\nab\n", ":2:", "two tokens");
	merges_case("a b\nab\n", ":2:", "\"ab\"");
	merges_case("a b\n b\n", ":2:", "two tokens");
	merges_case("a b\nb \n", ":2:", "two tokens");
	merges_case("a  b\n", ":1:", "two tokens");
	merges_case("a b c\n", ":1:", "two tokens");
	merges_case("a b\nq zz\n", ":2:", "\"zz\"");
	merges_case("a b\nzz q\n", ":2:", "\"zz\"");
	merges_case("#version: 0.2\na b\n\na c\n", ":4:", "merged token \"ac\"");
	merges_case("#version: 0.2\na\tb\n", ":2:", "two tokens");
	/* blank lines, CRLF and no final newline are all fine */
	write_str("merges.txt", "#version: 0.2\r\nb c\r\na b\r\n\r\n\n");
	ck_assert_msg(load_tmp(&t) == 0, "%s", fg_last_error());
	EXPECT(t, "abc", 'a', 261);
	fg_tokenizer_free(t);
	write_str("merges.txt", "a b");
	ck_assert_msg(load_tmp(&t) == 0, "%s", fg_last_error());
	EXPECT(t, "abc", 256, 'c');
	fg_tokenizer_free(t);
	write_str("merges.txt", "");
	ck_assert_msg(load_tmp(&t) == 0, "%s", fg_last_error());
	EXPECT(t, "abc", 'a', 'b', 'c');
	fg_tokenizer_free(t);
	/* A NUL byte inside a line. */
	write_file("merges.txt", "a b\na\0 b\n", 9);
	expect_error(load_tmp(&t), "merges.txt:2:", "\\x00");
	unlink(tmp_path("merges.txt"));
	expect_error(load_tmp(&t), tmp_path("merges.txt"), "cannot open");
	unlink(tmp_path("vocab.json"));
	rm_tmpdir();
}
END_TEST

/* ---- special tokens from the side files ---- */

static int load_dir_tmp(struct fg_tokenizer **t)
{
	fg_clear_error();
	*t = NULL;
	return fg_tokenizer_load_dir(tmpdir, t);
}

START_TEST(test_special_files)
{
	struct fg_tokenizer *t;
	int32_t s_id, pad, extra, x, xy, *ids;
	size_t n;

	make_tmpdir();
	write_small();
	write_str("special_tokens_map.json",
		  "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false,"
		  " \"__type\": \"AddedToken\"}, \"unk_token\": \"</s>\", \"pad_token\": \"<pad>\","
		  " \"additional_special_tokens\": [\"<x>\", {\"content\": \"<extra>\"}]}");
	write_str("added_tokens.json", "{\"<added>\": 270, \"ab\": 256}");
	write_str("tokenizer_config.json",
		  "{\"add_bos_token\": true, \"bos_token\": \"ignored: the map wins\","
		  " \"added_tokens_decoder\": {\"271\": {\"content\": \"<x><y>\", \"special\": true},"
		  " \"262\": {\"content\": \"<|endoftext|>\"}},"
		  " \"model_max_length\": 1000000000000000019884624838656}");
	ck_assert_msg(load_dir_tmp(&t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_ADD);
	/* Named tokens missing from the vocabulary get ids after the largest. */
	s_id = fg_tokenizer_lookup(t, "<s>");
	ck_assert_int_ge(s_id, 272);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), s_id);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), fg_tokenizer_lookup(t, "</s>"));
	ck_assert_int_eq(fg_tokenizer_unk_id(t), fg_tokenizer_eos_id(t));
	pad = fg_tokenizer_pad_id(t);
	ck_assert_int_eq(pad, fg_tokenizer_lookup(t, "<pad>"));
	extra = fg_tokenizer_lookup(t, "<extra>");
	x = fg_tokenizer_lookup(t, "<x>");
	xy = fg_tokenizer_lookup(t, "<x><y>");
	ck_assert_int_eq(xy, 271);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "<added>"), 270);
	ck_assert(x >= 272 && extra >= 272 && pad >= 272);
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 277);	/* 0..271 + 5 new */
	ck_assert_ptr_null(fg_tokenizer_token_bytes(t, 265, &n));	/* a hole */
	/* Added tokens match whole; the longest wins. */
	{
		int32_t want[] = { 'h', 'i', 270, 259, 'r', 'e', s_id, 'a', xy, x, 'z', pad };
		const char *s = "hi<added>here<s>a<x><y><x>z<pad>";

		encode_ok(t, s, strlen(s), &ids, &n);
		ck_assert_uint_eq(n, sizeof(want) / sizeof(want[0]));
		ck_assert(!memcmp(ids, want, sizeof(want)));
		free(ids);
		check_roundtrip(t, s, strlen(s));
	}
	/* tokenizer_config's added_tokens_decoder keeps <|endoftext|> special
	 * although the roles moved to <s> and </s>. */
	EXPECT(t, "<|endoftext|>", 262);
	EXPECT(t, "<x<y>", '<', 'x', '<', 'y', '>');
	fg_tokenizer_free(t);

	/* With the roles renamed and no added_tokens_decoder, <|endoftext|> is
	 * plain text again, as with transformers. */
	unlink(tmp_path("tokenizer_config.json"));
	ck_assert_msg(load_dir_tmp(&t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_UNSAID);
	encode_ok(t, "<|endoftext|>", 13, &ids, &n);
	ck_assert_uint_gt(n, 1);
	free(ids);
	fg_tokenizer_free(t);

	/* A role set to null has no token. */
	write_str("special_tokens_map.json", "{\"bos_token\": null, \"pad_token\": \"ab\"}");
	unlink(tmp_path("added_tokens.json"));
	ck_assert_msg(load_dir_tmp(&t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tokenizer_bos_id(t), -1);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 262);	/* still the default */
	ck_assert_int_eq(fg_tokenizer_pad_id(t), 256);
	EXPECT(t, "abc", 256, 'c');	/* "ab" is matched whole, before BPE's a + bc */
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), N_SMALL);
	fg_tokenizer_free(t);
	unlink(tmp_path("special_tokens_map.json"));
	rm_tmpdir();
}
END_TEST

/* The files of an OPT checkpoint as transformers writes them: roles as
 * AddedToken objects, model_max_length past any integer type. */
START_TEST(test_opt_style_folder)
{
	static const char *const specials[] = { "<s>", "<pad>", "</s>", "<unk>" };
	struct fg_tokenizer *t;
	json_t *v = json_object();
	const char *tok = "{\"content\": \"%s\", \"lstrip\": false, \"normalized\": true, "
			  "\"rstrip\": false, \"single_word\": false}";
	char bos[200], pad[200], cfg[1200];

	make_tmpdir();
	for (int i = 0; i < 4; i++)
		json_object_set_new(v, specials[i], json_integer(i));
	for (int b = 0; b < 256; b++) {
		char c[3];

		byte_char(b, c);
		json_object_set_new(v, c, json_integer(4 + b));
	}
	json_object_set_new(v, "ab", json_integer(260));
	ck_assert_int_eq(json_dump_file(v, tmp_path("vocab.json"), 0), 0);
	json_decref(v);
	write_str("merges.txt", "#version: 0.2\na b\n");
	snprintf(bos, sizeof(bos), tok, "</s>");
	snprintf(pad, sizeof(pad), tok, "<pad>");
	snprintf(cfg, sizeof(cfg), "{\"bos_token\": %s, \"eos_token\": %s, \"pad_token\": %s, "
		 "\"unk_token\": %s}", bos, bos, pad, bos);
	write_str("special_tokens_map.json", cfg);
	snprintf(cfg, sizeof(cfg), "{\"add_bos_token\": true, \"add_prefix_space\": false, "
		 "\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"</s>\", "
		 "\"lstrip\": false, \"normalized\": true, \"rstrip\": false, "
		 "\"single_word\": false}, \"errors\": \"replace\", "
		 "\"model_max_length\": 1000000000000000019884624838656, "
		 "\"tokenizer_class\": \"GPT2Tokenizer\"}");
	write_str("tokenizer_config.json", cfg);
	ck_assert_msg(load_dir_tmp(&t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 2);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 2);
	ck_assert_int_eq(fg_tokenizer_unk_id(t), 2);
	ck_assert_int_eq(fg_tokenizer_pad_id(t), 1);
	ck_assert_int_eq(fg_tokenizer_bos_rule(t), FG_TOK_BOS_ADD);
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t), 261);
	/* "<s>" has no role here, so it is plain text; "</s>" matches whole. */
	EXPECT(t, "ab</s><s>", 260, 2, 4 + '<', 4 + 's', 4 + '>');
	fg_tokenizer_free(t);
	unlink(tmp_path("special_tokens_map.json"));
	unlink(tmp_path("tokenizer_config.json"));
	rm_tmpdir();
}
END_TEST

/* Whether bos leads, from the GPT-2 files' tokenizer_config.json (as
 * transformers' GPT2Tokenizer reads add_bos_token: core/tokenizer/special.c). */
static enum fg_tok_bos gpt2_rule(const char *cfg, int32_t *bos)
{
	struct fg_tokenizer *t;
	enum fg_tok_bos r;

	if (cfg)
		write_str("tokenizer_config.json", cfg);
	else
		unlink(tmp_path("tokenizer_config.json"));
	ck_assert_msg(load_dir_tmp(&t) == 0, "%s", fg_last_error());
	r = fg_tokenizer_bos_rule(t);
	*bos = fg_tokenizer_bos_id(t);
	/* Encoding never adds bos: the caller does, by the rule. */
	EXPECT(t, "abc", 'a', 261);
	fg_tokenizer_free(t);
	return r;
}

START_TEST(test_bos_rule_gpt2)
{
	int32_t bos;

	make_tmpdir();
	write_small();
	/* Nothing said: the model family's default applies. */
	ck_assert_int_eq(gpt2_rule(NULL, &bos), FG_TOK_BOS_UNSAID);
	ck_assert_int_eq(bos, 262);
	ck_assert_int_eq(gpt2_rule("{\"add_bos_token\": null}", &bos), FG_TOK_BOS_UNSAID);
	ck_assert_int_eq(gpt2_rule("{\"add_bos_token\": true}", &bos), FG_TOK_BOS_ADD);
	ck_assert_int_eq(bos, 262);	/* GPT-2's <|endoftext|> */
	ck_assert_int_eq(gpt2_rule("{\"add_bos_token\": false}", &bos), FG_TOK_BOS_NONE);
	/* OPT's files: bos </s>, added after the vocabulary. */
	ck_assert_int_eq(gpt2_rule("{\"add_bos_token\": true, \"bos_token\": \"</s>\"}", &bos),
			 FG_TOK_BOS_ADD);
	ck_assert_int_eq(bos, (int32_t)N_SMALL);
	/* No bos token to add: none (transformers adds none either). */
	ck_assert_int_eq(gpt2_rule("{\"add_bos_token\": true, \"bos_token\": null}", &bos),
			 FG_TOK_BOS_NONE);
	ck_assert_int_eq(bos, -1);
	unlink(tmp_path("tokenizer_config.json"));
	unlink(tmp_path("vocab.json"));
	unlink(tmp_path("merges.txt"));
	rm_tmpdir();
}
END_TEST

static void special_case(const char *name, const char *json, const char *needle2)
{
	struct fg_tokenizer *t;

	write_str(name, json);
	expect_error(load_dir_tmp(&t), tmp_path(name), needle2);
	ck_assert_ptr_null(t);
	unlink(tmp_path(name));
}

START_TEST(test_bad_special_files)
{
	make_tmpdir();
	write_small();
	special_case("special_tokens_map.json", "{\"bos_token\": ", "not valid JSON");
	special_case("special_tokens_map.json", "[]", "not a JSON object");
	special_case("special_tokens_map.json", "{\"eos_token\": 5}", "eos_token");
	special_case("special_tokens_map.json", "{\"eos_token\": {\"content\": 1}}", "eos_token");
	special_case("special_tokens_map.json", "{\"eos_token\": \"\"}", "1 to");
	special_case("special_tokens_map.json", "{\"additional_special_tokens\": \"<a>\"}",
		     "additional_special_tokens");
	special_case("added_tokens.json", "{\"<a>\": \"300\"}", "\"<a>\"");
	special_case("added_tokens.json", "{\"<a>\": 100000000}", "out of range");
	special_case("added_tokens.json", "{\"<a>\": 256}", "\"ab\"");	/* id taken */
	special_case("added_tokens.json", "{\"ab\": 300}", "already has id 256");
	special_case("added_tokens.json", "{\"<a>\": 300, \"<b>\": 300}", "\"<a>\"");
	special_case("tokenizer_config.json", "{\"added_tokens_decoder\": []}",
		     "added_tokens_decoder");
	special_case("tokenizer_config.json",
		     "{\"added_tokens_decoder\": {\"x1\": {\"content\": \"<a>\"}}}", "\"x1\"");
	special_case("tokenizer_config.json",
		     "{\"added_tokens_decoder\": {\"-3\": {\"content\": \"<a>\"}}}", "\"-3\"");
	special_case("tokenizer_config.json",
		     "{\"added_tokens_decoder\": {\"300\": \"<a>\"}}", "\"300\"");
	special_case("tokenizer_config.json", "{\"add_bos_token\": \"yes\"}", "add_bos_token");
	special_case("tokenizer_config.json", "{\"add_bos_token\": 1}", "must be true or false");
	unlink(tmp_path("vocab.json"));
	unlink(tmp_path("merges.txt"));
	rm_tmpdir();
}
END_TEST

static Suite *tokenizer_suite(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("gpt2");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_golden_load);
	tcase_add_test(tc, test_golden_load_dir);
	tcase_add_test(tc, test_gpt2_tables);
	tcase_add_test(tc, test_pretokenize);
	tcase_add_test(tc, test_unicode_classes);
	tcase_add_test(tc, test_bpe_paths);
	tcase_add_test(tc, test_roundtrip_random);
	tcase_add_test(tc, test_long_inputs);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_small_vocab);
	tcase_add_test(tc, test_rank_inversion);
	tcase_add_test(tc, test_bad_vocab);
	tcase_add_test(tc, test_bad_merges);
	tcase_add_test(tc, test_special_files);
	tcase_add_test(tc, test_opt_style_folder);
	tcase_add_test(tc, test_bos_rule_gpt2);
	tcase_add_test(tc, test_bad_special_files);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	struct stat st;
	SRunner *sr;
	int failed;

	if (!td || !*td) {
		printf("FGCORE_TESTDATA is not set: skipping the tokenizer tests "
		       "(set it to the shared/testdata folder)\n");
		return 77;
	}
	snprintf(gpt2_dir, sizeof(gpt2_dir), "%s/tokenizer/gpt2", td);
	snprintf(vocab_path, sizeof(vocab_path), "%s/vocab.json", gpt2_dir);
	snprintf(merges_path, sizeof(merges_path), "%s/merges.txt", gpt2_dir);
	if (stat(vocab_path, &st) != 0 || stat(merges_path, &st) != 0) {
		fprintf(stderr, "FGCORE_TESTDATA=%s: %s or merges.txt is missing\n", td, vocab_path);
		return 1;
	}
	sr = srunner_create(tokenizer_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
