/* plugins/compute/cpu_blas/ops.c - embedding gather, layer norm, KV append, and
 * the 4-bit row codec (fgcore/q4.h) that kv_append, attention and linear use.
 *
 * kv_append copies fp32 or fp16 rows into a cache of the same type, or encodes
 * them into a FG_DTYPE_Q4_COLS cache with fgcore/q4.h's encoder, the rule the
 * int4_group64 codec follows too (plugins cannot call each other). */
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
		fg_fp16_simd_to_f32(p, (const uint16_t *)a->pos.data + a->positions[i] * a->pos.ld,
				 (size_t)h);
		for (int64_t j = 0; j < h; j++)
			o[j] += p[j];
	}
}

int cpu_blas_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	const char *op = "embed";
	struct cb_embed E = { .c = c, .a = a };
	int64_t h;
	int rc;

	(void)stream;
	if (!a) {
		fg_error(c->host, "cpu_blas: embed: NULL arguments");
		return -EINVAL;
	}
	if (a->n < 0) {
		fg_error(c->host, "cpu_blas: embed: n = %" PRId64 " is negative", a->n);
		return -EINVAL;
	}
	h = a->tok.cols;
	if ((rc = cpu_blas_check_tensor(c, op, "tok", &a->tok, FG_DTYPE_F16, -1, -1)) ||
	    (rc = cpu_blas_check_tensor(c, op, "pos", &a->pos, FG_DTYPE_F16, -1, h)) ||
	    (rc = cpu_blas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F32, a->n, h)))
		return rc;
	if (a->n == 0)
		return 0;
	if (!a->ids || !a->positions) {
		fg_error(c->host, "cpu_blas: embed: ids or positions is NULL");
		return -EINVAL;
	}
	for (int64_t i = 0; i < a->n; i++) {
		if (a->ids[i] < 0 || a->ids[i] >= a->tok.rows) {
			fg_error(c->host, "cpu_blas: embed: ids[%" PRId64 "] = %" PRId32
				 " is outside the vocabulary [0, %" PRId64 ")", i, a->ids[i],
				 a->tok.rows);
			return -EINVAL;
		}
		if (a->positions[i] < 0 || a->positions[i] >= a->pos.rows) {
			fg_error(c->host, "cpu_blas: embed: positions[%" PRId64 "] = %" PRId32
				 " is outside the position table [0, %" PRId64 ")", i,
				 a->positions[i], a->pos.rows);
			return -EINVAL;
		}
	}
	if (cpu_blas_overlap(&a->out, &a->tok) || cpu_blas_overlap(&a->out, &a->pos)) {
		fg_error(c->host, "cpu_blas: embed: out overlaps the embedding tables");
		return -EINVAL;
	}
	if (h == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (size_t)h);
	if (!rc)
		cpu_blas_pool_run(c->pool, a->n, 1 + 32768 / h, cb_embed_rows, &E);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- layer norm ---------------------------------------------------------------- */

struct cb_layer_norm {
	const struct fg_layer_norm_args *a;
	const float *gamma, *beta;
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
		for (int64_t j = 0; j < h; j++)
			o[j] = (float)((x[j] - mean) * rstd) * N->gamma[j] + N->beta[j];
	}
}

int cpu_blas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	const char *op = "layer_norm";
	struct cb_layer_norm N = { .a = a };
	float *gb;
	int64_t n, h;
	int rc;

	(void)stream;
	if (!a) {
		fg_error(c->host, "cpu_blas: layer_norm: NULL arguments");
		return -EINVAL;
	}
	n = a->x.rows;
	h = a->x.cols;
	if ((rc = cpu_blas_check_tensor(c, op, "x", &a->x, FG_DTYPE_F32, -1, -1)) ||
	    (rc = cpu_blas_check_tensor(c, op, "gamma", &a->gamma, FG_DTYPE_F16, 1, h)) ||
	    (rc = cpu_blas_check_tensor(c, op, "beta", &a->beta, FG_DTYPE_F16, 1, h)) ||
	    (rc = cpu_blas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F32, n, h)))
		return rc;
	if (!isfinite(a->eps) || a->eps < 0) {
		fg_error(c->host, "cpu_blas: layer_norm: eps = %g, expected a finite value >= 0",
			 (double)a->eps);
		return -EINVAL;
	}
	if (cpu_blas_overlap(&a->out, &a->x) && !cpu_blas_same(&a->out, &a->x)) {
		fg_error(c->host, "cpu_blas: layer_norm: out partly overlaps x; pass the same "
			 "view for both or separate buffers");
		return -EINVAL;
	}
	if (cpu_blas_overlap(&a->out, &a->gamma) || cpu_blas_overlap(&a->out, &a->beta)) {
		fg_error(c->host, "cpu_blas: layer_norm: out overlaps gamma or beta");
		return -EINVAL;
	}
	if (n == 0 || h == 0)
		return 0;
	gb = malloc(2 * (size_t)h * sizeof(float));
	if (!gb) {
		fg_error(c->host, "cpu_blas: layer_norm: out of memory for %" PRId64
			 " gamma/beta values", 2 * h);
		return -ENOMEM;
	}
	fg_fp16_simd_to_f32(gb, a->gamma.data, (size_t)h);
	fg_fp16_simd_to_f32(gb + h, a->beta.data, (size_t)h);
	N.gamma = gb;
	N.beta = gb + h;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, n, 1 + 16384 / h, cb_layer_norm_rows, &N);
	pthread_mutex_unlock(&c->lock);
	free(gb);
	return 0;
}

