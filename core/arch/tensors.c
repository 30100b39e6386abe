/* core/arch/tensors.c - a family's tensor table as the model's list of
 * tensors: canonical names, shapes, lookup of a checkpoint's names. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/arch/arch.h"
#include "core/util/error.h"

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
	case FG_DIM_EXPERTS:
		return c->experts;
	case FG_DIM_HEAD:
		return c->head_dim;
	case FG_DIM_SHARED_FFN:
		return c->shared_ffn;
	case FG_DIM_ROW:
		return 1;
	}
	return 0;
}

int64_t fg_ws_rows(const struct fg_model_config *c, const struct fg_workspace_def *w, int64_t bs,
		   int64_t tokens)
{
	switch (w->per_token) {
	case FG_WS_PER_TOKEN:
		return bs * tokens;
	case FG_WS_PER_ROUTE:
		return bs * tokens * (c->experts_per_tok > 0 ? c->experts_per_tok : 1);
	default:
		return bs;
	}
}

int fg_arch_present(const struct fg_model_config *c, const struct fg_tensor_def *d)
{
	return (d->needs & ~c->features) == 0 && (d->unless & c->features) == 0 &&
	       FG_TD_EXPERT_OF(d->flags) < c->experts;
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

/* A table name is a format string (the layer's "%d"): one conversion, no
 * other, so naming layer l can neither read a missing argument nor write. */
static int fg_name_ok(const char *name, int per_layer)
{
	int convs = 0;
	for (const char *p = name; (p = strchr(p, '%')); p += 2) {
		if (p[1] != 'd')
			return 0;
		convs++;
	}
	return convs == per_layer && name[0];
}

int fg_arch_check(const struct fg_arch *a)
{
	const struct fg_tensor_def *tab[2] = { a->globals, a->layer };
	int n[2] = { a->nglobals, a->nlayer };

	for (int g = 0; g < 2; g++) {
		if (n[g] < 0 || n[g] > FG_ARCH_TABLE_MAX) {
			FG_ERR("family %s: %d %s tensors; at most %d are supported", a->name, n[g],
			       g ? "per-layer" : "global", FG_ARCH_TABLE_MAX);
			return -EINVAL;
		}
		for (int i = 0; i < n[g]; i++) {
			const struct fg_tensor_def *d = &tab[g][i];
			/* the schedule runs globals in the input and output blocks,
			 * a layer's tensors in its attention and MLP blocks */
			int block_ok = g ? d->block == FG_BLOCK_ATTN || d->block == FG_BLOCK_MLP
					 : d->block == FG_BLOCK_INPUT || d->block == FG_BLOCK_OUTPUT;
			if (!d->name || !fg_name_ok(d->name, g) || !block_ok) {
				FG_ERR("family %s: %s tensor %d (%s) is malformed: each entry needs a name (a per-layer one with one \"%%d\" for the layer, a global one with no \"%%\") and a block of its kind",
				       a->name, g ? "per-layer" : "global", i,
				       d->name ? d->name : "no name");
				return -EINVAL;
			}
		}
	}
	for (int i = 0; i < a->nalias; i++)
		if (!a->alias[i] || a->alias_of[i] < 0 || a->alias_of[i] >= a->nglobals) {
			FG_ERR("family %s: alias %d names no global tensor", a->name, i);
			return -EINVAL;
		}
	if (a->nworkspace < 0 || a->nworkspace > FG_WS_MAX) {
		FG_ERR("family %s: %d workspaces; at most %d are supported", a->name, a->nworkspace,
		       FG_WS_MAX);
		return -EINVAL;
	}
	for (int i = 0; i < a->nworkspace; i++)
		if (!a->workspace[i].name) {
			FG_ERR("family %s: workspace %d has no name", a->name, i);
			return -EINVAL;
		}
	return 0;
}

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
