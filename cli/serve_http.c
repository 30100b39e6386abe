/* cli/serve_http.c - serve's HTTP front (see serve_http.h).
 *
 * A request with a body is judged by its headers first: what they decide
 * (path, method, key, a declared body too large, shutdown) is answered
 * before the body is read, and MHD then discards the rest and closes the
 * connection.  A request without a body is answered once whole, since MHD
 * closes a connection whose answer was queued at the headers and would drop
 * the requests pipelined behind it.  Only a whole request counts as in
 * flight (a shutdown waits for it); cli/serve_conns.c cuts connections that
 * hold a slot without delivering one.  Errors are OpenAI's {"error":
 * {message, type, param, code}}.  One access-log line per request on
 * stderr; an error's line ends with the message its body carries, as
 * reason="...". */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli/completion.h"
#include "cli/serve_conns.h"
#include "cli/serve_http.h"
#include "cli/serve_tokenize.h"

struct fg_serve_http {
	struct fg_serve_http_opts o;
	struct fg_serve_queue *q;
	struct MHD_Daemon *d;
	struct fg_serve_conns *conns;
	int port;
	int listen_fd;               /* after quiesce: closed once the daemon stops */
	long long started_at;
	unsigned active;             /* __atomic: whole requests not yet answered in full */
	int closing;                 /* __atomic */
	unsigned long long serial;   /* __atomic: completion ids */
	pthread_mutex_t log_lock;    /* libmicrohttpd's messages: */
	long long log_minute;        /* this minute's, */
	unsigned log_lines;          /* shown */
	unsigned long long log_dropped; /* and left out */
};

enum route { R_HEALTH, R_MODELS, R_COMPLETIONS, R_TOKENIZER_INFO, R_TOKENIZE, R_DETOKENIZE,
	     R_UNKNOWN };

static const struct {
	const char *path;
	const char *method;     /* GET also answers HEAD */
} routes[] = {
	[R_HEALTH] = { "/health", "GET" },
	[R_MODELS] = { "/v1/models", "GET" },
	[R_COMPLETIONS] = { "/v1/completions", "POST" },
	[R_TOKENIZER_INFO] = { "/tokenizer_info", "GET" },
	[R_TOKENIZE] = { "/tokenize", "POST" },
	[R_DETOKENIZE] = { "/detokenize", "POST" },
};

static enum route route_of(const char *url)
{
	for (int i = 0; i < R_UNKNOWN; i++)
		if (!strcmp(url, routes[i].path))
			return (enum route)i;
	return !strncmp(url, "/v1/models/", 11) ? R_MODELS : R_UNKNOWN;
}

/* One HTTP request. */
struct request {
	struct fg_serve_http *h;
	enum route route;
	struct timespec t0;
	char method[16];
	char path[128];
	int status;
	char reason[256];            /* an error answer's message, for the log */
	char *body;
	size_t len, cap;
	size_t dropped;              /* body bytes past max_body, thrown away */
	int judged;                  /* headers() has run */
	int whole;                   /* the request has arrived whole: it counts in active */
	struct fg_serve_job *job;
};

static double ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* A copy for the log: printable ASCII only, cut to fit. */
static void printable(char *dst, size_t n, const char *src)
{
	size_t i = 0;
	for (; src && src[i] && i + 1 < n; i++)
		dst[i] = src[i] > 0x20 && src[i] < 0x7f ? src[i] : '?';
	dst[i] = '\0';
}

/* The log's copy of an error message: one line of printable ASCII, '"' and
 * '\\' escaped, clipped with "..." (the message may quote what a client sent). */
