/* tests/test_nvme.c - the NVMe file tiers (io_uring_nvme, libaio_nvme) beyond
 * the storage conformance suite: transfers larger than request_size and than
 * queue_depth x request_size, aligned or not, through read/write and
 * submit/reap; 256 requests in flight; unaligned writes that share blocks,
 * from requests in flight together and from several threads; a region past
 * 4 GiB; fault injection under their documented variables
 * (FGCORE_IO_URING_FAULT, FGCORE_LIBAIO_FAULT) through both paths; the `size`
 * reservation; options.  And the file-tier queue core itself (file_queue.c,
 * compiled in) under a scripted engine: transfers that fail with EAGAIN/EINTR
 * are retried and short ones resumed, with and without O_DIRECT.
 *
 * A plugin that was not built is skipped; O_DIRECT cases are skipped, saying
 * why, when neither $TMPDIR nor /var/tmp accepts O_DIRECT.  Every case runs in
 * a forked child under an alarm() watchdog, so a hang fails instead of
 * blocking.  FGCORE_TEST_SEED changes the PRNG seed (printed on failure). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/plugin/loader.h"
#include "core/tier/tier.h"
#include "core/util/error.h"
#include "plugins/storage/file_queue.h"
#include "tests/test_rng.h"

#define KiB ((uint64_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)
#define TMPFS_MAGIC_NUMBER 0x01021994
#define WATCHDOG_S 120

/* ---- configurations ----------------------------------------------------- */

struct conf {
	char label[64];
	const char *name;        /* plugin */
	const char *fault_env;
	const char *opts[6];     /* extra key, value pairs, NULL-terminated */
};

static struct conf confs[8];
static int nconfs;
static char direct_dir[PATH_MAX]; /* accepts O_DIRECT, or "" */
static char direct_why[512];
static char plain_dir[PATH_MAX];  /* any directory, for o_direct = false */
static uint64_t seed = 4242;


/* ---- helpers --------------------------------------------------------------- */

static const struct conf *conf_start(int i)
{
	rng_state = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ 0x5851f42d4c957f2dull;
	alarm(WATCHDOG_S);
	return &confs[i];
}

static bool need_direct(const struct conf *c, const char *what)
{
	if (direct_dir[0])
		return true;
	fprintf(stderr, "%s: %s skipped: %s\n", c->label, what, direct_why);
	return false;
}

/* Open c with dir and extra options (key, value, ..., NULL); returns the
 * plugin's error (0 on success). */
static int try_open(struct fg_tier *t, const struct conf *c, const char *dir,
		    const char *const *extra)
{
	struct fg_plugin_handle h;
	void *opts;

	ck_assert_msg(fg_plugin_load(c->name, FG_PLUGIN_STORAGE, &h) == 0, "%s: %s", c->label,
		      fg_last_error());
	opts = fg_plugin_opts_new(h.plugin);
	ck_assert_ptr_nonnull(opts);
	if (dir)
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "dir", dir, "test"), 0);
	for (const char *const *o = c->opts; o[0]; o += 2)
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, o[0], o[1], "test"), 0);
	for (; extra && extra[0]; extra += 2)
		ck_assert_msg(fg_plugin_opts_set(h.plugin, opts, extra[0], extra[1], "test") == 0,
			      "%s: %s=%s: %s", c->label, extra[0], extra[1], fg_last_error());
	fg_clear_error();
	return fg_tier_open(t, "disk", &h, opts, 0);
}

static void open_ok(struct fg_tier *t, const struct conf *c, const char *const *extra)
{
	int err = try_open(t, c, direct_dir, extra);

	ck_assert_msg(err == 0, "%s: open failed (%d): %s", c->label, err, fg_last_error());
	ck_assert_uint_eq(t->info.alignment, 4096);
	ck_assert_uint_gt(t->capacity, 0);
}

/* Submit n requests and reap them all; each must come back exactly once. */
static void run_batch(struct fg_tier *t, const struct conf *c, struct fg_io *io, unsigned n)
{
	struct fg_io *ios[512], *done[512];
	int seen[512] = { 0 };
	unsigned got = 0;

	ck_assert_uint_le(n, 512);
	for (unsigned i = 0; i < n; i++) {
		io[i].user = (void *)(uintptr_t)i;
		io[i].result = 12345;
		ios[i] = &io[i];
	}
	ck_assert_msg(fg_tier_submit(t, ios, n) == 0, "%s: submit: %s", c->label,
		      fg_last_error());
	while (got < n) {
		int k = fg_tier_reap(t, done, 1 + (unsigned)rnd_below(n - got), n);

		ck_assert_msg(k > 0, "%s: reap returned %d with %u of %u reaped: %s", c->label, k,
			      got, n, fg_last_error());
		for (int j = 0; j < k; j++) {
			uintptr_t i = (uintptr_t)done[j]->user;

			ck_assert_uint_lt(i, n);
			ck_assert_ptr_eq(done[j], &io[i]);
			ck_assert_int_ne(done[j]->result, 12345);
			seen[i]++;
		}
		got += (unsigned)k;
	}
	for (unsigned i = 0; i < n; i++)
		ck_assert_msg(seen[i] == 1, "%s: request %u completed %d times", c->label, i,
			      seen[i]);
	/* Nothing is left, and asking for more must not block. */
	ck_assert_int_eq(fg_tier_reap(t, done, 4, 8), 0);
}

/* ---- round trips of any shape ---------------------------------------------- */

/* Random requests against a shadow copy, singly (read/write) and in batches
 * of disjoint requests (submit/reap).  Small request_size and queue_depth so
 * that transfers beyond request_size and queue_depth x request_size are cheap. */
