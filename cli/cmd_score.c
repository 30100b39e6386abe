/* cli/cmd_score.c - `fgcore score`: the perplexity of text or of token-id
 * sequences under the model.
 *
 * A document longer than the window is scored in windows of --context
 * tokens moved --stride tokens at a time (Hugging Face's sliding-window
 * recipe): every token after the first is scored exactly once, by the first
 * window that holds it past the previous window's end, so each has at least
 * context - stride tokens before it (all of them in the first window).  A
 * text starts with the model's bos token, as the engine reads text prompts;
 * token ids are scored as given. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/request.h"
#include "core/util/fileio.h"

#define MAX_DOC_BYTES (1u << 30)

struct doc {
	int32_t *ids;
	size_t n;
	char *error;       /* the line could not be read: reported, not scored */
	double sum;        /* of the scored tokens' log-probabilities */
	size_t scored;
};

struct window {
	size_t doc, start, len, from; /* ids [start, start + len); scored from `from` (relative) */
};

static int add_window(struct window **w, size_t *n, size_t *cap, struct window x)
{
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 64;
		struct window *nw = realloc(*w, nc * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		*w = nw;
		*cap = nc;
	}
	(*w)[(*n)++] = x;
	return 0;
}

/* The windows of one document (see the header comment). */
static int windows_of(size_t d, size_t n, size_t ctx, size_t stride, struct window **w,
		      size_t *nw, size_t *cap)
{
	size_t end = 1; /* tokens [0, end) are scored or have no context */

	for (size_t start = 0; end < n; start += stride) {
		size_t len = n - start < ctx ? n - start : ctx;
		int rc = add_window(w, nw, cap, (struct window){ d, start, len, end - start });
		if (rc)
			return rc;
		end = start + len;
	}
	return 0;
}


/* One JSONL line: [ids...], {"ids": [...]} or {"text": "..."}. */
static char *parse_doc(struct fg_engine *e, const char *line, size_t len, struct doc *d)
{
	json_error_t err;
	json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err), *v;
	char buf[300];
	struct fg_model_info mi;

	fg_engine_info(e, &mi);
	if (!root) {
		snprintf(buf, sizeof(buf), "not valid JSON at column %d: %s", err.column, err.text);
		return strdup(buf);
	}
	v = json_is_array(root) ? root : json_object_get(root, "ids");
	if (json_is_object(root) && json_is_string(json_object_get(root, "text")) && !v &&
	    json_object_size(root) == 1) {
		/* a text's ids as the engine reads a text prompt */
		int rc = fg_tokenize_prompt(e, json_string_value(json_object_get(root, "text")),
					    &d->ids, &d->n);
		json_decref(root);
		return rc ? strdup(fg_last_error_text()) : NULL;
	}
	if (!json_is_array(v) || json_array_size(v) < 2 ||
	    (json_is_object(root) && json_object_size(root) != 1)) {
		json_decref(root);
		return strdup("a line must be an array of at least 2 token ids, {\"ids\": [...]} or {\"text\": \"...\"}");
	}
	d->n = json_array_size(v);
	d->ids = malloc(d->n * sizeof(int32_t));
	for (size_t i = 0; d->ids && i < d->n; i++) {
		json_t *x = json_array_get(v, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) >= mi.vocab) {
			json_decref(root);
			snprintf(buf, sizeof(buf), "token %zu is not an id in [0, %lld)", i,
				 (long long)mi.vocab);
			return strdup(buf);
		}
		d->ids[i] = (int32_t)json_integer_value(x);
	}
	json_decref(root);
	return d->ids ? NULL : strdup("out of memory");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fgcore [-c CONFIG] [-o section.key=value]... score [--context N] [--stride S] [--json] FILE\n"
		   "       fgcore [-c CONFIG] [-o section.key=value]... score --ids [--context N] [--stride S] [--json] FILE.jsonl\n"
		   "  FILE: a text ('-': stdin), scored as one document that starts with bos;\n"
		   "  --ids: one document a line: [id, ...], {\"ids\": [...]} or {\"text\": \"...\"}, each\n"
		   "  line's perplexity printed as a JSON line.  Documents longer than --context tokens\n"
		   "  (default: the model's positions, at most 2048) are scored in windows moved by\n"
		   "  --stride tokens (default: half the context); every token is scored once.\n");
}

static int parse_size(const char *opt, const char *s, size_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < 1 || v > (1 << 24)) {
		fprintf(stderr, "fgcore: score: %s '%s': give a whole number from 1 to 16777216\n", opt, s);
		return -1;
	}
	*out = (size_t)v;
	return 0;
}