/* ---- 4-bit groups (fgcore/q4.h) ------------------------------------------------- */

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

/* Row r of a FG_DTYPE_Q4_COLS tensor from x, by q4.h's rule (the codec's bytes). */
void cpu_blas_q4_cols_store(const struct fg_tensor *t, int64_t r, const float *x)
{
	uint8_t *data = t->data, *params = (uint8_t *)cb_q4_params(t);
	uint64_t cols = (uint64_t)t->cols, gcols = fg_q4_grid_cols(cols, 1);
	uint64_t e0 = (uint64_t)r * cols;
	uint8_t q[FG_Q4_GROUP];

	for (uint64_t g = 0; g < gcols; g++) {
		uint64_t c0 = g * FG_Q4_GROUP, w = cols - c0 < FG_Q4_GROUP ? cols - c0 : FG_Q4_GROUP;
		struct fg_q4_param p;

		fg_q4_encode_group(x + c0, (size_t)w, &p, q);
		fg_q4_param_store(params, (uint64_t)r * gcols + g, &p);
		for (uint64_t j = 0; j < w; j++)
			fg_q4_set_nibble(data, e0 + c0 + j, q[j]);
	}
}

/* ---- KV append ----------------------------------------------------------------- */

int cpu_blas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	const char *op = "kv_append";
	int64_t h;
	float *buf;
	int rc, q4;

	(void)stream;
	if (!a) {
		fg_error(c->host, "cpu_blas: kv_append: NULL arguments");
		return -EINVAL;
	}
	if (a->batch < 0 || a->n < 0 || a->start < 0 || a->cache_stride < 0 ||
	    a->start > a->cache_stride || a->n > a->cache_stride - a->start) {
		fg_error(c->host, "cpu_blas: kv_append: batch %" PRId64 ", n %" PRId64
			 ", start %" PRId64 ", cache_stride %" PRId64
			 ": need 0 <= start and start + n <= cache_stride",
			 a->batch, a->n, a->start, a->cache_stride);
		return -EINVAL;
	}
	if ((a->n && a->batch > INT64_MAX / a->n) ||
	    (a->cache_stride && a->batch > INT64_MAX / a->cache_stride)) {
		fg_error(c->host, "cpu_blas: kv_append: batch %" PRId64 " is too large", a->batch);
		return -EINVAL;
	}
	h = a->src.cols;
	/* src fp32 or fp16; the cache the same type, or 4-bit groups along rows */
	if (a->src.dtype != FG_DTYPE_F32 && a->src.dtype != FG_DTYPE_F16) {
		fg_error(c->host, "cpu_blas: kv_append: src is %s, expected f32 or f16",
			 cpu_blas_dtype_name(a->src.dtype));
		return -EINVAL;
	}
	q4 = a->cache.dtype == FG_DTYPE_Q4_COLS;
	if ((rc = cpu_blas_check_tensor(c, op, "src", &a->src, a->src.dtype, a->batch * a->n,
					-1)) ||
	    (rc = cpu_blas_check_tensor(c, op, "cache", &a->cache,
					q4 ? FG_DTYPE_Q4_COLS : a->src.dtype, -1, h)))
		return rc;
	if (a->cache.rows < a->batch * a->cache_stride) {
		fg_error(c->host, "cpu_blas: kv_append: cache has %" PRId64 " rows, fewer than "
			 "batch * cache_stride = %" PRId64, a->cache.rows,
			 a->batch * a->cache_stride);
		return -EINVAL;
	}
	if (h == 0 || a->n == 0 || a->batch == 0)
		return 0;
	if (!q4) {
		size_t es = fg_dtype_size(a->src.dtype);

		for (int64_t b = 0; b < a->batch; b++)
			for (int64_t i = 0; i < a->n; i++)
				memmove((char *)a->cache.data +
						(size_t)((b * a->cache_stride + a->start + i) *
							 a->cache.ld) * es,
					(const char *)a->src.data +
						(size_t)((b * a->n + i) * a->src.ld) * es,
					(size_t)h * es);
		return 0;
	}
	if (cpu_blas_overlap(&a->src, &a->cache)) {
		fg_error(c->host, "cpu_blas: kv_append: src overlaps the 4-bit cache; encode "
			 "from a separate buffer");
		return -EINVAL;
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