static void random_round_trips(const struct conf *c, const char *const *extra, uint64_t size,
			       size_t maxlen, int rounds)
{
	struct fg_tier t;
	struct fg_region r;
	unsigned char *shadow, *buf, *rd;
	struct fg_io io[16];

	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, size, &r), 0);
	shadow = malloc(size);
	ck_assert_int_eq(posix_memalign((void **)&buf, 4096, maxlen + 8192), 0);
	ck_assert_int_eq(posix_memalign((void **)&rd, 4096, maxlen + 8192), 0);
	rnd_fill(shadow, size);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, shadow, size), 0);

	for (int op = 0; op < rounds; op++) {
		uint64_t off = rnd_below(size);
		size_t len = (size_t)rnd_below((size - off < maxlen ? size - off : maxlen) + 1);
		size_t shift = rnd_below(3) ? (size_t)rnd_below(4096) : 0;
		int kind = (int)rnd_below(4);

		if (rnd_below(3) == 0) { /* the aligned fast path */
			off &= ~(uint64_t)4095;
			len &= ~(size_t)4095;
			shift = 0;
		}
		if (kind == 0) {
			rnd_fill(buf + shift, len);
			ck_assert_msg(fg_tier_write(&t, &r, off, buf + shift, len) == 0,
				      "%s: write %d (%" PRIu64 "+%zu): %s", c->label, op, off, len,
				      fg_last_error());
			memcpy(shadow + off, buf + shift, len);
		} else if (kind == 1) {
			memset(rd, 0xa5, len + shift);
			ck_assert_msg(fg_tier_read(&t, &r, off, rd + shift, len) == 0,
				      "%s: read %d: %s", c->label, op, fg_last_error());
			ck_assert_msg(memcmp(rd + shift, shadow + off, len) == 0,
				      "%s (seed %" PRIu64 "): read %d of %zu bytes at %" PRIu64
				      " (buffer +%zu) differs", c->label, seed, op, len, off,
				      shift);
		} else {
			/* A batch: [off, off + len) cut into disjoint requests, each a read
			 * or a write, all in flight together; neighbours share blocks. */
			unsigned n = 1 + (unsigned)rnd_below(16);
			size_t cut[17];

			cut[0] = 0;
			cut[n] = len;
			for (unsigned i = 1; i < n; i++)
				cut[i] = (size_t)rnd_below(len + 1);
			for (unsigned i = 1; i < n; i++) /* sort: few elements */
				for (unsigned j = i; j > 0 && cut[j - 1] > cut[j]; j--) {
					size_t x = cut[j];

					cut[j] = cut[j - 1];
					cut[j - 1] = x;
				}
			rnd_fill(buf + shift, len);
			memset(rd, 0xa5, len + shift);
			for (unsigned i = 0; i < n; i++) {
				bool wr = rnd() & 1;

				io[i] = (struct fg_io){ .op = wr ? FG_IO_WRITE : FG_IO_READ,
							.region = &r, .offset = off + cut[i],
							.buf = (wr ? buf : rd) + shift + cut[i],
							.len = cut[i + 1] - cut[i] };
			}
			run_batch(&t, c, io, n);
			for (unsigned i = 0; i < n; i++) {
				ck_assert_msg(io[i].result == 0, "%s: batch %d request %u: %d",
					      c->label, op, i, io[i].result);
				if (io[i].op == FG_IO_WRITE) {
					memcpy(shadow + off + cut[i], io[i].buf, io[i].len);
				} else {
					ck_assert_msg(memcmp(io[i].buf, shadow + off + cut[i],
							     io[i].len) == 0,
						      "%s (seed %" PRIu64 "): batch %d: read %u "
						      "of %zu bytes at %" PRIu64 " differs",
						      c->label, seed, op, i, io[i].len,
						      io[i].offset);
				}
			}
		}
	}
	/* The whole region, once more, unaligned. */
	{
		unsigned char *all = malloc(size + 1);

		ck_assert_int_eq(fg_tier_read(&t, &r, 0, all + 1, size), 0);
		ck_assert_msg(memcmp(all + 1, shadow, size) == 0, "%s: final contents differ",
			      c->label);
		free(all);
	}
	fg_tier_free(&t, &r);
	ck_assert_uint_eq(t.used, 0);
	fg_tier_close(&t);
	free(shadow);
	free(buf);
	free(rd);
}

START_TEST(test_round_trips_small_queue)
{
	const struct conf *c = conf_start(_i);
	/* 4 x 64 KiB in flight; transfers up to 1 MiB = 4 x queue_depth x request_size */
	static const char *const extra[] = { "queue_depth", "4", "request_size", "64K", NULL };

	if (!need_direct(c, "round trips"))
		return;
	random_round_trips(c, extra, 3 * MiB + 5, (size_t)MiB, 400);
}
END_TEST

START_TEST(test_round_trips_queue_of_one)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "queue_depth", "1", "request_size", "4K", NULL };

	if (!need_direct(c, "round trips"))
		return;
	random_round_trips(c, extra, 300 * KiB + 7, 64 * KiB, 150);
}
END_TEST

/* Default request_size (1 MiB): transfers of several MiB, aligned (straight
 * into the caller's memory) and not (through the bounce buffers). */
START_TEST(test_large_transfers)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "queue_depth", "8", NULL };
	const size_t size = 20 * MiB;
	struct fg_tier t;
	struct fg_region r;
	unsigned char *src, *dst;
	struct fg_io io[3];

	if (!need_direct(c, "large transfers"))
		return;
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, size, &r), 0);
	ck_assert_int_eq(posix_memalign((void **)&src, 4096, size + 4096), 0);
	ck_assert_int_eq(posix_memalign((void **)&dst, 4096, size + 4096), 0);
	rnd_fill(src, size + 4096);

	/* 12 MiB aligned: more than queue_depth x request_size = 8 MiB. */
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, src, 12 * MiB), 0);
	memset(dst, 0, size);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, dst, 12 * MiB), 0);
	ck_assert_int_eq(memcmp(src, dst, 12 * MiB), 0);

	/* Unaligned everything, 9 MiB + 4097 bytes, both ways. */
	ck_assert_int_eq(fg_tier_write(&t, &r, 3 * MiB + 11, src + 7, 9 * MiB + 4097), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 3 * MiB + 11, dst + 3, 9 * MiB + 4097), 0);
	ck_assert_int_eq(memcmp(src + 7, dst + 3, 9 * MiB + 4097), 0);
	/* Around it, the earlier data survived the read-modify-write of the edges. */
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, dst, 3 * MiB + 11), 0);
	ck_assert_int_eq(memcmp(src, dst, 3 * MiB + 11), 0);

	/* Three large requests at once, one aligned, one with an unaligned buffer,
	 * one with an unaligned offset. */
	io[0] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 0, .buf = src,
				.len = 6 * MiB };
	io[1] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 6 * MiB,
				.buf = src + 1, .len = 6 * MiB };
	io[2] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 12 * MiB + 5,
				.buf = src + 4096, .len = 8 * MiB - 5 };
	run_batch(&t, c, io, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(io[i].result, 0);
		io[i].op = FG_IO_READ;
		io[i].buf = dst + ((unsigned char *)io[i].buf - src);
	}
	memset(dst, 0, size + 4096);
	run_batch(&t, c, io, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(io[i].result, 0);
		ck_assert_int_eq(memcmp(io[i].buf, src + ((unsigned char *)io[i].buf - dst),
					io[i].len), 0);
	}
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	free(src);
	free(dst);
}
END_TEST

