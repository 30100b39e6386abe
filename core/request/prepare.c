/* core/request/prepare.c - a request read once: its prompt's tokens (a
 * text with bos first when the model reads text so), its checks, the
 * arrays its result needs; tokens accepted one by one; the result. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/engine.h"
#include "core/request/job.h"
#include "core/sampling/logprob.h"
#include "core/util/error.h"
#include "core/util/utf8.h"

static int read_text(struct fg_engine *e, struct fg_job *j)
{
	int rc = fg_tokenize_prompt(e, j->req->prompt, &j->prompt, &j->n_prompt);

	if (!rc && !j->n_prompt) {
		FG_ERR("the prompt text has no tokens (and %s reads a text without bos): give a non-empty prompt",
		       e->model.cfg.name);
		return -EINVAL;
	}
	return rc;
}

static int read_ids(struct fg_engine *e, struct fg_job *j)
{
	const struct fg_request *r = j->req;
	const struct fg_model_config *c = &e->model.cfg;

	if (!r->prompt_ids || r->n_prompt_ids == 0) {
		FG_ERR("request has neither a prompt text nor prompt token ids");
		return -EINVAL;
	}
	for (size_t i = 0; i < r->n_prompt_ids; i++)
		if (r->prompt_ids[i] < 0 || r->prompt_ids[i] >= c->vocab) {
			FG_ERR("prompt token %zu is %d: ids must lie in [0, %lld)", i, r->prompt_ids[i],
			       (long long)c->vocab);
			return -EINVAL;
		}
	j->prompt = malloc(sizeof(int32_t) * r->n_prompt_ids);
	if (!j->prompt) {
		FG_ERR("out of memory");
		return -ENOMEM;
	}
	memcpy(j->prompt, r->prompt_ids, sizeof(int32_t) * r->n_prompt_ids);
	j->n_prompt = r->n_prompt_ids;
	return 0;
}

int fg_job_prepare(struct fg_engine *e, struct fg_job *j)
{
	const struct fg_request *r = j->req;
	const struct fg_model_config *c = &e->model.cfg;
	int rc;

	if ((rc = r->prompt ? read_text(e, j) : read_ids(e, j)))
		return rc;
	if (r->max_new_tokens < 0) {
		FG_ERR("max_new_tokens is %d: it must be 0 or more", r->max_new_tokens);
		return -EINVAL;
	}
	if (j->n_prompt + (size_t)r->max_new_tokens > (size_t)c->max_pos) {
		FG_ERR("prompt of %zu tokens + %d new tokens exceeds %s's %lld positions: shorten the prompt or lower max_new_tokens",
		       j->n_prompt, r->max_new_tokens, c->name, (long long)c->max_pos);
		return -EINVAL;
	}
	if (r->temperature < 0 || !(r->top_p >= 0 && r->top_p <= 1) || r->top_k < 0) {
		FG_ERR("sampling parameters out of range: temperature >= 0, top_k >= 0, 0 <= top_p <= 1");
		return -EINVAL;
	}
	if (r->top_logprobs < 0 || r->top_logprobs > FG_TOP_LOGPROBS_MAX) {
		FG_ERR("top_logprobs is %d: it must lie in [0, %d]", r->top_logprobs,
		       FG_TOP_LOGPROBS_MAX);
		return -EINVAL;
	}
	size_t gen = (size_t)r->max_new_tokens + 1, k = (size_t)r->top_logprobs;
	j->out = malloc(sizeof(int32_t) * gen);
	if (r->logprobs) {
		j->tlp = malloc(sizeof(float) * gen);
		j->ttop = malloc(sizeof(struct fg_logprob) * gen * (k ? k : 1));
	}
	if (r->score_prompt) {
		j->plp = malloc(sizeof(float) * j->n_prompt);
		j->ptop = malloc(sizeof(struct fg_logprob) * j->n_prompt * (k ? k : 1));
	}
	if (!j->out || (r->logprobs && (!j->tlp || !j->ttop)) ||
	    (r->score_prompt && (!j->plp || !j->ptop))) {
		FG_ERR("out of memory");
		return -ENOMEM;
	}
	fg_job_rewind(j);
	return 0;
}

void fg_job_rewind(struct fg_job *j)
{
	const struct fg_request *r = j->req;

	if (r->score_prompt) {
		/* Nothing precedes the first token: no log-probability, no top. */
		j->plp[0] = NAN;
		for (int i = 0; i < r->top_logprobs; i++)
			j->ptop[i] = (struct fg_logprob){ -1, NAN };
	}
	fg_rng_seed(&j->rng, r->seed);
	j->n_out = 0;
	j->cut = SIZE_MAX;
	j->done = r->max_new_tokens == 0;
	j->why = FG_FINISH_LENGTH;
}

/* Does the text of the generated tokens contain a stop string?  Sets j->cut to
 * the earliest match. */
