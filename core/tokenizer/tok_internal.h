/* core/tokenizer/tok_internal.h - shared by the tokenizer's files; not an API.
 *
 * Two forms share one model: the GPT-2 files (vocab.json + merges.txt, t->pipe
 * NULL) and a Hugging Face tokenizer.json (t->pipe set: its normalizers,
 * pre-tokenizers, BPE options and decoders).  Both use one merge loop
 * (bpe.c), one byte-level alphabet (vocab.c) and one added-token matcher.
 * A tokenizer.json may instead hold a Unigram model (unigram.c). */
#ifndef FG_TOKENIZER_TOK_INTERNAL_H
#define FG_TOKENIZER_TOK_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/tokenizer/tokenizer.h"
#include "core/util/utf8.h"

/* Limits checked before anything is allocated from file contents. */
#define FG_TOK_MAX_FILE_BYTES	(256u << 20)	/* vocab.json, merges.txt, json side files */
#define FG_TOK_MAX_VOCAB	(1u << 22)	/* entries of vocab.json */
#define FG_TOK_MAX_MERGES	(1u << 22)	/* lines of merges.txt */
#define FG_TOK_MAX_ADDED	65536u		/* added / special tokens */
#define FG_TOK_MAX_TOKEN_BYTES	16384u		/* one token's text */
#define FG_TOK_MAX_STEPS	32u		/* normalizers, pre-tokenizers or decoders */
/* How much longer the normalizers may make a text (64n + 64 KiB bytes out of
 * n; real ones: 3n + 9) and the decoders a token's text (16n; real ones
 * shrink it): a Replace that turns "a" into 64 a's, four times over, would
 * turn one character into 16 MB. */
#define FG_TOK_MAX_NORM_GROWTH	64u
#define FG_TOK_MAX_NORM_BYTES	65536u
#define FG_TOK_MAX_DEC_GROWTH	16u

/* ---- Unicode classes (unicode_tables.c, pretokenize.c) ---- */
enum fg_uc_class {
	FG_UC_OTHER = 0,
	FG_UC_L = 1,
	FG_UC_N = 2,
	FG_UC_WS = 3,
};

struct fg_uc_range {
	uint32_t first_cls;	/* first code point << 2 | class */
	uint32_t last;
};

extern const struct fg_uc_range fg_uc_ranges[];
extern const size_t fg_uc_nranges;
extern const char fg_uc_unicode_version[];

enum fg_uc_class fg_uc_class_of(uint32_t cp);
/* Decode one code point at s[0..len) (len > 0) and return its length.
 * Invalid or truncated UTF-8 yields one byte with *cp = FG_UC_INVALID, which
 * classifies as other. */
#define FG_UC_INVALID	0xFFFFFFFFu
size_t fg_utf8_next(const unsigned char *s, size_t len, uint32_t *cp);
/* End offset (> pos) of the GPT-2 pre-token starting at s[pos]; pos < len. */
size_t fg_pretok_next(const char *s, size_t len, size_t pos);

/* ---- byte-level alphabet (vocab.c) ---- */
/* GPT-2's bytes_to_unicode: the code point standing for byte b. */
uint32_t fg_bytelevel_cp(unsigned char b);
/* Inverse: the byte for code point cp, or -1 when cp is not in the alphabet. */
int fg_bytelevel_byte(uint32_t cp);
/* The bytes a byte-level token stands for (out has room for len bytes): its
 * characters mapped back through the alphabet, or, when one is outside it
 * (a special token stored verbatim), its own UTF-8 text.  Returns the length. */
size_t fg_bytelevel_to_bytes(const char *s, size_t len, char *out);

/* ---- loading helpers (vocab.c) ---- */
/* Read a whole file of at most FG_TOK_MAX_FILE_BYTES (+ a NUL byte).  An
 * optional file that does not exist gives -ENOENT and records no error. */
int fg_tok_read_file(const char *path, char **buf, size_t *len, bool optional);
/* The same file parsed as JSON with jansson's decoding flags; a syntax error
 * is one line "path:line:col: not valid JSON (...)" followed by `expected`
 * ("" for none).  -ENOENT, with no error, for an optional missing file. */
int fg_tok_read_json(const char *path, bool optional, size_t flags, const char *expected,
		     json_t **root);
