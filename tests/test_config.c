/* tests/test_config.c - the configuration: defaults, a valid file, every class
 * of error with its file:line message, -o overrides, plugin sections checked
 * against the plugin's options, and print -> load -> print round trips. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include <fgcore/storage.h>
#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/plan/policy.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

static char skel_dir[PATH_MAX];
static char tmpdir[64];
static char ini[128];

static void setup(void)
{
	const char *b = getenv("FGCORE_BUILDDIR");

	snprintf(skel_dir, sizeof(skel_dir), "%s/plugins/skeleton/.libs", b && *b ? b : ".");
	/* Only the skeletons: the real plugins are other tests' business. */
	setenv("FGCORE_PLUGIN_PATH", skel_dir, 1);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/fgcore-test-config.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(ini, sizeof(ini), "%s/test.ini", tmpdir);
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

static void write_ini(const char *text)
{
	FILE *f = fopen(ini, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

static struct fg_config *new_config(void)
{
	struct fg_config *c;

	ck_assert_int_eq(fg_config_new(&c), 0);
	return c;
}

/* Load text as a file; expect failure with the message "<ini>:<rest>", or
 * one starting so when rest ends with "..." (lists that later issues extend). */
static void expect_load_error(const char *text, const char *rest)
{
	struct fg_config *c = new_config();
	char want[2048];
	size_t n;

	write_ini(text);
	ck_assert_int_eq(fg_config_load(c, ini), -EINVAL);
	snprintf(want, sizeof(want), "%s:%s", ini, rest);
	n = strlen(want);
	if (n > 3 && strcmp(want + n - 3, "...") == 0)
		ck_assert_msg(strncmp(fg_last_error(), want, n - 3) == 0, "'%s' does not start with "
			      "'%.*s'", fg_last_error(), (int)(n - 3), want);
	else
		ck_assert_str_eq(fg_last_error(), want);
	/* A failed load changes nothing. */
	ck_assert_str_eq(fg_config_get(c, "policy", "gpu_batch_size"), "4");
	fg_config_free(c);
}

static char *print_to_string(const struct fg_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fg_config_print(c, f), 0);
	fclose(f);
	return buf;
}

START_TEST(test_defaults)
{
	struct fg_config *c = new_config();

	ck_assert_str_eq(fg_config_get(c, "fgcore", "command"), "bench");
	ck_assert_str_eq(fg_config_get(c, "fgcore", "log_level"), "warn");
	ck_assert_str_eq(fg_config_str(c, "model", "path"), "dummy:opt-125m");
	ck_assert_str_eq(fg_config_str(c, "model", "tokenizer"), "");
	ck_assert_int_eq(fg_config_int(c, "policy", "gpu_batch_size"), 4);
	ck_assert_int_eq(fg_config_int(c, "policy", "num_gpu_batches"), 1);
	ck_assert_int_eq(fg_config_int(c, "bench", "prompt_len"), 512);
	ck_assert_int_eq(fg_config_int(c, "bench", "gen_len"), 32);
	ck_assert_int_eq(fg_config_bool(c, "bench", "warmup"), 1);
	ck_assert_int_eq(fg_config_int(c, "generate", "max_new_tokens"), 32);
	ck_assert_double_eq(fg_config_double(c, "generate", "temperature"), 0);
	ck_assert_int_eq(fg_config_int(c, "generate", "top_k"), 0);
	ck_assert_double_eq(fg_config_double(c, "generate", "top_p"), 1);
	ck_assert_int_eq(fg_config_int(c, "generate", "seed"), 0);
	ck_assert_str_eq(fg_config_str(c, "compute", "plugin"), "cpu_blas");
	ck_assert_str_eq(fg_config_str(c, "tier.compute", "plugin"), "pinned_host");
	ck_assert_str_eq(fg_config_str(c, "tier.host", "plugin"), "pinned_host");
	ck_assert_str_eq(fg_config_str(c, "tier.disk", "plugin"), "posix_file");
	ck_assert_uint_eq(fg_config_size(c, "tier.disk", "capacity"), 0);
	ck_assert_ptr_null(fg_config_get(c, "policy", "nothing"));
	ck_assert_ptr_null(fg_config_get(c, "nothing", "nothing"));
	fg_config_free(c);
}
END_TEST

START_TEST(test_valid_file)
{
	struct fg_config *c = new_config();

	write_ini("; a comment\n"
		  "# another\n"
		  "\n"
		  "[fgcore]\n"
		  "log_level = DEBUG\n"
		  "command=config\n"
		  "[model]\n"
		  "path = /data/opt-1.3b   ; inline comment\n"
		  "[policy]\n"
		  "  gpu_batch_size = 64\n"
		  "num_gpu_batches: 8\n"
		  "[bench]\n"
		  "warmup = off\n"
		  "[generate]\n"
		  "temperature = 0.70\n"
		  "top_p = 0.9\n"
		  "seed = 9223372036854775807\n"
		  "[tier.disk]\n"
		  "capacity = 1099511627776\n"
		  "[tier.host]\n"
		  "plugin = storage_skeleton\n"
		  "capacity = 1536K\n"
		  "max_bytes = 2M\n"
		  "zero_fill = no\n");
	ck_assert_msg(fg_config_load(c, ini) == 0, "%s", fg_last_error());
	ck_assert_str_eq(fg_config_get(c, "fgcore", "log_level"), "debug");
	ck_assert_str_eq(fg_config_get(c, "fgcore", "command"), "config");
	ck_assert_str_eq(fg_config_str(c, "model", "path"), "/data/opt-1.3b");
	ck_assert_int_eq(fg_config_int(c, "policy", "gpu_batch_size"), 64);
	ck_assert_int_eq(fg_config_int(c, "policy", "num_gpu_batches"), 8);
	ck_assert_int_eq(fg_config_bool(c, "bench", "warmup"), 0);
	ck_assert_str_eq(fg_config_get(c, "bench", "warmup"), "false");
	ck_assert_str_eq(fg_config_get(c, "generate", "temperature"), "0.7");
	ck_assert_double_eq(fg_config_double(c, "generate", "top_p"), 0.9);
	ck_assert(fg_config_int(c, "generate", "seed") == INT64_MAX);
	ck_assert_str_eq(fg_config_get(c, "tier.disk", "capacity"), "1T");
	ck_assert_uint_eq(fg_config_size(c, "tier.disk", "capacity"), 1ull << 40);
	ck_assert_uint_eq(fg_config_size(c, "tier.host", "capacity"), 1536u << 10);
	ck_assert_str_eq(fg_config_get(c, "tier.host", "max_bytes"), "2M");
	ck_assert_str_eq(fg_config_get(c, "tier.host", "zero_fill"), "no");
	/* Unset keys keep their defaults. */
	ck_assert_int_eq(fg_config_int(c, "bench", "prompt_len"), 512);
	fg_config_free(c);
}
END_TEST

START_TEST(test_file_errors)
{
	expect_load_error("[policy]\ngpu_batch_size = 8\n[polcy]\nx = 1\n",
			  "3: unknown section [polcy]: the sections are fgcore, model, policy, ...");
	expect_load_error("[policy]\ngpu_batch = 8\n",
			  "2: [policy] unknown key 'gpu_batch': the keys of [policy] are "
			  "gpu_batch_size, num_gpu_batches...");
	expect_load_error("[policy]\ngpu_batch_size = four\n",
			  "2: [policy] gpu_batch_size = 'four': not an integer, use an integer "
			  "from 1 to 65536");
	expect_load_error("[policy]\n\ngpu_batch_size = 0\n",
			  "3: [policy] gpu_batch_size = '0': out of range, use an integer from 1 "
			  "to 65536");
	expect_load_error("[generate]\ntop_p = 1.5\n",
			  "2: [generate] top_p = '1.5': out of range, use a decimal number from 0 "
			  "to 1");
	expect_load_error("[bench]\nwarmup = maybe\n",
			  "2: [bench] warmup = 'maybe': not a boolean, use true, false, yes, no, "
			  "on, off, 1 or 0");
	expect_load_error("[fgcore]\nlog_level = loud\n",
			  "2: [fgcore] log_level = 'loud': not a valid choice, use one of error, "
			  "warn, info, debug");
	expect_load_error("[tier.disk]\ncapacity = 12Q\n",
			  "2: [tier.disk] capacity = '12Q': not a size (unknown suffix 'Q'), use a "
			  "byte count with an optional suffix K, M, G or T (powers of 1024; also "
			  "KiB, MiB, GiB, TiB), e.g. 512M");
	expect_load_error("[policy]\ngpu_batch_size = 8\n; comment\ngpu_batch_size = 16\n",
			  "4: [policy] gpu_batch_size is set twice in this file (first on line 2): "
			  "keep one");
	/* Duplicates in a plugin section (options of the plugin) too. */
	expect_load_error("[tier.host]\nzero_fill = 1\n[policy]\n[tier.host]\nzero_fill = 0\n",
			  "5: [tier.host] zero_fill is set twice in this file (first on line 2): "
			  "keep one");
	expect_load_error("[policy]\ngpu_batch_size\n",
			  "2: malformed line: expected [section], key = value, or a comment "
			  "starting with ; or #");
	expect_load_error("[policy\ngpu_batch_size = 2\n",
			  "1: malformed line: expected [section], key = value, or a comment "
			  "starting with ; or #");
	expect_load_error("gpu_batch_size = 2\n",
			  "1: key 'gpu_batch_size' is outside any section: put it under a "
			  "[section] header");
	expect_load_error("[model]\npath = /a\n  /b\n",
			  "3: indented line: continuation lines are not supported, remove the "
			  "leading whitespace");
	expect_load_error("[compute]\nplugin = ../evil\n",
			  "2: [compute] plugin = '../evil': not a plugin name, use the name of a "
			  "plugin (a-z, 0-9 and _; `fgcore plugins` lists them)");
	expect_load_error("[tier.disk]\nBad-Key = 1\n",
			  "2: [tier.disk] 'Bad-Key' is not a valid key: keys use only a-z, 0-9 "
			  "and _");
	{
		char text[400];

		memset(text, 'a', sizeof(text));
		memcpy(text, "[model]\npath = ", 15);
		text[sizeof(text) - 2] = '\n';
		text[sizeof(text) - 1] = '\0';
		write_ini(text);
		struct fg_config *c = new_config();

		ck_assert_int_eq(fg_config_load(c, ini), -EINVAL);
		ck_assert_ptr_nonnull(strstr(fg_last_error(), ":2: line longer than "));
		fg_config_free(c);
	}
}
END_TEST

START_TEST(test_missing_file)
{
	struct fg_config *c = new_config();
	char path[PATH_MAX + 16], want[PATH_MAX + 128];

	snprintf(path, sizeof(path), "%s/nope.ini", tmpdir);
	ck_assert_int_eq(fg_config_load(c, path), -ENOENT);
	snprintf(want, sizeof(want), "%s: cannot open: No such file or directory: check the path "
		 "(-c, FGCORE_CONFIG)", path);
	ck_assert_str_eq(fg_last_error(), want);
	fg_config_free(c);
}
END_TEST

START_TEST(test_overrides)
{
	struct fg_config *c = new_config();

	write_ini("[policy]\ngpu_batch_size = 8\n[tier.host]\nplugin = storage_skeleton\n"
		  "max_bytes = 1M\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_int_eq(fg_config_set(c, "policy.gpu_batch_size=16", NULL), 0);
	ck_assert_int_eq(fg_config_int(c, "policy", "gpu_batch_size"), 16);
	ck_assert_int_eq(fg_config_set(c, " policy.gpu_batch_size = 32 ", NULL), 0);
	ck_assert_int_eq(fg_config_int(c, "policy", "gpu_batch_size"), 32);
	/* the key follows the last dot: sections have dots */
	ck_assert_int_eq(fg_config_set(c, "tier.disk.capacity=2G", NULL), 0);
	ck_assert_str_eq(fg_config_get(c, "tier.disk", "capacity"), "2G");
	ck_assert_int_eq(fg_config_set(c, "tier.host.max_bytes=3M", NULL), 0);
	ck_assert_str_eq(fg_config_get(c, "tier.host", "max_bytes"), "3M");
	ck_assert_int_eq(fg_config_set(c, "model.path=a=b", NULL), 0);
	ck_assert_str_eq(fg_config_get(c, "model", "path"), "a=b");

	ck_assert_int_eq(fg_config_set(c, "policy.gpu_batch_size=abc", NULL), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o policy.gpu_batch_size=abc: not an integer, use an "
			 "integer from 1 to 65536");
	ck_assert_int_eq(fg_config_int(c, "policy", "gpu_batch_size"), 32);
	ck_assert_int_eq(fg_config_set(c, "nodot=1", NULL), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o nodot=1: expected section.key=value, e.g. -o "
			 "policy.gpu_batch_size=8");
	ck_assert_int_eq(fg_config_set(c, "policy.gpu_batch_size", NULL), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o policy.gpu_batch_size: expected section.key=value, "
			 "e.g. -o policy.gpu_batch_size=8");
	ck_assert_int_eq(fg_config_set(c, ".x=1", NULL), -EINVAL);
	ck_assert_int_eq(fg_config_set(c, "policy.=1", NULL), -EINVAL);
	ck_assert_int_eq(fg_config_set(c, "bogus.key=1", NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "-o bogus.key=1: unknown section [bogus]: "
				     "the sections are fgcore, model"));
	ck_assert_int_eq(fg_config_set(c, "policy.bogus=1", NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "-o policy.bogus=1: unknown key 'bogus' in "
				     "[policy]: its keys are gpu_batch_size, num_gpu_batches"));
	ck_assert_int_eq(fg_config_set(c, "fgcore.log_level=loud", "FGCORE_OPTS"), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "FGCORE_OPTS: not a valid choice, use one of error, "
			 "warn, info, debug");
	ck_assert_int_eq(fg_config_set(c, "model.path=a\nb", NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "contains a control character"));
	fg_config_free(c);
}
END_TEST

/* [policy] percent's own rules (the shares of a kind within 100) are checked
 * past the schema; their errors still name where the value was set. */
START_TEST(test_percent_origin)
{
	struct fg_config *c = new_config();
	struct fg_policy p;
	char want[512];

	write_ini("[policy]\ngpu_batch_size = 8\npercent = 60 50 0 100 0 100\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_int_eq(fg_policy_from_config(c, &p), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: [policy] percent = '60 50 0 100 0 100': the weights "
		 "shares 60 + 50 exceed 100 (disk takes the remainder)", ini);
	ck_assert_str_eq(fg_last_error(), want);
	ck_assert_int_eq(fg_config_set(c, "policy.percent=100 0 70 40 100 0", NULL), 0);
	ck_assert_int_eq(fg_policy_from_config(c, &p), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o policy.percent=100 0 70 40 100 0: the cache shares "
			 "70 + 40 exceed 100 (disk takes the remainder)");
	ck_assert_int_eq(fg_config_set(c, "policy.percent=100 0 100 0 100 0", NULL), 0);
	ck_assert_int_eq(fg_policy_from_config(c, &p), 0);
	fg_config_free(c);
}
END_TEST

START_TEST(test_plugin_sections)
{
	struct fg_config *c = new_config();
	struct fg_plugin_handle ph;
	struct fg_storage_info info;
	const struct fg_storage_ops *ops;
	void *opts, *ctx;
	char want[2 * PATH_MAX];
	size_t n;

	write_ini("[compute]\nplugin = compute_skeleton\ncheck_finite = true\n"
		  "[tier.compute]\nplugin = storage_skeleton\n"
		  "[tier.host]\nplugin = storage_skeleton\nmax_bytes = 5M\n"
		  "[tier.disk]\nplugin = storage_skeleton\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_msg(fg_config_check(c) == 0, "%s", fg_last_error());

	/* The options reach the plugin. */
	ck_assert_int_eq(fg_config_open_plugin(c, "tier.host", FG_PLUGIN_STORAGE, &ph, &opts), 0);
	ops = ph.plugin->ops;
	ck_assert_int_eq(ops->open(fg_core_host(), opts, &ctx, &info), 0);
	ck_assert_uint_eq(info.capacity, 5u << 20);
	ops->close(ctx);
	free(opts);
	fg_plugin_close(&ph);
	ck_assert_int_eq(fg_config_set(c, "tier.host.max_bytes=7M", NULL), 0);
	ck_assert_int_eq(fg_config_open_plugin(c, "tier.host", 0, &ph, &opts), 0);
	ops = ph.plugin->ops;
	ck_assert_int_eq(ops->open(fg_core_host(), opts, &ctx, &info), 0);
	ck_assert_uint_eq(info.capacity, 7u << 20);
	ops->close(ctx);
	free(opts);
	fg_plugin_close(&ph);

	/* A bad option value from the file: the error names its line. */
	write_ini("[tier.disk]\nplugin = storage_skeleton\nzero_fill = maybe\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_int_eq(fg_config_check(c), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: [tier.disk] zero_fill = 'maybe': not a boolean, use "
		 "true, false, yes, no, on, off, 1 or 0", ini);
	ck_assert_str_eq(fg_last_error(), want);
	/* ... and from -o */
	ck_assert_int_eq(fg_config_set(c, "tier.disk.zero_fill=sometimes", NULL), 0);
	ck_assert_int_eq(fg_config_check(c), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o tier.disk.zero_fill=sometimes: not a boolean, use "
			 "true, false, yes, no, on, off, 1 or 0");
	ck_assert_int_eq(fg_config_set(c, "tier.disk.zero_fill=on", NULL), 0);
	ck_assert_int_eq(fg_config_check(c), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.disk.alignment=100000", NULL), 0);
	ck_assert_int_eq(fg_config_check(c), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o tier.disk.alignment=100000: out of range, use an "
			 "integer from 64 to 65536");
	fg_config_free(c);

	/* An unknown option: the allowed keys are listed. */
	c = new_config();
	write_ini("[compute]\nplugin = compute_skeleton\n\nthreads = 4\n"
		  "[tier.compute]\nplugin = storage_skeleton\n"
		  "[tier.host]\nplugin = storage_skeleton\n[tier.disk]\nplugin = storage_skeleton\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_int_eq(fg_config_check(c), -EINVAL);
	snprintf(want, sizeof(want), "%s:4: [compute] threads: unknown key for plugin "
		 "compute_skeleton, the keys of [compute] are plugin, ", ini);
	ck_assert_msg(strncmp(fg_last_error(), want, strlen(want)) == 0, "%s", fg_last_error());
	/* the plugin's options come last */
	n = strlen(fg_last_error());
	ck_assert_msg(n > 14 && strcmp(fg_last_error() + n - 14, ", check_finite") == 0, "%s",
		      fg_last_error());
	fg_config_free(c);

	/* A plugin that is not there, and one of the wrong kind. */
	c = new_config();
	write_ini("[compute]\nplugin = no_such_backend\n");
	ck_assert_int_eq(fg_config_load(c, ini), 0);
	ck_assert_int_eq(fg_config_check(c), -ENOENT);
	snprintf(want, sizeof(want), "%s:2: [compute] plugin = 'no_such_backend': plugin "
		 "'no_such_backend' not found: no no_such_backend.so in %s:", ini, skel_dir);
	ck_assert_msg(strncmp(fg_last_error(), want, strlen(want)) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_config_set(c, "compute.plugin=storage_skeleton", NULL), 0);
	ck_assert_int_eq(fg_config_check(c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "-o compute.plugin=storage_skeleton: "));
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "is a storage plugin, but a compute plugin is "
				     "needed here"));
	fg_config_free(c);

	/* The default plugin names: "(the default)" in the message (unless a
	 * cpu_blas is installed in the plugin directory). */
	c = new_config();
	setenv("FGCORE_PLUGIN_PATH", tmpdir, 1);
	if (fg_plugin_load("cpu_blas", 0, &ph) == 0) {
		fg_plugin_close(&ph);
	} else {
		ck_assert_int_eq(fg_config_open_plugin(c, "compute", 0, &ph, &opts), -ENOENT);
		ck_assert_ptr_nonnull(strstr(fg_last_error(), "[compute] plugin = 'cpu_blas' (the "
					     "default): plugin 'cpu_blas' not found"));
	}
	ck_assert_int_eq(fg_config_open_plugin(c, "policy", 0, &ph, &opts), -EINVAL);
	fg_config_free(c);
}
END_TEST

START_TEST(test_print_round_trip)
{
	struct fg_config *c = new_config(), *d;
	char *a, *b;
	FILE *f;

	ck_assert_int_eq(fg_config_set(c, "generate.temperature=0.7", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "generate.top_p=0.95", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "bench.warmup=no", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.disk.capacity=2147483648", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.host.capacity=1000", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "model.path=/models/opt 1.3b", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "compute.plugin=compute_skeleton", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "compute.check_finite=1", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.host.plugin=storage_skeleton", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.host.max_bytes=1048576", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.disk.plugin=storage_skeleton", NULL), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.compute.plugin=storage_skeleton", NULL), 0);
	ck_assert_int_eq(fg_config_check(c), 0);
	a = print_to_string(c);

	/* normalized values, plugin options with their defaults */
	ck_assert_ptr_nonnull(strstr(a, "\n[generate]\nmax_new_tokens = 32\n"));
	ck_assert_ptr_nonnull(strstr(a, "\ntemperature = 0.7\n"));
	ck_assert_ptr_nonnull(strstr(a, "\ntop_p = 0.95\n"));
	ck_assert_ptr_nonnull(strstr(a, "\nwarmup = false\n"));
	/* a plugin section: its keys, then the plugin's options in table order */
	{
		const char *h = strstr(a, "\n[tier.host]\nplugin = storage_skeleton\n");
		const char *end;

		ck_assert_ptr_nonnull(h);
		end = strstr(h + 1, "\n[");
		ck_assert_ptr_nonnull(strstr(h, "\ncapacity = 1000\n"));
		ck_assert_ptr_nonnull(strstr(h, "\nmax_bytes = 1M\nzero_fill = true\nalignment = 64\n"));
		ck_assert(end == NULL || strstr(h, "\nalignment = 64\n") < end);
	}
	ck_assert_ptr_nonnull(strstr(a, "\n[tier.disk]\nplugin = storage_skeleton\n"));
	ck_assert_ptr_nonnull(strstr(a, "\ncapacity = 2G\n"));
	ck_assert_ptr_nonnull(strstr(a, "\n[compute]\nplugin = compute_skeleton\n"));
	ck_assert_ptr_nonnull(strstr(a, "\ncheck_finite = true\n"));
	ck_assert_ptr_nonnull(strstr(a, "\npath = /models/opt 1.3b\n"));
	/* every key of the schema appears */
	for (const struct fg_cfg_key *k = fg_cfg_keys; k->section; k++) {
		char line[128];

		snprintf(line, sizeof(line), "\n%s =", k->key);
		ck_assert_msg(strstr(a, line) != NULL, "%s.%s missing", k->section, k->key);
	}

	f = fopen(ini, "w");
	ck_assert_ptr_nonnull(f);
	fputs(a, f);
	fclose(f);
	d = new_config();
	ck_assert_msg(fg_config_load(d, ini) == 0, "%s", fg_last_error());
	b = print_to_string(d);
	ck_assert_str_eq(a, b);
	free(b);
	fg_config_free(d);

	/* Defaults alone round-trip too. */
	d = new_config();
	free(a);
	a = print_to_string(d);
	fg_config_free(d);
	f = fopen(ini, "w");
	fputs(a, f);
	fclose(f);
	d = new_config();
	ck_assert_msg(fg_config_load(d, ini) == 0, "%s", fg_last_error());
	b = print_to_string(d);
	ck_assert_str_eq(a, b);
	free(a);
	free(b);
	fg_config_free(d);
	fg_config_free(c);
}
END_TEST

START_TEST(test_man)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fg_config_write_man(f), 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(buf, "\n.TH FGCORE.INI 5 "));
	ck_assert_ptr_nonnull(strstr(buf, "\n.SS [tier.disk]\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\n.B gpu_batch_size\n(integer from 1 to 65536, default 4) "));
	ck_assert_ptr_nonnull(strstr(buf, "\n.B log_level\n(one of error, warn, info, debug; "
				     "default warn) "));
	/* the plugins of the search path, with their options */
	ck_assert_ptr_nonnull(strstr(buf, "\n.SS storage_skeleton (storage)\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\n.B max_bytes\n(size, default 1G) capacity this tier"));
	ck_assert_ptr_nonnull(strstr(buf, "\n.SS codec_skeleton (codec)\n"));
	/* minus signs escaped; no line starts with a stray control character */
	ck_assert_ptr_nonnull(strstr(buf, "opt\\-1.3b"));
	for (const char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		ck_assert_msg(*p != '\'', "line starts with a quote: %.40s", p);
	free(buf);
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_valid_file);
	tcase_add_test(tc, test_file_errors);
	tcase_add_test(tc, test_percent_origin);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_overrides);
	tcase_add_test(tc, test_plugin_sections);
	tcase_add_test(tc, test_print_round_trip);
	tcase_add_test(tc, test_man);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
