/* tests/test_storage_conformance.c - every storage plugin in FGCORE_PLUGIN_PATH,
 * through the core's tier wrapper, against the same contract:
 *   random requests of any offset, length and buffer alignment compared with a
 *   shadow copy; aligned requests; regions that come and go without
 *   overlapping; 256 requests in flight, each completed exactly once; the
 *   capacity cap; reads past a region's end refused; for file tiers a region
 *   past 4 GiB; the core's fault-injection shim (FGCORE_<PLUGIN>_FAULT and
 *   _DELAY_US) over every plugin, file and memory tiers alike.  posix_file also
 *   runs with o_direct = true, and is checked for its documented
 *   FGCORE_POSIX_FILE_FAULT cases and the `size` reservation.
 *
 * The plugins are listed in the parent; each case opens its tier inside the
 * forked child (CUDA contexts do not survive fork).  FGCORE_TEST_SEED changes
 * the PRNG seed (default 12345); it is printed on failure. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/plugin/loader.h"
#include "core/tier/tier.h"
#include "core/util/error.h"
#include "tests/test_rng.h"

#define KiB ((uint64_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)
#define TMPFS_MAGIC_NUMBER 0x01021994

/* ---- configurations ---------------------------------------------------- */

#define MAX_CONFS 32

struct conf {
	char label[96];           /* "posix_file[o_direct]" */
	char path[PATH_MAX];      /* the plugin file */
	char name[64];
	bool o_direct;
	const char *dir;          /* for plugins with a `dir` option */
	const char *big_dir;      /* where a 5 GiB sparse region may go, or NULL */
	char big_why[160];        /* why big_dir is NULL */
};

static struct conf confs[MAX_CONFS];
static int nconfs;
static char load_failures[2048];
static bool have_pinned_host, have_posix_file;
static char tmp_dir[PATH_MAX], direct_dir[PATH_MAX];
static char var_dir[PATH_MAX]; /* under /var/tmp, when TMPDIR will not do */
static char direct_why[256];
static uint64_t seed = 12345;


/* ---- opening a tier in the child --------------------------------------- */

static bool has_option(const struct fg_plugin *p, const char *key)
{
	if (!p->options)
		return false;
	for (const struct fg_option *o = p->options; o->key; o++)
		if (!strcmp(o->key, key))
			return true;
	return false;
}

/* Open configuration c as a tier; extra options as key, value pairs ending in
 * NULL.  Returns 0, or 77 when the plugin is not usable on this machine. */
static int open_tier_opts(struct fg_tier *t, const struct conf *c, const char *dir,
			  uint64_t cap, const char *const *extra)
{
	struct fg_plugin_handle h;
	void *opts = NULL;
	int err;

	rng_state = seed ^ (uint64_t)(uintptr_t)c->label[0] ^ 0x9e3779b97f4a7c15ull;
	err = fg_plugin_open_file(c->path, FG_PLUGIN_STORAGE, NULL, &h);
	ck_assert_msg(err == 0, "%s: %s", c->label, fg_last_error());
	if (fg_plugin_probe(&h) == 0) {
		fprintf(stderr, "%s: not usable on this machine (probe), skipped\n", c->label);
		fg_plugin_close(&h);
		return 77;
	}
	if (h.plugin->opts_size) {
		opts = fg_plugin_opts_new(h.plugin);
		ck_assert_msg(opts != NULL, "%s: %s", c->label, fg_last_error());
	}
	if (has_option(h.plugin, "dir"))
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "dir", dir ? dir : c->dir,
						    "test"), 0);
	if (c->o_direct)
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "o_direct", "true", "test"),
				 0);
	for (; extra && extra[0]; extra += 2)
		ck_assert_msg(fg_plugin_opts_set(h.plugin, opts, extra[0], extra[1], "test") == 0,
			      "%s: %s", c->label, fg_last_error());
	err = fg_tier_open(t, "test", &h, opts, cap);
	ck_assert_msg(err == 0, "%s: open failed (%d): %s", c->label, err, fg_last_error());
	ck_assert_uint_gt(t->capacity, 0);
	return 0;
}

static int open_tier(struct fg_tier *t, const struct conf *c, uint64_t cap)
{
	return open_tier_opts(t, c, NULL, cap, NULL);
}

static bool is_memory(const struct fg_tier *t)
{
	return t->info.flags & FG_STORAGE_ADDRESSABLE;
}

static bool is_host_memory(const struct fg_tier *t)
{
	return (t->info.flags & (FG_STORAGE_ADDRESSABLE | FG_STORAGE_HOST_MEMORY)) ==
	       (FG_STORAGE_ADDRESSABLE | FG_STORAGE_HOST_MEMORY);
}

static void check_region(const struct fg_tier *t, const struct fg_region *r, uint64_t size)
{
	ck_assert_uint_eq(r->size, size);
	if (is_memory(t)) {
		ck_assert_ptr_nonnull(r->addr);
		ck_assert_uint_eq((uintptr_t)r->addr % 64, 0);
	} else {
		ck_assert_ptr_null(r->addr);
	}
}

/* Submit one request and reap it. */
static int io_one(struct fg_tier *t, enum fg_io_op op, const struct fg_region *r, uint64_t off,
		  void *buf, size_t len)
{
	struct fg_io io = { .op = op, .region = r, .offset = off, .buf = buf, .len = len,
			    .user = &io, .result = 12345 };
	struct fg_io *p = &io, *done[2];
	int n, err;

	err = fg_tier_submit(t, &p, 1);
	if (err)
		return err;
	n = fg_tier_reap(t, done, 1, 2);
	ck_assert_int_eq(n, 1);
	ck_assert_ptr_eq(done[0], &io);
	ck_assert_int_ne(io.result, 12345);
	return io.result;
}