/* ---- many requests in flight ---------------------------------------------- */

START_TEST(test_256_in_flight)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "queue_depth", "16", "request_size", "16K", NULL };
	enum { N = 256 };
	static struct fg_io io[N];
	struct fg_tier t;
	struct fg_region r;
	uint64_t off[N + 1];
	unsigned char *src, *dst;

	if (!need_direct(c, "256 requests in flight"))
		return;
	open_ok(&t, c, extra);
	/* Adjacent requests of mixed sizes (some beyond request_size) and alignments. */
	off[0] = 0;
	for (int i = 0; i < N; i++)
		off[i + 1] = off[i] + (i % 5 == 0 ? 16384 * (1 + rnd_below(4))
				       : 1 + rnd_below(i % 2 ? 6000 : 40000));
	ck_assert_int_eq(fg_tier_alloc(&t, off[N], &r), 0);
	src = malloc(off[N]);
	dst = malloc(off[N]);
	rnd_fill(src, off[N]);
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < N; i++)
			io[i] = (struct fg_io){ .op = pass ? FG_IO_READ : FG_IO_WRITE,
						.region = &r, .offset = off[i],
						.buf = (pass ? dst : src) + off[i],
						.len = (size_t)(off[i + 1] - off[i]) };
		run_batch(&t, c, io, N);
		for (int i = 0; i < N; i++)
			ck_assert_msg(io[i].result == 0, "%s: request %d: %d", c->label, i,
				      io[i].result);
	}
	ck_assert_int_eq(memcmp(src, dst, off[N]), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	free(src);
	free(dst);
}
END_TEST

/* ---- several threads, synchronous calls, shared blocks --------------------- */

struct worker {
	struct fg_tier *t;
	const struct fg_region *r;
	const unsigned char *src;
	uint64_t lo, hi;   /* this thread's bytes; neighbours share their edge blocks */
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned char *back = malloc(w->hi - w->lo + 1);

	for (int round = 0; round < 20; round++) {
		/* Write the range in odd-sized steps, read it back whole. */
		for (uint64_t at = w->lo; at < w->hi;) {
			uint64_t n = 1 + (at * 2654435761u + (uint64_t)round) % 5000;

			if (n > w->hi - at)
				n = w->hi - at;
			if (fg_tier_write(w->t, w->r, at, w->src + at, n) != 0)
				w->failures++;
			at += n;
		}
		if (fg_tier_read(w->t, w->r, w->lo, back + 1, w->hi - w->lo) != 0 ||
		    memcmp(back + 1, w->src + w->lo, w->hi - w->lo) != 0)
			w->failures++;
	}
	free(back);
	return NULL;
}

START_TEST(test_threads)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "queue_depth", "8", "request_size", "8K", NULL };
	enum { W = 4 };
	struct fg_tier t;
	struct fg_region r;
	struct worker w[W];
	pthread_t th[W];
	const uint64_t size = 4 * 30000;
	unsigned char *src, *all;

	if (!need_direct(c, "threads"))
		return;
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, size, &r), 0);
	src = malloc(size);
	all = malloc(size);
	rnd_fill(src, size);
	for (int i = 0; i < W; i++) {
		w[i] = (struct worker){ .t = &t, .r = &r, .src = src, .lo = size / W * i,
					.hi = size / W * (i + 1) };
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < W; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(w[i].failures == 0, "%s: thread %d: %d failures", c->label, i,
			      w[i].failures);
	}
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, all, size), 0);
	ck_assert_int_eq(memcmp(all, src, size), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	free(src);
	free(all);
}
END_TEST

/* ---- a sparse region past 4 GiB --------------------------------------------- */

static bool big_dir_ok(const char *dir, char *why, size_t n)
{
	struct statfs sf;
	struct statvfs sv;

	if (statfs(dir, &sf) == 0 && (unsigned long)sf.f_type == TMPFS_MAGIC_NUMBER) {
		snprintf(why, n, "%s is tmpfs", dir);
		return false;
	}
	if (statvfs(dir, &sv) != 0 || (uint64_t)sv.f_bavail * sv.f_frsize < 7 * GiB) {
		snprintf(why, n, "%s has less than 7 GiB free", dir);
		return false;
	}
	return true;
}

