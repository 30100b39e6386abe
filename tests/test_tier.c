/* tests/test_tier.c - the core's tier wrapper: accounting, capacity caps, the
 * -ENOSPC message, bounds checks, the default synchronous submit/reap, and the
 * fault-injection shim stacked over a plugin without submit/reap.
 * A fake in-process storage plugin stands in for a real one. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fgcore/codec.h>
#include "core/tier/tier.h"
#include "core/util/error.h"

#define GiB ((uint64_t)1024 * 1024 * 1024)

/* ---- a fake memory tier ------------------------------------------------ */

struct fake {
	uint64_t capacity;
	int reads, writes, allocs, frees, closes, opens;
	int fail_open;
	uint64_t write_ns; /* CLOCK_MONOTONIC of the last write */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct fake fake_state;
static int fake_opts_seen;

/* Sizes above this are accounted but get no memory (address-less regions). */
#define FAKE_REAL_MAX (1u << 20)
#define FAKE_FAIL_SIZE 777

static int fake_open(const struct fg_host *host, const void *opts, void **ctx,
		     struct fg_storage_info *info)
{
	fake_state.opens++;
	if (opts)
		fake_opts_seen = *(const int *)opts;
	if (fake_state.fail_open) {
		fg_error(host, "fake: refusing to open");
		return -EIO;
	}
	*ctx = &fake_state;
	info->capacity = fake_state.capacity;
	info->flags = FG_STORAGE_ADDRESSABLE | FG_STORAGE_HOST_MEMORY;
	info->alignment = 1;
	return 0;
}

static void fake_close(void *ctx)
{
	((struct fake *)ctx)->closes++;
}

static int fake_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct fake *f = ctx;

	if (size == FAKE_FAIL_SIZE) {
		fg_error(fg_core_host(), "fake: no memory for 777 bytes");
		return -ENOMEM;
	}
	__atomic_add_fetch(&f->allocs, 1, __ATOMIC_SEQ_CST);
	r->size = size;
	r->addr = size <= FAKE_REAL_MAX ? calloc(1, size ? size : 1) : NULL;
	r->handle = 42;
	return 0;
}

static void fake_free(void *ctx, struct fg_region *r)
{
	struct fake *f = ctx;

	__atomic_add_fetch(&f->frees, 1, __ATOMIC_SEQ_CST);
	free(r->addr);
	r->addr = NULL;
}

static int fake_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	((struct fake *)ctx)->reads++;
	memcpy(dst, (char *)r->addr + off, len);
	return 0;
}

static int fake_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
		      size_t len)
{
	((struct fake *)ctx)->writes++;
	((struct fake *)ctx)->write_ns = now_ns();
	if (off == 13)  /* the fake's "broken sector" */
		return -EIO;
	memcpy((char *)r->addr + off, src, len);
	return 0;
}

static const struct fg_storage_ops fake_ops = {
	.open	= fake_open,
	.close	= fake_close,
	.alloc	= fake_alloc,
	.free	= fake_free,
	.read	= fake_read,
	.write	= fake_write,
};

static const struct fg_plugin fake_plugin = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "fake_mem",
	.description	= "test double",
	.ops		= &fake_ops,
};

static const struct fg_plugin fake_codec_plugin = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "fake_codec",
	.ops		= &fake_ops,
};

static int open_fake(struct fg_tier *t, const struct fg_plugin *p, uint64_t phys, uint64_t cap)
{
	struct fg_plugin_handle h;

	memset(&fake_state, 0, sizeof(fake_state));
	fake_state.capacity = phys;
	memset(&h, 0, sizeof(h));
	h.plugin = p;
	strcpy(h.path, "/fake/fake_mem.so");
	return fg_tier_open(t, "host", &h, NULL, cap);
}

/* ---- fg_format_bytes --------------------------------------------------- */

