/* cli/serve_tokenize.c - serve's tokenizer endpoints (see serve_tokenize.h).
 *
 * lm-evaluation-harness's RemoteTokenizer encodes with add_special_tokens
 * false and takes eos_token_id as the first id of encoding eos_token, so a
 * special token's text must encode back to its one id: the tokenizer
 * matches special tokens whole, and /tokenizer_info names them by that
 * text.  A text is tokenized however long it is (the harness cuts long
 * documents into windows itself); /detokenize takes only ids the model has. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/completion.h"
#include "cli/serve_tokenize.h"

static char *fail_at(const char **param, const char *field, const char *msg)
{
	*param = field;
	return strdup(msg);
}

static char *parse_ids(json_t *v, struct fg_serve_tok *t, const char **param)
{
	size_t n = json_array_size(v);

	if (!json_is_array(v))
		return fail_at(param, "tokens", "\"tokens\" must be an array of token ids");
	t->ids = malloc((n ? n : 1) * sizeof(*t->ids));
	if (!t->ids)
		return strdup("out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(v, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > INT32_MAX)
			return fail_at(param, "tokens", "\"tokens\": token ids must be non-negative integers");
		t->ids[i] = (int32_t)json_integer_value(x);
	}
	t->n = n;
	return NULL;
}

char *fg_serve_tok_parse(json_t *body, int detokenize, struct fg_serve_tok *t,
			 const char **param)
{
	const char *key;
	json_t *v, *text = NULL, *ids = NULL;

	memset(t, 0, sizeof(*t));
	t->detokenize = detokenize;
	t->add_special = 1; /* vLLM's default */
	*param = NULL;
	if (!json_is_object(body))
		return strdup("the request body must be a JSON object");
	json_object_foreach(body, key, v) {
		if (!strcmp(key, "model")) {
			if (!json_is_string(v) && !json_is_null(v))
				return fail_at(param, key, "\"model\" must be a string");
			t->model = json_string_value(v);
		} else if (!detokenize && !strcmp(key, "prompt")) {
			text = v;
		} else if (!detokenize && !strcmp(key, "add_special_tokens")) {
			if (!json_is_boolean(v) && !json_is_null(v))
				return fail_at(param, key, "\"add_special_tokens\" must be true or false");
			t->add_special = !json_is_false(v);
		} else if (!detokenize && !strcmp(key, "return_token_strs")) {
			if (json_is_true(v))
				return fail_at(param, key, "\"return_token_strs\" true is not implemented: the tokens' texts are what /detokenize gives for each id");
			if (!json_is_false(v) && !json_is_null(v))
				return fail_at(param, key, "\"return_token_strs\" must be true or false");
		} else if (!detokenize && !strcmp(key, "messages")) {
			return fail_at(param, key, "\"messages\" (a chat) is not supported: fgcore serves completions only; tokenize a \"prompt\" text");
		} else if (detokenize && !strcmp(key, "tokens")) {
			ids = v;
		} else {
			char buf[300];
			snprintf(buf, sizeof(buf), "unsupported field \"%.60s\": known fields are %s", key,
				 detokenize ? "model, tokens"
					    : "model, prompt, add_special_tokens, return_token_strs (false)");
			*param = key;
			return strdup(buf);
		}
	}
	if (detokenize) {
		if (!ids)
			return fail_at(param, "tokens", "\"tokens\" is required: the token ids to decode");
		return parse_ids(ids, t, param);
	}
	if (!text)
		return fail_at(param, "prompt", "\"prompt\" is required: the text to tokenize");
	if (!json_is_string(text))
		return fail_at(param, "prompt", "\"prompt\" must be a string");
	t->prompt = json_string_value(text);
	return NULL;
}

void fg_serve_tok_free(struct fg_serve_tok *t)
{
	free(t->ids);
	memset(t, 0, sizeof(*t));
}

