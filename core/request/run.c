/* core/request/run.c - many requests through the engine (fg_run,
 * fg_generate): each read once, refused ones answered at once, the rest in
 * length buckets cut into effective batches that fit the model's
 * positions, a failed batch rerun one request at a time, every result
 * handed back as its batch ends, and the counts of what ran.  Known
 * requests (a resumed job's) take their places in the batches and get no
 * result.  In a job of replicas, rank 0 hands the batches to the replicas
 * as they free up, running some itself. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/dist.h"
#include "core/engine/engine.h"
#include "core/request/job.h"
#include "core/request/replicas.h"
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
	int64_t *hint_p, *hint_g; /* the largest prompt and budget from order[i] on */
	size_t n;              /* the caller's requests (the rest arrived by more()) */
	/* A job of replicas (rank 0): order[next..live) not yet handed to one;
	 * jobs a lost replica left, to hand again; a failed piece's outcome
	 * (fail_fast). */
	struct fg_replicas *rs;
	struct fg_replicas_events ev;
	size_t next;
	struct fg_job **retry;
	size_t n_retry;
	long failed;
	char why[1024];
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

/* To the caller (the engine's counts are the caller's business: hand). */
static void give(struct runner *r, size_t index, struct fg_result *res)
{
	r->handed++;
	r->prog.requests_done++;
	double t0 = fg_now();
	if (r->o->on_result(r->o->arg, index, res))
		r->stop = 1;
	r->e->stats.callback_s += fg_now() - t0;
}

