/* cli/cmd_run_batch.c - `fgcore run-batch`: JSONL requests in, JSONL results
 * out, one output line per input line, in input order.
 *
 * A line is an OpenAI completions body (cli/completion.h: prompt, max_tokens,
 * temperature, top_p, stop, seed, echo, logprobs, ..., plus top_k,
 * ignore_eos and the older prompt_token_ids) with a "custom_id", answered by
 * a plain record {custom_id, text, token_ids, finish_reason, usage
 * [, logprobs]}; or an OpenAI Batch API line {"custom_id", "method", "url":
 * "/v1/completions", "body"}, answered by OpenAI's batch output line {id,
 * custom_id, response: {status_code, request_id, body: <completion>}, error}.
 * A malformed line, or a request the engine cannot run, yields an error
 * record naming the line; the other lines still run.
 *
 * No finished work is thrown away: the output is opened (and a file output
 * created as OUT.tmp) before the model is loaded, so a bad output path fails at
 * once; a failed write removes OUT.tmp and says so; OUT.tmp is renamed to OUT
 * only once complete.  An output that is not a regular file (stdout, a device,
 * a FIFO) is written through.  SIGINT/SIGTERM stop the job after the batch in
 * flight: the finished results are written, the other lines get "interrupted"
 * error records, and the exit status is 128 + the signal. */
#define _GNU_SOURCE /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/batch_run.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/request.h"
#include "core/engine/engine.h"
#include "core/util/fileio.h"

#define MAX_LINE (64u << 20)

struct line {
	json_t *custom_id;  /* borrowed from root, or NULL */
	json_t *root;
	int envelope;       /* an OpenAI Batch line: OpenAI's output line */
	char *error;        /* set: an error record is written */
	const char *param;  /* the field at fault, or NULL */
	struct fg_completion comp;
	size_t first;       /* its first request in the job's list */
};

static char *parse_line(const char *text, size_t len, const struct fg_request *defaults,
			struct line *l)
{
	json_error_t err;
	json_t *body;
	char *e;

	l->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	if (!l->root) {
		char buf[400];
		snprintf(buf, sizeof(buf), "not valid JSON at column %d: %s", err.column, err.text);
		return strdup(buf);
	}
	if (!json_is_object(l->root))
		return strdup("a request line must be a JSON object");
	l->custom_id = json_object_get(l->root, "custom_id");
	if (!json_is_string(l->custom_id))
		return strdup("\"custom_id\" (a string) is required");
	body = json_object_get(l->root, "body");
	if (body) {
		json_t *url = json_object_get(l->root, "url"), *method = json_object_get(l->root, "method");
		const char *key;
		json_t *v;
		l->envelope = 1;
		if (!json_is_object(body))
			return strdup("\"body\" must be an object");
		if (url && (!json_is_string(url) || strcmp(json_string_value(url), "/v1/completions")))
			return strdup("\"url\" must be \"/v1/completions\" (the only endpoint run-batch serves)");
		if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST")))
			return strdup("\"method\" must be \"POST\"");
		json_object_foreach(l->root, key, v)
			if (strcmp(key, "custom_id") && strcmp(key, "method") && strcmp(key, "url") &&
			    strcmp(key, "body")) {
				char buf[200];
				snprintf(buf, sizeof(buf), "unsupported envelope field \"%.40s\": known are custom_id, method, url, body", key);
				return strdup(buf);
			}
		return fg_completion_parse(body, defaults, 1, &l->comp, &l->param);
	}
	if ((e = fg_completion_parse(l->root, defaults, 1, &l->comp, &l->param)))
		return e;
	if (l->comp.n != 1)
		return strdup("a plain request line takes one prompt: for several, use the OpenAI Batch form {\"custom_id\", \"method\", \"url\", \"body\"}");
	if (l->comp.stream)
		return strdup("\"stream\" is for serve: run-batch writes whole results");
	return NULL;
}

/* A plain line's record: {custom_id, text, token_ids, finish_reason, usage
 * [, logprobs]}, or {custom_id, line, error}. */
