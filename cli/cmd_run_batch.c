/* cli/cmd_run_batch.c - `fgcore run-batch`: JSONL requests in, JSONL results
 * out, one output line per input line, in input order, for jobs of millions
 * of lines.
 *
 * A line is an OpenAI completions body (cli/completion.h: prompt, max_tokens,
 * temperature, top_p, stop, seed, echo, logprobs, ..., plus top_k,
 * ignore_eos and the older prompt_token_ids) with a "custom_id", answered by
 * a plain record {custom_id, text, token_ids, finish_reason, usage
 * [, logprobs]}; or an OpenAI Batch API line {"custom_id", "method", "url":
 * "/v1/completions", "body"}, answered by OpenAI's batch output line {id,
 * custom_id, response: {status_code, request_id, body: <completion>}, error}.
 * A malformed line, or a request the engine cannot run, yields an error
 * record naming the line; the other lines still run.  Every field is a
 * function of the input line and its number ("created" is 0), so a resumed
 * job writes the same bytes as an uninterrupted one.
 *
 * The input is read a window of lines at a time (--window, memory bounded
 * whatever the file's length); a window's requests run in length buckets
 * (core/request/run.c) and its records are written in input order once all of
 * them are done.  Each finished line's record is appended to a journal
 * (cli/batch_journal.h; OUT.journal next to a file output, or --journal) as
 * its batch ends: the same command run again after a kill, a full disk or a
 * signal keeps those records and computes only the batches they do not
 * cover: a kept line still takes its place in its batch (fgcore.h's
 * `known`), so each batch computes what it did the first time.
 *
 * No finished work is thrown away: the output is opened (and a file output
 * created as OUT.tmp) before the model is loaded, so a bad output path fails at
 * once; a failed write removes OUT.tmp and says so; OUT.tmp is renamed to OUT
 * only once complete, and the journal then removed.  OUT.tmp and the journal
 * are locked while the job runs: a second run on the same output or journal
 * is refused at once, neither sharing nor removing them.  An output that is not a
 * regular file (stdout, a device, a FIFO) is written through, window by
 * window.  SIGINT/SIGTERM stop the job after the batch in flight: with a
 * journal, nothing is written to OUT and the same command resumes; without
 * one, the finished results are written, the other lines get "interrupted"
 * error records.  The exit status is then 128 + the signal. */
#define _GNU_SOURCE /* realpath, vasprintf */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fanout.h>
#include <fgcore/fgcore.h>
#include "cli/batch_journal.h"
#include "cli/batch_progress.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/request.h"
#include "core/util/clock.h"
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
	struct fg_model_info mi;
	snprintf(cid, sizeof(cid), "cmpl-%zu", lineno);
	fg_engine_info(e, &mi);
	json_t *body = fg_completion_object(e, &l->comp, r, cid,
					    l->comp.model ? l->comp.model : mi.name, 0);
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
	int lock;          /* holds OUT.tmp's lock until the job is over; -1: none */
	int renaming;      /* output_commit got to the rename */
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

/* What a path is, for messages. */
static const char *kind_of(mode_t mode)
{
	return S_ISLNK(mode) ? "a symbolic link" : fg_file_kind(mode);
}

/* Create OUT.tmp and lock it (flock): while this run holds the lock no
 * other run of the job writes, shares or removes it, and a second run is
 * refused at once.  A killed run's OUT.tmp (its lock gone with it) is
 * taken over and emptied.  The descriptor, or -1 with one line printed
 * and *rc set (1; 2: OUT.tmp is something run-batch did not make). */
static int tmp_open(const struct output *o, const char *path, int *rc)
{
	*rc = 1;
	for (int tries = 0; tries < 16; tries++) {
		struct stat a, b;
		int fd, fl;

		if (lstat(o->tmp, &a) == 0 && !S_ISREG(a.st_mode)) {
			fprintf(stderr, "fgcore: run-batch: %s (where --output %s is written) is %s: remove it, or give another output\n",
				o->tmp, path, kind_of(a.st_mode));
			*rc = 2;
			return -1;
		}
		/* O_NONBLOCK: a FIFO put there meanwhile must not hang the open. */
		fd = open(o->tmp, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK,
			  0666);
		if (fd < 0) {
			int e = errno;
			fprintf(stderr, "fgcore: run-batch: cannot create %s for --output %s: %s%s\n",
				o->tmp, path, strerror(e), e == ENOENT ? " (does its folder exist?)" : "");
			return -1;
		}
		if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
			fprintf(stderr, "fgcore: run-batch: %s (where --output %s is written) is %s: remove it, or give another output\n",
				o->tmp, path, kind_of(a.st_mode));
			close(fd);
			*rc = 2;
			return -1;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int e = errno;
			if (e == EWOULDBLOCK) {
				fprintf(stderr, "fgcore: run-batch: --output %s is being written by another run-batch (it holds %s): wait for that run to end, or give another output\n",
					path, o->tmp);
				close(fd);
				return -1;
			}
			/* A file system without locks: the job still runs. */
			if (e != ENOLCK && e != EOPNOTSUPP && e != ENOSYS) {
				fprintf(stderr, "fgcore: run-batch: cannot lock %s for --output %s: %s\n",
					o->tmp, path, strerror(e));
				close(fd);
				return -1;
			}
			fprintf(stderr, "fgcore: run-batch: warning: cannot lock %s (%s): nothing stops a second run of the job from writing it too\n",
				o->tmp, strerror(e));
		}
		/* Removed or renamed by the run that held it: take the new one. */
		if (stat(o->tmp, &b) != 0 || !same_file(&a, &b)) {
			close(fd);
			continue;
		}
		fl = fcntl(fd, F_GETFL);
		if (fl != -1)
			(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		if (ftruncate(fd, 0) != 0) {
			fprintf(stderr, "fgcore: run-batch: cannot empty %s for --output %s: %s\n", o->tmp,
				path, strerror(errno));
			close(fd);
			return -1;
		}
		return fd;
	}
	fprintf(stderr, "fgcore: run-batch: %s keeps being removed or replaced by another process: give another output\n",
		o->tmp);
	return -1;
}

/* Open where the results go, before any work: every way the output can be
 * wrong is found here.  in: the input file (NULL: not a regular file).
 * Returns 0, or 2 (the output named is wrong) / 1 (it cannot be made, or
 * another run is writing it) with one line printed. */
