/* cli/serve_http.h - serve's HTTP/1.1 front on libmicrohttpd: GET /health,
 * GET /v1/models, POST /v1/completions (whole or as server-sent events), and
 * the tokenizer's GET /tokenizer_info, POST /tokenize, POST /detokenize
 * (cli/serve_tokenize.h); a thread per connection parses, checks and queues
 * completions, and writes the answer the engine thread makes
 * (cli/serve_queue.h). */
#ifndef FG_CLI_SERVE_HTTP_H
#define FG_CLI_SERVE_HTTP_H

#include <stddef.h>

#include <fgcore/fgcore.h>
#include "cli/serve_queue.h"

struct fg_serve_http_opts {
	const char *host;
	int port;                   /* 0: any free port */
	const char *api_key;        /* NULL or "": no authentication */
	const char *model_id;       /* what /v1/models lists */
	const char *model_path;     /* [model] path: a request may name it too */
	size_t max_body;            /* bytes of a request body at most */
	unsigned max_connections;   /* past it, the connection waiting longest for a
				     * request is closed to make room */
	unsigned max_connections_per_ip; /* 0: no limit */
	unsigned timeout_s;         /* a connection where nothing moves is closed after it */
	unsigned request_timeout_s; /* a whole request must arrive within it (0: no limit) */
	int access_log;             /* a line per request on stderr */
	struct fg_request defaults; /* [generate] */
	struct fg_engine *engine;   /* its tokenizer only: the queue runs it */
};

struct fg_serve_http;

/* Listen and serve; 0, or -1 with one line in err. */
int fg_serve_http_start(struct fg_serve_http **out, const struct fg_serve_http_opts *o,
			struct fg_serve_queue *q, char *err, size_t errlen);
/* The port listened on. */
int fg_serve_http_port(const struct fg_serve_http *h);
/* Stop accepting connections; requests that still arrive whole on open
 * ones are answered 503. */
void fg_serve_http_quiesce(struct fg_serve_http *h);
/* Requests arrived whole and not yet answered in full. */
unsigned fg_serve_http_active(struct fg_serve_http *h);
/* Close every connection and free h. */
void fg_serve_http_stop(struct fg_serve_http *h);

#endif