START_TEST(test_format_bytes)
{
	char b[32];

	ck_assert_str_eq(fg_format_bytes(0, b, sizeof(b)), "0 B");
	ck_assert_str_eq(fg_format_bytes(1, b, sizeof(b)), "1 B");
	ck_assert_str_eq(fg_format_bytes(1023, b, sizeof(b)), "1023 B");
	ck_assert_str_eq(fg_format_bytes(1024, b, sizeof(b)), "1.00 KiB");
	ck_assert_str_eq(fg_format_bytes(1536, b, sizeof(b)), "1.50 KiB");
	ck_assert_str_eq(fg_format_bytes(1024 * 1024 - 1, b, sizeof(b)), "1.00 MiB");
	ck_assert_str_eq(fg_format_bytes(2 * GiB, b, sizeof(b)), "2.00 GiB");
	ck_assert_str_eq(fg_format_bytes(16 * GiB, b, sizeof(b)), "16.00 GiB");
	ck_assert_str_eq(fg_format_bytes(3 * GiB * 1024 / 2, b, sizeof(b)), "1.50 TiB");
	ck_assert_str_eq(fg_format_bytes(UINT64_MAX, b, sizeof(b)), "16.00 EiB");
	/* Truncates instead of overflowing a short buffer. */
	ck_assert_str_eq(fg_format_bytes(16 * GiB, b, 5), "16.0");
}
END_TEST

/* ---- capacity and accounting ------------------------------------------- */

START_TEST(test_capacity_cap)
{
	struct fg_tier t;

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1000, 0), 0);
	ck_assert_uint_eq(t.capacity, 1000);
	fg_tier_close(&t);
	ck_assert_int_eq(fake_state.closes, 1);

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1000, 600), 0);
	ck_assert_uint_eq(t.capacity, 600);
	fg_tier_close(&t);

	/* A cap above the physical capacity does not raise it. */
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1000, 5000), 0);
	ck_assert_uint_eq(t.capacity, 1000);
	ck_assert_str_eq(t.role, "host");
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_accounting)
{
	struct fg_tier t;
	struct fg_region a, b, c, d;

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 600), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 100, &a), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 200, &b), 0);
	ck_assert_uint_eq(t.used, 300);
	ck_assert_uint_eq(t.peak, 300);
	ck_assert_uint_eq(a.size, 100);
	ck_assert_ptr_nonnull(a.addr);

	fg_tier_free(&t, &a);
	ck_assert_uint_eq(t.used, 200);
	ck_assert_uint_eq(t.peak, 300);
	ck_assert_ptr_null(a.addr);
	ck_assert_uint_eq(a.size, 0);

	ck_assert_int_eq(fg_tier_alloc(&t, 400, &c), 0);
	ck_assert_uint_eq(t.used, 600);
	ck_assert_uint_eq(t.peak, 600);

	/* Full: one more byte is refused, and nothing changes. */
	ck_assert_int_eq(fg_tier_alloc(&t, 1, &d), -ENOSPC);
	ck_assert_uint_eq(t.used, 600);
	ck_assert_uint_eq(t.peak, 600);
	ck_assert_int_eq(fake_state.allocs, 3);

	fg_tier_free(&t, &b);
	fg_tier_free(&t, &c);
	ck_assert_uint_eq(t.used, 0);
	ck_assert_uint_eq(t.peak, 600);

	/* A zero-byte region is fine and costs nothing. */
	ck_assert_int_eq(fg_tier_alloc(&t, 0, &d), 0);
	ck_assert_uint_eq(t.used, 0);
	fg_tier_free(&t, &d);
	ck_assert_int_eq(fake_state.frees, 4);
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_plugin_alloc_failure)
{
	struct fg_tier t;
	struct fg_region a, b;

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 100, &a), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&t, FAKE_FAIL_SIZE, &b), -ENOMEM);
	/* The plugin's message is kept; the reservation is given back. */
	ck_assert_str_eq(fg_last_error(), "fake: no memory for 777 bytes");
	ck_assert_uint_eq(t.used, 100);
	ck_assert_uint_eq(t.peak, 100);
	fg_tier_free(&t, &a);
	fg_tier_close(&t);
}
END_TEST

