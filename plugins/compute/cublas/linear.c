/* plugins/compute/cublas/linear.c - out = act(x · wᵀ + bias) ⊙ mul + residual.
 *
 * fp16 weights: one cuBLASLt matmul in fp32 compute.  Row-major x [m, k],
 * w [n, k] and out [m, n] are, read column-major, x' [k, m], w' [k, n] and
 * out' [n, m], so out' = w'ᵀ · x': A = w (transposed, lda = w.ld), B = x
 * (ldb = x.ld), D = out (ldd = out.ld).  Bias and ReLU are cuBLASLt
 * epilogues; the residual is C with beta = 1 (C may be D).  Plans
 * (descriptors, layouts, the heuristic's algorithm) are cached per shape and
 * alignment, so decode steps skip the heuristic.  What cuBLASLt cannot fuse
 * (ReLU and a residual together, an unaligned bias) runs as a plain matmul
 * plus the backend's epilogue kernel; so do SiLU and the gating multiplier
 * `mul` (SwiGLU), which cuBLASLt has no epilogue for.
 *
 * A linear that adds a residual writes the residual stream, fp32 unless
 * `fp32_residual` is false: C and D are then fp32 in the matmul (fp16 A
 * and B, fp32 compute), so the stream is never rounded to fp16.
 *
 * 4-bit weights (Q4_ROWS): up to q4_fused_max_m rows of x use the fused
 * dequantize-GEMM kernel, which reads each weight byte once; larger products
 * dequantize tiles of weight rows into the stream's scratch and run the fp16
 * path (or the fp8 one) on each tile.  fp8 weights (F8_ROWS, fgcore/f8.h)
 * do the same with their own fused kernel (k_f8_linear.cu: the codes read
 * once, the row's scale applied to its sum) and fp16 tiles decoded by f8.h's
 * rule.
 *
 * fp8 (fp8_prefill, products of at least fp8_min_rows rows): x and the
 * weight are quantized row by row to E4M3 with one fp32 scale per row
 * (k_fp8.cu) into the stream's fp8 buffer, and cuBLASLt multiplies them on
 * the fp8 tensor cores in fp32, applying the scales as outer vectors:
 * out = scale_w[j] scale_x[i] (W8 · X8ᵀ)[j, i], finished as above.  x goes
 * in bands of rows, the weight in tiles of rows when its copy does not fit;
 * k is padded with zeros to a multiple of 16.  Whatever cuBLASLt has no fp8
 * algorithm for runs the fp16 path, so correctness never depends on it.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/cublas_int.h"
#include "plugins/compute/cublas/kernels.h"

/* One product of the fp16 path.  Counts are in the row-major terms of
 * fg_linear_args: x [m, k], w [n, k], out [m, n]. */
struct cb_gemm {
	int64_t m, n, k;
	const uint16_t *x, *w, *bias, *mul;
	const void *res;
	int64_t ldx, ldw, ldr, ldm;
	void *out;
	int64_t ldo;
	int act;          /* enum fg_activation */
	int f32;          /* out and res are the fp32 residual stream (else fp16) */
	void *tmp;        /* scratch for the epilogue kernel with a residual aliasing out */
	size_t tmp_bytes;
};

/* Element i of out or res, whose type g->f32 says. */
static void *cb_at(const struct cb_gemm *g, const void *p, int64_t i)
{
	return (char *)(uintptr_t)p + (size_t)i * (g->f32 ? 4 : 2);
}

/* The epilogue of rows [i0, ...) of g, for the epilogue kernels. */
static struct cublas_epi cb_epi_of(const struct cb_gemm *g, int64_t i0)
{
	struct cublas_epi e;

	e.bias = g->bias;
	e.mul = g->mul ? g->mul + i0 * g->ldm : NULL;
	e.res = g->res ? cb_at(g, g->res, i0 * g->ldr) : NULL;
	e.ldm = g->ldm;
	e.ldr = g->ldr;
	e.act = g->act;
	e.f32 = g->f32;
	return e;
}

/* cuBLASLt fuses bias (16-byte aligned), ReLU and the residual, but not ReLU
 * with a residual, SiLU, GELU or mul: those need the epilogue kernel after a
 * plain product.  (Its GELU epilogue is not PyTorch's tanh form to the bit.) */
static int cb_lt_fuses(const struct cb_gemm *g)
{
	int bias_ok = !g->bias || ((uintptr_t)g->bias & 15) == 0;
	int act_ok = g->act == FG_ACT_NONE || (g->act == FG_ACT_RELU && !g->res);

	return bias_ok && act_ok && !g->mul;
}

static int cb_align(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	int al = 256;

	while (al > 2 && (a & (uintptr_t)(al - 1)))
		al /= 2;
	return al;
}

static void cb_plan_release(struct cublas_plan *p)
{
	if (!p->valid)
		return;
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->a)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->b)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->c)
		cublasLtMatrixLayoutDestroy(p->c);
	if (p->d)
		cublasLtMatrixLayoutDestroy(p->d);
	memset(p, 0, sizeof(*p));
}

void cublas_plans_clear(struct cublas_ctx *c)
{
	for (int i = 0; i < CUBLAS_PLANS; i++)
		cb_plan_release(&c->plans[i]);
}

/* scales: an fp8 key's device scale vectors (A: the weight's, B: x's), which
 * the heuristic may look at; NULL for fp16. */
