/* cli/cmd_run_batch.c - `fgcore run-batch`: JSONL requests in, JSONL results
 * out, one output line per input line, in input order.
 *
 * A line is a request {"custom_id", "prompt" | "prompt_token_ids",
 * "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos"}
 * or the same fields in an OpenAI Batch API envelope {"custom_id", "method",
 * "url", "body": {...}}.  A malformed line yields an error record naming the
 * line; the other lines still run.  The output is written to OUT.tmp and
 * renamed to OUT only once complete. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/request.h"
#include "core/engine/engine.h"

#define MAX_LINE (64u << 20)

struct line {
	json_t *custom_id;  /* borrowed from root, or NULL */
	json_t *root;
	char *error;        /* set: an error record is written */
	struct fg_request req;
	int32_t *ids;
	const char **stop;
	int ignore_eos;
};

static char *errorf(const char *fmt, const char *a)
{
	char buf[512];
	snprintf(buf, sizeof(buf), fmt, a);
	return strdup(buf);
}

static char *parse_stop(json_t *v, struct line *l)
{
	size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
	if (!json_is_string(v) && !json_is_array(v))
		return strdup("\"stop\" must be a string or an array of strings");
	if (n > 64)
		return strdup("\"stop\" has more than 64 strings");
	l->stop = calloc(n ? n : 1, sizeof(char *));
	if (!l->stop)
		return strdup("out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_is_string(v) ? v : json_array_get(v, i);
		if (!json_is_string(s))
			return strdup("\"stop\" must be a string or an array of strings");
		l->stop[i] = json_string_value(s);
	}
	l->req.stop = l->stop;
	l->req.n_stop = n;
	return NULL;
}

static char *parse_ids(json_t *v, struct line *l)
{
	size_t n = json_is_array(v) ? json_array_size(v) : 0;
	if (!n)
		return strdup("\"prompt_token_ids\" must be a non-empty array of integers");
	l->ids = malloc(n * sizeof(int32_t));
	if (!l->ids)
		return strdup("out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(v, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > INT32_MAX)
			return strdup("\"prompt_token_ids\" must hold non-negative integers");
		l->ids[i] = (int32_t)json_integer_value(x);
	}
	l->req.prompt_ids = l->ids;
	l->req.n_prompt_ids = n;
	return NULL;
}

static int number(json_t *v, double lo, double hi, double *out)
{
	if (!json_is_number(v))
		return -1;
	*out = json_number_value(v);
	return *out >= lo && *out <= hi ? 0 : -1;
}

/* Fill l->req from the request body; returns an error text or NULL. */
static char *parse_body(json_t *body, struct line *l)
{
	const char *key;
	json_t *v;
	double d;

	json_object_foreach(body, key, v) {
		if (!strcmp(key, "prompt")) {
			if (!json_is_string(v))
				return strdup("\"prompt\" must be a string");
			l->req.prompt = json_string_value(v);
		} else if (!strcmp(key, "prompt_token_ids")) {
			char *e = parse_ids(v, l);
			if (e)
				return e;
		} else if (!strcmp(key, "max_tokens")) {
			if (!json_is_integer(v) || number(v, 0, 1048576, &d))
				return strdup("\"max_tokens\" must be an integer in [0, 1048576]");
			l->req.max_new_tokens = (int)d;
		} else if (!strcmp(key, "temperature")) {
			if (number(v, 0, 100, &d))
				return strdup("\"temperature\" must be a number in [0, 100]");
			l->req.temperature = (float)d;
		} else if (!strcmp(key, "top_p")) {
			if (number(v, 0, 1, &d))
				return strdup("\"top_p\" must be a number in [0, 1]");
			l->req.top_p = (float)d;
		} else if (!strcmp(key, "top_k")) {
			/* -1 means off, as in vLLM */
			if (!json_is_integer(v) || number(v, -1, 1000000, &d))
				return strdup("\"top_k\" must be an integer in [-1, 1000000]");
			l->req.top_k = d < 0 ? 0 : (int)d;
		} else if (!strcmp(key, "seed")) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return strdup("\"seed\" must be a non-negative integer");
			l->req.seed = (uint64_t)json_integer_value(v);
		} else if (!strcmp(key, "stop")) {
			char *e = parse_stop(v, l);
			if (e)
				return e;
		} else if (!strcmp(key, "ignore_eos")) {
			if (!json_is_boolean(v))
				return strdup("\"ignore_eos\" must be true or false");
			l->ignore_eos = json_is_true(v);
		} else if (strcmp(key, "model") && strcmp(key, "user") && strcmp(key, "custom_id")) {
			return errorf("unsupported field \"%s\": known fields are prompt, prompt_token_ids, max_tokens, temperature, top_p, top_k, seed, stop, ignore_eos", key);
		}
	}
	if (!!l->req.prompt == !!l->req.prompt_ids)
		return strdup("give exactly one of \"prompt\" and \"prompt_token_ids\"");
	return NULL;
}

static char *parse_line(const char *text, size_t len, struct line *l)
{
	json_error_t err;
	json_t *body;

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
		json_t *url = json_object_get(l->root, "url");
		const char *key;
		json_t *v;
		if (!json_is_object(body))
			return strdup("\"body\" must be an object");
		if (url && (!json_is_string(url) || strcmp(json_string_value(url), "/v1/completions")))
			return strdup("\"url\" must be \"/v1/completions\" (the only endpoint run-batch serves)");
		json_object_foreach(l->root, key, v)
			if (strcmp(key, "custom_id") && strcmp(key, "method") && strcmp(key, "url") &&
			    strcmp(key, "body"))
				return errorf("unsupported envelope field \"%s\": known are custom_id, method, url, body", key);
		return parse_body(body, l);
	}
	return parse_body(l->root, l);
}

