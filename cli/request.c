/* cli/request.c - request defaults from the configuration; a run into an
 * array of results. */
#include <string.h>

#include "cli/request.h"

void fg_cli_request_defaults(const struct fg_config *cfg, struct fg_request *r)
{
	memset(r, 0, sizeof(*r));
	r->max_new_tokens = (int)fg_config_int(cfg, "generate", "max_new_tokens");
	/* FlexGen's --gen-len (bench.gen_len) given on the command line is the
	 * number of new tokens for generate and run-batch too. */
	if (fg_config_origin_of(cfg, "bench", "gen_len") == FG_CONFIG_FROM_ARGS)
		r->max_new_tokens = (int)fg_config_int(cfg, "bench", "gen_len");
	r->temperature = (float)fg_config_double(cfg, "generate", "temperature");
	r->top_k = (int)fg_config_int(cfg, "generate", "top_k");
	r->top_p = (float)fg_config_double(cfg, "generate", "top_p");
	r->seed = (uint64_t)fg_config_int(cfg, "generate", "seed");
}

static int store(void *arg, size_t index, struct fg_result *res)
{
	struct fg_result *all = arg;

	all[index] = *res;
	return 0;
}

long fg_cli_run_all(struct fg_engine *e, const struct fg_request *reqs, size_t n,
		    struct fg_result *res, const volatile sig_atomic_t *stop)
{
	struct fg_run_opts o = { .on_result = store, .arg = res, .stop = stop };

	memset(res, 0, n * sizeof(*res));
	return fg_run(e, reqs, n, &o);
}
