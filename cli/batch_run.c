/* cli/batch_run.c - requests to the engine batch by batch (see batch_run.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch_run.h"
#include "core/engine/engine.h"
#include "core/util/error.h"

struct order {
	size_t len;    /* prompt tokens (the engine puts </s> in front of a text) */
	unsigned cls;  /* length bucket */
	int gen;       /* max_new_tokens */
	size_t index;
};

/* A length's bucket: exact up to 16, then its top four bits (lengths within
 * 1/8 of each other share one), so a bucket's padding is at most ~12%. */
static unsigned length_class(size_t len)
{
	unsigned b = 0;

	if (len <= 16)
		return (unsigned)len;
	for (size_t v = len; v > 1; v >>= 1)
		b++;
	return 16 + b * 8 + (unsigned)((len >> (b - 3)) & 7);
}

static int by_bucket(const void *a, const void *b)
{
	const struct order *x = a, *y = b;

	if (x->cls != y->cls)
		return x->cls < y->cls ? -1 : 1;
	if (x->gen != y->gen)
		return x->gen < y->gen ? -1 : 1;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* One request alone; its failure becomes its result. */
static void run_one(struct fg_engine *e, const struct fg_request *req, struct fg_result *res)
{
	if (fg_generate(e, req, 1, res) == 0)
		return;
	memset(res, 0, sizeof(*res));
	res->finish_reason = FG_FINISH_ERROR;
	res->error = strdup(fg_last_error());
}

/* The engine's counts before a fg_generate call, for account(). */
struct mark {
	uint64_t positions, dead;
};

static struct mark mark_now(const struct fg_engine *e)
{
	return (struct mark){ fg_engine_positions(e), e->dead_positions };
}

/* What one fg_generate call over res[0..cnt) computed: the positions the
 * engine counted since `before` (every row of every GPU batch it ran,
 * padding and finished rows included, these apart), against the prompt and
 * completion tokens the results needed. */
static void account(const struct fg_engine *e, struct mark before, struct fg_result *const *res,
		    size_t cnt, struct fg_batch_stats *st)
{
	uint64_t useful = 0, gen = 0;

	for (size_t k = 0; k < cnt; k++) {
		const struct fg_result *r = res[k];
		if (r->finish_reason == FG_FINISH_ERROR)
			continue;
		useful += r->n_prompt_tokens + (r->n_tokens ? r->n_tokens - 1 : 0);
		gen += r->n_tokens;
	}
	st->batches++;
	st->generated += gen;
	uint64_t computed = fg_engine_positions(e) - before.positions;
	if (!computed) /* nothing to generate or score: the engine ran no batch */
		return;
	st->computed += computed;
	st->useful += useful;
	st->dead += e->dead_positions - before.dead;
}

long fg_cli_run_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			struct fg_result *res, unsigned char *done, const struct fg_batch_opts *o)
{
	size_t eff = (size_t)(e->policy.gpu_batch_size * e->policy.num_gpu_batches);
	struct order *ord = calloc(n ? n : 1, sizeof(*ord));
	struct fg_request *sub = calloc(n ? n : 1, sizeof(*sub));
	struct fg_result *sres = calloc(n ? n : 1, sizeof(*sres));
	struct fg_result **ptr = calloc(n ? n : 1, sizeof(*ptr));
	size_t *idx = calloc(n ? n : 1, sizeof(*idx));
	struct fg_batch_stats scratch;
	int stopped = 0;
	long count = 0;

	if (!ord || !sub || !sres || !ptr || !idx) {
		free(ord);
		free(sub);
		free(sres);
		free(ptr);
		free(idx);
		return -ENOMEM;
	}
	if (eff < 1)
		eff = 1;
	for (size_t i = 0; i < n; i++) {
		int32_t *ids = NULL;
		size_t len = 0;

		ord[i].index = i;
		ord[i].gen = reqs[i].max_new_tokens;
		if (o->input_order)
			continue;
		if (reqs[i].prompt) {
			if (fg_tokenize(e, reqs[i].prompt, &ids, &len) == 0)
				len++;
			free(ids);
		} else {
			len = reqs[i].n_prompt_ids;
		}
		ord[i].len = len;
		ord[i].cls = length_class(len);
	}
	if (!o->input_order)
		qsort(ord, n, sizeof(*ord), by_bucket);
	memset(done, 0, n);
	for (size_t i = 0; i < n && !stopped; i += eff) {
		size_t cnt = n - i < eff ? n - i : eff, ran = 0;
		struct fg_batch_stats *st = o->stats ? o->stats : &scratch;

		if (o->stop && *o->stop)
			break;
		for (size_t k = 0; k < cnt; k++)
			sub[k] = reqs[ord[i + k].index];
		struct mark before = mark_now(e);
		if (fg_generate(e, sub, cnt, sres) == 0) {
			for (size_t k = 0; k < cnt; k++) {
				res[ord[i + k].index] = sres[k];
				done[ord[i + k].index] = 1;
				ptr[k] = &res[ord[i + k].index];
				idx[k] = ord[i + k].index;
			}
			account(e, before, ptr, cnt, st);
			ran = cnt;
		} else {
			/* One request may have failed the batch: run each alone. */
			if (cnt > 1)
				FG_LOG(FG_LOG_WARN, "a batch of %zu requests failed (%s): running them one at a time",
				       cnt, fg_last_error());
			for (size_t k = 0; k < cnt; k++) {
				size_t at = ord[i + k].index;

				if (k > 0 && o->stop && *o->stop)
					break;
				before = mark_now(e);
				if (cnt == 1) {
					memset(&res[at], 0, sizeof(res[at]));
					res[at].finish_reason = FG_FINISH_ERROR;
					res[at].error = strdup(fg_last_error());
				} else {
					run_one(e, &reqs[at], &res[at]);
				}
				ptr[0] = &res[at];
				account(e, before, ptr, 1, st);
				done[at] = 1;
				idx[ran++] = at;
			}
		}
		count += (long)ran;
		if (o->done_fn && o->done_fn(o->done_arg, idx, ran))
			stopped = 1;
	}
	free(ord);
	free(sub);
	free(sres);
	free(ptr);
	free(idx);
	return count;
}

long fg_cli_generate_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			     struct fg_result *res, unsigned char *done,
			     const volatile sig_atomic_t *stop)
{
	struct fg_batch_opts o = { .stop = stop };

	return fg_cli_run_batches(e, reqs, n, res, done, &o);
}