/* The engine's last error as the answer's message: 404 when the model has
 * no tokenizer, 400 for a text or ids the tokenizer refuses (a text that
 * would cost it too much), 500 out of memory. */
static json_t *engine_error(struct fg_engine *e, int rc, int *status, char **err)
{
	struct fg_model_info mi;

	*status = rc == -ENOMEM ? 500
		  : fg_engine_info(e, &mi) == 0 && mi.has_tokenizer ? 400 : 404;
	*err = strdup(fg_last_error_text());
	return NULL;
}

static json_t *id_array(const int32_t *ids, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer(ids[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *fg_serve_tok_answer(struct fg_engine *e, const struct fg_serve_tok *t, int *status,
			    char **err)
{
	struct fg_model_info mi;
	int32_t *ids = NULL;
	size_t n = 0;
	char *text = NULL;
	json_t *o;
	int rc;

	*status = 200;
	*err = NULL;
	fg_engine_info(e, &mi);
	if (t->detokenize) {
		for (size_t i = 0; i < t->n; i++)
			if (t->ids[i] >= mi.vocab) {
				char buf[200];
				snprintf(buf, sizeof(buf), "\"tokens\": token id %d is not in the model's vocabulary [0, %lld)",
					 t->ids[i], (long long)mi.vocab);
				*status = 400;
				*err = strdup(buf);
				return NULL;
			}
		if ((rc = fg_detokenize(e, t->ids, t->n, &text)))
			return engine_error(e, rc, status, err);
		o = json_pack("{s:o}", "prompt", fg_json_text(text));
		free(text);
	} else if (!t->prompt) {
		*status = 500; /* fg_serve_tok_parse ran out of memory */
		return NULL;
	} else {
		rc = t->add_special ? fg_tokenize_prompt(e, t->prompt, &ids, &n)
				    : fg_tokenize(e, t->prompt, &ids, &n);
		if (rc)
			return engine_error(e, rc, status, err);
		json_t *a = id_array(ids, n);
		free(ids);
		o = a ? json_pack("{s:I, s:I, s:o, s:n}", "count", (json_int_t)n, "max_model_len",
				  (json_int_t)mi.max_positions, "tokens", a, "token_strs")
		      : NULL;
	}
	if (!o)
		*status = 500;
	return o;
}

/* A special token's text (a JSON string), or null for none. */
static json_t *token_text(struct fg_engine *e, int32_t id)
{
	char *text = NULL;
	json_t *s;

	if (id < 0)
		return json_null();
	if (fg_detokenize(e, &id, 1, &text))
		return NULL;
	s = fg_json_text(text);
	free(text);
	return s;
}

static json_t *token_id(int32_t id)
{
	return id < 0 ? json_null() : json_integer(id);
}

json_t *fg_serve_tokenizer_info(struct fg_engine *e, int *status, char **err)
{
	struct fg_special_tokens sp;
	struct fg_model_info mi;
	int rc;

	*status = 200;
	*err = NULL;
	fg_engine_info(e, &mi);
	if ((rc = fg_engine_special_tokens(e, &sp)))
		return engine_error(e, rc, status, err);
	/* tokenizer_class names whose tokenizer this is: not Hugging Face's
	 * class; add_bos_token says what /tokenize's add_special_tokens does. */
	json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:b, s:I}",
			      "tokenizer_class", "fgcore",
			      "bos_token", token_text(e, sp.bos), "eos_token", token_text(e, sp.eos),
			      "unk_token", token_text(e, sp.unk), "pad_token", token_text(e, sp.pad),
			      "bos_token_id", token_id(sp.bos), "eos_token_id", token_id(sp.eos),
			      "unk_token_id", token_id(sp.unk), "pad_token_id", token_id(sp.pad),
			      "add_bos_token", mi.text_bos >= 0, "add_eos_token", 0,
			      "model_max_length", (json_int_t)mi.max_positions);
	if (!o)
		*status = 500;
	return o;
}
