/* core/engine/forward.c - OPT prefill and decode steps in FlexGen's block
 * schedule, over weights, cache and activations placed on any tier.
 *
 * The math is Hugging Face's OPTDecoder: h = embed_tokens(ids) +
 * embed_positions(pos); per layer h += out_proj(attn(ln1(h))),
 * h += fc2(relu(fc1(ln2(h)))); logits = final_layer_norm(h) · embed_tokensᵀ.
 * Positions count real tokens only: a row with p left pads gives the token
 * at column c the position c - p + 2 (pads get 1), 2 being OPT's offset.
 *
 * The schedule: for each token, for each unit (the input block, then per
 * layer its attention and MLP blocks — one unit, or two with sep_layer —
 * then the output block), for each GPU batch.  A unit's weights are fetched
 * once and serve every GPU batch.  With overlap, while (unit u, batch k)
 * computes, unit u+1's weights and the next item's KV cache are loaded into
 * the other of two slots, and what (u, k) produced is stored back; a slot is
 * refilled only after its previous reader and its pending store are done. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/half.h>
#include <fgcore/q4.h>
#include "core/engine/forward.h"
#include "core/engine/mover.h"
#include "core/engine/sample.h"
#include "core/optimizer/layout.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#define SLOTS 2
#define ALIGN(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))

struct gpu_batch {
	int32_t *pad;
	enum fg_role hidden_role;
	struct fg_region hidden_home;      /* [bs * prompt_len, hidden] on hidden_role's tier */
	struct fg_region *cache[FG_ROLES]; /* per layer: K then V of this role's sequences */
};

struct fg_forward {
	struct fg_forward_env env;
	struct fg_model *m;
	struct fg_backend *be, *hb;
	struct fg_tier **tier;
	struct fg_mover mv;
	enum fg_dtype act, cdt; /* activations; KV cache (act or Q4_COLS) */
	unsigned asz;
	int64_t bs, nb, plen, total, step;
	int64_t cfirst[FG_ROLES], ccount[FG_ROLES]; /* cache split of a GPU batch's sequences */
	int64_t n_off;                              /* sequences held in the cache slot */
	int delegate;                               /* host sequences attend on the host */
	struct gpu_batch *gb;
	int64_t nunits, *ufirst, *ucount;
	uint64_t *ustage; /* per block: offset of its staged weights in the unit's slot */
	int nslots;
	struct fg_region wslot[SLOTS], wbounce[SLOTS], cslot[SLOTS], cbounce[SLOTS];
	struct fg_region hslot[SLOTS], hbounce[SLOTS];
	struct fg_xfer wload[SLOTS], cload[SLOTS], cstore[SLOTS], hload, hstore[SLOTS];
	void *wdone[SLOTS], *cdone[SLOTS]; /* compute finished reading the slot */
	struct fg_region hstage;           /* host staging of delegated attention */
	struct fg_region scratch;
	struct fg_tensor x, q, k, v, a, ffn, logits;
	int32_t *pos;
	void *host_logits;  /* bs rows of logits in the activation type */
	float *host_argmax; /* bs rows of float logits for the host's argmax */
	int xfer_ready;
	struct fg_forward_stats stats;
};

struct item {
	int64_t u, k, t; /* unit, GPU batch, running index (slot = t % 2) */
};

static struct fg_tensor view(void *addr, enum fg_dtype dt, int64_t rows, int64_t cols)
{
	return (struct fg_tensor){ .data = addr, .dtype = dt, .rows = rows, .cols = cols, .ld = cols };
}

static struct fg_tensor rows_of(struct fg_tensor t, int64_t first, int64_t n)
{
	t.data = (char *)t.data + (size_t)(first * t.ld) * fg_dtype_size(t.dtype);
	t.rows = n;
	return t;
}

static struct fg_tensor cols_of(struct fg_tensor t, int64_t first, int64_t n)
{
	if (t.data)
		t.data = (char *)t.data + (size_t)first * fg_dtype_size(t.dtype);
	t.cols = n;
	return t;
}

/* ---- KV cache layout ---------------------------------------------------- */

/* Bytes of one K (or V) tensor of nseq sequences. */
static uint64_t kv_bytes(const struct fg_forward *f, int64_t nseq)
{
	uint64_t rows = (uint64_t)(nseq * f->total), h = (uint64_t)f->m->cfg.hidden;
	if (f->cdt == FG_DTYPE_Q4_COLS)
		return ALIGN(fg_q4_bytes(rows, h, 1), 64);
	return ALIGN(rows * h * f->asz, 64);
}

/* K and V views of a cache area holding nseq sequences. */
static void kv_views(const struct fg_forward *f, void *base, int64_t nseq, struct fg_tensor *k,
		     struct fg_tensor *v)
{
	*k = view(base, f->cdt, nseq * f->total, f->m->cfg.hidden);
	*v = *k;
	v->data = (char *)base + kv_bytes(f, nseq);
}

/* Byte ranges of rows [r0, r0 + nr) of sequence s in a K or V tensor of nseq
 * sequences: one range for plain types, data and parameters for int4. */
static int kv_ranges(const struct fg_forward *f, int64_t nseq, int64_t s, int64_t r0, int64_t nr,
		     uint64_t off[2], uint64_t len[2])
{
	uint64_t h = (uint64_t)f->m->cfg.hidden, row = (uint64_t)(s * f->total + r0);
	if (f->cdt != FG_DTYPE_Q4_COLS) {
		off[0] = row * h * f->asz;
		len[0] = (uint64_t)nr * h * f->asz;
		return 1;
	}
	uint64_t groups = h / FG_Q4_GROUP;
	off[0] = row * h / 2;
	len[0] = (uint64_t)nr * h / 2;
	off[1] = fg_q4_data_bytes((uint64_t)(nseq * f->total), h) + row * groups * 4;
	len[1] = (uint64_t)nr * groups * 4;
	return 2;
}

/* Index in the cache slot of the i-th sequence of a role. */
static int64_t slot_index(const struct fg_forward *f, enum fg_role role, int64_t i)
{
	if (f->delegate)
		return i; /* only disk sequences use the slot */
	return role == FG_ROLE_HOST ? i : f->ccount[FG_ROLE_HOST] + i;
}

/* Move rows [r0, r0 + nr) of every slot-held sequence of layer l between its
 * home and the cache slot. */
