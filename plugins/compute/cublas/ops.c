/* plugins/compute/cublas/ops.c - embedding, layer norm, KV append and
 * attention: argument checks (as cpu_blas does them) and kernel launches. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include <fgcore/q4.h>

#include "plugins/compute/cublas/cublas_int.h"
#include "plugins/compute/cublas/kernels.h"

static int cb_launched(struct cublas_ctx *c, const char *op, cudaError_t e)
{
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "kernel launch", e);
}

/* ---- embed ------------------------------------------------------------------------------ */

int cublas_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "embed";
	void *dids, *dpos;
	int64_t h;
	int rc;

	if (!a) {
		fg_error(c->host, "cublas: embed: NULL arguments");
		return -EINVAL;
	}
	if (a->n < 0 || a->n > INT64_MAX / 8) {
		fg_error(c->host, "cublas: embed: n = %" PRId64 " is out of range", a->n);
		return -EINVAL;
	}
	h = a->tok.cols;
	if ((rc = cublas_check_tensor(c, op, "tok", &a->tok, FG_DTYPE_F16, -1, -1)) ||
	    (rc = cublas_check_tensor(c, op, "pos", &a->pos, FG_DTYPE_F16, -1, h)) ||
	    (rc = cublas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F16, a->n, h)))
		return rc;
	if (a->n == 0)
		return 0;
	if (!a->ids || !a->positions) {
		fg_error(c->host, "cublas: embed: ids or positions is NULL");
		return -EINVAL;
	}
	/* Checked on the host: the kernel trusts them as row indices. */
	for (int64_t i = 0; i < a->n; i++) {
		if (a->ids[i] < 0 || a->ids[i] >= a->tok.rows) {
			fg_error(c->host, "cublas: embed: ids[%" PRId64 "] = %" PRId32
				 " is outside the vocabulary [0, %" PRId64 ")", i, a->ids[i],
				 a->tok.rows);
			return -EINVAL;
		}
		if (a->positions[i] < 0 || a->positions[i] >= a->pos.rows) {
			fg_error(c->host, "cublas: embed: positions[%" PRId64 "] = %" PRId32
				 " is outside the position table [0, %" PRId64 ")", i,
				 a->positions[i], a->pos.rows);
			return -EINVAL;
		}
	}
	if (cublas_overlap(&a->out, &a->tok) || cublas_overlap(&a->out, &a->pos)) {
		fg_error(c->host, "cublas: embed: out overlaps the embedding tables");
		return -EINVAL;
	}
	if (h == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, a->ids, (size_t)a->n * sizeof(int32_t), a->positions,
			  (size_t)a->n * sizeof(int32_t), &dids, &dpos);
	if (!rc)
		rc = cb_launched(c, op, cublas_k_embed(s->s, a->n, h, dids, dpos, a->tok.data,
						       a->tok.ld, a->pos.data, a->pos.ld,
						       a->out.data, a->out.ld));
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- layer norm ------------------------------------------------------------------------ */

int cublas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "layer_norm";
	int64_t n, h;
	int rc;

	if (!a) {
		fg_error(c->host, "cublas: layer_norm: NULL arguments");
		return -EINVAL;
	}
	n = a->x.rows;
	h = a->x.cols;
	if ((rc = cublas_check_tensor(c, op, "x", &a->x, FG_DTYPE_F16, -1, -1)) ||
	    (rc = cublas_check_tensor(c, op, "gamma", &a->gamma, FG_DTYPE_F16, 1, h)) ||
	    (rc = cublas_check_tensor(c, op, "beta", &a->beta, FG_DTYPE_F16, 1, h)) ||
	    (rc = cublas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F16, n, h)))
		return rc;
	if (!isfinite(a->eps) || a->eps < 0) {
		fg_error(c->host, "cublas: layer_norm: eps = %g, expected a finite value >= 0",
			 (double)a->eps);
		return -EINVAL;
	}
	if (cublas_overlap(&a->out, &a->x) && !cublas_same(&a->out, &a->x)) {
		fg_error(c->host, "cublas: layer_norm: out partly overlaps x; pass the same view "
			 "for both or separate buffers");
		return -EINVAL;
	}
	if (cublas_overlap(&a->out, &a->gamma) || cublas_overlap(&a->out, &a->beta)) {
		fg_error(c->host, "cublas: layer_norm: out overlaps gamma or beta");
		return -EINVAL;
	}
	if (n == 0 || h == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	return cb_launched(c, op, cublas_k_layer_norm(s->s, n, h, a->x.data, a->x.ld,
						      a->gamma.data, a->beta.data, a->eps,
						      a->out.data, a->out.ld));
}

/* ---- KV append ------------------------------------------------------------------------- */

