/* plugins/compute/cublas/ops.c - embedding, layer and RMS norm, rotary
 * embedding, KV append and attention: kernel launches.  The core validated
 * the arguments against fgcore/compute.h; what is checked here are the
 * kernels' own limits (head_dim, launch grid, alignment, scratch). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

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
	int with_pos = a->pos.data != NULL;
	void *dids, *dpos = NULL;
	int64_t h = a->tok.cols;
	int rc;

	if (a->n == 0 || h == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, a->ids, (size_t)a->n * sizeof(int32_t),
			  with_pos ? a->positions : NULL,
			  with_pos ? (size_t)a->n * sizeof(int32_t) : 0, &dids, &dpos);
	if (!rc)
		rc = cb_launched(c, op, cublas_k_embed(s->s, a->n, h, dids,
						       with_pos ? dpos : NULL, a->tok.data,
						       a->tok.ld, with_pos ? a->pos.data : NULL,
						       a->pos.ld, a->out.data,
						       a->out.dtype == FG_DTYPE_F32, a->out.ld));
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- layer norm, RMS norm --------------------------------------------------------------- */

int cublas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = a->kind == FG_NORM_RMS ? "rms_norm" : "layer_norm";
	int64_t n = a->x.rows, h = a->x.cols;
	int rc;

	if (n == 0 || h == 0)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	return cb_launched(c, op, cublas_k_layer_norm(s->s, n, h, a->x.data,
						      a->x.dtype == FG_DTYPE_F32, a->x.ld,
						      a->gamma.data, a->beta.data, a->eps,
						      a->gamma_shift, a->kind == FG_NORM_RMS,
						      a->out.data,
						      a->out.ld));
}

/* ---- rotary position embedding ------------------------------------------------------------ */

int cublas_rope(void *ctx, void *stream, const struct fg_rope_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "rope";
	void *dpos, *dinv;
	int rc;

	if (a->n == 0 || a->heads == 0 || a->rot_dim < 2)
		return 0;
	if ((rc = cublas_enter(c, op)))
		return rc;
	pthread_mutex_lock(&c->lock);
	rc = cublas_stage(c, s, op, a->positions, (size_t)a->n * sizeof(int32_t), a->inv_freq,
			  (size_t)(a->rot_dim / 2) * sizeof(float), &dpos, &dinv);
	if (!rc)
		rc = cb_launched(c, op, cublas_k_rope(s->s, a->n, a->heads, a->head_dim,
						      a->rot_dim, dpos, dinv, a->attn_factor,
						      a->x.data, a->x.ld));
	if (cublas_stage_done(c, s, op) && !rc)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- KV append ------------------------------------------------------------------------- */

int cublas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const char *op = "kv_append";
	int q4 = a->cache.dtype == FG_DTYPE_Q4_COLS, f8 = a->cache.dtype == FG_DTYPE_F8_COLS;
	int64_t h = a->src.cols;
	int rc;

	if (h == 0 || a->batch == 0 || a->n == 0)
		return 0;
	/* 32-bit stores of codes and (scale, min) pairs */
	if (q4 && (rc = cublas_need_align(c, op, "the 4-bit cache", a->cache.data, 4)))
		return rc;
	if ((rc = cublas_enter(c, op)))
		return rc;
	if (q4)
		return cb_launched(c, op, cublas_k_kv_append_q4(s->s, a->batch, a->n, a->start,
								a->cache_stride, h, a->src.data,
								a->src.ld, a->cache.data,
								a->cache.rows));
	if (f8) /* (byte stores; 4-byte scales where aligned, else bytes) */
		return cb_launched(c, op, cublas_k_kv_append_f8(s->s, a->batch, a->n, a->start,
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
	int64_t kvh = a->kv_heads ? a->kv_heads : a->heads;
	int q4 = decode && a->k.dtype == FG_DTYPE_Q4_COLS;
	int f8 = decode && a->k.dtype == FG_DTYPE_F8_COLS;
	int64_t maxd = decode ? CUBLAS_DECODE_MAX_D : CUBLAS_PREFILL_MAX_D;
	struct cublas_attn k;
	void *dpad;
	cudaError_t e;
	int rc;

	if (a->batch == 0 || a->heads == 0 || a->head_dim == 0 || (!decode && a->seq == 0))
		return 0;
	if (a->head_dim > maxd) {
		fg_error(c->host, "cublas: %s: head_dim %" PRId64 " is not supported (at most %"
			 PRId64 "); use the cpu_blas backend for this model", op, a->head_dim,
			 maxd);
		return -ENOTSUP;
	}
	/* prefill: grid (query blocks, heads, batch); decode: (batch * heads, splits) */
	if (decode ? a->batch > INT32_MAX / a->heads : (a->batch > 65535 || a->heads > 65535)) {
		fg_error(c->host, "cublas: %s: batch %" PRId64 " x heads %" PRId64 " exceeds the "
			 "launch grid; split the batch", op, a->batch, a->heads);
		return -ENOTSUP;
	}
	/* 32-bit loads of codes and (scale, min) pairs */
	if (q4 && ((rc = cublas_need_align(c, op, "the 4-bit k cache", a->k.data, 4)) ||
		   (rc = cublas_need_align(c, op, "the 4-bit v cache", a->v.data, 4))))
		return rc;
	/* one layout for both: where the (scale, min) pairs or scales start depends on rows */
	if ((q4 || f8) && a->k.rows != a->v.rows) {
		fg_error(c->host, "cublas: %s: the %s k cache has %" PRId64 " rows and v %"
			 PRId64 "; allocate both caches with the same shape", op,
			 q4 ? "4-bit" : "fp8", a->k.rows, a->v.rows);
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
	k.start = decode ? 0 : a->start;
	k.heads = a->heads;
	k.kv_heads = kvh;
	k.group = (int)(a->heads / kvh);
	k.head_dim = a->head_dim;
	k.scale = a->scale;
	k.q4 = q4;
	k.f8 = f8;
	k.ring = decode ? a->ring : 0;
	k.lo = k.ring && a->len > k.ring ? a->len - k.ring : 0;
	k.window = a->window;
	k.softcap = a->softcap;
	/* a window hides what precedes len - window (and a ring of at least
	 * the window then holds every position read: compute ABI 1.12) */
	if (decode && a->window && a->len - a->window > k.lo)
		k.lo = a->len - a->window;
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
