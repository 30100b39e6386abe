/* core/engine/weight_slots.c - a unit's off-compute weights staged into a
 * compute-tier weight slot (once per unit and step, for every GPU batch), and
 * the views the block bodies compute with.
 *
 * In a slot, each block of the unit starts at the plan's stage offset: its
 * host-tier bytes, then its disk-tier bytes, pieces at their region offsets. */
#include <stdio.h>

#include "core/engine/forward_int.h"

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

	for (int i = 0; i < pb->ntensors; i++) {
		const struct fg_plan_tensor *t = &pb->t[i];
		out[i].npieces = t->npieces;
		out[i].piece[0].t = (struct fg_tensor){ 0 }; /* an absent tensor: no data */
		out[i].piece[0].row0 = 0;
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
				addr = staged + pb->bytes[FG_ROLE_HOST] + p->offset;
				break;
			}
			out[i].piece[k].t = fg_view(addr, t->dtype, p->rows, t->cols);
			out[i].piece[k].row0 = p->row0;
		}
	}
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
		const uint64_t *bytes = b->plan->bytes;
		uint64_t so = f->plan.stage[b->plan->kind];
		char *dst = fg_staged(f, bi, slot);
		char *bounce = f->wbounce[slot].addr ? (char *)f->wbounce[slot].addr + so : NULL;
		if (bytes[FG_ROLE_HOST] &&
		    (rc = fg_xfer_load(x, dst, FG_ROLE_HOST, &b->region[FG_ROLE_HOST], 0,
				       bytes[FG_ROLE_HOST], NULL)))
			return rc;
		if (bytes[FG_ROLE_DISK] &&
		    (rc = fg_xfer_load(x, dst + bytes[FG_ROLE_HOST], FG_ROLE_DISK,
				       &b->region[FG_ROLE_DISK], 0, bytes[FG_ROLE_DISK], bounce)))
			return rc;
		f->stats.weight_bytes += bytes[FG_ROLE_HOST] + bytes[FG_ROLE_DISK];
	}
	return 0;
}
