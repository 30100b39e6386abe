/* core/arch/tensors.c - a family's tensor table as the model's list of
 * tensors: canonical names, shapes, lookup of a checkpoint's names. */
#include <assert.h>
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
	       (!(d->flags & FG_TD_EXPERTS) || c->experts > 0);
}

int64_t fg_arch_copies(const struct fg_model_config *c, const struct fg_tensor_def *d)
{
	if (!(d->flags & FG_TD_EXPERTS))
		return 1;
	return c->experts > 0 ? c->experts : 0;
}

int fg_arch_tensor_name(const struct fg_tensor_def *d, int64_t layer, int64_t expert, char *name,
			size_t len)
{
	int n;

	if (layer < 0)
		n = snprintf(name, len, "%s", d->name);
	else if (d->flags & FG_TD_EXPERTS)
		n = snprintf(name, len, d->name, (int)layer, (int)expert);
	else
		n = snprintf(name, len, d->name, (int)layer);
	return n < 0 || (size_t)n >= len ? -EINVAL : 0;
}

/* Sort the entries keep[] accepts into the list's three runs. */
static void fg_tensor_list_fill(struct fg_tensor_list *l, const struct fg_model_config *c,
				const struct fg_tensor_def *tab, int n, const int *keep)
{
	memset(l, 0, sizeof(*l));
	l->tab = tab;
	l->experts = c->experts > 0 ? c->experts : 0;
	assert(n <= FG_ARCH_TABLE_MAX);
	for (int i = 0; i < n; i++) {
		if (!keep[i])
			continue;
		if (tab[i].flags & FG_TD_EXPERTS)
			l->run[l->nrun++] = i;
		else if (l->nrun)
			l->post[l->npost++] = i;
		else
			l->pre[l->npre++] = i;
	}
	if (!l->experts)
		l->nrun = 0;
}

void fg_tensor_list_block(struct fg_tensor_list *l, const struct fg_model_config *c,
			  enum fg_block_kind kind)
{
	const struct fg_arch *a = c->arch;
	int layer = kind == FG_BLOCK_ATTN || kind == FG_BLOCK_MLP;
	const struct fg_tensor_def *tab = layer ? a->layer : a->globals;
	int n = layer ? a->nlayer : a->nglobals, keep[FG_ARCH_TABLE_MAX];

	for (int i = 0; i < n && i < FG_ARCH_TABLE_MAX; i++)
		keep[i] = tab[i].block == kind;
	fg_tensor_list_fill(l, c, tab, n, keep);
}

void fg_tensor_list_held(struct fg_tensor_list *l, const struct fg_model_config *c, int per_layer)
{
	const struct fg_arch *a = c->arch;
	const struct fg_tensor_def *tab = per_layer ? a->layer : a->globals;
	int n = per_layer ? a->nlayer : a->nglobals, keep[FG_ARCH_TABLE_MAX];

	for (int i = 0; i < n && i < FG_ARCH_TABLE_MAX; i++)
		keep[i] = !(tab[i].flags & FG_TD_TIED) && fg_arch_present(c, &tab[i]);
	fg_tensor_list_fill(l, c, tab, n, keep);
}

int64_t fg_tensor_list_count(const struct fg_tensor_list *l)
{
	return l->npre + l->experts * l->nrun + l->npost;
}

struct fg_tensor_ref fg_tensor_list_at(const struct fg_tensor_list *l, int64_t i)
{
	int64_t runs = l->experts * l->nrun;

	assert(i >= 0 && i < fg_tensor_list_count(l));
	if (i < l->npre)
		return (struct fg_tensor_ref){ l->pre[i], -1 };
	i -= l->npre;
	if (i < runs)
		return (struct fg_tensor_ref){ l->run[i % l->nrun], i / l->nrun };
	return (struct fg_tensor_ref){ l->post[i - runs], -1 };
}

