/* core/arch/llama.c - the Llama family: model types "llama" (Llama 1/2/3/3.1),
 * "mistral", "qwen2", "qwen3" and "mixtral": presets and Hugging Face's config.json,
 * the tensor tables and the blocks.
 *
 * The math is Hugging Face's LlamaModel: h = embed_tokens(ids); per layer
 * h += o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))) with
 * n1 = rmsnorm(h) and grouped-query heads, h += down_proj(silu(gate_proj(n2))
 * ⊙ up_proj(n2)) with n2 = rmsnorm(h); logits = rmsnorm(h) · lm_headᵀ (or the
 * token embedding when tied).  Positions count real tokens from 0, so a
 * left-padded row computes what the prompt alone would.  Qwen2 adds biases to
 * q, k and v; Llama's attention_bias / mlp_bias add them everywhere; Qwen3
 * RMS-normalises each head of q and of k (q_norm, k_norm) before rotary.
 * Mixtral's MLP is a sparse mixture: a router (n2 · gateᵀ) picks each
 * token's top experts_per_tok of `experts` SwiGLU experts, and h gains their
 * outputs weighted by the softmax over the chosen logits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fgcore/half.h>

#include "core/arch/arch.h"
#include "core/arch/block.h"
#include "core/arch/config.h"
#include "core/util/error.h"

/* ---- hyper-parameters ------------------------------------------------------ */

enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3 };

struct llama_rope {
	int type;
	double theta, factor, low_freq_factor, high_freq_factor, original_max_pos;
};

struct llama_preset {
	const char *name;
	const struct fg_arch *arch;
	int64_t vocab, hidden, layers, heads, kv_heads, ffn, max_pos;
	double theta, eps;
	unsigned features;
	int64_t sliding_window;
	struct llama_rope rope; /* type ROPE_DEFAULT unless scaled */
	int64_t experts, experts_per_tok; /* a mixture's; its experts are ffn wide */
	int64_t head_dim;                 /* 0: hidden / heads */
	int64_t shared_ffn;               /* Qwen2-MoE's shared expert */
};

#define Q FG_FEAT_QKV_BIAS
#define N FG_FEAT_QK_NORM
/* Published shapes (each model's config.json on the Hugging Face Hub). */
static const struct llama_preset llama_presets[] = {
	{ "llama-2-7b", &fg_arch_llama, 32000, 4096, 32, 32, 32, 11008, 4096, 1e4, 1e-5, 0, 0, { 0 }, 0, 0, 0, 0 },
	{ "llama-2-13b", &fg_arch_llama, 32000, 5120, 40, 40, 40, 13824, 4096, 1e4, 1e-5, 0, 0, { 0 }, 0, 0, 0, 0 },
	{ "llama-2-70b", &fg_arch_llama, 32000, 8192, 80, 64, 8, 28672, 4096, 1e4, 1e-5, 0, 0, { 0 }, 0, 0, 0, 0 },
	{ "llama-3-8b", &fg_arch_llama, 128256, 4096, 32, 32, 8, 14336, 8192, 5e5, 1e-5, 0, 0, { 0 }, 0, 0, 0, 0 },
	{ "llama-3-70b", &fg_arch_llama, 128256, 8192, 80, 64, 8, 28672, 8192, 5e5, 1e-5, 0, 0, { 0 }, 0, 0, 0, 0 },
	{ "llama-3.1-8b", &fg_arch_llama, 128256, 4096, 32, 32, 8, 14336, 131072, 5e5, 1e-5, 0, 0,
	  { ROPE_LLAMA3, 5e5, 8, 1, 4, 8192 }, 0, 0, 0, 0 },
	{ "llama-3.1-70b", &fg_arch_llama, 128256, 8192, 80, 64, 8, 28672, 131072, 5e5, 1e-5, 0, 0,
	  { ROPE_LLAMA3, 5e5, 8, 1, 4, 8192 }, 0, 0, 0, 0 },
	{ "mistral-7b", &fg_arch_mistral, 32000, 4096, 32, 32, 8, 14336, 32768, 1e4, 1e-5, 0, 4096, { 0 }, 0, 0, 0, 0 },
	{ "qwen2-7b", &fg_arch_qwen2, 152064, 3584, 28, 28, 4, 18944, 32768, 1e6, 1e-6, Q, 0, { 0 }, 0, 0, 0, 0 },
	{ "qwen2-72b", &fg_arch_qwen2, 152064, 8192, 80, 64, 8, 29568, 32768, 1e6, 1e-5, Q, 0, { 0 }, 0, 0, 0, 0 },
	{ "mixtral-8x7b", &fg_arch_mixtral, 32000, 4096, 32, 32, 8, 14336, 32768, 1e6, 1e-5, 0, 0, { 0 }, 8, 2, 0, 0 },
	{ "mixtral-8x22b", &fg_arch_mixtral, 32768, 6144, 56, 48, 8, 16384, 65536, 1e6, 1e-5, 0, 0, { 0 }, 8, 2, 0, 0 },
	{ "qwen3-8b", &fg_arch_qwen3, 151936, 4096, 36, 32, 8, 12288, 40960, 1e6, 1e-6, N, 0, { 0 }, 0, 0, 128, 0 },
	{ "qwen3-32b", &fg_arch_qwen3, 151936, 5120, 64, 64, 8, 25600, 40960, 1e6, 1e-6, N, 0, { 0 }, 0, 0, 128, 0 },
	{ "qwen1.5-moe-a2.7b", &fg_arch_qwen2_moe, 151936, 2048, 24, 16, 16, 1408, 8192, 1e6, 1e-6, Q, 0, { 0 }, 60, 4, 0, 5632 },
	{ "qwen2-57b-a14b", &fg_arch_qwen2_moe, 151936, 3584, 28, 28, 4, 2560, 131072, 1e6, 1e-6, Q, 0, { 0 }, 64, 8, 0, 20480 },
	{ "qwen3-30b-a3b", &fg_arch_qwen3_moe, 151936, 2048, 48, 32, 4, 768, 40960, 1e6, 1e-6, N, 0, { 0 }, 128, 8, 128, 0 },
	{ "qwen3-235b-a22b", &fg_arch_qwen3_moe, 151936, 4096, 94, 64, 4, 1536, 40960, 1e6, 1e-6, N, 0, { 0 }, 128, 8, 128, 0 },
};
#undef Q
#undef N
#define LLAMA_NPRESETS (sizeof(llama_presets) / sizeof(llama_presets[0]))

/* inv_freq of each rotary pair, as Hugging Face computes it (in fp32), then
 * its scaling. */
static void llama_rope_table(struct fg_model_config *c, const struct llama_rope *r)
{
	int64_t d = c->head_dim;
	c->rot_dim = d;
	c->rope_attn_factor = 1.0f;
	for (int64_t i = 0; i < d / 2; i++) {
		float f = 1.0f / powf((float)r->theta, (float)(2 * i) / (float)d);
		if (r->type == ROPE_LINEAR) {
			f = (float)(f / r->factor);
		} else if (r->type == ROPE_LLAMA3) {
			/* Long wavelengths slow down by factor, short ones keep their
			 * frequency, the band between blends the two. */
			double lo = r->original_max_pos / r->low_freq_factor;
			double hi = r->original_max_pos / r->high_freq_factor;
			double wavelen = 2 * M_PI / f;
			if (wavelen > lo) {
				f = (float)(f / r->factor);
			} else if (wavelen >= hi) {
				double s = (r->original_max_pos / wavelen - r->low_freq_factor) /
					   (r->high_freq_factor - r->low_freq_factor);
				f = (float)((1 - s) * f / r->factor + s * f);
			}
		}
		c->rope_inv_freq[i] = f;
	}
}

