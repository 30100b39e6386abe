/* cli/cmd_bench.c - `fgcore bench`: FlexGen's benchmark and its five log lines. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/config/config.h"
#include "core/engine/bench.h"
#include "core/engine/engine.h"

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
	printf("peak memory:");
	for (int i = FG_ROLES - 1; i >= 0; i--)
		if (e->tier[i])
			printf("\t%s (%s) %.3f GB of %.3f GB", fg_role_name(i),
			       e->tier[i]->ph.plugin->name, r->peak[i] / GB, r->capacity[i] / GB);
	printf("\n");
}

int fg_cmd_bench(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *json = NULL;
	struct fg_engine *e;
	struct fg_bench_result r;
	int c;

	optind = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = optarg;
			break;
		case 'h':
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... bench [--json FILE]\n");
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
	fflush(stdout);
	int rc = json ? write_json(json, cfg, e, &p, &r) : 0;
	fg_engine_close(e);
	return rc;
}
