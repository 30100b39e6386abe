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
 * once, not three times).  Both paths widen to the same fp32 values and make
 * the same sums in the same order per head: the same results.  An fp8 cache
 * (FG_DTYPE_F8_COLS) is read in place the same way (codes decoded exactly in
 * registers, f8_avx2.h, each 16 columns at their group's scale) where AVX2
 * runs and a head starts on a group of 64 with a multiple of 16 columns;
 * elsewhere it takes the widening path, each row decoded by f8.h's rule.
 * A 4-bit cache is attention_q4.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include "plugins/compute/cpu_blas/f8_avx2.h"
#include <fgcore/f8.h>
#include <fgcore/fp16_simd.h>

struct cb_attn {
	struct cpu_blas_ctx *c;
	const struct fg_attention_args *a;
	int decode;
	int widen; /* decode with fp16 tensors: widen each task's rows first */
	int f16_direct; /* ... except an fp16 cache with AVX2 and F16C: read in place */
	int f8_direct;  /* ... and an fp8 cache where its heads start on a group */
	int64_t group; /* query heads per key/value head */
};

/* ---- vector helpers: AVX2+FMA where available, plain C otherwise --------------------- */

/* q · row and y += alpha * row over a row of keys or values, fp32 or (the
 * _f16 and _f8 ones) fp16 or fp8 read in place: the same operations in the
 * same order.  s: an fp8 row's scales, one a group of 64 columns from the
 * row's first (the others ignore it). */
typedef float (*cb_dot_fn)(const float *a, const void *b, const void *s, int64_t n);
typedef void (*cb_axpy_fn)(float *y, float alpha, const void *x, const void *s, int64_t n);

static float cb_dot_c(const float *a, const void *bv, const void *sv, int64_t n)
{
	const float *b = bv;

	(void)sv;
	float s[4] = { 0, 0, 0, 0 };
	int64_t i = 0;

	for (; i + 4 <= n; i += 4)
		for (int l = 0; l < 4; l++)
			s[l] += a[i + l] * b[i + l];
	for (; i < n; i++)
		s[0] += a[i] * b[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

static void cb_axpy_c(float *y, float alpha, const void *xv, const void *sv, int64_t n)
{
	const float *x = xv;

	(void)sv;

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
static float cb_dot_avx2(const float *a, const void *bv, const void *sv, int64_t n)
{
	const float *b = bv;
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	float t = 0;

	(void)sv;
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
static void cb_axpy_avx2(float *y, float alpha, const void *xv, const void *sv, int64_t n)
{
	const float *x = xv;
	__m256 av = _mm256_set1_ps(alpha);
	int64_t i = 0;

	(void)sv;
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
static float cb_dot_f16_avx2(const float *a, const void *bv, const void *sv, int64_t n)
{
	const uint16_t *b = bv;
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	float t = 0;

	(void)sv;
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
static void cb_axpy_f16_avx2(float *y, float alpha, const void *xv, const void *sv, int64_t n)
{
	const uint16_t *x = xv;
	__m256 av = _mm256_set1_ps(alpha);
	int64_t i = 0;

	(void)sv;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, cb_load8_f16(x + i),
							 _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += alpha * fg_half_to_float(x[i]);
}

/* 16 columns of an fp8 row from column i (i % 16 == 0) at their group's scale. */
__attribute__((target("avx2,fma,f16c")))
static inline __m256i cb_f8_load16(const uint8_t *b, const uint8_t *s, int64_t i, __m256 *sv)
{
	*sv = _mm256_set1_ps(fg_f8_scale_load(s, (uint64_t)(i / FG_F8_GROUP)));
	return cb_f8_halves(_mm_loadu_si128((const __m128i *)(b + i)));
}

/* cb_dot_avx2's and cb_axpy_avx2's operations on the values fg_f8_value
 * gives: the widening path's results bit for bit (n % 16 == 0). */
__attribute__((target("avx2,fma,f16c")))
static float cb_dot_f8_avx2(const float *a, const void *bv, const void *s, int64_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), sv;

	for (int64_t i = 0; i + 16 <= n; i += 16) {
		__m256i h = cb_f8_load16(bv, s, i, &sv);

		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), cb_f8_values(h, 0, sv), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), cb_f8_values(h, 1, sv), s1);
	}
	return cb_hsum_avx2(s0, s1, 0);
}

__attribute__((target("avx2,fma,f16c")))
static void cb_axpy_f8_avx2(float *y, float alpha, const void *xv, const void *s, int64_t n)
{
	__m256 av = _mm256_set1_ps(alpha), sv;

	for (int64_t i = 0; i + 16 <= n; i += 16) {
		__m256i h = cb_f8_load16(xv, s, i, &sv);

		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, cb_f8_values(h, 0, sv),
							 _mm256_loadu_ps(y + i)));
		_mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(av, cb_f8_values(h, 1, sv),
							     _mm256_loadu_ps(y + i + 8)));
	}
}