static int cache_move(struct fg_forward *f, struct fg_xfer *x, int load, int64_t b, int64_t l,
		      int slot, int64_t r0, int64_t nr)
{
	int rc;
	for (int role = FG_ROLE_DISK; role <= FG_ROLE_HOST; role++) {
		int64_t cnt = f->ccount[role];
		if (!cnt || (f->delegate && role == FG_ROLE_HOST))
			continue;
		const struct fg_region *home = &f->gb[b].cache[role][l];
		for (int64_t i = 0; i < cnt; i++) {
			int64_t j = slot_index(f, role, i);
			for (int kv = 0; kv < 2; kv++) {
				uint64_t ho[2], so[2], len[2];
				int n = kv_ranges(f, cnt, i, r0, nr, ho, len);
				kv_ranges(f, f->n_off, j, r0, nr, so, len);
				for (int c = 0; c < n; c++) {
					uint64_t hoff = ho[c] + (kv ? kv_bytes(f, cnt) : 0);
					uint64_t soff = so[c] + (kv ? kv_bytes(f, f->n_off) : 0);
					void *sp = (char *)f->cslot[slot].addr + soff;
					void *bp = f->cbounce[slot].addr ? (char *)f->cbounce[slot].addr + soff : NULL;
					rc = load ? fg_xfer_load(x, sp, role, home, hoff, len[c], bp)
						  : fg_xfer_store(x, role, home, hoff, sp, len[c], bp);
					if (rc)
						return rc;
					f->stats.cache_bytes += len[c];
				}
			}
		}
	}
	return 0;
}

/* ---- weights --------------------------------------------------------------- */

static void *piece_addr(const struct fg_forward *f, int64_t bi, const struct fg_piece *p, int slot)
{
	const struct fg_block *b = &f->m->blocks[bi];
	char *staged = f->wslot[slot].addr ? (char *)f->wslot[slot].addr + f->ustage[bi] : NULL;
	switch (p->role) {
	case FG_ROLE_COMPUTE:
		return (char *)b->region[FG_ROLE_COMPUTE].addr + p->offset;
	case FG_ROLE_HOST:
		return staged + p->offset;
	default:
		return staged + b->bytes[FG_ROLE_HOST] + p->offset;
	}
}

static struct fg_tensor vec(const struct fg_forward *f, int64_t bi, int ti, int slot)
{
	const struct fg_wtensor *t = &f->m->blocks[bi].t[ti];
	return view(piece_addr(f, bi, &t->piece[0], slot), FG_DTYPE_F16, t->rows, t->cols);
}

/* out = act(x · Wᵀ + bias) + residual, one call per piece of W (its rows are
 * a range of out's columns). */
static int lin(struct fg_forward *f, int64_t bi, int slot, int wi, int bias_i, struct fg_tensor x,
	       enum fg_activation act, struct fg_tensor res, struct fg_tensor out)
{
	const struct fg_wtensor *w = &f->m->blocks[bi].t[wi];
	struct fg_tensor bias = { 0 };
	int rc;

	if (bias_i >= 0)
		bias = vec(f, bi, bias_i, slot);
	for (int i = 0; i < w->npieces; i++) {
		const struct fg_piece *p = &w->piece[i];
		struct fg_linear_args a = {
			.x = x,
			.w = view(piece_addr(f, bi, p, slot), w->dtype, p->rows, w->cols),
			.bias = bias_i >= 0 ? cols_of(bias, p->row0, p->rows) : bias,
			.act = act,
			.residual = cols_of(res, p->row0, p->rows),
			.out = cols_of(out, p->row0, p->rows),
		};
		if ((rc = f->be->ops->linear(f->be->ctx, NULL, &a)))
			return rc;
	}
	return 0;
}

/* Stage unit u's off-compute weights into weight slot `slot`. */
static int weights_load(struct fg_forward *f, int64_t u, int slot)
{
	struct fg_xfer *x = &f->wload[slot];
	char what[64];
	int rc;

	snprintf(what, sizeof(what), "weights of unit %lld", (long long)u);
	if ((rc = fg_xfer_reset(x, what)))
		return rc;
	/* The slot's previous unit must be computed before it is overwritten. */
	if ((rc = fg_backend_stream_wait(f->be, f->mv.load_stream, f->wdone[slot])))
		return rc;
	for (int64_t bi = f->ufirst[u]; bi < f->ufirst[u] + f->ucount[u]; bi++) {
		const struct fg_block *b = &f->m->blocks[bi];
		char *dst = f->wslot[slot].addr ? (char *)f->wslot[slot].addr + f->ustage[bi] : NULL;
		uint64_t bo = f->ustage[bi] - f->ustage[f->ufirst[u]];
		if (b->bytes[FG_ROLE_HOST] &&
		    (rc = fg_xfer_load(x, dst, FG_ROLE_HOST, &b->region[FG_ROLE_HOST], 0,
				       b->bytes[FG_ROLE_HOST], NULL)))
			return rc;
		if (b->bytes[FG_ROLE_DISK] &&
		    (rc = fg_xfer_load(x, dst + b->bytes[FG_ROLE_HOST], FG_ROLE_DISK,
				       &b->region[FG_ROLE_DISK], 0, b->bytes[FG_ROLE_DISK],
				       f->wbounce[slot].addr ? (char *)f->wbounce[slot].addr + bo : NULL)))
			return rc;
		f->stats.weight_bytes += b->bytes[FG_ROLE_HOST] + b->bytes[FG_ROLE_DISK];
	}
	return 0;
}

/* ---- activations --------------------------------------------------------- */

static void *hidden_addr(const struct fg_forward *f, int64_t k, int slot)
{
	const struct gpu_batch *g = &f->gb[k];
	return g->hidden_role == FG_ROLE_COMPUTE ? g->hidden_home.addr : f->hslot[slot].addr;
}

/* ---- blocks ---------------------------------------------------------------- */

static int block_input(struct fg_forward *f, int64_t bi, int ws, int64_t k, const int32_t *ids,
		       int64_t n, void *h)
{
	const struct gpu_batch *g = &f->gb[k];
	for (int64_t s = 0; s < f->bs; s++)
		for (int64_t i = 0; i < n; i++) {
			int64_t col = f->step + i;
			f->pos[s * n + i] = col < g->pad[s] ? 1 : (int32_t)(col - g->pad[s] + 2);
		}
	struct fg_embed_args e = {
		.ids = ids, .positions = f->pos, .n = f->bs * n,
		.tok = vec(f, bi, FG_WT_TOK, ws), .pos = vec(f, bi, FG_WT_POS, ws),
		.out = view(h, f->act, f->bs * n, f->m->cfg.hidden),
	};
	return f->be->ops->embed(f->be->ctx, NULL, &e);
}

/* New K/V rows and attention of the sequences whose cache stays on the host
 * (cpu_cache_compute): only q, the new rows and the result cross tiers. */
