/* core/tokenizer/encode.c - text <-> ids on a loaded (read-only) tokenizer.
 *
 * encode: special tokens are cut out first (leftmost, then longest), each
 * stretch between them is pre-tokenized and every pre-token BPE-merged.  No
 * cache and no shared scratch: a const tokenizer serves any number of threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

struct idvec {
	int32_t *v;
	size_t n, cap;
};

static int idvec_room(struct idvec *o, size_t more)
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

/* Leftmost special token at or after pos: its offset (len when none). */
static size_t find_special(const struct fg_tokenizer *t, const char *s, size_t len, size_t pos,
			   const struct fg_tok_special **hit)
{
	if (!t->n_special)
		return len;
	for (; pos < len; pos++) {
		unsigned char c = (unsigned char)s[pos];

		for (uint32_t i = t->special_start[c]; i < t->special_start[c + 1]; i++) {
			const struct fg_tok_special *sp = &t->special[i];

			if (sp->len <= len - pos && !memcmp(t->blob + sp->off, s + pos, sp->len)) {
				*hit = sp;
				return pos;
			}
		}
	}
	return len;
}

static int encode_plain(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc, const char *s,
			size_t len, struct idvec *o)
{
	size_t pos = 0;

	while (pos < len) {
		size_t end = fg_pretok_next(s, len, pos);
		int rc = idvec_room(o, end - pos);

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
	struct idvec o = { 0 };
	size_t pos = 0;
	int rc;

	if (!t || !ids || !n || (!text && len)) {
		FG_ERR("fg_tokenizer_encode: invalid arguments");
		return -EINVAL;
	}
	*ids = NULL;
	*n = 0;
	/* About 4 bytes per token for English; grown as needed. */
	rc = idvec_room(&o, len / 4 + 16);
	while (!rc && pos < len) {
		const struct fg_tok_special *sp = NULL;
		size_t at = find_special(t, text, len, pos, &sp);

		rc = encode_plain(t, &sc, text + pos, at - pos, &o);
		if (rc || !sp)
			break;
		rc = idvec_room(&o, 1);
		if (rc)
			break;
		o.v[o.n++] = sp->id;
		pos = at + sp->len;
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

int fg_tokenizer_decode(const struct fg_tokenizer *t, const int32_t *ids, size_t n, char **text,
			size_t *len)
{
	size_t total = 0, o = 0;
	char *s;

	if (!t || !text || !len || (!ids && n)) {
		FG_ERR("fg_tokenizer_decode: invalid arguments");
		return -EINVAL;
	}
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || (size_t)ids[i] >= t->n_ids || t->bytes[ids[i]].len == UINT32_MAX) {
			FG_ERR("tokenizer: cannot decode id %d at position %zu: not a token of this "
			       "vocabulary (0..%zu)", ids[i], i, t->n_ids - 1);
			return -EINVAL;
		}
		if (t->bytes[ids[i]].len > SIZE_MAX - 1 - total) {
			FG_ERR("tokenizer: decoding %zu tokens overflows", n);
			return -ENOMEM;
		}
		total += t->bytes[ids[i]].len;
	}
	s = malloc(total + 1);
	if (!s) {
		FG_ERR("tokenizer: out of memory decoding %zu tokens", n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct fg_tok_str *b = &t->bytes[ids[i]];

		memcpy(s + o, t->blob + b->off, b->len);
		o += b->len;
	}
	s[o] = '\0';
	*text = s;
	*len = o;
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

int fg_tokenizer_add_bos(const struct fg_tokenizer *t)
{
	return t ? t->add_bos : 0;
}