START_TEST(test_past_4gib)
{
	const struct conf *c = conf_start(_i);
	const uint64_t size = 5 * GiB;
	struct fg_tier t;
	struct fg_region small, big;
	unsigned char *w, *rd;
	struct fg_io io[2];
	char why[PATH_MAX + 64];
	const size_t len = 2 * MiB + 3 * 4096 + 123;

	if (!need_direct(c, "region past 4 GiB"))
		return;
	if (!big_dir_ok(direct_dir, why, sizeof(why))) {
		fprintf(stderr, "%s: region past 4 GiB skipped: %s\n", c->label, why);
		return;
	}
	open_ok(&t, c, NULL);
	ck_assert_int_eq(fg_tier_alloc(&t, 12345, &small), 0);
	ck_assert_msg(fg_tier_alloc(&t, size, &big) == 0, "%s: %s", c->label, fg_last_error());
	ck_assert_uint_gt(big.handle, 0);
	ck_assert_int_eq(posix_memalign((void **)&w, 4096, len + 4096), 0);
	ck_assert_int_eq(posix_memalign((void **)&rd, 4096, len + 4096), 0);
	rnd_fill(w, len + 4096);

	/* Never written: reads as zeros, across the 4 GiB line. */
	memset(rd, 0xaa, 8192);
	ck_assert_int_eq(fg_tier_read(&t, &big, 4 * GiB - 4099, rd + 1, 8192), 0);
	for (int i = 0; i < 8192; i++)
		ck_assert_msg(rd[1 + i] == 0, "%s: byte %d of a fresh region is %d", c->label, i,
			      rd[1 + i]);
	/* Unaligned across 4 GiB, then aligned at 4.5 GiB, both paths. */
	ck_assert_int_eq(fg_tier_write(&t, &big, 4 * GiB - MiB - 7, w + 1, len), 0);
	ck_assert_int_eq(fg_tier_read(&t, &big, 4 * GiB - MiB - 7, rd + 1, len), 0);
	ck_assert_int_eq(memcmp(w + 1, rd + 1, len), 0);
	io[0] = (struct fg_io){ .op = FG_IO_WRITE, .region = &big, .offset = 4 * GiB + GiB / 2,
				.buf = w, .len = 2 * MiB };
	io[1] = (struct fg_io){ .op = FG_IO_WRITE, .region = &big, .offset = size - 4096 - 3,
				.buf = w + 5, .len = 4096 + 3 };
	run_batch(&t, c, io, 2);
	ck_assert_int_eq(io[0].result, 0);
	ck_assert_int_eq(io[1].result, 0);
	ck_assert_int_eq(fg_tier_read(&t, &big, 4 * GiB + GiB / 2, rd, 2 * MiB), 0);
	ck_assert_int_eq(memcmp(w, rd, 2 * MiB), 0);
	ck_assert_int_eq(fg_tier_read(&t, &big, size - 4096 - 3, rd + 9, 4096 + 3), 0);
	ck_assert_int_eq(memcmp(w + 5, rd + 9, 4096 + 3), 0);
	ck_assert_int_eq(fg_tier_read(&t, &big, size - 1, rd, 2), -EINVAL);
	fg_tier_free(&t, &big);
	fg_tier_free(&t, &small);
	fg_tier_close(&t);
	free(w);
	free(rd);
}
END_TEST

/* ---- fault injection ------------------------------------------------------- */

static void check_message(const struct conf *c, const char *msg, const char *err_text)
{
	ck_assert_msg(strstr(msg, c->name) && strstr(msg, "tier disk") && strstr(msg, err_text) &&
		      strstr(msg, c->fault_env),
		      "%s: message \"%s\" should name the tier, the plugin, \"%s\" and %s",
		      c->label, msg, err_text, c->fault_env);
}

START_TEST(test_fault_read_async)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "request_size", "4K", "queue_depth", "4", NULL };
	struct fg_tier t;
	struct fg_region r;
	unsigned char *data, *back;
	struct fg_io io[4], *p, *done[4];
	int n, failed = 0;

	if (!need_direct(c, "fault injection"))
		return;
	data = malloc(64 * KiB);
	back = malloc(64 * KiB);
	rnd_fill(data, 64 * KiB);
	/* Reads: #1 the sync read below, #2 the first async one. */
	ck_assert_int_eq(setenv(c->fault_env, "read:EIO:2", 1), 0);
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, 64 * KiB, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, data, 64 * KiB), 0); /* writes do not count */
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, back, 100), 0);

	/* A 40000-byte read (10 pieces) fails once, whole, and a neighbour in the
	 * same batch is unaffected. */
	io[0] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 1, .buf = back,
				.len = 40000 };
	io[1] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 50000,
				.buf = back + 50000, .len = 5000 };
	run_batch(&t, c, io, 2);
	ck_assert_int_eq(io[0].result, -EIO);
	ck_assert_int_eq(io[1].result, 0);
	ck_assert_int_eq(memcmp(back + 50000, data + 50000, 5000), 0);

	/* Straight from the tier's reap hook, the message names the variable. */
	ck_assert_int_eq(setenv(c->fault_env, "read:EIO:1", 1), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, 64 * KiB, &r), 0);
	io[0] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 10, .buf = back,
				.len = 100 };
	p = &io[0];
	ck_assert_int_eq(t.ops->submit(t.ctx, &p, 1), 0);
	fg_clear_error();
	n = t.ops->reap(t.ctx, done, 1, 4);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(done[0]->result, -EIO);
	check_message(c, fg_last_error(), "Input/output error");
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "offset 10"));
	/* The tier works on. */
	for (int i = 0; i < 4; i++) {
		io[i] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = (uint64_t)i * 999,
					.buf = back + i * 999, .len = 999 };
	}
	run_batch(&t, c, io, 4);
	for (int i = 0; i < 4; i++)
		failed += io[i].result != 0;
	ck_assert_int_eq(failed, 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv(c->fault_env);
	free(data);
	free(back);
}
END_TEST

START_TEST(test_fault_read_sync)
{
	const struct conf *c = conf_start(_i);
	struct fg_tier t;
	struct fg_region r;
	char buf[200];

	if (!need_direct(c, "fault injection"))
		return;
	ck_assert_int_eq(setenv(c->fault_env, "read:EIO:1", 1), 0);
	open_ok(&t, c, NULL);
	ck_assert_int_eq(fg_tier_alloc(&t, 4096, &r), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_read(&t, &r, 10, buf, 100), -EIO);
	check_message(c, fg_last_error(), "Input/output error");
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "offset 10"));
	ck_assert_int_eq(fg_tier_read(&t, &r, 10, buf, 100), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv(c->fault_env);
}
END_TEST

