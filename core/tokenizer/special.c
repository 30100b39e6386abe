/* core/tokenizer/special.c - special and added tokens (matched whole before
 * pre-tokenization) from a Hugging Face tokenizer folder.
 *
 * Sources, as transformers reads them:
 *  - tokenizer_config.json: added_tokens_decoder {"id": {"content": ...}},
 *    the *_token keys, additional_special_tokens, add_bos_token;
 *  - special_tokens_map.json: the *_token keys and additional_special_tokens,
 *    overriding tokenizer_config.json;
 *  - added_tokens.json: {"token": id}.
 * A role the files do not name keeps the default of the tokenizer's form
 * (GPT2Tokenizer's: bos, eos and unk are <|endoftext|>, when the vocabulary
 * has it).  A named token missing from the vocabulary gets the next free id,
 * as transformers does.  With the GPT-2 files the lstrip/rstrip/single_word
 * flags of added tokens are not applied: tokens match their exact content;
 * a tokenizer.json's added tokens keep the flags it gives them.
 *
 * Whether a text starts with bos (fg_tokenizer_bos_rule) follows what
 * AutoTokenizer.from_pretrained(dir)(text) gives.  Seen with transformers
 * 5.25.0 (tokenizers 0.23.3) on small made-up folders, "hi" encoded with
 * special tokens:
 *  - vocab.json + merges.txt (GPT2Tokenizer): tokenizer_config.json's
 *    add_bos_token true puts bos first, false or absent does not (absent
 *    is UNSAID here: the family's default decides);
 *  - tokenizer.json with a TemplateProcessing post-processor (alone or in
 *    a Sequence): exactly what its "single" puts before the text, with
 *    each class tried (TokenizersBackend, GPT2Tokenizer, LlamaTokenizer on
 *    a SentencePiece-style file); add_bos_token in tokenizer_config.json
 *    changes nothing: from_pretrained drops it whenever a tokenizer.json is
 *    there (the same line is in 5.0.0's tokenization_utils_base.py, read,
 *    not run);
 *  - tokenizer.json with a ByteLevel or null post-processor: no bos, with
 *    or without add_bos_token, for the same classes.
 * So the template decides when there is one.  Without one, an explicit
 * add_bos_token still decides here (true: ADD, false: NONE), as
 * transformers 4.57.6's LlamaTokenizerFast does (seen the same way; it
 * adds bos by add_bos_token, default true, template or not, while its
 * other classes follow the template); 5.25 would add none for true.
 * Absent or null: UNSAID.  add_bos_token true with no bos token: NONE
 * (5.25's GPT2Tokenizer adds nothing then either).  A template that puts
 * anything but the folder's bos before the text is refused (tokjson.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

enum { ROLE_BOS, ROLE_EOS, ROLE_UNK, ROLE_SEP, ROLE_PAD, ROLE_CLS, ROLE_MASK, N_ROLES };

static const char *const role_keys[N_ROLES] = {
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

static const char default_special[] = "<|endoftext|>";
static const char *const gpt2_defaults[3] = { default_special, default_special, default_special };

int fg_tok_queue_added(struct fg_tokenizer *t, int32_t id, unsigned flags)
{
	if (t->n_pend == t->pend_cap) {
		size_t cap = t->pend_cap ? t->pend_cap * 2 : 16;
		struct fg_tok_pending *v = realloc(t->pend, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->pend = v;
		t->pend_cap = cap;
	}
	t->pend[t->n_pend++] = (struct fg_tok_pending){ id, flags };
	return 0;
}

/* A side file's token is special and matched as written (the GPT-2 files
 * apply no flags). */
#define SIDE_FLAGS FG_ADDED_SPECIAL

/* Give id the text s: its decoded bytes are the text itself (added tokens
 * are not byte-level encoded). */
int fg_tok_set_token(struct fg_tokenizer *t, int32_t id, const char *s, size_t len)
{
	int rc = fg_tok_grow_ids(t, (size_t)id + 1);

	if (!rc)
		rc = fg_tok_blob_add(t, s, len, &t->text[id].off);
	if (rc)
		return rc;
	t->text[id].len = (uint32_t)len;
	t->bytes[id] = t->text[id];
	return fg_strmap_insert(t, id);
}