static int host_attention(struct fg_forward *f, int64_t k, int64_t l, int64_t n)
{
	const struct fg_opt_config *c = &f->m->cfg;
	int64_t first = f->cfirst[FG_ROLE_HOST], cnt = f->ccount[FG_ROLE_HOST], hd = c->hidden;
	struct fg_tensor q = rows_of(f->q, first * n, cnt * n), kk = rows_of(f->k, first * n, cnt * n);
	struct fg_tensor vv = rows_of(f->v, first * n, cnt * n), o = rows_of(f->a, first * n, cnt * n);
	struct fg_tensor kc, vc;
	double t0 = fg_now();
	int rc;

	if (f->mv.device) {
		/* Stage q and the new rows in host memory (the device finishes first). */
		size_t sz = (size_t)(cnt * n * hd) * f->asz;
		char *hs = f->hstage.addr;
		struct fg_tensor src[3] = { q, kk, vv }, *dst[3] = { &q, &kk, &vv };
		if ((rc = fg_backend_stream_sync(f->be, NULL)))
			return rc;
		for (int i = 0; i < 3; i++) {
			if ((rc = fg_backend_copy(f->be, NULL, hs + i * sz, src[i].data, sz)))
				return rc;
			*dst[i] = view(hs + i * sz, f->act, cnt * n, hd);
		}
		o = view(hs + 3 * sz, f->act, cnt * n, hd);
		if ((rc = fg_backend_stream_sync(f->be, NULL)))
			return rc;
	}
	kv_views(f, f->gb[k].cache[FG_ROLE_HOST][l].addr, cnt, &kc, &vc);
	struct fg_kv_append_args ak = { kk, kc, cnt, n, f->step, f->total };
	struct fg_kv_append_args av = { vv, vc, cnt, n, f->step, f->total };
	if ((rc = f->hb->ops->kv_append(f->hb->ctx, NULL, &ak)) ||
	    (rc = f->hb->ops->kv_append(f->hb->ctx, NULL, &av)))
		return rc;
	if (f->step > 0) {
		struct fg_attention_args at = {
			.q = q, .k = kc, .v = vc, .out = o, .batch = cnt, .seq = 1,
			.len = f->step + 1, .cache_stride = f->total, .heads = c->heads,
			.head_dim = hd / c->heads, .scale = 1.0f / sqrtf((float)(hd / c->heads)),
			.pad = f->gb[k].pad + first,
		};
		if ((rc = f->hb->ops->attention_decode(f->hb->ctx, NULL, &at)))
			return rc;
		if (f->mv.device &&
		    (rc = fg_backend_copy(f->be, NULL, rows_of(f->a, first * n, cnt * n).data, o.data,
					  (size_t)(cnt * n * hd) * f->asz)))
			return rc;
	}
	if (f->hb != f->be && (rc = fg_backend_stream_sync(f->hb, NULL)))
		return rc;
	f->stats.host_attn_s += fg_now() - t0;
	return 0;
}

static int block_attn(struct fg_forward *f, int64_t bi, int ws, int64_t k, int cs, int64_t n,
		      void *hp)
{
	const struct fg_compute_ops *ops = f->be->ops;
	void *cx = f->be->ctx;
	const struct fg_opt_config *c = &f->m->cfg;
	int64_t l = f->m->blocks[bi].layer, rows = f->bs * n, hd = c->hidden / c->heads;
	int64_t cc = f->ccount[FG_ROLE_COMPUTE];
	struct fg_tensor h = view(hp, f->act, rows, c->hidden), x = rows_of(f->x, 0, rows);
	struct fg_tensor q = rows_of(f->q, 0, rows), kk = rows_of(f->k, 0, rows);
	struct fg_tensor vv = rows_of(f->v, 0, rows), a = rows_of(f->a, 0, rows), kc, vc;
	int32_t *pad = f->gb[k].pad;
	int rc;

	struct fg_layer_norm_args ln = { h, vec(f, bi, FG_WT_LN1, ws), vec(f, bi, FG_WT_LN1B, ws),
					 1e-5f, x, FG_NORM_LAYER };
	static const struct fg_tensor none;
	if ((rc = ops->layer_norm(cx, NULL, &ln)) ||
	    (rc = lin(f, bi, ws, FG_WT_Q, FG_WT_QB, x, FG_ACT_NONE, none, q)) ||
	    (rc = lin(f, bi, ws, FG_WT_K, FG_WT_KB, x, FG_ACT_NONE, none, kk)) ||
	    (rc = lin(f, bi, ws, FG_WT_V, FG_WT_VB, x, FG_ACT_NONE, none, vv)))
		return rc;

	struct fg_attention_args at = {
		.batch = f->bs, .seq = n, .len = f->step + n, .cache_stride = f->total,
		.heads = c->heads, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .pad = pad,
	};
	if (f->step == 0) {
		at.q = q, at.k = kk, at.v = vv, at.out = a;
		if ((rc = ops->attention_prefill(cx, NULL, &at)))
			return rc;
	}
	/* Three groups of sequences: compute-resident, slot-held, host-delegated. */
	struct {
		int64_t first, cnt, slot_first;
		void *cache;
		int64_t cache_seqs;
	} grp[2] = {
		{ 0, cc, 0, cc ? f->gb[k].cache[FG_ROLE_COMPUTE][l].addr : NULL, cc },
		{ f->delegate ? f->cfirst[FG_ROLE_DISK] : cc,
		  f->delegate ? f->ccount[FG_ROLE_DISK] : f->n_off, 0, f->cslot[cs].addr, f->n_off },
	};
	for (int gi = 0; gi < 2; gi++) {
		if (!grp[gi].cnt)
			continue;
		int64_t s0 = grp[gi].first, m = grp[gi].cnt;
		kv_views(f, grp[gi].cache, grp[gi].cache_seqs, &kc, &vc);
		struct fg_kv_append_args ak = { rows_of(kk, s0 * n, m * n), kc, m, n, f->step, f->total };
		struct fg_kv_append_args av = { rows_of(vv, s0 * n, m * n), vc, m, n, f->step, f->total };
		if ((rc = ops->kv_append(cx, NULL, &ak)) || (rc = ops->kv_append(cx, NULL, &av)))
			return rc;
		if (f->step > 0) {
			struct fg_attention_args d = at;
			d.q = rows_of(q, s0, m), d.k = kc, d.v = vc, d.out = rows_of(a, s0, m);
			d.batch = m;
			d.pad = pad + s0;
			if ((rc = ops->attention_decode(cx, NULL, &d)))
				return rc;
		}
	}
	if (f->delegate && f->ccount[FG_ROLE_HOST] && (rc = host_attention(f, k, l, n)))
		return rc;
	return lin(f, bi, ws, FG_WT_O, FG_WT_OB, a, FG_ACT_NONE, h, h);
}

