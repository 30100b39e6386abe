/* core/tokenizer/tokjson.c - load a Hugging Face tokenizer.json.
 *
 * Supported (the forms LLaMA-family checkpoints ship):
 *  - model: BPE (vocab, merges as "a b" or ["a", "b"], unk_token,
 *    byte_fallback, fuse_unk, ignore_merges), or Unigram (vocab of [piece,
 *    score] pairs, unk_id, byte_fallback: unigram.c);
 *  - normalizer: null, Prepend, Replace, NFC (Qwen2) and NFKC (by utf8proc),
 *    Strip, Sequence of these (not Precompiled: SentencePiece's own binary
 *    table, refused by name);
 *  - pre_tokenizer: null, Split (Regex or String, any behaviour, invert),
 *    Metaspace (replacement, prepend_scheme or the older add_prefix_space,
 *    split), ByteLevel (last), Sequence of these;
 *  - decoder: null, ByteLevel, Replace (String), ByteFallback, Fuse, Strip,
 *    Metaspace, Sequence of these;
 *  - post_processor: null, ByteLevel, TemplateProcessing (read only for
 *    what it puts before the text: nothing or the bos), Sequence of these
 *    (at most one TemplateProcessing);
 *  - added_tokens with their flags.
 * Anything else is refused in one line naming the file and the JSON path, as
 * are normalizers that could make a text more than FG_TOK_MAX_NORM_GROWTH
 * times longer and decoders a token's text FG_TOK_MAX_DEC_GROWTH times.
 * truncation and padding are ignored (transformers overrides them per call).
 * Then tokenizer_config.json & co. beside it name the roles and add_bos_token;
 * a template decides the bos rule over add_bos_token (special.c says why).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

#define MAX_DEPTH 4

struct ld {
	struct fg_tokenizer *t;
	struct fg_tok_pipeline *p;
	const char *path;
	/* TemplateProcessing: the ids its "single" puts before the text (the
	 * first of them, and how many), and where it is, for errors. */
	bool has_template;
	size_t n_lead;
	json_int_t lead_id;
	char tpl_jp[300];
	/* The normalizers so far make n bytes at most norm_mul * n + norm_add;
	 * the decoders, dec_mul * n. */
	double norm_mul, norm_add, dec_mul;
};

__attribute__((format(printf, 3, 4)))
static int bad(const struct ld *l, const char *jp, const char *fmt, ...)
{
	char m[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	FG_ERR("%s: %s: %s", l->path, jp, m);
	return -EINVAL;
}

static int get_bool(const struct ld *l, json_t *o, const char *jp, const char *key, bool dflt,
		    bool *out)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_boolean(v))
		return bad(l, jp, "\"%s\" must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int get_str(const struct ld *l, json_t *o, const char *jp, const char *key,
		   const char **s, size_t *n)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_string(v))
		return bad(l, jp, "\"%s\" must be a string", key);
	*s = json_string_value(v);
	*n = json_string_length(v);
	if (*n > FG_TOK_MAX_TOKEN_BYTES || memchr(*s, '\0', *n))
		return bad(l, jp, "\"%s\" must have at most %u bytes and no NUL", key,
			   FG_TOK_MAX_TOKEN_BYTES);
	return 0;
}

static int keep(const struct ld *l, const char *s, size_t n, struct fg_tok_str *out)
{
	int rc = fg_tok_blob_add(l->t, s, n, &out->off);

	out->len = (uint32_t)n;
	return rc;
}

/* {"String": s} or {"Regex": s}: *is_regex tells which. */
static int get_pattern(const struct ld *l, json_t *o, const char *jp, const char **s, size_t *n,
		       bool *is_regex)
{
	json_t *pat = json_object_get(o, "pattern"), *v;
	char sub[300];

	snprintf(sub, sizeof(sub), "%s.pattern", jp);
	if (!json_is_object(pat) || json_object_size(pat) != 1)
		return bad(l, sub, "must be {\"String\": ...} or {\"Regex\": ...}");
	*is_regex = (v = json_object_get(pat, "Regex")) != NULL;
	if (!*is_regex)
		v = json_object_get(pat, "String");
	if (!json_is_string(v))
		return bad(l, sub, "must be {\"String\": ...} or {\"Regex\": ...}");
	*s = json_string_value(v);
	*n = json_string_length(v);
	if (*n == 0)
		return bad(l, sub, "the pattern is empty");
	return 0;
}

static int compile(const struct ld *l, const char *jp, const char *s, size_t n, bool literal,
		   struct fg_regex **re)
{
	char msg[256], where[PATH_MAX + 320];
	int rc;

	snprintf(where, sizeof(where), "%s: %s", l->path, jp);
	rc = fg_regex_compile(s, n, literal, where, re, msg, sizeof(msg));

	if (rc == -EINVAL)
		return bad(l, jp, "the regex does not compile (PCRE2, %s)", msg);
	return rc;
}