int cublas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "kv_append";
	int q4;
	int64_t h;
	int rc;

	if (!a) {
		fg_error(c->host, "cublas: kv_append: NULL arguments");
		return -EINVAL;
	}
	if (a->batch < 0 || a->n < 0 || a->start < 0 || a->cache_stride < 0 ||
	    a->start > a->cache_stride || a->n > a->cache_stride - a->start) {
		fg_error(c->host, "cublas: kv_append: batch %" PRId64 ", n %" PRId64 ", start %"
			 PRId64 ", cache_stride %" PRId64 ": need 0 <= start and start + n <= "
			 "cache_stride", a->batch, a->n, a->start, a->cache_stride);
		return -EINVAL;
	}
	if ((a->n && a->batch > INT64_MAX / 8 / a->n) ||
	    (a->cache_stride && a->batch > INT64_MAX / 8 / a->cache_stride)) {
		fg_error(c->host, "cublas: kv_append: batch %" PRId64 " is too large", a->batch);
		return -EINVAL;
	}
	h = a->src.cols;
	q4 = a->cache.dtype == FG_DTYPE_Q4_COLS;
	if ((rc = cublas_check_tensor(c, op, "src", &a->src, FG_DTYPE_F16, a->batch * a->n, -1)))
		return rc;
	if (q4)
		rc = cublas_check_q4(c, op, "cache", &a->cache, FG_DTYPE_Q4_COLS, -1, h);
	else
		rc = cublas_check_tensor(c, op, "cache", &a->cache, FG_DTYPE_F16, -1, h);
	if (rc)
		return rc;
	if (a->cache.rows < a->batch * a->cache_stride) {
		fg_error(c->host, "cublas: kv_append: cache has %" PRId64 " rows, fewer than "
			 "batch * cache_stride = %" PRId64, a->cache.rows,
			 a->batch * a->cache_stride);
		return -EINVAL;
	}
	if (cublas_overlap(&a->src, &a->cache)) {
		fg_error(c->host, "cublas: kv_append: src overlaps the cache; copy from a separate "
			 "buffer");
		return -EINVAL;
	}
	if (h == 0 || a->batch == 0 || a->n == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	if (q4)
		return cb_launched(c, op, cublas_k_kv_append_q4(s->s, a->batch, a->n, a->start,
								a->cache_stride, h, a->src.data,
								a->src.ld, a->cache.data,
								a->cache.rows));
	return cb_launched(c, op, cublas_k_kv_append(s->s, a->batch, a->n, a->start,
						     a->cache_stride, h, a->src.data, a->src.ld,
						     a->cache.data, a->cache.ld));
}

/* ---- attention ------------------------------------------------------------------------- */

