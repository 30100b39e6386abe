/* cli/batch_run.h - many requests through fg_generate one effective batch at a
 * time, so that a stop request is seen between batches and a failing batch
 * costs only the requests that fail. */
#ifndef FG_CLI_BATCH_RUN_H
#define FG_CLI_BATCH_RUN_H

#include <signal.h>
#include <stddef.h>

#include <fgcore/fgcore.h>

/* Run n requests into res (input order), in the engine's effective batches of
 * gpu_batch_size x num_gpu_batches requests, taken by prompt length as
 * fg_generate orders them.  *stop (NULL: never) is read before each batch:
 * once set, the remaining requests are left undone.  A batch that fails as a
 * whole is run again one request at a time, so a request the engine cannot run
 * gets its own FG_FINISH_ERROR result and the others their results.  done[i]
 * becomes 1 for every request with a result (a completion or an error).
 * Returns the number done, or -ENOMEM (nothing done). */
long fg_cli_generate_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			     struct fg_result *res, unsigned char *done,
			     const volatile sig_atomic_t *stop);

#endif
