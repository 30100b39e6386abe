/* core/request/batch.c - one effective batch of requests through a run of
 * the forward pass: left padding, prefill (scored when a request asks),
 * decode steps with each row's own sampling, finished rows masked out.
 *
 * A run (plan, buffers, weight slots) is kept from batch to batch while the
 * batch shape (num_gpu_batches x gpu_batch_size) is the same and the
 * prompt and budget fit what it was made for: making one costs page-locked
 * allocations on a GPU machine. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fanout.h>
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "core/request/job.h"
#include "core/sampling/logprob.h"
#include "core/util/clock.h"
#include "core/util/error.h"

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

/* Log-probabilities a batch asks for: of its prompts' tokens (a scored
 * prefill) and of the tokens it generates.  Arrays of rows * plen and of
 * rows entries, times k (the batch's largest top_logprobs) for the tops. */
struct batch_scores {
	int pk, tk;                  /* tops per prompt position, per new token */
	struct fg_prompt_scores p;
	struct fg_token_scores t;
	int32_t *target, *tok;       /* positions' targets; the step's scored tokens */
};

static void batch_scores_free(struct batch_scores *b)
{
	free(b->target);
	free(b->p.lp);
	free(b->p.top_id);
	free(b->p.top_lp);
	free(b->tok);
	free(b->t.lp);
	free(b->t.top_id);
	free(b->t.top_lp);
}

/* The arrays, and each scoring row's targets: position p names the
 * prompt's token after it (ids are the batch's left-padded rows).  With
 * `only`, of the rows it marks and their prompts alone (joining rows: their
 * new tokens are scored in the batch's arrays). */
static int batch_scores_new(struct batch_scores *b, struct fg_job **jobs, size_t count,
			    int64_t rows, int64_t plen, const int32_t *ids, const int32_t *pad,
			    const unsigned char *only)
{
	size_t pos = (size_t)(rows * plen), n = (size_t)rows;
	int scored = 0, logprobs = 0;

	for (size_t i = 0; i < count; i++) {
		const struct fg_request *q = jobs[i]->req;
		if (only && !only[i])
			continue;
		scored |= q->score_prompt;
		logprobs |= q->logprobs;
		if (q->score_prompt && q->top_logprobs > b->pk)
			b->pk = q->top_logprobs;
		if (q->logprobs && q->top_logprobs > b->tk)
			b->tk = q->top_logprobs;
	}
	if (scored) {
		b->target = malloc(pos * sizeof(int32_t));
		b->p = (struct fg_prompt_scores){ b->target, b->pk, malloc(pos * sizeof(float)),
						  malloc(pos * (size_t)b->pk * sizeof(int32_t) + 1),
						  malloc(pos * (size_t)b->pk * sizeof(float) + 1) };
		if (!b->target || !b->p.lp || !b->p.top_id || !b->p.top_lp)
			goto oom;
		for (int64_t r = 0; r < rows; r++) {
			int on = r < (int64_t)count && jobs[r]->req->score_prompt && (!only || only[r]);
			for (int64_t p = 0; p < plen; p++)
				b->target[r * plen + p] = on && p >= pad[r] && p + 1 < plen
								  ? ids[r * plen + p + 1] : -1;
		}
	}
	if (logprobs && !only) {
		b->tok = malloc(n * sizeof(int32_t));
		b->t = (struct fg_token_scores){ b->tk, malloc(n * sizeof(float)),
						 malloc(n * (size_t)b->tk * sizeof(int32_t) + 1),
						 malloc(n * (size_t)b->tk * sizeof(float) + 1) };
		if (!b->tok || !b->t.lp || !b->t.top_id || !b->t.top_lp)
			goto oom;
	}
	return 0;
oom:
	FG_ERR("out of memory for the log-probabilities of %lld x %lld positions", (long long)rows,
	       (long long)plen);
	return -ENOMEM;
}

/* The scored prefill's numbers into each scoring job's prompt arrays (of
 * the rows `only` marks; NULL: all): prompt token i (i >= 1) was scored at
 * position pad + i - 1. */
