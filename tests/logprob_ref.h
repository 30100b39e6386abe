/* tests/logprob_ref.h - the logprob op's definition (fgcore/logprob.h)
 * computed naively in double precision, the rows of logits that try it, and
 * the check of a backend's answer against it.  The compute conformance suite
 * (host backends) and the cublas tests (fp16 on the GPU) both use it. */
#ifndef FG_TESTS_LOGPROB_REF_H
#define FG_TESTS_LOGPROB_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Row shapes: what a model gives, and the edges the definition settles. */
enum lp_shape {
	LP_SPREAD,  /* a few nats apart */
	LP_TIES,    /* four values: the top falls to the ids */
	LP_ONE,     /* one value throughout */
	LP_SPIKE,   /* one logit far above the rest */
	LP_POSINF,  /* +inf a few times: they share the mass */
	LP_NEGINF,  /* -inf and NaN mixed into a spread row */
	LP_NONE,    /* -inf and NaN only: no distribution */
	LP_SHAPES
};

/* A row of n logits of shape sh; u01 gives uniforms in [0, 1). */
static void lp_fill(float *x, int64_t n, enum lp_shape sh, double (*u01)(void))
{
	for (int64_t i = 0; i < n; i++) {
		double u = u01(), v = u01();
		float l = (float)(sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v));

		switch (sh) {
		case LP_SPREAD:
			l *= 3;
			break;
		case LP_TIES:
			l = (float)(int)(4 * u01()) - 2.0f;
			break;
		case LP_ONE:
			l = 1.5f;
			break;
		case LP_POSINF:
			if (u01() < 0.002 || i == n / 2 || i == n - 1)
				l = INFINITY;
			break;
		case LP_NEGINF:
			l *= 2;
			if (u01() < 0.05)
				l = NAN;
			else if (u01() < 0.05)
				l = -INFINITY;
			break;
		case LP_NONE:
			l = u01() < 0.5 ? -INFINITY : NAN;
			break;
		default:
			break;
		}
		x[i] = l;
	}
	if (sh == LP_SPIKE)
		x[(int64_t)(u01() * (double)n) % n] = 12.0f;
}

struct lp_key {
	double v; /* NaN as -inf; -0 equals 0 */
	int32_t id;
};

static int lp_key_cmp(const void *a, const void *b)
{
	const struct lp_key *x = a, *y = b;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* log p of every id of the row, in double: NaN counts as -inf; c ids at
 * +inf share the mass; no id above -inf: NaN. */
static void lp_ref_row(const float *x, int64_t n, double *lp)
{
	double max = -INFINITY, z = 0;
	int64_t ninf = 0;

	for (int64_t i = 0; i < n; i++) {
		if (x[i] > max)
			max = x[i];
		ninf += x[i] == INFINITY;
	}
	for (int64_t i = 0; i < n && isfinite(max); i++)
		if (!isnan(x[i]))
			z += exp((double)x[i] - max);
	for (int64_t i = 0; i < n; i++) {
		double l = isnan(x[i]) ? -INFINITY : (double)x[i];
		if (max == INFINITY)
			lp[i] = l == INFINITY ? -log((double)ninf) : -INFINITY;
		else if (max == -INFINITY)
			lp[i] = NAN;
		else
			lp[i] = l - max - log(z);
	}
}

/* The ids in the definition's order. */
static void lp_ref_order(const float *x, int64_t n, struct lp_key *keys)
{
	for (int64_t i = 0; i < n; i++)
		keys[i] = (struct lp_key){ isnan(x[i]) ? -INFINITY : (double)x[i], (int32_t)i };
	qsort(keys, (size_t)n, sizeof(*keys), lp_key_cmp);
}

/* Both values NaN, equal infinities, or within tol * (1 + |want|). */
static int lp_close(double got, double want, double tol)
{
	if (isnan(want) || isnan(got))
		return isnan(want) && isnan(got);
	if (isinf(want) || isinf(got))
		return got == want;
	return fabs(got - want) <= tol * (1 + fabs(want));
}

/* Check row r of a backend's answer (lp, and top_id / top_lp of k entries)
 * for target t against the reference; prints and counts what differs. */
static int lp_check_row(const char *what, int64_t r, const float *x, int64_t n, int32_t t, int k,
			float lp, const int32_t *top_id, const float *top_lp, double tol)
{
	double *ref = malloc(sizeof(double) * (size_t)n);
	struct lp_key *keys = malloc(sizeof(*keys) * (size_t)n);
	int bad = 0;

	if (!ref || !keys)
		abort();
	lp_ref_row(x, n, ref);
	lp_ref_order(x, n, keys);
	if (!lp_close(lp, ref[t], tol)) {
		printf("%s: row %lld: log p(%d) = %.9g, want %.9g\n", what, (long long)r, t,
		       (double)lp, ref[t]);
		bad++;
	}
	for (int j = 0; j < k; j++) {
		int32_t want_id = j < n ? keys[j].id : -1;
		double want = j < n ? ref[want_id] : -INFINITY;
		if (top_id[j] != want_id || !lp_close(top_lp[j], want, tol)) {
			printf("%s: row %lld: top %d is (%d, %.9g), want (%d, %.9g)\n", what,
			       (long long)r, j, top_id[j], (double)top_lp[j], want_id, want);
			bad++;
		}
	}
	free(ref);
	free(keys);
	return bad;
}

#endif
