/* core/engine/worker.c - a pipeline's later stages (a rank whose stage is
 * not 0): follow their stage 0's commands on their own layers until it
 * closes its engine.  Each command makes the same call stage 0 made
 * (core/exec/pipe.c sends them), so every caller of the forward pass runs
 * distributed unchanged.  (Another replica's stage 0 runs the requests
 * rank 0 hands it: core/request/replicas.c.) */
#include <stdlib.h>

#include "core/dist/dist.h"
#include "core/engine/engine.h"
#include "core/exec/pipe.h"
#include "core/util/error.h"

int fg_engine_follow_stage(struct fg_engine *e)
{
	struct fg_dist *d = e->dist;
	struct fg_forward *f = NULL;
	int32_t *pad = NULL;

	for (int taken = 0;;) {
		struct fg_pipe_cmd c;

		fg_pipe_next_command(d, &c);
		fg_dist_test_kill(d, &taken);
		switch (c.op) {
		case FG_PIPE_NEW: {
			struct fg_forward_env env;

			fg_forward_free(f);
			f = NULL;
			if (c.nb < 1 || c.bs < 1 || c.nb > 4096 || c.bs > 65536 || c.plen < 1) {
				FG_ERR("rank %d: stage 0 asked for a %lld x %lld run of %lld tokens: not a run this stage makes",
				       d->world_rank, (long long)c.nb, (long long)c.bs, (long long)c.plen);
				fg_pipe_die(d);
			}
			fg_engine_forward_env(e, c.nb, &env);
			env.policy.gpu_batch_size = c.bs;
			free(pad);
			pad = malloc((size_t)(c.nb * c.bs) * sizeof(int32_t));
			if (!pad) {
				FG_ERR("rank %d: out of memory", d->world_rank);
				fg_pipe_die(d);
			}
			/* fg_forward_new agrees with the other stages on its outcome. */
			if (fg_forward_new(&f, &env, c.plen, c.glen))
				f = NULL;
			break;
		}
		case FG_PIPE_PREFILL:
		case FG_PIPE_DECODE:
		case FG_PIPE_JOIN:
			fg_pipe_follow_step(d, f, &c, pad);
			break;
		case FG_PIPE_FREE:
			fg_forward_free(f);
			f = NULL;
			break;
		case FG_PIPE_EXIT:
			d->peer_lost |= c.want != 0;
			fg_forward_free(f);
			free(pad);
			return 0;
		default:
			FG_ERR("rank %d: unknown command %d from stage 0", d->world_rank, c.op);
			fg_pipe_die(d);
		}
	}
}