static int llama_preset(const char *name, struct fg_model_config *c)
{
	const char *base = name ? name : "";
	const char *slash = strrchr(base, '/');

	if (slash) /* "meta-llama/llama-2-7b" */
		base = slash + 1;
	for (size_t i = 0; i < LLAMA_NPRESETS; i++) {
		const struct llama_preset *p = &llama_presets[i];
		if (strcasecmp(base, p->name) != 0)
			continue;
		memset(c, 0, sizeof(*c));
		c->arch = p->arch;
		snprintf(c->name, sizeof(c->name), "%s", p->name);
		c->vocab = p->vocab;
		c->hidden = p->hidden;
		c->layers = p->layers;
		c->heads = p->heads;
		c->kv_heads = p->kv_heads;
		c->head_dim = p->head_dim ? p->head_dim : p->hidden / p->heads;
		c->ffn = p->ffn;
		c->max_pos = p->max_pos;
		c->norm_eps = (float)p->eps;
		c->features = p->features | (p->experts ? FG_FEAT_MOE : 0) |
			      (p->shared_ffn ? FG_FEAT_SHARED_EXPERT : 0);
		c->sliding_window = p->sliding_window;
		for (int64_t l = 0; p->sliding_window && l < c->layers && l < FG_WINDOW_LAYERS_MAX; l++)
			c->window_layers[l / 64] |= 1ull << (l % 64);
		c->experts = p->experts;
		c->experts_per_tok = p->experts_per_tok;
		c->shared_ffn = p->shared_ffn;
		/* Mixtral's and Qwen3-MoE's (norm_topk_prob true); Qwen2-MoE's
		 * weigh the chosen experts by their softmax over all */
		c->router_renorm = p->experts > 0 && p->arch != &fg_arch_qwen2_moe;
		c->bos_id = 1, c->eos_id = 2, c->pad_id = 0;
		struct llama_rope r = p->rope;
		if (r.type == ROPE_DEFAULT)
			r.theta = p->theta;
		llama_rope_table(c, &r);
		return 0;
	}
	return -ENOENT;
}

/* Keys of other models' math that this family does not compute. */
static const char *const llama_refused_keys[] = {
	"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
	"num_experts", "num_local_experts", "moe_intermediate_size", "qk_layernorm",
	"use_qk_norm", "embedding_multiplier", "residual_multiplier", "attention_multiplier",
	"logits_scaling", "logit_scale", "no_rope_layers",
};
/* (a mixture's family reads these: moe_config) */
static const char *const moe_keys[] = { "num_local_experts", "num_experts", "moe_intermediate_size",
					NULL };

/* rope_theta and the scaling: the newer `rope_parameters` object, or the
 * older `rope_theta` + `rope_scaling` keys. */
static int llama_rope_config(const char *path, json_t *root, struct llama_rope *r)
{
	json_t *params = json_object_get(root, "rope_parameters");
	json_t *scaling = json_object_get(root, "rope_scaling");
	const char *where = "rope_scaling";
	json_t *s = scaling;
	int rc;

	memset(r, 0, sizeof(*r));
	r->theta = 10000;
	if (params && !json_is_null(params)) {
		if (!json_is_object(params)) {
			FG_ERR("%s: key \"rope_parameters\" must be an object", path);
			return -EINVAL;
		}
		if ((rc = fg_json_number(path, params, "rope_theta", &r->theta)))
			return rc;
		s = params;
		where = "rope_parameters";
	} else if ((rc = fg_json_number(path, root, "rope_theta", &r->theta))) {
		return rc;
	}
	if (!(r->theta > 1) || !isfinite(r->theta)) {
		FG_ERR("%s: rope_theta %g must be a finite number above 1", path, r->theta);
		return -EINVAL;
	}
	if (!s || json_is_null(s))
		return 0;
	if (!json_is_object(s)) {
		FG_ERR("%s: key \"%s\" must be an object or null", path, where);
		return -EINVAL;
	}
	json_t *t = json_object_get(s, "rope_type");
	if (!t)
		t = json_object_get(s, "type");
	const char *type = t && json_is_string(t) ? json_string_value(t) : NULL;
	if (t && !type) {
		FG_ERR("%s: %s.rope_type must be a string", path, where);
		return -EINVAL;
	}
	if (!type || strcmp(type, "default") == 0)
		return 0;
	r->factor = 0;
	if ((rc = fg_json_number(path, s, "factor", &r->factor)))
		return rc;
	if (!(r->factor >= 1) || !isfinite(r->factor)) {
		FG_ERR("%s: %s.factor must be a number >= 1 for rope_type \"%s\"", path, where, type);
		return -EINVAL;
	}
	if (strcmp(type, "linear") == 0) {
		r->type = ROPE_LINEAR;
		return 0;
	}
	if (strcmp(type, "llama3") == 0) {
		r->type = ROPE_LLAMA3;
		r->low_freq_factor = 1, r->high_freq_factor = 4, r->original_max_pos = 8192;
		if ((rc = fg_json_number(path, s, "low_freq_factor", &r->low_freq_factor)) ||
		    (rc = fg_json_number(path, s, "high_freq_factor", &r->high_freq_factor)) ||
		    (rc = fg_json_number(path, s, "original_max_position_embeddings",
					 &r->original_max_pos)))
			return rc;
		if (!(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) ||
		    !(r->original_max_pos >= 1)) {
			FG_ERR("%s: %s: llama3 scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings >= 1",
			       path, where);
			return -EINVAL;
		}
		return 0;
	}
	FG_ERR("%s: %s.rope_type \"%s\" is not supported (supported: default, linear, llama3)",
	       path, where, type);
	return -ENOTSUP;
}

/* Hugging Face's MistralConfig and Qwen2Config window when the key is absent. */
#define LLAMA_HF_WINDOW 4096
/* Qwen2Config's max_window_layers when the key is absent. */
#define QWEN2_HF_WINDOW_LAYERS 28

/* Layer l is windowed (fg_layer_window). */
static int window_layer(const char *path, struct fg_model_config *c, int64_t l)
{
	if (l >= FG_WINDOW_LAYERS_MAX) {
		FG_ERR("%s: layer %lld has a sliding window: windows are implemented for the first %d layers only",
		       path, (long long)l, FG_WINDOW_LAYERS_MAX);
		return -ENOTSUP;
	}
	c->window_layers[l / 64] |= 1ull << (l % 64);
	return 0;
}

/* Sliding-window attention, read as Hugging Face's classes read it: Mistral
 * windows every layer by sliding_window (MistralConfig ignores layer_types);
 * Qwen2 has a window only with use_sliding_window, and windows the layers
 * layer_types names "sliding_attention" (without layer_types, those from
 * max_window_layers on); Llama has none.  c->sliding_window keeps the
 * window, c->window_layers which layers use it; attention applies it (compute
 * ABI 1.11), and with an older backend the plan refuses a run longer than the
 * window (where full attention is the same function).  A layer_types entry of
 * another kind changes the math and is refused by name. */
static int llama_window_config(const char *path, json_t *root, const struct fg_arch *arch,
			       struct fg_model_config *c)
{
	json_t *types = json_object_get(root, "layer_types"), *v;
	int64_t window = 0, window_layers = QWEN2_HF_WINDOW_LAYERS;
	int use_window = arch == &fg_arch_mistral || arch == &fg_arch_mixtral, windowed = 0, rc;

	int qwen = arch == &fg_arch_qwen2 || arch == &fg_arch_qwen3 || arch == &fg_arch_qwen2_moe ||
		   arch == &fg_arch_qwen3_moe;