/* ---- random requests against a shadow copy ----------------------------- */

#define NREG 6

START_TEST(test_random_io)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r[NREG];
	unsigned char *shadow[NREG], *buf;
	uint64_t size[NREG];
	const size_t bufmax = 300 * KiB;

	if (open_tier(&t, c, 0))
		return;
	buf = malloc(bufmax + 64);
	for (int i = 0; i < NREG; i++) {
		/* tiny, odd and block-multiple sizes */
		size[i] = i == 0 ? 1 : i == 1 ? 4096 : i == 2 ? 4097 : 1 + rnd_below(256 * KiB);
		ck_assert_int_eq(fg_tier_alloc(&t, size[i], &r[i]), 0);
		check_region(&t, &r[i], size[i]);
		shadow[i] = malloc(size[i]);
		rnd_fill(shadow[i], size[i]);
		ck_assert_int_eq(fg_tier_write(&t, &r[i], 0, shadow[i], size[i]), 0);
	}
	for (int op = 0; op < 3000; op++) {
		int k = (int)rnd_below(NREG);
		uint64_t off = rnd_below(size[k] + 1);
		size_t len = (size_t)rnd_below(size[k] - off + 1);
		unsigned char *p = buf + rnd_below(64); /* any buffer alignment */
		bool async = rnd() & 1;
		int err;

		if (rnd_below(8) == 0) /* some exactly-aligned ones too */
			off &= ~4095ull, len &= ~(size_t)4095, p = buf;
		if (rnd() & 1) {
			rnd_fill(p, len);
			err = async ? io_one(&t, FG_IO_WRITE, &r[k], off, p, len)
				    : fg_tier_write(&t, &r[k], off, p, len);
			ck_assert_msg(err == 0, "%s: write %d: %s", c->label, op, fg_last_error());
			memcpy(shadow[k] + off, p, len);
		} else {
			err = async ? io_one(&t, FG_IO_READ, &r[k], off, p, len)
				    : fg_tier_read(&t, &r[k], off, p, len);
			ck_assert_msg(err == 0, "%s: read %d: %s", c->label, op, fg_last_error());
			ck_assert_msg(memcmp(p, shadow[k] + off, len) == 0,
				      "%s (seed %" PRIu64 "): request %d: region %d bytes %" PRIu64
				      "..+%zu differ from what was written", c->label, seed, op, k,
				      off, len);
		}
	}
	for (int i = 0; i < NREG; i++) {
		if (is_host_memory(&t))
			ck_assert_int_eq(memcmp(r[i].addr, shadow[i], size[i]), 0);
		fg_tier_free(&t, &r[i]);
		free(shadow[i]);
	}
	ck_assert_uint_eq(t.used, 0);
	free(buf);
	fg_tier_close(&t);
}
END_TEST

/* ---- aligned requests (the O_DIRECT fast path) and block edges ---------- */

START_TEST(test_aligned_io)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r;
	unsigned char *a, *b, *shadow;
	const uint64_t size = 2 * MiB;

	if (open_tier(&t, c, 0))
		return;
	ck_assert_int_eq(posix_memalign((void **)&a, 4096, size), 0);
	ck_assert_int_eq(posix_memalign((void **)&b, 4096, size), 0);
	shadow = calloc(1, size);
	ck_assert_int_eq(fg_tier_alloc(&t, size, &r), 0);
	rnd_fill(shadow, size);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, shadow, size), 0);

	for (int i = 0; i < 200; i++) {
		uint64_t off = rnd_below(size / 4096) * 4096;
		size_t len = (size_t)rnd_below((size - off) / 4096 + 1) * 4096;

		rnd_fill(a, len);
		ck_assert_int_eq(i & 1 ? io_one(&t, FG_IO_WRITE, &r, off, a, len)
				       : fg_tier_write(&t, &r, off, a, len), 0);
		memcpy(shadow + off, a, len);
		off = rnd_below(size / 4096) * 4096;
		len = (size_t)rnd_below((size - off) / 4096 + 1) * 4096;
		ck_assert_int_eq(i & 2 ? io_one(&t, FG_IO_READ, &r, off, b, len)
				       : fg_tier_read(&t, &r, off, b, len), 0);
		ck_assert_int_eq(memcmp(b, shadow + off, len), 0);
	}

	/* Single bytes and short runs around block boundaries. */
	for (uint64_t edge = 4096; edge < size; edge += 4096 * 37) {
		for (int d = -3; d <= 3; d++) {
			uint64_t off = edge + (uint64_t)(int64_t)d;
			size_t len = (size_t)(d + 4);

			rnd_fill(a + 1, len);
			ck_assert_int_eq(fg_tier_write(&t, &r, off, a + 1, len), 0);
			memcpy(shadow + off, a + 1, len);
		}
	}
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, b, size), 0);
	ck_assert_int_eq(memcmp(b, shadow, size), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 3, b + 5, size - 7), 0);
	ck_assert_int_eq(memcmp(b + 5, shadow + 3, size - 7), 0);

	fg_tier_free(&t, &r);
	free(a);
	free(b);
	free(shadow);
	fg_tier_close(&t);
}
END_TEST

/* ---- regions come and go; live ones never overlap ----------------------- */

