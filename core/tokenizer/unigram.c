/* core/tokenizer/unigram.c - the Unigram model of a tokenizer.json
 * (SentencePiece's, as Hugging Face tokenizers runs it).
 *
 * model.vocab is a list of [piece, score] pairs: a piece's id is its index,
 * its score a log-probability.  A pre-token is cut into the pieces whose
 * scores sum highest (Viterbi over the byte positions that start a
 * character).  A character that no one-character piece covers may stand
 * alone as the unk piece, scored 10 below the lowest score; consecutive unk
 * pieces are fused into one string, which becomes its own id if it happens
 * to be a piece, else its bytes as <0xXX> tokens (byte_fallback, when all of
 * them exist), else unk_id.  Ties keep the first candidate seen (positions
 * in order, shorter pieces first), as tokenizers does; a piece listed twice
 * matches as its later id.  With unk_id null, a text with such a character
 * is refused, as tokenizers refuses it.
 *
 * The pieces sit in a byte trie whose edges are a (node, byte) -> child
 * hash table, so each start position costs at most the longest piece's
 * length in lookups.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

#define UNK_PENALTY 10.0	/* tokenizers' K_UNK_PENALTY */
#define NONE SIZE_MAX

struct fg_unigram {
	double *score;		/* [n_vocab] */
	struct fg_pairmap trie;	/* (node, byte) -> child node, in .merged */
	int32_t *node_piece;	/* [nodes] the piece ending at this node, or -1 */
	size_t nodes;
	double unk_score;
	int32_t unk_id;		/* -1: none */
	bool byte_fallback;
	char *path;		/* the tokenizer.json, for errors at encode time */
};

void fg_unigram_free(struct fg_unigram *u)
{
	if (!u)
		return;
	free(u->score);
	fg_pairmap_free(&u->trie);
	free(u->node_piece);
	free(u->path);
	free(u);
}

__attribute__((format(printf, 3, 4)))
static int bad(const char *path, const char *jp, const char *fmt, ...)
{
	char m[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	FG_ERR("%s: %s: %s", path, jp, m);
	return -EINVAL;
}

/* Each entry [piece, score]: the piece's text and bytes (set by the
 * decoders later), its score. */
static int read_vocab(struct fg_tokenizer *t, struct fg_unigram *u, const char *path,
		      json_t *arr, size_t *total)
{
	json_t *e, *js, *jv;
	char jp[64];
	size_t i;
	int rc;

	*total = 0;
	json_array_foreach(arr, i, e) {
		size_t len;

		snprintf(jp, sizeof(jp), "model.vocab[%zu]", i);
		js = json_array_get(e, 0);
		jv = json_array_get(e, 1);
		if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(js))
			return bad(path, jp, "must be a [piece, score] pair: a string and a number");
		if (!json_is_number(jv) || !isfinite(json_number_value(jv)))
			return bad(path, jp, "the score of a piece must be a finite number (its "
				   "log-probability)");
		len = json_string_length(js);
		if (len > FG_TOK_MAX_TOKEN_BYTES)
			return bad(path, jp, "a piece of %zu bytes; at most %u are supported", len,
				   FG_TOK_MAX_TOKEN_BYTES);
		rc = fg_tok_blob_add(t, json_string_value(js), len, &t->text[i].off);
		if (rc)
			return rc;
		t->text[i].len = (uint32_t)len;
		t->bytes[i] = t->text[i];
		u->score[i] = json_number_value(jv);
		*total += len;
	}
	return 0;
}