/* The object's "type", and a list for Sequence. */
static int type_of(const struct ld *l, json_t *o, const char *jp, const char **type)
{
	json_t *v = json_is_object(o) ? json_object_get(o, "type") : NULL;

	if (!json_is_string(v))
		return bad(l, jp, "must be null or an object with a string \"type\"");
	*type = json_string_value(v);
	return 0;
}

static int sequence(const struct ld *l, json_t *o, const char *jp, const char *key, int depth,
		    int (*each)(struct ld *, json_t *, const char *, int), struct ld *lm)
{
	json_t *arr = json_object_get(o, key), *v;
	char sub[300];
	size_t i;
	int rc;

	if (!json_is_array(arr))
		return bad(l, jp, "a Sequence needs an array \"%s\"", key);
	if (depth >= MAX_DEPTH)
		return bad(l, jp, "Sequences nested deeper than %d", MAX_DEPTH);
	json_array_foreach(arr, i, v) {
		snprintf(sub, sizeof(sub), "%s.%s[%zu]", jp, key, i);
		rc = each(lm, v, sub, depth + 1);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- normalizer ---- */

/* Refuse normalizers that could grow a text past the bound: step nm makes
 * n bytes at most mul * n + add. */
static int norm_growth(struct ld *l, const struct fg_tok_norm *nm, const char *jp)
{
	double mul = 1, add = 0;
	size_t pat = 1;

	switch (nm->kind) {
	case FG_TOK_NORM_PREPEND:
		add = nm->str.len;
		break;
	case FG_TOK_NORM_NFC:
		mul = 3;	/* Unicode's bound for NFC in UTF-8 (UAX #15) */
		break;
	case FG_TOK_NORM_NFKC:
		mul = 11;	/* ... and for NFKC */
		break;
	case FG_TOK_NORM_STRIP:
		break;
	case FG_TOK_NORM_REPLACE:
		/* Matches do not overlap and are never empty. */
		pat = nm->re ? fg_regex_min_length(nm->re) : nm->str.len;
		pat = pat ? pat : 1;
		if (nm->content.len > pat)
			mul = (double)nm->content.len / (double)pat;
		break;
	}
	l->norm_mul *= mul;
	l->norm_add = l->norm_add * mul + add;
	if (l->norm_mul <= FG_TOK_MAX_NORM_GROWTH && l->norm_add <= FG_TOK_MAX_NORM_BYTES)
		return 0;
	if (nm->kind == FG_TOK_NORM_REPLACE)
		return bad(l, jp, "this Replace turns a match of %s%zu byte(s) into %u bytes, so the "
			   "normalizers up to here could make a text %.6g times as long; at most "
			   "%u is supported: fix the normalizer", nm->re ? "as few as " : "", pat,
			   nm->content.len, l->norm_mul, FG_TOK_MAX_NORM_GROWTH);
	return bad(l, jp, "the normalizers up to here could make n bytes of text %.6g * n + %.0f "
		   "bytes long; at most %u * n + %u is supported: fix the normalizer",
		   l->norm_mul, l->norm_add, FG_TOK_MAX_NORM_GROWTH, FG_TOK_MAX_NORM_BYTES);
}

static int normalizer(struct ld *l, json_t *o, const char *jp, int depth)
{
	struct fg_tok_pipeline *p = l->p;
	struct fg_tok_norm *nm;
	const char *type, *s;
	size_t n;
	bool is_re;
	int rc;

	if (!o || json_is_null(o))
		return 0;
	rc = type_of(l, o, jp, &type);
	if (rc)
		return rc;
	if (!strcmp(type, "Sequence"))
		return sequence(l, o, jp, "normalizers", depth, normalizer, l);
	if (!strcmp(type, "Precompiled"))
		return bad(l, jp, "normalizer type \"Precompiled\" is not supported: its "
			   "\"precompiled_charsmap\" is SentencePiece's own binary normalization "
			   "table, which fgcore does not read (supported: Prepend, Replace, NFC, "
			   "NFKC, Strip, Sequence of these)");
	if (strcmp(type, "Prepend") && strcmp(type, "Replace") && strcmp(type, "NFC") &&
	    strcmp(type, "NFKC") && strcmp(type, "Strip"))
		return bad(l, jp, "normalizer type \"%.40s\" is not supported (supported: "
			   "Prepend, Replace, NFC, NFKC, Strip, Sequence of these)", type);
	if (p->n_norm == FG_TOK_MAX_STEPS)
		return bad(l, jp, "more than %u normalizers", FG_TOK_MAX_STEPS);
	nm = &p->norm[p->n_norm];
	if (!strcmp(type, "NFC")) {
		nm->kind = FG_TOK_NORM_NFC;
	} else if (!strcmp(type, "NFKC")) {
		nm->kind = FG_TOK_NORM_NFKC;
	} else if (!strcmp(type, "Strip")) {
		/* Both keys required, as tokenizers reads them. */
		nm->kind = FG_TOK_NORM_STRIP;
		if (!json_is_boolean(json_object_get(o, "strip_left")) ||
		    !json_is_boolean(json_object_get(o, "strip_right")))
			return bad(l, jp, "a Strip normalizer needs \"strip_left\" and "
				   "\"strip_right\", each true or false");
		nm->left = json_is_true(json_object_get(o, "strip_left"));
		nm->right = json_is_true(json_object_get(o, "strip_right"));
	} else if (!strcmp(type, "Prepend")) {
		nm->kind = FG_TOK_NORM_PREPEND;
		rc = get_str(l, o, jp, "prepend", &s, &n);
		if (!rc)
			rc = keep(l, s, n, &nm->str);
	} else {
		nm->kind = FG_TOK_NORM_REPLACE;
		rc = get_pattern(l, o, jp, &s, &n, &is_re);
		if (!rc && is_re)
			rc = compile(l, jp, s, n, false, &nm->re);
		else if (!rc)
			rc = keep(l, s, n, &nm->str);
		if (!rc)
			rc = get_str(l, o, jp, "content", &s, &n);
		if (!rc)
			rc = keep(l, s, n, &nm->content);
	}
	p->n_norm++;	/* counted even on failure: freed with the pipeline */
	return rc ? rc : norm_growth(l, nm, jp);
}

/* ---- Metaspace (a pre-tokenizer and a decoder of one form) ---- */

/* replacement (one character), prepend_scheme ("always" by default), the
 * older add_prefix_space (false only with prepend_scheme "never", as
 * tokenizers has it) and split (true by default). */
static int metaspace(struct ld *l, json_t *o, const char *jp, struct fg_tok_str *repl,
		     enum fg_prepend *prepend, bool *split)
{
	static const char *const schemes[] = {
		[FG_PREPEND_ALWAYS] = "always", [FG_PREPEND_FIRST] = "first",
		[FG_PREPEND_NEVER] = "never",
	};
	json_t *v = json_object_get(o, "prepend_scheme");
	const char *s;
	size_t n, k;
	uint32_t cp;
	bool aps = true;
	int rc;

	rc = get_str(l, o, jp, "replacement", &s, &n);
	if (!rc && (n == 0 || fg_utf8_next((const unsigned char *)s, n, &cp) != n ||
		    cp == FG_UC_INVALID))
		return bad(l, jp, "\"replacement\" must be one character (\"\u2581\" in "
			   "SentencePiece-style files)");
	if (!rc)
		rc = keep(l, s, n, repl);
	if (rc)
		return rc;
	*prepend = FG_PREPEND_ALWAYS;
	if (v && !json_is_null(v)) {
		for (k = 0; json_is_string(v) && k < 3; k++)
			if (!strcmp(json_string_value(v), schemes[k]))
				break;
		if (!json_is_string(v) || k == 3)
			return bad(l, jp, "\"prepend_scheme\" must be \"always\", \"first\" or "
				   "\"never\"");
		*prepend = (enum fg_prepend)k;
	}
	rc = get_bool(l, o, jp, "add_prefix_space", true, &aps);
	if (!rc && !aps && *prepend != FG_PREPEND_NEVER)
		return bad(l, jp, "\"add_prefix_space\": false contradicts prepend_scheme \"%s\" "
			   "(tokenizers refuses this file too): set \"prepend_scheme\": \"never\"",
			   schemes[*prepend]);
	return rc ? rc : get_bool(l, o, jp, "split", true, split);
}

/* ---- pre-tokenizer ---- */

static int pre_tokenizer(struct ld *l, json_t *o, const char *jp, int depth)
{
	static const char *const behaviors[] = {
		[FG_SPLIT_ISOLATED] = "Isolated", [FG_SPLIT_REMOVED] = "Removed",
		[FG_SPLIT_MERGED_PREV] = "MergedWithPrevious",
		[FG_SPLIT_MERGED_NEXT] = "MergedWithNext", [FG_SPLIT_CONTIGUOUS] = "Contiguous",
	};
	struct fg_tok_pipeline *p = l->p;
	struct fg_tok_pre *pre;
	const char *type, *s;
	size_t n;
	bool is_re;
	json_t *v;
	int rc;

	if (!o || json_is_null(o))
		return 0;
	rc = type_of(l, o, jp, &type);
	if (rc)
		return rc;
	if (!strcmp(type, "Sequence"))
		return sequence(l, o, jp, "pretokenizers", depth, pre_tokenizer, l);
	if (strcmp(type, "Split") && strcmp(type, "ByteLevel") && strcmp(type, "Metaspace"))
		return bad(l, jp, "pre-tokenizer type \"%.40s\" is not supported (supported: "
			   "Split, Metaspace, ByteLevel, Sequence of these)", type);
	if (p->byte_level)
		return bad(l, jp, "a pre-tokenizer after ByteLevel is not supported (ByteLevel "
			   "must come last)");
	if (p->n_pre == FG_TOK_MAX_STEPS)
		return bad(l, jp, "more than %u pre-tokenizers", FG_TOK_MAX_STEPS);
	pre = &p->pre[p->n_pre];
	if (!strcmp(type, "ByteLevel")) {
		pre->kind = FG_PRE_BYTELEVEL;
		p->byte_level = true;
		p->n_pre++;
		rc = get_bool(l, o, jp, "add_prefix_space", true, &pre->add_prefix_space);
		return rc ? rc : get_bool(l, o, jp, "use_regex", true, &pre->use_regex);
	}
	if (!strcmp(type, "Metaspace")) {
		pre->kind = FG_PRE_METASPACE;
		p->n_pre++;
		return metaspace(l, o, jp, &pre->repl, &pre->prepend, &pre->split);
	}
	pre->kind = FG_PRE_SPLIT;
	rc = get_pattern(l, o, jp, &s, &n, &is_re);
	if (!rc)
		rc = compile(l, jp, s, n, !is_re, &pre->re);
	p->n_pre++;
	if (rc)
		return rc;
	v = json_object_get(o, "behavior");
	if (!json_is_string(v))
		return bad(l, jp, "\"behavior\" must be a string");
	for (n = 0; n < sizeof(behaviors) / sizeof(behaviors[0]); n++)
		if (!strcmp(json_string_value(v), behaviors[n]))
			break;
	if (n == sizeof(behaviors) / sizeof(behaviors[0]))
		return bad(l, jp, "behavior \"%.40s\" is not one of Isolated, Removed, "
			   "MergedWithPrevious, MergedWithNext, Contiguous", json_string_value(v));
	pre->behavior = (enum fg_split_behavior)n;
	return get_bool(l, o, jp, "invert", false, &pre->invert);
}

/* ---- decoder ---- */

static int get_count(const struct ld *l, json_t *o, const char *jp, const char *key,
		     uint32_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
		return bad(l, jp, "\"%s\" must be an integer from 0 to 1000000", key);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int decoder(struct ld *l, json_t *o, const char *jp, int depth)
{
	static const struct { const char *name; enum fg_dec_kind kind; } kinds[] = {
		{ "ByteLevel", FG_DEC_BYTELEVEL }, { "Replace", FG_DEC_REPLACE },
		{ "ByteFallback", FG_DEC_BYTEFALLBACK }, { "Fuse", FG_DEC_FUSE },
		{ "Strip", FG_DEC_STRIP }, { "Metaspace", FG_DEC_METASPACE },
	};
	struct fg_tok_pipeline *p = l->p;
	struct fg_tok_dec *d;
	const char *type, *s;
	size_t n, k;
	bool is_re;
	int rc;

	if (!o || json_is_null(o))
		return 0;
	p->has_decoder = true;
	rc = type_of(l, o, jp, &type);
	if (rc)
		return rc;
	if (!strcmp(type, "Sequence"))
		return sequence(l, o, jp, "decoders", depth, decoder, l);
	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (!strcmp(type, kinds[k].name))
			break;
	if (k == sizeof(kinds) / sizeof(kinds[0]))
		return bad(l, jp, "decoder type \"%.40s\" is not supported (supported: ByteLevel, "
			   "Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence of these)", type);
	if (p->n_dec == FG_TOK_MAX_STEPS)
		return bad(l, jp, "more than %u decoders", FG_TOK_MAX_STEPS);
	d = &p->dec[p->n_dec++];
	d->kind = kinds[k].kind;
	if (d->kind == FG_DEC_REPLACE) {
		rc = get_pattern(l, o, jp, &s, &n, &is_re);
		if (!rc && is_re)
			return bad(l, jp, "a Replace decoder with a Regex pattern is not supported "
				   "(String only)");
		if (!rc)
			rc = keep(l, s, n, &d->pat);
		if (!rc)
			rc = get_str(l, o, jp, "content", &s, &n);
		if (!rc)
			rc = keep(l, s, n, &d->content);
		/* token_bytes decodes every token at load: bound what that makes */
		if (!rc && d->content.len > d->pat.len)
			l->dec_mul *= (double)d->content.len / (double)d->pat.len;
		if (!rc && l->dec_mul > FG_TOK_MAX_DEC_GROWTH)
			return bad(l, jp, "this Replace turns %u byte(s) into %u, so the decoders up "
				   "to here could make a token's text %.6g times as long; at most %u "
				   "is supported: fix the decoder", d->pat.len, d->content.len,
				   l->dec_mul, FG_TOK_MAX_DEC_GROWTH);
	} else if (d->kind == FG_DEC_METASPACE) {
		bool split;

		rc = metaspace(l, o, jp, &d->pat, &d->prepend, &split);
	} else if (d->kind == FG_DEC_STRIP) {
		rc = get_str(l, o, jp, "content", &s, &n);
		if (!rc && (n == 0 || fg_utf8_next((const unsigned char *)s, n, &d->strip_cp) != n ||
			    d->strip_cp == FG_UC_INVALID))
			return bad(l, jp, "\"content\" must be one character");
		if (!rc)
			rc = get_count(l, o, jp, "start", &d->start);
		if (!rc)
			rc = get_count(l, o, jp, "stop", &d->stop);
	}
	return rc;
}

/* ---- post-processor: what goes before the text? ---- */

/* The ids TemplateProcessing's "single" puts before the text: those of its
 * leading SpecialToken pieces, each looked up in "special_tokens" (where
 * tokenizers' encode panics on a missing one: refused here). */
static int template_lead(struct ld *l, json_t *o, const char *jp)
{
	json_t *single = json_object_get(o, "single"), *map = json_object_get(o, "special_tokens");
	json_t *piece, *sp, *name, *ent, *ids, *id;
	char sub[340];
	size_t i, k;

	if (!json_is_array(single))
		return bad(l, jp, "TemplateProcessing needs an array \"single\"");
	json_array_foreach(single, i, piece) {
		sp = json_is_object(piece) ? json_object_get(piece, "SpecialToken") : NULL;
		if (!sp)
			break;
		snprintf(sub, sizeof(sub), "%s.single[%zu].SpecialToken", jp, i);
		name = json_object_get(sp, "id");
		if (!json_is_string(name))
			return bad(l, sub, "needs a string \"id\"");
		ent = json_is_object(map) ? json_object_get(map, json_string_value(name)) : NULL;
		ids = json_is_object(ent) ? json_object_get(ent, "ids") : NULL;
		if (!json_is_array(ids))
			return bad(l, sub, "\"%.60s\" is not in the template's \"special_tokens\" "
				   "(an object with an array \"ids\")", json_string_value(name));
		json_array_foreach(ids, k, id) {
			if (!json_is_integer(id))
				return bad(l, sub, "\"%.60s\": special_tokens' \"ids\" must be "
					   "integers", json_string_value(name));
			if (l->n_lead++ == 0)
				l->lead_id = json_integer_value(id);
		}
	}
	return 0;
}

static int post_processor(struct ld *l, json_t *o, const char *jp, int depth)
{
	const char *type;
	int rc;

	if (!o || json_is_null(o))
		return 0;
	rc = type_of(l, o, jp, &type);
	if (rc)
		return rc;
	if (!strcmp(type, "Sequence"))
		return sequence(l, o, jp, "processors", depth, post_processor, l);
	if (!strcmp(type, "ByteLevel"))
		return 0;	/* offsets only */
	if (strcmp(type, "TemplateProcessing"))
		return bad(l, jp, "post-processor type \"%.40s\" is not supported (supported: "
			   "ByteLevel, TemplateProcessing, Sequence of these)", type);
	if (l->has_template)
		return bad(l, jp, "a second TemplateProcessing is not supported (one, after %s)",
			   l->tpl_jp);
	l->has_template = true;
	snprintf(l->tpl_jp, sizeof(l->tpl_jp), "%s", jp);
	return template_lead(l, o, jp);
}

/* The template's leading token, once the vocabulary is known: its id
 * (-1: none), whose text is the bos role's default. */
static int template_token(struct ld *l, int32_t *idp)
{
	const struct fg_tokenizer *t = l->t;
	json_int_t id = l->lead_id;

	*idp = -1;
	if (!l->n_lead)
		return 0;
	if (id < 0 || (uint64_t)id >= t->n_ids || t->text[id].len == UINT32_MAX)
		return bad(l, l->tpl_jp, "the template's leading special token has id %lld, "
			   "which is not a token of this tokenizer", (long long)id);
	*idp = (int32_t)id;
	return 0;
}

/* A copy of token id's text: fg_tok_load_special grows the blob (moving
 * it) before it reads the defaults. */
static char *token_copy(const struct fg_tokenizer *t, int32_t id)
{
	char *c = malloc(t->text[id].len + 1);

	if (c) {
		memcpy(c, t->blob + t->text[id].off, t->text[id].len);
		c[t->text[id].len] = '\0';
	}
	return c;
}

/* The template decides whether bos leads (over add_bos_token, as
 * transformers 5 does): nothing before the text, or the bos alone. */
static int template_rule(struct ld *l)
{
	struct fg_tokenizer *t = l->t;
	char q[96], q2[96];

	if (!l->has_template)
		return 0;
	if (l->n_lead == 0) {
		t->bos_rule = FG_TOK_BOS_NONE;
		return 0;
	}
	fg_tok_quote(t->blob + t->text[l->lead_id].off, t->text[l->lead_id].len, q, sizeof(q));
	if (l->n_lead > 1)
		return bad(l, l->tpl_jp, "\"single\" puts %zu tokens before the text (\"%s\" "
			   "first); only one, the bos token, is supported", l->n_lead, q);
	if (l->lead_id != t->bos) {
		if (t->bos < 0)
			return bad(l, l->tpl_jp, "\"single\" puts \"%s\" (id %lld) before the "
				   "text, but the folder names no bos token", q,
				   (long long)l->lead_id);
		return bad(l, l->tpl_jp, "\"single\" puts \"%s\" (id %lld) before the text, "
			   "but the bos token the folder names is \"%s\" (id %d)", q,
			   (long long)l->lead_id,
			   fg_tok_quote(t->blob + t->text[t->bos].off, t->text[t->bos].len, q2,
					sizeof(q2)), t->bos);
	}
	t->bos_rule = FG_TOK_BOS_ADD;
	return 0;
}

/* ---- model ---- */

static int merges(struct ld *l, json_t *arr)
{
	struct fg_tokenizer *t = l->t;
	char where[4200], jp[64], *cat;
	json_t *m;
	size_t i;
	int rc = 0;

	if (!json_is_array(arr))
		return bad(l, "model.merges", "must be an array of \"a b\" strings or [a, b] pairs");
	if (json_array_size(arr) > FG_TOK_MAX_MERGES)
		return bad(l, "model.merges", "%zu merges; at most %u are supported",
			   json_array_size(arr), FG_TOK_MAX_MERGES);
	rc = fg_pairmap_init(&t->merges, json_array_size(arr));
	cat = malloc(FG_TOK_MAX_TOKEN_BYTES);
	if (rc || !cat) {
		free(cat);
		return -ENOMEM;
	}
	json_array_foreach(arr, i, m) {
		const char *a, *b;
		size_t al, bl;

		snprintf(jp, sizeof(jp), "model.merges[%zu]", i);
		snprintf(where, sizeof(where), "%s: %s", l->path, jp);
		if (json_is_string(m)) {
			const char *s = json_string_value(m), *sp = strchr(s, ' ');
			size_t n = json_string_length(m);

			if (!sp || sp == s || sp == s + n - 1 || strchr(sp + 1, ' ') ||
			    strlen(s) != n) {
				char q[96];

				rc = bad(l, jp, "expected two tokens separated by one space, got "
					 "\"%s\"", fg_tok_quote(s, n, q, sizeof(q)));
				break;
			}
			a = s;
			al = (size_t)(sp - s);
			b = sp + 1;
			bl = n - al - 1;
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) &&
			   json_is_string(json_array_get(m, 1))) {
			a = json_string_value(json_array_get(m, 0));
			al = json_string_length(json_array_get(m, 0));
			b = json_string_value(json_array_get(m, 1));
			bl = json_string_length(json_array_get(m, 1));
		} else {
			rc = bad(l, jp, "expected \"a b\" or [\"a\", \"b\"]");
			break;
		}
		rc = fg_tok_add_merge(t, where, "model.vocab", a, al, b, bl, (uint32_t)i, cat);
		if (rc)
			break;
	}
	free(cat);
	return rc;
}

/* The <0xXX> tokens byte_fallback uses (-1: absent). */
static void fallback_ids(const struct fg_tokenizer *t, struct fg_tok_pipeline *p)
{
	for (int b = 0; b < 256; b++) {
		char name[8];
		int32_t id;

		snprintf(name, sizeof(name), "<0x%02X>", b);
		id = fg_strmap_find(t, name, 6);
		p->fallback_id[b] = id >= 0 && (size_t)id < t->n_vocab ? id : -1;
	}
}

static int model(struct ld *l, json_t *m)
{
	struct fg_tokenizer *t = l->t;
	struct fg_tok_pipeline *p = l->p;
	const char *type;
	json_t *v;
	int rc;

	if (!json_is_object(m))
		return bad(l, "model", "missing or not an object");
	v = json_object_get(m, "type");
	type = json_is_string(v) ? json_string_value(v) : NULL;
	if (type && !strcmp(type, "Unigram")) {
		if (p->byte_level)
			return bad(l, "model.type", "a Unigram model after a ByteLevel pre-tokenizer "
				   "is not supported (Unigram works on characters)");
		rc = fg_unigram_load(t, p, l->path, m);
		if (!rc)
			fallback_ids(t, p);
		return rc;
	}
	if (!type || strcmp(type, "BPE"))
		return bad(l, "model.type", "\"%.40s\" is not supported (supported: BPE, Unigram)",
			   type ? type : "(missing)");
	v = json_object_get(m, "dropout");
	if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
		return bad(l, "model.dropout", "BPE dropout is not supported (null or 0)");
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "end_of_word_suffix" : "continuing_subword_prefix";

		v = json_object_get(m, key);
		if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
			return bad(l, "model", "\"%s\" is not supported (null or \"\")", key);
	}
	rc = get_bool(l, m, "model", "byte_fallback", false, &p->byte_fallback);
	if (!rc)
		rc = get_bool(l, m, "model", "fuse_unk", false, &p->fuse_unk);
	if (!rc)
		rc = get_bool(l, m, "model", "ignore_merges", false, &p->ignore_merges);
	if (rc)
		return rc;
	v = json_object_get(m, "vocab");
	if (!v)
		return bad(l, "model.vocab", "missing");
	rc = fg_tok_load_vocab_obj(t, l->path, "model.vocab", v, p->byte_level);
	if (rc)
		return rc;
	if (p->byte_level) {
		char where[4200];

		snprintf(where, sizeof(where), "%s: model.vocab", l->path);
		rc = fg_tok_byte_ids(t, where);
		if (rc)
			return rc;
	}
	rc = merges(l, json_object_get(m, "merges"));
	if (rc)
		return rc;
	p->model_unk = -1;
	v = json_object_get(m, "unk_token");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return bad(l, "model.unk_token", "must be a string or null");
		p->model_unk = fg_strmap_find(t, json_string_value(v), json_string_length(v));
		if (p->model_unk < 0)
			return bad(l, "model.unk_token", "\"%.60s\" is not in model.vocab",
				   json_string_value(v));
	}
	fallback_ids(t, p);
	return 0;
}

