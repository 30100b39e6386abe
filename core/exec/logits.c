/* core/exec/logits.c - the output block's logits out of the compute tier:
 * as floats, and/or each row's next token (the backend's argmax, or its
 * sample op, where it has one, which spares copying whole rows) with its
 * log-probability where asked; when scoring a prompt, the log-probability
 * of every position asked for, chunks of positions at a time, taken where
 * the logits are (the logprob op) or else from host copies. */
#include <errno.h>
#include <stdlib.h>

#include "core/exec/forward_int.h"
#include "core/sampling/logprob.h"
#include "core/sampling/sample.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#include <fgcore/half.h>

/* `rows` rows of logits (contiguous, in the compute tier) as floats in out;
 * stage: room for them in the activation type when that is fp16 (may be out,
 * which is then converted in place, from the end). */
static int logits_to_host(struct fg_forward *f, const void *src, int64_t rows, float *out,
			  void *stage)
{
	int64_t cnt = rows * f->cfg->vocab;
	void *dst = f->act == FG_DTYPE_F32 ? (void *)out : stage;
	int rc;

	if ((rc = fg_backend_copy(f->be, f->stream, dst, src, (size_t)cnt * f->asz)) ||
	    (rc = fg_backend_stream_sync(f->be, f->stream)))
		return rc;
	if (f->act == FG_DTYPE_F16) {
		const uint16_t *h = stage;
		for (int64_t i = cnt - 1; i >= 0; i--)
			out[i] = fg_half_to_float(h[i]);
	}
	return 0;
}

/* The first `rows` rows of the logits workspace (the rows computed). */
static int fg_logits_to_host(struct fg_forward *f, int64_t rows, float *out)
{
	return logits_to_host(f, f->logits.data, rows, out, f->out.logits);
}

/* Rows [row0, row0 + rows) of the step drawn by the backend. */
static int fg_logits_sample(struct fg_forward *f, int64_t row0, int64_t rows, int32_t *top)
{
	const struct fg_row_sampling *s = f->sampling;
	struct fg_sample_args a = {
		.logits = fg_rows(f->logits, 0, rows),
		.temperature = s->temperature + row0, .top_k = s->top_k + row0,
		.top_p = s->top_p + row0, .draw = s->draw + row0, .out = top,
	};
	return fg_backend_sample(f->be, f->stream, &a);
}

static int fg_logits_argmax(struct fg_forward *f, int64_t rows, int32_t *top)
{
	int64_t V = f->cfg->vocab;
	struct fg_tensor lg = fg_rows(f->logits, 0, rows);
	int rc = fg_backend_argmax(f->be, f->stream, &lg, top);

	if (rc != -ENOTSUP)
		return rc;
	if ((rc = fg_logits_to_host(f, rows, f->out.argmax)))
		return rc;
	for (int64_t r = 0; r < rows; r++)
		top[r] = fg_argmax(f->out.argmax + r * V, V);
	return 0;
}

/* The chunk buffer of scored positions: as many rows as [policy]
 * score_chunk holds (up to a GPU batch's positions), at least the logits
 * workspace's bs rows, which it is with no room for more; host rows where
 * the backend has no logprob op. */
static int score_buf_make(struct fg_forward *f)
{
	struct fg_score_buf *b = &f->sbuf;
	int64_t V = f->cfg->vocab, rows = (int64_t)(f->env.policy.score_chunk / (uint64_t)(V * f->asz));
	int64_t most = f->bs * f->cap_plen;

	if (b->rows)
		return 0;
	rows = rows < most ? rows : most;
	b->logits = fg_rows(f->logits, 0, f->bs);
	if (rows > f->bs) {
		if (fg_tier_alloc(f->tier[FG_ROLE_COMPUTE], (uint64_t)(rows * V) * f->asz, &b->dev)) {
			FG_LOG(FG_LOG_DEBUG, "scoring: no room for %lld rows of logits (%s): chunks of %lld",
			       (long long)rows, fg_last_error(), (long long)f->bs);
			fg_clear_error();
		} else {
			b->logits = fg_view(b->dev.addr, f->act, rows, V);
		}
	}
	if (!fg_backend_can_logprob(f->be) &&
	    !(b->host = malloc(sizeof(float) * (size_t)(b->logits.rows * V)))) {
		FG_ERR("scoring: out of memory for %lld rows of logits on the host",
		       (long long)b->logits.rows);
		return -ENOMEM;
	}
	b->rows = b->logits.rows;
	return 0;
}

