/* plugins/compute/cpu_blas/ops.c - embedding gather, layer and RMS norm, KV append, and
 * the 4-bit row codec (fgcore/q4.h) that kv_append, attention and linear use.
 *
 * kv_append copies fp32 or fp16 rows into a cache of the same type, or encodes
 * them into a FG_DTYPE_Q4_COLS cache with the int4_group64 codec's exact rules
 * (plugins cannot call each other, hence the second encoder here). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>

/* ---- embed -------------------------------------------------------------------- */

struct cb_embed {
	struct cpu_blas_ctx *c;
	const struct fg_embed_args *a;
};

static void cb_embed_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_embed *E = arg;
	const struct fg_embed_args *a = E->a;
	int64_t h = a->out.cols;
	float *p = E->c->scratch[tid];

	for (int64_t i = b; i < e; i++) {
		float *o = (float *)a->out.data + i * a->out.ld;

		fg_fp16_simd_to_f32(o, (const uint16_t *)a->tok.data + a->ids[i] * a->tok.ld, (size_t)h);
		if (!a->pos.data) /* no learned positions (rotary models) */
			continue;
		fg_fp16_simd_to_f32(p, (const uint16_t *)a->pos.data + a->positions[i] * a->pos.ld,
				 (size_t)h);
		for (int64_t j = 0; j < h; j++)
			o[j] += p[j];
	}
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_embed E = { .c = c, .a = a };
	int64_t h = a->tok.cols;
	int rc;

	(void)stream;
	if (a->n == 0 || h == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (size_t)h);
	if (!rc)
		cpu_blas_pool_run(c->pool, a->n, 1 + 32768 / h, cb_embed_rows, &E);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- layer norm and RMS norm ------------------------------------------------------ */

struct cb_layer_norm {
	const struct fg_layer_norm_args *a;
	const float *gamma, *beta; /* beta NULL: none */
};

static void cb_layer_norm_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_layer_norm *N = arg;
	const struct fg_layer_norm_args *a = N->a;
	int64_t h = a->x.cols;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		const float *x = (const float *)a->x.data + i * a->x.ld;
		float *o = (float *)a->out.data + i * a->out.ld;
		double sum = 0, sq = 0, mean, rstd;

		for (int64_t j = 0; j < h; j++)
			sum += x[j];
		mean = sum / (double)h;
		for (int64_t j = 0; j < h; j++) {
			double d = x[j] - mean;

			sq += d * d;
		}
		rstd = 1.0 / sqrt(sq / (double)h + a->eps);
		/* x is read before o[j] is written: out may be x. */
		if (N->beta)
			for (int64_t j = 0; j < h; j++)
				o[j] = (float)((x[j] - mean) * rstd) * N->gamma[j] + N->beta[j];
		else
			for (int64_t j = 0; j < h; j++)
				o[j] = (float)((x[j] - mean) * rstd) * N->gamma[j];
	}
}

/* x / sqrt(mean(x²) + eps) * gamma: the mean in double, as the layer norm. */
static void cb_rms_norm_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_layer_norm *N = arg;
	const struct fg_layer_norm_args *a = N->a;
	int64_t h = a->x.cols;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		const float *x = (const float *)a->x.data + i * a->x.ld;
		float *o = (float *)a->out.data + i * a->out.ld;
		double sq = 0, rstd;

		for (int64_t j = 0; j < h; j++)
			sq += (double)x[j] * x[j];
		rstd = 1.0 / sqrt(sq / (double)h + a->eps);
		for (int64_t j = 0; j < h; j++)
			o[j] = (float)(x[j] * rstd) * N->gamma[j];
	}
}

int cpu_blas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_layer_norm N = { .a = a };
	int64_t n = a->x.rows, h = a->x.cols;
	float *gb;

	(void)stream;
	if (n == 0 || h == 0)
		return 0;
	gb = malloc(2 * (size_t)h * sizeof(float));
	if (!gb) {
		fg_error(c->host, "cpu_blas: layer_norm: out of memory for %" PRId64
			 " gamma/beta values", 2 * h);
		return -ENOMEM;
	}
	fg_fp16_simd_to_f32(gb, a->gamma.data, (size_t)h);
	/* Gemma's 1 + w, summed in fp32 (compute ABI 1.12) */
	if (a->gamma_shift != 0)
		for (int64_t j = 0; j < h; j++)
			gb[j] += a->gamma_shift;
	N.gamma = gb;
	if (a->beta.data) {
		fg_fp16_simd_to_f32(gb + h, a->beta.data, (size_t)h);
		N.beta = gb + h;
	}
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, n, 1 + 16384 / h,
			  a->kind == FG_NORM_RMS ? cb_rms_norm_rows : cb_layer_norm_rows, &N);
	pthread_mutex_unlock(&c->lock);
	free(gb);
	return 0;
}

