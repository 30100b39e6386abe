/* cli/serve_queue.c - serve's engine thread and its queue (see serve_queue.h).
 *
 * One mutex guards the queue and every job's shared fields; the engine thread
 * holds it only to take jobs and to hand over bytes, never while it computes,
 * and never waits on an HTTP thread: a client that is slow or gone costs it
 * nothing but the bytes it writes (none once the client is gone). */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve_queue.h"

/* A streamed choice: the tokens so far and how much of their text is out. */
struct fg_serve_choice {
	struct fg_serve_job *job;
	size_t index;
	int32_t *ids;
	size_t n, cap;
	size_t sent;  /* bytes of text already in chunks */
};

struct fg_serve_queue {
	pthread_mutex_t lock;
	pthread_cond_t wake;         /* the engine thread: work, or stop */
	struct fg_serve_job *head, *tail;
	size_t rows;                 /* prompts queued */
	size_t limit, batch;
	int max_wait_ms, join_wait_ms;
	int stopping, aborted, abort_queued;
	volatile sig_atomic_t abandon; /* fg_run_opts.abandon: a hard shutdown */
	struct fg_engine *e;
	pthread_t thread;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct timespec at(double s)
{
	struct timespec t = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	return t;
}

static int cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int rc;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

/* ---- jobs ---- */

struct fg_serve_job *fg_serve_job_new(void)
{
	struct fg_serve_job *j = calloc(1, sizeof(*j));

