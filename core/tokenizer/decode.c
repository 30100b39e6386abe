/* core/tokenizer/decode.c - ids -> text, which is always valid UTF-8.
 *
 * Hugging Face decodes to a Python/Rust string, so bytes that are not UTF-8
 * (byte-level BPE can stop inside a character) become U+FFFD, one per maximal
 * invalid subpart; an id this tokenizer does not know becomes U+FFFD too
 * (a model's vocabulary may be larger than its tokenizer's), so that decoding
 * never fails a job.  The GPT-2 files concatenate each token's bytes; a
 * tokenizer.json runs its decoders over the token strings, as tokenizers does.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

static const char replacement[] = "\xEF\xBF\xBD";	/* U+FFFD */
#define REPL_LEN 3

static bool utf8_valid(const char *s, size_t n)
{
	size_t i = 0, bad;

	while (i < n) {
		size_t k;

		if ((unsigned char)s[i] < 0x80) {
			i++;
			continue;
		}
		k = fg_utf8_seq((const unsigned char *)s + i, n - i, &bad);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

/* Append s with every maximal invalid subpart replaced by U+FFFD. */
static int add_repaired(struct fg_tok_buf *o, const char *s, size_t n)
{
	size_t i = 0, bad;
	int rc = 0;

	while (!rc && i < n) {
		size_t run = i;

		while (run < n && (unsigned char)s[run] < 0x80)
			run++;
		while (run < n) {
			size_t k = fg_utf8_seq((const unsigned char *)s + run, n - run, &bad);

			if (!k)
				break;
			run += k;
		}
		rc = fg_tok_buf_add(o, s + i, run - i);
		i = run;
		if (!rc && i < n) {
			fg_utf8_seq((const unsigned char *)s + i, n - i, &bad);
			rc = fg_tok_buf_add(o, replacement, REPL_LEN);
			i += bad;
		}
	}
	return rc;
}

/* The text in b repaired into *text (b is consumed). */
static int finish(struct fg_tok_buf *b, char **text, size_t *len, bool raw)
{
	struct fg_tok_buf r = { 0 };
	int rc;

	if (raw || utf8_valid(b->p, b->n)) {
		rc = fg_tok_buf_room(b, 1);
		if (rc)
			return rc;
		b->p[b->n] = '\0';
		*text = b->p;
		*len = b->n;
		b->p = NULL;
		return 0;
	}
	rc = add_repaired(&r, b->p, b->n);
	if (!rc)
		rc = fg_tok_buf_room(&r, 1);
	if (rc) {
		free(r.p);
		return rc;
	}
	r.p[r.n] = '\0';
	*text = r.p;
	*len = r.n;
	return 0;
}

static bool known(const struct fg_tokenizer *t, int32_t id)
{
	return id >= 0 && (size_t)id < t->n_ids && t->bytes[id].len != UINT32_MAX;
}

/* ---- the decoders of a tokenizer.json, over a list of token strings ---- */

struct toks {
	struct fg_tok_buf b;
	size_t *end;	/* token i is b.p[i ? end[i - 1] : 0 .. end[i]) */
	size_t n, cap;
};

static int toks_new(struct toks *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		size_t *e = realloc(l->end, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		l->end = e;
		l->cap = cap;
	}
	l->end[l->n++] = l->b.n;
	return 0;
}

/* Append to the last token. */
static int toks_cat(struct toks *l, const char *s, size_t n)
{
	int rc = fg_tok_buf_add(&l->b, s, n);

	if (!rc)
		l->end[l->n - 1] = l->b.n;
	return rc;
}

static int toks_add(struct toks *l, const char *s, size_t n)
{
	int rc = toks_new(l);

	return rc ? rc : toks_cat(l, s, n);
}

static const char *tok_at(const struct toks *l, size_t i, size_t *n)
{
	size_t s = i ? l->end[i - 1] : 0;

	*n = l->end[i] - s;
	return l->b.p + s;
}

static int byte_token(const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF0123456789abcdef";
	const char *h, *l;

	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !(h = memchr(hex, s[3], 32)) ||
	    !(l = memchr(hex, s[4], 32)))
		return -1;
	return ((int)(h - hex) % 16) * 16 + (int)(l - hex) % 16;
}

/* Push a run of byte-fallback bytes: one token when it is UTF-8, else one
 * U+FFFD per byte (tokenizers' ByteFallback). */
static int flush_bytes(struct toks *o, struct fg_tok_buf *run, bool raw)
{
	int rc = 0;

	if (!run->n)
		return 0;
	if (raw || utf8_valid(run->p, run->n))
		rc = toks_add(o, run->p, run->n);
	else
		for (size_t i = 0; !rc && i < run->n; i++)
			rc = toks_add(o, replacement, REPL_LEN);
	run->n = 0;
	return rc;
}

static int step(const struct fg_tokenizer *t, const struct fg_tok_dec *d, const struct toks *in,
		struct toks *o, bool raw)
{
	struct fg_tok_buf run = { 0 };
	size_t n;
	const char *s;
	int rc = 0;

	switch (d->kind) {
	case FG_DEC_FUSE:
		rc = toks_new(o);
		for (size_t i = 0; !rc && i < in->n; i++) {
			s = tok_at(in, i, &n);
			rc = toks_cat(o, s, n);
		}
		return rc;
	case FG_DEC_BYTELEVEL:
		/* All tokens to bytes, then one string: a character may span tokens. */
		rc = toks_new(o);
		for (size_t i = 0; !rc && i < in->n; i++) {
			s = tok_at(in, i, &n);
			rc = fg_tok_buf_room(&run, n);
			if (!rc)
				run.n += fg_bytelevel_to_bytes(s, n, run.p + run.n);
		}
		if (!rc && raw) {
			rc = toks_cat(o, run.p, run.n);
		} else if (!rc) {
			rc = add_repaired(&o->b, run.p, run.n);
			o->end[o->n - 1] = o->b.n;
		}
		free(run.p);
		return rc;
	case FG_DEC_REPLACE: {
		const char *pat = t->blob + d->pat.off, *rep = t->blob + d->content.off;

		for (size_t i = 0; !rc && i < in->n; i++) {
			const char *hit;

			s = tok_at(in, i, &n);
			rc = toks_new(o);
			while (!rc && (hit = n >= d->pat.len ? memmem(s, n, pat, d->pat.len) : NULL)) {
				rc = toks_cat(o, s, (size_t)(hit - s));
				if (!rc)
					rc = toks_cat(o, rep, d->content.len);
				n -= (size_t)(hit - s) + d->pat.len;
				s = hit + d->pat.len;
			}
			if (!rc)
				rc = toks_cat(o, s, n);
		}
		return rc;
	}
	case FG_DEC_BYTEFALLBACK:
		for (size_t i = 0; !rc && i < in->n; i++) {
			int b;

			s = tok_at(in, i, &n);
			b = byte_token(s, n);
			if (b >= 0) {
				char c = (char)b;

				rc = fg_tok_buf_add(&run, &c, 1);
				continue;
			}
			rc = flush_bytes(o, &run, raw);
			if (!rc)
				rc = toks_add(o, s, n);
		}
		if (!rc)
			rc = flush_bytes(o, &run, raw);
		free(run.p);
		return rc;
	case FG_DEC_METASPACE: {
		/* The replacement is a space again, except in the first token
		 * (where the pre-tokenizer put it) unless prepend_scheme is
		 * "never"; raw (one token alone) keeps every space. */
		const char *r = t->blob + d->pat.off;
		size_t rl = d->pat.len;

		for (size_t i = 0; !rc && i < in->n; i++) {
			bool drop = i == 0 && d->prepend != FG_PREPEND_NEVER && !raw;
			const char *hit;

			s = tok_at(in, i, &n);
			rc = toks_new(o);
			while (!rc && (hit = n >= rl ? memmem(s, n, r, rl) : NULL)) {
				rc = toks_cat(o, s, (size_t)(hit - s));
				if (!rc && !drop)
					rc = toks_cat(o, " ", 1);
				n -= (size_t)(hit - s) + rl;
				s = hit + rl;
			}
			if (!rc)
				rc = toks_cat(o, s, n);
		}
		return rc;
	}
	case FG_DEC_STRIP:
		for (size_t i = 0; !rc && i < in->n; i++) {
			size_t a = 0, z, cl;
			uint32_t cp;

			s = tok_at(in, i, &n);
			z = n;
			for (uint32_t k = 0; !raw && k < d->start && a < z; k++) {
				cl = fg_utf8_next((const unsigned char *)s + a, z - a, &cp);
				if (cp != d->strip_cp)
					break;
				a += cl;
			}
			for (uint32_t k = 0; !raw && k < d->stop && z > a; k++) {
				size_t b = z - 1;

				while (b > a && ((unsigned char)s[b] & 0xC0) == 0x80)
					b--;
				cl = fg_utf8_next((const unsigned char *)s + b, z - b, &cp);
				if (cp != d->strip_cp || b + cl != z)
					break;
				z = b;
			}
			rc = toks_add(o, s + a, z - a);
		}
		return rc;
	}
	return -EINVAL;
}

int fg_tok_decode_json(const struct fg_tokenizer *t, const int32_t *ids, size_t n, bool raw,
		       char **text, size_t *len)
{
	const struct fg_tok_pipeline *p = t->pipe;
	struct toks a = { 0 }, b = { 0 }, tmp;
	struct fg_tok_buf out = { 0 };
	int rc = 0;

	for (size_t i = 0; !rc && i < n; i++) {
		if (known(t, ids[i]))
			rc = toks_add(&a, t->blob + t->text[ids[i]].off, t->text[ids[i]].len);
		else
			rc = toks_add(&a, replacement, REPL_LEN);
	}
	for (size_t k = 0; !rc && k < p->n_dec; k++) {
		b.b.n = 0;
		b.n = 0;
		rc = step(t, &p->dec[k], &a, &b, raw);
		tmp = a;
		a = b;
		b = tmp;
	}
	for (size_t i = 0; !rc && i < a.n; i++) {
		size_t tl;
		const char *s = tok_at(&a, i, &tl);

		if (i && !p->has_decoder)
			rc = fg_tok_buf_add(&out, " ", 1);
		if (!rc)
			rc = fg_tok_buf_add(&out, s, tl);
	}
	if (!rc)
		rc = finish(&out, text, len, raw);
	free(out.p);
	free(a.b.p);
	free(a.end);
	free(b.b.p);
	free(b.end);
	return rc;
}

int fg_tokenizer_decode(const struct fg_tokenizer *t, const int32_t *ids, size_t n, char **text,
			size_t *len)
{
	struct fg_tok_buf b = { 0 };
	size_t total = 0;
	int rc;

	if (!t || !text || !len || (!ids && n)) {
		FG_ERR("fg_tokenizer_decode: invalid arguments");
		return -EINVAL;
	}
	*text = NULL;
	*len = 0;
	if (t->pipe) {
		rc = fg_tok_decode_json(t, ids, n, false, text, len);
	} else {
		for (size_t i = 0; i < n; i++) {
			size_t l = known(t, ids[i]) ? t->bytes[ids[i]].len : REPL_LEN;

			if (l > SIZE_MAX / 2 - total) {
				FG_ERR("tokenizer: decoding %zu tokens overflows", n);
				return -ENOMEM;
			}
			total += l;
		}
		rc = fg_tok_buf_room(&b, total);
		for (size_t i = 0; !rc && i < n; i++) {
			if (known(t, ids[i]))
				rc = fg_tok_buf_add(&b, t->blob + t->bytes[ids[i]].off,
					      t->bytes[ids[i]].len);
			else
				rc = fg_tok_buf_add(&b, replacement, REPL_LEN);
		}
		if (!rc)
			rc = finish(&b, text, len, false);
		free(b.p);
	}
	if (rc == -ENOMEM)
		FG_ERR("tokenizer: out of memory decoding %zu tokens", n);
	return rc;
}

/* One token's bytes where decoding joins them (decode_joins), into *b. */
static int token_bytes(const struct fg_tokenizer *t, int32_t id, struct fg_tok_buf *b)
{
	int rc;

	if (!t->pipe)
		return known(t, id) ? fg_tok_buf_add(b, t->blob + t->bytes[id].off, t->bytes[id].len)
				    : fg_tok_buf_add(b, replacement, REPL_LEN);
	if ((rc = fg_tok_buf_room(b, t->text[id].len)))
		return rc;
	b->n += fg_bytelevel_to_bytes(t->blob + t->text[id].off, t->text[id].len, b->p + b->n);
	return 0;
}

/* Is decoding these ids their bytes joined, then repaired? */
static bool decode_joins(const struct fg_tokenizer *t, const int32_t *ids, size_t n)
{
	const struct fg_tok_pipeline *p = t->pipe;

	if (!p)
		return true;
	if (!p->has_decoder || p->n_dec != 1 || p->dec[0].kind != FG_DEC_BYTELEVEL)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!known(t, ids[i]))
			return false;
	return true;
}