START_TEST(test_fault_write_enospc)
{
	const struct conf *c = conf_start(_i);
	struct fg_tier t;
	struct fg_region r;
	struct fg_io io[8];
	unsigned char buf[8][700], back[8 * 700];
	int failed = 0;

	if (!need_direct(c, "fault injection"))
		return;
	memset(buf, 'x', sizeof(buf));
	/* 8 writes in flight (the one at 3500 crosses a block boundary):
	 * exactly one fails; then a synchronous one fails too. */
	ck_assert_int_eq(setenv(c->fault_env, "write:ENOSPC:3,write:ENOSPC:10", 1), 0);
	open_ok(&t, c, NULL);
	ck_assert_int_eq(fg_tier_alloc(&t, sizeof(back), &r), 0);
	for (int i = 0; i < 8; i++)
		io[i] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r,
					.offset = (uint64_t)i * 700, .buf = buf[i], .len = 700 };
	run_batch(&t, c, io, 8);
	for (int i = 0; i < 8; i++) {
		if (io[i].result) {
			ck_assert_int_eq(io[i].result, -ENOSPC);
			failed++;
		}
	}
	ck_assert_int_eq(failed, 1);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, buf[0], 700), 0); /* 9th */
	fg_clear_error();
	ck_assert_int_eq(fg_tier_write(&t, &r, 3, buf[1], 10), -ENOSPC); /* 10th */
	check_message(c, fg_last_error(), "No space left on device");
	ck_assert_int_eq(fg_tier_write(&t, &r, 3, buf[1], 10), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, back, sizeof(back)), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv(c->fault_env);
}
END_TEST

/* ---- the queue core under a scripted engine ----------------------------------- */

/* Transfers are done with pread/pwrite inside wait, in the order staged; the
 * script makes the Nth transfer of an op (counted from 1, retries included)
 * fail with EAGAIN or EINTR without touching the file, or move only half of
 * its bytes (whole blocks with O_DIRECT). */
#define SE_SHORT 1

struct se_rule {
	int op;
	unsigned nth;
	long what; /* -EAGAIN, -EINTR, SE_SHORT */
};

static struct {
	struct file_piece *staged[4096];
	unsigned nstaged;
	unsigned count[2];
	unsigned hits;         /* rules that fired */
	const struct se_rule *rules;
	int fd;
} se;

static int se_setup(struct file_queue *q, const void *opts, void **priv)
{
	se.fd = file_queue_fd(q);
	se.nstaged = 0;
	se.count[0] = se.count[1] = 0;
	se.hits = 0;
	*priv = &se;
	return 0;
}

static void se_teardown(struct file_queue *q, void *priv)
{
}

static void se_prep(struct file_queue *q, void *priv, struct file_piece *p)
{
	ck_assert_uint_lt(se.nstaged, 4096);
	se.staged[se.nstaged++] = p;
}

static int se_wait(struct file_queue *q, void *priv, unsigned min)
{
	struct file_piece *batch[4096];
	unsigned n = se.nstaged;

	/* Completing may stage retries: those go in the next wait. */
	memcpy(batch, se.staged, n * sizeof(batch[0]));
	se.nstaged = 0;
	for (unsigned i = 0; i < n; i++) {
		struct file_piece *p = batch[i];
		unsigned k = ++se.count[p->op];
		size_t len = p->xfer;
		long what = 0;
		ssize_t res;

		for (const struct se_rule *r = se.rules; r && r->nth; r++)
			if (r->op == p->op && r->nth == k)
				what = r->what;
		se.hits += what != 0;
		if (what < 0) {
			file_queue_complete(q, p, what);
			continue;
		}
		if (what == SE_SHORT) {
			len /= 2;
			if (file_queue_o_direct(q))
				len &= ~(size_t)4095;
			if (!len)
				len = p->xfer;
		}
		res = p->op == FG_IO_READ ? pread(se.fd, p->mem + p->done, len,
						  (off_t)(p->foff + p->done))
					  : pwrite(se.fd, p->mem + p->done, len,
						   (off_t)(p->foff + p->done));
		file_queue_complete(q, p, res < 0 ? -(long)errno : (long)res);
	}
	return (int)n;
}

static const struct file_queue_opts se_defaults = FILE_QUEUE_DEFAULTS;

const struct file_engine file_queue_engine = {
	.name		= "scripted",
	.defaults	= &se_defaults,
	.setup		= se_setup,
	.teardown	= se_teardown,
	.prep		= se_prep,
	.wait		= se_wait,
};

static const struct fg_plugin se_plugin = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "scripted",
	.ops		= &file_queue_ops,
};

static void se_open(struct fg_tier *t, const char *dir, bool o_direct)
{
	struct fg_plugin_handle h = { .plugin = &se_plugin };
	struct file_queue_opts *o = malloc(sizeof(*o));

	*o = se_defaults;
	snprintf(o->dir, sizeof(o->dir), "%s", dir);
	o->o_direct = o_direct;
	o->queue_depth = 8;
	o->request_size = 16 * KiB;
	ck_assert_msg(fg_tier_open(t, "disk", &h, o, 0) == 0, "%s", fg_last_error());
}

/* Retried and resumed transfers: the data comes out right and nobody sees an
 * error, for aligned requests and for unaligned ones (bounced, and
 * read-modify-write with O_DIRECT). */
