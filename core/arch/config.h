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
/* The folder holding config.json names the model ("opt-tiny-64x2"). */
void fg_json_name_from_path(const char *path, const char *fallback, char *name, size_t len);

#endif