START_TEST(test_alloc_free_reuse)
{
	const struct conf *c = &confs[_i];
	enum { LIVE = 24 };
	struct fg_tier t;
	struct fg_region r[LIVE];
	uint64_t size[LIVE];
	unsigned char *buf, *want;

	if (open_tier(&t, c, 0))
		return;
	buf = malloc(64 * KiB);
	want = malloc(64 * KiB);
	memset(r, 0, sizeof(r));
	memset(size, 0, sizeof(size));
	for (int round = 0; round < 400; round++) {
		int k = (int)rnd_below(LIVE);

		if (size[k]) {
			/* Its pattern must have survived its neighbours' writes. */
			ck_assert_int_eq(fg_tier_read(&t, &r[k], 0, buf, size[k]), 0);
			for (uint64_t j = 0; j < size[k]; j++)
				want[j] = (unsigned char)(k * 7 + j);
			ck_assert_msg(memcmp(buf, want, size[k]) == 0,
				      "%s: region %d was overwritten by another one", c->label, k);
			fg_tier_free(&t, &r[k]);
			size[k] = 0;
		} else {
			size[k] = 1 + rnd_below(rnd() & 1 ? 64 * KiB : 5000);
			ck_assert_int_eq(fg_tier_alloc(&t, size[k], &r[k]), 0);
			check_region(&t, &r[k], size[k]);
			for (uint64_t j = 0; j < size[k]; j++)
				buf[j] = (unsigned char)(k * 7 + j);
			ck_assert_int_eq(fg_tier_write(&t, &r[k], 0, buf, size[k]), 0);
		}
	}
	for (int k = 0; k < LIVE; k++)
		if (size[k])
			fg_tier_free(&t, &r[k]);
	ck_assert_uint_eq(t.used, 0);
	free(buf);
	free(want);
	fg_tier_close(&t);
}
END_TEST

/* ---- many requests in flight -------------------------------------------- */

#define INFLIGHT 256

START_TEST(test_many_in_flight)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r;
	static struct fg_io io[INFLIGHT];
	struct fg_io *ios[INFLIGHT], *done[INFLIGHT];
	uint64_t off[INFLIGHT + 1];
	unsigned char *src, *dst;
	int seen[INFLIGHT];
	uint64_t total;

	if (open_tier(&t, c, 0))
		return;
	/* Disjoint extents of mixed sizes and alignments. */
	off[0] = 0;
	for (int i = 0; i < INFLIGHT; i++)
		off[i + 1] = off[i] + (i % 4 == 0 ? 8192 : 1 + rnd_below(6000));
	total = off[INFLIGHT];
	src = malloc(total);
	dst = malloc(total);
	rnd_fill(src, total);
	memset(dst, 0xee, total);
	ck_assert_int_eq(fg_tier_alloc(&t, total, &r), 0);

	for (int pass = 0; pass < 2; pass++) {
		enum fg_io_op op = pass == 0 ? FG_IO_WRITE : FG_IO_READ;
		int got = 0;

		for (int i = 0; i < INFLIGHT; i++) {
			io[i] = (struct fg_io){ .op = op, .region = &r, .offset = off[i],
						.buf = (pass ? dst : src) + off[i],
						.len = (size_t)(off[i + 1] - off[i]),
						.user = (void *)(intptr_t)i, .result = 999 };
			ios[i] = &io[i];
			seen[i] = 0;
		}
		ck_assert_int_eq(fg_tier_submit(&t, ios, INFLIGHT), 0);
		while (got < INFLIGHT) {
			int n = fg_tier_reap(&t, done, 1, INFLIGHT);

			ck_assert_msg(n > 0, "%s: reap returned %d with %d of %d reaped: %s",
				      c->label, n, got, INFLIGHT, fg_last_error());
			for (int j = 0; j < n; j++) {
				intptr_t k = (intptr_t)done[j]->user;

				ck_assert(k >= 0 && k < INFLIGHT);
				ck_assert_ptr_eq(done[j], &io[k]);
				ck_assert_int_eq(done[j]->result, 0);
				seen[k]++;
			}
			got += n;
		}
		for (int i = 0; i < INFLIGHT; i++)
			ck_assert_msg(seen[i] == 1, "%s: request %d completed %d times",
				      c->label, i, seen[i]);
		/* Nothing more to reap, and asking for more does not block. */
		ck_assert_int_eq(fg_tier_reap(&t, done, 4, INFLIGHT), 0);
	}
	ck_assert_int_eq(memcmp(src, dst, total), 0);
	fg_tier_free(&t, &r);
	free(src);
	free(dst);
	fg_tier_close(&t);
}
END_TEST

/* Closing with requests submitted but not reaped drains them: no hang, no
 * leak.  With the core's default submit they are already done, so the region
 * can go first; a plugin with its own submit must release its regions at
 * close, since freeing one under requests still in flight is not allowed. */
START_TEST(test_close_in_flight)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r;
	static struct fg_io io[64];
	struct fg_io *ios[64];
	static unsigned char buf[64][512];

	if (open_tier(&t, c, 0))
		return;
	ck_assert_int_eq(fg_tier_alloc(&t, 64 * 512, &r), 0);
	for (int i = 0; i < 64; i++) {
		io[i] = (struct fg_io){ .op = i & 1 ? FG_IO_READ : FG_IO_WRITE, .region = &r,
					.offset = (uint64_t)i * 512, .buf = buf[i], .len = 512 };
		ios[i] = &io[i];
	}
	ck_assert_int_eq(fg_tier_submit(&t, ios, 64), 0);
	if (!t.ops->submit)
		fg_tier_free(&t, &r);
	fg_tier_close(&t);
}
END_TEST

/* ---- capacity cap and bounds --------------------------------------------- */

