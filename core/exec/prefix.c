/* core/exec/prefix.c - shared prompt prefixes: a prefill in steps.
 *
 * Rows whose prompts begin alike (fg_forward_set_shared_prefix) compute that
 * beginning once, at one or more levels.  Step k computes the columns up to
 * level k's split of the rows that are their own source there only (the
 * others are left out, as finished rows are); the last step computes the
 * rest of every row.  A row computing a step first takes the columns it did
 * not compute from its source of the level before (fg_kv_share), which
 * works wherever the cache lives and in any cache dtype, since a position's
 * K/V depends only on the tokens up to it.  A shared position's scores are
 * those of the row that computed it (the targets are the same tokens). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward_int.h"
#include "core/util/error.h"

void fg_forward_set_shared_prefix(struct fg_forward *f, const struct fg_prefix_share *s)
{
	f->share = s;
}

/* Row r's pad. */
static int64_t row_pad(const struct fg_forward *f, int64_t r)
{
	return f->gb[r / f->bs].pad[r % f->bs];
}

/* Step k's columns: [first, end). */
static int64_t step_first(const struct fg_forward *f, int k)
{
	return k ? f->share->split[k - 1] : 0;
}

static int64_t step_end(const struct fg_forward *f, int k)
{
	return k < f->share->levels ? f->share->split[k] : f->plen;
}

/* Does row r compute step k?  In the last step every row that holds a
 * sequence; before, those that are their own source with a token there. */
static int computes_step(const struct fg_forward *f, int k, int64_t r)
{
	/* (a pipeline's other stages know nothing of the filled rows) */
	if (!f->pipe && f->filled > 0 && r >= f->filled)
		return 0;
	return k == f->share->levels ||
	       (f->share->src[k][r] == r && row_pad(f, r) < step_end(f, k));
}

/* Is the sharing what forward.h promises?  One line naming the first level
 * and row that break it. */