/* ---- 4-bit groups (fgcore/q4.h) ------------------------------------------------- */

#define CB_F16_MAX 65504.0f

static const uint8_t *cb_q4_params(const struct fg_tensor *t)
{
	return (const uint8_t *)t->data + fg_q4_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);
}

static inline void cb_q4_param(const uint8_t *params, uint64_t g, float *s, float *m)
{
	const uint8_t *b = params + 4 * g;

	*s = fg_half_to_float((uint16_t)(b[0] | b[1] << 8));
	*m = fg_half_to_float((uint16_t)(b[2] | b[3] << 8));
}

const float *cpu_blas_load(int isa, const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
			   float *dst)
{
	if (t->dtype == FG_DTYPE_F32)
		return (const float *)t->data + r * t->ld + c0;
	if (t->dtype == FG_DTYPE_F16) {
		fg_fp16_simd_to_f32(dst, (const uint16_t *)t->data + r * t->ld + c0, (size_t)w);
		return dst;
	}
	/* FG_DTYPE_Q4_COLS: groups of 64 along the row, one scale and minimum each */
	const uint8_t *data = t->data, *params = cb_q4_params(t);
	uint64_t gcols = fg_q4_grid_cols((uint64_t)t->cols, 1);
	uint64_t e0 = (uint64_t)r * (uint64_t)t->cols;
	float s[FG_Q4_GROUP], m[FG_Q4_GROUP];
	int64_t c = c0;

	while (c < c0 + w) {
		int64_t g = c / FG_Q4_GROUP, end = (g + 1) * FG_Q4_GROUP;

		if (end > c0 + w)
			end = c0 + w;
		cb_q4_param(params, (uint64_t)r * gcols + (uint64_t)g, &s[0], &m[0]);
		if ((e0 + (uint64_t)c) % 2 == 0) {
			/* whole bytes: the vector decoder, the group's scale and minimum per lane */
			for (int64_t i = 1; i < end - c; i++)
				s[i] = s[0], m[i] = m[0];
			cpu_blas_q4_decode(isa, data + (e0 + (uint64_t)c) / 2, s, m, end - c,
					   dst + (c - c0));
			c = end;
			continue;
		}
		for (; c < end; c++)
			dst[c - c0] = (float)fg_q4_nibble(data, e0 + (uint64_t)c) * s[0] + m[0];
	}
	return dst;
}

void cpu_blas_q4_rows_row(const struct fg_tensor *t, int64_t r, float *dst)
{
	const uint8_t *data = t->data, *params = cb_q4_params(t);
	uint64_t cols = (uint64_t)t->cols, e0 = (uint64_t)r * cols;
	uint64_t g0 = (uint64_t)(r / FG_Q4_GROUP) * cols;
	float s, m;

	for (uint64_t c = 0; c < cols; c++) {
		cb_q4_param(params, g0 + c, &s, &m);
		dst[c] = (float)fg_q4_nibble(data, e0 + c) * s + m;
	}
}

