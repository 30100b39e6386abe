/* tests/test_cublas.c - the cublas backend (fp16 activations, tensors in the
 * cuda_mem tier) against cpu_blas (fp32 activations, host memory) on random
 * inputs: every op over several shapes - m = 1 decode, odd n and k, ld > cols,
 * out aliasing the residual, left pads, batch and heads > 1, head_dim
 * 20/64/72/80/96/112/128, cache_stride > len - and 4-bit weights and caches
 * encoded by a reference encoder written here from fgcore/q4.h and the
 * int4_group64 codec's rules (and checked byte for byte against that codec
 * when it is built).  Both backends get the same fp16-rounded inputs.
 *
 * Tolerances, on max over outputs of |gpu - ref| / (1 + |ref|):
 *   linear 5e-3      fp16 output rounding (2^-11 relative) twice at most
 *                    (product, then residual) plus fp32 summation order; a
 *                    4-bit weight rounds to fp16 identically on both sides
 *                    up to one ulp on rare ties
 *   layer_norm 2e-3  fp16 output rounding; fp32 vs double statistics
 *   embed 1e-3       one fp16 rounding of an exact fp32 sum
 *   attention 4e-3   probabilities rounded to fp16 for the P·V product, the
 *                    output rounded to fp16
 * kv_append is exact: fp16 rows are copied; 4-bit rows must equal the
 * reference encoder's bytes, fp8 rows fgcore/f8.h's (decode over an fp8
 * cache is compared on the values those bytes stand for, fg_f8c_load).  Columns between cols and ld, cache rows outside
 * the append and rows before a left pad (zeros) are checked exactly.
 * The worst error of each op is printed.
 *
 * ABI 1.1 ops and variants are compared against naive double-precision
 * references written here (cpu_blas is not needed for them): RMS norm and
 * layer norm without beta (same tolerance as layer_norm), embed without a
 * position table (exact copies), SiLU and the gating multiplier with fp16 and
 * 4-bit weights at decode and prefill sizes, through all three 4-bit paths
 * (linear tolerance), a SwiGLU chain, rope (1e-3: one fp16 rounding of an fp32
 * rotation; values past rot_dim exact), grouped-query prefill and decode over
 * fp16 and 4-bit caches with left pads (attention tolerance), and `supports`.
 * The sample op (ABI 1.4) must give fg_sample_sorted's token exactly, row by
 * row, over logit shapes with ties, signed zeros and non-finite values, mixed
 * temperatures, top_k and top_p, vocabularies of 50272 (vector and scalar
 * paths), 37, 8 and 1; its greedy rows the argmax op's.
 * The logprob op (ABI 1.6) must give tests/logprob_ref.h's top ids exactly
 * and its log-probabilities within 1e-5 relative, on the same fp16 values.
 * fp8 products (fp8_prefill) are compared with a host mirror of the backend's
 * row-wise E4M3 quantization, bounds argued where they are defined.
 * The generic tier (ABI 1.10) and Gemma 2's pieces (1.12): add and softcap
 * against double references (fp32 outputs 1e-6, fp16 1e-3), route against
 * cpu_blas's choices on the same fp16 logits (ids exactly, weights 1e-6),
 * gather exactly, scatter_add within its rounding and rows it must leave
 * alone exact, the grouped linear bit for bit a linear per group, GELU (tanh
 * form) in linear and RMS norm with a gamma shift at their ops' tolerances;
 * sliding windows and soft-capped scores in every attention path (prefill
 * with heads up to 256, over the cache, decode over fp16 and 4-bit caches
 * and rings, 1.12's rings as short as the window) at attention's.
 * Argument validation is the core's (core/backend/compute_ops.c); only the
 * kernels' own limits are refused here.  Exits 77 without a GPU.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/f8.h>
#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/sampling/sample.h"
#include "tests/logprob_ref.h"
#include "core/tier/tier.h"
#include "tests/gpu_common.h"

#define TOL_LINEAR 5e-3
#define TOL_LN 2e-3
#define TOL_EMBED 1e-3
#define TOL_ATTN 4e-3
#define TOL_ROPE 1e-3

#define SENTINEL 0x7e55u /* a NaN pattern no op produces */

static struct fg_tier dev;                    /* cuda_mem, 2 GiB pool */
static struct fg_backend gpu, cpu;

/* ---- setup ------------------------------------------------------------------------- */

static void open_backend(struct fg_backend *b, const char *name, const char *key,
			 const char *val)
{
	struct fg_plugin_handle ph;
	void *opts;

	ck_assert_msg(fg_plugin_load(name, FG_PLUGIN_COMPUTE, &ph) == 0, "%s", fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_ptr_nonnull(opts);
	if (key)
		ck_assert_msg(fg_plugin_opts_set(ph.plugin, opts, key, val, "test") == 0, "%s",
			      fg_last_error());
	ck_assert_msg(fg_backend_open(b, &ph, opts) == 0, "%s: %s", name, fg_last_error());
}

static void setup(void)
{
	struct fg_plugin_handle ph;
	void *opts;

	ck_assert_msg(fg_plugin_load("cuda_mem", FG_PLUGIN_STORAGE, &ph) == 0, "%s",
		      fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_int_eq(fg_plugin_opts_set(ph.plugin, opts, "pool", "2G", "test"), 0);
	ck_assert_msg(fg_tier_open(&dev, "compute", &ph, opts, 0) == 0, "%s", fg_last_error());
	open_backend(&gpu, "cublas", NULL, NULL);
	ck_assert_int_eq(gpu.info.act_dtype, FG_DTYPE_F16);
	open_backend(&cpu, "cpu_blas", "threads", "4");
	ck_assert_int_eq(cpu.info.act_dtype, FG_DTYPE_F32);
}

static void teardown(void)
{
	fg_backend_close(&gpu);
	fg_backend_close(&cpu);
	fg_tier_close(&dev);
}

/* ---- host and device buffers --------------------------------------------------------- */

/* Zeroed, so that no reader ever sees indeterminate bytes. */
static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

static uint16_t *rand_h(size_t n, float lo, float hi)
{
	uint16_t *h = xmalloc(n * sizeof(*h));

	for (size_t i = 0; i < n; i++)
		h[i] = fg_float_to_half(gpu_uniform(lo, hi));
	return h;
}

static float *to_f32(const uint16_t *h, size_t n)
{
	float *f = xmalloc(n * sizeof(*f));

	for (size_t i = 0; i < n; i++)
		f[i] = fg_half_to_float(h[i]);
	return f;
}

struct dbuf {
	struct fg_region r;
	size_t bytes;
};

static void *dput(struct dbuf *d, const void *src, size_t bytes)
{
	d->bytes = bytes;
	ck_assert_msg(fg_tier_alloc(&dev, bytes ? bytes : 1, &d->r) == 0, "%s", fg_last_error());
	if (bytes && src)
		ck_assert_msg(fg_tier_write(&dev, &d->r, 0, src, bytes) == 0, "%s", fg_last_error());
	return d->r.addr;
}

static void dget(struct dbuf *d, void *dst)
{
	ck_assert_msg(fg_backend_stream_sync(&gpu, NULL) == 0, "%s", fg_last_error());
	if (d->bytes)
		ck_assert_msg(fg_tier_read(&dev, &d->r, 0, dst, d->bytes) == 0, "%s",
			      fg_last_error());
}

/* Frees d; a buffer left zeroed (an optional operand never put) is nothing. */
static void dfree(struct dbuf *d)
{
	if (d->r.size)
		fg_tier_free(&dev, &d->r);
}

static struct fg_tensor tens(void *data, enum fg_dtype t, int64_t rows, int64_t cols,
			     int64_t ld)
{
	struct fg_tensor x = { .data = data, .dtype = t, .rows = rows, .cols = cols, .ld = ld };

	return x;
}

/* ---- comparison ---------------------------------------------------------------------- */

struct worst {
	double err;
	char where[200];
};

/* Element i of an fp16 (f32 0) or fp32 result. */
static double got_at(const void *got, int f32, int64_t i)
{
	return f32 ? ((const float *)got)[i] : fg_half_to_float(((const uint16_t *)got)[i]);
}

/* max |got - ref| / (1 + |ref|) over [rows, cols] for got fp16 or fp32; NaN
 * counts as infinite. */
static double compare_as(struct worst *w, const char *label, const float *ref, int64_t ldr,
			 const void *got, int f32, int64_t ldg, int64_t rows, int64_t cols)
{
	double mx = 0;
	int64_t wi = -1, wj = -1;

	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++) {
			double r = ref[i * ldr + j], g = got_at(got, f32, i * ldg + j);
			double e = fabs(g - r) / (1 + fabs(r));

			if (isnan(e) || isnan(g) != isnan(r))
				e = INFINITY;
			if (e > mx || wi < 0) {
				if (e > mx)
					mx = e;
				wi = i;
				wj = j;
			}
		}
	if (mx >= w->err) {
		w->err = mx;
		if (wi >= 0)
			snprintf(w->where, sizeof(w->where), "%s at [%" PRId64 ", %" PRId64
				 "]: gpu %.9g ref %.9g", label, wi, wj,
				 got_at(got, f32, wi * ldg + wj), ref[wi * ldr + wj]);
	}
	return mx;
}

static double compare(struct worst *w, const char *label, const float *ref, int64_t ldr,
		      const uint16_t *got, int64_t ldg, int64_t rows, int64_t cols)
{
	return compare_as(w, label, ref, ldr, got, 0, ldg, rows, cols);
}

/* Elements [cols, ld) of every row still hold the sentinel. */
static void check_padding(const char *label, const uint16_t *got, int64_t rows, int64_t cols,
			  int64_t ld)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = cols; j < ld; j++)
			ck_assert_msg(got[i * ld + j] == SENTINEL, "%s: padding [%" PRId64 ", %"
				      PRId64 "] was overwritten (0x%04x)", label, i, j,
				      got[i * ld + j]);
}

static void report(const char *op, const struct worst *w, double tol)
{
	printf("%-22s worst |gpu-ref|/(1+|ref|) = %.3g (tolerance %.3g)  %s\n", op, w->err, tol,
	       w->where);
	fflush(stdout);
}

/* ---- 4-bit reference encoder (fgcore/q4.h + the int4_group64 codec's rules) ------------- */

struct q4p {
	uint16_t hs, hm;
	float m, inv;
};

static struct q4p ref_q4_params(float lo, float hi)
{
	struct q4p p = { 0, 0, 0.0f, 0.0f };
	double m;
	uint16_t hs;

	if (!(lo <= hi))
		lo = hi = 0.0f;
	lo = lo < -65504.0f ? -65504.0f : lo > 65504.0f ? 65504.0f : lo;
	hi = hi < -65504.0f ? -65504.0f : hi > 65504.0f ? 65504.0f : hi;
	lo += 0.0f;
	hi += 0.0f;
	/* mn: the largest fp16 <= lo */
	p.hm = fg_float_to_half(lo);
	if (fg_half_to_float(p.hm) > lo)
		p.hm = (p.hm & 0x8000u) ? (uint16_t)(p.hm + 1) : p.hm ? (uint16_t)(p.hm - 1)
								 : 0x8001u;
	m = fg_half_to_float(p.hm);
	/* scale: the smallest fp16 with mn + 15 * scale >= hi */
	hs = fg_float_to_half((float)(((double)hi - m) / 15.0));
	while (hs < 0x7bffu && !(m + 15.0 * fg_half_to_float(hs) >= (double)hi))
		hs++;
	while (hs > 0 && m + 15.0 * fg_half_to_float((uint16_t)(hs - 1)) >= (double)hi)
		hs--;
	p.hs = hs;
	p.m = fg_half_to_float(p.hm);
	p.inv = fg_half_to_float(hs) > 0.0f ? 1.0f / fg_half_to_float(hs) : 0.0f;
	return p;
}

static unsigned ref_q4_code(float x, const struct q4p *p)
{
	float t = (x - p->m) * p->inv;

	t = t > 0.0f ? t : 0.0f;
	t = t < 15.0f ? t : 15.0f;
	return (unsigned)lrintf(t); /* ties to even, the default rounding mode */
}

static void set_nibble(uint8_t *data, uint64_t e, unsigned q)
{
	uint8_t *b = data + e / 2;

	*b = (e & 1) ? (uint8_t)((*b & 0xf0u) | q) : (uint8_t)((*b & 0x0fu) | (q << 4));
}

static unsigned get_nibble(const uint8_t *data, uint64_t e)
{
	return (e & 1) ? data[e / 2] & 15u : data[e / 2] >> 4;
}

/* Encode rows [r0, r1) of a [rows, cols] tensor v (row-major, ld = cols) into
 * out (the whole encoded tensor, other rows untouched) along group_dim.  With
 * group_dim 0, r0 and r1 must be multiples of 64 (or r1 = rows). */
static void ref_q4_encode_rows(const float *v, uint64_t rows, uint64_t cols, int gd,
			       uint64_t r0, uint64_t r1, uint8_t *out)
{
	uint8_t *prm = out + fg_q4_data_bytes(rows, cols);
	uint64_t gcols = fg_q4_grid_cols(cols, gd);

	if (gd == 1) {
		for (uint64_t r = r0; r < r1; r++)
			for (uint64_t g = 0; g < gcols; g++) {
				uint64_t c0 = g * 64, c1 = c0 + 64 < cols ? c0 + 64 : cols;
				float lo = INFINITY, hi = -INFINITY;

				for (uint64_t c = c0; c < c1; c++) {
					float x = v[r * cols + c];

					lo = x < lo ? x : lo;
					hi = x > hi ? x : hi;
				}
				struct q4p p = ref_q4_params(lo, hi);
				for (uint64_t c = c0; c < c1; c++)
					set_nibble(out, r * cols + c, ref_q4_code(v[r * cols + c], &p));
				uint8_t *b = prm + 4 * (r * gcols + g);
				b[0] = (uint8_t)p.hs, b[1] = (uint8_t)(p.hs >> 8);
				b[2] = (uint8_t)p.hm, b[3] = (uint8_t)(p.hm >> 8);
			}
		return;
	}
	for (uint64_t g0 = r0; g0 < r1; g0 += 64)
		for (uint64_t c = 0; c < cols; c++) {
			uint64_t e1 = g0 + 64 < rows ? g0 + 64 : rows;
			float lo = INFINITY, hi = -INFINITY;

			for (uint64_t r = g0; r < e1; r++) {
				float x = v[r * cols + c];

				lo = x < lo ? x : lo;
				hi = x > hi ? x : hi;
			}
			struct q4p p = ref_q4_params(lo, hi);
			for (uint64_t r = g0; r < e1; r++)
				set_nibble(out, r * cols + c, ref_q4_code(v[r * cols + c], &p));
			uint8_t *b = prm + 4 * ((g0 / 64) * cols + c);
			b[0] = (uint8_t)p.hs, b[1] = (uint8_t)(p.hs >> 8);
			b[2] = (uint8_t)p.hm, b[3] = (uint8_t)(p.hm >> 8);
		}
}

static uint8_t *ref_q4_encode(const float *v, uint64_t rows, uint64_t cols, int gd)
{
	uint64_t n = fg_q4_bytes(rows, cols, gd);
	uint8_t *out = xmalloc((size_t)n);

	memset(out, 0, (size_t)n);
	ref_q4_encode_rows(v, rows, cols, gd, 0, rows, out);
	return out;
}

/* Decode to fp32: q * scale + min. */
static float *ref_q4_decode(const uint8_t *in, uint64_t rows, uint64_t cols, int gd)
{
	const uint8_t *prm = in + fg_q4_data_bytes(rows, cols);
	uint64_t gcols = fg_q4_grid_cols(cols, gd);
	float *v = xmalloc((size_t)(rows * cols) * sizeof(float));

	for (uint64_t r = 0; r < rows; r++)
		for (uint64_t c = 0; c < cols; c++) {
			uint64_t g = gd == 0 ? (r / 64) * cols + c : r * gcols + c / 64;
			const uint8_t *b = prm + 4 * g;
			float s = fg_half_to_float((uint16_t)(b[0] | b[1] << 8));
			float m = fg_half_to_float((uint16_t)(b[2] | b[3] << 8));

			v[r * cols + c] = (float)get_nibble(in, r * cols + c) * s + m;
		}
	return v;
}

/* ---- linear ------------------------------------------------------------------------------ */

struct lin_case {
	int64_t m, n, k;
	int xpad, opad;
	int bias, relu;
	int res; /* 0 none, 1 separate buffer, 2 the same view as out */
	int q4; /* 1: 4-bit weights; 2: fp8 (test_linear_f8) */
};

static const struct lin_case lin_cases[] = {
	{ 1, 64, 64, 0, 0, 1, 0, 0, 0 },
	{ 1, 100, 37, 3, 5, 1, 1, 1, 0 },
	{ 3, 130, 70, 8, 0, 0, 1, 2, 0 },
	{ 17, 257, 96, 0, 3, 1, 0, 2, 0 },
	{ 32, 512, 256, 0, 0, 1, 1, 0, 0 },
	{ 200, 192, 320, 8, 8, 1, 0, 2, 0 },
	{ 513, 1024, 1024, 0, 0, 1, 1, 0, 0 },
	{ 5, 77, 0, 0, 0, 1, 1, 1, 0 },
	{ 4, 50, 64, 1, 1, 1, 1, 2, 0 },
	{ 1, 64, 64, 0, 0, 1, 0, 0, 1 },
	{ 1, 100, 96, 0, 0, 1, 1, 0, 1 },
	{ 7, 300, 128, 8, 2, 1, 1, 1, 1 },
	{ 16, 256, 512, 0, 0, 1, 0, 2, 1 },
	{ 33, 192, 256, 0, 0, 1, 1, 2, 1 },
	{ 1, 4096, 4096, 0, 0, 1, 0, 2, 1 },
	{ 8, 512, 4096, 0, 0, 0, 0, 0, 1 },
	{ 64, 1000, 1024, 0, 8, 1, 1, 0, 1 },
	{ 65, 128, 256, 0, 0, 1, 0, 1, 1 },
	{ 300, 640, 384, 8, 0, 1, 1, 2, 1 },
	/* the fused 4-bit variants (m <= 8, 16, 32, 64) at n off their block
	 * rows, k off their stages, k split across blocks */
	{ 17, 200, 320, 0, 0, 1, 1, 2, 1 },
	{ 32, 1100, 2048, 0, 8, 1, 0, 1, 1 },
	{ 12, 96, 1024, 8, 0, 0, 0, 2, 1 },
	{ 1, 4100, 2048, 0, 0, 1, 1, 1, 1 },
	{ 48, 130, 4096, 0, 0, 1, 0, 2, 1 },
	{ 3, 90, 70, 0, 0, 1, 0, 0, 1 },
	{ 2, 50, 33, 1, 0, 1, 1, 1, 1 },
};

/* Random weights [n, k] into wf, and as the backends get them: the 4-bit
 * encoding (returned, when q4 is 1; fp8's when 2; else NULL) and its decoded
 * values in fp16 (wh), or wf rounded to fp16. */
static uint8_t *lin_weights(int64_t n, int64_t k, int q4, float *wf, uint16_t *wh)
{
	float ws = 1.0f / sqrtf((float)(k ? k : 1));
	uint8_t *enc = NULL;

	for (int64_t i = 0; i < n * k; i++)
		wf[i] = gpu_uniform(-ws, ws);
	if (q4 == 2) { /* f8.h's rule, row by row */
		enc = xmalloc((size_t)fg_f8_bytes((uint64_t)n, (uint64_t)k));
		memset(enc, 0, (size_t)fg_f8_bytes((uint64_t)n, (uint64_t)k));
		for (int64_t r = 0; r < n; r++) {
			float scale, inv;

			fg_f8_scale_of(fg_f8_amax(wf + r * k, (size_t)k), &scale, &inv);
			fg_f8_scale_store(enc + fg_f8_data_bytes((uint64_t)n, (uint64_t)k),
					  (uint64_t)r, scale);
			for (int64_t j = 0; j < k; j++) {
				enc[r * k + j] = fg_f8_code(wf[r * k + j], inv);
				wh[r * k + j] = fg_float_to_half(fg_f8_value(enc[r * k + j], scale));
			}
		}
	} else if (q4) {
		float *dec;

		enc = ref_q4_encode(wf, (uint64_t)n, (uint64_t)k, 0);
		dec = ref_q4_decode(enc, (uint64_t)n, (uint64_t)k, 0);
		for (int64_t i = 0; i < n * k; i++)
			wh[i] = fg_float_to_half(dec[i]);
		free(dec);
	} else {
		for (int64_t i = 0; i < n * k; i++)
			wh[i] = fg_float_to_half(wf[i]);
	}
	return enc;
}

/* x [m, k] (ld ldx) and the weight [n, k] on the device as a linear's
 * operands: the encoding enc (4-bit, or fp8 when f8) when not NULL, else the
 * fp16 wh. */
static void put_xw_as(struct fg_linear_args *ga, struct dbuf *dx, struct dbuf *dw,
		      const uint16_t *xh, int64_t ldx, const uint8_t *enc, int f8,
		      const uint16_t *wh, int64_t m, int64_t n, int64_t k)
{
	uint64_t eb = f8 ? fg_f8_bytes((uint64_t)n, (uint64_t)k)
			 : fg_q4_bytes((uint64_t)n, (uint64_t)k, 0);

	ga->x = tens(dput(dx, xh, (size_t)(m * ldx) * 2), FG_DTYPE_F16, m, k, ldx);
	ga->w = enc ? tens(dput(dw, enc, (size_t)eb), f8 ? FG_DTYPE_F8_ROWS : FG_DTYPE_Q4_ROWS,
			   n, k, k)
		    : tens(dput(dw, wh, (size_t)(n * k) * 2), FG_DTYPE_F16, n, k, k);
}

static void put_xw(struct fg_linear_args *ga, struct dbuf *dx, struct dbuf *dw,
		   const uint16_t *xh, int64_t ldx, const uint8_t *q4, const uint16_t *wh,
		   int64_t m, int64_t n, int64_t k)
{
	put_xw_as(ga, dx, dw, xh, ldx, q4, 0, wh, m, n, k);
}

static void run_linear(struct fg_backend *g, const char *gname, const struct lin_case *c,
		       struct worst *w)
{
	int64_t m = c->m, n = c->n, k = c->k, ldx = k + c->xpad, ldo = n + c->opad;
	uint16_t *xh = rand_h((size_t)(m * ldx), -1, 1);
	float *wf = xmalloc((size_t)(n * k + 1) * sizeof(float));
	uint16_t *wh = xmalloc((size_t)(n * k + 1) * sizeof(uint16_t));
	uint16_t *bh = rand_h((size_t)n, -0.5f, 0.5f), *rh = rand_h((size_t)(m * ldo), -1, 1);
	uint16_t *oh = xmalloc((size_t)(m * ldo) * sizeof(uint16_t));
	float *xf = to_f32(xh, (size_t)(m * ldx)), *rf = to_f32(rh, (size_t)(m * ldo));
	float *of = xmalloc((size_t)(m * ldo) * sizeof(float));
	uint8_t *q4 = NULL;
	struct dbuf dx, dw, db = { 0 }, dr = { 0 }, dout;
	struct fg_linear_args ga, ca;
	char label[160];

	q4 = lin_weights(n, k, c->q4, wf, wh);
	/* out starts as the residual (aliased) or as the sentinel */
	for (int64_t i = 0; i < m * ldo; i++) {
		int pad = i % ldo >= n;

		oh[i] = c->res == 2 && !pad ? rh[i] : SENTINEL;
		of[i] = c->res == 2 ? rf[i] : NAN;
	}

	memset(&ga, 0, sizeof(ga));
	put_xw_as(&ga, &dx, &dw, xh, ldx, q4, c->q4 == 2, wh, m, n, k);
	if (c->bias)
		ga.bias = tens(dput(&db, bh, (size_t)n * 2), FG_DTYPE_F16, 1, n, n);
	ga.act = c->relu ? FG_ACT_RELU : FG_ACT_NONE;
	ga.out = tens(dput(&dout, oh, (size_t)(m * ldo) * 2), FG_DTYPE_F16, m, n, ldo);
	if (c->res == 1)
		ga.residual = tens(dput(&dr, rh, (size_t)(m * ldo) * 2), FG_DTYPE_F16, m, n, ldo);
	else if (c->res == 2)
		ga.residual = ga.out;

	ca = ga;
	ca.x = tens(xf, FG_DTYPE_F32, m, k, ldx);
	ca.w = tens(wh, FG_DTYPE_F16, n, k, k);
	ca.bias = c->bias ? tens(bh, FG_DTYPE_F16, 1, n, n) : (struct fg_tensor){ 0 };
	ca.out = tens(of, FG_DTYPE_F32, m, n, ldo);
	if (c->res == 1)
		ca.residual = tens(rf, FG_DTYPE_F32, m, n, ldo);
	else if (c->res == 2)
		ca.residual = ca.out;

	ck_assert_msg(cpu.ops->linear(cpu.ctx, NULL, &ca) == 0, "cpu_blas: %s", fg_last_error());
	ck_assert_msg(g->ops->linear(g->ctx, NULL, &ga) == 0, "%s: %s", gname, fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 "%s%s%s%s",
		 gname, m, n, k, c->q4 == 2 ? " f8" : c->q4 ? " q4" : "", c->bias ? " bias" : "",
		 c->relu ? " relu" : "", c->res == 2 ? " res=out" : c->res ? " res" : "");
	check_padding(label, oh, m, n, ldo);
	double e = compare(w, label, of, ldo, oh, ldo, m, n);
	ck_assert_msg(e <= TOL_LINEAR, "linear %s: error %.3g > %.3g (%s)", label, e, TOL_LINEAR,
		      w->where);

	dfree(&dx), dfree(&dw), dfree(&db), dfree(&dr), dfree(&dout);
	free(xh), free(wf), free(wh), free(bh), free(rh), free(oh), free(xf), free(rf), free(of);
	free(q4);
}

