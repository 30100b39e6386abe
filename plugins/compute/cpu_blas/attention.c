/* plugins/compute/cpu_blas/attention.c - multi-head and grouped-query
 * attention, prefill and decode.
 *
 * One task per (batch, head, query): a row of scores in per-thread scratch,
 * a softmax in fp32 with the maximum subtracted, then the weighted sum of v.
 * Nothing of size [seq, seq] is ever allocated; a soft cap on the scores
 * (Gemma 2, compute ABI 1.12) is applied as each is made.  Query head h reads the
 * columns of key/value head h / (heads / kv_heads) (all heads: h itself).
 *
 * Decode also reads fp16 tensors (CPU attention delegation from an fp16 GPU
 * backend) and 4-bit caches (FG_DTYPE_Q4_COLS).  With an fp16 cache each
 * (batch, head) task widens q and the cache rows it reads to fp32 in scratch,
 * then runs the same kernel; on an AVX2 + F16C machine the cache is read in
 * place instead, each row converted in registers (the cache crosses memory
 * once, not three times).  A 4-bit cache is always read in place: one task
 * per (batch, key/value head) decodes each row once into a row of scratch
 * that stays in L1 and serves every query head of its group, which crosses
 * the packed cache once however many heads share it.  Every path decodes to
 * the same fp32 values and makes the same sums in the same order per head:
 * the same results.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>
#include <fgcore/q4.h>

struct cb_attn {
	struct cpu_blas_ctx *c;
	const struct fg_attention_args *a;
	int decode;
	int widen; /* decode with fp16 tensors: widen each task's rows first */
	int f16_direct; /* ... except an fp16 cache with AVX2 and F16C: read in place */
	int q4; /* decode over a 4-bit cache: cb_attn_q4's tasks */
	int64_t group; /* query heads per key/value head */
	int64_t part; /* 4-bit cache: query heads per task (group split for idle threads) */
};

/* ---- vector helpers: AVX2+FMA where available, plain C otherwise --------------------- */

/* q · row and y += alpha * row over a row of keys or values, fp32 or (the
 * _f16 ones) fp16 read in place: the same operations in the same order. */
typedef float (*cb_dot_fn)(const float *a, const void *b, int64_t n);
typedef void (*cb_axpy_fn)(float *y, float alpha, const void *x, int64_t n);

static float cb_dot_c(const float *a, const void *bv, int64_t n)
{
	const float *b = bv;
	float s[4] = { 0, 0, 0, 0 };
	int64_t i = 0;

	for (; i + 4 <= n; i += 4)
		for (int l = 0; l < 4; l++)
			s[l] += a[i + l] * b[i + l];
	for (; i < n; i++)
		s[0] += a[i] * b[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

static void cb_axpy_c(float *y, float alpha, const void *xv, int64_t n)
{
	const float *x = xv;

	for (int64_t i = 0; i < n; i++)
		y[i] += alpha * x[i];
}

#if FG_FP16_SIMD_X86
/* s0 + s1 summed across lanes, plus t. */
__attribute__((target("avx2")))
static inline float cb_hsum_avx2(__m256 s0, __m256 s1, float t)
{
	__m128 h;

	s0 = _mm256_add_ps(s0, s1);
	h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 0x55));
	return _mm_cvtss_f32(h) + t;
}

__attribute__((target("avx2,fma")))
static float cb_dot_avx2(const float *a, const void *bv, int64_t n)
{
	const float *b = bv;
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	float t = 0;

	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
	for (; i < n; i++)
		t += a[i] * b[i];
	return cb_hsum_avx2(s0, s1, t);
}

__attribute__((target("avx2,fma")))
static void cb_axpy_avx2(float *y, float alpha, const void *xv, int64_t n)
{
	const float *x = xv;
	__m256 av = _mm256_set1_ps(alpha);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
							 _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += alpha * x[i];
}

/* Eight halves from p, widened. */
__attribute__((target("avx,f16c")))
static inline __m256 cb_load8_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

__attribute__((target("avx2,fma,f16c")))
static float cb_dot_f16_avx2(const float *a, const void *bv, int64_t n)
{
	const uint16_t *b = bv;
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	float t = 0;

	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), cb_load8_f16(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), cb_load8_f16(b + i + 8), s1);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), cb_load8_f16(b + i), s0);
	for (; i < n; i++)
		t += a[i] * fg_half_to_float(b[i]);
	return cb_hsum_avx2(s0, s1, t);
}