	if (j && cond_init(&j->cv)) {
		free(j);
		return NULL;
	}
	if (j)
		j->refs = 1;
	return j;
}

static void job_free(struct fg_serve_job *j)
{
	for (size_t p = 0; j->tokens && p < j->comp.n_prompts; p++)
		free(j->tokens[p]);
	free(j->tokens);
	free(j->n_tokens);
	for (size_t i = 0; j->res && i < j->comp.n; i++)
		fg_result_clear(&j->res[i]);
	for (size_t i = 0; j->ch && i < j->comp.n; i++)
		free(j->ch[i].ids);
	free(j->res);
	free(j->ch);
	free(j->reqs);
	fg_completion_free(&j->comp);
	json_decref(j->body);
	free(j->answer);
	free(j->out);
	pthread_cond_destroy(&j->cv);
	free(j);
}

void fg_serve_job_ref(struct fg_serve_queue *q, struct fg_serve_job *j)
{
	pthread_mutex_lock(&q->lock);
	j->refs++;
	pthread_mutex_unlock(&q->lock);
}

void fg_serve_job_release(struct fg_serve_queue *q, struct fg_serve_job *j, int gone)
{
	int last;

	pthread_mutex_lock(&q->lock);
	if (gone) {
		j->abandoned = 1;
		free(j->out);
		j->out = NULL;
		j->out_len = j->out_pos = j->out_cap = 0;
	}
	last = --j->refs == 0;
	pthread_mutex_unlock(&q->lock);
	if (last)
		job_free(j);
}

void fg_serve_job_tokens(struct fg_serve_queue *q, struct fg_serve_job *j, size_t *prompt,
			 size_t *completion)
{
	pthread_mutex_lock(&q->lock);
	*prompt = j->prompt_tokens;
	*completion = j->completion_tokens;
	pthread_mutex_unlock(&q->lock);
}

/* ---- the HTTP threads' side ---- */

/* A waiter's nap: woken by its job, else after 200 ms to look at q->aborted
 * (fg_serve_queue_abort cannot reach the jobs the engine thread holds). */
static void nap(struct fg_serve_queue *q, struct fg_serve_job *j)
{
	struct timespec until = at(now_s() + 0.2);
	pthread_cond_timedwait(&j->cv, &q->lock, &until);
}

int fg_serve_submit(struct fg_serve_queue *q, struct fg_serve_job *j)
{
	int rc = 0;

	pthread_mutex_lock(&q->lock);
	if (q->stopping || q->aborted) {
		rc = -ESHUTDOWN;
	} else if (q->rows && q->rows + j->comp.n > q->limit) {
		rc = -EAGAIN; /* a request alone always fits */
	} else {
		j->q = q;
		j->refs++;
		j->queued_at = now_s();
		j->next = NULL;
		if (q->tail)
			q->tail->next = j;
		else
			q->head = j;
		q->tail = j;
		q->rows += j->comp.n;
		pthread_cond_signal(&q->wake);
	}
	pthread_mutex_unlock(&q->lock);
	return rc;
}

static char *error_text(const char *message, const char *type, const char *code);

int fg_serve_wait(struct fg_serve_queue *q, struct fg_serve_job *j, int stream)
{
	int rc, make;

	pthread_mutex_lock(&q->lock);
	while (!j->done && !(stream && j->started) && !q->aborted)
		nap(q, j);
	make = j->done && j->answer_from_res;
	rc = j->done && (j->answer || make) ? 1 : j->done || (stream && j->started) ? 0 : -ECANCELED;
	pthread_mutex_unlock(&q->lock);
	if (make) {
		/* done: the engine thread no longer touches j's results */
		json_t *o = fg_completion_object(q->e, &j->comp, j->res, j->id, j->model, j->created);
		j->answer = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		if (!j->answer) {
			j->status = 500;
			j->answer = error_text("out of memory formatting the answer", "server_error",
					       NULL);
		}
	}
	return rc;
}

ssize_t fg_serve_read(struct fg_serve_queue *q, struct fg_serve_job *j, char *buf, size_t max)
{
	ssize_t n;

	pthread_mutex_lock(&q->lock);
	while (j->out_pos == j->out_len && !j->done && !q->aborted)
		nap(q, j);
	if (j->out_pos < j->out_len) {
		n = (ssize_t)(j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max);
		memcpy(buf, j->out + j->out_pos, (size_t)n);
		j->out_pos += (size_t)n;
	} else {
		n = j->done ? -1 : -2;
	}
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* ---- the engine thread's side ---- */

/* Append one server-sent event "data: <json>\n\n" (o consumed; NULL: [DONE]). */
static void emit(struct fg_serve_job *j, json_t *o, int is_done)
{
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	const char *data = is_done ? "[DONE]" : text;
	struct fg_serve_queue *q = j->q;

	json_decref(o);
	if (!data) {
		/* out of memory: the stream ends short rather than wrong */
		free(text);
		return;
	}
	size_t len = strlen(data) + 8;
	pthread_mutex_lock(&q->lock);
	if (!j->abandoned) {
		if (j->out_pos && j->out_pos == j->out_len)
			j->out_pos = j->out_len = 0;
		if (j->out_len + len + 1 > j->out_cap) {
			size_t cap = (j->out_len + len + 1) * 2;
			char *p = realloc(j->out, cap);
			if (p) {
				j->out = p;
				j->out_cap = cap;
			}
		}
		if (j->out_len + len + 1 <= j->out_cap) {
			j->out_len += (size_t)sprintf(j->out + j->out_len, "data: %s\n\n", data);
			pthread_cond_broadcast(&j->cv);
		}
	}
	pthread_mutex_unlock(&q->lock);
	free(text);
}

static void emit_text(struct fg_serve_job *j, size_t i, const char *text, const char *finish)
{
	emit(j, fg_completion_chunk(j->id, j->model, j->created, i, text, finish, NULL), 0);
}

/* A stream with log-probabilities: each choice's chunks made from its whole
 * result (on_token knows a token, not its log-probabilities), then its
 * closing chunk; 0, or -ENOMEM with nothing sent. */
static int emit_logprob_chunks(struct fg_serve_job *j)
{
	struct fg_engine *e = j->q->e;
	json_t **all = calloc(j->comp.n, sizeof(*all)), **empty = calloc(j->comp.n, sizeof(*empty));
	int rc = all && empty ? 0 : -ENOMEM;

	for (size_t i = 0; !rc && i < j->comp.n; i++)
		if (!(all[i] = fg_completion_logprob_chunks(e, &j->comp, i, &j->res[i], j->id,
							    j->model, j->created, &empty[i])))
			rc = -ENOMEM;
	for (size_t i = 0; i < j->comp.n && all && empty; i++) {
		size_t k;
		json_t *chunk;

		json_array_foreach(all[i], k, chunk)
			if (!rc)
				emit(j, json_incref(chunk), 0);
		if (!rc)
			emit(j, fg_completion_chunk(j->id, j->model, j->created, i, "",
						    fg_completion_finish(j->res[i].finish_reason),
						    json_incref(empty[i])), 0);
		json_decref(all[i]);
		json_decref(empty[i]);
	}
	free(all);
	free(empty);
	return rc;
}

/* fg_request.on_token of a streamed choice: the text that can no longer
 * change goes out as a chunk. */
static void on_token(void *arg, int32_t id)
{
	struct fg_serve_choice *c = arg;
	struct fg_serve_job *j = c->job;
	const struct fg_request *r = &j->comp.reqs[c->index];
	struct fg_serve_queue *q = j->q;
	char *text = NULL;

	pthread_mutex_lock(&q->lock);
	if (!j->started) {
		j->started = 1;
		pthread_cond_broadcast(&j->cv);
	}
	int gone = j->abandoned;
	pthread_mutex_unlock(&q->lock);
	for (size_t k = 0; k < r->n_stop_ids; k++)
		if (r->stop_ids[k] == id)
			return; /* a stop token ends the text without showing */
	if (gone)
		return;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		int32_t *p = realloc(c->ids, cap * sizeof(*p));
		if (!p)
			return; /* the final chunk still carries the rest */
		c->ids = p;
		c->cap = cap;
	}
	c->ids[c->n++] = id;
	if (fg_detokenize(q->e, c->ids, c->n, &text))
		return;
	size_t safe = fg_completion_stream_safe(&j->comp, text, strlen(text));
	if (safe > c->sent) {
		char keep = text[safe];
		text[safe] = '\0';
		emit_text(j, c->index, text + c->sent, NULL);
		text[safe] = keep;
		c->sent = safe;
	}
	free(text);
}

static char *error_text(const char *message, const char *type, const char *code)
{
	json_t *o = fg_completion_error_body(message, type, NULL, code);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return s;
}

/* Hand j's answer over: done, waiters woken. */
static void complete(struct fg_serve_job *j, int status, char *answer)
{
	struct fg_serve_queue *q = j->q;
	size_t p = 0, g = 0;

	for (size_t i = 0; j->res && i < j->comp.n; i++) {
		p += j->res[i].n_prompt_tokens;
		g += j->res[i].n_tokens;
	}
	pthread_mutex_lock(&q->lock);
	j->status = status;
	j->answer = answer;
	j->prompt_tokens = p;
	j->completion_tokens = g;
	j->done = 1;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&q->lock);
}