static int block_mlp(struct fg_forward *f, int64_t bi, int ws, int64_t n, void *hp)
{
	const struct fg_opt_config *c = &f->m->cfg;
	int64_t rows = f->bs * n;
	struct fg_tensor h = view(hp, f->act, rows, c->hidden), x = rows_of(f->x, 0, rows);
	struct fg_tensor ffn = rows_of(f->ffn, 0, rows);
	static const struct fg_tensor none;
	struct fg_layer_norm_args ln = { h, vec(f, bi, FG_WT_LN2, ws), vec(f, bi, FG_WT_LN2B, ws),
					 1e-5f, x, FG_NORM_LAYER };
	int rc;

	if ((rc = f->be->ops->layer_norm(f->be->ctx, NULL, &ln)) ||
	    (rc = lin(f, bi, ws, FG_WT_FC1, FG_WT_FC1B, x, FG_ACT_RELU, none, ffn)))
		return rc;
	return lin(f, bi, ws, FG_WT_FC2, FG_WT_FC2B, ffn, FG_ACT_NONE, h, h);
}

/* Rows of logits in the compute tier to host floats. */
static int logits_to_host(struct fg_forward *f, float *out)
{
	int64_t cnt = f->bs * f->m->cfg.vocab;
	void *dst = f->act == FG_DTYPE_F32 ? (void *)out : f->host_logits;
	int rc;

	if ((rc = fg_backend_copy(f->be, NULL, dst, f->logits.data, (size_t)cnt * f->asz)) ||
	    (rc = fg_backend_stream_sync(f->be, NULL)))
		return rc;
	if (f->act == FG_DTYPE_F16) {
		const uint16_t *src = f->host_logits;
		for (int64_t i = 0; i < cnt; i++)
			out[i] = fg_half_to_float(src[i]);
	}
	return 0;
}

/* Greedy tokens: the backend's argmax, or the host's over copied logits. */
static int logits_argmax(struct fg_forward *f, int32_t *top)
{
	int64_t V = f->m->cfg.vocab;
	int rc;

	if (f->be->ops->argmax)
		return f->be->ops->argmax(f->be->ctx, NULL, &f->logits, top);
	if ((rc = logits_to_host(f, f->host_argmax)))
		return rc;
	for (int64_t r = 0; r < f->bs; r++)
		top[r] = fg_argmax(f->host_argmax + r * V, V);
	return 0;
}

/* Final norm on each sequence's last row, output projection, logits out. */
static int block_output(struct fg_forward *f, int64_t bi, int ws, int64_t n, void *hp, float *out,
			int32_t *top)
{
	const struct fg_opt_config *c = &f->m->cfg;
	struct fg_tensor last = view(hp, f->act, f->bs, c->hidden), x = rows_of(f->x, 0, f->bs);
	static const struct fg_tensor none;
	int rc;

	last = rows_of(last, n - 1, f->bs);
	last.ld = n * c->hidden; /* every n-th row: the last position of each sequence */
	struct fg_layer_norm_args ln = { last, vec(f, bi, FG_WT_LNF, ws), vec(f, bi, FG_WT_LNFB, ws),
					 1e-5f, x, FG_NORM_LAYER };
	if ((rc = f->be->ops->layer_norm(f->be->ctx, NULL, &ln)) ||
	    (rc = lin(f, bi, ws, FG_WT_OUT, -1, x, FG_ACT_NONE, none, f->logits)))
		return rc;
	double t0 = fg_now();
	if (out && (rc = logits_to_host(f, out)))
		return rc;
	if (top && (rc = logits_argmax(f, top)))
		return rc;
	f->stats.logits_s += fg_now() - t0;
	return 0;
}

/* ---- the schedule ------------------------------------------------------------ */

static int unit_has_attn(const struct fg_forward *f, int64_t u)
{
	for (int64_t bi = f->ufirst[u]; bi < f->ufirst[u] + f->ucount[u]; bi++)
		if (f->m->blocks[bi].kind == FG_BLOCK_ATTN)
			return 1;
	return 0;
}

static int64_t unit_layer(const struct fg_forward *f, int64_t u)
{
	return f->m->blocks[f->ufirst[u]].layer;
}

/* Start loading item it's KV cache (decode steps only) into its slot. */
static int cache_prefetch(struct fg_forward *f, const struct item *it)
{
	int slot = (int)(it->t % SLOTS);
	char what[64];
	int rc;

	if (f->step == 0 || !f->n_off || !unit_has_attn(f, it->u))
		return 0;
	double t0 = fg_now();
	/* The slot's last store and its last reader come first. */
	rc = fg_xfer_wait(&f->cstore[slot], f->mv.load_stream);
	f->stats.wait_cache_s += fg_now() - t0;
	if (rc || (rc = fg_backend_stream_wait(f->be, f->mv.load_stream, f->cdone[slot])))
		return rc;
	snprintf(what, sizeof(what), "KV cache of layer %lld, GPU batch %lld",
		 (long long)unit_layer(f, it->u), (long long)it->k);
	if ((rc = fg_xfer_reset(&f->cload[slot], what)))
		return rc;
	return cache_move(f, &f->cload[slot], 1, it->k, unit_layer(f, it->u), slot, 0, f->step);
}

