/* core/model/weight_names.c - the OPT tensors a config needs: canonical names and shapes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/model/weights.h"

#define WN_GLOBAL 4
#define WN_PER_LAYER 16

enum wn_dim { WN_H, WN_F, WN_V, WN_P }; /* hidden, ffn, vocab, max_pos + 2 */

struct wn_entry {
	const char *name;
	int rank;
	enum wn_dim rows, cols; /* rows unused for rank 1 */
};

static const struct wn_entry wn_global[WN_GLOBAL] = {
	{ "embed_tokens.weight", 2, WN_V, WN_H },
	{ "embed_positions.weight", 2, WN_P, WN_H },
	{ "final_layer_norm.weight", 1, WN_H, WN_H },
	{ "final_layer_norm.bias", 1, WN_H, WN_H },
};

static const struct wn_entry wn_layer[WN_PER_LAYER] = {
	{ "self_attn.q_proj.weight", 2, WN_H, WN_H },
	{ "self_attn.q_proj.bias", 1, WN_H, WN_H },
	{ "self_attn.k_proj.weight", 2, WN_H, WN_H },
	{ "self_attn.k_proj.bias", 1, WN_H, WN_H },
	{ "self_attn.v_proj.weight", 2, WN_H, WN_H },
	{ "self_attn.v_proj.bias", 1, WN_H, WN_H },
	{ "self_attn.out_proj.weight", 2, WN_H, WN_H },
	{ "self_attn.out_proj.bias", 1, WN_H, WN_H },
	{ "self_attn_layer_norm.weight", 1, WN_H, WN_H },
	{ "self_attn_layer_norm.bias", 1, WN_H, WN_H },
	{ "fc1.weight", 2, WN_F, WN_H },
	{ "fc1.bias", 1, WN_F, WN_F },
	{ "fc2.weight", 2, WN_H, WN_F },
	{ "fc2.bias", 1, WN_H, WN_H },
	{ "final_layer_norm.weight", 1, WN_H, WN_H },
	{ "final_layer_norm.bias", 1, WN_H, WN_H },
};

static int64_t wn_dim(const struct fg_opt_config *c, enum wn_dim d)
{
	switch (d) {
	case WN_H:
		return c->hidden;
	case WN_F:
		return c->ffn;
	case WN_V:
		return c->vocab;
	case WN_P:
		return c->max_pos + 2;
	}
	return 0;
}

int64_t fg_weights_tensor_count(const struct fg_opt_config *c)
{
	return WN_GLOBAL + WN_PER_LAYER * c->layers;
}

int fg_weights_tensor_info(const struct fg_opt_config *c, int64_t idx, char *name, size_t len,
			   int *rank, int64_t *rows, int64_t *cols)
{
	const struct wn_entry *e;
	int n;

	if (idx < 0 || idx >= fg_weights_tensor_count(c))
		return -EINVAL;
	if (idx < WN_GLOBAL) {
		e = &wn_global[idx];
		n = snprintf(name, len, "decoder.%s", e->name);
	} else {
		e = &wn_layer[(idx - WN_GLOBAL) % WN_PER_LAYER];
		n = snprintf(name, len, "decoder.layers.%lld.%s",
			     (long long)((idx - WN_GLOBAL) / WN_PER_LAYER), e->name);
	}
	if (n < 0 || (size_t)n >= len)
		return -EINVAL;
	*rank = e->rank;
	*rows = e->rank == 2 ? wn_dim(c, e->rows) : 1;
	*cols = wn_dim(c, e->cols);
	return 0;
}

int64_t fg_weights_tensor_index(const struct fg_opt_config *c, const char *name)
{
	int64_t layer = 0;
	int i;

	if (strncmp(name, "model.decoder.", 14) == 0)
		name += 6;
	if (strncmp(name, "decoder.", 8) != 0)
		return -1;
	name += 8;
	/* FlexGen's converter renames the final layer norm. */
	if (strcmp(name, "layer_norm.weight") == 0)
		return 2;
	if (strcmp(name, "layer_norm.bias") == 0)
		return 3;
	for (i = 0; i < WN_GLOBAL; i++)
		if (strcmp(name, wn_global[i].name) == 0)
			return i;
	if (strncmp(name, "layers.", 7) != 0)
		return -1;
	name += 7;
	/* Decimal without leading zeros, below the layer count. */
	if (*name < '0' || *name > '9' || (name[0] == '0' && name[1] != '.'))
		return -1;
	while (*name >= '0' && *name <= '9') {
		layer = layer * 10 + (*name++ - '0');
		if (layer >= c->layers)
			return -1;
	}
	if (*name++ != '.')
		return -1;
	for (i = 0; i < WN_PER_LAYER; i++)
		if (strcmp(name, wn_layer[i].name) == 0)
			return WN_GLOBAL + layer * WN_PER_LAYER + i;
	return -1;
}