START_TEST(test_linear)
{
	struct fg_backend fused, deq;
	struct worst w = { 0, "" }, wq = { 0, "" };

	gpu_seed(101);
	/* 4-bit weights run three ways: the default split at q4_fused_max_m = 128, every
	 * m through the fused kernel, every m through dequantization + cuBLASLt. */
	open_backend(&fused, "cublas", "q4_fused_max_m", "4096");
	open_backend(&deq, "cublas", "q4_fused_max_m", "0");
	for (size_t i = 0; i < sizeof(lin_cases) / sizeof(lin_cases[0]); i++) {
		const struct lin_case *c = &lin_cases[i];

		run_linear(&gpu, "cublas", c, c->q4 ? &wq : &w);
		if (c->q4) {
			run_linear(&fused, "cublas[fused]", c, &wq);
			run_linear(&deq, "cublas[dequant]", c, &wq);
		}
	}
	report("linear fp16", &w, TOL_LINEAR);
	report("linear q4", &wq, TOL_LINEAR);
	fg_backend_close(&fused);
	fg_backend_close(&deq);
}
END_TEST

/* fp8 weights (compute 1.15, F8_ROWS): every case with the weight encoded
 * by f8.h's rule, against cpu_blas over its decoded values in fp16 (what
 * cublas's dequantized tiles hold; the fused kernel multiplies the exact
 * codes and scales each row's sum, off from that by the weights' fp16
 * rounding alone), three ways as for 4-bit: the default split at
 * q4_fused_max_m = 128, every m fused (its four variants, grid rows of x,
 * k split) and every m dequantized. */
START_TEST(test_linear_f8)
{
	struct worst w = { 0, "" };
	struct fg_backend fused, deq;

	gpu_seed(107);
	open_backend(&fused, "cublas", "q4_fused_max_m", "4096");
	open_backend(&deq, "cublas", "q4_fused_max_m", "0");
	for (size_t i = 0; i < sizeof(lin_cases) / sizeof(lin_cases[0]); i++) {
		struct lin_case c = lin_cases[i];

		c.q4 = 2;
		run_linear(&gpu, "cublas", &c, &w);
		run_linear(&fused, "cublas[fused]", &c, &w);
		run_linear(&deq, "cublas[dequant]", &c, &w);
	}
	report("linear f8", &w, TOL_LINEAR);
	fg_backend_close(&fused);
	fg_backend_close(&deq);
}
END_TEST

/* ---- the fp32 residual stream (compute ABI 1.3, fp32_residual) -------------------------- */

/* A residual, out and norm input of full fp32 precision (not fp16 values):
 * a stream rounded to fp16 anywhere would be off by up to 2^-11 relative,
 * 2e-4 here for values near 8; the fp32 stream differs from cpu_blas only by
 * the products' summation order. */
#define TOL_RES32 5e-5

static float *rand_f(size_t n, float lo, float hi)
{
	float *f = xmalloc(n * sizeof(*f));

	for (size_t i = 0; i < n; i++)
		f[i] = gpu_uniform(lo, hi);
	return f;
}

static void run_linear_f32res(struct fg_backend *g, const char *gname, const struct lin_case *c,
			      struct worst *w)
{
	int64_t m = c->m, n = c->n, k = c->k, ldx = k + c->xpad, ldo = n + c->opad;
	uint16_t *xh = rand_h((size_t)(m * ldx), -1, 1), *bh = rand_h((size_t)n, -0.5f, 0.5f);
	uint16_t *wh = xmalloc((size_t)(n * k + 1) * 2);
	float *wf = xmalloc((size_t)(n * k + 1) * 4), *xf = to_f32(xh, (size_t)(m * ldx));
	float *rf = rand_f((size_t)(m * ldo), -8, 8), *of = xmalloc((size_t)(m * ldo) * 4);
	float *got = xmalloc((size_t)(m * ldo) * 4);
	uint8_t *q4 = NULL;
	struct dbuf dx, dw, db = { 0 }, dr = { 0 }, dout;
	struct fg_linear_args ga, ca;
	char label[160];

	q4 = lin_weights(n, k, c->q4, wf, wh);
	memcpy(of, rf, (size_t)(m * ldo) * 4); /* out starts as the residual (aliased) */
	memset(&ga, 0, sizeof(ga));
	put_xw(&ga, &dx, &dw, xh, ldx, q4, wh, m, n, k);
	if (c->bias)
		ga.bias = tens(dput(&db, bh, (size_t)n * 2), FG_DTYPE_F16, 1, n, n);
	ga.act = c->relu ? FG_ACT_RELU : FG_ACT_NONE;
	ga.out = tens(dput(&dout, c->res == 2 ? rf : NULL, (size_t)(m * ldo) * 4), FG_DTYPE_F32,
		      m, n, ldo);
	ga.residual = c->res == 2 ? ga.out
				  : tens(dput(&dr, rf, (size_t)(m * ldo) * 4), FG_DTYPE_F32, m, n,
					 ldo);
	ca = ga;
	ca.x = tens(xf, FG_DTYPE_F32, m, k, ldx);
	ca.w = tens(wh, FG_DTYPE_F16, n, k, k);
	ca.bias = c->bias ? tens(bh, FG_DTYPE_F16, 1, n, n) : (struct fg_tensor){ 0 };
	ca.out = tens(of, FG_DTYPE_F32, m, n, ldo);
	ca.residual = c->res == 2 ? ca.out : tens(rf, FG_DTYPE_F32, m, n, ldo);
	ck_assert_msg(cpu.ops->linear(cpu.ctx, NULL, &ca) == 0, "cpu_blas: %s", fg_last_error());
	ck_assert_msg(fg_backend_linear(g, NULL, 0, "test", &ga) == 0, "%s: %s", gname,
		      fg_last_error());
	dget(&dout, got);
	snprintf(label, sizeof(label), "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 "%s%s%s%s f32",
		 gname, m, n, k, c->q4 ? " q4" : "", c->bias ? " bias" : "",
		 c->relu ? " relu" : "", c->res == 2 ? " res=out" : " res");
	double e = compare_as(w, label, of, ldo, got, 1, ldo, m, n);
	ck_assert_msg(e <= TOL_RES32, "linear %s: error %.3g > %.3g (%s)", label, e, TOL_RES32,
		      w->where);
	dfree(&dx), dfree(&dw), dfree(&db), dfree(&dr), dfree(&dout);
	free(xh), free(bh), free(wh), free(wf), free(xf), free(rf), free(of), free(got), free(q4);
}

START_TEST(test_residual_f32)
{
	static const struct { int64_t n, h, ldx; int rms; } norms[] = {
		{ 1, 64, 64, 0 }, { 3, 7, 9, 0 }, { 17, 768, 776, 1 }, { 64, 4096, 4096, 0 },
		{ 5, 5120, 5120, 1 },
	};
	struct fg_backend fused, deq, half;
	struct worst w = { 0, "" }, wn = { 0, "" }, we = { 0, "" };

	gpu_seed(111);
	ck_assert_int_eq(gpu.info.hidden_dtype, FG_DTYPE_F32);
	open_backend(&half, "cublas", "fp32_residual", "false");
	ck_assert_int_eq(half.info.hidden_dtype, FG_DTYPE_F16);
	ck_assert_int_eq(fg_backend_supports(&half, FG_OP_LAYER_NORM, FG_DTYPE_F32), 0);
	fg_backend_close(&half);

	/* linear with a residual, every path: cuBLASLt fused (bias + residual),
	 * its epilogue kernel (ReLU with a residual), separate residual, 4-bit
	 * through the fused kernel (with and without split-k) and dequantization */
	open_backend(&fused, "cublas", "q4_fused_max_m", "4096");
	open_backend(&deq, "cublas", "q4_fused_max_m", "0");
	for (size_t i = 0; i < sizeof(lin_cases) / sizeof(lin_cases[0]); i++) {
		struct lin_case c = lin_cases[i];

		if (!c.res || c.k == 0)
			continue;
		run_linear_f32res(&gpu, "cublas", &c, &w);
		if (c.q4) {
			run_linear_f32res(&fused, "cublas[fused]", &c, &w);
			run_linear_f32res(&deq, "cublas[dequant]", &c, &w);
		}
	}
	fg_backend_close(&fused);
	fg_backend_close(&deq);
	report("linear, fp32 residual", &w, TOL_RES32);

	/* norms of the fp32 stream into fp16 activations */
	for (size_t ci = 0; ci < sizeof(norms) / sizeof(norms[0]); ci++) {
		int64_t n = norms[ci].n, h = norms[ci].h, ldx = norms[ci].ldx;
		float *xf = rand_f((size_t)(n * ldx), -6, 9), *of = xmalloc((size_t)(n * h) * 4);
		uint16_t *gh = rand_h((size_t)h, 0.5f, 1.5f), *bh = rand_h((size_t)h, -0.5f, 0.5f);
		uint16_t *oh = xmalloc((size_t)(n * h) * 2);
		struct dbuf dx, dg, db, dout;
		struct fg_layer_norm_args ga, ca;
		char label[96];

		memset(&ga, 0, sizeof(ga));
		ga.kind = norms[ci].rms ? FG_NORM_RMS : FG_NORM_LAYER;
		ga.x = tens(dput(&dx, xf, (size_t)(n * ldx) * 4), FG_DTYPE_F32, n, h, ldx);
		ga.gamma = tens(dput(&dg, gh, (size_t)h * 2), FG_DTYPE_F16, 1, h, h);
		if (!norms[ci].rms)
			ga.beta = tens(dput(&db, bh, (size_t)h * 2), FG_DTYPE_F16, 1, h, h);
		ga.eps = 1e-5f;
		ga.out = tens(dput(&dout, NULL, (size_t)(n * h) * 2), FG_DTYPE_F16, n, h, h);
		ca = ga;
		ca.x = tens(xf, FG_DTYPE_F32, n, h, ldx);
		ca.gamma = tens(gh, FG_DTYPE_F16, 1, h, h);
		ca.beta = norms[ci].rms ? (struct fg_tensor){ 0 } : tens(bh, FG_DTYPE_F16, 1, h, h);
		ca.out = tens(of, FG_DTYPE_F32, n, h, h);
		ck_assert_msg(cpu.ops->layer_norm(cpu.ctx, NULL, &ca) == 0, "%s", fg_last_error());
		ck_assert_msg(fg_backend_norm(&gpu, NULL, 0, "test", &ga) == 0, "%s",
			      fg_last_error());
		dget(&dout, oh);
		snprintf(label, sizeof(label), "%s n=%" PRId64 " h=%" PRId64 " x f32",
			 norms[ci].rms ? "rms" : "layer", n, h);
		double e = compare(&wn, label, of, h, oh, h, n, h);
		ck_assert_msg(e <= TOL_LN, "norm %s: error %.3g > %.3g (%s)", label, e, TOL_LN,
			      wn.where);
		dfree(&dx), dfree(&dg), dfree(&dout);
		if (!norms[ci].rms)
			dfree(&db);
		free(xf), free(of), free(gh), free(bh), free(oh);
	}
	report("norm of an fp32 stream", &wn, TOL_LN);

	/* embed into the fp32 stream: the sum of two fp16 values, exact in fp32 */
	for (int with_pos = 0; with_pos < 2; with_pos++) {
		const int64_t vocab = 300, npos = 40, n = 37, h = with_pos ? 100 : 768;
		uint16_t *tok = rand_h((size_t)(vocab * h), -1, 1), *pos = rand_h((size_t)(npos * h), -1, 1);
		float *of = xmalloc((size_t)(n * h) * 4), *got = xmalloc((size_t)(n * h) * 4);
		int32_t *ids = xmalloc((size_t)n * 4), *pp = xmalloc((size_t)n * 4);
		struct dbuf dt, dp, dout;
		struct fg_embed_args ga;

		for (int64_t i = 0; i < n; i++) {
			ids[i] = (int32_t)(gpu_next() % (uint64_t)vocab);
			pp[i] = (int32_t)(gpu_next() % (uint64_t)npos);
		}
		memset(&ga, 0, sizeof(ga));
		ga.ids = ids;
		ga.positions = with_pos ? pp : NULL;
		ga.n = n;
		ga.tok = tens(dput(&dt, tok, (size_t)(vocab * h) * 2), FG_DTYPE_F16, vocab, h, h);
		if (with_pos)
			ga.pos = tens(dput(&dp, pos, (size_t)(npos * h) * 2), FG_DTYPE_F16, npos, h, h);
		ga.out = tens(dput(&dout, NULL, (size_t)(n * h) * 4), FG_DTYPE_F32, n, h, h);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < h; j++)
				of[i * h + j] = fg_half_to_float(tok[ids[i] * h + j]) +
						(with_pos ? fg_half_to_float(pos[pp[i] * h + j]) : 0.0f);
		ck_assert_msg(fg_backend_embed(&gpu, NULL, -1, "test", &ga) == 0, "%s",
			      fg_last_error());
		dget(&dout, got);
		double e = compare_as(&we, with_pos ? "embed f32 with positions" : "embed f32",
				      of, h, got, 1, h, n, h);
		ck_assert_msg(e == 0, "embed into fp32: error %.3g (%s)", e, we.where);
		dfree(&dt), dfree(&dout);
		if (with_pos)
			dfree(&dp);
		free(tok), free(pos), free(of), free(got), free(ids), free(pp);
	}
	report("embed into fp32", &we, 0);
}
END_TEST

/* ---- layer norm ----------------------------------------------------------------------- */

