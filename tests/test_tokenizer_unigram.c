/* tests/test_tokenizer_unigram.c - SentencePiece-style tokenizer.json forms:
 * the Metaspace pre-tokenizer and decoder, the Unigram model, NFKC and Strip.
 *
 * The references are Hugging Face tokenizers' own ids and decoded texts for
 * four small files in tests/data/tokenizer (made by
 * tests/reference/make_tokenizer_refs.py; committed, so no Python runs
 * here).  Then hand-made files whose expected ids were taken from tokenizers
 * 0.23.3 on the same JSON (each case says what it shows), a property round
 * trip and an independent best-score check of the Viterbi search, and one
 * clear line for each malformed file. */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_tmpdir.h"
#include "tests/test_rng.h"


/* In-tree data: $FGCORE_SRCDIR under make check, else the configured tree. */
static const char *data_dir(const char *name)
{
	static char path[PATH_MAX];
	const char *src = getenv("FGCORE_SRCDIR");

	snprintf(path, sizeof(path), "%s/tests/data/tokenizer/%s",
		 src && *src ? src : FG_TEST_SRCDIR, name);
	return path;
}

static struct fg_tokenizer *load_data(const char *name)
{
	struct fg_tokenizer *t = NULL;
	int rc = fg_tokenizer_load_dir(data_dir(name), &t);

	ck_assert_msg(rc == 0, "load %s: %d %s", name, rc, fg_last_error());
	return t;
}

static void encode_ok(const struct fg_tokenizer *t, const char *s, size_t len, int32_t **ids,
		      size_t *n)
{
	int rc = fg_tokenizer_encode(t, s, len, ids, n);

	ck_assert_msg(rc == 0, "encode \"%.*s\": %d %s", (int)len, s, rc, fg_last_error());
}

static char *decode_ok(const struct fg_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
	char *s;
	int rc = fg_tokenizer_decode(t, ids, n, &s, len);

	ck_assert_msg(rc == 0, "decode: %d %s", rc, fg_last_error());
	ck_assert_int_eq(s[*len], '\0');
	return s;
}

/* ---- Hugging Face's ids and decoded texts ---- */

static void check_list(const struct fg_tokenizer *t, const char *name, const char *key,
		       json_t *list)
{
	json_t *c;
	size_t i;

	ck_assert_msg(json_is_array(list) && json_array_size(list) > 0, "%s: no \"%s\"", name,
		      key);
	json_array_foreach(list, i, c) {
		json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
		json_t *jd = json_object_get(c, "decoded"), *e;
		const char *text = json_string_value(jt);
		size_t len = json_string_length(jt), n, k, dlen;
		int32_t *ids, *want;
		char *back;

		ck_assert(text && json_is_array(jids) && json_is_string(jd));
		encode_ok(t, text, len, &ids, &n);
		json_array_foreach(jids, k, e) {
			ck_assert_msg(k < n, "%s %s[%zu] \"%s\": %zu ids, want %zu", name, key, i,
				      text, n, json_array_size(jids));
			ck_assert_msg(ids[k] == json_integer_value(e),
				      "%s %s[%zu] \"%s\": id[%zu] = %d, want %lld", name, key, i,
				      text, k, ids[k], (long long)json_integer_value(e));
		}
		ck_assert_msg(n == json_array_size(jids), "%s %s[%zu] \"%s\": %zu ids, want %zu",
			      name, key, i, text, n, json_array_size(jids));
		/* decode the reference's ids (equal to ours by now) */
		want = malloc((n ? n : 1) * sizeof(*want));
		ck_assert_ptr_nonnull(want);
		json_array_foreach(jids, k, e)
			want[k] = (int32_t)json_integer_value(e);
		back = decode_ok(t, want, n, &dlen);
		ck_assert_msg(dlen == json_string_length(jd) &&
			      !memcmp(back, json_string_value(jd), dlen),
			      "%s %s[%zu] \"%s\": decodes to \"%s\", want \"%s\"", name, key, i, text,
			      back, json_string_value(jd));
		free(back);
		free(want);
		free(ids);
	}
}