static void retry_and_resume(const char *dir, bool o_direct)
{
	static const struct se_rule rules[] = {
		{ FG_IO_WRITE, 1, -EAGAIN }, { FG_IO_WRITE, 2, SE_SHORT },
		{ FG_IO_WRITE, 3, -EINTR }, { FG_IO_WRITE, 5, SE_SHORT },
		{ FG_IO_WRITE, 9, -EAGAIN }, { FG_IO_WRITE, 14, SE_SHORT },
		{ FG_IO_WRITE, 20, SE_SHORT }, { FG_IO_WRITE, 21, -EINTR },
		{ FG_IO_READ, 1, SE_SHORT }, { FG_IO_READ, 2, -EAGAIN },
		{ FG_IO_READ, 3, -EINTR }, { FG_IO_READ, 4, SE_SHORT },
		{ FG_IO_READ, 7, SE_SHORT }, { FG_IO_READ, 11, -EAGAIN },
		{ FG_IO_READ, 16, SE_SHORT }, { FG_IO_READ, 19, -EINTR },
		{ 0, 0, 0 },
	};
	struct fg_tier t;
	struct fg_region r;
	unsigned char *src, *dst;
	struct fg_io io[3];

	se.rules = rules;
	se_open(&t, dir, o_direct);
	ck_assert_int_eq(fg_tier_alloc(&t, 256 * KiB, &r), 0);
	ck_assert_int_eq(posix_memalign((void **)&src, 4096, 256 * KiB + 64), 0);
	ck_assert_int_eq(posix_memalign((void **)&dst, 4096, 256 * KiB + 64), 0);
	rnd_fill(src, 256 * KiB + 64);
	memset(dst, 0, 256 * KiB + 64);

	/* Aligned, then unaligned in the file and in memory. */
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, src, 64 * KiB), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 64 * KiB, src + 64 * KiB, 64 * KiB), 0);
	io[0] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 128 * KiB,
				.buf = src + 128 * KiB, .len = 1000 };
	io[1] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 128 * KiB + 1000,
				.buf = src + 128 * KiB + 1000, .len = 64 * KiB - 1000 };
	io[2] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 192 * KiB,
				.buf = src + 192 * KiB, .len = 64 * KiB };
	run_batch(&t, &confs[0], io, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(io[i].result, 0);

	ck_assert_int_eq(fg_tier_read(&t, &r, 0, dst, 64 * KiB), 0);
	io[0] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 64 * KiB,
				.buf = dst + 64 * KiB, .len = 64 * KiB };
	io[1] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 128 * KiB + 7,
				.buf = dst + 128 * KiB + 7, .len = 64 * KiB - 7 };
	io[2] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 192 * KiB,
				.buf = dst + 192 * KiB, .len = 64 * KiB };
	run_batch(&t, &confs[0], io, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(io[i].result, 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 128 * KiB, dst + 128 * KiB, 7), 0);
	ck_assert_msg(memcmp(src, dst, 256 * KiB) == 0, "data differ after retries%s",
		      o_direct ? " (O_DIRECT)" : "");
	/* Every rule met its transfer. */
	ck_assert_uint_eq(se.hits, sizeof(rules) / sizeof(rules[0]) - 1);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	free(src);
	free(dst);
}

START_TEST(test_retry_and_resume)
{
	alarm(WATCHDOG_S);
	if (direct_dir[0])
		retry_and_resume(direct_dir, true);
	else
		fprintf(stderr, "queue core: retry and resume with O_DIRECT skipped: %s\n",
			direct_why);
	retry_and_resume(plain_dir, false);
}
END_TEST

START_TEST(test_fault_spec_malformed)
{
	static const char *const bad[] = {
		"read", "read:EIO", "read:EIO:0", "foo:EIO:1", "read:EBOGUS:1", "read:EIO:1x",
		"read:EIO:1,", "write::2", "read:EIO:99999999999999999999", ",read:EIO:1",
		"read:SHORT:0", "read:short:1",
	};
	const struct conf *c = conf_start(_i);
	struct fg_tier t;

	if (!need_direct(c, "fault specification"))
		return;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(setenv(c->fault_env, bad[i], 1), 0);
		ck_assert_msg(try_open(&t, c, direct_dir, NULL) == -EINVAL, "%s: \"%s\" accepted",
			      c->label, bad[i]);
		ck_assert_msg(strstr(fg_last_error(), c->fault_env) != NULL, "\"%s\": got \"%s\"",
			      bad[i], fg_last_error());
	}
	ck_assert_int_eq(setenv(c->fault_env, "read:EIO:2,write:28:1", 1), 0);
	open_ok(&t, c, NULL);
	fg_tier_close(&t);
	unsetenv(c->fault_env);
}
END_TEST

/* ---- size, options, o_direct = false ----------------------------------------- */

START_TEST(test_size_too_large)
{
	const struct conf *c = conf_start(_i);
	struct fg_tier t;
	struct fg_region a, b;
	struct statvfs sv;
	char toobig[32];
	const char *extra[] = { "size", toobig, NULL };
	static const char *const fixed[] = { "size", "1M", NULL };

	if (!need_direct(c, "size reservation"))
		return;
	ck_assert_int_eq(statvfs(direct_dir, &sv), 0);
	snprintf(toobig, sizeof(toobig), "%" PRIu64,
		 ((uint64_t)sv.f_bavail * sv.f_frsize + 1024 * GiB) & ~(uint64_t)4095);
	ck_assert_int_eq(try_open(&t, c, direct_dir, extra), -ENOSPC);
	ck_assert_msg(strstr(fg_last_error(), direct_dir) && strstr(fg_last_error(), toobig) &&
		      strstr(fg_last_error(), "free") && strstr(fg_last_error(), c->name),
		      "got \"%s\"", fg_last_error());

	open_ok(&t, c, fixed);
	ck_assert_uint_eq(t.capacity, 1 * MiB);
	ck_assert_int_eq(fg_tier_alloc(&t, 700 * KiB + 1, &a), 0); /* takes 704 KiB */
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&t, 320 * KiB + 1, &b), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "no free range"));
	ck_assert_int_eq(fg_tier_alloc(&t, 320 * KiB, &b), 0);
	ck_assert_int_eq(fg_tier_write(&t, &b, 320 * KiB - 3, "abc", 3), 0);
	fg_tier_free(&t, &a);
	fg_tier_free(&t, &b);
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_bad_options)
{
	const struct conf *c = conf_start(_i);
	static const char *const odd[] = { "request_size", "5000", NULL };
	static const char *const tiny[] = { "request_size", "512", NULL };
	static const char *const huge[] = { "request_size", "2G", NULL };
	static const char *const nodir[] = { "dir", "/nonexistent/fgcore-test", NULL };
	struct fg_tier t;
	struct fg_plugin_handle h;
	void *opts;

	ck_assert_int_eq(try_open(&t, c, plain_dir, odd), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "request_size"));
	ck_assert_int_eq(try_open(&t, c, plain_dir, tiny), -EINVAL);
	ck_assert_int_eq(try_open(&t, c, plain_dir, huge), -EINVAL);
	ck_assert_int_eq(try_open(&t, c, plain_dir, nodir), -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "/nonexistent/fgcore-test"));
	/* queue_depth bounds come from the option table. */
	ck_assert_int_eq(fg_plugin_load(c->name, FG_PLUGIN_STORAGE, &h), 0);
	opts = fg_plugin_opts_new(h.plugin);
	ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "queue_depth", "0", "test"), -EINVAL);
	ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "queue_depth", "4097", "test"),
			 -EINVAL);
	ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "queue_depth", "4096", "test"), 0);
	free(opts);
	fg_plugin_close(&h);
}
END_TEST

