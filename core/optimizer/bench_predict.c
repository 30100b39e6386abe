/* core/optimizer/bench_predict.c - the cost model's view of an open engine. */
#include <errno.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/engine/bench.h"
#include "core/engine/engine.h"
#include "core/optimizer/bench_predict.h"
#include "core/util/error.h"

int fg_cost_case_of_engine(const struct fg_config *cfg, const struct fg_engine *e,
			   int64_t prompt_len, int64_t gen_len, struct fg_cost_case *cc)
{
	int rc;

	memset(cc, 0, sizeof(*cc));
	if ((rc = fg_hardware_from_config(cfg, &cc->hw)))
		return rc;
	cc->model = e->model.cfg;
	cc->prompt_len = prompt_len;
	cc->gen_len = gen_len;
	/* What the engine has is known for certain; [hardware] gives the rates. */
	cc->hw.act_bytes = (int)fg_dtype_size(e->be.info.act_dtype);
	cc->hw.compute_host_memory = !!(e->tier[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY);
	cc->hw.gpu_mem = e->tier[FG_ROLE_COMPUTE]->capacity;
	cc->hw.cpu_mem = e->tier[FG_ROLE_HOST]->capacity;
	cc->hw.disk_mem = e->tier[FG_ROLE_DISK] ? e->tier[FG_ROLE_DISK]->capacity : 0;
	return fg_hardware_check(&cc->hw);
}

void fg_cost_print_prediction(FILE *out, const struct fg_config *cfg, const struct fg_engine *e,
			      const struct fg_bench_params *p, const struct fg_bench_result *r)
{
	struct fg_cost_case cc;
	struct fg_cost_prediction pred;

	if (fg_cost_case_of_engine(cfg, e, p->prompt_len, p->gen_len, &cc) ||
	    fg_cost_predict(&cc, &e->policy, &pred)) {
		fprintf(out, "prediction: none: %s\n", fg_last_error_text());
		return;
	}
	struct fg_cost_measured m;
	if (r) {
		m = (struct fg_cost_measured){ r->prefill_s, r->decode_s, r->prefill_tps,
					       r->decode_tps, r->total_tps, { 0 } };
		memcpy(m.peak, r->peak, sizeof(m.peak));
	}
	fg_cost_print(out, &pred, r ? &m : NULL);
	if (r) {
		/* The memory model mirrors the engine's allocations: say so when it does not. */
		for (int i = 0; i < FG_ROLES; i++)
			if (e->tier[i] && r->placed[i] != pred.mem.total[i])
				fprintf(out, "prediction: %s tier: predicted %llu bytes but the run placed %llu: the memory model is out of date\n",
					fg_role_name(i), (unsigned long long)pred.mem.total[i],
					(unsigned long long)r->placed[i]);
	}
}
