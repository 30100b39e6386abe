/* cli/completion.c - OpenAI's completions semantics (see completion.h).
 *
 * Accepted as OpenAI accepts them: model, prompt (a string, an array of
 * strings, an array of token ids, an array of such arrays), n (choices per
 * prompt), max_tokens, temperature, top_p, stop, seed, echo, logprobs (null
 * or 0..20), stream, stream_options, user, and the harmless settings
 * presence/frequency_penalty = 0, logit_bias = {} or null, suffix = null,
 * best_of = n, or more where every candidate would be the same (greedy, or
 * nothing generated).  Anything else that would change the result is
 * refused by name.  fgcore's own: top_k, ignore_eos. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/completion.h"
#include "core/util/utf8.h"

#define MAX_PROMPTS 4096  /* choices: prompts x n */
#define MAX_STOP 64
#define MAX_N 128         /* OpenAI's limits */
#define MAX_BEST_OF 20

static char *errorf(const char *fmt, const char *a)
{
	char buf[512];
	snprintf(buf, sizeof(buf), fmt, a);
	return strdup(buf);
}

static int number(json_t *v, double lo, double hi, double *out)
{
	if (!json_is_number(v))
		return -1;
	*out = json_number_value(v);
	return *out >= lo && *out <= hi ? 0 : -1;
}

