/* core/model/weights.h - where a model's weights come from: a Hugging Face
 * folder (model.safetensors or sharded with model.safetensors.index.json), a
 * FlexGen "-np" folder of .npy files, or "dummy:<preset>" generated values.
 *
 * Which tensors a model has, their canonical names and shapes, are its
 * family's tensor table (core/arch/arch.h: fg_arch_tensor_*); for OPT the
 * names are FlexGen's (Hugging Face's without "model."), lm_head being tied
 * to decoder.embed_tokens.weight and never read.
 */
#ifndef FG_MODEL_WEIGHTS_H
#define FG_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/arch/arch.h"

struct fg_weights;

/* Open `spec` ("dummy:opt-1.3b" or a folder).  For a folder, *cfg is filled
 * from its config.json; for dummy from the preset.  Every tensor the model
 * needs is located and validated (present, dtype F16/BF16/F32, shape as the
 * config says, bytes inside the file, not overlapping) before this returns;
 * errors name the file and the tensor. */
int fg_weights_open(const char *spec, struct fg_model_config *cfg, struct fg_weights **out);
void fg_weights_close(struct fg_weights *w);

/* Read a tensor converted to fp16 (round to nearest even) into dst, which has
 * room for rows * cols values; the tensor's shape must be [rows, cols] (a 1-D
 * tensor of n values is [1, n]).  Row range [row0, row0 + nrows) only: */
int fg_weights_read_f16(struct fg_weights *w, const char *name, uint16_t *dst, int64_t rows,
			int64_t cols);
int fg_weights_read_rows_f16(struct fg_weights *w, const char *name, int64_t row0, int64_t nrows,
			     int64_t cols, uint16_t *dst);

#endif