/* The trie of all pieces; a piece listed twice ends at its later id. */
static int build_trie(const struct fg_tokenizer *t, struct fg_unigram *u, size_t total)
{
	int rc = fg_pairmap_init(&u->trie, total + 1);

	u->node_piece = rc ? NULL : malloc((total + 1) * sizeof(*u->node_piece));
	if (!u->node_piece)
		return -ENOMEM;
	u->node_piece[0] = -1;
	u->nodes = 1;
	for (size_t id = 0; id < t->n_vocab; id++) {
		const unsigned char *s = (const unsigned char *)t->blob + t->text[id].off;
		int32_t node = 0;

		if (!t->text[id].len)
			continue;	/* never matched, as in tokenizers */
		for (size_t k = 0; k < t->text[id].len; k++) {
			const struct fg_pair_slot *c = fg_pairmap_find(&u->trie, node, s[k]);

			if (c) {
				node = c->merged;
				continue;
			}
			u->node_piece[u->nodes] = -1;
			fg_pairmap_set(&u->trie, node, s[k], 0, (int32_t)u->nodes);
			node = (int32_t)u->nodes++;
		}
		u->node_piece[node] = (int32_t)id;
	}
	return 0;
}

int fg_unigram_load(struct fg_tokenizer *t, struct fg_tok_pipeline *p, const char *path,
		    json_t *m)
{
	json_t *arr = json_object_get(m, "vocab"), *v;
	struct fg_unigram *u;
	double lowest = INFINITY;
	size_t n, total;
	int rc;

	if (!json_is_array(arr))
		return bad(path, "model.vocab", "%s; a Unigram model needs an array of [piece, "
			   "score] pairs", arr ? "not an array" : "missing");
	n = json_array_size(arr);
	if (n == 0 || n > FG_TOK_MAX_VOCAB)
		return bad(path, "model.vocab", "%zu pieces; a Unigram vocabulary has between 1 "
			   "(its unk piece) and %u", n, FG_TOK_MAX_VOCAB);
	v = json_object_get(m, "byte_fallback");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return bad(path, "model", "\"byte_fallback\" must be true or false");
	p->byte_fallback = json_is_true(v);
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	p->uni = u;	/* freed with the pipeline, on failure too */
	u->unk_id = -1;
	u->byte_fallback = p->byte_fallback;
	v = json_object_get(m, "unk_id");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v))
			return bad(path, "model.unk_id", "must be null or an integer: the index of "
				   "the unk piece in model.vocab");
		if (json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) >= n)
			return bad(path, "model.unk_id", "%lld is out of range: model.vocab has %zu "
				   "pieces, so it must be 0..%zu or null",
				   (long long)json_integer_value(v), n, n - 1);
		u->unk_id = (int32_t)json_integer_value(v);
	}
	p->model_unk = u->unk_id;
	u->path = strdup(path);
	u->score = malloc(n * sizeof(*u->score));
	if (!u->path || !u->score)
		return -ENOMEM;
	rc = fg_tok_grow_ids(t, n);
	if (rc)
		return rc;
	t->n_vocab = n;
	rc = read_vocab(t, u, path, arr, &total);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		lowest = u->score[i] < lowest ? u->score[i] : lowest;
	u->unk_score = lowest - UNK_PENALTY;
	/* Inserted last id first: the string map then finds a repeated
	 * piece's later id, as tokenizers' map does. */
	rc = fg_strmap_init(&t->vocab, n);
	for (size_t id = n; !rc && id-- > 0;)
		rc = fg_strmap_insert(t, (int32_t)id);
	return rc ? rc : build_trie(t, u, total);
}

void fg_unigram_scratch_free(struct fg_unigram_scratch *sc)
{
	free(sc->score);
	free(sc->from);
	free(sc->next);
	free(sc->id);
	memset(sc, 0, sizeof(*sc));
}

static int scratch_room(struct fg_unigram_scratch *sc, size_t n)
{
	if (n <= sc->cap)
		return 0;
	fg_unigram_scratch_free(sc);
	if (n > SIZE_MAX / sizeof(double))
		return -ENOMEM;
	sc->score = malloc(n * sizeof(*sc->score));
	sc->from = malloc(n * sizeof(*sc->from));
	sc->next = malloc(n * sizeof(*sc->next));
	sc->id = malloc(n * sizeof(*sc->id));
	if (!sc->score || !sc->from || !sc->next || !sc->id) {
		fg_unigram_scratch_free(sc);
		return -ENOMEM;
	}
	sc->cap = n;
	return 0;
}

