/* bench/gpu_ops_bench.c - times the cublas backend's ops on the GPU with CUDA
 * events, at the shapes OPT inference uses, for comparison with the H200's
 * limits (about 770 TFLOP/s of fp16 GEMM, 4.2 TB/s device copy, 4.8 TB/s HBM):
 *   linear fp16 at prefill shapes (m = 8192 .. 131072; OPT-6.7B and -30B
 *   projections and FFN) in TFLOP/s; at decode shapes (m = 1 .. 256) in
 *   TFLOP/s and GB/s of weight reads;
 *   linear with 4-bit weights at decode shapes, in GB/s of 4-bit bytes, for
 *   the default split, the fused kernel forced and dequantization forced;
 *   attention prefill at seq 512 in TFLOP/s (causal: only the visible half);
 *   attention decode over fp16, 4-bit and fp8 caches (OPT's heads and
 *   Llama-3-8B's grouped ones) in GB/s of cache read;
 *   layer norm and KV append in GB/s;
 *   sampling 256 rows of OPT's 50272 logits (the sample op, top_p and top_k,
 *   next to the argmax op on the same rows; both return the tokens);
 *   linear fp16 next to fp8 (fp8_prefill) at m = 16384 for OPT-6.7B's and
 *   OPT-30B's four products as the engine runs them (q/k/v; out_proj and fc2
 *   adding into the fp32 residual stream; fc1 with ReLU), in TFLOP/s; the fp8
 *   time includes quantizing x and the weight, whose bytes are printed.
 *
 * Usage: gpu_ops_bench [quick|q4|decode|attn|sample|fp8|f8w]   ("quick": fewer and
 * smaller shapes; "q4": only the 4-bit linear at decode shapes; "decode": that
 * and attention decode, the memory-bound kernels; "attn": only attention
 * decode; "sample": only sampling;
 * "fp8": only fp16 against fp8 products; "f8w": only fp8 weights at decode
 * shapes (OPT-6.7B's and Llama-3-8B's), fp16 beside them, in GB/s of weight
 * bytes, each path forced in turn)
 * Ops run on the backend's default stream, which is a blocking stream, so
 * events recorded on the legacy stream bracket them.  Inputs are random fp16
 * (4-bit weights: random codes with a sane scale and min).
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <fgcore/half.h>
#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/tier/tier.h"
#include "core/util/error.h"

static struct fg_tier dev;
static int quick, only_q4, only_decode, only_sample, only_fp8, only_f8w, only_attn;

/* cublas with up to two options set (key2 NULL: one). */
static int open_backend2(struct fg_backend *b, const char *key, const char *val,
			 const char *key2, const char *val2)
{
	struct fg_plugin_handle ph;
	void *opts;

	if (fg_plugin_load("cublas", FG_PLUGIN_COMPUTE, &ph) != 0)
		return -1;
	opts = fg_plugin_opts_new(ph.plugin);
	if (!opts || (key && fg_plugin_opts_set(ph.plugin, opts, key, val, "bench") != 0) ||
	    (key2 && fg_plugin_opts_set(ph.plugin, opts, key2, val2, "bench") != 0)) {
		free(opts);
		fg_plugin_close(&ph);
		return -1;
	}
	return fg_backend_open(b, &ph, opts);
}

static int open_backend(struct fg_backend *b, const char *key, const char *val)
{
	return open_backend2(b, key, val, NULL, NULL);
}

/* Device memory filled with random fp16 values in [-1, 1) (repeating 1 MiB). */
static void *dev_alloc(struct fg_region *r, uint64_t bytes, int fill)
{
	static uint16_t *pat;
	const size_t chunk = 1 << 20;

	if (fg_tier_alloc(&dev, bytes ? bytes : 1, r) != 0) {
		fprintf(stderr, "gpu_ops_bench: %s\n", fg_last_error());
		exit(1);
	}
	if (!pat) {
		pat = malloc(chunk);
		for (size_t i = 0; i < chunk / 2; i++)
			pat[i] = fg_float_to_half((float)((rand() % 2001) - 1000) / 1000.0f);
	}
	for (uint64_t off = 0; fill && off < bytes; off += chunk) {
		size_t n = bytes - off < chunk ? (size_t)(bytes - off) : chunk;

		if (fg_tier_write(&dev, r, off, pat, n) != 0) {
			fprintf(stderr, "gpu_ops_bench: %s\n", fg_last_error());
			exit(1);
		}
	}
	return r->addr;
}

