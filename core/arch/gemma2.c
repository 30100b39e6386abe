/* core/arch/gemma2.c - the Gemma 2 family: model type "gemma2": presets and
 * Hugging Face's config.json, the tensor table and the blocks.
 *
 * The math is Hugging Face's Gemma2Model: h = embed_tokens(ids) · sqrt(hidden)
 * (the factor rounded to the residual stream's type); per layer
 *   h += post_attention_layernorm(o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)),
 *        v_proj(n1)))) with n1 = input_layernorm(h),
 *   h += post_feedforward_layernorm(down_proj(gelu_tanh(gate_proj(n2)) ⊙
 *        up_proj(n2))) with n2 = pre_feedforward_layernorm(h);
 * logits = softcap(norm(h) · embed_tokensᵀ) (or an lm_head of its own when
 * untied).  Every RMS norm scales by 1 + w in fp32 (the weights are stored as
 * w: compute ABI 1.12's gamma_shift, never 1 + w rounded to fp16).  Attention
 * is grouped-query with head_dim from the config, scores scaled by
 * query_pre_attn_scalar^-0.5 and capped at attn_logit_softcapping (c tanh(s /
 * c)) before the mask and softmax; layers alternate a sliding window (even
 * layers, or as layer_types says) and full attention.  The final logits are
 * capped at final_logit_softcapping, inside the output block, so that greedy
 * decoding, sampling and scoring all read capped logits.  Positions count
 * real tokens from 0, as in the Llama family. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/arch/arch.h"
#include "core/arch/block.h"
#include "core/arch/config.h"
#include "core/util/error.h"

/* ---- hyper-parameters ------------------------------------------------------ */

/* Gemma2Config's defaults, which a config.json without the key gets. */
#define GEMMA2_HEAD_DIM 256
#define GEMMA2_KV_HEADS 4
#define GEMMA2_QUERY_SCALAR 256.0
#define GEMMA2_WINDOW 4096
#define GEMMA2_ATTN_SOFTCAP 50.0
#define GEMMA2_FINAL_SOFTCAP 30.0
#define GEMMA2_EPS 1e-6
#define GEMMA2_THETA 10000.0

struct gemma2_preset {
	const char *name;
	int64_t vocab, hidden, layers, heads, kv_heads, head_dim, ffn, max_pos;
	double query_scalar;
};

/* Published shapes (each model's config.json on the Hugging Face Hub); all
 * three share the rest: rope theta 10000, eps 1e-6, a window of 4096 on the
 * even layers, softcaps 50 (scores) and 30 (logits), tied embeddings. */
static const struct gemma2_preset gemma2_presets[] = {
	{ "gemma-2-2b", 256000, 2304, 26, 8, 4, 256, 9216, 8192, 256 },
	{ "gemma-2-9b", 256000, 3584, 42, 16, 8, 256, 14336, 8192, 256 },
	{ "gemma-2-27b", 256000, 4608, 46, 32, 16, 128, 36864, 8192, 144 },
};
#define GEMMA2_NPRESETS (sizeof(gemma2_presets) / sizeof(gemma2_presets[0]))

/* What every Gemma 2 shares once the shape is known: the rotary table, the
 * scales and caps (0 for a cap means none). */
static void gemma2_derive(struct fg_model_config *c, double theta, double query_scalar,
			  double attn_cap, double final_cap)
{
	int64_t d = c->head_dim;

	c->rot_dim = d;
	c->rope_attn_factor = 1.0f;
	for (int64_t i = 0; i < d / 2; i++) /* as Hugging Face computes inv_freq (fp32) */
		c->rope_inv_freq[i] = 1.0f / powf((float)theta, (float)(2 * i) / (float)d);
	/* Python's query_pre_attn_scalar**-0.5, rounded to fp32 where it meets q·k */
	c->attn_scale = (float)pow(query_scalar, -0.5);
	c->attn_softcap = (float)attn_cap;
	c->final_softcap = (float)final_cap;
	c->norm_shift = 1.0f;
	/* torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype) */
	c->embed_scale = (float)sqrt((double)c->hidden);
}