static void set_reason(struct request *r, const char *msg)
{
	size_t n = sizeof(r->reason), i = 0;

	for (; msg && *msg; msg++) {
		unsigned char c = (unsigned char)*msg;
		int esc = c == '"' || c == '\\';

		if (i + (size_t)esc + 1 > n - 4) {
			memcpy(r->reason + i, "...", 3);
			i += 3;
			break;
		}
		if (esc)
			r->reason[i++] = '\\';
		if (c == '\t' || c == '\n' || c == '\r')
			c = ' ';
		r->reason[i++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	r->reason[i] = '\0';
}

/* The message of an OpenAI error body (the queue's answers), for the log. */
static void set_reason_json(struct request *r, const char *answer)
{
	json_t *o = answer ? json_loads(answer, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));

	set_reason(r, msg ? msg : "(no error message)");
	json_decref(o);
}

/* ---- answers ---- */

static enum MHD_Result send_text(struct MHD_Connection *conn, struct request *r, int status,
				 char *text, const char *type, const char *h1, const char *v1)
{
	struct MHD_Response *resp;
	enum MHD_Result ok;

	if (!text)
		return MHD_NO; /* out of memory: drop the connection */
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (h1)
		MHD_add_response_header(resp, h1, v1);
	if (__atomic_load_n(&r->h->closing, __ATOMIC_RELAXED))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	r->status = status;
	ok = MHD_queue_response(conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, struct request *r, int status,
				 json_t *o, const char *h1, const char *v1)
{
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return send_text(conn, r, status, text, "application/json", h1, v1);
}

/* An OpenAI error; message is printf-like. */
static enum MHD_Result send_error(struct MHD_Connection *conn, struct request *r, int status,
				  const char *type, const char *param, const char *code,
				  const char *h1, const char *v1, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	set_reason(r, msg);
	return send_json(conn, r, status, fg_completion_error_body(msg, type, param, code), h1, v1);
}

#define INVALID "invalid_request_error"

/* ---- the routes ---- */

static int authorized(const struct fg_serve_http *h, struct MHD_Connection *conn)
{
	const char *want = h->o.api_key, *got;
	size_t wl, gl;
	unsigned char diff = 0;

	if (!want || !*want)
		return 1;
	got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!got || strncasecmp(got, "Bearer ", 7))
		return 0;
	got += 7;
	wl = strlen(want);
	gl = strlen(got);
	/* the time taken does not tell how much of the key was right */
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return !diff && gl == wl;
}

static json_t *model_object(const struct fg_serve_http *h)
{
	return json_pack("{s:s, s:s, s:I, s:s}", "id", h->o.model_id, "object", "model", "created",
			 (json_int_t)h->started_at, "owned_by", "fgcore");
}

static enum MHD_Result models(struct MHD_Connection *conn, struct request *r, const char *url)
{
	struct fg_serve_http *h = r->h;

	if (!strcmp(url, "/v1/models")) {
		json_t *m = model_object(h);
		return send_json(conn, r, 200,
				 m ? json_pack("{s:s, s:[o]}", "object", "list", "data", m) : NULL, NULL,
				 NULL);
	}
	if (!strcmp(url + strlen("/v1/models/"), h->o.model_id))
		return send_json(conn, r, 200, model_object(h), NULL, NULL);
	return send_error(conn, r, 404, INVALID, "model", "model_not_found", NULL, NULL,
			  "The model '%.200s' does not exist: this server serves '%s'",
			  url + strlen("/v1/models/"), h->o.model_id);
}

/* A body's "model": absent, or the one served (by its id or its path). */
static int model_served(const struct fg_serve_http *h, const char *name)
{
	return !name || !strcmp(name, h->o.model_id) || !strcmp(name, h->o.model_path);
}

static enum MHD_Result model_not_found(struct MHD_Connection *conn, struct request *r,
				       const char *name)
{
	return send_error(conn, r, 404, INVALID, "model", "model_not_found", NULL, NULL,
			  "The model '%.200s' does not exist: this server serves '%s' (GET /v1/models)",
			  name, r->h->o.model_id);
}

/* A tokenizer endpoint's failure: its status and message (a 400 there is
 * always a token id of /detokenize's). */
static enum MHD_Result tokenizer_error(struct MHD_Connection *conn, struct request *r,
				       int status, char *err)
{
	enum MHD_Result ok = send_error(conn, r, status, status == 500 ? "server_error" : INVALID,
					status == 400 ? "tokens" : NULL,
					status == 404 ? "no_tokenizer" : status == 400 ? "invalid_value" : NULL,
					NULL, NULL, "%s", err ? err : "out of memory");
	free(err);
	return ok;
}

static enum MHD_Result tokenizer_info(struct MHD_Connection *conn, struct request *r)
{
	char *err;
	int status;
	json_t *o = fg_serve_tokenizer_info(r->h->o.engine, &status, &err);

	return o ? send_json(conn, r, 200, o, NULL, NULL) : tokenizer_error(conn, r, status, err);
}

/* POST /tokenize or /detokenize with its body (consumed). */
static enum MHD_Result tokenize(struct MHD_Connection *conn, struct request *r, json_t *body)
{
	struct fg_serve_tok t;
	const char *param;
	enum MHD_Result ok;
	char *msg, *err;
	int status;

	if ((msg = fg_serve_tok_parse(body, r->route == R_DETOKENIZE, &t, &param))) {
		ok = send_error(conn, r, 400, INVALID, param, "invalid_value", NULL, NULL, "%s", msg);
		free(msg);
	} else if (!model_served(r->h, t.model)) {
		ok = model_not_found(conn, r, t.model);
	} else {
		json_t *o = fg_serve_tok_answer(r->h->o.engine, &t, &status, &err);
		ok = o ? send_json(conn, r, 200, o, NULL, NULL) : tokenizer_error(conn, r, status, err);
	}
	fg_serve_tok_free(&t);
	json_decref(body);
	return ok;
}

/* What the request line and headers decide alone, answered at once; MHD_YES
 * with nothing queued: read the body of a POST. */
static enum MHD_Result headers(struct MHD_Connection *conn, struct request *r, const char *url,
			       const char *method)
{
	struct fg_serve_http *h = r->h;
	int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	int post = !strcmp(method, "POST");

	r->judged = 1;
	if (__atomic_load_n(&h->closing, __ATOMIC_SEQ_CST))
		return send_error(conn, r, 503, "server_error", NULL, "shutting_down", NULL, NULL,
				  "the server is shutting down: no new requests");
	r->route = route_of(url);
	if (r->route == R_UNKNOWN)
		return send_error(conn, r, 404, INVALID, NULL, "unknown_url", NULL, NULL,
				  "no such endpoint: %s %.200s; fgcore serves GET /health, GET /v1/models, POST /v1/completions, GET /tokenizer_info, POST /tokenize and POST /detokenize",
				  method, url);
	if (!strcmp(routes[r->route].method, "GET") ? !get : !post)
		return send_error(conn, r, 405, INVALID, NULL, "method_not_allowed", "Allow",
				  !strcmp(routes[r->route].method, "GET") ? "GET, HEAD" : "POST",
				  "%s %.200s: use %s", method, url,
				  routes[r->route].method);
	if (r->route == R_HEALTH)
		return send_text(conn, r, 200, strdup("{\"status\":\"ok\"}"), "application/json",
				 NULL, NULL);
	if (!authorized(h, conn))
		return send_error(conn, r, 401, INVALID, NULL, "invalid_api_key", "WWW-Authenticate",
				  "Bearer",
				  "missing or wrong API key: send the header 'Authorization: Bearer KEY' with the key serve was started with");
	if (r->route == R_MODELS)
		return models(conn, r, url);
	if (r->route == R_TOKENIZER_INFO)
		return tokenizer_info(conn, r);
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > h->o.max_body)
		return send_error(conn, r, 413, INVALID, NULL, "request_too_large", NULL, NULL,
				  "the request body is %s bytes, more than the %zu bytes [serve] max_body_bytes allows",
				  cl, h->o.max_body);
	return MHD_YES;
}

