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
 * path on each tile.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

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
 * with a residual, SiLU or mul: those need the epilogue kernel after a plain product. */
static int cb_lt_fuses(const struct cb_gemm *g)
{
	int bias_ok = !g->bias || ((uintptr_t)g->bias & 15) == 0;

	return bias_ok && g->act != FG_ACT_SILU && !g->mul && !(g->act == FG_ACT_RELU && g->res);
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

static int cb_plan_build(struct cublas_ctx *c, struct cublas_plan *p, const char *op)
{
	const struct cublas_plan_key *k = &p->key;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	uint64_t ws = c->ws_bytes;
	cudaDataType_t cd = k->d32 ? CUDA_R_32F : CUDA_R_16F;
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
	if ((st = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16F, (uint64_t)k->k, (uint64_t)k->n,
					     k->lda)) ||
	    (st = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16F, (uint64_t)k->k, (uint64_t)k->m,
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
	 * fp16 bias there). */
	if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found < 1)) {
		p->found = 0;
		return 0;
	}
	if (st == CUBLAS_STATUS_INVALID_VALUE && k->d32)
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
		       struct cublas_plan **out, const char *op)
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
	if ((rc = cb_plan_build(c, victim, op)))
		return rc;
	victim->used = ++c->tick;
	*out = victim;
	return 0;
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

	memset(&key, 0, sizeof(key)); /* the key is compared bytewise */
	key.m = g->m;
	key.n = g->n;
	key.k = g->k;
	key.lda = g->ldw;
	key.ldb = g->ldx;
	key.ldc = res ? ldr : ldd;
	key.ldd = ldd;
	key.epilogue = (int)epi;
	key.beta = res != NULL;
	key.d32 = g->f32;
	key.align[0] = cb_align(g->w);
	key.align[1] = cb_align(g->x);
	key.align[2] = cb_align(cptr);
	key.align[3] = cb_align(d);
	if ((rc = cb_plan_get(c, &key, &p, "linear")))
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

static int cb_linear_q4(struct cublas_ctx *c, struct cublas_stream *s, struct cb_gemm *g,
			const void *q4)
{
	size_t deq_bytes = c->scratch_bytes;
	int64_t nt;
	int rc;

	/* (a bound from the older kernels, whose grid y counted 64-row tiles; harmless) */
	if (g->m <= c->q4_fused_max_m && cublas_q4_fused_ok(q4, g->k, g->x, g->ldx) &&
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
	if (nt >= FG_Q4_GROUP)
		nt -= nt % FG_Q4_GROUP;
	if (nt < 1) {
		fg_error(c->host, "cublas: linear: scratch of %zu bytes cannot hold one dequantized "
			 "weight row of %" PRId64 " values; raise `scratch`", deq_bytes, g->k);
		return -ENOMEM;
	}
	for (int64_t n0 = 0; n0 < g->n; n0 += nt) {
		struct cb_gemm t = *g;
		cudaError_t e;

		t.n = g->n - n0 < nt ? g->n - n0 : nt;
		t.w = s->scratch;
		t.ldw = g->k;
		t.bias = g->bias ? g->bias + n0 : NULL;
		t.res = g->res ? cb_at(g, g->res, n0) : NULL;
		t.mul = g->mul ? g->mul + n0 : NULL;
		t.out = cb_at(g, g->out, n0);
		e = cublas_k_q4_dequant(s->s, q4, g->n, g->k, n0, t.n, s->scratch);
		if (e != cudaSuccess)
			return cublas_cuda_fail(c, "linear", "the 4-bit dequantization kernel", e);
		if ((rc = cb_linear_f16(c, s, &t)))
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
	} else if (a->w.dtype == FG_DTYPE_Q4_ROWS)
		rc = cb_linear_q4(c, s, &g, a->w.data);
	else
		rc = cb_linear_f16(c, s, &g);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
