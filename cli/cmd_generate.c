/* cli/cmd_generate.c - `fgcore generate`: complete prompts given on the command
 * line or in a file (one prompt per line). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/request.h"
#include "core/engine/engine.h"

struct strlist {
	char **v;
	size_t n, cap;
};

static int push(struct strlist *l, char *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	return 0;
}

static int read_prompts(const char *path, struct strlist *l)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int rc = 0;

	if (!f) {
		fprintf(stderr, "fgcore: generate: cannot open %s: %s\n", path, strerror(errno));
		return -errno;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		char *s = strdup(line);
		if (!s || push(l, s)) {
			free(s);
			rc = -ENOMEM;
			break;
		}
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
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
	struct fg_request base;
	struct fg_engine *e = NULL;
	int ignore_eos = 0, c, rc = 2;
	double d;

	fg_cli_request_defaults(cfg, &base);
	optind = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (push(&prompts, strdup(optarg)))
				goto out;
			break;
		case 'f':
			if (read_prompts(optarg, &prompts))
				goto out;
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
			if (push(&stops, optarg))
				goto out;
			break;
		case 'E':
			ignore_eos = 1;
			break;
		case 'h':
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... generate\n"
			       "       (--prompt TEXT)... | --prompt-file FILE\n"
			       "       [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
			       "       [--seed S] [--stop TEXT]... [--ignore-eos]\n");
			rc = 0;
			goto out;
		default:
			goto out;
		}
	}
	if (optind < argc || prompts.n == 0) {
		fprintf(stderr, "fgcore: generate: %s: give --prompt TEXT or --prompt-file FILE\n",
			optind < argc ? "unexpected argument" : "no prompt");
		goto out;
	}
	rc = 1;
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		goto out;
	}
	struct fg_request *reqs = calloc(prompts.n, sizeof(*reqs));
	struct fg_result *res = calloc(prompts.n, sizeof(*res));
	int32_t eos = e->model.cfg.eos_id;
	if (!reqs || !res) {
		fprintf(stderr, "fgcore: generate: out of memory\n");
		free(reqs);
		free(res);
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
	if (fg_generate(e, reqs, prompts.n, res)) {
		fprintf(stderr, "fgcore: generate: %s\n", fg_last_error_text());
	} else {
		rc = 0;
		for (size_t i = 0; i < prompts.n; i++) {
			if (res[i].finish_reason == FG_FINISH_ERROR) {
				fprintf(stderr, "fgcore: generate: prompt %zu: %s\n", i + 1, res[i].error);
				rc = 1;
				continue;
			}
			printf("%s%s\n", prompts.v[i], res[i].text);
			fg_result_clear(&res[i]);
		}
		for (size_t i = 0; i < prompts.n; i++)
			fg_result_clear(&res[i]);
	}
	free(reqs);
	free(res);
out:
	fg_engine_close(e);
	for (size_t i = 0; i < prompts.n; i++)
		free(prompts.v[i]);
	free(prompts.v);
	free(stops.v);
	return rc;
}