START_TEST(test_layer_norm)
{
	static const struct { int64_t n, h, ldx, ldo; int alias; } cases[] = {
		{ 1, 1, 1, 1, 0 },     { 3, 7, 8, 9, 0 },          { 5, 64, 64, 64, 1 },
		{ 17, 768, 776, 776, 0 }, { 4, 1000, 1003, 1000, 0 }, { 64, 4096, 4096, 4096, 1 },
		{ 2, 12288, 12288, 12288, 0 }, { 4, 256, 768, 256, 0 },
	};
	struct worst w = { 0, "" };

	gpu_seed(202);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, h = cases[ci].h, ldx = cases[ci].ldx;
		int64_t ldo = cases[ci].alias ? ldx : cases[ci].ldo;
		uint16_t *xh = rand_h((size_t)(n * ldx), -2, 3), *gh = rand_h((size_t)h, 0.5f, 1.5f);
		uint16_t *bh = rand_h((size_t)h, -0.5f, 0.5f);
		uint16_t *oh = xmalloc((size_t)(n * ldo) * 2);
		float *xf = to_f32(xh, (size_t)(n * ldx)), *of = xmalloc((size_t)(n * ldo) * 4);
		struct dbuf dx, dg, db, dout;
		struct fg_layer_norm_args ga, ca;
		char label[96];

		for (int64_t i = 0; i < n * ldo; i++)
			oh[i] = SENTINEL;
		memset(&ga, 0, sizeof(ga)); /* kind FG_NORM_LAYER */
		ga.x = tens(dput(&dx, xh, (size_t)(n * ldx) * 2), FG_DTYPE_F16, n, h, ldx);
		ga.gamma = tens(dput(&dg, gh, (size_t)h * 2), FG_DTYPE_F16, 1, h, h);
		ga.beta = tens(dput(&db, bh, (size_t)h * 2), FG_DTYPE_F16, 1, h, h);
		ga.eps = 1e-5f;
		if (cases[ci].alias) {
			ga.out = ga.x;
		} else {
			ga.out = tens(dput(&dout, oh, (size_t)(n * ldo) * 2), FG_DTYPE_F16, n, h, ldo);
		}
		ca = ga;
		ca.x = tens(xf, FG_DTYPE_F32, n, h, ldx);
		ca.gamma = tens(gh, FG_DTYPE_F16, 1, h, h);
		ca.beta = tens(bh, FG_DTYPE_F16, 1, h, h);
		ca.out = tens(of, FG_DTYPE_F32, n, h, ldo);
		ck_assert_msg(cpu.ops->layer_norm(cpu.ctx, NULL, &ca) == 0, "%s", fg_last_error());
		ck_assert_msg(gpu.ops->layer_norm(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
		snprintf(label, sizeof(label), "n=%" PRId64 " h=%" PRId64 "%s", n, h,
			 cases[ci].alias ? " out=x" : "");
		if (cases[ci].alias) {
			dget(&dx, oh);
		} else {
			dget(&dout, oh);
			check_padding(label, oh, n, h, ldo);
			dfree(&dout);
		}
		double e = compare(&w, label, of, ldo, oh, ldo, n, h);
		ck_assert_msg(e <= TOL_LN, "layer_norm %s: error %.3g > %.3g (%s)", label, e, TOL_LN,
			      w.where);
		dfree(&dx), dfree(&dg), dfree(&db);
		free(xh), free(gh), free(bh), free(oh), free(xf), free(of);
	}
	report("layer_norm", &w, TOL_LN);
}
END_TEST

/* ---- embed ------------------------------------------------------------------------------- */

START_TEST(test_embed)
{
	static const struct { int64_t n, h, ldo; } cases[] = {
		{ 1, 64, 64 }, { 37, 100, 103 }, { 300, 768, 768 }, { 5, 4096, 4104 },
	};
	const int64_t vocab = 1000, npos = 600;
	struct worst w = { 0, "" };

	gpu_seed(303);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, h = cases[ci].h, ldo = cases[ci].ldo;
		uint16_t *tok = rand_h((size_t)(vocab * h), -1, 1), *pos = rand_h((size_t)(npos * h), -1, 1);
		uint16_t *oh = xmalloc((size_t)(n * ldo) * 2);
		float *of = xmalloc((size_t)(n * ldo) * 4);
		int32_t *ids = xmalloc((size_t)n * 4), *pp = xmalloc((size_t)n * 4);
		struct dbuf dt, dp, dout;
		struct fg_embed_args ga, ca;
		char label[64];

		for (int64_t i = 0; i < n; i++) {
			ids[i] = (int32_t)(gpu_next() % (uint64_t)vocab);
			pp[i] = (int32_t)(gpu_next() % (uint64_t)npos);
		}
		ids[0] = (int32_t)vocab - 1; /* the last rows of both tables */
		pp[0] = (int32_t)npos - 1;
		for (int64_t i = 0; i < n * ldo; i++)
			oh[i] = SENTINEL;
		memset(&ga, 0, sizeof(ga));
		ga.ids = ids;
		ga.positions = pp;
		ga.n = n;
		ga.tok = tens(dput(&dt, tok, (size_t)(vocab * h) * 2), FG_DTYPE_F16, vocab, h, h);
		ga.pos = tens(dput(&dp, pos, (size_t)(npos * h) * 2), FG_DTYPE_F16, npos, h, h);
		ga.out = tens(dput(&dout, oh, (size_t)(n * ldo) * 2), FG_DTYPE_F16, n, h, ldo);
		ca = ga;
		ca.tok = tens(tok, FG_DTYPE_F16, vocab, h, h);
		ca.pos = tens(pos, FG_DTYPE_F16, npos, h, h);
		ca.out = tens(of, FG_DTYPE_F32, n, h, ldo);
		ck_assert_msg(cpu.ops->embed(cpu.ctx, NULL, &ca) == 0, "%s", fg_last_error());
		ck_assert_msg(gpu.ops->embed(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
		/* The host arrays are the caller's again as soon as embed returns. */
		memset(ids, 0xff, (size_t)n * 4);
		dget(&dout, oh);
		snprintf(label, sizeof(label), "n=%" PRId64 " h=%" PRId64, n, h);
		check_padding(label, oh, n, h, ldo);
		double e = compare(&w, label, of, ldo, oh, ldo, n, h);
		ck_assert_msg(e <= TOL_EMBED, "embed %s: error %.3g (%s)", label, e, w.where);
		dfree(&dt), dfree(&dp), dfree(&dout);
		free(tok), free(pos), free(oh), free(of), free(ids), free(pp);
	}
	report("embed", &w, TOL_EMBED);
}
END_TEST

/* ---- kv_append ---------------------------------------------------------------------------- */

static const struct kv_case {
	int64_t batch, n, start, stride, h, ldsrc;
} kv_cases[] = {
	{ 3, 1, 5, 9, 128, 128 }, { 2, 7, 0, 7, 64, 72 }, { 2, 3, 4, 10, 80, 80 },
	{ 3, 2, 1, 5, 75, 77 },   { 1, 5, 2, 9, 2560, 2560 }, { 4, 1, 31, 32, 4096, 4096 },
	{ 2, 64, 0, 70, 256, 256 }, { 2, 3, 1, 6, 7, 7 },
};

START_TEST(test_kv_append_f16)
{
	gpu_seed(404);
	for (size_t ci = 0; ci < sizeof(kv_cases) / sizeof(kv_cases[0]); ci++) {
		const struct kv_case *c = &kv_cases[ci];
		int64_t rows = c->batch * c->stride, ldc = c->h + 3, srows = c->batch * c->n;
		uint16_t *src = rand_h((size_t)(srows * c->ldsrc), -4, 4);
		uint16_t *cache = rand_h((size_t)(rows * ldc), -4, 4);
		uint16_t *want = xmalloc((size_t)(rows * ldc) * 2), *got = xmalloc((size_t)(rows * ldc) * 2);
		struct dbuf ds, dc;
		struct fg_kv_append_args a;

		memcpy(want, cache, (size_t)(rows * ldc) * 2);
		for (int64_t b = 0; b < c->batch; b++)
			for (int64_t i = 0; i < c->n; i++)
				memcpy(want + (b * c->stride + c->start + i) * ldc,
				       src + (b * c->n + i) * c->ldsrc, (size_t)c->h * 2);
		a.src = tens(dput(&ds, src, (size_t)(srows * c->ldsrc) * 2), FG_DTYPE_F16, srows, c->h,
			     c->ldsrc);
		a.cache = tens(dput(&dc, cache, (size_t)(rows * ldc) * 2), FG_DTYPE_F16, rows, c->h, ldc);
		a.batch = c->batch;
		a.n = c->n;
		a.start = c->start;
		a.cache_stride = c->stride;
		ck_assert_msg(gpu.ops->kv_append(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		dget(&dc, got);
		for (int64_t i = 0; i < rows * ldc; i++)
			ck_assert_msg(got[i] == want[i], "kv_append f16 case %zu: element %" PRId64
				      " (row %" PRId64 ") is 0x%04x, expected 0x%04x", ci, i, i / ldc,
				      got[i], want[i]);
		dfree(&ds), dfree(&dc);
		free(src), free(cache), free(want), free(got);
	}
	printf("kv_append f16          exact on %zu cases\n", sizeof(kv_cases) / sizeof(kv_cases[0]));
}
END_TEST

enum { CACHE_F16, CACHE_Q4, CACHE_F8 };
static const char *const cache_names[] = { "f16", "q4", "f8" };

/* kv_append into an encoded cache (CACHE_Q4 or CACHE_F8) over kv_cases: the
 * bytes must be the reference encoding of each appended row (4-bit: the
 * reference encoder here; fp8: fgcore/f8.h's, the rule the fp8_e4m3_rows
 * codec and cpu_blas encode by, which test_compute_conformance ties
 * together), every other byte untouched; with NaN, infinities, -0 and (fp8)
 * values past 448 and near fp16's largest. */
static void kv_append_encoded(int kind)
{
	static const uint16_t special[] = { 0x7e00, 0x7c00, 0xfc00, 0x8000, 0x7bff, 0x5f00,
					    0x0001, 0xd400 };
	size_t nsp = kind == CACHE_F8 ? sizeof(special) / sizeof(special[0]) : 3;

	for (size_t ci = 0; ci < sizeof(kv_cases) / sizeof(kv_cases[0]); ci++) {
		const struct kv_case *c = &kv_cases[ci];
		int64_t rows = c->batch * c->stride, srows = c->batch * c->n;
		uint64_t h = (uint64_t)c->h, urows = (uint64_t)rows;
		uint64_t bytes = kind == CACHE_F8 ? fg_f8c_bytes(urows, h) : fg_q4_bytes(urows, h, 1);
		uint64_t data = kind == CACHE_F8 ? fg_f8_data_bytes(urows, h) : fg_q4_data_bytes(urows, h);
		uint16_t *src = rand_h((size_t)(srows * c->ldsrc), -4, 4);
		uint8_t *cache = xmalloc((size_t)bytes), *want, *got = xmalloc((size_t)bytes);
		float *full = xmalloc((size_t)(rows * c->h) * 4);
		struct dbuf ds, dc;
		struct fg_kv_append_args a;

		for (size_t i = 0; i < nsp; i++) /* (4-bit: NaN, +inf, -0 in the first row) */
			src[(kind == CACHE_F8 ? i * 37 : i * i) % (size_t)(srows * c->ldsrc)] =
				special[kind == CACHE_F8 || i < 2 ? i : 3];
		for (uint64_t i = 0; i < bytes; i++)
			cache[i] = (uint8_t)gpu_next();
		want = xmalloc((size_t)bytes);
		memcpy(want, cache, (size_t)bytes);
		for (int64_t b = 0; b < c->batch; b++)
			for (int64_t i = 0; i < c->n; i++) {
				int64_t r = b * c->stride + c->start + i;

				for (int64_t j = 0; j < c->h; j++)
					full[r * c->h + j] = fg_half_to_float(src[(b * c->n + i) * c->ldsrc + j]);
				if (kind == CACHE_F8)
					fg_f8c_store_row(want, urows, h, (uint64_t)r, full + r * c->h);
				else
					ref_q4_encode_rows(full, urows, h, 1, (uint64_t)r, (uint64_t)r + 1,
							   want);
			}
		a.src = tens(dput(&ds, src, (size_t)(srows * c->ldsrc) * 2), FG_DTYPE_F16, srows, c->h,
			     c->ldsrc);
		a.cache = tens(dput(&dc, cache, (size_t)bytes),
			       kind == CACHE_F8 ? FG_DTYPE_F8_COLS : FG_DTYPE_Q4_COLS, rows, c->h, c->h);
		a.batch = c->batch;
		a.n = c->n;
		a.start = c->start;
		a.cache_stride = c->stride;
		ck_assert_msg(gpu.ops->kv_append(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		dget(&dc, got);
		for (uint64_t i = 0; i < bytes; i++)
			ck_assert_msg(got[i] == want[i], "kv_append %s case %zu (h %" PRId64 "): byte %"
				      PRIu64 " of %" PRIu64 " (%s) is 0x%02x, expected 0x%02x",
				      cache_names[kind], ci, c->h, i, bytes,
				      i < data ? "codes" : "scales", got[i], want[i]);
		dfree(&ds), dfree(&dc);
		free(src), free(cache), free(want), free(got), free(full);
	}
	printf("kv_append %-12s byte-exact on %zu cases\n", cache_names[kind],
	       sizeof(kv_cases) / sizeof(kv_cases[0]));
}

START_TEST(test_kv_append_q4)
{
	gpu_seed(505);
	kv_append_encoded(CACHE_Q4);
}
END_TEST

START_TEST(test_kv_append_f8)
{
	gpu_seed(515);
	kv_append_encoded(CACHE_F8);
}
END_TEST

/* A cache of fp16 rows [rows, cols] (ld apart) encoded as the kind says
 * (CACHE_Q4: the reference 4-bit encoder; CACHE_F8: fgcore/f8.h's rule),
 * its bytes in *bytes; *decoded gets the values the encoding stands for,
 * [rows, cols] dense, for the reference. */
static uint8_t *enc_cache(int kind, const uint16_t *h, int64_t ld, int64_t rows, int64_t cols,
			  float **decoded, uint64_t *bytes)
{
	float *v = xmalloc((size_t)(rows * cols + 1) * 4);
	uint8_t *e;

	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < cols; j++)
			v[r * cols + j] = fg_half_to_float(h[r * ld + j]);
	if (kind == CACHE_Q4) {
		*bytes = fg_q4_bytes((uint64_t)rows, (uint64_t)cols, 1);
		e = ref_q4_encode(v, (uint64_t)rows, (uint64_t)cols, 1);
		*decoded = ref_q4_decode(e, (uint64_t)rows, (uint64_t)cols, 1);
		free(v);
		return e;
	}
	*bytes = fg_f8c_bytes((uint64_t)rows, (uint64_t)cols);
	e = calloc(1, (size_t)*bytes);
	ck_assert_ptr_nonnull(e);
	for (int64_t r = 0; r < rows; r++)
		fg_f8c_store_row(e, (uint64_t)rows, (uint64_t)cols, (uint64_t)r, v + r * cols);
	for (int64_t r = 0; r < rows; r++)
		fg_f8c_load(e, (uint64_t)rows, (uint64_t)cols, (uint64_t)r, 0, (uint64_t)cols,
			    v + r * cols);
	*decoded = v;
	return e;
}

/* The reference encoder above against the int4_group64 codec, when it is built. */
START_TEST(test_q4_reference_vs_codec)
{
	struct fg_plugin_handle ph;
	struct fg_codec codec;
	static const uint64_t shapes[][2] = { { 64, 64 }, { 130, 75 }, { 3, 200 }, { 1, 1 } };

	if (fg_plugin_load("int4_group64", FG_PLUGIN_CODEC, &ph) != 0) {
		printf("int4_group64 codec not built: reference encoder not cross-checked\n");
		return;
	}
	ck_assert_int_eq(fg_codec_open(&codec, &ph), 0);
	gpu_seed(606);
	for (size_t si = 0; si < 4; si++)
		for (int gd = 0; gd < 2; gd++) {
			uint64_t r = shapes[si][0], c = shapes[si][1], n = fg_q4_bytes(r, c, gd);
			struct fg_codec_shape s = { r, c, gd };
			float *v = xmalloc((size_t)(r * c) * 4);
			uint8_t *mine, *theirs = xmalloc((size_t)n);

			for (uint64_t i = 0; i < r * c; i++) /* fp16 values, as activations are */
				v[i] = fg_half_to_float(fg_float_to_half(gpu_uniform(-3, 5)));
			v[0] = NAN;
			mine = ref_q4_encode(v, r, c, gd);
			ck_assert_uint_eq(fg_codec_encoded_size(&codec, &s), n);
			ck_assert_int_eq(fg_codec_encode_f32(&codec, &s, v, theirs), 0);
			ck_assert_msg(memcmp(mine, theirs, (size_t)n) == 0,
				      "reference q4 encoder differs from int4_group64 for [%" PRIu64
				      ", %" PRIu64 "] group_dim %d", r, c, gd);
			free(v), free(mine), free(theirs);
		}
	fg_codec_close(&codec);
	printf("q4 reference encoder   matches the int4_group64 codec byte for byte\n");
}
END_TEST

/* ---- attention ---------------------------------------------------------------------------- */

static void make_pads(int32_t *pad, int64_t batch, int64_t keys, int mode)
{
	for (int64_t b = 0; b < batch; b++) {
		switch (mode) {
		case 0:
			pad[b] = 0;
			break;
		case 1:
			pad[b] = (int32_t)(gpu_next() % (uint64_t)keys);
			break;
		default: /* none, all but one, half, all (a row of zeros) */
			pad[b] = (int32_t)(b % 4 == 0 ? 0 : b % 4 == 1 ? keys - 1 : b % 4 == 2 ? keys / 2
											   : keys);
			break;
		}
	}
}

static const struct pf_case {
	int64_t batch, seq, heads, hd;
	int ldpad, pads, alias_q;
} pf_cases[] = {
	{ 1, 1, 1, 64, 0, 0, 0 },    { 2, 17, 3, 64, 0, 1, 0 },  { 4, 130, 2, 128, 0, 2, 0 },
	{ 2, 70, 4, 80, 8, 1, 0 },   { 1, 200, 2, 32, 0, 1, 0 }, { 2, 33, 2, 72, 0, 1, 0 },
	{ 1, 16, 1, 20, 3, 0, 0 },   { 2, 64, 2, 96, 0, 2, 1 },  { 1, 129, 1, 128, 0, 0, 1 },
	{ 4, 512, 4, 64, 0, 1, 0 },  { 1, 300, 2, 112, 0, 1, 0 }, { 1, 40, 3, 8, 0, 2, 0 },
	{ 3, 96, 2, 80, 1, 2, 0 },
};

START_TEST(test_attention_prefill)
{
	struct worst w = { 0, "" };

	gpu_seed(707);
	for (size_t ci = 0; ci < sizeof(pf_cases) / sizeof(pf_cases[0]); ci++) {
		const struct pf_case *c = &pf_cases[ci];
		int64_t rows = c->batch * c->seq, hc = c->heads * c->hd, ld = hc + c->ldpad;
		size_t ne = (size_t)(rows * ld);
		uint16_t *qh = rand_h(ne, -2, 2), *kh = rand_h(ne, -2, 2), *vh = rand_h(ne, -1, 1);
		uint16_t *oh = xmalloc(ne * 2);
		float *qf = to_f32(qh, ne), *kf = to_f32(kh, ne), *vf = to_f32(vh, ne);
		float *of = xmalloc(ne * 4);
		int32_t *pad = xmalloc((size_t)c->batch * 4);
		struct dbuf dq, dk, dv, dout;
		struct fg_attention_args ga, ca;
		char label[128];

		make_pads(pad, c->batch, c->seq, c->pads);
		for (size_t i = 0; i < ne; i++)
			oh[i] = SENTINEL;
		memset(&ga, 0, sizeof(ga));
		ga.q = tens(dput(&dq, qh, ne * 2), FG_DTYPE_F16, rows, hc, ld);
		ga.k = tens(dput(&dk, kh, ne * 2), FG_DTYPE_F16, rows, hc, ld);
		ga.v = tens(dput(&dv, vh, ne * 2), FG_DTYPE_F16, rows, hc, ld);
		ga.out = c->alias_q ? ga.q : tens(dput(&dout, oh, ne * 2), FG_DTYPE_F16, rows, hc, ld);
		ga.batch = c->batch;
		ga.seq = c->seq;
		ga.heads = c->heads;
		ga.head_dim = c->hd;
		ga.scale = 1.0f / sqrtf((float)c->hd);
		ga.pad = pad;
		ca = ga;
		ca.q = tens(qf, FG_DTYPE_F32, rows, hc, ld);
		ca.k = tens(kf, FG_DTYPE_F32, rows, hc, ld);
		ca.v = tens(vf, FG_DTYPE_F32, rows, hc, ld);
		ca.out = c->alias_q ? ca.q : tens(of, FG_DTYPE_F32, rows, hc, ld);
		ck_assert_msg(cpu.ops->attention_prefill(cpu.ctx, NULL, &ca) == 0, "%s", fg_last_error());
		ck_assert_msg(gpu.ops->attention_prefill(gpu.ctx, NULL, &ga) == 0, "%s",
			      fg_last_error());
		dget(c->alias_q ? &dq : &dout, oh);
		snprintf(label, sizeof(label), "b=%" PRId64 " seq=%" PRId64 " heads=%" PRId64
			 " hd=%" PRId64 "%s%s", c->batch, c->seq, c->heads, c->hd,
			 c->ldpad ? " ld>cols" : "", c->alias_q ? " out=q" : "");
		if (!c->alias_q)
			check_padding(label, oh, rows, hc, ld);
		for (int64_t b = 0; b < c->batch; b++) /* rows before the pad: exact zeros */
			for (int64_t i = 0; i < pad[b] && i < c->seq; i++)
				for (int64_t j = 0; j < hc; j++)
					ck_assert_msg(oh[(b * c->seq + i) * ld + j] == 0, "%s: padded row "
						      "%" PRId64 " of sequence %" PRId64 " is not zero",
						      label, i, b);
		double e = compare(&w, label, c->alias_q ? qf : of, ld, oh, ld, rows, hc);
		ck_assert_msg(e <= TOL_ATTN, "attention_prefill %s: error %.3g (%s)", label, e, w.where);
		dfree(&dq), dfree(&dk), dfree(&dv);
		if (!c->alias_q)
			dfree(&dout);
		free(qh), free(kh), free(vh), free(oh), free(qf), free(kf), free(vf), free(of), free(pad);
	}
	report("attention_prefill", &w, TOL_ATTN);
}
END_TEST

static const struct dc_case {
	int64_t batch, heads, hd, len, stride;
	int pads, ldpad;
} dc_cases[] = {
	{ 1, 1, 64, 1, 1, 0, 0 },       { 4, 2, 64, 100, 130, 2, 0 }, { 2, 32, 128, 1000, 1100, 1, 0 },
	{ 64, 12, 64, 300, 320, 1, 0 }, { 3, 4, 80, 77, 80, 2, 8 },   { 2, 2, 72, 50, 64, 1, 0 },
	{ 1, 3, 20, 33, 40, 1, 3 },     { 1, 8, 128, 5000, 5000, 0, 0 }, { 2, 2, 256, 40, 40, 1, 0 },
	{ 8, 32, 128, 544, 544, 1, 0 },
	/* len past one block's old score buffer, split with one sequence's keys all
	 * but the last padded; 96 and 32 leave lanes of a position idle or alone;
	 * ld % 8 != 0 takes the scalar fp16 path */
	{ 2, 2, 128, 20000, 20000, 2, 0 }, { 4, 4, 96, 300, 310, 2, 0 },
	{ 3, 8, 32, 700, 700, 1, 0 },      { 2, 4, 64, 150, 160, 1, 4 },
};

static void run_decode(const struct dc_case *c, int cache, struct worst *w)
{
	int64_t hc = c->heads * c->hd, ld = hc + c->ldpad, krows = c->batch * c->stride;
	size_t nq = (size_t)(c->batch * ld), nk = (size_t)(krows * ld);
	uint16_t *qh = rand_h(nq, -2, 2), *kh = rand_h(nk, -2, 2), *vh = rand_h(nk, -1, 1);
	uint16_t *oh = xmalloc(nq * 2);
	float *qf = to_f32(qh, nq), *kf, *vf, *of = xmalloc(nq * 4);
	uint8_t *kq = NULL, *vq = NULL;
	int32_t *pad = xmalloc((size_t)c->batch * 4);
	struct dbuf dq, dk, dv, dout;
	struct fg_attention_args ga, ca;
	char label[200];
	int64_t kld = ld;

	make_pads(pad, c->batch, c->len, c->pads);
	for (size_t i = 0; i < nq; i++)
		oh[i] = SENTINEL;
	memset(&ga, 0, sizeof(ga));
	ga.q = tens(dput(&dq, qh, nq * 2), FG_DTYPE_F16, c->batch, hc, ld);
	if (cache != CACHE_F16) {
		/* the cache as encoded rows of hc values; the reference sees it decoded */
		enum fg_dtype dt = cache == CACHE_Q4 ? FG_DTYPE_Q4_COLS : FG_DTYPE_F8_COLS;
		uint64_t bytes;

		kq = enc_cache(cache, kh, ld, krows, hc, &kf, &bytes);
		vq = enc_cache(cache, vh, ld, krows, hc, &vf, &bytes);
		kld = hc;
		ga.k = tens(dput(&dk, kq, (size_t)bytes), dt, krows, hc, hc);
		ga.v = tens(dput(&dv, vq, (size_t)bytes), dt, krows, hc, hc);
	} else {
		kf = to_f32(kh, nk);
		vf = to_f32(vh, nk);
		ga.k = tens(dput(&dk, kh, nk * 2), FG_DTYPE_F16, krows, hc, ld);
		ga.v = tens(dput(&dv, vh, nk * 2), FG_DTYPE_F16, krows, hc, ld);
	}
	ga.out = tens(dput(&dout, oh, nq * 2), FG_DTYPE_F16, c->batch, hc, ld);
	ga.batch = c->batch;
	ga.seq = 1;
	ga.len = c->len;
	ga.cache_stride = c->stride;
	ga.heads = c->heads;
	ga.head_dim = c->hd;
	ga.scale = 1.0f / sqrtf((float)c->hd);
	ga.pad = pad;
	ca = ga;
	ca.q = tens(qf, FG_DTYPE_F32, c->batch, hc, ld);
	ca.k = tens(kf, FG_DTYPE_F32, krows, hc, kld);
	ca.v = tens(vf, FG_DTYPE_F32, krows, hc, kld);
	ca.out = tens(of, FG_DTYPE_F32, c->batch, hc, ld);
	ck_assert_msg(cpu.ops->attention_decode(cpu.ctx, NULL, &ca) == 0, "%s", fg_last_error());
	ck_assert_msg(gpu.ops->attention_decode(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "%s b=%" PRId64 " heads=%" PRId64 " hd=%" PRId64 " len=%"
		 PRId64 " stride=%" PRId64, cache_names[cache], c->batch, c->heads, c->hd, c->len,
		 c->stride);
	check_padding(label, oh, c->batch, hc, ld);
	for (int64_t b = 0; b < c->batch; b++)
		if (pad[b] >= c->len)
			for (int64_t j = 0; j < hc; j++)
				ck_assert_msg(oh[b * ld + j] == 0, "%s: fully padded row %" PRId64
					      " is not zero", label, b);
	double e = compare(w, label, of, ld, oh, ld, c->batch, hc);
	ck_assert_msg(e <= TOL_ATTN, "attention_decode %s: error %.3g (%s)", label, e, w->where);
	dfree(&dq), dfree(&dk), dfree(&dv), dfree(&dout);
	free(qh), free(kh), free(vh), free(oh), free(qf), free(kf), free(vf), free(of), free(pad);
	free(kq), free(vq);
}

START_TEST(test_attention_decode)
{
	struct worst w = { 0, "" }, wq = { 0, "" }, w8 = { 0, "" };

	gpu_seed(808);
	for (size_t ci = 0; ci < sizeof(dc_cases) / sizeof(dc_cases[0]); ci++) {
		run_decode(&dc_cases[ci], CACHE_F16, &w);
		run_decode(&dc_cases[ci], CACHE_Q4, &wq);
		run_decode(&dc_cases[ci], CACHE_F8, &w8);
	}
	report("attention_decode f16", &w, TOL_ATTN);
	report("attention_decode q4", &wq, TOL_ATTN);
	report("attention_decode f8", &w8, TOL_ATTN);
}
END_TEST

/* ---- ABI 1.1: naive double-precision references ------------------------------------------ */

static double silu_d(double v)
{
	return v / (1.0 + exp(-v));
}

static double gelu_tanh_d(double v)
{
	return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

/* What ref_attention and the attention runners apply besides the mask
 * (compute ABI 1.11, 1.12): a sliding window (0: none) and a softcap on the
 * scaled scores (0: none); set by test_window_softcap. */
static int64_t ref_window;
static double ref_softcap;

/* Attention in double, grouped-query aware.  Prefill (decode 0): q, out rows
 * b * seq + i; k, v rows b * seq + j for pad[b] <= j <= i.  Decode: q, out row
 * b; k, v rows b * stride + t for pad[b] <= t < len.  Query head h reads k/v
 * head h / (heads / kvh).  out is [qrows, heads * hd] (ld heads * hd); rows
 * without a key are zeros. */
static float *ref_attention(int decode, const float *q, int64_t ldq, const float *k,
			    const float *v, int64_t ldkv, int64_t batch, int64_t seq,
			    int64_t len, int64_t stride, int64_t heads, int64_t kvh, int64_t hd,
			    double scale, const int32_t *pad)
{
	int64_t qrows = decode ? batch : batch * seq, hc = heads * hd, group = heads / kvh;
	int64_t maxkeys = decode ? len : seq;
	float *out = xmalloc((size_t)(qrows * hc) * sizeof(float));
	double *sc = xmalloc((size_t)maxkeys * sizeof(double)), *acc = xmalloc((size_t)hd * sizeof(double));

	for (int64_t b = 0; b < batch; b++)
		for (int64_t i = 0; i < (decode ? 1 : seq); i++)
			for (int64_t h = 0; h < heads; h++) {
				int64_t qr = decode ? b : b * seq + i, hk = h / group;
				int64_t t0 = pad[b], t1 = decode ? len : i + 1; /* keys [t0, t1) */
				int64_t kr0 = decode ? b * stride : b * seq;
				const float *qv = q + qr * ldq + h * hd;
				double mx = -INFINITY, sum = 0;

				if (ref_window && t1 - ref_window > t0) /* the query at t1 - 1 */
					t0 = t1 - ref_window;
				for (int64_t j = 0; j < hd; j++)
					acc[j] = 0;
				for (int64_t t = t0; t < t1; t++) {
					const float *kv = k + (kr0 + t) * ldkv + hk * hd;
					double s = 0;

					for (int64_t j = 0; j < hd; j++)
						s += (double)qv[j] * kv[j];
					sc[t] = s * scale;
					if (ref_softcap > 0)
						sc[t] = ref_softcap * tanh(sc[t] / ref_softcap);
					mx = sc[t] > mx ? sc[t] : mx;
				}
				for (int64_t t = t0; t < t1; t++) {
					const float *vv = v + (kr0 + t) * ldkv + hk * hd;
					double p = exp(sc[t] - mx);

					sum += p;
					for (int64_t j = 0; j < hd; j++)
						acc[j] += p * vv[j];
				}
				for (int64_t j = 0; j < hd; j++)
					out[qr * hc + h * hd + j] = sum > 0 ? (float)(acc[j] / sum) : 0.0f;
			}
	free(sc), free(acc);
	return out;
}

/* ---- norms: RMS, layer norm without beta ---------------------------------------------------- */

START_TEST(test_norm_variants)
{
	/* shift: ABI 1.12's gamma_shift (Gemma's 1 + w, its w around 0) */
	static const struct { int64_t n, h, ldx, ldo; int alias, rms, beta; float shift; } cases[] = {
		{ 1, 1, 1, 1, 0, 1, 0, 0 },          { 3, 7, 8, 9, 0, 1, 0, 0 },
		{ 5, 64, 64, 64, 1, 1, 0, 0 },       { 17, 4096, 4104, 4096, 0, 1, 0, 0 },
		{ 4, 1000, 1003, 1000, 0, 1, 0, 0 }, { 2, 8192, 8192, 8192, 1, 1, 0, 0 },
		{ 300, 512, 512, 520, 0, 1, 0, 0 },  { 17, 768, 776, 776, 0, 0, 0, 0 },
		{ 3, 7, 8, 9, 0, 0, 0, 0 },          { 6, 2560, 2560, 2560, 1, 0, 0, 0 },
		{ 9, 3584, 3584, 3584, 0, 1, 0, 1 }, { 3, 7, 8, 9, 1, 1, 0, 1 },
		{ 40, 2304, 2304, 2312, 0, 1, 0, -0.25f },
	};
	struct worst w = { 0, "" };

	gpu_seed(211);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, h = cases[ci].h, ldx = cases[ci].ldx;
		int64_t ldo = cases[ci].alias ? ldx : cases[ci].ldo;
		int rms = cases[ci].rms;
		float eps = rms ? 1e-6f : 1e-5f;
		float shift = cases[ci].shift;
		uint16_t *xh = rand_h((size_t)(n * ldx), -2, 3);
		uint16_t *gh = rand_h((size_t)h, 0.5f - shift, 1.5f - shift);
		uint16_t *oh = xmalloc((size_t)(n * ldo) * 2);
		float *ref = xmalloc((size_t)(n * h) * 4);
		struct dbuf dx, dg, dout;
		struct fg_layer_norm_args ga;
		char label[96];

		for (int64_t i = 0; i < n; i++) {
			double mean = 0, var = 0;

			if (!rms) {
				for (int64_t j = 0; j < h; j++)
					mean += fg_half_to_float(xh[i * ldx + j]);
				mean /= (double)h;
			}
			for (int64_t j = 0; j < h; j++) {
				double d = fg_half_to_float(xh[i * ldx + j]) - mean;

				var += d * d;
			}
			var /= (double)h;
			for (int64_t j = 0; j < h; j++)
				ref[i * h + j] = (float)((fg_half_to_float(xh[i * ldx + j]) - mean) /
							 sqrt(var + (double)eps) *
							 ((double)fg_half_to_float(gh[j]) + shift));
		}
		for (int64_t i = 0; i < n * ldo; i++)
			oh[i] = SENTINEL;
		memset(&ga, 0, sizeof(ga));
		ga.x = tens(dput(&dx, xh, (size_t)(n * ldx) * 2), FG_DTYPE_F16, n, h, ldx);
		ga.gamma = tens(dput(&dg, gh, (size_t)h * 2), FG_DTYPE_F16, 1, h, h);
		ga.eps = eps; /* beta.data NULL: none */
		ga.kind = rms ? FG_NORM_RMS : FG_NORM_LAYER;
		ga.gamma_shift = shift;
		if (shift)
			ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_NORM_SHIFT, FG_DTYPE_F16));
		ga.out = cases[ci].alias ? ga.x
					 : tens(dput(&dout, oh, (size_t)(n * ldo) * 2), FG_DTYPE_F16,
						n, h, ldo);
		ck_assert_msg(gpu.ops->layer_norm(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
		snprintf(label, sizeof(label), "%s n=%" PRId64 " h=%" PRId64 "%s shift %g",
			 rms ? "rms" : "layer, no beta", n, h, cases[ci].alias ? " out=x" : "",
			 (double)shift);
		if (cases[ci].alias) {
			dget(&dx, oh);
		} else {
			dget(&dout, oh);
			check_padding(label, oh, n, h, ldo);
			dfree(&dout);
		}
		double e = compare(&w, label, ref, h, oh, ldo, n, h);
		ck_assert_msg(e <= TOL_LN, "norm %s: error %.3g > %.3g (%s)", label, e, TOL_LN,
			      w.where);
		dfree(&dx), dfree(&dg);
		free(xh), free(gh), free(oh), free(ref);
	}
	report("rms_norm/no beta", &w, TOL_LN);
}
END_TEST

/* ---- embed without a position table ------------------------------------------------------ */

START_TEST(test_embed_tokens)
{
	static const struct { int64_t n, h, ldo; } cases[] = {
		{ 1, 64, 64 }, { 37, 100, 103 }, { 300, 768, 768 }, { 5, 4096, 4104 }, { 9, 7, 7 },
	};
	const int64_t vocab = 1000;

	gpu_seed(313);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, h = cases[ci].h, ldo = cases[ci].ldo;
		uint16_t *tok = rand_h((size_t)(vocab * h), -1, 1);
		uint16_t *oh = xmalloc((size_t)(n * ldo) * 2);
		int32_t *ids = xmalloc((size_t)n * 4);
		struct dbuf dt, dout;
		struct fg_embed_args ga;
		char label[64];

		for (int64_t i = 0; i < n; i++)
			ids[i] = (int32_t)(gpu_next() % (uint64_t)vocab);
		ids[0] = (int32_t)vocab - 1;
		for (int64_t i = 0; i < n * ldo; i++)
			oh[i] = SENTINEL;
		memset(&ga, 0, sizeof(ga)); /* pos.data and positions NULL */
		ga.ids = ids;
		ga.n = n;
		ga.tok = tens(dput(&dt, tok, (size_t)(vocab * h) * 2), FG_DTYPE_F16, vocab, h, h);
		ga.out = tens(dput(&dout, oh, (size_t)(n * ldo) * 2), FG_DTYPE_F16, n, h, ldo);
		ck_assert_msg(gpu.ops->embed(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
		dget(&dout, oh);
		snprintf(label, sizeof(label), "embed tokens n=%" PRId64 " h=%" PRId64, n, h);
		check_padding(label, oh, n, h, ldo);
		for (int64_t i = 0; i < n; i++) /* a copy of the token row, exactly */
			for (int64_t j = 0; j < h; j++)
				ck_assert_msg(oh[i * ldo + j] == tok[ids[i] * h + j], "%s: [%" PRId64 ", %"
					      PRId64 "] is 0x%04x, expected 0x%04x", label, i, j,
					      oh[i * ldo + j], tok[ids[i] * h + j]);
		dfree(&dt), dfree(&dout);
		free(tok), free(oh), free(ids);
	}
	printf("embed without pos       exact on %zu cases\n", sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* ---- linear: SiLU, the gating multiplier, an unaligned bias --------------------------------- */

struct gl_case {
	int64_t m, n, k;
	int xpad, opad;
	int bias;  /* 0 none, 1 aligned, 2 at an odd element (not 16-byte aligned) */
	int act;   /* enum fg_activation */
	int mul;
	int res;   /* 0 none, 1 separate buffer, 2 the same view as out */
	int q4;
};

static const struct gl_case gl_cases[] = {
	/* fp16 weights */
	{ 1, 256, 128, 0, 0, 0, FG_ACT_SILU, 0, 0, 0 },
	{ 1, 300, 256, 0, 0, 1, FG_ACT_SILU, 1, 0, 0 },
	{ 7, 130, 70, 8, 3, 0, FG_ACT_SILU, 1, 1, 0 },
	{ 200, 512, 256, 0, 0, 0, FG_ACT_SILU, 1, 0, 0 },
	{ 300, 192, 320, 8, 8, 1, FG_ACT_RELU, 1, 2, 0 },
	{ 64, 100, 64, 0, 0, 2, FG_ACT_NONE, 1, 2, 0 },
	{ 150, 96, 64, 0, 0, 2, FG_ACT_NONE, 0, 1, 0 },
	{ 5, 77, 0, 0, 0, 1, FG_ACT_SILU, 1, 1, 0 },
	/* 4-bit weights */
	{ 1, 4096, 4096, 0, 0, 0, FG_ACT_SILU, 1, 0, 1 },
	{ 4, 512, 1024, 0, 0, 1, FG_ACT_SILU, 1, 2, 1 },
	{ 1, 100, 96, 0, 0, 1, FG_ACT_SILU, 0, 1, 1 },
	{ 33, 192, 256, 0, 0, 0, FG_ACT_SILU, 1, 1, 1 },
	{ 64, 1000, 1024, 0, 8, 1, FG_ACT_RELU, 1, 0, 1 },
	{ 300, 640, 384, 8, 0, 0, FG_ACT_SILU, 1, 2, 1 },
	{ 200, 256, 512, 0, 0, 1, FG_ACT_SILU, 0, 1, 1 },
	{ 100, 128, 128, 0, 0, 2, FG_ACT_NONE, 0, 2, 1 },
	{ 7, 300, 128, 8, 2, 2, FG_ACT_SILU, 1, 2, 1 },
	/* GELU, tanh form (ABI 1.12, Gemma 2's GeGLU) */
	{ 1, 256, 128, 0, 0, 0, FG_ACT_GELU_TANH, 1, 0, 0 },
	{ 150, 352, 256, 8, 0, 1, FG_ACT_GELU_TANH, 1, 0, 0 },
	{ 33, 130, 70, 0, 3, 0, FG_ACT_GELU_TANH, 0, 1, 0 },
	{ 1, 1024, 512, 0, 0, 0, FG_ACT_GELU_TANH, 1, 0, 1 },
	{ 200, 256, 512, 0, 0, 1, FG_ACT_GELU_TANH, 1, 0, 1 },
};

static void run_gated(struct fg_backend *g, const char *gname, const struct gl_case *c,
		      struct worst *w)
{
	int64_t m = c->m, n = c->n, k = c->k, ldx = k + c->xpad, ldo = n + c->opad, ldm = n + 5;
	uint16_t *xh = rand_h((size_t)(m * ldx), -1, 1);
	float *wf = xmalloc((size_t)(n * k + 1) * sizeof(float));
	uint16_t *wh = xmalloc((size_t)(n * k + 1) * sizeof(uint16_t));
	uint16_t *bh = rand_h((size_t)n + 1, -0.5f, 0.5f), *rh = rand_h((size_t)(m * ldo), -1, 1);
	uint16_t *mh = rand_h((size_t)(m * ldm), -2, 2);
	uint16_t *oh = xmalloc((size_t)(m * ldo) * sizeof(uint16_t));
	float *ref = xmalloc((size_t)(m * n) * sizeof(float));
	uint8_t *q4 = NULL;
	struct dbuf dx, dw, db = { 0 }, dr = { 0 }, dm = { 0 }, dout;
	struct fg_linear_args ga;
	const uint16_t *bias = c->bias == 2 ? bh + 1 : bh;
	char label[200];

	q4 = lin_weights(n, k, c->q4, wf, wh);
	/* reference: bias, activation, mul, residual, in double */
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double v = 0;

			for (int64_t l = 0; l < k; l++)
				v += (double)fg_half_to_float(xh[i * ldx + l]) * fg_half_to_float(wh[j * k + l]);
			if (c->bias)
				v += fg_half_to_float(bias[j]);
			if (c->act == FG_ACT_RELU)
				v = v < 0 ? 0 : v;
			else if (c->act == FG_ACT_SILU)
				v = silu_d(v);
			else if (c->act == FG_ACT_GELU_TANH)
				v = gelu_tanh_d(v);
			if (c->mul)
				v *= fg_half_to_float(mh[i * ldm + j]);
			if (c->res)
				v += fg_half_to_float(rh[i * ldo + j]);
			ref[i * n + j] = (float)v;
		}
	for (int64_t i = 0; i < m * ldo; i++)
		oh[i] = c->res == 2 && i % ldo < n ? rh[i] : SENTINEL;

	memset(&ga, 0, sizeof(ga));
	put_xw(&ga, &dx, &dw, xh, ldx, q4, wh, m, n, k);
	if (c->bias) {
		char *base = dput(&db, bh, ((size_t)n + 1) * 2);

		ga.bias = tens(base + (c->bias == 2 ? 2 : 0), FG_DTYPE_F16, 1, n, n);
	}
	ga.act = (enum fg_activation)c->act;
	ga.out = tens(dput(&dout, oh, (size_t)(m * ldo) * 2), FG_DTYPE_F16, m, n, ldo);
	if (c->res == 1)
		ga.residual = tens(dput(&dr, rh, (size_t)(m * ldo) * 2), FG_DTYPE_F16, m, n, ldo);
	else if (c->res == 2)
		ga.residual = ga.out;
	if (c->mul)
		ga.mul = tens(dput(&dm, mh, (size_t)(m * ldm) * 2), FG_DTYPE_F16, m, n, ldm);
	ck_assert_msg(g->ops->linear(g->ctx, NULL, &ga) == 0, "%s: %s", gname, fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 "%s%s%s%s%s",
		 gname, m, n, k, c->q4 ? " q4" : "", c->bias == 2 ? " bias(unaligned)" : c->bias
		 ? " bias" : "", c->act == FG_ACT_SILU ? " silu" : c->act == FG_ACT_RELU ? " relu"
		 : c->act == FG_ACT_GELU_TANH ? " gelu" : "", c->mul ? " mul" : "",
		 c->res == 2 ? " res=out" : c->res ? " res" : "");
	check_padding(label, oh, m, n, ldo);
	double e = compare(w, label, ref, n, oh, ldo, m, n);
	ck_assert_msg(e <= TOL_LINEAR, "linear %s: error %.3g > %.3g (%s)", label, e, TOL_LINEAR,
		      w->where);
	dfree(&dx), dfree(&dw), dfree(&db), dfree(&dr), dfree(&dm), dfree(&dout);
	free(xh), free(wf), free(wh), free(bh), free(rh), free(mh), free(oh), free(ref), free(q4);
}

START_TEST(test_linear_gated)
{
	struct fg_backend fused, deq;
	struct worst w = { 0, "" }, wq = { 0, "" };

	gpu_seed(111);
	open_backend(&fused, "cublas", "q4_fused_max_m", "4096");
	open_backend(&deq, "cublas", "q4_fused_max_m", "0");
	for (size_t i = 0; i < sizeof(gl_cases) / sizeof(gl_cases[0]); i++) {
		const struct gl_case *c = &gl_cases[i];

		run_gated(&gpu, "cublas", c, c->q4 ? &wq : &w);
		if (c->q4) {
			run_gated(&fused, "cublas[fused]", c, &wq);
			run_gated(&deq, "cublas[dequant]", c, &wq);
		}
	}
	report("linear silu/mul fp16", &w, TOL_LINEAR);
	report("linear silu/mul q4", &wq, TOL_LINEAR);
	fg_backend_close(&fused);
	fg_backend_close(&deq);
}
END_TEST

/* SwiGLU as the engine runs it: up = x · w_upᵀ (fp16 in device memory), then
 * out = silu(x · w_gateᵀ) ⊙ up + residual (out aliasing the residual). */
START_TEST(test_swiglu)
{
	static const struct { int64_t m, n, k; int q4; } cases[] = {
		{ 3, 352, 256, 0 }, { 150, 352, 256, 0 }, { 3, 352, 256, 1 }, { 150, 352, 256, 1 },
	};
	struct worst w = { 0, "" };

	gpu_seed(121);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
		int q4 = cases[ci].q4;
		uint16_t *xh = rand_h((size_t)(m * k), -1, 1), *rh = rand_h((size_t)(m * n), -1, 1);
		uint16_t *wh[2], *oh = xmalloc((size_t)(m * n) * 2);
		uint8_t *enc[2] = { NULL, NULL };
		float *ref = xmalloc((size_t)(m * n) * 4);
		struct dbuf dx, dw[2], dup, dout;
		struct fg_linear_args up, gate;
		char label[96];
		float ws = 1.0f / sqrtf((float)k);

		for (int t = 0; t < 2; t++) { /* 0: up, 1: gate */
			float *wf = xmalloc((size_t)(n * k) * 4);

			wh[t] = xmalloc((size_t)(n * k) * 2);
			for (int64_t i = 0; i < n * k; i++)
				wf[i] = gpu_uniform(-ws, ws);
			if (q4) {
				float *dec;

				enc[t] = ref_q4_encode(wf, (uint64_t)n, (uint64_t)k, 0);
				dec = ref_q4_decode(enc[t], (uint64_t)n, (uint64_t)k, 0);
				for (int64_t i = 0; i < n * k; i++)
					wh[t][i] = fg_float_to_half(dec[i]);
				free(dec);
			} else {
				for (int64_t i = 0; i < n * k; i++)
					wh[t][i] = fg_float_to_half(wf[i]);
			}
			free(wf);
		}
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double u = 0, gv = 0;

				for (int64_t l = 0; l < k; l++) {
					double x = fg_half_to_float(xh[i * k + l]);

					u += x * fg_half_to_float(wh[0][j * k + l]);
					gv += x * fg_half_to_float(wh[1][j * k + l]);
				}
				u = fg_half_to_float(fg_float_to_half((float)u)); /* up is stored in fp16 */
				ref[i * n + j] = (float)(silu_d(gv) * u + fg_half_to_float(rh[i * n + j]));
			}
		memset(&up, 0, sizeof(up));
		memset(&gate, 0, sizeof(gate));
		up.x = tens(dput(&dx, xh, (size_t)(m * k) * 2), FG_DTYPE_F16, m, k, k);
		for (int t = 0; t < 2; t++)
			if (q4)
				(t ? &gate : &up)->w = tens(dput(&dw[t], enc[t], (size_t)fg_q4_bytes(
						(uint64_t)n, (uint64_t)k, 0)), FG_DTYPE_Q4_ROWS, n, k, k);
			else
				(t ? &gate : &up)->w = tens(dput(&dw[t], wh[t], (size_t)(n * k) * 2),
							    FG_DTYPE_F16, n, k, k);
		up.out = tens(dput(&dup, NULL, (size_t)(m * n) * 2), FG_DTYPE_F16, m, n, n);
		gate.x = up.x;
		gate.act = FG_ACT_SILU;
		gate.out = tens(dput(&dout, rh, (size_t)(m * n) * 2), FG_DTYPE_F16, m, n, n);
		gate.residual = gate.out;
		gate.mul = up.out;
		ck_assert_msg(gpu.ops->linear(gpu.ctx, NULL, &up) == 0, "%s", fg_last_error());
		ck_assert_msg(gpu.ops->linear(gpu.ctx, NULL, &gate) == 0, "%s", fg_last_error());
		dget(&dout, oh);
		snprintf(label, sizeof(label), "swiglu m=%" PRId64 " n=%" PRId64 " k=%" PRId64 "%s",
			 m, n, k, q4 ? " q4" : "");
		double e = compare(&w, label, ref, n, oh, n, m, n);
		ck_assert_msg(e <= TOL_LINEAR, "%s: error %.3g > %.3g (%s)", label, e, TOL_LINEAR,
			      w.where);
		dfree(&dx), dfree(&dw[0]), dfree(&dw[1]), dfree(&dup), dfree(&dout);
		free(xh), free(rh), free(wh[0]), free(wh[1]), free(oh), free(enc[0]), free(enc[1]);
		free(ref);
	}
	report("swiglu", &w, TOL_LINEAR);
}
END_TEST

/* ---- fp8 products (fp8_prefill) -------------------------------------------------------- */

/* With fp8_prefill, products of at least fp8_min_rows rows quantize x and the
 * weight row by row to E4M3 (plugins/compute/cublas/kernels.h defines it
 * exactly) and multiply on the fp8 tensor cores.  Each result is compared
 * with a host mirror of that quantization (same fp32 operations, E4M3 rounded
 * by e4m3() below), whose sums of E4M3 products are exact in double:
 *
 *   tight: |gpu - mirror| within cuBLASLt's own errors: fp32 accumulation on
 *     the fp8 tensor cores, which keep about 14 bits of the running sum
 *     between promotions to fp32 (fast accumulation stays off): 2^-11 of the
 *     sum of |terms| x scales; the fp32 scale products (2^-21 of |product|);
 *     one rounding to fp16 of the product (or of product + residual) where
 *     the epilogue kernel finishes it; the epilogue's fp32 sums, SiLU's slope
 *     (< 1.1) and expf, the gate's magnitude; the final rounding to out's type.
 *   loose: |gpu - exact| against the double product of the unquantized fp16
 *     values: each operand's E4M3 error is at most 2^-4 of it (nearest even,
 *     3 mantissa bits), independent and zero-mean, so the product's error has
 *     a standard deviation of at most 2^-4 sqrt(2/3) sqrt(sum of terms^2); 8
 *     of them (0.41 sqrt(sum terms^2)), or the worst case 0.13 sum |terms| if
 *     smaller, plus 2^-10 of a scale per E4M3 subnormal, plus the tight terms.
 *
 * Why a wrong implementation fails: rows of x and of w are multiplied by
 * factors 2^-3 .. 2^3, so their scales differ by up to 64x between rows and
 * a swapped, inverted or misindexed scale is off by far more than the loose
 * bound; a row quantized with a wrong rounding (truncation, another scale)
 * moves each product by about its quantization error (~5 % of it), 4 to 8
 * times the tight bound at these k.  The tie rule is checked where every value
 * is a tie (rows whose largest magnitude is 448, so that inv = 1, and whose
 * other values lie halfway between two E4M3 values: each tie rounded the
 * other way moves a term by 2^-3 of it), and single values are checked bit
 * for bit where a product has one term: an identity weight gives out = the
 * dequantized x, an identity x the dequantized weight, within 2^-11.
 *
 * Which path runs is known from outside: fp8 on a device with fp8 tensor
 * cores (compute capability 9.0 per nvidia-smi must run it; 8.9 and 10.x
 * may find no cuBLASLt algorithm with row-wise scales and run fp16, as
 * cc < 8.9 always does), for m >= fp8_min_rows (16 here) and out's rows
 * 16-byte aligned; fp16 otherwise, against the exact product with the linear
 * tolerance.  A first probe tells whether the device runs fp8 at all. */

/* The value of E4M3 code c (0 .. 0x7e, non-negative): bias 7, 3 mantissa bits. */
static double e4m3_value(unsigned c)
{
	unsigned e = c >> 3, mant = c & 7;

	return e ? ldexp(8 + mant, (int)e - 10) : ldexp(mant, -9);
}

/* v rounded to E4M3 as __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)
 * does, as a value: to the nearest multiple of 2^(e-3) for 2^e <= |v| (normal,
 * e >= -6), of 2^-9 below 2^-6 (subnormal), ties to even (rint in the default
 * rounding mode; the division by a power of two is exact); magnitudes past
 * 448, the largest finite value, saturate to it; NaN stays NaN. */
static double e4m3(float v)
{
	double a = fabs((double)v), step;
	int e;

	if (isnan(v))
		return NAN;
	if (a > 448.0)
		a = 448.0; /* rounds to 448 anyway: 448 + half a step is a tie to even 448 */
	if (a >= 0x1p-6) {
		(void)frexp(a, &e); /* a = f 2^e, f in [0.5, 1): the leading bit is 2^(e-1) */
		step = ldexp(1.0, e - 4);
	} else {
		step = 0x1p-9;
	}
	a = rint(a / step) * step;
	return copysign(a > 448.0 ? 448.0 : a, (double)v);
}

/* One row of the backend's quantization (kernels.h, cublas_k_fp8_rows), with
 * the same fp32 operations: the E4M3 values of h[0 .. n) into q (exact in
 * float) and the row's scale. */
static float fp8_row(const uint16_t *h, int64_t n, float *q)
{
	float amax = 0.0f, inv, scale;

	for (int64_t j = 0; j < n; j++) {
		float a = fabsf(fg_half_to_float(h[j]));

		if (a > amax) /* false for NaN: ignored, as fmaxf does */
			amax = a;
	}
	inv = amax > 0.0f ? 448.0f / amax : 1.0f;
	scale = amax > 0.0f ? amax / 448.0f : 1.0f;
	for (int64_t j = 0; j < n; j++) {
		float p = fg_half_to_float(h[j]) * inv;

		q[j] = (float)e4m3(p);
	}
	return scale;
}

/* fp8_row for each of the `rows` rows of h [rows, k] (ld ldh): into q and
 * scale, with each row's values as floats (f [rows, k]) and the sum of their
 * magnitudes (a). */
static void fp8_rows(const uint16_t *h, int64_t ldh, int64_t rows, int64_t k, float *q,
		     float *scale, float *f, double *a)
{
	for (int64_t i = 0; i < rows; i++) {
		scale[i] = fp8_row(h + i * ldh, k, q + i * k);
		a[i] = 0;
		for (int64_t l = 0; l < k; l++) {
			f[i * k + l] = fg_half_to_float(h[i * ldh + l]);
			a[i] += fabsf(f[i * k + l]);
		}
	}
}

/* The compute capability of the GPU the backends open (device 0 of
 * CUDA_VISIBLE_DEVICES), major * 10 + minor, from nvidia-smi; -1: unknown. */
static int device_cc(void)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	char cmd[160], line[64];
	int idx = 0, major, minor, cc = -1;
	FILE *f;

	if (vis && *vis && sscanf(vis, "%d", &idx) != 1)
		return -1; /* GPU UUIDs */
	snprintf(cmd, sizeof(cmd), "nvidia-smi --query-gpu=compute_cap --format=csv,noheader "
		 "-i %d 2>/dev/null", idx);
	if (!(f = popen(cmd, "r")))
		return -1;
	if (fgets(line, sizeof(line), f) && sscanf(line, "%d.%d", &major, &minor) == 2)
		cc = major * 10 + minor;
	pclose(f);
	return cc;
}

/* Opens a compute backend with options kv (key, value, ..., NULL). */
static int try_backend(struct fg_backend *b, const char *name, const char *const *kv)
{
	struct fg_plugin_handle ph;
	void *opts;

	ck_assert_msg(fg_plugin_load(name, FG_PLUGIN_COMPUTE, &ph) == 0, "%s", fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_ptr_nonnull(opts);
	for (; kv && kv[0]; kv += 2)
		ck_assert_msg(fg_plugin_opts_set(ph.plugin, opts, kv[0], kv[1], "test") == 0, "%s",
			      fg_last_error());
	return fg_backend_open(b, &ph, opts);
}

enum f8_data {
	F8_RANDOM,    /* uniform, each row of x and of w times its own factor 2^-3 .. 2^3 */
	F8_ZEROS,     /* that, with rows of zeros in x and in w */
	F8_TIES,      /* x: rows of E4M3 ties around a +-448 (inv = 1); w random */
	F8_EYE_W,     /* x random, w[j, l] = (l == j): out = the dequantized x */
	F8_EYE_X,     /* x[i, l] = (l == i % k), w random: out = the dequantized w */
};

struct f8_case {
	int64_t m, n, k;
	int xpad, opad;   /* ld - cols of x, and of out, residual and mul */
	int bias;         /* 0 none, 1 aligned, 2 two bytes off 16-byte alignment */
	int act;          /* enum fg_activation */
	int mul, res;     /* res: 0 none, 1 a separate buffer, 2 out itself */
	int f32;          /* out and residual fp32 (the residual stream) */
	int q4;
	enum f8_data data;
	int small;        /* 1: on the backend with fp8_scratch = 1M (bands and tiles);
			   * 2: also scratch = 4M (4-bit weights dequantized in tiles) */
};

#define F8_MIN_ROWS 16
enum { F8_EXPECT_F16, F8_EXPECT_FP8, F8_EXPECT_ANY };

static const struct f8_case f8_probe = { 64, 96, 128, 0, 0, 0, FG_ACT_NONE, 0, 1, 1, 0,
					 F8_EYE_W, 0 };

static const struct f8_case f8_cases[] = {
	/* below fp8_min_rows: fp16 */
	{ 8, 64, 64, 0, 0, 1, FG_ACT_NONE, 0, 0, 0, 0, F8_RANDOM, 0 },
	{ 15, 128, 256, 0, 0, 1, FG_ACT_RELU, 0, 2, 0, 0, F8_RANDOM, 0 },
	/* fp8: bias and ReLU fused; k off 16 (padded with zeros); x's rows off
	 * 16-byte alignment (the quantization's scalar loads) */
	{ 16, 64, 64, 0, 0, 1, FG_ACT_NONE, 0, 0, 0, 0, F8_RANDOM, 0 },
	{ 64, 128, 256, 8, 0, 1, FG_ACT_NONE, 0, 0, 0, 0, F8_RANDOM, 0 },
	{ 48, 96, 100, 0, 0, 1, FG_ACT_RELU, 0, 0, 0, 0, F8_RANDOM, 0 },
	{ 33, 72, 70, 3, 0, 0, FG_ACT_NONE, 0, 0, 0, 0, F8_RANDOM, 0 },
	/* residual: separate (C), out itself (C = D), ReLU with it (a copy in
	 * the fp8 buffer, then the epilogue kernel); the fp32 stream, whose bias
	 * is added after the product */
	{ 130, 256, 512, 0, 0, 1, FG_ACT_NONE, 0, 1, 0, 0, F8_RANDOM, 0 },
	{ 64, 200, 128, 0, 0, 1, FG_ACT_NONE, 0, 2, 0, 0, F8_RANDOM, 0 },
	{ 200, 192, 320, 8, 8, 1, FG_ACT_RELU, 0, 2, 0, 0, F8_RANDOM, 0 },
	{ 96, 128, 256, 0, 0, 1, FG_ACT_NONE, 0, 2, 1, 0, F8_RANDOM, 0 },
	{ 96, 128, 256, 0, 4, 0, FG_ACT_NONE, 0, 1, 1, 0, F8_RANDOM, 0 },
	{ 80, 160, 192, 0, 0, 1, FG_ACT_RELU, 0, 2, 1, 0, F8_RANDOM, 0 },
	/* SwiGLU's gate (SiLU, mul) into the residual, and alone; an unaligned
	 * bias (not fused) */
	{ 100, 160, 192, 0, 0, 0, FG_ACT_SILU, 1, 2, 0, 0, F8_RANDOM, 0 },
	{ 64, 128, 128, 0, 0, 1, FG_ACT_SILU, 1, 0, 0, 0, F8_RANDOM, 0 },
	{ 32, 128, 256, 0, 0, 2, FG_ACT_NONE, 0, 0, 0, 0, F8_RANDOM, 0 },
	/* out's rows off 16-byte alignment: fp16 */
	{ 40, 64, 96, 0, 3, 1, FG_ACT_NONE, 0, 1, 0, 0, F8_RANDOM, 0 },
	/* rows of zeros; ties; the dequantized weight */
	{ 64, 128, 256, 0, 0, 1, FG_ACT_NONE, 0, 0, 0, 0, F8_ZEROS, 0 },
	{ 48, 64, 128, 0, 0, 0, FG_ACT_NONE, 0, 1, 1, 0, F8_TIES, 0 },
	{ 48, 64, 128, 0, 0, 1, FG_ACT_RELU, 0, 0, 0, 0, F8_TIES, 0 },
	{ 96, 80, 96, 0, 0, 0, FG_ACT_NONE, 0, 1, 1, 0, F8_EYE_X, 0 },
	/* 4-bit weights past q4_fused_max_m (128): dequantized tiles, each fp8 */
	{ 200, 256, 512, 0, 0, 1, FG_ACT_RELU, 0, 0, 0, 1, F8_RANDOM, 0 },
	{ 300, 640, 384, 8, 0, 0, FG_ACT_SILU, 1, 2, 0, 1, F8_RANDOM, 0 },
	{ 160, 128, 256, 0, 0, 1, FG_ACT_NONE, 0, 2, 1, 1, F8_RANDOM, 0 },
	/* fp8_scratch = 1M: bands of x, each quantized once, and tiles of the
	 * weight (quantized again for each band); bands with copies of the
	 * products; k off 16; 4-bit */
	{ 600, 1024, 1024, 0, 0, 1, FG_ACT_NONE, 0, 2, 1, 0, F8_RANDOM, 1 },
	{ 700, 320, 768, 0, 0, 1, FG_ACT_RELU, 0, 2, 0, 0, F8_RANDOM, 1 },
	{ 1500, 256, 1000, 0, 0, 1, FG_ACT_RELU, 0, 0, 0, 0, F8_RANDOM, 1 },
	{ 600, 512, 1024, 0, 0, 1, FG_ACT_NONE, 0, 2, 1, 1, F8_RANDOM, 1 },
	/* scratch = 4M as well: 4-bit weights dequantized in tiles, each quantized
	 * for each of x's bands (x once a band), into the fp32 stream and not */
	{ 700, 2304, 1024, 0, 0, 1, FG_ACT_NONE, 0, 2, 1, 1, F8_RANDOM, 2 },
	{ 700, 2304, 1024, 0, 0, 1, FG_ACT_RELU, 0, 0, 0, 1, F8_RANDOM, 2 },
};

struct f8_worst {
	double tight, loose, f16; /* worst error / its bound (<= 1 passes); f16: the linear error */
	char where[240];
};

/* The epilogue of one output in double, and in *tol the bound on its error
 * given the bound ev on the product v's (see the bounds above). */
static double f8_finish(const struct f8_case *c, double v, double ev, double bias, double mul,
			double res, double *tol)
{
	double a = v + bias, t = ev + 0x1p-22 * (fabs(v) + fabs(bias));

	if (c->act == FG_ACT_RELU) {
		a = a < 0 ? 0 : a;
	} else if (c->act == FG_ACT_SILU) {
		a = silu_d(a);
		t = 1.1 * t + 0x1p-21 * fabs(a);
	}
	if (c->mul) {
		a *= mul;
		t = t * fabs(mul) + 0x1p-23 * fabs(a);
	}
	if (c->res) {
		t += 0x1p-22 * (fabs(a) + fabs(res));
		a += res;
	}
	/* (2^-100: a bound of 0, where all is exactly 0, would divide 0 by 0) */
	*tol = t + (c->f32 ? 0x1p-23 * fabs(a) : 0x1p-11 * fabs(a) + 0x1p-24) + 0x1p-100;
	return a;
}

/* Fills x [m, ldx] and w [n, k] (fp16; for 4-bit weights the dequantized
 * values, and *q4 the encoding) as c->data says. */
static void f8_fill(const struct f8_case *c, uint16_t *xh, int64_t ldx, uint16_t *wh,
		    uint8_t **q4)
{
	int64_t m = c->m, n = c->n, k = c->k;
	float ws = 1.0f / sqrtf((float)k);

	for (int64_t i = 0; i < m; i++) {
		float f = exp2f(gpu_uniform(-3, 3));

		for (int64_t l = 0; l < k; l++) {
			float v = gpu_uniform(-1, 1) * f;

			if (c->data == F8_EYE_X) {
				v = l == i % k ? 1.0f : 0.0f;
			} else if (c->data == F8_TIES) {
				unsigned code = (unsigned)(gpu_next() % 0x7e); /* and code + 1 <= 448 */
				float sign = gpu_next() & 1 ? -1.0f : 1.0f;

				v = l == i % k ? 448.0f * sign
					       : sign * (float)((e4m3_value(code) +
								 e4m3_value(code + 1)) / 2);
			} else if (c->data == F8_ZEROS && i % 7 == 3) {
				v = 0.0f;
			}
			xh[i * ldx + l] = fg_float_to_half(v);
		}
	}
	*q4 = NULL;
	if (c->q4) {
		float *wf = xmalloc((size_t)(n * k) * sizeof(float));

		*q4 = lin_weights(n, k, 1, wf, wh);
		free(wf);
		return;
	}
	for (int64_t j = 0; j < n; j++) {
		float f = exp2f(gpu_uniform(-3, 3));

		for (int64_t l = 0; l < k; l++) {
			float v = gpu_uniform(-ws, ws) * f;

			if (c->data == F8_EYE_W)
				v = l == j % k ? 1.0f : 0.0f;
			else if (c->data == F8_ZEROS && j % 5 == 2)
				v = 0.0f;
			wh[j * k + l] = fg_float_to_half(v);
		}
	}
}

/* Set by test_linear_fp8's last loop: the weight goes to the backend as
 * stored fp8 (F8_ROWS, encoded from wh by f8.h's rule, which is the fp8
 * path's own quantization of wh: the mirror below still holds). */
static int f8_stored;

/* wh [n, k] encoded by f8.h (malloc'd). */
static uint8_t *f8_encode_h(const uint16_t *wh, int64_t n, int64_t k)
{
	size_t bytes = (size_t)fg_f8_bytes((uint64_t)n, (uint64_t)k);
	uint8_t *enc = xmalloc(bytes);
	float *row = xmalloc((size_t)k * sizeof(float));

	memset(enc, 0, bytes);
	for (int64_t j = 0; j < n; j++) {
		float scale, inv;

		for (int64_t l = 0; l < k; l++)
			row[l] = fg_half_to_float(wh[j * k + l]);
		fg_f8_scale_of(fg_f8_amax(row, (size_t)k), &scale, &inv);
		fg_f8_scale_store(enc + fg_f8_data_bytes((uint64_t)n, (uint64_t)k), (uint64_t)j, scale);
		for (int64_t l = 0; l < k; l++)
			enc[j * k + l] = fg_f8_code(row[l], inv);
	}
	free(row);
	return enc;
}

/* Runs case c on backend g and checks it against what `expect` says; returns
 * 1 when the result is the fp8 path's (within the tight bound of the mirror
 * and the loose one of the exact product), 0 when it is the fp16 path's
 * (within the linear tolerance of the exact product). */
static int run_fp8(struct fg_backend *g, const char *gname, const struct f8_case *c, int expect,
		   struct f8_worst *w)
{
	int64_t m = c->m, n = c->n, k = c->k, ldx = k + c->xpad, ldo = n + c->opad;
	size_t esz = c->f32 ? 4 : 2, on = (size_t)(m * ldo);
	uint16_t *xh = xmalloc((size_t)(m * ldx) * 2), *wh = xmalloc((size_t)(n * k) * 2);
	uint16_t *bh = rand_h((size_t)n + 1, -0.5f, 0.5f), *mh = rand_h(on, -2, 2);
	uint16_t *r16 = rand_h(on, -1, 1);
	float *r32 = rand_f(on, -8, 8);
	const uint16_t *bias = c->bias == 2 ? bh + 1 : bh;
	float *xq = xmalloc((size_t)(m * k) * 4), *wq = xmalloc((size_t)(n * k) * 4);
	float *xf = xmalloc((size_t)(m * k) * 4), *wf = xmalloc((size_t)(n * k) * 4);
	float *sx = xmalloc((size_t)m * 4), *sw = xmalloc((size_t)n * 4);
	double *ax = xmalloc((size_t)m * 8), *aw = xmalloc((size_t)n * 8);
	void *got = xmalloc(on * esz), *init = xmalloc(on * esz);
	double tight = 0, loose = 0, f16 = 0, tol16 = c->f32 ? TOL_RES32 : TOL_LINEAR;
	int64_t wi[3] = { 0, 0, 0 }, wj[3] = { 0, 0, 0 };
	uint8_t *q4;
	struct dbuf dx, dw, db = { 0 }, dr = { 0 }, dm = { 0 }, dout;
	struct fg_linear_args ga;
	char label[200];
	int is8;

	f8_fill(c, xh, ldx, wh, &q4);
	if (f8_stored && !q4)
		q4 = f8_encode_h(wh, n, k);
	/* out starts as the residual (aliased) or as NaN */
	for (size_t i = 0; i < on; i++) {
		if (c->f32)
			((float *)init)[i] = c->res == 2 ? r32[i] : NAN;
		else
			((uint16_t *)init)[i] = c->res == 2 && (int64_t)(i % (size_t)ldo) < n
							? r16[i] : SENTINEL;
	}
	memset(&ga, 0, sizeof(ga));
	put_xw_as(&ga, &dx, &dw, xh, ldx, q4, f8_stored && !c->q4, wh, m, n, k);
	if (c->bias)
		ga.bias = tens((char *)dput(&db, bh, ((size_t)n + 1) * 2) + (c->bias == 2 ? 2 : 0),
			       FG_DTYPE_F16, 1, n, n);
	ga.act = (enum fg_activation)c->act;
	ga.out = tens(dput(&dout, init, on * esz), c->f32 ? FG_DTYPE_F32 : FG_DTYPE_F16, m, n, ldo);
	if (c->res == 1)
		ga.residual = tens(dput(&dr, c->f32 ? (void *)r32 : (void *)r16, on * esz),
				   ga.out.dtype, m, n, ldo);
	else if (c->res == 2)
		ga.residual = ga.out;
	if (c->mul)
		ga.mul = tens(dput(&dm, mh, on * 2), FG_DTYPE_F16, m, n, ldo);
	ck_assert_msg(g->ops->linear(g->ctx, NULL, &ga) == 0, "%s: %s", gname, fg_last_error());
	dget(&dout, got);
	snprintf(label, sizeof(label), "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 "%s%s%s%s%s%s%s",
		 gname, m, n, k, c->q4 ? " q4" : f8_stored ? " f8-stored" : "",
		 c->bias == 2 ? " bias(unaligned)" : c->bias
		 ? " bias" : "", c->act == FG_ACT_SILU ? " silu" : c->act == FG_ACT_RELU ? " relu"
		 : c->act == FG_ACT_GELU_TANH ? " gelu" : "", c->mul ? " mul" : "",
		 c->res == 2 ? " res=out" : c->res ? " res" : "",
		 c->f32 ? " f32" : "", c->data == F8_ZEROS ? " zero-rows" : c->data == F8_TIES
		 ? " ties" : c->data >= F8_EYE_W ? " identity" : "");
	if (!c->f32)
		check_padding(label, got, m, n, ldo);

	/* the mirror: the backend's quantization of every row, exact sums */
	fp8_rows(xh, ldx, m, k, xq, sx, xf, ax);
	fp8_rows(wh, k, n, k, wq, sw, wf, aw);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			const float *qa = xq + i * k, *qb = wq + j * k, *fa = xf + i * k, *fb = wf + j * k;
			double acc = 0, s8 = 0, ex = 0, e2 = 0, a1 = 0, v8, ev8, evx, quant;
			double mul = c->mul ? fg_half_to_float(mh[i * ldo + j]) : 0;
			double res = c->f32 ? r32[i * ldo + j] : fg_half_to_float(r16[i * ldo + j]);
			double b = c->bias ? fg_half_to_float(bias[j]) : 0;
			double r8, rx, t8, tx, gv = got_at(got, c->f32, i * ldo + j), e;

			for (int64_t l = 0; l < k; l++) {
				float p8 = qa[l] * qb[l], p = fa[l] * fb[l]; /* both exact in float */

				acc += p8;
				s8 += fabsf(p8);
				ex += p;
				e2 += (double)p * p;
				a1 += fabsf(p);
			}
			v8 = acc * sw[j] * sx[i];
			/* (fp16 out: the product, or product + residual, may be stored
			 * before the epilogue kernel finishes it) */
			ev8 = 0x1p-11 * s8 * sw[j] * sx[i] + 0x1p-21 * fabs(v8) +
			      (c->f32 ? 0 : 0x1p-11 * (fabs(v8) + (c->res ? fabs(res) : 0)) + 0x1p-25);
			quant = fmin(0.41 * sqrt(e2), 0.13 * a1) + 0x1p-10 * (sx[i] * aw[j] + sw[j] * ax[i]);
			evx = quant + ev8 + 0x1p-10 * a1;
			r8 = f8_finish(c, v8, ev8, b, mul, res, &t8);
			rx = f8_finish(c, ex, evx, b, mul, res, &tx);
			e = fabs(gv - r8) / t8;
			if (!(e <= tight)) {
				tight = isnan(e) ? INFINITY : e;
				wi[0] = i, wj[0] = j;
			}
			e = fabs(gv - rx) / tx;
			if (!(e <= loose)) {
				loose = isnan(e) ? INFINITY : e;
				wi[1] = i, wj[1] = j;
			}
			e = fabs(gv - rx) / (1 + fabs(rx));
			if (!(e <= f16)) {
				f16 = isnan(e) ? INFINITY : e;
				wi[2] = i, wj[2] = j;
			}
		}
	is8 = tight <= 1 && loose <= 1;
	if (expect == F8_EXPECT_FP8 || (expect == F8_EXPECT_ANY && is8)) {
		ck_assert_msg(tight <= 1, "%s: %.3g times the tight bound from the fp8 mirror at [%"
			      PRId64 ", %" PRId64 "] (fp16 path's error there %.3g)", label, tight,
			      wi[0], wj[0], f16);
		ck_assert_msg(loose <= 1, "%s: %.3g times the loose bound from the exact product at ["
			      "%" PRId64 ", %" PRId64 "]", label, loose, wi[1], wj[1]);
		if (tight >= w->tight || loose >= w->loose)
			snprintf(w->where, sizeof(w->where), "%s: tight %.3g loose %.3g", label,
				 tight, loose);
		w->tight = fmax(w->tight, tight);
		w->loose = fmax(w->loose, loose);
		is8 = 1;
	} else {
		ck_assert_msg(f16 <= tol16, "%s: %s error %.3g > %.3g at [%" PRId64 ", %" PRId64
			      "] (fp8 mirror: %.3g times the tight bound)", label,
			      expect == F8_EXPECT_ANY ? "neither fp8 nor fp16:" : "fp16 path expected;",
			      f16, tol16, wi[2], wj[2], tight);
		w->f16 = fmax(w->f16, f16);
		is8 = 0;
	}
	dfree(&dx), dfree(&dw), dfree(&db), dfree(&dr), dfree(&dm), dfree(&dout);
	free(xh), free(wh), free(bh), free(mh), free(r16), free(r32), free(xq), free(wq);
	free(xf), free(wf), free(sx), free(sw), free(ax), free(aw), free(got), free(init), free(q4);
	return is8;
}

/* Whether fp8_prefill takes case c on a device that runs fp8 at all. */
static int f8_eligible(const struct f8_case *c)
{
	return c->m >= F8_MIN_ROWS && ((size_t)(c->n + c->opad) * (c->f32 ? 4 : 2)) % 16 == 0;
}

START_TEST(test_linear_fp8)
{
	/* (q4_fused_max_m 0: stored fp8 weights of up to 128 rows of x would
	 * take their fused kernel, which test_linear_f8 checks; the 4-bit cases
	 * here are past 128 rows anyway) */
	static const char *const opts[] = { "fp8_prefill", "true", "fp8_min_rows", "16",
					    "q4_fused_max_m", "0", NULL };
	static const char *const small[] = { "fp8_prefill", "true", "fp8_min_rows", "16",
					     "fp8_scratch", "1M", "q4_fused_max_m", "0", NULL };
	static const char *const tiny[] = { "fp8_prefill", "true", "fp8_min_rows", "16",
					    "fp8_scratch", "1M", "scratch", "4M",
					    "q4_fused_max_m", "0", NULL };
	static const char *const too_small[] = { "fp8_prefill", "true", "fp8_scratch", "512K",
						 NULL };
	struct fg_backend f8, f8s, f8t, bad;
	struct f8_worst w = { 0, 0, 0, "" };
	int cc = device_cc(), active;

	gpu_seed(131);
	ck_assert_int_ne(try_backend(&bad, "cublas", too_small), 0);
	ck_assert_msg(strstr(fg_last_error(), "fp8_scratch"), "refusal does not name the option: "
		      "%s", fg_last_error());
	ck_assert_msg(try_backend(&f8, "cublas", opts) == 0, "%s", fg_last_error());
	ck_assert_msg(try_backend(&f8s, "cublas", small) == 0, "%s", fg_last_error());
	ck_assert_msg(try_backend(&f8t, "cublas", tiny) == 0, "%s", fg_last_error());

	/* the probe: out = the dequantized x (fp8) or x itself (fp16) */
	active = run_fp8(&f8, "cublas[fp8]", &f8_probe, F8_EXPECT_ANY, &w);
	if (cc < 0)
		printf("linear fp8             the fp8 path is %s on this device (compute "
		       "capability unknown: no nvidia-smi)\n", active ? "active" : "NOT active");
	else
		printf("linear fp8             the fp8 path is %s on this device (compute "
		       "capability %d.%d)\n", active ? "active" : "NOT active", cc / 10, cc % 10);
	if (cc >= 0 && cc < 89)
		ck_assert_msg(!active, "fp8 products on a device of compute capability %d.%d",
			      cc / 10, cc % 10);
	if (cc == 90)
		ck_assert_msg(active, "compute capability 9.0 but the fp8 path did not run: see the "
			      "backend's warning above (cuBLASLt's refusal)");
	for (size_t i = 0; i < sizeof(f8_cases) / sizeof(f8_cases[0]); i++) {
		const struct f8_case *c = &f8_cases[i];

		static const char *const name[] = { "cublas[fp8]", "cublas[fp8, 1M]",
						    "cublas[fp8, 1M, scratch 4M]" };
		struct fg_backend *be[] = { &f8, &f8s, &f8t };

		run_fp8(be[c->small], name[c->small], c,
			active && f8_eligible(c) ? F8_EXPECT_FP8 : F8_EXPECT_F16, &w);
	}
	/* off by default */
	run_fp8(&gpu, "cublas", &f8_cases[3], F8_EXPECT_F16, &w);
	/* stored fp8 weights (compute 1.15) whose rows are 16-byte multiples
	 * enter the fp8 product as stored: the same codes and scales as the
	 * quantized fp16 weight, so the same result within the same bounds */
	f8_stored = 1;
	for (size_t i = 0; active && i < sizeof(f8_cases) / sizeof(f8_cases[0]); i++) {
		const struct f8_case *c = &f8_cases[i];
		static const char *const name[] = { "cublas[fp8]", "cublas[fp8, 1M]",
						    "cublas[fp8, 1M, scratch 4M]" };
		struct fg_backend *be[] = { &f8, &f8s, &f8t };

		if (!c->q4 && c->k % 16 == 0 && f8_eligible(c))
			run_fp8(be[c->small], name[c->small], c, F8_EXPECT_FP8, &w);
	}
	f8_stored = 0;
	printf("linear fp8             worst tight %.3g, loose %.3g of their bounds  %s\n",
	       w.tight, w.loose, w.where);
	printf("linear fp8 (fp16 runs) worst |gpu-ref|/(1+|ref|) = %.3g\n", w.f16);
	fflush(stdout);
	fg_backend_close(&f8);
	fg_backend_close(&f8s);
	fg_backend_close(&f8t);
}
END_TEST

/* ---- rope -------------------------------------------------------------------------------- */

START_TEST(test_rope)
{
	static const struct {
		int64_t n, heads, hd, rot;
		int ldpad;
		int32_t maxpos;
		float factor;
	} cases[] = {
		{ 1, 4, 64, 64, 0, 10, 1.0f },       { 37, 8, 64, 64, 0, 2048, 1.0f },
		{ 300, 2, 128, 128, 8, 8192, 1.0f }, { 5, 3, 80, 32, 0, 500, 1.0f },
		{ 9, 2, 20, 10, 3, 100, 1.0f },      { 16, 4, 128, 128, 0, 100000, 1.2f },
		{ 2, 1, 2, 2, 1, 7, 0.9f },          { 64, 32, 128, 64, 0, 4096, 1.0f },
	};
	struct worst w = { 0, "" };

	gpu_seed(515);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, heads = cases[ci].heads, hd = cases[ci].hd;
		int64_t rot = cases[ci].rot, half = rot / 2, cols = heads * hd, ld = cols + cases[ci].ldpad;
		uint16_t *xh = rand_h((size_t)(n * ld), -2, 2), *got = xmalloc((size_t)(n * ld) * 2);
		float *ref = xmalloc((size_t)(n * cols) * 4), *inv = xmalloc((size_t)half * 4);
		int32_t *pos = xmalloc((size_t)n * 4);
		struct dbuf dx;
		struct fg_rope_args a;
		char label[128];

		for (int64_t i = 0; i < half; i++) /* a Llama-style base, scaled in one case */
			inv[i] = (float)(pow(10000.0, -2.0 * (double)i / (double)rot) /
					 (cases[ci].factor != 1.0f ? 4.0 : 1.0));
		for (int64_t r = 0; r < n; r++)
			pos[r] = (int32_t)(gpu_next() % (uint64_t)cases[ci].maxpos);
		pos[0] = cases[ci].maxpos - 1;
		for (int64_t r = 0; r < n; r++)
			for (int64_t j = cols; j < ld; j++)
				xh[r * ld + j] = SENTINEL;
		for (int64_t r = 0; r < n; r++)
			for (int64_t h = 0; h < heads; h++) {
				const uint16_t *xv = xh + r * ld + h * hd;
				float *rv = ref + r * cols + h * hd;

				for (int64_t j = 0; j < hd; j++)
					rv[j] = fg_half_to_float(xv[j]);
				for (int64_t i = 0; i < half; i++) {
					float ang = (float)pos[r] * inv[i]; /* the fp32 angle */
					double c = cos((double)ang) * cases[ci].factor;
					double s = sin((double)ang) * cases[ci].factor;
					double x0 = fg_half_to_float(xv[i]), x1 = fg_half_to_float(xv[i + half]);

					rv[i] = (float)(x0 * c - x1 * s);
					rv[i + half] = (float)(x1 * c + x0 * s);
				}
			}
		memset(&a, 0, sizeof(a));
		a.x = tens(dput(&dx, xh, (size_t)(n * ld) * 2), FG_DTYPE_F16, n, cols, ld);
		a.positions = pos;
		a.n = n;
		a.heads = heads;
		a.head_dim = hd;
		a.rot_dim = rot;
		a.inv_freq = inv;
		a.attn_factor = cases[ci].factor;
		ck_assert_msg(gpu.ops->rope(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		memset(pos, 0xff, (size_t)n * 4); /* the host arrays are the caller's again */
		memset(inv, 0xff, (size_t)half * 4);
		dget(&dx, got);
		snprintf(label, sizeof(label), "rope n=%" PRId64 " heads=%" PRId64 " hd=%" PRId64
			 " rot=%" PRId64 " maxpos=%" PRId32 " factor=%g", n, heads, hd, rot,
			 cases[ci].maxpos, (double)cases[ci].factor);
		check_padding(label, got, n, cols, ld);
		for (int64_t r = 0; r < n; r++) /* values past rot_dim: untouched */
			for (int64_t h = 0; h < heads; h++)
				for (int64_t j = rot; j < hd; j++)
					ck_assert_msg(got[r * ld + h * hd + j] == xh[r * ld + h * hd + j],
						      "%s: [%" PRId64 ", head %" PRId64 ", %" PRId64 "] past "
						      "rot_dim changed", label, r, h, j);
		double e = compare(&w, label, ref, cols, got, ld, n, cols);
		ck_assert_msg(e <= TOL_ROPE, "%s: error %.3g > %.3g (%s)", label, e, TOL_ROPE, w.where);
		dfree(&dx);
		free(xh), free(got), free(ref), free(inv), free(pos);
	}
	report("rope", &w, TOL_ROPE);
}
END_TEST

/* ---- grouped-query attention --------------------------------------------------------------- */

static const struct gqa_pf_case {
	int64_t batch, seq, heads, kvh, hd;
	int ldpad, pads;
} gqa_pf_cases[] = {
	{ 1, 1, 4, 1, 64, 0, 0 },   { 2, 70, 8, 2, 64, 0, 1 },  { 2, 130, 6, 3, 128, 8, 2 },
	{ 4, 65, 4, 1, 80, 0, 2 },  { 1, 200, 8, 8, 96, 0, 1 }, { 2, 33, 4, 2, 20, 3, 1 },
	{ 2, 64, 12, 4, 32, 0, 0 }, { 1, 150, 32, 8, 128, 0, 1 },
};

static void run_gqa_prefill(const struct gqa_pf_case *c, struct worst *w)
{
	int64_t rows = c->batch * c->seq, hc = c->heads * c->hd, kc = c->kvh * c->hd;
	int64_t ldq = hc + c->ldpad, ldk = kc + c->ldpad;
	size_t nq = (size_t)(rows * ldq), nk = (size_t)(rows * ldk);
	uint16_t *qh = rand_h(nq, -2, 2), *kh = rand_h(nk, -2, 2), *vh = rand_h(nk, -1, 1);
	uint16_t *oh = xmalloc(nq * 2);
	float *qf = to_f32(qh, nq), *kf = to_f32(kh, nk), *vf = to_f32(vh, nk), *ref;
	int32_t *pad = xmalloc((size_t)c->batch * 4);
	struct dbuf dq, dk, dv, dout;
	struct fg_attention_args ga;
	char label[200];

	make_pads(pad, c->batch, c->seq, c->pads);
	for (size_t i = 0; i < nq; i++)
		oh[i] = SENTINEL;
	ref = ref_attention(0, qf, ldq, kf, vf, ldk, c->batch, c->seq, 0, 0, c->heads, c->kvh,
			    c->hd, 1.0 / sqrt((double)c->hd), pad);
	memset(&ga, 0, sizeof(ga));
	ga.q = tens(dput(&dq, qh, nq * 2), FG_DTYPE_F16, rows, hc, ldq);
	ga.k = tens(dput(&dk, kh, nk * 2), FG_DTYPE_F16, rows, kc, ldk);
	ga.v = tens(dput(&dv, vh, nk * 2), FG_DTYPE_F16, rows, kc, ldk);
	ga.out = tens(dput(&dout, oh, nq * 2), FG_DTYPE_F16, rows, hc, ldq);
	ga.batch = c->batch;
	ga.seq = c->seq;
	ga.heads = c->heads;
	ga.kv_heads = c->kvh;
	ga.head_dim = c->hd;
	ga.scale = 1.0f / sqrtf((float)c->hd);
	ga.pad = pad;
	ga.window = ref_window;
	ga.softcap = (float)ref_softcap;
	ck_assert_msg(gpu.ops->attention_prefill(gpu.ctx, NULL, &ga) == 0, "%s",
		      fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "gqa prefill b=%" PRId64 " seq=%" PRId64 " heads=%"
		 PRId64 "/%" PRId64 " hd=%" PRId64 "%s window %" PRId64 " softcap %g",
		 c->batch, c->seq, c->heads, c->kvh, c->hd, c->ldpad ? " ld>cols" : "",
		 ref_window, ref_softcap);
	check_padding(label, oh, rows, hc, ldq);
	for (int64_t b = 0; b < c->batch; b++)
		for (int64_t i = 0; i < pad[b] && i < c->seq; i++)
			for (int64_t j = 0; j < hc; j++)
				ck_assert_msg(oh[(b * c->seq + i) * ldq + j] == 0, "%s: padded row "
					      "%" PRId64 " of sequence %" PRId64 " is not zero",
					      label, i, b);
	double e = compare(w, label, ref, hc, oh, ldq, rows, hc);
	ck_assert_msg(e <= TOL_ATTN, "%s: error %.3g (%s)", label, e, w->where);
	dfree(&dq), dfree(&dk), dfree(&dv), dfree(&dout);
	free(qh), free(kh), free(vh), free(oh), free(qf), free(kf), free(vf), free(ref);
	free(pad);
}

START_TEST(test_gqa_prefill)
{
	struct worst w = { 0, "" };

	gpu_seed(717);
	for (size_t ci = 0; ci < sizeof(gqa_pf_cases) / sizeof(gqa_pf_cases[0]); ci++)
		run_gqa_prefill(&gqa_pf_cases[ci], &w);
	report("gqa prefill", &w, TOL_ATTN);
}
END_TEST

/* Compute ABI 1.8: prefill over the cache (start > 0): seq queries a row at
 * positions start .. start + seq - 1 attend to the row's cache rows (stride
 * apart) from its pad up to their own position; checked per query against
 * the double-precision decode reference over len = start + i + 1. */
static const struct cached_pf_case {
	int64_t batch, start, seq, heads, kvh, hd, stride;
} cached_pf_cases[] = {
	{ 1, 1, 1, 1, 1, 64, 2 },      { 2, 5, 17, 3, 3, 64, 30 },   { 3, 600, 130, 4, 2, 128, 740 },
	{ 2, 63, 65, 8, 2, 80, 130 },  { 4, 100, 7, 2, 1, 32, 200 }, { 1, 31, 200, 4, 4, 96, 231 },
};

static void run_cached_prefill(const struct cached_pf_case *c, struct worst *w)
{
	int64_t rows = c->batch * c->seq, hc = c->heads * c->hd, kc = c->kvh * c->hd;
	int64_t crows = c->batch * c->stride, keys = c->start + c->seq;
	size_t nq = (size_t)(rows * hc), nk = (size_t)(crows * kc);
	uint16_t *qh = rand_h(nq, -2, 2), *kh = rand_h(nk, -2, 2), *vh = rand_h(nk, -1, 1);
	uint16_t *oh = xmalloc(nq * 2);
	float *qf = to_f32(qh, nq), *kf = to_f32(kh, nk), *vf = to_f32(vh, nk);
	float *ref = xmalloc(nq * sizeof(float));
	int32_t *pad = xmalloc((size_t)c->batch * 4);
	struct dbuf dq, dk, dv, dout;
	struct fg_attention_args ga;
	char label[200];

	/* pads anywhere in [0, keys]: inside the cache, inside the queries, all */
	for (int64_t b = 0; b < c->batch; b++)
		pad[b] = (int32_t)(b == 0 ? 0 : b == 1 ? keys
						      : (int64_t)(gpu_next() % (uint64_t)(keys + 1)));
	/* cache rows outside [pad, keys) hold anything: NaN here */
	for (int64_t b = 0; b < c->batch; b++)
		for (int64_t t = 0; t < c->stride; t++)
			for (int64_t j = 0; (t < pad[b] || t >= keys) && j < kc; j++)
				kh[(b * c->stride + t) * kc + j] = vh[(b * c->stride + t) * kc + j] =
					0x7e00;
	for (int64_t i = 0; i < c->seq; i++) {
		float *r = ref_attention(1, qf + i * hc, hc * c->seq, kf, vf, kc, c->batch, 1,
					 c->start + i + 1, c->stride, c->heads, c->kvh, c->hd,
					 1.0 / sqrt((double)c->hd), pad);
		for (int64_t b = 0; b < c->batch; b++)
			memcpy(ref + (b * c->seq + i) * hc, r + b * hc, (size_t)hc * sizeof(float));
		free(r);
	}
	memset(&ga, 0, sizeof(ga));
	ga.q = tens(dput(&dq, qh, nq * 2), FG_DTYPE_F16, rows, hc, hc);
	ga.k = tens(dput(&dk, kh, nk * 2), FG_DTYPE_F16, crows, kc, kc);
	ga.v = tens(dput(&dv, vh, nk * 2), FG_DTYPE_F16, crows, kc, kc);
	ga.out = tens(dput(&dout, oh, nq * 2), FG_DTYPE_F16, rows, hc, hc);
	ga.batch = c->batch;
	ga.seq = c->seq;
	ga.start = c->start;
	ga.cache_stride = c->stride;
	ga.heads = c->heads;
	ga.kv_heads = c->kvh;
	ga.head_dim = c->hd;
	ga.scale = 1.0f / sqrtf((float)c->hd);
	ga.pad = pad;
	ga.window = ref_window;
	ga.softcap = (float)ref_softcap;
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_CACHED, FG_DTYPE_F16));
	ck_assert_msg(gpu.ops->attention_prefill(gpu.ctx, NULL, &ga) == 0, "%s",
		      fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "cached prefill b=%" PRId64 " start=%" PRId64 " seq=%"
		 PRId64 " heads=%" PRId64 "/%" PRId64 " hd=%" PRId64 " window %" PRId64
		 " softcap %g", c->batch, c->start, c->seq, c->heads, c->kvh, c->hd,
		 ref_window, ref_softcap);
	for (int64_t b = 0; b < c->batch; b++) /* queries before the pad: exact zeros */
		for (int64_t i = 0; c->start + i < pad[b] && i < c->seq; i++)
			for (int64_t j = 0; j < hc; j++)
				ck_assert_msg(oh[(b * c->seq + i) * hc + j] == 0, "%s: query %" PRId64
					      " of sequence %" PRId64 " before its pad is not zero",
					      label, i, b);
	double e = compare(w, label, ref, hc, oh, hc, rows, hc);
	ck_assert_msg(e <= TOL_ATTN, "%s: error %.3g (%s)", label, e, w->where);
	dfree(&dq), dfree(&dk), dfree(&dv), dfree(&dout);
	free(qh), free(kh), free(vh), free(oh), free(qf), free(kf), free(vf), free(ref);
	free(pad);
}

START_TEST(test_cached_prefill)
{
	struct worst w = { 0, "" };

	gpu_seed(727);
	for (size_t ci = 0; ci < sizeof(cached_pf_cases) / sizeof(cached_pf_cases[0]); ci++)
		run_cached_prefill(&cached_pf_cases[ci], &w);
	report("cached prefill", &w, TOL_ATTN);
}
END_TEST

/* wrap > 0 (ABI 1.9): the cache a ring of `stride` rows, the call's
 * positions run `wrap` further (len + wrap of them, each pad + wrap,
 * position j at row j % stride); the reference reads the rows in position
 * order. */
static const struct gqa_dc_case {
	int64_t batch, heads, kvh, hd, len, stride;
	int pads, ldpad;
	int64_t wrap;
} gqa_dc_cases[] = {
	{ 1, 8, 2, 128, 1000, 1024, 0, 0, 0 }, { 4, 8, 1, 64, 100, 130, 2, 0, 0 },
	{ 3, 6, 3, 80, 77, 80, 1, 8, 0 },      { 2, 4, 2, 20, 33, 40, 1, 3, 0 },
	{ 16, 32, 8, 128, 300, 320, 1, 0, 0 }, { 2, 4, 4, 256, 40, 40, 1, 0, 0 },
	{ 1, 4, 2, 64, 9000, 9000, 0, 0, 0 },  { 5, 12, 4, 64, 1, 3, 0, 0, 0 },
	{ 2, 32, 8, 128, 2048, 2048, 1, 0, 0 }, /* Llama-like: 4 heads per block, split */
};

static void run_gqa_decode(const struct gqa_dc_case *c, int cache, struct worst *w)
{
	int64_t hc = c->heads * c->hd, kc = c->kvh * c->hd, ldq = hc + c->ldpad;
	int64_t ldk = kc + c->ldpad, krows = c->batch * c->stride;
	size_t nq = (size_t)(c->batch * ldq), nk = (size_t)(krows * ldk);
	uint16_t *qh = rand_h(nq, -2, 2), *kh = rand_h(nk, -2, 2), *vh = rand_h(nk, -1, 1);
	uint16_t *oh = xmalloc(nq * 2);
	float *qf = to_f32(qh, nq), *kf, *vf, *ref;
	uint8_t *kq = NULL, *vq = NULL;
	int32_t *pad = xmalloc((size_t)c->batch * 4);
	struct dbuf dq, dk, dv, dout;
	struct fg_attention_args ga;
	char label[160];
	int64_t kld = ldk;

	make_pads(pad, c->batch, c->len, c->pads);
	for (size_t i = 0; i < nq; i++)
		oh[i] = SENTINEL;
	memset(&ga, 0, sizeof(ga));
	if (cache != CACHE_F16) {
		enum fg_dtype dt = cache == CACHE_Q4 ? FG_DTYPE_Q4_COLS : FG_DTYPE_F8_COLS;
		uint64_t bytes;

		kq = enc_cache(cache, kh, ldk, krows, kc, &kf, &bytes);
		vq = enc_cache(cache, vh, ldk, krows, kc, &vf, &bytes);
		kld = kc;
		ga.k = tens(dput(&dk, kq, (size_t)bytes), dt, krows, kc, kc);
		ga.v = tens(dput(&dv, vq, (size_t)bytes), dt, krows, kc, kc);
	} else {
		kf = to_f32(kh, nk);
		vf = to_f32(vh, nk);
		ga.k = tens(dput(&dk, kh, nk * 2), FG_DTYPE_F16, krows, kc, ldk);
		ga.v = tens(dput(&dv, vh, nk * 2), FG_DTYPE_F16, krows, kc, ldk);
	}
	/* a ring: the reference's rows in position order, the call's pads on */
	float *ko = kf, *vo = vf;
	int32_t *gpad = pad;
	if (c->wrap) {
		ko = xmalloc((size_t)(krows * kld) * 4);
		vo = xmalloc((size_t)(krows * kld) * 4);
		gpad = xmalloc((size_t)c->batch * 4);
		for (int64_t b = 0; b < c->batch; b++) {
			/* ABI 1.12: in a window no longer than the ring, a pad the
			 * window hides may stay behind (len - pad past the ring) */
			int hidden = ref_window && ref_window <= c->stride &&
				     pad[b] <= c->len - ref_window;

			gpad[b] = (int32_t)(hidden ? 0 : pad[b] + c->wrap);
			for (int64_t p = 0; p < c->stride; p++) {
				int64_t from = (b * c->stride + (p + c->wrap) % c->stride) * kld;
				memcpy(ko + (b * c->stride + p) * kld, kf + from, (size_t)kld * 4);
				memcpy(vo + (b * c->stride + p) * kld, vf + from, (size_t)kld * 4);
			}
		}
	}
	ref = ref_attention(1, qf, ldq, ko, vo, kld, c->batch, 1, c->len, c->stride, c->heads,
			    c->kvh, c->hd, 1.0 / sqrt((double)c->hd), pad);
	ga.q = tens(dput(&dq, qh, nq * 2), FG_DTYPE_F16, c->batch, hc, ldq);
	ga.out = tens(dput(&dout, oh, nq * 2), FG_DTYPE_F16, c->batch, hc, ldq);
	ga.batch = c->batch;
	ga.seq = 1;
	ga.len = c->len + c->wrap;
	ga.cache_stride = c->stride;
	ga.ring = c->wrap ? c->stride : 0;
	ga.heads = c->heads;
	ga.kv_heads = c->kvh;
	ga.head_dim = c->hd;
	ga.scale = 1.0f / sqrtf((float)c->hd);
	ga.pad = gpad;
	ga.window = ref_window;
	ga.softcap = (float)ref_softcap;
	ck_assert_msg(gpu.ops->attention_decode(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
	dget(&dout, oh);
	snprintf(label, sizeof(label), "%s decode %s b=%" PRId64 " heads=%" PRId64 "/%" PRId64
		 " hd=%" PRId64 " len=%" PRId64 " stride=%" PRId64 " wrap=%" PRId64 " window %"
		 PRId64 " softcap %g", c->wrap ? "ring" : "gqa", cache_names[cache], c->batch,
		 c->heads, c->kvh, c->hd, c->len, c->stride, c->wrap, ref_window, ref_softcap);
	check_padding(label, oh, c->batch, hc, ldq);
	for (int64_t b = 0; b < c->batch; b++)
		if (pad[b] >= c->len)
			for (int64_t j = 0; j < hc; j++)
				ck_assert_msg(oh[b * ldq + j] == 0, "%s: fully padded row %" PRId64
					      " is not zero", label, b);
	double e = compare(w, label, ref, hc, oh, ldq, c->batch, hc);
	ck_assert_msg(e <= TOL_ATTN, "%s: error %.3g (%s)", label, e, w->where);
	dfree(&dq), dfree(&dk), dfree(&dv), dfree(&dout);
	if (c->wrap)
		free(ko), free(vo), free(gpad);
	free(qh), free(kh), free(vh), free(oh), free(qf), free(kf), free(vf), free(ref), free(pad);
	free(kq), free(vq);
}

START_TEST(test_gqa_decode)
{
	struct worst w = { 0, "" }, wq = { 0, "" }, w8 = { 0, "" };

	gpu_seed(818);
	for (size_t ci = 0; ci < sizeof(gqa_dc_cases) / sizeof(gqa_dc_cases[0]); ci++) {
		run_gqa_decode(&gqa_dc_cases[ci], CACHE_F16, &w);
		run_gqa_decode(&gqa_dc_cases[ci], CACHE_Q4, &wq);
		run_gqa_decode(&gqa_dc_cases[ci], CACHE_F8, &w8);
	}
	report("gqa decode f16", &w, TOL_ATTN);
	report("gqa decode q4", &wq, TOL_ATTN);
	report("gqa decode f8", &w8, TOL_ATTN);
}
END_TEST

/* ABI 1.9: decode over a ring, fp16 and 4-bit caches.  The call's positions
 * run `wrap` past the reference's (run_gqa_decode): positions across the
 * ring's end, in one block and across split chunks, on the vector and the
 * scalar (ld % 8 != 0) paths. */
static const struct gqa_dc_case ring_cases[] = {
	{ 1, 8, 2, 128, 1000, 1024, 0, 0, 1500 }, /* split: chunks across the ring's end */
	{ 1, 8, 2, 128, 1024, 1024, 1, 0, 3 * 1024 + 7 },
	{ 4, 8, 1, 64, 100, 130, 2, 0, 3 * 130 - 1 },
	{ 64, 12, 12, 64, 300, 320, 1, 0, 320 + 50 }, /* one block a sequence */
	{ 2, 4, 2, 20, 33, 40, 1, 3, 41 },            /* the scalar path */
	{ 2, 32, 8, 128, 2048, 2048, 1, 0, 5000 },
	{ 3, 4, 4, 64, 9, 9, 2, 0, 9 * 1000 + 4 },
};

START_TEST(test_ring_decode)
{
	struct worst w = { 0, "" }, wq = { 0, "" }, w8 = { 0, "" };

	gpu_seed(828);
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_RING, FG_DTYPE_F16));
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_RING, FG_DTYPE_Q4_COLS));
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_RING, FG_DTYPE_F8_COLS));
	for (size_t ci = 0; ci < sizeof(ring_cases) / sizeof(ring_cases[0]); ci++) {
		run_gqa_decode(&ring_cases[ci], CACHE_F16, &w);
		run_gqa_decode(&ring_cases[ci], CACHE_Q4, &wq);
		run_gqa_decode(&ring_cases[ci], CACHE_F8, &w8);
	}
	report("ring decode f16", &w, TOL_ATTN);
	report("ring decode q4", &wq, TOL_ATTN);
	report("ring decode f8", &w8, TOL_ATTN);
}
END_TEST

