/* core/engine/model.c - place an OPT model's weights over the tiers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/q4.h>
#include "core/backend/backend.h"
#include "core/engine/model.h"
#include "core/util/error.h"

#define ALIGN(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))

uint64_t fg_wtensor_bytes(const struct fg_wtensor *t, int64_t rows)
{
	if (t->dtype == FG_DTYPE_Q4_ROWS)
		return fg_q4_bytes((uint64_t)rows, (uint64_t)t->cols, 0);
	return (uint64_t)rows * (uint64_t)t->cols * 2;
}

static void add(struct fg_block *b, const char *name, int64_t rows, int64_t cols, int linear,
		int compress)
{
	struct fg_wtensor *t = &b->t[b->ntensors++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->rows = rows;
	t->cols = cols;
	t->dtype = linear && compress ? FG_DTYPE_Q4_ROWS : FG_DTYPE_F16;
}

/* The tensors of each block in FlexGen's order (its placement rule depends on it). */
static void describe(struct fg_block *b, const struct fg_opt_config *c, int compress)
{
	int64_t h = c->hidden, f = c->ffn;
	char n[96];
#define NAME(s) (snprintf(n, sizeof(n), "decoder.layers.%lld.%s", (long long)b->layer, s), n)
	switch (b->kind) {
	case FG_BLOCK_INPUT:
		add(b, "decoder.embed_tokens.weight", c->vocab, h, 0, 0);
		add(b, "decoder.embed_positions.weight", c->max_pos + 2, h, 0, 0);
		break;
	case FG_BLOCK_ATTN:
		add(b, NAME("self_attn.q_proj.weight"), h, h, 1, compress);
		add(b, NAME("self_attn.q_proj.bias"), 1, h, 0, 0);
		add(b, NAME("self_attn.k_proj.weight"), h, h, 1, compress);
		add(b, NAME("self_attn.k_proj.bias"), 1, h, 0, 0);
		add(b, NAME("self_attn.v_proj.weight"), h, h, 1, compress);
		add(b, NAME("self_attn.v_proj.bias"), 1, h, 0, 0);
		add(b, NAME("self_attn.out_proj.weight"), h, h, 1, compress);
		add(b, NAME("self_attn.out_proj.bias"), 1, h, 0, 0);
		add(b, NAME("self_attn_layer_norm.weight"), 1, h, 0, 0);
		add(b, NAME("self_attn_layer_norm.bias"), 1, h, 0, 0);
		break;
	case FG_BLOCK_MLP:
		add(b, NAME("fc1.weight"), f, h, 1, compress);
		add(b, NAME("fc1.bias"), 1, f, 0, 0);
		add(b, NAME("fc2.weight"), h, f, 1, compress);
		add(b, NAME("fc2.bias"), 1, h, 0, 0);
		add(b, NAME("final_layer_norm.weight"), 1, h, 0, 0);
		add(b, NAME("final_layer_norm.bias"), 1, h, 0, 0);
		break;
	case FG_BLOCK_OUTPUT:
		add(b, "decoder.final_layer_norm.weight", 1, h, 0, 0);
		add(b, "decoder.final_layer_norm.bias", 1, h, 0, 0);
		add(b, "decoder.embed_tokens.weight", c->vocab, h, 1, compress);
		break;
	}
#undef NAME
}

static int splittable(const struct fg_block *b, const struct fg_wtensor *t)
{
	return b->kind != FG_BLOCK_INPUT && t->rows > 1;
}

static void piece(struct fg_wtensor *t, enum fg_role role, int64_t row0, int64_t rows)
{
	if (rows <= 0)
		return;
	t->piece[t->npieces++] = (struct fg_piece){ .role = role, .row0 = row0, .rows = rows };
}

/* FlexGen's rule (whole tensors by midpoint) or row-exact shares, in FlexGen's
 * fill order: disk first, then host, then the compute tier. */
