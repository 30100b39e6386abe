/* core/exec/weight_slots.c - a unit's off-compute weights staged into a
 * compute-tier weight slot (once per unit and step, for every GPU batch), and
 * the views the block bodies compute with.
 *
 * In a slot, each block of the unit starts at the plan's stage offset: the
 * bulk of its host-tier bytes, then of its disk-tier bytes (pieces at their
 * region offsets), then each gathered tensor whole: a tensor split by rows
 * over the tiers (placement = exact) on a device, its pieces copied to their
 * rows - the compute tier's one too - so that its product is one GEMM of the
 * unsplit shape, and the tokens those of an unsplit run; and a host-tier
 * token table, of which a decode step stages only its ids' rows. */
#include <stdio.h>
#include <stdlib.h>

#include "core/exec/forward_int.h"

static char *fg_staged(const struct fg_forward *f, int64_t bi, int slot)
{
	const struct fg_block *b = &f->m->blocks[bi];
	if (!f->wslot[slot].addr)
		return NULL;
	return (char *)f->wslot[slot].addr + f->plan.stage[b->plan->kind];
}

void fg_block_views(const struct fg_forward *f, int64_t bi, int slot, struct fg_wview *out)
{
	const struct fg_block *b = &f->m->blocks[bi];
	const struct fg_plan_block *pb = b->plan;
	char *staged = fg_staged(f, bi, slot);

	for (int64_t i = 0; i < pb->ntensors; i++) {
		const struct fg_plan_tensor *t = &b->t[i];
		out[i].npieces = t->npieces;
		out[i].piece[0].t = (struct fg_tensor){ 0 }; /* an absent tensor: no data */
		out[i].piece[0].row0 = 0;
		if (t->gathered) {
			out[i].npieces = 1;
			out[i].piece[0].t = fg_view(staged + t->gather, t->dtype, t->rows, t->cols);
			continue;
		}
		for (int k = 0; k < t->npieces; k++) {
			const struct fg_plan_piece *p = &t->piece[k];
			char *addr;
			switch (p->role) {
			case FG_ROLE_COMPUTE:
				addr = (char *)b->region[FG_ROLE_COMPUTE].addr + p->offset;
				break;
			case FG_ROLE_HOST:
				addr = staged + p->offset;
				break;
			default:
				addr = staged + pb->bulk[FG_ROLE_HOST] + p->offset;
				break;
			}
			out[i].piece[k].t = fg_view(addr, t->dtype, p->rows, t->cols);
			out[i].piece[k].row0 = p->row0;
		}
	}
}

/* Piece k of gathered tensor t of block b into its rows of the whole tensor
 * at dst (bounce: the same place in the bounce buffer). */
static int fg_gather_piece(struct fg_forward *f, struct fg_xfer *x, const struct fg_block *b,
			   const struct fg_plan_tensor *t, int k, char *dst, char *bounce)
{
	const struct fg_plan_piece *p = &t->piece[k];
	uint64_t src[2], at[2], len[2];
	int n = fg_plan_gather_ranges(t, k, src, at, len), rc;

	for (int i = 0; i < n; i++)
		if ((rc = fg_xfer_load(x, dst + at[i], p->role, &b->region[p->role],
				       p->offset + src[i], len[i], bounce ? bounce + at[i] : NULL)))
			return rc;
	if (p->role != FG_ROLE_COMPUTE)
		f->stats.weight_bytes += p->bytes;
	return 0;
}

/* A token table staged by rows (plan: by_rows): the rows of the step's ids
 * when they are few (decode: a row per sequence), else the whole table. */
static int fg_stage_rows(struct fg_forward *f, struct fg_xfer *x, const struct fg_block *b,
			 const struct fg_plan_tensor *t, char *dst)
{
	const struct fg_plan_piece *p = &t->piece[0];
	size_t row = (size_t)t->cols * 2;
	int rc;

	if (!f->in.ids || !fg_plan_rows_staged((double)f->in.n, (double)t->rows) ||
	    (!f->in.seen && !(f->in.seen = calloc((size_t)t->rows, 1)))) {
		if ((rc = fg_xfer_load(x, dst, p->role, &b->region[p->role], p->offset, p->bytes, NULL)))
			return rc;
		f->stats.weight_bytes += p->bytes;
		return 0;
	}
	for (int64_t i = 0; i < f->in.n; i++) {
		int32_t id = f->in.ids[i]; /* in range: checked before the step */
		if (f->in.seen[id])
			continue;
		f->in.seen[id] = 1;
		if ((rc = fg_xfer_load(x, dst + (size_t)id * row, p->role, &b->region[p->role],
				       p->offset + (uint64_t)id * row, row, NULL)))
			return rc;
		f->stats.weight_bytes += row;
	}
	for (int64_t i = 0; i < f->in.n; i++)
		f->in.seen[f->in.ids[i]] = 0;
	return 0;
}

int fg_unit_weights_load(struct fg_forward *f, int64_t u, int slot)
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
		const struct fg_plan_block *pb = b->plan;
		const uint64_t *bulk = pb->bulk;
		uint64_t so = f->plan.stage[pb->kind];
		char *dst = fg_staged(f, bi, slot);
		char *bounce = f->wbounce[slot].addr ? (char *)f->wbounce[slot].addr + so : NULL;
		if (bulk[FG_ROLE_HOST] &&
		    (rc = fg_xfer_load(x, dst, FG_ROLE_HOST, &b->region[FG_ROLE_HOST], 0,
				       bulk[FG_ROLE_HOST], NULL)))
			return rc;
		if (bulk[FG_ROLE_DISK] &&
		    (rc = fg_xfer_load(x, dst + bulk[FG_ROLE_HOST], FG_ROLE_DISK,
				       &b->region[FG_ROLE_DISK], 0, bulk[FG_ROLE_DISK], bounce)))
			return rc;
		f->stats.weight_bytes += bulk[FG_ROLE_HOST] + bulk[FG_ROLE_DISK];
		for (int64_t i = 0; i < pb->ntensors; i++) {
			const struct fg_plan_tensor *t = &b->t[i];
			if (!t->gathered)
				continue;
			if (t->by_rows) {
				if ((rc = fg_stage_rows(f, x, b, t, dst + t->gather)))
					return rc;
				continue;
			}
			for (int k = 0; k < t->npieces; k++)
				if ((rc = fg_gather_piece(f, x, b, t, k, dst + t->gather,
							  bounce ? bounce + t->gather : NULL)))
					return rc;
		}
	}
	return 0;
}
