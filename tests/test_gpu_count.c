/* tests/test_gpu_count.c - fg_host.gpu_count: the core counts the NVIDIA GPUs
 * of the machine without CUDA, as CUDA_VISIBLE_DEVICES limits them:
 *  - fg_gpu_count_scan over fake driver and /dev folders, and CUDA's reading
 *    of CUDA_VISIBLE_DEVICES (the list stops at its first invalid entry);
 *  - fg_dist_gpu_pick, the GPU of a host's local rank ([distributed]
 *    gpu_per_rank);
 *  - fg_core_host() in a fresh process (Check forks each test): "" and "-1"
 *    give 0; unset, the count of this machine as glob(3) finds it (0 here,
 *    without a GPU). */
#include <check.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dist/dist.h"
#include "core/util/error.h"

static char root[] = "/var/tmp/fgcore-gpus-XXXXXX";
static char proc[64], dev[64], empty[64], missing[64];

static void mk(const char *dir, const char *name, int is_dir)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	if (is_dir) {
		ck_assert_int_eq(mkdir(p, 0700), 0);
	} else {
		int fd = open(p, O_CREAT | O_WRONLY, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
	}
}

static void rm(const char *dir, const char *name, int is_dir)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	(is_dir ? rmdir : unlink)(p);
}

static const char *const proc_entries[] = { "0000:01:00.0", "0000:41:00.0", "0000:81:00.0",
					    "0000:c1:00.0" };
static const char *const dev_files[] = { "nvidia0", "nvidia1", "nvidia2", "nvidiactl",
					 "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
					 "nvidia3x", "nvidia", "null" };

static void setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(proc, sizeof(proc), "%s/gpus", root);
	snprintf(dev, sizeof(dev), "%s/dev", root);
	snprintf(empty, sizeof(empty), "%s/empty", root);
	snprintf(missing, sizeof(missing), "%s/missing", root);
	mk(root, "gpus", 1);
	mk(root, "dev", 1);
	mk(root, "empty", 1);
	for (size_t i = 0; i < 4; i++)
		mk(proc, proc_entries[i], 1);
	for (size_t i = 0; i < sizeof(dev_files) / sizeof(dev_files[0]); i++)
		mk(dev, dev_files[i], 0);
	mk(dev, "nvidia-caps", 1);
}

static void teardown(void)
{
	for (size_t i = 0; i < 4; i++)
		rm(proc, proc_entries[i], 1);
	for (size_t i = 0; i < sizeof(dev_files) / sizeof(dev_files[0]); i++)
		rm(dev, dev_files[i], 0);
	rm(dev, "nvidia-caps", 1);
	rm(root, "gpus", 1);
	rm(root, "dev", 1);
	rm(root, "empty", 1);
	rmdir(root);
}

START_TEST(test_sources)
{
	ck_assert_int_eq(fg_gpu_count_scan(proc, dev, NULL), 4);
	/* no driver folder: the nvidiaN nodes (not nvidiactl, nvidia-uvm, ...) */
	ck_assert_int_eq(fg_gpu_count_scan(missing, dev, NULL), 3);
	ck_assert_int_eq(fg_gpu_count_scan(NULL, dev, NULL), 3);
	/* a driver that drives no GPU */
	ck_assert_int_eq(fg_gpu_count_scan(empty, dev, NULL), 0);
	ck_assert_int_eq(fg_gpu_count_scan(missing, missing, NULL), 0);
	ck_assert_int_eq(fg_gpu_count_scan(missing, empty, NULL), 0);
	ck_assert_int_eq(fg_gpu_count_scan(NULL, NULL, NULL), 0);
}
END_TEST