static int output_open(struct output *o, const char *path, const struct stat *in)
{
	struct stat st, lst;
	int fd = named_fd(path), flags;

	memset(o, 0, sizeof(*o));
	o->lock = -1;
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
	fd = tmp_open(o, path, &flags);
	if (fd < 0) {
		free(o->tmp);
		o->tmp = NULL;
		return flags;
	}
	o->lock = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (o->lock < 0) {
		fprintf(stderr, "fgcore: run-batch: cannot hold the lock of %s: %s\n", o->tmp,
			strerror(errno));
		unlink(o->tmp);
		close(fd);
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

/* Is OUT.tmp still the file this run made and locked? */
static int tmp_is_ours(const struct output *o)
{
	struct stat a, b;

	return o->lock >= 0 && fstat(o->lock, &a) == 0 && stat(o->tmp, &b) == 0 && same_file(&a, &b);
}

/* Give up on the output: a file output's OUT.tmp is removed (if it is
 * still ours: another process's file is never removed). */
static void output_abandon(struct output *o)
{
	if (o->f)
		fclose(o->f);
	o->f = NULL;
	if (o->tmp && tmp_is_ours(o))
		unlink(o->tmp);
}

/* The lock is released last: after the rename and the journal's removal. */
static void output_free(struct output *o)
{
	if (o->lock >= 0)
		close(o->lock);
	free(o->final);
	free(o->tmp);
	memset(o, 0, sizeof(*o));
	o->lock = -1;
}

/* What to do after a failed write: how to resume. */
static const char *resume_advice(int err)
{
	switch (err) {
	case ENOSPC:
	case EDQUOT:
		return "make room and run the same command again to resume";
	case EFBIG:
		return "make room and run the same command again to resume (the room short is the file size limit: raise ulimit -f)";
	default:
		return "run the same command again to resume";
	}
}

/* A failed write, or a failed output_commit: say what happened to the
 * output; note (may be "") says what is kept for a later run. */
static void output_failed(struct output *o, int err, const char *note)
{
	int replaced = o->tmp && !tmp_is_ours(o);

	output_abandon(o);
	if (o->tmp && replaced)
		fprintf(stderr, "fgcore: run-batch: %s was removed or replaced by another process while the job ran; nothing written to %s%s\n",
			o->tmp, o->final, note);
	else if (o->tmp && o->renaming)
		fprintf(stderr, "fgcore: run-batch: cannot rename %s to %s: %s; removed it%s\n", o->tmp,
			o->final, strerror(err), note);
	else if (o->tmp)
		fprintf(stderr, "fgcore: run-batch: writing %s failed: %s; removed it, nothing written to %s%s\n",
			o->tmp, strerror(err), o->final, note);
	else
		fprintf(stderr, "fgcore: run-batch: writing the results to %s failed: %s%s\n", o->name,
			strerror(err), note);
}

/* Complete the output: flush, sync and rename a file output (still
 * locked: no other run can take OUT.tmp between the two).  0, or the errno
 * of what failed, for output_failed. */
static int output_commit(struct output *o)
{
	int err;

	errno = 0;
	if (fflush(o->f) != 0)
		return errno ? errno : EIO;
	if (o->tmp && fsync(fileno(o->f)) != 0)
		return errno;
	errno = 0;
	err = fclose(o->f);
	o->f = NULL;
	if (err)
		return errno ? errno : EIO;
	if (o->tmp && !tmp_is_ours(o))
		return ESTALE;
	o->renaming = 1;
	if (o->tmp && rename(o->tmp, o->final) != 0)
		return errno;
	o->renaming = 0;
	return 0;
}

/* ---- signals ----------------------------------------------------------------- */

static volatile sig_atomic_t rb_signal;
static char rb_tmp[PATH_MAX + 8];  /* removed when a second signal ends us at once */
static char rb_quit[2 * PATH_MAX + 200];
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

static void rb_signals(const struct output *o, const char *journal, struct sigaction old[2])
{
	struct sigaction sa;

	rb_signal = 0;
	rb_tmp[0] = '\0';
	if (o->tmp && strlen(o->tmp) < sizeof(rb_tmp))
		memcpy(rb_tmp, o->tmp, strlen(o->tmp) + 1);
	if (journal)
		snprintf(rb_quit, sizeof(rb_quit),
			 "fgcore: run-batch: interrupted again: the batch in flight abandoned, nothing written to %s; the finished lines are kept in %s: run the same command again to resume\n",
			 o->final ? o->final : o->name, journal);
	else
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

/* ---- the job ----------------------------------------------------------------- */

#define DEFAULT_WINDOW 4096
#define MAX_WINDOW (1u << 24)

struct run {
	struct fg_engine *e;
	struct fg_journal *jr;     /* NULL: no journal */
	struct fg_progress prog;
	struct fg_run_stats st0;   /* the engine's counts when the job began */
	/* the window: n lines after line number base */
	struct line *lines;
	char **recs;               /* each line's record, once it has one */
	uint64_t *hash;            /* of each line's text */
	char **text;               /* each line's text, until parsed */
	size_t *tlen;
	const struct fg_request *defaults;
	size_t n, base;
	struct fg_request *reqs;   /* the window's requests */
	struct fg_result *res;
	size_t *line_of;           /* a request's line */
	size_t *left;              /* a line's requests not done yet */
	size_t *ready, n_ready;    /* lines whose requests are done, not yet formatted */
	size_t *pending, n_pending; /* lines whose records are being made (records_start) */
	pthread_t maker;
	int making;                /* the maker thread runs */
	size_t rcap;
	/* the job */
	size_t lines_done, ran, kept, failed;
	size_t had;                /* records the journal held when opened */
	int jerr;                  /* the journal's write error (errno), or 0 */
	long kill_after;           /* test hook: SIGKILL after this many records; -1: off */
};

/* Does a record report a failure? (Its "error" is a string or an object;
 * inside a JSON string a quote is always escaped, so this cannot match text.) */
static int is_failure(const char *rec)
{
	return strstr(rec, "\"error\":\"") || strstr(rec, "\"error\":{");
}

/* A request's result: a line whose every request is done waits for its
 * record (records_start). */
static int on_result(void *arg, size_t index, struct fg_result *res)
{
	struct run *r = arg;
	size_t li = r->line_of[index];

	r->res[index] = *res;
	if (--r->left[li] == 0)
		r->ready[r->n_ready++] = li;
	return 0;
}

/* Items [from, to) of a window's list, done by one thread of over_cpus. */
struct slice {
	struct run *r;
	void (*each)(struct run *r, size_t i);
	size_t from, to;
};

static void slice_run(void *arg)
{
	struct slice *s = arg;

	for (size_t i = s->from; i < s->to; i++)
		s->each(s->r, i);
}

/* each(r, i) for every i in [0, n), spread over the CPUs (at least
 * per_thread items a thread). */
static void over_cpus(struct run *r, size_t n, uint64_t per_thread,
		      void (*each)(struct run *r, size_t i))
{
	struct slice job[FG_FANOUT_MAX];
	int t = fg_fanout_threads(0, n, per_thread);

	for (int k = 0; k < t; k++)
		job[k] = (struct slice){ r, each, n * (size_t)k / (size_t)t,
					 n * (size_t)(k + 1) / (size_t)t };
	fg_fanout(slice_run, job, sizeof(job[0]), t);
}

/* Line i of the window parsed (a scoring job's lines hold thousands of ids
 * each: the window's are parsed over the CPUs). */
static void parse_one(struct run *r, size_t i)
{
	if (!r->text[i])
		return;
	r->lines[i].error = parse_line(r->text[i], r->tlen[i], r->defaults, &r->lines[i]);
	free(r->text[i]);
	r->text[i] = NULL;
}

/* Pending line i's record. */
static void format_one(struct run *r, size_t i)
{
	size_t li = r->pending[i];
	struct line *l = &r->lines[li];

	r->recs[li] = format_record(r->e, l, r->base + li + 1, &r->res[l->first], NULL);
}

/* The pending lines' records, over the CPUs. */
static void *records_make(void *arg)
{
	struct run *r = arg;

	over_cpus(r, r->n_pending, 4, format_one);
	return NULL;
}

/* The pending records, once made, into the journal in the order their
 * lines finished. */
static int records_settle(struct run *r)
{
	int rc;

	if (r->making)
		pthread_join(r->maker, NULL);
	r->making = 0;
	for (size_t i = 0; i < r->n_pending; i++) {
		size_t li = r->pending[i];
		struct line *l = &r->lines[li];
		const char *rec = r->recs[li];
		for (size_t c = 0; c < l->comp.n; c++)
			fg_result_clear(&r->res[l->first + c]);
		if (!rec) {
			r->jerr = ENOMEM;
			continue;
		}
		if (r->jr && !r->jerr &&
		    (rc = fg_journal_append(r->jr, r->base + li + 1, r->hash[li], rec)))
			r->jerr = -rc;
		r->lines_done++;
		r->ran++;
		r->failed += is_failure(rec) != 0;
	}
	r->n_pending = 0;
	return r->jerr != 0;
}

/* The ready lines' records made while the next batch computes (echoed
 * log-probabilities are a large JSON a prompt: made one by one on the
 * engine thread, they kept the GPU waiting longer than the batch took). */
static void records_start(struct run *r)
{
	size_t *t = r->pending;

	records_settle(r);
	r->pending = r->ready;
	r->n_pending = r->n_ready;
	r->ready = t;
	r->n_ready = 0;
	if (!r->n_pending)
		return;
	r->making = pthread_create(&r->maker, NULL, records_make, r) == 0;
	if (!r->making)
		records_make(r);
}

/* A batch ended: its records reach the disk, the progress moves. */
static int on_batch_end(void *arg, const struct fg_run_progress *p)
{
	struct run *r = arg;
	struct fg_run_stats now;
	int rc;

	/* The batch before's records are journaled; this one's are made
	 * while the next one computes. */
	records_start(r);
	if (r->jr && !r->jerr && (rc = fg_journal_flush(r->jr, 0)))
		r->jerr = -rc;
	if (r->jr && r->kill_after > 0 && fg_journal_appended(r->jr) >= (size_t)r->kill_after) {
		fg_journal_flush(r->jr, 0);
		raise(SIGKILL);
	}
	fg_engine_stats(r->e, &now);
	fg_progress_work(&r->prog, now.prompt_tokens - r->st0.prompt_tokens,
			 now.generated_tokens - r->st0.generated_tokens, p->work_done, p->work_total);
	fg_progress_update(&r->prog, r->lines_done);
	return r->jerr != 0;
}

/* Room for a window of requests. */
static int run_reserve(struct run *r, size_t nreq)
{
	if (nreq <= r->rcap)
		return 0;
	free(r->reqs);
	free(r->res);
	free(r->line_of);
	r->reqs = calloc(nreq, sizeof(*r->reqs));
	r->res = calloc(nreq, sizeof(*r->res));
	r->line_of = calloc(nreq, sizeof(*r->line_of));
	r->rcap = r->reqs && r->res && r->line_of ? nreq : 0;
	return r->rcap ? 0 : -ENOMEM;
}

/* Free the window's lines, records and any results left. */
static void window_clear(struct run *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct line *l = &r->lines[i];
		for (size_t c = 0; !l->error && !r->recs[i] && c < l->comp.n && l->first + c < r->rcap; c++)
			fg_result_clear(&r->res[l->first + c]);
		json_decref(l->root);
		free(l->error);
		fg_completion_free(&l->comp);
		free(r->recs[i]);
		memset(l, 0, sizeof(*l));
		r->recs[i] = NULL;
	}
	r->n = 0;
}

/* Lines in a regular file, for the progress display (0: not known). */
static size_t count_lines(int fd)
{
	char buf[1 << 16];
	size_t n = 0, last = '\n';
	off_t off = 0;
	ssize_t got;

	while ((got = pread(fd, buf, sizeof(buf), off)) > 0) {
		for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + got - p))); p++)
			n++;
		last = (unsigned char)buf[got - 1];
		off += got;
	}
	return got < 0 ? 0 : n + (last != '\n');
}

