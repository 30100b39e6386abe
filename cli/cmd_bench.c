/* cli/cmd_bench.c - `fgcore bench`: FlexGen's benchmark and its five log lines. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "cli/flexgen_flags.h"
#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/engine/bench.h"
#include "core/exec/devtime.h"
#include "core/engine/engine.h"
#include "core/optimizer/bench_predict.h"

#define GB 1073741824.0 /* FlexGen's GB is 2^30 bytes */

/* The device's time of a run with [bench] device_timing (0: not measured). */
static double dev_total(const struct fg_forward_stats *st)
{
	double t = 0;
	for (int i = 0; i < FG_DEV_PHASES; i++)
		t += st->dev_s[i];
	return t;
}

static json_t *tiers_json(const struct fg_engine *e, const struct fg_bench_result *r)
{
	json_t *t = json_object();
	for (int i = FG_ROLES - 1; t && i >= 0; i--) {
		if (!e->tier[i])
			continue;
		json_object_set_new(t, fg_role_name(i),
				    json_pack("{s:s, s:I, s:I, s:I}", "plugin",
					      e->tier[i]->ph.plugin->name, "peak_bytes",
					      (json_int_t)r->peak[i], "placed_bytes",
					      (json_int_t)r->placed[i], "capacity_bytes",
					      (json_int_t)r->capacity[i]));
	}
	return t;
}

static int write_json(const char *path, const struct fg_config *cfg, const struct fg_engine *e,
		      const struct fg_bench_params *p, const struct fg_bench_result *r)
{
	const struct fg_forward_stats *st = &r->stats;
	char tmp[4096];
	json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
			      " s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:b,"
			      " s:{s:f, s:f, s:f, s:f, s:f, s:f},"
			      " s:{s:I, s:I, s:I}, s:o}",
			      "model", fg_config_str(cfg, "model", "path"),
			      "compute", e->be.ph.plugin->name,
			      "percent", fg_config_str(cfg, "policy", "percent"),
			      "gpu_batch_size", (json_int_t)e->policy.gpu_batch_size,
			      "num_gpu_batches", (json_int_t)e->policy.num_gpu_batches,
			      "prompt_len", (json_int_t)p->prompt_len,
			      "gen_len", (json_int_t)p->gen_len,
			      "cut_gen_len", (json_int_t)p->cut_gen_len,
			      "model_size_bytes", (json_int_t)r->model_bytes,
			      "cache_size_bytes", (json_int_t)r->cache_bytes,
			      "hidden_size_bytes", (json_int_t)r->hidden_bytes,
			      "prefill_latency_s", r->prefill_s,
			      "prefill_throughput", r->prefill_tps,
			      "decode_latency_s", r->decode_s,
			      "decode_throughput", r->decode_tps,
			      "total_latency_s", r->prefill_s + r->decode_s,
			      "total_throughput", r->total_tps,
			      "weight_load_s", e->load_s,
			      "graph_steps", (json_int_t)st->graph_steps,
			      "projected", r->projected,
			      "time_s", "compute", st->compute_s, "wait_weights", st->wait_weight_s,
			      "wait_cache", st->wait_cache_s, "wait_activations", st->wait_hidden_s,
			      "host_attention", st->host_attn_s, "logits", st->logits_s,
			      "moved_bytes", "weights", (json_int_t)st->weight_bytes,
			      "cache", (json_int_t)st->cache_bytes,
			      "activations", (json_int_t)st->hidden_bytes,
			      "tiers", tiers_json(e, r));
	if (o && dev_total(st) > 0 &&
	    json_object_set_new(o, "device_time_s",
				json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "compute",
					  st->dev_s[FG_DEV_COMPUTE], "wait_weights",
					  st->dev_s[FG_DEV_WAIT_WEIGHT], "wait_cache",
					  st->dev_s[FG_DEV_WAIT_CACHE], "wait_activations",
					  st->dev_s[FG_DEV_WAIT_HIDDEN], "host_attention",
					  st->dev_s[FG_DEV_HOST_ATTN], "logits",
					  st->dev_s[FG_DEV_LOGITS], "total", dev_total(st)))) {
		json_decref(o);
		o = NULL;
	}
	/* where the host's attention went (the host's clock) */
	if (o && st->host_attn_s > 0 &&
	    json_object_set_new(o, "host_attention_s",
				json_pack("{s:f, s:f, s:f}", "waiting_for_device",
					  st->host_attn_wait_s, "appending", st->host_append_s,
					  "attending", st->host_attn_s - st->host_attn_wait_s -
							       st->host_append_s))) {
		json_decref(o);
		o = NULL;
	}
	if (o && st->disk_read_bytes &&
	    json_object_set_new(o, "disk_reads", json_pack("{s:I, s:f}", "bytes",
							   (json_int_t)st->disk_read_bytes,
							   "busy_s", st->disk_busy_s))) {
		json_decref(o);
		o = NULL;
	}
	if (!o) {
		fprintf(stderr, "fgcore: bench: cannot build the JSON report\n");
		return 1;
	}
	/* Write beside the target and rename, so a reader never sees half a report. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(o, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) || rename(tmp, path)) {
		fprintf(stderr, "fgcore: bench: cannot write %s: check the directory exists and is writable\n",
			path);
		remove(tmp);
		json_decref(o);
		return 1;
	}
	json_decref(o);
	return 0;
}

/* The issuing thread's clock.  The stats nest the logits read-out and the
 * host's attention inside compute; the line takes them out, so that no time
 * is counted twice.  On a device-memory compute tier the ops are
 * queued, not run, when issued: the device's queue is waited for where the
 * host next needs its results (the read-out, the host's attention), and the
 * line says so; [bench] device_timing gives the device's own breakdown. */