/* An array of token ids into a malloc'd int32 array. */
static char *token_ids(json_t *v, const char *field, int32_t **out, size_t *n)
{
	size_t len = json_array_size(v);

	if (!len)
		return errorf("\"%s\" holds an empty array of token ids: give at least one", field);
	*out = malloc(len * sizeof(int32_t));
	if (!*out)
		return strdup("out of memory");
	for (size_t i = 0; i < len; i++) {
		json_t *x = json_array_get(v, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
			return errorf("\"%s\": token ids must be non-negative integers", field);
		(*out)[i] = (int32_t)json_integer_value(x);
	}
	*n = len;
	return NULL;
}

/* The prompt's shape: how many prompts, and each one's text or ids; n_per
 * choices of each, copy k sampling with seed + k (the same seed would give
 * the same sample n times). */
static char *parse_prompt(json_t *v, const char *field, const struct fg_request *defaults,
			  size_t n_per, struct fg_completion *c)
{
	size_t n = 1;
	int texts = json_is_string(v), nested = 0;

	if (json_is_array(v)) {
		json_t *first = json_array_get(v, 0);
		n = json_array_size(v);
		if (!n)
			return errorf("\"%s\" is an empty array: give a string, strings, or token ids", field);
		texts = json_is_string(first);
		nested = json_is_array(first);
		if (!texts && !nested)
			n = 1; /* one prompt of token ids */
		if (!texts && !nested && !json_is_integer(first))
			return errorf("\"%s\" must be a string, an array of strings, an array of token ids or an array of such arrays", field);
	} else if (!texts) {
		return errorf("\"%s\" must be a string, an array of strings, an array of token ids or an array of such arrays", field);
	}
	if (n > MAX_PROMPTS / n_per)
		return errorf("\"%s\" holds more than 4096 prompts (counting each \"n\" times): split the request", field);
	c->reqs = calloc(n * n_per, sizeof(*c->reqs));
	c->ids = calloc(n, sizeof(*c->ids));
	if (!c->reqs || !c->ids)
		return strdup("out of memory");
	c->n = n * n_per;
	c->n_prompts = n;
	c->n_per = n_per;
	for (size_t i = 0; i < n; i++) {
		struct fg_request *r = &c->reqs[i * n_per];
		json_t *p = json_is_array(v) && (texts || nested) ? json_array_get(v, i) : v;
		char *e;

		*r = *defaults;
		if (texts) {
			if (!json_is_string(p))
				return errorf("\"%s\": every prompt of an array of strings must be a string", field);
			r->prompt = json_string_value(p);
		} else {
			if (!json_is_array(p))
				return errorf("\"%s\": every prompt of an array of token-id arrays must be an array", field);
			if ((e = token_ids(p, field, &c->ids[i], &r->n_prompt_ids)))
				return e;
			r->prompt_ids = c->ids[i];
		}
		for (size_t k = 1; k < n_per; k++) {
			r[k] = *r;
			r[k].seed = r->seed + k;
		}
	}
	return NULL;
}

static char *parse_stop(json_t *v, struct fg_completion *c)
{
	size_t n = json_is_string(v) ? 1 : json_array_size(v);

	if (json_is_null(v))
		return NULL;
	if (!json_is_string(v) && !json_is_array(v))
		return strdup("\"stop\" must be a string or an array of strings");
	if (n > MAX_STOP)
		return strdup("\"stop\" has more than 64 strings");
	c->stop = calloc(n ? n : 1, sizeof(char *));
	if (!c->stop)
		return strdup("out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_is_string(v) ? v : json_array_get(v, i);
		if (!json_is_string(s))
			return strdup("\"stop\" must be a string or an array of strings");
		c->stop[i] = json_string_value(s);
	}
	c->n_stop = n;
	return NULL;
}

/* A field that must keep its default (OpenAI's harmless settings). */
static int is_default(const char *key, json_t *v)
{
	if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty"))
		return json_is_null(v) || (json_is_number(v) && json_number_value(v) == 0);
	if (!strcmp(key, "logit_bias"))
		return json_is_null(v) || (json_is_object(v) && !json_object_size(v));
	if (!strcmp(key, "suffix"))
		return json_is_null(v) || (json_is_string(v) && !*json_string_value(v));
	return 0;
}

static const char *const harmless[] = { "presence_penalty", "frequency_penalty", "logit_bias",
					"suffix" };

/* best_of candidates, of which the n most likely are returned: the same as
 * n alone when every candidate is the same (greedy, or nothing generated). */
static char *check_best_of(int best_of, size_t n_per, const struct fg_request *d)
{
	char buf[400];

	if (best_of < 0 || (size_t)best_of == n_per)
		return NULL;
	if ((size_t)best_of < n_per)
		snprintf(buf, sizeof(buf), "\"best_of\" (%d) must be at least \"n\" (%zu)", best_of, n_per);
	else if (d->temperature > 0 && d->max_new_tokens > 0)
		snprintf(buf, sizeof(buf), "\"best_of\" (%d) greater than \"n\" (%zu) with sampling (temperature %g) is not implemented: it picks the most likely of several samples; with temperature 0 or max_tokens 0, where every candidate is the same, it is accepted",
			 best_of, n_per, (double)d->temperature);
	else
		return NULL;
	return strdup(buf);
}

char *fg_completion_parse(json_t *body, const struct fg_request *defaults, int legacy,
			  struct fg_completion *c, const char **param)
{
	json_t *prompt = NULL, *v;
	const char *key, *pfield = "prompt";
	struct fg_request d = *defaults;
	size_t n_per = 1;
	int best_of = -1;
	double x;
	char *e;

	memset(c, 0, sizeof(*c));
	c->logprobs = -1;
	*param = NULL;
	if (!json_is_object(body))
		return strdup("the request body must be a JSON object");
	json_object_foreach(body, key, v) {
		*param = key;
		if (!strcmp(key, "prompt") || (legacy && !strcmp(key, "prompt_token_ids"))) {
			if (prompt)
				return strdup("give exactly one of \"prompt\" and \"prompt_token_ids\"");
			prompt = v;
			pfield = key;
		} else if (!strcmp(key, "model")) {
			if (!json_is_string(v) && !json_is_null(v))
				return strdup("\"model\" must be a string");
			c->model = json_string_value(v);
		} else if (!strcmp(key, "max_tokens")) {
			if (json_is_null(v))
				continue;
			if (!json_is_integer(v) || number(v, 0, 1048576, &x))
				return strdup("\"max_tokens\" must be an integer in [0, 1048576]");
			d.max_new_tokens = (int)x;
		} else if (!strcmp(key, "temperature")) {
			if (json_is_null(v))
				continue;
			if (number(v, 0, 100, &x))
				return strdup("\"temperature\" must be a number in [0, 100]");
			d.temperature = (float)x;
		} else if (!strcmp(key, "top_p")) {
			if (json_is_null(v))
				continue;
			if (number(v, 0, 1, &x))
				return strdup("\"top_p\" must be a number in [0, 1]");
			d.top_p = (float)x;
		} else if (!strcmp(key, "top_k")) {
			/* -1 means off, as in vLLM */
			if (!json_is_integer(v) || number(v, -1, 1000000, &x))
				return strdup("\"top_k\" must be an integer in [-1, 1000000]");
			d.top_k = x < 0 ? 0 : (int)x;
		} else if (!strcmp(key, "seed")) {
			if (json_is_null(v))
				continue;
			if (!json_is_integer(v))
				return strdup("\"seed\" must be an integer");
			d.seed = (uint64_t)json_integer_value(v);
		} else if (!strcmp(key, "stop")) {
			if ((e = parse_stop(v, c)))
				return e;
		} else if (!strcmp(key, "echo")) {
			if (!json_is_boolean(v))
				return strdup("\"echo\" must be true or false");
			c->echo = json_is_true(v);
		} else if (!strcmp(key, "logprobs")) {
			if (json_is_null(v))
				continue;
			if (!json_is_integer(v) || number(v, 0, FG_TOP_LOGPROBS_MAX, &x))
				return strdup("\"logprobs\" must be null or an integer in [0, 20]");
			c->logprobs = (int)x;
		} else if (!strcmp(key, "stream")) {
			if (!json_is_boolean(v) && !json_is_null(v))
				return strdup("\"stream\" must be true or false");
			c->stream = json_is_true(v);
		} else if (!strcmp(key, "stream_options")) {
			json_t *u = json_object_get(v, "include_usage");
			if (json_is_null(v))
				continue;
			if (!json_is_object(v) || json_object_size(v) != (u ? 1u : 0u) ||
			    (u && !json_is_boolean(u)))
				return strdup("\"stream_options\" takes only {\"include_usage\": true|false}");
			c->stream_usage = json_is_true(u);
		} else if (!strcmp(key, "ignore_eos")) {
			if (!json_is_boolean(v))
				return strdup("\"ignore_eos\" must be true or false");
			c->ignore_eos = json_is_true(v);
		} else if (!strcmp(key, "user")) {
			if (!json_is_string(v) && !json_is_null(v))
				return strdup("\"user\" must be a string");
		} else if (!strcmp(key, "n")) {
			if (json_is_null(v))
				continue;
			if (!json_is_integer(v) || number(v, 1, MAX_N, &x))
				return strdup("\"n\" must be null or an integer in [1, 128]");
			n_per = (size_t)x;
		} else if (!strcmp(key, "best_of")) {
			if (json_is_null(v))
				continue;
			if (!json_is_integer(v) || number(v, 1, MAX_BEST_OF, &x))
				return strdup("\"best_of\" must be null or an integer in [1, 20]");
			best_of = (int)x;
		} else if (!strcmp(key, "custom_id") && legacy) {
			/* run-batch's lines carry it beside the fields */
		} else {
			size_t h = 0;
			while (h < sizeof(harmless) / sizeof(*harmless) && strcmp(key, harmless[h]))
				h++;
			if (h < sizeof(harmless) / sizeof(*harmless)) {
				if (!is_default(key, v))
					return errorf("\"%s\" other than its default (penalties 0, empty logit_bias, no suffix) is not implemented", key);
				continue;
			}
			return errorf("unsupported field \"%s\": known fields are model, prompt, n, best_of, max_tokens, temperature, top_p, top_k, seed, stop, echo, logprobs, stream, stream_options, user, ignore_eos (and penalties, logit_bias, suffix at their defaults)", key);
		}
	}
	*param = pfield;
	if (!prompt)
		return strdup(legacy ? "give \"prompt\" (or \"prompt_token_ids\")" : "\"prompt\" is required");
	if (!strcmp(pfield, "prompt_token_ids") && !json_is_array(prompt))
		return strdup("\"prompt_token_ids\" must be an array of token ids");
	if (c->logprobs >= 0) {
		d.logprobs = 1;
		d.top_logprobs = c->logprobs;
		d.score_prompt = c->echo;
	}
	d.stop = c->stop;
	d.n_stop = c->n_stop;
	*param = "best_of";
	if ((e = check_best_of(best_of, n_per, &d)))
		return e;
	*param = pfield;
	if ((e = parse_prompt(prompt, pfield, &d, n_per, c)))
		return e;
	*param = NULL;
	return NULL;
}

void fg_completion_bind(struct fg_completion *c, struct fg_engine *e)
{
	struct fg_model_info mi;

	fg_engine_info(e, &mi);
	c->eos = mi.eos_id;
	for (size_t i = 0; i < c->n && !c->ignore_eos && c->eos >= 0; i++) {
		c->reqs[i].stop_ids = &c->eos;
		c->reqs[i].n_stop_ids = 1;
	}
}

void fg_completion_free(struct fg_completion *c)
{
	for (size_t i = 0; c->ids && i < c->n_prompts; i++)
		free(c->ids[i]);
	free(c->ids);
	free(c->reqs);
	free(c->stop);
	memset(c, 0, sizeof(*c));
}

const char *fg_completion_error(const struct fg_completion *c, const struct fg_result *res)
{
	for (size_t i = 0; i < c->n; i++)
		if (res[i].finish_reason == FG_FINISH_ERROR)
			return res[i].error ? res[i].error : "out of memory";
	return NULL;
}

const char *fg_completion_finish(enum fg_finish_reason r)
{
	return r == FG_FINISH_STOP ? "stop" : "length";
}

json_t *fg_json_text(const char *s)
{
	json_t *j;
	char *fixed;

	if (!s)
		s = "out of memory";
	if ((j = json_string(s)))
		return j;
	fixed = fg_utf8_repair(s, strlen(s));
	j = fixed ? json_string(fixed) : NULL;
	free(fixed);
	return j;
}

static char *decode(struct fg_engine *e, const int32_t *ids, size_t n)
{
	char *t = NULL;
	struct fg_model_info mi;

	fg_engine_info(e, &mi);
	if (!mi.has_tokenizer)
		return strdup("");
	return fg_detokenize(e, ids, n, &t) ? NULL : t;
}

char *fg_completion_prompt_text(struct fg_engine *e, const struct fg_completion *c, size_t i)
{
	const struct fg_request *r = &c->reqs[i];

	return r->prompt ? strdup(r->prompt) : decode(e, r->prompt_ids, r->n_prompt_ids);
}

/* The text echoed for choice i, with `skip` the tokens at the front of its
 * result's prompt that the engine added (a text's bos). */
static char *prompt_text(struct fg_engine *e, const struct fg_completion *c, size_t i,
			 const struct fg_result *r, size_t *skip)
{
	struct fg_model_info mi;

	fg_engine_info(e, &mi);
	*skip = c->reqs[i].prompt && mi.text_bos >= 0 && r->n_prompt_tokens &&
		r->prompt_ids[0] == mi.text_bos;
	return fg_completion_prompt_text(e, c, i);
}

/* A log-probability as JSON: -inf (an impossible token) as -9999, which
 * JSON can hold; NaN (nothing to score) as null. */
static json_t *lp_value(float lp)
{
	return isnan(lp) ? json_null() : json_real(isinf(lp) ? -9999.0 : lp);
}

/* {id: logprob} of a position: the top entries, then the chosen token if it
 * is not among them (OpenAI: up to logprobs + 1 entries).  The chosen
 * token's entry holds its token_logprobs value itself, so that a client
 * comparing the two (lm-eval's is_greedy: token == max of the entries)
 * finds them equal whatever path computed each. */
static json_t *top_dict(struct fg_engine *e, const struct fg_logprob *top, int k, int32_t chosen,
			float lp)
{
	json_t *d = json_object();
	int have = 0;

	for (int i = 0; d && i <= k; i++) {
		int32_t id = i < k ? top[i].id : chosen;
		float v = i < k && id != chosen ? top[i].logprob : lp;
		char *t;

		if (id < 0 || (i == k && have))
			continue;
		have |= id == chosen;
		t = decode(e, &id, 1);
		json_t *key = t ? fg_json_text(t) : NULL;
		/* Two ids with one text: the more likely (first) keeps the key. */
		if (!key || (!json_object_get(d, json_string_value(key)) &&
			     json_object_set_new(d, json_string_value(key), lp_value(v)))) {
			json_decref(key);
			free(t);
			json_decref(d);
			return NULL;
		}
		json_decref(key);
		free(t);
	}
	return d;
}

static int append(json_t *a, json_t *v)
{
	return v ? json_array_append_new(a, v) : -1;
}

/* offs[t]: the characters ids[0..t) decode to, t in [0, n] (none without a
 * tokenizer: decode gives ""); NULL: out of memory. */
static size_t *offsets(struct fg_engine *e, const int32_t *ids, size_t n)
{
	struct fg_model_info mi;
	size_t *offs = calloc(n + 1, sizeof(*offs));

	fg_engine_info(e, &mi);
	if (offs && mi.has_tokenizer && fg_detokenize_offsets(e, ids, n, offs)) {
		free(offs);
		return NULL;
	}
	return offs;
}

json_t *fg_completion_logprobs(struct fg_engine *e, const struct fg_completion *c, size_t i,
			       const struct fg_result *r)
{
	json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
	char *ptext = NULL;
	size_t skip = 0;
	long base = 0;
	int k = c->logprobs, ok = tokens && lps && tops && offs;

	if (c->logprobs < 0) {
		json_decref(tokens);
		json_decref(lps);
		json_decref(tops);
		json_decref(offs);
		return json_null();
	}
	if (ok && c->echo && r->prompt_logprobs) {
		ok = (ptext = prompt_text(e, c, i, r, &skip)) != NULL;
		/* offset: the characters the tokens before it decode to */
		size_t n = r->n_prompt_tokens, s = skip < n ? skip : n;
		size_t *at = ok ? offsets(e, r->prompt_ids + s, n - s) : NULL;
		ok = at != NULL;
		for (size_t t = 0; ok && t < n; t++) {
			char *tok = decode(e, &r->prompt_ids[t], 1);
			float lp = r->prompt_logprobs[t];
			ok = tok && !append(tokens, fg_json_text(tok)) && !append(lps, lp_value(lp)) &&
			     !append(offs, json_integer((json_int_t)(t > s ? at[t - s] : 0))) &&
			     !append(tops, t == 0 ? json_null()
						  : top_dict(e, r->prompt_top + t * (size_t)k, k,
							     r->prompt_ids[t], lp));
			free(tok);
		}
		free(at);
		base = ptext ? (long)fg_utf8_chars(ptext, strlen(ptext)) : 0;
	}
	size_t *at = ok ? offsets(e, r->token_ids, r->n_tokens) : NULL;
	ok = at != NULL;
	for (size_t t = 0; ok && t < r->n_tokens; t++) {
		char *tok = decode(e, &r->token_ids[t], 1);
		float lp = r->token_logprobs[t];
		ok = tok && !append(tokens, fg_json_text(tok)) && !append(lps, lp_value(lp)) &&
		     !append(offs, json_integer(base + (json_int_t)at[t])) &&
		     !append(tops, top_dict(e, r->token_top + t * (size_t)k, k, r->token_ids[t], lp));
		free(tok);
	}
	free(at);
	free(ptext);
	if (!ok) {
		json_decref(tokens);
		json_decref(lps);
		json_decref(tops);
		json_decref(offs);
		return NULL;
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
			 "top_logprobs", tops, "text_offset", offs);
}

json_t *fg_completion_choice(struct fg_engine *e, const struct fg_completion *c, size_t i,
			     const struct fg_result *r)
{
	char *text = NULL;
	size_t skip;

	if (c->echo) {
		char *p = prompt_text(e, c, i, r, &skip);
		size_t lp = p ? strlen(p) : 0, lc = strlen(r->text);
		text = p ? malloc(lp + lc + 1) : NULL;
		if (text) {
			memcpy(text, p, lp);
			memcpy(text + lp, r->text, lc + 1);
		}
		free(p);
		if (!text)
			return NULL;
	}
	json_t *lp = fg_completion_logprobs(e, c, i, r);
	json_t *o = lp ? json_pack("{s:o, s:I, s:o, s:s}", "text", fg_json_text(text ? text : r->text),
				   "index", (json_int_t)i, "logprobs", lp, "finish_reason",
				   fg_completion_finish(r->finish_reason))
		       : NULL;
	free(text);
	return o;
}

json_t *fg_completion_usage(const struct fg_completion *c, const struct fg_result *res)
{
	size_t per = c->n_per ? c->n_per : 1;
	json_int_t p = 0, g = 0;

	for (size_t i = 0; i < c->n; i++) {
		if (i % per == 0)
			p += (json_int_t)res[i].n_prompt_tokens;
		g += (json_int_t)res[i].n_tokens;
	}
	return json_pack("{s:I, s:I, s:I}", "prompt_tokens", p, "completion_tokens", g,
			 "total_tokens", p + g);
}

json_t *fg_completion_object(struct fg_engine *e, const struct fg_completion *c,
			     const struct fg_result *res, const char *id, const char *model,
			     long long created)
{
	json_t *choices = json_array();

	for (size_t i = 0; choices && i < c->n; i++)
		if (append(choices, fg_completion_choice(e, c, i, &res[i]))) {
			json_decref(choices);
			return NULL;
		}
	if (!choices)
		return NULL;
	return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "text_completion",
			 "created", (json_int_t)created, "model", model, "choices", choices, "usage",
			 fg_completion_usage(c, res));
}

