/* cli/completion.h - OpenAI's legacy completions API (POST /v1/completions)
 * on fg_generate: a request body to engine requests, one per prompt (choice),
 * and their results to a completion object.  run-batch and serve share it, so
 * a body means the same in a batch file and over HTTP. */
#ifndef FG_CLI_COMPLETION_H
#define FG_CLI_COMPLETION_H

#include <stddef.h>

#include <jansson.h>

#include <fgcore/fgcore.h>

struct fg_completion {
	struct fg_request *reqs;  /* one per choice: choice i is prompt i / n_per's copy
				   * i % n_per */
	size_t n;
	size_t n_prompts;
	size_t n_per;             /* "n": choices per prompt */
	int echo;                 /* the prompt comes back before each completion */
	int logprobs;             /* -1: none (absent or null); else 0..FG_TOP_LOGPROBS_MAX */
	int stream;               /* serve: server-sent events */
	int stream_usage;         /* stream_options.include_usage */
	int ignore_eos;           /* generation goes on past the model's eos token */
	const char *model;        /* as the body names it (borrowed), or NULL */
	/* owned: per-prompt token ids (n_prompts), the stop strings */
	int32_t **ids;
	const char **stop;
	size_t n_stop;
	int32_t eos;              /* the stop id fg_completion_bind sets */
};

/* Parse a completions body over `defaults` (sampling, max_new_tokens).
 * Returns NULL, or a malloc'd error text with *param the field at fault (a
 * static name, or NULL); c is to be freed either way.  `legacy` also takes
 * run-batch's older fields: prompt_token_ids. */
char *fg_completion_parse(json_t *body, const struct fg_request *defaults, int legacy,
			  struct fg_completion *c, const char **param);
/* Stop at the engine's eos token unless ignore_eos. */
void fg_completion_bind(struct fg_completion *c, struct fg_engine *e);
void fg_completion_free(struct fg_completion *c);

/* The first refused choice's error text, or NULL when every choice ran. */
const char *fg_completion_error(const struct fg_completion *c, const struct fg_result *res);

/* One choice {text, index, logprobs, finish_reason} of result r (the
 * prompt's text in front when echoing: `prompt` as given, or NULL to decode
 * the prompt's ids); NULL: out of memory. */
json_t *fg_completion_choice(struct fg_engine *e, const struct fg_completion *c, size_t i,
			     const struct fg_result *r);
/* The logprobs object {tokens, token_logprobs, top_logprobs, text_offset} of
 * result r of choice i (json null when c->logprobs < 0). */
json_t *fg_completion_logprobs(struct fg_engine *e, const struct fg_completion *c, size_t i,
			       const struct fg_result *r);
/* {"prompt_tokens", "completion_tokens", "total_tokens"} over every choice
 * (a prompt's tokens counted once, whatever its "n"). */
json_t *fg_completion_usage(const struct fg_completion *c, const struct fg_result *res);
/* The whole completion object {id, object, created, model, choices, usage};
 * NULL: out of memory. */
json_t *fg_completion_object(struct fg_engine *e, const struct fg_completion *c,
			     const struct fg_result *res, const char *id, const char *model,
			     long long created);

/* "stop" or "length". */
const char *fg_completion_finish(enum fg_finish_reason r);
/* A JSON string of s, ill-formed UTF-8 replaced by U+FFFD (NULL: "out of memory"). */
json_t *fg_json_text(const char *s);

/* ---- serve: streaming and errors ---- */

/* The text echoed for choice i, before it runs: the prompt as given, or its
 * token ids decoded (malloc'd; NULL: out of memory or no tokenizer). */
char *fg_completion_prompt_text(struct fg_engine *e, const struct fg_completion *c, size_t i);
/* How many leading bytes of text (len bytes, decoded so far) a stream may
 * show while more tokens can follow: none of a stop string's match nor of a
 * tail that could begin one (the engine cuts the text there), nor a trailing
 * U+FFFD (a character a later token may complete). */
size_t fg_completion_stream_safe(const struct fg_completion *c, const char *text, size_t len);
/* One server-sent chunk of a streamed completion: OpenAI's text_completion
 * chunk {id, object, created, model, choices: [{text, index, logprobs,
 * finish_reason}]} for choice i (finish NULL: more follows; logprobs, taken
 * over: the entries of the chunk's tokens, or NULL for null); NULL: out of
 * memory. */
json_t *fg_completion_chunk(const char *id, const char *model, long long created, size_t i,
			    const char *text, const char *finish, json_t *logprobs);
/* The chunks (a JSON array, NULL: out of memory) that stream choice i with
 * its log-probabilities, made from its whole result: with echo the prompt
 * and its positions' entries first, then one chunk per completion token
 * holding that token's entries and the text it completes; their logprobs
 * put together are fg_completion_logprobs' object, their texts the choice's
 * text.  The closing chunk (finish_reason) is the caller's; `empty` gets
 * the empty logprobs object it carries. */
json_t *fg_completion_logprob_chunks(struct fg_engine *e, const struct fg_completion *c,
				     size_t i, const struct fg_result *r, const char *id,
				     const char *model, long long created, json_t **empty);
/* The last chunk of a stream with stream_options.include_usage: choices []
 * and usage. */
json_t *fg_completion_usage_chunk(const struct fg_completion *c, const struct fg_result *res,
				  const char *id, const char *model, long long created);
/* OpenAI's error body {"error": {message, type, param, code}} (param, code:
 * NULL for null); NULL: out of memory. */
json_t *fg_completion_error_body(const char *message, const char *type, const char *param,
				 const char *code);

#endif