/* A job that could not run: an error answer, or after its stream began, an
 * error event ending it. */
static void fail(struct fg_serve_job *j, int status, const char *message, const char *type,
		 const char *code)
{
	if (j->comp.stream && j->started) {
		emit(j, fg_completion_error_body(message, type, NULL, code), 0);
		emit(j, NULL, 1);
		complete(j, 200, NULL);
		return;
	}
	complete(j, status, error_text(message, type, code));
}

/* j's results into its answer. */
static void finish(struct fg_serve_job *j)
{
	const char *refused = fg_completion_error(&j->comp, j->res);

	if (refused) {
		/* A request the model cannot run is the client's fault; a failure
		 * running it, the server's. */
		for (size_t i = 0; i < j->comp.n; i++)
			if (j->res[i].finish_reason == FG_FINISH_ERROR && !j->res[i].refused) {
				fail(j, 500, j->res[i].error ? j->res[i].error : "out of memory",
				     "server_error", NULL);
				return;
			}
		fail(j, 400, refused, "invalid_request_error", "invalid_request");
		return;
	}
	if (!j->comp.stream) {
		j->answer_from_res = 1; /* (read after complete's lock) */
		complete(j, 200, NULL);
		return;
	}
	if (j->comp.logprobs >= 0) {
		if (emit_logprob_chunks(j)) {
			fail(j, 500, "out of memory formatting the answer", "server_error", NULL);
			return;
		}
	} else {
		for (size_t i = 0; i < j->comp.n; i++) {
			const char *t = j->res[i].text;
			size_t len = strlen(t), sent = j->ch[i].sent;
			if (len > sent)
				emit_text(j, i, t + sent, NULL);
			emit_text(j, i, "", fg_completion_finish(j->res[i].finish_reason));
		}
	}
	if (j->comp.stream_usage)
		emit(j, fg_completion_usage_chunk(&j->comp, j->res, j->id, j->model, j->created), 0);
	emit(j, NULL, 1);
	complete(j, 200, NULL);
}

