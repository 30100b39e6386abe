/* cli/cmd_optimize.c - `fgcore optimize`: the policy with the best predicted
 * throughput for the configured model, workload and [hardware]. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/flexgen_flags.h"
#include "core/backend/backend.h"
#include "core/config/config.h"
#include "core/model/weights.h"
#include "core/optimizer/optimize.h"
#include "core/tier/tier.h"
#include "core/util/parse.h"

static void optimize_usage(FILE *f)
{
	fprintf(f,
		"usage: fgcore [-c CONFIG] [-o section.key=value]... optimize [OPTIONS]\n"
		"\n"
		"Search gpu_batch_size x num_gpu_batches and, for each, solve a linear program\n"
		"(GLPK) for the placement of weights, KV cache and activations; print the\n"
		"policies with the best predicted throughput.  The machine comes from\n"
		"[hardware] (see `fgcore profile`), the model from [model] path, the\n"
		"workload from [bench] prompt_len and gen_len.\n"
		"\n"
		"  --hardware NAME|FILE   the machine: a preset (t4, h200, a100-80g, l4, or any\n"
		"                         NAME.ini in $FGCORE_HARDWARE_PATH or the installed\n"
		"                         hardware folder) or a [hardware] file such as\n"
		"                         `fgcore profile --output FILE` writes\n"
		"  --gpu-mem SIZE         compute tier capacity (overrides [hardware] gpu_mem;\n"
		"                         the --output file caps [tier.compute] capacity to it)\n"
		"  --cpu-mem SIZE         host tier capacity (overrides cpu_mem; likewise)\n"
		"  --disk-mem SIZE        disk tier capacity (overrides disk_mem; 0: no disk)\n"
		"  --prompt-len N         prompt tokens (default: [bench] prompt_len)\n"
		"  --gen-len N            generated tokens (default: [bench] gen_len)\n"
		"  --gpu-batch-size N     only this GPU batch size\n"
		"  --num-gpu-batches N    only this number of GPU batches\n"
		"  --max-batch N          largest effective batch tried (default 4096)\n"
		"  --margin F             fraction of every tier left free (default 0.05)\n"
		"  --no-compress          never compress weights (4-bit or fp8) or cache\n"
		"  --no-cpu-attention     never compute attention on the host\n"
		"  --top N                policies printed (default 5)\n"
		"  --refill               rank by the steady state of a stream of requests\n"
		"                         refilling the batch ([policy] refill of its rows\n"
		"                         join at once; run-batch and serve), not by one\n"
		"                         static batch (bench); one process only.  Without\n"
		"                         it the best policy's steady state is printed too\n"
		"  --stages N             plan one stage of an N-stage pipeline (mpirun -np N):\n"
		"                         each stage a machine like [hardware] holding 1/N of\n"
		"                         the layers with the same policy\n"
		"  --replicas R           R copies of that pipeline, each with its own batches\n"
		"                         ([distributed] replicas; mpirun -np R x N): also print\n"
		"                         the job's throughput, R times one replica's\n"
		"  --gpus G               compare every way to run on G machines, R replicas of\n"
		"                         N stages with R x N = G and N at most the model's\n"
		"                         layers: the best policy of each, best layout first;\n"
		"                         --output writes the best (not with --stages, --replicas)\n"
		"  --output FILE          write the configuration with the best policy to FILE\n"
		"                         (its [bench] the workload planned for)\n");
}

/* Bytes of the backend's activations, asked from the backend itself. */
static int backend_act_bytes(const struct fg_config *cfg)
{
	struct fg_plugin_handle ph;
	struct fg_backend be;
	void *opts;
	if (fg_config_open_plugin(cfg, "compute", FG_PLUGIN_COMPUTE, &ph, &opts) ||
	    fg_backend_open(&be, &ph, opts))
		return 0;
	int n = (int)fg_dtype_size(be.info.act_dtype);
	fg_backend_close(&be);
	return n;
}

static int set_key(void *user, const char *kv)
{
	return fg_config_set(user, kv, "fgcore optimize");
}

