/* cli/cmd_generate.c - `fgcore generate`: complete prompts given on the command
 * line or in a file.
 *
 * A prompt file holds one prompt per line (empty lines skipped) or, when any
 * of its lines is a lone form feed (^L), the texts between such lines, each a
 * prompt that may span lines.  Each output is the prompt followed by its
 * completion; with several prompts each is headed "==> prompt N <==" and the
 * outputs are separated by an empty line, as head(1) separates files. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/request.h"
#include "core/util/fileio.h"

#define PROMPT_FILE_MAX (64u << 20)

struct strlist {
	char **v;
	size_t n, cap;
};

static int push(struct strlist *l, char *s)
{
	if (!s)
		return -ENOMEM;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	return 0;
}

/* The whole of f (at most PROMPT_FILE_MAX bytes) in a NUL-terminated buffer. */
static int slurp(FILE *f, const char *path, char **out, size_t *len)
{
	int rc = fg_read_stream(f, PROMPT_FILE_MAX, out, len);

	if (rc == -EFBIG)
		fprintf(stderr, "fgcore: generate: %s: more than %u MiB of prompts\n", path,
			PROMPT_FILE_MAX >> 20);
	else if (rc == -ENOMEM)
		fprintf(stderr, "fgcore: generate: out of memory reading %s\n", path);
	else if (rc)
		fprintf(stderr, "fgcore: generate: reading %s failed: %s\n", path, strerror(errno));
	return rc;
}

/* Is [s, e) a line holding only a form feed (and a CR)? */
static int ff_line(const char *s, const char *e)
{
	return (e - s == 1 && s[0] == '\f') || (e - s == 2 && s[0] == '\f' && s[1] == '\r');
}

/* [s, e) as a prompt, without the line end that closes it; empty: none. */
static int emit(struct strlist *l, const char *s, const char *e)
{
	if (e > s && e[-1] == '\n')
		e--;
	if (e > s && e[-1] == '\r')
		e--;
	return e > s ? push(l, strndup(s, (size_t)(e - s))) : 0;
}

static int split_prompts(const char *text, size_t len, struct strlist *l)
{
	const char *end = text + len, *p, *nl, *start = text;
	int blocks = 0;

	for (p = text; p < end && !blocks; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		blocks = ff_line(p, nl);
	}
	for (p = text; p < end; p = nl < end ? nl + 1 : end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		if (!blocks) {
			if (emit(l, p, nl))
				return -ENOMEM;
		} else if (ff_line(p, nl)) {
			if (emit(l, start, p))
				return -ENOMEM;
			start = nl < end ? nl + 1 : end;
		}
	}
	return blocks ? emit(l, start, end) : 0;
}

static int read_prompts(const char *path, struct strlist *l)
{
	FILE *f = stdin;
	char *text;
	size_t len;
	int rc;

	if (strcmp(path, "-")) {
		/* O_NONBLOCK: a FIFO must not hang the open; only regular files. */
		struct stat st;
		int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

		if (fd < 0) {
			rc = -errno;
			fprintf(stderr, "fgcore: generate: cannot open %s: %s\n", path, strerror(-rc));
			return rc;
		}
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			fprintf(stderr, "fgcore: generate: --prompt-file %s is not a regular file: give a file, or '-' to read standard input\n",
				path);
			close(fd);
			return -EINVAL;
		}
		rc = fcntl(fd, F_GETFL);
		if (rc != -1)
			(void)fcntl(fd, F_SETFL, rc & ~O_NONBLOCK);
		f = fdopen(fd, "r");
		if (!f) {
			close(fd);
			fprintf(stderr, "fgcore: generate: out of memory\n");
			return -ENOMEM;
		}
	}
	rc = slurp(f, path, &text, &len);
	if (f != stdin)
		fclose(f);
	if (rc)
		return rc;
	rc = split_prompts(text, len, l);
	free(text);
	if (rc)
		fprintf(stderr, "fgcore: generate: out of memory\n");
	return rc;
}

/* C-style escapes of a --stop text: \n \t \r \\ ; anything else after a
 * backslash is refused rather than guessed. */
static char *unescape(const char *s)
{
	char *out = malloc(strlen(s) + 1), *o = out;

	if (!out) {
		fprintf(stderr, "fgcore: generate: out of memory\n");
		return NULL;
	}
	for (; *s; s++) {
		if (*s != '\\') {
			*o++ = *s;
			continue;
		}
		switch (*++s) {
		case 'n':
			*o++ = '\n';
			break;
		case 't':
			*o++ = '\t';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case '\\':
			*o++ = '\\';
			break;
		default:
			fprintf(stderr, "fgcore: generate: --stop: unknown escape '\\%.1s': the escapes are \\n, \\t, \\r and \\\\\n",
				*s ? s : "");
			free(out);
			return NULL;
		}
	}
	*o = '\0';
	if (!*out) {
		fprintf(stderr, "fgcore: generate: --stop: the stop text is empty\n");
		free(out);
		return NULL;
	}
	return out;
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || d < lo || d > hi) {
		fprintf(stderr, "fgcore: generate: %s '%s': expected a number in [%g, %g]\n", opt, v,
			lo, hi);
		return -1;
	}
	*out = d;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fgcore [-c CONFIG] [-o section.key=value]... generate\n"
		   "       (--prompt TEXT)... | --prompt-file FILE\n"
		   "       [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
		   "       [--seed S] [--stop TEXT]... [--ignore-eos]\n"
		   "  FILE: one prompt per line, or prompts separated by lines holding a lone\n"
		   "  form feed (^L); '-': stdin.  --stop TEXT understands \\n \\t \\r \\\\.\n"
		   "  Several prompts: each output is headed \"==> prompt N <==\".\n");
}