static void host_time_line(const struct fg_engine *e, const struct fg_forward_stats *st)
{
	const struct fg_tier *ct = e->tier[FG_ROLE_COMPUTE];
	int async = ct && (ct->info.flags & FG_STORAGE_DEVICE_MEMORY);
	double ops = st->compute_s - st->logits_s - st->host_attn_s;

	if (ops < 0) /* rounding of nested sums */
		ops = 0;
	printf("host time: %s %.3f s\twait weights %.3f s\twait cache %.3f s\twait activations %.3f s\thost attention %.3f s\t%s %.3f s\n",
	       async ? "issuing ops" : "compute", ops, st->wait_weight_s, st->wait_cache_s,
	       st->wait_hidden_s, st->host_attn_s,
	       async ? "waiting for the device at read-out" : "logits read-out", st->logits_s);
	if (st->host_attn_s > 0 && async) /* where the host's attention went */
		printf("host attention: waiting for the device's q, k, v %.3f s\tappending new rows "
		       "%.3f s\tattending and copying %.3f s\n", st->host_attn_wait_s,
		       st->host_append_s, st->host_attn_s - st->host_attn_wait_s - st->host_append_s);
	else if (st->host_attn_s > 0)
		printf("host attention: appending new rows %.3f s\tattending %.3f s\n",
		       st->host_append_s, st->host_attn_s - st->host_append_s);
	if (async && dev_total(st) <= 0)
		printf("(host time: the device runs the ops after they are issued, and the host "
		       "waits for it at the logits read-out and the host's attention; "
		       "-o bench.device_timing=true times each phase on the device)\n");
}