/* Its requests, results and stream state; the echo of a stream goes out. */
static int prepare(struct fg_serve_job *j, struct fg_request *reqs)
{
	struct fg_engine *e = j->q->e;

	fg_completion_bind(&j->comp, e);
	j->res = calloc(j->comp.n, sizeof(*j->res));
	j->ch = calloc(j->comp.n, sizeof(*j->ch));
	if (!j->res || !j->ch)
		return -ENOMEM;
	for (size_t i = 0; i < j->comp.n; i++) {
		size_t p = j->comp.n_per ? i / j->comp.n_per : i;

		reqs[i] = j->comp.reqs[i];
		if (j->tokens && j->tokens[p]) {
			/* a text read on the HTTP thread; echo still shows the text */
			reqs[i].prompt = NULL;
			reqs[i].prompt_ids = j->tokens[p];
			reqs[i].n_prompt_ids = j->n_tokens[p];
		}
		j->ch[i].job = j;
		j->ch[i].index = i;
		if (!j->comp.stream || j->comp.logprobs >= 0)
			continue;
		reqs[i].on_token = on_token;
		reqs[i].on_token_arg = &j->ch[i];
		if (j->comp.echo) {
			char *p = fg_completion_prompt_text(e, &j->comp, i);
			if (!p)
				return -ENOMEM;
			emit_text(j, i, p, NULL);
			free(p);
		}
	}
	return 0;
}

/* Run a batch of jobs (a list through next) through the request layer: a
 * job is answered as soon as its last choice's result is in.  A request
 * that fails alone, or whose batch failed after it began to stream, gets
 * its error; the others their results.  Jobs queued meanwhile are taken
 * while it runs (continuous batching: fg_run_opts.more) and added to the
 * list. */
struct batch_map {
	struct fg_serve_queue *q;
	struct fg_serve_job **job;  /* each request's job */
	size_t *choice;             /* and its choice there */
	size_t n, cap;              /* requests so far */
	struct fg_serve_job *last;  /* the list's last job */
};

/* Under the lock: the queue's first jobs whose prompts fit `limit` (with
 * `first`, the first one whatever its size), detached as a list; their
 * prompts in *rows. */
static struct fg_serve_job *take_front(struct fg_serve_queue *q, size_t limit, int first,
				       size_t *rows)
{
	struct fg_serve_job *head = q->head, *last = NULL;
	size_t n = 0;

	for (struct fg_serve_job *j = head; j && (n + j->comp.n <= limit || (first && !last));
	     j = j->next) {
		n += j->comp.n;
		last = j;
	}
	*rows = n;
	if (!last)
		return NULL;
	q->head = last->next;
	if (!q->head)
		q->tail = NULL;
	last->next = NULL;
	q->rows -= n;
	return head;
}

/* Requests the engine takes while a batch runs, at most (then the next
 * call to fg_run takes the rest). */
#define SERVE_MORE_MAX 16384

/* Room in m for `add` more requests; 0 or -ENOMEM. */
static int map_grow(struct batch_map *m, size_t add)
{
	if (m->n + add <= m->cap)
		return 0;
	size_t cap = (m->n + add) * 2;
	struct fg_serve_job **job = realloc(m->job, cap * sizeof(*job));
	if (job)
		m->job = job;
	size_t *choice = job ? realloc(m->choice, cap * sizeof(*choice)) : NULL;
	if (!choice)
		return -ENOMEM;
	m->choice = choice;
	m->cap = cap;
	return 0;
}

/* fg_run_opts.more: the jobs queued since the batch began, whole, up to
 * max requests (none once the server stops). */
static size_t more(void *arg, const struct fg_request **out, size_t max)
{
	struct batch_map *m = arg;
	struct fg_serve_queue *q = m->q;
	struct fg_serve_job *got = NULL;
	size_t k = 0;

	pthread_mutex_lock(&q->lock);
	if (!q->stopping && !q->aborted)
		got = take_front(q, max, 0, &k);
	pthread_mutex_unlock(&q->lock);
	k = 0;
	for (struct fg_serve_job *next, *j = got; j; j = next) {
		next = j->next;
		j->next = NULL;
		j->reqs = calloc(j->comp.n, sizeof(*j->reqs));
		if (!j->reqs || map_grow(m, j->comp.n) || prepare(j, j->reqs)) {
			fail(j, 500, "out of memory", "server_error", NULL);
			fg_serve_job_release(q, j, 0);
			continue;
		}
		for (size_t i = 0; i < j->comp.n; i++) {
			m->job[m->n] = j;
			m->choice[m->n++] = i;
			out[k++] = &j->reqs[i];
		}
		j->left = j->comp.n;
		m->last->next = j;
		m->last = j;
	}
	return k;
}

static int on_result(void *arg, size_t index, struct fg_result *res)
{
	struct batch_map *m = arg;
	struct fg_serve_job *j = m->job[index];

	j->res[m->choice[index]] = *res;
	if (--j->left == 0)
		finish(j);
	return 0;
}

