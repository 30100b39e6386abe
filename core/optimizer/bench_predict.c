/* core/optimizer/bench_predict.c - the cost model's view of an open engine. */
#include <errno.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/engine/bench.h"
#include "core/config/config.h"
#include "core/dist/dist.h"
#include "core/engine/engine.h"
#include "core/model/weights.h"
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
	cc->hw.hidden_bytes = (int)fg_dtype_size(e->be.info.hidden_dtype);
	cc->hw.compute_host_memory = !!(e->tier[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY);
	cc->hw.gpu_mem = e->tier[FG_ROLE_COMPUTE]->capacity;
	cc->hw.cpu_mem = e->tier[FG_ROLE_HOST]->capacity;
	cc->hw.disk_mem = e->tier[FG_ROLE_DISK] ? e->tier[FG_ROLE_DISK]->capacity : 0;
	/* Under mpirun: the stages of one replica (rank 0 prints the prediction). */
	cc->stages = e->dist ? e->dist->info.size : 1;
	cc->micro_batches = fg_config_int(cfg, "distributed", "micro_batches");
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

/* A tier's capacity: [hardware]'s, capped by the tier's `capacity` key. */
static uint64_t capped(uint64_t hw, uint64_t cap)
{
	return cap && (!hw || cap < hw) ? cap : hw;
}

int fg_cost_print_config(FILE *out, const struct fg_config *cfg)
{
	static const double GB = 1073741824.0;
	struct fg_cost_case cc;
	struct fg_cost_prediction pred;
	struct fg_policy p;
	struct fg_weights *w;
	int rc;

	memset(&cc, 0, sizeof(cc));
	if ((rc = fg_hardware_from_config(cfg, &cc.hw)) || (rc = fg_policy_from_config(cfg, &p)))
		return rc;
	if (cc.hw.act_bytes != 2 && cc.hw.act_bytes != 4) {
		FG_ERR("[hardware] act_bytes is %d: a prediction without a run needs it (2: fp16 on a GPU, 4: fp32 on cpu_blas)",
		       cc.hw.act_bytes);
		return -EINVAL;
	}
	/* The model's shape only: nothing is read. */
	if ((rc = fg_weights_open(fg_config_str(cfg, "model", "path"), &cc.model, &w)))
		return rc;
	fg_weights_close(w);
	cc.prompt_len = fg_config_int(cfg, "bench", "prompt_len");
	cc.gen_len = fg_config_int(cfg, "bench", "gen_len");
	cc.hw.gpu_mem = capped(cc.hw.gpu_mem, fg_config_size(cfg, "tier.compute", "capacity"));
	cc.hw.cpu_mem = capped(cc.hw.cpu_mem, fg_config_size(cfg, "tier.host", "capacity"));
	cc.hw.disk_mem = capped(cc.hw.disk_mem, fg_config_size(cfg, "tier.disk", "capacity"));
	if ((rc = fg_cost_predict(&cc, &p, &pred)))
		return rc;
	fprintf(out, "model %s, prompt %lld + %lld tokens, batch %lld x %lld, not run\n",
		cc.model.name, (long long)cc.prompt_len, (long long)cc.gen_len,
		(long long)p.num_gpu_batches, (long long)p.gpu_batch_size);
	fg_cost_print(out, &pred, NULL);
	fprintf(out, "%s:", pred.fits ? "fits" : "does not fit");
	for (int r = FG_ROLES - 1; r >= 0; r--)
		fprintf(out, "\t%s %.3f of %.3f GB%s", fg_role_name(r), (double)pred.mem.total[r] / GB,
			(double)pred.capacity[r] / GB,
			pred.mem.total[r] > pred.capacity[r] ? " (over)" : "");
	fprintf(out, "\n");
	return pred.fits ? 0 : 1;
}