static void print_doc(const struct doc *d, size_t line, int json)
{
	if (d->error) {
		json_t *o = json_pack("{s:I, s:s}", "line", (json_int_t)line, "error", d->error);
		char *t = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
		printf("%s\n", t ? t : "{\"error\": \"out of memory\"}");
		free(t);
		json_decref(o);
		return;
	}
	double mean = d->scored ? d->sum / (double)d->scored : 0;
	if (json || line)
		printf("{\"line\": %zu, \"tokens\": %zu, \"mean_logprob\": %.6f, \"perplexity\": %.6f}\n",
		       line, d->scored, mean, exp(-mean));
}

int fg_cmd_score(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "ids", no_argument, NULL, 'i' },
		{ "context", required_argument, NULL, 'c' },
		{ "stride", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ids_mode = 0, json = 0, c, rc = FG_EXIT_RUNTIME;
	size_t ctx = 0, stride = 0, ndoc = 0, nw = 0, wcap = 0, failed = 0;
	struct fg_engine *e = NULL;
	struct fg_model_info mi;
	struct doc *docs = NULL;
	struct window *w = NULL;
	struct fg_request *reqs = NULL;
	struct fg_result *res = NULL;
	FILE *in = NULL;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			ids_mode = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 'c':
			if (parse_size("--context", optarg, &ctx))
				return FG_EXIT_USAGE;
			break;
		case 's':
			if (parse_size("--stride", optarg, &stride))
				return FG_EXIT_USAGE;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "fgcore: score: option '%s' needs a value: see fgcore score --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		default:
			fprintf(stderr, "fgcore: score: unknown option '%s': see fgcore score --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "fgcore: score: give one FILE (a text, or with --ids a JSONL file; '-': stdin)\n");
		return FG_EXIT_USAGE;
	}
	const char *path = argv[optind];
	/* A plugin that cannot be found or refuses an option, or a bad
	 * [policy], is the configuration's fault (exit 2), as for `fgcore config`. */
	if (fg_engine_check_config(cfg)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return FG_EXIT_USAGE;
	}
	if (strcmp(path, "-")) {
		/* O_NONBLOCK: a FIFO must not hang the open; only regular files. */
		struct stat st = { 0 };
		int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), fl;

		if (fd < 0) {
			fprintf(stderr, "fgcore: score: cannot open %s: %s\n", path, strerror(errno));
			return FG_EXIT_RUNTIME;
		}
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			fprintf(stderr, "fgcore: score: %s is %s: give a file, or '-' to read standard input\n",
				path, fg_file_kind(st.st_mode));
			close(fd);
			return FG_EXIT_USAGE;
		}
		fl = fcntl(fd, F_GETFL);
		if (fl != -1)
			(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		if (!(in = fdopen(fd, "r"))) {
			close(fd);
			fprintf(stderr, "fgcore: score: out of memory\n");
			return FG_EXIT_RUNTIME;
		}
	} else {
		in = stdin;
	}
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto out;
	}
	fg_engine_info(e, &mi);
	size_t most = (size_t)mi.max_positions < 2048 ? (size_t)mi.max_positions : 2048;
	if (!ctx)
		ctx = most;
	if (ctx < 2 || ctx > (size_t)mi.max_positions) {
		fprintf(stderr, "fgcore: score: --context %zu: %s reads 2 to %lld tokens at once\n", ctx,
			mi.name, (long long)mi.max_positions);
		rc = FG_EXIT_USAGE;
		goto out;
	}
	if (!stride)
		stride = ctx / 2 ? ctx / 2 : 1;
	if (stride >= ctx) {
		fprintf(stderr, "fgcore: score: --stride %zu must be below --context %zu (windows must overlap to give context)\n",
			stride, ctx);
		rc = FG_EXIT_USAGE;
		goto out;
	}
	if (ids_mode) {
		char *line = NULL;
		size_t cap = 0, dcap = 0;
		ssize_t len;
		while ((len = getline(&line, &cap, in)) >= 0) {
			if (ndoc == dcap) {
				struct doc *nd = realloc(docs, (dcap = dcap ? 2 * dcap : 64) * sizeof(*nd));
				if (!nd) {
					free(line);
					goto oom;
				}
				docs = nd;
			}
			memset(&docs[ndoc], 0, sizeof(*docs));
			docs[ndoc].error = parse_doc(e, line, (size_t)len, &docs[ndoc]);
			ndoc++;
		}
		free(line);
	} else {
		size_t len;
		char *text;
		int r = fg_read_stream(in, MAX_DOC_BYTES, &text, &len);
		if (r == -ENOMEM)
			goto oom;
		if (r == -EIO) {
			fprintf(stderr, "fgcore: score: reading %s failed: %s\n", path, strerror(errno));
			goto out;
		}
		if (r || strlen(text) != len) {
			fprintf(stderr, "fgcore: score: %s is %s: give a text file of at most 1 GiB\n", path,
				r ? "larger than 1 GiB" : "not text (it holds a NUL byte)");
			free(text);
			goto out;
		}
		docs = calloc(1, sizeof(*docs));
		if (!docs) {
			free(text);
			goto oom;
		}
		ndoc = 1;
		r = fg_tokenize_prompt(e, text, &docs[0].ids, &docs[0].n);
		free(text);
		if (r) {
			fprintf(stderr, "fgcore: score: %s: %s\n", path, fg_last_error_text());
			goto out;
		}
		if (docs[0].n < 2) {
			fprintf(stderr, "fgcore: score: %s is empty: nothing to score\n", path);
			goto out;
		}
	}
	if (ferror(in)) {
		fprintf(stderr, "fgcore: score: reading %s failed: %s\n", path, strerror(errno));
		goto out;
	}
	for (size_t d = 0; d < ndoc; d++)
		if (!docs[d].error && windows_of(d, docs[d].n, ctx, stride, &w, &nw, &wcap))
			goto oom;
	reqs = calloc(nw ? nw : 1, sizeof(*reqs));
	res = calloc(nw ? nw : 1, sizeof(*res));
	if (!reqs || !res)
		goto oom;
	for (size_t i = 0; i < nw; i++) {
		reqs[i].prompt_ids = docs[w[i].doc].ids + w[i].start;
		reqs[i].n_prompt_ids = w[i].len;
		reqs[i].score_prompt = 1;
	}
	/* A window the engine cannot run fails only its document. */
	if (fg_cli_run_all(e, reqs, nw, res, NULL) < 0)
		goto oom;
	for (size_t i = 0; i < nw; i++) {
		struct doc *d = &docs[w[i].doc];
		if (res[i].finish_reason == FG_FINISH_ERROR) {
			if (!d->error)
				d->error = strdup(res[i].error ? res[i].error : "out of memory");
			continue;
		}
		for (size_t t = w[i].from; t < w[i].len; t++)
			d->sum += res[i].prompt_logprobs[t];
		d->scored += w[i].len - w[i].from;
	}
	double sum = 0;
	size_t scored = 0;
	for (size_t d = 0; d < ndoc; d++) {
		if (ids_mode)
			print_doc(&docs[d], d + 1, json);
		failed += docs[d].error != NULL;
		if (!docs[d].error) {
			sum += docs[d].sum;
			scored += docs[d].scored;
		}
	}
	if (!scored) {
		fprintf(stderr, "fgcore: score: %s holds no token to score (%zu document%s%s): give documents of at least 2 tokens\n",
			path, ndoc, ndoc == 1 ? "" : "s", failed ? ", all failed" : "");
		rc = FG_EXIT_RUNTIME;
		goto out;
	}
	double mean = sum / (double)scored;
	if (json)
		printf("{\"documents\": %zu, \"failed\": %zu, \"tokens\": %zu, \"mean_logprob\": %.6f, \"perplexity\": %.6f, \"context\": %zu, \"stride\": %zu}\n",
		       ndoc - failed, failed, scored, mean, exp(-mean), ctx, stride);
	else
		printf("%s: %zu tokens scored in %zu document%s (context %zu, stride %zu): mean log-probability %.6f, perplexity %.6f\n",
		       mi.name, scored, ndoc - failed, ndoc - failed == 1 ? "" : "s", ctx,
		       stride, mean, exp(-mean));
	if (failed)
		fprintf(stderr, "fgcore: score: %zu of %zu lines failed (see their error records)\n",
			failed, ndoc);
	rc = failed || fflush(stdout) ? FG_EXIT_RUNTIME : FG_EXIT_OK;
	goto out;
oom:
	fprintf(stderr, "fgcore: score: out of memory\n");
out:
	for (size_t i = 0; res && i < nw; i++)
		fg_result_clear(&res[i]);
	for (size_t d = 0; d < ndoc; d++) {
		free(docs[d].ids);
		free(docs[d].error);
	}
	free(docs);
	free(w);
	free(reqs);
	free(res);
	if (in && in != stdin)
		fclose(in);
	fg_engine_close(e);
	return rc;
}
