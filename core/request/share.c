/* core/request/share.c - which rows of a batch share their prompts'
 * beginnings ([policy] share_prefix), at two levels: a GPU batch's rows in
 * groups that begin alike (a subject's few-shot header), and within a group
 * subgroups that begin alike for longer still (a question's choices).  The
 * executor computes each shared beginning once (fg_forward_set_shared_prefix);
 * this file only chooses, from the tokens. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward.h"
#include "core/request/job.h"

/* Tokens the two prompts begin with alike. */
static int64_t common_prefix(const struct fg_job *a, const struct fg_job *b)
{
	size_t n = 0, most = a->n_prompt < b->n_prompt ? a->n_prompt : b->n_prompt;

	while (n < most && a->prompt[n] == b->prompt[n])
		n++;
	return (int64_t)n;
}

int fg_share_token_order(const struct fg_job *x, const struct fg_job *y)
{
	int64_t n = common_prefix(x, y);

	if (n == (int64_t)x->n_prompt || n == (int64_t)y->n_prompt)
		return 0;
	return x->prompt[n] < y->prompt[n] ? -1 : 1;
}

/* The prompts' tokens in order, then the index. */
static int by_tokens(const void *a, const void *b)
{
	const struct fg_job *x = *(struct fg_job *const *)a, *y = *(struct fg_job *const *)b;
	int o = fg_share_token_order(x, y);

	if (o)
		return o;
	if (x->n_prompt != y->n_prompt)
		return x->n_prompt < y->n_prompt ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* The longest prompt of jobs[i, j) (the first of them on ties). */
static size_t longest(struct fg_job **jobs, size_t i, size_t j)
{
	size_t top = i;

	for (size_t k = i + 1; k < j; k++)
		if (jobs[k]->n_prompt > jobs[top]->n_prompt)
			top = k;
	return top;
}

void fg_share_group(struct fg_job **jobs, size_t n, int64_t least, unsigned char *rank)
{
	struct fg_job **tmp = malloc(sizeof(*tmp) * (n ? n : 1));
	unsigned char *rk = malloc(n ? n : 1);

	if (!tmp || !rk) { /* no groups: nothing shared, only slower */
		memset(rank, 0, n);
		free(tmp);
		free(rk);
		return;
	}
	qsort(jobs, n, sizeof(*jobs), by_tokens);
	for (size_t i = 0, j; i < n; i = j) {
		/* a group: neighbours in token order alike for `least` tokens or more */
		int64_t shared = INT64_MAX;
		for (j = i + 1; j < n; j++) {
			int64_t c = common_prefix(jobs[j - 1], jobs[j]);
			if (c < least)
				break;
			shared = c < shared ? c : shared;
		}
		size_t lead = longest(jobs, i, j);
		/* its subgroups: alike for `least` tokens more than the group */
		for (size_t a = i, b; a < j; a = b) {
			for (b = a + 1; b < j && shared < INT64_MAX &&
					common_prefix(jobs[b - 1], jobs[b]) >= shared + least;
			     b++)
				;
			size_t sub = lead >= a && lead < b ? lead : longest(jobs, a, b);
			for (size_t k = a; k < b; k++)
				rk[k] = k == lead ? 0 : k == sub ? 1 : 2;
		}
	}
	/* leaders and rows on their own, then subgroups' leaders, then the rest */
	size_t at = 0;
	for (unsigned char want = 0; want < 3; want++)
		for (size_t k = 0; k < n; k++)
			if (rk[k] == want) {
				tmp[at] = jobs[k];
				rank[at++] = want;
			}
	memcpy(jobs, tmp, sizeof(*jobs) * n);
	free(tmp);
	free(rk);
}

/* Positions the prefill computes with these sources: each step's columns
 * times the rows of each GPU batch up to the last one computing it (the
 * rows before it are computed too), the last step every row. */
static int64_t plan_cost(const struct fg_share_plan *sp, const struct fg_prefix_share *sh)
{
	int64_t cost = 0, first = 0;

	for (int k = 0; k <= sh->levels; k++) {
		int64_t end = k < sh->levels ? sh->split[k] : sp->plen;
		if (k == sh->levels) {
			cost += sp->count * (end - first);
			break;
		}
		for (int64_t g = 0; g < sp->count; g += sp->bs) {
			int64_t last = -1;
			for (int64_t r = g; r < g + sp->bs && r < sp->count; r++)
				if (sh->src[k][r] == r && sp->pad[r] < end)
					last = r - g;
			cost += (last + 1) * (end - first);
		}
		first = end;
	}
	return cost;
}

/* Level k's sources for split `split`: each row that may share at level k
 * (its best source's common tokens reach one past the split, `least` or
 * more of them its own) takes from it; the others from themselves. */
static void level_sources(const struct fg_share_plan *sp, int k, int64_t split, int32_t *src)
{
	for (int64_t r = 0; r < sp->count; r++)
		src[r] = sp->end[k][r] >= split && split - sp->pad[r] >= sp->least ? sp->from[k][r]
										  : (int32_t)r;
}

/* Level k's best split after the levels before it: the candidate (a row's
 * own end) that computes the fewest positions; 0: none does better. */
static int64_t best_split(struct fg_share_plan *sp, struct fg_prefix_share *sh, int k)
{
	int64_t best = 0, best_cost = plan_cost(sp, sh);

	sh->levels = k + 1;
	for (int64_t c = 0; c < sp->count; c++) {
		int64_t split = sp->end[k][c];
		if (!split || (k && split <= sh->split[k - 1]))
			continue;
		sh->split[k] = split;
		level_sources(sp, k, split, sp->src[k]);
		int64_t cost = plan_cost(sp, sh);
		if (cost < best_cost || (cost == best_cost && best && split < best))
			best = split, best_cost = cost;
	}
	sh->levels = k;
	if (!best)
		for (int64_t r = 0; r < sp->rows; r++)
			sp->src[k][r] = (int32_t)r;
	if (best) {
		sh->levels = k + 1;
		sh->split[k] = best;
		level_sources(sp, k, best, sp->src[k]);
	}
	return best;
}

int fg_share_plan(struct fg_share_plan *sp, struct fg_prefix_share *sh)
{
	memset(sh, 0, sizeof(*sh));
	for (int k = 0; k < 2; k++) {
		sh->src[k] = sp->src[k];
		for (int64_t r = 0; r < sp->rows; r++)
			sp->src[k][r] = (int32_t)r;
	}
	/* Each row's source at each level: the row of a lower rank in its GPU
	 * batch it begins most like (level 0: the leaders, 1: the leaders of
	 * subgroups too), and how far their common tokens reach. */
	for (int k = 0; k < 2; k++)
		for (int64_t r = 0; r < sp->count; r++) {
			int64_t g = r - r % sp->bs, common = 0;
			sp->from[k][r] = (int32_t)r;
			sp->end[k][r] = 0;
			for (int64_t s = g; sp->rank[r] > k && s < g + sp->bs && s < sp->count; s++) {
				int64_t c = sp->rank[s] <= k && sp->pad[s] <= sp->pad[r]
						    ? common_prefix(sp->jobs[r], sp->jobs[s])
						    : 0;
				if (c > common)
					common = c, sp->from[k][r] = (int32_t)s;
			}
			if (common >= 2)
				sp->end[k][r] = sp->pad[r] + common - 1;
		}
	if (best_split(sp, sh, 0))
		best_split(sp, sh, 1);
	return sh->levels;
}