static int cb_plan_build(struct cublas_ctx *c, struct cublas_plan *p, const char *op,
			 const void *const *scales)
{
	const struct cublas_plan_key *k = &p->key;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N; /* "TN", which fp8 requires */
	cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	uint64_t ws = c->ws_bytes;
	cudaDataType_t cd = k->d32 ? CUDA_R_32F : CUDA_R_16F;
	cudaDataType_t ab = k->fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16F;
	int32_t bias_type = cd; /* fp32 D reads an fp32 copy of the bias (bias32) */
	uint32_t al[4];
	int found = 0;
	cublasStatus_t st;

	p->valid = 1;
	for (int i = 0; i < 4; i++)
		al[i] = (uint32_t)k->align[i];
	if ((st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
	    (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
						 sizeof(ta))) ||
	    (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
						 sizeof(tb))) ||
	    (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
						 sizeof(epi))))
		goto fail;
	if ((epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS) &&
	    (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
						 &bias_type, sizeof(bias_type)))) {
		/* a bias with an fp32 D may be refused: the caller falls back */
		if (k->d32 && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE))
			goto unsupported;
		goto fail;
	}
#if CUBLAS_HAVE_FP8
	/* fp8: each (i, j) of the product is multiplied by element i of A's scale
	 * vector (length n, the weight's rows) and element j of B's (length m). */
	int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;

	if (k->fp8 &&
	    ((st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer,
						  sizeof(outer))) ||
	     (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer,
						  sizeof(outer))) ||
	     (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
						  &scales[0], sizeof(scales[0]))) ||
	     (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
						  &scales[1], sizeof(scales[1]))))) {
		/* a cuBLASLt without outer-vector scales: the product runs in fp16 */
		if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
			goto unsupported;
		goto fail;
	}
#endif
	if ((st = cublasLtMatrixLayoutCreate(&p->a, ab, (uint64_t)k->k, (uint64_t)k->n,
					     k->lda)) ||
	    (st = cublasLtMatrixLayoutCreate(&p->b, ab, (uint64_t)k->k, (uint64_t)k->m,
					     k->ldb)) ||
	    (st = cublasLtMatrixLayoutCreate(&p->c, cd, (uint64_t)k->n, (uint64_t)k->m,
					     k->ldc)) ||
	    (st = cublasLtMatrixLayoutCreate(&p->d, cd, (uint64_t)k->n, (uint64_t)k->m,
					     k->ldd)))
		goto fail;
	if ((st = cublasLtMatmulPreferenceCreate(&pref)) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(pref,
			CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws))) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(pref,
			CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(al[0]))) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(pref,
			CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(al[1]))) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(pref,
			CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(al[2]))) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(pref,
			CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof(al[3]))))
		goto fail;
	st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->c, p->d, pref, 1, &res,
					    &found);
	cublasLtMatmulPreferenceDestroy(pref);
	pref = NULL;
	/* No algorithm is not an error: the caller falls back.  Nor is a refused
	 * combination with fp32 C and D (cuBLASLt answers "invalid value" to an
	 * fp16 bias there) or of fp8 operands (types, scale modes, epilogues). */
	if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found < 1)) {
		p->found = 0;
		return 0;
	}
	if (st == CUBLAS_STATUS_INVALID_VALUE && (k->d32 || k->fp8))
		goto unsupported;
	if (st)
		goto fail;
	p->algo = res.algo;
	p->found = 1;
	return 0;
unsupported: {
	/* Kept as a plan without an algorithm, so the next call does not ask again. */
	struct cublas_plan_key key = p->key;

	cb_plan_release(p);
	p->key = key;
	p->valid = 1;
	p->found = 0;
	return 0;
}
fail:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	cb_plan_release(p);
	return cublas_blas_fail(c, op, "preparing a cuBLASLt matmul", st);
}

/* The cached plan for key (built on a miss, evicting the least recently used). */
static int cb_plan_get(struct cublas_ctx *c, const struct cublas_plan_key *key,
		       struct cublas_plan **out, const char *op, const void *const *scales)
{
	struct cublas_plan *victim = &c->plans[0];
	int rc;

	for (int i = 0; i < CUBLAS_PLANS; i++) {
		struct cublas_plan *p = &c->plans[i];

		if (p->valid && !memcmp(&p->key, key, sizeof(*key))) {
			p->used = ++c->tick;
			*out = p;
			return 0;
		}
		if (!p->valid || (victim->valid && p->used < victim->used))
			victim = p;
	}
	cb_plan_release(victim);
	victim->key = *key;
	if ((rc = cb_plan_build(c, victim, op, scales)))
		return rc;
	victim->used = ++c->tick;
	*out = victim;
	return 0;
}

/* The plan key of g's product (A = g->w, B = g->x) into d with epilogue epi,
 * C = res (beta = 1) when not NULL, else d. */
static void cb_key(struct cublas_plan_key *key, const struct cb_gemm *g, cublasLtEpilogue_t epi,
		   const void *res, int64_t ldr, const void *d, int64_t ldd)
{
	memset(key, 0, sizeof(*key)); /* the key is compared bytewise */
	key->m = g->m;
	key->n = g->n;
	key->k = g->k;
	key->lda = g->ldw;
	key->ldb = g->ldx;
	key->ldc = res ? ldr : ldd;
	key->ldd = ldd;
	key->epilogue = (int)epi;
	key->beta = res != NULL;
	key->d32 = g->f32;
	key->align[0] = cb_align(g->w);
	key->align[1] = cb_align(g->x);
	key->align[2] = cb_align(res ? res : d);
	key->align[3] = cb_align(d);
}