static void run_golden(const char *name)
{
	struct fg_tokenizer *t = load_data(name);
	char path[PATH_MAX + 16];
	json_error_t jerr;
	json_t *g, *v;

	/* every piece or token is one id (the added tokens are among them) */
	snprintf(path, sizeof(path), "%s/tokenizer.json", data_dir(name));
	g = json_load_file(path, 0, &jerr);
	ck_assert_msg(g != NULL, "%s: %s", path, jerr.text);
	v = json_object_get(json_object_get(g, "model"), "vocab");
	ck_assert_uint_eq(fg_tokenizer_vocab_size(t),
			  json_is_array(v) ? json_array_size(v) : json_object_size(v));
	json_decref(g);
	snprintf(path, sizeof(path), "%s/golden.json", data_dir(name));
	g = json_load_file(path, 0, &jerr);
	ck_assert_msg(g != NULL, "%s: %s", path, jerr.text);
	check_list(t, name, "cases", json_object_get(g, "cases"));
	check_list(t, name, "random", json_object_get(g, "random"));
	ck_assert_uint_eq(json_array_size(json_object_get(g, "random")), 200);
	json_decref(g);
	fg_tokenizer_free(t);
}

START_TEST(test_golden_unigram_metaspace)
{
	run_golden("unigram-metaspace");
}
END_TEST

START_TEST(test_golden_unigram_bytefallback)
{
	run_golden("unigram-bytefallback");
}
END_TEST

START_TEST(test_golden_bpe_metaspace_legacy)
{
	run_golden("bpe-metaspace-legacy");
}
END_TEST

START_TEST(test_golden_bpe_metaspace_first)
{
	run_golden("bpe-metaspace-first");
}
END_TEST

/* Roles as LlamaTokenizer has them by default, unk from model.unk_id. */
START_TEST(test_unigram_roles)
{
	struct fg_tokenizer *t = load_data("unigram-bytefallback");
	size_t len;
	const char *b;

	ck_assert_int_eq(fg_tokenizer_unk_id(t), 0);
	ck_assert_int_eq(fg_tokenizer_bos_id(t), 1);
	ck_assert_int_eq(fg_tokenizer_eos_id(t), 2);
	ck_assert_int_eq(fg_tokenizer_lookup(t, "<0x41>"), 3 + 0x41);
	/* token_bytes: one token alone keeps its leading space. */
	b = fg_tokenizer_token_bytes(t, fg_tokenizer_lookup(t, "\xe2\x96\x81the"), &len);
	ck_assert(b && len == 4 && !memcmp(b, " the", 4));
	b = fg_tokenizer_token_bytes(t, 3 + 0xE2, &len);
	ck_assert(b && len == 1 && (unsigned char)b[0] == 0xE2);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- properties over random texts ---- */

/* A Metaspace "always" Unigram with byte fallback and no normalizer gives
 * back any valid text that neither starts with a space nor holds "▁", a
 * special token (after which "always" puts a space) or a byte piece's name
 * such as "<0x41>" (which decodes to its byte): the Viterbi search may cut
 * anywhere, and every cut must decode to its text. */
START_TEST(test_unigram_roundtrip)
{
	static const char *const pool[] = {
		"the", " quick", "a", "b", " ", "  ", "\n", "\t", "caf\xc3\xa9", "\xc3\xbc",
		"\xe6\x97\xa5", "\xe2\x98\x83", "\xf0\x9f\x98\x80", "\xf0\x9d\x94\x98", "e\xcc\x81",
		"\xef\xac\x81", "12", "345", ".", "!", "x", "piece", "hello world",
	};
	char path[PATH_MAX + 32], buf[1024];
	struct fg_tokenizer *t;
	json_error_t jerr;
	json_t *f;
	int rc;

	snprintf(path, sizeof(path), "%s/tokenizer.json", data_dir("unigram-bytefallback"));
	f = json_load_file(path, 0, &jerr);
	ck_assert_msg(f != NULL, "%s", jerr.text);
	json_object_set_new(f, "normalizer", json_null());
	json_object_set_new(f, "pre_tokenizer", json_pack("{s:s, s:s, s:s}", "type", "Metaspace",
							  "replacement", "\xe2\x96\x81",
							  "prepend_scheme", "always"));
	json_object_set_new(f, "decoder", json_pack("{s:s, s:[{s:s}, {s:s, s:s}]}", "type",
						    "Sequence", "decoders", "type", "ByteFallback",
						    "type", "Metaspace", "replacement",
						    "\xe2\x96\x81"));
	tmp_make("fgunigram");
	snprintf(path, sizeof(path), "%s/tokenizer.json", tmp_root);
	ck_assert_int_eq(json_dump_file(f, path, 0), 0);
	json_decref(f);
	rc = fg_tokenizer_load_dir(tmp_root, &t);
	ck_assert_msg(rc == 0, "%s", fg_last_error());
	rng_state = 4321;
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = 0, target = rnd() % 200, n, dlen;
		int32_t *ids;
		char *back;

		while (len < target) {
			const char *p = pool[rnd() % (sizeof(pool) / sizeof(pool[0]))];

			if (len == 0 && p[0] == ' ')
				continue;
			memcpy(buf + len, p, strlen(p));
			len += strlen(p);
		}
		encode_ok(t, buf, len, &ids, &n);
		for (size_t i = 0; i < n; i++)
			ck_assert(ids[i] >= 0 && (size_t)ids[i] < fg_tokenizer_vocab_size(t));
		back = decode_ok(t, ids, n, &dlen);
		ck_assert_msg(dlen == len && !memcmp(back, buf, len),
			      "round trip %d: \"%.*s\" -> \"%s\"", iter, (int)len, buf, back);
		free(back);
		free(ids);
	}
	fg_tokenizer_free(t);
	tmp_teardown();
}
END_TEST

