/* plugins/compute/cpu_blas/linear.c - out = act(x · wᵀ + bias) + residual with
 * fp32 activations and fp16 weights.
 *
 * Two paths, both bounded in memory:
 *  - BLAS (any m): blocks of w rows are widened to fp32 by the pool into one
 *    tile (option tile_mib), OpenBLAS multiplies it (its own threads), and the pool
 *    applies bias / ReLU / residual over the tile's output.
 *  - fused (m <= fused_max_m, x86-64 with AVX2 or AVX-512): each pool thread
 *    takes 24 rows of w at a time and computes their dot products with every
 *    row of x (fused.c), widening w in registers as it streams.  Decode-sized
 *    products read half the bytes of an fp32 sgemm and skip OpenBLAS's
 *    packing; widening w again for every block of x rows was measured faster
 *    than widening it once into an L2-resident scratch.
 * The fused path's result for a row depends neither on m nor on the thread
 * count (fused.c); OpenBLAS's may (some of its kernels treat the last rows of
 * x differently), and the two paths round differently: fused_max_m = huge
 * gives results independent of the batch split.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"
#include "plugins/codec/fp16_simd.h"

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
	const struct fg_tensor *wq; /* FG_DTYPE_Q4_ROWS weight (BLAS path only), or NULL */
	const float *bias; /* fp32 copy, n values, or NULL */
	int relu;
	const float *res;  /* may equal out */
	int64_t ldr;
	float *out;
	int64_t ldo;
	int64_t m, n, k;
	int64_t task_rows; /* fused path: w rows per task */
	/* BLAS path: the current tile */
	int64_t j0, jn, i0;
	const float *prod;
	int64_t ldp;
};

static inline float cb_finish(float p, const float *bias, int64_t j, int relu,
			      const float *res)
{
	float v = bias ? p + bias[j] : p;

	if (relu && v < 0)
		v = 0; /* NaN stays NaN */
	return res ? v + *res : v;
}

/* ---- BLAS path ------------------------------------------------------------------ */

static void cb_widen_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		if (L->wq)
			cpu_blas_q4_rows_row(L->wq, L->j0 + r, L->c->tile + r * L->k);
		else
			fp16_simd_to_f32(L->c->tile + r * L->k, L->w + (L->j0 + r) * L->ldw,
					 (size_t)L->k);
	}
}

/* out[i0 + r, j0 + j] = finish(prod[r, j]) for rows r in [b, e). */
static void cb_epilogue_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		int64_t i = L->i0 + r;
		const float *p = L->prod + r * L->ldp;
		const float *res = L->res ? L->res + i * L->ldr + L->j0 : NULL;
		float *o = L->out + i * L->ldo + L->j0;

		for (int64_t j = 0; j < L->jn; j++)
			o[j] = cb_finish(p[j], L->bias, L->j0 + j, L->relu, res ? res + j : NULL);
	}
}

static void cb_gemm(struct cb_linear *L, int64_t i0, int64_t mb, float *c, int64_t ldc)
{
	if (L->k == 0) {
		for (int64_t r = 0; r < mb; r++)
			memset(c + r * ldc, 0, (size_t)L->jn * sizeof(float));
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
	int fused_epilogue = L->bias || L->relu || L->res;
	int64_t nt, k1 = L->k ? L->k : 1;
	int rc;

	/* Big tiles: OpenBLAS repacks x for every call (measured: 16 -> 64 MiB
	 * took 512x4096x4096 from 0.77 to 0.90 of sgemm on 16 cores). */
	nt = (int64_t)(c->tile_bytes / sizeof(float)) / k1;
	nt = nt < 64 ? 64 : nt & ~(int64_t)63;
	if (nt > L->n)
		nt = L->n;
	rc = cpu_blas_buffer(c, &c->tile, &c->tile_len, (size_t)(nt * k1), "weight tile");
	if (rc)
		return rc;
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

		for (int j = 0; j < jn; j++)
			o[j] = cb_finish(acc[i][j], L->bias, j0 + j, L->relu, res ? res + j : NULL);
	}
}

