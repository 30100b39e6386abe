/* core/engine/generate.c - the generation API: requests to batches, batches
 * through the forward pass, tokens back to results.
 *
 * Requests are sorted by prompt length (so a batch wastes little padding) and
 * cut into effective batches of at most gpu_batch_size x num_gpu_batches rows,
 * each sized to the requests it holds; every
 * request keeps its own sampling parameters and random stream, so its result
 * does not depend on which requests share its batch. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fanout.h>
#include <fgcore/fgcore.h>
#include "core/engine/engine.h"
#include "core/engine/forward.h"
#include "core/engine/logprob.h"
#include "core/engine/sample.h"
#include "core/util/error.h"

/* One request's state through its batch. */
struct job {
	size_t index;          /* position in the caller's array */
	const struct fg_request *req;
	int32_t *prompt;
	size_t n_prompt;
	int32_t *out;          /* generated ids */
	size_t n_out;
	struct fg_rng rng;
	int done;
	enum fg_finish_reason why;
	size_t cut;            /* stop string: bytes of text to keep; SIZE_MAX: none */
	float *plp, *tlp;      /* log-probabilities of the prompt's, the completion's tokens */
	struct fg_logprob *ptop, *ttop; /* and the top_logprobs most likely at each */
};

static int job_prompt(struct fg_engine *e, struct job *j)
{
	const struct fg_request *r = j->req;
	const struct fg_model_config *c = &e->model.cfg;

	if (r->prompt) {
		int32_t *ids;
		size_t n;
		if (!e->tok) {
			FG_ERR("%s", e->tok_error);
			return -EINVAL;
		}
		int rc = fg_tokenizer_encode(e->tok, r->prompt, strlen(r->prompt), &ids, &n);
		if (rc)
			return rc;
		/* OPT's tokenizer starts every text with </s> (its bos_token_id). */
		j->prompt = malloc(sizeof(int32_t) * (n + 1));
		if (!j->prompt) {
			free(ids);
			FG_ERR("out of memory");
			return -ENOMEM;
		}
		j->prompt[0] = c->bos_id;
		memcpy(j->prompt + 1, ids, sizeof(int32_t) * n);
		j->n_prompt = n + 1;
		free(ids);
	} else {
		if (!r->prompt_ids || r->n_prompt_ids == 0) {
			FG_ERR("request has neither a prompt text nor prompt token ids");
			return -EINVAL;
		}
		for (size_t i = 0; i < r->n_prompt_ids; i++)
			if (r->prompt_ids[i] < 0 || r->prompt_ids[i] >= c->vocab) {
				FG_ERR("prompt token %zu is %d: ids must lie in [0, %lld)", i,
				       r->prompt_ids[i], (long long)c->vocab);
				return -EINVAL;
			}
		j->prompt = malloc(sizeof(int32_t) * r->n_prompt_ids);
		if (!j->prompt) {
			FG_ERR("out of memory");
			return -ENOMEM;
		}
		memcpy(j->prompt, r->prompt_ids, sizeof(int32_t) * r->n_prompt_ids);
		j->n_prompt = r->n_prompt_ids;
	}
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
	if (r->score_prompt) {
		/* Nothing precedes the first token: no log-probability, no top. */
		j->plp[0] = NAN;
		for (size_t i = 0; i < k; i++)
			j->ptop[i] = (struct fg_logprob){ -1, NAN };
	}
	fg_rng_seed(&j->rng, r->seed);
	j->cut = SIZE_MAX;
	j->done = r->max_new_tokens == 0;
	j->why = FG_FINISH_LENGTH;
	return 0;
}

/* Does the text of the generated tokens contain a stop string?  Sets j->cut to
 * the earliest match. */
static int check_stop_strings(struct fg_engine *e, struct job *j)
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

/* Emit tok; logits (NULL when not on the host) is the row it was chosen from. */
static void accept(struct fg_engine *e, struct job *j, int32_t tok, const float *logits)
{
	const struct fg_request *r = j->req;
	int k = r->top_logprobs;

	if (j->done)
		return;
	if (r->logprobs)
		fg_logprob_row(logits, e->model.cfg.vocab, tok, k, &j->tlp[j->n_out],
			       j->ttop + j->n_out * (size_t)k);
	j->out[j->n_out++] = tok;
	if (r->on_token)
		r->on_token(r->on_token_arg, tok);
	for (size_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == tok) {
			j->done = 1;
			j->why = FG_FINISH_STOP;
			return;
		}
	if (check_stop_strings(e, j) == 1) {
		j->done = 1;
		j->why = FG_FINISH_STOP;
	} else if (j->n_out >= (size_t)r->max_new_tokens) {
		j->done = 1;
	}
}