/* ---- hand-made files ---- */

static char dir[PATH_MAX];

static void setup(void)
{
	tmp_make("fgunigram");
	snprintf(dir, sizeof(dir), "%s", tmp_root);
}

static int load_tmp(json_t *root, struct fg_tokenizer **t)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	ck_assert_int_eq(json_dump_file(root, path, 0), 0);
	json_decref(root);
	fg_clear_error();
	*t = NULL;
	return fg_tokenizer_load_dir(dir, t);
}

static json_t *parse(const char *json)
{
	json_error_t jerr;
	json_t *v = json_loads(json, JSON_DECODE_ANY, &jerr);

	ck_assert_msg(v != NULL, "%s: %s", json, jerr.text);
	return v;
}

/* A Unigram file: vocab (JSON) and unk_id, no pipeline, "<s>" (id 1) an
 * added special token when with_s. */
static json_t *uni_file(const char *vocab, int unk_id, bool with_s)
{
	json_t *root = json_object(), *m = json_object();

	json_object_set_new(m, "type", json_string("Unigram"));
	json_object_set_new(m, "unk_id", unk_id >= 0 ? json_integer(unk_id) : json_null());
	json_object_set_new(m, "vocab", parse(vocab));
	json_object_set_new(m, "byte_fallback", json_false());
	json_object_set_new(root, "model", m);
	if (with_s)
		json_object_set_new(root, "added_tokens",
				    parse("[{\"id\": 1, \"content\": \"<s>\", \"single_word\": false,"
					  " \"lstrip\": false, \"rstrip\": false, \"normalized\":"
					  " false, \"special\": true}]"));
	return root;
}

static void expect_ids(const struct fg_tokenizer *t, const char *s, const int32_t *want,
		       size_t nwant)
{
	int32_t *ids;
	size_t n;

	encode_ok(t, s, strlen(s), &ids, &n);
	for (size_t i = 0; i < n && i < nwant; i++)
		ck_assert_msg(ids[i] == want[i], "\"%s\": id %zu is %d, want %d", s, i, ids[i],
			      want[i]);
	ck_assert_msg(n == nwant, "\"%s\": %zu ids, want %zu", s, n, nwant);
	free(ids);
}

#define EXPECT(t, s, ...)                                                                       \
	do {                                                                                    \
		static const int32_t w_[] = { __VA_ARGS__ };                                    \
		expect_ids(t, s, w_, sizeof(w_) / sizeof(w_[0]));                               \
	} while (0)

static void expect_decoded(const struct fg_tokenizer *t, const int32_t *ids, size_t n,
			   const char *want)
{
	size_t len;
	char *s = decode_ok(t, ids, n, &len);

	ck_assert_msg(!strcmp(s, want), "decoded \"%s\", want \"%s\"", s, want);
	free(s);
}

#define DECODES(t, want, ...)                                                                   \
	do {                                                                                    \
		static const int32_t d_[] = { __VA_ARGS__ };                                    \
		expect_decoded(t, d_, sizeof(d_) / sizeof(d_[0]), want);                        \
	} while (0)