#endif

/* scale * q · k, soft-capped when cap > 0 (cap * tanh(s / cap), compute ABI
 * 1.12: Gemma 2). */
static inline float cb_score(cb_dot_fn dot, const float *q, const void *k, const void *ks,
			     int64_t hd, float scale, float cap)
{
	float s = scale * dot(q, k, ks, hd);

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

/* Rows of keys or values as dot and axpy read them: row r at p + r * ld
 * bytes; an fp8 cache's scales of the row's groups at s + r * lds. */
struct cb_rows {
	const char *p, *s;
	size_t ld, lds;
};

static inline const void *cb_row(const struct cb_rows *r, int64_t j)
{
	return r->p + (size_t)j * r->ld;
}

static inline const void *cb_row_scales(const struct cb_rows *r, int64_t j)
{
	return r->s ? r->s + (size_t)j * r->lds : NULL;
}

/* out = softmax(s_j) · v[j] over key positions j in [lo, hi], s_j =
 * cb_score(q, k[j]); position j at row cpu_blas_key_row(j, ring).  sc:
 * hi - lo + 1 floats; acc: hd floats. */
static void cb_attend_rows(cb_dot_fn dot, cb_axpy_fn axpy, const float *q,
			   const struct cb_rows *k, const struct cb_rows *v, int64_t lo, int64_t hi,
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
		int64_t r = cpu_blas_key_row(j, ring);
		float s = cb_score(dot, q, cb_row(k, r), cb_row_scales(k, r), hd, scale, cap);

		sc[j - lo] = s;
		if (s > mx)
			mx = s;
	}
	sum = cb_exp_sum(sc, hi - lo + 1, mx);
	memset(acc, 0, (size_t)hd * sizeof(float));
	for (j = lo; j <= hi; j++) {
		int64_t r = cpu_blas_key_row(j, ring);

		axpy(acc, sc[j - lo], cb_row(v, r), cb_row_scales(v, r), hd);
	}
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
	struct cb_rows kr = { (const char *)k, NULL, (size_t)ldk * sizeof(float), 0 };
	struct cb_rows vr = { (const char *)v, NULL, (size_t)ldv * sizeof(float), 0 };
	cb_dot_fn dot;
	cb_axpy_fn axpy;

	cb_f32_kernels(c, &dot, &axpy);
	cb_attend_rows(dot, axpy, q, &kr, &vr, lo, hi, ring, hd, scale, cap, sc, acc, out);
}

/* Columns kc.. of an F8_COLS cache from row krow on, as cb_rows (kc on a
 * group's start: the head's groups are consecutive scales of a row). */
static void cb_f8_rows(const struct fg_tensor *t, int64_t krow, int64_t kc, struct cb_rows *r)
{
	uint64_t grid = fg_f8c_grid_cols((uint64_t)t->cols);
	const char *scales = (const char *)t->data +
			     fg_f8_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);

	r->p = (const char *)t->data + krow * t->cols + kc;
	r->ld = (size_t)t->cols;
	r->s = scales + 4 * fg_f8c_scale_index((uint64_t)t->cols, (uint64_t)krow,
					       (uint64_t)kc / FG_F8_GROUP);
	r->lds = 4 * (size_t)grid;
}

/* One (batch, head) decode task over fp16 tensors: q and the cache
 * rows it reads are widened to fp32 in scratch, the result narrowed if out is fp16. */
