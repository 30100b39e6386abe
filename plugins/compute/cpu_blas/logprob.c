/* plugins/compute/cpu_blas/logprob.c - log-probabilities of rows of fp32
 * logits (the logprob op, compute ABI 1.6): fgcore/logprob.h's definition,
 * rows spread over the pool.  With AVX2 a row's normaliser (its maximum and
 * sum of exponentials, most of the work) runs eight logits at a time. */
#include <pthread.h>

#include <fgcore/fp16_simd.h>
#include <fgcore/logprob.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

#if FG_FP16_SIMD_X86
#include <immintrin.h>

/* exp(x) for x <= 0, eight at a time: 2^round(x log2 e) times a degree-6
 * polynomial of the rest (Cephes' expf, within 2 ulp); 0 below -87 and for
 * -inf and NaN (NaN counts as -inf). */
__attribute__((target("avx2,fma")))
static __m256 cb_exp_neg(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.0f);
	__m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ); /* false for NaN, -inf */
	x = _mm256_max_ps(x, lo);
	__m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
	return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

/* fg_logprob_norm_of's numbers, the maximum and the sum eight lanes wide (the
 * sum's order is free: fgcore/logprob.h). */
__attribute__((target("avx2,fma")))
static struct fg_logprob_norm cb_norm_avx2(const float *x, int64_t n)
{
	struct fg_logprob_norm s = { -INFINITY, NAN };
	__m256 m = _mm256_set1_ps(-INFINITY);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) /* max_ps(x, m) keeps m where x is NaN */
		m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
	float lanes[8];
	_mm256_storeu_ps(lanes, m);
	for (int j = 0; j < 8; j++)
		s.max = lanes[j] > s.max ? lanes[j] : s.max;
	for (; i < n; i++)
		s.max = x[i] > s.max ? x[i] : s.max;
	if (s.max == INFINITY || s.max == -INFINITY)
		return fg_logprob_norm_of(x, n); /* rare: the plain form's answer */

	__m256 mx = _mm256_set1_ps(s.max);
	__m256d z0 = _mm256_setzero_pd(), z1 = _mm256_setzero_pd();
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 t = cb_exp_neg(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
		z0 = _mm256_add_pd(z0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
		z1 = _mm256_add_pd(z1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
	}
	double zl[4], z = 0;
	_mm256_storeu_pd(zl, _mm256_add_pd(z0, z1));
	z = zl[0] + zl[1] + zl[2] + zl[3];
	for (; i < n; i++)
		if (x[i] == x[i])
			z += (double)expf(x[i] - s.max);
	s.lse = (double)s.max + log(z);
	return s;
}
#endif

struct cb_logprob {
	const struct fg_logprob_args *a;
	int simd;
};

static void cb_logprob_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct cb_logprob *L = arg;
	const struct fg_logprob_args *a = L->a;
	int64_t k = a->k, n = a->logits.cols;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		const float *x = (const float *)a->logits.data + r * a->logits.ld;
		struct fg_logprob_norm s;

		if (a->target[r] < 0)
			continue;
#if FG_FP16_SIMD_X86
		s = L->simd ? cb_norm_avx2(x, n) : fg_logprob_norm_of(x, n);
#else
		s = fg_logprob_norm_of(x, n);
#endif
		fg_logprob_row_with(x, n, s, a->target[r], a->k, &a->lp[r],
				    k ? a->top_id + r * k : NULL, k ? a->top_lp + r * k : NULL);
	}
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_logprob(void *ctx, void *stream, const struct fg_logprob_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_logprob L = { a, c->isa != CPU_BLAS_ISA_NONE };

	(void)stream;
	if (a->logits.rows == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	/* A row is a pass or two over the vocabulary: a few rows a thread at least. */
	cpu_blas_pool_run(c->pool, a->logits.rows, 1 + (1 << 18) / (a->logits.cols + 1),
			  cb_logprob_rows, (void *)&L);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
