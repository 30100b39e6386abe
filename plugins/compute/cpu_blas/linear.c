/* plugins/compute/cpu_blas/linear.c - out = act(x · wᵀ + bias) ⊙ mul + residual
 * with fp32 activations and fp16, 4-bit or fp8 weights (act: none, ReLU, SiLU
 * or GELU in its tanh form).
 *
 * Two paths, both bounded in memory:
 *  - BLAS (any m): blocks of w rows are widened to fp32 by the pool into one
 *    tile (option tile_mib), OpenBLAS multiplies it (its own threads), and the pool
 *    applies bias / activation / mul / residual over the tile's output.
 *    fp8 weights (FG_DTYPE_F8_ROWS) are widened the same way, each code times
 *    its row's scale (fg_f8_value's product, bit for bit).
 *  - fused (m <= fused_max_m, x86-64 with AVX2 or AVX-512; fp8 weights on
 *    any isa): each pool thread takes 24 rows of w at a time and computes
 *    their dot products with every row of x (fused.c), widening w in
 *    registers as it streams.  Decode-sized products read half the bytes of
 *    an fp32 sgemm and skip OpenBLAS's packing; widening w again for every
 *    block of x rows was measured faster than widening it once into an
 *    L2-resident scratch.  fp8 rows stream a byte per weight, decoded as
 *    E4M3 value times the row's scale in registers (the AVX2 kernels, also
 *    on AVX-512 machines; plain C for isa = none).
 *  - fused 4-bit (m <= fused_max_m, FG_DTYPE_Q4_ROWS weights, any isa): each
 *    task takes up to one group of 64 w rows, converts the group's fp16
 *    (scale, min) pairs to fp32 once, and streams the nibbles, decoding
 *    q * scale + min in registers (fused.c): 4.5 bits read per weight instead
 *    of 32 through a tile.
 * The fused paths' result for a row depends neither on m nor on the thread
 * count (fused.c); OpenBLAS's may (some of its kernels treat the last rows of
 * x differently), and the two paths round differently: fused_max_m = huge
 * gives results independent of the batch split.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include <fgcore/fp16_simd.h>

/* Declared by OpenBLAS's cblas.h; repeated so other CBLAS headers work too. */
void openblas_set_num_threads(int num_threads);

#define CB_CTILE_BYTES (4u << 20)  /* BLAS path: product tile when out == residual */
#define CB_FUSED_ROWS 24           /* fused path: most w rows per task (8 kernels of 3) */
#define CB_FUSED_KBLOCK 1024       /* fused path: k per pass when x has several row blocks */
#define CB_FUSED_FLOPS_PER_THREAD 4e6 /* fused path: least work worth another thread */

struct cb_linear {
	struct cpu_blas_ctx *c;
	const float *x;
	int64_t ldx;
	const uint16_t *w;
	int64_t ldw;
	const struct fg_tensor *wq; /* FG_DTYPE_Q4_ROWS weight, or NULL */
	const uint8_t *w8;  /* FG_DTYPE_F8_ROWS codes (row j at j * k), or NULL */
	const uint8_t *w8s; /* their scales, one per row (fgcore/f8.h) */
	const float *bias; /* fp32 copy, n values, or NULL */
	int relu, silu, gelu;
	const float *mul;  /* gating multiplier, or NULL; never overlaps out */
	int64_t ldm;
	const float *res;  /* may equal out */
	int64_t ldr;
	float *out;
	int64_t ldo;
	int64_t m, n, k;
	int64_t task_rows; /* fused path: w rows per task */
	int64_t q4_kp;     /* fused 4-bit path: floats per scale / min array (and per x row) */
	int64_t q4_state;  /* fused 4-bit path: floats of parked accumulators per thread */
	/* BLAS path: the current tile */
	int64_t j0, jn, i0;
	const float *prod;
	int64_t ldp;
};

/* GELU, tanh form, in fp32 with PyTorch's constants and order of operations
 * (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))). */
static inline float cb_gelu_tanh(float v)
{
	const float beta = 0.7978845608028654f, kappa = 0.044715f; /* sqrt(2/pi) */
	float inner = beta * (v + kappa * (v * v * v));

	return 0.5f * v * (1.0f + tanhf(inner));
}