static int cb_attention(struct cublas_ctx *c, void *stream, const struct fg_attention_args *a,
			int decode)
{
	const char *op = decode ? "attention_decode" : "attention_prefill";
	struct cublas_stream *s = cublas_stream_of(c, stream);
	struct cublas_attn k;
	int64_t hcols, qrows, kvrows, keys;
	int q4 = 0, rc;
	void *dpad;
	cudaError_t e;

	if (!a) {
		fg_error(c->host, "cublas: %s: NULL arguments", op);
		return -EINVAL;
	}
	if (a->batch < 0 || a->seq < 0 || a->heads < 0 || a->head_dim < 0 ||
	    (a->heads && a->head_dim > INT64_MAX / 8 / a->heads)) {
		fg_error(c->host, "cublas: %s: batch %" PRId64 ", seq %" PRId64 ", heads %" PRId64
			 ", head_dim %" PRId64 ": need non-negative sizes", op, a->batch, a->seq,
			 a->heads, a->head_dim);
		return -EINVAL;
	}
	hcols = a->heads * a->head_dim;
	if (decode) {
		if (a->seq != 1 || a->len < 1 || a->cache_stride < a->len ||
		    (a->batch && a->cache_stride > INT64_MAX / 8 / a->batch)) {
			fg_error(c->host, "cublas: %s: seq %" PRId64 ", len %" PRId64
				 ", cache_stride %" PRId64 ": need seq == 1 and "
				 "1 <= len <= cache_stride", op, a->seq, a->len, a->cache_stride);
			return -EINVAL;
		}
		qrows = a->batch;
		kvrows = a->batch * a->cache_stride;
		keys = a->len;
		q4 = a->k.dtype == FG_DTYPE_Q4_COLS;
	} else {
		if (a->batch && a->seq > INT64_MAX / 8 / a->batch) {
			fg_error(c->host, "cublas: %s: batch * seq overflows", op);
			return -EINVAL;
		}
		qrows = kvrows = a->batch * a->seq;
		keys = a->seq;
	}
	if ((rc = cublas_check_tensor(c, op, "q", &a->q, FG_DTYPE_F16, qrows, hcols)) ||
	    (rc = cublas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F16, qrows, hcols)))
		return rc;
	if (q4) {
		if ((rc = cublas_check_q4(c, op, "k", &a->k, FG_DTYPE_Q4_COLS, -1, hcols)) ||
		    (rc = cublas_check_q4(c, op, "v", &a->v, FG_DTYPE_Q4_COLS, a->k.rows, hcols)))
			return rc;
	} else if ((rc = cublas_check_tensor(c, op, "k", &a->k, FG_DTYPE_F16, -1, hcols)) ||
		   (rc = cublas_check_tensor(c, op, "v", &a->v, FG_DTYPE_F16, -1, hcols))) {
		return rc;
	}
	if (a->k.rows < kvrows || a->v.rows < kvrows) {
		fg_error(c->host, "cublas: %s: k has %" PRId64 " and v %" PRId64 " rows, need %"
			 PRId64 "%s", op, a->k.rows, a->v.rows, kvrows,
			 decode ? " (batch * cache_stride)" : " (batch * seq)");
		return -EINVAL;
	}
	if (!isfinite(a->scale)) {
		fg_error(c->host, "cublas: %s: scale is not finite", op);
		return -EINVAL;
	}
	if (qrows == 0 || hcols == 0)
		return 0;
	if (!a->pad) {
		fg_error(c->host, "cublas: %s: pad is NULL, pass batch left-pad counts", op);
		return -EINVAL;
	}
	for (int64_t b = 0; b < a->batch; b++) {
		if (a->pad[b] < 0 || a->pad[b] > keys) {
			fg_error(c->host, "cublas: %s: pad[%" PRId64 "] = %" PRId32
				 " is outside [0, %" PRId64 "]", op, b, a->pad[b], keys);
			return -EINVAL;
		}
	}
	if ((cublas_overlap(&a->out, &a->q) && !cublas_same(&a->out, &a->q)) ||
	    cublas_overlap(&a->out, &a->k) || cublas_overlap(&a->out, &a->v)) {
		fg_error(c->host, "cublas: %s: out overlaps k or v (or part of q); use a separate "
			 "buffer", op);
		return -EINVAL;
	}
	if (a->head_dim > (decode ? CUBLAS_DECODE_MAX_D : CUBLAS_PREFILL_MAX_D)) {
		fg_error(c->host, "cublas: %s: head_dim %" PRId64 " is not supported (at most %d)",
			 op, a->head_dim, decode ? CUBLAS_DECODE_MAX_D : CUBLAS_PREFILL_MAX_D);
		return -ENOTSUP;
	}
	if (a->batch > 65535 || a->heads > 65535 || a->batch * a->heads > INT32_MAX) {
		fg_error(c->host, "cublas: %s: batch %" PRId64 " x heads %" PRId64 " exceeds the "
			 "launch grid; split the batch", op, a->batch, a->heads);
		return -ENOTSUP;
	}
	if ((rc = cublas_enter(c, op)))
		return rc;
	memset(&k, 0, sizeof(k));
	k.q = a->q.data;
	k.k = a->k.data;
	k.v = a->v.data;
	k.out = a->out.data;
	k.ldq = a->q.ld;
	k.ldk = a->k.ld;
	k.ldv = a->v.ld;
	k.ldo = a->out.ld;
	k.kv_rows = a->k.rows;
	k.batch = a->batch;
	k.seq = a->seq;
	k.len = a->len;
	k.stride = a->cache_stride;
	k.heads = a->heads;
	k.head_dim = a->head_dim;
	k.scale = a->scale;
	k.q4 = q4;
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, a->pad, (size_t)a->batch * sizeof(int32_t), NULL, 0, &dpad,
			  NULL);
	if (!rc) {
		k.pad = dpad;
		if (decode) {
			size_t floats;
			int splits = cublas_decode_splits(&k, c->sms, c->scratch_bytes / 4, &floats);

			if (floats > c->scratch_bytes / 4) {
				fg_error(c->host, "cublas: %s: %zu bytes of split partials do not fit "
					 "the %zu-byte scratch; raise `scratch`", op, floats * 4,
					 c->scratch_bytes);
				rc = -ENOMEM;
			} else {
				e = cublas_k_attention_decode(s->s, &k, splits, s->scratch);
				rc = cb_launched(c, op, e);
			}
		} else {
			rc = cb_launched(c, op, cublas_k_attention_prefill(s->s, &k));
		}
	}
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int cublas_attention_prefill(void *ctx, void *stream, const struct fg_attention_args *a)
{
	return cb_attention(ctx, stream, a, 0);
}

int cublas_attention_decode(void *ctx, void *stream, const struct fg_attention_args *a)
{
	return cb_attention(ctx, stream, a, 1);
}