static json_t *plain_record(struct fg_engine *e, const struct line *l, size_t lineno,
			    const struct fg_result *r, const char *why)
{
	if (why)
		return json_pack("{s:O?, s:I, s:o}", "custom_id", l->custom_id, "line",
				 (json_int_t)lineno, "error", fg_json_text(why));
	json_t *ch = fg_completion_choice(e, &l->comp, 0, r), *ids = json_array();
	for (size_t i = 0; ids && i < r->n_tokens; i++)
		if (json_array_append_new(ids, json_integer(r->token_ids[i]))) {
			json_decref(ids);
			ids = NULL;
		}
	if (!ch || !ids) {
		json_decref(ch);
		json_decref(ids);
		return NULL;
	}
	json_t *o = json_pack("{s:O, s:O, s:o, s:O, s:o}", "custom_id", l->custom_id, "text",
			      json_object_get(ch, "text"), "token_ids", ids, "finish_reason",
			      json_object_get(ch, "finish_reason"), "usage",
			      fg_completion_usage(&l->comp, r));
	if (o && l->comp.logprobs >= 0 &&
	    json_object_set(o, "logprobs", json_object_get(ch, "logprobs"))) {
		json_decref(o);
		o = NULL;
	}
	json_decref(ch);
	return o;
}

/* An OpenAI Batch output line: {id, custom_id, response: {status_code,
 * request_id, body: <completion>}, error: null}, or response null and an
 * error {code, message}. */
static json_t *batch_record(struct fg_engine *e, const struct line *l, size_t lineno,
			    const struct fg_result *r, const char *why, const char *code)
{
	char id[48], req[48];

	snprintf(id, sizeof(id), "batch_req_%zu", lineno);
	snprintf(req, sizeof(req), "req_%zu", lineno);
	if (why)
		return json_pack("{s:s, s:O?, s:n, s:{s:s, s:o, s:I}}", "id", id, "custom_id",
				 l->custom_id, "response", "error", "code", code, "message",
				 fg_json_text(why), "line", (json_int_t)lineno);
	char cid[48];
	snprintf(cid, sizeof(cid), "cmpl-%zu", lineno);
	json_t *body = fg_completion_object(e, &l->comp, r, cid,
					    l->comp.model ? l->comp.model : e->model.cfg.name, 0);
	return body ? json_pack("{s:s, s:O, s:{s:i, s:s, s:o}, s:n}", "id", id, "custom_id",
				l->custom_id, "response", "status_code", 200, "request_id", req,
				"body", body, "error")
		    : NULL;
}

/* One record as a JSON line in a malloc'd string (NULL: out of memory).
 * res: the line's results (one per choice); not_run: why it did not run. */
static char *format_record(struct fg_engine *e, const struct line *l, size_t lineno,
			   const struct fg_result *res, const char *not_run)
{
	const char *why = l->error ? l->error : not_run ? not_run : fg_completion_error(&l->comp, res);
	const char *code = l->error ? "invalid_request" : not_run ? "not_run" : "refused";
	json_t *o = l->envelope ? batch_record(e, l, lineno, res, why, code)
				: plain_record(e, l, lineno, res, why);
	char *text;

	if (!o)
		return NULL;
	text = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(o);
	return text;
}

/* ---- the output ---------------------------------------------------------------- */

struct output {
	const char *name;  /* for messages: the path as given, or "stdout" */
	char *final;       /* a regular file: renamed onto once complete */
	char *tmp;         /* final + ".tmp"; NULL: written through */
	FILE *f;
};

/* "-", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: that descriptor
 * (written to as it is, never replaced by a file); else -1. */
