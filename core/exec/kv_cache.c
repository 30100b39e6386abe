/* core/exec/kv_cache.c - the KV cache: its byte layout, its moves between
 * home tiers and the cache slot, and the bodies' `attend`.
 *
 * Each GPU batch's sequences are split over the tiers by the policy's cache
 * shares; per layer, a tier holds K then V of its sequences, each
 * [nseq * cols, kv width] in the cache dtype (act, or 4-bit groups along a
 * row), cols being the run's positions or, for a model windowed on every
 * layer, a ring of the window's length (fg_plan_cache_cols): position t of
 * a row at its column t % cols.  Sequences whose cache is off the compute
 * tier are computed in a compute-tier slot, loaded before and stored after
 * (host-tier sequences attend on the host instead with cpu_cache_compute).
 * In a decode step, a finished sequence (fg_forward_set_live_rows) is
 * neither loaded nor stored and attends to no position; its K/V rows are
 * still appended with its batch's (one call for the group), which costs
 * what its matrix-product rows cost, not its length. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>
#include "core/exec/forward_int.h"

int64_t fg_kv_columns(const struct fg_forward *f, int64_t p0, int64_t n, int64_t seg[2][2],
		      int64_t *skip)
{
	int64_t t = f->cols, a;

	if (n >= t && !skip) {
		seg[0][0] = 0, seg[0][1] = t;
		return 1;
	}
	if (skip) { /* the positions that stay: the last t */
		*skip = n > t ? n - t : 0;
		p0 += *skip;
		n -= *skip;
	}
	a = p0 % t;
	seg[0][0] = a;
	seg[0][1] = a + n <= t ? n : t - a;
	seg[1][0] = 0;
	seg[1][1] = n - seg[0][1];
	return seg[1][1] ? 2 : 1;
}

uint64_t fg_kv_bytes(const struct fg_forward *f, int64_t nseq)
{
	return fg_plan_kv_bytes(f->cfg, nseq, f->cols, f->asz, f->cdt);
}

void fg_kv_views(const struct fg_forward *f, void *base, int64_t nseq, struct fg_tensor *k,
		 struct fg_tensor *v)
{
	*k = fg_view(base, f->cdt, nseq * f->cols, f->kvw);
	*v = *k;
	v->data = (char *)base + fg_kv_bytes(f, nseq);
}

/* Byte ranges of rows [r0, r0 + nr) of sequence s in a K or V tensor of nseq
 * sequences: one range for plain types; for the encoded caches (the width a
 * whole number of groups of 64, fg_plan_make) the codes, then the groups'
 * 4 bytes each (int4's scale and minimum, fp8's scale). */
static int fg_kv_ranges(const struct fg_forward *f, int64_t nseq, int64_t s, int64_t r0,
			int64_t nr, uint64_t off[2], uint64_t len[2])
{
	uint64_t w = (uint64_t)f->kvw, row = (uint64_t)(s * f->cols + r0);
	uint64_t rows = (uint64_t)(nseq * f->cols), groups = w / FG_Q4_GROUP;
	if (f->cdt != FG_DTYPE_Q4_COLS && f->cdt != FG_DTYPE_F8_COLS) {
		off[0] = row * w * f->asz;
		len[0] = (uint64_t)nr * w * f->asz;
		return 1;
	}
	if (f->cdt == FG_DTYPE_Q4_COLS) {
		off[0] = row * w / 2;
		len[0] = (uint64_t)nr * w / 2;
		off[1] = fg_q4_data_bytes(rows, w);
	} else {
		off[0] = row * w;
		len[0] = (uint64_t)nr * w;
		off[1] = fg_f8_data_bytes(rows, w);
	}
	off[1] += row * groups * 4;
	len[1] = (uint64_t)nr * groups * 4;
	return 2;
}

/* Index in the cache slot of the i-th sequence of a role. */
static int64_t fg_kv_slot_index(const struct fg_forward *f, enum fg_role role, int64_t i)
{
	if (f->plan.delegate)
		return i; /* only disk sequences use the slot */
	return role == FG_ROLE_HOST ? i : f->plan.ccount[FG_ROLE_HOST] + i;
}