/* The epilogue of one output, in fp32: + bias, activation, ⊙ mul, + residual. */
static inline float cb_finish(float p, const float *bias, int64_t j, int relu, int silu,
			      int gelu, const float *mul, const float *res)
{
	float v = bias ? p + bias[j] : p;

	if (relu && v < 0)
		v = 0; /* NaN stays NaN */
	if (silu)
		v = v / (1.0f + expf(-v)); /* -inf and very negative v give -0 */
	if (gelu)
		v = cb_gelu_tanh(v);
	if (mul)
		v *= *mul;
	return res ? v + *res : v;
}

/* ---- BLAS path ------------------------------------------------------------------ */

/* 4-bit rows that start a byte (even k): each group's (scale, min) pairs
 * converted once into the thread's scratch, then the rows decoded in vectors. */
static void cb_widen_q4_rows(struct cb_linear *L, int64_t b, int64_t e, int tid)
{
	const uint8_t *data = L->wq->data;
	const uint8_t *params = data + fg_q4_data_bytes((uint64_t)L->n, (uint64_t)L->k);
	float *s = L->c->scratch[tid], *mn = s + L->q4_kp;
	int64_t g = -1;

	for (int64_t r = b; r < e; r++) {
		int64_t j = L->j0 + r;

		if (j / FG_Q4_GROUP != g) {
			g = j / FG_Q4_GROUP;
			cpu_blas_q4_params(L->c->isa, params + 4 * (uint64_t)g * (uint64_t)L->k, L->k,
					   s, mn);
		}
		cpu_blas_q4_decode(L->c->isa, data + (uint64_t)j * (uint64_t)L->k / 2, s, mn, L->k,
				   L->c->tile + r * L->k);
	}
}

static void cb_widen_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;

	if (L->wq && !(L->k & 1)) {
		cb_widen_q4_rows(L, b, e, tid);
		return;
	}
	if (L->w8) {
		for (int64_t r = b; r < e; r++) {
			int64_t j = L->j0 + r;

			cpu_blas_f8_decode(L->c->isa, L->w8 + j * L->k, fg_f8_scale_load(L->w8s,
					   (uint64_t)j), L->k, L->c->tile + r * L->k);
		}
		return;
	}
	for (int64_t r = b; r < e; r++) {
		if (L->wq)
			cpu_blas_q4_rows_row(L->wq, L->j0 + r, L->c->tile + r * L->k);
		else
			fg_fp16_simd_to_f32(L->c->tile + r * L->k, L->w + (L->j0 + r) * L->ldw,
					 (size_t)L->k);
	}
}

/* o[j] = finish(p[j]) for j < n, bias already offset to o's first column;
 * o may be p or res (element by element, so in place is fine).  The vector
 * versions do cb_finish's fp32 operations in its order (+ bias, ReLU keeping
 * NaN and -0, + residual): bit-identical results. */
typedef void (*cb_fin_fn)(float *o, const float *p, const float *bias, const float *res,
			  int64_t n);

#define CB_FIN_INLINE static inline __attribute__((always_inline))

CB_FIN_INLINE void cb_fin_c(const int B, const int R, const int S, float *o, const float *p,
			    const float *bias, const float *res, int64_t n)
{
	for (int64_t j = 0; j < n; j++)
		o[j] = cb_finish(p[j], B ? bias : NULL, j, R, 0, 0, NULL, S ? res + j : NULL);
}

#if FG_FP16_SIMD_X86
CB_FIN_INLINE __attribute__((target("avx2"))) void
cb_fin256(const int B, const int R, const int S, float *o, const float *p, const float *bias,
	  const float *res, int64_t n)
{
	const __m256 zero = _mm256_setzero_ps();
	int64_t j = 0;

	for (; j + 8 <= n; j += 8) {
		__m256 v = _mm256_loadu_ps(p + j);

		if (B)
			v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
		if (R)
			v = _mm256_andnot_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ), v);
		if (S)
			v = _mm256_add_ps(v, _mm256_loadu_ps(res + j));
		_mm256_storeu_ps(o + j, v);
	}
	cb_fin_c(B, R, S, o + j, p + j, B ? bias + j : NULL, S ? res + j : NULL, n - j);
}

