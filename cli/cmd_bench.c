/* cli/cmd_bench.c - `fgcore bench`: FlexGen's benchmark and its five log lines. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/config/config.h"
#include "core/engine/bench.h"
#include "core/engine/engine.h"
#include "core/optimizer/bench_predict.h"

#define GB 1073741824.0 /* FlexGen's GB is 2^30 bytes */

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
			      " s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b,"
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
			      "projected", r->projected,
			      "time_s", "compute", st->compute_s, "wait_weights", st->wait_weight_s,
			      "wait_cache", st->wait_cache_s, "wait_activations", st->wait_hidden_s,
			      "host_attention", st->host_attn_s, "logits", st->logits_s,
			      "moved_bytes", "weights", (json_int_t)st->weight_bytes,
			      "cache", (json_int_t)st->cache_bytes,
			      "activations", (json_int_t)st->hidden_bytes,
			      "tiers", tiers_json(e, r));
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

static void print_report(const struct fg_engine *e, const struct fg_bench_result *r)
{
	const struct fg_forward_stats *st = &r->stats;
	printf("model size: %.3f GB\tcache size: %.3f GB\thidden size (p): %.3f GB\n",
	       r->model_bytes / GB, r->cache_bytes / GB, r->hidden_bytes / GB);
	printf("peak gpu mem: %.3f GB\tprojected: %s\n", r->peak[FG_ROLE_COMPUTE] / GB,
	       r->projected ? "True" : "False");
	printf("prefill latency: %.3f s\tprefill throughput: %.3f token/s\n", r->prefill_s,
	       r->prefill_tps);
	printf("decode latency: %.3f s\tdecode throughput: %.3f token/s\n", r->decode_s,
	       r->decode_tps);
	printf("total latency: %.3f s\ttotal throughput: %.3f token/s\n", r->prefill_s + r->decode_s,
	       r->total_tps);
	printf("time: compute %.3f s\twait weights %.3f s\twait cache %.3f s\twait activations %.3f s\thost attention %.3f s\tlogits %.3f s\n",
	       st->compute_s, st->wait_weight_s, st->wait_cache_s, st->wait_hidden_s,
	       st->host_attn_s, st->logits_s);
	uint64_t stored = 0;
	for (int i = 0; i < FG_ROLES; i++)
		stored += e->model.bytes[i];
	printf("weights as stored: %.3f GB (%s)\n", stored / GB,
	       e->policy.compress_weight ? "int4_group64" : "fp16");
	printf("peak memory:");
	for (int i = FG_ROLES - 1; i >= 0; i--)
		if (e->tier[i])
			printf("\t%s (%s) %.3f GB of %.3f GB", fg_role_name(i),
			       e->tier[i]->ph.plugin->name, r->peak[i] / GB, r->capacity[i] / GB);
	printf("\n");
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
 * figure's median per value and its ratio to the first value's. */
static int run_ab(struct fg_config *cfg, const char *spec, int rounds,
		  const struct fg_bench_params *p)
{
	enum { MAXV = 8 };
	char key[256], values[1024], *val[MAXV], set[1400];
	double fig[MAXV][3][64];
	int nv = 0;
	const char *eq = strchr(spec, '=');

	if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(key) || strlen(eq + 1) >= sizeof(values)) {
		fprintf(stderr, "fgcore: bench: --ab %s: expected section.key=A,B[,...]\n", spec);
		return 2;
	}
	snprintf(key, sizeof(key), "%.*s", (int)(eq - spec), spec);
	snprintf(values, sizeof(values), "%s", eq + 1);
	for (char *t = strtok(values, ","); t && nv < MAXV; t = strtok(NULL, ","))
		val[nv++] = t;
	if (nv < 2) {
		fprintf(stderr, "fgcore: bench: --ab %s: give at least two comma-separated values\n", spec);
		return 2;
	}
	for (int r = 0; r < rounds; r++)
		for (int v = 0; v < nv; v++) {
			struct fg_engine *e = NULL;
			struct fg_bench_result res;
			snprintf(set, sizeof(set), "%s=%s", key, val[v]);
			if (fg_config_set(cfg, set, "--ab")) {
				fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
				return 2;
			}
			if (fg_engine_open(cfg, &e) || fg_bench_run(e, p, &res)) {
				fprintf(stderr, "fgcore: bench --ab %s: %s\n", set, fg_last_error_text());
				fg_engine_close(e);
				return 1;
			}
			fg_engine_close(e);
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

int fg_cmd_bench(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", required_argument, NULL, 'j' },
		{ "ab", required_argument, NULL, 'a' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "predict", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *json = NULL, *ab = NULL;
	int rounds = 3, predict = 0;
	struct fg_engine *e;
	struct fg_bench_result r;
	int c;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = optarg;
			break;
		case 'a':
			ab = optarg;
			break;
		case 'P':
			predict = 1;
			break;
		case 'r':
			rounds = atoi(optarg);
			if (rounds < 1 || rounds > 64) {
				fprintf(stderr, "fgcore: bench: --rounds %s: expected 1..64\n", optarg);
				return 2;
			}
			break;
		case 'h':
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... bench [--json FILE] [--predict]\n"
			       "       [--ab section.key=A,B[,...] [--rounds N]]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fgcore: bench: unexpected argument '%s': see fgcore bench --help\n",
			argv[optind]);
		return 2;
	}
	struct fg_bench_params p = {
		.prompt_len = fg_config_int(cfg, "bench", "prompt_len"),
		.gen_len = fg_config_int(cfg, "bench", "gen_len"),
		.cut_gen_len = fg_config_int(cfg, "bench", "cut_gen_len"),
		.warmup = fg_config_bool(cfg, "bench", "warmup"),
	};
	if (ab)
		return run_ab(cfg, ab, rounds, &p);
	if (fg_engine_open(cfg, &e)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return 1;
	}
	if (fg_bench_run(e, &p, &r)) {
		fprintf(stderr, "fgcore: bench: %s\n", fg_last_error_text());
		fg_engine_close(e);
		return 1;
	}
	print_report(e, &r);
	if (predict)
		fg_cost_print_prediction(stdout, cfg, e, &p, &r);
	fflush(stdout);
	int rc = json ? write_json(json, cfg, e, &p, &r) : 0;
	fg_engine_close(e);
	return rc;
}
