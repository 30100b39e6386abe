/* cli/cmd_profile.c - `fgcore profile`: measure this machine through the
 * configured plugins and write a [hardware] section for later runs. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/config/config.h"
#include "core/model/weights.h"
#include "core/optimizer/profile.h"
#include "core/plan/plan.h"
#include "core/plan/policy.h"
#include "core/util/parse.h"

/* What the engine reads from the disk at once: a unit's disk-tier weights
 * under the configured policy (attention and MLP apart with sep_layer), or
 * a whole unit when the policy puts none there; 0 (streamed) for a policy
 * that does not parse, which the command reports elsewhere. */
static uint64_t disk_burst(const struct fg_config *cfg, const struct fg_model_config *model)
{
	struct fg_policy pol;
	struct fg_plan_block pb;
	uint64_t disk = 0, all = 0;

	if (fg_policy_from_config(cfg, &pol))
		return 0;
	for (int k = FG_BLOCK_ATTN; k <= FG_BLOCK_MLP; k++) {
		fg_plan_block(model, &pol, (enum fg_block_kind)k, 1, &pb, NULL);
		uint64_t d = pb.bytes[FG_ROLE_DISK];
		uint64_t a = d + pb.bytes[FG_ROLE_HOST] + pb.bytes[FG_ROLE_COMPUTE];
		disk = pol.sep_layer ? (d > disk ? d : disk) : disk + d;
		all = pol.sep_layer ? (a > all ? a : all) : all + a;
	}
	return disk ? disk : all;
}

static void profile_usage(FILE *f)
{
	fprintf(f,
		"usage: fgcore [-c CONFIG] [-o section.key=value]... profile [OPTIONS]\n"
		"\n"
		"Measure the compute backend and the tiers the configuration names and write\n"
		"their rates as a [hardware] section (add it to the configuration, give it to\n"
		"`fgcore optimize --hardware FILE`, or drop it into a hardware preset folder).\n"
		"The products and attention run at the shapes the engine runs: the layer of\n"
		"[model] path, [policy] gpu_batch_size rows and sequences, [bench] prompt_len\n"
		"and gen_len; the disk is read as the engine reads a layer's disk-tier weights\n"
		"under [policy] (a whole layer when it puts none there), one read at a time.\n"
		"\n"
		"  --output FILE      write the section to FILE (default: standard output)\n"
		"  --no-disk          do not measure the disk tier\n"
		"  --quick            small sizes and short repetitions (a rough estimate)\n"
		"  --copy-size SIZE   bytes of each compute<->host transfer (default 256M)\n"
		"  --disk-size SIZE   bytes written and read on the disk tier (default 1G)\n"
		"  --hidden N         a hidden x hidden matrix and hidden/128 heads instead of\n"
		"                     the model's layer\n"
		"  --min-time SEC     repeat each measurement at least this long (default 0.25)\n");
}

static int parse_size_arg(const char *opt, const char *v, uint64_t *out)
{
	char why[128];
	*out = 0;
	int bad = fg_parse_size(v, out, why, sizeof(why));
	if (bad || !*out) {
		fprintf(stderr, "fgcore: profile: %s %s: %s\n", opt, v,
			bad ? why : "must be more than 0");
		return -1;
	}
	return 0;
}