static int run_item(struct fg_forward *f, const struct item *it, const int32_t *ids, int64_t n,
		    float *logits, int32_t *top)
{
	int ws = (int)(it->u % f->nslots), cs = (int)(it->t % SLOTS);
	struct gpu_batch *g = &f->gb[it->k];
	double t0;
	int rc = 0;

	/* Activations of an off-compute GPU batch: fetched now, stored after. */
	void *h = hidden_addr(f, it->k, cs);
	int input = f->m->blocks[f->ufirst[it->u]].kind == FG_BLOCK_INPUT;
	if (g->hidden_role != FG_ROLE_COMPUTE) {
		/* The slot's previous store, and this batch's last one, must be done
		 * before the load stream reads the stored bytes back and before the
		 * compute stream writes the slot again. */
		t0 = fg_now();
		for (int s = 0; s < SLOTS && !rc; s++)
			rc = fg_xfer_wait(&f->hstore[s], f->mv.load_stream);
		if (!rc && !(rc = fg_backend_event_record(f->be, f->hload.event, f->mv.load_stream)))
			rc = fg_backend_stream_wait(f->be, NULL, f->hload.event);
		f->stats.wait_hidden_s += fg_now() - t0;
		if (rc)
			return rc;
	}
	if (g->hidden_role != FG_ROLE_COMPUTE && !input) {
		size_t len = (size_t)(f->bs * n * f->m->cfg.hidden) * f->asz;
		t0 = fg_now();
		if ((rc = fg_xfer_reset(&f->hload, "activations")) ||
		    (rc = fg_xfer_load(&f->hload, h, g->hidden_role, &g->hidden_home, 0, len,
				       f->hbounce[cs].addr)) ||
		    (rc = fg_xfer_wait(&f->hload, NULL)))
			return rc;
		f->stats.hidden_bytes += len;
		f->stats.wait_hidden_s += fg_now() - t0;
	}
	/* The compute below appends to the cache slot: the slot's store from two
	 * items back must have read it first.  Decode steps waited for it before
	 * their prefetch; prefill has no prefetch, so this is its only wait. */
	if (f->n_off && unit_has_attn(f, it->u)) {
		t0 = fg_now();
		rc = fg_xfer_wait(&f->cstore[cs], NULL);
		f->stats.wait_cache_s += fg_now() - t0;
		if (rc)
			return rc;
	}
	/* This item's cache (prefetched, or loaded now without overlap). */
	if (f->step > 0 && f->n_off && unit_has_attn(f, it->u)) {
		if (!f->env.policy.overlap && (rc = cache_prefetch(f, it)))
			return rc;
		t0 = fg_now();
		rc = fg_xfer_wait(&f->cload[cs], NULL);
		f->stats.wait_cache_s += fg_now() - t0;
		if (rc)
			return rc;
	}

	t0 = fg_now();
	for (int64_t bi = f->ufirst[it->u]; bi < f->ufirst[it->u] + f->ucount[it->u] && !rc; bi++) {
		switch (f->m->blocks[bi].kind) {
		case FG_BLOCK_INPUT:
			rc = block_input(f, bi, ws, it->k, ids + it->k * f->bs * n, n, h);
			break;
		case FG_BLOCK_ATTN:
			rc = block_attn(f, bi, ws, it->k, cs, n, h);
			break;
		case FG_BLOCK_MLP:
			rc = block_mlp(f, bi, ws, n, h);
			break;
		case FG_BLOCK_OUTPUT:
			rc = block_output(f, bi, ws, n, h,
					  logits ? logits + it->k * f->bs * f->m->cfg.vocab : NULL,
					  top ? top + it->k * f->bs : NULL);
			break;
		}
	}
	if (rc)
		return rc;
	if ((rc = fg_backend_event_record(f->be, f->cdone[cs], NULL)))
		return rc;
	f->stats.compute_s += fg_now() - t0;

	/* Store what this item produced: new cache rows of slot-held sequences, activations. */
	if (f->n_off && unit_has_attn(f, it->u)) {
		/* (the slot's previous store was waited for before the compute) */
		if ((rc = fg_xfer_reset(&f->cstore[cs], "KV cache store")) ||
		    (rc = cache_move(f, &f->cstore[cs], 0, it->k, unit_layer(f, it->u), cs, f->step, n)))
			return rc;
		if (!f->env.policy.overlap) {
			t0 = fg_now();
			rc = fg_xfer_wait(&f->cstore[cs], f->mv.load_stream);
			f->stats.wait_cache_s += fg_now() - t0;
			if (rc)
				return rc;
		}
	}
	if (g->hidden_role != FG_ROLE_COMPUTE &&
	    f->m->blocks[f->ufirst[it->u]].kind != FG_BLOCK_OUTPUT) {
		size_t len = (size_t)(f->bs * n * f->m->cfg.hidden) * f->asz;
		if ((rc = fg_xfer_reset(&f->hstore[cs], "activations store")) ||
		    (rc = fg_xfer_store(&f->hstore[cs], g->hidden_role, &g->hidden_home, 0, h, len,
					f->hbounce[cs].addr)))
			return rc;
		f->stats.hidden_bytes += len;
		if (!f->env.policy.overlap) {
			t0 = fg_now();
			rc = fg_xfer_wait(&f->hstore[cs], f->mv.load_stream);
			f->stats.wait_hidden_s += fg_now() - t0;
		}
	}
	return rc;
}

/* Wait for every transfer in flight (end of a step, or before freeing). */
static int drain(struct fg_forward *f)
{
	int rc = 0, r;
	for (int s = 0; s < SLOTS; s++) {
		if (s < f->nslots && (r = fg_xfer_wait(&f->wload[s], NULL)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->cload[s], NULL)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->cstore[s], NULL)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->hstore[s], NULL)) && !rc)
			rc = r;
	}
	if ((r = fg_backend_stream_sync(f->be, NULL)) && !rc)
		rc = r;
	return rc;
}

static int step(struct fg_forward *f, const int32_t *ids, int64_t n, float *logits, int32_t *top)
{
	const struct fg_opt_config *c = &f->m->cfg;
	int overlap = f->env.policy.overlap;
	int64_t t = 0;
	double t0;
	int rc = 0;

	for (int64_t i = 0; i < f->nb * f->bs * n; i++)
		if (ids[i] < 0 || ids[i] >= c->vocab) {
			FG_ERR("token id %d out of range: %s has %lld tokens", ids[i], c->name,
			       (long long)c->vocab);
			return -EINVAL;
		}
	if (overlap && (rc = weights_load(f, 0, 0)))
		goto out;
	if (overlap && (rc = cache_prefetch(f, &(struct item){ 0, 0, 0 })))
		goto out;
	for (int64_t u = 0; u < f->nunits; u++) {
		int ws = (int)(u % f->nslots);
		for (int64_t k = 0; k < f->nb; k++, t++) {
			struct item it = { u, k, t };
			if (k == 0) {
				if (!overlap && (rc = weights_load(f, u, ws)))
					goto out;
				/* Next unit's weights go into the other slot during this unit. */
				if (overlap && u + 1 < f->nunits && (rc = weights_load(f, u + 1, (ws + 1) % SLOTS)))
					goto out;
				t0 = fg_now();
				rc = fg_xfer_wait(&f->wload[ws], NULL);
				f->stats.wait_weight_s += fg_now() - t0;
				if (rc)
					goto out;
			}
			struct item next = { k + 1 < f->nb ? u : u + 1, k + 1 < f->nb ? k + 1 : 0, t + 1 };
			if (overlap && next.u < f->nunits && (rc = cache_prefetch(f, &next)))
				goto out;
			if ((rc = run_item(f, &it, ids, n, logits, top)))
				goto out;
			if (k == f->nb - 1 &&
			    (rc = fg_backend_event_record(f->be, f->wdone[ws], NULL)))
				goto out;
		}
	}
out:
	{
		/* Nothing may stay in flight past a step, even after an error. */
		t0 = fg_now();
		int r = drain(f);
		f->stats.wait_cache_s += fg_now() - t0;
		if (!rc)
			rc = r;
	}
	if (!rc)
		f->step += n;
	return rc;
}

