/* plugins/compute/cpu_blas/generic.c - the generic tier of compute ABI 1.10,
 * which mixture-of-experts layers are made of: add, route, gather,
 * scatter_add and the grouped linear; and 1.12's softcap (Gemma 2's logits).
 *
 * add, gather and scatter_add take fp32 or fp16 rows (fp16 widened a block or
 * a row at a time, the arithmetic in fp32), rows spread over the pool.  The
 * grouped linear is the linear op (linear.c) once per group on views of the
 * group's rows, so a group's result is bit for bit that of a plain linear. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/half.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>

#define CB_ADD_BLOCK 256 /* add on fp16: columns widened at a time, on the stack */

/* ---- add ------------------------------------------------------------------------ */

static void cb_add_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fg_add_args *a = arg;
	int64_t cols = a->x.cols;
	float alpha = a->alpha, beta = a->beta;

	(void)tid;
	/* Each element (block, for fp16) is read before out's is written: out may
	 * be x or y. */
	if (a->x.dtype == FG_DTYPE_F32) {
		for (int64_t r = b; r < e; r++) {
			const float *x = (const float *)a->x.data + r * a->x.ld;
			const float *y = a->y.data ? (const float *)a->y.data + r * a->y.ld : NULL;
			float *o = (float *)a->out.data + r * a->out.ld;

			if (y)
				for (int64_t j = 0; j < cols; j++)
					o[j] = alpha * x[j] + beta * y[j];
			else
				for (int64_t j = 0; j < cols; j++)
					o[j] = alpha * x[j];
		}
		return;
	}
	for (int64_t r = b; r < e; r++) {
		const uint16_t *x = (const uint16_t *)a->x.data + r * a->x.ld;
		const uint16_t *y = a->y.data ? (const uint16_t *)a->y.data + r * a->y.ld : NULL;
		uint16_t *o = (uint16_t *)a->out.data + r * a->out.ld;

		for (int64_t j0 = 0; j0 < cols; j0 += CB_ADD_BLOCK) {
			size_t w = (size_t)(cols - j0 < CB_ADD_BLOCK ? cols - j0 : CB_ADD_BLOCK);
			float xf[CB_ADD_BLOCK], yf[CB_ADD_BLOCK];

			fg_fp16_simd_to_f32(xf, x + j0, w);
			if (y) {
				fg_fp16_simd_to_f32(yf, y + j0, w);
				for (size_t j = 0; j < w; j++)
					xf[j] = alpha * xf[j] + beta * yf[j];
			} else {
				for (size_t j = 0; j < w; j++)
					xf[j] = alpha * xf[j];
			}
			fg_fp16_simd_from_f32(o + j0, xf, w);
		}
	}
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_add(void *ctx, void *stream, const struct fg_add_args *a)
{
	struct cpu_blas_ctx *c = ctx;

	(void)stream;
	if (a->x.rows == 0 || a->x.cols == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, a->x.rows, 1 + 32768 / a->x.cols, cb_add_rows, (void *)a);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- route ------------------------------------------------------------------------ */

static inline float cb_logit(const struct fg_tensor *t, const void *row, int64_t j)
{
	return t->dtype == FG_DTYPE_F32 ? ((const float *)row)[j] :
					  fg_half_to_float(((const uint16_t *)row)[j]);
}

/* A logit's share before normalising, against the row's largest m (> -inf):
 * exp(v - m) in double for a finite m; with m = +inf the +inf logits share
 * equally (the limit of the softmax, as fgcore/logprob.h has it), the rest
 * get nothing.  Never NaN: v <= m, and v = m = +inf gives 1. */
static inline double cb_route_share(float v, float m)
{
	if (m == INFINITY)
		return v == INFINITY ? 1.0 : 0.0;
	return exp((double)v - (double)m);
}

/* Per row: the k largest logits by insertion (a later id moves ahead only of
 * strictly smaller logits, so ties keep the lower id first), then their
 * shares over the sum of the k (renormalize) or of the whole row.  The
 * largest share is 1, so the sum is >= 1.  A row with a NaN, or with no
 * logit above -inf (no distribution: overflow upstream, as argmax's -1 of
 * minor 7), chooses ids -1 with weights 0. */
static void cb_route_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fg_route_args *a = arg;
	const struct fg_tensor *t = &a->logits;
	int64_t n = t->cols, es = fg_dtype_size(t->dtype);
	int k = a->k;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		const void *row = (const char *)t->data + r * t->ld * es;
		int32_t *ids = a->ids + r * k;
		float *wt = a->weights + r * k;
		float top[FG_ROUTE_TOP_MAX] = { -INFINITY }, m;
		int held = 0, bad = 0;
		double z = 0;

		for (int64_t j = 0; j < n; j++) {
			float v = cb_logit(t, row, j);
			int p;

			if (v != v) {
				bad = 1;
				break;
			}
			if (held == k && !(v > top[k - 1]))
				continue;
			p = held < k ? held++ : k - 1;
			for (; p > 0 && v > top[p - 1]; p--) {
				top[p] = top[p - 1];
				ids[p] = ids[p - 1];
			}
			top[p] = v;
			ids[p] = (int32_t)j;
		}
		if (bad || top[0] == -INFINITY) {
			for (int i = 0; i < k; i++) {
				ids[i] = -1;
				wt[i] = 0.0f;
			}
			continue;
		}
		m = top[0];
		if (a->renormalize)
			for (int i = 0; i < k; i++)
				z += cb_route_share(top[i], m);
		else
			for (int64_t j = 0; j < n; j++)
				z += cb_route_share(cb_logit(t, row, j), m);
		for (int i = 0; i < k; i++)
			wt[i] = (float)(cb_route_share(top[i], m) / z);
	}
}

