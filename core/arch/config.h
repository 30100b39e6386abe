/* core/arch/config.h - reading config.json values, for the families. */
#ifndef FG_ARCH_CONFIG_H
#define FG_ARCH_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Every size is bounded before anything is sized from it. */
#define FG_CONFIG_DIM_MAX (INT64_C(1) << 20)

/* A required integer in [1, FG_CONFIG_DIM_MAX]. */
int fg_json_dim(const char *path, json_t *root, const char *key, int64_t *out);
/* An optional token id in [0, vocab); *out keeps its default when absent. */
int fg_json_token(const char *path, json_t *root, const char *key, int64_t vocab, int32_t *out);
/* An optional boolean; *out keeps its default when absent. */
int fg_json_bool(const char *path, json_t *root, const char *key, int *out);
/* An optional number; *out keeps its default when absent. */
int fg_json_number(const char *path, json_t *root, const char *key, double *out);
/* An optional eos_token_id: a token id, or a list whose first ends a
 * sequence here (Llama 3 lists several); *out keeps its default when absent
 * or null. */
int fg_json_eos(const char *path, json_t *root, int64_t vocab, int32_t *out);
/* An optional norm epsilon in (0, 1]; *out keeps its default when absent. */
int fg_json_eps(const char *path, json_t *root, const char *key, float *out);
/* A rotary head size the engine computes: even, at most FG_ROPE_MAX. */
int fg_json_head_dim_ok(const char *path, int64_t head_dim);
/* An optional activation key that must name `want` (the family's, `what`
 * saying what the family computes with it); -ENOTSUP names the key. */
int fg_json_activation(const char *path, json_t *root, const char *key, const char *want,
		       const char *family, const char *what);
/* Keys of other models' math, refused when set to anything but null or
 * false, except those in `skip` (NULL-terminated, or NULL: none). */
int fg_json_refused(const char *path, json_t *root, const char *const *keys, size_t n,
		    const char *const *skip, const char *family);
/* The folder holding config.json names the model ("opt-tiny-64x2"). */
void fg_json_name_from_path(const char *path, const char *fallback, char *name, size_t len);

#endif