/* A body chunk: kept up to max_body, the rest counted and dropped (a body of
 * no declared length); far past the limit the connection is cut. */
static enum MHD_Result take_body(struct request *r, const char *data, size_t n)
{
	size_t max = r->h->o.max_body;

	if (r->dropped || r->len + n > max) {
		free(r->body);
		r->body = NULL;
		r->len = r->cap = 0;
		r->dropped += n;
		return r->dropped > 16 * max + (1u << 20) ? MHD_NO : MHD_YES;
	}
	if (r->len + n + 1 > r->cap) {
		size_t cap = (r->len + n + 1) * 2;
		char *p = realloc(r->body, cap < max + 1 ? cap : max + 1);
		if (!p)
			return MHD_NO;
		r->body = p;
		r->cap = cap < max + 1 ? cap : max + 1;
	}
	memcpy(r->body + r->len, data, n);
	r->len += n;
	return MHD_YES;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fg_serve_job *j = cls;
	ssize_t n = fg_serve_read(j->q, j, buf, max);

	(void)pos;
	return n >= 0 ? n : n == -1 ? MHD_CONTENT_READER_END_OF_STREAM
				    : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
	struct fg_serve_job *j = cls;
	fg_serve_job_release(j->q, j, 1);
}

static enum MHD_Result send_stream(struct MHD_Connection *conn, struct request *r)
{
	struct fg_serve_job *j = r->job;
	struct MHD_Response *resp;
	enum MHD_Result ok;