static int named_fd(const char *path)
{
	const char *num = NULL;
	char *end;
	long fd;

	if (!strcmp(path, "-") || !strcmp(path, "/dev/stdout"))
		return 1;
	if (!strcmp(path, "/dev/stderr"))
		return 2;
	if (!strncmp(path, "/dev/fd/", 8))
		num = path + 8;
	else if (!strncmp(path, "/proc/self/fd/", 14))
		num = path + 14;
	if (!num || *num < '0' || *num > '9')
		return -1;
	errno = 0;
	fd = strtol(num, &end, 10);
	return *end || errno || fd > INT_MAX ? -1 : (int)fd;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a && b && a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Open where the results go, before any work: every way the output can be
 * wrong is found here.  in: the input file (NULL: not a regular file).
 * Returns 0, or 2 (the output named is wrong) / 1 (it cannot be made) with one
 * line printed. */
static int output_open(struct output *o, const char *path, const struct stat *in)
{
	struct stat st, lst;
	int fd = named_fd(path), flags;

	memset(o, 0, sizeof(*o));
	o->name = strcmp(path, "-") ? path : "stdout";
	if (fd >= 0) {
		int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);

		if (d < 0) {
			fprintf(stderr, "fgcore: run-batch: --output %s: descriptor %d is not open\n",
				path, fd);
			return 2;
		}
		if (fstat(d, &st) == 0 && in && S_ISREG(st.st_mode) && same_file(&st, in)) {
			fprintf(stderr, "fgcore: run-batch: --output %s is the input file: give another output\n",
				path);
			close(d);
			return 2;
		}
		fd = d;
		goto through;
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			fprintf(stderr, "fgcore: run-batch: --output %s is a directory: give a file name for the results\n",
				path);
			return 2;
		}
		/* A device, FIFO or socket is written through, never replaced;
		 * O_NONBLOCK: a FIFO without a reader fails at once instead of hanging. */
		fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			fprintf(stderr, "fgcore: run-batch: cannot write to --output %s (%s): %s\n", path,
				fg_file_kind(st.st_mode),
				e == ENXIO && S_ISFIFO(st.st_mode) ? "no process has it open for reading; start the reader first"
								   : strerror(e));
			return 1;
		}
		flags = fcntl(fd, F_GETFL);
		if (flags != -1)
			(void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
		goto through;
	}
	if (stat(path, &st) == 0 && same_file(&st, in)) {
		fprintf(stderr, "fgcore: run-batch: --output %s is the input file: the results would replace the requests; give another output\n",
			path);
		return 2;
	}
	/* A symbolic link's target is replaced, not the link. */
	if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) && stat(path, &st) == 0)
		o->final = realpath(path, NULL);
	else
		o->final = strdup(path);
	o->tmp = o->final ? malloc(strlen(o->final) + 5) : NULL;
	if (!o->tmp) {
		fprintf(stderr, "fgcore: run-batch: out of memory\n");
		return 1;
	}
	sprintf(o->tmp, "%s.tmp", o->final);
	if (stat(o->tmp, &st) == 0 && same_file(&st, in)) {
		fprintf(stderr, "fgcore: run-batch: --output %s would be written through %s, the input file: give another output\n",
			path, o->tmp);
		return 2;
	}
	fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		fprintf(stderr, "fgcore: run-batch: cannot create %s for --output %s: %s%s\n", o->tmp,
			path, strerror(e), e == ENOENT ? " (does its folder exist?)" : "");
		free(o->tmp);
		o->tmp = NULL;
		return 1;
	}
	goto open;
through:
	free(o->final);
	o->final = NULL;
open:
	o->f = fdopen(fd, "w");
	if (!o->f) {
		fprintf(stderr, "fgcore: run-batch: out of memory\n");
		close(fd);
		return 1;
	}
	return 0;
}

/* Give up on the output: a file output's OUT.tmp is removed. */
static void output_abandon(struct output *o)
{
	if (o->f)
		fclose(o->f);
	o->f = NULL;
	if (o->tmp)
		unlink(o->tmp);
}

static void output_free(struct output *o)
{
	free(o->final);
	free(o->tmp);
	memset(o, 0, sizeof(*o));
}

/* A failed write: say what happened to the output. */
static void output_failed(struct output *o, int err)
{
	if (o->tmp) {
		output_abandon(o);
		fprintf(stderr, "fgcore: run-batch: writing %s failed: %s; removed it, nothing written to %s\n",
			o->tmp, strerror(err), o->final);
	} else {
		output_abandon(o);
		fprintf(stderr, "fgcore: run-batch: writing the results to %s failed: %s\n", o->name,
			strerror(err));
	}
}

/* Complete the output: flush, sync and rename a file output.  0, or 1 with
 * one line printed (nothing left behind). */
static int output_commit(struct output *o)
{
	int err;

	if (fflush(o->f) != 0) {
		output_failed(o, errno ? errno : EIO);
		return 1;
	}
	if (o->tmp && fsync(fileno(o->f)) != 0) {
		output_failed(o, errno);
		return 1;
	}
	err = fclose(o->f);
	o->f = NULL;
	if (err) {
		output_failed(o, errno ? errno : EIO);
		return 1;
	}
	if (o->tmp && rename(o->tmp, o->final) != 0) {
		err = errno;
		unlink(o->tmp);
		fprintf(stderr, "fgcore: run-batch: cannot rename %s to %s: %s; removed it\n", o->tmp,
			o->final, strerror(err));
		return 1;
	}
	return 0;
}

/* ---- signals ----------------------------------------------------------------- */

static volatile sig_atomic_t rb_signal;
static char rb_tmp[PATH_MAX + 8];  /* removed when a second signal ends us at once */
static char rb_quit[PATH_MAX + 160];
static size_t rb_quit_len;

/* Async-signal-safe only: the first signal sets a flag (the job stops after
 * the batch in flight); a second removes OUT.tmp and ends the process. */
static void rb_on_signal(int sig)
{
	ssize_t w;

	if (rb_signal) {
		if (rb_tmp[0])
			unlink(rb_tmp);
		w = write(STDERR_FILENO, rb_quit, rb_quit_len);
		(void)w;
		_exit(128 + sig);
	}
	rb_signal = sig;
}