/* Every row's logits, for sampling, from the host tier: rows x vocab floats
 * are the largest host buffer of a sampled batch, so the tier accounts them
 * and refuses them in one line rather than the kernel later. */
static int alloc_logits(struct fg_engine *e, int64_t rows, struct fg_region *r)
{
	const struct fg_model_config *c = &e->model.cfg;
	struct fg_tier *t = e->tier[FG_ROLE_HOST];
	char hint[160];
	int rc;

	snprintf(hint, sizeof(hint), "(the logits of %lld sampled sequences x %lld ids) fewer sequences per batch (gpu_batch_size x num_gpu_batches) would fit",
		 (long long)rows, (long long)c->vocab);
	if ((rc = fg_tier_alloc_hint(t, (uint64_t)rows * (uint64_t)c->vocab * sizeof(float), r, hint)))
		return rc;
	if (!r->addr) {
		fg_tier_free(t, r);
		FG_ERR("generate: [tier.host] plugin %s gave no address for the logits: use a host-memory tier (pinned_host)",
		       t->ph.plugin->name);
		return -EINVAL;
	}
	return 0;
}

/* A scored prefill's logits at position pos of rows [row0, row0 + rows): the
 * log-probability of each scoring job's next prompt token. */
struct scoring {
	struct job **jobs;
	size_t count;
	const int32_t *pad;
	int64_t vocab;
};

struct score_rows {
	const struct scoring *s;
	int64_t row0, r0, r1, pos;
	const float *logits;
};

static void score_rows(void *arg)
{
	const struct score_rows *w = arg;
	const struct scoring *s = w->s;

	for (int64_t r = w->r0; r < w->r1; r++) {
		struct job *j = s->jobs[r];
		int64_t i = w->pos - s->pad[r] + 1; /* the prompt token scored */
		int k = j->req->top_logprobs;

		if (!j->req->score_prompt || i < 1)
			continue;
		fg_logprob_row(w->logits + (r - w->row0) * s->vocab, s->vocab, j->prompt[i],
			       k, &j->plp[i], j->ptop + (size_t)i * (size_t)k);
	}
}

static int score_position(void *arg, int64_t row0, int64_t rows, int64_t pos, const float *logits)
{
	const struct scoring *s = arg;
	int64_t end = row0 + rows < (int64_t)s->count ? row0 + rows : (int64_t)s->count;
	struct score_rows w[FG_FANOUT_MAX];

	if (end <= row0)
		return 0;
	/* The rows' log-softmax over the CPUs, a million logits a thread at least. */
	int n = fg_fanout_threads(0, (uint64_t)(end - row0) * (uint64_t)s->vocab, 1u << 20);
	int64_t per = (end - row0 + n - 1) / n;
	for (int t = 0; t < n; t++) {
		int64_t r0 = row0 + t * per, r1 = r0 + per < end ? r0 + per : end;
		w[t] = (struct score_rows){ s, row0, r0 < end ? r0 : end, r1, pos, logits };
	}
	fg_fanout(score_rows, w, sizeof(*w), n);
	return 0;
}

/* A live row that draws its next token (the others take the argmax). */
static int samples(const struct job *j)
{
	return !j->done && j->req->temperature > 0;
}

/* Sampled rows [r0, r1) of a decode step, with a sampler of their own: each
 * row draws from its own request's stream, so the tokens do not depend on
 * how the rows are spread over threads. */
struct sample_rows {
	struct job **jobs;
	const float *logits;
	int64_t vocab, r0, r1;
	struct fg_sampler *smp;
	int32_t *next;
};

static void sample_rows(void *arg)
{
	const struct sample_rows *w = arg;

	for (int64_t r = w->r0; r < w->r1; r++) {
		struct job *j = w->jobs[r];
		const struct fg_request *q = j->req;
		struct fg_sampling sp = { q->temperature, q->top_k, q->top_p };

		if (samples(j))
			w->next[r] = fg_sample(w->smp, w->logits + r * w->vocab, &sp, &j->rng);
	}
}