static void cb_attn_widened(struct cb_attn *A, int64_t t, float *sc, float *acc)
{
	const struct fg_attention_args *a = A->a;
	int64_t hd = a->head_dim, b = t / a->heads, h = t % a->heads, kc = h / A->group * hd;
	int64_t krow = b * a->cache_stride, hi = a->len - 1, lo = cpu_blas_attn_first_key(a, b, hi);
	float *qb = acc + ((hd + 15) & ~(int64_t)15), *ob = qb + ((hd + 15) & ~(int64_t)15);
	float *kb = ob + ((hd + 15) & ~(int64_t)15), *vb = kb + cpu_blas_attn_keys(a, 1) * hd;
	const float *q = cpu_blas_load(&a->q, b, h * hd, hd, qb);
	float *o = a->out.dtype == FG_DTYPE_F32 ? (float *)a->out.data + b * a->out.ld + h * hd : ob;

#if FG_FP16_SIMD_X86
	if (A->f16_direct || A->f8_direct) {
		struct cb_rows kr, vr;

		if (A->f16_direct) {
			kr = (struct cb_rows){ (const char *)((const uint16_t *)a->k.data + krow * a->k.ld + kc),
					       NULL, (size_t)a->k.ld * 2, 0 };
			vr = (struct cb_rows){ (const char *)((const uint16_t *)a->v.data + krow * a->v.ld + kc),
					       NULL, (size_t)a->v.ld * 2, 0 };
		} else {
			cb_f8_rows(&a->k, krow, kc, &kr);
			cb_f8_rows(&a->v, krow, kc, &vr);
		}
		cb_attend_rows(A->f16_direct ? cb_dot_f16_avx2 : cb_dot_f8_avx2,
			       A->f16_direct ? cb_axpy_f16_avx2 : cb_axpy_f8_avx2, q, &kr, &vr, lo,
			       hi, a->ring, hd, a->scale, a->softcap, sc, acc, o);
		if (o == ob)
			fg_fp16_simd_from_f32((uint16_t *)a->out.data + b * a->out.ld + h * hd, ob,
					      (size_t)hd);
		return;
	}
#endif
	/* position j widened to scratch row j - lo */
	for (int64_t j = lo; j <= hi; j++) {
		int64_t row = krow + (int64_t)cpu_blas_key_row(j, a->ring);
		float *kd = kb + (j - lo) * hd, *vd = vb + (j - lo) * hd;
		const float *kr = kd, *vr = vd;

		if (a->k.dtype == FG_DTYPE_F8_COLS) {
			cpu_blas_f8c_load(A->c->isa, &a->k, row, kc, hd, kd);
			cpu_blas_f8c_load(A->c->isa, &a->v, row, kc, hd, vd);
		} else {
			kr = cpu_blas_load(&a->k, row, kc, hd, kd);
			vr = cpu_blas_load(&a->v, row, kc, hd, vd);
		}

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

static void cb_attn_rows(void *arg, int64_t b0, int64_t e0, int tid)
{
	struct cb_attn *A = arg;
	const struct fg_attention_args *a = A->a;
	int64_t seq = A->decode ? 1 : a->seq, hd = a->head_dim;
	float *sc = A->c->scratch[tid], *acc;

	acc = sc + cpu_blas_attn_keys(a, A->decode);
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
		lo = cpu_blas_attn_first_key(a, b, hi);
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
	int64_t qrows = decode ? a->batch : a->batch * a->seq, keys = cpu_blas_attn_keys(a, decode);
	int64_t kvh = a->kv_heads ? a->kv_heads : a->heads, tasks = qrows * a->heads;
	int64_t hdp = (a->head_dim + 15) & ~(int64_t)15;
	size_t need;
	int rc;

	if (qrows == 0 || a->heads == 0 || a->head_dim == 0)
		return 0;
	if (decode && a->k.dtype == FG_DTYPE_Q4_COLS)
		return cpu_blas_attention_q4(c, a);
	A.group = a->heads / kvh;
	A.widen = a->q.dtype != FG_DTYPE_F32 || a->k.dtype != FG_DTYPE_F32;
#if FG_FP16_SIMD_X86
	A.f16_direct = decode && a->k.dtype == FG_DTYPE_F16 && c->isa != CPU_BLAS_ISA_NONE &&
		       fg_fp16_simd_have_f16c();
	/* every head's columns from a group's start (kc = h' * hd), 16 at a time */
	A.f8_direct = decode && a->k.dtype == FG_DTYPE_F8_COLS && c->isa != CPU_BLAS_ISA_NONE &&
		      fg_fp16_simd_have_f16c() && a->head_dim % 16 == 0 &&
		      (a->head_dim % FG_F8_GROUP == 0 || kvh == 1);
#endif
	need = (size_t)(keys + 16 + a->head_dim);
	if (A.widen) /* q, out, then keys rows of k and of v (cb_attn_widened) */
		need += 2 * (size_t)hdp + 2 * (size_t)keys * (size_t)a->head_dim + 16;
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
