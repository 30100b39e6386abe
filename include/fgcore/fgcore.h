/* fgcore/fgcore.h - the library API: configuration, engine, generation.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; fg_last_error_text() then holds one line saying what is wrong and
 * what to do.
 */
#ifndef FGCORE_FGCORE_H
#define FGCORE_FGCORE_H

#include <signal.h>
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
/* Typed values of schema keys (core/config/schema.c).  Asking for a key that
 * is not in the schema, or with the wrong type, is a programmer error (assert).
 * fg_config_str works for string and enum keys and never returns NULL. */
int64_t fg_config_int(const struct fg_config *c, const char *section, const char *key);
double fg_config_double(const struct fg_config *c, const char *section, const char *key);
int fg_config_bool(const struct fg_config *c, const char *section, const char *key);
uint64_t fg_config_size(const struct fg_config *c, const char *section, const char *key);
const char *fg_config_str(const struct fg_config *c, const char *section, const char *key);

/* Where a schema key's value came from: its default, a configuration file, or
 * the command line (fg_config_set: -o or a FlexGen flag). */
enum fg_config_origin { FG_CONFIG_DEFAULT, FG_CONFIG_FROM_FILE, FG_CONFIG_FROM_ARGS };
enum fg_config_origin fg_config_origin_of(const struct fg_config *c, const char *section,
					  const char *key);

/* Load every plugin the configuration names and validate their sections' keys. */
int fg_config_check(struct fg_config *c);
/* Write the effective, normalized configuration as INI. */
int fg_config_print(const struct fg_config *c, FILE *out);

/* ---- engine ---------------------------------------------------------------- */
struct fg_engine;

/* What fg_engine_open checks of a configuration before it touches anything:
 * fg_config_check and the [policy] section; a command calls it before it
 * creates files, so that a bad setting costs nothing (one line, -EINVAL). */
int fg_engine_check_config(struct fg_config *c);

/* Load plugins, open tiers, load the model and tokenizer the config names. */
int fg_engine_open(const struct fg_config *c, struct fg_engine **out);
void fg_engine_close(struct fg_engine *e);
/* A rank other than 0 under mpirun: a pipeline's later stage follows its
 * stage 0's runs on this rank's layers, another replica's stage 0 runs the
 * requests rank 0 hands it ([distributed] replicas), until rank 0 closes
 * its engine. */
int fg_engine_follow(struct fg_engine *e);

/* What an open engine runs: the model, its batch shape and its plugins.
 * The strings belong to the engine. */
struct fg_model_info {
	const char *name;            /* "opt-1.3b", or the model folder's name */
	const char *family;          /* "opt", "llama", ... (the family that computes it) */
	int64_t vocab;               /* token ids lie in [0, vocab) */
	int32_t bos_id, eos_id, pad_id; /* -1: none */
	int64_t max_positions;       /* a prompt plus its new tokens fit in this many */
	int32_t text_bos;            /* the id a text prompt is read with first, -1: none
				      * (the tokenizer's rule, else the family's default) */
	int has_tokenizer;           /* text prompts can be read (else token ids only) */
	int64_t gpu_batch_size, num_gpu_batches;
	int64_t batch;               /* the effective batch: gpu_batch_size x num_gpu_batches */
	const char *compute_plugin;  /* [compute] plugin */
	const char *tier_plugin[3];  /* [tier.compute], [tier.host], [tier.disk]; NULL: not open */
	int stages;                  /* pipeline stages (1: one process) */
};
int fg_engine_info(const struct fg_engine *e, struct fg_model_info *out);

/* What the engine has computed and moved since it opened, as counted by the request layer and the
 * executor.  Positions are rows x tokens of the forward pass: each prefill
 * row's whole (padded) prompt, each decode step's rows up to a GPU batch's
 * last live one. */