/* ---- added_tokens ---- */

static int added_tokens(struct ld *l, json_t *arr)
{
	static const struct { const char *key; unsigned flag; } keys[] = {
		{ "lstrip", FG_ADDED_LSTRIP }, { "rstrip", FG_ADDED_RSTRIP },
		{ "single_word", FG_ADDED_SINGLE_WORD }, { "normalized", FG_ADDED_NORMALIZED },
		{ "special", FG_ADDED_SPECIAL },
	};
	struct fg_tokenizer *t = l->t;
	char jp[64], where[4200], q[96], q2[96];
	json_t *e;
	size_t i;
	int rc;

	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > FG_TOK_MAX_ADDED)
		return bad(l, "added_tokens", "must be an array of at most %u tokens",
			   FG_TOK_MAX_ADDED);
	json_array_foreach(arr, i, e) {
		json_t *jid = json_object_get(e, "id");
		const char *s;
		size_t n;
		json_int_t id;
		int32_t have;
		unsigned f = 0;

		snprintf(jp, sizeof(jp), "added_tokens[%zu]", i);
		if (!json_is_object(e) || !json_is_integer(jid))
			return bad(l, jp, "must be an object with an integer \"id\"");
		rc = get_str(l, e, jp, "content", &s, &n);
		if (rc)
			return rc;
		snprintf(where, sizeof(where), "%s: %s", l->path, jp);
		rc = fg_tok_check_content(where, s, n);
		if (rc)
			return rc;
		for (size_t k = sizeof(keys) / sizeof(keys[0]); k-- > 0;) {
			bool b = false;

			/* special first: "normalized" defaults to its opposite */
			rc = get_bool(l, e, jp, keys[k].key,
				      keys[k].flag == FG_ADDED_NORMALIZED && !(f & FG_ADDED_SPECIAL),
				      &b);
			if (rc)
				return rc;
			f |= b ? keys[k].flag : 0;
		}
		id = json_integer_value(jid);
		fg_tok_quote(s, n, q, sizeof(q));
		if (id < 0 || (uint64_t)id >= t->n_vocab + FG_TOK_MAX_ADDED)
			return bad(l, jp, "\"%s\": id %lld is out of range 0..%zu", q, (long long)id,
				   t->n_vocab + FG_TOK_MAX_ADDED - 1);
		have = fg_strmap_find(t, s, n);
		if (have >= 0 && have != id)
			return bad(l, jp, "\"%s\" has id %lld but is already token %d", q,
				   (long long)id, have);
		if (have < 0) {
			if ((size_t)id < t->n_ids && t->text[id].len != UINT32_MAX)
				return bad(l, jp, "\"%s\": id %lld is already the id of \"%s\"", q,
					   (long long)id,
					   fg_tok_quote(t->blob + t->text[id].off, t->text[id].len,
							q2, sizeof(q2)));
			rc = fg_tok_set_token(t, (int32_t)id, s, n);
			if (rc)
				return rc;
		}
		rc = fg_tok_queue_added(t, (int32_t)id, f);
		if (rc)
			return rc;
	}
	return 0;
}

