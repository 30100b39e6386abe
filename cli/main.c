/* cli/main.c - fgcore [-c CONFIG] [-o section.key=value]... [-v|-q] [COMMAND [ARGS]]:
 * read the configuration, then run one command of the table below. */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/dist/dist.h"
#include "cli/flexgen_flags.h"
#include "core/config/config.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

#ifndef FG_CONF_DIR
#define FG_CONF_DIR "/usr/local/share/fgcore"
#endif

struct fg_command {
	const char *name;
	int (*run)(struct fg_config *cfg, int argc, char **argv);
	const char *help;
	int staged; /* runs the model: under mpirun, ranks other than 0 are its later stages */
};

/* One row per command. */
static const struct fg_command fg_commands[] = {
	{ "bench", fg_cmd_bench, "FlexGen's throughput benchmark on synthetic prompts (--json FILE)", 1 },
	{ "generate", fg_cmd_generate, "complete --prompt TEXT (repeatable) or --prompt-file FILE", 1 },
	{ "run-batch", fg_cmd_run_batch, "run JSONL requests: --input IN.jsonl --output OUT.jsonl", 1 },
	{ "score", fg_cmd_score, "perplexity of a text FILE, or of token-id sequences (--ids FILE.jsonl)", 1 },
	{ "serve", fg_cmd_serve, "OpenAI-compatible HTTP server: [--host H] [--port P] [--api-key KEY]", 1 },
	{ "tokenize", fg_cmd_tokenize, "print the token ids of each TEXT as JSON", 0 },
	{ "profile", fg_cmd_profile, "measure this machine through the configured plugins: write [hardware]", 0 },
	{ "optimize", fg_cmd_optimize, "the policy with the best predicted throughput (cost model + LP)", 0 },
	{ "plugins", fg_cmd_plugins, "list the plugins found, their options and whether they work here", 0 },
	{ "config", fg_cmd_config, "print the effective configuration (--man: write fgcore.ini(5))", 0 },
	{ NULL, NULL, NULL, 0 },
};

int fg_cli_verbosity;
struct fg_flexgen_flags fg_cli_flexgen;

static const struct option longopts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "set", required_argument, NULL, 'o' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static void fg_usage(FILE *out)
{
	fprintf(out,
		"usage: fgcore [-c CONFIG] [-o section.key=value]... [-v|-q] [COMMAND [ARGS]]\n"
		"\n"
		"  -c, --config FILE   read FILE (default: $FGCORE_CONFIG, else %s/default.ini)\n"
		"  -o, --set S.K=V     set key K of section S after reading the file (repeatable)\n"
		"  -v, --verbose       more messages (twice: debug); fgcore plugins -v lists options\n"
		"  -q, --quiet         errors only\n"
		"  -h, --help          this help\n"
		"  -V, --version       version and plugin ABI\n"
		"\n"
		"commands (default: [fgcore] command):\n", FG_CONF_DIR);
	for (const struct fg_command *c = fg_commands; c->name; c++)
		fprintf(out, "  %-10s  %s\n", c->name, c->help);
	fprintf(out, "\nsee fgcore(1) and fgcore.ini(5)\n");
}