int fg_forward_prefill(struct fg_forward *f, const int32_t *ids, const int32_t *pad,
		       float *logits, int32_t *top)
{
	for (int64_t b = 0; b < f->nb; b++)
		for (int64_t s = 0; s < f->bs; s++) {
			int32_t p = pad[b * f->bs + s];
			if (p < 0 || p >= f->plen) {
				FG_ERR("prefill: row %lld has %d pads of %lld positions: every prompt needs a token",
				       (long long)(b * f->bs + s), p, (long long)f->plen);
				return -EINVAL;
			}
			f->gb[b].pad[s] = p;
		}
	f->step = 0;
	return step(f, ids, f->plen, logits, top);
}

int fg_forward_decode(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top)
{
	if (f->step == 0 || f->step >= f->total) {
		FG_ERR("decode: no room: %lld of %lld positions used", (long long)f->step,
		       (long long)f->total);
		return -EINVAL;
	}
	return step(f, ids, 1, logits, top);
}

const struct fg_forward_stats *fg_forward_stats(const struct fg_forward *f)
{
	return &f->stats;
}

/* ---- set-up ------------------------------------------------------------------ */

static int alloc_on(struct fg_forward *f, enum fg_role role, uint64_t size, struct fg_region *r,
		    const char *what)
{
	char hint[160];
	if (!size)
		return 0;
	if (!f->tier[role]) {
		FG_ERR("%s needs the %s tier, which is not configured", what, fg_role_name(role));
		return -EINVAL;
	}
	snprintf(hint, sizeof(hint), "(%s) a smaller gpu_batch_size x num_gpu_batches, shorter prompts or another [policy] percent would fit",
		 what);
	return fg_tier_alloc_hint(f->tier[role], size, r, hint);
}

static void free_on(struct fg_forward *f, enum fg_role role, struct fg_region *r)
{
	if (r->size)
		fg_tier_free(f->tier[role], r);
	memset(r, 0, sizeof(*r));
}

/* Units and the staging layout of their weights in a slot. */
static int plan_units(struct fg_forward *f, uint64_t *slot_bytes, uint64_t *bounce_bytes)
{
	const struct fg_model *m = f->m;
	int sep = f->env.policy.sep_layer;

	f->ufirst = calloc((size_t)m->nblocks, sizeof(int64_t));
	f->ucount = calloc((size_t)m->nblocks, sizeof(int64_t));
	f->ustage = calloc((size_t)m->nblocks, sizeof(uint64_t));
	if (!f->ufirst || !f->ucount || !f->ustage)
		return -ENOMEM;
	*slot_bytes = *bounce_bytes = 0;
	for (int64_t bi = 0; bi < m->nblocks; bi++) {
		/* Without sep_layer an MLP block joins its layer's attention unit. */
		if (!sep && m->blocks[bi].kind == FG_BLOCK_MLP) {
			f->ucount[f->nunits - 1]++;
		} else {
			f->ufirst[f->nunits] = bi;
			f->ucount[f->nunits++] = 1;
		}
	}
	for (int64_t u = 0; u < f->nunits; u++) {
		uint64_t off = 0, disk = 0;
		for (int64_t bi = f->ufirst[u]; bi < f->ufirst[u] + f->ucount[u]; bi++) {
			const struct fg_block *b = &m->blocks[bi];
			f->ustage[bi] = off;
			off += ALIGN(b->bytes[FG_ROLE_HOST] + b->bytes[FG_ROLE_DISK], 4096);
			disk += ALIGN(b->bytes[FG_ROLE_HOST] + b->bytes[FG_ROLE_DISK], 4096);
		}
		*slot_bytes = off > *slot_bytes ? off : *slot_bytes;
		*bounce_bytes = disk > *bounce_bytes ? disk : *bounce_bytes;
	}
	return 0;
}

static int any_disk_weights(const struct fg_model *m)
{
	return m->bytes[FG_ROLE_DISK] > 0;
}

/* Before allocating: would this batch fit each tier?  When not, name the
 * tier, the bytes asked and the largest gpu_batch_size that would fit. */
static int check_fits(const struct fg_forward_env *env, int device, unsigned asz,
		      int64_t prompt_len, int64_t gen_len)
{
	const struct fg_model *m = env->model;
	const struct fg_opt_config *c = &m->cfg;
	uint64_t blocks[FG_LAYOUT_KINDS][FG_ROLES];
	struct fg_layout_env le = { asz, device };
	struct fg_run_layout lay;
	struct fg_policy p = env->policy;

	for (int r = 0; r < FG_ROLES; r++) {
		blocks[FG_LAYOUT_INPUT][r] = m->blocks[0].bytes[r];
		blocks[FG_LAYOUT_ATTN][r] = m->nblocks > 2 ? m->blocks[1].bytes[r] : 0;
		blocks[FG_LAYOUT_MLP][r] = m->nblocks > 2 ? m->blocks[2].bytes[r] : 0;
		blocks[FG_LAYOUT_OUTPUT][r] = m->blocks[m->nblocks - 1].bytes[r];
	}
	if (fg_run_layout(c, &p, &le, blocks, prompt_len, gen_len, &lay))
		return 0; /* the allocations themselves will say what is wrong */
	for (int r = 0; r < FG_ROLES; r++) {
		struct fg_tier *t = m->tier[r];
		if (!lay.run[r] || !t)
			continue;
		uint64_t avail = t->capacity > t->used ? t->capacity - t->used : 0;
		if (lay.run[r] <= avail)
			continue;
		int64_t fit = 0;
		for (int64_t lo = 1, hi = env->policy.gpu_batch_size - 1; lo <= hi;) {
			int64_t mid = lo + (hi - lo) / 2;
			p.gpu_batch_size = mid;
			if (!fg_run_layout(c, &p, &le, blocks, prompt_len, gen_len, &lay) &&
			    lay.run[r] <= avail)
				fit = mid, lo = mid + 1;
			else
				hi = mid - 1;
		}
		p.gpu_batch_size = env->policy.gpu_batch_size;
		fg_run_layout(c, &p, &le, blocks, prompt_len, gen_len, &lay);
		char need[32], free_[32];
		fg_format_bytes(lay.run[r], need, sizeof(need));
		fg_format_bytes(avail, free_, sizeof(free_));
		if (fit)
			FG_ERR("tier %s (%s): a %lld x %lld batch of %lld + %lld tokens needs %s for cache, activations and buffers, %s are free: the largest gpu_batch_size that fits is %lld (or lower this tier's cache/activation share in [policy] percent)",
			       t->role, t->ph.plugin->name, (long long)p.num_gpu_batches,
			       (long long)p.gpu_batch_size, (long long)prompt_len, (long long)gen_len,
			       need, free_, (long long)fit);
		else
			FG_ERR("tier %s (%s): a %lld x %lld batch of %lld + %lld tokens needs %s for cache, activations and buffers, %s are free: no gpu_batch_size fits; lower this tier's shares in [policy] percent or raise its capacity",
			       t->role, t->ph.plugin->name, (long long)p.num_gpu_batches,
			       (long long)p.gpu_batch_size, (long long)prompt_len, (long long)gen_len,
			       need, free_);
		return -ENOSPC;
	}
	return 0;
}

