/* core/arch/opt.c - the OPT family: FlexGen's presets and Hugging Face's
 * config.json, its tensor table and its blocks.
 *
 * The math is Hugging Face's OPTDecoder: h = embed_tokens(ids) +
 * embed_positions(pos); per layer h += out_proj(attn(ln1(h))),
 * h += fc2(relu(fc1(ln2(h)))); logits = final_layer_norm(h) · embed_tokensᵀ.
 * Positions count real tokens only: a row with p left pads gives the token
 * at column c the position c - p + 2 (pads get 1), 2 being OPT's offset. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/arch/arch.h"
#include "core/arch/block.h"
#include "core/arch/config.h"
#include "core/util/error.h"

struct opt_preset {
	const char *name;
	int64_t hidden, layers, heads, ffn;
};

/* FlexGen's flexgen/opt_config.py shapes; vocab 50272 and 2048 positions for all. */
static const struct opt_preset opt_presets[] = {
	{ "opt-125m", 768, 12, 12, 3072 },
	{ "opt-1.3b", 2048, 24, 32, 8192 },
	{ "opt-2.7b", 2560, 32, 32, 10240 },
	{ "opt-6.7b", 4096, 32, 32, 16384 },
	{ "opt-13b", 5120, 40, 40, 20480 },
	{ "opt-30b", 7168, 48, 56, 28672 },
	{ "opt-66b", 9216, 64, 72, 36864 },
	{ "opt-175b", 12288, 96, 96, 49152 },
	{ "opt-iml-1.3b", 2048, 24, 32, 8192 },
	{ "opt-iml-30b", 7168, 48, 56, 28672 },
	{ "opt-iml-max-1.3b", 2048, 24, 32, 8192 },
	{ "opt-iml-max-30b", 7168, 48, 56, 28672 },
};

#define OPT_NPRESETS (sizeof(opt_presets) / sizeof(opt_presets[0]))

/* "opt-125m, opt-1.3b, ..." for error messages. */
static const char *opt_preset_names(char *buf, size_t len)
{
	size_t used = 0, i;

	buf[0] = '\0';
	for (i = 0; i < OPT_NPRESETS && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
					 opt_presets[i].name);
	return buf;
}

/* Sizes OPT fixes by its shape: multi-head attention, learned positions
 * with an offset of 2. */
static void opt_derive(struct fg_model_config *c)
{
	c->kv_heads = c->heads;
	c->head_dim = c->hidden / c->heads;
	c->pos_rows = c->max_pos + 2;
}

static void opt_defaults(struct fg_model_config *out)
{
	memset(out, 0, sizeof(*out));
	out->arch = &fg_arch_opt;
	out->norm_eps = 1e-5f;
	out->vocab = 50272;
	out->max_pos = 2048;
	out->pad_id = 1;
	out->bos_id = 2;
	out->eos_id = 2;
}

static int opt_preset(const char *name, struct fg_model_config *out)
{
	const char *base;
	char names[256];
	size_t i;

	if (!name || !out) {
		FG_ERR("OPT preset: no model name given; use one of %s",
		       opt_preset_names(names, sizeof(names)));
		return -EINVAL;
	}
	/* "facebook/opt-1.3b" is the Hub id FlexGen users pass. */
	base = name;
	if (strncasecmp(base, "facebook/", 9) == 0)
		base += 9;
	if (strcasecmp(base, "opt-350m") == 0) {
		FG_ERR("OPT preset \"%s\": opt-350m is post-LayerNorm OPT with project_in/out "
		       "(word_embed_proj_dim 512), which is not supported; use opt-125m or opt-1.3b",
		       name);
		return -ENOTSUP;
	}
	for (i = 0; i < OPT_NPRESETS; i++) {
		const struct opt_preset *p = &opt_presets[i];

		if (strcasecmp(base, p->name) != 0)
			continue;
		opt_defaults(out);
		snprintf(out->name, sizeof(out->name), "%s", p->name);
		out->hidden = p->hidden;
		out->layers = p->layers;
		out->heads = p->heads;
		out->ffn = p->ffn;
		opt_derive(out);
		return 0;
	}
	FG_ERR("OPT preset \"%s\" is unknown; known presets: %s", name,
	       opt_preset_names(names, sizeof(names)));
	return -ENOENT;
}