/* One cuBLASLt matmul with the given epilogue; res (beta = 1) may be NULL.
 * Returns 1 when cuBLASLt has no algorithm for it. */
static int cb_lt(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
		 cublasLtEpilogue_t epi, const void *bias, const void *res, int64_t ldr,
		 void *d, int64_t ldd)
{
	struct cublas_plan_key key;
	struct cublas_plan *p;
	float alpha = 1.0f, beta = res ? 1.0f : 0.0f;
	const void *cptr = res ? (const void *)res : (const void *)d;
	cublasStatus_t st;
	int rc;

	cb_key(&key, g, epi, res, ldr, d, ldd);
	if ((rc = cb_plan_get(c, &key, &p, "linear", NULL)))
		return rc;
	if (!p->found)
		return 1;
	if (bias && (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							 &bias, sizeof(bias))))
		return cublas_blas_fail(c, "linear", "setting the bias pointer", st);
	st = cublasLtMatmul(c->lt, p->op, &alpha, g->w, p->a, g->x, p->b, &beta, cptr, p->c, d,
			    p->d, &p->algo, s->ws, c->ws_bytes, s->s);
	if (st)
		return cublas_blas_fail(c, "linear", "cublasLtMatmul", st);
	return 0;
}

/* d[rows of x, n] = x · wᵀ, nothing else, in out's type: cuBLASLt, or
 * cublasGemmEx without it. */
static int cb_plain(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
		    void *d, int64_t ldd)
{
	float alpha = 1.0f, beta = 0.0f;
	cublasStatus_t st;
	int rc = cb_lt(c, s, g, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, d, ldd);

	if (rc <= 0)
		return rc;
	if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->ldw > INT_MAX ||
	    g->ldx > INT_MAX || ldd > INT_MAX) {
		fg_error(c->host, "cublas: linear: no cuBLASLt algorithm for [%" PRId64 ", %" PRId64
			 "] x [%" PRId64 ", %" PRId64 "]ᵀ and it exceeds cublasGemmEx's 32-bit "
			 "sizes; align the tensors to 16 bytes", g->m, g->k, g->n, g->k);
		return -ENOTSUP;
	}
	if ((st = cublasSetStream(c->blas, s->s)) ||
	    (st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k,
			       &alpha, g->w, CUDA_R_16F, (int)g->ldw, g->x, CUDA_R_16F,
			       (int)g->ldx, &beta, d, g->f32 ? CUDA_R_32F : CUDA_R_16F, (int)ldd,
			       CUBLAS_COMPUTE_32F,
			       CUBLAS_GEMM_DEFAULT)))
		return cublas_blas_fail(c, "linear", "cublasGemmEx", st);
	return 0;
}

static int cb_epi(struct cublas_ctx *c, cudaError_t e)
{
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "linear", "the epilogue kernel", e);
}