__attribute__((target("avx2,fma,f16c")))
static void cb_axpy_f16_avx2(float *y, float alpha, const void *xv, int64_t n)
{
	const uint16_t *x = xv;
	__m256 av = _mm256_set1_ps(alpha);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, cb_load8_f16(x + i),
							 _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += alpha * fg_half_to_float(x[i]);
}

/* The 8 codes in the 4 bytes at p, in element order (even ones in the high
 * nibble), one a byte. */
__attribute__((target("avx2")))
static inline __m128i cb_q4_codes8(const uint8_t *p)
{
	__m128i m = _mm_set1_epi8(15), b;
	uint32_t w;

	memcpy(&w, p, sizeof(w));
	b = _mm_cvtsi32_si128((int)w);
	return _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* The codes in the low 8 bytes of x (one a byte) decoded: q * s + m. */
__attribute__((target("avx2,fma")))
static inline __m256 cb_q4_value8(__m128i x, __m256 vs, __m256 vm)
{
	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), vs, vm);
}

/* cb_q4_row with AVX2, FMA and F16C: the group's (scale, min) widened at once,
 * whole bytes decoded 32 codes (16 bytes) at a time in registers. */
__attribute__((target("avx2,fma,f16c")))
static void cb_q4_row_avx2(const uint8_t *data, const uint8_t *params, uint64_t e0, uint64_t g0,
			   int64_t c0, int64_t w, float *dst)
{
	const __m128i m15 = _mm_set1_epi8(15);
	float *d = dst - c0;
	int64_t c = c0;

	while (c < c0 + w) {
		int64_t end = (c / FG_Q4_GROUP + 1) * FG_Q4_GROUP;
		uint32_t pw;
		__m128 sm;
		__m256 vs, vm;

		end = end < c0 + w ? end : c0 + w;
		memcpy(&pw, params + 4 * (g0 + (uint64_t)(c / FG_Q4_GROUP)), sizeof(pw));
		sm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)pw)); /* scale, min */
		vs = _mm256_broadcastss_ps(sm);
		vm = _mm256_broadcastss_ps(_mm_movehdup_ps(sm));
		for (; (e0 + (uint64_t)c) % 2 == 0 && c + 32 <= end; c += 32) {
			__m128i b = _mm_loadu_si128((const __m128i *)(data + (e0 + (uint64_t)c) / 2));
			__m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m15), lo = _mm_and_si128(b, m15);
			__m128i x0 = _mm_unpacklo_epi8(hi, lo), x1 = _mm_unpackhi_epi8(hi, lo);

			_mm256_storeu_ps(d + c, cb_q4_value8(x0, vs, vm));
			_mm256_storeu_ps(d + c + 8, cb_q4_value8(_mm_srli_si128(x0, 8), vs, vm));
			_mm256_storeu_ps(d + c + 16, cb_q4_value8(x1, vs, vm));
			_mm256_storeu_ps(d + c + 24, cb_q4_value8(_mm_srli_si128(x1, 8), vs, vm));
		}
		for (; (e0 + (uint64_t)c) % 2 == 0 && c + 8 <= end; c += 8)
			_mm256_storeu_ps(d + c, cb_q4_value8(cb_q4_codes8(data + (e0 + (uint64_t)c) / 2),
							     vs, vm));
		for (; c < end; c++)
			d[c] = fg_q4_value(fg_q4_nibble(data, e0 + (uint64_t)c), _mm_cvtss_f32(sm),
					   _mm_cvtss_f32(_mm_movehdup_ps(sm)));
	}
}
#endif

/* The row that holds key position j: j itself, or j % ring in a ring. */
static inline size_t cb_key_row(int64_t j, int64_t ring)
{
	return (size_t)(ring ? j % ring : j);
}

/* dst[0..w) = columns [c0, c0 + w) of row r of a 4-bit cache: q * scale + min
 * in fp32 as every decoder makes it (q * scale is exact: an FMA gives the
 * same bits); in registers with simd (AVX2 + FMA + F16C). */
static void cb_q4_row(int simd, const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
		      float *dst)
{
	const uint8_t *data = t->data;
	const uint8_t *params = data + fg_q4_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);
	uint64_t e0 = (uint64_t)r * (uint64_t)t->cols;
	uint64_t g0 = (uint64_t)r * fg_q4_grid_cols((uint64_t)t->cols, 1);

#if FG_FP16_SIMD_X86
	if (simd) {
		cb_q4_row_avx2(data, params, e0, g0, c0, w, dst);
		return;
	}