int fg_cmd_generate(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "prompt", required_argument, NULL, 'p' },
		{ "prompt-file", required_argument, NULL, 'f' },
		{ "max-new-tokens", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 't' },
		{ "top-k", required_argument, NULL, 'k' },
		{ "top-p", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 's' },
		{ "stop", required_argument, NULL, 'S' },
		{ "ignore-eos", no_argument, NULL, 'E' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct strlist prompts = { 0 }, stops = { 0 };
	struct fg_request base, *reqs = NULL;
	struct fg_result *res = NULL;
	struct fg_engine *e = NULL;
	int ignore_eos = 0, c, r, rc = 2;
	long got;
	double d;

	fg_cli_request_defaults(cfg, &base);
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (push(&prompts, strdup(optarg))) {
				fprintf(stderr, "fgcore: generate: out of memory\n");
				rc = 1;
				goto out;
			}
			break;
		case 'f':
			/* Not a regular file: a usage error; one that cannot be
			 * read: a runtime one (as run-batch's and score's input). */
			if ((r = read_prompts(optarg, &prompts))) {
				rc = r == -EINVAL ? 2 : 1;
				goto out;
			}
			break;
		case 'n':
			if (parse_num("--max-new-tokens", optarg, 0, 1048576, &d) || d != (int)d)
				goto out;
			base.max_new_tokens = (int)d;
			break;
		case 't':
			if (parse_num("--temperature", optarg, 0, 100, &d))
				goto out;
			base.temperature = (float)d;
			break;
		case 'k':
			if (parse_num("--top-k", optarg, 0, 1000000, &d) || d != (int)d)
				goto out;
			base.top_k = (int)d;
			break;
		case 'P':
			if (parse_num("--top-p", optarg, 0, 1, &d))
				goto out;
			base.top_p = (float)d;
			break;
		case 's':
			if (parse_num("--seed", optarg, 0, 9007199254740992.0, &d) || d != (double)(uint64_t)d)
				goto out;
			base.seed = (uint64_t)d;
			break;
		case 'S':
			if (push(&stops, unescape(optarg)))
				goto out;
			break;
		case 'E':
			ignore_eos = 1;
			break;
		case 'h':
			usage(stdout);
			rc = 0;
			goto out;
		case ':':
			fprintf(stderr, "fgcore: generate: option '%s' needs a value: see fgcore generate --help\n",
				argv[optind - 1]);
			goto out;
		default:
			if (optopt)
				fprintf(stderr, "fgcore: generate: unknown option '-%c': see fgcore generate --help\n",
					optopt);
			else
				fprintf(stderr, "fgcore: generate: unknown option '%s': see fgcore generate --help\n",
					argv[optind - 1]);
			goto out;
		}
	}
	if (optind < argc || prompts.n == 0) {
		if (optind < argc)
			fprintf(stderr, "fgcore: generate: unexpected argument '%s': give --prompt TEXT or --prompt-file FILE\n",
				argv[optind]);
		else
			fprintf(stderr, "fgcore: generate: no prompt: give --prompt TEXT or --prompt-file FILE\n");
		goto out;
	}
	/* A plugin that cannot be found or refuses an option, or a bad
	 * [policy], is the configuration's fault (exit 2), as for `fgcore config`. */
	if (fg_engine_check_config(cfg)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto out;
	}
	rc = 1;
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto out;
	}
	reqs = calloc(prompts.n, sizeof(*reqs));
	res = calloc(prompts.n, sizeof(*res));
	struct fg_model_info mi;
	fg_engine_info(e, &mi);
	int32_t eos = mi.eos_id;
	if (!reqs || !res) {
		fprintf(stderr, "fgcore: generate: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < prompts.n; i++) {
		reqs[i] = base;
		reqs[i].prompt = prompts.v[i];
		reqs[i].stop = (const char *const *)stops.v;
		reqs[i].n_stop = stops.n;
		reqs[i].stop_ids = ignore_eos ? NULL : &eos;
		reqs[i].n_stop_ids = ignore_eos ? 0 : 1;
	}
	/* A prompt the model cannot run costs only its own output. */
	got = fg_cli_run_all(e, reqs, prompts.n, res, NULL);
	if (got < 0) {
		fprintf(stderr, "fgcore: generate: out of memory\n");
		goto out;
	}
	rc = 0;
	for (size_t i = 0; i < prompts.n; i++) {
		if (res[i].finish_reason == FG_FINISH_ERROR) {
			fprintf(stderr, "fgcore: generate: prompt %zu: %s\n", i + 1,
				res[i].error ? res[i].error : "out of memory");
			rc = 1;
			continue;
		}
		if (prompts.n > 1)
			printf("%s==> prompt %zu <==\n", i ? "\n" : "", i + 1);
		printf("%s%s\n", prompts.v[i], res[i].text);
	}
out:
	for (size_t i = 0; res && i < prompts.n; i++)
		fg_result_clear(&res[i]);
	free(reqs);
	free(res);
	fg_engine_close(e);
	for (size_t i = 0; i < prompts.n; i++)
		free(prompts.v[i]);
	free(prompts.v);
	for (size_t i = 0; i < stops.n; i++)
		free(stops.v[i]);
	free(stops.v);
	return rc;
}