START_TEST(test_capacity_exceeded)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region a, b;
	char want[256];

	if (open_tier(&t, c, 1 * MiB))
		return;
	ck_assert_uint_eq(t.capacity, 1 * MiB);
	ck_assert_int_eq(fg_tier_alloc(&t, 768 * KiB, &a), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&t, 512 * KiB, &b), -ENOSPC);
	snprintf(want, sizeof(want), "tier test (%s): cannot allocate 512.00 KiB: 768.00 KiB of "
		 "1.00 MiB in use; raise [tier.test] capacity", c->name);
	ck_assert_msg(strstr(fg_last_error(), want) != NULL, "%s: got \"%s\"", c->label,
		      fg_last_error());
	ck_assert_uint_eq(t.used, 768 * KiB);
	ck_assert_int_eq(fg_tier_alloc(&t, 256 * KiB, &b), 0);
	ck_assert_uint_eq(t.used, 1 * MiB);
	fg_tier_free(&t, &a);
	ck_assert_int_eq(fg_tier_alloc(&t, 512 * KiB, &a), 0);
	fg_tier_free(&t, &a);
	fg_tier_free(&t, &b);
	ck_assert_uint_eq(t.used, 0);
	ck_assert_uint_eq(t.peak, 1 * MiB);
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_bounds)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r;
	char buf[256] = { 0 };

	if (open_tier(&t, c, 0))
		return;
	ck_assert_int_eq(fg_tier_alloc(&t, 100, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, buf, 100), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 1, buf, 100), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "outside the 100-byte region"));
	ck_assert_int_eq(fg_tier_read(&t, &r, 100, buf, 1), -EINVAL);
	ck_assert_int_eq(fg_tier_write(&t, &r, 50, buf, 51), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, &r, UINT64_MAX - 10, buf, 20), -EINVAL);
	ck_assert_int_eq(io_one(&t, FG_IO_READ, &r, 99, buf, 2), -EINVAL);
	/* The plugin guards itself too: every input is untrusted. */
	ck_assert_int_eq(t.ops->read(t.ctx, &r, 99, buf, 2), -EINVAL);
	ck_assert_int_eq(t.ops->write(t.ctx, &r, 101, buf, 0), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, &r, 100, buf, 0), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, buf, 100), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
}
END_TEST

/* ---- a region past 4 GiB (file tiers) ------------------------------------ */

START_TEST(test_large_offset)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region small, big;
	const uint64_t size = 5 * GiB, at = 4 * GiB + GiB / 2;
	unsigned char *w, *rd;
	const size_t len = 3 * 4096 + 123;

	if (open_tier(&t, c, 0))
		return;
	/* Memory tiers: a 5 GiB region is no sparse file; nothing to prove. */
	if (is_memory(&t)) {
		fg_tier_close(&t);
		return;
	}
	if (!c->big_dir) {
		fprintf(stderr, "%s: region past 4 GiB skipped: %s\n", c->label, c->big_why);
		fg_tier_close(&t);
		return;
	}
	if (c->big_dir != c->dir) {
		fg_tier_close(&t);
		ck_assert_int_eq(open_tier_opts(&t, c, c->big_dir, 0, NULL), 0);
	}
	/* Something before it, so the big region does not start at file offset 0. */
	ck_assert_int_eq(fg_tier_alloc(&t, 12345, &small), 0);
	ck_assert_msg(fg_tier_alloc(&t, size, &big) == 0, "%s: %s", c->label, fg_last_error());
	w = malloc(len + 1);
	rd = malloc(len + 1);
	rnd_fill(w, len + 1);
	/* Unaligned offset, length and buffer, then the aligned fast path. */
	ck_assert_int_eq(fg_tier_write(&t, &big, at + 7, w + 1, len), 0);
	ck_assert_int_eq(io_one(&t, FG_IO_READ, &big, at + 7, rd + 1, len), 0);
	ck_assert_int_eq(memcmp(w + 1, rd + 1, len), 0);
	ck_assert_int_eq(io_one(&t, FG_IO_WRITE, &big, size - 4096, w, 4096), 0);
	ck_assert_int_eq(fg_tier_read(&t, &big, size - 4096, rd, 4096), 0);
	ck_assert_int_eq(memcmp(w, rd, 4096), 0);
	if (!strcmp(c->name, "posix_file")) {
		/* Never written: a fresh file region reads as zeros. */
		memset(rd, 0xaa, 4096);
		ck_assert_int_eq(fg_tier_read(&t, &big, 4 * GiB + 3, rd, 4096), 0);
		int nonzero = 0;

		for (int i = 0; i < 4096; i++)
			nonzero += rd[i] != 0;
		ck_assert_msg(nonzero == 0, "%d bytes of a fresh region are not zero", nonzero);
	}
	ck_assert_int_eq(fg_tier_read(&t, &big, size - 1, rd, 2), -EINVAL);
	fg_tier_free(&t, &big);
	fg_tier_free(&t, &small);
	free(w);
	free(rd);
	fg_tier_close(&t);
}
END_TEST

/* ---- posix_file: fault injection and the size reservation --------------- */

static bool is_posix_file(const struct conf *c)
{
	return !strcmp(c->name, "posix_file");
}