/* ---- the generic tier (ABI 1.10) and the softcap op (1.12) ------------------------------ */

/* A [rows, cols] tensor with ld = cols + 3 of random values: fp16 bits, or
 * fp32 rounded through fp16 (so both kinds hold the same numbers). */
static void *rand_rows(int f32, int64_t rows, int64_t cols, float lo, float hi)
{
	int64_t n = rows * (cols + 3);
	uint16_t *h = rand_h((size_t)n, lo, hi);
	float *f;

	if (!f32)
		return h;
	f = to_f32(h, (size_t)n);
	free(h);
	return f;
}

/* add: the residual stream (fp32) plus an fp16 block output (compute ABI
 * 1.12's mixed operands, also through the core's check), fp16 alone, no y
 * (a scale), out = x and out = y. */
START_TEST(test_generic_add)
{
	static const struct { int64_t rows, cols; int x32, y; int alias; float al, be; } cases[] = {
		{ 1, 1, 0, 1, 0, 1, 1 },      { 7, 300, 1, 1, 1, 1, 1 },   { 64, 3584, 1, 1, 1, 1, 1 },
		{ 33, 77, 0, 1, 2, 0.5f, -2 }, { 5, 4096, 1, 0, 1, 59.875f, 0 }, { 300, 64, 0, 0, 0, -1, 0 },
		{ 9, 130, 1, 2, 0, 1, 0.25f }, /* y: 0 none, 1 fp16, 2 x's type; alias: 1 out = x, 2 out = y */
	};
	struct worst w = { 0, "" };

	gpu_seed(901);
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ADD, FG_DTYPE_F16));
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ADD, FG_DTYPE_F32));
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t r = cases[ci].rows, c = cases[ci].cols, ld = c + 3;
		int x32 = cases[ci].x32, y32 = cases[ci].y == 2 && x32, alias = cases[ci].alias;
		size_t xs = x32 ? 4 : 2, ys = y32 ? 4 : 2, n = (size_t)(r * ld);
		void *xh = rand_rows(x32, r, c, -3, 3), *yh = rand_rows(y32, r, c, -3, 3);
		void *got = xmalloc(n * xs);
		float *ref = xmalloc((size_t)(r * c) * sizeof(float));
		struct dbuf dx, dy = { 0 }, dout = { 0 };
		struct fg_add_args a;
		char label[128];

		if (alias == 2 && xs != ys)
			alias = 0; /* out = y only where they are one type */
		for (int64_t i = 0; i < r; i++)
			for (int64_t j = 0; j < c; j++)
				ref[i * c + j] = (float)(cases[ci].al * got_at(xh, x32, i * ld + j) +
							 (cases[ci].y ? cases[ci].be * got_at(yh, y32, i * ld + j)
								      : 0.0));
		memset(&a, 0, sizeof(a));
		a.x = tens(dput(&dx, xh, n * xs), x32 ? FG_DTYPE_F32 : FG_DTYPE_F16, r, c, ld);
		if (cases[ci].y)
			a.y = tens(dput(&dy, yh, n * ys), y32 ? FG_DTYPE_F32 : FG_DTYPE_F16, r, c, ld);
		a.out = alias == 1 ? a.x : alias == 2 ? a.y
			: tens(dput(&dout, NULL, n * xs), a.x.dtype, r, c, ld);
		a.alpha = cases[ci].al;
		a.beta = cases[ci].be;
		/* the core's check lets the mixed pair through (the residual stream is fp32) */
		ck_assert_msg(fg_backend_add(&gpu, NULL, 0, "test", &a) == 0, "%s", fg_last_error());
		dget(alias == 1 ? &dx : alias == 2 ? &dy : &dout, got);
		snprintf(label, sizeof(label), "add %" PRId64 "x%" PRId64 " x %s y %s out=%s", r, c,
			 x32 ? "f32" : "f16", !cases[ci].y ? "none" : y32 ? "f32" : "f16",
			 alias == 1 ? "x" : alias == 2 ? "y" : "own");
		double e = compare_as(&w, label, ref, c, got, x32, ld, r, c);
		double tol = x32 ? 1e-6 : 1e-3;
		ck_assert_msg(e <= tol, "%s: error %.3g > %.3g (%s)", label, e, tol, w.where);
		dfree(&dx), dfree(&dy), dfree(&dout);
		free(xh), free(yh), free(got), free(ref);
	}
	report("add", &w, 1e-3);
}
END_TEST

