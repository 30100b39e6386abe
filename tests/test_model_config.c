/* tests/test_model_config.c - OPT presets and config.json: valid, refused and malformed. */
#define _GNU_SOURCE /* nftw */
#include <check.h>
#include <ftw.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/arch/arch.h"
#include "core/model/weights.h"
#include "core/plan/plan.h"
#include "core/util/error.h"
#include "tests/test_tmpdir.h"

/* Each test's own folder under TMPDIR, removed afterwards. */
static void tmp_setup(void)
{
	tmp_make("fg_cfg");
}

/* <tmp>/<folder>/config.json holding `text`. */
static const char *write_config(const char *folder, const char *text)
{
	static char path[512];
	char dir[400];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/%s", tmp_root, folder);
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* A Hugging Face OPT config.json without the keys that have defaults; %s
 * adds keys (HF_OPTIONAL for the full file as save_pretrained writes it). */
#define CFG_FMT                                                                         \
	"{\n  \"bos_token_id\": 2, \"eos_token_id\": 2, \"pad_token_id\": 1,\n"              \
	"  \"ffn_dim\": 256,\n  \"hidden_size\": 64,\n"                                      \
	"  \"max_position_embeddings\": 2048,\n  \"model_type\": \"opt\",\n"               \
	"  \"num_attention_heads\": 4,\n  \"num_hidden_layers\": 2,\n"                       \
	"  \"vocab_size\": 50272%s\n}\n"

#define HF_OPTIONAL                                                                          \
	",\n  \"_remove_final_layer_norm\": false,\n  \"activation_function\": \"relu\",\n" \
	"  \"do_layer_norm_before\": true,\n  \"enable_bias\": true,\n"                      \
	"  \"layer_norm_elementwise_affine\": true,\n  \"tie_word_embeddings\": true,\n"     \
	"  \"word_embed_proj_dim\": 64,\n  \"dropout\": 0.1,\n  \"architectures\": [\"OPTForCausalLM\"]"

START_TEST(test_presets)
{
	struct fg_model_config c;

	ck_assert_int_eq(fg_model_preset("opt-1.3b", &c), 0);
	ck_assert_str_eq(c.name, "opt-1.3b");
	ck_assert_int_eq(c.hidden, 2048);
	ck_assert_int_eq(c.layers, 24);
	ck_assert_int_eq(c.heads, 32);
	ck_assert_int_eq(c.ffn, 8192);
	ck_assert_int_eq(c.vocab, 50272);
	ck_assert_int_eq(c.max_pos, 2048);
	ck_assert_int_eq(c.pad_id, 1);
	ck_assert_int_eq(c.bos_id, 2);
	ck_assert_int_eq(c.eos_id, 2);

	ck_assert_int_eq(fg_model_preset("facebook/opt-6.7b", &c), 0);
	ck_assert_str_eq(c.name, "opt-6.7b");
	ck_assert_int_eq(c.hidden, 4096);
	ck_assert_int_eq(c.layers, 32);
	ck_assert_int_eq(c.ffn, 16384);

	ck_assert_int_eq(fg_model_preset("opt-125m", &c), 0);
	ck_assert_int_eq(c.hidden, 768);
	ck_assert_int_eq(c.heads, 12);
	ck_assert_int_eq(c.layers, 12);
	ck_assert_int_eq(c.ffn, 3072);

	ck_assert_int_eq(fg_model_preset("opt-30b", &c), 0);
	ck_assert_int_eq(c.hidden, 7168);
	ck_assert_int_eq(c.heads, 56);
	ck_assert_int_eq(c.layers, 48);

	ck_assert_int_eq(fg_model_preset("opt-66b", &c), 0);
	ck_assert_int_eq(c.hidden, 9216);
	ck_assert_int_eq(c.heads, 72);
	ck_assert_int_eq(c.layers, 64);
	ck_assert_int_eq(c.ffn, 36864);

	ck_assert_int_eq(fg_model_preset("facebook/opt-175b", &c), 0);
	ck_assert_int_eq(c.hidden, 12288);
	ck_assert_int_eq(c.heads, 96);
	ck_assert_int_eq(c.layers, 96);
	ck_assert_int_eq(c.ffn, 49152);

	/* Hub ids are often typed with a capital B. */
	ck_assert_int_eq(fg_model_preset("facebook/OPT-2.7B", &c), 0);
	ck_assert_str_eq(c.name, "opt-2.7b");
	ck_assert_int_eq(c.hidden, 2560);
	ck_assert_int_eq(c.layers, 32);
	ck_assert_int_eq(c.ffn, 10240);

	ck_assert_int_eq(fg_model_preset("opt-13b", &c), 0);
	ck_assert_int_eq(c.hidden, 5120);
	ck_assert_int_eq(c.heads, 40);
	ck_assert_int_eq(c.layers, 40);
}
END_TEST

START_TEST(test_iml_variants)
{
	static const char *pairs[][2] = {
		{ "opt-iml-1.3b", "opt-1.3b" },
		{ "opt-iml-max-1.3b", "opt-1.3b" },
		{ "opt-iml-30b", "opt-30b" },
		{ "facebook/opt-iml-max-30b", "opt-30b" },
	};
	size_t i;

	for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		struct fg_model_config a, b;

		ck_assert_int_eq(fg_model_preset(pairs[i][0], &a), 0);
		ck_assert_int_eq(fg_model_preset(pairs[i][1], &b), 0);
		ck_assert_int_eq(a.hidden, b.hidden);
		ck_assert_int_eq(a.heads, b.heads);
		ck_assert_int_eq(a.layers, b.layers);
		ck_assert_int_eq(a.ffn, b.ffn);
		ck_assert_int_eq(a.vocab, b.vocab);
		ck_assert_str_ne(a.name, b.name);
	}
}
END_TEST

START_TEST(test_preset_unknown)
{
	struct fg_model_config c;
	const char *e;

	ck_assert_int_eq(fg_model_preset("opt-7b", &c), -ENOENT);
	e = fg_last_error();
	ck_assert_ptr_nonnull(strstr(e, "opt-7b"));
	ck_assert_ptr_nonnull(strstr(e, "opt-125m"));
	ck_assert_ptr_nonnull(strstr(e, "opt-1.3b"));
	ck_assert_ptr_nonnull(strstr(e, "opt-175b"));
	ck_assert_ptr_nonnull(strstr(e, "opt-iml-max-30b"));
	ck_assert_int_eq(fg_model_preset("", &c), -ENOENT);
	ck_assert_int_eq(fg_model_preset("facebook/", &c), -ENOENT);
	ck_assert_int_eq(fg_model_preset("opt-1.3b ", &c), -ENOENT);
	ck_assert_int_ne(fg_model_preset(NULL, &c), 0);
}
END_TEST

START_TEST(test_preset_350m_refused)
{
	struct fg_model_config c;
	const char *e;

	ck_assert_int_eq(fg_model_preset("facebook/opt-350m", &c), -ENOTSUP);
	e = fg_last_error();
	ck_assert_ptr_nonnull(strstr(e, "post-LayerNorm"));
	ck_assert_ptr_nonnull(strstr(e, "opt-125m")); /* suggests another size */
}
END_TEST