/* Printable, truncated rendering of s for error messages. */
const char *fg_tok_quote(const char *s, size_t len, char *out, size_t outsz);
/* Append len bytes + NUL to the blob; *off receives their offset. */
int fg_tok_blob_add(struct fg_tokenizer *t, const char *s, size_t len, uint32_t *off);
/* Grow text[] and bytes[] to n ids (new ids unused). */
int fg_tok_grow_ids(struct fg_tokenizer *t, size_t n);
/* Load vocab.json and merges.txt into a new tokenizer (no special tokens). */
int fg_tok_load_bpe(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out);
/* A new empty tokenizer (roles -1). */
struct fg_tokenizer *fg_tok_new(void);
/* Give the model's ids 0..n-1 the texts of a {"token": id} object (ids must
 * number the tokens from 0, no duplicates) and index them; byte_level maps
 * each token's characters back through the byte-level alphabet for its
 * bytes.  `what` names the object in errors ("vocab.json", "model.vocab"). */
int fg_tok_load_vocab_obj(struct fg_tokenizer *t, const char *path, const char *what,
			  json_t *obj, bool byte_level);
/* Set t->byte_id[] from the byte-level alphabet: every byte must have a token. */
int fg_tok_byte_ids(struct fg_tokenizer *t, const char *path);
/* One merge "a b" of rank `rank`; errors name `where` (file:line or JSON path). */
int fg_tok_add_merge(struct fg_tokenizer *t, const char *where, const char *vocab_name,
		     const char *a, size_t alen, const char *b, size_t blen, uint32_t rank,
		     char *cat);
/* Register the special tokens of the side files in dir (tokenizer_config.json,
 * special_tokens_map.json, added_tokens.json); dir NULL: none.  A role the
 * files do not name takes defaults[role] (bos, eos, unk) when the vocabulary
 * has it.  Sets t->bos_rule from tokenizer_config.json's add_bos_token
 * (UNSAID when absent); a tokenizer.json template overrides it afterwards.
 * Adds to the pending added-token list; fg_tok_build_added() makes the
 * match tables. */
int fg_tok_load_special(struct fg_tokenizer *t, const char *dir, const char *const defaults[3]);
/* Give id (grown as needed) the text s, decoding to itself, and index it. */
int fg_tok_set_token(struct fg_tokenizer *t, int32_t id, const char *s, size_t len);
/* An added token's text: 1 to FG_TOK_MAX_TOKEN_BYTES bytes, no NUL (errors name where). */
int fg_tok_check_content(const char *where, const char *s, size_t len);
/* Queue id as matched whole (flags FG_ADDED_*); the first queueing of an id wins. */
int fg_tok_queue_added(struct fg_tokenizer *t, int32_t id, unsigned flags);
/* Build the match tables from the queue (and free it); path names the
 * tokenizer.json in errors (NULL for the GPT-2 files). */
int fg_tok_build_added(struct fg_tokenizer *t, const char *path);
/* Load dir/tokenizer.json (and the side files) into a new tokenizer. */
int fg_tok_load_json(const char *dir, struct fg_tokenizer **out);

/* ---- hash tables (hash.c) ---- */
/* string -> id; the strings live in the tokenizer's blob. */
struct fg_strmap {
	uint32_t *slots;	/* id + 1; 0 = empty */
	uint32_t *hashes;
	size_t cap;		/* power of two */
	size_t count;
};

struct fg_pair_slot {
	uint64_t key;		/* left << 32 | right; UINT64_MAX = empty */
	uint32_t rank;
	int32_t merged;
};

struct fg_pairmap {
	struct fg_pair_slot *slots;
	size_t cap;		/* power of two */
	unsigned shift;		/* 64 - log2(cap) */
	size_t count;
};

struct fg_tok_str {
	uint32_t off;		/* into blob */
	uint32_t len;
};

/* Flags of an added token (tokenizer.json's AddedToken). */
#define FG_ADDED_LSTRIP		1u	/* swallows the white space before it */
#define FG_ADDED_RSTRIP		2u	/* ... and after it */
#define FG_ADDED_SINGLE_WORD	4u	/* only between non-word characters */
#define FG_ADDED_NORMALIZED	8u	/* matched in the normalized text */
#define FG_ADDED_SPECIAL	16u