/* softcap (ABI 1.12): cap tanh(x / cap) on logits, fp16 and fp32, in place. */
START_TEST(test_softcap_op)
{
	static const struct { int64_t rows, cols; int f32, alias; float cap; } cases[] = {
		{ 1, 256000, 0, 1, 30 }, { 7, 1000, 0, 0, 3 }, { 64, 513, 1, 1, 50 }, { 3, 5, 1, 0, 0.5f },
	};
	struct worst w = { 0, "" };

	gpu_seed(902);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t r = cases[ci].rows, c = cases[ci].cols, ld = c + 3;
		int f32 = cases[ci].f32;
		size_t es = f32 ? 4 : 2, n = (size_t)(r * ld);
		void *xh = rand_rows(f32, r, c, -100, 100), *got = xmalloc(n * es);
		float *ref = xmalloc((size_t)(r * c) * sizeof(float));
		double cap = cases[ci].cap;
		struct dbuf dx, dout = { 0 };
		struct fg_softcap_args a;
		char label[96];

		ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_SOFTCAP, f32 ? FG_DTYPE_F32 : FG_DTYPE_F16));
		for (int64_t i = 0; i < r; i++)
			for (int64_t j = 0; j < c; j++)
				ref[i * c + j] = (float)(cap * tanh(got_at(xh, f32, i * ld + j) / cap));
		a.x = tens(dput(&dx, xh, n * es), f32 ? FG_DTYPE_F32 : FG_DTYPE_F16, r, c, ld);
		a.out = cases[ci].alias ? a.x : tens(dput(&dout, NULL, n * es), a.x.dtype, r, c, ld);
		a.cap = cases[ci].cap;
		ck_assert_msg(gpu.ops->softcap(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		dget(cases[ci].alias ? &dx : &dout, got);
		snprintf(label, sizeof(label), "softcap %" PRId64 "x%" PRId64 " %s cap %g", r, c,
			 f32 ? "f32" : "f16", cap);
		double e = compare_as(&w, label, ref, c, got, f32, ld, r, c);
		double tol = f32 ? 1e-6 : 1e-3;
		ck_assert_msg(e <= tol, "%s: error %.3g > %.3g (%s)", label, e, tol, w.where);
		dfree(&dx), dfree(&dout);
		free(xh), free(got), free(ref);
	}
	report("softcap", &w, 1e-3);
}
END_TEST