/* The fp16 path for one product. */
static int cb_linear_f16(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g)
{
	struct cublas_epi e;
	int rc;

	if (cb_lt_fuses(g) && (!g->f32 || !g->bias || g->n <= CUBLAS_BIAS32_MAX)) {
		int relu = g->act == FG_ACT_RELU;
		cublasLtEpilogue_t epi = g->bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS
						       : CUBLASLT_EPILOGUE_BIAS)
						 : (relu ? CUBLASLT_EPILOGUE_RELU
						       : CUBLASLT_EPILOGUE_DEFAULT);
		const void *bias = g->bias;

		if (g->f32 && g->bias) {
			cudaError_t e = cublas_k_h2f(s->s, g->n, g->bias, s->bias32);

			if (e != cudaSuccess)
				return cublas_cuda_fail(c, "linear", "the bias conversion kernel", e);
			bias = s->bias32;
		}
		rc = cb_lt(c, s, g, epi, bias, g->res, g->ldr, g->out, g->ldo);
		if (rc <= 0)
			return rc;
	}
	if (!g->res || g->res != g->out) {
		/* The product lands in out and is finished in place (mul never overlaps out). */
		if ((rc = cb_plain(c, s, g, g->out, g->ldo)))
			return rc;
		if (!g->bias && g->act == FG_ACT_NONE && !g->res && !g->mul)
			return 0;
		e = cb_epi_of(g, 0);
		return cb_epi(c, cublas_k_epilogue(s->s, g->m, g->n, g->out, g->f32, g->ldo, &e,
						   g->out, g->ldo));
	}
	/* out holds the residual: the product goes through scratch, a band of rows
	 * at a time, in out's type. */
	int64_t band = (int64_t)(g->tmp_bytes / ((g->f32 ? 4 : 2) * (size_t)g->n));

	if (!g->tmp_bytes) { /* a 4-bit tile whose fused cuBLASLt product had no algorithm */
		fg_error(c->host, "cublas: linear: no cuBLASLt algorithm fuses the residual for "
			 "[%" PRId64 ", %" PRId64 "] x [%" PRId64 ", %" PRId64 "]ᵀ and the scratch "
			 "holds the 4-bit tile; pass a residual separate from out", g->m, g->k,
			 g->n, g->k);
		return -ENOTSUP;
	}
	if (band < 1) {
		fg_error(c->host, "cublas: linear: scratch of %zu bytes cannot hold one output row "
			 "of %" PRId64 " values; raise `scratch`", g->tmp_bytes, g->n);
		return -ENOMEM;
	}
	for (int64_t i0 = 0; i0 < g->m; i0 += band) {
		struct cb_gemm b = *g;

		b.m = g->m - i0 < band ? g->m - i0 : band;
		b.x = g->x + i0 * g->ldx;
		if ((rc = cb_plain(c, s, &b, b.tmp, b.n)))
			return rc;
		e = cb_epi_of(g, i0);
		rc = cb_epi(c, cublas_k_epilogue(s->s, b.m, b.n, b.tmp, g->f32, b.n, &e,
						 cb_at(g, g->out, i0 * g->ldo), g->ldo));
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- fp8 products (fp8_prefill) ------------------------------------------------------- */

/* The stream's fp8 buffer, carved for one product: a tile of nt weight rows
 * W8 [nt, kq] and a band of mb rows of x X8 [mb, kq], E4M3 with their row
 * scales, and, when a band is finished from a copy (its residual is out and
 * nothing fuses), the band's products tmp [mb, ldt] in out's type. */
struct cb_fp8 {
	uint8_t *w8, *x8;
	float *sw, *sx;
	void *tmp;
	int64_t kq;       /* k rounded up to 16 (fp8 rows must be 16-byte multiples) */
	int64_t nt, mb, ldt;
};

/* A band before which the weight is not tiled: smaller fp8 products would
 * leave SMs idle on large GPUs. */
#define CB_FP8_BAND_WANT 2048

static size_t cb_a256(size_t v)
{
	return (v + 255) & ~(size_t)255;
}

/* Bytes of a weight tile of nt rows (E4M3 rows and their scales). */
static size_t cb_fp8_tile_bytes(int64_t nt, int64_t kq)
{
	return cb_a256((size_t)nt * (size_t)kq) + cb_a256((size_t)nt * 4);
}

/* The most rows (at most `rows`, a multiple of 16 when fewer) whose band fits
 * in `room` bytes: each of its three pieces rounds up by less than 256.  At
 * most 2^30, for the quantization kernel's grid. */
static int64_t cb_fp8_rows_in(size_t room, int64_t rows, int64_t kq, size_t tmp_row)
{
	size_t per = (size_t)kq + 4 + tmp_row;
	int64_t r;

	if (room < 768 + per)
		return 0;
	r = (int64_t)((room - 768) / per);
	if (r > (int64_t)1 << 30)
		r = (int64_t)1 << 30;
	if (r >= rows)
		return rows;
	return r >= 16 ? r - r % 16 : r;
}

/* Once per context, at warning level (then at debug level): a product that
 * fp8_prefill would take runs in fp16, and why. */
static void cb_fp8_note(struct cublas_ctx *c, const struct cb_gemm *g, const char *why)
{
	fg_log(c->host, c->fp8_noted ? FG_LOG_DEBUG : FG_LOG_WARN, "cublas: linear: [%" PRId64
	       ", %" PRId64 "] x [%" PRId64 ", %" PRId64 "]ᵀ runs in fp16 despite fp8_prefill: "
	       "%s%s", g->m, g->k, g->n, g->k, why,
	       c->fp8_noted ? "" : " (further such products are logged at debug level)");
	c->fp8_noted = 1;
}

/* What cuBLASLt fuses into an fp8 product: what it fuses into an fp16 one,
 * with C (a separate residual) aligned like D, and a bias only when D is
 * fp16.  An fp32 D (the residual stream) would want a bf16 bias, which would
 * round it: the bias is then added after the product, by the epilogue kernel
 * in place, which keeps the order of the sums only without an activation. */
static int cb_fp8_fuses(const struct cb_gemm *g)
{
	size_t esz = g->f32 ? 4 : 2;

	if (!cb_lt_fuses(g) || (g->f32 && g->bias && g->act != FG_ACT_NONE))
		return 0;
	return !g->res || g->res == g->out ||
	       (((uintptr_t)g->res & 15) == 0 && ((size_t)g->ldr * esz) % 16 == 0);
}

/* Sizes the tile (at most nt_max weight rows, a multiple of `unit` when
 * fewer than the weight's) and the band for g and carves the stream's fp8
 * buffer.  1: it cannot hold 16 rows of each (noted; the caller runs fp16). */
static int cb_fp8_carve(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
			int64_t nt_max, int64_t unit, struct cb_fp8 *q)
{
	size_t esz = g->f32 ? 4 : 2, room = c->fp8_bytes;
	int keep = g->res && g->res == g->out && !cb_fp8_fuses(g);
	int64_t per16 = (int64_t)(16 / esz), nt = nt_max, mb;
	size_t tmp_row, tile;
	uint8_t *p = s->fp8;
	char why[200];

	q->kq = (g->k + 15) & ~(int64_t)15;
	/* the whole weight, if it leaves room for a band of CB_FP8_BAND_WANT rows;
	 * else tiles of half of the buffer (x then quantized once per tile) */
	tmp_row = keep ? (size_t)((nt + per16 - 1) / per16 * per16) * esz : 0;
	tile = cb_fp8_tile_bytes(nt, q->kq);
	if (tile >= room || cb_fp8_rows_in(room - tile, g->m, q->kq, tmp_row) <
				    (g->m < CB_FP8_BAND_WANT ? g->m : CB_FP8_BAND_WANT)) {
		nt = cb_fp8_rows_in(room / 2, nt_max, q->kq, 0);
		if (nt < g->n && nt >= unit)
			nt -= nt % unit;
		tmp_row = keep ? (size_t)((nt + per16 - 1) / per16 * per16) * esz : 0;
		tile = cb_fp8_tile_bytes(nt, q->kq);
	}
	mb = tile < room ? cb_fp8_rows_in(room - tile, g->m, q->kq, tmp_row) : 0;
	/* tiles start on 16-row bounds: out, bias and the scales stay aligned */
	if ((nt < g->n && nt < 16) || mb < (g->m < 16 ? g->m : 16)) {
		snprintf(why, sizeof(why), "fp8_scratch = %zu bytes cannot hold 16 rows of each "
			 "operand in fp8 (%" PRId64 " bytes a row); raise `fp8_scratch`", room,
			 q->kq);
		cb_fp8_note(c, g, why);
		return 1;
	}
	q->nt = nt;
	q->mb = mb;
	q->w8 = p;
	p += cb_a256((size_t)nt * (size_t)q->kq);
	q->sw = (float *)(void *)p;
	p += cb_a256((size_t)nt * 4);
	q->x8 = p;
	p += cb_a256((size_t)mb * (size_t)q->kq);
	q->sx = (float *)(void *)p;
	p += cb_a256((size_t)mb * 4);
	q->tmp = keep ? p : NULL;
	q->ldt = keep ? (int64_t)(tmp_row / esz) : 0;
	return 0;
}

/* The product of rows [i0, i0 + mb) of x and rows [n0, n0 + nt) of w: a view of g. */
static struct cb_gemm cb_part(const struct cb_gemm *g, int64_t i0, int64_t mb, int64_t n0,
			      int64_t nt)
{
	struct cb_gemm b = *g;

	b.m = mb;
	b.n = nt;
	b.x = g->x + i0 * g->ldx;
	b.w = g->w + n0 * g->ldw;
	b.bias = g->bias ? g->bias + n0 : NULL;
	b.mul = g->mul ? g->mul + i0 * g->ldm + n0 : NULL;
	b.res = g->res ? cb_at(g, g->res, i0 * g->ldr + n0) : NULL;
	b.out = cb_at(g, g->out, i0 * g->ldo + n0);
	return b;
}

/* How one fp8 product is run and finished. */
enum cb_fp8_finish {
	CB_FIN_NONE,      /* cuBLASLt did everything */
	CB_FIN_BIAS,      /* add the bias in place, after product and residual */
	CB_FIN_OUT,       /* the epilogue kernel in place (the product is in out) */
	CB_FIN_TMP,       /* the epilogue kernel from tmp into out (the residual is out) */
};

struct cb_fp8_route {
	cublasLtEpilogue_t epi;
	const void *bias; /* fused bias, or NULL */
	const void *c;    /* C with beta = 1, or NULL */
	int64_t ldc;
	void *d;
	int64_t ldd;
	enum cb_fp8_finish finish;
	struct cublas_plan *plan;
};

/* The plan for route r of b; 1 when cuBLASLt has no fp8 algorithm for it. */
static int cb_fp8_plan(struct cublas_ctx *c, const struct cb_gemm *b, const struct cb_fp8 *q,
		       struct cb_fp8_route *r)
{
	const void *scales[2] = { q->sw, q->sx };
	struct cublas_plan_key key;
	struct cb_gemm v = *b;
	int rc;

	/* the product of the E4M3 copies: their k, rows and addresses (the
	 * pointers' type does not matter to the key, only their alignment) */
	v.k = v.ldw = v.ldx = q->kq;
	v.w = (const uint16_t *)(const void *)q->w8;
	v.x = (const uint16_t *)(const void *)q->x8;
	cb_key(&key, &v, r->epi, r->c, r->ldc, r->d, r->ldd);
	key.fp8 = 1;
	if ((rc = cb_plan_get(c, &key, &r->plan, "linear", scales)))
		return rc;
	return r->plan->found ? 0 : 1;
}

/* Chooses how b's fp8 product runs: fused as far as cuBLASLt fuses it, else a
 * plain product finished by the epilogue kernel.  1: no fp8 algorithm. */
static int cb_fp8_route(struct cublas_ctx *c, const struct cb_gemm *b, const struct cb_fp8 *q,
			struct cb_fp8_route *r)
{
	int rc;

	memset(r, 0, sizeof(*r));
	if (cb_fp8_fuses(b)) {
		int relu = b->act == FG_ACT_RELU, fuse_bias = b->bias && !b->f32;

		r->epi = fuse_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
				   : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
		r->bias = fuse_bias ? b->bias : NULL;
		r->c = b->res;
		r->ldc = b->ldr;
		r->d = b->out;
		r->ldd = b->ldo;
		r->finish = b->bias && !fuse_bias ? CB_FIN_BIAS : CB_FIN_NONE;
		if ((rc = cb_fp8_plan(c, b, q, r)) <= 0)
			return rc;
		/* no fp8 kernel with the bias epilogue: the residual still as C, the
		 * bias added after (no activation here: ReLU with a residual does
		 * not fuse), which needs no copy when the residual is out */
		if (r->bias && b->res) {
			r->epi = CUBLASLT_EPILOGUE_DEFAULT;
			r->bias = NULL;
			r->finish = CB_FIN_BIAS;
			if ((rc = cb_fp8_plan(c, b, q, r)) <= 0)
				return rc;
		}
	}
	memset(r, 0, sizeof(*r));
	r->epi = CUBLASLT_EPILOGUE_DEFAULT;
	if (!b->res || b->res != b->out) {
		r->d = b->out;
		r->ldd = b->ldo;
		r->finish = b->bias || b->act != FG_ACT_NONE || b->res || b->mul ? CB_FIN_OUT
										 : CB_FIN_NONE;
	} else if (q->tmp) {
		r->d = q->tmp;
		r->ldd = q->ldt;
		r->finish = CB_FIN_TMP;
	} else {
		return 1; /* the fused product was expected; no room was kept for a copy */
	}
	return cb_fp8_plan(c, b, q, r);
}

/* Runs route r on the quantized operands in q.  1: cuBLASLt refused the
 * product after all (remembered in the plan; nothing was written). */
static int cb_fp8_run(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *b,
		      const struct cb_fp8 *q, const struct cb_fp8_route *r)
{
	struct cublas_plan *p = r->plan;
	float alpha = 1.0f, beta = r->c ? 1.0f : 0.0f;
	const void *cptr = r->c ? r->c : r->d, *sa = q->sw, *sb = q->sx;
	struct cublas_epi e;
	cublasStatus_t st;

	/* plans are shared by the streams: the pointers are set for each call */
	if ((st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
						 sizeof(sa))) ||
	    (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
						 sizeof(sb))) ||
	    (r->bias && (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							     &r->bias, sizeof(r->bias)))))
		return cublas_blas_fail(c, "linear", "setting the fp8 product's pointers", st);
	st = cublasLtMatmul(c->lt, p->op, &alpha, q->w8, p->a, q->x8, p->b, &beta, cptr, p->c, r->d,
			    p->d, &p->algo, s->ws, c->ws_bytes, s->s);
	/* some refusals of fp8 combinations come only now, not from the heuristic */
	if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
		p->found = 0;
		return 1;
	}
	if (st)
		return cublas_blas_fail(c, "linear", "cublasLtMatmul (fp8)", st);
	switch (r->finish) {
	case CB_FIN_NONE:
		return 0;
	case CB_FIN_BIAS:
		memset(&e, 0, sizeof(e));
		e.bias = b->bias;
		e.act = FG_ACT_NONE;
		e.f32 = b->f32;
		return cb_epi(c, cublas_k_epilogue(s->s, b->m, b->n, b->out, b->f32, b->ldo, &e,
						   b->out, b->ldo));
	case CB_FIN_OUT:
		e = cb_epi_of(b, 0);
		return cb_epi(c, cublas_k_epilogue(s->s, b->m, b->n, b->out, b->f32, b->ldo, &e,
						   b->out, b->ldo));
	case CB_FIN_TMP:
		e = cb_epi_of(b, 0);
		return cb_epi(c, cublas_k_epilogue(s->s, b->m, b->n, q->tmp, b->f32, q->ldt, &e,
						   b->out, b->ldo));
	}
	return 0;
}

