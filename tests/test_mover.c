/* tests/test_mover.c - a disk request that fails while its group is in flight
 * is never lost: fg_xfer_reset and fg_xfer_fini return it with a line naming
 * the group and the request, also when another group's wait reaped it; an
 * error a wait already returned is not returned twice.
 *
 * The groups run on a real engine's cpu_blas backend and posix_file disk tier;
 * FGCORE_POSIX_FILE_FAULT makes chosen reads fail (EIO).  Data read back is
 * compared with the bytes written. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "core/engine/engine.h"
#include "core/exec/mover.h"
#include "core/tier/tier.h"
#include "core/util/error.h"

#define LEN 4096
#define CHUNKS 8

/* The reads of the disk tier, counted from 1, that fail. */
#define FAULTS "read:EIO:2,read:EIO:4,read:EIO:6,read:EIO:7"

static char tmpdir[] = "/var/tmp/fgcore-mover-XXXXXX";
static struct fg_config *cfg;
static struct fg_engine *eng;
static struct fg_mover mv;
static struct fg_region region;
static unsigned char *want;

static void set(const char *kv)
{
	ck_assert_msg(fg_config_set(cfg, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static void setup(void)
{
	char kv[128];
	struct fg_tier *disk;

	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", FAULTS, 1), 0);
	ck_assert_int_eq(fg_config_new(&cfg), 0);
	set("model.path=dummy:opt-125m");
	set("policy.gpu_batch_size=1");
	/* the KV cache on disk: the disk tier opens, and nothing reads it yet */
	set("policy.percent=100 0 0 0 100 0");
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmpdir);
	set(kv);
	ck_assert_msg(fg_engine_open(cfg, &eng) == 0, "%s", fg_last_error_text());
	disk = eng->tier[FG_ROLE_DISK];
	ck_assert_ptr_nonnull(disk);
	ck_assert_str_eq(disk->ph.plugin->name, "posix_file");
	/* host memory: disk reads go straight into the destination */
	ck_assert(eng->tier[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY);
	ck_assert_msg(fg_mover_init(&mv, &eng->be, eng->tier) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_tier_alloc(disk, (uint64_t)LEN * CHUNKS, &region) == 0, "%s",
		      fg_last_error_text());
	want = malloc((size_t)LEN * CHUNKS);
	for (size_t i = 0; i < (size_t)LEN * CHUNKS; i++)
		want[i] = (unsigned char)(i * 131 + i / LEN);
	/* a synchronous write: writes are not faulted */
	ck_assert_msg(fg_tier_write(disk, &region, 0, want, (size_t)LEN * CHUNKS) == 0, "%s",
		      fg_last_error_text());
}

static void teardown(void)
{
	fg_tier_free(eng->tier[FG_ROLE_DISK], &region);
	fg_mover_fini(&mv);
	fg_engine_close(eng);
	fg_config_free(cfg);
	free(want);
	rmdir(tmpdir);
	unsetenv("FGCORE_POSIX_FILE_FAULT");
}

/* Queue a read of chunk c of the region into dst. */
static void load(struct fg_xfer *x, void *dst, int c)
{
	ck_assert_msg(fg_xfer_load(x, dst, FG_ROLE_DISK, &region, (uint64_t)c * LEN, LEN, NULL) == 0,
		      "%s", fg_last_error_text());
}

static void expect_eio(int rc, const char *call, const char *what)
{
	const char *msg = fg_last_error_text();
	printf("%s: %d, \"%s\"\n", call, rc, msg);
	ck_assert_msg(rc == -EIO, "%s returned %d, not -EIO", call, rc);
	ck_assert_msg(strstr(msg, what), "%s: the line does not name the group \"%s\": %s", call, what,
		      msg);
	ck_assert_msg(strstr(msg, "disk tier (posix_file): read of 4096 bytes at offset"),
		      "%s: the line does not name the request: %s", call, msg);
	ck_assert_msg(strstr(msg, "Input/output error"), "%s: the line does not say EIO: %s", call,
		      msg);
}

START_TEST(test_reset_and_fini_return_errors)
{
	struct fg_xfer x, a, b, c, d;
	unsigned char *buf = malloc((size_t)LEN * CHUNKS);

	ck_assert_int_eq(fg_xfer_init(&x, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_init(&a, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_init(&b, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_init(&c, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_init(&d, &mv, 8), 0);

	/* 1. Reset of a group whose second read (read 2) fails in flight. */
	ck_assert_int_eq(fg_xfer_reset(&x, "group x"), 0);
	load(&x, buf, 0);
	load(&x, buf + LEN, 1);
	fg_clear_error();
	expect_eio(fg_xfer_reset(&x, "group x, second use"), "reset with a failed request in flight",
		   "group x:");
	/* The group is clean after it: read 3 succeeds and brings the bytes. */
	memset(buf, 0, LEN);
	load(&x, buf, 2);
	ck_assert_msg(fg_xfer_wait(&x, NULL) == 0, "%s", fg_last_error_text());
	ck_assert(!memcmp(buf, want + 2 * LEN, LEN));

	/* 2. Read 4 (group b) fails and is reaped by group a's wait (read 5):
	 * b's reset must still return it. */
	ck_assert_int_eq(fg_xfer_reset(&b, "group b"), 0);
	ck_assert_int_eq(fg_xfer_reset(&a, "group a"), 0);
	load(&b, buf, 3);
	usleep(200 * 1000); /* b's request is done before a's is queued */
	load(&a, buf + LEN, 4);
	ck_assert_msg(fg_xfer_wait(&a, NULL) == 0, "%s", fg_last_error_text());
	ck_assert(!memcmp(buf + LEN, want + 4 * LEN, LEN));
	ck_assert_msg(b.pending == 0, "the scenario needs a's wait to reap b's request");
	fg_clear_error();
	expect_eio(fg_xfer_reset(&b, "group b, second use"), "reset of a group reaped by another",
		   "group b:");
	/* Returned once: the next reset of b has nothing to say. */
	ck_assert_int_eq(fg_xfer_reset(&b, "group b, third use"), 0);

	/* 3. A wait that returned the error: the reset does not return it again. */
	ck_assert_int_eq(fg_xfer_reset(&d, "group d"), 0);
	load(&d, buf, 5); /* read 6 fails */
	fg_clear_error();
	expect_eio(fg_xfer_wait(&d, NULL), "wait", "group d:");
	ck_assert_int_eq(fg_xfer_wait(&d, NULL), -EIO); /* sticky until the reset */
	ck_assert_int_eq(fg_xfer_reset(&d, "group d, second use"), 0);

	/* 4. Fini of a group with a failed request (read 7) in flight. */
	ck_assert_int_eq(fg_xfer_reset(&c, "group c"), 0);
	load(&c, buf, 6);
	fg_clear_error();
	expect_eio(fg_xfer_fini(&c), "fini with a failed request in flight", "group c:");

	/* Read 8 succeeds: the fault rules were met in the order above. */
	load(&d, buf, 7);
	ck_assert_msg(fg_xfer_wait(&d, NULL) == 0, "%s", fg_last_error_text());
	ck_assert(!memcmp(buf, want + 7 * LEN, LEN));

	ck_assert_int_eq(fg_xfer_fini(&x), 0);
	ck_assert_int_eq(fg_xfer_fini(&a), 0);
	ck_assert_int_eq(fg_xfer_fini(&b), 0);
	ck_assert_int_eq(fg_xfer_fini(&d), 0);
	free(buf);
}
END_TEST

/* 5. An error reaped by another group's wait and never waited for itself:
 * fini returns it. */
START_TEST(test_fini_returns_error_reaped_elsewhere)
{
	struct fg_xfer a, b;
	unsigned char *buf = malloc((size_t)LEN * 2);

	ck_assert_int_eq(fg_xfer_init(&a, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_init(&b, &mv, 8), 0);
	ck_assert_int_eq(fg_xfer_reset(&a, "group a"), 0);
	ck_assert_int_eq(fg_xfer_reset(&b, "group b"), 0);
	load(&a, buf, 0); /* read 1 */
	ck_assert_msg(fg_xfer_wait(&a, NULL) == 0, "%s", fg_last_error_text());
	load(&b, buf + LEN, 1); /* read 2 fails */
	usleep(200 * 1000);
	ck_assert_int_eq(fg_xfer_reset(&a, "group a, second use"), 0);
	load(&a, buf, 2); /* read 3 */
	ck_assert_msg(fg_xfer_wait(&a, NULL) == 0, "%s", fg_last_error_text());
	ck_assert_msg(b.pending == 0, "the scenario needs a's wait to reap b's request");
	/* the disk's use counts every read submitted, the failed one too, and
	 * the disk is idle once all are reaped, whichever group reaped them */
	ck_assert_uint_eq(mv.disk_read_bytes, 3 * (uint64_t)LEN);
	ck_assert_uint_eq(mv.disk_pending, 0);
	ck_assert(mv.disk_busy_s > 0 && mv.disk_busy_s < 60);
	fg_clear_error();
	expect_eio(fg_xfer_fini(&b), "fini of a group reaped by another", "group b:");
	ck_assert_int_eq(fg_xfer_fini(&a), 0);
	free(buf);
}
END_TEST

/* Run level: generate over weights on disk with a failing read stops with
 * the mover's line, for each of the first reads of a run. */
START_TEST(test_generate_fails_clearly)
{
	char kv[128], fault[32];
	struct fg_request req = { 0 };
	struct fg_result res;
	int32_t ids[4] = { 2, 100, 200, 300 };

	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(fault, sizeof(fault), "read:EIO:%d", 1 + 2 * _i);
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", fault, 1), 0);
	ck_assert_int_eq(fg_config_new(&cfg), 0);
	set("model.path=dummy:opt-125m");
	set("policy.gpu_batch_size=1");
	set("policy.percent=0 0 100 0 100 0");
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmpdir);
	set(kv);
	ck_assert_msg(fg_engine_open(cfg, &eng) == 0, "%s", fg_last_error_text());
	req.prompt_ids = ids;
	req.n_prompt_ids = 4;
	req.max_new_tokens = 4;
	fg_clear_error();
	int rc = fg_generate(eng, &req, 1, &res);
	printf("%s: generate: %d, \"%s\"\n", fault, rc, fg_last_error_text());
	ck_assert_msg(rc == -EIO, "%s: generate returned %d", fault, rc);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "weights of unit"));
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "disk tier (posix_file): read of"));
	fg_engine_close(eng);
	fg_config_free(cfg);
	rmdir(tmpdir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mover");
	TCase *tc = tcase_create("errors");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_reset_and_fini_return_errors);
	tcase_add_test(tc, test_fini_returns_error_reaped_elsewhere);
	suite_add_tcase(s, tc);
	tc = tcase_create("run");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_generate_fails_clearly, 0, 3);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