/* route against the reference backend (cpu_blas) on the same fp16 logits:
 * ids exactly, weights within 1e-6; ties (logits on a grid of 1/4), a NaN
 * row, a row of -inf, +inf logits. */
START_TEST(test_route)
{
	static const struct { int64_t rows, experts; int k, renorm; } cases[] = {
		{ 1, 8, 2, 1 },  { 37, 8, 2, 1 },  { 1000, 8, 2, 0 }, { 100, 60, 4, 0 },
		{ 300, 128, 8, 1 }, { 5, 128, 64, 0 }, { 64, 8, 8, 1 }, { 7, 3, 1, 0 },
	};

	gpu_seed(903);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t r = cases[ci].rows, e = cases[ci].experts, ld = e + 3;
		int k = cases[ci].k;
		size_t n = (size_t)(r * ld), nk = (size_t)(r * k);
		uint16_t *lh = rand_h(n, -4, 4);
		int32_t *gid = xmalloc(nk * 4), *cid = xmalloc(nk * 4);
		float *gwt = xmalloc(nk * 4), *cwt = xmalloc(nk * 4);
		struct dbuf dl;
		struct fg_route_args a;

		for (int64_t i = 0; i < r; i++)
			for (int64_t j = 0; j < e; j++)
				if (i % 3 == 1) /* ties */
					lh[i * ld + j] = fg_float_to_half(
						(float)(int)(4 * fg_half_to_float(lh[i * ld + j])) / 4);
		if (r > 4) {
			lh[2 * ld + 1] = 0x7e00u; /* NaN: no choice */
			for (int64_t j = 0; j < e; j++)
				lh[3 * ld + j] = 0xfc00u; /* all -inf: no choice */
			lh[4 * ld + 0] = lh[4 * ld + e - 1] = 0x7c00u; /* two +inf share */
		}
		memset(&a, 0, sizeof(a));
		a.logits = tens(lh, FG_DTYPE_F16, r, e, ld);
		a.k = k;
		a.renormalize = cases[ci].renorm;
		a.ids = cid;
		a.weights = cwt;
		ck_assert_msg(cpu.ops->route(cpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		a.logits.data = dput(&dl, lh, n * 2);
		a.ids = gid;
		a.weights = gwt;
		ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ROUTE, FG_DTYPE_F16));
		ck_assert_msg(gpu.ops->route(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		for (size_t i = 0; i < nk; i++) {
			ck_assert_msg(gid[i] == cid[i], "route rows %" PRId64 " experts %" PRId64 " k %d: "
				      "row %zu choice %zu: id %d, cpu_blas %d", r, e, k, i / (size_t)k,
				      i % (size_t)k, (int)gid[i], (int)cid[i]);
			ck_assert_msg(fabsf(gwt[i] - cwt[i]) <= 1e-6f, "route: row %zu choice %zu: "
				      "weight %.9g, cpu_blas %.9g", i / (size_t)k, i % (size_t)k,
				      (double)gwt[i], (double)cwt[i]);
		}
		dfree(&dl);
		free(lh), free(gid), free(cid), free(gwt), free(cwt);
	}
	printf("route                   ids equal to cpu_blas's, weights within 1e-6, %zu cases\n",
	       sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* gather (exact copies) and scatter_add: repeated indices, weights or
 * none, fp16 rows into the fp32 residual stream (ABI 1.12) or into fp16;
 * rows no index names stay as they were, bit for bit. */
START_TEST(test_gather_scatter)
{
	static const struct { int64_t rows, cols, n; int f32, weights; } cases[] = {
		{ 1, 1, 1, 0, 0 },     { 16, 4096, 32, 1, 1 }, { 100, 130, 300, 0, 1 },
		{ 512, 64, 1024, 1, 0 }, { 7, 3584, 14, 0, 1 },  { 3, 8, 0, 1, 1 },
	};

	gpu_seed(904);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t r = cases[ci].rows, c = cases[ci].cols, n = cases[ci].n, ld = c + 3;
		int o32 = cases[ci].f32;
		size_t os = o32 ? 4 : 2;
		uint16_t *xh = rand_rows(0, r, c, -2, 2), *gh = xmalloc((size_t)((n ? n : 1) * ld) * 2);
		void *oh = rand_rows(o32, r, c, -2, 2), *got = xmalloc((size_t)(r * ld) * os);
		int32_t *idx = xmalloc((size_t)(n ? n : 1) * 4);
		float *wt = xmalloc((size_t)(n ? n : 1) * 4), *ref = xmalloc((size_t)(r * c) * 4);
		struct dbuf dx, dg, dout;
		struct fg_gather_args ga;
		struct fg_scatter_add_args sa;
		char label[128];

		for (int64_t i = 0; i < n; i++) {
			idx[i] = (int32_t)(i % 5 == 4 ? idx[i / 2] : (int64_t)(gpu_next() % (uint64_t)r));
			wt[i] = gpu_uniform(-1, 1);
		}
		/* gather: out[i] = x[idx[i]] */
		memset(&ga, 0, sizeof(ga));
		ga.x = tens(dput(&dx, xh, (size_t)(r * ld) * 2), FG_DTYPE_F16, r, c, ld);
		ga.index = idx;
		ga.n = n;
		ga.out = tens(dput(&dg, NULL, (size_t)((n ? n : 1) * ld) * 2), FG_DTYPE_F16, n, c, ld);
		ck_assert_msg(gpu.ops->gather(gpu.ctx, NULL, &ga) == 0, "%s", fg_last_error());
		dget(&dg, gh);
		for (int64_t i = 0; i < n; i++)
			ck_assert_msg(memcmp(gh + i * ld, xh + (int64_t)idx[i] * ld, (size_t)c * 2) == 0,
				      "gather %" PRId64 "x%" PRId64 ": row %" PRId64 " is not x's row %d",
				      r, c, i, (int)idx[i]);
		/* scatter_add the gathered rows back: out[idx[i]] += wt[i] * g[i] */
		for (int64_t i = 0; i < r; i++)
			for (int64_t j = 0; j < c; j++)
				ref[i * c + j] = (float)got_at(oh, o32, i * ld + j);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < c; j++)
				ref[idx[i] * c + j] += (float)((cases[ci].weights ? wt[i] : 1.0) *
							       fg_half_to_float(gh[i * ld + j]));
		memset(&sa, 0, sizeof(sa));
		sa.y = ga.out;
		sa.index = idx;
		sa.weight = cases[ci].weights ? wt : NULL;
		sa.n = n;
		sa.out = tens(dput(&dout, oh, (size_t)(r * ld) * os), o32 ? FG_DTYPE_F32 : FG_DTYPE_F16,
			      r, c, ld);
		ck_assert_msg(fg_backend_scatter_add(&gpu, NULL, 0, "test", &sa) == 0, "%s",
			      fg_last_error());
		dget(&dout, got);
		snprintf(label, sizeof(label), "scatter_add %" PRId64 " rows into %" PRId64 "x%" PRId64
			 " %s%s", n, r, c, o32 ? "f32" : "f16", cases[ci].weights ? " weighted" : "");
		for (int64_t i = 0; i < r; i++) { /* rows no index names: untouched */
			int named = 0;

			for (int64_t t = 0; t < n && !named; t++)
				named = idx[t] == i;
			ck_assert_msg(named || memcmp((char *)got + i * ld * os, (char *)oh + i * ld * os,
						      (size_t)c * os) == 0,
				      "%s: row %" PRId64 " no index names changed", label, i);
		}
		struct worst w = { 0, "" };
		double e = compare_as(&w, label, ref, c, got, o32, ld, r, c), tol = o32 ? 1e-5 : 2e-3;
		ck_assert_msg(e <= tol, "%s: error %.3g > %.3g (%s)", label, e, tol, w.where);
		dfree(&dx), dfree(&dg), dfree(&dout);
		free(xh), free(gh), free(oh), free(got), free(idx), free(wt), free(ref);
	}
	printf("gather, scatter_add     gather exact, scatter_add within its rounding, %zu cases\n",
	       sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* The grouped linear: each group's rows equal, bit for bit, the backend's
 * linear on that group alone (it is that linear): fp16 and 4-bit experts,
 * empty groups, SiLU and GELU with a mul. */
START_TEST(test_linear_grouped)
{
	static const struct { int64_t n, k; int groups, q4, act, mul; } cases[] = {
		{ 352, 256, 8, 0, FG_ACT_SILU, 1 }, { 256, 352, 8, 0, FG_ACT_NONE, 0 },
		{ 512, 1024, 4, 1, FG_ACT_SILU, 1 }, { 130, 64, 3, 0, FG_ACT_GELU_TANH, 1 },
		{ 1024, 512, 8, 1, FG_ACT_NONE, 0 },
	};

	gpu_seed(905);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t n = cases[ci].n, k = cases[ci].k, off[9] = { 0 };
		int ng = cases[ci].groups, q4 = cases[ci].q4;
		struct fg_tensor wt[8];
		struct dbuf dw[8], dx, dm = { 0 }, dout, done;
		uint8_t *enc[8] = { NULL };
		for (int g = 0; g < ng; g++) /* group sizes 0 .. 70, every other case one empty */
			off[g + 1] = off[g] + (g == 1 && ci % 2 ? 0 : (int64_t)(gpu_next() % 71));
		int64_t m = off[ng];
		uint16_t *xh = rand_h((size_t)((m ? m : 1) * k), -1, 1);
		uint16_t *mh = rand_h((size_t)((m ? m : 1) * n), -2, 2);
		uint16_t *got = xmalloc((size_t)((m ? m : 1) * n) * 2), *one = xmalloc((size_t)((m ? m : 1) * n) * 2);
		float *wf = xmalloc((size_t)(n * k) * 4);
		uint16_t *wh = xmalloc((size_t)(n * k) * 2);
		struct fg_linear_grouped_args a;

		for (int g = 0; g < ng; g++) {
			enc[g] = lin_weights(n, k, q4, wf, wh);
			wt[g] = q4 ? tens(dput(&dw[g], enc[g], (size_t)fg_q4_bytes((uint64_t)n, (uint64_t)k, 0)),
					  FG_DTYPE_Q4_ROWS, n, k, k)
				   : tens(dput(&dw[g], wh, (size_t)(n * k) * 2), FG_DTYPE_F16, n, k, k);
		}
		memset(&a, 0, sizeof(a));
		a.x = tens(dput(&dx, xh, (size_t)((m ? m : 1) * k) * 2), FG_DTYPE_F16, m, k, k);
		a.w = wt;
		a.offset = off;
		a.groups = ng;
		a.act = (enum fg_activation)cases[ci].act;
		if (cases[ci].mul)
			a.mul = tens(dput(&dm, mh, (size_t)((m ? m : 1) * n) * 2), FG_DTYPE_F16, m, n, n);
		a.out = tens(dput(&dout, NULL, (size_t)((m ? m : 1) * n) * 2), FG_DTYPE_F16, m, n, n);
		ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_LINEAR_GROUPED,
					    q4 ? FG_DTYPE_Q4_ROWS : FG_DTYPE_F16));
		ck_assert_msg(gpu.ops->linear_grouped(gpu.ctx, NULL, &a) == 0, "%s", fg_last_error());
		dget(&dout, got);
		(void)dput(&done, NULL, (size_t)((m ? m : 1) * n) * 2);
		for (int g = 0; g < ng; g++) {
			int64_t r0 = off[g], nr = off[g + 1] - off[g];
			struct fg_linear_args l;

			if (!nr)
				continue;
			memset(&l, 0, sizeof(l));
			l.x = tens((char *)a.x.data + r0 * k * 2, FG_DTYPE_F16, nr, k, k);
			l.w = wt[g];
			l.act = a.act;
			l.out = tens((char *)done.r.addr + r0 * n * 2, FG_DTYPE_F16, nr, n, n);
			if (cases[ci].mul)
				l.mul = tens((char *)a.mul.data + r0 * n * 2, FG_DTYPE_F16, nr, n, n);
			ck_assert_msg(gpu.ops->linear(gpu.ctx, NULL, &l) == 0, "%s", fg_last_error());
		}
		dget(&done, one);
		ck_assert_msg(memcmp(got, one, (size_t)(m * n) * 2) == 0, "grouped linear n=%" PRId64
			      " k=%" PRId64 " groups=%d%s: differs from a linear per group", n, k, ng,
			      q4 ? " q4" : "");
		for (int g = 0; g < ng; g++)
			dfree(&dw[g]), free(enc[g]);
		dfree(&dx), dfree(&dm), dfree(&dout), dfree(&done);
		free(xh), free(mh), free(got), free(one), free(wf), free(wh);
	}
	printf("grouped linear          bit for bit a linear per group, %zu cases\n",
	       sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* The backend's own composition of a mixture's experts (what the core
 * runs without the experts op): route, the pairs grouped on the host by
 * expert (rows ascending), gather, the three grouped linears, scatter_add. */
static void experts_composed(const struct fg_experts_args *a)
{
	int64_t rows = a->x.rows, k = a->k, ne = a->experts, m = rows * k, n = 0;
	int32_t *ids = xmalloc((size_t)m * 4), *row = xmalloc((size_t)m * 4);
	float *wt = xmalloc((size_t)m * 4), *rw = xmalloc((size_t)m * 4);
	int64_t *off = calloc((size_t)ne + 1, sizeof(*off)), *at = xmalloc((size_t)ne * 8);
	struct fg_route_args ra = { .logits = a->logits, .k = a->k, .renormalize = a->renormalize,
				    .ids = ids, .weights = wt };

	ck_assert(off);
	ck_assert_msg(fg_backend_route(&gpu, NULL, 0, "test", &ra) == 0, "%s", fg_last_error());
	for (int64_t i = 0; i < m; i++)
		if (ids[i] >= 0)
			off[ids[i] + 1]++;
	for (int64_t e = 0; e < ne; e++)
		off[e + 1] += off[e];
	n = off[ne];
	memcpy(at, off, (size_t)ne * 8);
	for (int64_t i = 0; i < m; i++)
		if (ids[i] >= 0) {
			row[at[ids[i]]] = (int32_t)(i / k);
			rw[at[ids[i]]++] = wt[i];
		}
	struct fg_tensor xg = a->xg, g = a->gate, up = a->up;
	xg.rows = g.rows = up.rows = n;
	struct fg_gather_args ga = { .x = a->x, .index = row, .n = n, .out = xg };
	struct fg_linear_grouped_args lu = { .x = xg, .w = a->w_up, .offset = off,
					     .groups = (int32_t)ne, .act = FG_ACT_NONE, .out = up };
	struct fg_linear_grouped_args lg = lu, ld = lu;
	struct fg_scatter_add_args sa = { .y = xg, .index = row, .weight = rw, .n = n, .out = a->out };

	lg.w = a->w_gate, lg.act = FG_ACT_SILU, lg.mul = up, lg.out = g;
	ld.x = g, ld.w = a->w_down, ld.out = xg;
	if (n)
		ck_assert_msg(fg_backend_gather(&gpu, NULL, 0, "test", &ga) == 0 &&
				      fg_backend_linear_grouped(&gpu, NULL, 0, "test", &lu) == 0 &&
				      fg_backend_linear_grouped(&gpu, NULL, 0, "test", &lg) == 0 &&
				      fg_backend_linear_grouped(&gpu, NULL, 0, "test", &ld) == 0 &&
				      fg_backend_scatter_add(&gpu, NULL, 0, "test", &sa) == 0,
			      "%s", fg_last_error());
	free(ids), free(row), free(wt), free(rw), free(off), free(at);
}

/* The experts op (compute 1.13) against the composition above: the same
 * sums but for the grouped kernel's order within the products (an fp16
 * intermediate may round apart), so within 4e-3 of the output's scale;
 * rows whose logits hold a NaN (no expert) left bit for bit; two runs the
 * same bits; calls it declines (fp16 experts; more rows an expert than the
 * fused kernel takes) answer -ENOTSUP and touch nothing. */
START_TEST(test_experts)
{
	static const struct { int64_t rows, experts, hidden, ffn; int k, renorm, f32; } cases[] = {
		{ 1, 8, 256, 512, 2, 1, 1 },    { 128, 8, 512, 1024, 2, 1, 1 },
		{ 37, 60, 256, 352, 4, 0, 0 },  { 100, 128, 128, 192, 8, 1, 1 },
		{ 64, 8, 4096, 1024, 2, 1, 1 }, { 600, 8, 64, 64, 2, 1, 1 }, /* declined: 150 an expert */
	};

	gpu_seed(906);
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t r = cases[ci].rows, ne = cases[ci].experts, h = cases[ci].hidden;
		int64_t f = cases[ci].ffn, k = cases[ci].k, m = r * k;
		int o32 = cases[ci].f32, declined = ci == sizeof(cases) / sizeof(cases[0]) - 1;
		size_t os = o32 ? 4 : 2;
		struct fg_tensor *w = xmalloc((size_t)(3 * ne) * sizeof(*w));
		struct dbuf *dw = xmalloc((size_t)(3 * ne) * sizeof(*dw));
		struct dbuf dx, dl, dxg, dg, du, dout;
		uint16_t *xh = rand_h((size_t)(r * h), -1, 1), *lh = rand_h((size_t)(r * ne), -4, 4);
		void *oh = rand_rows(o32, r, h, -2, 2);
		void *got = xmalloc((size_t)(r * (h + 3)) * os), *again = xmalloc((size_t)(r * (h + 3)) * os);
		void *ref = xmalloc((size_t)(r * (h + 3)) * os);
		float *reff = xmalloc((size_t)(r * h) * 4);
		float *wf = xmalloc((size_t)(h * f) * 4);
		uint16_t *wh = xmalloc((size_t)(h * f) * 2);
		struct fg_experts_args a;
		char label[160];

		if (r > 4)
			lh[2 * ne + 1] = 0x7e00u; /* row 2: a NaN logit, no expert */
		for (int64_t i = 0; i < 3 * ne; i++) {
			int64_t rows_w = i < 2 * ne ? f : h, cols_w = i < 2 * ne ? h : f;
			uint8_t *enc = lin_weights(rows_w, cols_w, 1, wf, wh);

			w[i] = tens(dput(&dw[i], enc, (size_t)fg_q4_bytes((uint64_t)rows_w,
									  (uint64_t)cols_w, 0)),
				    FG_DTYPE_Q4_ROWS, rows_w, cols_w, cols_w);
			free(enc);
		}
		memset(&a, 0, sizeof(a));
		a.x = tens(dput(&dx, xh, (size_t)(r * h) * 2), FG_DTYPE_F16, r, h, h);
		a.logits = tens(dput(&dl, lh, (size_t)(r * ne) * 2), FG_DTYPE_F16, r, ne, ne);
		a.k = (int32_t)k;
		a.renormalize = cases[ci].renorm;
		a.experts = (int32_t)ne;
		a.w_gate = w, a.w_up = w + ne, a.w_down = w + 2 * ne;
		a.xg = tens(dput(&dxg, NULL, (size_t)(m * h) * 2), FG_DTYPE_F16, m, h, h);
		a.gate = tens(dput(&dg, NULL, (size_t)(m * f) * 2), FG_DTYPE_F16, m, f, f);
		a.up = tens(dput(&du, NULL, (size_t)(m * f) * 2), FG_DTYPE_F16, m, f, f);
		a.out = tens(dput(&dout, oh, (size_t)(r * (h + 3)) * os),
			     o32 ? FG_DTYPE_F32 : FG_DTYPE_F16, r, h, h + 3);
		snprintf(label, sizeof(label), "experts rows %" PRId64 " of %" PRId64 " experts, k %d, "
			 "hidden %" PRId64 ", ffn %" PRId64 " into %s", r, ne, (int)k, h, f,
			 o32 ? "f32" : "f16");
		ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_EXPERTS, FG_DTYPE_Q4_ROWS));
		ck_assert(!gpu.ops->supports(gpu.ctx, FG_OP_EXPERTS, FG_DTYPE_F16));
		if (declined) {
			ck_assert_int_eq(fg_backend_experts(&gpu, NULL, 0, "test", &a), -ENOTSUP);
			dget(&dout, got);
			ck_assert_msg(memcmp(got, oh, (size_t)(r * (h + 3)) * os) == 0,
				      "%s: a declined call changed out", label);
		} else {
			ck_assert_msg(fg_backend_experts(&gpu, NULL, 0, "test", &a) == 0, "%s: %s", label,
				      fg_last_error());
			dget(&dout, got);
			ck_assert(fg_tier_write(&dev, &dout.r, 0, oh, dout.bytes) == 0);
			ck_assert(fg_backend_experts(&gpu, NULL, 0, "test", &a) == 0);
			dget(&dout, again);
			ck_assert_msg(memcmp(got, again, (size_t)(r * (h + 3)) * os) == 0,
				      "%s: two runs differ", label);
			ck_assert(fg_tier_write(&dev, &dout.r, 0, oh, dout.bytes) == 0);
			experts_composed(&a);
			dget(&dout, ref);
			for (int64_t i = 0; i < r; i++)
				for (int64_t j = 0; j < h; j++)
					reff[i * h + j] = (float)got_at(ref, o32, i * (h + 3) + j);
			struct worst wo = { 0, "" };
			double e = compare_as(&wo, label, reff, h, got, o32, h + 3, r, h);
			ck_assert_msg(e <= 4e-3, "%s: error %.3g against the composition (%s)", label, e,
				      wo.where);
			if (r > 4)
				ck_assert_msg(memcmp((char *)got + 2 * (h + 3) * os,
						     (char *)oh + 2 * (h + 3) * os, (size_t)h * os) == 0,
					      "%s: the row with no expert changed", label);
		}
		for (int64_t i = 0; i < 3 * ne; i++)
			dfree(&dw[i]);
		dfree(&dx), dfree(&dl), dfree(&dxg), dfree(&dg), dfree(&du), dfree(&dout);
		free(w), free(dw), free(xh), free(lh), free(oh), free(got), free(again), free(ref);
		free(reff), free(wf), free(wh);
	}
	printf("experts                 within 4e-3 of the composed generic ops, deterministic, "
	       "%zu cases\n", sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* ABI 1.11 and 1.12: sliding windows and soft-capped scores, alone and
 * together, in prefill (heads up to 256: Gemma-2-9B's), prefill over the
 * cache and decode over fp16 and 4-bit caches, with rings no longer than
 * len - pad (1.12: a ring as short as the window). */
static const struct gqa_pf_case wide_pf_cases[] = {
	{ 2, 300, 8, 4, 256, 0, 1 }, { 1, 70, 4, 2, 256, 8, 2 }, { 2, 1100, 4, 2, 128, 0, 1 },
};
static const struct gqa_dc_case win_ring_cases[] = {
	{ 2, 8, 4, 256, 64, 64, 1, 0, 700 }, /* rings of 64 and 100 hold the windows */
	{ 3, 8, 2, 128, 100, 100, 2, 0, 333 },
	{ 1, 4, 2, 64, 4096, 4096, 0, 0, 10000 },
};

START_TEST(test_window_softcap)
{
	static const struct { int64_t window; double softcap; } modes[] = {
		{ 1, 0 }, { 8, 0 }, { 100, 0 }, { 0, 5.0 }, { 0, 0.5 }, { 64, 50.0 }, { 37, 2.0 },
	};
	struct worst wp = { 0, "" }, wc = { 0, "" }, wd = { 0, "" }, wq = { 0, "" }, w8 = { 0, "" };

	gpu_seed(838);
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_SOFTCAP, FG_DTYPE_F16));
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_SOFTCAP, FG_DTYPE_Q4_COLS));
	ck_assert(gpu.ops->supports(gpu.ctx, FG_OP_ATTENTION_SOFTCAP, FG_DTYPE_F8_COLS));
	for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++) {
		ref_window = modes[mi].window;
		ref_softcap = modes[mi].softcap;
		for (size_t ci = 0; ci < sizeof(gqa_pf_cases) / sizeof(gqa_pf_cases[0]); ci++)
			run_gqa_prefill(&gqa_pf_cases[ci], &wp);
		for (size_t ci = 0; ci < sizeof(wide_pf_cases) / sizeof(wide_pf_cases[0]); ci++)
			run_gqa_prefill(&wide_pf_cases[ci], &wp);
		for (size_t ci = 0; ci < sizeof(cached_pf_cases) / sizeof(cached_pf_cases[0]); ci++)
			run_cached_prefill(&cached_pf_cases[ci], &wc);
		for (size_t ci = 0; ci < sizeof(gqa_dc_cases) / sizeof(gqa_dc_cases[0]); ci++) {
			run_gqa_decode(&gqa_dc_cases[ci], CACHE_F16, &wd);
			run_gqa_decode(&gqa_dc_cases[ci], CACHE_Q4, &wq);
			run_gqa_decode(&gqa_dc_cases[ci], CACHE_F8, &w8);
		}
		for (size_t ci = 0; ci < sizeof(ring_cases) / sizeof(ring_cases[0]); ci++) {
			run_gqa_decode(&ring_cases[ci], CACHE_F16, &wd);
			run_gqa_decode(&ring_cases[ci], CACHE_Q4, &wq);
			run_gqa_decode(&ring_cases[ci], CACHE_F8, &w8);
		}
		for (size_t ci = 0; ci < sizeof(win_ring_cases) / sizeof(win_ring_cases[0]); ci++) {
			if (!ref_window || ref_window > win_ring_cases[ci].stride)
				continue;
			run_gqa_decode(&win_ring_cases[ci], CACHE_F16, &wd);
			run_gqa_decode(&win_ring_cases[ci], CACHE_Q4, &wq);
			run_gqa_decode(&win_ring_cases[ci], CACHE_F8, &w8);
		}
	}
	ref_window = 0;
	ref_softcap = 0;
	report("window/softcap prefill", &wp, TOL_ATTN);
	report("window/softcap cached", &wc, TOL_ATTN);
	report("window/softcap dec f16", &wd, TOL_ATTN);
	report("window/softcap dec q4", &wq, TOL_ATTN);
	report("window/softcap dec f8", &w8, TOL_ATTN);
}
END_TEST