/* 1 when [tier.compute] is host memory, 0 when it is not or cannot be opened. */
static int compute_tier_is_host(const struct fg_config *cfg)
{
	struct fg_plugin_handle ph;
	struct fg_tier t;
	void *opts;
	if (fg_config_open_plugin(cfg, "tier.compute", FG_PLUGIN_STORAGE, &ph, &opts) ||
	    fg_tier_open(&t, "compute", &ph, opts, 0))
		return 0;
	int host = !!(t.info.flags & FG_STORAGE_HOST_MEMORY);
	fg_tier_close(&t);
	return host;
}

/* A plan for a GPU machine ([hardware] compute_host_memory = false) runs on
 * the GPU path: when the configuration's compute tier is host memory, the
 * written configuration names cublas and cuda_mem instead. */
static int plan_plugins(struct fg_config *cfg, const struct fg_hardware *hw)
{
	if (hw->compute_host_memory || !compute_tier_is_host(cfg))
		return 0;
	fprintf(stderr, "optimize: [hardware] describes a GPU but [tier.compute] is host memory: "
		"the configuration written names compute.plugin = cublas and tier.compute.plugin = "
		"cuda_mem, to run on that GPU\n");
	return set_key(cfg, "compute.plugin=cublas") || set_key(cfg, "tier.compute.plugin=cuda_mem");
}

static int write_config(struct fg_config *cfg, const struct fg_policy *p, int64_t replicas,
			int64_t stages, const char *path)
{
	char tmp[4096];
	/* also when 1: a configuration read with other replicas runs another layout */
	if (replicas != fg_config_int(cfg, "distributed", "replicas")) {
		snprintf(tmp, sizeof(tmp), "distributed.replicas=%lld", (long long)replicas);
		if (set_key(cfg, tmp)) {
			fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
			return FG_EXIT_RUNTIME;
		}
	}
	if (fg_optimize_policy_keys(p, set_key, cfg)) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return FG_EXIT_RUNTIME;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	int bad = !f;
	if (f) {
		fprintf(f, "; written by `fgcore optimize`: the policy with the best predicted throughput\n");
		bad |= fg_config_print(cfg, f) != 0;
		bad |= fclose(f) != 0;
		bad = bad || rename(tmp, path) != 0;
	}
	if (bad) {
		fprintf(stderr, "fgcore: optimize: cannot write %s: %s; check that its directory exists and is writable\n",
			path, strerror(errno ? errno : EIO));
		if (f)
			remove(tmp);
		return FG_EXIT_RUNTIME;
	}
	if (replicas > 1)
		fprintf(stderr, "optimize: wrote %s: each rank's policy, %lld replicas of %lld stage%s (run it with mpirun -np %lld fgcore -c %s run-batch --input IN.jsonl --output OUT.jsonl)\n",
			path, (long long)replicas, (long long)stages, stages > 1 ? "s" : "",
			(long long)(replicas * stages), path);
	else if (stages > 1)
		fprintf(stderr, "optimize: wrote %s: one stage's policy (run it with mpirun -np %lld fgcore -c %s bench)\n",
			path, (long long)stages, path);
	else
		fprintf(stderr, "optimize: wrote %s (run it with fgcore -c %s bench)\n", path, path);
	return FG_EXIT_OK;
}

static void print_stage(const struct fg_cost_case *cc)
{
	printf("a stage of %lld: %lld of the %lld layers on each machine; times are the pipeline's\n",
	       (long long)cc->stages, (long long)fg_cost_stage_layers(cc),
	       (long long)cc->model.layers);
}

/* The whole job: every replica runs its own batches (rank 0's handing out
 * of the requests is not priced). */
static void print_job(const struct fg_cost_prediction *p, int64_t replicas, int64_t stages)
{
	double r = (double)replicas;
	printf("predicted throughput of the job, %lld x %lld (replicas x stages, %lld GPUs): prefill %.3f, decode %.3f, total %.3f token/s\n",
	       (long long)replicas, (long long)stages, (long long)(replicas * stages),
	       r * p->prefill_tps, r * p->decode_tps, r * p->total_tps);
}