	fg_serve_job_ref(j->q, j);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
	if (!resp) {
		fg_serve_job_release(j->q, j, 1);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	r->status = 200;
	ok = MHD_queue_response(conn, 200, resp);
	MHD_destroy_response(resp);
	return ok;
}

/* Each text prompt's tokens, read here: a long or pathological text then
 * costs this connection's thread, never the engine thread everyone shares.
 * NULL, or an error message with *status (400; 500: out of memory). */
static char *read_prompts(struct fg_serve_http *h, struct fg_serve_job *j, int *status)
{
	const struct fg_completion *c = &j->comp;

	*status = 500;
	j->tokens = calloc(c->n_prompts ? c->n_prompts : 1, sizeof(*j->tokens));
	j->n_tokens = calloc(c->n_prompts ? c->n_prompts : 1, sizeof(*j->n_tokens));
	if (!j->tokens || !j->n_tokens)
		return strdup("out of memory");
	for (size_t p = 0; p < c->n_prompts; p++) {
		const char *text = c->reqs[p * c->n_per].prompt;
		int rc;

		if (!text)
			continue;
		if ((rc = fg_tokenize_prompt(h->o.engine, text, &j->tokens[p], &j->n_tokens[p]))) {
			*status = rc == -ENOMEM ? 500 : 400;
			return strdup(fg_last_error_text());
		}
		if (!j->n_tokens[p]) {
			*status = 400;
			return strdup("the prompt text has no tokens (and the model reads a text without bos): give a non-empty prompt");
		}
	}
	return NULL;
}

/* POST /v1/completions with its body (consumed): check, read the prompts,
 * queue, wait, answer. */
static enum MHD_Result completion(struct MHD_Connection *conn, struct request *r, json_t *body)
{
	struct fg_serve_http *h = r->h;
	struct fg_serve_job *j;
	const char *param;
	char *msg;
	int rc;

	if (!(j = fg_serve_job_new())) {
		json_decref(body);
		return MHD_NO;
	}
	r->job = j;
	j->body = body;
	if ((msg = fg_completion_parse(body, &h->o.defaults, 0, &j->comp, &param))) {
		enum MHD_Result ok = send_error(conn, r, 400, INVALID, param, "invalid_value", NULL,
						NULL, "%s", msg);
		free(msg);
		return ok;
	}
	if (!model_served(h, j->comp.model))
		return model_not_found(conn, r, j->comp.model);
	if ((msg = read_prompts(h, j, &rc))) {
		enum MHD_Result ok = send_error(conn, r, rc, rc == 500 ? "server_error" : INVALID,
						"prompt", rc == 500 ? NULL : "invalid_request", NULL,
						NULL, "%s", msg);
		free(msg);
		return ok;
	}
	snprintf(j->id, sizeof(j->id), "cmpl-%llx-%llx", (unsigned long long)h->started_at,
		 __atomic_add_fetch(&h->serial, 1, __ATOMIC_RELAXED));
	j->model = h->o.model_id;
	j->created = (long long)time(NULL);
	rc = fg_serve_submit(h->q, j);
	if (rc == -EAGAIN)
		return send_error(conn, r, 503, "server_error", NULL, "overloaded", "Retry-After", "1",
				  "the server is busy: its queue is full ([serve] queue_limit); retry later");
	if (rc)
		return send_error(conn, r, 503, "server_error", NULL, "shutting_down", NULL, NULL,
				  "the server is shutting down: no new requests");
	rc = fg_serve_wait(h->q, j, j->comp.stream);
	if (rc < 0)
		return send_error(conn, r, 503, "server_error", NULL, "shutting_down", NULL, NULL,
				  "the server shut down before this request ran");
	if (rc == 1) {
		char *answer = j->answer;
		j->answer = NULL; /* done: this thread's alone */
		if (j->status >= 400)
			set_reason_json(r, answer);
		return send_text(conn, r, j->status, answer, "application/json", NULL, NULL);
	}
	return send_stream(conn, r);
}

/* A POST with its whole body: JSON, to its endpoint. */
static enum MHD_Result posted(struct MHD_Connection *conn, struct request *r)
{
	json_error_t err;
	json_t *body;