/* ---- supports ------------------------------------------------------------------------------ */

START_TEST(test_supports)
{
	static const enum fg_dtype dts[] = { FG_DTYPE_F32, FG_DTYPE_F16, FG_DTYPE_I32,
					     FG_DTYPE_Q4_ROWS, FG_DTYPE_Q4_COLS, FG_DTYPE_F8_ROWS,
					     FG_DTYPE_F8_COLS };
	/* per op: bit d set when dtype d is supported */
	static const struct { enum fg_op op; unsigned mask; } want[] = {
		{ FG_OP_EMBED, 1u << FG_DTYPE_F16 },
		{ FG_OP_EMBED_TOKENS, 1u << FG_DTYPE_F16 },
		/* f32: the residual stream (fp32_residual, the default) */
		{ FG_OP_LAYER_NORM, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_RMS_NORM, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_LINEAR, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_ROWS | 1u << FG_DTYPE_F8_ROWS },
		{ FG_OP_LINEAR_SILU, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_ROWS | 1u << FG_DTYPE_F8_ROWS },
		{ FG_OP_LINEAR_MUL, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_ROWS | 1u << FG_DTYPE_F8_ROWS },
		{ FG_OP_ROPE, 1u << FG_DTYPE_F16 },
		{ FG_OP_ATTENTION_PREFILL, 1u << FG_DTYPE_F16 },
		{ FG_OP_ATTENTION_DECODE, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_COLS | 1u << FG_DTYPE_F8_COLS },
		{ FG_OP_ATTENTION_GQA, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_COLS | 1u << FG_DTYPE_F8_COLS },
		{ FG_OP_KV_APPEND, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_COLS | 1u << FG_DTYPE_F8_COLS },
		{ FG_OP_SAMPLE, 1u << FG_DTYPE_F16 },
		{ FG_OP_ATTENTION_RING, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_COLS | 1u << FG_DTYPE_F8_COLS },
		/* ABI 1.10's generic tier; 1.12 */
		{ FG_OP_ADD, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_ROUTE, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_GATHER, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_SCATTER_ADD, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_LINEAR_GROUPED, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_ROWS | 1u << FG_DTYPE_F8_ROWS },
		{ FG_OP_LINEAR_GELU, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_ROWS | 1u << FG_DTYPE_F8_ROWS },
		{ FG_OP_NORM_SHIFT, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_ATTENTION_SOFTCAP, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_Q4_COLS | 1u << FG_DTYPE_F8_COLS },
		{ FG_OP_SOFTCAP, 1u << FG_DTYPE_F16 | 1u << FG_DTYPE_F32 },
		{ FG_OP_EXPERTS, 1u << FG_DTYPE_Q4_ROWS }, /* 1.13; fp16 experts: composed */
	};

	ck_assert_ptr_nonnull(gpu.ops->supports);
	ck_assert_ptr_nonnull(gpu.ops->rope);
	ck_assert_uint_ge(FG_ABI_MINOR_OF(gpu.ph.plugin->abi_version), 1);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
			int got = gpu.ops->supports(gpu.ctx, want[i].op, dts[d]);
			int exp = (want[i].mask >> dts[d]) & 1u;

			ck_assert_msg(got == exp, "supports(op %d, dtype %d) = %d, expected %d",
				      (int)want[i].op, (int)dts[d], got, exp);
			ck_assert_int_eq(fg_backend_supports(&gpu, want[i].op, dts[d]), exp);
		}
	ck_assert_int_eq(gpu.ops->supports(gpu.ctx, (enum fg_op)0, FG_DTYPE_F16), 0);
	ck_assert_int_eq(gpu.ops->supports(gpu.ctx, (enum fg_op)99, FG_DTYPE_F16), 0);
}
END_TEST

/* ---- copy_small (compute 1.13) -------------------------------------------------------- */

/* copy_small moves the same bytes as copy in both directions: between
 * page-locked host memory (pinned_host's, read and written by a kernel)
 * and the device, at odd sizes and offsets, past sm_copy_max (a plain
 * copy), and from pageable memory (a plain copy); bytes around the
 * destination stay as they were. */
