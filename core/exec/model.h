/* core/exec/model.h - a model's weights, placed over the tiers as the
 * memory plan says.
 *
 * The model is a list of blocks as FlexGen schedules them: the input block,
 * per layer an attention block and an MLP block, the output block.  Every
 * block of a kind has the placement of core/plan's fg_plan_block; a block
 * keeps one region per tier, its tensors being pieces at offsets in them. */
#ifndef FG_EXEC_MODEL_H
#define FG_EXEC_MODEL_H

#include "core/arch/arch.h"
#include "core/dist/stage.h"
#include "core/plan/plan.h"
#include "core/plan/policy.h"
#include "core/model/weights.h"
#include "core/tier/tier.h"

struct fg_codec;

struct fg_block {
	const struct fg_plan_block *plan; /* its regions' sizes */
	const struct fg_plan_tensor *t;   /* its plan->ntensors tensors and their pieces */
	int64_t layer;                    /* -1 for the input and output blocks; else the
					     stage's own index (stage.layer0 + layer in the model) */
	struct fg_region region[FG_ROLES];
};

struct fg_model {
	struct fg_model_config cfg;
	struct fg_tier *tier[FG_ROLES];
	struct fg_plan_block kind[FG_BLOCK_KINDS]; /* placement of each block kind ... */
	struct fg_plan_tensor *placed[FG_BLOCK_KINDS]; /* ... and of its tensors */
	struct fg_stage stage;     /* the layers (and end blocks) this process holds */
	struct fg_block *blocks;   /* the stage's blocks, in schedule order */
	int64_t nblocks;
	uint64_t bytes[FG_ROLES]; /* weight bytes resident per tier */
};

/* Place and read every weight.  `tiers` is indexed by enum fg_role; a tier
 * may be NULL when the policy gives it no share.  `wc` encodes compressed
 * weights: the codec of fg_plan_weight_dtype(p) (NULL unless
 * p->compress_weight). */
int fg_model_load(struct fg_model *m, const struct fg_model_config *cfg, struct fg_weights *w,
		  struct fg_tier *tiers[FG_ROLES], const struct fg_policy *p,
		  const struct fg_codec *wc);
/* The same for one pipeline stage: its layers, the input block on the first
 * stage, the output block on the last. */
int fg_model_load_stage(struct fg_model *m, const struct fg_model_config *cfg,
			struct fg_weights *w, struct fg_tier *tiers[FG_ROLES],
			const struct fg_policy *p, const struct fg_codec *wc,
			const struct fg_stage *stage);
void fg_model_unload(struct fg_model *m);

#endif