	if (qwen && (rc = fg_json_bool(path, root, "use_sliding_window", &use_window)))
		return rc;
	if (arch != &fg_arch_llama && use_window) {
		v = json_object_get(root, "sliding_window");
		if (!v)
			window = arch == &fg_arch_mixtral ? 0 : LLAMA_HF_WINDOW; /* MixtralConfig: None */
		else if (!json_is_null(v) &&
			 (rc = fg_json_dim(path, root, "sliding_window", &window)))
			return rc;
	}
	if (types && !json_is_null(types)) {
		if (!json_is_array(types)) {
			FG_ERR("%s: key \"layer_types\" must be an array of strings, one per layer, not %s",
			       path, json_is_object(types) ? "an object" :
				     json_is_string(types) ? "a string" : "a single value");
			return -EINVAL;
		}
		if ((int64_t)json_array_size(types) != c->layers) {
			FG_ERR("%s: layer_types has %zu entries, but num_hidden_layers is %lld: it needs one per layer",
			       path, json_array_size(types), (long long)c->layers);
			return -EINVAL;
		}
		for (size_t i = 0; i < json_array_size(types); i++) {
			json_t *t = json_array_get(types, i);
			const char *type = json_string_value(t);
			if (!json_is_string(t)) {
				FG_ERR("%s: layer_types[%zu] must be a string such as \"full_attention\"",
				       path, i);
				return -EINVAL;
			}
			if (strcmp(type, "full_attention") == 0)
				continue;
			if (strcmp(type, "sliding_attention") != 0) {
				FG_ERR("%s: layer_types[%zu] is \"%.64s\": only \"full_attention\" and \"sliding_attention\" layers are implemented",
				       path, i, type);
				return -ENOTSUP;
			}
			if (!window) {
				FG_ERR("%s: layer_types[%zu] is \"sliding_attention\", but the config gives it no window (%s)",
				       path, i,
				       arch == &fg_arch_llama ? "llama models have none" :
				       qwen ? "use_sliding_window is false or sliding_window is null" :
								"sliding_window is null");
				return -ENOTSUP;
			}
			if ((rc = window_layer(path, c, (int64_t)i)))
				return rc;
			windowed = 1;
		}
	} else if (qwen && window) {
		v = json_object_get(root, "max_window_layers");
		if (v && !json_is_null(v)) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > FG_CONFIG_DIM_MAX) {
				FG_ERR("%s: key \"max_window_layers\" must be an integer between 0 and %lld",
				       path, (long long)FG_CONFIG_DIM_MAX);
				return -EINVAL;
			}
			window_layers = json_integer_value(v);
		}
		windowed = window_layers < c->layers;
		for (int64_t l = window_layers; l < c->layers; l++)
			if ((rc = window_layer(path, c, l)))
				return rc;
	}
	if ((arch == &fg_arch_mistral || arch == &fg_arch_mixtral) && window) {
		windowed = 1;
		for (int64_t l = 0; l < c->layers; l++)
			if ((rc = window_layer(path, c, l)))
				return rc;
	}
	c->sliding_window = windowed ? window : 0;
	if (!windowed)
		memset(c->window_layers, 0, sizeof(c->window_layers));
	return 0;
}


static int is_moe(const struct fg_arch *a)
{
	return a == &fg_arch_mixtral || a == &fg_arch_qwen2_moe || a == &fg_arch_qwen3_moe;
}

/* A key of Hugging Face's config.json that names the experts' count. */
static int moe_count(const char *path, json_t *root, const char *key, int64_t *n, const char **by)
{
	int64_t v;
	int rc;

	if (!json_object_get(root, key) || json_is_null(json_object_get(root, key)))
		return 0;
	if ((rc = fg_json_dim(path, root, key, &v)))
		return rc;
	if (*by && v != *n) {
		FG_ERR("%s: %s %lld and %s %lld disagree: give one", path, *by, (long long)*n, key,
		       (long long)v);
		return -EINVAL;
	}
	*n = v, *by = key;
	return 0;
}

/* The router of Mixtral (num_local_experts, softmax over the chosen) and of
 * Qwen's MoE (num_experts, norm_topk_prob, moe_intermediate_size, a shared
 * expert with its sigmoid gate in Qwen2-MoE); jitter noise and the auxiliary
 * loss are training's only. */
static int moe_config(const char *path, json_t *root, const struct fg_arch *arch,
		      struct fg_model_config *c)
{
	const char *by = NULL, *name;
	json_t *v;
	int rc, renorm = arch == &fg_arch_mixtral;

	/* MixtralConfig's defaults; Qwen2MoeConfig's and Qwen3MoeConfig's */
	c->experts = arch == &fg_arch_mixtral ? 8 : arch == &fg_arch_qwen2_moe ? 60 : 128;
	c->experts_per_tok = arch == &fg_arch_mixtral ? 2 : arch == &fg_arch_qwen2_moe ? 4 : 8;
	if ((rc = moe_count(path, root, "num_local_experts", &c->experts, &by)) ||
	    (arch != &fg_arch_mixtral && (rc = moe_count(path, root, "num_experts", &c->experts, &by))) ||
	    (json_object_get(root, "num_experts_per_tok") &&
	     (rc = fg_json_dim(path, root, "num_experts_per_tok", &c->experts_per_tok))))
		return rc;
	name = by ? by : arch == &fg_arch_mixtral ? "num_local_experts" : "num_experts";
	if (c->experts_per_tok > c->experts || c->experts_per_tok > FG_ROUTE_TOP_MAX) {
		FG_ERR("%s: num_experts_per_tok %lld must be at most %s (%lld)", path,
		       (long long)c->experts_per_tok, name, (long long)c->experts);
		return -EINVAL;
	}
	if (arch != &fg_arch_mixtral) {
		int64_t step = 1;
		if ((rc = fg_json_bool(path, root, "norm_topk_prob", &renorm)) ||
		    (json_object_get(root, "decoder_sparse_step") &&
		     (rc = fg_json_dim(path, root, "decoder_sparse_step", &step))))
			return rc;
		v = json_object_get(root, "mlp_only_layers");
		if (step != 1 || (v && !json_is_null(v) && (!json_is_array(v) || json_array_size(v)))) {
			FG_ERR("%s: %s: only models whose every layer is a mixture of experts are implemented (decoder_sparse_step 1, mlp_only_layers [])",
			       path, step != 1 ? "decoder_sparse_step" : "mlp_only_layers");
			return -ENOTSUP;
		}
		if ((rc = fg_json_dim(path, root, "moe_intermediate_size", &c->ffn)))
			return rc;
		if (arch == &fg_arch_qwen2_moe &&
		    json_object_get(root, "shared_expert_intermediate_size") &&
		    (rc = fg_json_dim(path, root, "shared_expert_intermediate_size", &c->shared_ffn)))
			return rc;
	}
	c->router_renorm = renorm;
	c->features |= FG_FEAT_MOE | (c->shared_ffn ? FG_FEAT_SHARED_EXPERT : 0);
	return 0;
}

static int llama_config_of(const char *path, json_t *root, const struct fg_arch *arch,
			   struct fg_model_config *c)
{
	struct llama_rope rope;
	double partial = 1;
	int flag, rc;