/* ---- serve: streaming and errors ---- */

size_t fg_completion_stream_safe(const struct fg_completion *c, const char *text, size_t len)
{
	static const char repl[] = "\xEF\xBF\xBD"; /* U+FFFD */
	size_t safe = len;

	while (safe >= 3 && !memcmp(text + safe - 3, repl, 3))
		safe -= 3;
	for (size_t i = 0; i < c->n_stop; i++) {
		const char *s = c->stop[i], *hit;
		size_t sl = strlen(s);

		if (!sl)
			continue;
		if ((hit = memmem(text, len, s, sl))) {
			if ((size_t)(hit - text) < safe)
				safe = (size_t)(hit - text);
			continue;
		}
		/* the longest tail of the text that s begins with */
		for (size_t k = sl - 1 < len ? sl - 1 : len; k > 0; k--)
			if (!memcmp(text + len - k, s, k)) {
				if (len - k < safe)
					safe = len - k;
				break;
			}
	}
	return safe;
}

json_t *fg_completion_chunk(const char *id, const char *model, long long created, size_t i,
			    const char *text, const char *finish, json_t *logprobs)
{
	json_t *choice = json_pack("{s:o, s:I, s:o, s:s?}", "text", fg_json_text(text), "index",
				   (json_int_t)i, "logprobs", logprobs ? logprobs : json_null(),
				   "finish_reason", finish);

	return choice ? json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object",
				  "text_completion", "created", (json_int_t)created, "model", model,
				  "choices", choice)
		      : NULL;
}