/* The Viterbi search, its ties, unk runs, byte fallback, repeated pieces. */
START_TEST(test_unigram_steps)
{
	struct fg_tokenizer *t;
	json_t *f;
	int32_t *ids;
	size_t n;

	/* tokenizers' own doc example: abcd|a|cd|xx (the two x one fused unk) */
	ck_assert_msg(load_tmp(uni_file("[[\"<unk>\", 0], [\"a\", 0], [\"b\", 0], [\"c\", 0], "
					"[\"d\", 0], [\"cd\", 1], [\"ab\", 2], [\"abc\", 5], "
					"[\"abcd\", 10]]", 0, false), &t) == 0, "%s",
		      fg_last_error());
	EXPECT(t, "abcdacdxx", 8, 1, 5, 0);
	expect_ids(t, "", NULL, 0);
	fg_tokenizer_free(t);
	/* Ties keep the first candidate: "ab" whole (-2) before a|b (-2);
	 * a|ba before ab|a. */
	ck_assert(load_tmp(uni_file("[[\"<unk>\", 0], [\"a\", -1], [\"b\", -1], [\"ab\", -2], "
				    "[\"ba\", -2]]", 0, false), &t) == 0);
	EXPECT(t, "ab", 3);
	EXPECT(t, "abab", 3, 3);
	EXPECT(t, "aba", 1, 4);
	fg_tokenizer_free(t);
	/* A piece listed twice is its later id; an empty piece never matches. */
	ck_assert(load_tmp(uni_file("[[\"<unk>\", 0], [\"a\", -1], [\"a\", -2], [\"\", 5]]", 0,
				    false), &t) == 0);
	EXPECT(t, "aa", 2, 2);
	DECODES(t, "a a", 1, 2);	/* no decoder: joined with spaces */
	fg_tokenizer_free(t);
	/* Positive scores: unk scores (lowest - 10) = 5, and two of them (10)
	 * lose to "xy" (15); an unk run that is itself a piece is that piece. */
	ck_assert(load_tmp(uni_file("[[\"<unk>\", 20], [\"a\", 15], [\"xy\", 15]]", 0, false),
			   &t) == 0);
	EXPECT(t, "xy", 2);
	fg_tokenizer_free(t);
	ck_assert(load_tmp(uni_file("[[\"<unk>\", 5], [\"a\", -1], [\"xy\", -3]]", 0, false),
			   &t) == 0);
	EXPECT(t, "axya", 1, 2, 1);
	/* invalid UTF-8: each bad byte an unknown character, fused */
	EXPECT(t, "a\xff\xfe" "a", 1, 0, 1);
	fg_tokenizer_free(t);
	/* byte fallback: a fused run of unknown characters as its bytes when all
	 * are pieces (☃☃ = E2 98 83 E2 98 83), else unk. */
	f = uni_file("[[\"<unk>\", 0], [\"a\", -1], [\"<0xE2>\", 0], [\"<0x98>\", 0], "
		     "[\"<0x83>\", 0]]", 0, false);
	json_object_set_new(json_object_get(f, "model"), "byte_fallback", json_true());
	json_object_set_new(f, "decoder", parse("{\"type\": \"ByteFallback\"}"));
	ck_assert(load_tmp(f, &t) == 0);
	EXPECT(t, "a\xe2\x98\x83\xe2\x98\x83" "a", 1, 2, 3, 4, 2, 3, 4, 1);
	EXPECT(t, "a\xc3\xa9" "a", 1, 0, 1);
	DECODES(t, "a\xe2\x98\x83" "a", 1, 2, 3, 4, 1);
	fg_tokenizer_free(t);
	/* unk_id null: a text no piece covers is refused, as tokenizers does. */
	ck_assert(load_tmp(uni_file("[[\"a\", -1]]", -1, false), &t) == 0);
	EXPECT(t, "a", 0);
	ck_assert_int_eq(fg_tokenizer_encode(t, "ab", 2, &ids, &n), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "tokenizer.json: model.unk_id:") &&
		      strstr(fg_last_error(), "no unk piece") && !strchr(fg_last_error(), '\n'),
		      "%s", fg_last_error());
	fg_tokenizer_free(t);
}
END_TEST

/* An independent check of optimality: the best total score by a plain
 * dynamic program over every cut equals the score of what encode chose. */
