/* core/tokenizer/tok_internal.h - shared by the tokenizer's files; not an API. */
#ifndef FG_TOKENIZER_TOK_INTERNAL_H
#define FG_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer/tokenizer.h"

/* Limits checked before anything is allocated from file contents. */
#define FG_TOK_MAX_FILE_BYTES	(256u << 20)	/* vocab.json, merges.txt, json side files */
#define FG_TOK_MAX_VOCAB	(1u << 22)	/* entries of vocab.json */
#define FG_TOK_MAX_MERGES	(1u << 22)	/* lines of merges.txt */
#define FG_TOK_MAX_ADDED	65536u		/* added / special tokens */
#define FG_TOK_MAX_TOKEN_BYTES	16384u		/* one token's text */

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

/* ---- loading helpers (vocab.c) ---- */
/* Read a whole file of at most FG_TOK_MAX_FILE_BYTES (+ a NUL byte).  An
 * optional file that does not exist gives -ENOENT and records no error. */
int fg_tok_read_file(const char *path, char **buf, size_t *len, bool optional);
/* Printable, truncated rendering of s for error messages. */
const char *fg_tok_quote(const char *s, size_t len, char *out, size_t outsz);
/* Append len bytes + NUL to the blob; *off receives their offset. */
int fg_tok_blob_add(struct fg_tokenizer *t, const char *s, size_t len, uint32_t *off);
/* Grow text[] and bytes[] to n ids (new ids unused). */
int fg_tok_grow_ids(struct fg_tokenizer *t, size_t n);
/* Load vocab.json and merges.txt into a new tokenizer (no special tokens). */
int fg_tok_load_bpe(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out);
/* Register the special tokens: from the files in dir, or GPT-2's default
 * <|endoftext|> when dir is NULL. */
int fg_tok_load_special(struct fg_tokenizer *t, const char *dir);

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

/* A token matched whole in the input before pre-tokenization. */
struct fg_tok_special {
	uint32_t off, len;	/* content, in blob */
	int32_t id;
	unsigned char first;	/* blob[off] */
};

struct fg_tokenizer {
	char *blob;			/* all strings, each NUL-terminated */
	size_t blob_len, blob_cap;
	size_t n_vocab;			/* entries of vocab.json: ids 0..n_vocab-1 */
	size_t n_ids;			/* n_vocab + added ids past it */
	struct fg_tok_str *text;	/* [n_ids] token as written (vocab.json key or content) */
	struct fg_tok_str *bytes;	/* [n_ids] decoded bytes; len UINT32_MAX = unused id */
	struct fg_strmap vocab;		/* text -> id */
	struct fg_pairmap merges;	/* (left, right) -> rank, merged id */
	int32_t byte_id[256];		/* id of each single-byte token */
	/* Tokens matched whole, sorted by first byte then longest first;
	 * those starting with byte c are special[special_start[c] ..
	 * special_start[c + 1]). */
	struct fg_tok_special *special;
	size_t n_special;
	uint32_t special_start[257];
	int32_t bos, eos, unk, pad;
	bool add_bos;
};

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
void fg_bpe_scratch_free(struct fg_bpe_scratch *sc);

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