#else
	(void)simd;
#endif
	for (int64_t c = c0; c < c0 + w;) {
		int64_t end = (c / FG_Q4_GROUP + 1) * FG_Q4_GROUP;
		float s, m;

		end = end < c0 + w ? end : c0 + w;
		fg_q4_param_load(params, g0 + (uint64_t)(c / FG_Q4_GROUP), &s, &m);
		for (; c < end; c++)
			dst[c - c0] = fg_q4_value(fg_q4_nibble(data, e0 + (uint64_t)c), s, m);
	}
}

/* scale * q · k, soft-capped when cap > 0 (cap * tanh(s / cap), compute ABI
 * 1.12: Gemma 2). */
static inline float cb_score(cb_dot_fn dot, const float *q, const void *k, int64_t hd,
			     float scale, float cap)
{
	float s = scale * dot(q, k, hd);

	return cap > 0 ? tanhf(s / cap) * cap : s;
}

/* sc[j] = exp(sc[j] - mx) for j < n; returns their sum, in j order. */
static float cb_exp_sum(float *sc, int64_t n, float mx)
{
	float sum = 0;

	for (int64_t j = 0; j < n; j++) {
		float e = expf(sc[j] - mx);

		sc[j] = e;
		sum += e;
	}
	return sum;
}

/* out = acc / sum over hd values. */
static void cb_finish(const float *acc, float sum, int64_t hd, float *out)
{
	float inv = 1.0f / sum;

	for (int64_t j = 0; j < hd; j++)
		out[j] = acc[j] * inv;
}

/* out = softmax(s_j) · v[j] over key positions j in [lo, hi], s_j =
 * cb_score(q, k[j]); position j at row cb_key_row(j, ring); rows are ldk and
 * ldv bytes apart, their elements what dot and axpy read.  sc: hi - lo + 1
 * floats; acc: hd floats. */
static void cb_attend_rows(cb_dot_fn dot, cb_axpy_fn axpy, const float *q, const void *k,
			   size_t ldk, const void *v, size_t ldv, int64_t lo, int64_t hi,
			   int64_t ring, int64_t hd, float scale, float cap, float *sc, float *acc,
			   float *out)
{
	float mx = -INFINITY, sum;
	int64_t j;

	if (lo > hi) {
		memset(out, 0, (size_t)hd * sizeof(float));
		return;
	}
	for (j = lo; j <= hi; j++) {
		float s = cb_score(dot, q, (const char *)k + cb_key_row(j, ring) * ldk, hd, scale,
				   cap);

		sc[j - lo] = s;
		if (s > mx)
			mx = s;
	}
	sum = cb_exp_sum(sc, hi - lo + 1, mx);
	memset(acc, 0, (size_t)hd * sizeof(float));
	for (j = lo; j <= hi; j++)
		axpy(acc, sc[j - lo], (const char *)v + cb_key_row(j, ring) * ldv, hd);
	cb_finish(acc, sum, hd, out);
}

/* The machine's fp32 dot and axpy: AVX2 + FMA unless the isa is none. */
static void cb_f32_kernels(const struct cpu_blas_ctx *c, cb_dot_fn *dot, cb_axpy_fn *axpy)
{
	*dot = cb_dot_c;
	*axpy = cb_axpy_c;
#if FG_FP16_SIMD_X86
	if (c->isa != CPU_BLAS_ISA_NONE) {
		*dot = cb_dot_avx2;
		*axpy = cb_axpy_avx2;
	}
#else
	(void)c;
#endif
}

/* cb_attend_rows over fp32 rows ld floats apart, with the machine's kernels. */
static void cb_attend(const struct cpu_blas_ctx *c, const float *q, const float *k, int64_t ldk,
		      const float *v, int64_t ldv, int64_t lo, int64_t hi, int64_t ring,
		      int64_t hd, float scale, float cap, float *sc, float *acc, float *out)
{
	cb_dot_fn dot;
	cb_axpy_fn axpy;

	cb_f32_kernels(c, &dot, &axpy);
	cb_attend_rows(dot, axpy, q, k, (size_t)ldk * sizeof(float), v, (size_t)ldv * sizeof(float),
		       lo, hi, ring, hd, scale, cap, sc, acc, out);
}

/* The first key column the query at column hi of row b sees: the row's
 * first real one, or within the sliding window (compute ABI 1.11). */