START_TEST(test_unigram_best_score)
{
	static const char *const alpha[] = { "a", "b", "c", "\xc3\xa9" };
	char *pieces[64];
	double score[64];
	size_t np = 0;
	struct fg_tokenizer *t;
	json_t *vocab = json_array();

	rng_state = 99;
	/* every single character, then random strings of 2 to 4 characters */
	for (size_t k = 0; k < 4; k++)
		pieces[np++] = strdup(alpha[k]);
	while (np < 40) {
		char p[32] = "";
		size_t l = 2 + rnd() % 3, dup = 0;

		for (size_t k = 0; k < l; k++)
			strcat(p, alpha[rnd() % 4]);
		for (size_t k = 0; k < np; k++)
			dup |= !strcmp(pieces[k], p);
		if (!dup)
			pieces[np++] = strdup(p);
	}
	for (size_t k = 0; k < np; k++) {
		score[k] = -(double)(rnd() % 1000) / 100.0 - 0.5;
		json_array_append_new(vocab, json_pack("[s, f]", pieces[k], score[k]));
	}
	{
		json_t *f = uni_file("[]", -1, false);

		json_object_set_new(json_object_get(f, "model"), "vocab", vocab);
		ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	}
	for (int iter = 0; iter < 500; iter++) {
		char s[128] = "";
		size_t len, n, at = 0, nc = 1 + rnd() % 24;
		double best[128], got = 0;
		int32_t *ids;

		for (size_t k = 0; k < nc; k++)
			strcat(s, alpha[rnd() % 4]);
		len = strlen(s);
		/* best[i]: highest score of s[0, i) cut into pieces */
		best[0] = 0;
		for (size_t i = 1; i <= len; i++) {
			best[i] = -INFINITY;
			for (size_t k = 0; k < np; k++) {
				size_t pl = strlen(pieces[k]);

				if (pl <= i && !memcmp(s + i - pl, pieces[k], pl) &&
				    best[i - pl] + score[k] > best[i])
					best[i] = best[i - pl] + score[k];
			}
		}
		encode_ok(t, s, len, &ids, &n);
		for (size_t i = 0; i < n; i++) {
			ck_assert(ids[i] >= 0 && (size_t)ids[i] < np);
			ck_assert(!memcmp(s + at, pieces[ids[i]], strlen(pieces[ids[i]])));
			at += strlen(pieces[ids[i]]);
			got += score[ids[i]];
		}
		ck_assert_uint_eq(at, len);
		ck_assert_msg(fabs(got - best[len]) < 1e-9, "\"%s\": score %g, best %g", s, got,
			      best[len]);
		free(ids);
	}
	fg_tokenizer_free(t);
	for (size_t k = 0; k < np; k++)
		free(pieces[k]);
}
END_TEST

/* The vocabulary of the Metaspace cases (ids as listed). */
#define MS_VOCAB                                                                                \
	"[[\"<unk>\", 0], [\"<s>\", 0], [\"\\u2581\", -2], [\"a\", -2], [\"b\", -2],"            \
	" [\"\\u2581a\", -1], [\"\\u2581b\", -1], [\"ab\", -1], [\"\\u2581ab\", -1.5],"           \
	" [\"_\", -2], [\"_a\", -1], [\"\\u2581a\\u2581b\", -0.5]]"

static struct fg_tokenizer *ms_load(const char *pre, const char *dec)
{
	struct fg_tokenizer *t;
	json_t *f = uni_file(MS_VOCAB, 0, true);

	if (pre)
		json_object_set_new(f, "pre_tokenizer", parse(pre));
	if (dec)
		json_object_set_new(f, "decoder", parse(dec));
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	return t;
}

#define MS(extra) "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\"" extra "}"

/* Metaspace's prepend schemes, split, its older form and its decoder
 * (expected ids from tokenizers 0.23.3 on these files). */