static int cb_fp8_quantize(struct cublas_ctx *c, struct cublas_stream *s, int64_t rows,
			   int64_t cols, const uint16_t *src, int64_t lds, uint8_t *dst,
			   int64_t ldd, float *scale)
{
	cudaError_t e = cublas_k_fp8_rows(s->s, rows, cols, src, lds, dst, ldd, scale);

	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "linear", "the fp8 quantization kernel", e);
}

/* An encoded weight: the whole tensor, 4-bit (Q4_ROWS) or fp8 (F8_ROWS). */
struct cb_enc {
	const void *w;
	int f8;
};

/* Rows [n0, n0 + nr) of g's encoded weight into the stream's scratch, fp16. */
static int cb_dequant(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
		      const struct cb_enc *enc, int64_t n0, int64_t nr)
{
	cudaError_t e = enc->f8 ? cublas_k_f8_dequant(s->s, enc->w, g->n, g->k, n0, nr, s->scratch)
				: cublas_k_q4_dequant(s->s, enc->w, g->n, g->k, n0, nr, s->scratch);

	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "linear", enc->f8 ?
					"the fp8 dequantization kernel" :
					"the 4-bit dequantization kernel", e);
}

/* A tile b of stored fp8 rows (from row n0 of g's weight) that runs in fp16
 * after all: dequantized nt_enc rows at a time, what the scratch holds. */