static void place_block(struct fg_block *b, const struct fg_policy *p)
{
	double total = 0, pos = 0;
	const int *pc = p->weight;

	for (int i = 0; i < b->ntensors; i++)
		total += (double)b->t[i].rows * (double)b->t[i].cols;
	double cut1 = total * pc[FG_ROLE_DISK] / 100.0;
	double cut2 = total * (pc[FG_ROLE_DISK] + pc[FG_ROLE_HOST]) / 100.0;
	for (int i = 0; i < b->ntensors; i++) {
		struct fg_wtensor *t = &b->t[i];
		double size = (double)t->rows * (double)t->cols, row = (double)t->cols;
		if (p->exact && splittable(b, t)) {
			int64_t g = t->dtype == FG_DTYPE_Q4_ROWS ? FG_Q4_GROUP : 1;
			int64_t r1 = (int64_t)((cut1 - pos) / row / (double)g + 0.5) * g;
			int64_t r2 = (int64_t)((cut2 - pos) / row / (double)g + 0.5) * g;
			r1 = r1 < 0 ? 0 : r1 > t->rows ? t->rows : r1;
			r2 = r2 < r1 ? r1 : r2 > t->rows ? t->rows : r2;
			piece(t, FG_ROLE_DISK, 0, r1);
			piece(t, FG_ROLE_HOST, r1, r2 - r1);
			piece(t, FG_ROLE_COMPUTE, r2, t->rows - r2);
		} else {
			piece(t, fg_policy_choice(pc, (pos + size / 2) / total * 100.0), 0, t->rows);
		}
		pos += size;
	}
	for (int i = 0; i < b->ntensors; i++)
		for (int k = 0; k < b->t[i].npieces; k++) {
			struct fg_piece *pp = &b->t[i].piece[k];
			pp->bytes = fg_wtensor_bytes(&b->t[i], pp->rows);
			pp->offset = b->bytes[pp->role];
			b->bytes[pp->role] += ALIGN(pp->bytes, 64);
		}
	for (int r = 0; r < FG_ROLES; r++)
		b->bytes[r] = ALIGN(b->bytes[r], 4096);
}

/* Read the block's tensors from the source and write each piece to its tier. */
static int fill_block(struct fg_model *m, struct fg_block *b, struct fg_weights *w,
		      const struct fg_codec *q4, uint16_t *f16, void *enc)
{
	int rc;
	for (int i = 0; i < b->ntensors; i++) {
		struct fg_wtensor *t = &b->t[i];
		for (int k = 0; k < t->npieces; k++) {
			struct fg_piece *pp = &t->piece[k];
			const void *src = f16;
			rc = fg_weights_read_rows_f16(w, t->name, pp->row0, pp->rows, t->cols, f16);
			if (rc)
				return rc;
			if (t->dtype == FG_DTYPE_Q4_ROWS) {
				struct fg_codec_shape s = { (uint64_t)pp->rows, (uint64_t)t->cols, 0 };
				rc = fg_codec_encode_f16(q4, &s, f16, enc);
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

int fg_model_load(struct fg_model *m, const struct fg_opt_config *cfg, struct fg_weights *w,
		  struct fg_tier *tiers[FG_ROLES], const struct fg_policy *p,
		  const struct fg_codec *q4)
{
	uint64_t largest = 0;
	uint16_t *f16 = NULL;
	void *enc = NULL;
	int rc = 0;

	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	for (int r = 0; r < FG_ROLES; r++)
		m->tier[r] = tiers[r];
	m->nblocks = 2 + 2 * cfg->layers;
	m->blocks = calloc((size_t)m->nblocks, sizeof(*m->blocks));
	if (!m->blocks) {
		FG_ERR("model: out of memory");
		return -ENOMEM;
	}
	for (int64_t i = 0; i < m->nblocks; i++) {
		struct fg_block *b = &m->blocks[i];
		b->kind = i == 0 ? FG_BLOCK_INPUT : i == m->nblocks - 1 ? FG_BLOCK_OUTPUT
			  : (i % 2) ? FG_BLOCK_ATTN : FG_BLOCK_MLP;
		b->layer = i == 0 || i == m->nblocks - 1 ? -1 : (i - 1) / 2;
		describe(b, cfg, p->compress_weight);
		place_block(b, p);
		for (int t = 0; t < b->ntensors; t++) {
			uint64_t n = (uint64_t)b->t[t].rows * (uint64_t)b->t[t].cols * 2;
			largest = n > largest ? n : largest;
		}
	}
	/* Allocate everything first: a placement that does not fit fails before any reading. */
	for (int64_t i = 0; i < m->nblocks && !rc; i++)
		for (int r = 0; r < FG_ROLES && !rc; r++) {
			struct fg_block *b = &m->blocks[i];
			if (!b->bytes[r])
				continue;
			if (!tiers[r]) {
				FG_ERR("model: the policy puts weights on the %s tier, which is not configured",
				       fg_role_name(r));
				rc = -EINVAL;
				break;
			}
			rc = fg_tier_alloc_hint(tiers[r], b->bytes[r], &b->region[r],
						"give this tier a smaller weight share ([policy] percent)");
			if (!rc)
				m->bytes[r] += b->bytes[r];
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
		rc = fill_block(m, &m->blocks[i], w, q4, f16, enc);
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
}
