/* core/exec/join.c - rows joining a running batch (continuous batching).
 *
 * A row whose sequence finished takes a new one between decode steps.  Its
 * prompt is placed so that it ends at the run's current column c (its pad
 * becomes c - its length), and all joining prompts are computed in one step
 * over the last n columns, [c - n, c): a prefill of the joining rows alone,
 * the others left out as finished rows are.  Three things keep the others
 * whole: their attention sees nothing this step, only the joining rows'
 * K/V rows are appended to the cache (kv_cache.c), and the cache moves skip
 * the rows left out.  The joining rows attend within the step's columns
 * with a prefill's op, as they would have alone.
 *
 * In a pipeline, rank 0's join first sends the joining rows and their pads
 * to the other stages (pipe.c), which make the same join on their layers;
 * what a join may do there is what every stage allows (agreed once a run is
 * made: fg_pipe_agree_join_caps), so that the rows they exchange lie alike. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward_int.h"
#include "core/util/error.h"

/* Dense: the joining rows of each GPU batch gathered at its first rows for
 * the step (their K/V go to their own cache rows, on the compute tier or in
 * the cache slot, which moves their rows: fg_cache_dead), unless attention
 * is on the host: the step then computes the joining prompts only, not the
 * rows before the last joining one.  Ring: the columns wrap where the
 * backend runs decode attention over a ring. */
unsigned fg_join_own_caps(const struct fg_forward *f)
{
	unsigned caps = 0;
	if (!f->plan.delegate)
		caps |= FG_JOIN_DENSE;
	if (fg_backend_supports(f->be, FG_OP_ATTENTION_RING, f->cdt))
		caps |= FG_JOIN_RING;
	return caps;
}

static unsigned caps(const struct fg_forward *f)
{
	return f->pipe ? fg_pipe_join_caps(f) : fg_join_own_caps(f);
}

int fg_forward_wraps(const struct fg_forward *f)
{
	return (caps(f) & FG_JOIN_RING) != 0;
}

void fg_forward_columns(const struct fg_forward *f, int64_t *now, int64_t *total,
			int64_t *prompt_cap)
{
	*now = f->step;
	*total = f->total;
	*prompt_cap = f->cap_plen;
}

static int dense(const struct fg_forward *f)
{
	return (caps(f) & FG_JOIN_DENSE) != 0;
}

/* The step's outputs of dense row i of GPU batch k moved to row join_row[i]
 * (rows only move up: each is read before it is written). */
static void spread(struct fg_forward *f, const int64_t *cnt, float *logits, int32_t *top,
		   const struct fg_prompt_scores *s, int64_t n)
{
	const struct fg_token_scores *t = f->tok_scores;
	int64_t V = f->cfg->vocab;

	for (int64_t k = 0; k < f->nb; k++)
		for (int64_t i = cnt[k]; i-- > 0;) {
			int64_t from = k * f->bs + i, to = k * f->bs + f->join_row[from];
			if (from == to)
				continue;
			if (top)
				top[to] = top[from];
			if (logits)
				memcpy(logits + to * V, logits + from * V, sizeof(float) * (size_t)V);
			if (t)
				t->lp[to] = t->lp[from];
			if (t && t->k) {
				memcpy(t->top_id + to * t->k, t->top_id + from * t->k,
				       sizeof(int32_t) * (size_t)t->k);
				memcpy(t->top_lp + to * t->k, t->top_lp + from * t->k,
				       sizeof(float) * (size_t)t->k);
			}
			if (s)
				memcpy(s->lp + to * n, s->lp + from * n, sizeof(float) * (size_t)n);
			if (s && s->k) {
				memcpy(s->top_id + to * n * s->k, s->top_id + from * n * s->k,
				       sizeof(int32_t) * (size_t)(n * s->k));
				memcpy(s->top_lp + to * n * s->k, s->top_lp + from * n * s->k,
				       sizeof(float) * (size_t)(n * s->k));
			}
		}
}