/* fg_kv_move over columns [r0, r0 + nr) of the cache's own (r0 + nr <= cols). */
static int kv_move_cols(struct fg_forward *f, struct fg_xfer *x, int load, int64_t b, int64_t l,
			int slot, int64_t r0, int64_t nr)
{
	const struct fg_plan *p = &f->plan;
	int rc;

	for (int role = FG_ROLE_DISK; role <= FG_ROLE_HOST; role++) {
		int64_t cnt = p->ccount[role];
		if (!cnt || (p->delegate && role == FG_ROLE_HOST))
			continue;
		const struct fg_region *home = &f->gb[b].cache[role][l];
		for (int64_t i = 0; i < cnt; i++) {
			int64_t j = fg_kv_slot_index(f, role, i);
			/* No one reads a finished row's cache again: its slot rows
			 * keep whatever they held, its home stops growing. */
			int dead = fg_cache_dead(f, b, p->cfirst[role] + i);
			for (int kv = 0; kv < 2; kv++) {
				uint64_t ho[2], so[2], len[2];
				int n = fg_kv_ranges(f, cnt, i, r0, nr, ho, len);
				fg_kv_ranges(f, p->n_off, j, r0, nr, so, len);
				for (int c = 0; c < n; c++) {
					if (dead) {
						f->stats.cache_skipped += len[c];
						continue;
					}
					uint64_t hoff = ho[c] + (kv ? fg_kv_bytes(f, cnt) : 0);
					uint64_t soff = so[c] + (kv ? fg_kv_bytes(f, p->n_off) : 0);
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

int fg_kv_move(struct fg_forward *f, struct fg_xfer *x, int load, int64_t b, int64_t l, int slot,
	       int64_t r0, int64_t nr)
{
	int64_t seg[2][2], n = fg_kv_columns(f, r0, nr, seg, NULL);
	int rc = 0;

	for (int64_t i = 0; i < n && !rc; i++)
		rc = kv_move_cols(f, x, load, b, l, slot, seg[i][0], seg[i][1]);
	return rc;
}

/* Where row s of GPU batch kb has its layer-l cache this step: the memory
 * (compute tier, or host memory for a delegated host row), how many
 * sequences it holds, which of them is s. */
static void *fg_kv_where(const struct fg_forward *f, int64_t kb, int64_t l, int64_t s,
			 int64_t *nseq, int64_t *idx)
{
	const struct fg_plan *p = &f->plan;
	int64_t cc = p->ccount[FG_ROLE_COMPUTE], h0 = p->cfirst[FG_ROLE_HOST];

	if (s < cc) {
		*nseq = cc, *idx = s;
		return f->gb[kb].cache[FG_ROLE_COMPUTE][l].addr;
	}
	if (p->delegate && s >= h0 && s < h0 + p->ccount[FG_ROLE_HOST]) {
		*nseq = p->ccount[FG_ROLE_HOST], *idx = s - h0;
		return f->gb[kb].cache[FG_ROLE_HOST][l].addr;
	}
	*nseq = p->n_off, *idx = s - (p->delegate ? p->cfirst[FG_ROLE_DISK] : cc);
	return f->cslot[f->cur_slot].addr;
}

int fg_kv_share(struct fg_forward *f, int64_t kb, int64_t l, int64_t rows)
{
	const int32_t *pad = f->gb[kb].pad;
	int64_t end = f->share_end;
	int rc;

	for (int64_t s = 0; s < rows; s++) {
		int64_t r = kb * f->bs + s, from = f->share_src[r] - kb * f->bs;
		if (from == s || pad[s] >= end || fg_row_dead(f, kb, s))
			continue;
		int64_t dn, di, sn, si;
		char *dst = fg_kv_where(f, kb, l, s, &dn, &di);
		const char *src = fg_kv_where(f, kb, l, from, &sn, &si);
		for (int kv = 0; kv < 2; kv++) {
			uint64_t doff[2], soff[2], len[2];
			int n = fg_kv_ranges(f, dn, di, pad[s], end - pad[s], doff, len);
			fg_kv_ranges(f, sn, si, pad[from], end - pad[s], soff, len);
			for (int c = 0; c < n; c++)
				if ((rc = fg_backend_copy(f->be, f->stream,
							  dst + doff[c] + (kv ? fg_kv_bytes(f, dn) : 0),
							  src + soff[c] + (kv ? fg_kv_bytes(f, sn) : 0),
							  len[c])))
					return rc;
		}
	}
	return 0;
}

/* Row i of every n of t, from row `first`: query position i of each row. */
static struct fg_tensor fg_rows_every(struct fg_tensor t, int64_t i, int64_t n)
{
	t.data = (char *)t.data + (size_t)(i * t.ld) * fg_dtype_size(t.dtype);
	t.rows /= n;
	t.ld *= n;
	return t;
}

int fg_attend_chunk(struct fg_forward *f, struct fg_backend *be, void *stream, int64_t layer,
		    const char *what, const struct fg_attention_args *d, int64_t n)
{
	int rc;

	if (n == 1)
		return fg_backend_attention_decode(be, stream, layer, what, d);
	/* One op for the n tokens where the backend has it (compute ABI 1.8). */
	if (!d->ring && fg_backend_supports(be, FG_OP_ATTENTION_CACHED, d->k.dtype)) {
		struct fg_attention_args a = *d;
		a.seq = n;
		a.start = d->len - n;
		return fg_backend_attention_prefill(be, stream, layer, what, &a);
	}
	if (!f->chunk_pad && !(f->chunk_pad = malloc(sizeof(int32_t) * (size_t)f->bs)))
		return -ENOMEM;
	for (int64_t i = 0; i < n; i++) {
		struct fg_attention_args a = *d;
		a.q = fg_rows_every(d->q, i, n);
		a.out = fg_rows_every(d->out, i, n);
		a.len = d->len - n + 1 + i;
		/* a row still in its padding at this column attends to nothing */
		for (int64_t b = 0; b < d->batch; b++)
			f->chunk_pad[b] = d->pad[b] < a.len ? d->pad[b] : (int32_t)a.len;
		a.pad = f->chunk_pad;
		if ((rc = fg_backend_attention_decode(be, stream, layer, what, &a)))
			return rc;
	}
	return 0;
}

const int32_t *fg_kv_attend_pad(const struct fg_forward *f, const struct fg_block_ctx *x)
{
	return fg_rows_masked(f) ? f->mask.attn_pad + f->cur_k * f->bs : x->pad;
}

/* One op where it can; else one a sequence and run of columns: where the
 * positions wrap past the cache's columns (joining prompts, a window's
 * ring), where only the last of them stay (a prompt longer than the ring),
 * and for an encoded cache (4-bit, fp8) after its first sequence (its rows are addressed
 * from the tensor's start: the sequence is named by `start` over a stride
 * of the whole tensor). */
int fg_kv_append_cols(struct fg_forward *f, struct fg_backend *be, void *stream, int64_t layer,
		      const char *what, struct fg_tensor src, struct fg_tensor c, int64_t s,
		      int64_t seqs, int64_t n)
{
	int64_t seg[2][2], skip, parts = fg_kv_columns(f, f->step, n, seg, &skip);
	int enc = c.dtype == FG_DTYPE_Q4_COLS || c.dtype == FG_DTYPE_F8_COLS, rc;

	if (parts == 1 && !skip && (!enc || s == 0)) {
		struct fg_tensor cs = c;
		if (!enc) {
			cs.data = (char *)c.data + (size_t)(s * f->cols * c.ld) * fg_dtype_size(c.dtype);
			cs.rows = seqs * f->cols;
		}
		struct fg_kv_append_args a = { src, cs, seqs, n, seg[0][0], f->cols };
		return fg_backend_kv_append(be, stream, layer, what, &a);
	}
	for (int64_t i = 0; i < seqs; i++)
		for (int64_t p = 0, off = skip; p < parts; off += seg[p][1], p++) {
			struct fg_kv_append_args a = { fg_rows(src, i * n + off, seg[p][1]), c, 1,
						       seg[p][1], (s + i) * f->cols + seg[p][0],
						       c.rows };
			if ((rc = fg_backend_kv_append(be, stream, layer, what, &a)))
				return rc;
		}
	return 0;
}

static int append_kv(struct fg_forward *f, struct fg_block_ctx *x, const char *what,
		     struct fg_tensor src, struct fg_tensor c, int64_t s, int64_t seqs, int64_t n)
{
	return fg_kv_append_cols(f, x->be, x->stream, x->layer, what, src, c, s, seqs, n);
}

/* Joining rows' K/V (join.c), run by run of them among rows [s0, s0 + m)
 * of a group whose cache views are kc, vc: the rows left out keep theirs. */
static int append_joining(struct fg_forward *f, struct fg_block_ctx *x, struct fg_tensor k,
			  struct fg_tensor v, struct fg_tensor kc, struct fg_tensor vc, int64_t s0,
			  int64_t m)
{
	int64_t n = x->n, kb = f->cur_k;
	int rc;

	for (int64_t a = s0; a < s0 + m;) {
		if (fg_row_dead(f, kb, a)) {
			a++;
			continue;
		}
		int64_t b = a + 1;
		while (b < s0 + m && !fg_row_dead(f, kb, b))
			b++;
		if ((rc = append_kv(f, x, "k cache", fg_rows(k, a * n, (b - a) * n), kc, a - s0,
				    b - a, n)) ||
		    (rc = append_kv(f, x, "v cache", fg_rows(v, a * n, (b - a) * n), vc, a - s0,
				    b - a, n)))
			return rc;
		a = b;
	}
	return 0;
}

/* The sequences of one kind of cache home: from `first`, cnt of them, in a
 * cache of cache_seqs sequences. */
struct kv_group {
	int64_t first, cnt;
	void *cache;
	int64_t cache_seqs;
};

/* Gathered joining rows (join.c): the step's row a to its own row's cache,
 * in whichever group that row's cache is. */
static int append_gathered(struct fg_forward *f, struct fg_block_ctx *x, struct fg_tensor k,
			   struct fg_tensor v, const struct kv_group grp[2])
{
	int64_t n = x->n, kb = f->cur_k;
	struct fg_tensor kc, vc;
	int rc;

	for (int64_t a = 0; a < x->bs; a++) {
		if (fg_row_dead(f, kb, a))
			continue;
		int64_t to = f->join_row[kb * f->bs + a];
		const struct kv_group *g = &grp[to >= grp[0].first + grp[0].cnt];
		fg_kv_views(f, g->cache, g->cache_seqs, &kc, &vc);
		if ((rc = append_kv(f, x, "k cache", fg_rows(k, a * n, n), kc, to - g->first, 1, n)) ||
		    (rc = append_kv(f, x, "v cache", fg_rows(v, a * n, n), vc, to - g->first, 1, n)))
			return rc;
	}
	return 0;
}

/* Three groups of sequences: compute-resident (their home is the compute
 * tier), slot-held (loaded into the cache slot), host-delegated. */
int fg_kv_attend(struct fg_block_ctx *x, struct fg_tensor q, struct fg_tensor k,
		 struct fg_tensor v, struct fg_tensor out)
{
	struct fg_forward *f = x->sched;
	const struct fg_plan *p = &f->plan;
	const struct fg_model_config *c = f->cfg;
	int64_t kb = f->cur_k, l = x->layer, n = x->n, cc = p->ccount[FG_ROLE_COMPUTE];
	int cs = f->cur_slot;
	const int32_t *pad = fg_kv_attend_pad(f, x);
	struct fg_tensor kc, vc;
	int rc;

	struct fg_attention_args at = {
		.batch = x->bs, .seq = n, .len = f->step + n, .cache_stride = f->cols,
		.heads = c->heads, .head_dim = c->head_dim,
		.scale = fg_attn_scale(c), .softcap = c->attn_softcap, .pad = pad, .kv_heads = c->kv_heads,
		/* past the cache's columns, positions wrap (fg_forward_wraps, a
		 * window's ring) */
		.ring = f->step + n > f->cols ? f->cols : 0,
		.window = fg_layer_window(c, f->m->stage.layer0 + l),
	};
	/* A prefill, and joining rows (join.c): attention within the step's
	 * columns, with pads counted from the step's first column. */
	if (f->step == 0 || f->joining) {
		at.q = q, at.k = k, at.v = v, at.out = out;
		if (f->joining) {
			at.len = n;
			at.pad = f->join_pad + kb * f->bs;
		}
		if ((rc = fg_backend_attention_prefill(x->be, x->stream, l, "attention", &at)))
			return rc;
	}
	struct kv_group grp[2] = {
		{ 0, cc, cc ? f->gb[kb].cache[FG_ROLE_COMPUTE][l].addr : NULL, cc },
		{ p->delegate ? p->cfirst[FG_ROLE_DISK] : cc,
		  p->delegate ? p->ccount[FG_ROLE_DISK] : p->n_off, f->cslot[cs].addr, p->n_off },
	};
	if (f->sharing && (rc = fg_kv_share(f, kb, l, x->bs)))
		return rc;
	/* (gathered joins: no attention on the host, join.c) */
	if (f->joining && f->join_dense)
		return append_gathered(f, x, k, v, grp);
	for (int gi = 0; gi < 2; gi++) {
		/* only the rows computed (x->bs: up to the last live one) */
		int64_t s0 = grp[gi].first, m = fg_rows_within(s0, grp[gi].cnt, x->bs);
		if (!m)
			continue;
		fg_kv_views(f, grp[gi].cache, grp[gi].cache_seqs, &kc, &vc);
		if (f->joining) {
			if ((rc = append_joining(f, x, k, v, kc, vc, s0, m)))
				return rc;
			continue;
		}
		if ((rc = append_kv(f, x, "k cache", fg_rows(k, s0 * n, m * n), kc, 0, m, n)) ||
		    (rc = append_kv(f, x, "v cache", fg_rows(v, s0 * n, m * n), vc, 0, m, n)))
			return rc;
		if (f->step > 0) {
			struct fg_attention_args d = at;
			d.q = fg_rows(q, s0 * n, m * n), d.k = kc, d.v = vc;
			d.out = fg_rows(out, s0 * n, m * n);
			d.batch = m;
			d.seq = 1;
			d.pad = pad + s0;
			if ((rc = fg_attend_chunk(f, x->be, x->stream, l, "attention", &d, n)))
				return rc;
		}
	}
	if (!p->delegate || !p->ccount[FG_ROLE_HOST])
		return 0;
	/* The device waits for the host's attention: a phase of its own. */
	rc = fg_devtime_mark(f, FG_DEV_COMPUTE);
	if (!rc)
		rc = fg_host_attention(f, x, q, k, v, out);
	return rc ? rc : fg_devtime_mark(f, FG_DEV_HOST_ATTN);
}