static void run(struct fg_serve_queue *q, struct fg_serve_job *batch, size_t rows)
{
	size_t n = rows ? rows : 1, off = 0;
	struct fg_request *reqs = calloc(n, sizeof(*reqs));
	struct batch_map m = { .q = q };
	/* The run stays in the engine from one gathered batch to the next;
	 * requests queued meanwhile join it. */
	struct fg_run_opts o = { .on_result = on_result, .arg = &m, .keep_run = 1,
				 .abandon = &q->abandon, .more = more, .more_max = SERVE_MORE_MAX,
				 .more_wait_ms = q->join_wait_ms };
	size_t unfinished = 0;
	int rc = reqs && !map_grow(&m, n) ? 0 : -ENOMEM;

	for (struct fg_serve_job *j = batch; !rc && j; j = j->next) {
		rc = prepare(j, reqs + off);
		for (size_t i = 0; !rc && i < j->comp.n; i++) {
			m.job[off + i] = j;
			m.choice[off + i] = i;
		}
		j->left = j->comp.n;
		off += j->comp.n;
		m.last = j;
	}
	m.n = off;
	if (!rc && fg_run(q->e, reqs, rows, &o) < 0)
		rc = -ENOMEM;
	for (struct fg_serve_job *next, *j = batch; j; j = next) {
		next = j->next;
		/* Without a run (out of memory) no job was answered; after a hard
		 * stop, those whose results were not all in. */
		if (rc) {
			fail(j, 500, "out of memory", "server_error", NULL);
		} else if (j->left) {
			unfinished++;
			fail(j, 503, "the server is shutting down: this request was stopped unfinished",
			     "server_error", "shutting_down");
		}
		fg_serve_job_release(q, j, 0);
	}
	if (unfinished)
		fprintf(stderr, "fgcore: serve: the batch in flight abandoned: %zu requests stopped unfinished\n",
			unfinished);
	free(reqs);
	free(m.job);
	free(m.choice);
}

static void *engine_main(void *arg)
{
	struct fg_serve_queue *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->head && !q->stopping)
			pthread_cond_wait(&q->wake, &q->lock);
		if (!q->head)
			break;
		/* Wait for company, up to max_wait_ms after the oldest arrived. */
		struct timespec until = at(q->head->queued_at + q->max_wait_ms * 1e-3);
		while (q->rows < q->batch && !q->stopping &&
		       pthread_cond_timedwait(&q->wake, &q->lock, &until) != ETIMEDOUT)
			;
		size_t rows;
		struct fg_serve_job *batch = take_front(q, q->batch, 1, &rows);
		int dropped = q->abort_queued;
		pthread_mutex_unlock(&q->lock);
		if (dropped) {
			for (struct fg_serve_job *next, *j = batch; j; j = next) {
				next = j->next;
				complete(j, 503, error_text("the server is shutting down", "server_error",
							    "shutting_down"));
				fg_serve_job_release(q, j, 0);
			}
		} else {
			run(q, batch, rows);
		}
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int fg_serve_queue_start(struct fg_serve_queue **out, struct fg_engine *e, size_t limit,
			 int max_wait_ms, int join_wait_ms)
{
	struct fg_serve_queue *q = calloc(1, sizeof(*q));
	int rc;

	*out = NULL;
	if (!q)
		return -ENOMEM;
	q->e = e;
	q->limit = limit;
	q->max_wait_ms = max_wait_ms;
	q->join_wait_ms = join_wait_ms;
	struct fg_model_info mi;
	fg_engine_info(e, &mi);
	q->batch = (size_t)mi.batch;
	if ((rc = pthread_mutex_init(&q->lock, NULL))) {
		free(q);
		return -rc;
	}
	if ((rc = cond_init(&q->wake)) || (rc = pthread_create(&q->thread, NULL, engine_main, q))) {
		pthread_cond_destroy(&q->wake);
		pthread_mutex_destroy(&q->lock);
		free(q);
		return -rc;
	}
	/* named for top -H and for the tests, which read what it costs */
	pthread_setname_np(q->thread, "fgcore-engine");
	*out = q;
	return 0;
}

size_t fg_serve_queue_batch(const struct fg_serve_queue *q)
{
	return q->batch;
}

void fg_serve_queue_abort(struct fg_serve_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->aborted = 1;
	q->abandon = 1;
	pthread_mutex_unlock(&q->lock);
}

void fg_serve_queue_stop(struct fg_serve_queue *q, int abort)
{
	pthread_mutex_lock(&q->lock);
	q->stopping = 1;
	q->abort_queued = abort;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	pthread_cond_destroy(&q->wake);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
