/* core/exec/host_attention.c - attention of the sequences whose cache
 * lives in host memory, computed there (cpu_cache_compute): only q, the new
 * K/V rows and the result cross tiers, never the cache (from a device, the
 * new rows of a plain cache cross straight into it).  A finished row
 * (fg_forward_set_live_rows) attends to no position: it reads no cache. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/exec/forward_int.h"
#include "core/util/clock.h"
#include "core/util/error.h"

/* The new K and V rows of host-cache sequences [s, s + cnt) straight from
 * the device into their cache rows (a plain cache of the activations' type;
 * a 4-bit one is encoded on the host): one copy per sequence, tensor and run
 * of columns (two where a window's ring wraps) where the rows are dense,
 * else one a row. */
static int fg_host_cache_copy(struct fg_forward *f, const struct fg_tensor *src,
			      const struct fg_tensor *dst, int64_t s, int64_t cnt, int64_t n)
{
	size_t row = (size_t)src->cols * f->asz;
	int dense = src->ld == src->cols && dst->ld == dst->cols;
	int64_t seg[2][2], skip, parts = fg_kv_columns(f, f->step, n, seg, &skip);
	int rc;

	for (int64_t i = 0; i < cnt; i++)
		for (int64_t p = 0, off = skip; p < parts; off += seg[p][1], p++)
			for (int64_t j = 0; j < seg[p][1]; j += dense ? seg[p][1] : 1) {
				int64_t to = (s + i) * f->cols + seg[p][0] + j, from = i * n + off + j;
				char *d = (char *)dst->data + (size_t)(to * dst->ld) * f->asz;
				const char *sp = (const char *)src->data + (size_t)(from * src->ld) * f->asz;
				if ((rc = fg_backend_copy_small(f->be, f->stream, d, sp,
								dense ? row * (size_t)seg[p][1]
								      : row)))
					return rc;
			}
	return 0;
}

/* Appends the new K/V rows of the host-cache sequences: all cnt of them,
 * or, for joining rows (join.c), run by run of the live ones: the rows left
 * out keep their cache. */
static int host_append(struct fg_forward *f, int64_t layer, int64_t n, int direct,
		       void *hstream, struct fg_tensor hk, struct fg_tensor hv, struct fg_tensor kc,
		       struct fg_tensor vc, int64_t first, int64_t cnt)
{
	int rc;

	for (int64_t a = 0; a < cnt;) {
		int64_t b = a + 1;
		if (f->joining && fg_row_dead(f, f->cur_k, first + a)) {
			a++;
			continue;
		}
		while (b < cnt && !(f->joining && fg_row_dead(f, f->cur_k, first + b)))
			b++;
		struct fg_tensor k = fg_rows(hk, a * n, (b - a) * n), v = fg_rows(hv, a * n, (b - a) * n);
		if (direct ? (rc = fg_host_cache_copy(f, &k, &kc, a, b - a, n)) ||
				     (rc = fg_host_cache_copy(f, &v, &vc, a, b - a, n))
			   : (rc = fg_kv_append_cols(f, f->hb, hstream, layer, "host k cache", k,
						     kc, a, b - a, n)) ||
				     (rc = fg_kv_append_cols(f, f->hb, hstream, layer,
							     "host v cache", v, vc, a, b - a, n)))
			return rc;
		a = b;
	}
	return 0;
}

/* A decode step's host attention queued in the compute stream's order
 * (two streams, schedule.c): what it reads, taken when it was queued. */
struct host_job {
	struct fg_forward *f;
	struct fg_attention_args at; /* q and out in the staging, the host cache */
	struct fg_tensor hk, hv;     /* the new rows staged (a 4-bit cache's append) */
	int64_t layer, first, cnt;
	int append;
};

/* On a thread of the device's driver, when the stream reaches it: nothing
 * of the compute backend is called; the host backend runs one job at a
 * time.  A failure is kept for the step's end (fg_forward_drain). */