CB_FIN_INLINE __attribute__((target("avx512f"))) void
cb_fin512(const int B, const int R, const int S, float *o, const float *p, const float *bias,
	  const float *res, int64_t n)
{
	const __m512 zero = _mm512_setzero_ps();

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
		__m512 v = _mm512_maskz_loadu_ps(m, p + j);

		if (B)
			v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
		if (R)
			v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
		if (S)
			v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + j));
		_mm512_mask_storeu_ps(o + j, m, v);
	}
}
#endif

/* One function per (bias, relu, residual) and ISA. */
#define CB_FIN_DEF(ISA, TGT, B, R, S)                                                      \
	static TGT void cb_fin##ISA##_##B##R##S(float *o, const float *p, const float *bias, \
						const float *res, int64_t n)                 \
	{                                                                                  \
		cb_fin##ISA(B, R, S, o, p, bias, res, n);                                  \
	}
#define CB_FIN_DEF8(ISA, TGT)                                                              \
	CB_FIN_DEF(ISA, TGT, 0, 0, 0) CB_FIN_DEF(ISA, TGT, 0, 0, 1) CB_FIN_DEF(ISA, TGT, 0, 1, 0) \
	CB_FIN_DEF(ISA, TGT, 0, 1, 1) CB_FIN_DEF(ISA, TGT, 1, 0, 0) CB_FIN_DEF(ISA, TGT, 1, 0, 1) \
	CB_FIN_DEF(ISA, TGT, 1, 1, 0) CB_FIN_DEF(ISA, TGT, 1, 1, 1)
#define CB_FIN_REF8(ISA)                                                                   \
	{ cb_fin##ISA##_000, cb_fin##ISA##_001, cb_fin##ISA##_010, cb_fin##ISA##_011,      \
	  cb_fin##ISA##_100, cb_fin##ISA##_101, cb_fin##ISA##_110, cb_fin##ISA##_111 }

CB_FIN_DEF8(_c, )
static const cb_fin_fn cb_fin_fns_c[8] = CB_FIN_REF8(_c);
#if FG_FP16_SIMD_X86
CB_FIN_DEF8(256, __attribute__((target("avx2"))))
CB_FIN_DEF8(512, __attribute__((target("avx512f"))))
static const cb_fin_fn cb_fin_fns256[8] = CB_FIN_REF8(256);
static const cb_fin_fn cb_fin_fns512[8] = CB_FIN_REF8(512);
#endif

static cb_fin_fn cb_fin_pick(const struct cb_linear *L)
{
	int v = (L->bias ? 4 : 0) | (L->relu ? 2 : 0) | (L->res ? 1 : 0);

#if FG_FP16_SIMD_X86
	if (L->c->isa == CPU_BLAS_ISA_AVX512)
		return cb_fin_fns512[v];
	if (L->c->isa == CPU_BLAS_ISA_AVX2)
		return cb_fin_fns256[v];
#endif
	return cb_fin_fns_c[v];
}

/* out[i0 + r, j0 + j] = finish(prod[r, j]) for rows r in [b, e).  SiLU, GELU
 * and mul (the gated MLPs) take the scalar cb_finish; the rest the vector fins. */
static void cb_epilogue_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;
	cb_fin_fn fin = cb_fin_pick(L);
	const float *bias = L->bias ? L->bias + L->j0 : NULL;

	(void)tid;
	if (L->silu || L->gelu || L->mul) {
		for (int64_t r = b; r < e; r++) {
			int64_t i = L->i0 + r;
			const float *p = L->prod + r * L->ldp;
			const float *mul = L->mul ? L->mul + i * L->ldm + L->j0 : NULL;
			const float *res = L->res ? L->res + i * L->ldr + L->j0 : NULL;
			float *o = L->out + i * L->ldo + L->j0;

			for (int64_t j = 0; j < L->jn; j++)
				o[j] = cb_finish(p[j], bias, j, L->relu, L->silu, L->gelu,
						 mul ? mul + j : NULL, res ? res + j : NULL);
		}
		return;
	}
	for (int64_t r = b; r < e; r++) {
		int64_t i = L->i0 + r;
		const float *res = L->res ? L->res + i * L->ldr + L->j0 : NULL;

		fin(L->out + i * L->ldo + L->j0, L->prod + r * L->ldp, bias, res, L->jn);
	}
}

