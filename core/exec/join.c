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
 * with a prefill's op, as they would have alone. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward_int.h"
#include "core/util/error.h"

int fg_forward_can_join(const struct fg_forward *f)
{
	return !f->pipe && !f->plan.delegate && f->cdt != FG_DTYPE_Q4_COLS;
}

void fg_forward_columns(const struct fg_forward *f, int64_t *now, int64_t *total)
{
	*now = f->step;
	*total = f->total;
}

int fg_forward_join(struct fg_forward *f, const unsigned char *join, const int32_t *ids,
		    const int32_t *pad, int64_t n, float *logits, int32_t *top,
		    const struct fg_prompt_scores *s)
{
	int64_t rows = f->nb * f->bs, c = f->step;
	unsigned char *was = NULL;
	int rc, any = 0;

	if (!fg_forward_can_join(f))
		return -ENOTSUP;
	if (c == 0 || n < 1 || n > c || c >= f->total) {
		FG_ERR("join: %lld prompt columns at column %lld of %lld: need 1 <= n <= the columns computed, and room after",
		       (long long)n, (long long)c, (long long)f->total);
		return -EINVAL;
	}
	for (int64_t r = 0; r < rows; r++) {
		if (!join[r])
			continue;
		if (pad[r] < 0 || pad[r] >= n || (f->filled > 0 && r >= f->filled)) {
			FG_ERR("join: row %lld: pad %d of %lld columns (or a row past the filled ones)",
			       (long long)r, pad[r], (long long)n);
			return -EINVAL;
		}
		for (int64_t i = pad[r]; i < n; i++)
			if (ids[r * n + i] < 0 || ids[r * n + i] >= f->cfg->vocab) {
				FG_ERR("join: row %lld: token id %d out of range: %s has %lld tokens",
				       (long long)r, ids[r * n + i], f->cfg->name,
				       (long long)f->cfg->vocab);
				return -EINVAL;
			}
		any = 1;
	}
	if (!any)
		return 0;
	if ((rc = fg_mask_alloc(f)))
		return rc;
	if (!f->join_pad && !(f->join_pad = malloc(sizeof(int32_t) * (size_t)rows)))
		return -ENOMEM;
	if (!(was = malloc((size_t)rows)))
		return -ENOMEM;
	/* The step sees the joining rows only; the padding of a row's window
	 * holds some valid id (the step embeds every row). */
	int32_t *win = malloc(sizeof(int32_t) * (size_t)(rows * n));
	if (!win) {
		free(was);
		return -ENOMEM;
	}
	memcpy(was, f->mask.row_live, (size_t)rows);
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		int on = join[r] != 0;
		f->mask.row_live[r] = (unsigned char)on;
		f->mask.live[r / f->bs] |= (unsigned char)on;
		f->mask.attn_pad[r] = on ? (int32_t)(c - n + pad[r]) : (int32_t)c;
		f->join_pad[r] = on ? pad[r] : (int32_t)n;
		if (on)
			f->gb[r / f->bs].pad[r % f->bs] = (int32_t)(c - n + pad[r]);
		for (int64_t i = 0; i < n; i++)
			win[r * n + i] = on && i >= pad[r] ? ids[r * n + i] : f->cfg->pad_id;
	}
	int masked = f->prefill_masked;
	f->joining = 1;
	f->prefill_masked = 1; /* (the mask holds from column 0 on too) */
	f->score = s;
	f->step = c - n;
	rc = fg_step(f, win, n, logits, top); /* (back at column c when it succeeds) */
	f->step = c;
	f->joining = 0;
	f->prefill_masked = masked;
	f->score = NULL;
	/* Live in the next decode steps: the rows that were, and the joined. */
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		f->mask.row_live[r] = (unsigned char)(was[r] || join[r]);
		f->mask.live[r / f->bs] |= f->mask.row_live[r];
	}
	free(win);
	free(was);
	return rc;
}