START_TEST(test_fault_injection)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region r;
	static struct fg_io io[8];
	struct fg_io *ios[8], *done[8];
	char buf[8][700];
	int failed = 0, got = 0;

	if (!is_posix_file(c))
		return;
	memset(buf, 'x', sizeof(buf));

	/* The 2nd read fails with EIO through submit/reap; the 1st and 3rd work. */
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", "read:EIO:2", 1), 0);
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 8 * 700, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, buf, sizeof(buf)), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, buf[0], 700), 0);
	ck_assert_int_eq(io_one(&t, FG_IO_READ, &r, 0, buf[0], 700), -EIO);
	ck_assert_int_eq(io_one(&t, FG_IO_READ, &r, 0, buf[0], 700), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);

	/* The 1st read fails through the synchronous path, naming the tier, the
	 * request and the variable. */
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", "read:EIO:1", 1), 0);
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 4096, &r), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_read(&t, &r, 10, buf[0], 100), -EIO);
	ck_assert_msg(strstr(fg_last_error(), "tier test (posix_file)") &&
		      strstr(fg_last_error(), "FGCORE_POSIX_FILE_FAULT") &&
		      strstr(fg_last_error(), "offset 10") &&
		      strstr(fg_last_error(), "Input/output error"), "got \"%s\"",
		      fg_last_error());
	ck_assert_int_eq(fg_tier_read(&t, &r, 10, buf[0], 100), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);

	/* Of 8 writes in flight exactly one (the 3rd to start) fails with ENOSPC. */
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", "write:ENOSPC:3", 1), 0);
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 8 * 700, &r), 0);
	for (int i = 0; i < 8; i++) {
		io[i] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r,
					.offset = (uint64_t)i * 700, .buf = buf[i], .len = 700 };
		ios[i] = &io[i];
	}
	ck_assert_int_eq(fg_tier_submit(&t, ios, 8), 0);
	while (got < 8) {
		int n = fg_tier_reap(&t, done, 8, 8);

		ck_assert_int_gt(n, 0);
		for (int j = 0; j < n; j++) {
			if (done[j]->result) {
				ck_assert_int_eq(done[j]->result, -ENOSPC);
				failed++;
			}
		}
		got += n;
	}
	ck_assert_int_eq(failed, 1);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, buf[0], 700), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv("FGCORE_POSIX_FILE_FAULT");
}
END_TEST

START_TEST(test_fault_spec_malformed)
{
	static const char *const bad[] = {
		"read", "read:EIO", "read:EIO:0", "read:EIO:-1", "foo:EIO:1", "read:EBOGUS:1",
		"read:EIO:1x", "read:EIO:1,", "write::2", "read:EIO:99999999999999999999",
	};
	const struct conf *c = &confs[_i];
	struct fg_plugin_handle h;
	struct fg_tier t;

	if (!is_posix_file(c))
		return;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		void *opts;

		ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", bad[i], 1), 0);
		ck_assert_int_eq(fg_plugin_open_file(c->path, FG_PLUGIN_STORAGE, NULL, &h), 0);
		opts = fg_plugin_opts_new(h.plugin);
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "dir", c->dir, "test"), 0);
		fg_clear_error();
		ck_assert_msg(fg_tier_open(&t, "test", &h, opts, 0) == -EINVAL,
			      "\"%s\" was accepted", bad[i]);
		ck_assert_msg(strstr(fg_last_error(), "FGCORE_POSIX_FILE_FAULT") != NULL,
			      "\"%s\": got \"%s\"", bad[i], fg_last_error());
	}
	/* Several rules and errno numbers are fine. */
	ck_assert_int_eq(setenv("FGCORE_POSIX_FILE_FAULT", "read:EIO:2,write:28:1", 1), 0);
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	fg_tier_close(&t);
	unsetenv("FGCORE_POSIX_FILE_FAULT");
}
END_TEST

/* ---- the fault-injection shim over every plugin ---------------------------- */

/* FGCORE_<NAME>_<what> for the plugin of c. */
static void plugin_env(const struct conf *c, const char *what, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "FGCORE_");

	for (const char *p = c->name; *p && k + 1 < n; p++)
		buf[k++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
	snprintf(buf + k, n - k, "_%s", what);
}

/* Submit n requests and reap them all (each exactly once). */
static void submit_reap(struct fg_tier *t, struct fg_io *io, unsigned n)
{
	struct fg_io *ios[8], *done[8];
	unsigned got = 0;

	ck_assert_uint_le(n, 8);
	for (unsigned i = 0; i < n; i++) {
		io[i].result = 12345;
		ios[i] = &io[i];
	}
	ck_assert_int_eq(fg_tier_submit(t, ios, n), 0);
	while (got < n) {
		int k = fg_tier_reap(t, done, n - got, 8);

		ck_assert_int_gt(k, 0);
		for (int j = 0; j < k; j++)
			ck_assert_int_ne(done[j]->result, 12345);
		got += (unsigned)k;
	}
	ck_assert_int_eq(fg_tier_reap(t, done, 1, 8), 0);
}