/* ---- split sgemm (few threads: see cpu_blas_ctx.blas_split) ---------------------- */

struct cb_gemm_split {
	struct cb_linear *L;
	int64_t i0, mb;     /* rows of x */
	float *c;
	int64_t ldc;
	int64_t nparts;     /* column blocks */
	int64_t ncols;      /* columns per block (a multiple of 64) */
	int64_t mrows;      /* rows per row block */
};

static void cb_gemm_part(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_gemm_split *G = arg;
	struct cb_linear *L = G->L;

	(void)tid;
	for (int64_t t = b; t < e; t++) {
		int64_t j0 = t % G->nparts * G->ncols, r0 = t / G->nparts * G->mrows;
		int64_t nj = L->jn - j0 < G->ncols ? L->jn - j0 : G->ncols;
		int64_t nr = G->mb - r0 < G->mrows ? G->mb - r0 : G->mrows;

		if (nj <= 0 || nr <= 0)
			continue;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nj, (int)L->k,
			    1.0f, L->x + (G->i0 + r0) * L->ldx, (int)L->ldx,
			    L->c->tile + j0 * L->k, (int)L->k, 0.0f, G->c + r0 * G->ldc + j0,
			    (int)G->ldc);
	}
}

/* One single-threaded sgemm per pool thread: column blocks, or row blocks
 * too when the tile has fewer 64-column blocks than threads. */
static void cb_gemm_split(struct cb_linear *L, int64_t i0, int64_t mb, float *c, int64_t ldc)
{
	int threads = L->c->threads;
	int64_t blocks = (L->jn + 63) / 64, mparts = 1;
	struct cb_gemm_split G = { .L = L, .i0 = i0, .mb = mb, .c = c, .ldc = ldc };

	G.nparts = blocks < threads ? blocks : threads;
	G.ncols = (blocks + G.nparts - 1) / G.nparts * 64;
	if (G.nparts < threads)
		mparts = (threads + G.nparts - 1) / G.nparts;
	G.mrows = (mb + mparts - 1) / mparts;
	cpu_blas_pool_run(L->c->pool, G.nparts * mparts, 1, cb_gemm_part, &G);
}

static void cb_gemm(struct cb_linear *L, int64_t i0, int64_t mb, float *c, int64_t ldc)
{
	if (L->k == 0) {
		for (int64_t r = 0; r < mb; r++)
			memset(c + r * ldc, 0, (size_t)L->jn * sizeof(float));
		return;
	}
	if (L->c->blas_split) {
		cb_gemm_split(L, i0, mb, c, ldc);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mb, (int)L->jn, (int)L->k,
		    1.0f, L->x + i0 * L->ldx, (int)L->ldx, L->c->tile, (int)L->k,
		    0.0f, c, (int)ldc);
}