static void print_report(const struct fg_engine *e, const struct fg_bench_result *r)
{
	const struct fg_forward_stats *st = &r->stats;
	printf("model size: %.3f GB\tcache size: %.3f GB\thidden size (p): %.3f GB\n",
	       r->model_bytes / GB, r->cache_bytes / GB, r->hidden_bytes / GB);
	/* FlexGen's line; on a CPU run it says which memory the "gpu" is. */
	const struct fg_tier *ct = e->tier[FG_ROLE_COMPUTE];
	printf("peak gpu mem: %.3f GB", r->peak[FG_ROLE_COMPUTE] / GB);
	if (ct && !(ct->info.flags & FG_STORAGE_DEVICE_MEMORY))
		printf(" (compute tier: %s, %s)", ct->ph.plugin->name,
		       ct->info.flags & FG_STORAGE_HOST_MEMORY ? "host memory" : "not GPU memory");
	printf("\tprojected: %s\n", r->projected ? "True" : "False");
	printf("prefill latency: %.3f s\tprefill throughput: %.3f token/s\n", r->prefill_s,
	       r->prefill_tps);
	printf("decode latency: %.3f s\tdecode throughput: %.3f token/s\n", r->decode_s,
	       r->decode_tps);
	printf("total latency: %.3f s\ttotal throughput: %.3f token/s\n", r->prefill_s + r->decode_s,
	       r->total_tps);
	host_time_line(e, st);
	if (dev_total(st) > 0)
		printf("device time: compute %.3f s\twait weights %.3f s\twait cache %.3f s\twait activations %.3f s\thost attention %.3f s\tlogits %.3f s\ttotal %.3f s\n",
		       st->dev_s[FG_DEV_COMPUTE], st->dev_s[FG_DEV_WAIT_WEIGHT],
		       st->dev_s[FG_DEV_WAIT_CACHE], st->dev_s[FG_DEV_WAIT_HIDDEN],
		       st->dev_s[FG_DEV_HOST_ATTN], st->dev_s[FG_DEV_LOGITS], dev_total(st));
	if (st->graph_steps) /* the backend ran each as graphs (compute ABI 1.5) */
		printf("decode steps launched as graphs: %llu\n",
		       (unsigned long long)st->graph_steps);
	if (st->disk_read_bytes) /* what the disk delivered while it was busy */
		printf("disk reads: %.3f GB, a request in flight %.3f s (%.3f GB/s while busy)\n",
		       st->disk_read_bytes / 1e9, st->disk_busy_s,
		       st->disk_busy_s > 0 ? st->disk_read_bytes / 1e9 / st->disk_busy_s : 0);
	uint64_t stored = 0;
	for (int i = 0; i < FG_ROLES; i++)
		stored += e->model.bytes[i];
	printf("weights as stored: %.3f GB (%s)\n", stored / GB,
	       e->policy.compress_weight ? fg_plan_weight_codec(fg_plan_weight_dtype(&e->policy))
					 : "fp16");
	printf("peak memory:");
	for (int i = FG_ROLES - 1; i >= 0; i--)
		if (e->tier[i])
			printf("\t%s (%s) %.3f GB of %.3f GB", fg_role_name(i),
			       e->tier[i]->ph.plugin->name, r->peak[i] / GB, r->capacity[i] / GB);
	printf("\n");
}

/* FlexGen's write_benchmark_log: its five lines, appended.  The peak line
 * stays FlexGen's even on a CPU run (stdout says which tier it was). */
static int write_flexgen_log(FILE *f, const struct fg_bench_result *r)
{
	fprintf(f, "model size: %.3f GB\tcache size: %.3f GB\thidden size (p): %.3f GB\n"
		   "peak gpu mem: %.3f GB\tprojected: %s\n"
		   "prefill latency: %.3f s\tprefill throughput: %.3f token/s\n"
		   "decode latency: %.3f s\tdecode throughput: %.3f token/s\n"
		   "total latency: %.3f s\ttotal throughput: %.3f token/s\n",
		r->model_bytes / GB, r->cache_bytes / GB, r->hidden_bytes / GB,
		r->peak[FG_ROLE_COMPUTE] / GB, r->projected ? "True" : "False", r->prefill_s,
		r->prefill_tps, r->decode_s, r->decode_tps, r->prefill_s + r->decode_s,
		r->total_tps);
	return fflush(f) != 0 || ferror(f) ? -EIO : 0;
}