static int64_t cb_first_key(const struct fg_attention_args *a, int64_t b, int64_t hi)
{
	int64_t lo = a->pad[b];
	return a->window > 0 && hi - a->window + 1 > lo ? hi - a->window + 1 : lo;
}

/* The most keys one query attends to: a ring holds `ring` of them, a
 * window sees `window` (compute ABI 1.12: a ring as short as the window,
 * whatever len - pad is, since cb_first_key starts within it). */
static int64_t cb_keys(const struct fg_attention_args *a, int decode)
{
	int64_t n = !decode ? a->seq : a->ring && a->ring < a->len ? a->ring : a->len;
	return a->window > 0 && a->window < n ? a->window : n;
}

/* One (batch, head) decode task over fp16 tensors: q and the cache
 * rows it reads are widened to fp32 in scratch, the result narrowed if out is fp16. */
static void cb_attn_widened(struct cb_attn *A, int64_t t, float *sc, float *acc)
{
	const struct fg_attention_args *a = A->a;
	int64_t hd = a->head_dim, b = t / a->heads, h = t % a->heads, kc = h / A->group * hd;
	int64_t krow = b * a->cache_stride, hi = a->len - 1, lo = cb_first_key(a, b, hi);
	float *qb = acc + ((hd + 15) & ~(int64_t)15), *ob = qb + ((hd + 15) & ~(int64_t)15);
	float *kb = ob + ((hd + 15) & ~(int64_t)15), *vb = kb + cb_keys(a, 1) * hd;
	const float *q = cpu_blas_load(&a->q, b, h * hd, hd, qb);
	float *o = a->out.dtype == FG_DTYPE_F32 ? (float *)a->out.data + b * a->out.ld + h * hd : ob;

#if FG_FP16_SIMD_X86
	if (A->f16_direct) {
		cb_attend_rows(cb_dot_f16_avx2, cb_axpy_f16_avx2, q,
			       (const uint16_t *)a->k.data + krow * a->k.ld + kc, (size_t)a->k.ld * 2,
			       (const uint16_t *)a->v.data + krow * a->v.ld + kc, (size_t)a->v.ld * 2,
			       lo, hi, a->ring, hd, a->scale, a->softcap, sc, acc, o);
		if (o == ob)
			fg_fp16_simd_from_f32((uint16_t *)a->out.data + b * a->out.ld + h * hd, ob,
					      (size_t)hd);
		return;
	}
#endif
	/* position j widened to scratch row j - lo */
	for (int64_t j = lo; j <= hi; j++) {
		int64_t row = krow + (int64_t)cb_key_row(j, a->ring);
		float *kd = kb + (j - lo) * hd, *vd = vb + (j - lo) * hd;
		const float *kr = cpu_blas_load(&a->k, row, kc, hd, kd);
		const float *vr = cpu_blas_load(&a->v, row, kc, hd, vd);

		/* fp32 k or v: pointers into the cache itself, copied for one layout */
		if (kr != kd)
			memcpy(kd, kr, (size_t)hd * sizeof(float));
		if (vr != vd)
			memcpy(vd, vr, (size_t)hd * sizeof(float));
	}
	cb_attend(A->c, q, kb, hd, vb, hd, 0, hi - lo, 0, hd, a->scale, a->softcap, sc, acc, o);
	if (o == ob)
		fg_fp16_simd_from_f32((uint16_t *)a->out.data + b * a->out.ld + h * hd, ob,
				      (size_t)hd);
}

#define CB_Q4_AHEAD 16 /* rows a 4-bit decode task prefetches ahead */

/* Ask for columns [c0, c0 + w) of row r of a 4-bit cache, codes and
 * parameters: a task's rows are a cache width apart, too far apart for the
 * hardware prefetcher to follow, and hold little of it each. */
static void cb_q4_prefetch(const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w)
{
	const uint8_t *data = t->data;
	const uint8_t *params = data + fg_q4_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);
	uint64_t e0 = (uint64_t)r * (uint64_t)t->cols + (uint64_t)c0;
	uint64_t g0 = (uint64_t)r * fg_q4_grid_cols((uint64_t)t->cols, 1);

	for (uint64_t b = e0 / 2; b <= (e0 + (uint64_t)w - 1) / 2; b += 64)
		__builtin_prefetch(data + b);
	__builtin_prefetch(data + (e0 + (uint64_t)w - 1) / 2);
	__builtin_prefetch(params + 4 * (g0 + (uint64_t)c0 / FG_Q4_GROUP));
	__builtin_prefetch(params + 4 * (g0 + (uint64_t)(c0 + w - 1) / FG_Q4_GROUP));
}