/* CUDA_VISIBLE_DEVICES over 4 GPUs. */
START_TEST(test_visible)
{
	static const struct {
		const char *v;
		int n;
	} cases[] = {
		{ "", 0 },	      { "-1", 0 },	       { "1", 1 },
		{ "0,1", 2 },	      { "3,2,1,0", 4 },	       { "0,7,1", 1 },
		{ "4", 0 },	      { "0,-1,1", 1 },	       { "0,0", 1 },
		{ " 1 , 2 ", 2 },     { "0,,1", 1 },	       { "0,1,", 2 },
		{ ",0", 0 },	      { "GPU-1cf82e4e-8fad", 1 }, { "MIG-4b2d,0", 2 },
		{ "0,1,2,3,GPU-x", 4 }, { "abc", 0 },	       { "1x", 0 },
		{ "99999999999999999999", 0 },		       { "2,nvidia", 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = fg_gpu_count_scan(proc, dev, cases[i].v);
		ck_assert_msg(n == cases[i].n, "CUDA_VISIBLE_DEVICES=\"%s\": %d GPUs, not %d",
			      cases[i].v, n, cases[i].n);
	}
	/* a list never makes GPUs of a machine without any */
	ck_assert_int_eq(fg_gpu_count_scan(missing, missing, "0,1"), 0);
}
END_TEST

/* This machine's GPUs by another road: glob(3) over the same sources. */
static int machine_gpus(void)
{
	glob_t g;
	int n = 0;
	struct stat st;

	if (stat("/proc/driver/nvidia/gpus", &st) == 0) {
		if (glob("/proc/driver/nvidia/gpus/*", 0, NULL, &g) == 0)
			n = (int)g.gl_pathc;
		else
			return 0;
	} else {
		if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) != 0)
			return 0;
		for (size_t i = 0; i < g.gl_pathc; i++)
			n += strspn(g.gl_pathv[i] + 11, "0123456789") == strlen(g.gl_pathv[i] + 11);
	}
	globfree(&g);
	return n;
}

/* [distributed] gpu_per_rank: a host's local rank takes the (L mod count)-th
 * visible GPU, named as CUDA_VISIBLE_DEVICES names it. */
START_TEST(test_gpu_per_rank)
{
	char out[64];

	ck_assert_int_eq(fg_dist_gpu_pick(NULL, 4, 0, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "0");
	ck_assert_int_eq(fg_dist_gpu_pick(NULL, 4, 6, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "2");
	ck_assert_int_eq(fg_dist_gpu_pick("3,5", 2, 1, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "5");
	ck_assert_int_eq(fg_dist_gpu_pick("3, 5 ,7", 3, 4, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "5");
	ck_assert_int_eq(fg_dist_gpu_pick("GPU-a1b2,GPU-c3d4", 2, 3, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "GPU-c3d4");
	/* one GPU, none, or a count beyond the list: nothing to pick */
	ck_assert_int_eq(fg_dist_gpu_pick(NULL, 1, 1, out, sizeof(out)), -1);
	ck_assert_int_eq(fg_dist_gpu_pick(NULL, 0, 1, out, sizeof(out)), -1);
	ck_assert_int_eq(fg_dist_gpu_pick("3", 2, 1, out, sizeof(out)), -1);
}
END_TEST

START_TEST(test_host_unset)
{
	unsetenv("CUDA_VISIBLE_DEVICES");
	int want = machine_gpus();
	printf("this machine: %d GPUs; fg_host.gpu_count %d\n", want, fg_core_host()->gpu_count);
	ck_assert_int_eq(fg_core_host()->gpu_count, want);
}
END_TEST

START_TEST(test_host_hidden)
{
	static const char *const v[] = { "", "-1" };
	ck_assert_int_eq(setenv("CUDA_VISIBLE_DEVICES", v[_i], 1), 0);
	ck_assert_int_eq(fg_core_host()->gpu_count, 0);
	/* read once: a later change is not seen */
	ck_assert_int_eq(setenv("CUDA_VISIBLE_DEVICES", "0", 1), 0);
	ck_assert_int_eq(fg_core_host()->gpu_count, 0);
	/* the tests' override still wins */
	fg_core_host_set_gpu_count(2);
	ck_assert_int_eq(fg_core_host()->gpu_count, 2);
}
END_TEST

START_TEST(test_host_one)
{
	ck_assert_int_eq(setenv("CUDA_VISIBLE_DEVICES", "0", 1), 0);
	int want = machine_gpus() > 0;
	ck_assert_int_eq(fg_core_host()->gpu_count, want);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gpu_count");
	TCase *tc = tcase_create("scan");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_sources);
	tcase_add_test(tc, test_visible);
	tcase_add_test(tc, test_gpu_per_rank);
	suite_add_tcase(s, tc);
	tc = tcase_create("host");
	tcase_add_test(tc, test_host_unset);
	tcase_add_loop_test(tc, test_host_hidden, 0, 2);
	tcase_add_test(tc, test_host_one);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	/* each test needs a process that has not counted yet */
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