/* The fp16 one step below / above h (h finite, not at the range's end). */
static uint16_t cb_half_down(uint16_t h)
{
	if (h == 0 || h == 0x8000)
		return 0x8001;
	return h & 0x8000 ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

/* Largest fp16 <= v and smallest fp16 >= v, for |v| <= 65504. */
static uint16_t cb_half_floor(float v)
{
	uint16_t h = fg_float_to_half(v);

	return fg_half_to_float(h) > v ? cb_half_down(h) : h;
}

static uint16_t cb_half_ceil(float v) /* v >= 0 */
{
	uint16_t h = fg_float_to_half(v);

	return fg_half_to_float(h) < v ? (uint16_t)(h + 1) : h;
}

/* Both fp16, so the sum in double is exact. */
static int cb_q4_covers(double m, uint16_t hs, float hi)
{
	return m + 15.0 * (double)fg_half_to_float(hs) >= (double)hi;
}

void cpu_blas_q4_cols_store(const struct fg_tensor *t, int64_t r, const float *x)
{
	uint8_t *data = t->data, *params = (uint8_t *)cb_q4_params(t);
	uint64_t cols = (uint64_t)t->cols, gcols = fg_q4_grid_cols(cols, 1);
	uint64_t e0 = (uint64_t)r * cols;

	for (uint64_t g = 0; g < gcols; g++) {
		uint64_t c0 = g * FG_Q4_GROUP, w = cols - c0 < FG_Q4_GROUP ? cols - c0 : FG_Q4_GROUP;
		float lo = INFINITY, hi = -INFINITY, m, s, inv;
		uint16_t hm, hs;
		uint8_t *b;

		for (uint64_t j = c0; j < c0 + w; j++) { /* NaN never wins */
			lo = x[j] < lo ? x[j] : lo;
			hi = x[j] > hi ? x[j] : hi;
		}
		if (!(lo <= hi))
			lo = hi = 0.0f;
		lo = lo < -CB_F16_MAX ? -CB_F16_MAX : lo > CB_F16_MAX ? CB_F16_MAX : lo;
		hi = hi < -CB_F16_MAX ? -CB_F16_MAX : hi > CB_F16_MAX ? CB_F16_MAX : hi;
		lo += 0.0f; /* -0 -> +0, as the codec does */
		hi += 0.0f;
		hm = cb_half_floor(lo);
		m = fg_half_to_float(hm);
		hs = cb_half_ceil((float)(((double)hi - m) / 15.0));
		while (hs < 0x7bffu && !cb_q4_covers(m, hs, hi))
			hs++;
		while (hs > 0 && cb_q4_covers(m, (uint16_t)(hs - 1), hi))
			hs--;
		s = fg_half_to_float(hs);
		inv = s > 0.0f ? 1.0f / s : 0.0f;
		b = params + 4 * (r * gcols + g);
		b[0] = (uint8_t)hs;
		b[1] = (uint8_t)(hs >> 8);
		b[2] = (uint8_t)hm;
		b[3] = (uint8_t)(hm >> 8);
		for (uint64_t j = c0; j < c0 + w; j++) {
			float q = (x[j] - m) * inv;
			uint64_t e = e0 + j;
			uint8_t v;

			q = q > 0.0f ? q : 0.0f; /* NaN -> 0 */
			q = q < 15.0f ? q : 15.0f;
			v = (uint8_t)nearbyintf(q); /* default rounding: nearest, ties to even */
			data[e / 2] = e & 1 ? (uint8_t)((data[e / 2] & 0xf0u) | v) :
					      (uint8_t)((data[e / 2] & 0x0fu) | v << 4);
		}
	}
}

/* ---- KV append ----------------------------------------------------------------- */

/* The core checked the arguments: src fp32 or fp16, the cache the same type or
 * FG_DTYPE_Q4_COLS, separate buffers. */
int cpu_blas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	int64_t h = a->src.cols;
	float *buf;

	(void)stream;
	if (h == 0 || a->n == 0 || a->batch == 0)
		return 0;
	if (a->cache.dtype != FG_DTYPE_Q4_COLS) {
		size_t es = fg_dtype_size(a->src.dtype);

		for (int64_t b = 0; b < a->batch; b++)
			for (int64_t i = 0; i < a->n; i++)
				memcpy((char *)a->cache.data +
					       (size_t)((b * a->cache_stride + a->start + i) *
							a->cache.ld) * es,
				       (const char *)a->src.data +
					       (size_t)((b * a->n + i) * a->src.ld) * es,
				       (size_t)h * es);
		return 0;
	}
	buf = malloc((size_t)h * sizeof(float));
	if (!buf) {
		fg_error(c->host, "cpu_blas: kv_append: out of memory for a row of %" PRId64
			 " values", h);
		return -ENOMEM;
	}
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->n; i++)
			cpu_blas_q4_cols_store(&a->cache, b * a->cache_stride + a->start + i,
					       cpu_blas_load(c->isa, &a->src, b * a->n + i, 0, h, buf));
	free(buf);
	return 0;
}