static void cb_fused_task(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_linear *L = arg;
	int isa = L->c->isa, rm = cpu_blas_fused_rows(isa);
	int64_t vec = 3 * (int64_t)rm * cpu_blas_fused_lanes(isa);
	float *state = L->c->scratch[tid];
	/* Blocking k keeps x's rows in cache while they are reused, but costs the
	 * prefetcher its long streams: only worth it when x has several row blocks. */
	int64_t kb = L->m > rm ? CB_FUSED_KBLOCK : L->k;

	for (int64_t blk = b; blk < e; blk++) {
		int64_t j0 = blk * L->task_rows;
		int64_t jb = L->n - j0 < L->task_rows ? L->n - j0 : L->task_rows;

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

					cpu_blas_fused_dot(isa, im, jn, L->x + i0 * L->ldx + k0, L->ldx,
							   L->w + (j0 + jj) * L->ldw + k0, L->ldw,
							   kl, flags, st, acc);
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
	int rm = cpu_blas_fused_rows(c->isa);
	int64_t states = (L->m + rm - 1) / rm * (CB_FUSED_ROWS / 3);
	int64_t kp = (L->k + 15) & ~(int64_t)15;
	double flops;
	int rc, threads;

	/* x is small here (m <= fused_max_m): a copy with 64-byte aligned rows
	 * spares the kernel a cache-line split on every AVX-512 load. */
	rc = cpu_blas_buffer(c, &c->xpack, &c->xpack_len, (size_t)(L->m * kp), "x copy");
	if (rc)
		return rc;
	for (int64_t i = 0; i < L->m; i++)
		memcpy(c->xpack + i * kp, L->x + i * L->ldx, (size_t)L->k * sizeof(float));
	L->x = c->xpack;
	L->ldx = kp;

	/* Accumulators parked between k blocks: one set per (x block, w block). */
	if (L->m > rm && L->k > CB_FUSED_KBLOCK) {
		rc = cpu_blas_scratch(c, (size_t)(states * 3 * rm * cpu_blas_fused_lanes(c->isa)));
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

/* ---- entry ----------------------------------------------------------------------- */

static int cb_linear_check(struct cpu_blas_ctx *c, const struct fg_linear_args *a)
{
	const char *op = "linear";
	int64_t m = a->x.rows, k = a->x.cols, n = a->w.rows;
	int rc;

	if ((rc = cpu_blas_check_tensor(c, op, "x", &a->x, FG_DTYPE_F32, -1, -1)) ||
	    (rc = cpu_blas_check_tensor(c, op, "w", &a->w,
					a->w.dtype == FG_DTYPE_Q4_ROWS ? FG_DTYPE_Q4_ROWS :
					FG_DTYPE_F16, -1, k)) ||
	    (rc = cpu_blas_check_tensor(c, op, "out", &a->out, FG_DTYPE_F32, m, n)))
		return rc;
	if (a->bias.data &&
	    (rc = cpu_blas_check_tensor(c, op, "bias", &a->bias, FG_DTYPE_F16, 1, n)))
		return rc;
	if (a->residual.data &&
	    (rc = cpu_blas_check_tensor(c, op, "residual", &a->residual, FG_DTYPE_F32, m, n)))
		return rc;
	if (a->act != FG_ACT_NONE && a->act != FG_ACT_RELU) {
		fg_error(c->host, "cpu_blas: linear: unknown activation %d, use FG_ACT_NONE or "
			 "FG_ACT_RELU", (int)a->act);
		return -EINVAL;
	}
	if (m > INT_MAX || n > INT_MAX || k > INT_MAX || a->x.ld > INT_MAX ||
	    a->out.ld > INT_MAX) {
		fg_error(c->host, "cpu_blas: linear: [%" PRId64 ", %" PRId64 "] x [%" PRId64
			 ", %" PRId64 "]ᵀ exceeds OpenBLAS's 32-bit dimensions, split the product",
			 m, k, n, k);
		return -EINVAL;
	}
	if (cpu_blas_overlap(&a->out, &a->x) || cpu_blas_overlap(&a->out, &a->w) ||
	    (a->bias.data && cpu_blas_overlap(&a->out, &a->bias))) {
		fg_error(c->host, "cpu_blas: linear: out overlaps x, w or bias; write to a "
			 "separate buffer");
		return -EINVAL;
	}
	if (a->residual.data && cpu_blas_overlap(&a->out, &a->residual) &&
	    !cpu_blas_same(&a->out, &a->residual)) {
		fg_error(c->host, "cpu_blas: linear: out partly overlaps residual; pass the same "
			 "view for both or separate buffers");
		return -EINVAL;
	}
	return 0;
}

int cpu_blas_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_linear L;
	float *biasf = NULL;
	int rc;

	(void)stream;
	if (!a) {
		fg_error(c->host, "cpu_blas: linear: NULL arguments");
		return -EINVAL;
	}
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
	L.relu = a->act == FG_ACT_RELU;
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
		fp16_simd_to_f32(biasf, a->bias.data, (size_t)L.n);
		L.bias = biasf;
	}
	/* The fused kernel streams fp16 rows; 4-bit weights go through fp32 tiles. */
	if (c->isa != CPU_BLAS_ISA_NONE && L.m <= c->fused_max_m && L.k > 0 && !L.wq)
		rc = cb_linear_fused(&L);
	else
		rc = cb_linear_blas(&L);
	pthread_mutex_unlock(&c->lock);
	free(biasf);
	return rc;
}
