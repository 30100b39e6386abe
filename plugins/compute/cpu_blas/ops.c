/* plugins/compute/cpu_blas/ops.c - embedding gather, layer and RMS norm, KV append, and
 * the 4-bit rows (fgcore/q4.h) that kv_append writes and linear reads.
 *
 * kv_append copies fp32 or fp16 rows into a cache of the same type, or encodes
 * them into a FG_DTYPE_Q4_COLS cache with the int4_group64 codec's exact rules
 * (fgcore/q4.h's parameters and codes; the min/max and the codes vectorized
 * where the isa allows, the rows spread over the thread pool). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/f8_simd.h>
#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>

/* ---- embed -------------------------------------------------------------------- */

struct cb_embed {
	struct cpu_blas_ctx *c;
	const struct fg_embed_args *a;
};

static void cb_embed_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_embed *E = arg;
	const struct fg_embed_args *a = E->a;
	int64_t h = a->out.cols;
	float *p = E->c->scratch[tid];

	for (int64_t i = b; i < e; i++) {
		float *o = (float *)a->out.data + i * a->out.ld;

		fg_fp16_simd_to_f32(o, (const uint16_t *)a->tok.data + a->ids[i] * a->tok.ld, (size_t)h);
		if (!a->pos.data) /* no learned positions (rotary models) */
			continue;
		fg_fp16_simd_to_f32(p, (const uint16_t *)a->pos.data + a->positions[i] * a->pos.ld,
				 (size_t)h);
		for (int64_t j = 0; j < h; j++)
			o[j] += p[j];
	}
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_embed E = { .c = c, .a = a };
	int64_t h = a->tok.cols;
	int rc;

	(void)stream;
	if (a->n == 0 || h == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (size_t)h);
	if (!rc)
		cpu_blas_pool_run(c->pool, a->n, 1 + 32768 / h, cb_embed_rows, &E);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- layer norm and RMS norm ------------------------------------------------------ */

struct cb_layer_norm {
	const struct fg_layer_norm_args *a;
	const float *gamma, *beta; /* beta NULL: none */
};

static void cb_layer_norm_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_layer_norm *N = arg;
	const struct fg_layer_norm_args *a = N->a;
	int64_t h = a->x.cols;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		const float *x = (const float *)a->x.data + i * a->x.ld;
		float *o = (float *)a->out.data + i * a->out.ld;
		double sum = 0, sq = 0, mean, rstd;

		for (int64_t j = 0; j < h; j++)
			sum += x[j];
		mean = sum / (double)h;
		for (int64_t j = 0; j < h; j++) {
			double d = x[j] - mean;

			sq += d * d;
		}
		rstd = 1.0 / sqrt(sq / (double)h + a->eps);
		/* x is read before o[j] is written: out may be x. */
		if (N->beta)
			for (int64_t j = 0; j < h; j++)
				o[j] = (float)((x[j] - mean) * rstd) * N->gamma[j] + N->beta[j];
		else
			for (int64_t j = 0; j < h; j++)
				o[j] = (float)((x[j] - mean) * rstd) * N->gamma[j];
	}
}

/* x / sqrt(mean(x²) + eps) * gamma: the mean in double, as the layer norm. */
static void cb_rms_norm_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_layer_norm *N = arg;
	const struct fg_layer_norm_args *a = N->a;
	int64_t h = a->x.cols;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		const float *x = (const float *)a->x.data + i * a->x.ld;
		float *o = (float *)a->out.data + i * a->out.ld;
		double sq = 0, rstd;

		for (int64_t j = 0; j < h; j++)
			sq += (double)x[j] * x[j];
		rstd = 1.0 / sqrt(sq / (double)h + a->eps);
		for (int64_t j = 0; j < h; j++)
			o[j] = (float)(x[j] * rstd) * N->gamma[j];
	}
}

int cpu_blas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_layer_norm N = { .a = a };
	int64_t n = a->x.rows, h = a->x.cols;
	float *gb;

	(void)stream;
	if (n == 0 || h == 0)
		return 0;
	gb = malloc(2 * (size_t)h * sizeof(float));
	if (!gb) {
		fg_error(c->host, "cpu_blas: layer_norm: out of memory for %" PRId64
			 " gamma/beta values", 2 * h);
		return -ENOMEM;
	}
	fg_fp16_simd_to_f32(gb, a->gamma.data, (size_t)h);
	/* Gemma's 1 + w, summed in fp32 (compute ABI 1.12) */
	if (a->gamma_shift != 0)
		for (int64_t j = 0; j < h; j++)
			gb[j] += a->gamma_shift;
	N.gamma = gb;
	if (a->beta.data) {
		fg_fp16_simd_to_f32(gb + h, a->beta.data, (size_t)h);
		N.beta = gb + h;
	}
	pthread_mutex_lock(&c->lock);
	cpu_blas_pool_run(c->pool, n, 1 + 16384 / h,
			  a->kind == FG_NORM_RMS ? cb_rms_norm_rows : cb_layer_norm_rows, &N);
	pthread_mutex_unlock(&c->lock);
	free(gb);
	return 0;
}

