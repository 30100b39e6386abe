/* tests/test_cuda_mem.c - the cuda_mem storage tier on a real GPU: pool
 * sub-allocation (alignment, first-fit reuse, coalescing, fragmentation),
 * the capacity error, synchronous round trips at odd offsets and lengths,
 * and many asynchronous requests with page-locked and pageable buffers.
 * Exits 77 without a GPU.  Each test opens the tier (a 64 MiB pool) inside
 * its forked child. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tier/tier.h"
#include "tests/gpu_common.h"

#define MiB ((uint64_t)1024 * 1024)
#define POOL (64 * MiB)

static struct fg_tier tier;

static void open_tier(struct fg_tier *t, const char *name, const char *key, const char *val)
{
	struct fg_plugin_handle ph;
	void *opts;

	ck_assert_msg(fg_plugin_load(name, FG_PLUGIN_STORAGE, &ph) == 0, "%s", fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_ptr_nonnull(opts);
	if (key)
		ck_assert_msg(fg_plugin_opts_set(ph.plugin, opts, key, val, "test") == 0, "%s",
			      fg_last_error());
	ck_assert_msg(fg_tier_open(t, "compute", &ph, opts, 0) == 0, "%s", fg_last_error());
}

static void setup(void)
{
	open_tier(&tier, "cuda_mem", "pool", "64M");
	ck_assert_uint_eq(tier.capacity, POOL);
	ck_assert(tier.info.flags & FG_STORAGE_ADDRESSABLE);
	ck_assert(tier.info.flags & FG_STORAGE_DEVICE_MEMORY);
	ck_assert(!(tier.info.flags & FG_STORAGE_HOST_MEMORY));
}

static void teardown(void)
{
	fg_tier_close(&tier);
}

static int overlaps(const struct fg_region *a, const struct fg_region *b)
{
	uintptr_t a0 = (uintptr_t)a->addr, b0 = (uintptr_t)b->addr;
	uint64_t an = a->size ? a->size : 1, bn = b->size ? b->size : 1;

	return a0 < b0 + bn && b0 < a0 + an;
}

START_TEST(test_alloc_align_reuse)
{
	static const uint64_t sizes[] = { 1000, 5000, 1, 0, 256, 257, 3 * MiB + 7 };
	struct fg_region r[7], e;
	int n = (int)(sizeof(sizes) / sizeof(sizes[0]));

	for (int i = 0; i < n; i++) {
		ck_assert_msg(fg_tier_alloc(&tier, sizes[i], &r[i]) == 0, "%s", fg_last_error());
		ck_assert_ptr_nonnull(r[i].addr);
		ck_assert_msg(((uintptr_t)r[i].addr & 255) == 0, "region %d at %p is not 256-byte "
			      "aligned", i, r[i].addr);
		for (int j = 0; j < i; j++)
			ck_assert_msg(!overlaps(&r[i], &r[j]), "regions %d and %d overlap", i, j);
	}
	/* First fit: a smaller block lands in the hole the second region left. */
	void *hole = r[1].addr;
	fg_tier_free(&tier, &r[1]);
	ck_assert_int_eq(fg_tier_alloc(&tier, 4000, &e), 0);
	ck_assert_ptr_eq(e.addr, hole);
	fg_tier_free(&tier, &e);
	for (int i = 0; i < n; i++)
		if (i != 1)
			fg_tier_free(&tier, &r[i]);
	ck_assert_uint_eq(tier.used, 0);
	/* Everything coalesced back: the whole pool is one block again. */
	ck_assert_msg(fg_tier_alloc(&tier, POOL, &e) == 0, "%s", fg_last_error());
	fg_tier_free(&tier, &e);
}
END_TEST

START_TEST(test_fragmentation_and_capacity)
{
	struct fg_region r[64], big;
	const char *err;

	/* The tier's own capacity check. */
	ck_assert_int_eq(fg_tier_alloc(&tier, POOL + 1, &big), -ENOSPC);
	/* Fill the pool with 1 MiB blocks, free every other one: 32 MiB free but
	 * no 2 MiB hole, which only the plugin can tell. */
	for (int i = 0; i < 64; i++)
		ck_assert_msg(fg_tier_alloc(&tier, MiB, &r[i]) == 0, "block %d: %s", i,
			      fg_last_error());
	ck_assert_int_eq(fg_tier_alloc(&tier, 1, &big), -ENOSPC);
	for (int i = 0; i < 64; i += 2)
		fg_tier_free(&tier, &r[i]);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_alloc(&tier, 2 * MiB, &big), -ENOSPC);
	err = fg_last_error();
	ck_assert_msg(strstr(err, "cuda_mem") && strstr(err, "largest free block"),
		      "unexpected message: %s", err);
	/* Freeing the odd blocks too merges every neighbour: 64 MiB in one piece. */
	for (int i = 1; i < 64; i += 2)
		fg_tier_free(&tier, &r[i]);
	ck_assert_msg(fg_tier_alloc(&tier, POOL, &big) == 0, "%s", fg_last_error());
	fg_tier_free(&tier, &big);
	/* Out-of-order frees coalesce both ways too. */
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(fg_tier_alloc(&tier, 8 * MiB, &r[i]), 0);
	static const int order[] = { 3, 5, 4, 0, 7, 1, 6, 2 };
	for (int i = 0; i < 8; i++)
		fg_tier_free(&tier, &r[order[i]]);
	ck_assert_msg(fg_tier_alloc(&tier, POOL, &big) == 0, "%s", fg_last_error());
	fg_tier_free(&tier, &big);
}
END_TEST