/* Entries [from, to) of a logprobs object, as a new one. */
static json_t *lp_slice(json_t *lp, size_t from, size_t to)
{
	static const char *const keys[] = { "tokens", "token_logprobs", "top_logprobs",
					    "text_offset" };
	json_t *o = json_object();

	for (size_t k = 0; o && k < sizeof(keys) / sizeof(*keys); k++) {
		json_t *all = json_object_get(lp, keys[k]), *part = json_array();
		for (size_t t = from; part && t < to; t++)
			if (json_array_append(part, json_array_get(all, t))) {
				json_decref(part);
				part = NULL;
			}
		if (!part || json_object_set_new(o, keys[k], part)) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}

/* Where the text of the first t tokens ends in the choice's final text:
 * the bytes they share, cut back to a whole character (a token may end
 * inside one, decoded as U+FFFD until the next completes it). */
static size_t text_end(struct fg_engine *e, const struct fg_result *r, size_t t)
{
	char *p = decode(e, r->token_ids, t);
	size_t n = 0;

	if (!p)
		return 0;
	while (p[n] && p[n] == r->text[n])
		n++;
	while (n && ((unsigned char)r->text[n] & 0xC0) == 0x80)
		n--;
	free(p);
	return n;
}

static int add_chunk(json_t *chunks, const char *id, const char *model, long long created,
		     size_t i, const char *text, json_t *lp)
{
	return lp ? append(chunks, fg_completion_chunk(id, model, created, i, text, NULL, lp)) : -1;
}

json_t *fg_completion_logprob_chunks(struct fg_engine *e, const struct fg_completion *c,
				     size_t i, const struct fg_result *r, const char *id,
				     const char *model, long long created, json_t **empty)
{
	json_t *lp = fg_completion_logprobs(e, c, i, r), *chunks = json_array();
	size_t np = c->echo && r->prompt_logprobs ? r->n_prompt_tokens : 0;
	size_t len = strlen(r->text), sent = 0;
	int ok = lp && chunks;

	*empty = NULL;
	if (ok && c->echo) {
		size_t skip;
		char *p = prompt_text(e, c, i, r, &skip);
		ok = p && !add_chunk(chunks, id, model, created, i, p, lp_slice(lp, 0, np));
		free(p);
	}
	for (size_t t = 0; ok && t < r->n_tokens; t++) {
		size_t end = t + 1 == r->n_tokens ? len : text_end(e, r, t + 1);
		char *part;

		if (end < sent)
			end = sent;
		part = strndup(r->text + sent, end - sent);
		ok = part && !add_chunk(chunks, id, model, created, i, part,
					lp_slice(lp, np + t, np + t + 1));
		free(part);
		sent = end;
	}
	if (ok)
		ok = (*empty = lp_slice(lp, 0, 0)) != NULL;
	json_decref(lp);
	if (!ok) {
		json_decref(chunks);
		return NULL;
	}
	return chunks;
}

json_t *fg_completion_usage_chunk(const struct fg_completion *c, const struct fg_result *res,
				  const char *id, const char *model, long long created)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object", "text_completion",
			 "created", (json_int_t)created, "model", model, "choices", "usage",
			 fg_completion_usage(c, res));
}

json_t *fg_completion_error_body(const char *message, const char *type, const char *param,
				 const char *code)
{
	return json_pack("{s:{s:o, s:s, s:s?, s:s?}}", "error", "message", fg_json_text(message),
			 "type", type, "param", param, "code", code);
}
