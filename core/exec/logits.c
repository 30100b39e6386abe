/* core/exec/logits.c - the output block's logits out of the compute tier:
 * as floats, and/or each row's next token (the backend's argmax, or its
 * sample op, where it has one, which spares copying whole rows); when
 * scoring a prompt, those of every prompt position. */
#include <errno.h>

#include "core/exec/forward_int.h"
#include "core/sampling/sample.h"
#include "core/util/clock.h"

#include <fgcore/half.h>

/* The first `rows` rows of the logits workspace (the rows computed). */
static int fg_logits_to_host(struct fg_forward *f, int64_t rows, float *out)
{
	int64_t cnt = rows * f->cfg->vocab;
	void *dst = f->act == FG_DTYPE_F32 ? (void *)out : f->out.logits;
	int rc;

	if ((rc = fg_backend_copy(f->be, f->stream, dst, f->logits.data, (size_t)cnt * f->asz)) ||
	    (rc = fg_backend_stream_sync(f->be, f->stream)))
		return rc;
	if (f->act == FG_DTYPE_F16) {
		const uint16_t *src = f->out.logits;
		for (int64_t i = 0; i < cnt; i++)
			out[i] = fg_half_to_float(src[i]);
	}
	return 0;
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

int64_t fg_logits_first_scored(const struct fg_forward *f, int64_t k)
{
	int64_t first = f->plen;

	for (int64_t s = 0; s < f->bs; s++)
		first = f->gb[k].pad[s] < first ? f->gb[k].pad[s] : first;
	return first;
}

int fg_logits_score(struct fg_forward *f, struct fg_block_ctx *x, int64_t k,
		    int (*body)(struct fg_block_ctx *x))
{
	int64_t first = fg_logits_first_scored(f, k);
	double t0 = fg_now();
	int rc = 0;

	/* One position of every sequence at a time: the logits workspace holds
	 * one row per sequence, as for the last position. */
	for (int64_t p = first; p + 1 < x->n && !rc; p++) {
		x->out_pos = p;
		if (!(rc = body(x)) && !(rc = fg_logits_to_host(f, f->bs, f->out.argmax)))
			rc = f->score.fn(f->score.arg, k * f->bs, f->bs, p, f->out.argmax);
	}
	x->out_pos = x->n - 1;
	f->stats.logits_s += fg_now() - t0;
	return rc;
}

int fg_logits_out(struct fg_forward *f, int64_t row0, int64_t rows, float *logits, int32_t *top)
{
	double t0 = fg_now();
	int rc = fg_devtime_mark(f, FG_DEV_COMPUTE);

	if (!rc && logits)
		rc = fg_logits_to_host(f, rows, logits);
	if (!rc && top)
		rc = f->sampling ? fg_logits_sample(f, row0, rows, top)
				 : fg_logits_argmax(f, rows, top);
	if (!rc)
		rc = fg_devtime_mark(f, FG_DEV_LOGITS);
	f->stats.logits_s += fg_now() - t0;
	return rc;
}
