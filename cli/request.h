/* cli/request.h - request defaults from the [generate] section, and a run
 * whose results land in an array. */
#ifndef FG_CLI_REQUEST_H
#define FG_CLI_REQUEST_H

#include <fgcore/fgcore.h>

/* Fill sampling fields and max_new_tokens from [generate]. */
void fg_cli_request_defaults(const struct fg_config *cfg, struct fg_request *r);
/* fg_run over n requests into res[0..n) (input order; zeroed first), every
 * request with a result of its own (a completion or an error); stop as
 * fg_run_opts.stop.  Returns the number with a result, or a negative errno. */
long fg_cli_run_all(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		    struct fg_result *res, const volatile sig_atomic_t *stop);

#endif