static int opt_config(const char *path, const void *json, struct fg_model_config *out)
{
	json_t *root = (json_t *)json;
	json_t *v;
	int64_t proj;
	int flag;
	int rc;

	opt_defaults(out);
	if ((rc = fg_json_dim(path, root, "vocab_size", &out->vocab)) ||
	    (rc = fg_json_dim(path, root, "hidden_size", &out->hidden)) ||
	    (rc = fg_json_dim(path, root, "num_attention_heads", &out->heads)) ||
	    (rc = fg_json_dim(path, root, "num_hidden_layers", &out->layers)) ||
	    (rc = fg_json_dim(path, root, "ffn_dim", &out->ffn)) ||
	    (rc = fg_json_dim(path, root, "max_position_embeddings", &out->max_pos)))
		return rc;
	if (out->hidden % out->heads != 0) {
		FG_ERR("%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path,
		       (long long)out->hidden, (long long)out->heads);
		return -EINVAL;
	}
	if ((rc = fg_json_token(path, root, "pad_token_id", out->vocab, &out->pad_id)) ||
	    (rc = fg_json_token(path, root, "bos_token_id", out->vocab, &out->bos_id)) ||
	    (rc = fg_json_token(path, root, "eos_token_id", out->vocab, &out->eos_id)))
		return rc;

	/* Refusals: shapes of OPT this engine does not compute. */
	flag = 1;
	if ((rc = fg_json_bool(path, root, "do_layer_norm_before", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: do_layer_norm_before is false: post-LayerNorm OPT (opt-350m style) "
		       "with project_in/out is not supported; use another OPT size",
		       path);
		return -ENOTSUP;
	}
	proj = out->hidden;
	if (json_object_get(root, "word_embed_proj_dim") &&
	    (rc = fg_json_dim(path, root, "word_embed_proj_dim", &proj)))
		return rc;
	if (proj != out->hidden) {
		FG_ERR("%s: word_embed_proj_dim %lld differs from hidden_size %lld: OPT with "
		       "project_in/out is not supported; use another OPT size",
		       path, (long long)proj, (long long)out->hidden);
		return -ENOTSUP;
	}
	v = json_object_get(root, "activation_function");
	if (v && !json_is_string(v)) {
		FG_ERR("%s: key \"activation_function\" must be a string", path);
		return -EINVAL;
	}
	if (v && strcmp(json_string_value(v), "relu") != 0) {
		FG_ERR("%s: activation_function \"%s\" is not supported; OPT uses \"relu\"", path,
		       json_string_value(v));
		return -ENOTSUP;
	}
	flag = 1;
	if ((rc = fg_json_bool(path, root, "enable_bias", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: enable_bias is false: OPT without biases is not supported", path);
		return -ENOTSUP;
	}
	flag = 1;
	if ((rc = fg_json_bool(path, root, "layer_norm_elementwise_affine", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: layer_norm_elementwise_affine is false: layer norms without weight "
		       "and bias are not supported",
		       path);
		return -ENOTSUP;
	}
	flag = 0;
	if ((rc = fg_json_bool(path, root, "_remove_final_layer_norm", &flag)))
		return rc;
	if (flag) {
		FG_ERR("%s: _remove_final_layer_norm is true: OPT without the final layer norm "
		       "is not supported",
		       path);
		return -ENOTSUP;
	}
	/* lm_head is never read: it must be the token embedding. */
	flag = 1;
	if ((rc = fg_json_bool(path, root, "tie_word_embeddings", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: tie_word_embeddings is false: an lm_head separate from "
		       "embed_tokens is not supported",
		       path);
		return -ENOTSUP;
	}
	fg_json_name_from_path(path, "opt", out->name, sizeof(out->name));
	opt_derive(out);
	return 0;
}


/* ---- the tensor table ------------------------------------------------------ */

/* Tensors in FlexGen's order within each block (its placement rule depends
 * on it); the enumeration order of a checkpoint's tensors is the table's.
 * The tables are indexed by these enums, and the bodies name tensors by them:
 * a tensor inserted here moves no other one's index. */
enum opt_global {
	OPT_TOK, OPT_POS,		/* the input block */
	OPT_LNF, OPT_LNFB, OPT_LM_HEAD,	/* the output block */
	OPT_NGLOBAL
};
enum opt_layer {
	/* the attention block */
	OPT_Q, OPT_QB, OPT_K, OPT_KB, OPT_V, OPT_VB, OPT_O, OPT_OB, OPT_LN1, OPT_LN1B,
	/* the MLP block */
	OPT_FC1, OPT_FC1B, OPT_FC2, OPT_FC2B, OPT_LN2, OPT_LN2B,
	OPT_NLAYER
};
#define L "decoder.layers.%d."
#define LIN FG_TD_LINEAR

static const struct fg_tensor_def opt_globals[] = {
	[OPT_TOK]	= { "decoder.embed_tokens.weight", FG_BLOCK_INPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	[OPT_POS]	= { "decoder.embed_positions.weight", FG_BLOCK_INPUT, FG_DIM_POS, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	[OPT_LNF]	= { "decoder.final_layer_norm.weight", FG_BLOCK_OUTPUT, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[OPT_LNFB]	= { "decoder.final_layer_norm.bias", FG_BLOCK_OUTPUT, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	/* lm_head is the token embedding, placed again as the output projection */
	[OPT_LM_HEAD]	= { "decoder.embed_tokens.weight", FG_BLOCK_OUTPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, LIN | FG_TD_TIED, FG_INIT_MATRIX, 0, 0 },
};
FG_TABLE_CHECK(opt_globals, OPT_NGLOBAL);

static const struct fg_tensor_def opt_layer[] = {
	[OPT_Q]		= { L "self_attn.q_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_QB]	= { L "self_attn.q_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_K]		= { L "self_attn.k_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_KB]	= { L "self_attn.k_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_V]		= { L "self_attn.v_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_VB]	= { L "self_attn.v_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_O]		= { L "self_attn.out_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_OB]	= { L "self_attn.out_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_LN1]	= { L "self_attn_layer_norm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[OPT_LN1B]	= { L "self_attn_layer_norm.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_FC1]	= { L "fc1.weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_FC1B]	= { L "fc1.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_FFN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_FC2]	= { L "fc2.weight", FG_BLOCK_MLP, FG_DIM_HIDDEN, FG_DIM_FFN, LIN, FG_INIT_MATRIX, 0, 0 },
	[OPT_FC2B]	= { L "fc2.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
	[OPT_LN2]	= { L "final_layer_norm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[OPT_LN2B]	= { L "final_layer_norm.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, 0, 0 },
};
FG_TABLE_CHECK(opt_layer, OPT_NLAYER);
#undef L
#undef LIN

/* FlexGen's converter names the final layer norm decoder.layer_norm. */
static const char *const opt_alias[] = { "decoder.layer_norm.weight", "decoder.layer_norm.bias" };
static const int opt_alias_of[] = { OPT_LNF, OPT_LNFB };
#define OPT_NALIAS (int)(sizeof(opt_alias) / sizeof(opt_alias[0]))
FG_TABLE_CHECK(opt_alias_of, OPT_NALIAS);
static const char *const opt_prefixes[] = { "model." };

/* ---- the blocks ---------------------------------------------------------- */

enum opt_ws { WS_X, WS_Q, WS_K, WS_V, WS_A, WS_FFN, WS_LOGITS, OPT_NWS };

static const struct fg_workspace_def opt_workspace[] = {
	[WS_X]		= { "x", 1, FG_DIM_HIDDEN },
	[WS_Q]		= { "q", 1, FG_DIM_HIDDEN },
	[WS_K]		= { "k", 1, FG_DIM_HIDDEN },
	[WS_V]		= { "v", 1, FG_DIM_HIDDEN },
	[WS_A]		= { "a", 1, FG_DIM_HIDDEN },
	[WS_FFN]	= { "ffn", 1, FG_DIM_FFN },
	[WS_LOGITS]	= { "logits", 0, FG_DIM_VOCAB },
};
FG_TABLE_CHECK(opt_workspace, OPT_NWS);
_Static_assert(OPT_NWS <= FG_WS_MAX, "opt_workspace: more workspaces than a block has");

static const struct fg_tensor none;

static int opt_norm(struct fg_block_ctx *x, const char *what, struct fg_tensor in, int g, int b,
		    struct fg_tensor out)
{
	struct fg_layer_norm_args a = {
		.x = in, .gamma = fg_block_weight(x, g), .beta = fg_block_weight(x, b),
		.eps = x->cfg->norm_eps, .out = out, .kind = FG_NORM_LAYER,
	};
	return fg_backend_norm(x->be, x->stream, x->layer, what, &a);
}

static int opt_input(struct fg_block_ctx *x)
{
	int64_t n = x->n;
	for (int64_t s = 0; s < x->bs; s++)
		for (int64_t i = 0; i < n; i++) {
			int64_t col = x->step + i;
			x->pos[s * n + i] = col < x->pad[s] ? 1 : (int32_t)(col - x->pad[s] + 2);
		}
	struct fg_embed_args e = {
		.ids = x->ids, .positions = x->pos, .n = x->bs * n,
		.tok = fg_block_weight(x, OPT_TOK), .pos = fg_block_weight(x, OPT_POS), .out = x->h,
	};
	return fg_backend_embed(x->be, x->stream, -1, "embed_tokens", &e);
}

static int opt_attention(struct fg_block_ctx *x)
{
	int64_t rows = x->h.rows;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), q = fg_rows(x->ws[WS_Q], 0, rows);
	struct fg_tensor k = fg_rows(x->ws[WS_K], 0, rows), v = fg_rows(x->ws[WS_V], 0, rows);
	struct fg_tensor a = fg_rows(x->ws[WS_A], 0, rows);
	int rc;

	if ((rc = opt_norm(x, "self_attn_layer_norm", x->h, OPT_LN1, OPT_LN1B, in)) ||
	    (rc = fg_block_linear(x, "q_proj", OPT_Q, OPT_QB, in, FG_ACT_NONE, none, none, q)) ||
	    (rc = fg_block_linear(x, "k_proj", OPT_K, OPT_KB, in, FG_ACT_NONE, none, none, k)) ||
	    (rc = fg_block_linear(x, "v_proj", OPT_V, OPT_VB, in, FG_ACT_NONE, none, none, v)) ||
	    (rc = x->attend(x, q, k, v, a)))
		return rc;
	return fg_block_linear(x, "out_proj", OPT_O, OPT_OB, a, FG_ACT_NONE, x->h, none, x->h);
}

static int opt_mlp(struct fg_block_ctx *x)
{
	int64_t rows = x->h.rows;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), f = fg_rows(x->ws[WS_FFN], 0, rows);
	int rc;

	if ((rc = opt_norm(x, "final_layer_norm", x->h, OPT_LN2, OPT_LN2B, in)) ||
	    (rc = fg_block_linear(x, "fc1", OPT_FC1, OPT_FC1B, in, FG_ACT_RELU, none, none, f)))
		return rc;
	return fg_block_linear(x, "fc2", OPT_FC2, OPT_FC2B, f, FG_ACT_NONE, x->h, none, x->h);
}

/* The final norm of the rows asked for, then their logits. */
static int opt_output(struct fg_block_ctx *x)
{
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, x->out_rows.rows);
	int rc;

	if ((rc = opt_norm(x, "decoder.final_layer_norm", x->out_rows, OPT_LNF, OPT_LNFB, in)))
		return rc;
	return fg_block_linear(x, "lm_head", OPT_LM_HEAD, -1, in, FG_ACT_NONE, none, none,
			       x->logits);
}

/* The ops the bodies call, by key like the tensors. */
enum opt_op { OPT_OP_EMBED, OPT_OP_NORM, OPT_OP_LINEAR, OPT_OP_PREFILL, OPT_OP_DECODE,
	      OPT_OP_APPEND, OPT_NOPS };

static const struct fg_op_def opt_op_defs[] = {
	[OPT_OP_EMBED]		= { FG_OP_EMBED, FG_OPND_F16, 0 },
	[OPT_OP_NORM]		= { FG_OP_LAYER_NORM, FG_OPND_ACT, 0 },
	[OPT_OP_LINEAR]		= { FG_OP_LINEAR, FG_OPND_WEIGHT, 0 },
	[OPT_OP_PREFILL]	= { FG_OP_ATTENTION_PREFILL, FG_OPND_ACT, 0 },
	[OPT_OP_DECODE]		= { FG_OP_ATTENTION_DECODE, FG_OPND_CACHE, 0 },
	[OPT_OP_APPEND]		= { FG_OP_KV_APPEND, FG_OPND_CACHE, 0 },
};
FG_TABLE_CHECK(opt_op_defs, OPT_NOPS);
_Static_assert(OPT_NOPS <= FG_ARCH_OPS_MAX, "opt_op_defs: more ops than the backend check takes");

static int opt_ops(const struct fg_model_config *c, enum fg_dtype wdt, enum fg_dtype act,
		   enum fg_dtype cdt, enum fg_op ops[FG_ARCH_OPS_MAX],
		   enum fg_dtype dts[FG_ARCH_OPS_MAX])
{
	return fg_arch_op_list(c, opt_op_defs, OPT_NOPS, wdt, act, cdt, ops, dts);
}

const struct fg_arch fg_arch_opt = {
	.name		= "opt",
	.text_bos	= 1,
	.presets	= "opt-125m, opt-1.3b, opt-2.7b, opt-6.7b, opt-13b, opt-30b, opt-66b, opt-175b, opt-iml-1.3b, opt-iml-30b, opt-iml-max-1.3b, opt-iml-max-30b",
	.preset		= opt_preset,
	.config		= opt_config,
	.globals	= opt_globals,
	.nglobals	= OPT_NGLOBAL,
	.layer		= opt_layer,
	.nlayer		= OPT_NLAYER,
	.alias		= opt_alias,
	.alias_of	= opt_alias_of,
	.nalias		= OPT_NALIAS,
	.prefixes	= opt_prefixes,
	.nprefixes	= (int)(sizeof(opt_prefixes) / sizeof(opt_prefixes[0])),
	.workspace	= opt_workspace,
	.nworkspace	= OPT_NWS,
	.body		= { opt_input, opt_attention, opt_mlp, opt_output },
	.ops		= opt_ops,
};