/* The tensors of a config add up to fg_opt_param_count. */
START_TEST(test_param_count)
{
	struct fg_model_config c;
	char name[128];
	uint64_t sum = 0;
	int64_t i, r, cols;
	int rank;

	ck_assert_int_eq(fg_model_preset("opt-125m", &c), 0);
	/* Hugging Face: OPTForCausalLM.from_pretrained("facebook/opt-125m").num_parameters(). */
	ck_assert_uint_eq(fg_model_param_count(&c), 125239296u);
	ck_assert_int_eq(fg_model_preset("opt-6.7b", &c), 0);
	for (i = 0; i < fg_arch_tensor_count(&c); i++) {
		ck_assert_int_eq(fg_arch_tensor_info(&c, i, name, sizeof(name), &rank, &r, &cols),
				 0);
		sum += (uint64_t)r * (uint64_t)cols;
	}
	ck_assert_uint_eq(sum, fg_model_param_count(&c));
	ck_assert_int_eq(fg_arch_tensor_info(&c, i, name, sizeof(name), &rank, &r, &cols),
			 -EINVAL);
}
END_TEST

START_TEST(test_config_written)
{
	struct fg_model_config c;
	char text[2048];
	const char *path;

	snprintf(text, sizeof(text), CFG_FMT, HF_OPTIONAL);
	path = write_config("opt-written-64", text);
	memset(&c, 0x5a, sizeof(c));
	ck_assert_int_eq(fg_model_config_load(path, &c), 0);
	ck_assert_str_eq(c.name, "opt-written-64");
	ck_assert_int_eq(c.vocab, 50272);
	ck_assert_int_eq(c.hidden, 64);
	ck_assert_int_eq(c.heads, 4);
	ck_assert_int_eq(c.layers, 2);
	ck_assert_int_eq(c.ffn, 256);
	ck_assert_int_eq(c.max_pos, 2048);
	ck_assert_int_eq(c.pad_id, 1);
	ck_assert_int_eq(c.bos_id, 2);
	ck_assert_int_eq(c.eos_id, 2);

	/* Keys with Hugging Face defaults may be absent. */
	path = write_config("opt-minimal",
			    "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
			    " \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
			    " \"ffn_dim\": 32, \"max_position_embeddings\": 8,"
			    " \"eos_token_id\": 7}");
	ck_assert_int_eq(fg_model_config_load(path, &c), 0);
	ck_assert_str_eq(c.name, "opt-minimal");
	ck_assert_int_eq(c.vocab, 100);
	ck_assert_int_eq(c.max_pos, 8);
	ck_assert_int_eq(c.pad_id, 1);
	ck_assert_int_eq(c.eos_id, 7);
}
END_TEST

/* A Llama 3.1 config.json: grouped-query heads, untied head, llama3 rope
 * scaling (inv_freq checked against the formula of Meta's release, in
 * double: low frequencies divided by factor, high ones kept, the band between
 * blended). */
/* A minimal Mixtral config.json with `extra` keys appended. */
#define MIXTRAL_CFG(extra)                                                                \
	"{\"model_type\": \"mixtral\", \"vocab_size\": 100, \"hidden_size\": 16,"              \
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 1,"   \
	" \"intermediate_size\": 32, \"max_position_embeddings\": 64" extra "}"

/* A minimal Qwen MoE config.json of model_type `type` with `extra` keys. */
#define QWEN_MOE_CFG(type, extra)                                                         \
	"{\"model_type\": \"" type "\", \"vocab_size\": 100, \"hidden_size\": 16,"          \
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 1,"   \
	" \"intermediate_size\": 32, \"moe_intermediate_size\": 8,"                           \
	" \"max_position_embeddings\": 64" extra "}"