/* Keep the candidate ending at `end` when it is the first or scores higher. */
static inline void offer(struct fg_unigram_scratch *sc, size_t start, size_t end, double score,
			 int32_t id)
{
	if (sc->from[end] == NONE || score > sc->score[end]) {
		sc->score[end] = score;
		sc->from[end] = start;
		sc->id[end] = id;
	}
}

/* A fused run of unknown characters s[a, b): its id if it is a piece, else
 * its bytes' <0xXX> tokens (when all exist), else unk. */
static void emit_unknown(const struct fg_tokenizer *t, const unsigned char *s, size_t a,
			 size_t b, struct fg_idvec *o)
{
	const struct fg_tok_pipeline *p = t->pipe;
	int32_t id = fg_strmap_find(t, (const char *)s + a, b - a);
	bool fb = p->byte_fallback;

	if (id >= 0 && (size_t)id < t->n_vocab) {
		o->v[o->n++] = id;
		return;
	}
	for (size_t k = a; fb && k < b; k++)
		fb = p->fallback_id[s[k]] >= 0;
	if (!fb) {
		o->v[o->n++] = p->uni->unk_id;
		return;
	}
	for (size_t k = a; k < b; k++)
		o->v[o->n++] = p->fallback_id[s[k]];
}

int fg_unigram_encode(const struct fg_tokenizer *t, struct fg_unigram_scratch *sc,
		      const unsigned char *s, size_t n, struct fg_idvec *o)
{
	const struct fg_unigram *u = t->pipe->uni;
	size_t pos, a, e;
	int rc;

	if (!n)
		return 0;
	/* At most one id per byte: every piece has one, a fallback one each. */
	rc = fg_idvec_room(o, n);
	if (!rc)
		rc = n == NONE ? -ENOMEM : scratch_room(sc, n + 1);
	if (rc)
		return rc;
	for (size_t i = 0; i <= n; i++) {
		sc->score[i] = 0;
		sc->from[i] = NONE;
	}
	for (pos = 0; pos < n;) {
		double base = sc->score[pos];
		uint32_t cp;
		size_t cl = fg_utf8_next(s + pos, n - pos, &cp);
		bool single = false;
		int32_t node = 0;

		for (size_t j = pos; j < n; j++) {
			const struct fg_pair_slot *c = fg_pairmap_find(&u->trie, node, s[j]);
			int32_t id;

			if (!c)
				break;
			node = c->merged;
			id = u->node_piece[node];
			if (id < 0)
				continue;
			offer(sc, pos, j + 1, base + u->score[id], id);
			single = single || j + 1 - pos == cl;
		}
		if (!single) {
			if (u->unk_id < 0) {
				char q[64];

				FG_ERR("%s: model.unk_id: the text has a character that no piece "
				       "covers (\"%s\" at byte %zu of a pre-token) and the model has "
				       "no unk piece; Hugging Face tokenizers refuses such a text too",
				       u->path, fg_tok_quote((const char *)s + pos, cl, q, sizeof(q)),
				       pos);
				return -EINVAL;
			}
			offer(sc, pos, pos + cl, base + u->unk_score, u->unk_id);
		}
		pos += cl;
	}
	/* The best path, back from the end, linked forwards. */
	for (e = n; e > 0; e = sc->from[e])
		sc->next[sc->from[e]] = e;
	for (a = 0; a < n; a = e) {
		int32_t id;

		e = sc->next[a];
		id = sc->id[e];
		if (id != u->unk_id) {
			o->v[o->n++] = id;
			continue;
		}
		while (e < n && sc->id[sc->next[e]] == u->unk_id)
			e = sc->next[e];
		emit_unknown(t, s, a, e, o);
	}
	return 0;
}