/* A token matched whole in the input before pre-tokenization. */
struct fg_tok_special {
	uint32_t off, len;	/* content to match (normalized when FG_ADDED_NORMALIZED), in blob */
	int32_t id;
	unsigned char first;	/* blob[off] */
	uint8_t flags;
};

/* Tokens sorted by first byte then longest first; those starting with byte c
 * are v[start[c] .. start[c + 1]). */
struct fg_tok_matcher {
	struct fg_tok_special *v;
	size_t n;
	uint32_t start[257];
};

struct fg_tok_pending {
	int32_t id;
	unsigned flags;
};

struct fg_tok_pipeline;

struct fg_tokenizer {
	char *blob;			/* all strings, each NUL-terminated */
	size_t blob_len, blob_cap;
	size_t n_vocab;			/* entries of vocab.json: ids 0..n_vocab-1 */
	size_t n_ids;			/* n_vocab + added ids past it */
	struct fg_tok_str *text;	/* [n_ids] token as written (vocab.json key or content) */
	struct fg_tok_str *bytes;	/* [n_ids] decoded bytes; len UINT32_MAX = unused id */
	struct fg_strmap vocab;		/* text -> id */
	struct fg_pairmap merges;	/* (left, right) -> rank, merged id */
	int32_t byte_id[256];		/* id of each single-byte token (byte-level form) */
	struct fg_tok_matcher added;	/* matched in the raw text */
	struct fg_tok_matcher added_norm; /* matched in the normalized text (tokenizer.json) */
	struct fg_tok_pending *pend;	/* while loading */
	size_t n_pend, pend_cap;
	int32_t bos, eos, unk, pad;
	int8_t bos_rule;		/* enum fg_tok_bos */
	struct fg_tok_pipeline *pipe;	/* NULL: the GPT-2 files */
};

/* Leftmost-longest added token in s[pos..len) (honouring its flags): its
 * span [*ms, *me) (widened by lstrip/rstrip, never before `floor`) and id;
 * 0 when none. */
int fg_tok_find_added(const struct fg_tok_matcher *m, const char *blob, const char *s,
		      size_t len, size_t pos, size_t floor, size_t *ms, size_t *me, int32_t *id);

struct fg_idvec {
	int32_t *v;
	size_t n, cap;
};

int fg_idvec_room(struct fg_idvec *o, size_t more);

uint32_t fg_tok_hash(const char *s, size_t len);
int fg_strmap_init(struct fg_strmap *m, size_t expect);
void fg_strmap_free(struct fg_strmap *m);
/* Insert id under t->text[id] (grows the table): 0, or -ENOMEM. */
int fg_strmap_insert(struct fg_tokenizer *t, int32_t id);
int32_t fg_strmap_find(const struct fg_tokenizer *t, const char *s, size_t len);

int fg_pairmap_init(struct fg_pairmap *m, size_t expect);
void fg_pairmap_free(struct fg_pairmap *m);
/* Set (left, right) -> rank, merged (a later insert of the same pair wins,
 * as in Hugging Face).  The table never fills: sized at init. */
void fg_pairmap_set(struct fg_pairmap *m, int32_t left, int32_t right, uint32_t rank,
		    int32_t merged);
static inline const struct fg_pair_slot *fg_pairmap_find(const struct fg_pairmap *m,
							 int32_t left, int32_t right);

/* ---- BPE (bpe.c) ---- */
/* Scratch for one encode call: never shared between threads. */
struct fg_bpe_scratch {
	void *mem;
	size_t cap;	/* in symbols */
	uint64_t *later;
	size_t nlater, later_cap;
};

/* BPE-encode one pre-token of n bytes, appending ids to out[*nout...]; out
 * has room for n more ids.  use_heap forces the O(n log n) path (tests). */
int fg_bpe_word(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc,
		const unsigned char *w, size_t n, int32_t *out, size_t *nout, int use_heap);
/* The same from n initial symbol ids already at out[*nout...] (merged in place). */
int fg_bpe_merge(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc, int32_t *out,
		 size_t *nout, size_t n, int use_heap);
void fg_bpe_scratch_free(struct fg_bpe_scratch *sc);