START_TEST(test_llama_config)
{
	struct fg_model_config c;
	const char *path = write_config(
		"llama-31",
		"{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 256,"
		" \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"num_hidden_layers\": 2,"
		" \"intermediate_size\": 512, \"max_position_embeddings\": 131072,"
		" \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"hidden_act\": \"silu\","
		" \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
		" \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
		" \"rope_type\": \"llama3\"}, \"tie_word_embeddings\": false,"
		" \"bos_token_id\": 1, \"eos_token_id\": [2, 3]}");
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_str_eq(c.arch->name, "llama");
	ck_assert_int_eq(c.kv_heads, 1);
	ck_assert_int_eq(c.head_dim, 128);
	ck_assert_int_eq(c.rot_dim, 128);
	ck_assert_int_eq(c.eos_id, 2);
	ck_assert(!(c.features & FG_FEAT_TIED));
	for (int i = 0; i < 64; i++) {
		double f = pow(500000.0, -2.0 * i / 128), w = 2 * M_PI / f, want = f;
		if (w > 8192)
			want = f / 8;
		else if (w >= 2048) {
			double s = (8192 / w - 1) / 3;
			want = (1 - s) * f / 8 + s * f;
		}
		ck_assert_msg(fabs(c.rope_inv_freq[i] - want) <= 1e-6 * want, "pair %d: %g, want %g", i,
			      c.rope_inv_freq[i], want);
	}
	/* 1 (tok) + 1 (norm) + 1 (lm_head) + 2 layers x (4 projections + 3 MLP + 2 norms) */
	ck_assert_int_eq(fg_arch_tensor_count(&c), 3 + 2 * 9);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "lm_head.weight"), 2);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.self_attn.q_proj.bias"), 0);
	/* qwen2: q, k, v biases */
	path = write_config(
		"qwen2-small",
		"{\"model_type\": \"qwen2\", \"vocab_size\": 1000, \"hidden_size\": 128,"
		" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 1,"
		" \"intermediate_size\": 256, \"max_position_embeddings\": 4096,"
		" \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true,"
		" \"use_sliding_window\": false, \"sliding_window\": 4096}");
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_int_ge(fg_arch_tensor_index(&c, "model.layers.0.self_attn.k_proj.bias"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.self_attn.o_proj.bias"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "lm_head.weight"), 0);
	ck_assert_int_eq(c.sliding_window, 0);
	/* presets */
	ck_assert_int_eq(fg_model_preset("llama-2-70b", &c), 0);
	ck_assert_int_eq(c.kv_heads, 8);
	ck_assert_int_eq(fg_model_preset("mistral-7b", &c), 0);
	ck_assert_str_eq(c.arch->name, "mistral");
	ck_assert_int_eq(c.sliding_window, 4096);
	/* mixtral: MixtralConfig's defaults (8 experts, 2 per token, no window) */
	path = write_config("mixtral-small", MIXTRAL_CFG(""));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_int_eq(c.experts, 8);
	ck_assert_int_eq(c.experts_per_tok, 2);
	ck_assert(c.features & FG_FEAT_MOE);
	ck_assert_int_eq(c.sliding_window, 0);
	/* 3 globals + (4 projections + 2 norms + router + 8 experts x 3) */
	ck_assert_int_eq(fg_arch_tensor_count(&c), 3 + 31);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "model.layers.0.block_sparse_moe.experts.7.w2.weight"),
			 3 + 30);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.up_proj.weight"), 0);
	path = write_config("mixtral-4", MIXTRAL_CFG(", \"num_local_experts\": 4, \"sliding_window\": null"));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_arch_tensor_count(&c), 3 + 19);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.block_sparse_moe.experts.4.w1.weight"), 0);
	/* qwen3: per-head q and k norms, no biases unless attention_bias */
	path = write_config(
		"qwen3-small",
		"{\"model_type\": \"qwen3\", \"vocab_size\": 1000, \"hidden_size\": 128,"
		" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64,"
		" \"num_hidden_layers\": 1, \"intermediate_size\": 256,"
		" \"max_position_embeddings\": 4096, \"rope_theta\": 1000000.0,"
		" \"tie_word_embeddings\": true, \"use_sliding_window\": false,"
		" \"sliding_window\": null, \"max_window_layers\": 28}");
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert(c.features & FG_FEAT_QK_NORM);
	ck_assert_int_eq(c.head_dim, 64);
	int64_t qn = fg_arch_tensor_index(&c, "model.layers.0.self_attn.q_norm.weight");
	ck_assert_int_ge(qn, 0);
	ck_assert_int_ge(fg_arch_tensor_index(&c, "model.layers.0.self_attn.k_norm.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.self_attn.q_proj.bias"), 0);
	char tn[128];
	int rank;
	int64_t rows, cols;
	ck_assert_int_eq(fg_arch_tensor_info(&c, qn, tn, sizeof(tn), &rank, &rows, &cols), 0);
	ck_assert(rank == 1 && cols == 64);
	/* the Qwen3 presets: parameters as transformers counts them (Qwen3-32B's
	 * heads are 128 wide, not hidden / heads) */
	ck_assert_int_eq(fg_model_preset("qwen3-8b", &c), 0);
	ck_assert_str_eq(c.arch->name, "qwen3");
	ck_assert_uint_eq(fg_model_param_count(&c), 8190735360ull);
	ck_assert_int_eq(fg_model_preset("qwen3-32b", &c), 0);
	ck_assert_int_eq(c.head_dim, 128);
	ck_assert_uint_eq(fg_model_param_count(&c), 32762123264ull);
	/* Qwen's MoE: the experts' width is moe_intermediate_size; Qwen2-MoE's
	 * shared expert and its [1, hidden] gate, weights over all experts */
	path = write_config("qwen2-moe", QWEN_MOE_CFG("qwen2_moe", ", \"num_experts\": 4,"
				  " \"shared_expert_intermediate_size\": 24"));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert(c.experts == 4 && c.experts_per_tok == 4 && c.ffn == 8 && c.shared_ffn == 24);
	ck_assert(!c.router_renorm && (c.features & FG_FEAT_SHARED_EXPERT) &&
		  (c.features & FG_FEAT_QKV_BIAS));
	qn = fg_arch_tensor_index(&c, "model.layers.0.mlp.shared_expert_gate.weight");
	ck_assert_int_ge(qn, 0);
	ck_assert_int_eq(fg_arch_tensor_info(&c, qn, tn, sizeof(tn), &rank, &rows, &cols), 0);
	ck_assert(rank == 2 && rows == 1 && cols == 16);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.4.up_proj.weight"), 0);
	path = write_config("qwen3-moe", QWEN_MOE_CFG("qwen3_moe", ", \"num_experts\": 8,"
				  " \"num_experts_per_tok\": 2, \"norm_topk_prob\": true"));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert(c.router_renorm && !(c.features & FG_FEAT_SHARED_EXPERT) &&
		  (c.features & FG_FEAT_QK_NORM));
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.shared_expert.up_proj.weight"), 0);
	/* as many experts as config.json says: 64, top-8, a shared expert */
	path = write_config("qwen2-moe-64", QWEN_MOE_CFG("qwen2_moe", ", \"num_experts\": 64,"
				  " \"num_experts_per_tok\": 8, \"shared_expert_intermediate_size\": 24"));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert(c.experts == 64 && c.experts_per_tok == 8);
	/* 3 globals + 4 projections, 3 biases, 2 norms, the router, the shared
	 * expert's 4, 64 experts x 3, the last expert's down_proj last */
	ck_assert_int_eq(fg_arch_tensor_count(&c), 3 + 14 + 64 * 3);
	qn = fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.63.down_proj.weight");
	ck_assert_int_eq(qn, 3 + 14 + 64 * 3 - 1);
	ck_assert_int_eq(fg_arch_tensor_info(&c, qn, tn, sizeof(tn), &rank, &rows, &cols), 0);
	ck_assert_str_eq(tn, "model.layers.0.mlp.experts.63.down_proj.weight");
	ck_assert(rows == 16 && cols == 8);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.1.gate_proj.weight"),
			 3 + 14 + 3);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.64.down_proj.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.07.down_proj.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts..down_proj.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.0.mlp.experts.-1.down_proj.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "model.layers.1.mlp.experts.0.down_proj.weight"), 0);
	for (int64_t i = 0; i < fg_arch_tensor_count(&c); i++) {
		ck_assert_int_eq(fg_arch_tensor_info(&c, i, tn, sizeof(tn), &rank, &rows, &cols), 0);
		ck_assert_int_eq(fg_arch_tensor_index(&c, tn), i);
	}
	/* The presets' parameters, as published (the checkpoints' safetensors
	 * totals on the Hugging Face Hub): Mixtral-8x7B's; Qwen1.5-MoE-A2.7B's
	 * 60 experts of 1408, top-4, a shared expert of 5632; Qwen2-57B-A14B's
	 * 64 of 2560, top-8, shared 20480; Qwen3's 128 of 768 (30B-A3B) and of
	 * 1536 (235B-A22B), top-8. */
	static const struct {
		const char *name, *type;
		uint64_t params;
		int64_t experts, top;
	} moe[] = {
		{ "mixtral-8x7b", "mixtral", 46702792704ull, 8, 2 },
		{ "qwen1.5-moe-a2.7b", "qwen2_moe", 14315784192ull, 60, 4 },
		{ "qwen2-57b-a14b", "qwen2_moe", 57408658944ull, 64, 8 },
		{ "qwen3-30b-a3b", "qwen3_moe", 30532122624ull, 128, 8 },
		{ "qwen3-235b-a22b", "qwen3_moe", 235093634560ull, 128, 8 },
	};
	for (size_t i = 0; i < sizeof(moe) / sizeof(moe[0]); i++) {
		ck_assert_msg(fg_model_preset(moe[i].name, &c) == 0, "%s: %s", moe[i].name,
			      fg_last_error());
		ck_assert_str_eq(c.arch->name, moe[i].type);
		ck_assert(c.experts == moe[i].experts && c.experts_per_tok == moe[i].top);
		ck_assert_msg(fg_model_param_count(&c) == moe[i].params, "%s: %llu parameters",
			      moe[i].name, (unsigned long long)fg_model_param_count(&c));
		/* Qwen2-MoE weighs by the softmax over all experts */
		ck_assert_int_eq(c.router_renorm, strcmp(moe[i].type, "qwen2_moe") != 0);
	}
}
END_TEST