START_TEST(test_shim_every_plugin)
{
	const struct conf *c = &confs[_i];
	const size_t len = 10000;
	char fault_env[96], delay_env[96];
	unsigned char *data, *back;
	struct fg_tier t;
	struct fg_region r;
	struct fg_io io[4];

	plugin_env(c, "FAULT", fault_env, sizeof(fault_env));
	plugin_env(c, "DELAY_US", delay_env, sizeof(delay_env));
	/* Writes: #2 (async) fails.  Reads: #2 (async) fails, #3 (async) is cut
	 * short and resumed, #4 (sync) is cut short. */
	ck_assert_int_eq(setenv(fault_env, "write:EIO:2,read:ENOSPC:2,read:SHORT:3,"
			       "read:SHORT:4", 1), 0);
	if (open_tier(&t, c, 0))
		return;
	data = malloc(len);
	back = malloc(len);
	rnd_fill(data, len);
	ck_assert_int_eq(fg_tier_alloc(&t, len, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, data, len), 0);
	memset(back, 0x5a, len);
	io[0] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 100, .buf = back,
				.len = 3000 };
	submit_reap(&t, io, 1);
	ck_assert_msg(io[0].result == -EIO, "%s: injected write got %d", c->label, io[0].result);

	memset(back, 0, len);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, back, len), 0);
	ck_assert_msg(!memcmp(back, data, len), "%s: an injected write reached the plugin",
		      c->label);
	memset(back, 0, len);
	io[0] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 0, .buf = back,
				.len = 5000 };
	io[1] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 5001,
				.buf = back + 5001, .len = 4999 };
	submit_reap(&t, io, 2);
	ck_assert_int_eq(io[0].result, -ENOSPC);
	ck_assert_int_eq(io[1].result, 0);
	ck_assert_msg(!memcmp(back + 5001, data + 5001, 4999), "%s: short read differs",
		      c->label);
	ck_assert_int_eq(fg_tier_read(&t, &r, 1, back + 1, 4097), 0);
	ck_assert_msg(!memcmp(back + 1, data + 1, 4097), "%s: short sync read differs", c->label);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv(fault_env);

	/* A slow tier: requests come back right, each exactly once. */
	ck_assert_int_eq(setenv(delay_env, "20000", 1), 0);
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, len, &r), 0);
	for (unsigned i = 0; i < 4; i++)
		io[i] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 2500u * i,
					.buf = data + 2500u * i, .len = 2500 };
	submit_reap(&t, io, 4);
	for (unsigned i = 0; i < 4; i++)
		ck_assert_int_eq(io[i].result, 0);
	memset(back, 0, len);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, back, len), 0);
	ck_assert_msg(!memcmp(back, data, len), "%s: delayed writes differ", c->label);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	unsetenv(delay_env);
	free(data);
	free(back);
}
END_TEST

START_TEST(test_size_reservation)
{
	const struct conf *c = &confs[_i];
	struct fg_tier t;
	struct fg_region a, b, d;
	struct statvfs sv;
	char toobig[32];
	const char *extra[3] = { "size", toobig, NULL };
	const char *fixed[3] = { "size", "1M", NULL };

	if (!is_posix_file(c))
		return;
	/* More than the file system has: refused up front with a clear line. */
	ck_assert_int_eq(statvfs(c->dir, &sv), 0);
	snprintf(toobig, sizeof(toobig), "%" PRIu64,
		 ((uint64_t)sv.f_bavail * sv.f_frsize + 1024 * GiB) & ~(uint64_t)4095);
	{
		struct fg_plugin_handle h;
		void *opts;

		ck_assert_int_eq(fg_plugin_open_file(c->path, FG_PLUGIN_STORAGE, NULL, &h), 0);
		opts = fg_plugin_opts_new(h.plugin);
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "dir", c->dir, "test"), 0);
		if (c->o_direct)
			ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "o_direct", "true",
							    "test"), 0);
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, extra[0], extra[1], "test"),
				 0);
		fg_clear_error();
		ck_assert_int_eq(fg_tier_open(&t, "test", &h, opts, 0), -ENOSPC);
		ck_assert_msg(strstr(fg_last_error(), c->dir) && strstr(fg_last_error(), toobig) &&
			      strstr(fg_last_error(), "free"), "got \"%s\"", fg_last_error());
	}

	/* A fixed 1 MiB file: capacity is the size; fragmentation is its own ENOSPC;
	 * freed neighbours coalesce. */
	ck_assert_int_eq(open_tier_opts(&t, c, NULL, 0, fixed), 0);
	ck_assert_uint_eq(t.capacity, 1 * MiB);
	ck_assert_int_eq(fg_tier_alloc(&t, 256 * KiB, &a), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 256 * KiB, &b), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 256 * KiB, &d), 0);
	fg_tier_free(&t, &b);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&t, 512 * KiB, &b), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "no free range"));
	ck_assert_uint_eq(t.used, 512 * KiB);
	fg_tier_free(&t, &a);
	fg_tier_free(&t, &d);
	ck_assert_int_eq(fg_tier_alloc(&t, 1 * MiB, &a), 0);
	ck_assert_int_eq(fg_tier_write(&t, &a, 1 * MiB - 3, "abc", 3), 0);
	fg_tier_free(&t, &a);
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_posix_file_paths)
{
	const struct conf *c = &confs[_i];
	char path[PATH_MAX + 32], missing[PATH_MAX + 32];
	const char *named[] = { "file", path, NULL };
	struct fg_tier t;
	struct fg_region r;
	struct stat st;
	char buf[10];

	if (!is_posix_file(c))
		return;
	/* file = names a kept file (truncated at open). */
	snprintf(path, sizeof(path), "%s/named-%d.tier", c->dir, (int)getpid());
	ck_assert_int_eq(open_tier_opts(&t, c, NULL, 0, named), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 10, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, "0123456789", 10), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, buf, 10), 0);
	ck_assert_int_eq(memcmp(buf, "0123456789", 10), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(unlink(path), 0);

	/* A missing directory: the error names it. */
	snprintf(missing, sizeof(missing), "%s/no-such-dir", c->dir);
	{
		struct fg_plugin_handle h;
		void *opts;

		ck_assert_int_eq(fg_plugin_open_file(c->path, FG_PLUGIN_STORAGE, NULL, &h), 0);
		opts = fg_plugin_opts_new(h.plugin);
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "dir", missing, "test"), 0);
		ck_assert_int_eq(fg_tier_open(&t, "test", &h, opts, 0), -ENOENT);
		ck_assert_msg(strstr(fg_last_error(), missing) != NULL, "got \"%s\"",
			      fg_last_error());
	}
	/* The temporary tier files are unlinked at once: nothing is left behind. */
	ck_assert_int_eq(open_tier(&t, c, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 10, &r), 0);
	{
		char prefix[64];
		struct dirent *d;
		DIR *dp = opendir(c->dir);
		int found = 0;

		ck_assert_ptr_nonnull(dp);
		snprintf(prefix, sizeof(prefix), "fgcore-%d-", (int)getpid());
		while ((d = readdir(dp)))
			found += !strncmp(d->d_name, prefix, strlen(prefix));
		closedir(dp);
		ck_assert_msg(found == 0, "%d files %s/%s* left behind", found, c->dir, prefix);
	}
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
}
END_TEST