START_TEST(test_metaspace_steps)
{
	struct fg_tokenizer *t;
	size_t len;
	const char *b;

	/* always (the default): the replacement leads every pre-token, also
	 * after an added token; a text that starts with a space or "▁" gets no
	 * second one. */
	t = ms_load(MS(""), NULL);
	EXPECT(t, "ab", 8);
	EXPECT(t, "a b", 5, 6);
	EXPECT(t, " ab", 8);
	EXPECT(t, "a  b", 5, 2, 6);
	EXPECT(t, "<s>ab", 1, 8);
	EXPECT(t, "ab<s>ab", 8, 1, 8);
	EXPECT(t, "\xe2\x96\x81" "ab", 8);
	EXPECT(t, " ", 2);
	EXPECT(t, "ab ", 8, 2);
	fg_tokenizer_free(t);
	/* first: only where the text starts */
	t = ms_load(MS(", \"prepend_scheme\": \"first\""), NULL);
	EXPECT(t, "ab", 8);
	EXPECT(t, "<s>ab", 1, 7);
	EXPECT(t, "<s> ab", 1, 8);
	EXPECT(t, "ab<s>ab", 8, 1, 7);
	fg_tokenizer_free(t);
	/* never */
	t = ms_load(MS(", \"prepend_scheme\": \"never\""), NULL);
	EXPECT(t, "ab", 7);
	EXPECT(t, "a b", 3, 6);
	EXPECT(t, "ab ", 7, 2);
	fg_tokenizer_free(t);
	/* split false: "▁a▁b" is one pre-token, so the piece "▁a▁b" fits */
	t = ms_load(MS(", \"split\": false"), NULL);
	EXPECT(t, "a b", 11);
	EXPECT(t, "a  b", 5, 2, 6);
	fg_tokenizer_free(t);
	t = ms_load(MS(""), NULL);
	EXPECT(t, "a b", 5, 6);
	fg_tokenizer_free(t);
	/* the older form, with another replacement character */
	t = ms_load("{\"type\": \"Metaspace\", \"replacement\": \"_\", \"str_rep\": \"_\", "
		    "\"add_prefix_space\": true}", NULL);
	EXPECT(t, "ab", 9, 7);
	EXPECT(t, "a b", 10, 9, 4);
	EXPECT(t, "a  b", 10, 9, 9, 4);
	fg_tokenizer_free(t);
	/* first after a Split: only the piece at the text's start; Removed
	 * drops a leading match, so nothing then starts the text. */
	t = ms_load("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
		    "\"pattern\": {\"String\": \"b\"}, \"behavior\": \"Isolated\", \"invert\": "
		    "false}, " MS(", \"prepend_scheme\": \"first\"") "]}", NULL);
	EXPECT(t, "bab", 6, 3, 4);
	EXPECT(t, "ab ", 5, 4, 2);
	EXPECT(t, "<s>ab", 1, 3, 4);
	fg_tokenizer_free(t);
	t = ms_load("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
		    "\"pattern\": {\"String\": \"b\"}, \"behavior\": \"Removed\", \"invert\": "
		    "false}, " MS(", \"prepend_scheme\": \"first\"") "]}", NULL);
	EXPECT(t, "bab", 3);
	EXPECT(t, "a  b", 5, 2, 2);
	fg_tokenizer_free(t);
	/* first after normalizers: where they took the text's first character
	 * away (Strip, a Replace deleting it), nothing starts the text any
	 * more; what Prepend puts first stands at the start. */
	{
		static const char *const norms[] = {
			"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}",
			"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
			"\"prepend\": \" \"}, {\"type\": \"Strip\", \"strip_left\": true, "
			"\"strip_right\": true}]}",
			"{\"type\": \"Replace\", \"pattern\": {\"String\": \"b\"}, \"content\": \"\"}",
		};

		for (int k = 0; k < 3; k++) {
			json_t *f = uni_file(MS_VOCAB, 0, false);

			json_object_set_new(f, "pre_tokenizer",
					    parse(MS(", \"prepend_scheme\": \"first\"")));
			json_object_set_new(f, "normalizer", parse(norms[k]));
			ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
			if (k < 2) {
				EXPECT(t, " ab", 7);
				EXPECT(t, "ab", 8);
				EXPECT(t, "bbab", 6, 4, 7);
			} else {
				EXPECT(t, "bab", 3);
				EXPECT(t, "ab", 5);
			}
			fg_tokenizer_free(t);
		}
	}

	/* The decoder: replacement -> space, every one of the first token's
	 * dropped unless prepend_scheme is "never". */
	t = ms_load(NULL, MS(""));
	DECODES(t, "a b", 5, 6);
	DECODES(t, "  a", 2, 2, 5);
	DECODES(t, "a  b", 3, 2, 6);
	DECODES(t, "<s> a", 1, 5);
	DECODES(t, "ab a", 11, 5);
	/* token_bytes: one token alone keeps its space */
	b = fg_tokenizer_token_bytes(t, 11, &len);
	ck_assert(b && len == 4 && !memcmp(b, " a b", 4));
	fg_tokenizer_free(t);
	t = ms_load(NULL, MS(", \"prepend_scheme\": \"never\""));
	DECODES(t, " a b", 5, 6);
	DECODES(t, "   a", 2, 2, 5);
	DECODES(t, " a b a", 11, 5);
	fg_tokenizer_free(t);
}
END_TEST

/* NFKC and Strip (tokenizers: "ﬁ Ａ" -> "fi A"; Strip removes Unicode
 * White_Space, not U+200B). */