static int gemma2_preset(const char *name, struct fg_model_config *c)
{
	const char *base = name ? name : "";
	const char *slash = strrchr(base, '/');

	if (slash) /* "google/gemma-2-9b" */
		base = slash + 1;
	for (size_t i = 0; i < GEMMA2_NPRESETS; i++) {
		const struct gemma2_preset *p = &gemma2_presets[i];
		if (strcasecmp(base, p->name) != 0)
			continue;
		memset(c, 0, sizeof(*c));
		c->arch = &fg_arch_gemma2;
		snprintf(c->name, sizeof(c->name), "%s", p->name);
		c->vocab = p->vocab;
		c->hidden = p->hidden;
		c->layers = p->layers;
		c->heads = p->heads;
		c->kv_heads = p->kv_heads;
		c->head_dim = p->head_dim;
		c->ffn = p->ffn;
		c->max_pos = p->max_pos;
		c->norm_eps = (float)GEMMA2_EPS;
		c->features = FG_FEAT_TIED;
		c->sliding_window = GEMMA2_WINDOW;
		for (int64_t l = 0; l < c->layers && l < FG_WINDOW_LAYERS_MAX; l += 2)
			c->window_layers[l / 64] |= 1ull << (l % 64);
		c->pad_id = 0, c->eos_id = 1, c->bos_id = 2;
		gemma2_derive(c, GEMMA2_THETA, p->query_scalar, GEMMA2_ATTN_SOFTCAP,
			      GEMMA2_FINAL_SOFTCAP);
		return 0;
	}
	return -ENOENT;
}

/* Keys of other models' math that Gemma 2 does not compute: refused when
 * set to anything but null or false. */
static const char *const gemma2_refused_keys[] = {
	"attention_bias", "mlp_bias", "num_experts", "num_local_experts", "qk_layernorm",
	"use_qk_norm", "embedding_multiplier", "residual_multiplier", "attention_multiplier",
	"logits_scaling", "logit_scale", "no_rope_layers", "use_bidirectional_attention",
	"rope_local_base_freq",
};

/* An optional number, finite and above 0; *out keeps its default when the
 * key is absent.  null is "none" (*none set) where none is given, else refused. */
static int gemma2_positive(const char *path, json_t *root, const char *key, double *out,
			   int *none)
{
	json_t *v = json_object_get(root, key);

	if (none)
		*none = 0;
	if (!v)
		return 0;
	if (json_is_null(v) && none) {
		*none = 1;
		return 0;
	}
	if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
	    !(json_number_value(v) > 0)) {
		FG_ERR("%s: key \"%s\" must be a finite number above 0%s", path, key,
		       none ? " (or null: none)" : "");
		return -EINVAL;
	}
	*out = json_number_value(v);
	return 0;
}

/* rope_theta, from rope_parameters (transformers 5; core/arch/config.c has
 * put a top-level rope_theta in it) or the top level; scaled rotary
 * embeddings are refused. */
static int gemma2_rope_config(const char *path, json_t *root, double *theta)
{
	json_t *params = json_object_get(root, "rope_parameters");
	json_t *scaling = json_object_get(root, "rope_scaling");
	json_t *s = params && !json_is_null(params) ? params : scaling;
	const char *where = s == params ? "rope_parameters" : "rope_scaling";
	int rc;

	*theta = GEMMA2_THETA;
	if (s && !json_is_null(s) && !json_is_object(s)) {
		FG_ERR("%s: key \"%s\" must be an object or null", path, where);
		return -EINVAL;
	}
	if ((rc = fg_json_number(path, root, "rope_theta", theta)) ||
	    (s == params && s && (rc = fg_json_number(path, s, "rope_theta", theta))))
		return rc;
	if (!(*theta > 1) || !isfinite(*theta)) {
		FG_ERR("%s: rope_theta %g must be a finite number above 1", path, *theta);
		return -EINVAL;
	}
	if (s && json_is_object(s) && json_object_size(s) > 0) {
		json_t *t = json_object_get(s, "rope_type");
		if (!t)
			t = json_object_get(s, "type");
		if (t && (!json_is_string(t) || strcmp(json_string_value(t), "default") != 0)) {
			FG_ERR("%s: %s.rope_type %s: only unscaled rotary embeddings (\"default\") are implemented for gemma2 models",
			       path, where, json_is_string(t) ? json_string_value(t) : "(not a string)");
			return -ENOTSUP;
		}
	}
	return 0;
}

