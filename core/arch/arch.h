/* core/arch/arch.h - model families.
 *
 * A family (OPT, and next the Llama family) is one file, core/arch/<family>.c,
 * holding three things and nothing else:
 *   - its hyper-parameters: presets and the mapping from a Hugging Face
 *     config.json (refusing, by key, whatever changes the math and is not
 *     implemented);
 *   - one tensor table: every weight's name, shape (in symbolic dimensions),
 *     the block it belongs to, whether it is a linear weight (placement may
 *     split it, compression may encode it) and how dummy weights fill it;
 *   - its block bodies as sequences of compute ops (core/arch/block.h).
 * Weight naming and lookup, placement and the memory plan (core/plan), dummy
 * weights, the cost model and the block schedule all read the table; the
 * schedule calls the bodies and knows nothing of any family.
 */
#ifndef FG_ARCH_ARCH_H
#define FG_ARCH_ARCH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/compute.h>

struct fg_arch;

#define FG_ROPE_MAX 512 /* the largest rotary dimension (head_dim) */
#define FG_WINDOW_LAYERS_MAX 256 /* layers whose sliding window a config can set */

/* Optional tensors a config may have (fg_model_config.features). */
#define FG_FEAT_QKV_BIAS 1u /* biases on q, k, v projections */
#define FG_FEAT_O_BIAS 2u   /* bias on the attention output projection */
#define FG_FEAT_MLP_BIAS 4u /* biases on the MLP projections */
#define FG_FEAT_TIED 8u     /* the output projection is the token embedding */
#define FG_FEAT_MOE 16u     /* the MLP is a sparse mixture of experts */
#define FG_FEAT_QK_NORM 32u /* RMSNorm of each head's q and k before rotary (Qwen3) */
#define FG_FEAT_SHARED_EXPERT 64u /* a mixture's shared expert and its gate (Qwen2-MoE) */

/* Hyper-parameters of a model, whatever its family. */
struct fg_model_config {
	const struct fg_arch *arch;
	char name[64];    /* "opt-1.3b", or the folder name */
	int64_t vocab;    /* vocab_size */
	int64_t hidden;   /* hidden_size */
	int64_t heads;    /* num_attention_heads */
	int64_t kv_heads; /* key/value heads (grouped-query attention); heads for OPT */
	int64_t head_dim; /* per head; hidden / heads for OPT */
	int64_t layers;   /* num_hidden_layers */
	int64_t ffn;      /* ffn_dim / intermediate_size */
	int64_t max_pos;  /* max_position_embeddings: prompt + generation must fit */
	int64_t pos_rows; /* rows of a learned position table (OPT: max_pos + 2), else 0 */
	float norm_eps;
	int32_t pad_id, bos_id, eos_id;
	unsigned features;     /* FG_FEAT_*: which optional tensors the model has */
	int64_t sliding_window; /* attention window (Mistral); 0: none */
	/* which layers use it (bit l of word l / 64; fg_layer_window) */
	uint64_t window_layers[FG_WINDOW_LAYERS_MAX / 64];
	/* A mixture-of-experts MLP (FG_FEAT_MOE): each token's router picks
	 * experts_per_tok of `experts` SwiGLU experts of ffn each. */
	int64_t experts, experts_per_tok;
	int router_renorm;  /* the chosen experts' weights sum to 1 (else: softmax over all) */
	int64_t shared_ffn; /* the shared expert's width (FG_FEAT_SHARED_EXPERT) */
	/* Rotary positions (families that use them): the first rot_dim values
	 * of each head rotate by position * rope_inv_freq[i] (scaling applied),
	 * cos and sin multiplied by rope_attn_factor. */
	int64_t rot_dim;
	float rope_attn_factor;
	float rope_inv_freq[FG_ROPE_MAX / 2];
	/* Gemma 2's departures from the usual math; 0 in every other family. */
	float attn_scale;    /* multiplies q·k (query_pre_attn_scalar^-0.5); 0: 1/sqrt(head_dim) */
	float attn_softcap;  /* attention scores capped at ±attn_softcap (tanh); 0: none */
	float final_softcap; /* the final logits capped likewise; 0: none */
	float norm_shift;    /* RMS norms scale by gamma + norm_shift (Gemma: 1 + w) */
	float embed_scale;   /* the token embedding multiplied by it (sqrt(hidden)); 0: not */
};

