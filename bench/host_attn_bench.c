/* bench/host_attn_bench.c - cpu_blas decode attention over an fp16 or 4-bit
 * cache with fp16 queries: the host attention an fp16 GPU backend delegates
 * (cpu_cache_compute), at the shapes of such a run.
 *
 *   host_attn_bench [-b BATCH] [-H HEADS] [-d HEAD_DIM] [-l LEN] [-c f16|q4]
 *                   [-t THREADS] [-s SECONDS]
 *
 * Defaults: OPT-30B's 56 heads of 128, 48 sequences of 520 positions, fp16.
 * GB/s counts the cache bytes one call reads (K and V of every sequence, as
 * stored).  The cache holds random values (4-bit: random codes, small scales). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct fg_tensor view(void *p, enum fg_dtype t, int64_t rows, int64_t cols)
{
	return (struct fg_tensor){ .data = p, .dtype = t, .rows = rows, .cols = cols, .ld = cols };
}

int main(int argc, char **argv)
{
	int64_t B = 48, H = 56, D = 128, L = 520;
	const char *cache = "f16", *threads = NULL;
	double secs = 2;
	int opt;

	while ((opt = getopt(argc, argv, "b:H:d:l:c:t:s:")) != -1) {
		switch (opt) {
		case 'b': B = atoll(optarg); break;
		case 'H': H = atoll(optarg); break;
		case 'd': D = atoll(optarg); break;
		case 'l': L = atoll(optarg); break;
		case 'c': cache = optarg; break;
		case 't': threads = optarg; break;
		case 's': secs = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-b BATCH] [-H HEADS] [-d HEAD_DIM] [-l LEN] [-c f16|q4] [-t THREADS] [-s SECONDS]\n", argv[0]);
			return 2;
		}
	}
	int q4 = !strcmp(cache, "q4");
	if ((!q4 && strcmp(cache, "f16")) || B < 1 || H < 1 || D < 1 || L < 1 || secs <= 0 ||
	    (q4 && (H * D) % FG_Q4_GROUP)) {
		fprintf(stderr, "%s: need positive sizes, -c f16 or q4 (q4: heads * head_dim a multiple of %d)\n",
			argv[0], FG_Q4_GROUP);
		return 2;
	}
	struct fg_plugin_handle ph;
	struct fg_backend be;
	void *opts;
	if (fg_plugin_load("cpu_blas", FG_PLUGIN_COMPUTE, &ph) ||
	    !(opts = fg_plugin_opts_new(ph.plugin)) ||
	    (threads && fg_plugin_opts_set(ph.plugin, opts, "threads", threads, "-t")) ||
	    fg_backend_open(&be, &ph, opts)) {
		fprintf(stderr, "%s: %s\n", argv[0], fg_last_error());
		return 1;
	}
	int64_t W = H * D, rows = B * L;
	size_t cbytes = q4 ? (size_t)fg_q4_bytes((uint64_t)rows, (uint64_t)W, 1)
			   : (size_t)(rows * W) * 2;
	uint16_t *q = malloc((size_t)(B * W) * 2), *out = malloc((size_t)(B * W) * 2);
	uint8_t *k = malloc(cbytes), *v = malloc(cbytes);
	int32_t *pad = calloc((size_t)B, sizeof(int32_t));
	if (!q || !out || !k || !v || !pad) {
		fprintf(stderr, "%s: out of memory for %zu-byte caches\n", argv[0], cbytes);
		return 1;
	}
	uint64_t r = 88172645463325252ull;
	for (int64_t i = 0; i < B * W; i++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		q[i] = fg_float_to_half((float)(r % 2001) / 1000.0f - 1.0f);
	}
	for (size_t i = 0; i < cbytes; i++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		k[i] = (uint8_t)r, v[i] = (uint8_t)(r >> 8);
	}
	if (q4) { /* (scale, min) pairs: small finite fp16 values */
		size_t p0 = (size_t)fg_q4_data_bytes((uint64_t)rows, (uint64_t)W);
		for (size_t i = p0; i + 4 <= cbytes; i += 4) {
			uint16_t s = fg_float_to_half(0.01f), m = fg_float_to_half(-0.08f);
			memcpy(k + i, &s, 2), memcpy(k + i + 2, &m, 2);
			memcpy(v + i, &s, 2), memcpy(v + i + 2, &m, 2);
		}
	} else {
		for (size_t i = 0; i < cbytes / 2; i++) { /* random finite halves in [-1, 1) */
			uint16_t h = fg_float_to_half((float)(((uint16_t *)k)[i] % 2001) / 1000.0f - 1.0f);
			((uint16_t *)k)[i] = h;
			((uint16_t *)v)[i] = fg_float_to_half((float)(((uint16_t *)v)[i] % 2001) / 1000.0f - 1.0f);
		}
	}
	enum fg_dtype cdt = q4 ? FG_DTYPE_Q4_COLS : FG_DTYPE_F16;
	struct fg_attention_args a = {
		.q = view(q, FG_DTYPE_F16, B, W), .k = view(k, cdt, rows, W), .v = view(v, cdt, rows, W),
		.out = view(out, FG_DTYPE_F16, B, W), .batch = B, .seq = 1, .len = L,
		.cache_stride = L, .heads = H, .head_dim = D, .scale = 0.088f, .pad = pad, .kv_heads = H,
	};
	int calls = 0;
	double best = 1e30, t0 = now();
	while (now() - t0 < secs || calls < 3) {
		double t = now();
		if (fg_backend_attention_decode(&be, NULL, 0, "bench", &a)) {
			fprintf(stderr, "%s: %s\n", argv[0], fg_last_error());
			return 1;
		}
		t = now() - t;
		best = t < best ? t : best;
		calls++;
	}
	printf("host decode attention, %s cache: batch %" PRId64 ", %" PRId64 " heads of %" PRId64
	       ", %" PRId64 " positions: %.3f ms a call (best of %d), %.1f GB/s of cache read\n",
	       cache, B, H, D, L, best * 1e3, calls, 2.0 * (double)cbytes / best / 1e9);
	fg_backend_close(&be);
	free(q), free(out), free(k), free(v), free(pad);
	return 0;
}