static void rb_signals(const struct output *o, struct sigaction old[2])
{
	struct sigaction sa;

	rb_signal = 0;
	rb_tmp[0] = '\0';
	if (o->tmp && strlen(o->tmp) < sizeof(rb_tmp))
		memcpy(rb_tmp, o->tmp, strlen(o->tmp) + 1);
	snprintf(rb_quit, sizeof(rb_quit),
		 "fgcore: run-batch: interrupted again: the batch in flight abandoned, nothing written to %s\n",
		 o->final ? o->final : o->name);
	rb_quit_len = strlen(rb_quit);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = rb_on_signal;
	sa.sa_flags = SA_RESTART; /* the batch in flight goes on undisturbed */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaction(SIGINT, &sa, &old[0]);
	sigaction(SIGTERM, &sa, &old[1]);
}

static void rb_signals_restore(const struct sigaction old[2])
{
	sigaction(SIGINT, &old[0], NULL);
	sigaction(SIGTERM, &old[1], NULL);
}

static const char *signal_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* ---- the command ----------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: fgcore [-c CONFIG] [-o section.key=value]... run-batch --input IN.jsonl --output OUT.jsonl\n"
		   "  IN or OUT '-': stdin, stdout; an OUT that is not a regular file (a device, a\n"
		   "  FIFO) is written through; a file OUT is written as OUT.tmp, renamed once complete\n");
}