/* A named file: kept after close, holding what was written; truncated when
 * opened again. */
START_TEST(test_named_file)
{
	const struct conf *c = conf_start(_i);
	char path[PATH_MAX + 64], *back;
	const char *extra[] = { "file", path, NULL };
	struct fg_tier t;
	struct fg_region a, b;
	struct stat st;
	int fd;

	if (!need_direct(c, "named file"))
		return;
	snprintf(path, sizeof(path), "%s/named-%s-%ld.tier", direct_dir, c->name, (long)getpid());
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, 5000, &a), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 100, &b), 0);
	ck_assert_uint_eq(a.handle, 0);
	ck_assert_uint_eq(b.handle, 8192);
	ck_assert_int_eq(fg_tier_write(&t, &b, 1, "hello", 5), 0);
	fg_tier_close(&t);
	back = malloc(16);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, back, 7, 8192), 7);
	ck_assert_int_eq(memcmp(back, "\0hello\0", 7), 0);
	close(fd);
	free(back);
	open_ok(&t, c, extra);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 0);
	fg_tier_close(&t);
	unlink(path);
}
END_TEST

START_TEST(test_buffered)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "o_direct", "false", "request_size", "8K",
					     "queue_depth", "3", NULL };
	struct fg_tier t;
	struct fg_region r;
	unsigned char *src, *dst;
	struct fg_io io[5];
	int err;

	err = try_open(&t, c, plain_dir, extra);
	ck_assert_msg(err == 0, "%s: %s", c->label, fg_last_error());
	ck_assert_uint_eq(t.info.alignment, 1);
	ck_assert_int_eq(fg_tier_alloc(&t, 100001, &r), 0);
	src = malloc(100001);
	dst = malloc(100001);
	rnd_fill(src, 100001);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, src, 100001), 0);
	for (int i = 0; i < 5; i++)
		io[i] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 20000u * i + 1,
					.buf = dst + 20000 * i + 1, .len = 20000 };
	run_batch(&t, c, io, 5);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(io[i].result, 0);
	ck_assert_int_eq(memcmp(src + 1, dst + 1, 100000), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	free(src);
	free(dst);
}
END_TEST

/* Where a file system refuses O_DIRECT, open says so and what to do. */
START_TEST(test_direct_refused)
{
	const struct conf *c = conf_start(_i);
	static const char *const cands[] = { "/dev/shm", "/run/shm", "/tmp" };
	char why[256];
	struct fg_tier t;
	int err;

	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		char dir[PATH_MAX], probe[PATH_MAX + 8];
		int fd;

		snprintf(dir, sizeof(dir), "%s/fgcore-nvme-XXXXXX", cands[i]);
		if (!mkdtemp(dir))
			continue;
		snprintf(probe, sizeof(probe), "%s/p", dir);
		fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
		if (fd >= 0) {
			/* It accepts O_DIRECT (tmpfs does since Linux 6.6): nothing to see. */
			close(fd);
			unlink(probe);
			rmdir(dir);
			continue;
		}
		err = try_open(&t, c, dir, NULL);
		snprintf(why, sizeof(why), "%s", fg_last_error());
		rmdir(dir);
		ck_assert_int_eq(err, -ENOTSUP);
		ck_assert_msg(strstr(why, dir) && strstr(why, "O_DIRECT") &&
			      strstr(why, "disk-backed") && strstr(why, "o_direct = false"),
			      "got \"%s\"", why);
		return;
	}
	fprintf(stderr, "%s: no local file system refuses O_DIRECT; refusal message not "
		"checked\n", c->label);
}
END_TEST

/* Closing with requests queued and in flight completes them first. */
START_TEST(test_close_in_flight)
{
	const struct conf *c = conf_start(_i);
	static const char *const extra[] = { "queue_depth", "2", "request_size", "4K", NULL };
	static struct fg_io io[64];
	static unsigned char buf[64][3000];
	struct fg_io *ios[64];
	struct fg_tier t;
	struct fg_region r;

	if (!need_direct(c, "close in flight"))
		return;
	open_ok(&t, c, extra);
	ck_assert_int_eq(fg_tier_alloc(&t, sizeof(buf), &r), 0);
	for (int i = 0; i < 64; i++) {
		io[i] = (struct fg_io){ .op = i & 1 ? FG_IO_READ : FG_IO_WRITE, .region = &r,
					.offset = (uint64_t)i * 3000, .buf = buf[i], .len = 3000,
					.result = 777 };
		ios[i] = &io[i];
	}
	ck_assert_int_eq(fg_tier_submit(&t, ios, 64), 0);
	fg_tier_close(&t);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(io[i].result, 0);
}
END_TEST

/* ---- setup in the parent ---------------------------------------------------- */

