/* tests/test_finished_rows.c - a finished row stops costing
 * (fg_forward_set_live_rows).  A GPU batch whose rows have all finished is
 * not run again: fg_engine_positions counts exactly the rows of the GPU
 * batches still running at each decode step, each up to its last live row
 * (a GPU batch puts its longest budgets first, so the rows that ran out of
 * tokens are not computed at all).  A finished row before a live one costs
 * only its rows of the matrix products: its KV cache is moved no more (the
 * engine's cache bytes are exactly those of the live rows, the rest counted
 * as skipped) and its attention is not computed.
 * A batch of fewer requests than rows computes their rows only.
 * Every result equals the request run alone, and its tokens and
 * log-probabilities are bit-identical to those of the same batch in which no
 * row finishes early (nothing depends on the finished rows), with the cache
 * on the compute tier, offloaded to host and disk, 4-bit, and attended on
 * the host (cpu_cache_compute).
 * Needs FGCORE_TESTDATA (the trained opt-py-128x4): else exit 77 (skip). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/engine/engine.h"

#define NB 3
#define BS 2
#define ROWS (NB * BS)
#define PLEN 6

static const char *const policies[] = {
	"policy.percent=100 0 100 0 100 0",
	"policy.percent=30 50 0 100 50 50", /* weights split, cache and activations off the compute tier */
};

/* Row r's result equals its request run alone. */
static void check_alone(struct fg_engine *e, const struct fg_request *req,
			const struct fg_result *res, int r)
{
	struct fg_result alone;

	ck_assert_msg(fg_generate(e, req, 1, &alone) == 0, "%s", fg_last_error_text());
	ck_assert_msg(alone.n_tokens == res->n_tokens &&
			      !memcmp(alone.token_ids, res->token_ids, sizeof(int32_t) * alone.n_tokens),
		      "row %d: tokens differ from the request alone", r);
	fg_result_clear(&alone);
}

/* The trained OPT in GPU batches of bs rows, nb of them, with up to three
 * more settings (NULL-ended). */
