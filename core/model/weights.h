/* core/model/weights.h - where OPT weights come from: a Hugging Face folder
 * (model.safetensors or sharded with model.safetensors.index.json), a FlexGen
 * "-np" folder of .npy files, or "dummy:<preset>" generated values.
 *
 * Tensors are named as FlexGen names them (Hugging Face names without the
 * "model." prefix):
 *   decoder.embed_tokens.weight            [vocab, hidden]
 *   decoder.embed_positions.weight         [max_pos + 2, hidden]
 *   decoder.final_layer_norm.{weight,bias} [hidden]
 *   decoder.layers.N.self_attn.{q,k,v,out}_proj.weight [hidden, hidden], .bias [hidden]
 *   decoder.layers.N.self_attn_layer_norm.{weight,bias} [hidden]
 *   decoder.layers.N.fc1.weight [ffn, hidden], .bias [ffn]
 *   decoder.layers.N.fc2.weight [hidden, ffn], .bias [hidden]
 *   decoder.layers.N.final_layer_norm.{weight,bias} [hidden]
 * lm_head is tied to decoder.embed_tokens.weight and never read.
 */
#ifndef FG_MODEL_WEIGHTS_H
#define FG_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/opt_config.h"

struct fg_weights;

/* Open `spec` ("dummy:opt-1.3b" or a folder).  For a folder, *cfg is filled
 * from its config.json; for dummy from the preset.  Every tensor the model
 * needs is located and validated (present, dtype F16/BF16/F32, shape as the
 * config says, bytes inside the file, not overlapping) before this returns;
 * errors name the file and the tensor. */
int fg_weights_open(const char *spec, struct fg_opt_config *cfg, struct fg_weights **out);
void fg_weights_close(struct fg_weights *w);

/* Read a tensor converted to fp16 (round to nearest even) into dst, which has
 * room for rows * cols values; the tensor's shape must be [rows, cols] (a 1-D
 * tensor of n values is [1, n]).  Row range [row0, row0 + nrows) only: */
int fg_weights_read_f16(struct fg_weights *w, const char *name, uint16_t *dst, int64_t rows,
			int64_t cols);
int fg_weights_read_rows_f16(struct fg_weights *w, const char *name, int64_t row0, int64_t nrows,
			     int64_t cols, uint16_t *dst);

/* The tensors a model with config c needs, in a fixed order: the 4 global
 * ones (embed_tokens, embed_positions, final_layer_norm weight, bias), then
 * 16 per layer (q, k, v, out_proj weight/bias, self_attn_layer_norm, fc1,
 * fc2, final_layer_norm). */
int64_t fg_weights_tensor_count(const struct fg_opt_config *c);
/* Canonical name and shape of tensor idx; a 1-D tensor has rank 1, rows 1.
 * -EINVAL when idx is out of range or name does not fit in len. */
int fg_weights_tensor_info(const struct fg_opt_config *c, int64_t idx, char *name, size_t len,
			   int *rank, int64_t *rows, int64_t *cols);
/* Index of `name` ("decoder.X", "model.decoder.X"; FlexGen's
 * "decoder.layer_norm.X" for decoder.final_layer_norm.X), or -1 when the
 * model does not use it (lm_head, unknown names, layers beyond c->layers). */
int64_t fg_weights_tensor_index(const struct fg_opt_config *c, const char *name);

#endif