/* A minimal Gemma 2 config.json of two layers with `extra` keys appended
 * (Gemma2Config's defaults for the rest). */
#define GEMMA2_CFG(extra)                                                                 \
	"{\"model_type\": \"gemma2\", \"vocab_size\": 100, \"hidden_size\": 16,"               \
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,"             \
	" \"num_hidden_layers\": 2, \"intermediate_size\": 32, \"max_position_embeddings\": 256" \
	extra "}"

/* Gemma 2: Gemma2Config's defaults, layer_types, null caps, the presets'
 * parameters as transformers counts them (Gemma2ForCausalLM on the meta
 * device, transformers 5.25: 2614341888, 9241705984, 27227128320). */
START_TEST(test_gemma2_config)
{
	struct fg_model_config c;
	const char *path;

	path = write_config("gemma2-small", GEMMA2_CFG(""));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_str_eq(c.arch->name, "gemma2");
	ck_assert_int_eq(c.head_dim, 8);
	ck_assert(c.features & FG_FEAT_TIED);
	ck_assert(c.attn_softcap == 50.0f && c.final_softcap == 30.0f && c.norm_shift == 1.0f);
	ck_assert(c.attn_scale == 0.0625f); /* 256^-0.5, not head_dim's */
	ck_assert(c.embed_scale == 4.0f);
	ck_assert(fg_attn_scale(&c) == 0.0625f);
	/* even layers slide by 4096 */
	ck_assert(fg_layer_window(&c, 0) == 4096 && fg_layer_window(&c, 1) == 0);
	ck_assert(c.pad_id == 0 && c.eos_id == 1 && c.bos_id == 2);
	/* 1 (tok) + 1 (norm) + 2 layers x (4 projections + 3 MLP + 4 norms); the
	 * tied head is the embedding, not a tensor of its own */
	ck_assert_int_eq(fg_arch_tensor_count(&c), 2 + 2 * 11);
	ck_assert_int_ge(fg_arch_tensor_index(&c, "model.layers.1.pre_feedforward_layernorm.weight"), 0);
	ck_assert_int_ge(fg_arch_tensor_index(&c, "model.layers.1.post_feedforward_layernorm.weight"), 0);
	ck_assert_int_lt(fg_arch_tensor_index(&c, "lm_head.weight"), 0);

	path = write_config("gemma2-types",
			    GEMMA2_CFG(", \"layer_types\": [\"full_attention\", \"sliding_attention\"],"
				       " \"sliding_window\": 16, \"attn_logit_softcapping\": null,"
				       " \"final_logit_softcapping\": null, \"query_pre_attn_scalar\": 24,"
				       " \"tie_word_embeddings\": false, \"eos_token_id\": [7, 1]"));
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert(fg_layer_window(&c, 0) == 0 && fg_layer_window(&c, 1) == 16);
	ck_assert(c.attn_softcap == 0 && c.final_softcap == 0);
	ck_assert(c.attn_scale == (float)pow(24, -0.5));
	ck_assert_int_eq(c.eos_id, 7);
	ck_assert_int_ge(fg_arch_tensor_index(&c, "lm_head.weight"), 0);

	/* without caps, the family asks for neither softcap op */
	enum fg_op ops[FG_ARCH_OPS_MAX];
	enum fg_dtype dts[FG_ARCH_OPS_MAX];
	int n = c.arch->ops(&c, FG_DTYPE_F16, FG_DTYPE_F32, FG_DTYPE_F32, ops, dts);
	for (int i = 0; i < n; i++)
		ck_assert(ops[i] != FG_OP_SOFTCAP && ops[i] != FG_OP_ATTENTION_SOFTCAP);

	ck_assert_int_eq(fg_model_preset("gemma-2-2b", &c), 0);
	ck_assert_uint_eq(fg_model_param_count(&c), 2614341888ull);
	ck_assert_int_eq(fg_model_preset("google/gemma-2-9b", &c), 0);
	ck_assert_str_eq(c.arch->name, "gemma2");
	ck_assert_uint_eq(fg_model_param_count(&c), 9241705984ull);
	ck_assert(fg_layer_window(&c, 40) == 4096 && fg_layer_window(&c, 41) == 0);
	n = c.arch->ops(&c, FG_DTYPE_Q4_ROWS, FG_DTYPE_F32, FG_DTYPE_Q4_COLS, ops, dts);
	ck_assert_int_eq(n, FG_ARCH_OPS_MAX); /* every op: GQA and both caps */
	ck_assert_int_eq(ops[n - 1], FG_OP_SOFTCAP);
	ck_assert_int_eq(ops[n - 2], FG_OP_ATTENTION_SOFTCAP);
	ck_assert_int_eq(dts[n - 2], FG_DTYPE_Q4_COLS);
	ck_assert_int_eq(fg_model_preset("gemma-2-27b", &c), 0);
	ck_assert_int_eq(c.head_dim, 128);
	ck_assert(c.attn_scale == (float)pow(144, -0.5));
	ck_assert_uint_eq(fg_model_param_count(&c), 27227128320ull);
}
END_TEST

START_TEST(test_config_testdata)
{
	const char *td = getenv("FGCORE_TESTDATA");
	struct fg_model_config c;
	char path[1024];

	snprintf(path, sizeof(path), "%s/opt/opt-tiny-64x2/config.json", td);
	ck_assert_msg(access(path, R_OK) == 0, "FGCORE_TESTDATA is set but %s is missing", path);
	ck_assert_int_eq(fg_model_config_load(path, &c), 0);
	ck_assert_str_eq(c.name, "opt-tiny-64x2");
	ck_assert_int_eq(c.vocab, 50272);
	ck_assert_int_eq(c.hidden, 64);
	ck_assert_int_eq(c.heads, 4);
	ck_assert_int_eq(c.layers, 2);
	ck_assert_int_eq(c.ffn, 256);
	ck_assert_int_eq(c.max_pos, 2048);

	snprintf(path, sizeof(path), "%s/opt/opt-tiny-128x4/config.json", td);
	ck_assert_int_eq(fg_model_config_load(path, &c), 0);
	ck_assert_int_eq(c.hidden, 128);
	ck_assert_int_eq(c.heads, 8);
	ck_assert_int_eq(c.layers, 4);
	ck_assert_int_eq(c.ffn, 512);

	/* the trained Llama: rope_parameters.rope_theta 500000, 2 query heads over
	 * 1 key/value head of 64, tied embeddings */
	snprintf(path, sizeof(path), "%s/llama/llama-py-128x4/config.json", td);
	ck_assert_msg(fg_model_config_load(path, &c) == 0, "%s", fg_last_error());
	ck_assert_str_eq(c.arch->name, "llama");
	ck_assert_int_eq(c.heads, 2);
	ck_assert_int_eq(c.kv_heads, 1);
	ck_assert_int_eq(c.head_dim, 64);
	ck_assert_int_eq(c.ffn, 384);
	ck_assert(c.features & FG_FEAT_TIED);
	ck_assert(fabs(c.rope_inv_freq[1] - pow(5e5, -2.0 / 64)) < 1e-7);
}
END_TEST

