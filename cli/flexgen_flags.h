/* cli/flexgen_flags.h - FlexGen's flags (--percent, --gpu-batch-size, ...) as
 * configuration overrides, parsed the way FlexGen's argparse parses them. */
#ifndef FG_CLI_FLEXGEN_FLAGS_H
#define FG_CLI_FLEXGEN_FLAGS_H

#include <getopt.h>
#include <stddef.h>

enum fg_debug_mode {
	FG_DEBUG_NONE = 0,
	FG_DEBUG_FEWER_BATCH, /* --debug-mode fewer_batch */
	FG_DEBUG_BREAKDOWN,   /* --debug-mode breakdown */
};

struct fg_flexgen_flags {
	char **sets;   /* "section.key=value", applied after -o */
	char **wheres; /* the flag each set came from, for error messages */
	size_t n;
	/* bench's flags that are not configuration */
	char *log_file;     /* --log-file FILE ("auto": FlexGen's name); NULL: none */
	int no_log;         /* --no-log */
	int verbose;        /* --verbose N; -1: not given */
	int debug_mode;     /* enum fg_debug_mode */
	char *model;        /* --model as given; NULL: not given */
	char *path;         /* --path as given; NULL: not given */
	char *offload_dir;  /* --offload-dir, ~ expanded; created by fg_flexgen_flags_prepare */
	const char *bench_only; /* the first flag given that only bench takes, NULL: none */
	unsigned long long given; /* bit i: flag i of the table was given */
};

/* Where fgcore's own options are known, so that argparse's unique-prefix
 * abbreviations are resolved against every option a parser takes: fgcore's
 * options before the command, the command's own after it. */
struct fg_flexgen_scope {
	const struct option *global;  /* fgcore's long options (before the command) */
	const char *global_short_arg; /* its short options that take a value ("co") */
	const char *command;          /* the command whose options are `local` ("bench") */
	const struct option *local;   /* that command's long options */
	/* other commands whose options are known: after one of them only full
	 * names are FlexGen's, and the command's own option of the same name
	 * wins (optimize's --gpu-batch-size); NULL-terminated by name */
	const struct fg_flexgen_command {
		const char *name;
		const struct option *opts;
	} *others;
};

/* Remove FlexGen's flags from argv and turn them into sets and fields of ff.
 * Before the command and after `scope->command` they are recognised as argparse
 * does (unique prefixes, --flag=value); after another command only by their
 * full names.  "--" ends them.  Returns 0, or -EINVAL / -ENOMEM with one line
 * in err (user text in it is clipped, so any errlen is enough). */
int fg_flexgen_flags_take(struct fg_flexgen_flags *ff, const struct fg_flexgen_scope *scope,
			  int *argc, char **argv, char *err, size_t errlen);

/* Side effects the flags ask for once the configuration is accepted: create
 * --offload-dir (with its parents) as FlexGen does.  0 or -errno with err. */
int fg_flexgen_flags_prepare(const struct fg_flexgen_flags *ff, char *err, size_t errlen);

/* Whether the flag `name` ("--gen-len") was on the command line. */
int fg_flexgen_flags_given(const struct fg_flexgen_flags *ff, const char *name);

void fg_flexgen_flags_free(struct fg_flexgen_flags *ff);

/* The flags of this run (cli/main.c fills it before the command runs). */
extern struct fg_flexgen_flags fg_cli_flexgen;

/* bench's and optimize's own long options (cli/cmd_bench.c,
 * cli/cmd_optimize.c), for the rules above. */
extern const struct option fg_bench_longopts[];
extern const struct option fg_optimize_longopts[];

#endif
