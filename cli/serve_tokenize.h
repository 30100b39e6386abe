/* cli/serve_tokenize.h - serve's tokenizer endpoints, in the shapes vLLM's
 * OpenAI server gives them (what lm-evaluation-harness's remote tokenizer
 * calls): GET /tokenizer_info, POST /tokenize {model?, prompt,
 * add_special_tokens?} -> {count, max_model_len, tokens}, POST /detokenize
 * {model?, tokens} -> {prompt}.  They run on the HTTP threads, never queued:
 * the engine's tokenizer is only read, and reading it is thread-safe. */
#ifndef FG_CLI_SERVE_TOKENIZE_H
#define FG_CLI_SERVE_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <fgcore/fgcore.h>

/* A /tokenize or /detokenize body, checked. */
struct fg_serve_tok {
	int detokenize;
	const char *model;       /* as the body names it (borrowed), or NULL */
	const char *prompt;      /* /tokenize: the text (borrowed) */
	int add_special;         /* /tokenize: the model's bos first by its rule */
	int32_t *ids;            /* /detokenize: owned */
	size_t n;
};

/* Check a body (detokenize: 1 for /detokenize).  NULL, or a malloc'd error
 * line with *param the field at fault (a static name, or NULL); t is to be
 * freed either way. */
char *fg_serve_tok_parse(json_t *body, int detokenize, struct fg_serve_tok *t,
			 const char **param);
/* The answer, or NULL with *status (400: a token id the model does not
 * have; 404: the model has no tokenizer; 500: out of memory) and *err (a
 * malloc'd line, NULL when out of memory). */
json_t *fg_serve_tok_answer(struct fg_engine *e, const struct fg_serve_tok *t, int *status,
			    char **err);
void fg_serve_tok_free(struct fg_serve_tok *t);

/* GET /tokenizer_info: the tokenizer's settings as a Hugging Face
 * tokenizer_config.json names them (bos_token, eos_token, ...,
 * model_max_length), NULL as fg_serve_tok_answer. */
json_t *fg_serve_tokenizer_info(struct fg_engine *e, int *status, char **err);

#endif