static int cb_linear_blas(struct cb_linear *L)
{
	struct cpu_blas_ctx *c = L->c;
	int alias = L->res && L->res == L->out;
	int fused_epilogue = L->bias || L->relu || L->silu || L->gelu || L->mul || L->res;
	int64_t nt, k1 = L->k ? L->k : 1;
	int rc;

	/* Process-wide in OpenBLAS: set again, another context may have changed it. */
	openblas_set_num_threads(c->blas_split ? 1 : c->threads);
	/* Big tiles: OpenBLAS repacks x for every call (measured: 16 -> 64 MiB
	 * took 512x4096x4096 from 0.77 to 0.90 of sgemm on 16 cores). */
	nt = (int64_t)(c->tile_bytes / sizeof(float)) / k1;
	nt = nt < 64 ? 64 : nt & ~(int64_t)63;
	if (nt > L->n)
		nt = L->n;
	rc = cpu_blas_buffer(c, &c->tile, &c->tile_len, (size_t)(nt * k1), "weight tile");
	if (rc)
		return rc;
	if (L->wq) { /* scale and min of a group, per thread (cb_widen_q4_rows) */
		L->q4_kp = (L->k + 31) & ~(int64_t)31;
		rc = cpu_blas_scratch(c, (size_t)(2 * L->q4_kp));
		if (rc)
			return rc;
	}
	for (L->j0 = 0; L->j0 < L->n; L->j0 += nt) {
		L->jn = L->n - L->j0 < nt ? L->n - L->j0 : nt;
		if (L->k)
			cpu_blas_pool_run(c->pool, L->jn, (65536 + k1 - 1) / k1, cb_widen_rows, L);
		if (!alias) {
			/* The product lands in out, finished in place. */
			cb_gemm(L, 0, L->m, L->out + L->j0, L->ldo);
			if (fused_epilogue) {
				L->i0 = 0;
				L->prod = L->out + L->j0;
				L->ldp = L->ldo;
				cpu_blas_pool_run(c->pool, L->m, 1 + 16384 / L->jn,
						  cb_epilogue_rows, L);
			}
			continue;
		}
		/* out holds the residual: the product goes through a bounded tile. */
		int64_t mb = (int64_t)(CB_CTILE_BYTES / sizeof(float)) / L->jn;

		if (mb < 1)
			mb = 1;
		if (mb > L->m)
			mb = L->m;
		rc = cpu_blas_buffer(c, &c->ctile, &c->ctile_len, (size_t)(mb * L->jn),
				     "product tile");
		if (rc)
			return rc;
		for (L->i0 = 0; L->i0 < L->m; L->i0 += mb) {
			int64_t rows = L->m - L->i0 < mb ? L->m - L->i0 : mb;

			cb_gemm(L, L->i0, rows, c->ctile, L->jn);
			L->prod = c->ctile;
			L->ldp = L->jn;
			cpu_blas_pool_run(c->pool, rows, 1 + 16384 / L->jn, cb_epilogue_rows, L);
		}
	}
	return 0;
}

/* ---- fused path ------------------------------------------------------------------------- */

static void cb_fused_finish(struct cb_linear *L, int64_t i0, int im, int64_t j0, int jn,
			    float acc[8][3])
{
	for (int i = 0; i < im; i++) {
		int64_t row = i0 + i;
		float *o = L->out + row * L->ldo + j0;
		const float *res = L->res ? L->res + row * L->ldr + j0 : NULL;
		const float *mul = L->mul ? L->mul + row * L->ldm + j0 : NULL;

		for (int j = 0; j < jn; j++)
			o[j] = cb_finish(acc[i][j], L->bias, j0 + j, L->relu, L->silu, L->gelu,
					 mul ? mul + j : NULL, res ? res + j : NULL);
	}
}

/* Rows of x per kernel call and floats per accumulator: the fp16 or fp8 kernels'. */
static int cb_fused_rm(const struct cb_linear *L)
{
	return L->w8 ? cpu_blas_f8_rows(L->c->isa) : cpu_blas_fused_rows(L->c->isa);
}

static int cb_fused_lanes(const struct cb_linear *L)
{
	return L->w8 ? cpu_blas_f8_lanes(L->c->isa) : cpu_blas_fused_lanes(L->c->isa);
}

