/* core/arch/block.c - helpers of the block bodies. */
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

struct fg_tensor fg_block_weight(const struct fg_block_ctx *x, int i)
{
	return x->w[i].piece[0].t;
}

int fg_block_linear(struct fg_block_ctx *x, const char *what, int w, int b, struct fg_tensor in,
		    enum fg_activation act, struct fg_tensor res, struct fg_tensor mul,
		    struct fg_tensor out)
{
	const struct fg_wview *wv = &x->w[w];
	struct fg_tensor bias = { 0 };
	int rc;

	if (b >= 0 && x->w[b].npieces)
		bias = fg_block_weight(x, b);
	else
		b = -1; /* no bias, or one this config does not have */
	/* Each piece holds a range of W's rows: a range of out's columns. */
	for (int i = 0; i < wv->npieces; i++) {
		int64_t r0 = wv->piece[i].row0, nr = wv->piece[i].t.rows;
		struct fg_linear_args a = {
			.x = in,
			.w = wv->piece[i].t,
			.bias = b >= 0 ? fg_cols(bias, r0, nr) : bias,
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