/* --refill: refill on, one process (a pipeline's joins are not priced yet). */
static int refill_refused(double refill, int64_t stages, int64_t replicas, int64_t gpus)
{
	if (!(refill > 0)) {
		fprintf(stderr, "fgcore: optimize: --refill: [policy] refill is 0 (continuous batching off); set it, e.g. -o policy.refill=0.25\n");
		return 1;
	}
	if (stages > 1 || replicas > 1 || gpus > 1) {
		fprintf(stderr, "fgcore: optimize: --refill: the steady state is priced for one process only (not with --stages, --replicas or --gpus above 1)\n");
		return 1;
	}
	return 0;
}

/* The best policy as a stream refilling its batch and as one static batch,
 * beside each other. */
static void print_refill(const struct fg_cost_case *cc, const struct fg_policy *p, double refill)
{
	struct fg_cost_case st = *cc, ss = *cc;
	struct fg_cost_prediction a, b;

	st.refill = 0;
	ss.refill = refill;
	if (fg_cost_predict(&st, p, &a) || fg_cost_predict(&ss, p, &b))
		return;
	printf("a stream refilling the batch ([policy] refill %g): %lld rows a join, %.2f joins per turnover: predicted total throughput %.3f token/s (static batch %.3f); time per turnover: joins %.3f s, decode %.3f s\n",
	       refill, (long long)b.join_rows, b.join_steps, b.total_tps, a.total_tps, b.prefill_s,
	       b.decode_s);
}

/* With --output: the plugins of the machine planned for, the workload
 * planned for ([bench]: --prompt-len and --gen-len), then the file. */
static int write_best(struct fg_config *cfg, const struct fg_cost_case *cc,
		      const struct fg_policy *p, int64_t replicas, int64_t stages,
		      const char *output)
{
	char plen[64], glen[64];

	if (!output)
		return FG_EXIT_OK;
	snprintf(plen, sizeof(plen), "bench.prompt_len=%lld", (long long)cc->prompt_len);
	snprintf(glen, sizeof(glen), "bench.gen_len=%lld", (long long)cc->gen_len);
	if (plan_plugins(cfg, &cc->hw) || set_key(cfg, plen) || set_key(cfg, glen)) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return FG_EXIT_RUNTIME;
	}
	return write_config(cfg, p, replicas, stages, output);
}

/* --gpus: every layout replicas x stages of that many machines, best first. */
static int optimize_gpus(struct fg_config *cfg, const struct fg_optimize_params *prm,
			 int64_t gpus, const char *output)
{
	struct fg_optimize_layout *l;
	int n, rc = fg_optimize_layouts(prm, gpus, &l, &n);
	int64_t lps = 0;

	if (rc && rc != -ENOSPC) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return rc == -EINVAL ? FG_EXIT_USAGE : FG_EXIT_RUNTIME;
	}
	for (int i = 0; i < n; i++)
		lps += l[i].lps;
	printf("model %s, prompt %lld + %lld tokens; %lld GPUs: %d layouts (replicas x stages), %lld linear programs; throughput is the job's\n",
	       prm->cc.model.name, (long long)prm->cc.prompt_len, (long long)prm->cc.gen_len,
	       (long long)gpus, n, (long long)lps);
	fg_optimize_layouts_print(stdout, l, n);
	if (rc) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		free(l);
		return FG_EXIT_RUNTIME;
	}
	struct fg_cost_case cc = prm->cc;
	cc.stages = l[0].stages;
	printf("best: %lld replica%s of %lld stage%s; one replica:\n", (long long)l[0].replicas,
	       l[0].replicas > 1 ? "s" : "", (long long)l[0].stages, l[0].stages > 1 ? "s" : "");
	if (cc.stages > 1)
		print_stage(&cc);
	fg_cost_print(stdout, &l[0].best.pred, NULL);
	print_job(&l[0].best.pred, l[0].replicas, l[0].stages);
	rc = write_best(cfg, &cc, &l[0].best.policy, l[0].replicas, l[0].stages, output);
	free(l);
	return rc;
}

/* File scope: cli/flexgen_flags.c must know them (--gpu-batch-size is
 * optimize's own here, not FlexGen's). */