/* Query heads [h0, h0 + hn) of batch row b, key/value head kh, over a 4-bit
 * cache (one task, A->part heads at most): each position's k row, then its v
 * row, decoded once into `row` (hd floats, in L1) and used by every head;
 * per head cb_attend_rows' operations in its order.  sc: A->part rows of
 * cb_keys floats; buf: 2 * A->part + 2 rows of hdp floats, then 2 * A->part. */
static void cb_attn_q4(struct cb_attn *A, int64_t b, int64_t kh, int64_t h0, int64_t hn,
		       float *sc, float *buf)
{
	const struct fg_attention_args *a = A->a;
	int64_t hd = a->head_dim, hdp = (hd + 15) & ~(int64_t)15, kc = kh * hd;
	int64_t krow = b * a->cache_stride, hi = a->len - 1, lo = cb_first_key(a, b, hi);
	int64_t n = hi - lo + 1, i, j;
	float *q = buf, *acc = q + A->part * hdp, *row = acc + A->part * hdp, *ob = row + hdp;
	float *mx = ob + hdp, *sum = mx + A->part;
	int simd = A->c->isa != CPU_BLAS_ISA_NONE;
	cb_dot_fn dot;
	cb_axpy_fn axpy;

	cb_f32_kernels(A->c, &dot, &axpy);
	for (i = 0; i < hn; i++) {
		const float *qi = cpu_blas_load(&a->q, b, (h0 + i) * hd, hd, q + i * hdp);

		if (qi != q + i * hdp) /* fp32 q: the tensor itself */
			memcpy(q + i * hdp, qi, (size_t)hd * sizeof(float));
		mx[i] = -INFINITY;
	}
	for (j = lo; j <= hi; j++) {
		if (j + CB_Q4_AHEAD <= hi)
			cb_q4_prefetch(&a->k, krow + (int64_t)cb_key_row(j + CB_Q4_AHEAD, a->ring), kc, hd);
		cb_q4_row(simd, &a->k, krow + (int64_t)cb_key_row(j, a->ring), kc, hd, row);
		for (i = 0; i < hn; i++) {
			float s = cb_score(dot, q + i * hdp, row, hd, a->scale, a->softcap);

			sc[i * n + j - lo] = s;
			if (s > mx[i])
				mx[i] = s;
		}
	}
	for (i = 0; i < hn && n > 0; i++)
		sum[i] = cb_exp_sum(sc + i * n, n, mx[i]);
	memset(acc, 0, (size_t)(hn * hdp) * sizeof(float));
	for (j = lo; j <= hi; j++) {
		if (j + CB_Q4_AHEAD <= hi)
			cb_q4_prefetch(&a->v, krow + (int64_t)cb_key_row(j + CB_Q4_AHEAD, a->ring), kc, hd);
		cb_q4_row(simd, &a->v, krow + (int64_t)cb_key_row(j, a->ring), kc, hd, row);
		for (i = 0; i < hn; i++)
			axpy(acc + i * hdp, sc[i * n + j - lo], row, hd);
	}
	for (i = 0; i < hn; i++) {
		float *o = a->out.dtype == FG_DTYPE_F32 ?
				   (float *)a->out.data + b * a->out.ld + (h0 + i) * hd : ob;

		if (n > 0)
			cb_finish(acc + i * hdp, sum[i], hd, o);
		else /* no key to see (all pads): zeros */
			memset(o, 0, (size_t)hd * sizeof(float));
		if (o == ob)
			fg_fp16_simd_from_f32((uint16_t *)a->out.data + b * a->out.ld + (h0 + i) * hd,
					      ob, (size_t)hd);
	}
}

/* Tasks of a decode over a 4-bit cache: (batch row, key/value head, part of
 * its group of query heads). */
static void cb_attn_q4_tasks(struct cb_attn *A, int64_t t0, int64_t t1, float *sc)
{
	const struct fg_attention_args *a = A->a;
	int64_t parts = (A->group + A->part - 1) / A->part, kvh = a->heads / A->group;
	float *buf = sc + A->part * cb_keys(a, 1);

	buf += (-(uintptr_t)buf / sizeof(float)) & 15; /* 64-byte aligned rows */
	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / (kvh * parts), kh = t / parts % kvh;
		int64_t h0 = kh * A->group + t % parts * A->part;
		int64_t hn = (kh + 1) * A->group - h0 < A->part ? (kh + 1) * A->group - h0 : A->part;

		cb_attn_q4(A, b, kh, h0, hn, sc, buf);
	}
}