START_TEST(test_enospc_message)
{
	struct fg_tier t;
	struct fg_region big, more;
	uint64_t used = 15 * GiB + GiB / 5; /* 15.20 GiB */

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 64 * GiB, 16 * GiB), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, used, &big), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&t, 2 * GiB, &more), -ENOSPC);
	ck_assert_str_eq(fg_last_error(),
			 "tier host (fake_mem): cannot allocate 2.00 GiB: 15.20 GiB of 16.00 GiB "
			 "in use; raise [tier.host] capacity or give this tier a smaller share");

	ck_assert_int_eq(fg_tier_alloc_hint(&t, 2 * GiB, &more, "largest batch that fits: 24"),
			 -ENOSPC);
	ck_assert_str_eq(fg_last_error(),
			 "tier host (fake_mem): cannot allocate 2.00 GiB: 15.20 GiB of 16.00 GiB "
			 "in use; raise [tier.host] capacity or give this tier a smaller share; "
			 "largest batch that fits: 24");

	/* Larger than the whole tier, and a size that would overflow used + size. */
	ck_assert_int_eq(fg_tier_alloc(&t, UINT64_MAX, &more), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "cannot allocate 16.00 EiB"));
	ck_assert_uint_eq(t.used, used);

	/* What is left still fits exactly. */
	ck_assert_int_eq(fg_tier_alloc(&t, 16 * GiB - used, &more), 0);
	ck_assert_uint_eq(t.used, 16 * GiB);
	fg_tier_free(&t, &more);
	fg_tier_free(&t, &big);
	ck_assert_uint_eq(t.used, 0);
	ck_assert_uint_eq(t.peak, 16 * GiB);
	fg_tier_close(&t);
}
END_TEST

struct churn_arg {
	struct fg_tier *t;
	int failures;
};

static void *churn(void *p)
{
	struct churn_arg *a = p;
	struct fg_region r[8];

	for (int i = 0; i < 2000; i++) {
		int k = i % 8;

		if (i >= 8)
			fg_tier_free(a->t, &r[k]);
		if (fg_tier_alloc(a->t, 100 + (uint64_t)k, &r[k]) != 0) {
			a->failures++;
			memset(&r[k], 0, sizeof(r[k]));
		}
	}
	for (int k = 0; k < 8; k++)
		fg_tier_free(a->t, &r[k]);
	return NULL;
}

START_TEST(test_accounting_threads)
{
	struct fg_tier t;
	pthread_t th[4];
	struct churn_arg args[4];

	/* Room for everything four threads hold at once: nothing may fail. */
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 4 * 8 * 107), 0);
	for (int i = 0; i < 4; i++) {
		args[i].t = &t;
		args[i].failures = 0;
		ck_assert_int_eq(pthread_create(&th[i], NULL, churn, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(args[i].failures, 0);
	}
	ck_assert_uint_eq(t.used, 0);
	ck_assert_uint_le(t.peak, 4 * 8 * 107);
	ck_assert_uint_ge(t.peak, 8 * 100);
	fg_tier_close(&t);
}
END_TEST

/* ---- bounds ------------------------------------------------------------ */

START_TEST(test_bounds)
{
	struct fg_tier t;
	struct fg_region r;
	char buf[64] = "0123456789";

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 32, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 22, buf, 10), 0);
	ck_assert_int_eq(fg_tier_read(&t, &r, 0, buf, 32), 0);
	ck_assert_int_eq(fake_state.reads, 1);

	fg_clear_error();
	ck_assert_int_eq(fg_tier_read(&t, &r, 1, buf, 32), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "tier host (fake_mem): read of 32 bytes at offset 1 is "
			 "outside the 32-byte region");
	ck_assert_int_eq(fg_tier_write(&t, &r, 23, buf, 10), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, &r, 33, buf, 0), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, &r, UINT64_MAX, buf, 2), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, &r, 8, NULL, 2), -EINVAL);
	ck_assert_int_eq(fg_tier_read(&t, NULL, 0, buf, 2), -EINVAL);
	/* None of the refused calls reached the plugin. */
	ck_assert_int_eq(fake_state.reads, 1);
	ck_assert_int_eq(fake_state.writes, 1);
	/* Empty requests at the very end are fine. */
	ck_assert_int_eq(fg_tier_read(&t, &r, 32, buf, 0), 0);
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
}
END_TEST

/* ---- default submit / reap --------------------------------------------- */