/* A minimal Llama config.json with `extra` keys appended. */
#define LLAMA_CFG(extra)                                                                  \
	"{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 16,"                \
	" \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"intermediate_size\": 32,"    \
	" \"max_position_embeddings\": 64" extra "}"

/* A minimal Qwen2 config.json of four layers with `extra` keys appended. */
#define QWEN2_CFG(extra)                                                                  \
	"{\"model_type\": \"qwen2\", \"vocab_size\": 100, \"hidden_size\": 16,"                \
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 4,"   \
	" \"intermediate_size\": 32, \"max_position_embeddings\": 256" extra "}"
#define FULL4 "\"full_attention\", \"full_attention\", \"full_attention\""


struct bad_case {
	const char *what;
	const char *text; /* NULL: CFG_FMT with `extra` appended */
	const char *extra;
	int rc;
	const char *needle; /* must appear in the error line */
};

static const struct bad_case bad_cases[] = {
	{ "not JSON", "{ \"model_type\": \"opt\", hidden_size: 64 }", NULL, -EINVAL,
	  "not valid JSON" },
	{ "empty file", "", NULL, -EINVAL, "not valid JSON" },
	{ "array", "[1, 2, 3]", NULL, -EINVAL, "must be a JSON object" },
	{ "duplicate key", NULL, ", \"hidden_size\": 64", -EINVAL, "duplicate object key" },
	{ "missing key",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"ffn_dim\" is missing" },
	{ "no model_type", "{\"vocab_size\": 100}", NULL, -EINVAL, "\"model_type\" is missing" },
	{ "model_type not a string", "{\"model_type\": 7}", NULL, -EINVAL,
	  "\"model_type\" must be a string" },
	{ "wrong type",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": \"16\","
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"hidden_size\" must be an integer" },
	{ "real number",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100.0, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"vocab_size\" must be an integer" },
	{ "negative",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": -3, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"num_hidden_layers\" is -3" },
	{ "zero",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 0, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"num_attention_heads\" is 0" },
	{ "huge",
	  "{\"model_type\": \"opt\", \"vocab_size\": 1000000000000, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "\"vocab_size\" is 1000000000000" },
	{ "heads do not divide",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 18,"
	  " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8}",
	  NULL, -EINVAL, "not a multiple of num_attention_heads" },
	{ "token id outside vocab",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8, \"pad_token_id\": 100}",
	  NULL, -EINVAL, "\"pad_token_id\" is 100, outside the vocabulary" },
	{ "token id not an int",
	  "{\"model_type\": \"opt\", \"vocab_size\": 100, \"hidden_size\": 16,"
	  " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"ffn_dim\": 32,"
	  " \"max_position_embeddings\": 8, \"bos_token_id\": null}",
	  NULL, -EINVAL, "\"bos_token_id\" must be an integer" },
	{ "bool as string", NULL, ", \"enable_bias\": \"yes\"", -EINVAL,
	  "\"enable_bias\" must be true or false" },
	{ "post-LN", NULL, ", \"do_layer_norm_before\": false", -ENOTSUP,
	  "post-LayerNorm OPT (opt-350m style) with project_in/out is not supported; use "
	  "another OPT size" },
	{ "unknown family", "{\"model_type\": \"gemma\", \"hidden_size\": 4096}", NULL, -ENOTSUP,
	  "model_type \"gemma\" is not supported; supported: \"opt\", \"llama\"" },
	{ "mixtral: no experts", MIXTRAL_CFG(", \"num_local_experts\": 0"), NULL, -EINVAL,
	  "\"num_local_experts\" is 0; it must be between 1 and" },
	{ "mixtral: more per token than experts",
	  MIXTRAL_CFG(", \"num_local_experts\": 4, \"num_experts_per_tok\": 5"), NULL, -EINVAL,
	  "num_experts_per_tok 5 must be at most num_local_experts (4)" },
	{ "qwen2_moe: experts past any size", QWEN_MOE_CFG("qwen2_moe", ", \"num_experts\": 2000000"),
	  NULL, -EINVAL, "\"num_experts\" is 2000000; it must be between 1 and" },
	{ "qwen3_moe: both counts", QWEN_MOE_CFG("qwen3_moe", ", \"num_experts\": 8, \"num_local_experts\": 4"),
	  NULL, -EINVAL, "num_local_experts 4 and num_experts 8 disagree" },
	{ "qwen2_moe: dense layers", QWEN_MOE_CFG("qwen2_moe", ", \"num_experts\": 8, \"mlp_only_layers\": [0]"),
	  NULL, -ENOTSUP, "mlp_only_layers: only models whose every layer is a mixture of experts" },
	{ "qwen2_moe: sparse step", QWEN_MOE_CFG("qwen2_moe", ", \"num_experts\": 8, \"decoder_sparse_step\": 2"),
	  NULL, -ENOTSUP, "decoder_sparse_step: only models whose every layer" },
	{ "llama: experts", LLAMA_CFG(", \"num_local_experts\": 8"), NULL, -ENOTSUP,
	  "key \"num_local_experts\" changes the model's math" },
	{ "llama: kv heads do not divide", LLAMA_CFG(", \"num_key_value_heads\": 3"), NULL, -EINVAL,
	  "num_key_value_heads 3 does not divide num_attention_heads 4" },
	{ "llama: unknown rope scaling", LLAMA_CFG(", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"),
	  NULL, -ENOTSUP, "rope_scaling.rope_type \"yarn\" is not supported" },
	{ "llama: rope_parameters not an object", LLAMA_CFG(", \"rope_parameters\": 5"), NULL, -EINVAL,
	  "\"rope_parameters\" must be an object" },
	{ "llama: llama3 scaling without a factor", LLAMA_CFG(", \"rope_scaling\": {\"rope_type\": \"llama3\"}"),
	  NULL, -EINVAL, "rope_scaling.factor must be a number >= 1" },
	{ "llama: gelu", LLAMA_CFG(", \"hidden_act\": \"gelu\""), NULL, -ENOTSUP,
	  "hidden_act gelu is not supported" },
	{ "llama: soft-capping", LLAMA_CFG(", \"final_logit_softcapping\": 30.0"), NULL, -ENOTSUP,
	  "key \"final_logit_softcapping\" changes the model's math" },
	{ "llama: partial rotary", LLAMA_CFG(", \"partial_rotary_factor\": 0.5"), NULL, -ENOTSUP,
	  "partial_rotary_factor 0.5" },
	{ "llama: odd head_dim", LLAMA_CFG(", \"head_dim\": 7"), NULL, -EINVAL,
	  "head_dim 7 must be even" },
	{ "llama: rope_parameters and rope_scaling differ",
	  LLAMA_CFG(", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0},"
		    " \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}"), NULL, -EINVAL,
	  "both \"rope_parameters\" {\"rope_theta\":500000.0,\"rope_type\":\"default\"} and the "
	  "older \"rope_scaling\" {\"factor\":4.0,\"rope_theta\":10000.0,\"rope_type\":\"linear\"} "
	  "are set and differ: transformers 5 would use rope_scaling" },
	{ "llama: theta", LLAMA_CFG(", \"rope_theta\": 0.5"), NULL, -EINVAL,
	  "rope_theta 0.5 must be a finite number above 1" },
	{ "layer_types: a string", LLAMA_CFG(", \"layer_types\": \"full_attention\""), NULL, -EINVAL,
	  "key \"layer_types\" must be an array of strings, one per layer" },
	{ "layer_types: an object", LLAMA_CFG(", \"layer_types\": {\"0\": \"full_attention\"}"), NULL,
	  -EINVAL, "key \"layer_types\" must be an array" },
	{ "layer_types: too many", LLAMA_CFG(", \"layer_types\": [\"full_attention\", \"full_attention\"]"),
	  NULL, -EINVAL, "layer_types has 2 entries, but num_hidden_layers is 1" },
	{ "layer_types: too few", QWEN2_CFG(", \"layer_types\": [" FULL4 "]"), NULL, -EINVAL,
	  "layer_types has 3 entries, but num_hidden_layers is 4" },
	{ "layer_types: empty", LLAMA_CFG(", \"layer_types\": []"), NULL, -EINVAL,
	  "layer_types has 0 entries" },
	{ "layer_types: a number", LLAMA_CFG(", \"layer_types\": [7]"), NULL, -EINVAL,
	  "layer_types[0] must be a string" },
	{ "layer_types: an array in it", QWEN2_CFG(", \"layer_types\": [" FULL4 ", [\"full_attention\"]]"),
	  NULL, -EINVAL, "layer_types[3] must be a string" },
	{ "layer_types: unknown kind", QWEN2_CFG(", \"layer_types\": [" FULL4 ", \"xyz\"]"), NULL,
	  -ENOTSUP, "layer_types[3] is \"xyz\": only \"full_attention\" and \"sliding_attention\"" },
	{ "layer_types: chunked", LLAMA_CFG(", \"layer_types\": [\"chunked_attention\"]"), NULL, -ENOTSUP,
	  "layer_types[0] is \"chunked_attention\"" },
	{ "layer_types: llama sliding", LLAMA_CFG(", \"layer_types\": [\"sliding_attention\"]"), NULL,
	  -ENOTSUP, "layer_types[0] is \"sliding_attention\", but the config gives it no window (llama" },
	{ "layer_types: qwen2 sliding, no window",
	  QWEN2_CFG(", \"sliding_window\": 64, \"layer_types\": [\"sliding_attention\", " FULL4 "]"), NULL,
	  -ENOTSUP, "layer_types[0] is \"sliding_attention\", but the config gives it no window (use_sliding_window is false" },
	{ "layer_types: qwen2 null window",
	  QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": null, \"layer_types\": [" FULL4
		    ", \"sliding_attention\"]"),
	  NULL, -ENOTSUP, "layer_types[3] is \"sliding_attention\", but the config gives it no window (use" },
	{ "qwen2: bad window", QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": \"64\""),
	  NULL, -EINVAL, "key \"sliding_window\" must be an integer" },
	{ "qwen2: negative max_window_layers",
	  QWEN2_CFG(", \"use_sliding_window\": true, \"max_window_layers\": -1"), NULL, -EINVAL,
	  "key \"max_window_layers\" must be an integer between 0 and" },
	{ "gemma2: erf GELU", GEMMA2_CFG(", \"hidden_activation\": \"gelu\""), NULL, -ENOTSUP,
	  "hidden_activation gelu is not supported; gemma2 models here compute \"gelu_pytorch_tanh\"" },
	{ "gemma2: attention bias", GEMMA2_CFG(", \"attention_bias\": true"), NULL, -ENOTSUP,
	  "key \"attention_bias\" changes the model's math and is not implemented for gemma2" },
	{ "gemma2: scaled rope",
	  GEMMA2_CFG(", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0}"), NULL,
	  -ENOTSUP, "rope_parameters.rope_type linear: only unscaled rotary embeddings" },
	{ "gemma2: zero softcap", GEMMA2_CFG(", \"attn_logit_softcapping\": 0"), NULL, -EINVAL,
	  "key \"attn_logit_softcapping\" must be a finite number above 0 (or null: none)" },
	{ "gemma2: null query scalar", GEMMA2_CFG(", \"query_pre_attn_scalar\": null"), NULL,
	  -EINVAL, "key \"query_pre_attn_scalar\" must be a finite number above 0" },
	{ "gemma2: sliding without a window",
	  GEMMA2_CFG(", \"sliding_window\": null"), NULL, -ENOTSUP,
	  "layer 0 has a sliding window, but sliding_window is null" },
	{ "gemma2: layer_types short", GEMMA2_CFG(", \"layer_types\": [\"full_attention\"]"), NULL,
	  -EINVAL, "key \"layer_types\" must be an array of 2 strings, one per layer" },
	{ "gemma2: chunked layer", GEMMA2_CFG(", \"layer_types\": [\"full_attention\", \"chunked_attention\"]"),
	  NULL, -ENOTSUP, "layer_types[1] is \"chunked_attention\": only" },
	{ "gemma2: bidirectional", GEMMA2_CFG(", \"use_bidirectional_attention\": true"), NULL,
	  -ENOTSUP, "key \"use_bidirectional_attention\" changes the model's math" },
	{ "gemma2: partial rotary", GEMMA2_CFG(", \"partial_rotary_factor\": 0.5"), NULL, -ENOTSUP,
	  "partial_rotary_factor: only full rotary embeddings (1.0) are implemented" },
	{ "project_in/out", NULL, ", \"word_embed_proj_dim\": 512", -ENOTSUP,
	  "word_embed_proj_dim 512 differs from hidden_size 64" },
	{ "gelu", NULL, ", \"activation_function\": \"gelu\"", -ENOTSUP,
	  "activation_function \"gelu\" is not supported" },
	{ "no biases", NULL, ", \"enable_bias\": false", -ENOTSUP,
	  "OPT without biases is not supported" },
	{ "no final LN", NULL, ", \"_remove_final_layer_norm\": true", -ENOTSUP,
	  "_remove_final_layer_norm is true" },
	{ "untied lm_head", NULL, ", \"tie_word_embeddings\": false", -ENOTSUP,
	  "tie_word_embeddings is false" },
	{ "LN without affine", NULL, ", \"layer_norm_elementwise_affine\": false", -ENOTSUP,
	  "layer_norm_elementwise_affine is false" },
};