int fg_cmd_run_batch(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *in_path = NULL, *out_path = NULL;
	struct line *lines = NULL;
	struct fg_request defaults;
	struct fg_result *res = NULL;
	struct fg_request *reqs = NULL;
	unsigned char *done = NULL;
	size_t n = 0, cap = 0, nreq = 0, failed = 0, finished = 0;
	struct fg_engine *e = NULL;
	struct output out = { 0 };
	struct sigaction old_sig[2], old_pipe, ign;
	struct stat in_st = { 0 };
	int have_in_st = 0, signals_set = 0, c, rc = 2;
	char *buf = NULL, not_run[96] = "";
	size_t bcap = 0;
	ssize_t len;
	FILE *in = NULL;
	long got;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			in_path = optarg;
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "fgcore: run-batch: option '%s' needs a value: see fgcore run-batch --help\n",
				argv[optind - 1]);
			return 2;
		default:
			if (optopt)
				fprintf(stderr, "fgcore: run-batch: unknown option '-%c': see fgcore run-batch --help\n",
					optopt);
			else
				fprintf(stderr, "fgcore: run-batch: unknown option '%s': see fgcore run-batch --help\n",
					argv[optind - 1]);
			return 2;
		}
	}
	if (!in_path || !out_path || optind < argc) {
		if (optind < argc)
			fprintf(stderr, "fgcore: run-batch: unexpected argument '%s': give --input IN.jsonl and --output OUT.jsonl\n",
				argv[optind]);
		else
			fprintf(stderr, "fgcore: run-batch: give --input IN.jsonl and --output OUT.jsonl\n");
		return 2;
	}
	rc = 1;
	if (strcmp(in_path, "-")) {
		/* O_NONBLOCK: a FIFO must not hang the open; only regular files. */
		int fd = open(in_path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

		if (fd < 0) {
			fprintf(stderr, "fgcore: run-batch: cannot open %s: %s\n", in_path, strerror(errno));
			return 1;
		}
		if (fstat(fd, &in_st) != 0 || !S_ISREG(in_st.st_mode)) {
			fprintf(stderr, "fgcore: run-batch: --input %s is %s: give a file, or '-' to read standard input\n",
				in_path, fg_file_kind(in_st.st_mode));
			close(fd);
			return 2;
		}
		have_in_st = 1;
		int fl = fcntl(fd, F_GETFL);
		if (fl != -1)
			(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		in = fdopen(fd, "r");
		if (!in) {
			close(fd);
			goto oom;
		}
	} else {
		in = stdin;
		have_in_st = fstat(STDIN_FILENO, &in_st) == 0 && S_ISREG(in_st.st_mode);
	}
	rc = output_open(&out, out_path, have_in_st ? &in_st : NULL);
	if (rc) {
		output_free(&out);
		if (in != stdin)
			fclose(in);
		return rc;
	}
	rc = 1;
	/* From here on a signal finishes the batch in flight, then writes what is done;
	 * a reader gone from a pipe output is a write error, not a silent death. */
	rb_signals(&out, old_sig);
	signals_set = 1;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, &old_pipe);

	fg_cli_request_defaults(cfg, &defaults);
	while ((len = getline(&buf, &bcap, in)) >= 0) {
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 256;
			struct line *nl = realloc(lines, ncap * sizeof(*nl));
			if (!nl)
				goto oom;
			lines = nl;
			cap = ncap;
		}
		struct line *l = &lines[n++];
		memset(l, 0, sizeof(*l));
		while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
			len--;
		if ((size_t)len > MAX_LINE)
			l->error = strdup("line longer than 64 MiB");
		else
			l->error = parse_line(buf, (size_t)len, &defaults, l);
	}
	if (ferror(in)) {
		fprintf(stderr, "fgcore: run-batch: reading %s failed: %s; %s not written\n", in_path,
			strerror(errno), out.final ? out.final : out.name);
		output_abandon(&out);
		goto out;
	}
	if (!rb_signal && fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		output_abandon(&out);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		nreq += lines[i].error ? 0 : lines[i].comp.n;
	reqs = calloc(nreq ? nreq : 1, sizeof(*reqs));
	res = calloc(nreq ? nreq : 1, sizeof(*res));
	done = calloc(nreq ? nreq : 1, 1);
	if (!reqs || !res || !done)
		goto oom;
	nreq = 0;
	for (size_t i = 0; i < n && e; i++) {
		if (lines[i].error)
			continue;
		fg_completion_bind(&lines[i].comp, e);
		lines[i].first = nreq;
		for (size_t k = 0; k < lines[i].comp.n; k++)
			reqs[nreq++] = lines[i].comp.reqs[k];
	}
	got = e ? fg_cli_generate_batches(e, reqs, nreq, res, done, &rb_signal) : 0;
	if (got < 0)
		goto oom;
	finished = (size_t)got;
	if (rb_signal && finished == 0) {
		output_abandon(&out);
		fprintf(stderr, "fgcore: run-batch: interrupted (%s) before any request finished; nothing written to %s\n",
			signal_name(rb_signal), out.final ? out.final : out.name);
		rc = 128 + rb_signal;
		goto out;
	}
	if (rb_signal)
		snprintf(not_run, sizeof(not_run), "not run: the job was interrupted (%s)",
			 signal_name(rb_signal));
	for (size_t i = 0; i < n; i++) {
		const struct line *l = &lines[i];
		const struct fg_result *r = l->error ? NULL : &res[l->first];
		const char *why = NULL;
		char *rec;

		for (size_t k = 0; r && k < l->comp.n; k++)
			if (!done[l->first + k])
				why = not_run;
		failed += l->error || why || (r && fg_completion_error(&l->comp, r));
		rec = format_record(e, l, i + 1, r, why);
		if (!rec) {
			output_abandon(&out);
			fprintf(stderr, "fgcore: run-batch: out of memory formatting the record of line %zu; %s not written\n",
				i + 1, out.final ? out.final : out.name);
			goto out;
		}
		errno = 0;
		if (fputs(rec, out.f) == EOF || fputc('\n', out.f) == EOF) {
			free(rec);
			output_failed(&out, errno ? errno : EIO);
			goto out;
		}
		free(rec);
	}
	if (output_commit(&out))
		goto out;
	/* Written: a late signal must not unlink or report anything any more. */
	rb_signals_restore(old_sig);
	signals_set = 0;
	sigaction(SIGPIPE, &old_pipe, NULL);
	if (rb_signal) {
		fprintf(stderr, "fgcore: run-batch: interrupted (%s) after the batch in flight: %zu of %zu requests finished, their results are in %s; the other %zu lines have \"interrupted\" error records\n",
			signal_name(rb_signal), finished, nreq, out.final ? out.final : out.name,
			nreq - finished);
		rc = 128 + rb_signal;
		goto out;
	}
	if (failed)
		fprintf(stderr, "fgcore: run-batch: %zu of %zu lines failed; see their error records in %s\n",
			failed, n, out.final ? out.final : out.name);
	rc = failed ? 1 : 0;
	goto out;
oom:
	fprintf(stderr, "fgcore: run-batch: out of memory\n");
	output_abandon(&out);
out:
	if (out.f)
		output_abandon(&out);
	output_free(&out);
	if (signals_set) {
		rb_signals_restore(old_sig);
		sigaction(SIGPIPE, &old_pipe, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		json_decref(lines[i].root);
		free(lines[i].error);
		fg_completion_free(&lines[i].comp);
	}
	for (size_t i = 0; res && i < nreq; i++)
		fg_result_clear(&res[i]);
	free(lines);
	free(reqs);
	free(res);
	free(done);
	free(buf);
	if (in && in != stdin)
		fclose(in);
	fg_engine_close(e);
	return rc;
}
