/* tests/heldout.c - reading heldout.json (see heldout.h). */
#include <check.h>
#include <stdio.h>

#include <jansson.h>

#include "tests/heldout.h"

void load_heldout(const char *dir, struct heldout *h)
{
	char path[4400];
	json_error_t err;
	snprintf(path, sizeof(path), "%s/heldout.json", dir);
	json_t *root = json_load_file(path, 0, &err);
	ck_assert_msg(root, "%s: %s", path, err.text);
	json_t *ids = json_object_get(root, "input_ids"), *lp = json_object_get(root, "token_logprobs");
	json_t *sim = json_object_get(root, "int4_weights_simulated");
	ck_assert_msg(json_array_size(ids) == HROWS && json_array_size(lp) == HROWS && sim,
		      "%s: not 16 sequences with int4_weights_simulated", path);
	for (int r = 0; r < HROWS; r++) {
		ck_assert(json_array_size(json_array_get(ids, r)) == HLEN);
		ck_assert(json_array_size(json_array_get(lp, r)) == HLEN - 1);
		for (int t = 0; t < HLEN; t++)
			h->ids[r][t] = (int32_t)json_integer_value(json_array_get(json_array_get(ids, r), t));
		for (int t = 0; t < HLEN - 1; t++)
			h->lp[r][t] = json_number_value(json_array_get(json_array_get(lp, r), t));
	}
	h->ppl = json_number_value(json_object_get(root, "perplexity"));
	h->sim_ppl = json_number_value(json_object_get(sim, "perplexity"));
	ck_assert(h->ppl > 1 && h->sim_ppl > 1);
	json_decref(root);
}
