/* plugins/compute/cpu_blas/ops.c - embedding gather, layer norm, KV append. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include "plugins/codec/fp16_simd.h"

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

		fp16_simd_to_f32(o, (const uint16_t *)a->tok.data + a->ids[i] * a->tok.ld, (size_t)h);
		fp16_simd_to_f32(p, (const uint16_t *)a->pos.data + a->positions[i] * a->pos.ld,
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
	fp16_simd_to_f32(gb, a->gamma.data, (size_t)h);
	fp16_simd_to_f32(gb + h, a->beta.data, (size_t)h);
	N.gamma = gb;
	N.beta = gb + h;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, n, 1 + 16384 / h, cb_layer_norm_rows, &N);
	pthread_mutex_unlock(&c->lock);
	free(gb);
	return 0;
}

/* ---- KV append ----------------------------------------------------------------- */

int cpu_blas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	const char *op = "kv_append";
	int64_t h;
	int rc;

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
	if ((rc = cpu_blas_check_tensor(c, op, "src", &a->src, FG_DTYPE_F32, a->batch * a->n,
					-1)) ||
	    (rc = cpu_blas_check_tensor(c, op, "cache", &a->cache, FG_DTYPE_F32, -1, h)))
		return rc;
	if (a->cache.rows < a->batch * a->cache_stride) {
		fg_error(c->host, "cpu_blas: kv_append: cache has %" PRId64 " rows, fewer than "
			 "batch * cache_stride = %" PRId64, a->cache.rows,
			 a->batch * a->cache_stride);
		return -EINVAL;
	}
	if (h == 0)
		return 0;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->n; i++)
			memmove((float *)a->cache.data +
					(b * a->cache_stride + a->start + i) * a->cache.ld,
				(const float *)a->src.data + (b * a->n + i) * a->src.ld,
				(size_t)h * sizeof(float));
	return 0;
}