/* Symbolic dimensions of the tensor table. */
enum fg_dim {
	FG_DIM_ONE,    /* 1: the rows of a vector */
	FG_DIM_HIDDEN,
	FG_DIM_FFN,
	FG_DIM_VOCAB,
	FG_DIM_POS,    /* rows of a learned position table (family-defined) */
	FG_DIM_Q,      /* heads * head_dim */
	FG_DIM_KV,     /* kv_heads * head_dim */
	FG_DIM_EXPERTS, /* experts: a router's logits */
	FG_DIM_HEAD,   /* head_dim: a per-head vector */
	FG_DIM_SHARED_FFN, /* a mixture's shared expert's width */
	FG_DIM_ROW,    /* 1, as the rows of a matrix (a [1, n] weight: rank 2) */
};

/* The blocks FlexGen schedules: the input embedding, per layer an attention
 * and an MLP block, the output block. */
enum fg_block_kind { FG_BLOCK_INPUT, FG_BLOCK_ATTN, FG_BLOCK_MLP, FG_BLOCK_OUTPUT, FG_BLOCK_KINDS };

/* How dummy weights fill a tensor (core/model/dummy.h). */
enum fg_init { FG_INIT_MATRIX, FG_INIT_BIAS, FG_INIT_ONES };

#define FG_TD_LINEAR 1u /* a linear layer's weight: split by rows, 4-bit encoded with compress_weight */
#define FG_TD_TIED 2u   /* reads the tensor of the same name listed before it (tied embeddings) */
/* One tensor per expert of the config (the name's second "%d" is the
 * expert's index): a layer's experts are as many as its config.json says,
 * so the table holds one entry per matrix of an expert, not per expert.  A
 * table's expert entries are consecutive (fg_arch_check); the model lists
 * them once per expert, expert 0's run, then expert 1's (fg_tensor_list). */
#define FG_TD_EXPERTS 4u

/* A family's tables are arrays indexed by its own enums, filled with
 * designated initialisers ([T_X] = { ... }); this checks that the array has
 * exactly one entry per value before the enum's count, so a tensor added to
 * the enum but not the table (or the other way round) does not build.  An
 * entry skipped in between is left without a name: fg_arch_check refuses it. */