#define NBAD (int)(sizeof(bad_cases) / sizeof(bad_cases[0]))

/* rope_parameters and the older rope_scaling + rope_theta read as
 * transformers 5.25 reads them (AutoConfig.from_pretrained gave the rope
 * parameters noted): head_dim 4, so inv_freq[1] = theta^-0.5 / factor. */
START_TEST(test_rope_keys)
{
	static const struct {
		const char *extra;
		double theta, factor;
	} cases[] = {
		/* both, saying the same ("type" is "rope_type", 2 is 2.0, the
		 * top-level theta fills rope_scaling's) */
		{ ", \"rope_theta\": 500000, \"rope_parameters\": {\"rope_type\": \"linear\","
		  " \"factor\": 2, \"rope_theta\": 500000.0}, \"rope_scaling\": {\"type\": \"linear\","
		  " \"factor\": 2.0}", 500000, 2 },
		/* rope_parameters without rope_theta: the top-level one (not 10000) */
		{ ", \"rope_theta\": 1234.0, \"rope_parameters\": {\"rope_type\": \"default\"}",
		  1234, 1 },
		/* an empty rope_parameters is nothing: rope_scaling and rope_theta */
		{ ", \"rope_theta\": 2000.0, \"rope_parameters\": {}, \"rope_scaling\": {\"rope_type\":"
		  " \"linear\", \"factor\": 4.0}", 2000, 4 },
		/* an empty rope_scaling is nothing: rope_parameters */
		{ ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0,"
		  " \"rope_theta\": 500000.0}, \"rope_scaling\": {}", 500000, 2 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fg_model_config c;
		char text[1024], folder[32];
		double want = pow(cases[i].theta, -0.5) / cases[i].factor;

		snprintf(text, sizeof(text), LLAMA_CFG("%s"), cases[i].extra);
		snprintf(folder, sizeof(folder), "rope%zu", i);
		ck_assert_msg(fg_model_config_load(write_config(folder, text), &c) == 0, "case %zu: %s",
			      i, fg_last_error());
		ck_assert_msg(fabs(c.rope_inv_freq[1] - want) <= 1e-6 * want, "case %zu: %g, want %g",
			      i, c.rope_inv_freq[1], want);
	}
}
END_TEST

/* Each malformed or refused config gives its own error code and line, and the
 * output struct is left untouched. */
START_TEST(test_config_malformed)
{
	static char msgs[NBAD][1024];
	const char *e;
	int i, j, rc;

	for (i = 0; i < NBAD; i++) {
		const struct bad_case *b = &bad_cases[i];
		struct fg_model_config c, before;
		char text[2048], folder[32];
		const char *path;

		if (b->text)
			snprintf(text, sizeof(text), "%s", b->text);
		else
			snprintf(text, sizeof(text), CFG_FMT, b->extra);
		snprintf(folder, sizeof(folder), "bad%d", i);
		path = write_config(folder, text);
		memset(&c, 0x33, sizeof(c));
		before = c;
		fg_clear_error();
		rc = fg_model_config_load(path, &c);
		ck_assert_msg(rc == b->rc, "%s: rc %d, error \"%s\"", b->what, rc,
			      fg_last_error());
		ck_assert_msg(memcmp(&c, &before, sizeof(c)) == 0, "%s: output modified", b->what);
		e = fg_last_error();
		ck_assert_msg(strstr(e, b->needle), "%s: error \"%s\" lacks \"%s\"", b->what, e,
			      b->needle);
		ck_assert_msg(strstr(e, path), "%s: error \"%s\" does not name the file", b->what,
			      e);
		ck_assert_msg(!strchr(e, '\n'), "%s: error is not one line", b->what);
		/* Keep what follows the file name: the paths differ anyway. */
		snprintf(msgs[i], sizeof(msgs[i]), "%s", strstr(e, path) + strlen(path));
	}
	/* Same-category cases (e.g. two JSON syntax errors) still differ in the detail. */
	for (i = 0; i < NBAD; i++)
		for (j = i + 1; j < NBAD; j++)
			ck_assert_msg(strcmp(msgs[i], msgs[j]) != 0, "cases %s and %s give the same "
				      "error", bad_cases[i].what, bad_cases[j].what);
}
END_TEST

/* Model `text` loads; a run of `ok` positions plans and, when `refused` > 0,
 * one of `refused` is refused for the sliding window by a backend that
 * cannot apply it (compute ABI < 1.11) and planned for one that can. */
static void check_window(const char *what, const char *text, int64_t window, int64_t ok,
			 int64_t refused)
{
	struct fg_policy p = { .gpu_batch_size = 1, .num_gpu_batches = 1,
			       .weight = { 0, 0, 100 }, .cache = { 0, 0, 100 }, .act = { 0, 0, 100 },
			       .attn_sparsity = 1 };
	struct fg_plan_env env = { 2, 1, 4, 1, 0 }, windows = { 2, 1, 4, 0, 0 };
	static struct fg_plan plan;
	struct fg_model_config c;

	ck_assert_msg(fg_model_config_load(write_config("window", text), &c) == 0, "%s: %s", what,
		      fg_last_error());
	ck_assert_msg(c.sliding_window == window, "%s: window %lld, want %lld", what,
		      (long long)c.sliding_window, (long long)window);
	ck_assert_msg(fg_plan_make(&c, &p, &env, ok - 8, 8, &plan) == 0, "%s: %s", what,
		      fg_last_error());
	if (refused > 0) {
		ck_assert_int_eq(fg_plan_make(&c, &p, &env, refused - 8, 8, &plan), -ENOTSUP);
		ck_assert_msg(strstr(fg_last_error(), "sliding_window"), "%s: %s", what,
			      fg_last_error());
		ck_assert_msg(fg_plan_make(&c, &p, &windows, refused - 8, 8, &plan) == 0, "%s: %s",
			      what, fg_last_error());
	}
}

/* config.json's layer_types (current Hugging Face writes it for Qwen2): full
 * attention changes nothing; sliding layers run while the window covers
 * every position, as Mistral's sliding_window does. */
START_TEST(test_layer_types)
{
	/* all full attention, as Qwen2 and Qwen2.5 save it: no window, whatever
	 * sliding_window says */
	check_window("qwen2 full", QWEN2_CFG(", \"use_sliding_window\": false, \"sliding_window\": 4096,"
					     " \"max_window_layers\": 28, \"layer_types\": [" FULL4
					     ", \"full_attention\"]"),
		     0, 256, 0);
	check_window("qwen2 full with a window",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": 64,"
			       " \"layer_types\": [" FULL4 ", \"full_attention\"]"),
		     0, 256, 0);
	check_window("llama full", LLAMA_CFG(", \"layer_types\": [\"full_attention\"]"), 0, 64, 0);
	/* a sliding layer: runs within the window only */
	check_window("qwen2 one sliding layer",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": 64,"
			       " \"layer_types\": [" FULL4 ", \"sliding_attention\"]"),
		     64, 64, 65);
	/* without layer_types, Qwen2 windows the layers from max_window_layers on */
	check_window("qwen2 max_window_layers 3",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": 64,"
			       " \"max_window_layers\": 3"),
		     64, 64, 65);
	check_window("qwen2 max_window_layers 4",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": 64,"
			       " \"max_window_layers\": 4"),
		     0, 256, 0);
	check_window("qwen2 default max_window_layers (28)",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"sliding_window\": 64"), 0, 256, 0);
	check_window("qwen2 default window (4096)",
		     QWEN2_CFG(", \"use_sliding_window\": true, \"max_window_layers\": 0"), 4096, 256, 0);
	/* Mistral windows every layer, whatever layer_types says (Hugging Face
	 * ignores it there) */
	check_window("mistral", "{\"model_type\": \"mistral\", \"vocab_size\": 100, \"hidden_size\": 16,"
				" \"num_attention_heads\": 4, \"num_hidden_layers\": 1,"
				" \"intermediate_size\": 32, \"max_position_embeddings\": 256,"
				" \"sliding_window\": 32, \"layer_types\": [\"full_attention\"]}",
		     32, 32, 33);

	/* a huge array is counted, not walked: one line */
	static char big[1 << 20];
	size_t n = (size_t)snprintf(big, sizeof(big), "%s", "{\"model_type\": \"qwen2\", \"vocab_size\": 100,"
				    " \"hidden_size\": 16, \"num_attention_heads\": 4,"
				    " \"num_hidden_layers\": 4, \"intermediate_size\": 32,"
				    " \"max_position_embeddings\": 256, \"layer_types\": [");
	for (int i = 0; i < 50000; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"full_attention\"", i ? "," : "");
	snprintf(big + n, sizeof(big) - n, "]}");
	struct fg_model_config c;
	const char *path = write_config("huge", big);
	ck_assert_int_eq(fg_model_config_load(path, &c), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "layer_types has 50000 entries, but num_hidden_layers is 4"),
		      "%s", fg_last_error());
	ck_assert(strstr(fg_last_error(), path) && !strchr(fg_last_error(), '\n'));
}
END_TEST