int fg_forward_new(struct fg_forward **out, const struct fg_forward_env *env,
		   int64_t prompt_len, int64_t gen_len)
{
	const struct fg_policy *p = &env->policy;
	const struct fg_opt_config *c = &env->model->cfg;
	int64_t bs = p->gpu_batch_size, nb = p->num_gpu_batches;
	uint64_t slot_bytes, bounce_bytes, off = 0;
	struct fg_forward *f;
	int rc = -ENOMEM;

	if (bs < 1 || nb < 1 || prompt_len < 1 || gen_len < 0) {
		FG_ERR("forward: invalid batch %lld x %lld, prompt %lld, gen %lld", (long long)nb,
		       (long long)bs, (long long)prompt_len, (long long)gen_len);
		return -EINVAL;
	}
	if (prompt_len + gen_len > c->max_pos) {
		FG_ERR("prompt length %lld + generation length %lld exceed %s's %lld positions",
		       (long long)prompt_len, (long long)gen_len, c->name, (long long)c->max_pos);
		return -EINVAL;
	}
	{
		unsigned asz = fg_dtype_size(env->be->info.act_dtype);
		int dev = !(env->model->tier[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY);
		if ((rc = check_fits(env, dev, asz, prompt_len, gen_len)))
			return rc;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		FG_ERR("forward: out of memory");
		return -ENOMEM;
	}
	f->env = *env;
	f->m = env->model;
	f->be = env->be;
	f->hb = env->host_be ? env->host_be : env->be;
	f->tier = f->m->tier;
	f->act = f->be->info.act_dtype;
	f->asz = fg_dtype_size(f->act);
	f->cdt = p->compress_cache ? FG_DTYPE_Q4_COLS : f->act;
	f->bs = bs;
	f->nb = nb;
	f->plen = prompt_len;
	f->total = prompt_len + gen_len;
	f->nslots = p->overlap ? SLOTS : 1;
	fg_policy_split(p->cache, bs, f->cfirst, f->ccount);
	f->delegate = p->cpu_cache_compute && f->ccount[FG_ROLE_HOST] > 0;
	f->n_off = f->delegate ? f->ccount[FG_ROLE_DISK]
			       : f->ccount[FG_ROLE_HOST] + f->ccount[FG_ROLE_DISK];
	if (p->compress_cache && c->hidden % FG_Q4_GROUP) {
		FG_ERR("compress_cache needs a hidden size that is a multiple of %d; %s has %lld",
		       FG_Q4_GROUP, c->name, (long long)c->hidden);
		rc = -EINVAL;
		goto fail;
	}
	if ((rc = fg_mover_init(&f->mv, f->be, f->tier)))
		goto fail;
	/* requests per group: K and V, up to two ranges each, per sequence; plus weights */
	size_t cap = (size_t)(4 * bs + 16);
	for (int s = 0; s < SLOTS; s++) {
		if ((rc = fg_xfer_init(&f->wload[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->cload[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->cstore[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->hstore[s], &f->mv, cap)) ||
		    (rc = fg_backend_event_create(f->be, &f->wdone[s])) ||
		    (rc = fg_backend_event_create(f->be, &f->cdone[s])))
			goto fail;
	}
	if ((rc = fg_xfer_init(&f->hload, &f->mv, cap)))
		goto fail;
	f->xfer_ready = 1;
	if ((rc = plan_units(f, &slot_bytes, &bounce_bytes))) {
		FG_ERR("forward: out of memory");
		goto fail;
	}

	f->gb = calloc((size_t)nb, sizeof(*f->gb));
	f->pos = malloc(sizeof(int32_t) * (size_t)(bs * prompt_len));
	f->host_logits = malloc((size_t)(bs * c->vocab) * f->asz);
	f->host_argmax = malloc((size_t)(bs * c->vocab) * sizeof(float));
	if (!f->gb || !f->pos || !f->host_logits || !f->host_argmax) {
		FG_ERR("forward: out of host memory for a %lld x %lld batch", (long long)nb,
		       (long long)bs);
		rc = -ENOMEM;
		goto fail;
	}
	/* Scratch on the compute tier: x, q, k, v, a [rows, hidden], ffn, logits. */
	int64_t rows = bs * prompt_len;
	uint64_t hsz = ALIGN((uint64_t)(rows * c->hidden) * f->asz, 64);
	uint64_t scratch = 5 * hsz + ALIGN((uint64_t)(rows * c->ffn) * f->asz, 64) +
			   ALIGN((uint64_t)(bs * c->vocab) * f->asz, 64);
	if ((rc = alloc_on(f, FG_ROLE_COMPUTE, scratch, &f->scratch, "workspace")))
		goto fail;
	char *sb = f->scratch.addr;
	f->x = view(sb, f->act, rows, c->hidden);
	f->q = view(sb + hsz, f->act, rows, c->hidden);
	f->k = view(sb + 2 * hsz, f->act, rows, c->hidden);
	f->v = view(sb + 3 * hsz, f->act, rows, c->hidden);
	f->a = view(sb + 4 * hsz, f->act, rows, c->hidden);
	f->ffn = view(sb + 5 * hsz, f->act, rows, c->ffn);
	off = 5 * hsz + ALIGN((uint64_t)(rows * c->ffn) * f->asz, 64);
	f->logits = view(sb + off, f->act, bs, c->vocab);

	/* Weight slots (and their bounce buffers when disk feeds device memory). */
	for (int s = 0; s < f->nslots; s++) {
		if ((rc = alloc_on(f, FG_ROLE_COMPUTE, slot_bytes, &f->wslot[s], "weight buffer")))
			goto fail;
		if (f->mv.device && any_disk_weights(f->m) &&
		    (rc = alloc_on(f, FG_ROLE_HOST, bounce_bytes, &f->wbounce[s], "weight bounce buffer")))
			goto fail;
	}
	/* Activations: each GPU batch's hidden state lives on one tier. */
	int64_t afirst[FG_ROLES], acount[FG_ROLES];
	fg_policy_split(p->act, nb, afirst, acount);
	int any_off_act = 0;
	for (int64_t b = 0; b < nb; b++) {
		struct gpu_batch *g = &f->gb[b];
		g->hidden_role = b < acount[FG_ROLE_COMPUTE] ? FG_ROLE_COMPUTE
				 : b < acount[FG_ROLE_COMPUTE] + acount[FG_ROLE_HOST] ? FG_ROLE_HOST
										     : FG_ROLE_DISK;
		any_off_act |= g->hidden_role != FG_ROLE_COMPUTE;
		g->pad = calloc((size_t)bs, sizeof(int32_t));
		for (int r = 0; r < FG_ROLES; r++)
			g->cache[r] = calloc((size_t)c->layers, sizeof(struct fg_region));
		if (!g->pad || !g->cache[0] || !g->cache[1] || !g->cache[2]) {
			FG_ERR("forward: out of memory");
			rc = -ENOMEM;
			goto fail;
		}
		if ((rc = alloc_on(f, g->hidden_role, hsz, &g->hidden_home, "activations")))
			goto fail;
		for (int64_t l = 0; l < c->layers; l++)
			for (int r = 0; r < FG_ROLES; r++)
				if (f->ccount[r] &&
				    (rc = alloc_on(f, r, 2 * kv_bytes(f, f->ccount[r]), &g->cache[r][l],
						   "KV cache")))
					goto fail;
	}
	for (int s = 0; s < SLOTS; s++) {
		if (any_off_act) {
			if ((rc = alloc_on(f, FG_ROLE_COMPUTE, hsz, &f->hslot[s], "activation buffer")))
				goto fail;
			if (f->mv.device && acount[FG_ROLE_DISK] &&
			    (rc = alloc_on(f, FG_ROLE_HOST, hsz, &f->hbounce[s], "activation bounce buffer")))
				goto fail;
		}
		if (f->n_off) {
			if ((rc = alloc_on(f, FG_ROLE_COMPUTE, 2 * kv_bytes(f, f->n_off), &f->cslot[s],
					   "KV cache buffer")))
				goto fail;
			if (f->mv.device && f->ccount[FG_ROLE_DISK] &&
			    (rc = alloc_on(f, FG_ROLE_HOST, 2 * kv_bytes(f, f->n_off), &f->cbounce[s],
					   "KV cache bounce buffer")))
				goto fail;
		}
	}
	if (f->delegate && f->mv.device &&
	    (rc = alloc_on(f, FG_ROLE_HOST, 4 * hsz, &f->hstage, "host attention staging")))
		goto fail;
	*out = f;
	return 0;
fail:
	fg_forward_free(f);
	return rc;
}

void fg_forward_free(struct fg_forward *f)
{
	int rc = 0, r;

	if (!f)
		return;
	if (f->xfer_ready)
		drain(f);
	for (int s = 0; s < SLOTS; s++) {
		/* An error no wait returned (the steps drain every group, so
		 * none is expected) cannot be returned from here: it is logged. */
		if ((r = fg_xfer_fini(&f->wload[s])) && !rc)
			rc = r;
		if ((r = fg_xfer_fini(&f->cload[s])) && !rc)
			rc = r;
		if ((r = fg_xfer_fini(&f->cstore[s])) && !rc)
			rc = r;
		if ((r = fg_xfer_fini(&f->hstore[s])) && !rc)
			rc = r;
		if (f->wdone[s])
			fg_backend_event_destroy(f->be, f->wdone[s]);
		if (f->cdone[s])
			fg_backend_event_destroy(f->be, f->cdone[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->wslot[s]);
		free_on(f, FG_ROLE_HOST, &f->wbounce[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->cslot[s]);
		free_on(f, FG_ROLE_HOST, &f->cbounce[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->hslot[s]);
		free_on(f, FG_ROLE_HOST, &f->hbounce[s]);
	}
	if ((r = fg_xfer_fini(&f->hload)) && !rc)
		rc = r;
	if (rc)
		FG_LOG(FG_LOG_WARN, "freeing a forward pass: %s", fg_last_error());
	free_on(f, FG_ROLE_HOST, &f->hstage);
	for (int64_t b = 0; f->gb && b < f->nb; b++) {
		struct gpu_batch *g = &f->gb[b];
		for (int r = 0; r < FG_ROLES; r++) {
			for (int64_t l = 0; g->cache[r] && l < f->m->cfg.layers; l++)
				free_on(f, r, &g->cache[r][l]);
			free(g->cache[r]);
		}
		free_on(f, g->hidden_role, &g->hidden_home);
		free(g->pad);
	}
	free_on(f, FG_ROLE_COMPUTE, &f->scratch);
	if (f->mv.be)
		fg_mover_fini(&f->mv);
	free(f->gb);
	free(f->ufirst);
	free(f->ucount);
	free(f->ustage);
	free(f->pos);
	free(f->host_logits);
	free(f->host_argmax);
	free(f);
}

void fg_forward_bytes(const struct fg_forward *f, uint64_t bytes[FG_ROLES])
{
	for (int r = 0; r < FG_ROLES; r++)
		bytes[r] = 0;
	for (int s = 0; s < SLOTS; s++) {
		bytes[FG_ROLE_COMPUTE] += f->wslot[s].size + f->cslot[s].size + f->hslot[s].size;
		bytes[FG_ROLE_HOST] += f->wbounce[s].size + f->cbounce[s].size + f->hbounce[s].size;
	}
	bytes[FG_ROLE_HOST] += f->hstage.size;
	bytes[FG_ROLE_COMPUTE] += f->scratch.size;
	for (int64_t b = 0; b < f->nb; b++) {
		const struct gpu_batch *g = &f->gb[b];
		bytes[g->hidden_role] += g->hidden_home.size;
		for (int r = 0; r < FG_ROLES; r++)
			for (int64_t l = 0; l < f->m->cfg.layers; l++)
				bytes[r] += g->cache[r][l].size;
	}
}