static int check_stop_strings(struct fg_engine *e, struct fg_job *j)
{
	const struct fg_request *r = j->req;
	char *text;
	size_t len;

	if (!r->n_stop || !e->tok)
		return 0;
	if (fg_tokenizer_decode(e->tok, j->out, j->n_out, &text, &len))
		return -EINVAL;
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < r->n_stop; i++) {
		const char *s = r->stop[i];
		if (!s || !*s)
			continue;
		const char *hit = memmem(text, len, s, strlen(s));
		if (hit && (size_t)(hit - text) < best)
			best = (size_t)(hit - text);
	}
	free(text);
	if (best != SIZE_MAX) {
		j->cut = best;
		return 1;
	}
	return 0;
}

/* [bench] end_chance: does the job's newest token end it?  A draw that
 * depends on the job's place and the token's only (splitmix64). */
static int ends_by_chance(const struct fg_engine *e, const struct fg_job *j)
{
	if (e->end_chance <= 0)
		return 0;
	uint64_t z = ((uint64_t)j->index << 32 ^ (uint64_t)j->n_out) + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53 < e->end_chance;
}

void fg_job_accept(struct fg_engine *e, struct fg_job *j, int32_t tok, float lp,
		   const int32_t *top_id, const float *top_lp)
{
	const struct fg_request *r = j->req;
	int k = r->top_logprobs;

	if (j->done)
		return;
	if (tok < 0) {
		fg_job_fail_nan(j, -(long)j->n_out - 1);
		return;
	}
	if (r->logprobs) {
		j->tlp[j->n_out] = lp;
		for (int t = 0; t < k; t++)
			j->ttop[j->n_out * (size_t)k + (size_t)t] = (struct fg_logprob){ top_id[t],
											top_lp[t] };
	}
	j->out[j->n_out++] = tok;
	if (r->on_token) {
		j->streamed = 1;
		r->on_token(r->on_token_arg, tok);
	}
	for (size_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == tok) {
			j->done = 1;
			j->why = FG_FINISH_STOP;
			return;
		}
	if (check_stop_strings(e, j) == 1 || ends_by_chance(e, j)) {
		j->done = 1;
		j->why = FG_FINISH_STOP;
	} else if (j->n_out >= (size_t)r->max_new_tokens) {
		j->done = 1;
	}
}

void fg_job_fail_nan(struct fg_job *j, long at)
{
	j->done = 1;
	j->why = FG_FINISH_ERROR;
	j->nan_at = at;
}

int fg_job_finish(struct fg_engine *e, struct fg_job *j, struct fg_result *res)
{
	size_t keep = j->n_out;

	memset(res, 0, sizeof(*res));
	if (j->why == FG_FINISH_ERROR) {
		char why[400];
		snprintf(why, sizeof(why), "the logits %s %ld held no number above -inf (NaN or -inf: "
			 "the activations overflowed; with cublas keep compute.fp32_residual = true, or "
			 "run the model on cpu_blas)", j->nan_at >= 0 ? "scoring prompt token" :
			 "of new token", j->nan_at >= 0 ? j->nan_at : -j->nan_at - 1);
		res->finish_reason = FG_FINISH_ERROR;
		if (!(res->error = strdup(why))) {
			FG_ERR("out of memory");
			return -ENOMEM;
		}
		res->n_prompt_tokens = j->n_prompt;
		return 0;
	}
	/* A stop token ends the text but stays in token_ids. */
	if (j->why == FG_FINISH_STOP && j->cut == SIZE_MAX && keep)
		keep--;
	res->n_prompt_tokens = j->n_prompt;
	res->n_tokens = j->n_out;
	res->finish_reason = j->why;
	res->token_ids = j->out;
	res->prompt_ids = j->prompt;
	res->prompt_logprobs = j->plp;
	res->prompt_top = j->ptop;
	res->token_logprobs = j->tlp;
	res->token_top = j->ttop;
	j->out = NULL;
	j->prompt = NULL;
	j->plp = j->tlp = NULL;
	j->ptop = j->ttop = NULL;
	if (e->tok) {
		size_t len;
		int rc = fg_tokenizer_decode(e->tok, res->token_ids, keep, &res->text, &len);
		if (rc)
			return rc;
		if (j->cut != SIZE_MAX && j->cut < len)
			res->text[len = j->cut] = '\0';
		if (fg_utf8_nul_free(&res->text, len)) {
			FG_ERR("out of memory");
			return -ENOMEM;
		}
	} else {
		res->text = strdup("");
		if (!res->text) {
			FG_ERR("out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

void fg_job_free(struct fg_job *j)
{
	free(j->prompt);
	free(j->out);
	free(j->plp);
	free(j->tlp);
	free(j->ptop);
	free(j->ttop);
	j->prompt = j->out = NULL;
	j->plp = j->tlp = NULL;
	j->ptop = j->ttop = NULL;
}