static void cb_fused_task(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;
	int isa = L->c->isa, rm = cb_fused_rm(L);
	int64_t vec = 3 * (int64_t)rm * cb_fused_lanes(L);
	float *state = L->c->scratch[tid];
	/* Blocking k keeps x's rows in cache while they are reused, but costs the
	 * prefetcher its long streams: only worth it when x has several row blocks. */
	int64_t kb = L->m > rm ? CB_FUSED_KBLOCK : L->k;

	for (int64_t blk = b; blk < e; blk++) {
		int64_t j0 = blk * L->task_rows;
		int64_t jb = L->n - j0 < L->task_rows ? L->n - j0 : L->task_rows;
		float sc[CB_FUSED_ROWS]; /* fp8: the rows' scales */

		for (int64_t jj = 0; L->w8 && jj < jb; jj++)
			sc[jj] = fg_f8_scale_load(L->w8s, (uint64_t)(j0 + jj));
		for (int64_t k0 = 0; k0 < L->k; k0 += kb) {
			int64_t kl = L->k - k0 < kb ? L->k - k0 : kb;
			int flags = (k0 == 0 ? CPU_BLAS_DOT_FIRST : 0) |
				    (k0 + kl == L->k ? CPU_BLAS_DOT_LAST : 0);
			float *st = state;

			for (int64_t i0 = 0; i0 < L->m; i0 += rm) {
				int im = L->m - i0 < rm ? (int)(L->m - i0) : rm;

				for (int64_t jj = 0; jj < jb; jj += 3, st += vec) {
					int jn = jb - jj < 3 ? (int)(jb - jj) : 3;
					float acc[8][3];

					if (L->w8)
						cpu_blas_f8_dot(isa, im, jn, L->x + i0 * L->ldx + k0,
								L->ldx, L->w8 + (j0 + jj) * L->k + k0,
								L->k, sc + jj, kl, flags, st, acc);
					else
						cpu_blas_fused_dot(isa, im, jn, L->x + i0 * L->ldx + k0,
								   L->ldx, L->w + (j0 + jj) * L->ldw + k0,
								   L->ldw, kl, flags, st, acc);
					if (flags & CPU_BLAS_DOT_LAST)
						cb_fused_finish(L, i0, im, j0 + jj, jn, acc);
				}
			}
		}
	}
}

static int cb_linear_fused(struct cb_linear *L)
{
	struct cpu_blas_ctx *c = L->c;
	int rm = cb_fused_rm(L);
	int64_t states = (L->m + rm - 1) / rm * (CB_FUSED_ROWS / 3);
	int64_t kp = (L->k + 15) & ~(int64_t)15;
	double flops;
	int rc, threads;

	/* x is small here (m <= fused_max_m): a copy with 64-byte aligned rows
	 * spares the kernel a cache-line split on every AVX-512 load; zeros past
	 * k, which the fp8 kernels read. */
	rc = cpu_blas_buffer(c, &c->xpack, &c->xpack_len, (size_t)(L->m * kp), "x copy");
	if (rc)
		return rc;
	for (int64_t i = 0; i < L->m; i++) {
		memcpy(c->xpack + i * kp, L->x + i * L->ldx, (size_t)L->k * sizeof(float));
		memset(c->xpack + i * kp + L->k, 0, (size_t)(kp - L->k) * sizeof(float));
	}
	L->x = c->xpack;
	L->ldx = kp;

	/* Accumulators parked between k blocks: one set per (x block, w block). */
	if (L->m > rm && L->k > CB_FUSED_KBLOCK) {
		rc = cpu_blas_scratch(c, (size_t)(states * 3 * rm * cb_fused_lanes(L)));
		if (rc)
			return rc;
	}
	/* Threads by work (waking one costs ~ a few us of its work), then tasks
	 * small enough that each thread gets a few.  Streaming and widening an
	 * element of w costs about as much as 8 rows of FMAs on it. */
	flops = 2.0 * (double)(L->m + 8) * (double)L->n * (double)L->k;
	threads = flops / CB_FUSED_FLOPS_PER_THREAD >= c->threads ? c->threads :
		  1 + (int)(flops / CB_FUSED_FLOPS_PER_THREAD);
	L->task_rows = CB_FUSED_ROWS;
	while (L->task_rows > 3 && L->n < L->task_rows * 4 * threads)
		L->task_rows /= 2;
	cpu_blas_pool_run_on(c->pool, threads, (L->n + L->task_rows - 1) / L->task_rows, 1,
			     cb_fused_task, L);
	return 0;
}

/* ---- fused 4-bit path ------------------------------------------------------------------ */

/* Odd k: row j starts mid-byte when j is odd; copy rows so each starts a byte. */
static void cb_q4_realign(const uint8_t *data, int64_t j0, int64_t jb, int64_t k, uint8_t *dst)
{
	int64_t rb = (k + 1) / 2;

	for (int64_t j = 0; j < jb; j++) {
		uint64_t e0 = (uint64_t)(j0 + j) * (uint64_t)k;

		for (int64_t t = 0; t < rb; t++) {
			unsigned hi = fg_q4_nibble(data, e0 + 2 * (uint64_t)t);
			unsigned lo = 2 * t + 1 < k ? fg_q4_nibble(data, e0 + 2 * (uint64_t)t + 1) : 0;

			dst[j * rb + t] = (uint8_t)(hi << 4 | lo);
		}
	}
}

