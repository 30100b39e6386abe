/* core/engine/host_attention.c - attention of the sequences whose cache
 * lives in host memory, computed there (cpu_cache_compute): only q, the new
 * K/V rows and the result cross tiers, never the cache.  A finished row
 * (fg_forward_set_live_rows) attends to no position: it reads no cache. */
#include <math.h>

#include "core/engine/forward_int.h"
#include "core/util/clock.h"

int fg_host_attention(struct fg_forward *f, const struct fg_block_ctx *x, struct fg_tensor q,
		      struct fg_tensor k, struct fg_tensor v, struct fg_tensor out)
{
	const struct fg_plan *p = &f->plan;
	const struct fg_model_config *c = f->cfg;
	int64_t first = p->cfirst[FG_ROLE_HOST], cnt = p->ccount[FG_ROLE_HOST], n = x->n;
	int64_t l = x->layer;
	struct fg_tensor hq = fg_rows(q, first * n, cnt * n), hk = fg_rows(k, first * n, cnt * n);
	struct fg_tensor hv = fg_rows(v, first * n, cnt * n), ho = fg_rows(out, first * n, cnt * n);
	void *hstream = f->hb == f->be ? f->stream : NULL;
	struct fg_tensor kc, vc;
	double t0 = fg_now();
	int rc;

	if (f->mv.device) {
		/* Stage q and the new rows in host memory (the device finishes first). */
		char *hs = f->hstage.addr;
		struct fg_tensor src[3] = { hq, hk, hv }, *dst[3] = { &hq, &hk, &hv };
		size_t at = 0;
		if ((rc = fg_backend_stream_sync(f->be, f->stream)))
			return rc;
		for (int i = 0; i < 3; i++) {
			size_t sz = (size_t)(src[i].rows * src[i].cols) * f->asz;
			if ((rc = fg_backend_copy(f->be, f->stream, hs + at, src[i].data, sz)))
				return rc;
			*dst[i] = fg_view(hs + at, f->act, src[i].rows, src[i].cols);
			at += sz;
		}
		ho = fg_view(hs + at, f->act, ho.rows, ho.cols);
		if ((rc = fg_backend_stream_sync(f->be, f->stream)))
			return rc;
	}
	fg_kv_views(f, f->gb[f->cur_k].cache[FG_ROLE_HOST][l].addr, cnt, &kc, &vc);
	struct fg_kv_append_args ak = { hk, kc, cnt, n, f->step, f->total };
	struct fg_kv_append_args av = { hv, vc, cnt, n, f->step, f->total };
	if ((rc = fg_backend_kv_append(f->hb, hstream, l, "host k cache", &ak)) ||
	    (rc = fg_backend_kv_append(f->hb, hstream, l, "host v cache", &av)))
		return rc;
	if (f->step > 0) {
		struct fg_attention_args at = {
			.q = hq, .k = kc, .v = vc, .out = ho, .batch = cnt, .seq = 1,
			.len = f->step + 1, .cache_stride = f->total, .heads = c->heads,
			.head_dim = c->head_dim, .scale = 1.0f / sqrtf((float)c->head_dim),
			.pad = fg_kv_attend_pad(f, x) + first, .kv_heads = c->kv_heads,
		};
		if ((rc = fg_backend_attention_decode(f->hb, hstream, l, "host attention", &at)))
			return rc;
		if (f->mv.device &&
		    (rc = fg_backend_copy(f->be, f->stream, fg_rows(out, first * n, cnt * n).data,
					  ho.data, (size_t)(ho.rows * ho.cols) * f->asz)))
			return rc;
	}
	if (f->hb != f->be && (rc = fg_backend_stream_sync(f->hb, NULL)))
		return rc;
	f->stats.host_attn_s += fg_now() - t0;
	return 0;
}