/* Which layers slide: layer_types when given ("sliding_attention" or
 * "full_attention" each), else the even ones, as Gemma2Config derives it. */
static int gemma2_window_config(const char *path, json_t *root, struct fg_model_config *c)
{
	json_t *types = json_object_get(root, "layer_types"), *v;
	int64_t window = GEMMA2_WINDOW;
	int windowed = 0, rc;

	v = json_object_get(root, "sliding_window");
	if (v && json_is_null(v))
		window = 0;
	else if (v && (rc = fg_json_dim(path, root, "sliding_window", &window)))
		return rc;
	if (types && !json_is_null(types) &&
	    (!json_is_array(types) || (int64_t)json_array_size(types) != c->layers)) {
		FG_ERR("%s: key \"layer_types\" must be an array of %lld strings, one per layer",
		       path, (long long)c->layers);
		return -EINVAL;
	}
	for (int64_t l = 0; l < c->layers; l++) {
		int slide = l % 2 == 0;
		if (types && !json_is_null(types)) {
			json_t *t = json_array_get(types, (size_t)l);
			const char *type = json_string_value(t);
			if (!type) {
				FG_ERR("%s: layer_types[%lld] must be a string such as \"full_attention\"",
				       path, (long long)l);
				return -EINVAL;
			}
			slide = strcmp(type, "sliding_attention") == 0;
			if (!slide && strcmp(type, "full_attention") != 0) {
				FG_ERR("%s: layer_types[%lld] is \"%.64s\": only \"full_attention\" and \"sliding_attention\" layers are implemented",
				       path, (long long)l, type);
				return -ENOTSUP;
			}
		}
		if (!slide)
			continue;
		if (!window) {
			FG_ERR("%s: layer %lld has a sliding window, but sliding_window is null",
			       path, (long long)l);
			return -ENOTSUP;
		}
		if (l >= FG_WINDOW_LAYERS_MAX) {
			FG_ERR("%s: layer %lld has a sliding window: windows are implemented for the first %d layers only",
			       path, (long long)l, FG_WINDOW_LAYERS_MAX);
			return -ENOTSUP;
		}
		c->window_layers[l / 64] |= 1ull << (l % 64);
		windowed = 1;
	}
	c->sliding_window = windowed ? window : 0;
	return 0;
}