int fg_cmd_profile(struct fg_config *cfg, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'O' },
		{ "no-disk", no_argument, NULL, 'D' },
		{ "quick", no_argument, NULL, 'Q' },
		{ "copy-size", required_argument, NULL, 'C' },
		{ "disk-size", required_argument, NULL, 'S' },
		{ "hidden", required_argument, NULL, 'H' },
		{ "min-time", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct fg_profile_params pp = { .log = stderr };
	const char *output = NULL;
	char why[128], shapes[160];
	int c, quick = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'O':
			output = optarg;
			break;
		case 'D':
			pp.skip_disk = 1;
			break;
		case 'Q':
			pp.copy_bytes = pp.copy_bytes ? pp.copy_bytes : 32 << 20;
			pp.disk_bytes = pp.disk_bytes ? pp.disk_bytes : 64 << 20;
			pp.prefill_rows = 512;
			quick = 1;
			pp.min_seconds = pp.min_seconds > 0 ? pp.min_seconds : 0.05;
			break;
		case 'C':
			if (parse_size_arg("--copy-size", optarg, &pp.copy_bytes))
				return FG_EXIT_USAGE;
			break;
		case 'S':
			if (parse_size_arg("--disk-size", optarg, &pp.disk_bytes))
				return FG_EXIT_USAGE;
			break;
		case 'H':
			if (fg_parse_int(optarg, 64, 65536, &pp.hidden, why, sizeof(why)) ||
			    pp.hidden % 64) {
				fprintf(stderr, "fgcore: profile: --hidden %s: %s\n", optarg,
					pp.hidden % 64 ? "use a multiple of 64" : why);
				return FG_EXIT_USAGE;
			}
			break;
		case 'T':
			if (fg_parse_double(optarg, 1, 0.001, 60, &pp.min_seconds, why, sizeof(why))) {
				fprintf(stderr, "fgcore: profile: --min-time %s: %s\n", optarg, why);
				return FG_EXIT_USAGE;
			}
			break;
		case 'h':
			profile_usage(stdout);
			return FG_EXIT_OK;
		default:
			fprintf(stderr, "fgcore: profile: unknown option '%s': see fgcore profile --help\n",
				argv[optind - 1]);
			return FG_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fgcore: profile: unexpected argument '%s': see fgcore profile --help\n",
			argv[optind]);
		return FG_EXIT_USAGE;
	}

	/* The engine's shapes: the model's layer (its shape only: nothing is read). */
	struct fg_model_config model;
	pp.batch = fg_config_int(cfg, "policy", "gpu_batch_size");
	pp.gen_len = fg_config_int(cfg, "bench", "gen_len");
	if (pp.hidden) {
		pp.seq = quick ? 256 : 0;
		snprintf(shapes, sizeof(shapes), "a %lld x %lld matrix, %lld sequences",
			 (long long)pp.hidden, (long long)pp.hidden, (long long)pp.batch);
	} else {
		struct fg_weights *w;
		if (fg_weights_open(fg_config_str(cfg, "model", "path"), &model, &w)) {
			fprintf(stderr, "fgcore: profile: %s (profile measures that model's shapes; "
				"--hidden N measures a square matrix instead)\n", fg_last_error_text());
			return FG_EXIT_USAGE;
		}
		fg_weights_close(w);
		pp.model = &model;
		pp.seq = fg_config_int(cfg, "bench", "prompt_len");
		pp.disk_burst = disk_burst(cfg, &model);
		snprintf(shapes, sizeof(shapes), "shapes of %s, GPU batch %lld, prompt %lld + %lld",
			 model.name, (long long)pp.batch, (long long)pp.seq, (long long)pp.gen_len);
	}

	struct fg_hardware hw;
	if (fg_profile_run(cfg, &pp, &hw)) {
		fprintf(stderr, "fgcore: profile: %s\n", fg_last_error_text());
		return FG_EXIT_RUNTIME;
	}
	char origin[512], host[64] = "this machine", date[32] = "";
	time_t t = time(NULL);
	struct tm tm;
	if (gethostname(host, sizeof(host)))
		snprintf(host, sizeof(host), "this machine");
	host[sizeof(host) - 1] = '\0';
	if (localtime_r(&t, &tm))
		strftime(date, sizeof(date), "%Y-%m-%d %H:%M", &tm);
	snprintf(origin, sizeof(origin), "measured by `fgcore profile` on %s, %s (compute plugin %s; %s)",
		 host, date, fg_config_str(cfg, "compute", "plugin"), shapes);

	if (!output)
		return fg_hardware_write(stdout, &hw, origin) ? FG_EXIT_RUNTIME : FG_EXIT_OK;
	/* Beside the target, then renamed: a reader never sees half a section. */
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", output);
	FILE *f = fopen(tmp, "w");
	int bad = !f;
	if (f) {
		bad |= fg_hardware_write(f, &hw, origin) != 0;
		bad |= fclose(f) != 0;
		bad = bad || rename(tmp, output) != 0;
	}
	if (bad) {
		fprintf(stderr, "fgcore: profile: cannot write %s: %s; check that its directory exists and is writable\n",
			output, strerror(errno ? errno : EIO));
		if (f)
			remove(tmp);
		return FG_EXIT_RUNTIME;
	}
	fprintf(stderr, "profile: wrote %s\n", output);
	return FG_EXIT_OK;
}