static void cb_q4_task(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;
	const uint8_t *data = L->wq->data;
	const uint8_t *params = data + fg_q4_data_bytes((uint64_t)L->n, (uint64_t)L->k);
	int isa = L->c->isa, rm = cpu_blas_q4_rows(isa);
	int64_t vec = 3 * (int64_t)rm * cpu_blas_q4_lanes(isa);
	float *s = L->c->scratch[tid], *mn = s + L->q4_kp, *state = mn + L->q4_kp;
	uint8_t *rows = (uint8_t *)(state + L->q4_state);
	int64_t kb = L->m > rm ? CB_FUSED_KBLOCK : L->k;
	int64_t ldw = (L->k + 1) / 2;

	for (int64_t blk = b; blk < e; blk++) {
		int64_t j0 = blk * L->task_rows;
		int64_t jb = L->n - j0 < L->task_rows ? L->n - j0 : L->task_rows;
		const uint8_t *w = data + (uint64_t)j0 * (uint64_t)L->k / 2;

		/* task_rows divides 64: the task's rows share one group's parameters. */
		cpu_blas_q4_params(isa, params + 4 * (uint64_t)(j0 / FG_Q4_GROUP) * (uint64_t)L->k,
				   L->k, s, mn);
		if (L->k & 1) {
			cb_q4_realign(data, j0, jb, L->k, rows);
			w = rows;
		}
		for (int64_t k0 = 0; k0 < L->k; k0 += kb) {
			int64_t kl = L->k - k0 < kb ? L->k - k0 : kb;
			int flags = (k0 == 0 ? CPU_BLAS_DOT_FIRST : 0) |
				    (k0 + kl == L->k ? CPU_BLAS_DOT_LAST : 0);
			float *st = state;

			for (int64_t i0 = 0; i0 < L->m; i0 += rm) {
				int im = L->m - i0 < rm ? (int)(L->m - i0) : rm;

				for (int64_t jj = 0; jj < jb; jj += 3, st += vec) {
					int jn = jb - jj < 3 ? (int)(jb - jj) : 3;
					float acc[8][3];

					cpu_blas_q4_dot(isa, im, jn, L->x + i0 * L->ldx + k0, L->ldx,
							w + jj * ldw + k0 / 2, ldw, s + k0, mn + k0, kl,
							flags, st, acc);
					if (flags & CPU_BLAS_DOT_LAST)
						cb_fused_finish(L, i0, im, j0 + jj, jn, acc);
				}
			}
		}
	}
}

static int cb_linear_q4(struct cb_linear *L)
{
	struct cpu_blas_ctx *c = L->c;
	int rm = cpu_blas_q4_rows(c->isa);
	int64_t kp = (L->k + 31) & ~(int64_t)31, tasks, rows_floats;
	double flops;
	int rc, threads;

	/* x with aligned rows, zeros past k: the kernel reads whole vectors. */
	rc = cpu_blas_buffer(c, &c->xpack, &c->xpack_len, (size_t)(L->m * kp), "x copy");
	if (rc)
		return rc;
	for (int64_t i = 0; i < L->m; i++) {
		memcpy(c->xpack + i * kp, L->x + i * L->ldx, (size_t)L->k * sizeof(float));
		memset(c->xpack + i * kp + L->k, 0, (size_t)(kp - L->k) * sizeof(float));
	}
	L->x = c->xpack;
	L->ldx = kp;

	/* Threads by work, as the fp16 path.  Tasks of one group of 64 rows (the
	 * group's parameters are converted once per task), halved while there
	 * are too few to share between the threads. */
	flops = 2.0 * (double)(L->m + 8) * (double)L->n * (double)L->k;
	threads = flops / CB_FUSED_FLOPS_PER_THREAD >= c->threads ? c->threads :
		  1 + (int)(flops / CB_FUSED_FLOPS_PER_THREAD);
	L->task_rows = FG_Q4_GROUP;
	while (L->task_rows > 16 && L->n < L->task_rows * 2 * threads)
		L->task_rows /= 2;
	tasks = (L->n + L->task_rows - 1) / L->task_rows;

	/* Per thread: scale and min (kp each), the accumulators parked between k
	 * blocks (one set per x block and 3 w rows), realigned rows for odd k. */
	L->q4_kp = kp;
	L->q4_state = (L->m + rm - 1) / rm * ((L->task_rows + 2) / 3) * 3 * rm *
		      cpu_blas_q4_lanes(c->isa);
	rows_floats = L->k & 1 ? (L->task_rows * ((L->k + 1) / 2) + 3) / 4 : 0;
	rc = cpu_blas_scratch(c, (size_t)(2 * kp + L->q4_state + rows_floats));
	if (rc)
		return rc;
	cpu_blas_pool_run_on(c->pool, threads, tasks, 1, cb_q4_task, L);
	return 0;
}