START_TEST(test_sync_round_trips)
{
	const size_t n = 1 << 20;
	uint8_t *shadow = malloc(n), *buf = malloc(n + 64), *back = malloc(n + 64);
	struct fg_region r;

	ck_assert(shadow && buf && back);
	gpu_seed(11);
	ck_assert_int_eq(fg_tier_alloc(&tier, n, &r), 0);
	for (size_t i = 0; i < n; i++)
		shadow[i] = (uint8_t)gpu_next();
	ck_assert_int_eq(fg_tier_write(&tier, &r, 0, shadow, n), 0);
	for (int it = 0; it < 300; it++) {
		size_t off = (size_t)(gpu_next() % n), len = (size_t)(gpu_next() % (n - off + 1));
		size_t mis = (size_t)(gpu_next() % 17); /* unaligned host buffers */

		if (it % 3 == 0)
			len %= 4099;
		if (gpu_next() & 1) {
			for (size_t i = 0; i < len; i++)
				buf[mis + i] = (uint8_t)gpu_next();
			ck_assert_int_eq(fg_tier_write(&tier, &r, off, buf + mis, len), 0);
			memcpy(shadow + off, buf + mis, len);
		} else {
			ck_assert_int_eq(fg_tier_read(&tier, &r, off, back + mis, len), 0);
			ck_assert_msg(memcmp(back + mis, shadow + off, len) == 0,
				      "read of %zu bytes at %zu differs", len, off);
		}
	}
	ck_assert_int_eq(fg_tier_read(&tier, &r, 0, back, n), 0);
	ck_assert(memcmp(back, shadow, n) == 0);
	/* Past the end: refused, nothing copied. */
	ck_assert_int_eq(fg_tier_read(&tier, &r, n - 10, back, 11), -EINVAL);
	ck_assert_int_eq(fg_tier_write(&tier, &r, n + 1, buf, 0), -EINVAL);
	fg_tier_free(&tier, &r);
	free(shadow);
	free(buf);
	free(back);
}
END_TEST

/* 256 requests in flight, half from page-locked buffers (the pinned_host
 * tier), half from malloc; every request completes exactly once. */