START_TEST(test_default_submit_reap)
{
	struct fg_tier t;
	struct fg_region r;
	struct fg_io io[3], bad;
	struct fg_io *ios[3], *done[8];
	char out[8] = "abcdefg", in1[4] = { 0 }, in2[3] = { 0 };

	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 64, &r), 0);
	memset(io, 0, sizeof(io));
	io[0] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 3, .buf = out,
				.len = 7, .user = (void *)1, .result = 99 };
	io[1] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 3, .buf = in1,
				.len = 4, .user = (void *)2, .result = 99 };
	io[2] = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 7, .buf = in2,
				.len = 3, .user = (void *)3, .result = 99 };
	for (int i = 0; i < 3; i++)
		ios[i] = &io[i];
	ck_assert_int_eq(fg_tier_submit(&t, ios, 3), 0);

	/* min above what exists must not block: it returns what is there. */
	ck_assert_int_eq(fg_tier_reap(&t, done, 8, 8), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_ptr_eq(done[i], &io[i]); /* FIFO */
		ck_assert_int_eq(done[i]->result, 0);
	}
	ck_assert_int_eq(memcmp(in1, "abcd", 4), 0);
	ck_assert_int_eq(memcmp(in2, "efg", 3), 0);
	ck_assert_int_eq(fg_tier_reap(&t, done, 1, 8), 0);

	/* A batch with one bad request is refused whole; nothing is performed. */
	bad = (struct fg_io){ .op = FG_IO_READ, .region = &r, .offset = 60, .buf = in1,
			      .len = 5 };
	ios[1] = &bad;
	fake_state.reads = fake_state.writes = 0;
	ck_assert_int_eq(fg_tier_submit(&t, ios, 3), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "outside the 64-byte region"));
	ck_assert_int_eq(fake_state.reads + fake_state.writes, 0);
	ck_assert_int_eq(fg_tier_reap(&t, done, 0, 8), 0);
	ios[1] = NULL;
	ck_assert_int_eq(fg_tier_submit(&t, ios, 3), -EINVAL);
	bad.op = (enum fg_io_op)7;
	bad.offset = 0;
	ios[1] = &bad;
	ck_assert_int_eq(fg_tier_submit(&t, ios, 3), -EINVAL);

	/* A failing request completes with its error; max limits each reap. */
	io[0].offset = 13;
	ios[1] = &io[1];
	ck_assert_int_eq(fg_tier_submit(&t, ios, 3), 0);
	ck_assert_int_eq(fg_tier_reap(&t, done, 1, 2), 2);
	ck_assert_int_eq(done[0]->result, -EIO);
	ck_assert_ptr_eq(done[0]->user, (void *)1);
	ck_assert_int_eq(done[1]->result, 0);
	ck_assert_int_eq(fg_tier_reap(&t, done, 5, 1), 1);
	ck_assert_ptr_eq(done[0], &io[2]);
	ck_assert_int_eq(fg_tier_reap(&t, done, 0, 0), 0);

	/* Many rounds grow and wrap the ring without losing a request. */
	for (int round = 0; round < 50; round++) {
		struct fg_io many[100];
		struct fg_io *mp[100], *got[100];
		int seen[100] = { 0 }, n = 0;

		for (int i = 0; i < 100; i++) {
			many[i] = (struct fg_io){ .op = FG_IO_READ, .region = &r,
						  .offset = (uint64_t)i % 60, .buf = in1,
						  .len = 4, .user = (void *)(intptr_t)i,
						  .result = 99 };
			mp[i] = &many[i];
		}
		ck_assert_int_eq(fg_tier_submit(&t, mp, 37), 0);
		ck_assert_int_eq(fg_tier_submit(&t, mp + 37, 63), 0);
		while (n < 100) {
			int k = fg_tier_reap(&t, got, 1, 1 + (unsigned)round % 17);

			ck_assert_int_gt(k, 0);
			for (int i = 0; i < k; i++) {
				ck_assert_int_eq(got[i]->result, 0);
				seen[(intptr_t)got[i]->user]++;
			}
			n += k;
		}
		for (int i = 0; i < 100; i++)
			ck_assert_int_eq(seen[i], 1);
	}
	fg_tier_free(&t, &r);
	fg_tier_close(&t);
}
END_TEST

/* ---- open ---------------------------------------------------------------- */