/* Is the join one this run makes?  1: rows join, 0: none, else -errno.
 * ids may be NULL on a pipeline's stage that does not embed them. */
static int check(const struct fg_forward *f, const unsigned char *join, const int32_t *ids,
		 const int32_t *pad, int64_t n, const struct fg_prompt_scores *s)
{
	int64_t rows = f->nb * f->bs, c = f->step;
	int any = 0;

	if (c == 0 || n < 1 || n > c || n > f->cap_plen || c >= INT32_MAX ||
	    (c >= f->total && !fg_forward_wraps(f))) {
		FG_ERR("join: %lld prompt columns at column %lld of %lld: need 1 <= n <= the columns computed and the run's %lld prompt columns, and room after",
		       (long long)n, (long long)c, (long long)f->total, (long long)f->cap_plen);
		return -EINVAL;
	}
	if (!ids && fg_stage_first(&f->m->stage)) {
		FG_ERR("join: no token ids for the stage that embeds them");
		return -EINVAL;
	}
	/* (the last stage would need the targets, rank 0 the scores) */
	if (s && f->pipe) {
		FG_ERR("join: a pipeline of stages scores no joining prompts");
		return -ENOTSUP;
	}
	for (int64_t r = 0; r < rows; r++) {
		if (!join[r])
			continue;
		if (pad[r] < 0 || pad[r] >= n) {
			FG_ERR("join: row %lld: pad %d of %lld columns",
			       (long long)r, pad[r], (long long)n);
			return -EINVAL;
		}
		for (int64_t i = pad[r]; ids && i < n; i++)
			if (ids[r * n + i] < 0 || ids[r * n + i] >= f->cfg->vocab) {
				FG_ERR("join: row %lld: token id %d out of range: %s has %lld tokens",
				       (long long)r, ids[r * n + i], f->cfg->name,
				       (long long)f->cfg->vocab);
				return -EINVAL;
			}
		any = 1;
	}
	return any;
}

