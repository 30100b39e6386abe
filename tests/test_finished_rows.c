/* tests/test_finished_rows.c - a GPU batch whose rows have all finished is
 * not run again (fg_forward_set_live): fg_engine_positions counts exactly
 * the rows of the GPU batches still running at each decode step, and every
 * result equals the request run alone (nothing depends on which batches
 * still compute), for all-resident and offloaded policies.
 * Needs FGCORE_TESTDATA (the trained opt-py-128x4): else exit 77 (skip). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>

#define NB 3
#define BS 2
#define ROWS (NB * BS)
#define PLEN 6

static const char *const policies[] = {
	"policy.percent=100 0 100 0 100 0",
	"policy.percent=30 50 0 100 50 50", /* weights split, cache and activations off the compute tier */
};

START_TEST(test_finished_batches_stop)
{
	static const int maxtok[ROWS] = { 2, 2, 9, 9, 5, 5 }; /* one length a GPU batch */
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_request req[ROWS];
	struct fg_result res[ROWS], alone;
	int32_t ids[ROWS][PLEN];
	char kv[4400];

	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s/opt/opt-py-128x4", getenv("FGCORE_TESTDATA"));
	ck_assert_int_eq(fg_config_set(c, kv, "test"), 0);
	ck_assert_int_eq(fg_config_set(c, "policy.gpu_batch_size=2", "test"), 0);
	ck_assert_int_eq(fg_config_set(c, "policy.num_gpu_batches=3", "test"), 0);
	ck_assert_int_eq(fg_config_set(c, "tier.disk.dir=/var/tmp", "test"), 0);
	ck_assert_int_eq(fg_config_set(c, policies[_i], "test"), 0);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
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
		ck_assert_msg(fg_generate(e, &req[r], 1, &alone) == 0, "%s", fg_last_error_text());
		ck_assert_msg(alone.n_tokens == res[r].n_tokens &&
				      !memcmp(alone.token_ids, res[r].token_ids,
					      sizeof(int32_t) * alone.n_tokens),
			      "row %d: tokens differ from the request alone", r);
		fg_result_clear(&alone);
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
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