START_TEST(test_open_refusals)
{
	struct fg_tier t;
	int *opts;

	ck_assert_int_eq(open_fake(&t, &fake_codec_plugin, 1000, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "not a storage plugin"));
	ck_assert_int_eq(fake_state.closes, 0);

	/* The plugin's open fails: its message survives, the options are freed
	 * (AddressSanitizer would report a leak otherwise). */
	memset(&fake_state, 0, sizeof(fake_state));
	fake_state.fail_open = 1;
	{
		struct fg_plugin_handle h = { .plugin = &fake_plugin };

		opts = malloc(sizeof(*opts));
		*opts = 5;
		ck_assert_int_eq(fg_tier_open(&t, "disk", &h, opts, 0), -EIO);
		ck_assert_str_eq(fg_last_error(), "fake: refusing to open");
		ck_assert_ptr_null(h.plugin);
	}
	ck_assert_int_eq(fake_opts_seen, 5);

	/* Options reach the plugin and are owned (freed) by the tier. */
	memset(&fake_state, 0, sizeof(fake_state));
	{
		struct fg_plugin_handle h = { .plugin = &fake_plugin };

		opts = malloc(sizeof(*opts));
		*opts = 9;
		ck_assert_int_eq(fg_tier_open(&t, "disk", &h, opts, 0), 0);
		ck_assert_ptr_eq(t.opts, opts);
		ck_assert_int_eq(fake_opts_seen, 9);
		fg_tier_close(&t);
	}
	/* Closing twice is harmless. */
	fg_tier_close(&t);
	ck_assert_int_eq(fake_state.closes, 1);
}
END_TEST

/* ---- the fault-injection shim over a plugin without submit/reap ------------ */

/* Submit one request and reap it; its result. */
static int io_one(struct fg_tier *t, enum fg_io_op op, const struct fg_region *r, uint64_t off,
		  void *buf, size_t len)
{
	struct fg_io io = { .op = op, .region = r, .offset = off, .buf = buf, .len = len,
			    .result = 12345 };
	struct fg_io *p = &io, *done[2];

	ck_assert_int_eq(fg_tier_submit(t, &p, 1), 0);
	ck_assert_int_eq(fg_tier_reap(t, done, 1, 2), 1);
	ck_assert_ptr_eq(done[0], &io);
	return io.result;
}

START_TEST(test_shim_faults)
{
	struct fg_tier t;
	struct fg_region r;
	char out[16] = "0123456789abcdef", in[16];

	/* Writes: #2 (async) fails; reads: #1 is short (two reads reach the
	 * plugin), #3 fails through the synchronous path. */
	ck_assert_int_eq(setenv("FGCORE_FAKE_MEM_FAULT", "write:EIO:2,read:SHORT:1,"
			       "read:ENOSPC:3", 1), 0);
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_ptr_ne(t.ops, fake_plugin.ops);
	ck_assert_int_eq(fg_tier_alloc(&t, 64, &r), 0);
	ck_assert_int_eq(fg_tier_write(&t, &r, 0, out, 16), 0);
	ck_assert_int_eq(fake_state.writes, 1);
	ck_assert_int_eq(io_one(&t, FG_IO_WRITE, &r, 20, out, 16), -EIO);
	ck_assert_int_eq(fake_state.writes, 1); /* it never reached the plugin */
	ck_assert_int_eq(io_one(&t, FG_IO_WRITE, &r, 20, out, 16), 0);
	ck_assert_int_eq(fake_state.writes, 2);

	memset(in, 0, sizeof(in));
	ck_assert_int_eq(io_one(&t, FG_IO_READ, &r, 0, in, 16), 0);
	ck_assert_int_eq(fake_state.reads, 2);
	ck_assert_int_eq(memcmp(in, out, 16), 0);
	memset(in, 0, sizeof(in));
	ck_assert_int_eq(fg_tier_read(&t, &r, 20, in, 16), 0);
	ck_assert_int_eq(memcmp(in, out, 16), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_read(&t, &r, 5, in, 3), -ENOSPC);
	ck_assert_int_eq(fake_state.reads, 3);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "tier host (fake_mem): read of 3 bytes at "
				     "offset 5 failed: No space left on device (injected by "
				     "FGCORE_FAKE_MEM_FAULT)"));
	ck_assert_int_eq(fg_tier_read(&t, &r, 5, in, 3), 0);
	/* Accounting is the tier's, under the shim as without it. */
	ck_assert_uint_eq(t.used, 64);
	fg_tier_free(&t, &r);
	ck_assert_uint_eq(t.used, 0);
	fg_tier_close(&t);
	ck_assert_int_eq(fake_state.closes, 1);

	/* A malformed value refuses the tier before the plugin opens. */
	ck_assert_int_eq(setenv("FGCORE_FAKE_MEM_FAULT", "read:EIO", 1), 0);
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "FGCORE_FAKE_MEM_FAULT=\"read:EIO\""));
	ck_assert_int_eq(fake_state.opens, 0);
	/* An empty value is no value: no shim. */
	ck_assert_int_eq(setenv("FGCORE_FAKE_MEM_FAULT", "", 1), 0);
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_ptr_eq(t.ops, fake_plugin.ops);
	fg_tier_close(&t);
	unsetenv("FGCORE_FAKE_MEM_FAULT");
}
END_TEST