const float *cpu_blas_load(const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
			   float *dst)
{
	if (t->dtype == FG_DTYPE_F32)
		return (const float *)t->data + r * t->ld + c0;
	fg_fp16_simd_to_f32(dst, (const uint16_t *)t->data + r * t->ld + c0, (size_t)w);
	return dst;
}

void cpu_blas_f8c_load(int isa, const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
		       float *dst)
{
	const uint8_t *codes = (const uint8_t *)t->data + r * t->cols;
	const uint8_t *scales = (const uint8_t *)t->data +
				fg_f8_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);

	/* fg_f8c_load, a group's columns at a time at its scale */
	for (int64_t c = c0, end = c0 + w; c < end;) {
		int64_t g = c / FG_F8_GROUP, n = (g + 1) * FG_F8_GROUP;

		n = (n < end ? n : end) - c;
		cpu_blas_f8_decode(isa, codes + c,
				   fg_f8_scale_load(scales, fg_f8c_scale_index((uint64_t)t->cols,
									       (uint64_t)r,
									       (uint64_t)g)),
				   n, dst + (c - c0));
		c += n;
	}
}

/* ---- 4-bit groups (fgcore/q4.h) ------------------------------------------------- */

static const uint8_t *cb_q4_params(const struct fg_tensor *t)
{
	return (const uint8_t *)t->data + fg_q4_data_bytes((uint64_t)t->rows, (uint64_t)t->cols);
}

void cpu_blas_q4_rows_row(const struct fg_tensor *t, int64_t r, float *dst)
{
	const uint8_t *data = t->data, *params = cb_q4_params(t);
	uint64_t cols = (uint64_t)t->cols, e0 = (uint64_t)r * cols;
	uint64_t g0 = (uint64_t)(r / FG_Q4_GROUP) * cols;
	float s, m;

	for (uint64_t c = 0; c < cols; c++) {
		fg_q4_param_load(params, g0 + c, &s, &m);
		dst[c] = (float)fg_q4_nibble(data, e0 + c) * s + m;
	}
}

#if FG_FP16_SIMD_X86
/* Minimum and maximum of x[0..n), NaN skipped, 8 lanes then across them:
 * minps(x, lo) is x < lo ? x : lo, fg_q4_range's comparison (the order only
 * picks between -0 and +0, which fg_q4_param_of makes +0). */
__attribute__((target("avx2")))
static void cb_q4_range_avx2(const float *x, int64_t n, float *lo, float *hi)
{
	__m256 l = _mm256_set1_ps(INFINITY), h = _mm256_set1_ps(-INFINITY);
	float a[8], b[8], tl, th;
	int64_t j = 0;

	for (; j + 8 <= n; j += 8) {
		l = _mm256_min_ps(_mm256_loadu_ps(x + j), l);
		h = _mm256_max_ps(_mm256_loadu_ps(x + j), h);
	}
	_mm256_storeu_ps(a, l);
	_mm256_storeu_ps(b, h);
	fg_q4_range(x + j, (size_t)(n - j), &tl, &th);
	for (int k = 0; k < 8; k++) {
		tl = a[k] < tl ? a[k] : tl;
		th = b[k] > th ? b[k] : th;
	}
	*lo = tl;
	*hi = th;
}

/* q[j] of x[j], n a multiple of 8: fg_q4_code's operations (maxps(t, 0) is
 * t > 0 ? t : 0, NaN to 0; cvtps2dq rounds to nearest, ties to even). */
__attribute__((target("avx2")))
static void cb_q4_codes_avx2(const float *x, int64_t n, float m, float inv, uint8_t *q)
{
	__m256 vm = _mm256_set1_ps(m), vi = _mm256_set1_ps(inv), z = _mm256_setzero_ps();
	__m256 top = _mm256_set1_ps(15.0f);

	for (int64_t j = 0; j < n; j += 8) {
		__m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vi);
		__m256i c = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, z), top));
		__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));

		_mm_storel_epi64((__m128i *)(q + j), _mm_packus_epi16(w, w));
	}
}

/* out[i] = q[2i] << 4 | q[2i + 1] for 2i < n, n a multiple of 16. */
__attribute__((target("avx2")))
static void cb_q4_pack_avx2(const uint8_t *q, int64_t n, uint8_t *out)
{
	__m128i wt = _mm_set1_epi16(0x0110); /* q[2i] * 16 + q[2i + 1] * 1 */

	for (int64_t j = 0; j < n; j += 16) {
		__m128i p = _mm_maddubs_epi16(_mm_loadu_si128((const __m128i *)(q + j)), wt);

		_mm_storel_epi64((__m128i *)(out + j / 2), _mm_packus_epi16(p, p));
	}
}
#endif