struct fg_run_stats {
	uint64_t requests;           /* requests with a result (errors included) */
	uint64_t failed;             /* of them, results that are errors */
	uint64_t batches;            /* effective batches run */
	uint64_t runs;               /* plans and buffers made (a run is kept across batches
				      * of one shape) */
	uint64_t retried_batches;    /* batches that failed as a whole, rerun one by one */
	uint64_t prompt_tokens;      /* prompt tokens of the requests that ran */
	uint64_t generated_tokens;   /* completion tokens */
	uint64_t positions;          /* computed */
	uint64_t useful_positions;   /* of them, the requests' own prompt and completion tokens */
	uint64_t dead_positions;     /* of them, finished rows waiting for their GPU batch mates */
	uint64_t padding_positions;  /* positions + shared - useful - dead: padding, rows
				      * beyond requests */
	uint64_t joined;             /* requests that took a finished row's place in a running
				      * batch ([policy] refill) */
	uint64_t shared_positions;   /* prompt positions not computed: their KV cache was taken
				      * from a batch mate whose prompt begins alike
				      * ([policy] share_prefix) */
	uint64_t weight_bytes, cache_bytes, hidden_bytes; /* moved between tiers */
	uint64_t read_bytes[3], written_bytes[3]; /* the same per tier (compute, host,
				      * disk): loaded from it into the compute tier's
				      * slots, stored to it from them */
	uint64_t cache_skipped_bytes; /* KV cache of finished rows, not moved */
	uint64_t disk_read_bytes;
	uint64_t peak_bytes[3];      /* largest use of the compute, host, disk tier */
	double run_setup_s;          /* making and freeing plans and buffers */
	double compute_s;            /* inside the forward pass */
	double logits_s;             /* of it, the output block of scored positions and
				      * their log-probabilities */
	double callback_s;           /* in the caller's on_result and on_batch_end
				      * (formatting and writing results) */
};
void fg_engine_stats(const struct fg_engine *e, struct fg_run_stats *out);

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
	/* Its result is known already (run-batch resuming a job): fg_run runs
	 * it only as a batch mate, so that every batch is the one an
	 * uninterrupted run computes (a row's numbers depend on its batch's
	 * shape), and hands no result for it; a batch of known requests alone
	 * is not run. */
	int known;
};