static int gemma2_config(const char *path, const void *json, struct fg_model_config *c)
{
	json_t *root = (json_t *)json, *v;
	double theta, qs = GEMMA2_QUERY_SCALAR;
	double attn_cap = GEMMA2_ATTN_SOFTCAP, final_cap = GEMMA2_FINAL_SOFTCAP;
	int tied = 1, none, rc;

	memset(c, 0, sizeof(*c));
	c->arch = &fg_arch_gemma2;
	if ((rc = fg_json_dim(path, root, "vocab_size", &c->vocab)) ||
	    (rc = fg_json_dim(path, root, "hidden_size", &c->hidden)) ||
	    (rc = fg_json_dim(path, root, "num_attention_heads", &c->heads)) ||
	    (rc = fg_json_dim(path, root, "num_hidden_layers", &c->layers)) ||
	    (rc = fg_json_dim(path, root, "intermediate_size", &c->ffn)) ||
	    (rc = fg_json_dim(path, root, "max_position_embeddings", &c->max_pos)))
		return rc;
	c->kv_heads = GEMMA2_KV_HEADS;
	c->head_dim = GEMMA2_HEAD_DIM;
	if ((json_object_get(root, "num_key_value_heads") &&
	     (rc = fg_json_dim(path, root, "num_key_value_heads", &c->kv_heads))) ||
	    (json_object_get(root, "head_dim") &&
	     (rc = fg_json_dim(path, root, "head_dim", &c->head_dim))))
		return rc;
	if (c->kv_heads > c->heads || c->heads % c->kv_heads) {
		FG_ERR("%s: num_key_value_heads %lld does not divide num_attention_heads %lld",
		       path, (long long)c->kv_heads, (long long)c->heads);
		return -EINVAL;
	}
	/* Gemma2MLP reads hidden_activation; a legacy hidden_act beside it is
	 * ignored by the model, and so here. */
	c->norm_eps = (float)GEMMA2_EPS;
	if ((rc = fg_json_head_dim_ok(path, c->head_dim)) ||
	    (rc = fg_json_eps(path, root, "rms_norm_eps", &c->norm_eps)) ||
	    (rc = fg_json_activation(path, root, "hidden_activation", "gelu_pytorch_tanh", "gemma2",
				     "GeGLU with GELU's tanh form")) ||
	    (rc = fg_json_refused(path, root, gemma2_refused_keys,
				  sizeof(gemma2_refused_keys) / sizeof(gemma2_refused_keys[0]), NULL,
				  "gemma2")))
		return rc;
	v = json_object_get(root, "partial_rotary_factor");
	if (v && !json_is_null(v) && (!json_is_number(v) || json_number_value(v) != 1)) {
		FG_ERR("%s: partial_rotary_factor: only full rotary embeddings (1.0) are implemented",
		       path);
		return -ENOTSUP;
	}
	if ((rc = gemma2_positive(path, root, "query_pre_attn_scalar", &qs, NULL)) ||
	    (rc = gemma2_positive(path, root, "attn_logit_softcapping", &attn_cap, &none)))
		return rc;
	if (none)
		attn_cap = 0;
	if ((rc = gemma2_positive(path, root, "final_logit_softcapping", &final_cap, &none)))
		return rc;
	if (none)
		final_cap = 0;
	if ((rc = gemma2_rope_config(path, root, &theta)) ||
	    (rc = gemma2_window_config(path, root, c)) ||
	    (rc = fg_json_bool(path, root, "tie_word_embeddings", &tied)))
		return rc;
	c->features = tied ? FG_FEAT_TIED : 0;

	/* Token ids: Gemma2Config's pad 0, eos 1, bos 2 unless given. */
	c->pad_id = 0, c->eos_id = 1, c->bos_id = 2;
	if (c->vocab <= 2)
		c->pad_id = c->eos_id = c->bos_id = 0;
	if ((rc = fg_json_eos(path, root, c->vocab, &c->eos_id)))
		return rc;
	if ((json_object_get(root, "bos_token_id") && !json_is_null(json_object_get(root, "bos_token_id")) &&
	     (rc = fg_json_token(path, root, "bos_token_id", c->vocab, &c->bos_id))) ||
	    (json_object_get(root, "pad_token_id") && !json_is_null(json_object_get(root, "pad_token_id")) &&
	     (rc = fg_json_token(path, root, "pad_token_id", c->vocab, &c->pad_id))))
		return rc;
	fg_json_name_from_path(path, "gemma2", c->name, sizeof(c->name));
	gemma2_derive(c, theta, qs, attn_cap, final_cap);
	return 0;
}

/* ---- the tensor table ------------------------------------------------------ */

enum gemma2_global {
	GM_TOK,				/* the input block */
	GM_NORM, GM_HEAD, GM_TIED,	/* the output block: lm_head, or the embedding */
	GM_NGLOBAL
};
enum gemma2_layer {
	/* the attention block, its norms before and after */
	GM_Q, GM_K, GM_V, GM_O, GM_N_IN, GM_N_POST_ATTN,
	/* the MLP block, likewise */
	GM_GATE, GM_UP, GM_DOWN, GM_N_PRE_FF, GM_N_POST_FF,
	GM_NLAYER
};
#define L "model.layers.%d."
#define LIN FG_TD_LINEAR
/* The norms hold w of 1 + w: dummy weights near 0 scale by about 1. */
#define NORM_INIT FG_INIT_BIAS