	if (r->dropped)
		return send_error(conn, r, 413, INVALID, NULL, "request_too_large", NULL, NULL,
				  "the request body is more than the %zu bytes [serve] max_body_bytes allows",
				  r->h->o.max_body);
	body = json_loadb(r->body ? r->body : "", r->len, JSON_REJECT_DUPLICATES, &err);
	if (!body)
		return send_error(conn, r, 400, INVALID, NULL, "invalid_json", NULL, NULL,
				  "the request body is not valid JSON (line %d, column %d): %s",
				  err.line, err.column, err.text);
	return r->route == R_COMPLETIONS ? completion(conn, r, body) : tokenize(conn, r, body);
}

/* Does the request announce a body?  (Then its headers are judged before
 * it is read.) */
static int has_body(struct MHD_Connection *conn)
{
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);

	return (cl && strtoull(cl, NULL, 10) > 0) ||
	       MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
					   MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

/* The request has arrived whole: from here on it is in flight (a shutdown
 * waits for it, the connection has no deadline), unless the shutdown began
 * first.  active is raised before closing is read, and the shutdown sets
 * closing before it reads active, so one of them sees the other. */
static enum MHD_Result whole(struct MHD_Connection *conn, struct request *r, const char *url,
			     const char *method)
{
	struct fg_serve_http *h = r->h;

	if (!r->whole) {
		r->whole = 1;
		fg_serve_conns_busy(conn);
		__atomic_add_fetch(&h->active, 1, __ATOMIC_SEQ_CST);
	}
	if (!r->judged) {
		enum MHD_Result ok = headers(conn, r, url, method);
		if (ok != MHD_YES || r->status)
			return ok;
	} else if (__atomic_load_n(&h->closing, __ATOMIC_SEQ_CST)) {
		return send_error(conn, r, 503, "server_error", NULL, "shutting_down", NULL, NULL,
				  "the server is shutting down: no new requests");
	}
	return posted(conn, r);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct fg_serve_http *h = cls;
	struct request *r = *con_cls;

	(void)version;
	if (!r) {
		if (!(r = calloc(1, sizeof(*r))))
			return MHD_NO;
		r->h = h;
		clock_gettime(CLOCK_MONOTONIC, &r->t0);
		printable(r->method, sizeof(r->method), method);
		printable(r->path, sizeof(r->path), url);
		*con_cls = r;
		return has_body(conn) ? headers(conn, r, url, method) : MHD_YES;
	}
	if (*upload_size) {
		enum MHD_Result ok = take_body(r, upload, *upload_size);
		*upload_size = 0;
		return ok;
	}
	return whole(conn, r, url, method);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct fg_serve_http *h = cls;
	struct request *r = *con_cls;
	size_t p = 0, g = 0;

	if (!r)
		return;
	if (r->job && r->job->q)
		fg_serve_job_tokens(h->q, r->job, &p, &g);
	if (h->o.access_log)
		fprintf(stderr, "fgcore: serve: %s %s %d prompt_tokens=%zu completion_tokens=%zu %.1f ms%s%s%s%s\n",
			r->method, r->path, r->status, p, g, ms_since(&r->t0),
			toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed before the end)",
			r->reason[0] ? " reason=\"" : "", r->reason, r->reason[0] ? "\"" : "");
	if (r->job)
		fg_serve_job_release(h->q, r->job, 1);
	if (r->whole) {
		fg_serve_conns_idle(conn);
		__atomic_sub_fetch(&h->active, 1, __ATOMIC_SEQ_CST);
	}
	free(r->body);
	free(r);
	*con_cls = NULL;
}

