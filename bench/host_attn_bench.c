/* bench/host_attn_bench.c - cpu_blas decode attention over an fp16 or 4-bit
 * cache with fp16 queries: the host attention an fp16 GPU backend delegates
 * (cpu_cache_compute), at the shapes of such a run; or (-A) the append of a
 * prompt's rows to that cache.
 *
 *   host_attn_bench [-b BATCH] [-H HEADS] [-k KV_HEADS] [-d HEAD_DIM] [-l LEN]
 *                   [-c f16|q4] [-t THREADS] [-i ISA] [-s SECONDS] [-f] [-A]
 *                   [-o FILE]
 *
 * Defaults: OPT-30B's 56 heads of 128 (kv heads: all), 48 sequences of 520
 * positions, fp16.  GB/s counts the cache bytes one call reads (K and V of
 * every sequence, as stored).  The cache holds random values (4-bit: random
 * codes, random small scales and minimums).  -A times kv_append of all LEN
 * rows of every sequence from fp16 rows of values in [-1, 1) (GB/s of cache
 * written, K and V).  -f: fp32 queries and output (4-bit cache only: the
 * cpu_blas backend's own decode).  -o FILE writes the output (attention) or
 * the cache (append) after the timed calls: compare two builds' plugins byte
 * for byte.  -t and -i set the plugin's threads and isa. */
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

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

/* A random half in [-1, 1). */
static uint16_t rand_half(void)
{
	return fg_float_to_half((float)(next() % 2001) / 1000.0f - 1.0f);
}

/* Best seconds of fn's calls over at least secs (and 3 calls). */
static double best_of(int (*fn)(struct fg_backend *, const void *), struct fg_backend *be,
		      const void *a, double secs, int *calls)
{
	double best = 1e30, t0 = now();

	*calls = 0;
	while (now() - t0 < secs || *calls < 3) {
		double t = now();
		if (fn(be, a))
			return -1;
		t = now() - t;
		best = t < best ? t : best;
		(*calls)++;
	}
	return best;
}

static int decode(struct fg_backend *be, const void *a)
{
	return fg_backend_attention_decode(be, NULL, 0, "bench", a);
}

static int append(struct fg_backend *be, const void *a)
{
	const struct fg_kv_append_args *ap = a;
	return fg_backend_kv_append(be, NULL, 0, "bench", &ap[0]) ||
	       fg_backend_kv_append(be, NULL, 0, "bench", &ap[1]);
}