static const struct fg_command *fg_find_command(const char *name)
{
	for (const struct fg_command *c = fg_commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static void fg_command_list(char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (const struct fg_command *c = fg_commands; c->name && len < n; c++) {
		int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", c->name);

		if (w > 0)
			len += (size_t)w;
	}
}

/* The configuration file: -c, else $FGCORE_CONFIG, else the installed
 * default.ini when it exists, else none (built-in defaults). */
static int fg_load_config(struct fg_config *cfg, const char *path)
{
	static const char def[] = FG_CONF_DIR "/default.ini";

	if (path == NULL) {
		path = getenv("FGCORE_CONFIG");
		if (path != NULL && *path == '\0')
			path = NULL;
	}
	if (path == NULL) {
		if (access(def, F_OK) != 0)
			return 0;
		path = def;
	}
	return fg_config_load(cfg, path);
}

static int fg_apply_log_level(const struct fg_config *cfg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	const char *name = fg_config_str(cfg, "fgcore", "log_level");
	int level = FG_LOG_WARN;

	for (int i = 0; i < 4; i++)
		if (strcmp(name, names[i]) == 0)
			level = i;
	if (fg_cli_verbosity > 0)
		level = fg_cli_verbosity >= 2 ? FG_LOG_DEBUG : FG_LOG_INFO;
	else if (fg_cli_verbosity < 0)
		level = FG_LOG_ERROR;
	fg_set_log_level(level);
	return level;
}

int main(int argc, char **argv)
{
	const char *config_path = NULL;
	const char **sets = NULL;
	struct fg_flexgen_flags *ff = &fg_cli_flexgen;
	const struct fg_flexgen_scope scope = {
		.global = longopts,
		.global_short_arg = "co",
		.command = "bench",
		.local = fg_bench_longopts,
		.others = (const struct fg_flexgen_command[]){
			{ "optimize", fg_optimize_longopts },
			{ NULL, NULL },
		},
	};
	char ferr[256];
	size_t n_sets = 0;
	struct fg_config *cfg = NULL;
	const struct fg_command *cmd;
	char *default_argv[2] = { NULL, NULL };
	char **cargv;
	int cargc, opt, rc = FG_EXIT_USAGE;

	/* FlexGen's flags may stand anywhere; they apply after -o overrides. */
	if (fg_flexgen_flags_take(ff, &scope, &argc, argv, ferr, sizeof(ferr))) {
		fprintf(stderr, "fgcore: %s\n", ferr);
		return FG_EXIT_USAGE;
	}
	sets = calloc((size_t)argc + 1, sizeof(*sets));
	if (sets == NULL) {
		fprintf(stderr, "fgcore: out of memory\n");
		return FG_EXIT_RUNTIME;
	}
	opterr = 0;
	/* '+': options end at the command; what follows belongs to it. */
	while ((opt = getopt_long(argc, argv, "+:c:o:vqhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 'o':
			sets[n_sets++] = optarg;
			break;
		case 'v':
			fg_cli_verbosity = fg_cli_verbosity < 0 ? 1 : fg_cli_verbosity + 1;
			break;
		case 'q':
			fg_cli_verbosity = -1;
			break;
		case 'h':
			fg_usage(stdout);
			rc = FG_EXIT_OK;
			goto out;
		case 'V': {
			char abi[128];

			/* each kind has its own minor: a plugin is checked against its kind's */
			printf("fgcore %s (plugin ABI %d: %s)\n", PACKAGE_VERSION, FG_ABI_MAJOR,
			       fg_plugin_abi_text(abi, sizeof(abi)));
			rc = FG_EXIT_OK;
			goto out;
		}
		case ':':
			fprintf(stderr, "fgcore: option '%s' needs an argument: see fgcore --help\n",
				argv[optind - 1]);
			goto out;
		default:
			fprintf(stderr, "fgcore: unknown option '%s': see fgcore --help\n",
				argv[optind - 1]);
			goto out;
		}
	}

	if (fg_config_new(&cfg) != 0) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error());
		rc = FG_EXIT_RUNTIME;
		goto out;
	}
	if (fg_load_config(cfg, config_path) != 0) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error());
		goto out;
	}
	for (size_t i = 0; i < n_sets; i++) {
		if (fg_config_set(cfg, sets[i], NULL) != 0) {
			fprintf(stderr, "fgcore: %s\n", fg_last_error());
			goto out;
		}
	}
	for (size_t i = 0; i < ff->n; i++) {
		if (fg_config_set(cfg, ff->sets[i], ff->wheres[i]) != 0) {
			fprintf(stderr, "fgcore: %s\n", fg_last_error());
			goto out;
		}
	}
	fg_apply_log_level(cfg);

	if (optind < argc) {
		cargc = argc - optind;
		cargv = argv + optind;
	} else {
		default_argv[0] = (char *)fg_config_str(cfg, "fgcore", "command");
		cargc = 1;
		cargv = default_argv;
	}
	cmd = fg_find_command(cargv[0]);
	if (cmd == NULL) {
		char list[256];

		fg_command_list(list, sizeof(list));
		fprintf(stderr, "fgcore: unknown command '%s'%s: the commands are %s (fgcore --help)\n",
			cargv[0], optind < argc ? "" : " ([fgcore] command)", list);
		goto out;
	}
	if (ff->bench_only && cmd->run != fg_cmd_bench) {
		fprintf(stderr, "fgcore: --%s is a flag of FlexGen's benchmark: only `fgcore bench` "
			"takes it, not %s\n", ff->bench_only, cmd->name);
		goto out;
	}
	if (fg_flexgen_flags_prepare(ff, ferr, sizeof(ferr)) != 0) {
		fprintf(stderr, "fgcore: %s\n", ferr);
		rc = FG_EXIT_RUNTIME;
		goto out;
	}
	int rank;
	if (cmd->staged && fg_dist_launched(&rank) > 1 && rank > 0)
		rc = fg_cli_stage(cfg);
	else
		rc = cmd->run(cfg, cargc, cargv);

out:
	if (fflush(stdout) != 0 || ferror(stdout)) {
		if (rc == FG_EXIT_OK) {
			fprintf(stderr, "fgcore: cannot write the output: %s\n",
				strerror(errno ? errno : EIO));
			rc = FG_EXIT_RUNTIME;
		}
	}
	fg_config_free(cfg);
	fg_flexgen_flags_free(ff);
	free(sets);
	return rc;
}