START_TEST(test_shim_delay)
{
	const uint64_t delay_ns = 50 * 1000000u;
	struct fg_tier t;
	struct fg_region r;
	struct fg_io io[5], *ios[5], *done[8];
	char out[5][8], in[8];
	uint64_t t0;
	void *mem;
	int n = 0;

	ck_assert_int_eq(setenv("FGCORE_FAKE_MEM_DELAY_US", "1000001", 1), 0);
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "FGCORE_FAKE_MEM_DELAY_US"));
	ck_assert_int_eq(setenv("FGCORE_FAKE_MEM_DELAY_US", "50000", 1), 0);
	ck_assert_int_eq(open_fake(&t, &fake_plugin, 1 << 20, 0), 0);
	ck_assert_int_eq(fg_tier_alloc(&t, 64, &r), 0);
	for (int i = 0; i < 5; i++) {
		memset(out[i], 'a' + i, 8);
		io[i] = (struct fg_io){ .op = FG_IO_WRITE, .region = &r, .offset = 8u * i,
					.buf = out[i], .len = 8, .result = 12345 };
		ios[i] = &io[i];
	}
	t0 = now_ns();
	ck_assert_int_eq(fg_tier_submit(&t, ios, 5), 0);
	/* Reap waits for what is delayed. */
	while (n < 5) {
		int k = fg_tier_reap(&t, done, 5, 8);

		ck_assert_int_gt(k, 0);
		for (int i = 0; i < k; i++)
			ck_assert_int_eq(done[i]->result, 0);
		n += k;
	}
	ck_assert_int_eq(fake_state.writes, 5);
	/* The plugin got the last one no earlier than the delay after submit. */
	ck_assert_uint_ge(fake_state.write_ns - t0, delay_ns);
	ck_assert_int_eq(fg_tier_reap(&t, done, 1, 8), 0);
	/* Synchronous calls are not delayed, and see what the writes wrote. */
	ck_assert_int_eq(fg_tier_read(&t, &r, 24, in, 8), 0);
	ck_assert_int_eq(memcmp(in, out[3], 8), 0);
	/* Closing with requests still delayed hands them on first (the region
	 * stays until then: it is freed by hand below). */
	mem = r.addr;
	ck_assert_int_eq(fg_tier_submit(&t, ios, 2), 0);
	fg_tier_close(&t);
	ck_assert_int_eq(fake_state.writes, 7);
	free(mem);
	unsetenv("FGCORE_FAKE_MEM_DELAY_US");
}
END_TEST

Suite *tier_suite(void)
{
	Suite *s = suite_create("tier");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_format_bytes);
	tcase_add_test(tc, test_capacity_cap);
	tcase_add_test(tc, test_accounting);
	tcase_add_test(tc, test_plugin_alloc_failure);
	tcase_add_test(tc, test_enospc_message);
	tcase_add_test(tc, test_accounting_threads);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_default_submit_reap);
	tcase_add_test(tc, test_open_refusals);
	tcase_add_test(tc, test_shim_faults);
	tcase_add_test(tc, test_shim_delay);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tier_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
