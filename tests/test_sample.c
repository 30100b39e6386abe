/* tests/test_sample.c - fg_sample (partial selection) against fg_sample_sorted
 * (the whole vocabulary sorted, the definition): the same token and the same
 * random stream afterwards for every row, over logit shapes (spread, flat,
 * ties, signed zeros, spikes, non-finite values), vocabulary sizes, and
 * temperature x top_k x top_p, with the largest draw too.  And the definition
 * against the softmax computed naively in long double: its weights, and the
 * token every draw gives (the inverse of the nucleus's distribution). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/sampling.h>

#include "core/sampling/sample.h"

/* A standard normal from the project's generator (Box-Muller). */
static double normal(struct fg_rng *r)
{
	double u = fg_rng_uniform(r), v = fg_rng_uniform(r);
	return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v);
}

enum shape { SPREAD, WIDE, FLAT, TIES, ZEROS, SPIKE, NONFINITE, SHAPES };

static void fill(float *l, int64_t n, enum shape sh, struct fg_rng *r)
{
	for (int64_t i = 0; i < n; i++) {
		switch (sh) {
		case SPREAD: /* a language model's logits: a few nats apart */
			l[i] = (float)(3 * normal(r));
			break;
		case WIDE: /* most of the vocabulary far below the top */
			l[i] = (float)(25 * normal(r));
			break;
		case FLAT: /* random weights: everything within a few hundredths */
			l[i] = (float)(0.01 * normal(r));
			break;
		case TIES: /* few distinct values: the order falls to the ids */
			l[i] = (float)(int)(4 * fg_rng_uniform(r)) - 2.0f;
			break;
		case ZEROS: /* -0 and +0 compare equal */
			l[i] = fg_rng_uniform(r) < 0.5 ? -0.0f : 0.0f;
			if (fg_rng_uniform(r) < 0.01)
				l[i] = -50.0f;
			break;
		case SPIKE: /* one token dominates */
			l[i] = (float)normal(r);
			break;
		case NONFINITE:
			l[i] = (float)normal(r);
			break;
		default:
			break;
		}
	}
	if (sh == SPIKE)
		l[(int64_t)(fg_rng_uniform(r) * (double)n)] = 60.0f;
	if (sh == NONFINITE && n > 2) {
		l[n / 2] = -INFINITY;
		l[n / 3] = INFINITY;
	}
}

/* An rng whose next fg_rng_u53 is u: xoshiro256**'s output is
 * rotl(s[1] * 5, 7) * 9, so s[1] is chosen to make it u << 11. */
static void rng_drawing(struct fg_rng *r, uint64_t salt, uint64_t u)
{
	const uint64_t inv9 = 0x8e38e38e38e38e39ull, inv5 = 0xcccccccccccccccdull;
	uint64_t x = (u << 11) * inv9;
	x = (x >> 7) | (x << 57);
	fg_rng_seed(r, salt);
	r->s[1] = x * inv5;
}

/* The largest draw: u = 1 - 2^-53. */
static void rng_at_top(struct fg_rng *r, uint64_t salt)
{
	rng_drawing(r, salt, (1ull << 53) - 1);
}

static int checked;

static void compare(struct fg_sampler *s, const float *l, int64_t n, const struct fg_sampling *p,
		    const struct fg_rng *start, const char *what)
{
	struct fg_rng a = *start, b = *start;
	int32_t want = fg_sample_sorted(s, l, p, &a);
	int32_t got = fg_sample(s, l, p, &b);

	ck_assert_msg(got == want, "%s n=%lld T=%g top_k=%d top_p=%.9g: fg_sample %d, full sort %d",
		      what, (long long)n, p->temperature, p->top_k, p->top_p, got, want);
	ck_assert_msg(!memcmp(&a, &b, sizeof(a)), "%s: the random streams diverged", what);
	ck_assert(got >= 0 && got < n);
	checked++;
}

