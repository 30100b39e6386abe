/* core/tokenizer/pipeline.c - encoding with a tokenizer.json, step by step as
 * Hugging Face tokenizers does it:
 *  1. added tokens that are not "normalized" are cut out of the raw text
 *     (leftmost, then longest; lstrip/rstrip/single_word honoured);
 *  2. each stretch between them is normalized (Prepend, Replace, NFC, NFKC,
 *     Strip), and the "normalized" added tokens are cut out of the result;
 *  3. the pre-tokenizers (Split on a PCRE2 pattern, Metaspace, ByteLevel)
 *     cut each remaining stretch into pre-tokens, in order;
 *  4. BPE merges each pre-token: on its bytes after ByteLevel, else on its
 *     characters, with <0xXX> byte fallback and the unk token; or the
 *     Unigram model segments it (unigram.c).
 * Pre-tokens are spans of the text (or of the normalized copy), so no step
 * copies text except the normalizers, Metaspace and ByteLevel's
 * add_prefix_space.
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
	struct fg_tok_buf prefix[FG_TOK_MAX_STEPS];	/* ByteLevel, Metaspace copies */
	struct fg_tok_buf spell;			/* byte-level spelling (ignore_merges) */
	struct fg_unigram_scratch uni;
	/* A pre-token that reaches pre-tokenizer k at org[k] begins the text
	 * (tokenizers: its original offset is 0), as Metaspace's
	 * prepend_scheme "first" asks. */
	const char *org[FG_TOK_MAX_STEPS + 1];
};

/* ---- normalizers ---- */

/* Unicode NFC (canonical composition), or NFKC (compat), of the valid UTF-8
 * runs of s; bytes that are not UTF-8 pass unchanged, as they would through
 * byte-level BPE. */
static int norm_nfc(const char *s, size_t n, bool compat, struct fg_tok_buf *o)
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
							    UTF8PROC_STABLE | UTF8PROC_COMPOSE |
							    (compat ? UTF8PROC_COMPAT : 0));
			if (len < 0) {
				FG_ERR("tokenizer: %s normalization failed: %s", compat ? "NFKC" : "NFC",
				       utf8proc_errmsg(len));
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

/* Rust's char::is_whitespace (Unicode White_Space), which Strip uses. */
static bool white_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int norm_strip(const struct fg_tok_norm *nm, const char *s, size_t n, size_t *lead,
		      struct fg_tok_buf *o)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t a = 0, z = n;
	uint32_t cp;

	while (nm->left && a < z) {
		size_t cl = fg_utf8_next(u + a, z - a, &cp);

		if (!white_space(cp))
			break;
		a += cl;
	}
	while (nm->right && z > a) {
		size_t b = z - 1;

		while (b > a && (u[b] & 0xC0) == 0x80 && z - b < 4)
			b--;
		if (fg_utf8_next(u + b, z - b, &cp) != z - b || !white_space(cp))
			break;
		z = b;
	}
	*lead = *lead < z ? *lead : z;
	*lead = *lead > a ? *lead - a : 0;
	return fg_tok_buf_add(o, s + a, z - a);
}

/* *lead: how many bytes at the start of s stand where the original text
 * starts (tokenizers' alignments: an insertion takes its neighbour's place,
 * a deletion at the start moves it), updated for the output. */
static int norm_one(const struct fg_tokenizer *t, const struct fg_tok_norm *nm,
		    struct fg_regex_scratch *rx, const char *s, size_t n, size_t *lead,
		    struct fg_tok_buf *o)
{
	const char *blob = t->blob;
	size_t pos = 0, ms, me, in_lead = *lead;
	int rc = 0;

	o->n = 0;
	if (nm->kind == FG_TOK_NORM_NFC || nm->kind == FG_TOK_NORM_NFKC) {
		uint32_t cp;

		rc = norm_nfc(s, n, nm->kind == FG_TOK_NORM_NFKC, o);
		*lead = !rc && *lead && o->n ? fg_utf8_next((const unsigned char *)o->p, o->n, &cp)
					     : 0;
		return rc;
	}
	if (nm->kind == FG_TOK_NORM_STRIP)
		return norm_strip(nm, s, n, lead, o);
	if (nm->kind == FG_TOK_NORM_PREPEND) {
		if (!n)
			return 0;
		*lead += nm->str.len;
		rc = fg_tok_buf_add(o, blob + nm->str.off, nm->str.len);
		return rc ? rc : fg_tok_buf_add(o, s, n);
	}
	*lead = 0;
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
		if (pos < in_lead)
			*lead += (ms < in_lead ? ms : in_lead) - pos;
		if (ms < in_lead)
			*lead += nm->content.len;
		rc = fg_tok_buf_add(o, s + pos, ms - pos);
		if (!rc)
			rc = fg_tok_buf_add(o, blob + nm->content.off, nm->content.len);
		if (rc)
			return rc;
		pos = me;
	}
	if (pos < in_lead)
		*lead += in_lead - pos;
	return fg_tok_buf_add(o, s + pos, n - pos);
}

