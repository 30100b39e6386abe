/* core/arch/tensors.c - a family's tensor table as the model's list of
 * tensors: canonical names, shapes, lookup of a checkpoint's names. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/arch/arch.h"

int64_t fg_dim_value(const struct fg_model_config *c, enum fg_dim d)
{
	switch (d) {
	case FG_DIM_ONE:
		return 1;
	case FG_DIM_HIDDEN:
		return c->hidden;
	case FG_DIM_FFN:
		return c->ffn;
	case FG_DIM_VOCAB:
		return c->vocab;
	case FG_DIM_POS:
		return c->pos_rows;
	case FG_DIM_Q:
		return c->heads * c->head_dim;
	case FG_DIM_KV:
		return c->kv_heads * c->head_dim;
	}
	return 0;
}

int fg_arch_present(const struct fg_model_config *c, const struct fg_tensor_def *d)
{
	return (d->needs & ~c->features) == 0 && (d->unless & c->features) == 0;
}

/* Tensors a checkpoint holds, as indices into a table: those the config
 * has, less the tied ones (read under another entry's name). */
static int fg_arch_held(const struct fg_model_config *c, const struct fg_tensor_def *t, int n,
			int *map)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		if (!(t[i].flags & FG_TD_TIED) && fg_arch_present(c, &t[i]))
			map[k++] = i;
	return k;
}

#define FG_ARCH_TABLE_MAX 64

int64_t fg_arch_tensor_count(const struct fg_model_config *c)
{
	int map[FG_ARCH_TABLE_MAX];
	const struct fg_arch *a = c->arch;
	return fg_arch_held(c, a->globals, a->nglobals, map) +
	       (int64_t)fg_arch_held(c, a->layer, a->nlayer, map) * c->layers;
}

const struct fg_tensor_def *fg_arch_tensor_def(const struct fg_model_config *c, int64_t idx)
{
	const struct fg_arch *a = c->arch;
	int gmap[FG_ARCH_TABLE_MAX], lmap[FG_ARCH_TABLE_MAX];
	int ng = fg_arch_held(c, a->globals, a->nglobals, gmap);
	int nl = fg_arch_held(c, a->layer, a->nlayer, lmap);

	if (idx < 0 || idx >= fg_arch_tensor_count(c))
		return NULL;
	if (idx < ng)
		return &a->globals[gmap[idx]];
	return &a->layer[lmap[(idx - ng) % nl]];
}

int fg_arch_tensor_info(const struct fg_model_config *c, int64_t idx, char *name, size_t len,
			int *rank, int64_t *rows, int64_t *cols)
{
	const struct fg_tensor_def *d = fg_arch_tensor_def(c, idx);
	const struct fg_arch *a = c->arch;
	int map[FG_ARCH_TABLE_MAX], n;
	int ng = fg_arch_held(c, a->globals, a->nglobals, map);
	int nl = fg_arch_held(c, a->layer, a->nlayer, map);

	if (!d)
		return -EINVAL;
	if (idx < ng)
		n = snprintf(name, len, "%s", d->name);
	else
		n = snprintf(name, len, d->name, (int)((idx - ng) / nl));
	if (n < 0 || (size_t)n >= len)
		return -EINVAL;
	*rank = d->rows == FG_DIM_ONE ? 1 : 2;
	*rows = fg_dim_value(c, d->rows);
	*cols = fg_dim_value(c, d->cols);
	return 0;
}

/* Does `name` match the per-layer pattern `pat` ("...%d...")?  The layer is
 * decimal without leading zeros and below the layer count. */
static int fg_match_layer(const struct fg_model_config *c, const char *pat, const char *name,
			  int64_t *layer)
{
	const char *mark = strstr(pat, "%d");
	size_t head = (size_t)(mark - pat);
	int64_t l = 0;

	if (strncmp(name, pat, head) != 0)
		return 0;
	name += head;
	if (*name < '0' || *name > '9' || (name[0] == '0' && name[1] >= '0' && name[1] <= '9'))
		return 0;
	while (*name >= '0' && *name <= '9') {
		l = l * 10 + (*name++ - '0');
		if (l >= c->layers)
			return 0;
	}
	if (strcmp(name, mark + 2) != 0)
		return 0;
	*layer = l;
	return 1;
}

int64_t fg_arch_tensor_index(const struct fg_model_config *c, const char *name)
{
	const struct fg_arch *a = c->arch;
	int gmap[FG_ARCH_TABLE_MAX], lmap[FG_ARCH_TABLE_MAX];
	int ng = fg_arch_held(c, a->globals, a->nglobals, gmap);
	int nl = fg_arch_held(c, a->layer, a->nlayer, lmap);
	const char *n = name;
	int64_t layer;

	for (int p = 0; p < a->nprefixes; p++) {
		size_t len = strlen(a->prefixes[p]);
		if (strncmp(name, a->prefixes[p], len) == 0) {
			n = name + len;
			break;
		}
	}
	for (int i = 0; i < a->nalias; i++)
		if (strcmp(n, a->alias[i]) == 0)
			for (int g = 0; g < ng; g++)
				if (gmap[g] == a->alias_of[i])
					return g;
	for (int g = 0; g < ng; g++)
		if (strcmp(n, a->globals[gmap[g]].name) == 0)
			return g;
	for (int i = 0; i < nl; i++)
		if (fg_match_layer(c, a->layer[lmap[i]].name, n, &layer))
			return ng + layer * nl + i;
	return -1;
}

uint64_t fg_model_param_count(const struct fg_model_config *c)
{
	uint64_t sum = 0;
	for (int64_t i = 0; i < fg_arch_tensor_count(c); i++) {
		const struct fg_tensor_def *d = fg_arch_tensor_def(c, i);
		sum += (uint64_t)fg_dim_value(c, d->rows) * (uint64_t)fg_dim_value(c, d->cols);
	}
	return sum;
}
