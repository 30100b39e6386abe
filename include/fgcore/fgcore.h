/* fgcore/fgcore.h - the library API: configuration, engine, generation.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; fg_last_error_text() then holds one line saying what is wrong and
 * what to do.
 */
#ifndef FGCORE_FGCORE_H
#define FGCORE_FGCORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors -------------------------------------------------------------- */
const char *fg_last_error_text(void); /* this thread's last error line */

/* ---- configuration ------------------------------------------------------- */
struct fg_config;

/* A configuration holding every default. */
int fg_config_new(struct fg_config **out);
void fg_config_free(struct fg_config *c);
/* Read an INI file over the current values.  Errors name "path:line". */
int fg_config_load(struct fg_config *c, const char *path);
/* Apply "section.key=value" (what `-o` takes); `where` names its origin in errors. */
int fg_config_set(struct fg_config *c, const char *assignment, const char *where);
/* Current value as text, or NULL if unset and without default. */
const char *fg_config_get(const struct fg_config *c, const char *section, const char *key);
/* Load every plugin the configuration names and validate their sections' keys. */
int fg_config_check(struct fg_config *c);
/* Write the effective, normalized configuration as INI. */
int fg_config_print(const struct fg_config *c, FILE *out);

/* ---- engine ---------------------------------------------------------------- */
struct fg_engine;

/* Load plugins, open tiers, load the model and tokenizer the config names. */
int fg_engine_open(const struct fg_config *c, struct fg_engine **out);
void fg_engine_close(struct fg_engine *e);

/* ---- generation ------------------------------------------------------------ */
enum fg_finish_reason {
	FG_FINISH_LENGTH = 0, /* max_new_tokens reached */
	FG_FINISH_STOP = 1,   /* a stop token or stop string */
	FG_FINISH_ERROR = 2,  /* the request was refused (see fg_result.error) */
};

/* A token and its log-probability (natural log). */
struct fg_logprob {
	int32_t id;
	float logprob;
};

#define FG_TOP_LOGPROBS_MAX 20

struct fg_request {
	const char *prompt;          /* text; or NULL and: */
	const int32_t *prompt_ids;   /* token ids */
	size_t n_prompt_ids;
	int max_new_tokens;
	float temperature;           /* 0: greedy */
	int top_k;                   /* 0: off */
	float top_p;                 /* 1 (or 0): off */
	uint64_t seed;
	const int32_t *stop_ids;     /* generation ends after emitting one of these */
	size_t n_stop_ids;
	const char *const *stop;     /* stop strings: the text is cut before the match */
	size_t n_stop;
	/* Log-probabilities, of the model's own distribution (before temperature,
	 * top-k and top-p): logprobs 1 gives each completion token's, score_prompt
	 * 1 each prompt token's given the tokens before it; top_logprobs (0 to
	 * FG_TOP_LOGPROBS_MAX) adds that many most likely tokens at each of those
	 * positions.  max_new_tokens 0 with score_prompt scores without generating. */
	int logprobs;
	int score_prompt;
	int top_logprobs;
	/* Called on fg_generate's thread with each token the request emits, as
	 * it is emitted (streaming); NULL: none. */
	void (*on_token)(void *arg, int32_t id);
	void *on_token_arg;
};

struct fg_result {
	char *text;                  /* completion text (NUL-terminated, malloc'd) */
	int32_t *token_ids;          /* completion token ids (malloc'd) */
	size_t n_tokens;             /* completion tokens */
	size_t n_prompt_tokens;
	enum fg_finish_reason finish_reason;
	char *error;                 /* FG_FINISH_ERROR: why (malloc'd), else NULL */
	int32_t *prompt_ids;         /* the prompt as the model read it (a text's with its
				      * leading bos token), n_prompt_tokens ids */
	/* fg_request.score_prompt: n_prompt_tokens entries, [0] NAN (nothing
	 * precedes the first token); fg_request.logprobs: n_tokens entries.  The
	 * top arrays hold top_logprobs entries per position, most likely first
	 * (prompt_top's first row: ids -1). */
	float *prompt_logprobs;
	struct fg_logprob *prompt_top;
	float *token_logprobs;
	struct fg_logprob *token_top;
};

/* Run n requests; results in input order.  Prompts of different lengths share
 * batches through left padding; a result never depends on its batch mates. */
int fg_generate(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		struct fg_result *results);
void fg_result_clear(struct fg_result *r);
/* Token positions fg_generate has computed since the engine opened: every
 * row of every GPU batch it ran, padding and rows already finished
 * included (a finished row costs only its rows of the matrix products, not
 * its attention nor its KV cache traffic; a GPU batch whose rows have all
 * finished is no longer run); against the prompt and completion tokens,
 * the batches' waste. */
uint64_t fg_engine_positions(const struct fg_engine *e);

/* Tokenizer of the engine's model. */
int fg_tokenize(struct fg_engine *e, const char *text, int32_t **ids, size_t *n);
int fg_detokenize(struct fg_engine *e, const int32_t *ids, size_t n, char **text);

#ifdef __cplusplus
}
#endif
#endif