/* ---- entry ----------------------------------------------------------------------- */

/* The core checked the arguments (core/backend/compute_ops.c); OpenBLAS's
 * 32-bit dimensions are this backend's own limit. */
static int cb_linear_check(struct cpu_blas_ctx *c, const struct fg_linear_args *a)
{
	int64_t m = a->x.rows, k = a->x.cols, n = a->w.rows;

	if (m > INT_MAX || n > INT_MAX || k > INT_MAX || a->x.ld > INT_MAX ||
	    a->out.ld > INT_MAX) {
		fg_error(c->host, "cpu_blas: linear: [%" PRId64 ", %" PRId64 "] x [%" PRId64
			 ", %" PRId64 "]ᵀ exceeds OpenBLAS's 32-bit dimensions, split the product",
			 m, k, n, k);
		return -EINVAL;
	}
	return 0;
}

int cpu_blas_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_linear L;
	float *biasf = NULL;
	int rc, fused;

	(void)stream;
	rc = cb_linear_check(c, a);
	if (rc)
		return rc;
	if (a->x.rows == 0 || a->w.rows == 0)
		return 0;

	memset(&L, 0, sizeof(L));
	L.c = c;
	L.x = a->x.data;
	L.ldx = a->x.ld;
	L.w = a->w.data;
	L.ldw = a->w.ld;
	L.wq = a->w.dtype == FG_DTYPE_Q4_ROWS ? &a->w : NULL;
	if (a->w.dtype == FG_DTYPE_F8_ROWS) {
		L.w8 = a->w.data;
		L.w8s = L.w8 + fg_f8_data_bytes((uint64_t)a->w.rows, (uint64_t)a->w.cols);
	}
	L.relu = a->act == FG_ACT_RELU;
	L.silu = a->act == FG_ACT_SILU;
	L.gelu = a->act == FG_ACT_GELU_TANH;
	L.mul = a->mul.data;
	L.ldm = a->mul.ld;
	L.res = a->residual.data;
	L.ldr = a->residual.ld;
	L.out = a->out.data;
	L.ldo = a->out.ld;
	L.m = a->x.rows;
	L.n = a->w.rows;
	L.k = a->x.cols;

	pthread_mutex_lock(&c->lock);
	if (a->bias.data) {
		biasf = malloc((size_t)L.n * sizeof(float));
		if (!biasf) {
			pthread_mutex_unlock(&c->lock);
			fg_error(c->host, "cpu_blas: linear: out of memory for %" PRId64
				 " bias values", L.n);
			return -ENOMEM;
		}
		fg_fp16_simd_to_f32(biasf, a->bias.data, (size_t)L.n);
		L.bias = biasf;
	}
	/* The fused kernels stream fp16 rows (x86-64 only), 4-bit or fp8 rows (any isa). */
	fused = L.m <= c->fused_max_m && L.k > 0;
	if (fused && L.wq)
		rc = cb_linear_q4(&L);
	else if (fused && (L.w8 || c->isa != CPU_BLAS_ISA_NONE))
		rc = cb_linear_fused(&L);
	else
		rc = cb_linear_blas(&L);
	pthread_mutex_unlock(&c->lock);
	free(biasf);
	return rc;
}