/* One group of x[0..n): its parameters and q[j] of x[j] (fg_q4_encode_group). */
static void cb_q4_encode_group(int isa, const float *x, int64_t n, struct fg_q4_param *p,
			       uint8_t *q)
{
	int64_t j = 0;
	float lo, hi;

#if FG_FP16_SIMD_X86
	if (isa != CPU_BLAS_ISA_NONE) {
		cb_q4_range_avx2(x, n, &lo, &hi);
		*p = fg_q4_param_of(lo, hi);
		j = n & ~(int64_t)7;
		cb_q4_codes_avx2(x, j, p->m, p->inv, q);
	} else
#endif
	{
		(void)isa;
		fg_q4_range(x, (size_t)n, &lo, &hi);
		*p = fg_q4_param_of(lo, hi);
	}
	for (; j < n; j++)
		q[j] = (uint8_t)fg_q4_code(x[j], p->m, p->inv);
}

void cpu_blas_q4_cols_store(int isa, const struct fg_tensor *t, int64_t r, const float *x)
{
	uint8_t *data = t->data, *params = (uint8_t *)cb_q4_params(t);
	uint64_t cols = (uint64_t)t->cols, gcols = fg_q4_grid_cols(cols, 1);
	uint64_t e0 = (uint64_t)r * cols;
	uint8_t q[FG_Q4_GROUP];

	for (uint64_t g = 0; g < gcols; g++) {
		uint64_t c0 = g * FG_Q4_GROUP, w = cols - c0 < FG_Q4_GROUP ? cols - c0 : FG_Q4_GROUP;
		struct fg_q4_param p;

		cb_q4_encode_group(isa, x + c0, (int64_t)w, &p, q);
		fg_q4_param_store(params, (uint64_t)r * gcols + g, &p);
		uint64_t j = 0, e = e0 + c0;

#if FG_FP16_SIMD_X86
		if (e % 2 == 0 && isa != CPU_BLAS_ISA_NONE) {
			j = w & ~(uint64_t)15;
			cb_q4_pack_avx2(q, (int64_t)j, data + e / 2);
		}
#endif
		if (e % 2 == 0) /* whole bytes */
			for (; j + 1 < w; j += 2)
				data[(e + j) / 2] = (uint8_t)(q[j] << 4 | q[j + 1]);
		for (; j < w; j++) /* bytes shared with the row before or after */
			fg_q4_set_nibble(data, e + j, q[j]);
	}
}

/* ---- KV append ----------------------------------------------------------------- */

struct cb_append {
	struct cpu_blas_ctx *c;
	const struct fg_kv_append_args *a;
};

/* Source rows [i0, i1) (row i: sequence i / n, position start + i % n) encoded
 * into a 4-bit cache; fp16 rows widened in the thread's scratch. */
static void cb_append_q4_rows(void *arg, int64_t i0, int64_t i1, int tid)
{
	struct cb_append *A = arg;
	const struct fg_kv_append_args *a = A->a;

	for (int64_t i = i0; i < i1; i++)
		cpu_blas_q4_cols_store(A->c->isa, &a->cache,
				       i / a->n * a->cache_stride + a->start + i % a->n,
				       cpu_blas_load(&a->src, i, 0, a->src.cols,
						     A->c->scratch[tid]));
}

/* The same into an fp8 cache: rows are whole bytes, any thread any row. */
static void cb_append_f8_rows(void *arg, int64_t i0, int64_t i1, int tid)
{
	struct cb_append *A = arg;
	const struct fg_kv_append_args *a = A->a;
	const struct fg_tensor *t = &a->cache;

	for (int64_t i = i0; i < i1; i++)
		fg_f8c_simd_store_row(t->data, (uint64_t)t->rows, (uint64_t)t->cols,
				      (uint64_t)(i / a->n * a->cache_stride + a->start + i % a->n),
				      cpu_blas_load(&a->src, i, 0, a->src.cols, A->c->scratch[tid]));
}

/* The core checked the arguments: src fp32 or fp16, the cache the same type,
 * FG_DTYPE_Q4_COLS or FG_DTYPE_F8_COLS, separate buffers. */
int cpu_blas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_append A = { .c = c, .a = a };
	int64_t h = a->src.cols;
	int rc;

	(void)stream;
	if (h == 0 || a->n == 0 || a->batch == 0)
		return 0;
	if (a->cache.dtype == FG_DTYPE_F8_COLS) {
		pthread_mutex_lock(&c->lock);
		rc = cpu_blas_scratch(c, (size_t)h);
		if (!rc)
			cpu_blas_pool_run(c->pool, a->batch * a->n, 1 + 16384 / h, cb_append_f8_rows,
					  &A);
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	if (a->cache.dtype != FG_DTYPE_Q4_COLS) {
		size_t es = fg_dtype_size(a->src.dtype);

		for (int64_t b = 0; b < a->batch; b++)
			for (int64_t i = 0; i < a->n; i++)
				memcpy((char *)a->cache.data +
					       (size_t)((b * a->cache_stride + a->start + i) *
							a->cache.ld) * es,
				       (const char *)a->src.data +
					       (size_t)((b * a->n + i) * a->src.ld) * es,
				       (size_t)h * es);
		return 0;
	}
	/* odd rows share bytes: one thread, or neighbours would race on them */
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (size_t)h);
	if (!rc)
		cpu_blas_pool_run_on(c->pool, h % 2 ? 1 : c->threads, a->batch * a->n,
				     1 + 16384 / h, cb_append_q4_rows, &A);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