/* The core checked the arguments: 1 <= k <= min(experts, FG_ROUTE_TOP_MAX). */
int cpu_blas_route(void *ctx, void *stream, const struct fg_route_args *a)
{
	struct cpu_blas_ctx *c = ctx;

	(void)stream;
	if (a->logits.rows == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, a->logits.rows, 1 + 16384 / a->logits.cols, cb_route_rows,
			  (void *)a);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- gather ----------------------------------------------------------------------- */

static void cb_gather_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fg_gather_args *a = arg;
	size_t es = fg_dtype_size(a->x.dtype), len = (size_t)a->x.cols * es;

	(void)tid;
	for (int64_t i = b; i < e; i++)
		memcpy((char *)a->out.data + (size_t)(i * a->out.ld) * es,
		       (const char *)a->x.data + (size_t)(a->index[i] * a->x.ld) * es, len);
}

/* The core checked the arguments: indices in range, out apart from x. */
int cpu_blas_gather(void *ctx, void *stream, const struct fg_gather_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	int64_t bytes = a->x.cols * (int64_t)fg_dtype_size(a->x.dtype);

	(void)stream;
	if (a->n == 0 || bytes == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, a->n, 1 + 65536 / bytes, cb_gather_rows, (void *)a);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- scatter_add ------------------------------------------------------------------- */

/* The terms sorted by target row (a counting sort, stable, so i increases
 * within a row): each task owns whole rows of out, and no two threads ever
 * add into one row. */
struct cb_scatter {
	struct cpu_blas_ctx *c;
	const struct fg_scatter_add_args *a;
	const int64_t *start; /* out.rows + 1: row r's terms are order[start[r] .. start[r + 1]) */
	const int64_t *order;
};

static void cb_scatter_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_scatter *S = arg;
	const struct fg_scatter_add_args *a = S->a;
	int64_t cols = a->y.cols;
	int f32 = a->y.dtype == FG_DTYPE_F32;
	float *acc = S->c->scratch[tid], *tmp = acc + cols;

	for (int64_t r = b; r < e; r++) {
		int64_t t0 = S->start[r], t1 = S->start[r + 1];

		if (t0 == t1)
			continue; /* no index names it: left alone */
		/* The sum starts at its first term (not 0 + term: -0 stays -0). */
		for (int64_t t = t0; t < t1; t++) {
			int64_t i = S->order[t];
			float w = a->weight ? a->weight[i] : 1.0f;
			const float *y;

			if (f32) {
				y = (const float *)a->y.data + i * a->y.ld;
			} else {
				fg_fp16_simd_to_f32(tmp, (const uint16_t *)a->y.data + i * a->y.ld,
						    (size_t)cols);
				y = tmp;
			}
			if (t == t0)
				for (int64_t j = 0; j < cols; j++)
					acc[j] = w * y[j];
			else
				for (int64_t j = 0; j < cols; j++)
					acc[j] += w * y[j];
		}
		/* out + sum in fp32, rounded to out's type once. */
		if (f32) {
			float *o = (float *)a->out.data + r * a->out.ld;

			for (int64_t j = 0; j < cols; j++)
				o[j] += acc[j];
		} else {
			uint16_t *o = (uint16_t *)a->out.data + r * a->out.ld;

			fg_fp16_simd_to_f32(tmp, o, (size_t)cols);
			for (int64_t j = 0; j < cols; j++)
				tmp[j] += acc[j];
			fg_fp16_simd_from_f32(o, tmp, (size_t)cols);
		}
	}
}

