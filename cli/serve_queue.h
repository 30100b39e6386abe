/* cli/serve_queue.h - serve's completions between the HTTP threads, which
 * parse and enqueue them, and the one thread that owns the engine (the engine
 * is not thread-safe), which gathers what is queued into the policy's batch
 * shape, runs fg_generate on it and hands each answer over: the results, of
 * which the waiting HTTP thread makes the JSON body (echoed log-probabilities
 * make a large one: made on the engine thread, the next batch would wait), or
 * the server-sent events of a stream as its tokens come (with logprobs, once
 * each choice is done: on_token gives a token without its numbers). */
#ifndef FG_CLI_SERVE_QUEUE_H
#define FG_CLI_SERVE_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/completion.h"

struct fg_serve_queue;
struct fg_serve_choice;

/* One POST /v1/completions.  The HTTP thread fills the first block, then
 * hands it to fg_serve_submit; the rest is the queue's. */
struct fg_serve_job {
	json_t *body;               /* owned: comp borrows its strings */
	struct fg_completion comp;
	int32_t **tokens;           /* owned: prompt p's ids when it is a text, read on the
				     * HTTP thread (the engine thread never tokenizes) */
	size_t *n_tokens;
	char id[48];                /* "cmpl-..." */
	const char *model;          /* the model id answers name */
	long long created;

	/* under the queue's lock */
	pthread_cond_t cv;          /* started, done or more stream bytes */
	int started;                /* a stream emitted its first token: it answers 200 */
	int done;
	int abandoned;              /* the client is gone: write nothing more */
	int status;                 /* done: the HTTP status */
	char *answer;               /* done and not streamed (or failed before
				     * its stream began): the JSON body */
	int answer_from_res;        /* done: the waiter makes the body from res (the
				     * engine thread goes on to the next batch) */
	char *out;                  /* stream: server-sent bytes not yet read */
	size_t out_len, out_pos, out_cap;
	size_t prompt_tokens, completion_tokens;
	int refs;

	/* the engine thread's */
	struct fg_serve_queue *q;
	struct fg_result *res;
	size_t left;                /* choices whose result is not in yet */
	struct fg_serve_choice *ch;
	struct fg_request *reqs;    /* a job taken while a batch runs: its requests */
	double queued_at;
	struct fg_serve_job *next;
};

/* A queue and its engine thread over an open engine: batches of up to
 * gpu_batch_size x num_gpu_batches prompts; a request waits at most
 * max_wait_ms for others; at most `limit` prompts wait.  Requests queued
 * while a batch runs join it where they can; one that cannot stops it
 * taking others after join_wait_ms.  0 or -errno. */
int fg_serve_queue_start(struct fg_serve_queue **out, struct fg_engine *e, size_t limit,
			 int max_wait_ms, int join_wait_ms);
/* Finish every queued job (abort: answer them 503 instead), then end the
 * engine thread and free the queue. */
void fg_serve_queue_stop(struct fg_serve_queue *q, int abort);
/* A hard shutdown: wake every waiter now and from here on (waits return),
 * and drop the batch in flight at its next decode step (its requests are
 * answered 503). */
void fg_serve_queue_abort(struct fg_serve_queue *q);
/* Prompts a batch holds at most. */
size_t fg_serve_queue_batch(const struct fg_serve_queue *q);

/* A new job holding one reference (the caller's); NULL: out of memory. */
struct fg_serve_job *fg_serve_job_new(void);
/* Queue it: 0, -EAGAIN (the queue is full) or -ESHUTDOWN (stopping). */
int fg_serve_submit(struct fg_serve_queue *q, struct fg_serve_job *j);
/* Block until j is done, or (stream) has started: 1, its answer is whole (a
 * body, or an error before its stream began) in j->status and j->answer, which
 * no one else touches any more (a body is made here, on the caller's thread,
 * from the results); 0, a stream to read with fg_serve_read; -ECANCELED after
 * fg_serve_queue_abort. */
int fg_serve_wait(struct fg_serve_queue *q, struct fg_serve_job *j, int stream);
/* Copy up to max stream bytes, blocking until there are some: the count, or
 * -1 at the end of the stream, -2 after fg_serve_queue_abort. */
ssize_t fg_serve_read(struct fg_serve_queue *q, struct fg_serve_job *j, char *buf, size_t max);
/* Take another reference. */
void fg_serve_job_ref(struct fg_serve_queue *q, struct fg_serve_job *j);
/* Drop a reference (gone: the client is gone); the last one frees j. */
void fg_serve_job_release(struct fg_serve_queue *q, struct fg_serve_job *j, int gone);
/* Its token counts, for the access log. */
void fg_serve_job_tokens(struct fg_serve_queue *q, struct fg_serve_job *j, size_t *prompt,
			 size_t *completion);

#endif