static void open_engine(struct fg_config **c, struct fg_engine **e, int bs, int nb,
			const char *const set[3])
{
	char kv[4400];

	ck_assert_int_eq(fg_config_new(c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s/opt/opt-py-128x4", getenv("FGCORE_TESTDATA"));
	ck_assert_int_eq(fg_config_set(*c, kv, "test"), 0);
	snprintf(kv, sizeof(kv), "policy.gpu_batch_size=%d", bs);
	ck_assert_int_eq(fg_config_set(*c, kv, "test"), 0);
	snprintf(kv, sizeof(kv), "policy.num_gpu_batches=%d", nb);
	ck_assert_int_eq(fg_config_set(*c, kv, "test"), 0);
	ck_assert_int_eq(fg_config_set(*c, "tier.disk.dir=/var/tmp", "test"), 0);
	for (int i = 0; i < 3 && set[i]; i++)
		ck_assert_int_eq(fg_config_set(*c, set[i], "test"), 0);
	ck_assert_msg(fg_engine_open(*c, e) == 0, "%s", fg_last_error_text());
}

START_TEST(test_finished_batches_stop)
{
	static const int maxtok[ROWS] = { 2, 2, 9, 9, 5, 5 }; /* one length a GPU batch */
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_request req[ROWS];
	struct fg_result res[ROWS];
	int32_t ids[ROWS][PLEN];

	open_engine(&c, &e, BS, NB, (const char *const[3]){ policies[_i] });
	memset(req, 0, sizeof(req));
	for (int r = 0; r < ROWS; r++) {
		ids[r][0] = 8191; /* bos; equal lengths keep the input order in the batch */
		for (int t = 1; t < PLEN; t++)
			ids[r][t] = 100 + 37 * r + 11 * t;
		req[r].prompt_ids = ids[r];
		req[r].n_prompt_ids = PLEN;
		req[r].max_new_tokens = maxtok[r];
	}
	uint64_t before = fg_engine_positions(e);
	ck_assert_msg(fg_generate(e, req, ROWS, res) == 0, "%s", fg_last_error_text());
	/* prefill: every row; decode step t (1 .. 8) computes token t + 1 for the
	 * GPU batches whose rows want more than t tokens */
	uint64_t want = ROWS * PLEN;
	for (int t = 1; t < 9; t++)
		for (int k = 0; k < NB; k++)
			want += maxtok[k * BS] > t ? BS : 0;
	uint64_t got = fg_engine_positions(e) - before;
	printf("%s: %llu positions computed (all batches to the end: %d)\n", policies[_i],
	       (unsigned long long)got, ROWS * (PLEN + 8));
	ck_assert_uint_eq(got, want);
	for (int r = 0; r < ROWS; r++) {
		ck_assert_int_eq(res[r].n_tokens, maxtok[r]);
		check_alone(e, &req[r], &res[r], r);
		fg_result_clear(&res[r]);
	}
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* A batch of fewer requests than rows computes its requests' rows only,
 * from the prefill on: 3 requests under GPU batches of 2 take two of them
 * (the request layer uses the fewest), and the fourth row is left out. */
START_TEST(test_partly_filled_batch)
{
	enum { N = 3, GEN = 4 };
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_request req[N];
	struct fg_result res[N];
	int32_t ids[N][PLEN];

	open_engine(&c, &e, BS, NB, (const char *const[3]){ policies[_i] });
	memset(req, 0, sizeof(req));
	for (int r = 0; r < N; r++) {
		ids[r][0] = 8191;
		for (int t = 1; t < PLEN; t++)
			ids[r][t] = 300 + 41 * r + 7 * t;
		req[r].prompt_ids = ids[r];
		req[r].n_prompt_ids = PLEN;
		req[r].max_new_tokens = GEN;
		req[r].score_prompt = 1;
	}
	uint64_t before = fg_engine_positions(e);
	ck_assert_msg(fg_generate(e, req, N, res) == 0, "%s", fg_last_error_text());
	uint64_t got = fg_engine_positions(e) - before;
	printf("%s: a batch of %d requests in 2 x %d rows: %llu positions computed (every row: %d)\n",
	       policies[_i], N, BS, (unsigned long long)got, 2 * BS * (PLEN + GEN - 1));
	ck_assert_uint_eq(got, (uint64_t)N * (PLEN + GEN - 1));
	for (int r = 0; r < N; r++) {
		struct fg_result alone;
		ck_assert_int_eq(res[r].n_tokens, GEN);
		ck_assert_msg(fg_generate(e, &req[r], 1, &alone) == 0, "%s", fg_last_error_text());
		ck_assert_msg(!memcmp(alone.token_ids, res[r].token_ids, sizeof(int32_t) * GEN),
			      "row %d: tokens differ from the request alone", r);
		for (int t = 1; t < PLEN; t++)
			ck_assert_msg(fabsf(alone.prompt_logprobs[t] - res[r].prompt_logprobs[t]) < 1e-4f,
				      "row %d, prompt token %d: log-probability %g, alone %g", r, t,
				      (double)res[r].prompt_logprobs[t], (double)alone.prompt_logprobs[t]);
		fg_result_clear(&alone);
		fg_result_clear(&res[r]);
	}
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* Cache placements (the KV cache of 4 rows a GPU batch: compute, host, disk). */
static const char *const row_policies[][3] = {
	{ "policy.percent=100 0 100 0 100 0" },
	{ "policy.percent=100 0 0 100 100 0" },
	{ "policy.percent=30 50 20 50 50 50" }, /* cache 1 + 2 + 1 rows, weights, activations split */
	{ "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true" },
	{ "policy.percent=100 0 20 50 100 0", "policy.cpu_cache_compute=true" },
	{ "policy.percent=100 0 0 50 100 0", "policy.compress_cache=true" },
};
#define NROW_POLICIES (int)(sizeof(row_policies) / sizeof(row_policies[0]))

#define RBS 4
#define RNB 2
#define RROWS (RBS * RNB)
#define RMAX 9
#define RPLEN (RROWS + 3) /* row r's prompt: r + 4 tokens */

/* What the engine should count for one batch of RROWS requests of
 * plen-token prompts with budgets maxtok[r] that generated m[r] tokens each:
 * positions, finished-row positions, and the KV cache bytes moved and
 * skipped.  Each GPU batch puts its requests in order of budget, longest
 * first (ties in request order), and computes its rows up to its last live
 * one; every slot-held row is stored after the prefill, and decode step t
 * loads its step positions and stores one unless the row has finished. */
struct counts {
	uint64_t positions, dead, moved, skipped;
};

static struct counts expected(const struct fg_engine *e, int64_t plen, const int maxtok[RROWS],
			      const int m_req[RROWS])
{
	const struct fg_model_config *cfg = &e->model.cfg;
	const struct fg_policy *p = &e->policy;
	int64_t first[FG_ROLES], count[FG_ROLES], kvw = cfg->kv_heads * cfg->head_dim;
	/* K and V of every layer, per position: fp32 (cpu_blas), or 4-bit codes
	 * and an fp16 (scale, min) per group of 64, or fp8 codes and an fp32
	 * scale per group of 64 */
	uint64_t row = !p->compress_cache ? (uint64_t)kvw * sizeof(float)
		       : (uint64_t)((p->cache_fp8 ? kvw : kvw / 2) + kvw / 64 * 4);
	uint64_t pos_bytes = 2 * (uint64_t)cfg->layers * row;
	struct counts c = { RROWS * (uint64_t)plen, 0, 0, 0 };
	int mmax = 0, slot[RBS], m[RROWS], req_of[RROWS];

	for (int r = 0; r < RROWS; r++)
		req_of[r] = r;
	for (int k = 0; k < RNB; k++) /* insertion sort: longest budget first, stable */
		for (int i = k * RBS + 1; i < (k + 1) * RBS; i++)
			for (int j = i; j > k * RBS && maxtok[req_of[j]] > maxtok[req_of[j - 1]]; j--) {
				int t = req_of[j];
				req_of[j] = req_of[j - 1];
				req_of[j - 1] = t;
			}
	for (int r = 0; r < RROWS; r++)
		m[r] = m_req[req_of[r]]; /* by engine row */

	fg_policy_split(p->cache, RBS, first, count);
	int delegate = p->cpu_cache_compute && count[FG_ROLE_HOST] > 0;
	for (int s = 0; s < RBS; s++)
		slot[s] = s >= first[FG_ROLE_DISK] ||
			  (!delegate && s >= first[FG_ROLE_HOST]);
	for (int r = 0; r < RROWS; r++) {
		mmax = m[r] > mmax ? m[r] : mmax;
		c.moved += slot[r % RBS] ? (uint64_t)plen * pos_bytes : 0;
	}
	for (int t = 1; t < mmax; t++) {
		uint64_t step = (uint64_t)(plen + t - 1);
		for (int k = 0; k < RNB; k++) {
			int rows = 0; /* up to the last live row */
			for (int s = 0; s < RBS; s++)
				rows = m[k * RBS + s] > t ? s + 1 : rows;
			if (!rows)
				continue;
			c.positions += (uint64_t)rows;
			for (int s = 0; s < RBS; s++) {
				int dead = m[k * RBS + s] <= t;
				c.dead += (uint64_t)(dead && s < rows);
				if (slot[s])
					*(dead ? &c.skipped : &c.moved) += (step + 1) * pos_bytes;
			}
		}
	}
	return c;
}

START_TEST(test_finished_rows_stop_costing)
{
	/* GPU batch 0: rows wanting 1 (finished after the prefill), 9, 3, 6;
	 * batch 1: 2, 9 with a stop token it meets by its third, 4, 5 (the whole
	 * batch finished after step 4, batch 0 runs to step 8). */
	static const int maxtok[RROWS] = { 1, RMAX, 3, 6, 2, RMAX, 4, 5 };
	const int stop_row = 5;
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_request req[RROWS], full[RROWS];
	struct fg_result res[RROWS], ref[RROWS], alone;
	int32_t ids[RROWS][RPLEN], stop;
	int m[RROWS];

	open_engine(&c, &e, RBS, RNB, row_policies[_i]);
	memset(req, 0, sizeof(req));
	for (int r = 0; r < RROWS; r++) {
		/* prompt lengths grow with r: the batch keeps the input order */
		ids[r][0] = 8191;
		for (int t = 1; t < r + 4; t++)
			ids[r][t] = 100 + 37 * r + 11 * t;
		req[r].prompt_ids = ids[r];
		req[r].n_prompt_ids = (size_t)r + 4;
		req[r].max_new_tokens = maxtok[r];
		req[r].logprobs = 1;
	}
	/* The stop row's third token alone becomes its stop token. */
	ck_assert_msg(fg_generate(e, &req[stop_row], 1, &alone) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(alone.n_tokens, RMAX);
	stop = alone.token_ids[2];
	fg_result_clear(&alone);
	memcpy(full, req, sizeof(full));
	req[stop_row].stop_ids = &stop;
	req[stop_row].n_stop_ids = 1;
	/* The same batch with no row finishing early. */
	for (int r = 0; r < RROWS; r++)
		full[r].max_new_tokens = RMAX;

	struct fg_run_stats st0, st1;
	fg_engine_stats(e, &st0);
	uint64_t p0 = fg_engine_positions(e), d0 = st0.dead_positions;
	uint64_t b0 = st0.cache_bytes, s0 = st0.cache_skipped_bytes;
	ck_assert_msg(fg_generate(e, req, RROWS, res) == 0, "%s", fg_last_error_text());
	fg_engine_stats(e, &st1);
	struct counts got = { fg_engine_positions(e) - p0, st1.dead_positions - d0,
			      st1.cache_bytes - b0, st1.cache_skipped_bytes - s0 };
	for (int r = 0; r < RROWS; r++) {
		m[r] = (int)res[r].n_tokens;
		if (r == stop_row)
			ck_assert_msg(m[r] <= 3 && res[r].finish_reason == FG_FINISH_STOP &&
					      res[r].token_ids[m[r] - 1] == stop,
				      "the stop row did not stop at its token");
		else
			ck_assert_int_eq(m[r], maxtok[r]);
	}
	struct counts want = expected(e, RPLEN, maxtok, m);
	printf("%s%s%s: %llu positions (%llu of finished rows), KV cache %llu bytes moved, %llu skipped\n",
	       row_policies[_i][0], row_policies[_i][1] ? ", " : "",
	       row_policies[_i][1] ? row_policies[_i][1] : "", (unsigned long long)got.positions,
	       (unsigned long long)got.dead, (unsigned long long)got.moved,
	       (unsigned long long)got.skipped);
	ck_assert_uint_eq(got.positions, want.positions);
	ck_assert_uint_eq(got.dead, want.dead);
	ck_assert_uint_eq(got.moved, want.moved);
	ck_assert_uint_eq(got.skipped, want.skipped);
	/* (the batch does have finished rows, and slot-held ones among them) */
	ck_assert(want.dead > 0 && (want.skipped > 0 || want.moved == 0));

	ck_assert_msg(fg_generate(e, full, RROWS, ref) == 0, "%s", fg_last_error_text());
	for (int r = 0; r < RROWS; r++) {
		ck_assert_int_eq(ref[r].n_tokens, RMAX);
		ck_assert_msg(!memcmp(ref[r].token_ids, res[r].token_ids, sizeof(int32_t) * (size_t)m[r]) &&
				      !memcmp(ref[r].token_logprobs, res[r].token_logprobs,
					      sizeof(float) * (size_t)m[r]),
			      "row %d: tokens or log-probabilities differ from the batch without finished rows",
			      r);
		check_alone(e, &req[r], &res[r], r);
		fg_result_clear(&ref[r]);
		fg_result_clear(&res[r]);
	}
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	if (!td || !*td) {
		printf("FGCORE_TESTDATA is not set: skipped\n");
		return 77;
	}
	Suite *s = suite_create("finished_rows");
	TCase *tc = tcase_create("live");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_finished_batches_stop, 0, 2);
	tcase_add_loop_test(tc, test_partly_filled_batch, 0, 2);
	tcase_add_loop_test(tc, test_finished_rows_stop_costing, 0, NROW_POLICIES);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
