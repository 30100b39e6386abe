/* cli/commands.h - the fgcore commands.  Each takes the loaded configuration
 * and its own argv (argv[0] is the command's name) and returns the exit code:
 * 0 success, 1 runtime error, 2 usage or configuration error.  Errors are
 * printed as one line "fgcore: <message>" on stderr.
 *
 * generate, run-batch, score and serve (and their helpers) are written on
 * the library's public API: they include <fgcore/fgcore.h>, cli/ headers and
 * core/util's small helpers only (tests/test_layers.sh checks it).  bench,
 * profile, optimize, config, plugins and tokenize are internal tools: they
 * may use core headers to reach what the API does not show. */
#ifndef FG_CLI_COMMANDS_H
#define FG_CLI_COMMANDS_H

#include <fgcore/fgcore.h>

enum {
	FG_EXIT_OK = 0,
	FG_EXIT_RUNTIME = 1,
	FG_EXIT_USAGE = 2,
};

/* -v on the command line counts up, -q down (0: neither). */
extern int fg_cli_verbosity;

/* on the public API */
int fg_cmd_generate(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_run_batch(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_score(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_serve(struct fg_config *cfg, int argc, char **argv);
/* internal tools */
int fg_cmd_plugins(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_config(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_bench(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_tokenize(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_profile(struct fg_config *cfg, int argc, char **argv);
int fg_cmd_optimize(struct fg_config *cfg, int argc, char **argv);
/* A later stage of a pipeline job (rank > 0 under mpirun) of a command that
 * runs the model: holds its layers and follows rank 0 until it is done. */
int fg_cli_stage(struct fg_config *cfg);

#endif
