/* core/tokenizer/pipeline.c - encoding with a tokenizer.json, step by step as
 * Hugging Face tokenizers does it:
 *  1. added tokens that are not "normalized" are cut out of the raw text
 *     (leftmost, then longest; lstrip/rstrip/single_word honoured);
 *  2. each stretch between them is normalized (Prepend, Replace), and the
 *     "normalized" added tokens are cut out of the result;
 *  3. the pre-tokenizers (Split on a PCRE2 pattern, ByteLevel) cut each
 *     remaining stretch into pre-tokens, in order;
 *  4. BPE merges each pre-token: on its bytes after ByteLevel, else on its
 *     characters, with <0xXX> byte fallback and the unk token.
 * Pre-tokens are spans of the text (or of the normalized copy), so no step
 * copies text except the normalizers and ByteLevel's add_prefix_space.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

struct enc {
	const struct fg_tokenizer *t;
	const struct fg_tok_pipeline *p;
	struct fg_idvec *o;
	struct fg_bpe_scratch bpe;
	struct fg_regex_scratch rx;
	struct fg_tok_buf norm[2];			/* normalizer output, ping-pong */
	struct fg_tok_buf prefix[FG_TOK_MAX_STEPS];	/* ByteLevel add_prefix_space copies */
	struct fg_tok_buf spell;			/* byte-level spelling (ignore_merges) */
};

/* ---- normalizers ---- */

/* Unicode NFC (canonical composition) of the valid UTF-8 runs of s; bytes
 * that are not UTF-8 pass unchanged, as they would through byte-level BPE. */