	memset(c, 0, sizeof(*c));
	c->arch = arch;
	if ((rc = fg_json_dim(path, root, "vocab_size", &c->vocab)) ||
	    (rc = fg_json_dim(path, root, "hidden_size", &c->hidden)) ||
	    (rc = fg_json_dim(path, root, "num_attention_heads", &c->heads)) ||
	    (rc = fg_json_dim(path, root, "num_hidden_layers", &c->layers)) ||
	    (rc = fg_json_dim(path, root, "intermediate_size", &c->ffn)) ||
	    (rc = fg_json_dim(path, root, "max_position_embeddings", &c->max_pos)))
		return rc;
	c->kv_heads = c->heads;
	if (json_object_get(root, "num_key_value_heads") &&
	    !json_is_null(json_object_get(root, "num_key_value_heads")) &&
	    (rc = fg_json_dim(path, root, "num_key_value_heads", &c->kv_heads)))
		return rc;
	if (c->heads % c->kv_heads) {
		FG_ERR("%s: num_key_value_heads %lld does not divide num_attention_heads %lld",
		       path, (long long)c->kv_heads, (long long)c->heads);
		return -EINVAL;
	}
	if (json_object_get(root, "head_dim") && !json_is_null(json_object_get(root, "head_dim"))) {
		if ((rc = fg_json_dim(path, root, "head_dim", &c->head_dim)))
			return rc;
	} else if (c->hidden % c->heads) {
		FG_ERR("%s: hidden_size %lld is not a multiple of num_attention_heads %lld (and no head_dim is given)",
		       path, (long long)c->hidden, (long long)c->heads);
		return -EINVAL;
	} else {
		c->head_dim = c->hidden / c->heads;
	}
	c->norm_eps = 1e-6f;
	if ((rc = fg_json_head_dim_ok(path, c->head_dim)) ||
	    (rc = fg_json_eps(path, root, "rms_norm_eps", &c->norm_eps)) ||
	    (rc = fg_json_activation(path, root, "hidden_act", "silu", arch->name, "SwiGLU")) ||
	    (rc = fg_json_refused(path, root, llama_refused_keys,
				  sizeof(llama_refused_keys) / sizeof(llama_refused_keys[0]),
				  is_moe(arch) ? moe_keys : NULL, arch->name)))
		return rc;
	if ((rc = fg_json_number(path, root, "partial_rotary_factor", &partial)))
		return rc;
	if (partial != 1) {
		FG_ERR("%s: partial_rotary_factor %g: only full rotary embeddings (1.0) are implemented",
		       path, partial);
		return -ENOTSUP;
	}
	if ((rc = llama_rope_config(path, root, &rope)))
		return rc;

	/* Optional tensors. */
	flag = 0;
	if ((rc = fg_json_bool(path, root, "tie_word_embeddings", &flag)))
		return rc;
	c->features |= flag ? FG_FEAT_TIED : 0;
	if (arch == &fg_arch_qwen2) {
		c->features |= FG_FEAT_QKV_BIAS;
	} else if (arch == &fg_arch_qwen2_moe) {
		flag = 1; /* Qwen2MoeConfig's qkv_bias */
		if ((rc = fg_json_bool(path, root, "qkv_bias", &flag)))
			return rc;
		c->features |= flag ? FG_FEAT_QKV_BIAS : 0;
	} else {
		/* (qwen3: no biases unless attention_bias, as Qwen3Config reads it) */
		flag = 0;
		if ((rc = fg_json_bool(path, root, "attention_bias", &flag)))
			return rc;
		c->features |= flag ? FG_FEAT_QKV_BIAS | FG_FEAT_O_BIAS : 0;
	}
	if (arch == &fg_arch_qwen3 || arch == &fg_arch_qwen3_moe)
		c->features |= FG_FEAT_QK_NORM;
	flag = 0;
	if ((rc = fg_json_bool(path, root, "mlp_bias", &flag)))
		return rc;
	c->features |= flag ? FG_FEAT_MLP_BIAS : 0;

	if ((rc = llama_window_config(path, root, arch, c)))
		return rc;
	if (is_moe(arch) && (rc = moe_config(path, root, arch, c)))
		return rc;

	/* Token ids: all optional; a missing one falls back to another. */
	c->pad_id = c->bos_id = c->eos_id = -1;
	if ((rc = fg_json_token(path, root, "bos_token_id", c->vocab, &c->bos_id)))
		return rc;
	if ((rc = fg_json_eos(path, root, c->vocab, &c->eos_id)) ||
	    (rc = fg_json_token(path, root, "pad_token_id", c->vocab, &c->pad_id)))
		return rc;
	if (c->pad_id < 0)
		c->pad_id = c->eos_id >= 0 ? c->eos_id : 0;
	if (c->bos_id < 0)
		c->bos_id = c->pad_id;
	if (c->eos_id < 0)
		c->eos_id = c->pad_id;
	fg_json_name_from_path(path, arch->name, c->name, sizeof(c->name));
	llama_rope_table(c, &rope);
	return 0;
}

/* Each model type's config.json entry: the shared reader, told its type. */
#define LLAMA_CONFIG_FN(fn, arch)                                                        \
	static int fn(const char *path, const void *json, struct fg_model_config *c)      \
	{                                                                                  \
		return llama_config_of(path, (json_t *)json, &(arch), c);                  \
	}
LLAMA_CONFIG_FN(llama_config, fg_arch_llama)
LLAMA_CONFIG_FN(mistral_config, fg_arch_mistral)
LLAMA_CONFIG_FN(qwen2_config, fg_arch_qwen2)
LLAMA_CONFIG_FN(qwen3_config, fg_arch_qwen3)
LLAMA_CONFIG_FN(mixtral_config, fg_arch_mixtral)
LLAMA_CONFIG_FN(qwen2_moe_config, fg_arch_qwen2_moe)
LLAMA_CONFIG_FN(qwen3_moe_config, fg_arch_qwen3_moe)
#undef LLAMA_CONFIG_FN

/* ---- the tensor table ------------------------------------------------------ */

/* The tables are indexed by these enums, in the order a checkpoint's tensors
 * are enumerated (and each block's placed); the bodies name tensors by them,
 * so a tensor inserted here moves no other one's index. */
enum llama_global {
	LL_TOK,				/* the input block */
	LL_NORM, LL_HEAD, LL_TIED,	/* the output block: the head is lm_head, or tied */
	LL_NGLOBAL
};
enum llama_layer {
	/* the attention block */
	LL_Q, LL_QB, LL_K, LL_KB, LL_V, LL_VB, LL_O, LL_OB, LL_N1, LL_QN, LL_KN,
	/* the MLP block */
	LL_GATE, LL_GATEB, LL_UP, LL_UPB, LL_DOWN, LL_DOWNB, LL_N2,
	LL_NLAYER
};
/* Mixtral's layer: the same attention block, then a mixture's MLP block:
 * the norm, the router, and each expert's w1 (gate), w3 (up), w2 (down)
 * (entries of every expert: FG_TD_EXPERTS). */
enum mixtral_layer { MX_N2 = LL_KN + 1, MX_ROUTER, MX_W1, MX_W3, MX_W2, MX_NLAYER };
#define L "model.layers.%d."
#define LIN FG_TD_LINEAR

