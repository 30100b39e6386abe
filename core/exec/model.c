/* core/exec/model.c - allocate each block's regions as the plan places
 * them, and fill them from the weight source. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend/backend.h"
#include "core/exec/model.h"
#include "core/util/error.h"

/* Read the block's tensors from the source and write each piece to its tier. */
static int fill_block(struct fg_model *m, struct fg_block *b, struct fg_weights *w,
		      const struct fg_codec *wc, uint16_t *f16, void *enc)
{
	const struct fg_plan_block *pb = b->plan;
	char name[128];
	int rc;

	for (int64_t i = 0; i < pb->ntensors; i++) {
		const struct fg_plan_tensor *t = &b->t[i];
		if (!t->npieces)
			continue;
		if (fg_arch_tensor_name(t->def, b->layer < 0 ? -1 : m->stage.layer0 + b->layer,
					t->expert, name, sizeof(name))) {
			FG_ERR("model: the name of a tensor of %s (%s) is too long", m->cfg.name,
			       t->def->name);
			return -EINVAL;
		}
		for (int k = 0; k < t->npieces; k++) {
			const struct fg_plan_piece *pp = &t->piece[k];
			const void *src = f16;
			rc = fg_weights_read_rows_f16(w, name, pp->row0, pp->rows, t->cols, f16);
			if (rc)
				return rc;
			if (t->dtype != FG_DTYPE_F16) { /* 4-bit groups of rows; fp8 scales rows */
				struct fg_codec_shape s = { (uint64_t)pp->rows, (uint64_t)t->cols,
							    t->dtype == FG_DTYPE_Q4_ROWS ? 0 : 1 };
				rc = fg_codec_encode_f16(wc, &s, f16, enc);
				if (rc)
					return rc;
				src = enc;
			}
			rc = fg_tier_write(m->tier[pp->role], &b->region[pp->role], pp->offset, src,
					   (size_t)pp->bytes);
			if (rc)
				return rc;
		}
	}
	return 0;
}

int fg_model_load(struct fg_model *m, const struct fg_model_config *cfg, struct fg_weights *w,
		  struct fg_tier *tiers[FG_ROLES], const struct fg_policy *p,
		  const struct fg_codec *wc)
{
	struct fg_stage whole;
	fg_stage_whole(cfg->layers, &whole);
	return fg_model_load_stage(m, cfg, w, tiers, p, wc, &whole);
}

int fg_model_load_stage(struct fg_model *m, const struct fg_model_config *cfg,
			struct fg_weights *w, struct fg_tier *tiers[FG_ROLES],
			const struct fg_policy *p, const struct fg_codec *wc,
			const struct fg_stage *stage)
{
	uint64_t largest = 0;
	uint16_t *f16 = NULL;
	void *enc = NULL;
	int rc = 0;

	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	m->stage = *stage;
	for (int r = 0; r < FG_ROLES; r++)
		m->tier[r] = tiers[r];
	for (int k = 0; k < FG_BLOCK_KINDS; k++) {
		int64_t n = fg_plan_block_tensors(cfg, (enum fg_block_kind)k);
		m->placed[k] = calloc((size_t)(n ? n : 1), sizeof(*m->placed[k]));
		if (!m->placed[k]) {
			FG_ERR("model: out of memory placing %lld tensors", (long long)n);
			fg_model_unload(m);
			return -ENOMEM;
		}
		fg_plan_block(cfg, p, (enum fg_block_kind)k,
			      !(tiers[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY), &m->kind[k],
			      m->placed[k]);
		for (int64_t t = 0; t < n; t++) {
			const struct fg_plan_tensor *pt = &m->placed[k][t];
			uint64_t b = (uint64_t)pt->rows * (uint64_t)pt->cols * 2,
				 e = fg_plan_tensor_bytes(pt, pt->rows);
			largest = b > largest ? b : largest;
			largest = e > largest ? e : largest;
		}
	}
	int first = fg_stage_first(stage), last = fg_stage_last(stage);
	m->nblocks = first + 2 * stage->nlayers + last;
	m->blocks = calloc((size_t)m->nblocks, sizeof(*m->blocks));
	if (!m->blocks) {
		FG_ERR("model: out of memory");
		fg_model_unload(m);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < m->nblocks; i++) {
		int64_t j = i - first; /* block index within the stage's layers */
		enum fg_block_kind k = first && i == 0		      ? FG_BLOCK_INPUT
				       : last && i == m->nblocks - 1 ? FG_BLOCK_OUTPUT
				       : j % 2 == 0		      ? FG_BLOCK_ATTN
								      : FG_BLOCK_MLP;
		m->blocks[i].plan = &m->kind[k];
		m->blocks[i].t = m->placed[k];
		m->blocks[i].layer = k == FG_BLOCK_INPUT || k == FG_BLOCK_OUTPUT ? -1 : j / 2;
	}
	/* Allocate everything first: a placement that does not fit fails before any reading. */
	for (int64_t i = 0; i < m->nblocks && !rc; i++)
		for (int r = 0; r < FG_ROLES && !rc; r++) {
			struct fg_block *b = &m->blocks[i];
			if (!b->plan->bytes[r])
				continue;
			if (!tiers[r]) {
				FG_ERR("model: the policy puts weights on the %s tier, which is not configured",
				       fg_role_name(r));
				rc = -EINVAL;
				break;
			}
			rc = fg_tier_alloc_hint(tiers[r], b->plan->bytes[r], &b->region[r],
						"give this tier a smaller weight share ([policy] percent)");
			if (!rc)
				m->bytes[r] += b->plan->bytes[r];
		}
	if (!rc) {
		f16 = malloc(largest);
		enc = p->compress_weight ? malloc(largest) : NULL;
		if (!f16 || (p->compress_weight && !enc)) {
			FG_ERR("model: out of host memory staging %llu bytes of weights",
			       (unsigned long long)largest);
			rc = -ENOMEM;
		}
	}
	for (int64_t i = 0; i < m->nblocks && !rc; i++)
		rc = fill_block(m, &m->blocks[i], w, wc, f16, enc);
	free(f16);
	free(enc);
	if (rc)
		fg_model_unload(m);
	return rc;
}

void fg_model_unload(struct fg_model *m)
{
	for (int64_t i = 0; m->blocks && i < m->nblocks; i++)
		for (int r = 0; r < FG_ROLES; r++)
			if (m->blocks[i].region[r].size)
				fg_tier_free(m->tier[r], &m->blocks[i].region[r]);
	free(m->blocks);
	m->blocks = NULL;
	for (int k = 0; k < FG_BLOCK_KINDS; k++) {
		free(m->placed[k]);
		m->placed[k] = NULL;
	}
}