/* The core checked the arguments: indices in range, finite weights, out
 * apart from y. */
int cpu_blas_scatter_add(void *ctx, void *stream, const struct fg_scatter_add_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_scatter S = { .c = c, .a = a };
	int64_t rows = a->out.rows, cols = a->y.cols, *start, *order;
	int rc;

	(void)stream;
	if (a->n == 0 || cols == 0)
		return 0;
	start = calloc((size_t)(rows + 1 + a->n), sizeof(*start));
	if (!start) {
		fg_error(c->host, "cpu_blas: scatter_add: out of memory for the order of %" PRId64
			 " rows", a->n);
		return -ENOMEM;
	}
	order = start + rows + 1;
	/* Count into start[r + 1], sum into starts, place (start[r] moving to
	 * the end of row r), then shift back. */
	for (int64_t i = 0; i < a->n; i++)
		start[a->index[i] + 1]++;
	for (int64_t r = 0; r < rows; r++)
		start[r + 1] += start[r];
	for (int64_t i = 0; i < a->n; i++)
		order[start[a->index[i]]++] = i;
	memmove(start + 1, start, (size_t)rows * sizeof(*start));
	start[0] = 0;
	S.start = start;
	S.order = order;

	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, 2 * (size_t)cols);
	if (!rc)
		cpu_blas_pool_run(c->pool, rows, 1 + 16384 / cols, cb_scatter_rows, &S);
	pthread_mutex_unlock(&c->lock);
	free(start);
	return rc;
}

/* ---- grouped linear ------------------------------------------------------------------ */

/* Rows [r0, r0 + rows) of t, a view of its own. */
static struct fg_tensor cb_rows_of(const struct fg_tensor *t, int64_t r0, int64_t rows)
{
	struct fg_tensor v = *t;

	v.data = (char *)t->data + (size_t)(r0 * t->ld) * fg_dtype_size(t->dtype);
	v.rows = rows;
	return v;
}

/* The core checked the arguments: offsets from 0 to m, never decreasing,
 * every w[g] of one shape and type.  cpu_blas_linear takes the lock itself. */
int cpu_blas_linear_grouped(void *ctx, void *stream, const struct fg_linear_grouped_args *a)
{
	for (int32_t g = 0; g < a->groups; g++) {
		int64_t r0 = a->offset[g], rows = a->offset[g + 1] - r0;
		struct fg_linear_args L = { .w = a->w[g], .act = a->act };
		int rc;

		if (rows == 0)
			continue;
		L.x = cb_rows_of(&a->x, r0, rows);
		L.out = cb_rows_of(&a->out, r0, rows);
		if (a->bias)
			L.bias = a->bias[g];
		if (a->mul.data)
			L.mul = cb_rows_of(&a->mul, r0, rows);
		rc = cpu_blas_linear(ctx, stream, &L);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- softcap (compute ABI 1.12) --------------------------------------------------- */

/* cap * tanh(x / cap) in fp32, in the order Hugging Face's Gemma 2 takes it
 * (divide, tanh, multiply). */
static void cb_softcap_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fg_softcap_args *a = arg;
	int64_t cols = a->x.cols;
	float cap = a->cap;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		if (a->x.dtype == FG_DTYPE_F32) {
			const float *x = (const float *)a->x.data + r * a->x.ld;
			float *o = (float *)a->out.data + r * a->out.ld;

			for (int64_t j = 0; j < cols; j++)
				o[j] = tanhf(x[j] / cap) * cap;
			continue;
		}
		const uint16_t *x = (const uint16_t *)a->x.data + r * a->x.ld;
		uint16_t *o = (uint16_t *)a->out.data + r * a->out.ld;

		for (int64_t j = 0; j < cols; j++)
			o[j] = fg_float_to_half(tanhf(fg_half_to_float(x[j]) / cap) * cap);
	}
}

/* The core checked the arguments: one shape and plain type, out x or apart. */
int cpu_blas_softcap(void *ctx, void *stream, const struct fg_softcap_args *a)
{
	struct cpu_blas_ctx *c = ctx;

	(void)stream;
	if (a->x.rows == 0 || a->x.cols == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, a->x.rows, 1 + 16384 / a->x.cols, cb_softcap_rows, (void *)a);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