static int share_check(const struct fg_forward *f, const int32_t *ids)
{
	const struct fg_prefix_share *sh = f->share;
	int64_t P = f->plen, rows = f->nb * f->bs;

	/* Its steps attend over the cache many tokens at a time, which a ring
	 * of the window's length cannot hold ([policy] share_prefix turns the
	 * ring off: fg_plan_cache_cols). */
	if (f->cols < f->total) {
		FG_ERR("shared prefixes: this run keeps its cache as a ring of the window's %lld positions; make the run with [policy] share_prefix set (or window_ring = false)",
		       (long long)f->cols);
		return -ENOTSUP;
	}
	if (sh->levels < 1 || sh->levels > FG_SHARE_LEVELS) {
		FG_ERR("shared prefixes: %d levels, need 1 to %d", sh->levels, FG_SHARE_LEVELS);
		return -EINVAL;
	}
	for (int k = 0; k < sh->levels; k++) {
		int64_t C = sh->split[k];
		if (C <= step_first(f, k) || C >= P) {
			FG_ERR("shared prefixes: split %lld of level %d is outside [%lld, %lld)",
			       (long long)C, k, (long long)step_first(f, k) + 1, (long long)P);
			return -EINVAL;
		}
		for (int64_t r = 0; r < rows; r++) {
			int64_t b = r / f->bs, s = sh->src[k][r], pr = row_pad(f, r);
			if (s == r || pr >= C)
				continue;
			int bad = s < b * f->bs || s >= (b + 1) * f->bs || sh->src[k][s] != s ||
				  row_pad(f, s) > pr || (!f->pipe && f->filled > 0 && s >= f->filled);
			int64_t ps = bad ? 0 : row_pad(f, s);
			/* (a pipeline's other stages get no ids: rank 0 checked them) */
			for (int64_t j = 0; ids && !bad && j <= C - pr; j++)
				bad = ids[r * P + pr + j] != ids[s * P + ps + j];
			if (bad) {
				FG_ERR("shared prefixes: level %d: row %lld cannot take columns [%lld, %lld) from row %lld",
				       k, (long long)r, (long long)pr, (long long)C, (long long)s);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* Where row r's column p was computed: the step, and the row and column
 * there (a shared position is its source's, at the source's own column). */
static int computed_at(const struct fg_forward *f, int64_t *r, int64_t *p)
{
	for (;;) {
		int k = 0;
		while (k < f->share->levels && *p >= step_end(f, k))
			k++;
		if (k == f->share->levels || computes_step(f, k, *r))
			return k;
		int64_t s = f->share->src[k][*r];
		if (s == *r) /* (a row with no token there: asks for no score) */
			return k;
		*p += row_pad(f, s) - row_pad(f, *r);
		*r = s;
	}
}

/* One step's share of the scores: its columns of every row, in the step's
 * layout (row r's at r * n). */
struct step_scores {
	struct fg_prompt_scores p;
	int32_t *target;
	int64_t n;
};

static int step_scores_new(struct step_scores *t, const struct fg_prompt_scores *s, int64_t rows,
			   int64_t n)
{
	size_t cnt = (size_t)(rows * n);

	t->n = n;
	t->p = (struct fg_prompt_scores){ .k = s->k };
	t->target = malloc(sizeof(int32_t) * cnt);
	t->p.lp = malloc(sizeof(float) * cnt);
	if (s->k) {
		t->p.top_id = malloc(sizeof(int32_t) * cnt * (size_t)s->k);
		t->p.top_lp = malloc(sizeof(float) * cnt * (size_t)s->k);
	}
	t->p.target = t->target;
	if (!t->target || !t->p.lp || (s->k && (!t->p.top_id || !t->p.top_lp)))
		return -ENOMEM;
	for (size_t i = 0; i < cnt; i++)
		t->target[i] = -1;
	return 0;
}

static void step_scores_free(struct step_scores *t)
{
	free(t->target);
	free(t->p.lp);
	free(t->p.top_id);
	free(t->p.top_lp);
}

/* The caller's position `to` from the step's `from`. */
static void score_put(const struct fg_prompt_scores *s, int64_t to, const struct step_scores *t,
		      int64_t from)
{
	s->lp[to] = t->p.lp[from];
	if (s->k) {
		memcpy(s->top_id + to * s->k, t->p.top_id + from * s->k, sizeof(int32_t) * (size_t)s->k);
		memcpy(s->top_lp + to * s->k, t->p.top_lp + from * s->k, sizeof(float) * (size_t)s->k);
	}
}

int fg_prefill_shared(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top)
{
	const struct fg_prefix_share *sh = f->share;
	/* A pipeline scores on its last stage; rank 0 gets the scores at the
	 * end of the last step (fg_pipe_step_end). */
	const struct fg_prompt_scores *given = f->score;
	int remote = f->pipe && fg_pipe_has_next(f);
	const struct fg_prompt_scores *s = remote ? NULL : given;
	int64_t rows = f->nb * f->bs, P = f->plen;
	int steps = sh->levels + 1;
	int32_t *cols = NULL;
	struct step_scores sc[FG_SHARE_LEVELS + 1] = { 0 };
	int rc;

	if ((rc = share_check(f, ids)) || (rc = fg_mask_alloc(f)))
		return rc;
	cols = malloc(sizeof(int32_t) * (size_t)(rows * P));
	for (int k = 0; cols && s && k < steps; k++)
		if (step_scores_new(&sc[k], s, rows, step_end(f, k) - step_first(f, k))) {
			free(cols);
			cols = NULL;
		}
	if (!cols) {
		FG_ERR("shared prefixes: out of memory for %lld rows of %lld tokens", (long long)rows,
		       (long long)P);
		rc = -ENOMEM;
		goto out;
	}
	/* Scores: each position asked for, where it is computed. */
	for (int64_t r = 0; s && r < rows; r++)
		for (int64_t p = 0; p < P; p++) {
			int64_t at = r, col = p;
			if (s->target[r * P + p] < 0)
				continue;
			int k = computed_at(f, &at, &col);
			sc[k].target[at * sc[k].n + col - step_first(f, k)] = s->target[r * P + p];
		}

	for (int k = 0; k < steps && !rc; k++) {
		int64_t c0 = step_first(f, k), n = step_end(f, k) - c0;
		memset(f->mask.live, 0, (size_t)f->nb);
		for (int64_t r = 0; r < rows; r++) {
			int live = computes_step(f, k, r);
			f->mask.row_live[r] = (unsigned char)live;
			f->mask.attn_pad[r] = (int32_t)(live && row_pad(f, r) < c0 + n ? row_pad(f, r)
										: c0 + n);
			f->mask.live[r / f->bs] |= (unsigned char)live;
			if (ids)
				memcpy(cols + r * n, ids + r * P + c0, sizeof(int32_t) * (size_t)n);
			if (k && live && sh->src[k - 1][r] != r && row_pad(f, r) < c0)
				f->stats.shared_positions += (uint64_t)(c0 - row_pad(f, r));
		}
		f->prefill_masked = 1;
		f->sharing = k > 0;
		f->share_src = k ? sh->src[k - 1] : NULL;
		f->share_end = c0;
		f->score = s ? &sc[k].p : remote && k == steps - 1 ? given : NULL;
		/* a pipeline's results cross at every step: the last one's stay */
		int out = k == steps - 1 || f->pipe;
		rc = fg_step(f, ids ? cols : NULL, n, out ? logits : NULL, out ? top : NULL);
		f->sharing = 0;
	}
	for (int64_t r = 0; !rc && s && r < rows; r++)
		for (int64_t p = 0; p < P; p++) {
			int64_t at = r, col = p;
			if (s->target[r * P + p] < 0)
				continue;
			int k = computed_at(f, &at, &col);
			score_put(s, r * P + p, &sc[k], at * sc[k].n + col - step_first(f, k));
		}
out:
	f->score = given;
	free(cols);
	for (int k = 0; k < steps; k++)
		step_scores_free(&sc[k]);
	return rc;
}