START_TEST(test_normalizers)
{
	struct fg_tokenizer *t;
	json_t *f;
	char *s;
	size_t n;

	f = uni_file(MS_VOCAB, 0, false);
	json_object_set_new(f, "normalizer",
			    parse("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"},"
				  " {\"type\": \"Strip\", \"strip_left\": true, \"strip_right\":"
				  " false}]}"));
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tok_normalize(t, " \xe3\x80\x80\xef\xac\x81 \xef\xbc\xa1 \xc2\xa0",
					  strlen(" \xe3\x80\x80\xef\xac\x81 \xef\xbc\xa1 \xc2\xa0"),
					  &s, &n), 0);
	ck_assert(n == 6 && !memcmp(s, "fi A  ", 6));
	free(s);
	/* NFKC then Strip: U+2003 becomes a space (NFKC), then goes */
	ck_assert_int_eq(fg_tok_normalize(t, "\xe2\x80\x83" "a\xe2\x80\x83", 7, &s, &n), 0);
	ck_assert(n == 2 && !memcmp(s, "a ", 2));
	free(s);
	fg_tokenizer_free(t);
	f = uni_file(MS_VOCAB, 0, false);
	json_object_set_new(f, "normalizer", parse("{\"type\": \"Strip\", \"strip_left\": false,"
						   " \"strip_right\": true}"));
	ck_assert_msg(load_tmp(f, &t) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_tok_normalize(t, "\xe2\x80\x83" "a \xe2\x80\x83\xc2\x85", 10, &s, &n),
			 0);
	ck_assert(n == 4 && !memcmp(s, "\xe2\x80\x83" "a", 4));
	free(s);
	ck_assert_int_eq(fg_tok_normalize(t, "a\xe2\x80\x8b", 4, &s, &n), 0);
	ck_assert(n == 4);
	free(s);
	ck_assert_int_eq(fg_tok_normalize(t, "   ", 3, &s, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(s);
	fg_tokenizer_free(t);
}
END_TEST

/* ---- malformed files: one clear line each, naming the key ---- */

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

static json_t *model_with(json_t *root, const char *key, const char *json)
{
	json_t *m = json_object_get(root, "model");

	if (json)
		json_object_set_new(m, key, parse(json));
	else
		json_object_del(m, key);
	return root;
}

static json_t *with(json_t *root, const char *key, const char *json)
{
	json_object_set_new(root, key, parse(json));
	return root;
}

#define GOOD "[[\"<unk>\", 0], [\"a\", -1]]"

START_TEST(test_unigram_malformed)
{
	static char big[20000];

	/* the vocabulary */
	expect_refused(model_with(uni_file(GOOD, 0, false), "vocab", NULL), "model.vocab",
		       "missing");
	expect_refused(model_with(uni_file(GOOD, 0, false), "vocab", "{\"a\": 0}"),
		       "model.vocab", "not an array");
	expect_refused(uni_file("[]", 0, false), "model.vocab", "0 pieces");
	expect_refused(uni_file("[]", -1, false), "model.vocab", "0 pieces");
	expect_refused(uni_file("[[\"<unk>\", 0], \"a\"]", 0, false), "model.vocab[1]",
		       "[piece, score]");
	expect_refused(uni_file("[[\"<unk>\", 0], [\"a\"]]", 0, false), "model.vocab[1]",
		       "[piece, score]");
	expect_refused(uni_file("[[\"<unk>\", 0], [\"a\", -1, 2]]", 0, false), "model.vocab[1]",
		       "[piece, score]");
	expect_refused(uni_file("[[\"<unk>\", 0], [7, -1]]", 0, false), "model.vocab[1]",
		       "a string and a number");
	expect_refused(uni_file("[[\"<unk>\", 0], [\"a\", \"-1.5\"]]", 0, false),
		       "model.vocab[1]", "finite number");
	expect_refused(uni_file("[[\"<unk>\", 0], [\"a\", null]]", 0, false), "model.vocab[1]",
		       "finite number");
	expect_refused(uni_file("[[\"<unk>\", 0], {\"a\": -1}]", 0, false), "model.vocab[1]",
		       NULL);
	memset(big, 'q', sizeof(big) - 1);
	{
		json_t *f = uni_file(GOOD, 0, false);

		json_array_append_new(json_object_get(json_object_get(f, "model"), "vocab"),
				      json_pack("[s, f]", big, -3.0));
		expect_refused(f, "model.vocab[2]", "at most 16384");
	}
	/* unk_id */
	expect_refused(uni_file(GOOD, 2, false), "model.unk_id", "out of range");
	expect_refused(model_with(uni_file(GOOD, 0, false), "unk_id", "-1"), "model.unk_id",
		       "out of range");
	expect_refused(model_with(uni_file(GOOD, 0, false), "unk_id", "99999999999"),
		       "model.unk_id", "0..1 or null");
	expect_refused(model_with(uni_file(GOOD, 0, false), "unk_id", "0.0"), "model.unk_id",
		       "integer");
	expect_refused(model_with(uni_file(GOOD, 0, false), "unk_id", "\"0\""), "model.unk_id",
		       "integer");
	expect_refused(model_with(uni_file(GOOD, 0, false), "byte_fallback", "1"),
		       "byte_fallback", "true or false");
	/* with a ByteLevel pre-tokenizer, and an added token that is a piece */
	expect_refused(with(uni_file(GOOD, 0, false), "pre_tokenizer",
			    "{\"type\": \"ByteLevel\"}"), "model.type", "ByteLevel");
	expect_refused(with(uni_file(GOOD, 0, false), "added_tokens",
			    "[{\"id\": 0, \"content\": \"a\"}]"), "added_tokens[0]",
		       "already token 1");
}
END_TEST

START_TEST(test_metaspace_malformed)
{
	const char *keys[] = { "pre_tokenizer", "decoder" };

	for (int k = 0; k < 2; k++) {
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}"), keys[k],
			       "\"replacement\" must be one character");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    "{\"type\": \"Metaspace\", \"replacement\": \"\"}"), keys[k],
			       "one character");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    "{\"type\": \"Metaspace\"}"), keys[k], "\"replacement\"");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    MS(", \"prepend_scheme\": \"First\"")), keys[k],
			       "\"prepend_scheme\" must be");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    MS(", \"prepend_scheme\": 1")), keys[k], "prepend_scheme");
		/* tokenizers refuses false with the default "always" too */
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    MS(", \"add_prefix_space\": false")), keys[k],
			       "set \"prepend_scheme\": \"never\"");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k],
				    MS(", \"add_prefix_space\": false, \"prepend_scheme\": "
				       "\"first\"")), keys[k], "contradicts prepend_scheme \"first\"");
		expect_refused(with(uni_file(GOOD, 0, false), keys[k], MS(", \"split\": \"yes\"")),
			       keys[k], "\"split\" must be true or false");
	}
	expect_refused(with(uni_file(GOOD, 0, false), "pre_tokenizer",
			    "{\"type\": \"Sequence\", \"pretokenizers\": [" MS("") ", {\"type\": "
			    "\"Metaspace\", \"replacement\": 5}]}"), "pre_tokenizer.pretokenizers[1]",
		       "\"replacement\" must be a string");
	/* the normalizers these files carry */
	expect_refused(with(uni_file(GOOD, 0, false), "normalizer",
			    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Precompiled\","
			    " \"precompiled_charsmap\": \"AAAA\"}]}"),
		       "normalizer.normalizers[0]", "\"precompiled_charsmap\" is SentencePiece's");
	expect_refused(with(uni_file(GOOD, 0, false), "normalizer", "{\"type\": \"Strip\"}"),
		       "normalizer", "\"strip_left\" and \"strip_right\"");
	expect_refused(with(uni_file(GOOD, 0, false), "normalizer",
			    "{\"type\": \"Strip\", \"strip_left\": 1, \"strip_right\": true}"),
		       "normalizer", "strip_left");
	expect_refused(with(uni_file(GOOD, 0, false), "normalizer", "{\"type\": \"NFKD\"}"),
		       "normalizer", "NFKC, Strip");
	/* NFKC can make a text 11 times as long in UTF-8: two of them (121) are
	 * past the bound of 64. */
	expect_refused(with(uni_file(GOOD, 0, false), "normalizer",
			    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
			    "{\"type\": \"NFKC\"}]}"), "normalizer.normalizers[1]", "121 * n");
}
END_TEST

static Suite *unigram_suite(void)
{
	Suite *s = suite_create("tokenizer.json: Metaspace, Unigram");
	TCase *td = tcase_create("references");
	TCase *tc = tcase_create("files");

	tcase_set_timeout(td, 120);
	tcase_add_test(td, test_golden_unigram_metaspace);
	tcase_add_test(td, test_golden_unigram_bytefallback);
	tcase_add_test(td, test_golden_bpe_metaspace_legacy);
	tcase_add_test(td, test_golden_bpe_metaspace_first);
	tcase_add_test(td, test_unigram_roles);
	tcase_add_test(td, test_unigram_roundtrip);
	suite_add_tcase(s, td);
	tcase_add_checked_fixture(tc, setup, tmp_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_unigram_steps);
	tcase_add_test(tc, test_unigram_best_score);
	tcase_add_test(tc, test_metaspace_steps);
	tcase_add_test(tc, test_normalizers);
	tcase_add_test(tc, test_unigram_malformed);
	tcase_add_test(tc, test_metaspace_malformed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(unigram_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
