/* bench/sweep_compare.h - how the kernel sweeps (bench/*_sweep.cu) check an
 * fp16 output against a reference, row by row: the worst row's
 * max |x - y| / max |y|, and counts of what must never happen (values in a
 * padded row that are not exactly 0, values not finite or never written -
 * outputs start as NaN -, values written past a row's heads, which each
 * sweep counts itself). */
#ifndef FG_BENCH_SWEEP_COMPARE_H
#define FG_BENCH_SWEEP_COMPARE_H

#include <math.h>
#include <stdint.h>

#include <algorithm>

#include <fgcore/half.h>

/* fp16 bits -> float, filled by sweep_h2f_init. */
static float h2f_tab[65536];

static void sweep_h2f_init(void)
{
	for (uint32_t u = 0; u < 65536; u++)
		h2f_tab[u] = fg_half_to_float((uint16_t)u);
}

struct cmp {
	double worst;
	int64_t nonzero, nonfinite, outside;
};

/* One row of d values x (fp16) against y; a padded row must be all zeros. */
static void row_compare(cmp &r, const uint16_t *x, const double *y, int64_t d, bool padded)
{
	double e = 0, m = 0;

	for (int64_t c = 0; c < d; c++) {
		float xv = h2f_tab[x[c]];

		if (!isfinite(xv)) {
			r.nonfinite++;
			continue;
		}
		if (padded) {
			r.nonzero += xv != 0.0f;
			continue;
		}
		e = std::max(e, fabs((double)xv - y[c]));
		m = std::max(m, fabs(y[c]));
	}
	if (!padded)
		r.worst = std::max(r.worst, m > 0 ? e / m : e > 0 ? 1.0 : 0.0);
}

/* The worst row within tol and nothing that must never happen. */
static bool cmp_ok(const cmp &c, double tol)
{
	return c.worst < tol && c.nonzero == 0 && c.nonfinite == 0 && c.outside == 0;
}

#endif