static void host_job_run(void *arg)
{
	struct host_job *j = arg;
	struct fg_forward *f = j->f;
	struct fg_two_streams *t = &f->two;
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	double t0 = fg_now();
	if (!t->rc && j->append)
		rc = host_append(f, j->layer, 1, 0, NULL, j->hk, j->hv, j->at.k, j->at.v, j->first,
				 j->cnt);
	double t1 = fg_now();
	if (!t->rc && !rc)
		rc = fg_attend_chunk(f, f->hb, NULL, j->layer, "host attention", &j->at, 1);
	if (rc && !t->rc) {
		t->rc = rc;
		snprintf(t->err, sizeof(t->err), "%s", fg_last_error());
	}
	f->stats.host_append_s += t1 - t0;
	f->stats.host_attn_s += fg_now() - t0;
	pthread_mutex_unlock(&t->lock);
	free(j);
}

/* Bytes a decode step stages for the host's attention of cnt rows: q and
 * the result, and the new K/V rows where the host encodes them. */
static size_t stage_bytes(const struct fg_forward *f, int64_t cnt)
{
	int direct = f->cdt == f->act;
	return (size_t)cnt * f->asz *
	       (size_t)(2 * fg_dim_value(f->cfg, FG_DIM_Q) + (direct ? 0 : 2 * f->kvw));
}

int fg_host_stage_halves(const struct fg_forward *f)
{
	return 2 * stage_bytes(f, f->plan.ccount[FG_ROLE_HOST]) <= f->hstage.size;
}

/* Queued: the new rows (into a plain cache, or staged for a 4-bit one's
 * append) and q to the host, the attention, its result back; the caller
 * goes on to the next GPU batch. */
static int host_attention_queued(struct fg_forward *f, const struct fg_block_ctx *x,
				 struct fg_attention_args *at, struct fg_tensor hk,
				 struct fg_tensor hv, struct fg_tensor out, int64_t first,
				 int64_t cnt)
{
	int direct = f->cdt == f->act;
	struct fg_tensor src[3] = { at->q, hk, hv }, *dst[3] = { &at->q, &hk, &hv };
	/* (each stream its half of the staging: fg_host_stage_halves) */
	char *hs = (char *)f->hstage.addr +
		   (size_t)f->two.cur * stage_bytes(f, f->plan.ccount[FG_ROLE_HOST]);
	size_t sz[3], o = 0;
	int rc;

	for (int i = 0; i < 3; i++)
		sz[i] = (size_t)(src[i].rows * src[i].cols) * f->asz;
	struct host_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	if (direct && (rc = host_append(f, x->layer, 1, 1, NULL, hk, hv, at->k, at->v, first, cnt)))
		goto fail;
	for (int i = 0; i < 3; i++) {
		if (i > 0 && direct)
			continue;
		if ((rc = fg_backend_copy_small(f->be, f->stream, hs + o, src[i].data, sz[i])))
			goto fail;
		*dst[i] = fg_view(hs + o, f->act, src[i].rows, src[i].cols);
		o += sz[i];
	}
	at->out = fg_view(hs + o, f->act, out.rows, out.cols);
	*j = (struct host_job){ f, *at, hk, hv, x->layer, first, cnt, !direct };
	if ((rc = fg_backend_host_call(f->be, f->stream, host_job_run, j)))
		goto fail;
	return fg_backend_copy_small(f->be, f->stream, out.data, at->out.data, sz[0]);
fail:
	free(j);
	return rc;
}