int fg_tok_check_content(const char *path, const char *s, size_t len)
{
	char q[96];

	if (len == 0 || len > FG_TOK_MAX_TOKEN_BYTES || memchr(s, '\0', len)) {
		FG_ERR("%s: token \"%s\": a token must have 1 to %u bytes and no NUL", path,
		       fg_tok_quote(s, len, q, sizeof(q)), FG_TOK_MAX_TOKEN_BYTES);
		return -EINVAL;
	}
	return 0;
}

/* A token with an id fixed by the files. */
static int add_explicit(struct fg_tokenizer *t, const char *path, json_int_t id, const char *s,
			size_t len, unsigned flags)
{
	char q[96], q2[96];
	int32_t have;
	int rc = fg_tok_check_content(path, s, len);

	if (rc)
		return rc;
	fg_tok_quote(s, len, q, sizeof(q));
	if (id < 0 || (uint64_t)id >= t->n_vocab + FG_TOK_MAX_ADDED) {
		FG_ERR("%s: token \"%s\": id %lld is out of range 0..%zu", path, q, (long long)id,
		       t->n_vocab + FG_TOK_MAX_ADDED - 1);
		return -EINVAL;
	}
	have = fg_strmap_find(t, s, len);
	if ((size_t)id < t->n_ids && t->text[id].len != UINT32_MAX) {
		if (have == id)
			return fg_tok_queue_added(t, (int32_t)id, flags);
		FG_ERR("%s: token \"%s\" has id %lld, which is already the id of \"%s\"", path, q,
		       (long long)id, fg_tok_quote(t->blob + t->text[id].off, t->text[id].len,
						    q2, sizeof(q2)));
		return -EINVAL;
	}
	if (have >= 0) {
		FG_ERR("%s: token \"%s\" has id %lld but already has id %d", path, q,
		       (long long)id, have);
		return -EINVAL;
	}
	rc = fg_tok_set_token(t, (int32_t)id, s, len);
	return rc ? rc : fg_tok_queue_added(t, (int32_t)id, flags);
}

/* A token named by content only: its id, or a new one. */
static int add_named(struct fg_tokenizer *t, const char *path, const char *s, size_t len,
		     int32_t *idp)
{
	int32_t id = fg_strmap_find(t, s, len);
	int rc;

	if (id < 0) {
		rc = fg_tok_check_content(path, s, len);
		if (rc)
			return rc;
		if (t->n_ids >= t->n_vocab + FG_TOK_MAX_ADDED) {
			FG_ERR("%s: more than %u added tokens", path, FG_TOK_MAX_ADDED);
			return -EINVAL;
		}
		id = (int32_t)t->n_ids;
		rc = fg_tok_set_token(t, id, s, len);
		if (rc)
			return rc;
	}
	if (idp)
		*idp = id;
	return fg_tok_queue_added(t, id, SIDE_FLAGS);
}

/* A special-token value: "text", {"content": "text", ...} or null.
 * Returns 1 (setting *s and *len), 0 for null, or -EINVAL. */
static int token_value(const char *path, const char *key, json_t *v, const char **s, size_t *len)
{
	json_t *c = v;

	if (json_is_null(v))
		return 0;
	if (json_is_object(v))
		c = json_object_get(v, "content");
	if (!json_is_string(c)) {
		FG_ERR("%s: \"%s\" must be a string, an object with a string \"content\", or null",
		       path, key);
		return -EINVAL;
	}
	*s = json_string_value(c);
	*len = json_string_length(c);
	return 1;
}