/* The sampled rows' next tokens over the CPUs (a row costs up to a
 * millisecond: a step of 256 rows would otherwise take a quarter second on
 * one core).  smp: FG_FANOUT_MAX samplers, made as needed. */
static int sample_step(struct job **jobs, int64_t count, const float *logits, int64_t vocab,
		       struct fg_sampler **smp, int32_t *next)
{
	struct sample_rows w[FG_FANOUT_MAX];
	int64_t sampled = 0;

	for (int64_t r = 0; r < count; r++)
		sampled += samples(jobs[r]);
	if (!sampled)
		return 0;
	int n = fg_fanout_threads(0, (uint64_t)sampled, 4);
	int64_t per = (count + n - 1) / n;
	for (int t = 0; t < n; t++) {
		int64_t r0 = t * per < count ? t * per : count;
		int rc = smp[t] ? 0 : fg_sampler_new(&smp[t], vocab);

		if (rc)
			return rc;
		w[t] = (struct sample_rows){ jobs, logits, vocab, r0,
					     r0 + per < count ? r0 + per : count, smp[t], next };
	}
	fg_fanout(sample_rows, w, sizeof(*w), n);
	return 0;
}

/* The per-row sampling a step's tokens are drawn with on the device: each
 * sampled row takes its draw from its request's stream at the point the host
 * sampler would, so where the token is drawn never changes it. */
struct device_draws {
	struct fg_row_sampling s;
	float *temperature, *top_p;
	int32_t *top_k;
	uint64_t *draw;
};

static int device_draws_new(struct device_draws *d, int64_t rows)
{
	d->temperature = calloc((size_t)rows, sizeof(float));
	d->top_p = calloc((size_t)rows, sizeof(float));
	d->top_k = calloc((size_t)rows, sizeof(int32_t));
	d->draw = calloc((size_t)rows, sizeof(uint64_t));
	d->s = (struct fg_row_sampling){ d->temperature, d->top_k, d->top_p, d->draw };
	if (d->temperature && d->top_p && d->top_k && d->draw)
		return 0;
	FG_ERR("out of memory for the sampling of %lld rows", (long long)rows);
	return -ENOMEM;
}

static void device_draws_free(struct device_draws *d)
{
	free(d->temperature);
	free(d->top_p);
	free(d->top_k);
	free(d->draw);
}

/* Before a step: the live sampled rows' parameters and draws; every other
 * row (greedy, finished, padding) takes the argmax. */
static void device_draws_fill(struct device_draws *d, struct job **jobs, int64_t count)
{
	for (int64_t r = 0; r < count; r++) {
		const struct fg_request *q = jobs[r]->req;
		int s = samples(jobs[r]);

		d->temperature[r] = s ? q->temperature : 0;
		d->top_k[r] = q->top_k;
		d->top_p[r] = q->top_p;
		d->draw[r] = s ? fg_rng_u53(&jobs[r]->rng) : 0;
	}
}

/* The longest budget first: within a GPU batch, rows that finish early end
 * up after the last live one, where they cost nothing. */
