/* cli/request.h - request defaults from the [generate] section. */
#ifndef FG_CLI_REQUEST_H
#define FG_CLI_REQUEST_H

#include <fgcore/fgcore.h>

/* Fill sampling fields and max_new_tokens from [generate]. */
void fg_cli_request_defaults(const struct fg_config *cfg, struct fg_request *r);

#endif