/* Every family's tables are whole (each enum value has its named entry) and
 * its op list fits the backend check. */
START_TEST(test_family_tables)
{
	const char *types[] = { "opt", "llama", "mistral", "qwen2", "gemma2" };
	struct fg_model_config c;
	enum fg_op ops[FG_ARCH_OPS_MAX];
	enum fg_dtype dts[FG_ARCH_OPS_MAX];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		const struct fg_arch *a = fg_arch_find(types[i]);
		ck_assert_ptr_nonnull(a);
		ck_assert_msg(fg_arch_check(a) == 0, "%s: %s", types[i], fg_last_error());
	}
	/* grouped-query attention's op only where kv_heads < heads */
	ck_assert_int_eq(fg_model_preset("llama-2-7b", &c), 0);
	int mha = c.arch->ops(&c, FG_DTYPE_F16, FG_DTYPE_F32, FG_DTYPE_F32, ops, dts);
	ck_assert_int_eq(fg_model_preset("llama-2-70b", &c), 0);
	int gqa = c.arch->ops(&c, FG_DTYPE_Q4_ROWS, FG_DTYPE_F32, FG_DTYPE_Q4_COLS, ops, dts);
	ck_assert_int_eq(gqa, mha + 2);
	ck_assert_int_eq(ops[gqa - 1], FG_OP_ATTENTION_GQA);
	ck_assert_int_eq(dts[gqa - 1], FG_DTYPE_Q4_COLS);
	ck_assert_int_eq(ops[gqa - 2], FG_OP_ATTENTION_GQA);
	ck_assert_int_eq(dts[gqa - 2], FG_DTYPE_F32);
	ck_assert_int_eq(ops[2], FG_OP_LINEAR);
	ck_assert_int_eq(dts[2], FG_DTYPE_Q4_ROWS);

	/* a table with an entry left out is refused by name */
	static const struct fg_tensor_def layer[] = {
		[0] = { "l.%d.a", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
		[2] = { "l.%d.b", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	};
	static const struct fg_tensor_def bad_name[] = {
		{ "l.%s.a", FG_BLOCK_ATTN, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
	};
	struct fg_arch t = *fg_arch_find("llama");
	t.name = "test";
	t.layer = layer;
	t.nlayer = 3;
	ck_assert_int_eq(fg_arch_check(&t), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "family test: per-layer tensor 1 (no name) is malformed"),
		      "%s", fg_last_error());
	t.layer = bad_name;
	t.nlayer = 1;
	ck_assert_int_eq(fg_arch_check(&t), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "(l.%s.a) is malformed"), "%s", fg_last_error());
	/* an expert's entry names the layer and the expert; the experts'
	 * entries are one run, repeated per expert */
	static const struct fg_tensor_def one_number[] = {
		{ "l.%d.e.w", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 },
	};
	static const struct fg_tensor_def apart[] = {
		{ "l.%d.e.%d.a", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 },
		{ "l.%d.n", FG_BLOCK_MLP, FG_DIM_ONE, FG_DIM_HIDDEN, 0, FG_INIT_ONES, 0, 0 },
		{ "l.%d.e.%d.b", FG_BLOCK_MLP, FG_DIM_FFN, FG_DIM_HIDDEN, FG_TD_EXPERTS, FG_INIT_MATRIX, 0, 0 },
	};
	t.layer = one_number;
	ck_assert_int_eq(fg_arch_check(&t), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "(l.%d.e.w) is malformed"), "%s", fg_last_error());
	t.layer = apart;
	t.nlayer = 3;
	ck_assert_int_eq(fg_arch_check(&t), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "tensor 2 (l.%d.e.%d.b) is an expert's apart"), "%s",
		      fg_last_error());
	t.nlayer = 2; /* the run, then others */
	ck_assert_int_eq(fg_arch_check(&t), 0);
}
END_TEST

