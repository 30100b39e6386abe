/* cli/cmd_serve.c - `fgcore serve [--host H] [--port P] [--api-key KEY]`:
 * OpenAI's completions API over HTTP (cli/serve_http.c) on one engine thread
 * that batches concurrent requests (cli/serve_queue.c).
 *
 * SIGTERM or SIGINT: accept no more, answer the requests in flight (those
 * arrived whole), exit 0; a second signal, or [serve] drain_timeout_s
 * passing, ends them at once: they are answered 503 and the batch in flight
 * is dropped at its next decode step (exit 128 + the signal, or 1). */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"

#ifdef HAVE_MICROHTTPD
#include "cli/request.h"
#include "cli/serve_http.h"
#include "cli/serve_queue.h"
#endif

static void usage(FILE *f)
{
	fprintf(f, "usage: fgcore [-c CONFIG] [-o section.key=value]... serve [--host H] [--port P] [--api-key KEY]\n"
		   "  OpenAI's completions API: GET /health, GET /v1/models, POST /v1/completions;\n"
		   "  the model's tokenizer: GET /tokenizer_info, POST /tokenize, POST /detokenize\n"
		   "  (defaults and limits: the [serve] section, fgcore.ini(5); --port 0 picks a free port)\n");
}

/* The options as [serve] settings, checked by the configuration's schema. */
static int options(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "host", required_argument, NULL, 'H' },
		{ "port", required_argument, NULL, 'p' },
		{ "api-key", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		const char *key = c == 'H' ? "host" : c == 'p' ? "port" : "api_key";
		const char *where = c == 'H' ? "--host" : c == 'p' ? "--port" : "--api-key";
		char set[1024];

		switch (c) {
		case 'H':
		case 'p':
		case 'k':
			if (snprintf(set, sizeof(set), "serve.%s=%s", key, optarg) >= (int)sizeof(set)) {
				fprintf(stderr, "fgcore: serve: %s is too long\n", argv[optind - 1]);
				return FG_EXIT_USAGE;
			}
			if (fg_config_set(cfg, set, where)) {
				fprintf(stderr, "fgcore: serve: %s\n", fg_last_error_text());
				return FG_EXIT_USAGE;
			}
			break;
		case 'h':
			usage(stdout);
			return -1;
		case ':':
			fprintf(stderr, "fgcore: serve: option '%s' needs a value: see fgcore serve --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		default:
			fprintf(stderr, "fgcore: serve: unknown option '%s': see fgcore serve --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fgcore: serve: unexpected argument '%s': see fgcore serve --help\n",
			argv[optind]);
		return FG_EXIT_USAGE;
	}
	return 0;
}

#ifndef HAVE_MICROHTTPD
int fg_cmd_serve(struct fg_config *cfg, int argc, char **argv)
{
	int rc = options(cfg, argc, argv);

	if (rc)
		return rc < 0 ? FG_EXIT_OK : rc;
	fprintf(stderr, "fgcore: serve: this fgcore was built without libmicrohttpd: install it (Debian: libmicrohttpd-dev) and run configure again\n");
	return FG_EXIT_RUNTIME;
}
#else

/* Signals reach the main loop through a pipe: the handler may run on any
 * thread (the BLAS library starts its own before main). */
static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;
	ssize_t w;

	w = write(sig_pipe[1], &c, 1);
	(void)w;
	errno = saved;
}

static int signals_catch(void)
{
	struct sigaction sa;

	if (pipe(sig_pipe))
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN; /* a client gone mid-answer is a write error */
	sigaction(SIGPIPE, &sa, NULL);
	return 0;
}

/* A signal within ms milliseconds (-1: wait for one): it, or 0. */
static int signal_wait(int ms)
{
	struct pollfd p = { .fd = sig_pipe[0], .events = POLLIN };
	char c;

	if (poll(&p, 1, ms) > 0 && read(sig_pipe[0], &c, 1) == 1)
		return (unsigned char)c;
	return 0;
}

