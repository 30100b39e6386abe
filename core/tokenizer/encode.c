/* core/tokenizer/encode.c - text <-> ids on a loaded (read-only) tokenizer.
 *
 * encode (GPT-2 files): special tokens are cut out first (leftmost, then
 * longest), each stretch between them is pre-tokenized and every pre-token
 * BPE-merged; a tokenizer.json runs its own pipeline (pipeline.c).  No cache
 * and no shared scratch: a const tokenizer serves any number of threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

int fg_idvec_room(struct fg_idvec *o, size_t more)
{
	size_t cap;
	int32_t *v;

	if (o->cap - o->n >= more)
		return 0;
	cap = o->cap + o->cap / 2;
	if (cap < o->n + more)
		cap = o->n + more;
	if (cap > SIZE_MAX / sizeof(*v))
		return -ENOMEM;
	v = realloc(o->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	o->v = v;
	o->cap = cap;
	return 0;
}

static int is_space_at(const unsigned char *s, size_t len, size_t pos, size_t *clen)
{
	uint32_t cp;

	*clen = fg_utf8_next(s + pos, len - pos, &cp);
	return fg_uc_class_of(cp) == FG_UC_WS;
}

/* A "word" character as in \w: letter, number or underscore. */
static int is_word_cp(uint32_t cp)
{
	enum fg_uc_class c = fg_uc_class_of(cp);

	return cp == '_' || c == FG_UC_L || c == FG_UC_N;
}

/* The code point ending at s[end) (end > 0). */
static uint32_t cp_before(const unsigned char *s, size_t end)
{
	size_t b = end - 1;
	uint32_t cp;

	while (b > 0 && end - b < 4 && (s[b] & 0xC0) == 0x80)
		b--;
	if (fg_utf8_next(s + b, end - b, &cp) != end - b)
		return FG_UC_INVALID;
	return cp;
}

int fg_tok_find_added(const struct fg_tok_matcher *m, const char *blob, const char *text,
		      size_t len, size_t pos, size_t floor, size_t *ms, size_t *me, int32_t *id)
{
	const unsigned char *s = (const unsigned char *)text;

	if (!m->n)
		return 0;
	while (pos < len) {
		unsigned char c = s[pos];
		const struct fg_tok_special *sp = NULL;
		size_t start, stop, clen;
		uint32_t cp;

		for (uint32_t i = m->start[c]; i < m->start[c + 1]; i++) {
			const struct fg_tok_special *e = &m->v[i];

			if (e->len <= len - pos && !memcmp(blob + e->off, s + pos, e->len)) {
				sp = e;
				break;
			}
		}
		if (!sp) {
			pos++;
			continue;
		}
		start = pos;
		stop = pos + sp->len;
		if (sp->flags & FG_ADDED_SINGLE_WORD) {
			int word_before = start > 0 && is_word_cp(cp_before(s, start));
			int word_after = stop < len &&
					 (fg_utf8_next(s + stop, len - stop, &cp), is_word_cp(cp));

			if (word_before || word_after) {
				pos = stop;	/* the match is used up, as Hugging Face's is */
				continue;
			}
		}
		if (sp->flags & FG_ADDED_LSTRIP) {
			while (start > floor) {
				size_t b = start - 1;

				while (b > floor && (s[b] & 0xC0) == 0x80)
					b--;
				if (!is_space_at(s, len, b, &clen) || b + clen != start)
					break;
				start = b;
			}
		}
		if (sp->flags & FG_ADDED_RSTRIP)
			while (stop < len && is_space_at(s, len, stop, &clen))
				stop += clen;
		*ms = start;
		*me = stop;
		*id = sp->id;
		return 1;
	}
	return 0;
}

static int encode_plain(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc, const char *s,
			size_t len, struct fg_idvec *o)
{
	size_t pos = 0;

	while (pos < len) {
		size_t end = fg_pretok_next(s, len, pos);
		int rc = fg_idvec_room(o, end - pos);

		if (!rc)
			rc = fg_bpe_word(t, sc, (const unsigned char *)s + pos, end - pos, o->v,
					 &o->n, 0);
		if (rc)
			return rc;
		pos = end;
	}
	return 0;
}

int fg_tokenizer_encode(const struct fg_tokenizer *t, const char *text, size_t len,
			int32_t **ids, size_t *n)
{
	struct fg_bpe_scratch sc = { 0 };
	struct fg_idvec o = { 0 };
	size_t pos = 0;
	int rc;

	if (!t || !ids || !n || (!text && len)) {
		FG_ERR("fg_tokenizer_encode: invalid arguments");
		return -EINVAL;
	}
	*ids = NULL;
	*n = 0;
	/* About 4 bytes per token for English; grown as needed. */
	rc = fg_idvec_room(&o, len / 4 + 16);
	if (!rc && t->pipe)
		rc = fg_tok_encode_json(t, text, len, &o);
	while (!rc && !t->pipe && pos < len) {
		size_t ms = len, me = len;
		int32_t id = -1;
		int hit = fg_tok_find_added(&t->added, t->blob, text, len, pos, pos, &ms, &me, &id);

		rc = encode_plain(t, &sc, text + pos, ms - pos, &o);
		if (rc || !hit)
			break;
		rc = fg_idvec_room(&o, 1);
		if (rc)
			break;
		o.v[o.n++] = id;
		pos = me;
	}
	fg_bpe_scratch_free(&sc);
	if (rc) {
		if (rc == -ENOMEM)
			FG_ERR("tokenizer: out of memory encoding %zu bytes", len);
		free(o.v);
		return rc;
	}
	*ids = o.v;
	*n = o.n;
	return 0;
}

const char *fg_tokenizer_token_bytes(const struct fg_tokenizer *t, int32_t id, size_t *len)
{
	if (!t || id < 0 || (size_t)id >= t->n_ids || t->bytes[id].len == UINT32_MAX)
		return NULL;
	if (len)
		*len = t->bytes[id].len;
	return t->blob + t->bytes[id].off;
}

size_t fg_tokenizer_vocab_size(const struct fg_tokenizer *t)
{
	return t ? t->n_ids : 0;
}

int32_t fg_tokenizer_lookup(const struct fg_tokenizer *t, const char *token)
{
	if (!t || !token)
		return -1;
	return fg_strmap_find(t, token, strlen(token));
}

int32_t fg_tokenizer_bos_id(const struct fg_tokenizer *t)
{
	return t ? t->bos : -1;
}

int32_t fg_tokenizer_eos_id(const struct fg_tokenizer *t)
{
	return t ? t->eos : -1;
}

int32_t fg_tokenizer_unk_id(const struct fg_tokenizer *t)
{
	return t ? t->unk : -1;
}

int32_t fg_tokenizer_pad_id(const struct fg_tokenizer *t)
{
	return t ? t->pad : -1;
}

enum fg_tok_bos fg_tokenizer_bos_rule(const struct fg_tokenizer *t)
{
	return t ? (enum fg_tok_bos)t->bos_rule : FG_TOK_BOS_UNSAID;
}
