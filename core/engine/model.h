/* core/engine/model.h - an OPT model's weights placed over the tiers.
 *
 * The model is a list of blocks as FlexGen schedules them: the input
 * embedding, then per layer an attention block and an MLP block, then the
 * output block (final norm + tied projection).  Each block's tensors are
 * placed by the policy's weight shares: FlexGen's rule puts a whole tensor on
 * the tier whose cumulative share holds its midpoint; `placement = exact`
 * splits matrices by rows so the byte shares match.  A block keeps one region
 * per tier; its tensors are pieces at offsets in them. */
#ifndef FG_ENGINE_MODEL_H
#define FG_ENGINE_MODEL_H

#include <fgcore/tensor.h>
#include "core/engine/policy.h"
#include "core/model/opt_config.h"
#include "core/model/weights.h"
#include "core/tier/tier.h"

struct fg_codec;

/* Rows [row0, row0 + rows) of a tensor, stored on one tier. */
struct fg_piece {
	enum fg_role role;
	uint64_t offset; /* in the block's region on that tier */
	int64_t row0, rows;
	uint64_t bytes;
};

enum fg_wt {
	/* input block */
	FG_WT_TOK = 0, FG_WT_POS,
	/* attention block */
	FG_WT_Q = 0, FG_WT_QB, FG_WT_K, FG_WT_KB, FG_WT_V, FG_WT_VB, FG_WT_O, FG_WT_OB,
	FG_WT_LN1, FG_WT_LN1B,
	/* MLP block */
	FG_WT_FC1 = 0, FG_WT_FC1B, FG_WT_FC2, FG_WT_FC2B, FG_WT_LN2, FG_WT_LN2B,
	/* output block */
	FG_WT_LNF = 0, FG_WT_LNFB, FG_WT_OUT,
};

struct fg_wtensor {
	char name[96];
	int64_t rows, cols;
	enum fg_dtype dtype; /* F16, or Q4_ROWS for compressed matrices */
	int npieces;
	struct fg_piece piece[FG_ROLES];
};

enum fg_block_kind { FG_BLOCK_INPUT, FG_BLOCK_ATTN, FG_BLOCK_MLP, FG_BLOCK_OUTPUT };

struct fg_block {
	enum fg_block_kind kind;
	int64_t layer;
	int ntensors;
	struct fg_wtensor t[10];
	struct fg_region region[FG_ROLES];
	uint64_t bytes[FG_ROLES];
};

struct fg_model {
	struct fg_opt_config cfg;
	struct fg_tier *tier[FG_ROLES];
	struct fg_block *blocks;
	int64_t nblocks;
	uint64_t bytes[FG_ROLES]; /* weight bytes resident per tier */
};

/* Place and read every weight.  `tiers` is indexed by enum fg_role; a tier
 * may be NULL when the policy gives it no share.  `q4` encodes compressed
 * weights (NULL unless p->compress_weight). */
int fg_model_load(struct fg_model *m, const struct fg_opt_config *cfg, struct fg_weights *w,
		  struct fg_tier *tiers[FG_ROLES], const struct fg_policy *p,
		  const struct fg_codec *q4);
void fg_model_unload(struct fg_model *m);

/* Bytes of a tensor piece of the given rows in the tensor's encoding. */
uint64_t fg_wtensor_bytes(const struct fg_wtensor *t, int64_t rows);

#endif
