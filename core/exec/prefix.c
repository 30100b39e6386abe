/* core/exec/prefix.c - shared prompt prefixes: a prefill in two steps.
 *
 * Rows whose prompts begin alike (fg_forward_set_shared_prefix) compute that
 * beginning once.  The first step computes columns [0, split) of the rows
 * that are their own source only (the others are left out, as finished rows
 * are); the second computes columns [split, prompt_len) of every row, each
 * sharing row first taking its prefix's K/V cache from its source
 * (fg_kv_share), which works wherever the cache lives and in any cache
 * dtype since a position's K/V depends only on the tokens up to it.  Scores
 * of shared positions are the source's (the targets are the same tokens). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward_int.h"
#include "core/util/error.h"

void fg_forward_set_shared_prefix(struct fg_forward *f, const struct fg_prefix_share *s)
{
	f->share = s;
}

/* Is the sharing what forward.h promises?  One line naming the first row
 * that breaks it. */
static int share_check(const struct fg_forward *f, const int32_t *ids)
{
	const struct fg_prefix_share *sh = f->share;
	int64_t P = f->plen, C = sh->split;

	if (C < 1 || C >= P) {
		FG_ERR("shared prefixes: split %lld is outside [1, %lld)", (long long)C, (long long)P);
		return -EINVAL;
	}
	for (int64_t r = 0; r < f->nb * f->bs; r++) {
		int64_t b = r / f->bs, s = sh->src[r], pr = f->gb[b].pad[r % f->bs];
		if (s == r || pr >= C)
			continue;
		int64_t ps = s >= 0 && s < f->nb * f->bs ? f->gb[b].pad[s % f->bs] : 0;
		int bad = s < b * f->bs || s >= (b + 1) * f->bs || sh->src[s] != s || ps > pr ||
			  (f->filled > 0 && s >= f->filled);
		for (int64_t j = 0; !bad && j <= C - pr; j++)
			bad = ids[r * P + pr + j] != ids[s * P + ps + j];
		if (bad) {
			FG_ERR("shared prefixes: row %lld cannot take columns [%lld, %lld) from row %lld",
			       (long long)r, (long long)pr, (long long)C, (long long)s);
			return -EINVAL;
		}
	}
	return 0;
}

/* One step's share of the scores: positions [c0, c0 + n) of every row, in
 * the step's layout (row r's at r * n). */
struct step_scores {
	struct fg_prompt_scores p;
	int32_t *target;
};

static int step_scores_new(struct step_scores *t, const struct fg_prompt_scores *s, int64_t rows,
			   int64_t n)
{
	size_t cnt = (size_t)(rows * n);

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

/* The score of the step's position `from` (of n a row) into the caller's
 * position `to` (of P a row). */
static void score_put(const struct fg_prompt_scores *s, int64_t to, const struct step_scores *t,
		      int64_t from)
{
	s->lp[to] = t->p.lp[from];
	if (s->k) {
		memcpy(s->top_id + to * s->k, t->p.top_id + from * s->k, sizeof(int32_t) * (size_t)s->k);
		memcpy(s->top_lp + to * s->k, t->p.top_lp + from * s->k, sizeof(float) * (size_t)s->k);
	}
}

/* Row r's pad. */
static int64_t row_pad(const struct fg_forward *f, int64_t r)
{
	return f->gb[r / f->bs].pad[r % f->bs];
}

/* Does row r compute the first step?  Its own source with a token there,
 * among the rows that hold a sequence. */
static int first_step_row(const struct fg_forward *f, int64_t r)
{
	return f->share->src[r] == r && row_pad(f, r) < f->share->split &&
	       (f->filled <= 0 || r < f->filled);
}

int fg_prefill_shared(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top)
{
	const struct fg_prefix_share *sh = f->share;
	const struct fg_prompt_scores *s = f->score;
	int64_t rows = f->nb * f->bs, P = f->plen, C = sh->split, n2 = P - C;
	int32_t *ia = NULL, *ib = NULL;
	struct step_scores sa = { 0 }, sb = { 0 };
	int rc;

	if ((rc = share_check(f, ids)) || (rc = fg_mask_alloc(f)))
		return rc;
	ia = malloc(sizeof(int32_t) * (size_t)(rows * C));
	ib = malloc(sizeof(int32_t) * (size_t)(rows * n2));
	if (!ia || !ib || (s && ((rc = step_scores_new(&sa, s, rows, C)) ||
				 (rc = step_scores_new(&sb, s, rows, n2))))) {
		FG_ERR("shared prefixes: out of memory for %lld rows of %lld tokens", (long long)rows,
		       (long long)P);
		rc = -ENOMEM;
		goto out;
	}
	for (int64_t r = 0; r < rows; r++) {
		memcpy(ia + r * C, ids + r * P, sizeof(int32_t) * (size_t)C);
		memcpy(ib + r * n2, ids + r * P + C, sizeof(int32_t) * (size_t)n2);
	}
	/* Scores: a source scores the shared positions any of its rows asks for. */
	for (int64_t r = 0; s && r < rows; r++) {
		int64_t pr = row_pad(f, r), src = sh->src[r], shift = row_pad(f, src) - pr;
		int own = first_step_row(f, r);
		for (int64_t p = 0; p < P; p++) {
			int32_t t = s->target[r * P + p];
			if (t < 0)
				continue;
			if (p >= C)
				sb.target[r * n2 + p - C] = t;
			else if (own)
				sa.target[r * C + p] = t;
			else if (p >= pr)
				sa.target[src * C + p + shift] = t;
		}
	}

	/* Step one: the sources' columns [0, split). */
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		f->mask.row_live[r] = (unsigned char)first_step_row(f, r);
		f->mask.attn_pad[r] = f->mask.row_live[r] ? (int32_t)row_pad(f, r) : (int32_t)C;
		f->mask.live[r / f->bs] |= f->mask.row_live[r];
	}
	f->prefill_masked = 1;
	f->score = s ? &sa.p : NULL;
	if ((rc = fg_step(f, ia, C, NULL, NULL)))
		goto out;

	/* Step two: every row's columns [split, prompt_len), the sharing rows
	 * taking their prefix's cache first. */
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		int live = f->filled <= 0 || r < f->filled;
		f->mask.row_live[r] = (unsigned char)live;
		f->mask.attn_pad[r] = live ? (int32_t)row_pad(f, r) : (int32_t)P;
		f->mask.live[r / f->bs] |= (unsigned char)live;
		if (live && sh->src[r] != r && row_pad(f, r) < C)
			f->stats.shared_positions += (uint64_t)(C - row_pad(f, r));
	}
	f->score = s ? &sb.p : NULL;
	f->sharing = 1;
	rc = fg_step(f, ib, n2, logits, top);
	f->sharing = 0;
	if (rc)
		goto out;

	for (int64_t r = 0; s && r < rows; r++) {
		int64_t pr = row_pad(f, r), src = sh->src[r], shift = row_pad(f, src) - pr;
		int own = first_step_row(f, r);
		for (int64_t p = 0; p < P; p++) {
			if (s->target[r * P + p] < 0)
				continue;
			if (p >= C)
				score_put(s, r * P + p, &sb, r * n2 + p - C);
			else if (own)
				score_put(s, r * P + p, &sa, r * C + p);
			else if (p >= pr)
				score_put(s, r * P + p, &sa, src * C + p + shift);
		}
	}
out:
	f->score = s;
	free(ia);
	free(ib);
	step_scores_free(&sa);
	step_scores_free(&sb);
	return rc;
}