/* A malloc'd formatted text, or NULL (out of memory). */
__attribute__((format(printf, 1, 2))) static char *text_of(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

/* A model or tokenizer folder's identity for the journal: the files a
 * model is read from (their names, sizes and times), summed up as "N
 * files, B bytes, newest modified T, id H"; a file's is its size and time.
 * Replaced weights change it; a copy with its times kept does not.  NULL:
 * out of memory. */
static char *files_identity(const char *path)
{
	static const char *const kinds[] = { ".json", ".safetensors", ".npy", ".txt", ".model", ".bin" };
	struct dirent **names = NULL;
	struct stat st;
	struct tm tm;
	uint64_t h = FG_HASH_INIT, bytes = 0;
	time_t newest = 0;
	char when[32] = "never";
	int n, files = 0;

	if (stat(path, &st) != 0)
		return text_of("not found (%s)", strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		if (gmtime_r(&st.st_mtime, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		return text_of("%llu bytes, modified %s", (unsigned long long)st.st_size, when);
	}
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0)
		return text_of("not readable (%s)", strerror(errno));
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		size_t len = strlen(name), k;
		char *full;

		for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
			if (len > strlen(kinds[k]) && !strcmp(name + len - strlen(kinds[k]), kinds[k]))
				break;
		full = k < sizeof(kinds) / sizeof(kinds[0]) && name[0] != '.'
			       ? text_of("%s/%s", path, name) : NULL;
		if (full && stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
			uint64_t v[2] = { (uint64_t)st.st_size, (uint64_t)st.st_mtime };
			h = fg_hash(fg_hash(h, name, len + 1), v, sizeof(v));
			bytes += (uint64_t)st.st_size;
			newest = st.st_mtime > newest ? st.st_mtime : newest;
			files++;
		}
		free(full);
		free(names[i]);
	}
	free(names);
	if (files && gmtime_r(&newest, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	return text_of("%d files, %llu bytes, newest modified %s, id %016llx", files,
		       (unsigned long long)bytes, when, (unsigned long long)h);
}

static int set_text(json_t *job, const char *key, const char *value)
{
	json_t *v = value ? fg_json_text(value) : NULL;

	return v ? json_object_set_new(job, key, v) : -1;
}

/* The keys of these configuration sections, as `fgcore config` prints
 * them (plugin options included), into job as "section.key". */
static int set_sections(json_t *job, const struct fg_config *cfg)
{
	static const char *const sections[] = { "policy", "compute" };
	char *text = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int in = 0, rc = 0;

	if (!f)
		return -1;
	if (fg_config_print(cfg, f) != 0)
		rc = -1;
	if (fclose(f) != 0 || !text)
		rc = -1;
	for (line = text ? strtok_r(text, "\n", &save) : NULL; !rc && line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[160], *eq;
		if (line[0] == '[') {
			in = 0;
			for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
				if (!strncmp(line + 1, sections[i], strlen(sections[i])) &&
				    !strcmp(line + 1 + strlen(sections[i]), "]"))
					in = (int)i + 1;
			continue;
		}
		if (!in || line[0] == ';' || !(eq = strstr(line, " =")))
			continue;
		snprintf(key, sizeof(key), "%s.%.*s", sections[in - 1], (int)(eq - line), line);
		rc = set_text(job, key, eq[2] == ' ' ? eq + 3 : eq + 2);
	}
	free(text);
	return rc;
}

/* The settings that change the bytes of a result: the model and its
 * files, the tokenizer, the request defaults, the batch shape and the rest
 * of [policy], the compute plugin and its options, the pipeline's
 * micro-batches, --window and --order (on the CPU backend even a request's
 * batch mates change the last bits of its log-probabilities).  NULL: out of
 * memory. */
static json_t *job_settings(const struct fg_config *cfg, const struct fg_request *d,
			    size_t window, int input_order)
{
	static const char *const paths[][2] = { { "path", "model.path's files" },
						{ "tokenizer", "model.tokenizer's files" } };
	json_t *job = json_object();
	char v[64];
	int bad = !job;

	for (size_t i = 0; i < 2; i++) {
		const char *p = fg_config_str(cfg, "model", paths[i][0]);
		char *real = *p && strncmp(p, "dummy:", 6) ? realpath(p, NULL) : NULL;
		char *id = real ? files_identity(real) : NULL;
		char key[32];

		snprintf(key, sizeof(key), "model.%s", paths[i][0]);
		bad |= set_text(job, key, real ? real : p);
		if (real)
			bad |= !id || set_text(job, paths[i][1], id);
		free(real);
		free(id);
	}
	snprintf(v, sizeof(v), "%d", d->max_new_tokens);
	bad |= set_text(job, "generate.max_new_tokens", v);
	snprintf(v, sizeof(v), "%.9g", (double)d->temperature);
	bad |= set_text(job, "generate.temperature", v);
	snprintf(v, sizeof(v), "%d", d->top_k);
	bad |= set_text(job, "generate.top_k", v);
	snprintf(v, sizeof(v), "%.9g", (double)d->top_p);
	bad |= set_text(job, "generate.top_p", v);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)d->seed);
	bad |= set_text(job, "generate.seed", v);
	bad |= set_sections(job, cfg);
	bad |= set_text(job, "distributed.micro_batches",
			fg_config_get(cfg, "distributed", "micro_batches"));
	snprintf(v, sizeof(v), "%zu", window);
	bad |= set_text(job, "--window", v);
	bad |= set_text(job, "--order", input_order ? "input" : "buckets");
	if (bad) {
		json_decref(job);
		return NULL;
	}
	return job;
}

/* The job's identity in its journal's header: the fgcore version and the
 * settings (job_settings) that are not fgcore's defaults, which the version
 * fixes.  Short: a journal under a file size limit of a few blocks still
 * holds records.  NULL: out of memory. */
static json_t *job_identity(const struct fg_config *cfg, size_t window, int input_order)
{
	struct fg_config *def = NULL;
	struct fg_request d;
	json_t *job, *base = NULL, *v;
	const char *key;
	void *it;

	fg_cli_request_defaults(cfg, &d);
	job = job_settings(cfg, &d, window, input_order);
	if (job && fg_config_new(&def) == 0) {
		fg_cli_request_defaults(def, &d);
		base = job_settings(def, &d, DEFAULT_WINDOW, 0);
	}
	fg_config_free(def);
	if (!base || set_text(job, "fgcore", PACKAGE_VERSION)) {
		json_decref(job);
		json_decref(base);
		return NULL;
	}
	json_object_foreach_safe(job, it, key, v)
		if (json_equal(v, json_object_get(base, key)))
			json_object_del(job, key);
	json_decref(base);
	return job;
}

/* Is rec, the journal's record of input line ln (its text: not copied
 * unchecked), that line's record: a JSON object of a record's shape, with
 * the line's custom_id and number?  0, or 1 with why not in `why`. */
static int record_mismatch(const struct line *l, size_t ln, const char *rec, size_t len,
			   char *why, size_t wlen)
{
	char want[48];
	json_t *o, *v, *resp, *err;
	const char *bad = NULL;

	if (l->error) {
		snprintf(why, wlen, "input line %zu is malformed, and a malformed line's record is never journaled", ln);
		return 1;
	}
	o = json_loadb(rec, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		snprintf(why, wlen, o ? "not a JSON object" : "not valid JSON");
		json_decref(o);
		return 1;
	}
	v = json_object_get(o, "custom_id");
	if (!json_equal(v, l->custom_id)) {
		snprintf(why, wlen, "its custom_id is %.80s%s%s, the line's \"%.80s\"",
			 json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
			 json_is_string(v) ? "\"" : "", json_string_value(l->custom_id));
		json_decref(o);
		return 1;
	}
	if (l->envelope) {
		resp = json_object_get(o, "response");
		err = json_object_get(o, "error");
		snprintf(want, sizeof(want), "batch_req_%zu", ln);
		v = json_object_get(o, "id");
		if (json_object_size(o) != 4 || !resp || !err)
			bad = "not an OpenAI batch output line {id, custom_id, response, error}";
		else if (!json_is_string(v) || strcmp(json_string_value(v), want))
			bad = "its id is not batch_req_<its line number>";
		else if (json_is_object(resp) && json_is_null(err)) {
			json_t *body = json_object_get(resp, "body");
			snprintf(want, sizeof(want), "req_%zu", ln);
			v = json_object_get(resp, "request_id");
			if (json_integer_value(json_object_get(resp, "status_code")) != 200 ||
			    !json_is_string(v) || strcmp(json_string_value(v), want) ||
			    !json_is_object(body))
				bad = "its response is not {status_code: 200, request_id: req_<its line number>, body}";
			else if (json_array_size(json_object_get(body, "choices")) != l->comp.n ||
				 !json_is_object(json_object_get(body, "usage")))
				bad = "its response's body has not one choice per prompt and a usage";
		} else if (!json_is_null(resp) || !json_is_object(err) ||
			   !json_is_string(json_object_get(err, "message")) ||
			   json_integer_value(json_object_get(err, "line")) != (json_int_t)ln)
			bad = "neither a response nor an error {code, message, line: its line number}";
	} else if ((v = json_object_get(o, "error"))) {
		if (json_object_size(o) != 3 || !json_is_string(v) ||
		    json_integer_value(json_object_get(o, "line")) != (json_int_t)ln)
			bad = "not an error record {custom_id, line: its line number, error}";
	} else {
		json_t *ids = json_object_get(o, "token_ids"), *id;
		size_t i;

		if (json_object_size(o) != 5u + (l->comp.logprobs >= 0) ||
		    !json_is_string(json_object_get(o, "text")) || !json_is_array(ids) ||
		    !json_is_string(json_object_get(o, "finish_reason")) ||
		    !json_is_object(json_object_get(o, "usage")) ||
		    (l->comp.logprobs >= 0 && !json_is_object(json_object_get(o, "logprobs"))))
			bad = "not a record {custom_id, text, token_ids, finish_reason, usage[, logprobs]} of the line's request";
		json_array_foreach(ids, i, id)
			if (!bad && !json_is_integer(id))
				bad = "a token id is not an integer";
	}
	json_decref(o);
	if (bad)
		snprintf(why, wlen, "%s", bad);
	return bad != NULL;
}

/* The process's peak resident memory in MiB (VmHWM), or -1. */
static long peak_mib(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[128];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : (kb + 1023) / 1024;
}

/* FGCORE_TEST_RUN_BATCH_KILL: a test hook that kills the job with SIGKILL
 * at a chosen point: N (after N records journaled; 0: with the model loaded,
 * before any result), "rename" (OUT.tmp complete, before its rename),
 * "unlink" (OUT in place, before the journal is removed). */
static const char *kill_hook(void)
{
	const char *k = getenv("FGCORE_TEST_RUN_BATCH_KILL");
	return k && *k ? k : NULL;
}

static void kill_at(const char *point)
{
	const char *k = kill_hook();
	if (k && !strcmp(k, point))
		raise(SIGKILL);
}

/* ---- the command ----------------------------------------------------------------- */

/* What a failed run leaves for the next ("" without a journal): the
 * journal's finished lines (pushed to the file first) and what to do about
 * err (0: nothing particular) before running again. */
static const char *resume_note(struct run *r, const char *j_path, int err, char *buf,
			       size_t len)
{
	if (!r->jr)
		return "";
	(void)fg_journal_flush(r->jr, 1);
	snprintf(buf, len, "; the %zu lines finished are kept in %s: %s",
		 r->had + fg_journal_on_disk(r->jr), j_path, resume_advice(err));
	return buf;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fgcore [-c CONFIG] [-o section.key=value]... run-batch --input IN.jsonl --output OUT.jsonl\n"
		   "           [--journal FILE] [--window LINES] [--order buckets|input] [--progress SECONDS] [-q]\n"
		   "  IN or OUT '-': stdin, stdout; an OUT that is not a regular file (a device, a\n"
		   "  FIFO) is written through; a file OUT is written as OUT.tmp, renamed once complete\n"
		   "  --journal FILE       finished lines go here as they finish (default OUT.journal for\n"
		   "                       a file OUT; none for stdout); the same command again resumes\n"
		   "  --window LINES       lines read, bucketed and held at a time (default %u)\n"
		   "  --order input        batches in input order instead of length buckets (to compare)\n"
		   "  --progress SECONDS   a progress line this often when stderr is not a terminal (10)\n"
		   "  -q, --quiet          no progress, no summary\n",
		DEFAULT_WINDOW);
}