int fg_forward_join(struct fg_forward *f, const unsigned char *join, const int32_t *ids,
		    const int32_t *pad, int64_t n, float *logits, int32_t *top,
		    const struct fg_prompt_scores *s)
{
	int64_t rows = f->nb * f->bs, c = f->step, plen = f->plen;
	int rc, packed = dense(f);

	if ((rc = check(f, join, ids, pad, n, s)) <= 0)
		return rc;
	if ((rc = fg_mask_alloc(f)))
		return rc;
	if (!f->join_pad && !(f->join_pad = malloc(sizeof(int32_t) * (size_t)rows)))
		return -ENOMEM;
	if (packed && !f->join_row && !(f->join_row = malloc(sizeof(int32_t) * (size_t)rows)))
		return -ENOMEM;
	unsigned char *was = malloc((size_t)rows);
	int32_t *win = ids ? malloc(sizeof(int32_t) * (size_t)(rows * n)) : NULL;
	int32_t *pads = malloc(sizeof(int32_t) * (size_t)rows); /* the GPU batches' own */
	int32_t *target = s && packed ? malloc(sizeof(int32_t) * (size_t)(rows * n)) : NULL;
	int64_t *cnt = calloc((size_t)f->nb, sizeof(int64_t));
	/* rows drawn by the backend: their parameters gathered with them */
	const struct fg_row_sampling *drawn = packed ? f->sampling : NULL;
	float *gt = drawn ? calloc((size_t)rows, sizeof(float)) : NULL;
	float *gp = drawn ? calloc((size_t)rows, sizeof(float)) : NULL;
	int32_t *gk = drawn ? calloc((size_t)rows, sizeof(int32_t)) : NULL;
	uint64_t *gd = drawn ? calloc((size_t)rows, sizeof(uint64_t)) : NULL;
	struct fg_row_sampling gs = { gt, gk, gp, gd };
	if (!was || (ids && !win) || !pads || !cnt || (s && packed && !target) ||
	    (drawn && (!gt || !gp || !gk || !gd))) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(was, f->mask.row_live, (size_t)rows);
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t k = 0; k < f->nb; k++)
		memcpy(pads + k * f->bs, f->gb[k].pad, sizeof(int32_t) * (size_t)f->bs);
	/* The step's row i: the joining row `from` (dense: the batch's i-th
	 * joining one); the padding of a row's window holds some valid id. */
	memset(f->mask.row_live, 0, (size_t)rows);
	for (int64_t r = 0; r < rows; r++) {
		int64_t k = r / f->bs, i = packed ? k * f->bs + cnt[k] : r;
		if (!join[r])
			continue;
		if (packed)
			f->join_row[i] = (int32_t)(r % f->bs);
		if (drawn) {
			gt[i] = drawn->temperature[r];
			gp[i] = drawn->top_p[r];
			gk[i] = drawn->top_k[r];
			gd[i] = drawn->draw[r];
		}
		cnt[k]++;
		f->mask.row_live[i] = 1;
		f->mask.live[k] = 1;
		f->join_pad[i] = pad[r];
		f->gb[k].pad[i % f->bs] = (int32_t)(c - n + pad[r]);
		for (int64_t j = 0; j < n; j++) {
			if (win)
				win[i * n + j] = j >= pad[r] ? ids[r * n + j] : f->cfg->pad_id;
			if (target)
				target[i * n + j] = s->target[r * n + j];
		}
	}
	for (int64_t r = 0; r < rows; r++) {
		int64_t k = r / f->bs;
		int on = f->mask.row_live[r];
		if (!on) {
			f->join_pad[r] = (int32_t)n;
			for (int64_t j = 0; j < n; j++) {
				if (win)
					win[r * n + j] = f->cfg->pad_id;
				if (target)
					target[r * n + j] = -1;
			}
		}
		f->mask.attn_pad[r] = on ? f->gb[k].pad[r % f->bs] : (int32_t)c;
	}
	struct fg_prompt_scores ps;
	if (target) {
		ps = *s;
		ps.target = target;
	}
	int masked = f->prefill_masked;
	f->joining = 1;
	f->join_on = join;
	f->join_dense = packed;
	f->prefill_masked = 1; /* (the mask holds from column 0 on too) */
	f->score = target ? &ps : s;
	f->step = c - n;
	if (drawn)
		f->sampling = &gs;
	if (n > plen) { /* the workspaces hold the run's prompt columns */
		f->plen = n;
		rc = fg_workspace_views(f);
	}
	/* (the other stages hear of it once nothing can fail before the step) */
	if (!rc && f->pipe)
		rc = fg_pipe_join_command(f, join, pad, n, logits != NULL, top != NULL);
	if (!rc)
		rc = fg_step(f, win, n, logits, top); /* (back at column c when it succeeds) */
	f->step = c;
	if (drawn)
		f->sampling = drawn;
	f->joining = 0;
	f->join_on = NULL;
	f->join_dense = 0;
	f->prefill_masked = masked;
	f->score = NULL;
	if (f->plen != plen) {
		f->plen = plen;
		int r2 = fg_workspace_views(f);
		rc = rc ? rc : r2;
	}
	if (!rc && packed)
		spread(f, cnt, logits, top, s, n);
	/* Each row's own pad back; a joined row's from its prompt. */
	for (int64_t r = 0; r < rows; r++)
		f->gb[r / f->bs].pad[r % f->bs] = join[r] ? (int32_t)(c - n + pad[r]) : pads[r];
	/* Live in the next decode steps: the rows that were, and the joined. */
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		f->mask.row_live[r] = (unsigned char)(was[r] || join[r]);
		f->mask.live[r / f->bs] |= f->mask.row_live[r];
	}
out:
	free(was);
	free(win);
	free(pads);
	free(target);
	free(cnt);
	free(gt);
	free(gp);
	free(gk);
	free(gd);
	return rc;
}