struct fg_result {
	char *text;                  /* completion text (NUL-terminated, malloc'd; a NUL
				      * token shows as U+FFFD: fg_detokenize) */
	int32_t *token_ids;          /* completion token ids (malloc'd) */
	size_t n_tokens;             /* completion tokens */
	size_t n_prompt_tokens;
	enum fg_finish_reason finish_reason;
	char *error;                 /* FG_FINISH_ERROR: why (malloc'd), else NULL */
	int refused;                 /* FG_FINISH_ERROR: 1 the request itself is not one the
				      * model can run (fix the request), 0 running it failed */
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

/* The request layer.  fg_run takes n requests and hands each result to
 * on_result as soon as its batch ends (index: its place in reqs); the
 * callee owns *res (fg_result_clear).  Each request is read once (a text is
 * tokenized, bos first when fg_model_info.text_bos says so; token ids are
 * taken as given) and checked; a refused one gets its FG_FINISH_ERROR result
 * at once.  The rest are grouped into length buckets (prompt lengths within
 * about 1/8, then budgets) and cut into effective batches whose longest
 * prompt plus largest budget fit the model's positions; a batch that fails
 * as a whole is rerun one request at a time, so a request the engine cannot
 * run gets its own error and the others their results (a request that has
 * streamed tokens through on_token is not rerun: it gets the error).  A
 * run's plan and buffers are kept from batch to batch while the shape
 * allows.  Results never depend on batch mates. */
typedef int (*fg_result_fn)(void *arg, size_t index, struct fg_result *res);
/* How far a fg_run call is, in token positions of its requests (each one's
 * prompt plus its budget; a request ending early on a stop counts whole). */
struct fg_run_progress {
	uint64_t work_done, work_total;
	size_t requests_done, requests;
};
typedef int (*fg_batch_end_fn)(void *arg, const struct fg_run_progress *p);
struct fg_run_opts {
	fg_result_fn on_result;      /* required; non-zero: stop after the batch in flight */
	fg_batch_end_fn on_batch_end; /* after each batch's results, and about every second
				      * while a batch that rows join hands results out
				      * (NULL: none); non-zero: stop */
	void *arg;                   /* both callbacks' */
	int input_order;             /* 1: batches in request order (no length buckets) */
	const volatile sig_atomic_t *stop; /* read before each batch and between decode steps:
				      * non-zero stops after the batch in flight, which
				      * takes no more waiting requests (NULL: never) */
	int keep_run;                /* 1: the run's plan and buffers stay in the engine after
				      * the call, for the next call's batches of the same shape
				      * (a server's, a batch job's windows); fg_generate and
				      * fg_engine_close free them */
	const volatile sig_atomic_t *abandon; /* a hard stop, read before each batch and each
				      * decode step: non-zero drops the batch in flight
				      * unfinished (its requests get no result) and stops
				      * (NULL: never) */
	/* Requests arriving while the call runs (a server's): between decode
	 * steps, when a row is free, and before the call would end, more() is
	 * asked for up to max further requests; it returns how many it wrote
	 * to reqs (requests the caller keeps until their results are handed).
	 * They are read as reqs[] are, their results come with indexes n, n +
	 * 1, ... in the order given, and they join running batches where they
	 * can ([policy] refill), else wait for the next batch of the call.  At
	 * most more_max in all; more NULL: none. */
	size_t (*more)(void *arg, const struct fg_request **reqs, size_t max);
	size_t more_max;
	/* With more(): once a request that cannot join (an echoed one, one too
	 * long for the run's columns) has waited this long, the running batch
	 * takes no one else and ends, so that the next batch takes it. */
	int more_wait_ms;
};
/* Returns the number of results handed over (fewer than n when stopped), or
 * a negative errno when nothing could run (-ENOMEM). */
long fg_run(struct fg_engine *e, const struct fg_request *reqs, size_t n,
	    const struct fg_run_opts *o);

/* Run n requests through the request layer; results in input order.
 * Unlike fg_run, a batch that fails as a whole fails the call (its error
 * returned, every result cleared); a refused request still gets its own
 * FG_FINISH_ERROR result. */
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

/* Tokenizer of the engine's model.  A decoded text is a C string: where a
 * token decodes to a NUL byte (GPT-2's byte 0), it holds U+FFFD instead,
 * here and in fg_result.text. */
int fg_tokenize(struct fg_engine *e, const char *text, int32_t **ids, size_t *n);
int fg_detokenize(struct fg_engine *e, const int32_t *ids, size_t n, char **text);
/* chars[i]: the characters (code points) fg_detokenize gives ids[0..i), for
 * i in [0, n] (n + 1 entries): each token's offset in the text.  Linear in n
 * for byte-level tokenizers. */
int fg_detokenize_offsets(struct fg_engine *e, const int32_t *ids, size_t n, size_t *chars);
/* The ids a text prompt is read as: its tokens, with fg_model_info.text_bos
 * first when the model's rule puts one there (what fg_run does with
 * fg_request.prompt). */
int fg_tokenize_prompt(struct fg_engine *e, const char *text, int32_t **ids, size_t *n);

/* The special tokens of the engine's tokenizer as its files name them (what
 * Hugging Face's tokenizer for the model folder calls bos_token, eos_token,
 * unk_token and pad_token); -1: none.  Without a tokenizer all are -1 and
 * the call returns -EINVAL.  (The ids a model runs with are fg_model_info's:
 * config.json's.) */
struct fg_special_tokens {
	int32_t bos, eos, unk, pad;
};
int fg_engine_special_tokens(const struct fg_engine *e, struct fg_special_tokens *out);

#ifdef __cplusplus
}
#endif
#endif