/* What token_bytes gives: the decoders on the token alone, unrepaired. */
static int token_bytes(struct fg_tokenizer *t)
{
	const struct fg_tok_pipeline *p = t->pipe;
	bool plain_bl = p->n_dec == 1 && p->dec[0].kind == FG_DEC_BYTELEVEL;
	char *dec = malloc(FG_TOK_MAX_TOKEN_BYTES);
	int rc = dec ? 0 : -ENOMEM;

	for (size_t id = 0; !rc && id < t->n_ids; id++) {
		struct fg_tok_str s = t->text[id];
		char *txt = NULL;
		size_t n;

		if (s.len == UINT32_MAX)
			continue;
		if (plain_bl) {
			n = fg_bytelevel_to_bytes(t->blob + s.off, s.len, dec);
			rc = fg_tok_blob_add(t, dec, n, &t->bytes[id].off);
		} else {
			int32_t one = (int32_t)id;

			rc = fg_tok_decode_json(t, &one, 1, true, &txt, &n);
			if (!rc && n > UINT32_MAX - 1)
				rc = -ENOMEM;
			if (!rc)
				rc = fg_tok_blob_add(t, txt, n, &t->bytes[id].off);
			free(txt);
		}
		t->bytes[id].len = (uint32_t)n;
	}
	free(dec);
	return rc;
}