/* A positive integer option of at most max: 0, or 2 with a line printed. */
static int count_opt(const char *name, const char *v, unsigned long max, size_t *out)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (*v < '0' || *v > '9' || *end || errno || x < 1 || x > max) {
		fprintf(stderr, "fgcore: run-batch: --%s %s: give a whole number from 1 to %lu\n", name, v,
			max);
		return 2;
	}
	*out = (size_t)x;
	return 0;
}

int fg_cmd_run_batch(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "journal", required_argument, NULL, 'j' },
		{ "window", required_argument, NULL, 'w' },
		{ "order", required_argument, NULL, 'O' },
		{ "progress", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *in_path = NULL, *out_path = NULL, *j_path = NULL;
	char *j_auto = NULL, note[PATH_MAX + 200] = "", not_run[96] = "", why[200];
	struct fg_request defaults;
	struct output out = { 0 };
	struct sigaction old_sig[2], old_pipe, old_xfsz, ign;
	struct stat in_st = { 0 }, st;
	struct run r = { 0 };
	size_t window = DEFAULT_WINDOW, interval = 10, total = 0, written = 0;
	int have_in_st = 0, signals_set = 0, quiet = fg_cli_verbosity < 0, input_order = 0;
	int c, rc = 2, e2;
	json_t *job = NULL;
	char *buf = NULL;
	size_t bcap = 0;
	ssize_t len;
	FILE *in = NULL;
	double t0 = fg_now(), t_loaded = t0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:hq", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			in_path = optarg;
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'j':
			j_path = optarg;
			break;
		case 'w':
			if (count_opt("window", optarg, MAX_WINDOW, &window))
				return 2;
			break;
		case 'p':
			if (count_opt("progress", optarg, 86400, &interval))
				return 2;
			break;
		case 'O':
			if (strcmp(optarg, "buckets") && strcmp(optarg, "input")) {
				fprintf(stderr, "fgcore: run-batch: --order %s: give buckets or input\n", optarg);
				return 2;
			}
			input_order = !strcmp(optarg, "input");
			break;
		case 'q':
			quiet = 1;
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
	/* A plugin that cannot be found or refuses an option, or a bad
	 * [policy], is the configuration's fault (exit 2), as for `fgcore
	 * config`: found before any file is touched. */
	if (fg_engine_check_config(cfg)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
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
		if (!quiet)
			total = count_lines(fd);
		in = fdopen(fd, "r");
		if (!in) {
			close(fd);
			fprintf(stderr, "fgcore: run-batch: out of memory\n");
			return 1;
		}
	} else {
		in = stdin;
		have_in_st = fstat(STDIN_FILENO, &in_st) == 0 && S_ISREG(in_st.st_mode);
	}
	/* Past a file size limit (ulimit -f) a write fails with EFBIG, reported
	 * as a full disk is, instead of the signal killing us without a word
	 * (the journal's header is the first write that can). */
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGXFSZ, &ign, &old_xfsz);
	rc = output_open(&out, out_path, have_in_st ? &in_st : NULL);
	if (rc) {
		sigaction(SIGXFSZ, &old_xfsz, NULL);
		output_free(&out);
		if (in != stdin)
			fclose(in);
		return rc;
	}
	rc = 1;
	/* The journal: next to a file output unless named; a stream has none. */
	if (!j_path && out.tmp) {
		j_auto = malloc(strlen(out.final) + 9);
		if (!j_auto)
			goto oom;
		sprintf(j_auto, "%s.journal", out.final);
		j_path = j_auto;
	}
	if (j_path) {
		char err[PATH_MAX + 300];
		size_t kept = 0;

		struct stat o_st;

		if (stat(j_path, &st) == 0 &&
		    (same_file(&st, have_in_st ? &in_st : NULL) ||
		     (out.tmp && stat(out.final, &o_st) == 0 && same_file(&st, &o_st)) ||
		     (out.tmp && fstat(out.lock, &o_st) == 0 && same_file(&st, &o_st)))) {
			fprintf(stderr, "fgcore: run-batch: --journal %s is the input or the output: give another file\n",
				j_path);
			rc = 2;
			goto abandon;
		}
		if (!(job = job_identity(cfg, window, input_order))) {
			rc = 1;
			goto oom;
		}
		if ((rc = fg_journal_open(&r.jr, j_path, job, &kept, err, sizeof(err)))) {
			fprintf(stderr, "fgcore: run-batch: %s\n", err);
			goto abandon;
		}
		r.had = kept;
		if (kept && !quiet)
			fprintf(stderr, "fgcore: run-batch: resuming the job of %s: %zu lines finished by an earlier run are kept\n",
				j_path, kept);
	}
	rc = 1;
	/* From here on a signal finishes the batch in flight, then stops; a
	 * reader gone from a pipe output is a write error, not a silent death. */
	rb_signals(&out, j_path, old_sig);
	signals_set = 1;
	sigaction(SIGPIPE, &ign, &old_pipe);

	r.lines = calloc(window, sizeof(*r.lines));
	r.recs = calloc(window, sizeof(*r.recs));
	r.hash = calloc(window, sizeof(*r.hash));
	r.left = calloc(window, sizeof(*r.left));
	r.ready = calloc(window, sizeof(*r.ready));
	r.pending = calloc(window, sizeof(*r.pending));
	r.text = calloc(window, sizeof(*r.text));
	r.tlen = calloc(window, sizeof(*r.tlen));
	if (!r.lines || !r.recs || !r.hash || !r.left || !r.ready || !r.pending || !r.text ||
	    !r.tlen)
		goto oom;
	r.kill_after = kill_hook() && strcmp(kill_hook(), "rename") && strcmp(kill_hook(), "unlink")
			       ? strtol(kill_hook(), NULL, 10) : -1;
	fg_cli_request_defaults(cfg, &defaults);
	r.defaults = &defaults;
	if (!rb_signal && fg_engine_open(cfg, &r.e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto abandon;
	}
	kill_at("0");
	t_loaded = fg_now(); /* the rates are the job's, the model's load apart */
	fg_progress_start(&r.prog, quiet, (double)interval, total);
	fg_engine_stats(r.e, &r.st0);
	for (;;) {
		size_t nreq = 0, ln = 0, rlen = 0, at = 0;
		uint64_t h = 0;
		const char *rec = NULL;
		int got;

		/* The next window of lines, each parsed (or its error noted). */
		while (r.n < window && (len = getline(&buf, &bcap, in)) >= 0) {
			struct line *l = &r.lines[r.n];
			while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
				len--;
			r.hash[r.n] = fg_hash(FG_HASH_INIT, buf, (size_t)len);
			if ((size_t)len > MAX_LINE)
				l->error = strdup("line longer than 64 MiB");
			else if ((r.text[r.n] = malloc((size_t)len + 1)))
				memcpy(r.text[r.n], buf, (size_t)len);
			else /* no room for a copy: parsed here */
				l->error = parse_line(buf, (size_t)len, &defaults, l);
			r.tlen[r.n] = (size_t)len;
			r.n++;
		}
		over_cpus(&r, r.n, 16, parse_one);
		if (ferror(in)) {
			e2 = errno;
			fprintf(stderr, "fgcore: run-batch: reading %s failed: %s; %s not written%s\n", in_path,
				strerror(e2), out.final ? out.final : out.name,
				resume_note(&r, j_path, 0, note, sizeof(note)));
			goto abandon;
		}
		if (r.n == 0)
			break;
		/* What an earlier run finished, if the line is still the same. */
		while (r.jr && (got = fg_journal_next(r.jr, r.base + r.n, &ln, &h, &rec, &rlen, &at)) == 1) {
			size_t li = ln - r.base - 1;
			/* Windows run in input order, each line once: anything else
			 * was not written by run-batch. */
			if (ln <= r.base || r.recs[li]) {
				fprintf(stderr, "fgcore: run-batch: %s:%zu: a second record of input line %zu, or one out of order: not a journal run-batch wrote; restore it, or remove %s to start over\n",
					j_path, at, ln, j_path);
				rc = 2;
				goto abandon;
			}
			if (h != r.hash[li]) {
				fprintf(stderr, "fgcore: run-batch: --input line %zu is not the line the job of %s ran: the input changed since; give the original input to resume, or remove %s to start over\n",
					ln, j_path, j_path);
				rc = 2;
				goto abandon;
			}
			if (record_mismatch(&r.lines[li], ln, rec, rlen, why, sizeof(why))) {
				fprintf(stderr, "fgcore: run-batch: %s:%zu: not input line %zu's record (%s): restore the journal, or remove %s to start over\n",
					j_path, at, ln, why, j_path);
				rc = 2;
				goto abandon;
			}
			if (!(r.recs[li] = strndup(rec, rlen)))
				goto oom;
			r.kept++;
			r.lines_done++;
			r.failed += is_failure(r.recs[li]) != 0;
		}
		if (r.jr && got < 0) {
			fprintf(stderr, "fgcore: run-batch: reading the journal %s failed: %s; nothing written to %s\n",
				j_path, got == -EILSEQ ? "it was changed by another process" : strerror(-got),
				out.final ? out.final : out.name);
			goto abandon;
		}
		r.prog.kept = r.kept;
		/* A malformed line's record now, the others' requests; the lines
		 * kept run again as known requests, so that every batch is the
		 * one the uninterrupted job computed (the same bytes). */
		for (size_t i = 0; i < r.n; i++)
			nreq += r.lines[i].error ? 0 : r.lines[i].comp.n;
		if (run_reserve(&r, nreq ? nreq : 1))
			goto oom;
		nreq = 0;
		for (size_t i = 0; i < r.n; i++) {
			struct line *l = &r.lines[i];
			if (l->error) {
				if (r.recs[i])
					continue;
				if (!(r.recs[i] = format_record(r.e, l, r.base + i + 1, NULL, NULL)))
					goto oom;
				r.lines_done++;
				r.failed++;
				continue;
			}
			fg_completion_bind(&l->comp, r.e);
			l->first = nreq;
			r.left[i] = r.recs[i] ? 0 : l->comp.n;
			for (size_t k = 0; k < l->comp.n; k++) {
				r.line_of[nreq] = i;
				r.reqs[nreq] = l->comp.reqs[k];
				r.reqs[nreq++].known = r.recs[i] != NULL;
			}
		}
		fg_progress_window(&r.prog, r.base + r.n);
		if (nreq && !rb_signal) {
			struct fg_run_opts o = { .on_result = on_result, .on_batch_end = on_batch_end,
						 .arg = &r, .input_order = input_order,
						 .stop = &rb_signal, .keep_run = 1 };
			long ran = fg_run(r.e, r.reqs, nreq, &o);
			/* the last batch's records, and results handed with no
			 * batch after them (refused requests) */
			records_start(&r);
			records_settle(&r);
			if (r.jr && !r.jerr && (e2 = fg_journal_flush(r.jr, 0)))
				r.jerr = -e2;
			if (ran < 0)
				goto oom;
		}
		/* Interrupted: the journal synced before saying what it keeps. */
		if (rb_signal && r.jr && !r.jerr && (e2 = fg_journal_flush(r.jr, 1)))
			r.jerr = -e2;
		if (r.jerr) {
			fg_progress_end(&r.prog);
			if (r.jerr == ENOMEM)
				goto oom;
			/* Counted in the file: a write that failed may have
			 * torn records appended before it. */
			fprintf(stderr, "fgcore: run-batch: writing the journal %s failed: %s; nothing written to %s; the %zu lines finished before are kept: %s\n",
				j_path, strerror(r.jerr), out.final ? out.final : out.name,
				r.had + fg_journal_on_disk(r.jr), resume_advice(r.jerr));
			goto abandon;
		}
		if (rb_signal) {
			fg_progress_end(&r.prog);
			if (r.jr || (r.ran == 0 && written == 0)) {
				output_abandon(&out);
				if (r.ran == 0)
					fprintf(stderr, "fgcore: run-batch: interrupted (%s) before any request finished; nothing written to %s%s\n",
						signal_name(rb_signal), out.final ? out.final : out.name,
						r.jr && r.had ? resume_note(&r, j_path, 0, note, sizeof(note)) : "");
				else
					fprintf(stderr, "fgcore: run-batch: interrupted (%s) after the batch in flight: %zu lines finished (%zu by this run), kept in %s; nothing written to %s: run the same command again to finish the job\n",
						signal_name(rb_signal), r.kept + fg_journal_appended(r.jr),
						fg_journal_appended(r.jr), j_path,
						out.final ? out.final : out.name);
				rc = 128 + rb_signal;
				goto out;
			}
			/* No journal: the other lines are written as not run. */
			snprintf(not_run, sizeof(not_run), "not run: the job was interrupted (%s)",
				 signal_name(rb_signal));
			for (size_t i = 0; i < r.n; i++) {
				struct line *l = &r.lines[i];
				if (r.recs[i])
					continue;
				r.recs[i] = format_record(r.e, l, r.base + i + 1, &r.res[l->first], not_run);
				if (!r.recs[i])
					goto oom;
				r.failed++;
			}
		}
		/* The window in input order. */
		for (size_t i = 0; i < r.n; i++) {
			errno = 0;
			if (fputs(r.recs[i], out.f) == EOF || fputc('\n', out.f) == EOF) {
				e2 = errno ? errno : EIO;
				fg_progress_end(&r.prog);
				output_failed(&out, e2, resume_note(&r, j_path, e2, note, sizeof(note)));
				goto out;
			}
		}
		errno = 0;
		if (!out.tmp && fflush(out.f) != 0) {
			e2 = errno ? errno : EIO;
			fg_progress_end(&r.prog);
			output_failed(&out, e2, resume_note(&r, j_path, e2, note, sizeof(note)));
			goto out;
		}
		written += r.n;
		r.base += r.n;
		window_clear(&r);
		fg_progress_update(&r.prog, r.lines_done);
	}
	fg_progress_end(&r.prog);
	if (kill_hook() && !strcmp(kill_hook(), "rename")) {
		fflush(out.f);
		kill_at("rename");
	}
	if ((e2 = output_commit(&out))) {
		output_failed(&out, e2, resume_note(&r, j_path, e2, note, sizeof(note)));
		goto out;
	}
	kill_at("unlink");
	if (r.jr) {
		int e2 = fg_journal_remove(r.jr);
		r.jr = NULL;
		if (e2)
			fprintf(stderr, "fgcore: run-batch: warning: cannot remove the finished job's journal %s: %s\n",
				j_path, strerror(-e2));
	}
	/* Written: a late signal must not unlink or report anything any more. */
	rb_signals_restore(old_sig);
	signals_set = 0;
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigaction(SIGXFSZ, &old_xfsz, NULL);
	if (rb_signal) {
		fprintf(stderr, "fgcore: run-batch: interrupted (%s) after the batch in flight: %zu of %zu lines finished, their results are in %s; the other %zu lines have \"interrupted\" error records\n",
			signal_name(rb_signal), r.ran, written, out.final ? out.final : out.name,
			written - r.ran - (r.lines_done - r.ran));
		rc = 128 + rb_signal;
		goto out;
	}
	if (!quiet) {
		double wall = fg_now() - t0, load = t_loaded - t0, run_s = wall - load;
		/* Dead rows apart: those computed (before a live row) cost only
		 * their matrix-product rows. */
		struct fg_run_stats now;
		fg_engine_stats(r.e, &now);
		uint64_t computed = now.positions - r.st0.positions;
		uint64_t dead = now.dead_positions - r.st0.dead_positions;
		uint64_t useful = now.useful_positions - r.st0.useful_positions;
		uint64_t shared = now.shared_positions - r.st0.shared_positions;
		uint64_t gen = now.generated_tokens - r.st0.generated_tokens;
		uint64_t prompt = now.prompt_tokens - r.st0.prompt_tokens;
		double per = computed ? 100.0 / (double)computed : 0.0;
		uint64_t joined = now.joined - r.st0.joined;
		char rate[128], saved[160] = "";
		if (shared)
			snprintf(saved, sizeof(saved), "; shared prompt prefixes saved %llu positions",
				 (unsigned long long)shared);
		if (joined)
			snprintf(saved + strlen(saved), sizeof(saved) - strlen(saved),
				 "; %llu requests joined running batches", (unsigned long long)joined);
		/* A scoring job generates nothing: its rate is prompt tokens scored. */
		if (gen || !prompt)
			snprintf(rate, sizeof(rate), "%llu tokens generated, %.1f tokens/s",
				 (unsigned long long)gen, run_s > 0 ? (double)gen / run_s : 0.0);
		else
			snprintf(rate, sizeof(rate), "%llu prompt tokens scored, %.1f prompt tokens/s",
				 (unsigned long long)prompt, run_s > 0 ? (double)prompt / run_s : 0.0);
		fprintf(stderr, "fgcore: run-batch: %zu lines (%zu kept from an earlier run, %zu failed) in %.1f s (%.1f s loading the model): %s after the load; padding waste %.1f%% and finished rows %.1f%% (costing only their matrix-product rows) of %llu computed positions in %llu batches%s; peak memory %ld MiB\n",
			written, r.kept, r.failed, wall, load, rate,
			per * (double)(computed + shared - useful - dead), per * (double)dead,
			(unsigned long long)computed,
			(unsigned long long)(now.batches - r.st0.batches), saved, peak_mib());
		if (fg_cli_verbosity > 0) {
			double setup = now.run_setup_s - r.st0.run_setup_s;
			double fwd = now.compute_s - r.st0.compute_s;
			double cb = now.callback_s - r.st0.callback_s;
			fprintf(stderr, "fgcore: run-batch: %llu runs (plans and buffers) made for %llu batches, %.3f s making and freeing them\n",
				(unsigned long long)(now.runs - r.st0.runs),
				(unsigned long long)(now.batches - r.st0.batches), setup);
			fprintf(stderr, "fgcore: run-batch: of the %.2f s after the load: %.2f s in the forward pass (%.2f s of it the output block of scored and sampled positions), %.2f s making runs, %.2f s formatting and writing results (waiting for them), %.2f s else (reading, batching, the last write)\n",
				run_s, fwd, now.logits_s - r.st0.logits_s, setup, cb,
				run_s - fwd - setup - cb);
		}
	}
	if (r.failed)
		fprintf(stderr, "fgcore: run-batch: %zu of %zu lines failed; see their error records in %s\n",
			r.failed, written, out.final ? out.final : out.name);
	rc = r.failed ? 1 : 0;
	goto out;
oom:
	fg_progress_end(&r.prog);
	fprintf(stderr, "fgcore: run-batch: out of memory%s\n",
		resume_note(&r, j_path, 0, note, sizeof(note)));
abandon:
	output_abandon(&out);
out:
	if (out.f)
		output_abandon(&out);
	output_free(&out);
	if (signals_set) {
		rb_signals_restore(old_sig);
		sigaction(SIGPIPE, &old_pipe, NULL);
	}
	sigaction(SIGXFSZ, &old_xfsz, NULL);
	window_clear(&r);
	/* A journal that never held a record is no state worth keeping. */
	if (r.jr && !r.had && !fg_journal_appended(r.jr))
		fg_journal_remove(r.jr);
	else
		fg_journal_close(r.jr);
	free(r.lines);
	free(r.recs);
	free(r.hash);
	free(r.left);
	free(r.ready);
	free(r.pending);
	free(r.text);
	free(r.tlen);
	free(r.reqs);
	free(r.res);
	free(r.line_of);
	free(j_auto);
	free(buf);
	json_decref(job);
	if (in && in != stdin)
		fclose(in);
	fg_engine_close(r.e);
	return rc;
}
