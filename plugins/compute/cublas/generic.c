/* plugins/compute/cublas/generic.c - the generic tier (compute ABI 1.10:
 * add, route, gather, scatter_add, the grouped linear; 1.12: softcap;
 * 1.13: experts): host arrays staged, kernels launched (k_generic.cu).
 *
 * The grouped linear is cublas_linear once per group on views of the
 * group's rows, so each group is computed exactly as a plain linear.
 * scatter_add is regrouped here by output row, so that the device sums
 * each row's terms in the op's order (no atomics: the same bits every run). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/q4.h>

#include "plugins/compute/cublas/cublas_int.h"
#include "plugins/compute/cublas/kernels.h"

/* Rows [first, first + n) of a plain tensor. */
static struct fg_tensor cg_rows(struct fg_tensor t, int64_t first, int64_t n)
{
	t.data = (char *)t.data + (size_t)(first * t.ld) * fg_dtype_size(t.dtype);
	t.rows = n;
	return t;
}

static int cg_launched(struct cublas_ctx *c, const char *op, cudaError_t e)
{
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "kernel launch", e);
}

int cublas_add(void *ctx, void *stream, const struct fg_add_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	struct cublas_add k = {
		.rows = a->x.rows, .cols = a->x.cols, .x = a->x.data, .y = a->y.data,
		.out = a->out.data, .ldx = a->x.ld, .ldy = a->y.ld, .ldo = a->out.ld,
		.alpha = a->alpha, .beta = a->beta, .x_f32 = a->x.dtype == FG_DTYPE_F32,
		.y_f32 = a->y.dtype == FG_DTYPE_F32,
	};
	int rc;

	if (k.rows == 0 || k.cols == 0)
		return 0;
	if ((rc = cublas_enter(c, "add")))
		return rc;
	return cg_launched(c, "add", cublas_k_add(s->s, &k));
}

int cublas_softcap(void *ctx, void *stream, const struct fg_softcap_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	int rc;

	if (a->x.rows == 0 || a->x.cols == 0)
		return 0;
	if ((rc = cublas_enter(c, "softcap")))
		return rc;
	return cg_launched(c, "softcap",
			   cublas_k_softcap(s->s, a->x.rows, a->x.cols, a->x.data, a->x.ld,
					    a->x.dtype == FG_DTYPE_F32, a->cap, a->out.data,
					    a->out.ld));
}

/* The choices go to the host at once (the core picks the experts from
 * them): rows go through the stream's scratch a band at a time. */
int cublas_route(void *ctx, void *stream, const struct fg_route_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "route";
	int64_t rows = a->logits.rows, k = a->k, es = fg_dtype_size(a->logits.dtype);
	int64_t band = (int64_t)(c->scratch_bytes / ((size_t)k * 8));
	cudaError_t e = cudaSuccess;
	int rc;

	if (rows == 0)
		return 0;
	if (s->g.on) {
		fg_error(c->host, "cublas: %s: its choices return to the host, which a graph being "
			 "recorded cannot do", op);
		return -ENOTSUP;
	}
	if (band < 1) {
		fg_error(c->host, "cublas: %s: scratch of %zu bytes cannot hold one row's choices; "
			 "raise `scratch`", op, c->scratch_bytes);
		return -ENOMEM;
	}
	if ((rc = cublas_enter(c, op)))
		return rc;
	for (int64_t r0 = 0; r0 < rows && e == cudaSuccess; r0 += band) {
		int64_t nr = rows - r0 < band ? rows - r0 : band;
		int32_t *dids = s->scratch;
		float *dwt = (float *)(dids + nr * k);

		e = cublas_k_route(s->s, nr, a->logits.cols,
				   (const char *)a->logits.data + r0 * a->logits.ld * es,
				   a->logits.ld, a->logits.dtype == FG_DTYPE_F32, (int)k,
				   a->renormalize, dids, dwt);
		if (e != cudaSuccess)
			return cg_launched(c, op, e);
		e = cudaMemcpyAsync(a->ids + r0 * k, dids, (size_t)(nr * k) * sizeof(int32_t),
				    cudaMemcpyDeviceToHost, s->s);
		if (e == cudaSuccess)
			e = cudaMemcpyAsync(a->weights + r0 * k, dwt, (size_t)(nr * k) * sizeof(float),
					    cudaMemcpyDeviceToHost, s->s);
		if (e == cudaSuccess) /* (the next band reuses the scratch) */
			e = cudaStreamSynchronize(s->s);
	}
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "copying the choices out", e);
}