START_TEST(test_async_many)
{
	enum { NREG = 16, NIO = 256, CHUNK = 65536 };
	struct fg_tier host;
	struct fg_region dev[NREG], pinned;
	struct fg_io ios[NIO], *ptr[NIO], *done[NIO];
	uint8_t *pageable = malloc((size_t)NIO * CHUNK), *src;
	int seen[NIO];
	int got = 0;

	ck_assert_ptr_nonnull(pageable);
	open_tier(&host, "pinned_host", NULL, NULL);
	ck_assert_int_eq(fg_tier_alloc(&host, (uint64_t)NIO * CHUNK, &pinned), 0);
	for (int i = 0; i < NREG; i++)
		ck_assert_int_eq(fg_tier_alloc(&tier, (uint64_t)(NIO / NREG) * CHUNK + 333, &dev[i]),
				 0);
	gpu_seed(12);
	/* Writes: request i fills chunk i % 16 of region i / 16 (odd offset 333 - 7 * (i % 2)). */
	for (int i = 0; i < NIO; i++) {
		src = (i % 2 ? pageable : (uint8_t *)pinned.addr) + (size_t)i * CHUNK;
		for (int j = 0; j < CHUNK; j++)
			src[j] = (uint8_t)gpu_next();
		ios[i] = (struct fg_io){ .op = FG_IO_WRITE, .region = &dev[i / (NIO / NREG)],
					 .offset = (uint64_t)(i % (NIO / NREG)) * CHUNK + 333 -
						   7 * (uint64_t)(i % 2),
					 .buf = src, .len = CHUNK - 11, .user = &seen[i],
					 .result = 1 };
		ptr[i] = &ios[i];
	}
	memset(seen, 0, sizeof(seen));
	ck_assert_int_eq(fg_tier_submit(&tier, ptr, NIO / 2), 0);
	ck_assert_int_eq(fg_tier_submit(&tier, ptr + NIO / 2, NIO / 2), 0);
	while (got < NIO) {
		int k = fg_tier_reap(&tier, done, got < NIO - 7 ? 7 : (unsigned)(NIO - got), NIO);

		ck_assert_msg(k > 0, "reap: %d: %s", k, fg_last_error());
		for (int j = 0; j < k; j++) {
			ck_assert_int_eq(done[j]->result, 0);
			(*(int *)done[j]->user)++;
		}
		got += k;
	}
	for (int i = 0; i < NIO; i++)
		ck_assert_msg(seen[i] == 1, "write %d completed %d times", i, seen[i]);
	/* Nothing left in flight: a non-blocking reap returns 0. */
	ck_assert_int_eq(fg_tier_reap(&tier, done, 0, NIO), 0);

	/* Reads back into the other kind of buffer, checked against the source. */
	uint8_t *back = malloc((size_t)NIO * CHUNK);
	struct fg_region pinned2;

	ck_assert_ptr_nonnull(back);
	ck_assert_int_eq(fg_tier_alloc(&host, (uint64_t)NIO * CHUNK, &pinned2), 0);
	for (int i = 0; i < NIO; i++) {
		ios[i].op = FG_IO_READ;
		ios[i].buf = (i % 2 ? (uint8_t *)pinned2.addr : back) + (size_t)i * CHUNK;
		ios[i].result = 1;
	}
	memset(seen, 0, sizeof(seen));
	ck_assert_int_eq(fg_tier_submit(&tier, ptr, NIO), 0);
	for (got = 0; got < NIO;) {
		int k = fg_tier_reap(&tier, done, 1, NIO);

		ck_assert_msg(k > 0, "reap: %d: %s", k, fg_last_error());
		for (int j = 0; j < k; j++) {
			ck_assert_int_eq(done[j]->result, 0);
			(*(int *)done[j]->user)++;
		}
		got += k;
	}
	for (int i = 0; i < NIO; i++) {
		const uint8_t *want = (i % 2 ? pageable : (uint8_t *)pinned.addr) + (size_t)i * CHUNK;

		ck_assert_msg(seen[i] == 1, "read %d completed %d times", i, seen[i]);
		ck_assert_msg(memcmp(ios[i].buf, want, CHUNK - 11) == 0, "request %d: data differs", i);
	}
	/* A request past a region's end is refused before anything is queued. */
	struct fg_io bad = { .op = FG_IO_READ, .region = &dev[0], .offset = dev[0].size - 1,
			     .buf = back, .len = 2 };
	struct fg_io *bp = &bad;
	ck_assert_int_eq(fg_tier_submit(&tier, &bp, 1), -EINVAL);
	ck_assert_int_eq(fg_tier_reap(&tier, done, 0, NIO), 0);

	for (int i = 0; i < NREG; i++)
		fg_tier_free(&tier, &dev[i]);
	fg_tier_free(&host, &pinned);
	fg_tier_free(&host, &pinned2);
	fg_tier_close(&host);
	free(pageable);
	free(back);
}
END_TEST

/* A second tier with default options takes all free memory less the 2 GiB
 * reserve; open must fail cleanly when pool asks for more than is free. */
START_TEST(test_pool_options)
{
	struct fg_plugin_handle ph;
	struct fg_tier t2;
	void *opts;

	ck_assert_int_eq(fg_plugin_load("cuda_mem", FG_PLUGIN_STORAGE, &ph), 0);
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_int_eq(fg_plugin_opts_set(ph.plugin, opts, "pool", "1000000G", "test"), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_tier_open(&t2, "compute", &ph, opts, 0), -ENOMEM);
	ck_assert_msg(strstr(fg_last_error(), "pool"), "message: %s", fg_last_error());

	ck_assert_int_eq(fg_plugin_load("cuda_mem", FG_PLUGIN_STORAGE, &ph), 0);
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_int_eq(fg_plugin_opts_set(ph.plugin, opts, "device", "1000", "test"), 0);
	ck_assert_int_eq(fg_tier_open(&t2, "compute", &ph, opts, 0), -EINVAL);
}
END_TEST

static Suite *cuda_mem_suite(void)
{
	Suite *s = suite_create("cuda_mem");
	TCase *tc = tcase_create("pool");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_alloc_align_reuse);
	tcase_add_test(tc, test_fragmentation_and_capacity);
	tcase_add_test(tc, test_sync_round_trips);
	tcase_add_test(tc, test_async_many);
	tcase_add_test(tc, test_pool_options);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	static const char *const names[] = { "cuda_mem" };
	static const uint32_t kinds[] = { FG_PLUGIN_STORAGE };
	SRunner *sr;
	int failed, rc = gpu_plugins_usable(names, kinds, 1);

	if (rc)
		return rc;
	sr = srunner_create(cuda_mem_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