static const struct fg_tensor_def gemma2_globals[] = {
	[GM_TOK]	= { "model.embed_tokens.weight", FG_BLOCK_INPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	[GM_NORM]	= { "model.norm.weight", FG_BLOCK_OUTPUT, FG_DIM_ONE, FG_DIM_HIDDEN, 0, NORM_INIT, 0, 0 },
	[GM_HEAD]	= { "lm_head.weight", FG_BLOCK_OUTPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, FG_FEAT_TIED },
	[GM_TIED]	= { "model.embed_tokens.weight", FG_BLOCK_OUTPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, LIN | FG_TD_TIED,
			    FG_INIT_MATRIX, FG_FEAT_TIED, 0 },
};
FG_TABLE_CHECK(gemma2_globals, GM_NGLOBAL);

static const struct fg_tensor_def gemma2_layer[] = {
	[GM_Q]		= { L "self_attn.q_proj.weight", FG_BLOCK_ATTN, FG_DIM_Q, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_K]		= { L "self_attn.k_proj.weight", FG_BLOCK_ATTN, FG_DIM_KV, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_V]		= { L "self_attn.v_proj.weight", FG_BLOCK_ATTN, FG_DIM_KV, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_O]		= { L "self_attn.o_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_Q, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_N_IN]	= { L "input_layernorm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, NORM_INIT, 0, 0 },
	[GM_N_POST_ATTN] = { L "post_attention_layernorm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, NORM_INIT, 0, 0 },
	[GM_GATE]	= { L "mlp.gate_proj.weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_UP]		= { L "mlp.up_proj.weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_DOWN]	= { L "mlp.down_proj.weight", FG_BLOCK_MLP, FG_DIM_HIDDEN, FG_DIM_FFN, LIN, FG_INIT_MATRIX, 0, 0 },
	[GM_N_PRE_FF]	= { L "pre_feedforward_layernorm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, NORM_INIT, 0, 0 },
	[GM_N_POST_FF]	= { L "post_feedforward_layernorm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, NORM_INIT, 0, 0 },
};
FG_TABLE_CHECK(gemma2_layer, GM_NLAYER);
#undef L
#undef LIN
#undef NORM_INIT

/* ---- the blocks ---------------------------------------------------------- */

enum gemma2_ws { WS_X, WS_Q, WS_K, WS_V, WS_A, WS_GATE, WS_UP, WS_LOGITS, GEMMA2_NWS };

static const struct fg_workspace_def gemma2_workspace[] = {
	[WS_X]		= { "x", FG_WS_PER_TOKEN, FG_DIM_HIDDEN },
	[WS_Q]		= { "q", FG_WS_PER_TOKEN, FG_DIM_Q },
	[WS_K]		= { "k", FG_WS_PER_TOKEN, FG_DIM_KV },
	[WS_V]		= { "v", FG_WS_PER_TOKEN, FG_DIM_KV },
	[WS_A]		= { "a", FG_WS_PER_TOKEN, FG_DIM_Q },
	[WS_GATE]	= { "gate", FG_WS_PER_TOKEN, FG_DIM_FFN },
	[WS_UP]		= { "up", FG_WS_PER_TOKEN, FG_DIM_FFN },
	[WS_LOGITS]	= { "logits", FG_WS_PER_SEQ, FG_DIM_VOCAB },
};
FG_TABLE_CHECK(gemma2_workspace, GEMMA2_NWS);
_Static_assert(GEMMA2_NWS <= FG_WS_MAX, "gemma2_workspace: more workspaces than a block has");

static const struct fg_tensor none;

/* RMS norm scaling by 1 + w (norm_shift), in fp32. */
static int gemma2_norm(struct fg_block_ctx *x, const char *what, struct fg_tensor in, int g,
		       struct fg_tensor out)
{
	struct fg_layer_norm_args a = {
		.x = in, .gamma = fg_block_weight(x, g), .eps = x->cfg->norm_eps, .out = out,
		.kind = FG_NORM_RMS, .gamma_shift = x->cfg->norm_shift,
	};
	return fg_backend_norm(x->be, x->stream, x->layer, what, &a);
}

/* h = alpha h + y: the residual add after a block's closing norm, or (y
 * none) the embedding's scale. */
static int gemma2_add(struct fg_block_ctx *x, const char *what, float alpha, struct fg_tensor y)
{
	struct fg_add_args a = { .x = x->h, .y = y, .out = x->h, .alpha = alpha, .beta = 1.0f };
	return fg_backend_add(x->be, x->stream, x->layer, what, &a);
}

static int gemma2_input(struct fg_block_ctx *x)
{
	struct fg_embed_args e = {
		.ids = x->ids, .n = x->bs * x->n, .tok = fg_block_weight(x, GM_TOK), .out = x->h,
	};
	int rc = fg_backend_embed(x->be, x->stream, -1, "embed_tokens", &e);

	return rc ? rc : gemma2_add(x, "embedding scale", x->cfg->embed_scale, none);
}

static int gemma2_rope(struct fg_block_ctx *x, const char *what, struct fg_tensor t, int64_t heads)
{
	const struct fg_model_config *c = x->cfg;
	struct fg_rope_args r = {
		.x = t, .positions = x->pos, .n = t.rows, .heads = heads, .head_dim = c->head_dim,
		.rot_dim = c->rot_dim, .inv_freq = c->rope_inv_freq,
		.attn_factor = c->rope_attn_factor,
	};
	return fg_backend_rope(x->be, x->stream, x->layer, what, &r);
}

/* The scale and soft cap of the scores reach attention through the config
 * (the schedule's attend fills fg_attention_args from it). */
static int gemma2_attention(struct fg_block_ctx *x)
{
	const struct fg_model_config *c = x->cfg;
	int64_t rows = x->h.rows, n = x->n;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), q = fg_rows(x->ws[WS_Q], 0, rows);
	struct fg_tensor k = fg_rows(x->ws[WS_K], 0, rows), v = fg_rows(x->ws[WS_V], 0, rows);
	struct fg_tensor a = fg_rows(x->ws[WS_A], 0, rows);
	int rc;

	/* Real tokens count from 0; pads (masked out) take 0 too. */
	for (int64_t s = 0; s < x->bs; s++)
		for (int64_t i = 0; i < n; i++) {
			int64_t col = x->step + i;
			x->pos[s * n + i] = col < x->pad[s] ? 0 : (int32_t)(col - x->pad[s]);
		}
	if ((rc = gemma2_norm(x, "input_layernorm", x->h, GM_N_IN, in)) ||
	    (rc = fg_block_linear(x, "q_proj", GM_Q, -1, in, FG_ACT_NONE, none, none, q)) ||
	    (rc = fg_block_linear(x, "k_proj", GM_K, -1, in, FG_ACT_NONE, none, none, k)) ||
	    (rc = fg_block_linear(x, "v_proj", GM_V, -1, in, FG_ACT_NONE, none, none, v)) ||
	    (rc = gemma2_rope(x, "q rope", q, c->heads)) ||
	    (rc = gemma2_rope(x, "k rope", k, c->kv_heads)) ||
	    (rc = x->attend(x, q, k, v, a)))
		return rc;
	/* (in is read by now: it takes o_proj's output, normed in place) */
	if ((rc = fg_block_linear(x, "o_proj", GM_O, -1, a, FG_ACT_NONE, none, none, in)) ||
	    (rc = gemma2_norm(x, "post_attention_layernorm", in, GM_N_POST_ATTN, in)))
		return rc;
	return gemma2_add(x, "attention residual", 1.0f, in);
}

static int gemma2_mlp(struct fg_block_ctx *x)
{
	int64_t rows = x->h.rows;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), g = fg_rows(x->ws[WS_GATE], 0, rows);
	struct fg_tensor up = fg_rows(x->ws[WS_UP], 0, rows);
	int rc;

	if ((rc = gemma2_norm(x, "pre_feedforward_layernorm", x->h, GM_N_PRE_FF, in)) ||
	    (rc = fg_block_linear(x, "up_proj", GM_UP, -1, in, FG_ACT_NONE, none, none, up)) ||
	    (rc = fg_block_linear(x, "gate_proj", GM_GATE, -1, in, FG_ACT_GELU_TANH, none, up, g)) ||
	    (rc = fg_block_linear(x, "down_proj", GM_DOWN, -1, g, FG_ACT_NONE, none, none, in)) ||
	    (rc = gemma2_norm(x, "post_feedforward_layernorm", in, GM_N_POST_FF, in)))
		return rc;
	return gemma2_add(x, "MLP residual", 1.0f, in);
}

/* The final norm of the rows asked for, their logits, capped. */
static int gemma2_output(struct fg_block_ctx *x)
{
	const struct fg_model_config *c = x->cfg;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, x->out_rows.rows);
	int head = fg_block_tensor(x, GM_HEAD)->npieces ? GM_HEAD : GM_TIED;
	int rc;

	if ((rc = gemma2_norm(x, "model.norm", x->out_rows, GM_NORM, in)) ||
	    (rc = fg_block_linear(x, "lm_head", head, -1, in, FG_ACT_NONE, none, none, x->logits)))
		return rc;
	if (!(c->final_softcap > 0))
		return 0;
	struct fg_softcap_args s = { .x = x->logits, .out = x->logits, .cap = c->final_softcap };
	return fg_backend_softcap(x->be, x->stream, -1, "final_logit_softcapping", &s);
}

/* The ops the bodies call; grouped-query attention only with fewer
 * key/value heads than heads, the caps only where the config has them. */
enum gemma2_op { GM_OP_EMBED, GM_OP_ADD, GM_OP_NORM, GM_OP_NORM_SHIFT, GM_OP_LINEAR,
		 GM_OP_LINEAR_GELU, GM_OP_LINEAR_MUL, GM_OP_ROPE, GM_OP_PREFILL, GM_OP_DECODE,
		 GM_OP_APPEND, GM_OP_GQA_ACT, GM_OP_GQA_CACHE, GM_OP_CAP_ACT, GM_OP_CAP_CACHE,
		 GM_OP_SOFTCAP, GM_NOPS };

static const struct fg_op_def gemma2_op_defs[] = {
	[GM_OP_EMBED]		= { FG_OP_EMBED_TOKENS, FG_OPND_F16, 0 },
	[GM_OP_ADD]		= { FG_OP_ADD, FG_OPND_ACT, 0 },
	[GM_OP_NORM]		= { FG_OP_RMS_NORM, FG_OPND_ACT, 0 },
	[GM_OP_NORM_SHIFT]	= { FG_OP_NORM_SHIFT, FG_OPND_ACT, 0 },
	[GM_OP_LINEAR]		= { FG_OP_LINEAR, FG_OPND_WEIGHT, 0 },
	[GM_OP_LINEAR_GELU]	= { FG_OP_LINEAR_GELU, FG_OPND_WEIGHT, 0 },
	[GM_OP_LINEAR_MUL]	= { FG_OP_LINEAR_MUL, FG_OPND_WEIGHT, 0 },
	[GM_OP_ROPE]		= { FG_OP_ROPE, FG_OPND_ACT, 0 },
	[GM_OP_PREFILL]		= { FG_OP_ATTENTION_PREFILL, FG_OPND_ACT, 0 },
	[GM_OP_DECODE]		= { FG_OP_ATTENTION_DECODE, FG_OPND_CACHE, 0 },
	[GM_OP_APPEND]		= { FG_OP_KV_APPEND, FG_OPND_CACHE, 0 },
	[GM_OP_GQA_ACT]		= { FG_OP_ATTENTION_GQA, FG_OPND_ACT, FG_OPW_GQA },
	[GM_OP_GQA_CACHE]	= { FG_OP_ATTENTION_GQA, FG_OPND_CACHE, FG_OPW_GQA },
	[GM_OP_CAP_ACT]		= { FG_OP_ATTENTION_SOFTCAP, FG_OPND_ACT, FG_OPW_ATTN_SOFTCAP },
	[GM_OP_CAP_CACHE]	= { FG_OP_ATTENTION_SOFTCAP, FG_OPND_CACHE, FG_OPW_ATTN_SOFTCAP },
	[GM_OP_SOFTCAP]		= { FG_OP_SOFTCAP, FG_OPND_ACT, FG_OPW_FINAL_SOFTCAP },
};
FG_TABLE_CHECK(gemma2_op_defs, GM_NOPS);
_Static_assert(GM_NOPS <= FG_ARCH_OPS_MAX, "gemma2_op_defs: more ops than the backend check takes");

static int gemma2_ops(const struct fg_model_config *c, enum fg_dtype wdt, enum fg_dtype act,
		      enum fg_dtype cdt, enum fg_op ops[FG_ARCH_OPS_MAX],
		      enum fg_dtype dts[FG_ARCH_OPS_MAX])
{
	return fg_arch_op_list(c, gemma2_op_defs, GM_NOPS, wdt, act, cdt, ops, dts);
}

const struct fg_arch fg_arch_gemma2 = {
	.name		= "gemma2",
	.presets	= "gemma-2-2b, gemma-2-9b, gemma-2-27b",
	.text_bos	= 1, /* Gemma's tokenizer puts <bos> first */
	.preset		= gemma2_preset,
	.config		= gemma2_config,
	.globals	= gemma2_globals,
	.nglobals	= GM_NGLOBAL,
	.layer		= gemma2_layer,
	.nlayer		= GM_NLAYER,
	.workspace	= gemma2_workspace,
	.nworkspace	= GEMMA2_NWS,
	.body		= { gemma2_input, gemma2_attention, gemma2_mlp, gemma2_output },
	.ops		= gemma2_ops,
};