int64_t fg_tensor_list_find(const struct fg_tensor_list *l, int entry, int64_t expert)
{
	int64_t runs = l->experts * l->nrun;

	for (int i = 0; i < l->npre; i++)
		if (l->pre[i] == entry && expert < 0)
			return i;
	for (int i = 0; i < l->nrun; i++)
		if (l->run[i] == entry && expert >= 0 && expert < l->experts)
			return l->npre + expert * l->nrun + i;
	for (int i = 0; i < l->npost; i++)
		if (l->post[i] == entry && expert < 0)
			return l->npre + runs + i;
	return -1;
}

/* A table name is a format string: the layer's "%d" (and an expert's
 * second), no other conversion, so naming a tensor can neither read a
 * missing argument nor write. */
static int fg_name_ok(const char *name, int convs_needed)
{
	int convs = 0;
	for (const char *p = name; (p = strchr(p, '%')); p += 2) {
		if (p[1] != 'd')
			return 0;
		convs++;
	}
	return convs == convs_needed && name[0];
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
		int run0 = -1, run_end = -1;
		for (int i = 0; i < n[g]; i++) {
			const struct fg_tensor_def *d = &tab[g][i];
			int expert = (d->flags & FG_TD_EXPERTS) != 0;
			/* the schedule runs globals in the input and output blocks,
			 * a layer's tensors in its attention and MLP blocks */
			int block_ok = g ? d->block == FG_BLOCK_ATTN || d->block == FG_BLOCK_MLP
					 : d->block == FG_BLOCK_INPUT || d->block == FG_BLOCK_OUTPUT;
			if (!d->name || !fg_name_ok(d->name, g + expert) || !block_ok || (expert && !g)) {
				FG_ERR("family %s: %s tensor %d (%s) is malformed: each entry needs a name (a per-layer one with one \"%%d\" for the layer, an expert's with a second for the expert, a global one with no \"%%\") and a block of its kind",
				       a->name, g ? "per-layer" : "global", i,
				       d->name ? d->name : "no name");
				return -EINVAL;
			}
			/* a list repeats one run of expert entries per expert */
			if (expert && run0 < 0)
				run0 = i;
			if (expert && (run_end >= 0 || d->block != tab[g][run0].block)) {
				FG_ERR("family %s: per-layer tensor %d (%s) is an expert's apart from the others: a table's expert entries must be consecutive, in one block",
				       a->name, i, d->name);
				return -EINVAL;
			}
			if (!expert && run0 >= 0 && run_end < 0)
				run_end = i;
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
	struct fg_tensor_list g, l;

	fg_tensor_list_held(&g, c, 0);
	fg_tensor_list_held(&l, c, 1);
	return fg_tensor_list_count(&g) + fg_tensor_list_count(&l) * c->layers;
}

/* Tensor idx of the model: its table entry, layer (-1: a global), expert. */
static const struct fg_tensor_def *fg_arch_locate(const struct fg_model_config *c, int64_t idx,
						  int64_t *layer, int64_t *expert)
{
	struct fg_tensor_list g, l;

	fg_tensor_list_held(&g, c, 0);
	fg_tensor_list_held(&l, c, 1);
	int64_t ng = fg_tensor_list_count(&g), nl = fg_tensor_list_count(&l);
	if (idx < 0 || idx >= ng + nl * c->layers)
		return NULL;
	const struct fg_tensor_list *in = idx < ng ? &g : &l;
	struct fg_tensor_ref r = fg_tensor_list_at(in, idx < ng ? idx : (idx - ng) % nl);
	*layer = idx < ng ? -1 : (idx - ng) / nl;
	*expert = r.expert;
	return &in->tab[r.entry];
}

const struct fg_tensor_def *fg_arch_tensor_def(const struct fg_model_config *c, int64_t idx)
{
	int64_t layer, expert;
	return fg_arch_locate(c, idx, &layer, &expert);
}

int fg_arch_tensor_info(const struct fg_model_config *c, int64_t idx, char *name, size_t len,
			int *rank, int64_t *rows, int64_t *cols)
{
	int64_t layer, expert;
	const struct fg_tensor_def *d = fg_arch_locate(c, idx, &layer, &expert);

	if (!d || fg_arch_tensor_name(d, layer, expert, name, len))
		return -EINVAL;
	*rank = d->rows == FG_DIM_ONE ? 1 : 2;
	*rows = fg_dim_value(c, d->rows);
	*cols = fg_dim_value(c, d->cols);
	return 0;
}

/* Does `name` match the per-layer pattern `pat`?  Each "%d" of it (the
 * layer, then an expert's index) matches a decimal without leading zeros
 * below its bound (the layers, the experts); *num gets the numbers. */
static int fg_match_numbers(const char *pat, const char *name, const int64_t bound[2],
			    int64_t num[2])
{
	int k = 0;

	for (const char *mark; (mark = strstr(pat, "%d")); pat = mark + 2, k++) {
		size_t head = (size_t)(mark - pat);
		int64_t v = 0;

		if (k == 2 || strncmp(name, pat, head) != 0)
			return 0;
		name += head;
		if (*name < '0' || *name > '9' || (name[0] == '0' && name[1] >= '0' && name[1] <= '9'))
			return 0;
		while (*name >= '0' && *name <= '9') {
			v = v * 10 + (*name++ - '0');
			if (v >= bound[k])
				return 0;
		}
		num[k] = v;
	}
	return strcmp(name, pat) == 0;
}

int64_t fg_arch_tensor_index(const struct fg_model_config *c, const char *name)
{
	const struct fg_arch *a = c->arch;
	struct fg_tensor_list g, l;
	const char *n = name;
	int64_t bound[2] = { c->layers, c->experts }, num[2] = { 0, -1 };

	fg_tensor_list_held(&g, c, 0);
	fg_tensor_list_held(&l, c, 1);
	int64_t ng = fg_tensor_list_count(&g), nl = fg_tensor_list_count(&l);
	for (int p = 0; p < a->nprefixes; p++) {
		size_t len = strlen(a->prefixes[p]);
		if (strncmp(name, a->prefixes[p], len) == 0) {
			n = name + len;
			break;
		}
	}
	/* (globals have no experts: the list is its first run) */
	for (int i = 0; i < a->nalias; i++)
		if (strcmp(n, a->alias[i]) == 0)
			return fg_tensor_list_find(&g, a->alias_of[i], -1);
	for (int i = 0; i < g.npre; i++)
		if (strcmp(n, a->globals[g.pre[i]].name) == 0)
			return i;
	const int *runs[3] = { l.pre, l.run, l.post };
	int counts[3] = { l.npre, l.nrun, l.npost };
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < counts[r]; i++) {
			num[1] = -1;
			if (fg_match_numbers(a->layer[runs[r][i]].name, n, bound, num))
				return ng + num[0] * nl + fg_tensor_list_find(&l, runs[r][i], num[1]);
		}
	return -1;
}

uint64_t fg_model_param_count(const struct fg_model_config *c)
{
	struct fg_tensor_list lists[2];
	uint64_t sum[2] = { 0, 0 };

	fg_tensor_list_held(&lists[0], c, 0);
	fg_tensor_list_held(&lists[1], c, 1);
	for (int k = 0; k < 2; k++) {
		const struct fg_tensor_list *l = &lists[k];
		const int *runs[3] = { l->pre, l->run, l->post };
		int counts[3] = { l->npre, l->nrun, l->npost };
		for (int r = 0; r < 3; r++)
			for (int i = 0; i < counts[r]; i++) {
				const struct fg_tensor_def *d = &l->tab[runs[r][i]];
				sum[k] += (uint64_t)fg_dim_value(c, d->rows) * (uint64_t)fg_dim_value(c, d->cols) *
					  (uint64_t)(r == 1 ? l->experts : 1);
			}
	}
	return sum[0] + sum[1] * (uint64_t)c->layers;
}