static int cb_f8_tile_f16(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
			  const struct cb_enc *enc, int64_t nt_enc, const struct cb_gemm *b,
			  int64_t n0)
{
	for (int64_t n1 = 0; n1 < b->n; n1 += nt_enc) {
		struct cb_gemm p = cb_part(b, 0, b->m, n1, b->n - n1 < nt_enc ? b->n - n1 : nt_enc);
		int rc = cb_dequant(c, s, g, enc, n0 + n1, p.n);

		if (rc)
			return rc;
		p.w = s->scratch;
		p.ldw = g->k;
		if ((rc = cb_linear_f16(c, s, &p)))
			return rc;
	}
	return 0;
}

/* The fp8 path: for each band of x's rows, quantized once, and each tile of
 * weight rows (one, when its fp8 copy fits: then quantized once for all
 * bands), quantize what is not yet in the buffer and run one fp8 product.
 * A 4-bit weight (enc, tiles of at most nt_enc rows) is dequantized a tile
 * at a time into the stream's scratch first; an fp8 one goes in as stored
 * where its rows are 16-byte multiples (its codes and scales are f8.h's, the
 * quantizer's own rule), else dequantized like 4-bit.  A band and tile cuBLASLt has no
 * fp8 algorithm for runs the fp16 path instead (known from the cached plan
 * before anything is quantized, unless cuBLASLt refuses only when called).
 * 1: fp8 does not apply to g at all (the caller runs fp16). */