static int norm_nfc(const char *s, size_t n, struct fg_tok_buf *o)
{
	const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
	size_t pos = 0;
	int rc = 0;

	while (pos < n && !rc) {
		size_t end = pos;
		utf8proc_int32_t cp;

		while (end < n) {
			utf8proc_ssize_t k = utf8proc_iterate(u + end, (utf8proc_ssize_t)(n - end), &cp);
			if (k <= 0)
				break;
			end += (size_t)k;
		}
		if (end > pos) {
			utf8proc_uint8_t *nfc = NULL;
			utf8proc_ssize_t len = utf8proc_map(u + pos, (utf8proc_ssize_t)(end - pos), &nfc,
							    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			if (len < 0) {
				FG_ERR("tokenizer: NFC normalization failed: %s", utf8proc_errmsg(len));
				return -EINVAL;
			}
			rc = fg_tok_buf_add(o, (const char *)nfc, (size_t)len);
			free(nfc);
		}
		if (!rc && end < n) /* one byte that starts no valid sequence */
			rc = fg_tok_buf_add(o, s + end, 1), end++;
		pos = end;
	}
	return rc;
}

static int norm_one(const struct fg_tokenizer *t, const struct fg_tok_norm *nm,
		    struct fg_regex_scratch *rx, const char *s, size_t n, struct fg_tok_buf *o)
{
	const char *blob = t->blob;
	size_t pos = 0, ms, me;
	int rc = 0;

	o->n = 0;
	if (nm->kind == FG_TOK_NORM_NFC)
		return norm_nfc(s, n, o);
	if (nm->kind == FG_TOK_NORM_PREPEND) {
		if (!n)
			return 0;
		rc = fg_tok_buf_add(o, blob + nm->str.off, nm->str.len);
		return rc ? rc : fg_tok_buf_add(o, s, n);
	}
	if (nm->re)
		fg_regex_allow(rx, n);
	for (;;) {
		int hit;

		if (nm->re) {
			hit = fg_regex_next(nm->re, rx, s, n, pos, &ms, &me);
			if (hit < 0)
				return hit;
		} else {
			const char *h = n - pos >= nm->str.len
					? memmem(s + pos, n - pos, blob + nm->str.off, nm->str.len)
					: NULL;

			hit = h != NULL;
			if (h) {
				ms = (size_t)(h - s);
				me = ms + nm->str.len;
			}
		}
		if (!hit)
			break;
		rc = fg_tok_buf_add(o, s + pos, ms - pos);
		if (!rc)
			rc = fg_tok_buf_add(o, blob + nm->content.off, nm->content.len);
		if (rc)
			return rc;
		pos = me;
	}
	return fg_tok_buf_add(o, s + pos, n - pos);
}

/* Run all normalizers; *res points into bufs (or at s when there are none). */
static int normalize(const struct fg_tokenizer *t, struct fg_regex_scratch *rx,
		     struct fg_tok_buf bufs[2], const char *s, size_t n, const char **res, size_t *rn)
{
	const struct fg_tok_pipeline *p = t->pipe;

	*res = s;
	*rn = n;
	for (size_t k = 0; k < p->n_norm; k++) {
		struct fg_tok_buf *o = &bufs[k & 1];
		int rc = norm_one(t, &p->norm[k], rx, *res, *rn, o);

		if (rc)
			return rc;
		*res = o->p ? o->p : "";
		*rn = o->n;
	}
	return 0;
}

int fg_tok_normalize(const struct fg_tokenizer *t, const char *s, size_t n, char **out,
		     size_t *outn)
{
	struct fg_regex_scratch rx = { 0 };
	struct fg_tok_buf bufs[2] = { { 0 }, { 0 } };
	const char *r;
	size_t rn;
	int rc = normalize(t, &rx, bufs, s, n, &r, &rn);

	*out = NULL;
	if (!rc) {
		*out = malloc(rn + 1);
		if (*out) {
			memcpy(*out, r, rn);
			*outn = rn;
		} else {
			rc = -ENOMEM;
		}
	}
	free(bufs[0].p);
	free(bufs[1].p);
	fg_regex_scratch_free(&rx);
	return rc;
}

/* ---- the model ---- */

static int emit(struct enc *e, int32_t id)
{
	int rc = fg_idvec_room(e->o, 1);

	if (!rc)
		e->o->v[e->o->n++] = id;
	return rc;
}

/* tokenizers' BPE on characters: each character that is a token is one
 * symbol; else its bytes as <0xXX> tokens (byte_fallback, when all exist);
 * else unk (one per run of unknown characters with fuse_unk; dropped when
 * the model has no unk token). */
static int model_chars(struct enc *e, const unsigned char *s, size_t n)
{
	const struct fg_tokenizer *t = e->t;
	const struct fg_tok_pipeline *p = e->p;
	struct fg_idvec *o = e->o;
	size_t i = 0, m = 0;
	int32_t *sym;
	bool unk_pending = false;
	int rc = fg_idvec_room(o, n);

	if (rc)
		return rc;
	sym = o->v + o->n;
	while (i < n) {
		uint32_t cp;
		size_t cl = fg_utf8_next(s + i, n - i, &cp);
		int32_t id = fg_strmap_find(t, (const char *)s + i, cl);
		bool fb = false;

		if (id >= 0 && (size_t)id < t->n_vocab) {
			if (unk_pending)
				sym[m++] = p->model_unk;
			unk_pending = false;
			sym[m++] = id;
			i += cl;
			continue;
		}
		if (p->byte_fallback) {
			fb = true;
			for (size_t k = 0; k < cl; k++)
				fb = fb && p->fallback_id[s[i + k]] >= 0;
		}
		if (fb) {
			/* As tokenizers does, a pending unk is not flushed here. */
			for (size_t k = 0; k < cl; k++)
				sym[m++] = p->fallback_id[s[i + k]];
		} else if (p->model_unk >= 0) {
			if (unk_pending && !p->fuse_unk)
				sym[m++] = p->model_unk;
			unk_pending = true;
		}
		i += cl;
	}
	if (unk_pending)
		sym[m++] = p->model_unk;
	return fg_bpe_merge(t, &e->bpe, o->v, &o->n, m, 0);
}

static int model(struct enc *e, const char *s, size_t n)
{
	const struct fg_tokenizer *t = e->t;
	int rc;

	if (!n)
		return 0;
	if (!e->p->byte_level)
		return model_chars(e, (const unsigned char *)s, n);
	if (e->p->ignore_merges) {
		/* A pre-token that is itself a token is that token. */
		int32_t id;

		e->spell.n = 0;
		rc = fg_tok_buf_room(&e->spell, 2 * n);
		if (rc)
			return rc;
		for (size_t i = 0; i < n; i++) {
			uint32_t cp = fg_bytelevel_cp((unsigned char)s[i]);

			if (cp < 0x80) {
				e->spell.p[e->spell.n++] = (char)cp;
			} else {
				e->spell.p[e->spell.n++] = (char)(0xC0 | cp >> 6);
				e->spell.p[e->spell.n++] = (char)(0x80 | (cp & 0x3F));
			}
		}
		id = fg_strmap_find(t, e->spell.p, e->spell.n);
		if (id >= 0 && (size_t)id < t->n_vocab)
			return emit(e, id);
	}
	rc = fg_idvec_room(e->o, n);
	return rc ? rc : fg_bpe_word(t, &e->bpe, (const unsigned char *)s, n, e->o->v, &e->o->n, 0);
}

/* ---- pre-tokenizers ---- */

static int pretok(struct enc *e, size_t k, const char *s, size_t n);

struct piece {
	size_t a, b;
	bool match, have;
};

/* Split's behaviours, fed one piece at a time (tokenizers' folds). */
struct splitter {
	struct enc *e;
	size_t k;
	const char *s;
	enum fg_split_behavior how;
	struct piece last;	/* held back: may still grow */
	bool prev_match;
};

static int flush(struct splitter *sp)
{
	int rc = 0;

	if (sp->last.have)
		rc = pretok(sp->e, sp->k + 1, sp->s + sp->last.a, sp->last.b - sp->last.a);
	sp->last.have = false;
	return rc;
}

static int feed(struct splitter *sp, size_t a, size_t b, bool match)
{
	struct piece pc = { a, b, match, true };
	int rc = 0;

	switch (sp->how) {
	case FG_SPLIT_ISOLATED:
		return pretok(sp->e, sp->k + 1, sp->s + a, b - a);
	case FG_SPLIT_REMOVED:
		return match ? 0 : pretok(sp->e, sp->k + 1, sp->s + a, b - a);
	case FG_SPLIT_MERGED_PREV:
		if (match && !sp->prev_match && sp->last.have) {
			sp->last.b = b;
		} else {
			rc = flush(sp);
			sp->last = pc;
		}
		break;
	case FG_SPLIT_CONTIGUOUS:
		if (match == sp->prev_match && sp->last.have) {
			sp->last.b = b;
		} else {
			rc = flush(sp);
			sp->last = pc;
		}
		break;
	case FG_SPLIT_MERGED_NEXT:
		/* A match joins the non-match that follows it. */
		if (sp->last.have && !match) {
			sp->last.b = b;
			rc = flush(sp);
		} else {
			rc = flush(sp);
			if (match)
				sp->last = pc;
			else
				rc = rc ? rc : pretok(sp->e, sp->k + 1, sp->s + a, b - a);
		}
		break;
	}
	sp->prev_match = match;
	return rc;
}

static int split(struct enc *e, size_t k, const struct fg_tok_pre *pre, const char *s, size_t n)
{
	struct splitter sp = { .e = e, .k = k, .s = s, .how = pre->behavior };
	size_t pos = 0, ms, me;
	int hit, rc = 0;

	fg_regex_allow(&e->rx, n);
	while (!rc && (hit = fg_regex_next(pre->re, &e->rx, s, n, pos, &ms, &me)) == 1) {
		if (ms > pos)
			rc = feed(&sp, pos, ms, pre->invert);
		if (!rc)
			rc = feed(&sp, ms, me, !pre->invert);
		pos = me;
	}
	if (!rc && hit < 0)
		rc = hit;
	if (!rc && pos < n)
		rc = feed(&sp, pos, n, pre->invert);
	return rc ? rc : flush(&sp);
}

static int pretok(struct enc *e, size_t k, const char *s, size_t n)
{
	const struct fg_tok_pre *pre;
	int rc = 0;

	if (!n)
		return 0;
	if (k == e->p->n_pre)
		return model(e, s, n);
	pre = &e->p->pre[k];
	if (pre->kind == FG_PRE_SPLIT)
		return split(e, k, pre, s, n);
	/* ByteLevel (the last pre-tokenizer): the byte mapping itself is the
	 * model's (bytes are its symbols). */
	if (pre->add_prefix_space && s[0] != ' ') {
		struct fg_tok_buf *b = &e->prefix[k];

		b->n = 0;
		rc = fg_tok_buf_add(b, " ", 1);
		if (!rc)
			rc = fg_tok_buf_add(b, s, n);
		if (rc)
			return rc;
		s = b->p;
		n = b->n;
	}
	if (!pre->use_regex)
		return pretok(e, k + 1, s, n);
	for (size_t pos = 0; !rc && pos < n;) {
		size_t end = fg_pretok_next(s, n, pos);

		rc = pretok(e, k + 1, s + pos, end - pos);
		pos = end;
	}
	return rc;
}

/* ---- added tokens, then the rest ---- */

static int segment(struct enc *e, const char *s, size_t n)
{
	const struct fg_tokenizer *t = e->t;
	const char *ns;
	size_t nn, pos = 0, ms, me;
	int32_t id;
	int rc;

	if (!n)
		return 0;
	rc = normalize(t, &e->rx, e->norm, s, n, &ns, &nn);
	while (!rc && pos < nn) {
		if (!fg_tok_find_added(&t->added_norm, t->blob, ns, nn, pos, pos, &ms, &me, &id))
			return pretok(e, 0, ns + pos, nn - pos);
		rc = pretok(e, 0, ns + pos, ms - pos);
		if (!rc)
			rc = emit(e, id);
		pos = me;
	}
	return rc;
}

int fg_tok_encode_json(const struct fg_tokenizer *t, const char *text, size_t len,
		       struct fg_idvec *o)
{
	struct enc e = { .t = t, .p = t->pipe, .o = o };
	size_t pos = 0, ms, me;
	int32_t id;
	int rc = 0;

	while (!rc && pos < len) {
		if (!fg_tok_find_added(&t->added, t->blob, text, len, pos, pos, &ms, &me, &id)) {
			rc = segment(&e, text + pos, len - pos);
			break;
		}
		rc = segment(&e, text + pos, ms - pos);
		if (!rc)
			rc = emit(&e, id);
		pos = me;
	}
	fg_bpe_scratch_free(&e.bpe);
	fg_regex_scratch_free(&e.rx);
	free(e.norm[0].p);
	free(e.norm[1].p);
	for (size_t k = 0; k < FG_TOK_MAX_STEPS; k++)
		free(e.prefix[k].p);
	free(e.spell.p);
	return rc;
}