static void batch_scores_prompt(const struct batch_scores *b, struct fg_job **jobs, size_t count,
				int64_t plen, const int32_t *pad, const unsigned char *only)
{
	for (size_t r = 0; r < count; r++) {
		struct fg_job *j = jobs[r];
		int k = j->req->top_logprobs;

		if (!j->req->score_prompt || (only && !only[r]))
			continue;
		for (size_t i = 1; i < j->n_prompt; i++) {
			size_t at = (size_t)((int64_t)r * plen + pad[r]) + i - 1;
			j->plp[i] = b->p.lp[at];
			if (isnan(j->plp[i]) && j->why != FG_FINISH_ERROR)
				fg_job_fail_nan(j, (long)i); /* logits with no number */
			for (int t = 0; t < k; t++)
				j->ptop[i * (size_t)k + (size_t)t] = (struct fg_logprob){
					b->p.top_id[at * (size_t)b->pk + (size_t)t],
					b->p.top_lp[at * (size_t)b->pk + (size_t)t] };
		}
	}
}

/* Without the device's: the step's tokens scored from host logits. */
static void batch_scores_host(struct batch_scores *b, struct fg_job **jobs, size_t count,
			      const int32_t *next, const float *logits, int64_t vocab)
{
	for (size_t r = 0; r < count; r++)
		b->tok[r] = !jobs[r]->done && jobs[r]->req->logprobs ? next[r] : -1;
	fg_logprob_rows(logits, (int64_t)count, vocab, b->tok, b->tk, b->t.lp, b->t.top_id,
			b->t.top_lp);
}

/* Sampled rows [r0, r1) of a decode step, with a sampler of their own: each
 * row draws from its own request's stream, so the tokens do not depend on
 * how the rows are spread over threads. */
struct sample_rows {
	struct fg_job **jobs;
	const float *logits;
	int64_t vocab, r0, r1;
	struct fg_sampler *smp;
	int32_t *next;
};

/* A sampled job's next token from its row of logits, drawn from its stream. */
static int32_t draw_on_host(struct fg_sampler *smp, struct fg_job *j, const float *row)
{
	const struct fg_request *q = j->req;
	struct fg_sampling sp = { q->temperature, q->top_k, q->top_p };

	return fg_sample(smp, row, &sp, &j->rng);
}

static void sample_rows(void *arg)
{
	const struct sample_rows *w = arg;

	for (int64_t r = w->r0; r < w->r1; r++)
		if (fg_job_samples(w->jobs[r]))
			w->next[r] = draw_on_host(w->smp, w->jobs[r], w->logits + r * w->vocab);
}

/* The sampled rows' next tokens over the CPUs (a row costs up to a
 * millisecond: a step of 256 rows would otherwise take a quarter second on
 * one core).  smp: FG_FANOUT_MAX samplers, made as needed. */
static int sample_step(struct fg_job **jobs, int64_t count, const float *logits, int64_t vocab,
		       struct fg_sampler **smp, int32_t *next)
{
	struct sample_rows w[FG_FANOUT_MAX];
	int64_t sampled = 0;