/* ---- pinned_host: mlock ---------------------------------------------------- */

/* Drop CAP_IPC_LOCK from this (forked) process, without libcap. */
static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	const unsigned w = CAP_IPC_LOCK / 32, bit = 1u << (CAP_IPC_LOCK % 32);

	if (syscall(SYS_capget, &h, d) != 0)
		return;
	d[w].effective &= ~bit;
	d[w].permitted &= ~bit;
	d[w].inheritable &= ~bit;
	if (syscall(SYS_capset, &h, d) != 0)
		fprintf(stderr, "capset: %s\n", strerror(errno));
}

START_TEST(test_mlock)
{
	const struct conf *c = &confs[_i];
	const char *extra[] = { "mlock", "true", "cuda_pinned", "false", NULL };
	struct rlimit rl = { 0, 0 };
	struct fg_tier t;
	struct fg_region r;
	char buf[100];
	int err;

	if (strcmp(c->name, "pinned_host"))
		return;
	/* No locked memory allowed: mlock fails unless this process may ignore
	 * the limit (CAP_IPC_LOCK, as root has), so drop that capability too. */
	ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	drop_ipc_lock();
	ck_assert_int_eq(open_tier_opts(&t, c, NULL, 0, extra), 0);
	ck_assert(t.info.flags & FG_STORAGE_PAGE_LOCKED);
	fg_clear_error();
	err = fg_tier_alloc(&t, 1 * MiB, &r);
	if (err) {
		ck_assert_int_eq(err, -ENOMEM);
		ck_assert_msg(strstr(fg_last_error(), "RLIMIT_MEMLOCK") &&
			      strstr(fg_last_error(), "ulimit -l"), "got \"%s\"", fg_last_error());
		ck_assert_uint_eq(t.used, 0);
	} else {
		fprintf(stderr, "%s: mlock succeeded with RLIMIT_MEMLOCK = 0 (privileged); "
			"its failure message is not checked\n", c->label);
		memset(buf, 7, sizeof(buf));
		ck_assert_int_eq(fg_tier_write(&t, &r, 1 * MiB - 100, buf, 100), 0);
		ck_assert_int_eq(memcmp((char *)r.addr + 1 * MiB - 100, buf, 100), 0);
		fg_tier_free(&t, &r);
	}
	fg_tier_close(&t);
}
END_TEST

/* ---- the plugin set -------------------------------------------------------- */

START_TEST(test_required_plugins)
{
	ck_assert_msg(load_failures[0] == '\0', "storage plugins that do not load: %s",
		      load_failures);
	ck_assert_msg(have_pinned_host, "pinned_host.so not found in FGCORE_PLUGIN_PATH=%s",
		      getenv("FGCORE_PLUGIN_PATH") ? getenv("FGCORE_PLUGIN_PATH") : "(unset)");
	ck_assert_msg(have_posix_file, "posix_file.so not found in FGCORE_PLUGIN_PATH=%s",
		      getenv("FGCORE_PLUGIN_PATH") ? getenv("FGCORE_PLUGIN_PATH") : "(unset)");
}
END_TEST

/* ---- setup in the parent ------------------------------------------------ */

static bool dir_is_tmpfs(const char *dir)
{
	struct statfs sf;

	return statfs(dir, &sf) == 0 && (unsigned long)sf.f_type == TMPFS_MAGIC_NUMBER;
}

static uint64_t dir_free(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Does dir accept O_DIRECT files? */
static bool dir_direct_ok(const char *dir, char *why, size_t n)
{
	char path[PATH_MAX];
	void *buf;
	int fd, err = 0;

	snprintf(path, sizeof(path), "%s/odirect-probe-XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0) {
		snprintf(why, n, "%s: %s", dir, strerror(errno));
		return false;
	}
	close(fd);
	fd = open(path, O_RDWR | O_DIRECT);
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
	}
	unlink(path);
	if (err)
		snprintf(why, n, "%s refuses O_DIRECT (%s)", dir, strerror(err));
	return err == 0;
}

static char *make_temp_dir(const char *base, char *out, size_t n)
{
	snprintf(out, n, "%s/fgcore-storage-XXXXXX", base);
	if (!mkdtemp(out)) {
		fprintf(stderr, "cannot create a temporary directory in %s: %s\n", base,
			strerror(errno));
		out[0] = '\0';
		return NULL;
	}
	return out;
}

/* A directory for the 5 GiB sparse region: not tmpfs (it would take RAM), and
 * with room to spare. */
static const char *pick_big_dir(const char *dir, char *why, size_t n)
{
	const uint64_t need = 5 * GiB + 2 * GiB;

	if (dir_is_tmpfs(dir)) {
		snprintf(why, n, "%s is tmpfs (a 5 GiB region would take RAM)", dir);
		return NULL;
	}
	if (dir_free(dir) < need) {
		snprintf(why, n, "%s has %" PRIu64 " MiB free, needs %" PRIu64 " MiB", dir,
			 dir_free(dir) / MiB, need / MiB);
		return NULL;
	}
	return dir;
}

