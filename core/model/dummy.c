/* core/model/dummy.c - deterministic generated weights for benchmarks without a checkpoint. */
#define _GNU_SOURCE /* fgcore/fanout.h: sched_getaffinity */
#include <pthread.h>
#include <string.h>

#include <fgcore/fanout.h>
#include <fgcore/half.h>

#include "core/model/dummy.h"

#define DUMMY_TABLE 65536
#define DUMMY_GOLDEN UINT64_C(0x9e3779b97f4a7c15)
#define DUMMY_ONE 0x3c00u /* fp16 1.0 */
#define DUMMY_PER_THREAD (UINT64_C(1) << 20) /* values: ~1 ms, far above a thread's start */
#define DUMMY_ALIGN 32                        /* values per 64-byte line */

/* fp16 values uniform on [-a, a]: one table for matrices, one for biases. */
static uint16_t dummy_matrix[DUMMY_TABLE];
static uint16_t dummy_bias[DUMMY_TABLE];
static pthread_once_t dummy_once = PTHREAD_ONCE_INIT;

static void dummy_fill_table(uint16_t *t, float a)
{
	/* One exact integer times one constant: a single IEEE rounding, the
	 * same on every machine. */
	float step = a / (float)DUMMY_TABLE;
	int j;

	for (j = 0; j < DUMMY_TABLE; j++)
		t[j] = fg_float_to_half((float)(2 * j + 1 - DUMMY_TABLE) * step);
}

static void dummy_init(void)
{
	dummy_fill_table(dummy_matrix, 0.0346f); /* std = a / sqrt(3) = 0.02 */
	dummy_fill_table(dummy_bias, 0.01f);
}

static inline uint64_t dummy_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t dummy_seed(const char *name)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (; *name; name++) {
		h ^= (unsigned char)*name;
		h *= UINT64_C(0x100000001b3);
	}
	return dummy_mix(h);
}

/* Elements [elem0, elem0 + n) of the stream `seed` picks from `table`. */
struct dummy_job {
	const uint16_t *table;
	uint64_t seed, elem0, n;
	uint16_t *dst;
};

static void dummy_gen(const struct dummy_job *j)
{
	const uint16_t *table = j->table;
	uint64_t seed = j->seed, i = j->elem0, end = j->elem0 + j->n;
	uint16_t *dst = j->dst;

	/* Block k of four values comes from one splitmix64 output. */
	while (i < end && (i & 3)) {
		uint64_t z = dummy_mix(seed + ((i >> 2) + 1) * DUMMY_GOLDEN);

		*dst++ = table[(z >> (16 * (i & 3))) & 0xffff];
		i++;
	}
	for (; i + 4 <= end; i += 4) {
		uint64_t z = dummy_mix(seed + ((i >> 2) + 1) * DUMMY_GOLDEN);

		dst[0] = table[z & 0xffff];
		dst[1] = table[(z >> 16) & 0xffff];
		dst[2] = table[(z >> 32) & 0xffff];
		dst[3] = table[z >> 48];
		dst += 4;
	}
	for (; i < end; i++) {
		uint64_t z = dummy_mix(seed + ((i >> 2) + 1) * DUMMY_GOLDEN);

		*dst++ = table[(z >> (16 * (i & 3))) & 0xffff];
	}
}

static void dummy_run(void *job)
{
	dummy_gen(job);
}

void fg_dummy_fill_threads(const char *name, enum fg_init init, uint64_t elem0, uint64_t n,
			   uint16_t *dst, int threads)
{
	struct dummy_job job[FG_FANOUT_MAX];
	uint64_t per;
	int t;

	if (init == FG_INIT_ONES) {
		for (uint64_t i = 0; i < n; i++)
			dst[i] = DUMMY_ONE;
		return;
	}
	pthread_once(&dummy_once, dummy_init);
	job[0] = (struct dummy_job){
		.table = init == FG_INIT_BIAS ? dummy_bias : dummy_matrix,
		.seed = dummy_seed(name),
		.elem0 = elem0,
		.n = n,
		.dst = dst,
	};
	t = fg_fanout_threads(threads, n, DUMMY_PER_THREAD);
	if (t <= 1 || n < 2 * DUMMY_ALIGN) {
		dummy_gen(&job[0]);
		return;
	}
	/* Every value depends on its index alone, so where the pieces split never
	 * changes a byte; whole 64-byte lines keep the threads' stores apart. */
	per = (n + (uint64_t)t - 1) / (uint64_t)t;
	per = (per + DUMMY_ALIGN - 1) & ~(uint64_t)(DUMMY_ALIGN - 1);
	t = (int)((n + per - 1) / per);
	for (int k = 0; k < t; k++) {
		uint64_t a = (uint64_t)k * per, b = a + per < n ? a + per : n;

		job[k] = job[0];
		job[k].elem0 = elem0 + a;
		job[k].n = b - a;
		job[k].dst = dst + a;
	}
	fg_fanout(dummy_run, job, sizeof(job[0]), t);
}

void fg_dummy_fill(const char *name, enum fg_init init, uint64_t elem0, uint64_t n,
		   uint16_t *dst)
{
	fg_dummy_fill_threads(name, init, elem0, n, dst, 0);
}
