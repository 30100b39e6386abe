/* cli/batch_run.c - requests to the engine batch by batch (see batch_run.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch_run.h"
#include "core/engine/engine.h"
#include "core/util/error.h"

struct order {
	size_t len; /* prompt tokens (the engine puts </s> in front of a text) */
	size_t index;
};

static int by_len(const void *a, const void *b)
{
	const struct order *x = a, *y = b;

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

long fg_cli_generate_batches(struct fg_engine *e, const struct fg_request *reqs, size_t n,
			     struct fg_result *res, unsigned char *done,
			     const volatile sig_atomic_t *stop)
{
	size_t eff = (size_t)(e->policy.gpu_batch_size * e->policy.num_gpu_batches);
	struct order *ord = calloc(n ? n : 1, sizeof(*ord));
	struct fg_request *sub = calloc(n ? n : 1, sizeof(*sub));
	struct fg_result *sres = calloc(n ? n : 1, sizeof(*sres));
	long count = 0;

	if (!ord || !sub || !sres) {
		free(ord);
		free(sub);
		free(sres);
		return -ENOMEM;
	}
	if (eff < 1)
		eff = 1;
	/* The same batches as one fg_generate call over all requests would make. */
	for (size_t i = 0; i < n; i++) {
		int32_t *ids = NULL;
		size_t len = 0;

		ord[i].index = i;
		if (reqs[i].prompt) {
			if (fg_tokenize(e, reqs[i].prompt, &ids, &len) == 0)
				len++;
			free(ids);
		} else {
			len = reqs[i].n_prompt_ids;
		}
		ord[i].len = len;
	}
	qsort(ord, n, sizeof(*ord), by_len);
	memset(done, 0, n);
	for (size_t i = 0; i < n; i += eff) {
		size_t cnt = n - i < eff ? n - i : eff;

		if (stop && *stop)
			break;
		for (size_t k = 0; k < cnt; k++)
			sub[k] = reqs[ord[i + k].index];
		if (fg_generate(e, sub, cnt, sres) == 0) {
			for (size_t k = 0; k < cnt; k++) {
				res[ord[i + k].index] = sres[k];
				done[ord[i + k].index] = 1;
			}
			count += (long)cnt;
			continue;
		}
		/* One request may have failed the batch: run each alone. */
		if (cnt > 1)
			FG_LOG(FG_LOG_WARN, "a batch of %zu requests failed (%s): running them one at a time",
			       cnt, fg_last_error());
		for (size_t k = 0; k < cnt; k++) {
			size_t at = ord[i + k].index;

			if (k > 0 && stop && *stop)
				break;
			if (cnt == 1) {
				memset(&res[at], 0, sizeof(res[at]));
				res[at].finish_reason = FG_FINISH_ERROR;
				res[at].error = strdup(fg_last_error());
			} else {
				run_one(e, &reqs[at], &res[at]);
			}
			done[at] = 1;
			count++;
		}
	}
	free(ord);
	free(sub);
	free(sres);
	return count;
}