void fg_logits_free(struct fg_forward *f)
{
	if (f->sbuf.dev.size)
		fg_tier_free(f->tier[FG_ROLE_COMPUTE], &f->sbuf.dev);
	free(f->sbuf.host);
	f->sbuf = (struct fg_score_buf){ 0 };
}

/* Log-probabilities of the rows of lg (contiguous): the backend's op, else
 * the host's from copies into f->sbuf.host. */
static int logits_lp(struct fg_forward *f, struct fg_tensor lg, const int32_t *target, int k,
		     float *lp, int32_t *top_id, float *top_lp)
{
	struct fg_logprob_args a = { lg, target, k, lp, top_id, top_lp };
	int rc = fg_backend_logprob(f->be, f->stream, &a);

	if (rc != -ENOTSUP)
		return rc;
	if ((rc = logits_to_host(f, lg.data, lg.rows, f->sbuf.host, f->sbuf.host)))
		return rc;
	fg_logprob_rows(f->sbuf.host, lg.rows, lg.cols, target, k, lp, top_id, top_lp);
	return 0;
}

int fg_logits_score(struct fg_forward *f, struct fg_block_ctx *x, int64_t k,
		    int (*body)(struct fg_block_ctx *x))
{
	const struct fg_prompt_scores *s = f->score;
	int64_t n = x->n, rows = x->bs * n, at = k * f->bs * n; /* GPU batch k's first position */
	const int32_t *tg = s->target + at;
	struct fg_tensor out_rows = x->out_rows, logits = x->logits;
	double t0 = fg_now();
	int rc;

	if ((rc = score_buf_make(f)))
		return rc;
	/* Row s * n + p of h is position p of sequence s: a chunk is a run of
	 * rows from a scored one, cut at the buffer's size and trimmed to the
	 * last scored one (padding and last positions inside it cost a row). */
	for (int64_t a = 0; !rc;) {
		while (a < rows && tg[a] < 0)
			a++;
		if (a == rows)
			break;
		int64_t e = a + f->sbuf.rows < rows ? a + f->sbuf.rows : rows;
		while (tg[e - 1] < 0)
			e--;
		x->out_rows = fg_rows(x->h, a, e - a);
		x->logits = fg_rows(f->sbuf.logits, 0, e - a);
		if (!(rc = body(x)))
			rc = logits_lp(f, x->logits, tg + a, s->k, s->lp + at + a,
				       s->k ? s->top_id + (at + a) * s->k : NULL,
				       s->k ? s->top_lp + (at + a) * s->k : NULL);
		a = e;
	}
	x->out_rows = out_rows;
	x->logits = logits;
	f->stats.logits_s += fg_now() - t0;
	return rc;
}

int fg_logits_out(struct fg_forward *f, int64_t row0, int64_t rows, float *logits, int32_t *top)
{
	const struct fg_token_scores *t = f->tok_scores;
	double t0 = fg_now();
	int rc = fg_devtime_mark(f, FG_DEV_COMPUTE);

	if (!rc && logits)
		rc = fg_logits_to_host(f, rows, logits);
	if (!rc && top)
		rc = f->sampling ? fg_logits_sample(f, row0, rows, top)
				 : fg_logits_argmax(f, rows, top);
	/* The tokens just chosen, scored where their logits are. */
	if (!rc && top && t) {
		struct fg_logprob_args a = { fg_rows(f->logits, 0, rows), top, t->k, t->lp + row0,
					     t->k ? t->top_id + row0 * t->k : NULL,
					     t->k ? t->top_lp + row0 * t->k : NULL };
		rc = fg_backend_logprob(f->be, f->stream, &a);
	}
	if (!rc)
		rc = fg_devtime_mark(f, FG_DEV_LOGITS);
	f->stats.logits_s += fg_now() - t0;
	return rc;
}