void fg_tok_pipeline_free(struct fg_tok_pipeline *p)
{
	if (!p)
		return;
	for (size_t k = 0; k < p->n_norm; k++)
		fg_regex_free(p->norm[k].re);
	for (size_t k = 0; k < p->n_pre; k++)
		fg_regex_free(p->pre[k].re);
	fg_unigram_free(p->uni);
	free(p);
}

static int load(struct ld *l, json_t *root, const char *dir)
{
	static const char eot[] = "<|endoftext|>";
	struct fg_tokenizer *t = l->t;
	struct fg_tok_pipeline *p = l->p;
	const char *defaults[3];
	char *own_bos = NULL, *own_unk = NULL;
	int32_t lead;
	int rc;

	if (!json_is_object(root))
		return bad(l, "(top level)", "not a JSON object; expected a Hugging Face "
			   "tokenizer.json");
	/* The pre-tokenizer first: it decides how the vocabulary is read. */
	rc = normalizer(l, json_object_get(root, "normalizer"), "normalizer", 0);
	if (!rc)
		rc = pre_tokenizer(l, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0);
	if (!rc)
		rc = decoder(l, json_object_get(root, "decoder"), "decoder", 0);
	if (!rc)
		rc = post_processor(l, json_object_get(root, "post_processor"), "post_processor", 0);
	if (!rc)
		rc = model(l, json_object_get(root, "model"));
	if (!rc)
		rc = added_tokens(l, json_object_get(root, "added_tokens"));
	if (rc)
		return rc;
	/* Roles, as the form's tokenizer class has them by default: GPT-2's
	 * <|endoftext|> for byte-level BPE; LlamaTokenizer's <s>, </s> and
	 * <unk> for SentencePiece-style BPE; the template's leading token for
	 * bos.  Whether bos leads: the template, else add_bos_token, else
	 * unsaid (no default of the form's: the model family's applies). */
	if (p->byte_level) {
		defaults[0] = defaults[1] = defaults[2] = eot;
	} else {
		defaults[0] = "<s>";
		defaults[1] = "</s>";
		defaults[2] = "<unk>";
	}
	rc = template_token(l, &lead);
	if (rc)
		return rc;
	if (p->model_unk >= 0 && !(defaults[2] = own_unk = token_copy(t, p->model_unk)))
		rc = -ENOMEM;
	if (!rc && lead >= 0 && !(defaults[0] = own_bos = token_copy(t, lead)))
		rc = -ENOMEM;
	if (!rc)
		rc = fg_tok_load_special(t, dir, defaults);
	free(own_bos);
	free(own_unk);
	if (!rc)
		rc = template_rule(l);
	if (!rc)
		rc = fg_tok_build_added(t, l->path);
	if (!rc)
		rc = token_bytes(t);
	return rc;
}

int fg_tok_load_json(const char *dir, struct fg_tokenizer **out)
{
	char path[PATH_MAX];
	struct ld l = { 0 };
	json_t *root;
	int rc;

	*out = NULL;
	if ((size_t)snprintf(path, sizeof(path), "%s/tokenizer.json", dir) >= sizeof(path)) {
		FG_ERR("%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	rc = fg_tok_read_json(path, false, JSON_REJECT_DUPLICATES,
			      "; expected a Hugging Face tokenizer.json", &root);
	if (rc)
		return rc;
	l.path = path;
	l.norm_mul = l.dec_mul = 1;
	l.t = fg_tok_new();
	l.p = l.t ? calloc(1, sizeof(*l.p)) : NULL;
	if (!l.p) {
		free(l.t);
		json_decref(root);
		return -ENOMEM;
	}
	l.t->pipe = l.p;
	rc = load(&l, root, dir);
	json_decref(root);
	if (rc) {
		if (rc == -ENOMEM)
			FG_ERR("%s: out of memory loading the tokenizer", path);
		fg_tokenizer_free(l.t);
		return rc;
	}
	*out = l.t;
	return 0;
}
