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
};

struct fg_result {
	char *text;                  /* completion text (NUL-terminated, malloc'd) */
	int32_t *token_ids;          /* completion token ids (malloc'd) */
	size_t n_tokens;             /* completion tokens */
	size_t n_prompt_tokens;
	enum fg_finish_reason finish_reason;
	char *error;                 /* FG_FINISH_ERROR: why (malloc'd), else NULL */
};

/* Run n requests; results in input order.  Prompts of different lengths share
 * batches through left padding; a result never depends on its batch mates. */
int fg_generate(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		struct fg_result *results);
void fg_result_clear(struct fg_result *r);

/* Tokenizer of the engine's model. */
int fg_tokenize(struct fg_engine *e, const char *text, int32_t **ids, size_t *n);
int fg_detokenize(struct fg_engine *e, const int32_t *ids, size_t n, char **text);

#ifdef __cplusplus
}
#endif
#endif