/* p then p2 (n2 bytes; none when 0) to path. */
static int dump(const char *path, const void *p, size_t n, const void *p2, size_t n2)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(p, 1, n, f) == n && (!n2 || fwrite(p2, 1, n2, f) == n2);

	if (f && fclose(f))
		ok = 0;
	if (!ok)
		fprintf(stderr, "host_attn_bench: cannot write %s\n", path);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	int64_t B = 48, H = 56, KVH = 0, D = 128, L = 520;
	const char *cache = "f16", *threads = NULL, *isa = NULL, *outpath = NULL;
	double secs = 2;
	int opt, do_append = 0, f32 = 0;

	while ((opt = getopt(argc, argv, "b:H:k:d:l:c:t:i:s:fAo:")) != -1) {
		switch (opt) {
		case 'b': B = atoll(optarg); break;
		case 'H': H = atoll(optarg); break;
		case 'k': KVH = atoll(optarg); break;
		case 'd': D = atoll(optarg); break;
		case 'l': L = atoll(optarg); break;
		case 'c': cache = optarg; break;
		case 't': threads = optarg; break;
		case 'i': isa = optarg; break;
		case 's': secs = atof(optarg); break;
		case 'f': f32 = 1; break;
		case 'A': do_append = 1; break;
		case 'o': outpath = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-b BATCH] [-H HEADS] [-k KV_HEADS] [-d HEAD_DIM] [-l LEN] [-c f16|q4] [-t THREADS] [-i ISA] [-s SECONDS] [-f] [-A] [-o FILE]\n", argv[0]);
			return 2;
		}
	}
	int q4 = !strcmp(cache, "q4");
	if (!KVH)
		KVH = H;
	if ((!q4 && strcmp(cache, "f16")) || B < 1 || H < 1 || D < 1 || L < 1 || secs <= 0 ||
	    KVH < 1 || H % KVH || (f32 && !q4)) {
		fprintf(stderr, "%s: need positive sizes, KV_HEADS dividing HEADS, -c f16 or q4 (-f: q4)\n",
			argv[0]);
		return 2;
	}
	struct fg_plugin_handle ph;
	struct fg_backend be;
	void *opts;
	if (fg_plugin_load("cpu_blas", FG_PLUGIN_COMPUTE, &ph) ||
	    !(opts = fg_plugin_opts_new(ph.plugin)) ||
	    (threads && fg_plugin_opts_set(ph.plugin, opts, "threads", threads, "-t")) ||
	    (isa && fg_plugin_opts_set(ph.plugin, opts, "isa", isa, "-i")) ||
	    fg_backend_open(&be, &ph, opts)) {
		fprintf(stderr, "%s: %s\n", argv[0], fg_last_error());
		return 1;
	}
	int64_t W = H * D, KW = KVH * D, rows = B * L;
	size_t cbytes = q4 ? (size_t)fg_q4_bytes((uint64_t)rows, (uint64_t)KW, 1)
			   : (size_t)(rows * KW) * 2;
	size_t qes = f32 ? 4 : 2;
	uint16_t *q = malloc((size_t)(B * W) * qes), *out = malloc((size_t)(B * W) * qes);
	uint16_t *src = do_append ? malloc((size_t)(rows * KW) * 2) : NULL;
	uint8_t *k = malloc(cbytes), *v = malloc(cbytes);
	int32_t *pad = calloc((size_t)B, sizeof(int32_t));
	if (!q || !out || !k || !v || !pad || (do_append && !src)) {
		fprintf(stderr, "%s: out of memory for %zu-byte caches\n", argv[0], cbytes);
		return 1;
	}
	for (int64_t i = 0; i < B * W; i++) {
		if (f32)
			((float *)q)[i] = fg_half_to_float(rand_half());
		else
			q[i] = rand_half();
	}
	for (size_t i = 0; i < cbytes; i++) {
		uint64_t r = next();
		k[i] = (uint8_t)r, v[i] = (uint8_t)(r >> 8);
	}
	if (q4) { /* (scale, min) pairs: small finite fp16 values */
		size_t p0 = (size_t)fg_q4_data_bytes((uint64_t)rows, (uint64_t)KW);
		for (size_t i = p0; i + 4 <= cbytes; i += 4) {
			for (int t = 0; t < 2; t++) {
				uint64_t r = next();
				uint16_t s = fg_float_to_half((float)(r % 100 + 1) * 2e-4f);
				uint16_t m = fg_float_to_half(-(float)(r / 100 % 100) * 1e-3f);
				memcpy((t ? v : k) + i, &s, 2), memcpy((t ? v : k) + i + 2, &m, 2);
			}
		}
	} else {
		for (size_t i = 0; i < cbytes / 2; i++) /* random finite halves in [-1, 1) */
			((uint16_t *)k)[i] = rand_half(), ((uint16_t *)v)[i] = rand_half();
	}
	for (int64_t i = 0; do_append && i < rows * KW; i++)
		src[i] = rand_half();
	enum fg_dtype cdt = q4 ? FG_DTYPE_Q4_COLS : FG_DTYPE_F16;
	struct fg_attention_args a = {
		.q = view(q, f32 ? FG_DTYPE_F32 : FG_DTYPE_F16, B, W), .k = view(k, cdt, rows, KW), .v = view(v, cdt, rows, KW),
		.out = view(out, f32 ? FG_DTYPE_F32 : FG_DTYPE_F16, B, W), .batch = B, .seq = 1, .len = L,
		.cache_stride = L, .heads = H, .head_dim = D, .scale = 0.088f, .pad = pad, .kv_heads = KVH,
	};
	struct fg_kv_append_args ap[2] = {
		{ view(src, FG_DTYPE_F16, rows, KW), a.k, B, L, 0, L },
		{ view(src, FG_DTYPE_F16, rows, KW), a.v, B, L, 0, L },
	};
	int calls;
	double best = do_append ? best_of(append, &be, ap, secs, &calls)
				: best_of(decode, &be, &a, secs, &calls);
	if (best < 0) {
		fprintf(stderr, "%s: %s\n", argv[0], fg_last_error());
		return 1;
	}
	printf("host %s, %s cache: batch %" PRId64 ", %" PRId64 " heads of %" PRId64 " (%" PRId64
	       " kv), %" PRId64 " positions: %.3f ms a call (best of %d), %.2f GB/s of cache %s\n",
	       do_append ? "cache append" : "decode attention", cache, B, H, D, KVH, L, best * 1e3,
	       calls, 2.0 * (double)cbytes / best / 1e9, do_append ? "written" : "read");
	int rc = 0;
	if (outpath)
		rc = do_append ? dump(outpath, k, cbytes, v, cbytes)
			       : dump(outpath, out, (size_t)(B * W) * qes, NULL, 0);
	fg_backend_close(&be);
	free(q), free(out), free(k), free(v), free(pad), free(src);
	return rc;
}