int fg_tokenizer_decode_offsets(const struct fg_tokenizer *t, const int32_t *ids, size_t n,
				size_t *chars)
{
	struct fg_tok_buf b = { 0 };
	size_t *end = NULL;
	int rc = 0;

	chars[0] = 0;
	if (!decode_joins(t, ids, n)) {
		/* By the definition: each prefix's text counted. */
		for (size_t i = 1; !rc && i <= n; i++) {
			char *text;
			size_t len;
			if (!(rc = fg_tokenizer_decode(t, ids, i, &text, &len)))
				chars[i] = fg_utf8_chars(text, len);
			free(text);
		}
		return rc;
	}
	/* The joined bytes cut into units: a well-formed character, or a
	 * maximal ill-formed subpart (one U+FFFD).  Repair decides a unit from
	 * its own bytes, so a prefix ending at a unit's end counts the units up
	 * to it, and one ending inside a unit counts it too (its bytes there
	 * begin a well-formed sequence, cut short: one U+FFFD). */
	end = malloc(sizeof(*end) * (n ? n : 1));
	for (size_t i = 0; end && !rc && i < n; i++)
		if (!(rc = token_bytes(t, ids[i], &b)))
			end[i] = b.n;
	if (!end || rc) {
		free(end);
		free(b.p);
		FG_ERR("tokenizer: out of memory for the offsets of %zu tokens", n);
		return -ENOMEM;
	}
	size_t at = 0, units = 0, bad;
	for (size_t i = 0; i < n; i++) {
		while (at < end[i]) {
			const unsigned char *s = (const unsigned char *)b.p + at;
			size_t u = *s < 0x80 ? 1 : fg_utf8_seq(s, b.n - at, &bad);
			at += u ? u : bad;
			units++;
		}
		chars[i + 1] = units;
	}
	free(end);
	free(b.p);
	return 0;
}