/* ---- tokenizer.json (pipeline.c, tokjson.c) ---- */
/* PCRE2 pattern, compiled once, shared read-only by all threads. */
struct fg_regex;
/* Per-text matching state (never shared between threads). */
struct fg_regex_scratch {
	void *md;	/* pcre2_match_data */
	void *mctx;	/* pcre2_match_context */
	void *jit;	/* pcre2_jit_stack */
	size_t budget;	/* bytes of long look-ahead still allowed (fg_regex_allow) */
	size_t window;	/* first window of a search; 0: the default (tests set it) */
	bool no_jit;	/* match without JIT, as where PCRE2 has none (tests) */
};
/* Look-ahead allowed per byte of a text a pattern scans, plus so much per
 * text (a short stretch scanned again and again costs little): a text whose
 * matches need more (the pattern rescans it from many places: quadratic
 * time) is refused.  GPT-2's, Llama 3's and Qwen2's patterns use at most 3
 * per byte, on runs of 250 KB of spaces, letters, digits or punctuation. */
#define FG_REGEX_WORK_PER_BYTE	16u
#define FG_REGEX_WORK_PER_TEXT	(4u << 20)
/* Compile (literal: the pattern is plain text); `where` ("file: JSON path")
 * names the pattern in errors.  On failure, msg gets "at offset N: reason"
 * and -EINVAL is returned. */
int fg_regex_compile(const char *pat, size_t len, bool literal, const char *where,
		     struct fg_regex **out, char *msg, size_t msgsz);
void fg_regex_free(struct fg_regex *re);
/* The fewest characters (so bytes) a match can have. */
size_t fg_regex_min_length(const struct fg_regex *re);
/* Add the work of one scan over len bytes to sc's budget. */
void fg_regex_allow(struct fg_regex_scratch *sc, size_t len);
/* First non-empty match in s[pos..len): 1 and [*ms, *me), 0 when none,
 * negative errno (with FG_ERR) when the matcher fails or the budget is
 * used up. */
int fg_regex_next(const struct fg_regex *re, struct fg_regex_scratch *sc, const char *s,
		  size_t len, size_t pos, size_t *ms, size_t *me);
void fg_regex_scratch_free(struct fg_regex_scratch *sc);

/* A growable byte buffer, shared by encoding and decoding: room is always
 * kept for a NUL after the n bytes. */
struct fg_tok_buf {
	char *p;
	size_t n, cap;
};