static int cb_linear_fp8(struct cublas_ctx *c, struct cublas_stream *s, const struct cb_gemm *g,
			 const struct cb_enc *enc, int64_t nt_enc)
{
	size_t esz = g->f32 ? 4 : 2;
	int w_once = 0, rc;
	struct cb_fp8 q;
	int direct = enc && enc->f8 && g->k % 16 == 0 && ((uintptr_t)enc->w & 15) == 0;
	uint8_t *codes = direct ? (uint8_t *)(uintptr_t)enc->w : NULL;
	float *scales = direct ? (float *)(void *)(codes + fg_f8_data_bytes((uint64_t)g->n,
										(uint64_t)g->k))
			       : NULL;

	/* cuBLASLt's fp8 kernels want every matrix 16-byte aligned, ld included:
	 * out's bands and tiles are, when out is (tiles start on 16-row bounds) */
	if (((uintptr_t)g->out & 15) || ((size_t)g->ldo * esz) % 16 || s->fp8_failed)
		return 1;
	if (!s->fp8) {
		cudaError_t e = cudaMalloc(&s->fp8, c->fp8_bytes);
		char why[200];

		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			s->fp8 = NULL;
			s->fp8_failed = 1;
			snprintf(why, sizeof(why), "cannot allocate fp8_scratch = %zu MiB for the "
				 "stream: %s; lower `fp8_scratch` or raise the cuda_mem tier's "
				 "`reserve`", c->fp8_bytes >> 20, cudaGetErrorString(e));
			cb_fp8_note(c, g, why);
			return 1;
		}
	}
	/* (stored fp8 codes need no dequantized tile: tiles as for fp16, on
	 * 16-row bounds that keep out and the scales aligned) */
	if ((rc = cb_fp8_carve(c, s, g, enc && !direct ? nt_enc : g->n,
			       enc && !enc->f8 ? FG_Q4_GROUP : 16, &q)))
		return rc;
	for (int64_t i0 = 0; i0 < g->m; i0 += q.mb) {
		int band_ready = 0;

		for (int64_t n0 = 0; n0 < g->n; n0 += q.nt) {
			struct cb_gemm b = cb_part(g, i0, g->m - i0 < q.mb ? g->m - i0 : q.mb, n0,
						   g->n - n0 < q.nt ? g->n - n0 : q.nt);
			/* a single tile is quantized once for all bands */
			int w_ready = (w_once && q.nt >= g->n) || direct;
			struct cb_fp8_route r;
			struct cb_fp8 qt = q; /* the tile's operands */

			if (direct) { /* (k == kq: the stored rows are the tile's) */
				qt.w8 = codes + n0 * g->k;
				qt.sw = scales + n0;
			} else if (enc) {
				if ((rc = cb_dequant(c, s, g, enc, n0, b.n)))
					return rc;
				b.w = s->scratch;
				b.ldw = g->k;
			}
			/* a refusal by cublasLtMatmul itself disables that plan: choose
			 * again (a band has at most three plans to try) */
			for (int tries = 0; tries < 4; tries++) {
				if ((rc = cb_fp8_route(c, &b, &qt, &r)))
					break;
				if (!w_ready) {
					rc = cb_fp8_quantize(c, s, b.n, g->k, b.w, b.ldw, qt.w8, qt.kq,
							     qt.sw);
					w_ready = w_once = 1;
				}
				if (rc == 0 && !band_ready) {
					rc = cb_fp8_quantize(c, s, b.m, g->k, b.x, g->ldx, qt.x8, qt.kq,
							     qt.sx);
					band_ready = 1;
				}
				if (rc || (rc = cb_fp8_run(c, s, &b, &qt, &r)) != 1)
					break;
			}
			if (rc == 1) {
				cb_fp8_note(c, &b, "cuBLASLt has no fp8 algorithm with row-wise scales "
					    "for it");
				rc = direct ? cb_f8_tile_f16(c, s, g, enc, nt_enc, &b, n0)
					    : cb_linear_f16(c, s, &b);
			}
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* An fp16 weight (or a dequantized 4-bit tile): fp8 where fp8_prefill takes
 * the product, else fp16. */
static int cb_linear_dense(struct cublas_ctx *c, struct cublas_stream *s,
			   const struct cb_gemm *g)
{
	if (c->fp8 && g->m >= c->fp8_min_rows) {
		int rc = cb_linear_fp8(c, s, g, NULL, 0);

		if (rc <= 0)
			return rc;
	}
	return cb_linear_f16(c, s, g);
}

/* A 4-bit or fp8 weight: its fused kernel for small m, else tiles of
 * weight rows dequantized into the scratch, each multiplied on the fp16 (or
 * fp8) path. */
static int cb_linear_enc(struct cublas_ctx *c, struct cublas_stream *s, struct cb_gemm *g,
			 const struct cb_enc *enc)
{
	const void *q4 = enc->w;
	size_t deq_bytes = c->scratch_bytes;
	int64_t nt;
	int rc;

	if (enc->f8 && g->m <= c->q4_fused_max_m && cublas_f8_fused_ok(q4, g->k, g->x, g->ldx)) {
		int ks = cublas_f8_fused_split(g->m, g->n, g->k, c->sms, c->scratch_bytes / 4);
		struct cublas_epi e = cb_epi_of(g, 0);

		return cb_epi(c, cublas_k_f8_linear(s->s, g->m, g->n, g->k, g->x, g->ldx, q4, &e,
						    g->out, g->ldo, ks, s->scratch));
	}
	/* (a bound from the older kernels, whose grid y counted 64-row tiles; harmless) */
	if (!enc->f8 && g->m <= c->q4_fused_max_m && cublas_q4_fused_ok(q4, g->k, g->x, g->ldx) &&
	    (g->n + FG_Q4_GROUP - 1) / FG_Q4_GROUP <= 65535) {
		int ks = cublas_q4_fused_split(g->m, g->n, g->k, c->sms, c->scratch_bytes / 4);
		struct cublas_epi e = cb_epi_of(g, 0);

		return cb_epi(c, cublas_k_q4_linear(s->s, g->m, g->n, g->k, g->x, g->ldx, q4, &e,
						    g->out, g->ldo, ks, s->scratch));
	}
	/* The dequantized tile occupies the scratch: with a residual aliasing out,
	 * an epilogue kernel needs the second half for the product. */
	if (g->res && g->res == g->out) {
		/* (the fused product of the fp32 stream may find no cuBLASLt
		 * algorithm: keep the epilogue's half for it) */
		if (cb_lt_fuses(g) && !g->f32) {
			g->tmp = NULL;
			g->tmp_bytes = 0;
		} else {
			deq_bytes = c->scratch_bytes / 2;
			g->tmp = (char *)s->scratch + deq_bytes;
			g->tmp_bytes = c->scratch_bytes - deq_bytes;
		}
	}
	nt = (int64_t)(deq_bytes / (2 * (size_t)g->k));
	if (nt >= FG_Q4_GROUP && !enc->f8)
		nt -= nt % FG_Q4_GROUP;
	if (nt < 1) {
		fg_error(c->host, "cublas: linear: scratch of %zu bytes cannot hold one dequantized "
			 "weight row of %" PRId64 " values; raise `scratch`", deq_bytes, g->k);
		return -ENOMEM;
	}
	/* fp8: x is quantized once a band, not once a tile */
	if (c->fp8 && g->m >= c->fp8_min_rows && (rc = cb_linear_fp8(c, s, g, enc, nt)) <= 0)
		return rc;
	for (int64_t n0 = 0; n0 < g->n; n0 += nt) {
		struct cb_gemm t = *g;

		t.n = g->n - n0 < nt ? g->n - n0 : nt;
		t.w = s->scratch;
		t.ldw = g->k;
		t.bias = g->bias ? g->bias + n0 : NULL;
		t.res = g->res ? cb_at(g, g->res, n0) : NULL;
		t.mul = g->mul ? g->mul + n0 : NULL;
		t.out = cb_at(g, g->out, n0);
		if ((rc = cb_dequant(c, s, g, enc, n0, t.n)) || (rc = cb_linear_f16(c, s, &t)))
			return rc;
	}
	return 0;
}

int cublas_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	struct cb_gemm g;
	int rc;

	if (a->x.rows == 0 || a->w.rows == 0)
		return 0;
	if ((rc = cublas_enter(c, "linear")))
		return rc;
	memset(&g, 0, sizeof(g));
	g.m = a->x.rows;
	g.n = a->w.rows;
	g.k = a->x.cols;
	g.x = a->x.data;
	g.ldx = a->x.ld;
	g.w = a->w.data;
	g.ldw = a->w.ld;
	g.bias = a->bias.data;
	g.res = a->residual.data;
	g.ldr = a->residual.ld;
	g.mul = a->mul.data;
	g.ldm = a->mul.ld;
	g.out = a->out.data;
	g.ldo = a->out.ld;
	g.act = a->act;
	g.f32 = a->out.dtype == FG_DTYPE_F32;
	pthread_mutex_lock(&c->lock);
	g.tmp = s->scratch;
	g.tmp_bytes = c->scratch_bytes;
	if (g.k == 0) { /* out = act(bias) ⊙ mul + residual */
		struct cublas_epi e = cb_epi_of(&g, 0);

		rc = cb_epi(c, cublas_k_epilogue(s->s, g.m, g.n, NULL, 0, 0, &e, g.out, g.ldo));
	} else if (a->w.dtype == FG_DTYPE_Q4_ROWS || a->w.dtype == FG_DTYPE_F8_ROWS) {
		struct cb_enc enc = { a->w.data, a->w.dtype == FG_DTYPE_F8_ROWS };

		rc = cb_linear_enc(c, s, &g, &enc);
	} else
		rc = cb_linear_dense(c, s, &g);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
