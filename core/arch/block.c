/* core/arch/block.c - helpers of the block bodies. */
#include <assert.h>

#include "core/arch/block.h"

struct fg_tensor fg_rows(struct fg_tensor t, int64_t first, int64_t n)
{
	t.data = (char *)t.data + (size_t)(first * t.ld) * fg_dtype_size(t.dtype);
	t.rows = n;
	return t;
}

struct fg_tensor fg_cols(struct fg_tensor t, int64_t first, int64_t n)
{
	if (t.data)
		t.data = (char *)t.data + (size_t)first * fg_dtype_size(t.dtype);
	t.cols = n;
	return t;
}

/* The schedule hands a body its block's tensors as the block's list has
 * them (core/plan places them so). */
const struct fg_wview *fg_block_tensor(const struct fg_block_ctx *x, int t)
{
	const struct fg_arch *a = x->cfg->arch;
	const struct fg_tensor_def *tab = x->layer < 0 ? a->globals : a->layer;
	struct fg_tensor_list l;

	assert(t >= 0 && t < (x->layer < 0 ? a->nglobals : a->nlayer));
	fg_tensor_list_block(&l, x->cfg, tab[t].block);
	int64_t i = fg_tensor_list_find(&l, t, -1);
	assert(i >= 0);
	return &x->w[i];
}

const struct fg_wview *fg_block_experts(const struct fg_block_ctx *x, int t, int64_t *stride)
{
	const struct fg_arch *a = x->cfg->arch;
	struct fg_tensor_list l;

	assert(x->layer >= 0 && t >= 0 && t < a->nlayer && (a->layer[t].flags & FG_TD_EXPERTS));
	fg_tensor_list_block(&l, x->cfg, a->layer[t].block);
	int64_t i = fg_tensor_list_find(&l, t, 0);
	assert(i >= 0);
	*stride = l.nrun;
	return &x->w[i];
}

struct fg_tensor fg_block_weight(const struct fg_block_ctx *x, int t)
{
	return fg_block_tensor(x, t)->piece[0].t;
}

/* One op per piece of wv: each piece holds a range of W's rows, a range of
 * out's columns. */
static int fg_block_pieces(struct fg_block_ctx *x, const char *what, const struct fg_wview *wv,
			   struct fg_tensor bias, struct fg_tensor in, enum fg_activation act,
			   struct fg_tensor res, struct fg_tensor mul, struct fg_tensor out)
{
	int rc;

	for (int i = 0; i < wv->npieces; i++) {
		int64_t r0 = wv->piece[i].row0, nr = wv->piece[i].t.rows;
		struct fg_linear_args a = {
			.x = in,
			.w = wv->piece[i].t,
			.bias = bias.data ? fg_cols(bias, r0, nr) : bias,
			.act = act,
			.residual = fg_cols(res, r0, nr),
			.out = fg_cols(out, r0, nr),
			.mul = fg_cols(mul, r0, nr),
		};
		if ((rc = fg_backend_linear(x->be, x->stream, x->layer, what, &a)))
			return rc;
	}
	return 0;
}

int fg_block_linear(struct fg_block_ctx *x, const char *what, int w, int b, struct fg_tensor in,
		    enum fg_activation act, struct fg_tensor res, struct fg_tensor mul,
		    struct fg_tensor out)
{
	struct fg_tensor bias = { 0 };

	/* (no bias, or one this config does not have: data NULL) */
	if (b >= 0 && fg_block_tensor(x, b)->npieces)
		bias = fg_block_weight(x, b);
	return fg_block_pieces(x, what, fg_block_tensor(x, w), bias, in, act, res, mul, out);
}

int fg_block_linear_view(struct fg_block_ctx *x, const char *what, const struct fg_wview *w,
			 struct fg_tensor in, enum fg_activation act, struct fg_tensor res,
			 struct fg_tensor mul, struct fg_tensor out)
{
	static const struct fg_tensor none;
	return fg_block_pieces(x, what, w, none, in, act, res, mul, out);
}

int fg_arch_op_list(const struct fg_model_config *c, const struct fg_op_def *defs, int n,
		    enum fg_dtype wdt, enum fg_dtype act, enum fg_dtype cdt,
		    enum fg_op ops[FG_ARCH_OPS_MAX], enum fg_dtype dts[FG_ARCH_OPS_MAX])
{
	int k = 0;

	assert(n <= FG_ARCH_OPS_MAX);
	for (int i = 0; i < n; i++) {
		if ((defs[i].when & FG_OPW_GQA) && c->kv_heads >= c->heads)
			continue;
		if ((defs[i].when & FG_OPW_MOE) && !(c->features & FG_FEAT_MOE))
			continue;
		if ((defs[i].when & FG_OPW_ATTN_SOFTCAP) && !(c->attn_softcap > 0))
			continue;
		if ((defs[i].when & FG_OPW_FINAL_SOFTCAP) && !(c->final_softcap > 0))
			continue;
		ops[k] = defs[i].op;
		switch (defs[i].operand) {
		case FG_OPND_F16:
			dts[k] = FG_DTYPE_F16;
			break;
		case FG_OPND_ACT:
			dts[k] = act;
			break;
		case FG_OPND_WEIGHT:
			dts[k] = wdt;
			break;
		case FG_OPND_CACHE:
			dts[k] = cdt;
			break;
		}
		k++;
	}
	return k;
}

void fg_block_out_last(struct fg_block_ctx *x, struct fg_tensor logits)
{
	x->out_rows = fg_rows(x->h, x->n - 1, x->bs);
	x->out_rows.ld = x->n * x->h.ld;
	x->logits = fg_rows(logits, 0, x->bs);
}
