/* tests/test_flexgen_flags.c - FlexGen's flags as argparse parses them
 * (prefixes, --flag=value, str2bool, six --percent integers) and hostile
 * input: 200-digit numbers, 100 KB arguments, empty strings, missing values,
 * tiny error buffers.  Run under ASan+UBSan, an overflow is a failure. */
#define _GNU_SOURCE /* nftw in test_tmpdir.h */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/flexgen_flags.h"
#include "tests/test_tmpdir.h"

/* What cli/main.c and cli/cmd_bench.c define in the program. */
struct fg_flexgen_flags fg_cli_flexgen;
const struct option fg_bench_longopts[] = {
	{ "json", required_argument, NULL, 'j' },
	{ "ab", required_argument, NULL, 'a' },
	{ "rounds", required_argument, NULL, 'r' },
	{ "predict", no_argument, NULL, 'P' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};
static const struct option global[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "set", required_argument, NULL, 'o' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const struct option optimize_opts[] = {
	{ "gpu-batch-size", required_argument, NULL, 'b' },
	{ "output", required_argument, NULL, 'O' },
	{ NULL, 0, NULL, 0 },
};
static const struct fg_flexgen_command others[] = {
	{ "optimize", optimize_opts },
	{ NULL, NULL },
};
static const struct fg_flexgen_scope scope = {
	.global = global,
	.global_short_arg = "co",
	.command = "bench",
	.local = fg_bench_longopts,
	.others = others,
};

struct parsed {
	struct fg_flexgen_flags ff;
	int rc, argc;
	char *argv[64];
	char err[256];
};

/* Parse a NULL-terminated list of arguments (argv[0] = "fgcore" is added). */
static void parse(struct parsed *p, const char *first, ...)
{
	va_list ap;
	const char *a;

	memset(p, 0, sizeof(*p));
	p->argv[p->argc++] = (char *)"fgcore";
	va_start(ap, first);
	for (a = first; a; a = va_arg(ap, const char *)) {
		ck_assert_int_lt(p->argc, 63);
		p->argv[p->argc++] = (char *)a;
	}
	va_end(ap);
	p->argv[p->argc] = NULL;
	p->rc = fg_flexgen_flags_take(&p->ff, &scope, &p->argc, p->argv, p->err, sizeof(p->err));
}

/* The value the flags give `key`: the last set of it wins; NULL if none. */
static const char *set_of(const struct parsed *p, const char *key)
{
	const char *v = NULL;
	size_t n = strlen(key);

	for (size_t i = 0; i < p->ff.n; i++)
		if (!strncmp(p->ff.sets[i], key, n) && p->ff.sets[i][n] == '=')
			v = p->ff.sets[i] + n + 1;
	return v;
}

static void done(struct parsed *p)
{
	fg_flexgen_flags_free(&p->ff);
}

static char *big(size_t n, char c)
{
	char *s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

START_TEST(percent_200_digits)
{
	struct parsed p;
	char *d = big(200, '7');

	parse(&p, "bench", "--percent", d, "2", "3", "4", "5", "6", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "is not an integer 0..100"));
	ck_assert_uint_lt(strlen(p.err), 200); /* the number is clipped */
	/* each of the six places, and a number just above the range */
	for (int k = 0; k < 6; k++) {
		const char *v[6] = { "1", "2", "3", "4", "5", "6" };
		v[k] = d;
		parse(&p, "--percent", v[0], v[1], v[2], v[3], v[4], v[5], "bench", NULL);
		ck_assert_int_eq(p.rc, -EINVAL);
	}
	parse(&p, "--percent", "101", "0", "0", "0", "0", "0", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "--percent", "99999999999999999999999", "0", "0", "0", "0", "0", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "--percent", "20.5", "0", "0", "0", "0", "0", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	free(d);
}
END_TEST

START_TEST(hundred_kb_arguments)
{
	static const char *const value_flags[] = {
		"--model", "--path", "--offload-dir", "--prompt-len", "--gen-len", "--cut-gen-len",
		"--debug-mode", "--gpu-batch-size", "--num-gpu-batches", "--attn-sparsity",
		"--log-file", "--verbose", "--overlap", "--pin-weight", "--sep-layer", NULL,
	};
	char *v = big(100 * 1024, 'x');
	char *name = big(100 * 1024, 'y');
	struct parsed p;

	memcpy(name, "--", 2);
	for (int i = 0; value_flags[i]; i++) {
		parse(&p, "bench", value_flags[i], v, NULL);
		ck_assert_uint_lt(strlen(p.err), sizeof(p.err));
		done(&p);
		char *eq = malloc(strlen(value_flags[i]) + strlen(v) + 2);
		sprintf(eq, "%s=%s", value_flags[i], v);
		parse(&p, "bench", eq, NULL);
		done(&p);
		free(eq);
	}
	/* kept whole where the text is a name: the configuration bounds it */
	parse(&p, "bench", "--model", v, "--path", "_DUMMY_", NULL);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_uint_eq(strlen(set_of(&p, "model.path")), strlen("dummy:") + strlen(v));
	done(&p);
	parse(&p, "bench", "--log-file", v, NULL);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_str_eq(p.ff.log_file, v);
	done(&p);
	/* a 100 KB option name, and as a --percent value */
	parse(&p, name, "bench", NULL);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_int_eq(p.argc, 3); /* left for fgcore's parser to refuse */
	parse(&p, "--percent", v, v, v, v, v, v, NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_uint_lt(strlen(p.err), 200);
	free(v);
	free(name);
}
END_TEST

START_TEST(tiny_error_buffer)
{
	struct fg_flexgen_flags ff;
	char err[4] = "abc";
	char *argv[] = { (char *)"fgcore", (char *)"--percent", (char *)"1", NULL };
	int argc = 3;

	ck_assert_int_eq(fg_flexgen_flags_take(&ff, &scope, &argc, argv, err, 1), -EINVAL);
	ck_assert_int_eq(err[0], '\0');
	ck_assert_int_eq(err[1], 'b'); /* nothing written past errlen */
}
END_TEST

START_TEST(empty_and_missing_values)
{
	static const char *const flags[] = {
		"--model", "--path", "--offload-dir", "--prompt-len", "--gen-len", "--cut-gen-len",
		"--debug-mode", "--gpu-batch-size", "--num-gpu-batches", "--attn-sparsity",
		"--log-file", NULL,
	};
	struct parsed p;

	for (int i = 0; flags[i]; i++) {
		char eq[64];
		parse(&p, "bench", flags[i], "", NULL);
		ck_assert_msg(p.rc == -EINVAL && strstr(p.err, "empty"), "%s '': %s", flags[i], p.err);
		snprintf(eq, sizeof(eq), "%s=", flags[i]);
		parse(&p, "bench", eq, NULL);
		ck_assert_msg(p.rc == -EINVAL && strstr(p.err, "empty"), "%s: %s", eq, p.err);
		parse(&p, "bench", flags[i], NULL);
		ck_assert_msg(p.rc == -EINVAL && strstr(p.err, "needs a value"), "%s: %s", flags[i],
			      p.err);
		/* an option where the value should be, as argparse sees it */
		parse(&p, "bench", flags[i], "--percent", "1", "2", "3", "4", "5", "6", NULL);
		ck_assert_msg(p.rc == -EINVAL && strstr(p.err, "needs a value"), "%s: %s", flags[i],
			      p.err);
	}
	parse(&p, "bench", "--percent", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "got 0"));
	parse(&p, "bench", "--percent", "1", "2", "3", "--cpu", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "got 3"));
	parse(&p, "bench", "--percent", "", "", "", "", "", "", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "bench", "--percent=", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "bench", "--verbose", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "bench", "--model", "facebook/", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "bench", "--cpu=yes", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "takes no value"));
	parse(&p, "bench", "--overlap=maybe", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	parse(&p, "bench", "--debug", "fast", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "'fewer_batch', 'breakdown'"));
	/* "" as an argument of its own is an operand, not a flag */
	parse(&p, "", "bench", NULL);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_int_eq(p.argc, 3);
	done(&p);
}
END_TEST

START_TEST(argparse_spellings)
{
	struct parsed p;

	parse(&p, "bench", "--model", "facebook/opt-30b", "--path", "_DUMMY_", "--percent", "20",
	      "80", "0", "100", "0", "100", "--gpu-batch-size", "48", "--num-gpu-batches", "3",
	      "--cpu", "--debug", "fewer_batch", NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_str_eq(set_of(&p, "model.path"), "dummy:opt-30b");
	ck_assert_str_eq(set_of(&p, "policy.percent"), "20 80 0 100 0 100");
	ck_assert_str_eq(set_of(&p, "policy.gpu_batch_size"), "48");
	ck_assert_str_eq(set_of(&p, "policy.num_gpu_batches"), "3");
	ck_assert_str_eq(set_of(&p, "policy.cpu_cache_compute"), "true");
	ck_assert_int_eq(p.ff.debug_mode, FG_DEBUG_FEWER_BATCH);
	ck_assert_int_eq(p.argc, 2);
	ck_assert_str_eq(p.argv[1], "bench");
	ck_assert(fg_flexgen_flags_given(&p.ff, "--debug-mode"));
	ck_assert(!fg_flexgen_flags_given(&p.ff, "--gen-len"));
	done(&p);

	parse(&p, "bench", "--gpu=4", "--percent=0,100 0 100 0 100", "--overlap=False",
	      "--pin-weight", "0", "--sep-layer", "--num-gpu-batches=2", NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_str_eq(set_of(&p, "policy.gpu_batch_size"), "4");
	ck_assert_str_eq(set_of(&p, "policy.percent"), "0 100 0 100 0 100");
	ck_assert_str_eq(set_of(&p, "policy.overlap"), "false");
	ck_assert_str_eq(set_of(&p, "policy.pin_weight"), "false");
	ck_assert_str_eq(set_of(&p, "policy.sep_layer"), "true");
	ck_assert_str_eq(set_of(&p, "policy.num_gpu_batches"), "2");
	done(&p);

	/* --pr is ambiguous (bench's --predict, FlexGen's --prompt-len): named both */
	parse(&p, "bench", "--pr", "16", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "--prompt-len"));
	ck_assert_ptr_nonnull(strstr(p.err, "--predict"));
	parse(&p, "bench", "--c", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_str_eq(p.err, "ambiguous option: --c could match --cut-gen-len, "
				"--cpu-cache-compute, --compress-weight, --compress-cache");
	parse(&p, "bench", "--comp", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	/* bench's own options stay for its parser, their values untouched */
	parse(&p, "bench", "--json", "--percent", "--pre", "--rounds=2", NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_int_eq(p.argc, 6);
	ck_assert_str_eq(p.argv[3], "--percent");
	done(&p);
	/* the last one wins, as in argparse */
	parse(&p, "bench", "--gen-len", "32", "--gen-len", "6", "--model", "facebook/opt-1.3b",
	      "--model", "facebook/opt-125m", "--path", "_DUMMY_", NULL);
	ck_assert_str_eq(set_of(&p, "bench.gen_len"), "6");
	ck_assert_str_eq(set_of(&p, "model.path"), "dummy:opt-125m");
	done(&p);
	/* str2bool's optional value does not eat the command */
	parse(&p, "--overlap", "bench", NULL);
	ck_assert_str_eq(set_of(&p, "policy.overlap"), "true");
	ck_assert_int_eq(p.argc, 2);
	done(&p);
	/* -5 is a value (argparse's negative-number rule); the configuration refuses it */
	parse(&p, "bench", "--gpu-batch-size", "-5", NULL);
	ck_assert_str_eq(set_of(&p, "policy.gpu_batch_size"), "-5");
	done(&p);
	parse(&p, "bench", "--attn-sparsity", "0.1", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "not implemented"));
	parse(&p, "bench", "--attn-sparsity", "1.0", NULL);
	ck_assert_str_eq(set_of(&p, "policy.attn_sparsity"), "1");
	done(&p);
	parse(&p, "bench", "--log-file", "x.log", "--no-log", "--verbose", "0", NULL);
	ck_assert_str_eq(p.ff.log_file, "x.log");
	ck_assert_int_eq(p.ff.no_log, 1);
	ck_assert_int_eq(p.ff.verbose, 0);
	ck_assert_str_eq(p.ff.bench_only, "log-file");
	done(&p);
}
END_TEST

START_TEST(scopes)
{
	struct parsed p;

	/* fgcore's --verbose (no value) and FlexGen's --verbose N share the name */
	parse(&p, "--verbose", "bench", NULL);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_int_eq(p.argc, 3);
	ck_assert_int_eq(p.ff.verbose, -1);
	done(&p);
	parse(&p, "--verbose", "2", "bench", NULL);
	ck_assert_int_eq(p.ff.verbose, 2);
	ck_assert_int_eq(p.argc, 2);
	done(&p);
	/* before the command, fgcore's options count for prefixes */
	parse(&p, "--se", "x", "bench", NULL);
	ck_assert_int_eq(p.rc, -EINVAL);
	ck_assert_ptr_nonnull(strstr(p.err, "--set"));
	parse(&p, "--conf", "--cpu", "-c", "--cpu", "-o", "--percent", "bench", "--cpu", NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_int_eq(p.argc, 8); /* only the last --cpu is FlexGen's */
	ck_assert_str_eq(set_of(&p, "policy.cpu_cache_compute"), "true");
	done(&p);
	/* after another command only full names: generate's --prompt is its own */
	parse(&p, "generate", "--prompt", "hi", "--percent", "0", "100", "100", "0", "100", "0",
	      NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_int_eq(p.argc, 4);
	ck_assert_str_eq(p.argv[2], "--prompt");
	ck_assert_str_eq(set_of(&p, "policy.percent"), "0 100 100 0 100 0");
	done(&p);
	/* a known command's own option of a FlexGen name is its own */
	parse(&p, "optimize", "--gpu-batch-size", "8", "--output", "--cpu", "--percent", "0",
	      "100", "100", "0", "100", "0", "--cpu-cache-compute", NULL);
	ck_assert_msg(p.rc == 0, "%s", p.err);
	ck_assert_int_eq(p.argc, 6);
	ck_assert_str_eq(p.argv[2], "--gpu-batch-size");
	ck_assert_str_eq(p.argv[5], "--cpu");
	ck_assert_ptr_null(set_of(&p, "policy.gpu_batch_size"));
	ck_assert_str_eq(set_of(&p, "policy.percent"), "0 100 100 0 100 0");
	ck_assert_str_eq(set_of(&p, "policy.cpu_cache_compute"), "true");
	done(&p);
	/* "--" ends the flags */
	parse(&p, "bench", "--", "--cpu", NULL);
	ck_assert_int_eq(p.argc, 4);
	ck_assert_ptr_null(set_of(&p, "policy.cpu_cache_compute"));
	done(&p);
}
END_TEST

START_TEST(paths)
{
	struct parsed p;
	char dir[512], file[512];
	struct stat st;
	char err[256];

	const char *tmp = tmp_root;

	tmp_make("flexgen-flags");
	setenv("HOME", tmp, 1);
	parse(&p, "bench", "--model", "facebook/opt-30b", NULL);
	snprintf(dir, sizeof(dir), "%s/opt_weights/opt-30b-np", tmp);
	ck_assert_str_eq(set_of(&p, "model.path"), dir);
	done(&p);
	parse(&p, "bench", "--path", "~/w", "--model", "opt-1.3b", NULL);
	snprintf(dir, sizeof(dir), "%s/w/opt-1.3b-np", tmp);
	ck_assert_str_eq(set_of(&p, "model.path"), dir);
	done(&p);
	/* --offload-dir: created with its parents, as FlexGen's os.makedirs */
	parse(&p, "bench", "--offload-dir", "~/a/b/c", NULL);
	snprintf(dir, sizeof(dir), "%s/a/b/c", tmp);
	ck_assert_str_eq(set_of(&p, "tier.disk.dir"), dir);
	ck_assert_int_eq(fg_flexgen_flags_prepare(&p.ff, err, sizeof(err)), 0);
	ck_assert(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
	ck_assert_int_eq(fg_flexgen_flags_prepare(&p.ff, err, sizeof(err)), 0); /* exists */
	done(&p);
	snprintf(file, sizeof(file), "%s/file", tmp);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	parse(&p, "bench", "--offload-dir", file, NULL);
	ck_assert_int_ne(fg_flexgen_flags_prepare(&p.ff, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "not a folder"));
	done(&p);
	snprintf(dir, sizeof(dir), "%s/file/sub", tmp);
	parse(&p, "bench", "--offload-dir", dir, NULL);
	ck_assert_int_ne(fg_flexgen_flags_prepare(&p.ff, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot create"));
	done(&p);
	/* a 100 KB folder name: a clear error, no overflow */
	char *v = big(100 * 1024, 'd');
	parse(&p, "bench", "--offload-dir", v, NULL);
	ck_assert_int_ne(fg_flexgen_flags_prepare(&p.ff, err, sizeof(err)), 0);
	done(&p);
	free(v);
	tmp_teardown();
}
END_TEST

static Suite *flexgen_flags_suite(void)
{
	Suite *s = suite_create("flexgen_flags");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, percent_200_digits);
	tcase_add_test(tc, hundred_kb_arguments);
	tcase_add_test(tc, tiny_error_buffer);
	tcase_add_test(tc, empty_and_missing_values);
	tcase_add_test(tc, argparse_spellings);
	tcase_add_test(tc, scopes);
	tcase_add_test(tc, paths);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(flexgen_flags_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