START_TEST(same_token_as_full_sort)
{
	static const int64_t sizes[] = { 1, 2, 7, 300, 50272 };
	static const float temps[] = { 0.05f, 0.7f, 1.0f, 1.5f, 100.0f };
	static const float top_ps[] = { 0, 0.5f, 0.9f, 0.99999994f, 1 };
	struct fg_rng r, stream;
	fg_rng_seed(&r, 2024);

	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		int64_t n = sizes[si];
		float *l = malloc(sizeof(float) * (size_t)n);
		struct fg_sampler *s;
		ck_assert_ptr_nonnull(l);
		ck_assert_int_eq(fg_sampler_new(&s, n), 0);
		const int top_ks[] = { 0, 1, 5, 50, (int)n - 1, (int)n, (int)n + 5 };
		for (int sh = 0; sh < SHAPES; sh++) {
			/* big rows: fewer combinations, so that the test stays quick */
			int reps = n > 1000 ? 1 : 3;
			for (int rep = 0; rep < reps; rep++) {
				fill(l, n, (enum shape)sh, &r);
				for (size_t ti = 0; ti < 5; ti++)
					for (size_t ki = 0; ki < 7; ki++)
						for (size_t pi = 0; pi < 5; pi++) {
							struct fg_sampling p = {
								.temperature = temps[ti],
								.top_k = top_ks[ki] < 0 ? 0 : top_ks[ki],
								.top_p = top_ps[pi],
							};
							if (n > 1000 && (ki % 2 || ti % 2 == 0 ||
									 pi % 2))
								continue;
							fg_rng_seed(&stream, (uint64_t)(sh * 1000 + rep * 100 +
											  ti * 10 + pi));
							compare(s, l, n, &p, &stream, "seeded");
							rng_at_top(&stream, ki);
							compare(s, l, n, &p, &stream, "u = 1 - 2^-53");
						}
			}
		}
		fg_sampler_free(s);
		free(l);
	}
	ck_assert_int_gt(checked, 5000);
}
END_TEST

/* Many seeded draws from one OPT-sized row: the distribution of a real run. */
START_TEST(many_draws_one_row)
{
	const int64_t n = 50272;
	float *l = malloc(sizeof(float) * (size_t)n);
	struct fg_sampler *s;
	struct fg_rng r, a, b;
	struct fg_sampling p = { .temperature = 0.8f, .top_k = 0, .top_p = 0.95f };

	ck_assert_ptr_nonnull(l);
	ck_assert_int_eq(fg_sampler_new(&s, n), 0);
	fg_rng_seed(&r, 5);
	fill(l, n, SPREAD, &r);
	fg_rng_seed(&a, 99);
	b = a;
	for (int i = 0; i < 400; i++) {
		p.top_p = i % 2 ? 0.95f : 1.0f;
		int32_t want = fg_sample_sorted(s, l, &p, &a);
		int32_t got = fg_sample(s, l, &p, &b);
		ck_assert_int_eq(got, want);
	}
	fg_sampler_free(s);
	free(l);
}
END_TEST

/* Greedy (temperature 0) is the first largest logit and draws nothing. */
START_TEST(greedy)
{
	float l[] = { 1, 3, -2, 3, 0 };
	struct fg_sampler *s;
	struct fg_rng r, before;
	struct fg_sampling p = { 0 };

	ck_assert_int_eq(fg_sampler_new(&s, 5), 0);
	fg_rng_seed(&r, 1);
	before = r;
	ck_assert_int_eq(fg_sample(s, l, &p, &r), 1);
	ck_assert(!memcmp(&r, &before, sizeof(r)));
	/* NaN is never the largest; a row with nothing above -inf gives -1 (as the argmax ops) */
	float nan_first[] = { NAN, -1, 2, NAN, 2 }, all_nan[] = { NAN, NAN, NAN, NAN, NAN },
	      all_ninf[] = { NAN, -INFINITY, -INFINITY, NAN, -INFINITY };
	ck_assert_int_eq(fg_argmax(nan_first, 5), 2);
	ck_assert_int_eq(fg_argmax(all_nan, 5), -1);
	ck_assert_int_eq(fg_argmax(all_ninf, 5), -1);
	fg_sampler_free(s);
	/* the crafted stream really draws the top of [0, 1) */
	rng_at_top(&r, 3);
	ck_assert(fg_rng_uniform(&r) == 1 - 0x1.0p-53);
}
END_TEST

/* The integer weights are 2^S exp(x) to 2^-50 relative, and 0 exactly
 * below the window. */
START_TEST(weights_are_the_exponential)
{
	const int S = 46;
	for (int i = 0; i <= 20000; i++) {
		float l = -35.0f + 35.0f * (float)i / 20000.0f, T = 1.0f;
		uint64_t w = fg_sample_weight(l, 0.0f, T, S);
		long double want = ldexpl(expl((long double)l / T), S);

		if (!fg_sample_in_window(l, 0.0f, T, S)) {
			ck_assert_msg(w == 0, "l=%g: weight %llu outside the window", l,
				      (unsigned long long)w);
			ck_assert(want < 0.5L);
			continue;
		}
		ck_assert_msg(fabsl((long double)w - want) <= 0.5L + want * 0x1.0p-50L,
			      "l=%.9g: weight %llu, exp gives %.6Lf", l, (unsigned long long)w,
			      want);
	}
	ck_assert_uint_eq(fg_sample_weight(3.0f, 3.0f, 0.7f, S), 1ull << S);
	ck_assert_uint_eq(fg_sample_weight(INFINITY, INFINITY, 0.7f, S), 1ull << S);
	ck_assert_uint_eq(fg_sample_weight(1e30f, INFINITY, 0.7f, S), 0);
	ck_assert_uint_eq(fg_sample_weight(NAN, 1.0f, 0.7f, S), 0);
	ck_assert_uint_eq(fg_sample_weight(-INFINITY, 1.0f, 0.7f, S), 0);
}
END_TEST