#define FG_TABLE_CHECK(tab, count)                                           \
	_Static_assert(sizeof(tab) / sizeof((tab)[0]) == (size_t)(count), \
		       #tab " needs one entry per value of its enum")

struct fg_tensor_def {
	const char *name;  /* canonical name; "%d" stands for the layer in per-layer tensors */
	enum fg_block_kind block;
	enum fg_dim rows, cols;
	unsigned flags;
	enum fg_init init;
	unsigned needs;    /* FG_FEAT_* the config must have for the tensor to exist */
	unsigned unless;   /* FG_FEAT_* under which it does not exist */
};

/* Does the model have this tensor of its table? */
int fg_arch_present(const struct fg_model_config *c, const struct fg_tensor_def *d);

/* How many tensors entry d stands for: the config's experts for an
 * FG_TD_EXPERTS entry (0 without experts), else 1. */
int64_t fg_arch_copies(const struct fg_model_config *c, const struct fg_tensor_def *d);

/* Canonical name of entry d's tensor of layer `layer` (a global: -1) and
 * expert `expert` (-1: not an expert's); 0, or -EINVAL when it does not
 * fit in len bytes. */
int fg_arch_tensor_name(const struct fg_tensor_def *d, int64_t layer, int64_t expert, char *name,
			size_t len);

#define FG_ARCH_TABLE_MAX 64 /* entries of a family's table (globals, or a layer's) */

/* A tensor of a list: its entry in the family's table and its expert (-1:
 * not an expert's). */
struct fg_tensor_ref {
	int entry;
	int64_t expert;
};

/* Some entries of one of a family's tables as the model's tensors, in
 * table order: the entries before the expert entries, those once per
 * expert (expert 0's, then expert 1's, ...), the entries after.  Counting,
 * indexing and finding a tensor take no walk over the experts. */
struct fg_tensor_list {
	const struct fg_tensor_def *tab;
	int pre[FG_ARCH_TABLE_MAX], run[FG_ARCH_TABLE_MAX], post[FG_ARCH_TABLE_MAX];
	int npre, nrun, npost;
	int64_t experts; /* copies of the run */
};

/* The tensors of the blocks of a kind: every entry of that block, those
 * this config lacks too (a body finds its tensors by entry). */
void fg_tensor_list_block(struct fg_tensor_list *l, const struct fg_model_config *c,
			  enum fg_block_kind kind);
/* The tensors a checkpoint holds, of the globals (per_layer 0) or of one
 * layer: those the config has, less the tied ones. */
void fg_tensor_list_held(struct fg_tensor_list *l, const struct fg_model_config *c, int per_layer);
int64_t fg_tensor_list_count(const struct fg_tensor_list *l);
/* Tensor i (0 <= i < count). */
struct fg_tensor_ref fg_tensor_list_at(const struct fg_tensor_list *l, int64_t i);
/* The index of (entry, expert) in the list, or -1 when it is not there. */
int64_t fg_tensor_list_find(const struct fg_tensor_list *l, int entry, int64_t expert);

/* The operands of a block body that live in the compute tier's workspace
 * (sized by the memory plan), and how many rows each has: one per token of
 * the GPU batch, or one per sequence. */
struct fg_workspace_def {
	const char *name;
	int per_token;     /* rows: FG_WS_* */
	enum fg_dim cols;
};
#define FG_WS_PER_SEQ 0    /* gpu_batch_size rows */
#define FG_WS_PER_TOKEN 1  /* gpu_batch_size * tokens */
#define FG_WS_PER_ROUTE 2  /* gpu_batch_size * tokens * experts_per_tok: a row per token's expert */

/* Rows of workspace w for bs sequences of `tokens` new tokens. */
int64_t fg_ws_rows(const struct fg_model_config *c, const struct fg_workspace_def *w, int64_t bs,
		   int64_t tokens);

#define FG_WS_MAX 12
#define FG_ARCH_OPS_MAX 16 /* ops of a family's list */

struct fg_block_ctx;

struct fg_arch {
	const char *name;       /* config.json's model_type */
	const char *presets;    /* "opt-125m, opt-1.3b, ..." for messages */
	/* A text prompt starts with bos when the tokenizer's files say nothing:
	 * how the family's checkpoints are fed (OPT's and Llama's tokenizers put
	 * bos first, Qwen2's do not). */
	int text_bos;
	/* Fill c from a preset name (dummy:<name>): 0, -ENOENT (unknown, with the
	 * list), -ENOTSUP (known but not computed). */
	int (*preset)(const char *name, struct fg_model_config *c);
	/* Fill c from a parsed config.json (a jansson json_t *, opaque here). */
	int (*config)(const char *path, const void *json, struct fg_model_config *c);

	/* The tensor table: global tensors, then the tensors of one layer. */
	const struct fg_tensor_def *globals;
	int nglobals;
	const struct fg_tensor_def *layer;
	int nlayer;
	/* Extra names a checkpoint may use for a global tensor (e.g. FlexGen's
	 * converter's), each mapped to its index in `globals`. */
	const char *const *alias;
	const int *alias_of;
	int nalias;
	/* Prefixes Hugging Face checkpoints put before the canonical names. */
	const char *const *prefixes;
	int nprefixes;

	/* Workspaces of the bodies (core/arch/block.h indexes them). */
	const struct fg_workspace_def *workspace;
	int nworkspace;

	/* Block bodies: compute one block for one GPU batch. */
	int (*body[FG_BLOCK_KINDS])(struct fg_block_ctx *x);

	/* The compute ops (and operand dtypes) its bodies call, for the backend
	 * check before a run: fills ops[], returns the count (at most
	 * FG_ARCH_OPS_MAX).  `wdt` is the linear weights' dtype, `cdt` the KV
	 * cache's.  A family lists them in a table of struct fg_op_def indexed
	 * by its own enum and fills ops[] with fg_arch_op_list. */
	int (*ops)(const struct fg_model_config *c, enum fg_dtype wdt, enum fg_dtype act,
		   enum fg_dtype cdt, enum fg_op ops[FG_ARCH_OPS_MAX],
		   enum fg_dtype dts[FG_ARCH_OPS_MAX]);
};

/* An op of a family's list: which of the run's dtypes its operands have,
 * and when the model needs it at all. */
enum fg_op_operand {
	FG_OPND_F16,    /* always fp16 (the token tables) */
	FG_OPND_ACT,    /* the backend's activations */
	FG_OPND_WEIGHT, /* the linear weights' (fp16, or 4-bit with compress_weight) */
	FG_OPND_CACHE,  /* the KV cache's (activations, or 4-bit with compress_cache) */
};
#define FG_OPW_GQA 1u /* only with fewer key/value heads than heads */
#define FG_OPW_MOE 2u /* only with a mixture-of-experts MLP */
#define FG_OPW_ATTN_SOFTCAP 4u /* only with capped attention scores (attn_softcap) */
#define FG_OPW_FINAL_SOFTCAP 8u /* only with capped final logits (final_softcap) */

struct fg_op_def {
	enum fg_op op;
	enum fg_op_operand operand;
	unsigned when; /* FG_OPW_*: 0 for always */
};

/* The ops of defs[0..n) this model needs, with their dtypes, in table order. */
int fg_arch_op_list(const struct fg_model_config *c, const struct fg_op_def *defs, int n,
		    enum fg_dtype wdt, enum fg_dtype act, enum fg_dtype cdt,
		    enum fg_op ops[FG_ARCH_OPS_MAX], enum fg_dtype dts[FG_ARCH_OPS_MAX]);

/* A family's tables are well formed: every entry named, per-layer names with
 * one "%d" (an expert's with two: layer, expert) and globals with none,
 * blocks where the schedule looks for them, the expert entries consecutive
 * in one block of the layer, counts within the engine's limits.  0, or -EINVAL naming the family and
 * the entry (a build's mistake, caught before a model loads). */
int fg_arch_check(const struct fg_arch *a);

/* The families this build knows. */
const struct fg_arch *fg_arch_find(const char *model_type);
extern const struct fg_arch fg_arch_opt;
extern const struct fg_arch fg_arch_llama, fg_arch_mistral, fg_arch_qwen2, fg_arch_qwen3,
	fg_arch_mixtral, fg_arch_qwen2_moe, fg_arch_qwen3_moe;
extern const struct fg_arch fg_arch_gemma2;

/* "dummy:<preset>": the family whose preset it is. */
int fg_model_preset(const char *name, struct fg_model_config *c);
/* A Hugging Face config.json, by its model_type. */
int fg_model_config_load(const char *path, struct fg_model_config *c);

/* Layer l's attention window: the config's sliding_window where the layer
 * is windowed, else 0 (full causal attention). */
static inline int64_t fg_layer_window(const struct fg_model_config *c, int64_t l)
{
	if (c->sliding_window <= 0 || l < 0 || l >= FG_WINDOW_LAYERS_MAX)
		return 0;
	return (c->window_layers[l / 64] >> (l % 64)) & 1 ? c->sliding_window : 0;
}

/* What multiplies q·k in the model's attention. */
static inline float fg_attn_scale(const struct fg_model_config *c)
{
	return c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim);
}

/* The value of a symbolic dimension. */
int64_t fg_dim_value(const struct fg_model_config *c, enum fg_dim d);

/* The model's tensors: the globals held, then layer 0's, 1's, ... (each as
 * fg_tensor_list_held lists them). */
int64_t fg_arch_tensor_count(const struct fg_model_config *c);
/* Canonical name, rank (1 for vectors, whose rows are 1), shape and
 * definition of tensor idx; -EINVAL when idx is out of range or the name
 * does not fit. */
int fg_arch_tensor_info(const struct fg_model_config *c, int64_t idx, char *name, size_t len,
			int *rank, int64_t *rows, int64_t *cols);
const struct fg_tensor_def *fg_arch_tensor_def(const struct fg_model_config *c, int64_t idx);
/* Index of a checkpoint's tensor name (canonical, with a known prefix, or an
 * alias), or -1 when the model does not use it. */
int64_t fg_arch_tensor_index(const struct fg_model_config *c, const char *name);
/* Parameters of the model (every tensor of the table once). */
uint64_t fg_model_param_count(const struct fg_model_config *c);

#endif