static const struct fg_tensor_def llama_globals[] = {
	[LL_TOK]	= { "model.embed_tokens.weight", FG_BLOCK_INPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	[LL_NORM]	= { "model.norm.weight", FG_BLOCK_OUTPUT, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[LL_HEAD]	= { "lm_head.weight", FG_BLOCK_OUTPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, FG_FEAT_TIED },
	[LL_TIED]	= { "model.embed_tokens.weight", FG_BLOCK_OUTPUT, FG_DIM_VOCAB, FG_DIM_HIDDEN, LIN | FG_TD_TIED,
			    FG_INIT_MATRIX, FG_FEAT_TIED, 0 },
};
FG_TABLE_CHECK(llama_globals, LL_NGLOBAL);

#define LLAMA_ATTN_TENSORS \
	[LL_Q]		= { L "self_attn.q_proj.weight", FG_BLOCK_ATTN, FG_DIM_Q, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 }, \
	[LL_QB]		= { L "self_attn.q_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_Q, 0, FG_INIT_BIAS, FG_FEAT_QKV_BIAS, 0 }, \
	[LL_K]		= { L "self_attn.k_proj.weight", FG_BLOCK_ATTN, FG_DIM_KV, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 }, \
	[LL_KB]		= { L "self_attn.k_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_KV, 0, FG_INIT_BIAS, FG_FEAT_QKV_BIAS, 0 }, \
	[LL_V]		= { L "self_attn.v_proj.weight", FG_BLOCK_ATTN, FG_DIM_KV, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 }, \
	[LL_VB]		= { L "self_attn.v_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_KV, 0, FG_INIT_BIAS, FG_FEAT_QKV_BIAS, 0 }, \
	[LL_O]		= { L "self_attn.o_proj.weight", FG_BLOCK_ATTN, FG_DIM_HIDDEN, FG_DIM_Q, LIN, FG_INIT_MATRIX, 0, 0 }, \
	[LL_OB]		= { L "self_attn.o_proj.bias", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, FG_FEAT_O_BIAS, 0 }, \
	[LL_N1]		= { L "input_layernorm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 }, \
	[LL_QN]		= { L "self_attn.q_norm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HEAD, 0, FG_INIT_ONES, FG_FEAT_QK_NORM, 0 }, \
	[LL_KN]		= { L "self_attn.k_norm.weight", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HEAD, 0, FG_INIT_ONES, FG_FEAT_QK_NORM, 0 }

static const struct fg_tensor_def llama_layer[] = {
	LLAMA_ATTN_TENSORS,
	[LL_GATE]	= { L "mlp.gate_proj.weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[LL_GATEB]	= { L "mlp.gate_proj.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_FFN, 0, FG_INIT_BIAS, FG_FEAT_MLP_BIAS, 0 },
	[LL_UP]		= { L "mlp.up_proj.weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, 0, 0 },
	[LL_UPB]	= { L "mlp.up_proj.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_FFN, 0, FG_INIT_BIAS, FG_FEAT_MLP_BIAS, 0 },
	[LL_DOWN]	= { L "mlp.down_proj.weight", FG_BLOCK_MLP, FG_DIM_HIDDEN, FG_DIM_FFN, LIN, FG_INIT_MATRIX, 0, 0 },
	[LL_DOWNB]	= { L "mlp.down_proj.bias", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_BIAS, FG_FEAT_MLP_BIAS, 0 },
	[LL_N2]		= { L "post_attention_layernorm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
};
FG_TABLE_CHECK(llama_layer, LL_NLAYER);

/* An expert's gate, up and down matrices at entries W, W + 1, W + 2 (each
 * standing for every expert's), named L <dir> "<e>." <gate|up|down>
 * ".weight" as the family's checkpoints name them. */
#define EXPERT_TENSORS(W, dir, gate, up, down)                                                    \
	[W] = { L dir "%d." gate ".weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN,                  \
		LIN | FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 },                                        \
	[W + 1] = { L dir "%d." up ".weight", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN,                \
		    LIN | FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 },                                    \
	[W + 2] = { L dir "%d." down ".weight", FG_BLOCK_MLP, FG_DIM_HIDDEN, FG_DIM_FFN,              \
		    LIN | FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 }

/* Qwen's MoE layer (qwen2_moe, qwen3_moe): the norm, the router, the shared
 * expert and its gate (Qwen2-MoE), each expert's gate, up and down. */
enum qwen_moe_layer {
	QM_N2 = LL_KN + 1, QM_ROUTER, QM_SH_GATE, QM_SH_UP, QM_SH_DOWN, QM_SH_ROUTE, QM_GATE, QM_UP,
	QM_DOWN, QM_NLAYER
};
#define SH FG_FEAT_SHARED_EXPERT

static const struct fg_tensor_def qwen_moe_layer[] = {
	LLAMA_ATTN_TENSORS,
	[QM_N2]		= { L "post_attention_layernorm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[QM_ROUTER]	= { L "mlp.gate.weight", FG_BLOCK_MLP, FG_DIM_EXPERTS, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	[QM_SH_GATE]	= { L "mlp.shared_expert.gate_proj.weight", FG_BLOCK_MLP, FG_DIM_SHARED_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, SH, 0 },
	[QM_SH_UP]	= { L "mlp.shared_expert.up_proj.weight", FG_BLOCK_MLP, FG_DIM_SHARED_FFN, FG_DIM_HIDDEN, LIN, FG_INIT_MATRIX, SH, 0 },
	[QM_SH_DOWN]	= { L "mlp.shared_expert.down_proj.weight", FG_BLOCK_MLP, FG_DIM_HIDDEN, FG_DIM_SHARED_FFN, LIN, FG_INIT_MATRIX, SH, 0 },
	[QM_SH_ROUTE]	= { L "mlp.shared_expert_gate.weight", FG_BLOCK_MLP, FG_DIM_ROW, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, SH, 0 },
	EXPERT_TENSORS(QM_GATE, "mlp.experts.", "gate_proj", "up_proj", "down_proj"),
};
FG_TABLE_CHECK(qwen_moe_layer, QM_NLAYER);
#undef SH

static const struct fg_tensor_def mixtral_layer[] = {
	LLAMA_ATTN_TENSORS,
	[MX_N2]		= { L "post_attention_layernorm.weight", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	[MX_ROUTER]	= { L "block_sparse_moe.gate.weight", FG_BLOCK_MLP, FG_DIM_EXPERTS, FG_DIM_HIDDEN, 0, FG_INIT_MATRIX, 0, 0 },
	EXPERT_TENSORS(MX_W1, "block_sparse_moe.experts.", "w1", "w3", "w2"),
};
FG_TABLE_CHECK(mixtral_layer, MX_NLAYER);
#undef EXPERT_TENSORS
#undef L
#undef LIN

/* ---- the blocks ---------------------------------------------------------- */

enum llama_ws { WS_X, WS_Q, WS_K, WS_V, WS_A, WS_GATE, WS_UP, WS_LOGITS, LLAMA_NWS };

static const struct fg_workspace_def llama_workspace[] = {
	[WS_X]		= { "x", 1, FG_DIM_HIDDEN },
	[WS_Q]		= { "q", 1, FG_DIM_Q },
	[WS_K]		= { "k", 1, FG_DIM_KV },
	[WS_V]		= { "v", 1, FG_DIM_KV },
	[WS_A]		= { "a", 1, FG_DIM_Q },
	[WS_GATE]	= { "gate", 1, FG_DIM_FFN },
	[WS_UP]		= { "up", 1, FG_DIM_FFN },
	[WS_LOGITS]	= { "logits", 0, FG_DIM_VOCAB },
};
FG_TABLE_CHECK(llama_workspace, LLAMA_NWS);

/* A mixture's (Mixtral's and Qwen's): gate and up hold a row per token's
 * expert, as do the gathered inputs (xg, then the experts' outputs); the
 * router's logits; Qwen2-MoE's shared expert's gate and up (no bytes
 * without a shared expert). */
enum moe_ws { WS_ROUTER = LLAMA_NWS, WS_XG, WS_SH_GATE, WS_SH_UP, MOE_NWS };

static const struct fg_workspace_def moe_workspace[] = {
	[WS_X]		= { "x", FG_WS_PER_TOKEN, FG_DIM_HIDDEN },
	[WS_Q]		= { "q", FG_WS_PER_TOKEN, FG_DIM_Q },
	[WS_K]		= { "k", FG_WS_PER_TOKEN, FG_DIM_KV },
	[WS_V]		= { "v", FG_WS_PER_TOKEN, FG_DIM_KV },
	[WS_A]		= { "a", FG_WS_PER_TOKEN, FG_DIM_Q },
	[WS_GATE]	= { "gate", FG_WS_PER_ROUTE, FG_DIM_FFN },
	[WS_UP]		= { "up", FG_WS_PER_ROUTE, FG_DIM_FFN },
	[WS_LOGITS]	= { "logits", FG_WS_PER_SEQ, FG_DIM_VOCAB },
	[WS_ROUTER]	= { "router", FG_WS_PER_TOKEN, FG_DIM_EXPERTS },
	[WS_XG]		= { "xg", FG_WS_PER_ROUTE, FG_DIM_HIDDEN },
	[WS_SH_GATE]	= { "shared gate", FG_WS_PER_TOKEN, FG_DIM_SHARED_FFN },
	[WS_SH_UP]	= { "shared up", FG_WS_PER_TOKEN, FG_DIM_SHARED_FFN },
};
FG_TABLE_CHECK(moe_workspace, MOE_NWS);
_Static_assert(MOE_NWS <= FG_WS_MAX, "moe_workspace: more workspaces than a block has");
_Static_assert(LLAMA_NWS <= FG_WS_MAX, "llama_workspace: more workspaces than a block has");

static const struct fg_tensor none;

static int llama_norm(struct fg_block_ctx *x, const char *what, struct fg_tensor in, int g,
		      struct fg_tensor out)
{
	struct fg_layer_norm_args a = {
		.x = in, .gamma = fg_block_weight(x, g), .eps = x->cfg->norm_eps, .out = out,
		.kind = FG_NORM_RMS,
	};
	return fg_backend_norm(x->be, x->stream, x->layer, what, &a);
}

static int llama_input(struct fg_block_ctx *x)
{
	struct fg_embed_args e = {
		.ids = x->ids, .n = x->bs * x->n, .tok = fg_block_weight(x, LL_TOK), .out = x->h,
	};
	return fg_backend_embed(x->be, x->stream, -1, "embed_tokens", &e);
}

static int llama_rope(struct fg_block_ctx *x, const char *what, struct fg_tensor t, int64_t heads)
{
	const struct fg_model_config *c = x->cfg;
	struct fg_rope_args r = {
		.x = t, .positions = x->pos, .n = t.rows, .heads = heads, .head_dim = c->head_dim,
		.rot_dim = c->rot_dim, .inv_freq = c->rope_inv_freq,
		.attn_factor = c->rope_attn_factor,
	};
	return fg_backend_rope(x->be, x->stream, x->layer, what, &r);
}

/* [rows, heads * d] as [rows * heads, d]: a row per head (the workspaces
 * are dense). */
static struct fg_tensor per_head(struct fg_tensor t, int64_t d)
{
	t.rows = t.rows * (t.cols / d);
	t.cols = t.ld = d;
	return t;
}

static int llama_attention(struct fg_block_ctx *x)
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
	if ((rc = llama_norm(x, "input_layernorm", x->h, LL_N1, in)) ||
	    (rc = fg_block_linear(x, "q_proj", LL_Q, LL_QB, in, FG_ACT_NONE, none, none, q)) ||
	    (rc = fg_block_linear(x, "k_proj", LL_K, LL_KB, in, FG_ACT_NONE, none, none, k)) ||
	    (rc = fg_block_linear(x, "v_proj", LL_V, LL_VB, in, FG_ACT_NONE, none, none, v)))
		return rc;
	if ((c->features & FG_FEAT_QK_NORM) &&
	    ((rc = llama_norm(x, "q_norm", per_head(q, c->head_dim), LL_QN, per_head(q, c->head_dim))) ||
	     (rc = llama_norm(x, "k_norm", per_head(k, c->head_dim), LL_KN, per_head(k, c->head_dim)))))
		return rc;
	if ((rc = llama_rope(x, "q rope", q, c->heads)) ||
	    (rc = llama_rope(x, "k rope", k, c->kv_heads)) ||
	    (rc = x->attend(x, q, k, v, a)))
		return rc;
	return fg_block_linear(x, "o_proj", LL_O, LL_OB, a, FG_ACT_NONE, x->h, none, x->h);
}

static int llama_mlp(struct fg_block_ctx *x)
{
	int64_t rows = x->h.rows;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), g = fg_rows(x->ws[WS_GATE], 0, rows);
	struct fg_tensor up = fg_rows(x->ws[WS_UP], 0, rows);
	int rc;

	if ((rc = llama_norm(x, "post_attention_layernorm", x->h, LL_N2, in)) ||
	    (rc = fg_block_linear(x, "up_proj", LL_UP, LL_UPB, in, FG_ACT_NONE, none, none, up)) ||
	    (rc = fg_block_linear(x, "gate_proj", LL_GATE, LL_GATEB, in, FG_ACT_SILU, none, up, g)))
		return rc;
	return fg_block_linear(x, "down_proj", LL_DOWN, LL_DOWNB, g, FG_ACT_NONE, x->h, none, x->h);
}

/* Each token's experts: route, gather the rows by expert, the experts'
 * SwiGLU (one grouped call each for up, gate and down when every expert's
 * weights are whole on the compute tier, else a call per expert and piece),
 * then each row's weighted sum added to h.  With whole weights a backend
 * with the experts op (compute 1.13) does all of it in one call. */
/* Where a family's mixture keeps its tensors: table entries of the norm, the
 * router, the experts' gate (up and down follow it), and the shared
 * expert's gate, up, down and sigmoid gate (-1: none). */
struct moe_tabs {
	int n2, router, experts, shared;
};

static int moe_shared(struct fg_block_ctx *x, const struct moe_tabs *t, struct fg_tensor in);

/* The routed experts as the generic tier: route (the choices come to the
 * host), group the (row, expert) pairs, gather, the products, scatter-add.
 * w holds the experts' gate, up and down tensors (ne each), ev their views. */
static int moe_routed(struct fg_block_ctx *x, struct fg_tensor in, struct fg_tensor r,
		      const struct fg_tensor *w, const struct fg_wview *const ev[3],
		      int64_t stride, int whole)
{
	const struct fg_model_config *c = x->cfg;
	int64_t rows = x->h.rows, k = c->experts_per_tok, ne = c->experts, m = rows * k, n = 0;
	int32_t *ids = malloc((size_t)m * sizeof(*ids)), *row = malloc((size_t)m * sizeof(*row));
	float *wt = malloc((size_t)m * sizeof(*wt)), *rw = malloc((size_t)m * sizeof(*rw));
	/* per expert: its rows' offset (off[e] .. off[e + 1]) and a cursor */
	int64_t *off = calloc((size_t)(2 * ne + 1), sizeof(*off)), *at = off ? off + ne + 1 : NULL;
	int rc;

	if (!ids || !row || !wt || !rw || !off) {
		FG_ERR("layer %lld: out of memory routing %lld rows to %lld experts",
		       (long long)x->layer, (long long)rows, (long long)ne);
		rc = -ENOMEM;
		goto out;
	}
	struct fg_route_args ra = { .logits = r, .k = (int32_t)k, .renormalize = c->router_renorm,
				    .ids = ids, .weights = wt };
	if ((rc = fg_backend_route(x->be, x->stream, x->layer, "router top-k", &ra)))
		goto out;
	/* Group the (row, expert) pairs by expert, rows ascending within one
	 * (a row no expert took, its logits NaN, gets nothing). */
	for (int64_t i = 0; i < m; i++)
		if (ids[i] >= 0 && ids[i] < ne)
			off[ids[i] + 1]++;
	for (int64_t e = 0; e < ne; e++)
		off[e + 1] += off[e];
	n = off[ne];
	memcpy(at, off, (size_t)ne * sizeof(*at));
	for (int64_t i = 0; i < m; i++)
		if (ids[i] >= 0 && ids[i] < ne) {
			row[at[ids[i]]] = (int32_t)(i / k);
			rw[at[ids[i]]++] = wt[i];
		}
	if (!n)
		goto out;
	struct fg_tensor xg = fg_rows(x->ws[WS_XG], 0, n), up = fg_rows(x->ws[WS_UP], 0, n);
	struct fg_tensor g = fg_rows(x->ws[WS_GATE], 0, n);
	struct fg_gather_args ga = { .x = in, .index = row, .n = n, .out = xg };
	if ((rc = fg_backend_gather(x->be, x->stream, x->layer, "experts' rows", &ga)))
		goto out;
	if (whole) {
		struct fg_linear_grouped_args lu = { .x = xg, .w = w + ne, .offset = off,
						     .groups = (int32_t)ne, .act = FG_ACT_NONE, .out = up };
		struct fg_linear_grouped_args lg = lu, ld = lu;
		lg.w = w, lg.act = FG_ACT_SILU, lg.mul = up, lg.out = g;
		ld.x = g, ld.w = w + 2 * ne, ld.out = xg; /* (xg is read by now) */
		if ((rc = fg_backend_linear_grouped(x->be, x->stream, x->layer, "experts' w3", &lu)) ||
		    (rc = fg_backend_linear_grouped(x->be, x->stream, x->layer, "experts' w1", &lg)) ||
		    (rc = fg_backend_linear_grouped(x->be, x->stream, x->layer, "experts' w2", &ld)))
			goto out;
	} else {
		for (int64_t e = 0; e < ne && !rc; e++) {
			int64_t r0 = off[e], nr = off[e + 1] - off[e];
			if (!nr)
				continue;
			struct fg_tensor xe = fg_rows(xg, r0, nr), ue = fg_rows(up, r0, nr);
			struct fg_tensor ge = fg_rows(g, r0, nr);
			if ((rc = fg_block_linear_view(x, "expert w3", &ev[1][e * stride], xe, FG_ACT_NONE,
						       none, none, ue)) ||
			    (rc = fg_block_linear_view(x, "expert w1", &ev[0][e * stride], xe,
						       FG_ACT_SILU, none, ue, ge)))
				break;
			/* (xe is read by now: the expert's output takes its rows) */
			rc = fg_block_linear_view(x, "expert w2", &ev[2][e * stride], ge, FG_ACT_NONE,
						  none, none, xe);
		}
		if (rc)
			goto out;
	}
	struct fg_scatter_add_args sa = { .y = xg, .index = row, .weight = rw, .n = n, .out = x->h };
	rc = fg_backend_scatter_add(x->be, x->stream, x->layer, "experts' sum", &sa);
out:
	free(ids);
	free(row);
	free(wt);
	free(rw);
	free(off);
	return rc;
}

static int moe_mlp(struct fg_block_ctx *x, const struct moe_tabs *t)
{
	const struct fg_model_config *c = x->cfg;
	int64_t rows = x->h.rows, k = c->experts_per_tok, ne = c->experts;
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, rows), r = fg_rows(x->ws[WS_ROUTER], 0, rows);
	/* the experts' gate, up and down weights (ne each) */
	struct fg_tensor *w = malloc((size_t)(3 * ne) * sizeof(*w));
	const struct fg_wview *ev[3];
	int64_t stride = 0;
	int whole = 1, rc;

	if (!w) {
		FG_ERR("layer %lld: out of memory for %lld experts' weights", (long long)x->layer,
		       (long long)ne);
		return -ENOMEM;
	}
	/* (j: 0 gate, 1 up, 2 down; expert e's view at ev[j][e * stride]) */
	for (int j = 0; j < 3; j++) {
		ev[j] = fg_block_experts(x, t->experts + j, &stride);
		for (int64_t e = 0; e < ne; e++) {
			const struct fg_wview *v = &ev[j][e * stride];
			whole &= v->npieces == 1;
			w[j * ne + e] = v->piece[0].t;
		}
	}
	if ((rc = llama_norm(x, "post_attention_layernorm", x->h, t->n2, in)) ||
	    (rc = fg_block_linear(x, "router", t->router, -1, in, FG_ACT_NONE, none, none, r)))
		goto out;
	/* Whole experts where the backend computes: it may route and group
	 * the rows itself, with no round trip to the host. */
	rc = -ENOTSUP;
	if (whole) {
		struct fg_experts_args ea = {
			.x = in, .logits = r, .k = (int32_t)k, .renormalize = c->router_renorm,
			.experts = (int32_t)ne, .w_gate = w, .w_up = w + ne, .w_down = w + 2 * ne,
			.xg = fg_rows(x->ws[WS_XG], 0, rows * k),
			.gate = fg_rows(x->ws[WS_GATE], 0, rows * k),
			.up = fg_rows(x->ws[WS_UP], 0, rows * k), .out = x->h,
		};
		rc = fg_backend_experts(x->be, x->stream, x->layer, "experts", &ea);
	}
	if (rc == -ENOTSUP)
		rc = moe_routed(x, in, r, w, ev, stride, whole);
	if (!rc && t->shared >= 0 && (c->features & FG_FEAT_SHARED_EXPERT))
		rc = moe_shared(x, t, in);
out:
	free(w);
	return rc;
}

/* Qwen2-MoE's shared expert, after the routed sum: h += sigmoid(x · g) ⊙
 * down(silu(gate x) ⊙ up x), the sigmoid taken on the host from the gate's
 * logits (one per token) and applied as the scatter-add's weights. */
static int moe_shared(struct fg_block_ctx *x, const struct moe_tabs *t, struct fg_tensor in)
{
	int64_t rows = x->h.rows;
	struct fg_tensor g = fg_rows(x->ws[WS_SH_GATE], 0, rows), u = fg_rows(x->ws[WS_SH_UP], 0, rows);
	struct fg_tensor y = fg_rows(x->ws[WS_XG], 0, rows), r = fg_rows(x->ws[WS_ROUTER], 0, rows);
	size_t esz = fg_dtype_size(r.dtype), bytes = (size_t)(rows * r.ld) * esz;
	unsigned char *host = malloc(bytes ? bytes : 1);
	int32_t *idx = malloc((size_t)(rows ? rows : 1) * sizeof(*idx));
	float *wt = malloc((size_t)(rows ? rows : 1) * sizeof(*wt));
	int rc;

	if (!host || !idx || !wt) {
		FG_ERR("layer %lld: out of memory for the shared expert's gate", (long long)x->layer);
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = fg_block_linear(x, "shared_expert.up_proj", t->shared + 1, -1, in, FG_ACT_NONE,
				  none, none, u)) ||
	    (rc = fg_block_linear(x, "shared_expert.gate_proj", t->shared, -1, in, FG_ACT_SILU,
				  none, u, g)) ||
	    (rc = fg_block_linear(x, "shared_expert.down_proj", t->shared + 2, -1, g, FG_ACT_NONE,
				  none, none, y)) ||
	    (rc = fg_block_linear(x, "shared_expert_gate", t->shared + 3, -1, in, FG_ACT_NONE, none,
				  none, fg_cols(r, 0, 1))) ||
	    (rc = fg_backend_copy(x->be, x->stream, host, r.data, bytes)) ||
	    (rc = fg_backend_stream_sync(x->be, x->stream)))
		goto out;
	for (int64_t i = 0; i < rows; i++) {
		const unsigned char *at = host + (size_t)(i * r.ld) * esz;
		float v;
		if (r.dtype == FG_DTYPE_F16) {
			uint16_t hv;
			memcpy(&hv, at, sizeof(hv));
			v = fg_half_to_float(hv);
		} else {
			memcpy(&v, at, sizeof(v));
		}
		idx[i] = (int32_t)i;
		wt[i] = 1.0f / (1.0f + expf(-v));
	}
	struct fg_scatter_add_args sa = { .y = y, .index = idx, .weight = wt, .n = rows, .out = x->h };
	if (rows)
		rc = fg_backend_scatter_add(x->be, x->stream, x->layer, "shared expert", &sa);
out:
	free(host);
	free(idx);
	free(wt);
	return rc;
}

static int mixtral_mlp(struct fg_block_ctx *x)
{
	static const struct moe_tabs t = { MX_N2, MX_ROUTER, MX_W1, -1 };
	return moe_mlp(x, &t);
}

static int qwen_moe_mlp(struct fg_block_ctx *x)
{
	static const struct moe_tabs t = { QM_N2, QM_ROUTER, QM_GATE, QM_SH_GATE };
	return moe_mlp(x, &t);
}

/* The final norm of the rows asked for, then their logits. */
static int llama_output(struct fg_block_ctx *x)
{
	struct fg_tensor in = fg_rows(x->ws[WS_X], 0, x->out_rows.rows);
	int head = fg_block_tensor(x, LL_HEAD)->npieces ? LL_HEAD : LL_TIED;
	int rc;

	if ((rc = llama_norm(x, "model.norm", x->out_rows, LL_NORM, in)))
		return rc;
	return fg_block_linear(x, "lm_head", head, -1, in, FG_ACT_NONE, none, none,
			       x->logits);
}

/* The ops the bodies call, by key like the tensors; grouped-query attention
 * only where there are fewer key/value heads than heads. */
enum llama_op { LL_OP_EMBED, LL_OP_NORM, LL_OP_LINEAR, LL_OP_LINEAR_SILU, LL_OP_LINEAR_MUL,
		LL_OP_ROPE, LL_OP_PREFILL, LL_OP_DECODE, LL_OP_APPEND, LL_OP_GQA_ACT,
		LL_OP_GQA_CACHE, LL_OP_ROUTE, LL_OP_GATHER, LL_OP_SCATTER_ADD, LL_OP_GROUPED,
		LL_NOPS };

static const struct fg_op_def llama_op_defs[] = {
	[LL_OP_EMBED]		= { FG_OP_EMBED_TOKENS, FG_OPND_F16, 0 },
	[LL_OP_NORM]		= { FG_OP_RMS_NORM, FG_OPND_ACT, 0 },
	[LL_OP_LINEAR]		= { FG_OP_LINEAR, FG_OPND_WEIGHT, 0 },
	[LL_OP_LINEAR_SILU]	= { FG_OP_LINEAR_SILU, FG_OPND_WEIGHT, 0 },
	[LL_OP_LINEAR_MUL]	= { FG_OP_LINEAR_MUL, FG_OPND_WEIGHT, 0 },
	[LL_OP_ROPE]		= { FG_OP_ROPE, FG_OPND_ACT, 0 },
	[LL_OP_PREFILL]		= { FG_OP_ATTENTION_PREFILL, FG_OPND_ACT, 0 },
	[LL_OP_DECODE]		= { FG_OP_ATTENTION_DECODE, FG_OPND_CACHE, 0 },
	[LL_OP_APPEND]		= { FG_OP_KV_APPEND, FG_OPND_CACHE, 0 },
	[LL_OP_GQA_ACT]		= { FG_OP_ATTENTION_GQA, FG_OPND_ACT, FG_OPW_GQA },
	[LL_OP_GQA_CACHE]	= { FG_OP_ATTENTION_GQA, FG_OPND_CACHE, FG_OPW_GQA },
	[LL_OP_ROUTE]		= { FG_OP_ROUTE, FG_OPND_ACT, FG_OPW_MOE },
	[LL_OP_GATHER]		= { FG_OP_GATHER, FG_OPND_ACT, FG_OPW_MOE },
	[LL_OP_SCATTER_ADD]	= { FG_OP_SCATTER_ADD, FG_OPND_ACT, FG_OPW_MOE },
	[LL_OP_GROUPED]		= { FG_OP_LINEAR_GROUPED, FG_OPND_WEIGHT, FG_OPW_MOE },
};
FG_TABLE_CHECK(llama_op_defs, LL_NOPS);
_Static_assert(LL_NOPS <= FG_ARCH_OPS_MAX, "llama_op_defs: more ops than the backend check takes");

static int llama_ops(const struct fg_model_config *c, enum fg_dtype wdt, enum fg_dtype act,
		     enum fg_dtype cdt, enum fg_op ops[FG_ARCH_OPS_MAX],
		     enum fg_dtype dts[FG_ARCH_OPS_MAX])
{
	return fg_arch_op_list(c, llama_op_defs, LL_NOPS, wdt, act, cdt, ops, dts);
}

#define LLAMA_PRESETS "llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b, llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2-7b, qwen2-72b, qwen3-8b, qwen3-32b, mixtral-8x7b, mixtral-8x22b, qwen1.5-moe-a2.7b, qwen2-57b-a14b, qwen3-30b-a3b, qwen3-235b-a22b"

/* The dense types share the table and the blocks; Mixtral has its MLP's. */
#define LLAMA_FAMILY(type, bos, cfg_fn, preset_fn, preset_names, layer_tab, nlayer_tab, ws, nws, \
		     mlp)                                                                     \
	{                                                                                     \
		.name		= type,                                                       \
		.text_bos	= bos,                                                        \
		.presets	= preset_names,                                               \
		.preset		= preset_fn,                                                  \
		.config		= cfg_fn,                                                     \
		.globals	= llama_globals,                                              \
		.nglobals	= LL_NGLOBAL,                                                 \
		.layer		= layer_tab,                                                  \
		.nlayer		= nlayer_tab,                                                 \
		.workspace	= ws,                                                         \
		.nworkspace	= nws,                                                        \
		.body		= { llama_input, llama_attention, mlp, llama_output },        \
		.ops		= llama_ops,                                                  \
	}
#define LLAMA_DENSE(type, bos, cfg_fn, preset_fn, preset_names)                               \
	LLAMA_FAMILY(type, bos, cfg_fn, preset_fn, preset_names, llama_layer, LL_NLAYER,      \
		     llama_workspace, LLAMA_NWS, llama_mlp)

/* Presets of every type are found through "llama" (their own arch is set). */
const struct fg_arch fg_arch_llama = LLAMA_DENSE("llama", 1, llama_config, llama_preset, LLAMA_PRESETS);
const struct fg_arch fg_arch_mistral = LLAMA_DENSE("mistral", 1, mistral_config, NULL, NULL);
const struct fg_arch fg_arch_qwen2 = LLAMA_DENSE("qwen2", 0, qwen2_config, NULL, NULL);
const struct fg_arch fg_arch_qwen3 = LLAMA_DENSE("qwen3", 0, qwen3_config, NULL, NULL);
const struct fg_arch fg_arch_mixtral = LLAMA_FAMILY("mixtral", 1, mixtral_config, NULL, NULL,
						    mixtral_layer, MX_NLAYER, moe_workspace,
						    MOE_NWS, mixtral_mlp);
const struct fg_arch fg_arch_qwen2_moe = LLAMA_FAMILY("qwen2_moe", 0, qwen2_moe_config, NULL, NULL,
						      qwen_moe_layer, QM_NLAYER, moe_workspace,
						      MOE_NWS, qwen_moe_mlp);
const struct fg_arch fg_arch_qwen3_moe = LLAMA_FAMILY("qwen3_moe", 0, qwen3_moe_config, NULL, NULL,
						      qwen_moe_layer, QM_NLAYER, moe_workspace,
						      MOE_NWS, qwen_moe_mlp);