/* A 4-bit [n, k] weight (groups along dimension 0): random codes, scale 1/512, min -1/64. */
static void *dev_q4(struct fg_region *r, int64_t n, int64_t k)
{
	uint64_t data = fg_q4_data_bytes((uint64_t)n, (uint64_t)k);
	uint64_t total = fg_q4_bytes((uint64_t)n, (uint64_t)k, 0), groups = (total - data) / 4;
	uint8_t *h = malloc((size_t)total);

	for (uint64_t i = 0; i < data; i++)
		h[i] = (uint8_t)rand();
	for (uint64_t g = 0; g < groups; g++) {
		uint16_t s = fg_float_to_half(1.0f / 512), m = fg_float_to_half(-1.0f / 64);

		memcpy(h + data + 4 * g, &s, 2);
		memcpy(h + data + 4 * g + 2, &m, 2);
	}
	if (fg_tier_alloc(&dev, total, r) != 0 || fg_tier_write(&dev, r, 0, h, total) != 0) {
		fprintf(stderr, "gpu_ops_bench: %s\n", fg_last_error());
		exit(1);
	}
	free(h);
	return r->addr;
}

static struct fg_tensor T(void *p, enum fg_dtype t, int64_t rows, int64_t cols)
{
	struct fg_tensor x = { p, t, rows, cols, cols };

	return x;
}

enum op_kind { OP_LINEAR, OP_LN, OP_PREFILL, OP_DECODE, OP_KV, OP_ARGMAX, OP_SAMPLE };

struct op {
	enum op_kind kind;
	struct fg_backend *be;
	struct fg_linear_args lin;
	struct fg_layer_norm_args ln;
	struct fg_attention_args at;
	struct fg_kv_append_args kv;
	struct fg_sample_args smp; /* argmax reads smp.logits and writes smp.out */
};

static int op_run(struct op *o)
{
	const struct fg_compute_ops *f = o->be->ops;
	void *c = o->be->ctx;

	switch (o->kind) {
	case OP_LINEAR:
		return f->linear(c, NULL, &o->lin);
	case OP_LN:
		return f->layer_norm(c, NULL, &o->ln);
	case OP_PREFILL:
		return f->attention_prefill(c, NULL, &o->at);
	case OP_DECODE:
		return f->attention_decode(c, NULL, &o->at);
	case OP_KV:
		return f->kv_append(c, NULL, &o->kv);
	case OP_ARGMAX:
		return f->argmax(c, NULL, &o->smp.logits, o->smp.out);
	case OP_SAMPLE:
		return f->sample(c, NULL, &o->smp);
	}
	return -1;
}