static int collect(const char *path, void *user)
{
	struct fg_plugin_handle h;
	const struct fg_plugin *p;
	struct conf *c;
	size_t used = strlen(load_failures);
	char env[96];

	(void)user;
	if (fg_plugin_open_file(path, 0, NULL, &h) != 0) {
		/* Only storage plugins concern us, but an unloadable file may be one. */
		if (strstr(path, "/storage/"))
			snprintf(load_failures + used, sizeof(load_failures) - used, "%s%s",
				 used ? "; " : "", fg_last_error());
		else
			fprintf(stderr, "note: %s\n", fg_last_error());
		return 0;
	}
	p = h.plugin;
	if (p->kind != FG_PLUGIN_STORAGE) {
		fg_plugin_close(&h);
		return 0;
	}
	for (int pass = 0; pass < 2 && nconfs < MAX_CONFS; pass++) {
		bool direct = pass == 1;

		if (direct && !has_option(p, "o_direct"))
			break;
		if (direct && !direct_dir[0]) {
			fprintf(stderr, "%s[o_direct] skipped: %s\n", p->name, direct_why);
			break;
		}
		c = &confs[nconfs++];
		snprintf(c->label, sizeof(c->label), "%s%s", p->name, direct ? "[o_direct]" : "");
		snprintf(c->path, sizeof(c->path), "%s", path);
		snprintf(c->name, sizeof(c->name), "%s", p->name);
		c->o_direct = direct;
		c->dir = direct ? direct_dir : tmp_dir;
		/* The shim's variables must not leak in from outside. */
		plugin_env(c, "FAULT", env, sizeof(env));
		unsetenv(env);
		plugin_env(c, "DELAY_US", env, sizeof(env));
		unsetenv(env);
		c->big_dir = pick_big_dir(c->dir, c->big_why, sizeof(c->big_why));
		if (!c->big_dir && var_dir[0]) {
			/* /var/tmp is usually disk when TMPDIR is tmpfs */
			size_t l = strlen(c->big_why);

			c->big_dir = pick_big_dir(var_dir, c->big_why + l, sizeof(c->big_why) - l);
			if (c->big_dir && direct && !dir_direct_ok(var_dir, c->big_why + l,
								   sizeof(c->big_why) - l))
				c->big_dir = NULL;
		}
	}
	if (!strcmp(p->name, "pinned_host"))
		have_pinned_host = true;
	if (!strcmp(p->name, "posix_file"))
		have_posix_file = true;
	fg_plugin_close(&h);
	return 0;
}

Suite *storage_conformance_suite(void)
{
	Suite *s = suite_create("storage_conformance");
	TCase *tc = tcase_create("plugins");
	TCase *big = tcase_create("large");

	tcase_set_timeout(tc, 120);
	tcase_set_timeout(big, 300);
	tcase_add_test(tc, test_required_plugins);
	tcase_add_loop_test(tc, test_random_io, 0, nconfs);
	tcase_add_loop_test(tc, test_aligned_io, 0, nconfs);
	tcase_add_loop_test(tc, test_alloc_free_reuse, 0, nconfs);
	tcase_add_loop_test(tc, test_many_in_flight, 0, nconfs);
	tcase_add_loop_test(tc, test_close_in_flight, 0, nconfs);
	tcase_add_loop_test(tc, test_capacity_exceeded, 0, nconfs);
	tcase_add_loop_test(tc, test_bounds, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_injection, 0, nconfs);
	tcase_add_loop_test(tc, test_fault_spec_malformed, 0, nconfs);
	tcase_add_loop_test(tc, test_shim_every_plugin, 0, nconfs);
	tcase_add_loop_test(tc, test_size_reservation, 0, nconfs);
	tcase_add_loop_test(tc, test_posix_file_paths, 0, nconfs);
	tcase_add_loop_test(tc, test_mlock, 0, nconfs);
	tcase_add_loop_test(big, test_large_offset, 0, nconfs);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, big);
	return s;
}

int main(void)
{
	const char *base = getenv("TMPDIR");
	const char *seed_env = getenv("FGCORE_TEST_SEED");
	char why_tmp[128];
	SRunner *sr;
	int failed;

	if (seed_env && *seed_env)
		seed = strtoull(seed_env, NULL, 0);
	if (!base || !*base)
		base = "/tmp";
	/* The fault variable must not leak in from outside. */
	unsetenv("FGCORE_POSIX_FILE_FAULT");
	if (!make_temp_dir(base, tmp_dir, sizeof(tmp_dir)))
		return EXIT_FAILURE;
	if (dir_is_tmpfs(tmp_dir) || !dir_direct_ok(tmp_dir, direct_why, sizeof(direct_why)))
		make_temp_dir("/var/tmp", var_dir, sizeof(var_dir));
	if (dir_direct_ok(tmp_dir, direct_why, sizeof(direct_why))) {
		snprintf(direct_dir, sizeof(direct_dir), "%s", tmp_dir);
	} else if (var_dir[0] && dir_direct_ok(var_dir, why_tmp, sizeof(why_tmp))) {
		snprintf(direct_dir, sizeof(direct_dir), "%s", var_dir);
	} else {
		size_t l = strlen(direct_why);

		snprintf(direct_why + l, sizeof(direct_why) - l, "; %s",
			 var_dir[0] ? why_tmp : "no directory under /var/tmp");
	}
	fg_plugin_foreach(collect, NULL);

	sr = srunner_create(storage_conformance_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "seed %" PRIu64 " (set FGCORE_TEST_SEED to change it)\n", seed);
	if (var_dir[0])
		rmdir(var_dir);
	rmdir(tmp_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