static void hand(struct runner *r, size_t index, struct fg_result *res)
{
	r->e->stats.requests++;
	r->e->stats.failed += res->finish_reason == FG_FINISH_ERROR;
	give(r, index, res);
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

	if (j->handed)
		return;
	/* (a known one hands nothing, but its row is free as in the first run) */
	j->handed = 1;
	if (j->req->known)
		return;
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

/* The caller's batch-end callback, at most about once a second, while a
 * batch goes on (its records reach the disk meanwhile); last_end 0 calls
 * it now. */
static void pause_point(struct runner *r)
{
	double t0 = fg_now();
	if (r->o->on_batch_end && t0 - r->last_end >= 1.0) {
		r->last_end = t0;
		if (r->o->on_batch_end(r->o->arg, &r->prog))
			r->stop = 1;
		r->e->stats.callback_s += fg_now() - t0;
	}
}

/* A job done while its batch goes on (continuous batching): out now. */
static void hand_early(void *arg, struct fg_job *j)
{
	struct runner *r = arg;

	hand_done(r, j, 1);
	pause_point(r);
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

/* How many of order[i..) make the batch one process runs from i: up to the
 * effective batch, and none whose longest prompt plus largest budget
 * exceeds the model's positions. */
static size_t batch_len(const struct runner *r, size_t i, size_t eff)
{
	int64_t plen = 0, glen = 0, maxpos = r->e->model.cfg.max_pos;
	size_t cnt;

	for (cnt = 0; i + cnt < r->live && cnt < eff; cnt++) {
		const struct fg_job *j = r->order[i + cnt];
		int64_t p = plen > (int64_t)j->n_prompt ? plen : (int64_t)j->n_prompt;
		int64_t g = glen > j->req->max_new_tokens ? glen : j->req->max_new_tokens;
		if (cnt && p + g > maxpos)
			break;
		plen = p;
		glen = g;
	}
	return cnt;
}

/* The shape a run made for the batch at order[i] is sized for: the largest
 * prompt and budget still to come, when they fit; requests still to arrive
 * may be as long as the model's positions allow. */
static void run_hints(const struct runner *r, size_t i, int64_t *hp, int64_t *hg)
{
	int64_t maxpos = r->e->model.cfg.max_pos;

	*hp = i < r->n ? r->hint_p[i] : 0;
	*hg = i < r->n ? r->hint_g[i] : 0;
	if (r->o->more && *hp + *hg < maxpos) {
		int64_t p = maxpos - *hg < maxpos / 2 ? maxpos - *hg : maxpos / 2;
		*hp = *hp > p ? *hp : p;
		*hg = maxpos - *hp;
	}
}

/* ---- a job of replicas (rank 0) --------------------------------------------- */

/* With [policy] refill a piece holds this many batches' requests, so that
 * its finished rows have requests to take. */
#define PIECE_BATCHES 4

static void rep_result(void *arg, size_t index, struct fg_result *res)
{
	struct runner *r = arg;
	struct fg_job *j = &r->jobs[index];

	if (j->handed || abandoned(r)) {
		fg_result_clear(res);
		return;
	}
	j->handed = 1;
	r->prog.work_done += work_of(j);
	give(r, index, res);
}

static void rep_token(void *arg, size_t index, int32_t id)
{
	struct fg_job *j = &((struct runner *)arg)->jobs[index];

	j->streamed = 1;
	if (j->req->on_token)
		j->req->on_token(j->req->on_token_arg, id);
}

/* A request a replica gave no result: its error, or again elsewhere. */
static void unfinished(struct runner *r, size_t index, const char *why)
{
	struct fg_job *j = &r->jobs[index];

	if (j->handed || j->req->known || abandoned(r))
		return;
	if (r->fail_fast && why[0] && !r->failed) {
		r->failed = -EIO;
		snprintf(r->why, sizeof(r->why), "%s", why);
	}
	if (j->streamed) {
		char line[1200];
		snprintf(line, sizeof(line), "its replica stopped after it had streamed tokens: %s", why);
		j->handed = 1;
		hand_error(r, index, line, 0);
	} else if (!why[0]) {
		r->retry[r->n_retry++] = j;
	} else {
		j->handed = 1;
		hand_error(r, index, why, 0);
	}
}

static void rep_ended(void *arg, int rc, const char *why, const size_t *index, size_t n)
{
	struct runner *r = arg;

	if (rc < 0 && r->fail_fast && !r->failed) {
		r->failed = rc;
		snprintf(r->why, sizeof(r->why), "%s", why);
	}
	for (size_t k = 0; k < n; k++)
		unfinished(r, index[k], rc < 0 ? why : "the replica stopped before it");
	r->last_end = 0; /* (a piece's end: the caller hears of it) */
	pause_point(r);
}

static void rep_lost(void *arg, const size_t *index, size_t n)
{
	for (size_t k = 0; k < n; k++)
		unfinished(arg, index[k], "");
}

static const struct fg_replicas_events rep_events = { .result = rep_result, .token = rep_token,
						       .ended = rep_ended, .lost = rep_lost };

static int stopping(const struct runner *r)
{
	return r->stop || r->failed || (r->o->stop && *r->o->stop) || abandoned(r);
}

/* The next piece: jobs a lost replica left first, else from order[next]
 * the batch one process would run (with refill, a few), skipping those of
 * known requests alone.  0: none. */
static size_t next_piece(struct runner *r, struct fg_job ***jobs, int64_t *hp, int64_t *hg)
{
	size_t eff = (size_t)(r->e->policy.gpu_batch_size * r->e->policy.num_gpu_batches);
	int batches = r->e->policy.refill > 0 ? PIECE_BATCHES : 1;

	eff = eff < 1 ? 1 : eff;
	if (r->n_retry) {
		size_t m = r->n_retry < eff ? r->n_retry : eff;
		r->n_retry -= m;
		*jobs = r->retry + r->n_retry;
		*hp = *hg = 0;
		return m;
	}
	while (r->next < r->live) {
		size_t i = r->next, cnt = 0;
		int unknown = 0;
		for (int b = 0; b < batches && i + cnt < r->live; b++)
			cnt += batch_len(r, i + cnt, eff);
		r->next += cnt;
		for (size_t k = 0; k < cnt; k++)
			unknown |= !r->order[i + k]->req->known;
		if (unknown) {
			*jobs = r->order + i;
			run_hints(r, i, hp, hg);
			return cnt;
		}
	}
	return 0;
}

/* Every replica free gets a piece. */
static void hand_out(struct runner *r)
{
	struct fg_job **jobs;
	int64_t hp, hg;
	size_t n;
	int k;

	while (!stopping(r) && (k = fg_replicas_free(r->rs)) >= 0 &&
	       (n = next_piece(r, &jobs, &hp, &hg)))
		if (fg_replicas_send(r->rs, k, jobs, n, r->fail_fast, hp, hg, &r->ev)) {
			r->failed = -ENOMEM;
			snprintf(r->why, sizeof(r->why), "%s", fg_last_error());
		}
}

/* Between rank 0's own decode steps: the others' news, and their next pieces. */
static void serve_replicas(void *arg)
{
	struct runner *r = arg;

	fg_replicas_poll(r->rs, &r->ev);
	hand_out(r);
	pause_point(r);
}

struct own_piece {
	struct runner *r;
	size_t *index;
};

static int own_result(void *arg, size_t k, struct fg_result *res)
{
	struct own_piece *p = arg;
	/* (counted by the piece's own request layer) */
	rep_result(p->r, p->index[k], res);
	return p->r->stop;
}

/* A piece on rank 0's own replica, through the request layer. */
static void run_own(struct runner *r, struct fg_job **jobs, size_t n, int64_t hp, int64_t hg)
{
	struct fg_request *reqs = malloc(n * sizeof(*reqs));
	size_t *index = malloc(n * sizeof(*index));
	struct own_piece p = { r, index };
	struct fg_run_opts o = { .on_result = own_result, .arg = &p, .input_order = 1,
				 .keep_run = 1, .stop = r->o->stop, .abandon = r->o->abandon };
	struct fg_piece_hooks h = { .poll = serve_replicas, .arg = r, .hint_plen = hp,
				    .hint_glen = hg };
	long rc = -ENOMEM;

	if (reqs && index) {
		for (size_t k = 0; k < n; k++) {
			reqs[k] = *jobs[k]->req;
			index[k] = jobs[k]->index;
		}
		rc = fg_run_piece(r->e, reqs, n, &o, r->fail_fast, &h);
	} else {
		FG_ERR("out of memory for a piece of %zu requests", n);
	}
	if (rc < 0 && !abandoned(r)) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", fg_last_error());
		rep_ended(r, (int)rc, why, index, index ? n : 0);
	} else {
		r->last_end = 0;
		pause_point(r);
	}
	free(reqs);
	free(index);
}

/* Rank 0 of a job of replicas: pieces to every free replica, one to its
 * own, until none is left; then the pieces in flight end. */
static long run_replicated(struct runner *r)
{
	struct fg_job **jobs;
	int64_t hp, hg;
	long ns = 2000;
	size_t n;

	r->next = 0;
	while (!stopping(r)) {
		if (fg_replicas_poll(r->rs, &r->ev))
			ns = 2000;
		hand_out(r);
		if (stopping(r))
			break;
		if ((n = next_piece(r, &jobs, &hp, &hg))) {
			run_own(r, jobs, n, hp, hg);
			continue;
		}
		if (top_up(r))
			continue;
		if (!fg_replicas_busy(r->rs))
			break;
		pause_point(r);
		fg_dist_nap(&ns);
	}
	if (abandoned(r))
		fg_replicas_abandon(r->rs);
	while (fg_replicas_busy(r->rs)) {
		if (!fg_replicas_poll(r->rs, &r->ev))
			fg_dist_nap(&ns);
		pause_point(r);
	}
	if (r->failed) {
		FG_ERR("%s", r->why);
		return r->failed;
	}
	return r->handed;
}

/* ---- the requests ------------------------------------------------------------- */

static long run_requests(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			 const struct fg_run_opts *o, int fail_fast, const struct fg_piece_hooks *h)
{
	size_t room = n + (o->more ? o->more_max : 0);
	struct fg_job *jobs = calloc(room ? room : 1, sizeof(*jobs));
	struct fg_job **order = calloc(room ? room : 1, sizeof(*order));
	int64_t *hint_p = calloc(n + 1, sizeof(*hint_p)), *hint_g = calloc(n + 1, sizeof(*hint_g));
	struct runner r = { .e = e, .o = o, .fail_fast = fail_fast,
			    .run = { .f = e->kept, .abandon = o->abandon },
			    .jobs = jobs, .order = order, .made = n, .room = room,
			    .hint_p = hint_p, .hint_g = hint_g, .n = n };
	size_t eff = (size_t)(e->policy.gpu_batch_size * e->policy.num_gpu_batches);
	double t0 = fg_now();
	long rc = 0;

	if (!jobs || !order || !hint_p || !hint_g) {
		FG_ERR("out of memory for %zu requests", room);
		rc = -ENOMEM;
		goto out;
	}
	if (eff < 1)
		eff = 1;
	/* Rank 0 of a job of replicas hands pieces out (a piece is run here). */
	if (!h && e->world && e->world->replicas > 1 && e->world->world_rank == 0) {
		if ((rc = fg_replicas_get(e, &r.rs)))
			goto out;
		if (!(r.retry = calloc(room ? room : 1, sizeof(*r.retry)))) {
			FG_ERR("out of memory for %zu requests", room);
			rc = -ENOMEM;
			goto out;
		}
		r.run.f = NULL; /* (the pieces run here keep the engine's) */
		r.ev = rep_events;
		r.ev.arg = &r;
	}
	if (!r.rs && o->more && e->policy.refill > 0 &&
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
	for (size_t i = r.live; i-- > 0;) {
		hint_p[i] = hint_p[i + 1] > (int64_t)order[i]->n_prompt ? hint_p[i + 1]
									 : (int64_t)order[i]->n_prompt;
		hint_g[i] = hint_g[i + 1] > order[i]->req->max_new_tokens
				    ? hint_g[i + 1]
				    : order[i]->req->max_new_tokens;
	}
	if (h) {
		/* a piece: sized for what is still to come in the whole job */
		hint_p[0] = hint_p[0] > h->hint_plen ? hint_p[0] : h->hint_plen;
		hint_g[0] = hint_g[0] > h->hint_glen ? hint_g[0] : h->hint_glen;
		r.run.poll = h->poll;
		r.run.poll_arg = h->arg;
	}
	if (r.rs) {
		rc = run_replicated(&r);
		goto out;
	}
	for (size_t i = 0, cnt; !r.stop; i += cnt) {
		if ((o->stop && *o->stop) || abandoned(&r))
			break;
		if (i == r.live && !top_up(&r))
			break;
		cnt = batch_len(&r, i, eff);
		run_hints(&r, i, &r.run.hint_plen, &r.run.hint_glen);
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
	 * the tiers as they found them).  Rank 0 of replicas: its pieces left
	 * theirs in the engine. */
	if (r.rs && e->kept && !(o->keep_run && !fail_fast)) {
		r.run.f = e->kept;
		fg_batch_run_end(e, &r.run);
	} else if (!r.rs) {
		e->kept = NULL;
		if (o->keep_run && !fail_fast)
			e->kept = r.run.f;
		else
			fg_batch_run_end(e, &r.run);
	}
	if (r.rs && !(o->keep_run && !fail_fast))
		e->kept = NULL;
	for (size_t i = 0; jobs && i < r.made; i++)
		fg_job_free(&jobs[i]);
	free(jobs);
	free(order);
	free(hint_p);
	free(hint_g);
	free(r.batch);
	free(r.idle);
	free(r.retry);
	return rc;
}

long fg_run_piece(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		  const struct fg_run_opts *o, int fail_fast, const struct fg_piece_hooks *h)
{
	return run_requests(e, reqs, n, o, fail_fast, h);
}

long fg_run(struct fg_engine *e, const struct fg_request *reqs, size_t n,
	    const struct fg_run_opts *o)
{
	if (!o || !o->on_result) {
		FG_ERR("fg_run: no on_result callback");
		return -EINVAL;
	}
	return run_requests(e, reqs, n, o, 0, NULL);
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
	long rc = run_requests(e, reqs, n, &o, 1, NULL);
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
