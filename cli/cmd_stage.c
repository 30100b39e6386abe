/* cli/cmd_stage.c - a rank other than 0 of `mpirun -np N fgcore -c CONFIG
 * bench|generate|run-batch|score|serve ...`: it opens its slice of the
 * model and follows rank 0 (a pipeline's later stage its stage 0's
 * batches, another replica's stage 0 the requests rank 0 hands it); rank 0
 * alone reads the input and writes the output. */
#include <errno.h>
#include <stdio.h>

#include "cli/commands.h"

int fg_cli_stage(struct fg_config *cfg)
{
	struct fg_engine *e = NULL;
	int rc = fg_engine_open(cfg, &e);

	/* -ECANCELED: a stage failed and rank 0 reports it, in one line, with the
	 * job's exit status; this rank leaves quietly, so that the launcher does
	 * not stop rank 0 before it has said why. */
	if (rc == -ECANCELED)
		return FG_EXIT_OK;
	if (rc) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return FG_EXIT_RUNTIME;
	}
	rc = fg_engine_follow(e);
	fg_engine_close(e);
	return rc ? FG_EXIT_RUNTIME : FG_EXIT_OK;
}