/* Milliseconds per run: 2 warm-up runs, then enough runs for ~60 ms. */
static double op_time(struct op *o)
{
	static cudaEvent_t e0, e1;
	float ms = 0;
	int iters;

	if (!e0 && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
		return -1;
	for (int i = 0; i < 2; i++)
		if (op_run(o) != 0) {
			fprintf(stderr, "  op failed: %s\n", fg_last_error());
			return -1;
		}
	cudaEventRecord(e0, 0);
	op_run(o);
	cudaEventRecord(e1, 0);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	iters = ms > 0 ? (int)(60.0 / ms) : 100;
	iters = iters < 3 ? 3 : iters > 500 ? 500 : iters;
	cudaEventRecord(e0, 0);
	for (int i = 0; i < iters; i++)
		op_run(o);
	cudaEventRecord(e1, 0);
	if (cudaEventSynchronize(e1) != cudaSuccess) {
		fprintf(stderr, "  CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
		return -1;
	}
	cudaEventElapsedTime(&ms, e0, e1);
	return ms / iters;
}

/* An fp8 [n, k] weight (F8_ROWS): random finite codes (no NaN), scale 1/256 a row. */
/* Random finite E4M3 codes [n, k], then nscales scales of 1/256: an
 * F8_ROWS weight (n scales) or an F8_COLS cache (n * ceil(k / 64)). */
static void *dev_f8(struct fg_region *r, int64_t n, int64_t k, int64_t nscales)
{
	uint64_t data = fg_f8_data_bytes((uint64_t)n, (uint64_t)k);
	uint64_t total = data + 4 * (uint64_t)nscales;
	uint8_t *h = calloc(1, (size_t)total);

	for (uint64_t i = 0; i < (uint64_t)(n * k); i++) {
		h[i] = (uint8_t)rand();
		if ((h[i] & 0x7fu) == FG_F8_NAN)
			h[i] ^= 1u;
	}
	for (int64_t j = 0; j < nscales; j++)
		fg_f8_scale_store(h + data, (uint64_t)j, 1.0f / 256);
	if (fg_tier_alloc(&dev, total, r) != 0 || fg_tier_write(&dev, r, 0, h, total) != 0) {
		fprintf(stderr, "gpu_ops_bench: %s\n", fg_last_error());
		exit(1);
	}
	free(h);
	return r->addr;
}

/* ---- linear ------------------------------------------------------------------------- */

/* q4: the weight's kind, 0 fp16, 1 4-bit (Q4_ROWS), 2 fp8 (F8_ROWS). */
static void bench_linear(struct fg_backend *be, const char *tag, int64_t m, int64_t n,
			 int64_t k, int q4, int relu, int residual)
{
	static const char *const kind[] = { "f16", "q4", "f8" };
	struct fg_region rx, rw, rb, ro;
	struct op o = { .kind = OP_LINEAR, .be = be };
	double ms, flops = 2.0 * (double)m * (double)n * (double)k, wbytes;

	o.lin.x = T(dev_alloc(&rx, (uint64_t)(m * k) * 2, 1), FG_DTYPE_F16, m, k);
	if (q4 == 2) {
		o.lin.w = T(dev_f8(&rw, n, k, n), FG_DTYPE_F8_ROWS, n, k);
		wbytes = (double)fg_f8_bytes((uint64_t)n, (uint64_t)k);
	} else if (q4) {
		o.lin.w = T(dev_q4(&rw, n, k), FG_DTYPE_Q4_ROWS, n, k);
		wbytes = (double)fg_q4_bytes((uint64_t)n, (uint64_t)k, 0);
	} else {
		o.lin.w = T(dev_alloc(&rw, (uint64_t)(n * k) * 2, 1), FG_DTYPE_F16, n, k);
		wbytes = 2.0 * (double)n * (double)k;
	}
	o.lin.bias = T(dev_alloc(&rb, (uint64_t)n * 2, 1), FG_DTYPE_F16, 1, n);
	o.lin.act = relu ? FG_ACT_RELU : FG_ACT_NONE;
	o.lin.out = T(dev_alloc(&ro, (uint64_t)(m * n) * 2, 1), FG_DTYPE_F16, m, n);
	if (residual)
		o.lin.residual = o.lin.out;
	ms = op_time(&o);
	if (ms > 0)
		printf("linear %-5s %-14s m=%-6" PRId64 " n=%-5" PRId64 " k=%-5" PRId64
		       " %s%s: %9.4f ms %8.1f TFLOP/s %8.1f GB/s of weights\n", kind[q4],
		       tag, m, n, k, relu ? "bias+relu" : "bias", residual ? "+res" : "", ms,
		       flops / ms / 1e9, wbytes / ms / 1e6);
	fflush(stdout);
	fg_tier_free(&dev, &rx);
	fg_tier_free(&dev, &rw);
	fg_tier_free(&dev, &rb);
	fg_tier_free(&dev, &ro);
}

/* fp16 (be) against fp8 (be8, fp8_prefill) on the same tensors, as the
 * engine calls them: bias always, ReLU for fc1; a residual (out_proj, fc2)
 * is the fp32 stream, out itself (fp32_residual, the default).  The fp8 time
 * is the whole op: quantizing x and the weight (each read twice, the second
 * time mostly from L2, and written once in fp8) and the fp8 product. */
static void bench_linear_fp8(struct fg_backend *be, struct fg_backend *be8, const char *tag,
			     int64_t m, int64_t n, int64_t k, int relu, int residual)
{
	struct fg_region rx, rw, rb, ro;
	struct op o = { .kind = OP_LINEAR, .be = be };
	double ms16, ms8, flops = 2.0 * (double)m * (double)n * (double)k;
	double qbytes = 3.0 * (double)(m + n) * (double)k; /* fp16 read, fp8 written */
	size_t osz = residual ? 4 : 2;

	o.lin.x = T(dev_alloc(&rx, (uint64_t)(m * k) * 2, 1), FG_DTYPE_F16, m, k);
	o.lin.w = T(dev_alloc(&rw, (uint64_t)(n * k) * 2, 1), FG_DTYPE_F16, n, k);
	o.lin.bias = T(dev_alloc(&rb, (uint64_t)n * 2, 1), FG_DTYPE_F16, 1, n);
	o.lin.act = relu ? FG_ACT_RELU : FG_ACT_NONE;
	/* (an fp32 out filled with fp16 patterns holds small finite values) */
	o.lin.out = T(dev_alloc(&ro, (uint64_t)m * (uint64_t)n * osz, 1),
		      residual ? FG_DTYPE_F32 : FG_DTYPE_F16, m, n);
	if (residual)
		o.lin.residual = o.lin.out;
	ms16 = op_time(&o);
	o.be = be8;
	ms8 = op_time(&o);
	if (ms16 > 0 && ms8 > 0)
		printf("linear fp8  %-10s m=%-6" PRId64 " n=%-5" PRId64 " k=%-5" PRId64 " %s%s: "
		       "fp16 %8.4f ms %7.1f TFLOP/s | fp8 %8.4f ms %7.1f TFLOP/s, %.2fx "
		       "(quantization moves %.2f GB)\n", tag, m, n, k, relu ? "bias+relu" : "bias",
		       residual ? "+res32" : "", ms16, flops / ms16 / 1e9, ms8, flops / ms8 / 1e9,
		       ms16 / ms8, qbytes / 1e9);
	fflush(stdout);
	fg_tier_free(&dev, &rx);
	fg_tier_free(&dev, &rw);
	fg_tier_free(&dev, &rb);
	fg_tier_free(&dev, &ro);
}

/* ---- attention ------------------------------------------------------------------------ */

static void bench_prefill(struct fg_backend *be, int64_t batch, int64_t seq, int64_t heads,
			  int64_t hd)
{
	struct fg_region rq, rk, rv, ro;
	struct op o = { .kind = OP_PREFILL, .be = be };
	int64_t rows = batch * seq, hc = heads * hd;
	int32_t *pad = calloc((size_t)batch, sizeof(int32_t));
	double ms, flops = 4.0 * (double)hd * (double)seq * (double)(seq + 1) / 2 *
			   (double)(batch * heads);

	o.at.q = T(dev_alloc(&rq, (uint64_t)(rows * hc) * 2, 1), FG_DTYPE_F16, rows, hc);
	o.at.k = T(dev_alloc(&rk, (uint64_t)(rows * hc) * 2, 1), FG_DTYPE_F16, rows, hc);
	o.at.v = T(dev_alloc(&rv, (uint64_t)(rows * hc) * 2, 1), FG_DTYPE_F16, rows, hc);
	o.at.out = T(dev_alloc(&ro, (uint64_t)(rows * hc) * 2, 0), FG_DTYPE_F16, rows, hc);
	o.at.batch = batch;
	o.at.seq = seq;
	o.at.heads = heads;
	o.at.head_dim = hd;
	o.at.scale = 1.0f / sqrtf((float)hd);
	o.at.pad = pad;
	ms = op_time(&o);
	if (ms > 0)
		printf("attention_prefill batch=%-4" PRId64 " seq=%-5" PRId64 " heads=%-3" PRId64
		       " hd=%-4" PRId64 ": %9.4f ms %8.1f TFLOP/s (causal)\n", batch, seq, heads,
		       hd, ms, flops / ms / 1e9);
	fflush(stdout);
	fg_tier_free(&dev, &rq);
	fg_tier_free(&dev, &rk);
	fg_tier_free(&dev, &rv);
	fg_tier_free(&dev, &ro);
	free(pad);
}

/* cache: 0 fp16, 1 4-bit (Q4_COLS), 2 fp8 (F8_COLS); kvh key/value heads
 * (grouped-query attention when below heads). */
static void bench_decode(struct fg_backend *be, int64_t batch, int64_t heads, int64_t kvh,
			 int64_t hd, int64_t len, int cache)
{
	static const char *const names[] = { "f16", "q4", "f8" };
	struct fg_region rq, rk, rv, ro;
	struct op o = { .kind = OP_DECODE, .be = be };
	int64_t hc = heads * hd, kc = kvh * hd, krows = batch * len;
	int32_t *pad = calloc((size_t)batch, sizeof(int32_t));
	double ms, bytes;

	o.at.q = T(dev_alloc(&rq, (uint64_t)(batch * hc) * 2, 1), FG_DTYPE_F16, batch, hc);
	if (cache == 1) {
		uint64_t nb = fg_q4_bytes((uint64_t)krows, (uint64_t)kc, 1);

		/* any bytes are valid codes; the scale and min here are random fp16 */
		o.at.k = T(dev_alloc(&rk, nb, 1), FG_DTYPE_Q4_COLS, krows, kc);
		o.at.v = T(dev_alloc(&rv, nb, 1), FG_DTYPE_Q4_COLS, krows, kc);
		bytes = 2.0 * (double)nb;
	} else if (cache == 2) {
		int64_t ns = krows * (int64_t)fg_f8c_grid_cols((uint64_t)kc);

		o.at.k = T(dev_f8(&rk, krows, kc, ns), FG_DTYPE_F8_COLS, krows, kc);
		o.at.v = T(dev_f8(&rv, krows, kc, ns), FG_DTYPE_F8_COLS, krows, kc);
		bytes = 2.0 * (double)fg_f8c_bytes((uint64_t)krows, (uint64_t)kc);
	} else {
		o.at.k = T(dev_alloc(&rk, (uint64_t)(krows * kc) * 2, 1), FG_DTYPE_F16, krows, kc);
		o.at.v = T(dev_alloc(&rv, (uint64_t)(krows * kc) * 2, 1), FG_DTYPE_F16, krows, kc);
		bytes = 4.0 * (double)krows * (double)kc;
	}
	o.at.out = T(dev_alloc(&ro, (uint64_t)(batch * hc) * 2, 0), FG_DTYPE_F16, batch, hc);
	o.at.batch = batch;
	o.at.seq = 1;
	o.at.len = len;
	o.at.cache_stride = len;
	o.at.heads = heads;
	o.at.kv_heads = kvh;
	o.at.head_dim = hd;
	o.at.scale = 1.0f / sqrtf((float)hd);
	o.at.pad = pad;
	ms = op_time(&o);
	if (ms > 0)
		printf("attention_decode %-3s batch=%-4" PRId64 " heads=%-3" PRId64 "/%-2" PRId64
		       " hd=%-4" PRId64 " len=%-5" PRId64 ": %9.4f ms %8.1f GB/s of cache\n",
		       names[cache], batch, heads, kvh, hd, len, ms, bytes / ms / 1e6);
	fflush(stdout);
	fg_tier_free(&dev, &rq);
	fg_tier_free(&dev, &rk);
	fg_tier_free(&dev, &rv);
	fg_tier_free(&dev, &ro);
	free(pad);
}

/* ---- layer norm, KV append --------------------------------------------------------------- */

static void bench_ln(struct fg_backend *be, int64_t n, int64_t h)
{
	struct fg_region rx, rg, rb;
	struct op o = { .kind = OP_LN, .be = be };
	double ms;

	o.ln.x = T(dev_alloc(&rx, (uint64_t)(n * h) * 2, 1), FG_DTYPE_F16, n, h);
	o.ln.gamma = T(dev_alloc(&rg, (uint64_t)h * 2, 1), FG_DTYPE_F16, 1, h);
	o.ln.beta = T(dev_alloc(&rb, (uint64_t)h * 2, 1), FG_DTYPE_F16, 1, h);
	o.ln.eps = 1e-5f;
	o.ln.out = o.ln.x;
	ms = op_time(&o);
	if (ms > 0)
		printf("layer_norm n=%-7" PRId64 " h=%-5" PRId64 " (in place): %9.4f ms %8.1f GB/s\n",
		       n, h, ms, 4.0 * (double)(n * h) / ms / 1e6);
	fg_tier_free(&dev, &rx);
	fg_tier_free(&dev, &rg);
	fg_tier_free(&dev, &rb);
}

/* cache: as bench_decode's. */
static void bench_kv(struct fg_backend *be, int64_t batch, int64_t n, int64_t h, int cache)
{
	static const char *const names[] = { "f16", "q4", "f8" };
	static const enum fg_dtype dts[] = { FG_DTYPE_F16, FG_DTYPE_Q4_COLS, FG_DTYPE_F8_COLS };
	struct fg_region rs, rc;
	struct op o = { .kind = OP_KV, .be = be };
	int64_t rows = batch * n;
	uint64_t cbytes = cache == 1 ? fg_q4_bytes((uint64_t)rows, (uint64_t)h, 1)
			: cache == 2 ? fg_f8c_bytes((uint64_t)rows, (uint64_t)h)
				     : (uint64_t)(rows * h) * 2;
	double ms;

	o.kv.src = T(dev_alloc(&rs, (uint64_t)(rows * h) * 2, 1), FG_DTYPE_F16, rows, h);
	o.kv.cache = T(dev_alloc(&rc, cbytes, 0), dts[cache], rows, h);
	o.kv.batch = batch;
	o.kv.n = n;
	o.kv.start = 0;
	o.kv.cache_stride = n;
	ms = op_time(&o);
	if (ms > 0)
		printf("kv_append %-3s rows=%-7" PRId64 " h=%-5" PRId64 ": %9.4f ms %8.1f GB/s\n",
		       names[cache], rows, h, ms,
		       ((double)(rows * h) * 2 + (double)cbytes) / ms / 1e6);
	fg_tier_free(&dev, &rs);
	fg_tier_free(&dev, &rc);
}

/* ---- sampling -------------------------------------------------------------------------- */

/* A language model's logits: 3 x a standard normal (Box-Muller over rand()). */
static float logit_like(void)
{
	double u = (rand() + 1.0) / ((double)RAND_MAX + 2), v = rand() / ((double)RAND_MAX + 1);

	return (float)(3 * sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* The argmax op, then the sample op at a few settings, on the same rows; the
 * same draws every run (the cost hardly depends on them). */
static void bench_sample(struct fg_backend *be, int64_t rows, int64_t vocab)
{
	static const struct { float t; int32_t k; float p; } cfg[] = {
		{ 0.7f, 0, 0.9f }, { 0.7f, 50, 0 }, { 1.0f, 0, 0 }, { 0, 0, 0 },
	};
	struct fg_region rx;
	struct op o = { .kind = OP_ARGMAX, .be = be };
	size_t n = (size_t)(rows * vocab);
	uint16_t *h = malloc(n * 2);
	float *t = malloc((size_t)rows * 4), *p = malloc((size_t)rows * 4);
	int32_t *k = malloc((size_t)rows * 4), *tok = malloc((size_t)rows * 4);
	uint64_t *u = malloc((size_t)rows * 8);
	double ms_argmax;

	if (!fg_backend_can_sample(be)) {
		printf("sample: this cublas build has no sample op\n");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		h[i] = fg_float_to_half(logit_like());
	if (fg_tier_alloc(&dev, n * 2, &rx) != 0 || fg_tier_write(&dev, &rx, 0, h, n * 2) != 0) {
		fprintf(stderr, "gpu_ops_bench: %s\n", fg_last_error());
		exit(1);
	}
	for (int64_t r = 0; r < rows; r++)
		u[r] = ((uint64_t)rand() << 31 ^ (uint64_t)rand()) & ((1ull << 53) - 1);
	o.smp.logits = T(rx.addr, FG_DTYPE_F16, rows, vocab);
	o.smp.temperature = t;
	o.smp.top_k = k;
	o.smp.top_p = p;
	o.smp.draw = u;
	o.smp.out = tok;
	ms_argmax = op_time(&o);
	if (ms_argmax > 0)
		printf("argmax rows=%-4" PRId64 " vocab=%-6" PRId64 "%27s: %9.4f ms\n", rows, vocab,
		       "", ms_argmax);
	o.kind = OP_SAMPLE;
	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		double ms;

		for (int64_t r = 0; r < rows; r++) {
			t[r] = cfg[c].t;
			k[r] = cfg[c].k;
			p[r] = cfg[c].p;
		}
		ms = op_time(&o);
		if (ms > 0)
			printf("sample rows=%-4" PRId64 " vocab=%-6" PRId64 " T=%-3g top_k=%-3d "
			       "top_p=%-4g: %9.4f ms %6.2f x argmax\n", rows, vocab, (double)cfg[c].t,
			       cfg[c].k, (double)cfg[c].p, ms, ms_argmax > 0 ? ms / ms_argmax : 0);
		fflush(stdout);
	}
	fg_tier_free(&dev, &rx);
out:
	free(h), free(t), free(p), free(k), free(tok), free(u);
}

int main(int argc, char **argv)
{
	struct fg_plugin_handle ph;
	struct fg_backend be, fused, deq, be8, be8d;
	void *opts;
	int n = 0;

	quick = argc > 1 && strcmp(argv[1], "quick") == 0;
	only_q4 = argc > 1 && strcmp(argv[1], "q4") == 0;
	only_decode = argc > 1 && strcmp(argv[1], "decode") == 0;
	only_sample = argc > 1 && strcmp(argv[1], "sample") == 0;
	only_fp8 = argc > 1 && strcmp(argv[1], "fp8") == 0;
	only_f8w = argc > 1 && strcmp(argv[1], "f8w") == 0;
	only_attn = argc > 1 && strcmp(argv[1], "attn") == 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		printf("gpu_ops_bench: no CUDA device, nothing to measure\n");
		return 77;
	}
	if (fg_plugin_load("cuda_mem", FG_PLUGIN_STORAGE, &ph) != 0 ||
	    !(opts = fg_plugin_opts_new(ph.plugin)) ||
	    fg_tier_open(&dev, "compute", &ph, opts, 0) != 0) {
		fprintf(stderr, "gpu_ops_bench: cuda_mem: %s (set FGCORE_PLUGIN_PATH)\n",
			fg_last_error());
		return 1;
	}
	if (open_backend(&be, NULL, NULL) || open_backend(&fused, "q4_fused_max_m", "65536") ||
	    open_backend(&deq, "q4_fused_max_m", "0") || open_backend(&be8, "fp8_prefill", "true") ||
	    open_backend2(&be8d, "fp8_prefill", "true", "fp8_min_rows", "1")) {
		fprintf(stderr, "gpu_ops_bench: cublas: %s\n", fg_last_error());
		return 1;
	}
	{
		struct cudaDeviceProp p;

		cudaGetDeviceProperties(&p, 0);
		printf("# %s, %d SMs, cc %d.%d, compute tier %.1f GiB\n", p.name,
		       p.multiProcessorCount, p.major, p.minor,
		       (double)dev.capacity / (1024.0 * 1024 * 1024));
	}

	/* OPT-6.7B: hidden 4096, ffn 16384; OPT-30B: hidden 7168, ffn 28672 */
	static const int64_t shapes67[][3] = { { 4096, 4096, 0 }, { 16384, 4096, 1 },
					       { 4096, 16384, 2 } };
	static const int64_t shapes30[][3] = { { 7168, 7168, 0 }, { 28672, 7168, 1 },
					       { 7168, 28672, 2 } };
	static const int64_t prefill_m[] = { 8192, 32768, 131072 };
	static const int64_t decode_m[] = { 1, 8, 32, 64, 128, 256 };
	static const char *const tags67[] = { "6.7b-proj", "6.7b-fc1", "6.7b-fc2" };
	static const char *const tags30[] = { "30b-proj", "30b-fc1", "30b-fc2" };
	/* OPT-175B: hidden 12288, ffn 49152 */
	static const int64_t shapes175[][3] = { { 12288, 12288, 0 }, { 49152, 12288, 1 },
						{ 12288, 49152, 2 } };
	static const char *const tags175[] = { "175b-proj", "175b-fc1", "175b-fc2" };

	/* the four products of a layer: q/k/v, out_proj (+ residual), fc1 (ReLU), fc2 (+ residual) */
	static const int64_t prod67[][4] = { { 4096, 4096, 0, 0 }, { 4096, 4096, 0, 1 },
					     { 16384, 4096, 1, 0 }, { 4096, 16384, 0, 1 } };
	static const int64_t prod30[][4] = { { 7168, 7168, 0, 0 }, { 7168, 7168, 0, 1 },
					     { 28672, 7168, 1, 0 }, { 7168, 28672, 0, 1 } };
	static const char *const ptag67[] = { "6.7b-qkv", "6.7b-out", "6.7b-fc1", "6.7b-fc2" };
	static const char *const ptag30[] = { "30b-qkv", "30b-out", "30b-fc1", "30b-fc2" };

	if (only_sample)
		goto sample;
	if (only_f8w)
		goto f8w;
	if (only_attn)
		goto decode;
	if (only_q4 || only_decode)
		goto q4;
	if (only_fp8)
		goto fp8;
	printf("## linear fp16, prefill\n");
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < (quick ? 1 : 3); i++)
			bench_linear(&be, tags67[s], prefill_m[i], shapes67[s][0], shapes67[s][1], 0,
				     shapes67[s][2] == 1, shapes67[s][2] == 2);
	for (int s = 0; s < 3 && !quick; s++)
		for (int i = 0; i < 2; i++)
			bench_linear(&be, tags30[s], prefill_m[i], shapes30[s][0], shapes30[s][1], 0,
				     shapes30[s][2] == 1, shapes30[s][2] == 2);
	bench_linear(&be, "logits", 256, 50272, 4096, 0, 0, 0);

fp8:
	printf("## linear fp16 against fp8 (fp8_prefill), prefill m = 16384\n");
	for (int s = 0; s < 4; s++)
		bench_linear_fp8(&be, &be8, ptag67[s], 16384, prod67[s][0], prod67[s][1],
				 (int)prod67[s][2], (int)prod67[s][3]);
	for (int s = 0; s < 4 && !quick; s++)
		bench_linear_fp8(&be, &be8, ptag30[s], 16384, prod30[s][0], prod30[s][1],
				 (int)prod30[s][2], (int)prod30[s][3]);
	if (only_fp8)
		goto done;

	printf("## linear fp16, decode\n");
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < 6; i++)
			bench_linear(&be, tags67[s], decode_m[i], shapes67[s][0], shapes67[s][1], 0,
				     shapes67[s][2] == 1, shapes67[s][2] == 2);

f8w:
	/* fp8 weights at decode shapes: OPT-6.7B's, then Llama-3-8B's gate (or
	 * up) and down; be8d takes every m >= 1 to the fp8 tensor cores as
	 * stored (x quantized a row at a time) when not fused */
	printf("## linear f8 weights, decode: fp16, default (fused up to m = 128), fused forced, "
	       "dequant forced, fp8 tensor cores (fp8_prefill from 1 row, past 128)\n");
	{
		static const int64_t sh[][3] = { { 4096, 4096, 2 }, { 16384, 4096, 1 },
						 { 4096, 16384, 2 }, { 14336, 4096, 0 },
						 { 4096, 14336, 2 } };
		static const char *const tg[] = { "6.7b-proj", "6.7b-fc1", "6.7b-fc2", "8b-gate",
						  "8b-down" };

		for (int s = 0; s < 5; s++)
			for (int i = 0; i < 6; i++) {
				int64_t m = decode_m[i], r = sh[s][2] == 1, res = sh[s][2] == 2;

				bench_linear(&be, tg[s], m, sh[s][0], sh[s][1], 0, r, res);
				bench_linear(&be, tg[s], m, sh[s][0], sh[s][1], 2, r, res);
				bench_linear(&fused, "[fused]", m, sh[s][0], sh[s][1], 2, r, res);
				bench_linear(&deq, "[dequant]", m, sh[s][0], sh[s][1], 2, r, res);
				if (m > 128)
					bench_linear(&be8d, "[fp8 cores]", m, sh[s][0], sh[s][1], 2, r,
						     res);
			}
	}
	if (only_f8w)
		goto done;

q4:
	printf("## linear q4, decode: default (fused up to m = 128), fused forced, dequant forced\n");
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < 6; i++) {
			bench_linear(&be, tags67[s], decode_m[i], shapes67[s][0], shapes67[s][1], 1,
				     shapes67[s][2] == 1, shapes67[s][2] == 2);
			bench_linear(&fused, "[fused]", decode_m[i], shapes67[s][0], shapes67[s][1], 1,
				     shapes67[s][2] == 1, shapes67[s][2] == 2);
			bench_linear(&deq, "[dequant]", decode_m[i], shapes67[s][0], shapes67[s][1], 1,
				     shapes67[s][2] == 1, shapes67[s][2] == 2);
		}
	for (int i = 0; i < 6 && !quick; i++)
		bench_linear(&be, tags30[1], decode_m[i], shapes30[1][0], shapes30[1][1], 1, 1, 0);
	/* OPT-175B's decode products: 75-300 MB of 4-bit bytes, past the 50 MB L2 */
	for (int s = 0; s < 3 && !quick; s++)
		for (int i = 0; i < 4; i++)
			bench_linear(&be, tags175[s], decode_m[i], shapes175[s][0], shapes175[s][1], 1,
				     shapes175[s][2] == 1, shapes175[s][2] == 2);
	if (only_q4)
		goto done;
	if (only_decode)
		goto decode;
	printf("## linear q4, prefill (dequantize + cuBLASLt)\n");
	bench_linear(&be, tags67[1], 8192, 16384, 4096, 1, 1, 0);
	bench_linear(&be, tags67[0], 32768, 4096, 4096, 1, 0, 1);

	printf("## attention prefill, seq 512\n");
	bench_prefill(&be, 16, 512, 32, 128);
	bench_prefill(&be, 64, 512, 32, 128);
	bench_prefill(&be, 32, 512, 32, 64);
	bench_prefill(&be, 16, 512, 32, 80);
	bench_prefill(&be, 4, 2048, 32, 128);

decode:
	printf("## attention decode\n");
	for (int cache = 0; cache < 3; cache++) {
		bench_decode(&be, 64, 32, 32, 128, 544, cache);
		bench_decode(&be, 256, 32, 32, 128, 544, cache);
		bench_decode(&be, 1, 32, 32, 128, 2048, cache);
		bench_decode(&be, 8, 32, 32, 128, 2048, cache);
		bench_decode(&be, 64, 56, 56, 128, 544, cache); /* OPT-30B */
		bench_decode(&be, 32, 96, 96, 128, 544, cache); /* OPT-175B */
		bench_decode(&be, 256, 32, 8, 128, 544, cache); /* Llama-3-8B */
		bench_decode(&be, 512, 32, 8, 128, 544, cache);
	}
	if (only_attn)
		goto done;

	printf("## layer norm, kv append\n");
	bench_ln(&be, 131072, 4096);
	bench_ln(&be, 256, 4096);
	for (int cache = 0; cache < 3; cache++)
		bench_kv(&be, 256, 512, 4096, cache);
	bench_kv(&be, 256, 1, 4096, 1);
	bench_kv(&be, 256, 1, 4096, 2);

sample:
	printf("## sampling: the tokens back on the host\n");
	bench_sample(&be, 256, 50272);
done:
	fg_backend_close(&be8d);
	fg_backend_close(&be8);
	fg_backend_close(&deq);
	fg_backend_close(&fused);
	fg_backend_close(&be);
	fg_tier_close(&dev);
	return 0;
}
