/* core/arch/block.h - what a family's block body sees, and the helpers it
 * composes compute ops with.
 *
 * The schedule calls a body once per (block, GPU batch) with the block's
 * weights as compute-tier views, the GPU batch's hidden state and the
 * workspaces the family declared.  Attention over the KV cache — where the
 * cache lives, which sequences attend on the host — is the schedule's, behind
 * `attend`; a body only says what to attend with. */
#ifndef FG_ARCH_BLOCK_H
#define FG_ARCH_BLOCK_H

#include <stdint.h>

#include <fgcore/compute.h>
#include "core/arch/arch.h"
#include "core/backend/backend.h"

/* One weight tensor as compute ops see it: whole, or (placement = exact)
 * split by rows into pieces living on different tiers. */
struct fg_wview {
	int npieces;
	struct {
		struct fg_tensor t;
		int64_t row0;
	} piece[3];
};

struct fg_block_ctx {
	struct fg_backend *be;
	void *stream;
	const struct fg_model_config *cfg;
	int64_t layer;        /* -1 for the input and output blocks */
	int64_t bs, n, step;  /* sequences, new tokens of each, positions before them */
	const int32_t *pad;   /* bs left-pad counts */
	const int32_t *ids;   /* bs * n token ids (the input block) */
	int32_t *pos;         /* host scratch of bs * n positions */
	struct fg_tensor h;   /* [bs * n, hidden]: the hidden state, updated in place */
	struct fg_tensor ws[FG_WS_MAX]; /* the family's workspaces, bs * n (or bs) rows */
	/* The output block: the rows of h whose next-token logits it computes
	 * (each sequence's last position, but when scoring a prompt), at most
	 * bs * n, and the [out_rows.rows, vocab] tensor it writes them to. */
	struct fg_tensor out_rows, logits;
	const struct fg_wview *w;       /* the block's tensors, as its
					 * fg_tensor_list_block lists them (a
					 * body reads them by table entry:
					 * fg_block_tensor, fg_block_experts) */
	/* Append k and v (the new rows) to this layer's cache of the GPU batch and
	 * attend q over it into out (prefill: over the rows themselves). */
	int (*attend)(struct fg_block_ctx *x, struct fg_tensor q, struct fg_tensor k,
		      struct fg_tensor v, struct fg_tensor out);
	void *sched;
};

/* A body names its tensors by their entry in the family's table (the
 * family's enum: of the globals in the input and output blocks, else of the
 * layer's).  This is that tensor's view among the block's, wherever the
 * table places the block's other tensors. */
const struct fg_wview *fg_block_tensor(const struct fg_block_ctx *x, int t);

/* The views of every expert's tensor of entry t (an FG_TD_EXPERTS one):
 * expert e's at [e * *stride] of what it returns. */
const struct fg_wview *fg_block_experts(const struct fg_block_ctx *x, int t, int64_t *stride);

/* A vector (or a whole matrix) of the block, by table entry: its only piece
 * (data NULL for an optional tensor the model does not have). */
struct fg_tensor fg_block_weight(const struct fg_block_ctx *x, int t);

/* out = act(in · W[w]ᵀ + W[b]) ⊙ mul + res, one op per piece of W[w]; w and
 * b are table entries (b < 0 or absent: no bias; res, mul with data NULL:
 * none). */
int fg_block_linear(struct fg_block_ctx *x, const char *what, int w, int b, struct fg_tensor in,
		    enum fg_activation act, struct fg_tensor res, struct fg_tensor mul,
		    struct fg_tensor out);
/* The same for a weight given by its view (an expert's), without bias. */
int fg_block_linear_view(struct fg_block_ctx *x, const char *what, const struct fg_wview *w,
			 struct fg_tensor in, enum fg_activation act, struct fg_tensor res,
			 struct fg_tensor mul, struct fg_tensor out);

/* Rows [first, first + n) of a view; columns [first, first + n) of a view. */
struct fg_tensor fg_rows(struct fg_tensor t, int64_t first, int64_t n);
struct fg_tensor fg_cols(struct fg_tensor t, int64_t first, int64_t n);

/* The output block's usual rows: each sequence's last position (every n-th
 * row of h), into the first bs rows of `logits`. */
void fg_block_out_last(struct fg_block_ctx *x, struct fg_tensor logits);

#endif