static const char *signal_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int fg_cmd_serve(struct fg_config *cfg, int argc, char **argv)
{
	struct fg_serve_http_opts o;
	struct fg_serve_queue *q = NULL;
	struct fg_serve_http *h = NULL;
	struct fg_engine *e = NULL;
	char err[512];
	int rc = options(cfg, argc, argv), sig;

	if (rc)
		return rc < 0 ? FG_EXIT_OK : rc;
	if (signals_catch()) {
		fprintf(stderr, "fgcore: serve: cannot make a pipe: %s\n", strerror(errno));
		return FG_EXIT_RUNTIME;
	}
	memset(&o, 0, sizeof(o));
	o.host = fg_config_str(cfg, "serve", "host");
	o.port = (int)fg_config_int(cfg, "serve", "port");
	o.api_key = fg_config_str(cfg, "serve", "api_key");
	o.model_path = fg_config_str(cfg, "model", "path");
	o.max_body = (size_t)fg_config_size(cfg, "serve", "max_body_bytes");
	o.max_connections = (unsigned)fg_config_int(cfg, "serve", "max_connections");
	o.max_connections_per_ip = (unsigned)fg_config_int(cfg, "serve", "max_connections_per_ip");
	o.timeout_s = (unsigned)fg_config_int(cfg, "serve", "timeout_s");
	o.request_timeout_s = (unsigned)fg_config_int(cfg, "serve", "request_timeout_s");
	o.access_log = fg_cli_verbosity >= 0;
	fg_cli_request_defaults(cfg, &o.defaults);
	double drain = (double)fg_config_int(cfg, "serve", "drain_timeout_s");

	/* A plugin that refuses an option, or a bad [policy], is the
	 * configuration's fault (exit 2), as for `fgcore config`. */
	if (fg_engine_check_config(cfg)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return FG_EXIT_USAGE;
	}
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return FG_EXIT_RUNTIME;
	}
	struct fg_model_info mi;
	fg_engine_info(e, &mi);
	o.engine = e;
	o.model_id = *fg_config_str(cfg, "serve", "model_name") ? fg_config_str(cfg, "serve", "model_name")
								  : mi.name;
	rc = fg_serve_queue_start(&q, e, (size_t)fg_config_int(cfg, "serve", "queue_limit"),
				  (int)fg_config_int(cfg, "serve", "max_wait_ms"),
				  (int)fg_config_int(cfg, "serve", "join_wait_ms"));
	if (rc) {
		fprintf(stderr, "fgcore: serve: cannot start the engine thread: %s\n", strerror(-rc));
		fg_engine_close(e);
		return FG_EXIT_RUNTIME;
	}
	if (fg_serve_http_start(&h, &o, q, err, sizeof(err))) {
		fprintf(stderr, "fgcore: %s\n", err);
		fg_serve_queue_stop(q, 1);
		fg_engine_close(e);
		return FG_EXIT_RUNTIME;
	}
	fprintf(stderr, "fgcore: serve: listening on http://%s:%d (model '%s', batches of up to %zu prompts)\n",
		o.host, fg_serve_http_port(h), o.model_id, fg_serve_queue_batch(q));
	while (!(sig = signal_wait(-1)))
		;
	fg_serve_http_quiesce(h);
	fprintf(stderr, "fgcore: serve: %s: accepting no more requests, finishing the %u in flight\n",
		signal_name(sig), fg_serve_http_active(h));
	rc = FG_EXIT_OK;
	for (double until = now_s() + drain; fg_serve_http_active(h);) {
		int again = signal_wait(100);
		if (again || (drain > 0 && now_s() > until)) {
			fprintf(stderr, "fgcore: serve: %s: ending the %u requests still in flight\n",
				again ? signal_name(again) : "[serve] drain_timeout_s passed",
				fg_serve_http_active(h));
			rc = again ? 128 + again : FG_EXIT_RUNTIME;
			fg_serve_queue_abort(q);
			/* The requests cut get their 503 (a second at most): the
			 * waiters see the abort within a fifth of a second. */
			for (double grace = now_s() + 1; fg_serve_http_active(h) && now_s() < grace;)
				signal_wait(20);
			break;
		}
	}
	fg_serve_http_stop(h);
	fg_serve_queue_stop(q, rc != FG_EXIT_OK);
	struct fg_run_stats st;
	fg_engine_stats(e, &st);
	fg_engine_close(e);
	if (rc == FG_EXIT_OK)
		fprintf(stderr, "fgcore: serve: stopped after %llu requests in %llu batches: %llu positions computed, %llu saved by shared prompt prefixes\n",
			(unsigned long long)st.requests, (unsigned long long)st.batches,
			(unsigned long long)st.positions, (unsigned long long)st.shared_positions);
	return rc;
}
#endif