/* Load dir/name when it exists: *root stays NULL when it does not. */
static int load_json(const char *dir, const char *name, size_t flags, char *path, size_t pathsz,
		     json_t **root)
{
	int rc;

	*root = NULL;
	if ((size_t)snprintf(path, pathsz, "%s/%s", dir, name) >= pathsz) {
		FG_ERR("%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	rc = fg_tok_read_json(path, true, flags, "", root);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	if (!json_is_object(*root)) {
		FG_ERR("%s: the top level is not a JSON object", path);
		json_decref(*root);
		*root = NULL;
		return -EINVAL;
	}
	return 0;
}

/* The flags of an added_tokens_decoder entry (tokenizer.json form only). */
static unsigned entry_flags(const struct fg_tokenizer *t, json_t *ent)
{
	static const struct { const char *key; unsigned flag; } keys[] = {
		{ "lstrip", FG_ADDED_LSTRIP }, { "rstrip", FG_ADDED_RSTRIP },
		{ "single_word", FG_ADDED_SINGLE_WORD }, { "special", FG_ADDED_SPECIAL },
	};
	unsigned f = 0;
	json_t *nv;

	if (!t->pipe)
		return SIDE_FLAGS;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (json_is_true(json_object_get(ent, keys[i].key)))
			f |= keys[i].flag;
	/* transformers: normalized defaults to "not special". */
	nv = json_object_get(ent, "normalized");
	if (json_is_boolean(nv) ? json_is_true(nv) : !(f & FG_ADDED_SPECIAL))
		f |= FG_ADDED_NORMALIZED;
	return f;
}

int fg_tok_load_special(struct fg_tokenizer *t, const char *dir, const char *const defaults[3])
{
	char cfg_path[PATH_MAX], map_path[PATH_MAX], added_path[PATH_MAX];
	json_t *cfg = NULL, *map = NULL, *added = NULL, *v, *extra;
	int32_t role_id[N_ROLES];
	const char *key, *extra_path = NULL;
	int rc = 0;

	if (dir) {
		/* Integers as reals where none is needed: transformers writes
		 * model_max_length as 1000000000000000019884624838656. */
		rc = load_json(dir, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL, cfg_path,
			       sizeof(cfg_path), &cfg);
		if (!rc)
			rc = load_json(dir, "special_tokens_map.json", JSON_DECODE_INT_AS_REAL,
				       map_path, sizeof(map_path), &map);
		if (!rc)
			rc = load_json(dir, "added_tokens.json", 0, added_path, sizeof(added_path),
				       &added);
		if (rc)
			goto out;
	}

	/* Tokens with fixed ids first, so that named ones find them. */
	v = cfg ? json_object_get(cfg, "added_tokens_decoder") : NULL;
	if (v && !json_is_object(v)) {
		FG_ERR("%s: \"added_tokens_decoder\" must be an object {\"id\": {\"content\": ...}}",
		       cfg_path);
		rc = -EINVAL;
		goto out;
	}
	if (v && json_object_size(v) > FG_TOK_MAX_ADDED) {
		FG_ERR("%s: more than %u added tokens", cfg_path, FG_TOK_MAX_ADDED);
		rc = -EINVAL;
		goto out;
	}
	if (v) {
		json_t *ent;

		json_object_foreach(v, key, ent) {
			const char *s;
			char *end;
			size_t len;
			long long id;

			errno = 0;
			id = strtoll(key, &end, 10);
			if (!*key || *end || errno || *key == '-' || *key == '+' || *key == ' ') {
				FG_ERR("%s: added_tokens_decoder: key \"%.40s\" is not a token id",
				       cfg_path, key);
				rc = -EINVAL;
				goto out;
			}
			if (!json_is_object(ent) ||
			    !json_is_string(json_object_get(ent, "content"))) {
				FG_ERR("%s: added_tokens_decoder: \"%.40s\" must be an object "
				       "with a string \"content\"", cfg_path, key);
				rc = -EINVAL;
				goto out;
			}
			token_value(cfg_path, key, ent, &s, &len);
			rc = add_explicit(t, cfg_path, id, s, len, entry_flags(t, ent));
			if (rc)
				goto out;
		}
	}
	if (added && json_object_size(added) > FG_TOK_MAX_ADDED) {
		FG_ERR("%s: more than %u added tokens", added_path, FG_TOK_MAX_ADDED);
		rc = -EINVAL;
		goto out;
	}
	if (added) {
		json_object_foreach(added, key, v) {
			char q[96];

			if (!json_is_integer(v)) {
				FG_ERR("%s: key \"%s\": the id is not an integer", added_path,
				       fg_tok_quote(key, strlen(key), q, sizeof(q)));
				rc = -EINVAL;
				goto out;
			}
			rc = add_explicit(t, added_path, json_integer_value(v), key, strlen(key),
					  SIDE_FLAGS);
			if (rc)
				goto out;
		}
	}

	/* Roles: special_tokens_map.json wins over tokenizer_config.json. */
	if (!defaults)
		defaults = gpt2_defaults;
	for (int r = 0; r < N_ROLES; r++) {
		const char *path = NULL, *s = r <= ROLE_UNK ? defaults[r] : NULL;
		size_t len = s ? strlen(s) : 0;
		json_t *src = NULL;

		role_id[r] = -1;
		if (map && (src = json_object_get(map, role_keys[r])))
			path = map_path;
		else if (cfg && (src = json_object_get(cfg, role_keys[r])))
			path = cfg_path;
		if (src) {
			rc = token_value(path, role_keys[r], src, &s, &len);
			if (rc < 0)
				goto out;
			if (rc == 0)
				continue;
			rc = add_named(t, path, s, len, &role_id[r]);
			if (rc)
				goto out;
		} else if (s) {
			int32_t id = fg_strmap_find(t, s, len);

			/* A tokenizer.json matches only the tokens it lists as added. */
			if (id >= 0) {
				role_id[r] = id;
				rc = t->pipe ? 0 : fg_tok_queue_added(t, id, SIDE_FLAGS);
				if (rc)
					goto out;
			}
		}
	}
	extra = NULL;
	if (map && (extra = json_object_get(map, "additional_special_tokens")))
		extra_path = map_path;
	else if (cfg && (extra = json_object_get(cfg, "additional_special_tokens")))
		extra_path = cfg_path;
	if (extra && !json_is_null(extra)) {
		size_t i;

		if (!json_is_array(extra) || json_array_size(extra) > FG_TOK_MAX_ADDED) {
			FG_ERR("%s: \"additional_special_tokens\" must be an array of at most %u "
			       "tokens", extra_path, FG_TOK_MAX_ADDED);
			rc = -EINVAL;
			goto out;
		}
		json_array_foreach(extra, i, v) {
			const char *s;
			size_t len;

			rc = token_value(extra_path, "additional_special_tokens", v, &s, &len);
			if (rc < 0)
				goto out;
			if (rc == 0)
				continue;
			rc = add_named(t, extra_path, s, len, NULL);
			if (rc)
				goto out;
		}
	}
	v = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
	if (v && !json_is_boolean(v) && !json_is_null(v)) {
		FG_ERR("%s: \"add_bos_token\" must be true or false (or absent, to leave it to "
		       "the model family)", cfg_path);
		rc = -EINVAL;
		goto out;
	}
	t->bos = role_id[ROLE_BOS];
	/* Absent or null: unsaid.  A tokenizer.json template overrides this. */
	t->bos_rule = FG_TOK_BOS_UNSAID;
	if (v && json_is_boolean(v))
		t->bos_rule = json_is_true(v) && t->bos >= 0 ? FG_TOK_BOS_ADD : FG_TOK_BOS_NONE;
	t->eos = role_id[ROLE_EOS];
	t->unk = role_id[ROLE_UNK];
	t->pad = role_id[ROLE_PAD];
out:
	if (rc == -ENOMEM)
		FG_ERR("%s: out of memory loading special tokens", dir ? dir : "tokenizer");
	json_decref(cfg);
	json_decref(map);
	json_decref(added);
	return rc;
}

static int cmp_special(const void *a, const void *b)
{
	const struct fg_tok_special *x = a, *y = b;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;	/* longest first */
	return x->id < y->id ? -1 : x->id > y->id;
}

static void index_matcher(struct fg_tok_matcher *m)
{
	qsort(m->v, m->n, sizeof(*m->v), cmp_special);
	memset(m->start, 0, sizeof(m->start));
	for (size_t i = 0; i < m->n; i++)
		m->start[m->v[i].first + 1]++;
	for (int c = 0; c < 256; c++)
		m->start[c + 1] += m->start[c];
}

int fg_tok_build_added(struct fg_tokenizer *t, const char *path)
{
	uint8_t *seen = calloc(t->n_ids ? t->n_ids : 1, 1);
	struct fg_tok_matcher *raw = &t->added, *norm = &t->added_norm;
	int rc = 0;

	raw->v = malloc((t->n_pend ? t->n_pend : 1) * sizeof(*raw->v));
	norm->v = malloc((t->n_pend ? t->n_pend : 1) * sizeof(*norm->v));
	if (!seen || !raw->v || !norm->v) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t->n_pend; i++) {
		int32_t id = t->pend[i].id;
		unsigned f = t->pend[i].flags;
		struct fg_tok_str c = t->text[id];
		struct fg_tok_matcher *m = raw;

		if (seen[id])
			continue;
		seen[id] = 1;
		if (!t->pipe) {
			/* GPT-2 files: decoding gives a special token's own text. */
			t->bytes[id] = t->text[id];
			f = 0;
		}
		if (t->pipe && (f & FG_ADDED_NORMALIZED) && t->pipe->n_norm) {
			/* Matched in normalized text, so its content is normalized too. */
			char *ns;
			size_t nn;

			rc = fg_tok_normalize(t, t->blob + c.off, c.len, &ns, &nn);
			if (!rc && nn > FG_TOK_MAX_TOKEN_BYTES) {
				char q[96];

				FG_ERR("%s: added token %d \"%s\" is %zu bytes long once normalized; "
				       "at most %u are supported: shorten it or mark it "
				       "\"normalized\": false", path ? path : "tokenizer", id,
				       fg_tok_quote(t->blob + c.off, c.len, q, sizeof(q)), nn,
				       FG_TOK_MAX_TOKEN_BYTES);
				rc = -EINVAL;
			}
			if (!rc && nn)
				rc = fg_tok_blob_add(t, ns, nn, &c.off);
			free(ns);
			if (rc)
				goto out;
			if (!nn)
				continue;
			c.len = (uint32_t)nn;
		}
		if (f & FG_ADDED_NORMALIZED)
			m = norm;
		m->v[m->n++] = (struct fg_tok_special){
			.off = c.off,
			.len = c.len,
			.id = id,
			.first = (unsigned char)t->blob[c.off],
			.flags = (uint8_t)f,
		};
	}
	index_matcher(raw);
	index_matcher(norm);
out:
	free(seen);
	free(t->pend);
	t->pend = NULL;
	t->n_pend = t->pend_cap = 0;
	if (rc == -ENOMEM)
		FG_ERR("tokenizer: out of memory building the added-token tables");
	return rc;
}

int fg_tokenizer_load_dir(const char *dir, struct fg_tokenizer **out)
{
	char vocab[PATH_MAX], merges[PATH_MAX];
	struct stat st;
	int rc;

	if (!dir || !out)
		return -EINVAL;
	*out = NULL;
	if ((size_t)snprintf(vocab, sizeof(vocab), "%s/tokenizer.json", dir) >= sizeof(vocab)) {
		FG_ERR("%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	/* Whatever stands there (a FIFO, a folder) is refused by the loader. */
	if (lstat(vocab, &st) == 0)
		return fg_tok_load_json(dir, out);
	if ((size_t)snprintf(vocab, sizeof(vocab), "%s/vocab.json", dir) >= sizeof(vocab) ||
	    (size_t)snprintf(merges, sizeof(merges), "%s/merges.txt", dir) >= sizeof(merges)) {
		FG_ERR("%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	rc = fg_tok_load_bpe(vocab, merges, out);
	if (rc)
		return rc;
	rc = fg_tok_load_special(*out, dir, NULL);
	if (!rc)
		rc = fg_tok_build_added(*out, NULL);
	if (rc) {
		fg_tokenizer_free(*out);
		*out = NULL;
	}
	return rc;
}
