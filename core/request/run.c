/* core/request/run.c - many requests through the engine (fg_run,
 * fg_generate): each read once, refused ones answered at once, the rest in
 * length buckets cut into effective batches that fit the model's
 * positions, a failed batch rerun one request at a time, every result
 * handed back as its batch ends, and the counts of what ran.  Known
 * requests (a resumed job's) take their places in the batches and get no
 * result. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/engine.h"
#include "core/request/job.h"
#include "core/util/clock.h"
#include "core/util/error.h"

/* A prompt length's bucket: exact up to 16, then its top four bits
 * (lengths within 1/8 of each other share one), so a bucket's padding is at
 * most ~12%. */
static unsigned length_class(size_t len)
{
	unsigned b = 0;

	if (len <= 16)
		return (unsigned)len;
	for (size_t v = len; v > 1; v >>= 1)
		b++;
	return 16 + b * 8 + (unsigned)((len >> (b - 3)) & 7);
}

/* Buckets, then budgets (a batch's rows end together), then lengths. */
static int by_bucket(const void *a, const void *b)
{
	const struct fg_job *x = *(struct fg_job *const *)a, *y = *(struct fg_job *const *)b;
	unsigned cx = length_class(x->n_prompt), cy = length_class(y->n_prompt);

	if (cx != cy)
		return cx < cy ? -1 : 1;
	if (x->req->max_new_tokens != y->req->max_new_tokens)
		return x->req->max_new_tokens < y->req->max_new_tokens ? -1 : 1;
	if (x->n_prompt != y->n_prompt)
		return x->n_prompt < y->n_prompt ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* With shared prefixes: buckets, budgets, then the prompts' tokens in
 * order (a walk of their trie), so that prompts beginning alike share
 * batches; a prompt before those it begins. */
static int by_bucket_tokens(const void *a, const void *b)
{
	const struct fg_job *x = *(struct fg_job *const *)a, *y = *(struct fg_job *const *)b;
	unsigned cx = length_class(x->n_prompt), cy = length_class(y->n_prompt);

	int o = cx != cy || x->req->max_new_tokens != y->req->max_new_tokens
			? 0
			: fg_share_token_order(x, y);

	return o ? o : by_bucket(a, b);
}

struct runner {
	struct fg_engine *e;
	const struct fg_run_opts *o;
	int fail_fast;         /* fg_generate: a failed batch fails the call */
	struct fg_batch_run run;
	long handed;
	int stop;              /* a callback asked to stop */
	struct fg_run_progress prog;
	/* the jobs (room for n + more_max), those read so far, and the order
	 * they run in: the `live` ones not refused */
	struct fg_job *jobs;
	struct fg_job **order;
	size_t made, room, live;
	/* With requests arriving (fg_run_opts.more), a batch of fewer jobs than
	 * the effective batch gets free rows (idle: done, handed) for them to
	 * join: batch[] holds its jobs and those. */
	struct fg_job **batch, *idle;
	double last_end;       /* when on_batch_end was last called */
};

/* An idle row's request: nothing to compute. */
static const struct fg_request idle_request;

/* jobs[0..cnt) and idle rows up to eff, in r->batch. */
static struct fg_job **with_idle_rows(struct runner *r, struct fg_job **jobs, size_t cnt,
				      size_t eff)
{
	memcpy(r->batch, jobs, cnt * sizeof(*jobs));
	for (size_t k = cnt; k < eff; k++) {
		struct fg_job *j = &r->idle[k];
		memset(j, 0, sizeof(*j));
		j->index = SIZE_MAX;
		j->req = &idle_request;
		j->prompt = &r->e->model.cfg.bos_id;
		j->n_prompt = 1;
		j->done = j->handed = j->idle = 1;
		r->batch[k] = j;
	}
	return r->batch;
}

/* The work a job adds to the progress (a known one's is done already). */
static uint64_t work_of(const struct fg_job *j)
{
	return j->req->known ? 0 : j->n_prompt + (uint64_t)j->req->max_new_tokens;
}

static void hand(struct runner *r, size_t index, struct fg_result *res)
{
	r->e->stats.requests++;
	r->e->stats.failed += res->finish_reason == FG_FINISH_ERROR;
	r->handed++;
	r->prog.requests_done++;
	double t0 = fg_now();
	if (r->o->on_result(r->o->arg, index, res))
		r->stop = 1;
	r->e->stats.callback_s += fg_now() - t0;
}

/* A request's own error as its result (refused: the request is at fault). */
static void hand_error(struct runner *r, size_t index, const char *why, int refused)
{
	struct fg_result res = { .finish_reason = FG_FINISH_ERROR, .refused = refused };

	res.error = strdup(why);
	hand(r, index, &res);
}

/* The job's result; what it computed counts as useful when it ran. */
static void hand_done(struct runner *r, struct fg_job *j, int ran)
{
	struct fg_result res;
	struct fg_run_stats *s = &r->e->stats;

	if (j->req->known || j->handed)
		return;
	j->handed = 1;
	if (fg_job_finish(r->e, j, &res)) {
		fg_result_clear(&res);
		hand_error(r, j->index, fg_last_error(), 0);
		return;
	}
	r->prog.work_done += work_of(j);
	s->prompt_tokens += res.n_prompt_tokens;
	s->generated_tokens += res.n_tokens;
	if (ran)
		s->useful_positions += res.n_prompt_tokens + (res.n_tokens ? res.n_tokens - 1 : 0);
	hand(r, j->index, &res);
}

/* A job done while its batch goes on (continuous batching): out now, and
 * about every second the caller's batch-end callback (its records reach the
 * disk while a batch that rows join goes on). */
static void hand_early(void *arg, struct fg_job *j)
{
	struct runner *r = arg;

	hand_done(r, j, 1);
	double t0 = fg_now();
	if (r->o->on_batch_end && t0 - r->last_end >= 1.0) {
		r->last_end = t0;
		if (r->o->on_batch_end(r->o->arg, &r->prog))
			r->stop = 1;
		r->e->stats.callback_s += fg_now() - t0;
	}
}

/* Requests arriving while the call runs (fg_run_opts.more): read and put
 * after the others; a batch running takes them from its wait list.  How
 * many came. */
static int top_up(void *arg)
{
	struct runner *r = arg;
	const struct fg_request *got[64];
	size_t want = r->room - r->made, n;
	int came = 0;

	if (!r->o->more || r->stop || !want)
		return 0;
	double t0 = fg_now();
	n = r->o->more(r->o->arg, got, want < 64 ? want : 64);
	r->e->stats.callback_s += fg_now() - t0;
	for (size_t i = 0; i < n && r->made < r->room; i++) {
		struct fg_job *j = &r->jobs[r->made];
		j->index = r->made++;
		j->req = got[i];
		j->queued_at = fg_now();
		if (fg_job_prepare(r->e, j)) {
			fg_job_free(j);
			if (!j->req->known)
				hand_error(r, j->index, fg_last_error(), 1);
			continue;
		}
		r->order[r->live++] = j;
		r->prog.requests += !j->req->known;
		r->prog.work_total += work_of(j);
		came++;
	}
	/* a running batch's wait list is the jobs after it */
	if (r->run.wait)
		r->run.n_wait = (size_t)(r->order + r->live - r->run.wait);
	return came;
}

/* A hard stop: the batch in flight is dropped, nothing more runs. */
static int abandoned(const struct runner *r)
{
	return r->o->abandon && *r->o->abandon;
}

/* One batch; if it does not fit the tiers, its halves; if it fails as a
 * whole, each request alone (unless it has streamed: a rerun would send its
 * tokens twice).  An abandoned batch's requests get no result. */
static int run_batch(struct runner *r, struct fg_job **jobs, size_t cnt)
{
	struct fg_engine *e = r->e;
	int any = 0, unknown = 0, rc;

	/* Requests with nothing to generate or score need no forward pass, and
	 * a batch of known results none either. */
	for (size_t k = 0; k < cnt; k++) {
		any |= !jobs[k]->done || jobs[k]->req->score_prompt;
		unknown |= !jobs[k]->req->known;
	}
	if (!unknown)
		return 0;
	if (!any) {
		for (size_t k = 0; k < cnt; k++)
			hand_done(r, jobs[k], 0);
		return 0;
	}
	rc = fg_batch_run(e, &r->run, jobs, cnt);
	r->run.n_wait = 0; /* (reruns take no waiting jobs) */
	r->run.top_up = NULL;
	if (rc == 0) {
		e->stats.batches++;
		for (size_t k = 0; k < cnt; k++)
			hand_done(r, jobs[k], 1);
		return 0;
	}
	if (rc == -ECANCELED && abandoned(r)) {
		r->stop = 1;
		return 0;
	}
	if (r->fail_fast)
		return rc;
	/* Too large for the tiers (longer prompts than gpu_batch_size was
	 * chosen for): in halves, each sized anew, before one at a time. */
	if (rc == -ENOSPC && cnt > 1) {
		int streamed = 0;
		/* (a job joined and out is not rerun as a batch either) */
		for (size_t k = 0; k < cnt; k++)
			streamed |= jobs[k]->streamed || jobs[k]->handed;
		if (!streamed) {
			FG_LOG(FG_LOG_INFO, "a batch of %zu requests does not fit (%s): in halves", cnt,
			       fg_last_error());
			for (size_t k = 0; k < cnt; k++)
				fg_job_rewind(jobs[k]);
			if ((rc = run_batch(r, jobs, cnt / 2)) || r->stop)
				return rc;
			return run_batch(r, jobs + cnt / 2, cnt - cnt / 2);
		}
	}
	if (cnt == 1) {
		hand_error(r, jobs[0]->index, fg_last_error(), 0);
		return 0;
	}
	FG_LOG(FG_LOG_WARN, "a batch of %zu requests failed (%s): running them one at a time", cnt,
	       fg_last_error());
	e->stats.retried_batches++;
	for (size_t k = 0; k < cnt; k++) {
		struct fg_job *j = jobs[k];
		char why[1024];

		if (j->req->known || j->handed)
			continue;
		if (j->streamed) {
			snprintf(why, sizeof(why), "its batch failed after it had streamed tokens: %s",
				 fg_last_error());
			hand_error(r, j->index, why, 0);
			continue;
		}
		if (abandoned(r)) {
			r->stop = 1;
			return 0;
		}
		fg_job_rewind(j);
		if ((rc = fg_batch_run(e, &r->run, &j, 1)) == 0) {
			e->stats.batches++;
			hand_done(r, j, 1);
		} else if (rc == -ECANCELED && abandoned(r)) {
			r->stop = 1;
			return 0;
		} else {
			hand_error(r, j->index, fg_last_error(), 0);
		}
	}
	return 0;
}

static long run_requests(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			 const struct fg_run_opts *o, int fail_fast)
{
	size_t room = n + (o->more ? o->more_max : 0);
	struct fg_job *jobs = calloc(room ? room : 1, sizeof(*jobs));
	struct fg_job **order = calloc(room ? room : 1, sizeof(*order));
	int64_t *hint_p = calloc(n + 1, sizeof(*hint_p)), *hint_g = calloc(n + 1, sizeof(*hint_g));
	struct runner r = { .e = e, .o = o, .fail_fast = fail_fast,
			    .run = { .f = e->kept, .abandon = o->abandon },
			    .jobs = jobs, .order = order, .made = n, .room = room };
	size_t eff = (size_t)(e->policy.gpu_batch_size * e->policy.num_gpu_batches);
	int64_t maxpos = e->model.cfg.max_pos;
	double t0 = fg_now();
	long rc = 0;

	if (!jobs || !order || !hint_p || !hint_g) {
		FG_ERR("out of memory for %zu requests", room);
		rc = -ENOMEM;
		goto out;
	}
	if (eff < 1)
		eff = 1;
	if (o->more && e->policy.refill > 0 &&
	    (!(r.batch = calloc(eff, sizeof(*r.batch))) || !(r.idle = calloc(eff, sizeof(*r.idle))))) {
		FG_ERR("out of memory for a batch of %zu rows", eff);
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		jobs[i].index = i;
		jobs[i].req = &reqs[i];
		jobs[i].queued_at = t0;
		if (fg_job_prepare(e, &jobs[i])) {
			fg_job_free(&jobs[i]);
			if (!reqs[i].known)
				hand_error(&r, i, fg_last_error(), 1);
			continue;
		}
		order[r.live++] = &jobs[i];
		r.prog.work_total += work_of(&jobs[i]);
	}
	for (size_t i = 0; i < n; i++)
		r.prog.requests += !reqs[i].known;
	if (!o->input_order)
		qsort(order, r.live, sizeof(*order),
		      e->policy.share_prefix ? by_bucket_tokens : by_bucket);
	/* The largest prompt and budget from each batch on: a run made for a
	 * batch is sized for those still to come, when they fit.  Requests
	 * still to arrive may be as long as the model's positions allow. */
	for (size_t i = r.live; i-- > 0;) {
		hint_p[i] = hint_p[i + 1] > (int64_t)order[i]->n_prompt ? hint_p[i + 1]
									 : (int64_t)order[i]->n_prompt;
		hint_g[i] = hint_g[i + 1] > order[i]->req->max_new_tokens
				    ? hint_g[i + 1]
				    : order[i]->req->max_new_tokens;
	}
	for (size_t i = 0, cnt; !r.stop; i += cnt) {
		int64_t plen = 0, glen = 0;

		if ((o->stop && *o->stop) || abandoned(&r))
			break;
		if (i == r.live && !top_up(&r))
			break;
		/* Up to the effective batch, and no batch whose longest prompt plus
		 * largest budget exceeds the model's positions. */
		for (cnt = 0; i + cnt < r.live && cnt < eff; cnt++) {
			const struct fg_job *j = order[i + cnt];
			int64_t p = plen > (int64_t)j->n_prompt ? plen : (int64_t)j->n_prompt;
			int64_t g = glen > j->req->max_new_tokens ? glen : j->req->max_new_tokens;
			if (cnt && p + g > maxpos)
				break;
			plen = p;
			glen = g;
		}
		r.run.hint_plen = i < n ? hint_p[i] : 0;
		r.run.hint_glen = i < n ? hint_g[i] : 0;
		if (o->more && r.run.hint_plen + r.run.hint_glen < maxpos) {
			int64_t p = maxpos - r.run.hint_glen < maxpos / 2 ? maxpos - r.run.hint_glen
									  : maxpos / 2;
			r.run.hint_plen = r.run.hint_plen > p ? r.run.hint_plen : p;
			r.run.hint_glen = maxpos - r.run.hint_plen;
		}
		/* the jobs after the batch may take its finished rows' places */
		r.run.wait = order + i + cnt;
		r.run.n_wait = r.live - i - cnt;
		r.run.taken = 0;
		r.run.finished = hand_early;
		r.run.top_up = o->more ? top_up : NULL;
		r.run.wait_s = o->more_wait_ms * 1e-3;
		r.run.arg = &r;
		r.run.stop = o->stop;
		r.run.halt = &r.stop;
		r.last_end = fg_now();
		if ((rc = run_batch(&r, r.batch ? with_idle_rows(&r, order + i, cnt, eff) : order + i,
				    r.batch ? eff : cnt)))
			break;
		r.run.wait = NULL;
		cnt += r.run.taken;
		double t1 = fg_now();
		if (o->on_batch_end && o->on_batch_end(o->arg, &r.prog))
			r.stop = 1;
		e->stats.callback_s += fg_now() - t1;
	}
	if (!rc)
		rc = r.handed;
out:
	/* A run kept for the next call, or freed (fg_generate's calls leave
	 * the tiers as they found them). */
	e->kept = NULL;
	if (o->keep_run && !fail_fast)
		e->kept = r.run.f;
	else
		fg_batch_run_end(e, &r.run);
	for (size_t i = 0; jobs && i < r.made; i++)
		fg_job_free(&jobs[i]);
	free(jobs);
	free(order);
	free(hint_p);
	free(hint_g);
	free(r.batch);
	free(r.idle);
	return rc;
}

long fg_run(struct fg_engine *e, const struct fg_request *reqs, size_t n,
	    const struct fg_run_opts *o)
{
	if (!o || !o->on_result) {
		FG_ERR("fg_run: no on_result callback");
		return -EINVAL;
	}
	return run_requests(e, reqs, n, o, 0);
}

static int collect(void *arg, size_t index, struct fg_result *res)
{
	struct fg_result *results = arg;

	results[index] = *res;
	return 0;
}

int fg_generate(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		struct fg_result *results)
{
	struct fg_run_opts o = { .on_result = collect, .arg = results };

	memset(results, 0, sizeof(*results) * n);
	long rc = run_requests(e, reqs, n, &o, 1);
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			fg_result_clear(&results[i]);
		return (int)rc;
	}
	return 0;
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