START_TEST(test_config_missing_file)
{
	struct fg_model_config c;
	char path[400];

	snprintf(path, sizeof(path), "%s/nowhere/config.json", tmp_root);
	ck_assert_int_eq(fg_model_config_load(path, &c), -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), path));
	/* A folder is not a config file. */
	ck_assert_int_eq(fg_model_config_load(tmp_root, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "not a regular file"));
}
END_TEST

START_TEST(test_config_too_large)
{
	struct fg_model_config c;
	char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/big.json", tmp_root);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, 2 << 20, SEEK_SET), 0);
	fputc(' ', f);
	fclose(f);
	ck_assert_int_eq(fg_model_config_load(path, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "bytes"));
}
END_TEST

static Suite *model_config_suite(void)
{
	Suite *s = suite_create("model_config");
	TCase *tc = tcase_create("presets");
	const char *td = getenv("FGCORE_TESTDATA");

	tcase_add_test(tc, test_presets);
	tcase_add_test(tc, test_iml_variants);
	tcase_add_test(tc, test_preset_unknown);
	tcase_add_test(tc, test_preset_350m_refused);
	tcase_add_test(tc, test_param_count);
	tcase_add_test(tc, test_family_tables);
	suite_add_tcase(s, tc);

	tc = tcase_create("config_json");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_config_written);
	tcase_add_test(tc, test_llama_config);
	tcase_add_test(tc, test_gemma2_config);
	tcase_add_test(tc, test_config_malformed);
	tcase_add_test(tc, test_rope_keys);
	tcase_add_test(tc, test_layer_types);
	tcase_add_test(tc, test_config_missing_file);
	tcase_add_test(tc, test_config_too_large);
	suite_add_tcase(s, tc);

	if (td && *td) {
		tc = tcase_create("testdata");
		tcase_add_test(tc, test_config_testdata);
		suite_add_tcase(s, tc);
	} else {
		printf("FGCORE_TESTDATA is unset: skipping the reference config.json case\n");
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(model_config_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