/* The window's floor is in the window and the float below it is not. */
START_TEST(window_floor_is_exact)
{
	struct fg_rng r;
	fg_rng_seed(&r, 12);
	for (int i = 0; i < 20000; i++) {
		float max = (float)(40 * normal(&r)), T = (float)(0.01 + 5 * fg_rng_uniform(&r));
		int S = 30 + (int)(fg_rng_uniform(&r) * 33);
		float lo = fg_sample_window_floor(max, T, S);

		ck_assert_msg(fg_sample_in_window(lo, max, T, S), "max %g T %g S %d: floor %g is out",
			      max, T, S, lo);
		ck_assert_msg(!fg_sample_in_window(nextafterf(lo, -INFINITY), max, T, S),
			      "max %g T %g S %d: below the floor %g is in", max, T, S, lo);
	}
}
END_TEST

/* For draws spread over [0, 1), the token is where the draw falls in the
 * cumulative distribution of the nucleus, computed naively: sort, softmax in
 * long double, cut at top_k and top_p, renormalise.  Draws within 1e-9 of a
 * boundary, and cuts within 1e-9 of top_p, are left out (rounding may go
 * either way there). */
START_TEST(draws_follow_the_softmax)
{
	enum { N = 300, DRAWS = 997 };
	static const float temps[] = { 0.3f, 0.7f, 1.0f, 2.0f };
	static const float top_ps[] = { 1.0f, 0.95f, 0.5f };
	static const int top_ks[] = { 0, 40 };
	float l[N];
	int32_t order[N];
	long double cdf[N];
	struct fg_sampler *s;
	struct fg_rng r;
	int checked_draws = 0;

	ck_assert_int_eq(fg_sampler_new(&s, N), 0);
	fg_rng_seed(&r, 77);
	for (int rep = 0; rep < 6; rep++) {
		fill(l, N, rep % 2 ? SPREAD : TIES, &r);
		for (int i = 0; i < N; i++)
			order[i] = i;
		for (int i = 1; i < N; i++) /* insertion sort: logit desc, id asc */
			for (int j = i; j > 0 && l[order[j]] > l[order[j - 1]]; j--) {
				int32_t t = order[j];
				order[j] = order[j - 1];
				order[j - 1] = t;
			}
		for (size_t ti = 0; ti < 4; ti++)
			for (size_t pi = 0; pi < 3; pi++)
				for (size_t ki = 0; ki < 2; ki++) {
					struct fg_sampling p = { temps[ti], top_ks[ki], top_ps[pi] };
					int keep = p.top_k ? p.top_k : N, cut = keep, near = 0;
					long double sum = 0, acc = 0;
					for (int i = 0; i < keep; i++)
						sum += expl(((long double)l[order[i]] - l[order[0]]) /
							    p.temperature);
					if (p.top_p < 1) {
						for (cut = 0; cut < keep && acc < p.top_p * sum; cut++) {
							acc += expl(((long double)l[order[cut]] -
								     l[order[0]]) / p.temperature);
							near |= fabsl(acc / sum - p.top_p) < 1e-9L;
						}
						sum = acc;
					}
					if (near)
						continue;
					acc = 0;
					for (int i = 0; i < cut; i++) {
						acc += expl(((long double)l[order[i]] - l[order[0]]) /
							    p.temperature);
						cdf[i] = acc / sum;
					}
					for (int d = 0; d < DRAWS; d++) {
						long double x = ((long double)d + 0.5L) / DRAWS;
						int want = 0;
						while (want < cut - 1 && cdf[want] <= x)
							want++;
						if (fabsl(cdf[want] - x) < 1e-9L ||
						    (want > 0 && fabsl(cdf[want - 1] - x) < 1e-9L))
							continue;
						struct fg_rng a;
						rng_drawing(&a, 1, (uint64_t)(x * 0x1.0p53L));
						int32_t got = fg_sample_sorted(s, l, &p, &a);
						ck_assert_msg(got == order[want],
							      "T=%g top_k=%d top_p=%g draw %.6Lf: token %d, "
							      "the softmax's %d",
							      p.temperature, p.top_k, p.top_p, x, got,
							      order[want]);
						checked_draws++;
					}
				}
	}
	ck_assert_int_gt(checked_draws, 50000);
	fg_sampler_free(s);
}
END_TEST

static Suite *sample_suite(void)
{
	Suite *s = suite_create("sample");
	TCase *tc = tcase_create("partial_selection");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, same_token_as_full_sort);
	tcase_add_test(tc, many_draws_one_row);
	tcase_add_test(tc, greedy);
	tcase_add_test(tc, weights_are_the_exponential);
	tcase_add_test(tc, draws_follow_the_softmax);
	tcase_add_test(tc, window_floor_is_exact);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sample_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
