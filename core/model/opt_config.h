/* core/model/opt_config.h - OPT model hyper-parameters: presets and config.json. */
#ifndef FG_MODEL_OPT_CONFIG_H
#define FG_MODEL_OPT_CONFIG_H

#include <stdint.h>

struct fg_opt_config {
	char name[64];   /* "opt-1.3b", or the folder name */
	int64_t vocab;   /* vocab_size */
	int64_t hidden;  /* hidden_size */
	int64_t heads;   /* num_attention_heads */
	int64_t layers;  /* num_hidden_layers */
	int64_t ffn;     /* ffn_dim */
	int64_t max_pos; /* max_position_embeddings (the table has max_pos + 2 rows) */
	int32_t pad_id, bos_id, eos_id;
};

/* FlexGen's presets: opt-125m, opt-350m is refused (post-LayerNorm),
 * opt-1.3b, 2.7b, 6.7b, 13b, 30b, 66b, 175b, and the opt-iml-{1.3b,30b},
 * opt-iml-max-{1.3b,30b} variants.  Unknown name: -ENOENT with the list. */
int fg_opt_preset(const char *name, struct fg_opt_config *out);

/* Read a Hugging Face config.json.  Refused (-ENOTSUP, a line saying why):
 * model_type != "opt", do_layer_norm_before false, word_embed_proj_dim !=
 * hidden_size (project_in/out), activation other than relu, no biases,
 * _remove_final_layer_norm.  Malformed: -EINVAL naming the file and key. */
int fg_opt_config_load(const char *path, struct fg_opt_config *out);

/* Parameter count and bytes at fp16 (for bench's "model size"). */
uint64_t fg_opt_param_count(const struct fg_opt_config *c);

#endif