/* FlexGen's get_filename() + ".log", for --log-file auto. */
static char *flexgen_log_name(const struct fg_config *cfg)
{
	const char *model = fg_cli_flexgen.model ? fg_cli_flexgen.model
						 : fg_config_str(cfg, "model", "path");
	const char *dash = strrchr(model, '-');
	char percent[64] = "", *name = NULL;
	size_t n = 0;

	/* policy.percent is six validated integers: it fits */
	for (const char *p = fg_config_str(cfg, "policy", "percent"); *p && n + 2 < sizeof(percent);
	     p++)
		if (*p != ' ' && *p != '\t')
			percent[n++] = *p;
		else if (n && percent[n - 1] != '-')
			percent[n++] = '-';
	percent[n] = '\0';
	const char *size = dash ? dash + 1 : model;
#define LOG_NAME_ARGS "fo-%s-gbs%lld-ngbs%lld-prompt%lld-gen%lld-percent-%s-%s%s%s.log", size,      \
	(long long)fg_config_int(cfg, "policy", "gpu_batch_size"),                                \
	(long long)fg_config_int(cfg, "policy", "num_gpu_batches"),                               \
	(long long)fg_config_int(cfg, "bench", "prompt_len"),                                     \
	(long long)fg_config_int(cfg, "bench", "gen_len"), percent,                               \
	fg_config_bool(cfg, "policy", "cpu_cache_compute") ? "cpu-cache" : "gpu-cache",           \
	fg_config_bool(cfg, "policy", "compress_weight") ? "-compw" : "",                         \
	fg_config_bool(cfg, "policy", "compress_cache") ? "-compc" : ""
	int len = snprintf(NULL, 0, LOG_NAME_ARGS); /* the model name is user text: sized */
	if (len > 0 && (name = malloc((size_t)len + 1)))
		snprintf(name, (size_t)len + 1, LOG_NAME_ARGS);
#undef LOG_NAME_ARGS
	return name;
}

/* Open --log-file for appending before anything runs, so that a bad path
 * fails at once.  *f stays NULL without --log-file or with --no-log. */
static int open_flexgen_log(const struct fg_config *cfg, FILE **f)
{
	const char *given = fg_cli_flexgen.log_file;
	char *auto_name = NULL;

	*f = NULL;
	if (!given || fg_cli_flexgen.no_log)
		return 0;
	if (!strcmp(given, "auto") && !(auto_name = flexgen_log_name(cfg))) {
		fprintf(stderr, "fgcore: bench: out of memory\n");
		return FG_EXIT_RUNTIME;
	}
	const char *path = auto_name ? auto_name : given;
	*f = fopen(path, "a");
	if (!*f) {
		int e = errno;
		fprintf(stderr, "fgcore: bench: --log-file %.200s: cannot append to it: %s; give a "
			"file in a folder you can write\n", path, strerror(e));
		free(auto_name);
		return FG_EXIT_RUNTIME;
	}
	free(auto_name);
	return 0;
}

static int log_result(FILE *log, const struct fg_bench_result *r)
{
	if (log && write_flexgen_log(log, r)) {
		fprintf(stderr, "fgcore: bench: cannot write the --log-file: %s\n", strerror(errno ? errno : EIO));
		return FG_EXIT_RUNTIME;
	}
	return 0;
}

/* --debug-mode breakdown: FlexGen's counts; the times are fgcore's "host time:"
 * line (and "device time:" with [bench] device_timing). */