static inline int fg_tok_buf_room(struct fg_tok_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->cap - b->n > more)
		return 0;
	if (more > SIZE_MAX / 2 - b->n)
		return -ENOMEM;
	cap = b->cap ? b->cap : 64;
	while (cap <= b->n + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static inline int fg_tok_buf_add(struct fg_tok_buf *b, const char *s, size_t n)
{
	int rc;

	if (!n)
		return 0;
	rc = fg_tok_buf_room(b, n);
	if (rc)
		return rc;
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

enum fg_tok_norm_kind {
	FG_TOK_NORM_PREPEND, FG_TOK_NORM_REPLACE, FG_TOK_NORM_NFC, FG_TOK_NORM_NFKC,
	FG_TOK_NORM_STRIP,
};
struct fg_tok_norm {
	enum fg_tok_norm_kind kind;
	struct fg_tok_str str;		/* Prepend's text, or Replace's String pattern */
	struct fg_tok_str content;	/* Replace's replacement */
	struct fg_regex *re;		/* Replace's Regex pattern, else NULL */
	bool left, right;		/* Strip: which ends */
};

enum fg_split_behavior {
	FG_SPLIT_ISOLATED, FG_SPLIT_REMOVED, FG_SPLIT_MERGED_PREV, FG_SPLIT_MERGED_NEXT,
	FG_SPLIT_CONTIGUOUS,
};
enum fg_pre_kind { FG_PRE_SPLIT, FG_PRE_BYTELEVEL, FG_PRE_METASPACE };
/* Metaspace's prepend_scheme: when the replacement goes before a pre-token
 * that does not start with it (first: only one that starts the text). */
enum fg_prepend { FG_PREPEND_ALWAYS, FG_PREPEND_FIRST, FG_PREPEND_NEVER };
struct fg_tok_pre {
	enum fg_pre_kind kind;
	struct fg_regex *re;		/* Split */
	enum fg_split_behavior behavior;
	bool invert;
	bool add_prefix_space, use_regex;	/* ByteLevel */
	struct fg_tok_str repl;		/* Metaspace: the replacement character */
	enum fg_prepend prepend;
	bool split;
};

enum fg_dec_kind {
	FG_DEC_BYTELEVEL, FG_DEC_REPLACE, FG_DEC_BYTEFALLBACK, FG_DEC_FUSE, FG_DEC_STRIP,
	FG_DEC_METASPACE,
};
struct fg_tok_dec {
	enum fg_dec_kind kind;
	struct fg_tok_str pat, content;	/* Replace; Metaspace's replacement in pat */
	uint32_t strip_cp;		/* Strip: the character, how many at each end */
	uint32_t start, stop;
	enum fg_prepend prepend;	/* Metaspace */
};

/* ---- Unigram (unigram.c) ---- */
struct fg_unigram;
/* Per-text scratch of the Viterbi search (never shared between threads). */
struct fg_unigram_scratch {
	double *score;
	size_t *from, *next;
	int32_t *id;
	size_t cap;	/* entries of each */
};
/* Read a Unigram model object m (vocab, unk_id, byte_fallback) into t and
 * p (sets p->uni, p->byte_fallback, p->model_unk); errors name path and
 * "model...". */
int fg_unigram_load(struct fg_tokenizer *t, struct fg_tok_pipeline *p, const char *path,
		    json_t *m);
void fg_unigram_free(struct fg_unigram *u);
/* The best segmentation of one pre-token of n bytes, appended to o. */
int fg_unigram_encode(const struct fg_tokenizer *t, struct fg_unigram_scratch *sc,
		      const unsigned char *s, size_t n, struct fg_idvec *o);
void fg_unigram_scratch_free(struct fg_unigram_scratch *sc);

struct fg_tok_pipeline {
	struct fg_tok_norm norm[FG_TOK_MAX_STEPS];
	size_t n_norm;
	struct fg_tok_pre pre[FG_TOK_MAX_STEPS];
	size_t n_pre;
	struct fg_tok_dec dec[FG_TOK_MAX_STEPS];
	size_t n_dec;
	bool has_decoder;	/* false: tokens are joined with " " (as Hugging Face does) */
	bool byte_level;	/* a ByteLevel pre-tokenizer: BPE on bytes */
	bool byte_fallback, fuse_unk, ignore_merges;
	struct fg_unigram *uni;	/* a Unigram model, else NULL (BPE) */
	int32_t model_unk;	/* model.unk_token (BPE) or model.unk_id (Unigram), or -1 */
	int32_t fallback_id[256];	/* <0xXX> tokens, -1 when absent */
};

/* s run through the normalizers (*out malloc'd, possibly empty). */
int fg_tok_normalize(const struct fg_tokenizer *t, const char *s, size_t n, char **out,
		     size_t *outn);
/* Encode one text with the tokenizer.json pipeline, appending to o. */
int fg_tok_encode_json(const struct fg_tokenizer *t, const char *text, size_t len,
		       struct fg_idvec *o);
/* Run the decoders over ids.  raw (one token, for token_bytes): the bytes
 * the token stands for, with no repair and no positional step. */
int fg_tok_decode_json(const struct fg_tokenizer *t, const int32_t *ids, size_t n, bool raw,
		       char **text, size_t *len);
void fg_tok_pipeline_free(struct fg_tok_pipeline *p);

/* ---- inline pair lookup (hot path) ---- */
static inline uint64_t fg_tok_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Fibonacci hashing: the top bits of key * 2^64/phi (cheap on the hot path). */
static inline size_t fg_pair_hash(uint64_t key, unsigned shift)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> shift);
}

static inline const struct fg_pair_slot *fg_pairmap_find(const struct fg_pairmap *m,
							 int32_t left, int32_t right)
{
	uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
	size_t mask = m->cap - 1;
	size_t i = fg_pair_hash(key, m->shift);

	for (;;) {
		const struct fg_pair_slot *s = &m->slots[i];

		if (s->key == key)
			return s;
		if (s->key == UINT64_MAX)
			return NULL;
		i = (i + 1) & mask;
	}
}

#endif