static int by_budget_desc(const void *a, const void *b)
{
	const struct job *x = *(struct job *const *)a, *y = *(struct job *const *)b;
	if (x->req->max_new_tokens != y->req->max_new_tokens)
		return x->req->max_new_tokens > y->req->max_new_tokens ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Run one effective batch of jobs (count <= gpu_batch_size * num_gpu_batches).
 * The batch is sized to the jobs: the GPU batches gpu_batch_size needs, each
 * as small as the jobs allow (one 2-token prompt runs a batch of 1, whatever
 * gpu_batch_size says); a row's result never depends on its batch mates. */
static int run_batch(struct fg_engine *e, struct job **jobs, size_t count)
{
	const struct fg_model_config *c = &e->model.cfg;
	int64_t bs = e->policy.gpu_batch_size, nb = ((int64_t)count + bs - 1) / bs;
	struct fg_forward_env env;
	int64_t plen = 0, glen = 0;
	struct fg_forward *f = NULL;
	struct fg_sampler *smp[FG_FANOUT_MAX] = { NULL };
	struct device_draws dd = { 0 };
	struct fg_region lr = { 0 };
	int32_t *ids = NULL, *pad = NULL, *next = NULL, *top = NULL;
	unsigned char *row_live = NULL;
	int greedy = 1, scored = 0, logprobs = 0, on_device = 0;
	float *logits = NULL;
	int rc;

	bs = ((int64_t)count + nb - 1) / nb;
	int64_t rows = bs * nb;
	/* Each GPU batch keeps its rows (its padding), longest budget first. */
	for (int64_t g = 0; g * bs < (int64_t)count; g++) {
		size_t a = (size_t)(g * bs), n = count - a < (size_t)bs ? count - a : (size_t)bs;
		qsort(jobs + a, n, sizeof(*jobs), by_budget_desc);
	}

	for (size_t i = 0; i < count; i++) {
		if ((int64_t)jobs[i]->n_prompt > plen)
			plen = (int64_t)jobs[i]->n_prompt;
		if (jobs[i]->req->max_new_tokens > glen)
			glen = jobs[i]->req->max_new_tokens;
	}
	ids = malloc(sizeof(int32_t) * (size_t)(rows * plen));
	pad = malloc(sizeof(int32_t) * (size_t)rows);
	next = malloc(sizeof(int32_t) * (size_t)rows);
	top = malloc(sizeof(int32_t) * (size_t)rows);
	row_live = malloc((size_t)rows);
	/* All-greedy batches only need each row's top token, not its logits;
	 * log-probabilities need the logits. */
	for (size_t i = 0; i < count; i++) {
		greedy &= jobs[i]->req->temperature <= 0 && !jobs[i]->req->logprobs;
		logprobs |= jobs[i]->req->logprobs;
		scored |= jobs[i]->req->score_prompt;
	}
	if (!ids || !pad || !next || !top || !row_live) {
		FG_ERR("out of memory for a batch of %lld x %lld tokens", (long long)rows,
		       (long long)plen);
		rc = -ENOMEM;
		goto out;
	}
	/* Left-pad every prompt to plen; rows beyond count hold a lone </s>. */
	for (int64_t r = 0; r < rows; r++) {
		const int32_t *p = r < (int64_t)count ? jobs[r]->prompt : &c->bos_id;
		int64_t n = r < (int64_t)count ? (int64_t)jobs[r]->n_prompt : 1;
		pad[r] = (int32_t)(plen - n);
		for (int64_t i = 0; i < plen; i++)
			ids[r * plen + i] = i < pad[r] ? c->pad_id : p[i - pad[r]];
	}
	fg_engine_forward_env(e, nb, &env);
	env.policy.gpu_batch_size = bs;
	if ((rc = fg_forward_new(&f, &env, plen, glen)))
		goto out;
	/* Sampled rows are drawn where the logits are when the backend can (no
	 * logits cross to the host); log-probabilities need them on the host. */
	if (!greedy && !logprobs && !(rc = device_draws_new(&dd, rows)) &&
	    fg_forward_set_sampling(f, &dd.s) == 0)
		on_device = 1;
	if (rc || (!greedy && !on_device && (rc = alloc_logits(e, rows, &lr))))
		goto out;
	logits = lr.addr;
	if (on_device)
		device_draws_fill(&dd, jobs, (int64_t)count);
	struct scoring sc = { jobs, count, pad, c->vocab };
	if ((rc = scored ? fg_forward_prefill_scored(f, ids, pad, logits, top, score_position, &sc)
			 : fg_forward_prefill(f, ids, pad, logits, top)))
		goto out;
	for (int64_t t = 0;; t++) {
		int live = 0;
		/* A finished row's token and logits are garbage: never read. */
		if (!greedy && !on_device &&
		    (rc = sample_step(jobs, (int64_t)count, logits, c->vocab, smp, next)))
			goto out;
		for (int64_t r = 0; r < rows; r++) {
			row_live[r] = 0;
			if (r >= (int64_t)count || jobs[r]->done) {
				next[r] = c->pad_id;
				continue;
			}
			const float *row = logits ? logits + r * c->vocab : NULL;
			if (on_device || !samples(jobs[r]))
				next[r] = top[r];
			accept(e, jobs[r], next[r], row);
			live += !jobs[r]->done;
			row_live[r] = !jobs[r]->done;
		}
		if (!live || t + 1 >= glen)
			break;
		/* A finished row no longer costs its attention and cache traffic,
		 * a GPU batch whose rows have all finished nothing at all. */
		fg_forward_set_live_rows(f, row_live);
		if (on_device)
			device_draws_fill(&dd, jobs, (int64_t)count);
		if ((rc = fg_forward_decode(f, next, logits, top)))
			goto out;
	}
out:
	if (lr.size)
		fg_tier_free(e->tier[FG_ROLE_HOST], &lr);
	if (f) {
		const struct fg_forward_stats *st = fg_forward_stats(f);
		e->positions += st->positions;
		e->dead_positions += st->dead_positions;
		e->cache_bytes += st->cache_bytes;
		e->cache_skipped += st->cache_skipped;
	}
	fg_forward_free(f);
	device_draws_free(&dd);
	free(row_live);
	for (int t = 0; t < FG_FANOUT_MAX; t++)
		fg_sampler_free(smp[t]);
	free(ids);
	free(pad);
	free(next);
	free(top);
	return rc;
}

static int by_prompt_len(const void *a, const void *b)
{
	const struct job *x = *(struct job *const *)a, *y = *(struct job *const *)b;
	if (x->n_prompt != y->n_prompt)
		return x->n_prompt < y->n_prompt ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

static int finish(struct fg_engine *e, struct job *j, struct fg_result *res)
{
	size_t keep = j->n_out;

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
			res->text[j->cut] = '\0';
	} else {
		res->text = strdup("");
		if (!res->text)
			return -ENOMEM;
	}
	return 0;
}

int fg_generate(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		struct fg_result *results)
{
	struct job *jobs = calloc(n ? n : 1, sizeof(*jobs));
	struct job **order = calloc(n ? n : 1, sizeof(*order));
	size_t live = 0, eff = (size_t)(e->policy.gpu_batch_size * e->policy.num_gpu_batches);
	int rc = 0;

	if (!jobs || !order) {
		free(jobs);
		free(order);
		FG_ERR("out of memory for %zu requests", n);
		return -ENOMEM;
	}
	memset(results, 0, sizeof(*results) * n);
	for (size_t i = 0; i < n; i++) {
		jobs[i].index = i;
		jobs[i].req = &reqs[i];
		if (job_prompt(e, &jobs[i])) {
			/* A refused request gets its own error; the others still run. */
			results[i].finish_reason = FG_FINISH_ERROR;
			results[i].error = strdup(fg_last_error());
			continue;
		}
		order[live++] = &jobs[i];
	}
	qsort(order, live, sizeof(*order), by_prompt_len);
	for (size_t i = 0; i < live && !rc; i += eff) {
		size_t cnt = live - i < eff ? live - i : eff;
		int any = 0;
		for (size_t k = 0; k < cnt; k++)
			any |= !order[i + k]->done || order[i + k]->req->score_prompt;
		if (any)
			rc = run_batch(e, order + i, cnt);
	}
	for (size_t i = 0; i < live && !rc; i++)
		rc = finish(e, order[i], &results[order[i]->index]);
	for (size_t i = 0; i < n; i++) {
		free(jobs[i].prompt);
		free(jobs[i].out);
		free(jobs[i].plp);
		free(jobs[i].tlp);
		free(jobs[i].ptop);
		free(jobs[i].ttop);
		if (rc)
			fg_result_clear(&results[i]);
	}
	free(jobs);
	free(order);
	return rc;
}

uint64_t fg_engine_positions(const struct fg_engine *e)
{
	return e->positions;
}

void fg_result_clear(struct fg_result *r)
{
	free(r->text);
	free(r->token_ids);
	free(r->error);
	free(r->prompt_ids);
	free(r->prompt_logprobs);
	free(r->prompt_top);
	free(r->token_logprobs);
	free(r->token_top);
	memset(r, 0, sizeof(*r));
}

int fg_tokenize(struct fg_engine *e, const char *text, int32_t **ids, size_t *n)
{
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	return fg_tokenizer_encode(e->tok, text, strlen(text), ids, n);
}

int fg_detokenize(struct fg_engine *e, const int32_t *ids, size_t n, char **text)
{
	size_t len;
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	return fg_tokenizer_decode(e->tok, ids, n, text, &len);
}