	for (int64_t r = 0; r < count; r++)
		sampled += fg_job_samples(jobs[r]);
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

/* Before a step: the live sampled rows' parameters and draws (of the rows
 * with only[r] set; NULL: every row); every other row (greedy, finished,
 * padding, not drawn this step) takes the argmax and draws nothing. */
static void device_draws_fill(struct device_draws *d, struct fg_job **jobs, int64_t count,
			      const unsigned char *only)
{
	for (int64_t r = 0; r < count; r++) {
		const struct fg_request *q = jobs[r]->req;
		int s = (!only || only[r]) && fg_job_samples(jobs[r]);

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
	const struct fg_job *x = *(struct fg_job *const *)a, *y = *(struct fg_job *const *)b;
	if (x->req->max_new_tokens != y->req->max_new_tokens)
		return x->req->max_new_tokens > y->req->max_new_tokens ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Idle rows last either way: the rows a step computes end at its last live one. */
static int by_budget_asc(const void *a, const void *b)
{
	const struct fg_job *x = *(struct fg_job *const *)a, *y = *(struct fg_job *const *)b;
	if (x->idle != y->idle)
		return x->idle - y->idle;
	return by_budget_desc(b, a);
}

/* The run for a batch of nb x bs rows, plen prompt tokens and glen new
 * ones: the one in hand when it fits, else a new one, sized to the hint
 * (the larger batches of this shape still to come) when that fits the
 * tiers, so that they reuse it. */
static int batch_forward(struct fg_engine *e, struct fg_batch_run *run, int64_t nb, int64_t bs,
			 int64_t plen, int64_t glen)
{
	struct fg_forward_env env;
	double t0 = fg_now();
	int rc;

	if (run->f && fg_forward_reuse(run->f, nb, bs, plen, glen) == 0)
		return 0;
	fg_batch_run_end(e, run);
	fg_engine_forward_env(e, nb, &env);
	env.policy.gpu_batch_size = bs;
	int64_t hp = run->hint_plen > plen ? run->hint_plen : plen;
	int64_t hg = run->hint_glen > glen ? run->hint_glen : glen;
	/* A pipeline's stages make runs of the shape each batch announces. */
	if (e->dist || hp + hg > e->model.cfg.max_pos ||
	    ((hp != plen || hg != glen) && fg_forward_check(&env, hp, hg) != 0))
		hp = plen, hg = glen;
	rc = fg_forward_new(&run->f, &env, hp, hg);
	if (!rc) {
		e->stats.runs++;
		/* made larger, for the batches to come: this one's shape */
		if ((hp != plen || hg != glen) && (rc = fg_forward_reuse(run->f, nb, bs, plen, glen)))
			FG_ERR("a run made for %lld + %lld positions does not take %lld + %lld",
			       (long long)hp, (long long)hg, (long long)plen, (long long)glen);
	}
	e->stats.run_setup_s += fg_now() - t0;
	return rc;
}

void fg_batch_run_end(struct fg_engine *e, struct fg_batch_run *run)
{
	double t0 = fg_now();

	if (!run->f)
		return;
	fg_forward_free(run->f);
	run->f = NULL;
	e->stats.run_setup_s += fg_now() - t0;
}

/* A row of `width` ids: len tokens of p, after pad ids; its pad. */
static int32_t left_pad(const struct fg_model_config *c, int32_t *row, int64_t width,
			const int32_t *p, int64_t len)
{
	int64_t pad = width - len;

	for (int64_t i = 0; i < width; i++)
		row[i] = i < pad ? c->pad_id : p[i - pad];
	return (int32_t)pad;
}

/* What a running batch offers a job that would join it (fg_forward_join):
 * the run's current column, its columns and prompt columns, whether they
 * wrap; the tops of log-probabilities it computes a token (-1: none); how it
 * draws sampled rows' tokens. */
struct join_room {
	int64_t col, total, cap;
	int wraps, scores_k;
	int echo;                /* prompts scored as they join (not in a pipeline) */
	struct device_draws *dd; /* where the logits are (NULL: not there) */
	float *logits;           /* or on the host from these (NULL: neither) */
	struct fg_sampler **smp; /* (the host's samplers) */
};

/* Can job j take a finished row's place (an echoed one's prompt is scored
 * in the join's step, where the run can): its log-probabilities (if any)
 * within what the batch computes, its prompt within the columns computed
 * and the run's buffers, its budget within the columns left (where the
 * columns wrap, its prompt and budget within them); a sampled job where the
 * batch draws tokens (with log-probabilities: where the logits are, which
 * scores the drawn token). */
static int joinable(const struct fg_job *j, const struct join_room *m)
{
	const struct fg_request *q = j->req;
	int64_t n = (int64_t)j->n_prompt;

	return !q->known && !j->done && (!q->score_prompt || m->echo) &&
	       (!q->logprobs || q->top_logprobs <= m->scores_k) && q->max_new_tokens > 0 &&
	       n <= m->col && n <= m->cap && (m->wraps ? n : m->col) + q->max_new_tokens <= m->total &&
	       (q->temperature <= 0 || m->dd || (m->logits && !q->logprobs));
}

/* Requests arriving meanwhile (a server's) join as soon as a row is free,
 * but a join step holds every row up: after one, decode steps lasting
 * (1 / refill - 1) times it pass first, so that joins take about `refill`
 * of the time at most and a request waits about that long to join. */
static int join_due(const struct fg_engine *e, const struct fg_batch_run *run)
{
	double r = e->policy.refill;

	return run->top_up && fg_now() - run->join_end >= run->join_took * (1 - r) / r;
}

/* How far down the waiting jobs a finished row looks for one that can join. */
#define JOIN_LOOKAHEAD 256

/* Continuous batching, between decode steps: each finished row's job goes
 * out (run->finished) and the row takes the next waiting job while one can
 * join; the joined rows' prompts are computed (fg_forward_join) and their
 * first tokens accepted into next[] and row_live[].  The number that
 * joined, or -errno. */
static int refill(struct fg_engine *e, struct fg_batch_run *run, struct fg_job **jobs,
		  size_t count, int64_t rows, int32_t *next, unsigned char *row_live,
		  const struct batch_scores *sc, struct join_room *m)
{
	const struct fg_model_config *c = &e->model.cfg;
	int64_t n = 0;
	unsigned char *on = NULL;
	int32_t *ids = NULL, *pad = NULL, *top = NULL;
	struct batch_scores js = { 0 }; /* echoed joining prompts' */
	int joined = 0, rc = 0;

	size_t free_rows = 0, live = 0;
	for (size_t r = 0; r < count; r++) {
		if (jobs[r]->done && !jobs[r]->handed)
			run->finished(run->arg, jobs[r]); /* (marks it handed) */
		free_rows += jobs[r]->handed;
		live += !jobs[r]->done;
	}
	/* Rows join a few at a time ([policy] refill), or when the batch
	 * would end; none once the caller stops. */
	if ((run->stop && *run->stop) || (run->halt && *run->halt))
		return 0;
	if (!free_rows || (live && (double)free_rows < e->policy.refill * (double)count &&
			   !join_due(e, run)))
		return 0;
	if (run->top_up && run->taken == run->n_wait)
		run->top_up(run->arg);
	fg_forward_columns(run->f, &m->col, &m->total, &m->cap);
	m->wraps = fg_forward_wraps(run->f);
	/* A waiting request that cannot join has waited long enough: the
	 * batch takes no one else, it ends, the next one takes it. */
	for (size_t i = run->taken; run->top_up && i < run->n_wait && i < run->taken + JOIN_LOOKAHEAD;
	     i++)
		if (!joinable(run->wait[i], m) &&
		    fg_now() - run->wait[i]->queued_at >= run->wait_s)
			return 0;
	for (size_t r = 0; r < count && run->taken < run->n_wait; r++) {
		if (!jobs[r]->handed)
			continue;
		/* The first waiting job that can join, among the next few: an
		 * echoed one does not hold up the others behind it.  It moves to the front of the waiting ones, which keep
		 * their order. */
		size_t i = run->taken, end = run->n_wait - run->taken > JOIN_LOOKAHEAD
						     ? run->taken + JOIN_LOOKAHEAD
						     : run->n_wait;
		while (i < end && !joinable(run->wait[i], m))
			i++;
		if (i == end)
			break;
		struct fg_job *pick = run->wait[i];
		memmove(run->wait + run->taken + 1, run->wait + run->taken,
			(i - run->taken) * sizeof(*run->wait));
		run->wait[run->taken] = pick;
		struct fg_job **w = &run->wait[run->taken];
		if (!on && !(on = calloc((size_t)rows, 1)))
			return -ENOMEM;
		struct fg_job *t = jobs[r];
		jobs[r] = *w; /* the finished job, handed out, stays where the joined one was */
		*w = t;
		run->taken++;
		on[r] = 1;
		n = (int64_t)jobs[r]->n_prompt > n ? (int64_t)jobs[r]->n_prompt : n;
		joined++;
	}
	if (!joined)
		return 0;
	ids = malloc(sizeof(int32_t) * (size_t)(rows * n));
	pad = calloc((size_t)rows, sizeof(int32_t));
	top = malloc(sizeof(int32_t) * (size_t)rows);
	if (!ids || !pad || !top) {
		FG_ERR("out of memory for %d joining requests", joined);
		rc = -ENOMEM;
		goto out;
	}
	int sampled = 0;
	for (int64_t r = 0; r < rows; r++) {
		pad[r] = left_pad(c, ids + r * n, n, on[r] ? jobs[r]->prompt : NULL,
				  on[r] ? (int64_t)jobs[r]->n_prompt : 0);
		sampled |= on[r] && fg_job_samples(jobs[r]);
	}
	/* Sampled joining rows' first tokens: drawn where the logits are from
	 * their own streams (the other rows take the argmax: not read), or on
	 * the host from the join's logits. */
	if (m->dd)
		device_draws_fill(m->dd, jobs, (int64_t)count, on);
	float *jl = sampled && !m->dd ? m->logits : NULL;
	if (jl && !m->smp[0] && (rc = fg_sampler_new(&m->smp[0], c->vocab)))
		goto out;
	/* echoed joining prompts: scored in the join's step */
	int echo = 0;
	for (int64_t r = 0; r < rows; r++)
		echo |= on[r] && jobs[r]->req->score_prompt;
	if (echo && (rc = batch_scores_new(&js, jobs, count, rows, n, ids, pad, on)))
		goto out;
	double t0 = fg_now();
	if ((rc = fg_forward_join(run->f, on, ids, pad, n, jl, top, echo ? &js.p : NULL)))
		goto out;
	run->join_end = fg_now();
	run->join_took = run->join_end - t0;
	if (echo)
		batch_scores_prompt(&js, jobs, count, n, pad, on);
	e->stats.joined += (uint64_t)joined;

	for (int64_t r = 0; r < rows; r++) {
		if (!on[r])
			continue;
		next[r] = jl && fg_job_samples(jobs[r])
				  ? draw_on_host(m->smp[0], jobs[r], jl + r * c->vocab)
				  : top[r];
		fg_job_accept(e, jobs[r], next[r], sc->tok ? sc->t.lp[r] : 0,
			      sc->tok ? sc->t.top_id + r * sc->tk : NULL,
			      sc->tok ? sc->t.top_lp + r * sc->tk : NULL);
		if (next[r] < 0)
			next[r] = c->pad_id;
		row_live[r] = !jobs[r]->done;
	}
out:
	batch_scores_free(&js);
	free(on);
	free(ids);
	free(pad);
	free(top);
	return rc ? rc : joined;
}

/* What the batch's steps computed and moved, into the engine's counts. */
static void count_stats(struct fg_engine *e, const struct fg_forward_stats *a,
			const struct fg_forward_stats *b)
{
	struct fg_run_stats *s = &e->stats;

	s->positions += b->positions - a->positions;
	s->dead_positions += b->dead_positions - a->dead_positions;
	s->shared_positions += b->shared_positions - a->shared_positions;
	s->logits_s += b->logits_s - a->logits_s;
	s->weight_bytes += b->weight_bytes - a->weight_bytes;
	s->cache_bytes += b->cache_bytes - a->cache_bytes;
	s->hidden_bytes += b->hidden_bytes - a->hidden_bytes;
	s->cache_skipped_bytes += b->cache_skipped - a->cache_skipped;
	s->disk_read_bytes += b->disk_read_bytes - a->disk_read_bytes;
	for (int r = 0; r < FG_ROLES; r++) {
		s->read_bytes[fg_public_tier(r)] += b->loaded[r] - a->loaded[r];
		s->written_bytes[fg_public_tier(r)] += b->stored[r] - a->stored[r];
	}
}

int fg_batch_run(struct fg_engine *e, struct fg_batch_run *run, struct fg_job **jobs,
		 size_t count)
{
	const struct fg_model_config *c = &e->model.cfg;
	int64_t bs = e->policy.gpu_batch_size, nb = ((int64_t)count + bs - 1) / bs;
	int64_t plen = 0, glen = 0;
	struct fg_forward *f = NULL;
	struct fg_forward_stats before = { 0 };
	struct fg_sampler *smp[FG_FANOUT_MAX] = { NULL };
	struct device_draws dd = { 0 };
	struct fg_region lr = { 0 };
	int32_t *ids = NULL, *pad = NULL, *next = NULL, *top = NULL;
	unsigned char *row_live = NULL;
	int greedy = 1, on_device = 0, dev_scores = 0, refilling = 0;
	struct batch_scores sc = { 0 };
	float *logits = NULL;
	double t0 = 0;
	int rc;

	/* The fewest GPU batches, the requests spread evenly over them (a
	 * row's numbers depend on its batch's shape: one process and a
	 * pipeline shape a batch alike); the rows after the requests are left
	 * out (fg_forward_set_filled_rows). */
	bs = ((int64_t)count + nb - 1) / nb;
	int64_t rows = bs * nb;
	int64_t share = e->policy.share_prefix;
	struct fg_prefix_share sh = { 0 };
	int32_t *src = NULL, *from = NULL;
	int64_t *end = NULL;
	unsigned char *rank = share ? malloc((size_t)rows) : NULL;
	if (!rank)
		share = 0; /* (out of memory: nothing shared, only slower) */
	/* Each GPU batch keeps its rows (its padding): longest budget first (a
	 * step computes rows up to the last live one), with waiting jobs to
	 * join shortest first (a join computes rows up to the last joining one,
	 * and the rows that finish first are those), or with shared prefixes in
	 * groups that begin alike. */
	int may_join = (run->n_wait || run->top_up) && e->policy.refill > 0;
	for (int64_t g = 0; g * bs < (int64_t)count; g++) {
		size_t a = (size_t)(g * bs), n = count - a < (size_t)bs ? count - a : (size_t)bs;
		if (share)
			fg_share_group(jobs + a, n, share, rank + a);
		else
			qsort(jobs + a, n, sizeof(*jobs), may_join ? by_budget_asc : by_budget_desc);
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
	/* All-greedy batches only need each row's top token, not its logits. */
	for (size_t i = 0; i < count; i++)
		greedy &= jobs[i]->req->temperature <= 0;
	if (!ids || !pad || !next || !top || !row_live) {
		FG_ERR("out of memory for a batch of %lld x %lld tokens", (long long)rows,
		       (long long)plen);
		rc = -ENOMEM;
		goto out;
	}
	/* Left-pad every prompt to plen; rows beyond count hold a lone bos. */
	for (int64_t r = 0; r < rows; r++) {
		int held = r < (int64_t)count;
		pad[r] = left_pad(c, ids + r * plen, plen, held ? jobs[r]->prompt : &c->bos_id,
				  held ? (int64_t)jobs[r]->n_prompt : 1);
	}
	if (share) {
		src = malloc(sizeof(int32_t) * (size_t)(2 * rows));
		from = malloc(sizeof(int32_t) * (size_t)(2 * rows));
		end = malloc(sizeof(int64_t) * (size_t)(2 * rows));
		if (!src || !from || !end) {
			FG_ERR("out of memory for a batch of %lld rows", (long long)rows);
			rc = -ENOMEM;
			goto out;
		}
		struct fg_share_plan sp = {
			.jobs = jobs, .count = (int64_t)count, .rows = rows, .bs = bs, .plen = plen,
			.least = share, .pad = pad, .rank = rank, .src = { src, src + rows },
			.from = { from, from + rows }, .end = { end, end + rows },
		};
		fg_share_plan(&sp, &sh);
	}
	if ((rc = batch_scores_new(&sc, jobs, count, rows, plen, ids, pad, NULL)) ||
	    (rc = batch_forward(e, run, nb, bs, plen, glen)))
		goto out;
	f = run->f;
	if (sh.levels)
		fg_forward_set_shared_prefix(f, &sh);
	before = *fg_forward_stats(f);
	t0 = fg_now();
	/* New tokens' log-probabilities are taken where the logits are when the
	 * backend can; else they need the logits on the host. */
	dev_scores = sc.tok && fg_forward_set_token_scores(f, &sc.t) == 0;
	greedy &= !sc.tok || dev_scores;
	/* Sampled rows are drawn where the logits are when the backend can (no
	 * logits cross to the host); a greedy batch that rows may join draws so
	 * too (greedy rows take the argmax), so that sampled ones can join it,
	 * or keeps room for logits on the host, to draw them there. */
	if ((!greedy || may_join) && (!sc.tok || dev_scores) && !(rc = device_draws_new(&dd, rows)) &&
	    fg_forward_set_sampling(f, &dd.s) == 0)
		on_device = 1;
	if (dev_scores && !greedy && !on_device) { /* sampled on the host: scored there */
		fg_forward_set_token_scores(f, NULL);
		dev_scores = 0;
	}
	if (rc || ((!greedy || may_join) && !on_device && (rc = alloc_logits(e, rows, &lr))))
		goto out;
	logits = lr.addr;
	if (on_device)
		device_draws_fill(&dd, jobs, (int64_t)count, NULL);
	/* A partly filled batch computes its requests' rows only (idle rows,
	 * for requests to come, are the last ones). */
	int64_t filled = (int64_t)count;
	while (filled > 1 && jobs[filled - 1]->idle)
		filled--;
	fg_forward_set_filled_rows(f, filled);
	if ((rc = sc.target ? fg_forward_prefill_scored(f, ids, pad, greedy ? NULL : logits, top,
							&sc.p)
			    : fg_forward_prefill(f, ids, pad, greedy ? NULL : logits, top)))
		goto out;
	if (sc.target)
		batch_scores_prompt(&sc, jobs, count, plen, pad, NULL);
	/* Continuous batching (in a pipeline, on every stage). */
	refilling = run->wait && (run->n_wait || run->top_up) && run->finished &&
		    e->policy.refill > 0;
	struct join_room room = { .scores_k = dev_scores ? sc.tk : -1, .echo = !e->dist,
				  .dd = on_device ? &dd : NULL, .logits = logits, .smp = smp };
	for (int64_t t = 0;; t++) {
		int live = 0;
		/* A finished row's token and logits are garbage: never read. */
		if (!on_device && logits &&
		    (rc = sample_step(jobs, (int64_t)count, logits, c->vocab, smp, next)))
			goto out;
		for (int64_t r = 0; r < (int64_t)count; r++)
			if (on_device || !fg_job_samples(jobs[r]))
				next[r] = top[r];
		if (sc.tok && !dev_scores)
			batch_scores_host(&sc, jobs, count, next, logits, c->vocab);
		for (int64_t r = 0; r < rows; r++) {
			row_live[r] = 0;
			if (r >= (int64_t)count || jobs[r]->done) {
				next[r] = c->pad_id;
				continue;
			}
			fg_job_accept(e, jobs[r], next[r], sc.tok ? sc.t.lp[r] : 0,
				      sc.tok ? sc.t.top_id + r * sc.tk : NULL,
				      sc.tok ? sc.t.top_lp + r * sc.tk : NULL);
			if (next[r] < 0) /* logits with no number: the job failed */
				next[r] = c->pad_id;
			live += !jobs[r]->done;
			row_live[r] = !jobs[r]->done;
		}
		if (refilling && (run->taken < run->n_wait || run->top_up)) {
			int got = refill(e, run, jobs, count, rows, next, row_live, &sc, &room);
			if (got < 0) {
				rc = got;
				goto out;
			}
			live = 0;
			for (int64_t r = 0; r < (int64_t)count; r++)
				live += row_live[r] != 0;
		}
		if (!live || (!refilling && t + 1 >= glen))
			break;
		if (run->poll)
			run->poll(run->poll_arg);
		/* A hard stop drops the batch here, between steps. */
		if (run->abandon && *run->abandon) {
			FG_ERR("the batch was abandoned after %lld of up to %lld new tokens: a hard stop",
			       (long long)t + 1, (long long)glen);
			rc = -ECANCELED;
			goto out;
		}
		/* A finished row no longer costs its attention and cache traffic,
		 * a GPU batch whose rows have all finished nothing at all. */
		fg_forward_set_live_rows(f, row_live);
		if (on_device)
			device_draws_fill(&dd, jobs, (int64_t)count, NULL);
		/* the logits on the host: where rows are drawn or scored there */
		int host = sc.tok && !dev_scores;
		for (int64_t r = 0; logits && !on_device && !host && r < (int64_t)count; r++)
			host = fg_job_samples(jobs[r]);
		if ((rc = fg_forward_decode(f, next, host ? logits : NULL, top)))
			goto out;
	}
out:
	if (lr.size)
		fg_tier_free(e->tier[FG_ROLE_HOST], &lr);
	if (f) {
		count_stats(e, &before, fg_forward_stats(f));
		e->stats.compute_s += fg_now() - t0;
		/* A failed step may leave the run in any state: make the next anew. */
		if (rc)
			fg_batch_run_end(e, run);
	}
	device_draws_free(&dd);
	batch_scores_free(&sc);
	free(row_live);
	for (int t = 0; t < FG_FANOUT_MAX; t++)
		fg_sampler_free(smp[t]);
	free(src);
	free(from);
	free(end);
	free(rank);
	free(ids);
	free(pad);
	free(next);
	free(top);
	return rc;
}