static const char *finish_name(enum fg_finish_reason r)
{
	return r == FG_FINISH_STOP ? "stop" : "length";
}

static int write_record(FILE *out, const struct line *l, size_t lineno, const struct fg_result *r)
{
	json_t *o;
	if (l->error || r->finish_reason == FG_FINISH_ERROR) {
		o = json_pack("{s:O?, s:I, s:s}", "custom_id", l->custom_id, "line",
			      (json_int_t)lineno, "error", l->error ? l->error : r->error);
	} else {
		json_t *ids = json_array();
		for (size_t i = 0; ids && i < r->n_tokens; i++)
			json_array_append_new(ids, json_integer(r->token_ids[i]));
		o = json_pack("{s:O, s:s, s:o, s:s, s:{s:I, s:I, s:I}}", "custom_id", l->custom_id,
			      "text", r->text, "token_ids", ids, "finish_reason",
			      finish_name(r->finish_reason), "usage", "prompt_tokens",
			      (json_int_t)r->n_prompt_tokens, "completion_tokens",
			      (json_int_t)r->n_tokens, "total_tokens",
			      (json_int_t)(r->n_prompt_tokens + r->n_tokens));
	}
	if (!o)
		return -1;
	int rc = json_dumpf(o, out, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(o);
	return rc || fputc('\n', out) == EOF ? -1 : 0;
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
	struct fg_result *res = NULL;
	struct fg_request *reqs = NULL;
	size_t *map = NULL, n = 0, cap = 0, nreq = 0, failed = 0;
	struct fg_engine *e = NULL;
	char *buf = NULL, tmp[4096];
	size_t bcap = 0;
	ssize_t len;
	FILE *in = NULL, *out = NULL;
	int c, rc = 2;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			in_path = optarg;
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'h':
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... run-batch --input IN.jsonl --output OUT.jsonl\n");
			return 0;
		default:
			return 2;
		}
	}
	if (!in_path || !out_path || optind < argc) {
		fprintf(stderr, "fgcore: run-batch: give --input IN.jsonl and --output OUT.jsonl\n");
		return 2;
	}
	rc = 1;
	in = strcmp(in_path, "-") ? fopen(in_path, "r") : stdin;
	if (!in) {
		fprintf(stderr, "fgcore: run-batch: cannot open %s: %s\n", in_path, strerror(errno));
		return 1;
	}
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
		fg_cli_request_defaults(cfg, &l->req);
		while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
			len--;
		if ((size_t)len > MAX_LINE)
			l->error = strdup("line longer than 64 MiB");
		else
			l->error = parse_line(buf, (size_t)len, l);
	}
	if (ferror(in)) {
		fprintf(stderr, "fgcore: run-batch: reading %s failed: %s\n", in_path, strerror(errno));
		goto out;
	}
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto out;
	}
	reqs = calloc(n ? n : 1, sizeof(*reqs));
	res = calloc(n ? n : 1, sizeof(*res));
	map = calloc(n ? n : 1, sizeof(*map));
	if (!reqs || !res || !map)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		if (lines[i].error)
			continue;
		if (!lines[i].ignore_eos) {
			lines[i].req.stop_ids = &e->model.cfg.eos_id;
			lines[i].req.n_stop_ids = 1;
		}
		map[nreq] = i;
		reqs[nreq++] = lines[i].req;
	}
	if (fg_generate(e, reqs, nreq, res)) {
		fprintf(stderr, "fgcore: run-batch: %s\n", fg_last_error_text());
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", out_path);
	out = fopen(tmp, "w");
	if (!out) {
		fprintf(stderr, "fgcore: run-batch: cannot create %s: %s\n", tmp, strerror(errno));
		goto out;
	}
	for (size_t i = 0, k = 0; i < n; i++) {
		static const struct fg_result none;
		const struct fg_result *r = &none;
		if (k < nreq && map[k] == i)
			r = &res[k++];
		failed += lines[i].error || r->finish_reason == FG_FINISH_ERROR;
		if (write_record(out, &lines[i], i + 1, r)) {
			fprintf(stderr, "fgcore: run-batch: writing %s failed\n", tmp);
			goto out;
		}
	}
	if (fflush(out) || fsync(fileno(out)) || fclose(out)) {
		out = NULL;
		fprintf(stderr, "fgcore: run-batch: writing %s failed: %s\n", tmp, strerror(errno));
		goto out;
	}
	out = NULL;
	if (rename(tmp, out_path)) {
		fprintf(stderr, "fgcore: run-batch: cannot rename %s to %s: %s\n", tmp, out_path,
			strerror(errno));
		remove(tmp);
		goto out;
	}
	if (failed)
		fprintf(stderr, "fgcore: run-batch: %zu of %zu lines failed; see their error records in %s\n",
			failed, n, out_path);
	rc = failed ? 1 : 0;
	goto out;
oom:
	fprintf(stderr, "fgcore: run-batch: out of memory\n");
out:
	if (out) {
		fclose(out);
		remove(tmp);
	}
	for (size_t i = 0; i < n; i++) {
		json_decref(lines[i].root);
		free(lines[i].error);
		free(lines[i].ids);
		free(lines[i].stop);
	}
	for (size_t i = 0; res && i < nreq; i++)
		fg_result_clear(&res[i]);
	free(lines);
	free(reqs);
	free(res);
	free(map);
	free(buf);
	if (in && in != stdin)
		fclose(in);
	fg_engine_close(e);
	return rc;
}