static bool dir_direct_ok(const char *base, char *out, size_t outn, char *why, size_t n)
{
	char path[PATH_MAX + 8];
	void *buf = NULL;
	int fd, err = 0;

	snprintf(out, outn, "%s/fgcore-nvme-XXXXXX", base);
	if (!mkdtemp(out)) {
		snprintf(why, n, "%s: %s", base, strerror(errno));
		out[0] = '\0';
		return false;
	}
	snprintf(path, sizeof(path), "%s/probe", out);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0) {
		err = errno;
	} else {
		if (posix_memalign(&buf, 4096, 4096) == 0) {
			memset(buf, 0, 4096);
			if (pwrite(fd, buf, 4096, 0) != 4096)
				err = errno ? errno : EIO;
			free(buf);
		}
		close(fd);
		unlink(path);
	}
	if (err) {
		snprintf(why, n, "%s refuses O_DIRECT (%s)", base, strerror(err));
		rmdir(out);
		out[0] = '\0';
		return false;
	}
	return true;
}

static void add_conf(const char *name, const char *label, const char *fault_env,
		     const char *k1, const char *v1)
{
	struct fg_plugin_handle h;
	struct conf *c;

	if (fg_plugin_load(name, FG_PLUGIN_STORAGE, &h) != 0) {
		fprintf(stderr, "%s: skipped, not built (%s)\n", label, fg_last_error());
		return;
	}
	if (fg_plugin_probe(&h) == 0) {
		fprintf(stderr, "%s: skipped, not usable on this machine (probe)\n", label);
		fg_plugin_close(&h);
		return;
	}
	fg_plugin_close(&h);
	c = &confs[nconfs++];
	snprintf(c->label, sizeof(c->label), "%s", label);
	c->name = name;
	c->fault_env = fault_env;
	c->opts[0] = k1;
	c->opts[1] = v1;
	c->opts[2] = NULL;
}

static Suite *nvme_suite(void)
{
	Suite *s = suite_create("nvme");
	TCase *tc = tcase_create("nvme");
	TCase *big = tcase_create("past_4gib");
	TCase *core = tcase_create("queue_core");

	tcase_set_timeout(tc, WATCHDOG_S + 30);
	tcase_set_timeout(big, WATCHDOG_S + 30);
	tcase_add_loop_test(tc, test_round_trips_small_queue, 0, nconfs);
	tcase_add_loop_test(tc, test_round_trips_queue_of_one, 0, nconfs);
	tcase_add_loop_test(tc, test_large_transfers, 0, nconfs);
	tcase_add_loop_test(tc, test_256_in_flight, 0, nconfs);
	tcase_add_loop_test(tc, test_threads, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_read_async, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_read_sync, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_write_enospc, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_spec_malformed, 0, nconfs);
	tcase_add_loop_test(tc, test_size_too_large, 0, nconfs);
	tcase_add_loop_test(tc, test_bad_options, 0, nconfs);
	tcase_add_loop_test(tc, test_named_file, 0, nconfs);
	tcase_add_loop_test(tc, test_buffered, 0, nconfs);
	tcase_add_loop_test(tc, test_direct_refused, 0, nconfs);
	tcase_add_loop_test(tc, test_close_in_flight, 0, nconfs);
	tcase_add_loop_test(big, test_past_4gib, 0, nconfs);
	tcase_set_timeout(core, WATCHDOG_S + 30);
	tcase_add_test(core, test_retry_and_resume);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, big);
	suite_add_tcase(s, core);
	return s;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	const char *seed_env = getenv("FGCORE_TEST_SEED");
	char why1[256] = "", why2[256] = "";
	SRunner *sr;
	int failed;

	if (seed_env && *seed_env)
		seed = strtoull(seed_env, NULL, 0);
	/* Faults and delays must not leak in from outside. */
	unsetenv("FGCORE_IO_URING_FAULT");
	unsetenv("FGCORE_LIBAIO_FAULT");
	unsetenv("FGCORE_IO_URING_NVME_FAULT");
	unsetenv("FGCORE_LIBAIO_NVME_FAULT");
	unsetenv("FGCORE_IO_URING_DELAY_US");
	unsetenv("FGCORE_LIBAIO_DELAY_US");
	unsetenv("FGCORE_IO_URING_NVME_DELAY_US");
	unsetenv("FGCORE_LIBAIO_NVME_DELAY_US");
	unsetenv("FGCORE_SCRIPTED_FAULT");
	unsetenv("FGCORE_SCRIPTED_DELAY_US");

	add_conf("io_uring_nvme", "io_uring_nvme", "FGCORE_IO_URING_FAULT", NULL, NULL);
	if (nconfs) {
		add_conf("io_uring_nvme", "io_uring_nvme[sqpoll]", "FGCORE_IO_URING_FAULT",
			 "sqpoll", "true");
		add_conf("io_uring_nvme", "io_uring_nvme[register_buffers=false]",
			 "FGCORE_IO_URING_FAULT", "register_buffers", "false");
	}
	add_conf("libaio_nvme", "libaio_nvme", "FGCORE_LIBAIO_FAULT", NULL, NULL);
	if (!nconfs)
		fprintf(stderr, "test_nvme: neither io_uring_nvme nor libaio_nvme is built or "
			"usable here: only the queue core is tested\n");

	if (!(tmp && *tmp && dir_direct_ok(tmp, direct_dir, sizeof(direct_dir), why1,
					   sizeof(why1))) &&
	    !dir_direct_ok("/var/tmp", direct_dir, sizeof(direct_dir), why2, sizeof(why2))) {
		snprintf(direct_why, sizeof(direct_why), "no directory accepts O_DIRECT (%s%s%s)",
			 why1[0] ? why1 : "TMPDIR unset", "; ", why2);
		fprintf(stderr, "test_nvme: O_DIRECT cases skipped: %s\n", direct_why);
	}
	snprintf(plain_dir, sizeof(plain_dir), "%s/fgcore-nvme-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(plain_dir)) {
		fprintf(stderr, "test_nvme: cannot create a directory in %s: %s\n",
			tmp && *tmp ? tmp : "/tmp", strerror(errno));
		return EXIT_FAILURE;
	}

	sr = srunner_create(nvme_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "seed %" PRIu64 " (set FGCORE_TEST_SEED to change it)\n", seed);
	if (direct_dir[0])
		rmdir(direct_dir);
	rmdir(plain_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