/* Run all normalizers; *res points into bufs (or at s when there are none).
 * *lead (lead may be NULL): does the result start where s does (false: the
 * normalizers took s's first character away, as Strip does with a space)? */
static int normalize(const struct fg_tokenizer *t, struct fg_regex_scratch *rx,
		     struct fg_tok_buf bufs[2], const char *s, size_t n, const char **res, size_t *rn,
		     bool *lead)
{
	const struct fg_tok_pipeline *p = t->pipe;
	uint32_t cp;
	size_t ln = n ? fg_utf8_next((const unsigned char *)s, n, &cp) : 0;

	*res = s;
	*rn = n;
	if (lead)
		*lead = ln > 0;
	for (size_t k = 0; k < p->n_norm; k++) {
		struct fg_tok_buf *o = &bufs[k & 1];
		int rc = norm_one(t, &p->norm[k], rx, *res, *rn, &ln, o);

		if (rc)
			return rc;
		*res = o->p ? o->p : "";
		*rn = o->n;
		if (lead)
			*lead = ln > 0;
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
	int rc = normalize(t, &rx, bufs, s, n, &r, &rn, NULL);

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
	if (e->p->uni)
		return fg_unigram_encode(t, &e->uni, (const unsigned char *)s, n, e->o);
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

/* Metaspace: every ' ' becomes the replacement, which also goes first
 * when the pre-token does not start with it (as prepend_scheme says); then
 * the pre-token is cut before each replacement (split). */
static int metaspace(struct enc *e, size_t k, const struct fg_tok_pre *pre, const char *s,
		     size_t n)
{
	const char *r = e->t->blob + pre->repl.off;
	size_t rl = pre->repl.len, a = 0, pos = 0;
	struct fg_tok_buf *b = &e->prefix[k];
	bool origin = s == e->org[k];
	bool led = s[0] == ' ' || (n >= rl && !memcmp(s, r, rl));
	int rc = 0;

	b->n = 0;
	if (!led && (pre->prepend == FG_PREPEND_ALWAYS ||
		     (pre->prepend == FG_PREPEND_FIRST && origin)))
		rc = fg_tok_buf_add(b, r, rl);
	while (!rc && pos < n) {
		const char *sp = memchr(s + pos, ' ', n - pos);
		size_t end = sp ? (size_t)(sp - s) : n;

		rc = fg_tok_buf_add(b, s + pos, end - pos);
		if (!rc && sp)
			rc = fg_tok_buf_add(b, r, rl), end++;
		pos = end;
	}
	if (rc)
		return rc;
	e->org[k + 1] = origin ? b->p : NULL;
	if (!pre->split)
		return pretok(e, k + 1, b->p, b->n);
	/* MergedWithNext: each replacement starts a piece. */
	for (pos = 1; !rc && pos + rl <= b->n; pos++) {
		if (memcmp(b->p + pos, r, rl))
			continue;
		rc = pretok(e, k + 1, b->p + a, pos - a);
		a = pos;
		pos += rl - 1;
	}
	return rc ? rc : pretok(e, k + 1, b->p + a, b->n - a);
}

static int pretok(struct enc *e, size_t k, const char *s, size_t n)
{
	const struct fg_tok_pre *pre;
	bool origin;
	int rc = 0;

	if (!n)
		return 0;
	if (k == e->p->n_pre)
		return model(e, s, n);
	pre = &e->p->pre[k];
	origin = s == e->org[k];
	if (pre->kind == FG_PRE_SPLIT) {
		e->org[k + 1] = origin ? s : NULL;
		return split(e, k, pre, s, n);
	}
	if (pre->kind == FG_PRE_METASPACE)
		return metaspace(e, k, pre, s, n);
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
	e->org[k + 1] = origin ? s : NULL;
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

/* at_start: s begins the text. */
static int segment(struct enc *e, const char *s, size_t n, bool at_start)
{
	const struct fg_tokenizer *t = e->t;
	const char *ns;
	size_t nn, pos = 0, ms, me;
	int32_t id;
	bool lead;
	int rc;

	if (!n)
		return 0;
	rc = normalize(t, &e->rx, e->norm, s, n, &ns, &nn, &lead);
	e->org[0] = at_start && lead ? ns : NULL;
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
			rc = segment(&e, text + pos, len - pos, pos == 0);
			break;
		}
		rc = segment(&e, text + pos, ms - pos, pos == 0);
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
	fg_unigram_scratch_free(&e.uni);
	return rc;
}