static void cb_attn_rows(void *arg, int64_t b0, int64_t e0, int tid)
{
	struct cb_attn *A = arg;
	const struct fg_attention_args *a = A->a;
	int64_t seq = A->decode ? 1 : a->seq, hd = a->head_dim;
	float *sc = A->c->scratch[tid], *acc;

	if (A->q4) {
		cb_attn_q4_tasks(A, b0, e0, sc);
		return;
	}
	acc = sc + cb_keys(a, A->decode);
	acc += (-(uintptr_t)acc / sizeof(float)) & 15; /* keep acc 64-byte aligned */
	if (A->widen) {
		for (int64_t t = b0; t < e0; t++)
			cb_attn_widened(A, t, sc, acc);
		return;
	}
	for (int64_t t = b0; t < e0; t++) {
		int64_t b = t / (a->heads * seq), h = (t / seq) % a->heads, i = t % seq;
		int64_t row = b * seq + i, kc = h / A->group * hd, krow, lo, hi;
		const float *q = (const float *)a->q.data + row * a->q.ld + h * hd;
		float *o = (float *)a->out.data + row * a->out.ld + h * hd;

		if (A->decode) {
			krow = b * a->cache_stride;
			hi = a->len - 1;
		} else {
			krow = b * a->seq;
			hi = i; /* i < pad[b] gives an empty range: zeros */
		}
		lo = cb_first_key(a, b, hi);
		cb_attend(A->c, q, (const float *)a->k.data + krow * a->k.ld + kc, a->k.ld,
			  (const float *)a->v.data + krow * a->v.ld + kc, a->v.ld, lo, hi,
			  A->decode ? a->ring : 0, hd, a->scale, a->softcap, sc, acc, o);
	}
}

/* The core checked the arguments (core/backend/compute_ops.c): prefill is
 * fp32; decode has fp32 or fp16 q/out with a cache of their type or 4-bit. */
static int cb_attention(struct cpu_blas_ctx *c, const struct fg_attention_args *a, int decode)
{
	struct cb_attn A = { .c = c, .a = a, .decode = decode };
	int64_t qrows = decode ? a->batch : a->batch * a->seq, keys = cb_keys(a, decode);
	int64_t kvh = a->kv_heads ? a->kv_heads : a->heads, tasks = qrows * a->heads;
	int64_t hdp = (a->head_dim + 15) & ~(int64_t)15;
	size_t need;
	int rc;

	if (qrows == 0 || a->heads == 0 || a->head_dim == 0)
		return 0;
	A.group = a->heads / kvh;
	A.q4 = decode && a->k.dtype == FG_DTYPE_Q4_COLS;
	A.widen = !A.q4 && (a->q.dtype != FG_DTYPE_F32 || a->k.dtype != FG_DTYPE_F32);
#if FG_FP16_SIMD_X86
	A.f16_direct = decode && a->k.dtype == FG_DTYPE_F16 && c->isa != CPU_BLAS_ISA_NONE &&
		       fg_fp16_simd_have_f16c();
#endif
	need = (size_t)(keys + 16 + a->head_dim);
	if (A.widen) /* q, out, then keys rows of k and of v (cb_attn_widened) */
		need += 2 * (size_t)hdp + 2 * (size_t)keys * (size_t)a->head_dim + 16;
	if (A.q4) {
		/* a whole group per task, split where threads would have none */
		int64_t parts = (c->threads + qrows * kvh - 1) / (qrows * kvh);

		parts = parts < A.group ? parts : A.group;
		A.part = (A.group + parts - 1) / parts;
		tasks = qrows * kvh * ((A.group + A.part - 1) / A.part);
		need = (size_t)(A.part * keys + 16 + (2 * A.part + 2) * hdp + 2 * A.part);
	}
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, need);
	if (!rc)
		cpu_blas_pool_run(c->pool, tasks, decode ? 1 : 4, cb_attn_rows, &A);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int cpu_blas_attention_prefill(void *ctx, void *stream, const struct fg_attention_args *a)
{
	(void)stream;
	return cb_attention(ctx, a, 0);
}

int cpu_blas_attention_decode(void *ctx, void *stream, const struct fg_attention_args *a)
{
	(void)stream;
	return cb_attention(ctx, a, 1);
}