int fg_host_attention(struct fg_forward *f, const struct fg_block_ctx *x, struct fg_tensor q,
		      struct fg_tensor k, struct fg_tensor v, struct fg_tensor out)
{
	const struct fg_plan *p = &f->plan;
	const struct fg_model_config *c = f->cfg;
	int64_t first = p->cfirst[FG_ROLE_HOST], nseq = p->ccount[FG_ROLE_HOST], n = x->n;
	/* only the rows computed (x->bs), of the nseq the host cache holds */
	int64_t cnt = fg_rows_within(first, nseq, x->bs);
	int64_t l = x->layer;
	struct fg_tensor hq = fg_rows(q, first * n, cnt * n), hk = fg_rows(k, first * n, cnt * n);
	struct fg_tensor hv = fg_rows(v, first * n, cnt * n), ho = fg_rows(out, first * n, cnt * n);
	void *hstream = f->hb == f->be ? f->stream : NULL;
	/* From a device, a plain cache takes its rows by copy; the host appends
	 * (and encodes) only a 4-bit one. */
	int direct = f->mv.device && f->cdt == f->act;
	struct fg_tensor kc, vc;
	/* A prefill's and joining rows' attention (within the step's columns)
	 * was the compute tier's (fg_kv_attend): here only their K/V go home. */
	int decode = f->step > 0 && !f->joining;
	double t0 = fg_now();
	int rc;

	if (cnt == 0)
		return 0;
	fg_kv_views(f, f->gb[f->cur_k].cache[FG_ROLE_HOST][l].addr, nseq, &kc, &vc);
	/* (a decode step's: q and out are the host's views once staged) */
	struct fg_attention_args at = {
		.k = kc, .v = vc, .batch = cnt, .seq = 1, .len = f->step + n,
		.cache_stride = f->cols, .heads = c->heads, .head_dim = c->head_dim,
		.scale = fg_attn_scale(c), .softcap = c->attn_softcap,
		.pad = fg_kv_attend_pad(f, x) + first, .kv_heads = c->kv_heads,
		.window = fg_layer_window(c, f->m->stage.layer0 + l),
		/* a window's ring, once the positions pass its columns */
		.ring = f->step + n > f->cols ? f->cols : 0,
	};
	if (f->two.on) {
		at.q = hq;
		return host_attention_queued(f, x, &at, hk, hv, ho, first, cnt);
	}
	if (f->mv.device) {
		/* Stage what the host reads (the device finishes first): q in decode,
		 * the new rows unless they go straight to the cache. */
		char *hs = f->hstage.addr;
		struct fg_tensor src[3] = { hq, hk, hv }, *dst[3] = { &hq, &hk, &hv };
		size_t o = 0;
		if ((rc = fg_backend_stream_sync(f->be, f->stream)))
			return rc;
		f->stats.host_attn_wait_s += fg_now() - t0;
		if (direct && (rc = host_append(f, l, n, 1, hstream, hk, hv, kc, vc, first, cnt)))
			return rc;
		for (int i = 0; i < 3; i++) {
			size_t sz = (size_t)(src[i].rows * src[i].cols) * f->asz;
			if ((i == 0 && !decode) || (i > 0 && direct))
				continue;
			if ((rc = fg_backend_copy_small(f->be, f->stream, hs + o, src[i].data, sz)))
				return rc;
			*dst[i] = fg_view(hs + o, f->act, src[i].rows, src[i].cols);
			o += sz;
		}
		ho = fg_view(hs + o, f->act, ho.rows, ho.cols);
		double t1 = fg_now();
		if ((rc = fg_backend_stream_sync(f->be, f->stream)))
			return rc;
		f->stats.host_attn_wait_s += fg_now() - t1;
	}
	double ta = fg_now();
	if (!direct && (rc = host_append(f, l, n, 0, hstream, hk, hv, kc, vc, first, cnt)))
		return rc;
	f->stats.host_append_s += fg_now() - ta;
	if (decode) {
		at.q = hq;
		at.out = ho;
		if ((rc = fg_attend_chunk(f, f->hb, hstream, l, "host attention", &at, n)))
			return rc;
		if (f->mv.device &&
		    (rc = fg_backend_copy_small(f->be, f->stream,
						fg_rows(out, first * n, cnt * n).data, ho.data,
						(size_t)(ho.rows * ho.cols) * f->asz)))
			return rc;
	}
	if (f->hb != f->be && (rc = fg_backend_stream_sync(f->hb, NULL)))
		return rc;
	f->stats.host_attn_s += fg_now() - t0;
	return 0;
}