static void print_breakdown(const struct fg_engine *e, const struct fg_bench_params *p)
{
	long long layers = (long long)e->model.cfg.layers, nb = e->policy.num_gpu_batches;

	printf("#layers: %lld\n#batches prefill:  %lld\n#batches decoding: %lld\n", layers,
	       layers * nb, (long long)(p->gen_len - 1) * layers * nb);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* --ab section.key=A,B,...: the same benchmark with each value in turn, for
 * `rounds` rounds (A B A B ...), each run after its own warm-up; prints each
 * figure's median per value and its ratio to the first value's.  When the key
 * is a plugin section's `plugin`, a value other than the configured plugin runs
 * without that section's plugin options (they belong to the configured one). */
static int run_ab(struct fg_config *cfg, const char *spec, int rounds,
		  const struct fg_bench_params *p, FILE *log)
{
	enum { MAXV = 8 };
	char key[256], values[1024], *val[MAXV], set[1400], section[256], *save;
	double fig[MAXV][3][64];
	int nv = 0;
	const char *eq = strchr(spec, '=');
	const char *orig_plugin = NULL;

	if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(key) || strlen(eq + 1) >= sizeof(values)) {
		fprintf(stderr, "fgcore: bench: --ab %.200s: expected section.key=A,B[,...] (key below "
			"256 bytes, values below 1024)\n", spec);
		return 2;
	}
	snprintf(key, sizeof(key), "%.*s", (int)(eq - spec), spec);
	snprintf(values, sizeof(values), "%s", eq + 1);
	for (char *t = strtok_r(values, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (nv == MAXV) {
			fprintf(stderr, "fgcore: bench: --ab %.200s: at most %d values\n", spec, MAXV);
			return 2;
		}
		val[nv++] = t;
	}
	if (nv < 2) {
		fprintf(stderr, "fgcore: bench: --ab %.200s: give at least two comma-separated values\n", spec);
		return 2;
	}
	const char *dot = strrchr(key, '.');
	if (dot && !strcmp(dot, ".plugin")) {
		snprintf(section, sizeof(section), "%.*s", (int)(dot - key), key);
		const struct fg_cfg_section *sec = fg_cfg_find_section(section);
		if (sec && sec->plugin_kind)
			orig_plugin = fg_config_get(cfg, section, "plugin");
	}
	for (int r = 0; r < rounds; r++)
		for (int v = 0; v < nv; v++) {
			struct fg_engine *e = NULL;
			struct fg_bench_result res;
			struct fg_config *run;
			int other = orig_plugin && strcmp(orig_plugin, val[v]) != 0;

			if (fg_config_copy(cfg, other ? section : NULL, &run)) {
				fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
				return 1;
			}
			snprintf(set, sizeof(set), "%s=%s", key, val[v]);
			if (fg_config_set(run, set, "--ab") || fg_engine_check_config(run)) {
				fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
				fg_config_free(run);
				return 2;
			}
			if (fg_engine_open(run, &e) || fg_bench_run(e, p, &res)) {
				fprintf(stderr, "fgcore: bench --ab %s: %s\n", set, fg_last_error_text());
				fg_engine_close(e);
				fg_config_free(run);
				return 1;
			}
			fg_engine_close(e);
			fg_config_free(run);
			if (log_result(log, &res))
				return 1;
			fig[v][0][r] = res.prefill_tps;
			fig[v][1][r] = res.decode_tps;
			fig[v][2][r] = res.total_tps;
			printf("round %d %s: prefill %.3f decode %.3f total %.3f token/s\n", r + 1, set,
			       res.prefill_tps, res.decode_tps, res.total_tps);
			fflush(stdout);
		}
	static const char *const names[3] = { "prefill", "decode", "total" };
	printf("median of %d rounds (token/s; ratio to %s=%s):\n", rounds, key, val[0]);
	for (int k = 0; k < 3; k++) {
		double base = median(fig[0][k], rounds);
		printf("  %-8s", names[k]);
		for (int v = 0; v < nv; v++) {
			double m = median(fig[v][k], rounds);
			printf("  %s=%s %.3f (x%.3f)", key, val[v], m, base > 0 ? m / base : 0);
		}
		printf("\n");
	}
	return 0;
}

const struct option fg_bench_longopts[] = {
	{ "json", required_argument, NULL, 'j' },
	{ "ab", required_argument, NULL, 'a' },
	{ "rounds", required_argument, NULL, 'r' },
	{ "predict", no_argument, NULL, 'P' },
	{ "predict-only", no_argument, NULL, 'Y' },
	{ "hardware", required_argument, NULL, 'W' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void bench_help(void)
{
	printf("usage: fgcore [-c CONFIG] [-o section.key=value]... bench [--json FILE] [--predict]\n"
	       "       [--predict-only] [--hardware NAME|FILE] [--ab section.key=A,B[,...] [--rounds N]]\n"
	       "       [FLEXGEN FLAGS]\n"
	       "\n"
	       "  --json FILE          also write the results as JSON\n"
	       "  --predict            print the cost model's prediction beside the measurement\n"
	       "  --predict-only       print the prediction and whether the plan fits [hardware],\n"
	       "                       without loading the model or running (exit 1: it does not fit)\n"
	       "  --hardware NAME|FILE [hardware] from a preset (t4, h200, a100-80g, l4, ...) or a\n"
	       "                       file `fgcore profile --output FILE` wrote\n"
	       "  --ab S.K=A,B[,...]   the benchmark with each value in turn (S.K=plugin: the\n"
	       "                       other plugins run without the section's plugin options)\n"
	       "  --rounds N           rounds of --ab (default 3)\n"
	       "\n"
	       "FlexGen's flags (flex_opt.py), anywhere on the line; unique prefixes and\n"
	       "--flag=value work as in FlexGen (--cpu, --debug fewer_batch):\n"
	       "  --model NAME          facebook/opt-X (with --path: the weights to use)\n"
	       "  --path DIR|_DUMMY_    folder of FlexGen's opt-X-np weights; _DUMMY_: random\n"
	       "  --offload-dir DIR     the disk tier's folder (created if missing)\n"
	       "  --prompt-len N        prompt tokens (default 512)\n"
	       "  --gen-len N           generated tokens (default 32)\n"
	       "  --cut-gen-len N       run N tokens and project the rest\n"
	       "  --debug-mode MODE     fewer_batch: time 4 tokens and project; breakdown: the\n"
	       "                        same without overlap, with FlexGen's counts\n"
	       "  --gpu-batch-size N    --num-gpu-batches N\n"
	       "  --percent WG WC CG CC HG HC   percent of weights, cache, activations on the\n"
	       "                        compute and host tiers (disk: the rest)\n"
	       "  --overlap [BOOL]  --sep-layer [BOOL]  --pin-weight [BOOL]\n"
	       "  --cpu-cache-compute  --compress-weight  --compress-cache\n"
	       "  --attn-sparsity 1     only 1 (dense): sparse attention is not implemented\n"
	       "  --log-file FILE|auto  append FlexGen's five lines to FILE (auto: its name)\n"
	       "  --no-log              no log file\n"
	       "  --verbose N           0: print nothing; 1 or more: the report\n"
	       "see fgcore(1), FLEXGEN FLAGS\n");
}

int fg_cmd_bench(struct fg_config *cfg, int argc, char **argv)
{
	const char *json = NULL, *ab = NULL;
	const char *hardware = NULL;
	int rounds = 3, predict = 0;
	struct fg_engine *e;
	struct fg_bench_result r;
	FILE *log = NULL;
	int c, rc;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+:h", fg_bench_longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = optarg;
			break;
		case 'a':
			ab = optarg;
			break;
		case 'P':
			predict = predict ? predict : 1;
			break;
		case 'Y':
			predict = 2;
			break;
		case 'W':
			hardware = optarg;
			break;
		case 'r': {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*end || end == optarg || n < 1 || n > 64) {
				fprintf(stderr, "fgcore: bench: --rounds %.40s: expected 1..64\n", optarg);
				return 2;
			}
			rounds = (int)n;
			break;
		}
		case 'h':
			bench_help();
			return 0;
		case ':':
			fprintf(stderr, "fgcore: bench: option '%.100s' needs a value: see fgcore bench "
				"--help\n", argv[optind - 1]);
			return 2;
		default: {
			const char *bad = argv[optind - 1];
			int clip = strlen(bad) > 100;
			if (bad[0] == '-' && bad[1] == '-' && strchr(bad, '=') && optopt)
				fprintf(stderr, "fgcore: bench: option '%.100s%s' takes no value: see "
					"fgcore bench --help\n", bad, clip ? "..." : "");
			else if (bad[0] == '-' && bad[1] == '-')
				fprintf(stderr, "fgcore: bench: unknown option '%.100s%s': see fgcore "
					"bench --help\n", bad, clip ? "..." : "");
			else
				fprintf(stderr, "fgcore: bench: unknown option '-%c': see fgcore bench "
					"--help\n", optopt);
			return 2;
		}
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fgcore: bench: unexpected argument '%.100s': see fgcore bench --help\n",
			argv[optind]);
		return 2;
	}
	if (hardware && fg_hardware_load(cfg, hardware)) {
		fprintf(stderr, "fgcore: bench: %s\n", fg_last_error_text());
		return 2;
	}
	if (predict == 2) {
		rc = fg_cost_print_config(stdout, cfg);
		if (rc < 0)
			fprintf(stderr, "fgcore: bench --predict-only: %s\n", fg_last_error_text());
		return rc < 0 ? 2 : rc;
	}
	struct fg_bench_params p = {
		.prompt_len = fg_config_int(cfg, "bench", "prompt_len"),
		.gen_len = fg_config_int(cfg, "bench", "gen_len"),
		.cut_gen_len = fg_config_int(cfg, "bench", "cut_gen_len"),
		.warmup = fg_config_bool(cfg, "bench", "warmup"),
		.device_timing = fg_config_bool(cfg, "bench", "device_timing"),
	};
	/* FlexGen's debug modes time a few decode steps and project the rest:
	 * fgcore's unit is a token, so they run 4 (the fewest a projection needs). */
	if (fg_cli_flexgen.debug_mode != FG_DEBUG_NONE && p.gen_len > 4 &&
	    (p.cut_gen_len == 0 || p.cut_gen_len > 4))
		p.cut_gen_len = 4;
	int quiet = fg_cli_flexgen.verbose == 0;
	if ((rc = open_flexgen_log(cfg, &log)))
		return rc;
	if (ab) {
		rc = run_ab(cfg, ab, rounds, &p, log);
		if (log)
			fclose(log);
		return rc;
	}
	/* A plugin that refuses an option, or a bad [policy], is the
	 * configuration's fault (exit 2), as for `fgcore config`. */
	rc = fg_engine_check_config(cfg) ? FG_EXIT_USAGE
		: fg_engine_open(cfg, &e) ? FG_EXIT_RUNTIME : FG_EXIT_OK;
	if (rc) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		if (log)
			fclose(log);
		return rc;
	}
	if (fg_bench_run(e, &p, &r)) {
		fprintf(stderr, "fgcore: bench: %s\n", fg_last_error_text());
		fg_engine_close(e);
		if (log)
			fclose(log);
		return 1;
	}
	rc = log_result(log, &r);
	if (log && fclose(log) && !rc) {
		fprintf(stderr, "fgcore: bench: cannot write the --log-file: %s\n", strerror(errno));
		rc = 1;
	}
	if (!quiet) {
		print_report(e, &r);
		if (fg_cli_flexgen.debug_mode == FG_DEBUG_BREAKDOWN)
			print_breakdown(e, &p);
		if (predict)
			fg_cost_print_prediction(stdout, cfg, e, &p, &r);
	}
	fflush(stdout);
	if (json && write_json(json, cfg, e, &p, &r))
		rc = 1;
	fg_engine_close(e);
	return rc;
}