/* libmicrohttpd's messages, a few a minute at most: it writes one for each
 * connection a client drops or the guard cuts, and a flood of hostile
 * connections must not flood the log too. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct fg_serve_http *h = cls;
	long long minute = (long long)time(NULL) / 60;
	unsigned long long dropped = 0;
	char line[512];
	size_t n;
	int show;

	pthread_mutex_lock(&h->log_lock);
	if (minute != h->log_minute) {
		dropped = h->log_dropped;
		h->log_minute = minute;
		h->log_lines = h->log_dropped = 0;
	}
	show = h->log_lines < 20;
	h->log_lines += show;
	h->log_dropped += !show;
	pthread_mutex_unlock(&h->log_lock);
	if (dropped)
		fprintf(stderr, "fgcore: serve: libmicrohttpd: %llu more messages left out (20 a minute at most)\n",
			dropped);
	if (!show)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	fprintf(stderr, "fgcore: serve: libmicrohttpd: %s\n", line);
}

int fg_serve_http_start(struct fg_serve_http **out, const struct fg_serve_http_opts *o,
			struct fg_serve_queue *q, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage sa;
	struct fg_serve_http *h;
	char port[8];
	int rc;

	*out = NULL;
	snprintf(port, sizeof(port), "%d", o->port);
	if ((rc = getaddrinfo(o->host, port, &hints, &ai))) {
		snprintf(err, errlen, "serve: cannot listen on host '%s': %s", o->host, gai_strerror(rc));
		return -1;
	}
	memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (!(h = calloc(1, sizeof(*h)))) {
		snprintf(err, errlen, "serve: out of memory");
		return -1;
	}
	h->o = *o;
	h->q = q;
	h->listen_fd = -1;
	pthread_mutex_init(&h->log_lock, NULL);
	h->started_at = (long long)time(NULL);
	if ((rc = fg_serve_conns_new(&h->conns, o->max_connections, o->request_timeout_s))) {
		snprintf(err, errlen, "serve: cannot start the connection guard: %s", strerror(-rc));
		pthread_mutex_destroy(&h->log_lock);
		free(h);
		return -1;
	}
	/* MHD refuses newcomers at its own limit, and counts the connections
	 * the guard has cut until their threads end: room past max_connections
	 * for those, so that a newcomer is always seen and room made for it. */
	errno = 0;
	h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
					MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG |
					(sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				(uint16_t)o->port, NULL, NULL, handle, h,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				MHD_OPTION_CONNECTION_LIMIT, 2 * o->max_connections + 16,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_connections_per_ip,
				MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
				MHD_OPTION_NOTIFY_COMPLETED, completed, h,
				MHD_OPTION_NOTIFY_CONNECTION, fg_serve_conns_notify, h->conns,
				MHD_OPTION_END);
	if (!h->d) {
		int e = errno;
		snprintf(err, errlen, "serve: cannot listen on %s port %d: %s (is the port taken? --port 0 picks a free one)",
			 o->host, o->port, e ? strerror(e) : "libmicrohttpd refused");
		fg_serve_conns_free(h->conns, NULL);
		pthread_mutex_destroy(&h->log_lock);
		free(h);
		return -1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : o->port;
	*out = h;
	return 0;
}

int fg_serve_http_port(const struct fg_serve_http *h)
{
	return h->port;
}

void fg_serve_http_quiesce(struct fg_serve_http *h)
{
	__atomic_store_n(&h->closing, 1, __ATOMIC_RELAXED);
	if (h->listen_fd < 0) {
		h->listen_fd = MHD_quiesce_daemon(h->d);
		/* refuse the connections the kernel would still queue */
		if (h->listen_fd >= 0)
			shutdown(h->listen_fd, SHUT_RDWR);
	}
}

unsigned fg_serve_http_active(struct fg_serve_http *h)
{
	return __atomic_load_n(&h->active, __ATOMIC_RELAXED);
}

void fg_serve_http_stop(struct fg_serve_http *h)
{
	unsigned long long cut = 0;

	if (!h)
		return;
	MHD_stop_daemon(h->d);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	fg_serve_conns_free(h->conns, &cut);
	if (h->log_dropped)
		fprintf(stderr, "fgcore: serve: libmicrohttpd: %llu more messages left out (20 a minute at most)\n",
			h->log_dropped);
	if (cut)
		fprintf(stderr, "fgcore: serve: %llu connections were closed for holding a slot without sending a whole request ([serve] request_timeout_s, max_connections)\n",
			cut);
	pthread_mutex_destroy(&h->log_lock);
	free(h);
}