int cublas_gather(void *ctx, void *stream, const struct fg_gather_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "gather";
	void *didx;
	int rc;

	if (a->n == 0 || a->x.cols == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, a->index, (size_t)a->n * sizeof(int32_t), NULL, 0, &didx, NULL);
	if (!rc)
		rc = cg_launched(c, op, cublas_k_gather(s->s, a->n, a->x.cols, a->x.data, a->x.ld,
							a->x.dtype == FG_DTYPE_F32, didx,
							a->out.data, a->out.ld));
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int cublas_scatter_add(void *ctx, void *stream, const struct fg_scatter_add_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "scatter_add";
	int64_t n = a->n, out_rows = a->out.rows, nrows = 0;
	int32_t *count = NULL, *buf = NULL;
	struct cublas_scatter k;
	void *dev;
	int rc;

	if (n == 0 || a->y.cols == 0)
		return 0;
	/* By output row: its terms' positions in the op's order.  buf holds
	 * rows [nrows], start [nrows + 1], term [n], weight [n]. */
	count = calloc((size_t)out_rows, sizeof(*count));
	buf = malloc((size_t)(2 * out_rows + 1 + 2 * n) * sizeof(*buf));
	if (!count || !buf) {
		free(count);
		free(buf);
		fg_error(c->host, "cublas: %s: out of host memory for %" PRId64 " terms", op, n);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < n; i++)
		count[a->index[i]]++;
	for (int64_t r = 0; r < out_rows; r++)
		if (count[r])
			buf[nrows++] = (int32_t)r;
	int32_t *start = buf + nrows, *term = start + nrows + 1;
	float *weight = (float *)(term + n);
	start[0] = 0;
	for (int64_t t = 0; t < nrows; t++) {
		int32_t r = buf[t];

		start[t + 1] = start[t] + count[r];
		count[r] = start[t]; /* from here: the next free place of row r's terms */
	}
	for (int64_t i = 0; i < n; i++) {
		int32_t u = count[a->index[i]]++;

		term[u] = (int32_t)i;
		weight[u] = a->weight ? a->weight[i] : 1.0f;
	}
	free(count);
	if ((rc = cublas_enter(c, op))) {
		free(buf);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, buf, (size_t)(2 * nrows + 1 + 2 * n) * sizeof(*buf), NULL, 0,
			  &dev, NULL);
	if (!rc) {
		int32_t *d = dev;

		memset(&k, 0, sizeof(k));
		k.nrows = nrows;
		k.cols = a->y.cols;
		k.rows = d;
		k.start = d + nrows;
		k.term = d + 2 * nrows + 1;
		k.weight = (const float *)(d + 2 * nrows + 1 + n);
		k.y = a->y.data;
		k.out = a->out.data;
		k.ldy = a->y.ld;
		k.ldo = a->out.ld;
		k.y_f32 = a->y.dtype == FG_DTYPE_F32;
		k.out_f32 = a->out.dtype == FG_DTYPE_F32;
		rc = cg_launched(c, op, cublas_k_scatter_add(s->s, &k));
	}
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	free(buf);
	return rc;
}

int cublas_linear_grouped(void *ctx, void *stream, const struct fg_linear_grouped_args *a)
{
	int rc = 0;

	for (int32_t g = 0; g < a->groups && !rc; g++) {
		int64_t r0 = a->offset[g], nr = a->offset[g + 1] - r0;
		struct fg_linear_args l;

		if (nr == 0)
			continue;
		memset(&l, 0, sizeof(l));
		l.x = cg_rows(a->x, r0, nr);
		l.w = a->w[g];
		if (a->bias)
			l.bias = a->bias[g];
		l.act = a->act;
		l.out = cg_rows(a->out, r0, nr);
		if (a->mul.data)
			l.mul = cg_rows(a->mul, r0, nr);
		rc = cublas_linear(ctx, stream, &l);
	}
	return rc;
}

/* The experts op (compute 1.13) for 4-bit experts: routed, grouped,
 * gathered, multiplied and summed on the device, in order on the stream
 * (nothing returns to the host).  The router's choices and the grouping
 * live in the stream's scratch; the experts' weight addresses are staged.
 * Declined (the core composes the generic ops, which route on the host):
 * fp16 experts, more rows an expert on average than the fused kernel
 * takes (prefill: the composition's per-expert products use cuBLASLt), and
 * operands the fused kernel cannot read. */
int cublas_experts(void *ctx, void *stream, const struct fg_experts_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "experts";
	int64_t rows = a->x.rows, k = a->k, ne = a->experts, m = rows * k;
	int64_t hidden = a->x.cols, ffn = a->w_gate[0].rows, mean = (m + ne - 1) / ne;
	size_t need = (size_t)(5 * m + rows + ne + 1) * sizeof(int32_t);
	const void **wp;
	void *dev;
	int rc;

	/* (the grouping block keeps experts + 1 offsets in shared memory) */
	if (a->w_gate[0].dtype != FG_DTYPE_Q4_ROWS || mean > c->q4_fused_max_m || ne > 8192 ||
	    need > c->scratch_bytes || hidden % 32 || ffn % 32 || a->xg.ld % 8 ||
	    a->gate.ld % 8 || a->up.ld % 8 ||
	    (((uintptr_t)a->xg.data | (uintptr_t)a->gate.data | (uintptr_t)a->up.data) & 15) ||
	    rows > 65535 * 8 || (hidden + FG_Q4_GROUP - 1) / FG_Q4_GROUP > 65535 ||
	    (ffn + FG_Q4_GROUP - 1) / FG_Q4_GROUP > 65535)
		return -ENOTSUP;
	for (int64_t e = 0; e < ne; e++)
		if (((uintptr_t)a->w_gate[e].data | (uintptr_t)a->w_up[e].data |
		     (uintptr_t)a->w_down[e].data) & 15)
			return -ENOTSUP;
	wp = malloc((size_t)(3 * ne) * sizeof(*wp));
	if (!wp) {
		fg_error(c->host, "cublas: %s: out of host memory for %" PRId64 " experts", op, ne);
		return -ENOMEM;
	}
	for (int64_t e = 0; e < ne; e++) {
		wp[e] = a->w_gate[e].data;
		wp[ne + e] = a->w_up[e].data;
		wp[2 * ne + e] = a->w_down[e].data;
	}
	if ((rc = cublas_enter(c, op))) {
		free(wp);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, wp, (size_t)(3 * ne) * sizeof(*wp), NULL, 0, &dev, NULL);
	if (!rc) {
		const void *const *dw = dev;
		int32_t *sc = s->scratch;
		struct cublas_moe g = {
			.rows = rows, .k = (int)k, .experts = (int)ne, .ids = sc,
			.wt = (const float *)(sc + m), .row = sc + 2 * m, .term = sc + 3 * m,
			.tw = (float *)(sc + 4 * m), .cnt = sc + 5 * m, .off = sc + 5 * m + rows,
		};
		struct cublas_epi none = { 0 }, silu = { 0 };
		int f32 = a->logits.dtype == FG_DTYPE_F32;
		cudaError_t e;

		silu.act = FG_ACT_SILU;
		silu.mul = a->up.data;
		silu.ldm = a->up.ld;
		e = cublas_k_route(s->s, rows, ne, a->logits.data, a->logits.ld, f32, (int)k,
				   a->renormalize, (int32_t *)g.ids, (float *)g.wt);
		if (e == cudaSuccess)
			e = cublas_k_moe_group(s->s, &g);
		if (e == cudaSuccess)
			e = cublas_k_moe_gather(s->s, &g, hidden, a->x.data, a->x.ld,
						a->x.dtype == FG_DTYPE_F32, a->xg.data, a->xg.ld);
		/* up = xg w3ᵀ; gate = silu(xg w1ᵀ) ⊙ up; xg = gate w2ᵀ (xg is read by then) */
		if (e == cudaSuccess)
			e = cublas_k_q4_grouped(s->s, rows, mean, ffn, hidden, a->xg.data, a->xg.ld,
						dw + ne, g.off, (int)ne, &none, a->up.data, a->up.ld);
		if (e == cudaSuccess)
			e = cublas_k_q4_grouped(s->s, rows, mean, ffn, hidden, a->xg.data, a->xg.ld,
						dw, g.off, (int)ne, &silu, a->gate.data, a->gate.ld);
		if (e == cudaSuccess)
			e = cublas_k_q4_grouped(s->s, rows, mean, hidden, ffn, a->gate.data,
						a->gate.ld, dw + 2 * ne, g.off, (int)ne, &none,
						a->xg.data, a->xg.ld);
		if (e == cudaSuccess)
			e = cublas_k_moe_combine(s->s, &g, hidden, a->xg.data, a->xg.ld, a->out.data,
						 a->out.ld, a->out.dtype == FG_DTYPE_F32);
		if (e != cudaSuccess)
			rc = cg_launched(c, op, e);
	}
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	free(wp);
	return rc;
}