const struct option fg_optimize_longopts[] = {
	{ "hardware", required_argument, NULL, 'W' },
	{ "gpu-mem", required_argument, NULL, 'g' },
	{ "cpu-mem", required_argument, NULL, 'c' },
	{ "disk-mem", required_argument, NULL, 'd' },
	{ "prompt-len", required_argument, NULL, 'p' },
	{ "gen-len", required_argument, NULL, 'n' },
	{ "gpu-batch-size", required_argument, NULL, 'b' },
	{ "num-gpu-batches", required_argument, NULL, 'k' },
	{ "max-batch", required_argument, NULL, 'm' },
	{ "margin", required_argument, NULL, 'M' },
	{ "no-compress", no_argument, NULL, 'C' },
	{ "no-cpu-attention", no_argument, NULL, 'A' },
	{ "top", required_argument, NULL, 't' },
	{ "refill", no_argument, NULL, 'R' },
	{ "stages", required_argument, NULL, 's' },
	{ "replicas", required_argument, NULL, 'r' },
	{ "gpus", required_argument, NULL, 'G' },
	{ "output", required_argument, NULL, 'O' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

int fg_cmd_optimize(struct fg_config *cfg, int argc, char **argv)
{
	struct fg_optimize_params prm = { .margin = 0.05 };
	uint64_t mem[3];
	int have_mem[3] = { 0 };
	int64_t plen = 0, glen = 0, stages = 1, replicas = 1, gpus = 0, v;
	const char *layout_opt = NULL;
	const char *output = NULL, *hwfile = NULL;
	char why[128];
	int c, li = -1, rank_refill = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", fg_optimize_longopts, &li)) != -1) {
		int i = c == 'g' ? 0 : c == 'c' ? 1 : 2;
		/* the option's name for its error line: argv[optind - 1] is its value */
		const char *name = li >= 0 ? fg_optimize_longopts[li].name : "";
		li = -1;
		switch (c) {
		case 'W':
			hwfile = optarg;
			break;
		case 'g':
		case 'c':
		case 'd':
			if (fg_parse_size(optarg, &mem[i], why, sizeof(why))) {
				fprintf(stderr, "fgcore: optimize: --%s %s: %s\n", name, optarg, why);
				return FG_EXIT_USAGE;
			}
			have_mem[i] = 1;
			break;
		case 'p':
		case 'n':
		case 'b':
		case 'k':
		case 'm':
		case 't':
		case 's':
		case 'r':
		case 'G':
			/* replicas and GPUs: as many as [distributed] replicas takes */
			if (fg_parse_int(optarg, 1, c == 't' ? 1000 : c == 'r' || c == 'G' ? 65536 : 1 << 24,
					 &v, why, sizeof(why))) {
				fprintf(stderr, "fgcore: optimize: --%s %s: %s\n", name, optarg, why);
				return FG_EXIT_USAGE;
			}
			if (c == 'p')
				plen = v;
			else if (c == 'n')
				glen = v;
			else if (c == 'b')
				prm.gpu_batch_size = v;
			else if (c == 'k')
				prm.num_gpu_batches = v;
			else if (c == 'm')
				prm.max_batch = v;
			else if (c == 's')
				stages = v, layout_opt = "--stages";
			else if (c == 'r')
				replicas = v, layout_opt = "--replicas";
			else if (c == 'G')
				gpus = v;
			else
				prm.top = (int)v;
			break;
		case 'M':
			if (fg_parse_double(optarg, 1, 0, 0.5, &prm.margin, why, sizeof(why))) {
				fprintf(stderr, "fgcore: optimize: --margin %s: %s\n", optarg, why);
				return FG_EXIT_USAGE;
			}
			break;
		case 'C':
			prm.no_compress = 1;
			break;
		case 'A':
			prm.no_cpu_attention = 1;
			break;
		case 'R':
			rank_refill = 1;
			break;
		case 'O':
			output = optarg;
			break;
		case 'h':
			optimize_usage(stdout);
			return FG_EXIT_OK;
		default:
			fprintf(stderr, "fgcore: optimize: unknown option or missing value '%s': see fgcore optimize --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fgcore: optimize: unexpected argument '%s': see fgcore optimize --help\n",
			argv[optind]);
		return FG_EXIT_USAGE;
	}
	if (gpus && layout_opt) {
		fprintf(stderr, "fgcore: optimize: --gpus compares every layout of replicas x stages itself: give it without %s\n",
			layout_opt);
		return FG_EXIT_USAGE;
	}
	double refill = fg_config_double(cfg, "policy", "refill");
	if (rank_refill && refill_refused(refill, stages, replicas, gpus))
		return FG_EXIT_USAGE;
	if (rank_refill)
		prm.cc.refill = refill;
	if (hwfile && fg_hardware_load(cfg, hwfile)) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return FG_EXIT_USAGE;
	}

	struct fg_cost_case *cc = &prm.cc;
	/* the engine keeps every position of a windowed model's cache then */
	prm.no_window_ring = !fg_config_bool(cfg, "policy", "window_ring") ||
			     fg_config_int(cfg, "policy", "share_prefix") > 0;
	if (fg_hardware_from_config(cfg, &cc->hw)) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return FG_EXIT_USAGE;
	}
	uint64_t *dst[3] = { &cc->hw.gpu_mem, &cc->hw.cpu_mem, &cc->hw.disk_mem };
	static const char *const tier[3] = { "compute", "host", "disk" };
	for (int i = 0; i < 3; i++) {
		if (!have_mem[i])
			continue;
		*dst[i] = mem[i];
		/* The written configuration keeps the tier to what was planned for. */
		char kv[64];
		snprintf(kv, sizeof(kv), "tier.%s.capacity=%llu", tier[i], (unsigned long long)mem[i]);
		if (mem[i] && set_key(cfg, kv)) {
			fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
			return FG_EXIT_USAGE;
		}
	}
	if (!cc->hw.act_bytes && !(cc->hw.act_bytes = backend_act_bytes(cfg))) {
		fprintf(stderr, "fgcore: optimize: [hardware] act_bytes is unknown and the compute backend cannot be opened to ask (%s): set act_bytes = 2 (fp16) or 4 (fp32)\n",
			fg_last_error_text());
		return FG_EXIT_USAGE;
	}
	/* The model's shape only: nothing is read. */
	struct fg_weights *w;
	if (fg_weights_open(fg_config_str(cfg, "model", "path"), &cc->model, &w)) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return FG_EXIT_USAGE;
	}
	fg_weights_close(w);
	cc->prompt_len = plen ? plen : fg_config_int(cfg, "bench", "prompt_len");
	cc->gen_len = glen ? glen : fg_config_int(cfg, "bench", "gen_len");
	if (stages > cc->model.layers) {
		fprintf(stderr, "fgcore: optimize: --stages %lld: %s has %lld layers, at least one a stage\n",
			(long long)stages, cc->model.name, (long long)cc->model.layers);
		return FG_EXIT_USAGE;
	}
	cc->stages = stages;
	cc->micro_batches = fg_config_int(cfg, "distributed", "micro_batches");

	if (gpus)
		return optimize_gpus(cfg, &prm, gpus, output);

	struct fg_optimize_out out;
	int rc = fg_optimize(&prm, &out);
	if (rc) {
		fprintf(stderr, "fgcore: optimize: %s\n", fg_last_error_text());
		return rc == -EINVAL ? FG_EXIT_USAGE : FG_EXIT_RUNTIME;
	}
	printf("model %s, prompt %lld + %lld tokens; %d policies, %lld linear programs\n",
	       cc->model.name, (long long)cc->prompt_len, (long long)cc->gen_len, out.nbest,
	       (long long)out.lps);
	if (rank_refill)
		printf("ranked by a stream's steady state, [policy] refill %g: throughput per turnover of the batch, its join steps as prefill\n",
		       refill);
	if (stages > 1)
		print_stage(cc);
	if (replicas > 1)
		printf("%lld replicas of %lld stage%s (mpirun -np %lld), each with its own batches: the table is one replica's\n",
		       (long long)replicas, (long long)stages, stages > 1 ? "s" : "",
		       (long long)(replicas * stages));
	fg_optimize_print(stdout, &out);
	printf("best:\n");
	fg_cost_print(stdout, &out.best[0].pred, NULL);
	if (stages == 1 && replicas == 1 && refill > 0)
		print_refill(cc, &out.best[0].policy, refill);
	if (replicas > 1)
		print_job(&out.best[0].pred, replicas, stages);
	rc = write_best(cfg, cc, &out.best[0].policy, replicas, stages, output);
	fg_optimize_out_free(&out);
	return rc;
}