START_TEST(test_copy_small)
{
	static const size_t sizes[] = { 1, 15, 16, 48, 4099, 1 << 20, (17u << 20) + 5 };
	struct fg_plugin_handle ph;
	struct fg_tier host;
	struct fg_region hr;
	struct dbuf dd;
	size_t cap = (18u << 20) + 64;
	void *opts;

	ck_assert_msg(fg_plugin_load("pinned_host", FG_PLUGIN_STORAGE, &ph) == 0, "%s",
		      fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_ptr_nonnull(opts);
	ck_assert_msg(fg_tier_open(&host, "host", &ph, opts, 0) == 0, "%s", fg_last_error());
	ck_assert_msg(fg_tier_alloc(&host, cap, &hr) == 0, "%s", fg_last_error());
	ck_assert_ptr_nonnull(gpu.ops->copy_small);
	uint8_t *h = hr.addr, *want = xmalloc(cap), *back = xmalloc(cap), *pageable = xmalloc(cap);
	uint8_t *d = dput(&dd, NULL, cap);

	gpu_seed(907);
	for (size_t j = 0; j < cap; j++)
		want[j] = (uint8_t)gpu_next();
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (int off = 0; off < 2; off++) {
			size_t n = sizes[i], o = off ? 3 : 0;

			memset(back, 0xa5, cap);
			/* host -> device: the device's bytes around [o, o + n) stay 0xa5 */
			ck_assert(fg_tier_write(&dev, &dd.r, 0, back, cap) == 0);
			memcpy(h, want, cap);
			ck_assert_msg(fg_backend_copy_small(&gpu, NULL, d + o, h + 5, n) == 0, "%s",
				      fg_last_error());
			dget(&dd, back);
			ck_assert_msg(memcmp(back + o, want + 5, n) == 0 && (o == 0 || back[o - 1] == 0xa5) &&
					      back[o + n] == 0xa5,
				      "copy_small host -> device of %zu bytes at offset %zu", n, o);
			/* device -> host, into pinned and pageable memory */
			ck_assert(fg_tier_write(&dev, &dd.r, 0, want, cap) == 0);
			memset(h, 0x5a, cap);
			memset(pageable, 0x5a, cap);
			ck_assert(fg_backend_copy_small(&gpu, NULL, h + o, d + 7, n) == 0);
			ck_assert(fg_backend_copy_small(&gpu, NULL, pageable + o, d + 7, n) == 0);
			ck_assert(fg_backend_stream_sync(&gpu, NULL) == 0);
			ck_assert_msg(memcmp(h + o, want + 7, n) == 0 && h[o + n] == 0x5a &&
					      (o == 0 || h[o - 1] == 0x5a),
				      "copy_small device -> pinned host of %zu bytes at offset %zu", n, o);
			ck_assert_msg(memcmp(pageable + o, want + 7, n) == 0 && pageable[o + n] == 0x5a,
				      "copy_small device -> pageable host of %zu bytes", n);
		}
	dfree(&dd);
	fg_tier_free(&host, &hr);
	fg_tier_close(&host);
	free(want), free(back), free(pageable);
	printf("copy_small              the bytes of copy both ways, %zu sizes\n",
	       sizeof(sizes) / sizeof(sizes[0]));
}
END_TEST

/* ---- host_call: host work in a stream's order ------------------------------------------- */

/* A host function that waits (up to 10 s) until the test lets it go, then
 * checks the bytes the stream copied before it and inverts them. */
struct host_step {
	volatile int go, ran, saw_go, bytes_ok;
	const uint8_t *want;
	uint8_t *h;
	size_t n;
};

static void host_step_run(void *arg)
{
	struct host_step *hs = arg;
	for (int i = 0; i < 10000 && !__atomic_load_n(&hs->go, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	hs->saw_go = __atomic_load_n(&hs->go, __ATOMIC_ACQUIRE);
	hs->bytes_ok = memcmp(hs->h, hs->want, hs->n) == 0;
	for (size_t i = 0; i < hs->n; i++)
		hs->h[i] = (uint8_t)~hs->h[i];
	__atomic_store_n(&hs->ran, 1, __ATOMIC_RELEASE);
}

/* host_call returns once queued (its function still waits for the test);
 * it runs after the stream's copy to the host and before the copy back;
 * another stream goes on meanwhile. */
START_TEST(test_host_call)
{
	const size_t n = 1 << 20;
	struct fg_plugin_handle ph;
	struct fg_tier host;
	struct fg_region hr;
	struct dbuf da, db;
	void *s1, *s2, *opts;

	ck_assert_msg(fg_plugin_load("pinned_host", FG_PLUGIN_STORAGE, &ph) == 0, "%s",
		      fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	ck_assert_ptr_nonnull(opts);
	ck_assert_msg(fg_tier_open(&host, "host", &ph, opts, 0) == 0, "%s", fg_last_error());
	ck_assert_msg(fg_tier_alloc(&host, 2 * n, &hr) == 0, "%s", fg_last_error());
	ck_assert(fg_backend_has_host_call(&gpu));
	uint8_t *h = hr.addr, *h2 = h + n, *want = xmalloc(n), *back = xmalloc(n);
	gpu_seed(911);
	for (size_t i = 0; i < n; i++)
		want[i] = (uint8_t)gpu_next();
	uint8_t *d = dput(&da, want, n), *d2 = dput(&db, NULL, n);
	struct host_step hs = { .want = want, .h = h, .n = n };
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &s1), 0);
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &s2), 0);
	memset(h, 0, n);
	ck_assert_int_eq(fg_backend_copy_small(&gpu, s1, h, d, n), 0);
	ck_assert_msg(fg_backend_host_call(&gpu, s1, host_step_run, &hs) == 0, "%s",
		      fg_last_error());
	ck_assert_int_eq(fg_backend_copy_small(&gpu, s1, d2, h, n), 0);
	ck_assert_msg(!__atomic_load_n(&hs.ran, __ATOMIC_ACQUIRE),
		      "host_call ran its function before returning");
	/* the other stream is not held by the first one's host function */
	memset(h2, 0, n);
	ck_assert_int_eq(fg_backend_copy_small(&gpu, s2, h2, d, n), 0);
	ck_assert_int_eq(fg_backend_stream_sync(&gpu, s2), 0);
	ck_assert_msg(memcmp(h2, want, n) == 0 && !__atomic_load_n(&hs.ran, __ATOMIC_ACQUIRE),
		      "a second stream waited for the first one's host function");
	__atomic_store_n(&hs.go, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(fg_backend_stream_sync(&gpu, s1), 0);
	ck_assert_msg(hs.ran && hs.saw_go, "the host function did not run after host_call returned");
	ck_assert_msg(hs.bytes_ok, "the host function ran before the stream's copy to the host");
	ck_assert(fg_tier_read(&dev, &db.r, 0, back, n) == 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(back[i] + want[i] == 255,
			      "the copy after the host function read byte %zu before it ran", i);
	fg_backend_stream_destroy(&gpu, s1);
	fg_backend_stream_destroy(&gpu, s2);
	dfree(&da);
	dfree(&db);
	fg_tier_free(&host, &hr);
	fg_tier_close(&host);
	free(want), free(back);
	printf("host_call               in stream order, queued, another stream free\n");
}
END_TEST

/* ---- streams and events ---------------------------------------------------------------- */

/* A long product on stream 1, an event, stream 2 waiting on it and reading its
 * output: without a real wait the second product would read stale data. */
START_TEST(test_streams_events)
{
	const int64_t m = 2048, k = 2048, n = 2048;
	void *s1, *s2, *ev;
	uint16_t *xh = rand_h((size_t)(m * k), -1, 1), *w1 = rand_h((size_t)(n * k), -0.03f, 0.03f);
	uint16_t *w2 = rand_h((size_t)(n * n), -0.03f, 0.03f), *oh = xmalloc((size_t)(m * n) * 2);
	uint16_t *zero = xmalloc((size_t)(m * n) * 2);
	float *xf = to_f32(xh, (size_t)(m * k)), *y1 = xmalloc((size_t)(m * n) * 4);
	float *y2 = xmalloc((size_t)(m * n) * 4);
	struct dbuf dx, dw1, dw2, dy1, dy2;
	struct fg_linear_args a1, a2, c1, c2;
	struct worst w = { 0, "" };

	gpu_seed(909);
	memset(zero, 0, (size_t)(m * n) * 2);
	memset(&a1, 0, sizeof(a1));
	a1.x = tens(dput(&dx, xh, (size_t)(m * k) * 2), FG_DTYPE_F16, m, k, k);
	a1.w = tens(dput(&dw1, w1, (size_t)(n * k) * 2), FG_DTYPE_F16, n, k, k);
	a1.out = tens(dput(&dy1, zero, (size_t)(m * n) * 2), FG_DTYPE_F16, m, n, n);
	a2 = a1;
	a2.x = a1.out;
	a2.w = tens(dput(&dw2, w2, (size_t)(n * n) * 2), FG_DTYPE_F16, n, n, n);
	a2.out = tens(dput(&dy2, zero, (size_t)(m * n) * 2), FG_DTYPE_F16, m, n, n);
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &s1), 0);
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &s2), 0);
	ck_assert_ptr_nonnull(s1);
	ck_assert_ptr_ne(s1, s2);
	ck_assert_int_eq(fg_backend_event_create(&gpu, &ev), 0);
	for (int rep = 0; rep < 16; rep++) /* keep stream 1 busy for a while */
		ck_assert_int_eq(gpu.ops->linear(gpu.ctx, s1, &a1), 0);
	ck_assert_int_eq(fg_backend_event_record(&gpu, ev, s1), 0);
	ck_assert_int_eq(fg_backend_stream_wait(&gpu, s2, ev), 0);
	ck_assert_int_eq(gpu.ops->linear(gpu.ctx, s2, &a2), 0);
	ck_assert_int_eq(fg_backend_stream_sync(&gpu, s2), 0);
	ck_assert_int_eq(fg_tier_read(&dev, &dy2.r, 0, oh, (size_t)(m * n) * 2), 0);

	/* reference: y1 rounded to fp16 as the GPU stores it, then the second product */
	c1 = a1;
	c1.x = tens(xf, FG_DTYPE_F32, m, k, k);
	c1.w = tens(w1, FG_DTYPE_F16, n, k, k);
	c1.out = tens(y1, FG_DTYPE_F32, m, n, n);
	ck_assert_int_eq(cpu.ops->linear(cpu.ctx, NULL, &c1), 0);
	for (int64_t i = 0; i < m * n; i++)
		y1[i] = fg_half_to_float(fg_float_to_half(y1[i]));
	c2 = c1;
	c2.x = tens(y1, FG_DTYPE_F32, m, n, n);
	c2.w = tens(w2, FG_DTYPE_F16, n, n, n);
	c2.out = tens(y2, FG_DTYPE_F32, m, n, n);
	ck_assert_int_eq(cpu.ops->linear(cpu.ctx, NULL, &c2), 0);
	double e = compare(&w, "two streams", y2, n, oh, n, m, n);
	ck_assert_msg(e <= TOL_LINEAR, "stream 2 did not wait for stream 1: error %.3g (%s)", e,
		      w.where);
	fg_backend_event_destroy(&gpu, ev);
	fg_backend_stream_destroy(&gpu, s1);
	fg_backend_stream_destroy(&gpu, s2);
	report("streams/events", &w, TOL_LINEAR);
	dfree(&dx), dfree(&dw1), dfree(&dw2), dfree(&dy1), dfree(&dy2);
	free(xh), free(w1), free(w2), free(oh), free(zero), free(xf), free(y1), free(y2);
}
END_TEST

/* ---- sample ------------------------------------------------------------------------------ */

/* Logit rows for the sample op.  The fp16 rounding makes ties common even in
 * the spread shapes; the last three have non-finite values. */
enum smp_shape {
	SMP_SPREAD,   /* a language model's: a few nats apart */
	SMP_WIDE,     /* most of the vocabulary far below the top (outside the window) */
	SMP_FLAT,     /* everything within a few hundredths */
	SMP_TIES,     /* four values: top_k and the draw land inside runs of equal logits */
	SMP_ZEROS,    /* -0 and +0, which are equal */
	SMP_ONE,      /* one value throughout */
	SMP_SPIKE,    /* one logit far above the rest */
	SMP_NONE,     /* -inf and NaN only: nothing finite */
	SMP_INF,      /* +inf a few times (and NaN): only the +inf ids weigh */
	SMP_NAN,      /* NaN and -inf mixed into a spread row */
	SMP_SHAPES
};

static double smp_normal(void)
{
	double u = (double)(gpu_next() >> 11) * 0x1p-53, v = (double)(gpu_next() >> 11) * 0x1p-53;

	return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v);
}

static void smp_fill(uint16_t *h, int64_t n, enum smp_shape sh)
{
	for (int64_t i = 0; i < n; i++) {
		float l = (float)smp_normal();

		switch (sh) {
		case SMP_SPREAD:
			l *= 3;
			break;
		case SMP_WIDE:
			l *= 25;
			break;
		case SMP_FLAT:
			l *= 0.01f;
			break;
		case SMP_TIES:
			l = (float)(int)gpu_uniform(0, 4) - 2.0f;
			break;
		case SMP_ZEROS:
			l = gpu_uniform(0, 1) < 0.5f ? -0.0f : 0.0f;
			if (gpu_uniform(0, 1) < 0.01f)
				l = -50;
			break;
		case SMP_ONE:
			l = 1.5f;
			break;
		case SMP_SPIKE:
			break;
		case SMP_NONE:
			l = gpu_uniform(0, 1) < 0.5f ? -INFINITY : NAN;
			break;
		case SMP_INF:
			if (gpu_uniform(0, 1) < 0.002f || i == n / 2 || i == n - 1)
				l = INFINITY;
			else if (gpu_uniform(0, 1) < 0.01f)
				l = NAN;
			break;
		case SMP_NAN:
			l *= 2;
			if (gpu_uniform(0, 1) < 0.05f)
				l = NAN;
			else if (gpu_uniform(0, 1) < 0.01f)
				l = -INFINITY;
			break;
		case SMP_SHAPES:
			break;
		}
		h[i] = fg_float_to_half(l);
	}
	if (sh == SMP_SPIKE)
		h[(int64_t)gpu_uniform(0, (float)n) % n] = fg_float_to_half(12.0f);
}

/* rows rows of vocab logits (ld apart, +inf between vocab and ld, which a read
 * past a row would take) with per-row temperature, top_k and top_p; every
 * row's token must be fg_sample_sorted's on the same logits and the same
 * random stream, and a greedy row's must also be the argmax op's. */
static void run_sample(int64_t vocab, int64_t ld, int64_t rows, void *stream, uint64_t seed)
{
	static const float temps[] = { 0.3f, 0.7f, 1.0f, 1.5f, 1e-6f };
	static const float topps[] = { 0, 0.5f, 0.9f, 0.999f, 1 };
	const int32_t topks[] = { 0, 1, 5, 50, 4096, (int32_t)vocab + 3 };
	uint16_t *xh = xmalloc((size_t)(rows * ld) * 2);
	float *f = xmalloc((size_t)vocab * sizeof(float)), *t = xmalloc((size_t)rows * 4);
	float *tp = xmalloc((size_t)rows * 4);
	int32_t *tk = xmalloc((size_t)rows * 4), *got = xmalloc((size_t)rows * 4);
	int32_t *amax = xmalloc((size_t)rows * 4);
	enum smp_shape *shape = xmalloc((size_t)rows * sizeof(*shape));
	uint64_t *u = xmalloc((size_t)rows * 8);
	struct fg_rng *rng = xmalloc((size_t)rows * sizeof(*rng));
	struct fg_sampler *smp;
	struct dbuf dx;
	struct fg_sample_args a;
	int bad = 0, greedy = 0;

	gpu_seed(seed);
	for (int64_t r = 0; r < rows; r++) {
		struct fg_rng c;

		/* every shape twice first, then at random */
		shape[r] = r < 2 * SMP_SHAPES ? (enum smp_shape)(r % SMP_SHAPES)
					      : (enum smp_shape)(gpu_next() % SMP_SHAPES);
		smp_fill(xh + r * ld, vocab, shape[r]);
		for (int64_t i = vocab; i < ld; i++)
			xh[r * ld + i] = 0x7c00u;
		t[r] = gpu_next() % 6 == 0 ? (gpu_next() % 2 ? 0.0f : -1.0f) : temps[gpu_next() % 5];
		tk[r] = topks[gpu_next() % 6];
		tp[r] = topps[gpu_next() % 5];
		fg_rng_seed(&rng[r], seed * 1000003u + (uint64_t)r);
		c = rng[r];
		u[r] = fg_rng_u53(&c); /* the one draw fg_sample_sorted takes when T > 0 */
	}
	memset(&a, 0, sizeof(a));
	a.logits = tens(dput(&dx, xh, (size_t)(rows * ld) * 2), FG_DTYPE_F16, rows, vocab, ld);
	a.temperature = t;
	a.top_k = tk;
	a.top_p = tp;
	a.draw = u;
	a.out = got;
	for (int64_t r = 0; r < rows; r++)
		got[r] = amax[r] = -7; /* neither an id nor the -1 of a row with no number */
	ck_assert_msg(fg_backend_sample(&gpu, stream, &a) == 0, "%s", fg_last_error());
	ck_assert_msg(fg_backend_argmax(&gpu, stream, &a.logits, amax) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_sampler_new(&smp, vocab), 0);
	for (int64_t r = 0; r < rows; r++) {
		struct fg_sampling p = { .temperature = t[r], .top_k = tk[r], .top_p = tp[r] };
		struct fg_rng c = rng[r];
		int32_t want;

		for (int64_t i = 0; i < vocab; i++)
			f[i] = fg_half_to_float(xh[r * ld + i]);
		want = fg_sample_sorted(smp, f, &p, &c);
		if (t[r] <= 0) {
			greedy++;
			if (got[r] != amax[r] || got[r] != want) {
				printf("sample vocab %" PRId64 " row %" PRId64 " (shape %d, greedy): token "
				       "%d, argmax op %d, host %d\n", vocab, r, (int)shape[r], got[r],
				       amax[r], want);
				bad++;
			}
		} else if (got[r] != want) {
			printf("sample vocab %" PRId64 " row %" PRId64 " (shape %d, T %g, top_k %d, "
			       "top_p %g, draw %" PRIu64 "): token %d, host %d\n", vocab, r,
			       (int)shape[r], (double)t[r], tk[r], (double)tp[r], u[r], got[r], want);
			bad++;
		}
	}
	printf("sample vocab %" PRId64 " ld %" PRId64 ": %" PRId64 " rows (%d greedy), %d "
	       "differ from the host\n", vocab, ld, rows, greedy, bad);
	ck_assert_msg(bad == 0, "sample: %d of %" PRId64 " rows of vocab %" PRId64 " differ from "
		      "fg_sample_sorted or the argmax op (printed above)", bad, rows, vocab);
	fg_sampler_free(smp);
	dfree(&dx);
	free(xh), free(f), free(t), free(tp), free(tk), free(got), free(amax), free(shape);
	free(u), free(rng);
}

START_TEST(test_sample)
{
	void *st;

	ck_assert_msg(fg_backend_can_sample(&gpu), "cublas does not offer the sample op");
	run_sample(50272, 50272, 160, NULL, 31); /* the vector path */
	run_sample(50272, 50275, 48, NULL, 32);  /* the scalar path */
	run_sample(8, 8, 200, NULL, 33);
	run_sample(37, 40, 600, NULL, 34);
	run_sample(1, 1, 40, NULL, 35);
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &st), 0);
	run_sample(37, 37, 100, st, 36);
	fg_backend_stream_destroy(&gpu, st);
}
END_TEST

/* ---- logprob (ABI 1.6) ------------------------------------------------------------------ */

static double lp_u01(void)
{
	return (double)(gpu_next() >> 11) * 0x1p-53;
}

/* rows rows of fp16 logits (ld apart, +inf past vocab), every shape of
 * tests/logprob_ref.h, random targets (every fifth row skipped), k top ids:
 * each scored row against the double-precision reference on the same fp16
 * values (ids exactly, values within the fp32 sum's rounding). */
static void run_logprob(int64_t vocab, int64_t ld, int64_t rows, int k, void *stream,
			uint64_t seed)
{
	uint16_t *xh = xmalloc((size_t)(rows * ld) * 2 + 2);
	float *xf = xmalloc((size_t)vocab * sizeof(float) + 4), *lp = xmalloc((size_t)rows * 4 + 4);
	int32_t *tg = xmalloc((size_t)rows * 4 + 4), *id = xmalloc((size_t)(rows * k) * 4 + 4);
	float *tl = xmalloc((size_t)(rows * k) * 4 + 4);
	char what[96];
	struct dbuf dx;
	int bad = 0;

	gpu_seed(seed);
	for (int64_t r = 0; r < rows; r++) {
		lp_fill(xf, vocab, (enum lp_shape)(r % LP_SHAPES), lp_u01);
		for (int64_t i = 0; i < ld; i++)
			xh[r * ld + i] = i < vocab ? fg_float_to_half(xf[i]) : 0x7c00u;
		tg[r] = r % 5 == 4 ? -1 : (int32_t)(gpu_next() % (uint64_t)vocab);
	}
	struct fg_logprob_args a = { tens(dput(&dx, xh, (size_t)(rows * ld) * 2 + 2), FG_DTYPE_F16,
					  rows, vocab, ld),
				     tg, k, lp, k ? id : NULL, k ? tl : NULL };
	ck_assert_msg(fg_backend_logprob(&gpu, stream, &a) == 0, "%s", fg_last_error());
	snprintf(what, sizeof(what), "logprob vocab %" PRId64 " ld %" PRId64 " k %d", vocab, ld, k);
	for (int64_t r = 0; r < rows; r++) {
		if (tg[r] < 0)
			continue;
		for (int64_t i = 0; i < vocab; i++)
			xf[i] = fg_half_to_float(xh[r * ld + i]);
		bad += lp_check_row(what, r, xf, vocab, tg[r], k, lp[r], id + r * k, tl + r * k, 1e-5);
	}
	printf("%s: %" PRId64 " rows, %d values differ from the reference\n", what, rows, bad);
	ck_assert_msg(bad == 0, "%s: %d values differ from the reference (printed above)", what, bad);
	dfree(&dx);
	free(xh), free(xf), free(lp), free(tg), free(id), free(tl);
}

START_TEST(test_logprob)
{
	void *st;

	ck_assert_msg(fg_backend_can_logprob(&gpu), "cublas does not offer the logprob op");
	run_logprob(128256, 128256, 21, 20, NULL, 41); /* Llama 3's vocabulary, the API's k */
	run_logprob(50272, 50275, 70, 5, NULL, 42);
	run_logprob(37, 40, 300, 1, NULL, 43);
	run_logprob(7, 7, 30, 20, NULL, 44); /* k above the vocabulary */
	run_logprob(1, 1, 10, 2, NULL, 45);
	run_logprob(500, 500, 14, 0, NULL, 46);
	ck_assert_int_eq(fg_backend_stream_create(&gpu, &st), 0);
	run_logprob(1000, 1000, 64, 3, st, 47);
	fg_backend_stream_destroy(&gpu, st);
}
END_TEST

/* ---- device limits ----------------------------------------------------------------------- */

/* The core validates arguments against fgcore/compute.h (core/backend/
 * compute_ops.c); what cublas refuses itself are its kernels' limits, with an
 * error line. */
static void expect_refused(int rc, int want, const char *what)
{
	ck_assert_msg(rc == want, "%s: returned %d, expected %d", what, rc, want);
	ck_assert_msg(strstr(fg_last_error(), "cublas:") != NULL, "%s: no error line (\"%s\")",
		      what, fg_last_error());
	printf("refused as expected: %s\n", fg_last_error());
	fg_clear_error();
}

START_TEST(test_device_limits)
{
	struct dbuf d;
	void *p = dput(&d, NULL, 1 << 20);
	struct fg_attention_args aa;
	struct fg_kv_append_args ka;
	int32_t pad[2] = { 0, 0 };
	const struct fg_compute_ops *o = gpu.ops;
	void *c = gpu.ctx;

	memset(&aa, 0, sizeof(aa));
	aa.q = tens(p, FG_DTYPE_F16, 16, 264, 264);
	aa.k = tens((char *)p + 65536, FG_DTYPE_F16, 16, 264, 264);
	aa.v = tens((char *)p + 262144, FG_DTYPE_F16, 16, 264, 264);
	aa.out = tens((char *)p + 524288, FG_DTYPE_F16, 16, 264, 264);
	aa.batch = 2;
	aa.seq = 8;
	aa.heads = 1;
	aa.head_dim = 264;
	aa.scale = 0.125f;
	aa.pad = pad;
	expect_refused(o->attention_prefill(c, NULL, &aa), -ENOTSUP, "prefill with head_dim 264");
	aa.q = tens(p, FG_DTYPE_F16, 2, 264, 264);
	aa.k = tens((char *)p + 65536, FG_DTYPE_F16, 16, 264, 264);
	aa.v = tens((char *)p + 262144, FG_DTYPE_F16, 16, 264, 264);
	aa.out = tens((char *)p + 524288, FG_DTYPE_F16, 2, 264, 264);
	aa.seq = 1;
	aa.len = 8;
	aa.cache_stride = 8;
	aa.head_dim = 264;
	expect_refused(o->attention_decode(c, NULL, &aa), -ENOTSUP, "decode with head_dim 264");
	aa.q = tens(p, FG_DTYPE_F16, 2, 64, 64);
	aa.k = tens((char *)p + 65538, FG_DTYPE_Q4_COLS, 16, 64, 64);
	aa.v = tens((char *)p + 262144, FG_DTYPE_Q4_COLS, 16, 64, 64);
	aa.out = tens((char *)p + 524288, FG_DTYPE_F16, 2, 64, 64);
	aa.head_dim = 64;
	expect_refused(o->attention_decode(c, NULL, &aa), -EINVAL, "decode over a misaligned "
		       "4-bit cache");

	memset(&ka, 0, sizeof(ka));
	ka.src = tens(p, FG_DTYPE_F16, 2, 64, 64);
	ka.cache = tens((char *)p + 65537, FG_DTYPE_Q4_COLS, 8, 64, 64);
	ka.batch = 2;
	ka.n = 1;
	ka.start = 1;
	ka.cache_stride = 4;
	expect_refused(o->kv_append(c, NULL, &ka), -EINVAL, "kv_append to a misaligned 4-bit cache");

	/* 28 bytes of the 64 MiB scratch per row: the check comes before any read */
	{
		struct fg_sample_args sa;
		float tz = 0;
		int32_t kz = 0, oz = 0;
		uint64_t uz = 0;

		memset(&sa, 0, sizeof(sa));
		sa.logits = tens(p, FG_DTYPE_F16, 3 << 20, 1, 1);
		sa.temperature = sa.top_p = &tz;
		sa.top_k = &kz;
		sa.draw = &uz;
		sa.out = &oz;
		expect_refused(o->sample(c, NULL, &sa), -ENOMEM, "sample of 3M rows");
	}
	ck_assert_msg(fg_backend_stream_sync(&gpu, NULL) == 0, "%s", fg_last_error());
	dfree(&d);
}
END_TEST

static Suite *cublas_suite(void)
{
	Suite *s = suite_create("cublas");
	TCase *tc = tcase_create("ops");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_q4_reference_vs_codec);
	tcase_add_test(tc, test_linear);
	tcase_add_test(tc, test_linear_f8);
	tcase_add_test(tc, test_residual_f32);
	tcase_add_test(tc, test_layer_norm);
	tcase_add_test(tc, test_embed);
	tcase_add_test(tc, test_kv_append_f16);
	tcase_add_test(tc, test_kv_append_q4);
	tcase_add_test(tc, test_kv_append_f8);
	tcase_add_test(tc, test_attention_prefill);
	tcase_add_test(tc, test_attention_decode);
	tcase_add_test(tc, test_norm_variants);
	tcase_add_test(tc, test_embed_tokens);
	tcase_add_test(tc, test_linear_gated);
	tcase_add_test(tc, test_swiglu);
	tcase_add_test(tc, test_linear_fp8);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_gqa_prefill);
	tcase_add_test(tc, test_cached_prefill);
	tcase_add_test(tc, test_gqa_decode);
	tcase_add_test(tc, test_ring_decode);
	tcase_add_test(tc, test_window_softcap);
	tcase_add_test(tc, test_generic_add);
	tcase_add_test(tc, test_softcap_op);
	tcase_add_test(tc, test_route);
	tcase_add_test(tc, test_gather_scatter);
	tcase_add_test(tc, test_linear_grouped);
	tcase_add_test(tc, test_experts);
	tcase_add_test(tc, test_copy_small);
	tcase_add_test(tc, test_host_call);
	tcase_add_test(tc, test_supports);
	tcase_add_test(tc, test_streams_events);
	tcase_add_test(tc, test_sample);
	tcase_add_test(tc, test_logprob);
	tcase_add_test(tc, test_device_limits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	static const char *const names[] = { "cuda_mem", "cublas", "cpu_blas" };
	static const uint32_t kinds[] = { FG_PLUGIN_STORAGE, FG_PLUGIN_COMPUTE, FG_PLUGIN_COMPUTE };
	SRunner *sr;
	int failed, rc = gpu_plugins_usable(names, kinds, 3);

	if (rc)
		return rc;
	sr = srunner_create(cublas_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
