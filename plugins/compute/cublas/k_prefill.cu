/* plugins/compute/cublas/k_prefill.cu - fused causal attention over a prompt
 * (FlashAttention-2 style), never materialising the score matrix.
 *
 * A block of WARPS warps takes BR = WARPS * MT * 16 consecutive queries of
 * one (sequence, head); each warp owns MT m16 tiles of them, so that every K
 * or V fragment it reads from shared memory (ldmatrix) feeds 2 * MT tensor
 * core products (mma m16n8k16, fp32 accumulators): with one m16 tile per
 * warp, shared-memory bandwidth rather than the tensor cores set the pace.
 * Key/value tiles of BC rows stream through shared memory: S = Q·Kᵀ, an
 * online softmax in the log2 domain with the scale folded into the
 * exponent's FMA, then O += P·V with P re-packed from the S accumulators
 * straight into A fragments.  Loading V overlaps the S product and loading
 * the next K the P·V product.  The Q fragments stay in registers where the
 * shape has room for them (QREG), else they are re-read per key step.
 *
 * Key j is visible to query i of sequence b when pad[b] <= j <= i (and, in
 * a sliding window W, i - W < j); over the
 * cache (start > 0) query i is position start + i and the keys are the
 * sequence's cache rows, stride rows apart, up to it.  Only a
 * tile that crosses a warp's diagonal, its window's edge or holds pad[b] is
 * masked (key tiles wholly before a warp's window are skipped), and there
 * the products with keys past the warp's queries are skipped.  Key tiles
 * before pad[b] are never loaded, and warps whose queries all precede it
 * (their output is zero) compute nothing.  A (sequence, head)'s query tiles
 * are launched last first: they have the most key tiles, which shortens the
 * tail of the grid.  The output goes back through each warp's rows of the
 * query tile, for whole-row stores.
 *
 * Soft-capped scores (Gemma 2) become cap * tanh(score / cap) before the
 * mask, in units of q·k (the scale stays folded into the exponent).
 *
 * The head dimension is padded with zeros to the instantiated DP (32, 64,
 * 80, 96, 128 or 256); any head_dim up to 256 works, multiples of 8 with aligned
 * rows take 16-byte asynchronous copies, anything else a scalar copy.
 * Grouped-query attention only changes which columns of k and v a block
 * reads.  The block shape is a template parameter (pf_shape);
 * cublas_k_attention_prefill picks one by prompt length (see pf_short),
 * and bench/prefill_sweep.cu measures the others.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

template <int DP>
__host__ __device__ constexpr int pf_srow()
{
	return DP + 8; /* halves per shared row: 16-byte aligned, ldmatrix conflict-free */
}

/* The query tile (BR rows), one key tile and one value tile (BC rows each). */
template <int DP, int BR, int BC>
static constexpr size_t pf_smem_bytes()
{
	return (size_t)(BR + 2 * BC) * pf_srow<DP>() * sizeof(uint16_t);
}

/* What a launch needs besides the arguments. */
struct pf_opts {
	float sl2;   /* |scale| * log2(e), > 0 */
	bool vec;    /* 16-byte copies of q, k and v */
	bool ovec;   /* 16-byte stores of out */
	bool neg;    /* scale < 0: softmax(scale q·k) = softmax(|scale| (-q)·k) */
	/* a softcap: s -> cout * tanh(s * cin) in units of q·k (cin = |scale| /
	 * cap, cout = cap / |scale|); cin = 0: none */
	float cin, cout;
};

/* 2^x as one MUFU.EX2 (exp2f adds a fix-up for results below 2^-126); -inf gives 0. */
CB_DEV float pf_exp2(float x)
{
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* rows [0, ROWS) of a [*, ld] matrix at g, width d (zero beyond d, beyond
 * `rows` valid rows and before row `skip`) -> shared tile with DP columns;
 * one commit group.  A key before the pad gets no weight, but a cache row
 * there holds anything, NaN too, and 0 x NaN is NaN: its zeros are loaded. */
template <int DP, int ROWS, int THREADS>
CB_DEV void pf_load_tile(uint16_t *tile, const uint16_t *g, int64_t ld, int rows, int d,
			 bool vec, int skip = 0)
{
	constexpr int S = pf_srow<DP>(), CH = DP / 8, N = ROWS * CH;

	if (vec) {
#pragma unroll 1 /* unrolled, its addresses would be hoisted into registers */
		for (int k = 0; k < (N + THREADS - 1) / THREADS; k++) {
			int c = threadIdx.x + k * THREADS, r = c / CH, col = (c % CH) * 8;
			bool ok = r >= skip && r < rows && col < d;

			if (N % THREADS == 0 || c < N)
				cb_cp16(tile + r * S + col, ok ? g + r * ld + col : g, ok);
		}
	} else {
		for (int c = threadIdx.x; c < ROWS * DP; c += THREADS) {
			int r = c / DP, col = c % DP;

			tile[r * S + col] =
				r >= skip && r < rows && col < d ? g[r * ld + col] : (uint16_t)0;
		}
	}
	cb_cp_commit();
}

/* m tiles that share each K fragment in pf_scores: all, except on sm_75,
 * where ptxas spills with the largest shapes unless they go one at a time
 * (and their key steps stay rolled). */
template <int MT, int DP>
__device__ constexpr int pf_mgroup()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
	return MT * DP > 192 ? 1 : MT;
#else
	return MT;
#endif
}

/* S = Q·Kᵀ of one warp's MT m16 tiles (queries i0 ...) with the key tile at
 * kb, then the online softmax step: m, l and o rescaled, P left as fp16 A
 * fragments.  MASK: keys outside [pad, i] get no weight, and the products
 * of m tile mt with key groups past its last query are skipped (their P is
 * zero).  Q comes from qf (QREG) or from the warp's rows sq of the tile.
 * MS m tiles at a time share each K fragment. */
template <int DP, int MT, int MS, int BC, bool QREG, bool MASK>
CB_DEV void pf_scores(uint32_t (&p)[MT][BC / 16][4], float (&o)[MT][DP / 8][4],
		      float (&m)[MT][2], float (&l)[MT][2],
		      const uint32_t (&qf)[MT][QREG ? DP / 16 : 1][4], const uint16_t *sq,
		      const uint16_t *sk, int lane, int i0, int kb, int pad, int win,
		      const pf_opts &op)
{
	float sl2 = op.sl2;
	constexpr int S = pf_srow<DP>();
	int g = lane / 4, t = lane % 4, mi = lane / 8;

#pragma unroll
	for (int m0 = 0; m0 < MT; m0 += MS) {
		float s[MS][BC / 8][4], mx[MS][2];

#pragma unroll
		for (int u = 0; u < MS; u++)
#pragma unroll
			for (int n = 0; n < BC / 8; n++)
				s[u][n][0] = s[u][n][1] = s[u][n][2] = s[u][n][3] = 0.0f;
#pragma unroll(MS < MT ? 1 : DP / 16)
		for (int kk = 0; kk < DP / 16; kk++) {
			uint32_t qa[MS][4];

#pragma unroll
			for (int u = 0; u < MS; u++) {
				if (QREG)
#pragma unroll
					for (int e = 0; e < 4; e++)
						qa[u][e] = qf[m0 + u][QREG ? kk : 0][e];
				else
					cb_ldmatrix_x4(qa[u], sq + ((m0 + u) * 16 + lane % 16) * S +
							       kk * 16 + (lane / 16) * 8);
			}
#pragma unroll
			for (int np = 0; np < BC / 16; np++) {
				uint32_t r[4]; /* B fragments of key groups 2 np and 2 np + 1 */

				if (MASK && kb + np * 16 > i0 + (m0 + MS) * 16 - 1)
					continue;
				cb_ldmatrix_x4(r, sk + (np * 16 + (mi / 2) * 8 + lane % 8) * S +
						      kk * 16 + (mi % 2) * 8);
#pragma unroll
				for (int u = 0; u < MS; u++) {
					if (MASK && kb + np * 16 > i0 + (m0 + u) * 16 + 15)
						continue;
					cb_mma16816(s[u][2 * np], qa[u], r);
					cb_mma16816(s[u][2 * np + 1], qa[u], r + 2);
				}
			}
		}

		/* this lane holds rows g (e < 2) and g + 8 of each m tile; m is
		 * in units of q·k, so the exponent is s * sl2 - m * sl2 */
#pragma unroll
		for (int u = 0; u < MS; u++) {
			mx[u][0] = mx[u][1] = -INFINITY;
#pragma unroll
			for (int n = 0; n < BC / 8; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					if (op.cin > 0.0f)
						s[u][n][e] = op.cout * tanhf(s[u][n][e] * op.cin);
					if (MASK) {
						int i = i0 + (m0 + u) * 16 + g + (e >= 2 ? 8 : 0);
						int j = kb + n * 8 + 2 * t + (e & 1);

						if (j < pad || j > i || (win && j <= i - win))
							s[u][n][e] = -INFINITY;
					}
					mx[u][e >> 1] = fmaxf(mx[u][e >> 1], s[u][n][e]);
				}
		}
#pragma unroll
		for (int u = 0; u < MS; u++) {
			int mt = m0 + u;
			float nb[2], rs[2] = { 0.0f, 0.0f };

#pragma unroll
			for (int r = 0; r < 2; r++) {
				float mnew = fmaxf(m[mt][r], cb_max_xor(mx[u][r], 4));
				float alpha;

				/* no visible key yet: nothing to subtract */
				nb[r] = mnew == -INFINITY ? 0.0f : -mnew * sl2;
				alpha = pf_exp2(fmaf(m[mt][r], sl2, nb[r]));
				m[mt][r] = mnew;
				l[mt][r] *= alpha;
#pragma unroll
				for (int n = 0; n < DP / 8; n++)
					o[mt][n][2 * r] *= alpha, o[mt][n][2 * r + 1] *= alpha;
			}
#pragma unroll
			for (int n = 0; n < BC / 8; n++) {
				float p0 = pf_exp2(fmaf(s[u][n][0], sl2, nb[0]));
				float p1 = pf_exp2(fmaf(s[u][n][1], sl2, nb[0]));
				float p2 = pf_exp2(fmaf(s[u][n][2], sl2, nb[1]));
				float p3 = pf_exp2(fmaf(s[u][n][3], sl2, nb[1]));

				rs[0] += p0 + p1;
				rs[1] += p2 + p3;
				/* C tiles 2k and 2k+1 form the A fragment of key step k */
				p[mt][n / 2][(n % 2) * 2 + 0] = cb_pack2(p0, p1);
				p[mt][n / 2][(n % 2) * 2 + 1] = cb_pack2(p2, p3);
			}
			l[mt][0] += rs[0];
			l[mt][1] += rs[1];
		}
	}
}

/* O += P · V for one warp's MT m16 tiles and the value tile at kb; MASK
 * skips what pf_scores skipped. */
template <int DP, int MT, int BC, bool MASK>
CB_DEV void pf_pv(float (&o)[MT][DP / 8][4], const uint32_t (&p)[MT][BC / 16][4],
		  const uint16_t *sv, int lane, int i0, int kb)
{
	constexpr int S = pf_srow<DP>();
	int mi = lane / 8;

#pragma unroll
	for (int ks = 0; ks < BC / 16; ks++) {
		if (MASK && kb + ks * 16 > i0 + MT * 16 - 1)
			continue;
#pragma unroll
		for (int dp = 0; dp < DP / 16; dp++) {
			uint32_t r[4]; /* B fragments of dims 16 dp .. +7 and +8 .. +15 */

			cb_ldmatrix_x4_trans(r, sv + (ks * 16 + (mi % 2) * 8 + lane % 8) * S +
						    dp * 16 + (mi / 2) * 8);
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				if (MASK && kb + ks * 16 > i0 + mt * 16 + 15)
					continue;
				cb_mma16816(o[mt][2 * dp], p[mt][ks], r);
				cb_mma16816(o[mt][2 * dp + 1], p[mt][ks], r + 2);
			}
		}
	}
}

/* A block shape: WARPS warps of MT m16 tiles each, key tiles of BC rows, at
 * least MINB blocks per SM (a register cap), Q fragments kept in registers
 * (QREG) or re-read from shared memory per key step. */
template <int WARPS_, int MT_, int BC_, int MINB_, bool QREG_>
struct pf_shape {
	static constexpr int WARPS = WARPS_, MT = MT_, BC = BC_, MINB = MINB_;
	static constexpr int THREADS = WARPS * 32, BR = WARPS * MT * 16;
	static constexpr bool QREG = QREG_;
};

/* GQA: k/v head blockIdx.y / a.group (a separate instance, so that the
 * multi-head kernel keeps its registers).  Turing spilled the DP 128 kernel
 * at three blocks an SM. */
template <int DP, bool GQA, class SH>
__global__ void __launch_bounds__(SH::THREADS, CB_MINB_BEFORE(800, SH::MINB))
cb_prefill_kernel(struct cublas_attn a, struct pf_opts op)
{
	constexpr int MT = SH::MT, BC = SH::BC, BR = SH::BR, THREADS = SH::THREADS;
	constexpr int S = pf_srow<DP>(), MS = pf_mgroup<MT, DP>();
	constexpr bool QREG = SH::QREG;
	extern __shared__ uint4 cb_smem[];
	uint16_t *sq = (uint16_t *)cb_smem, *sk = sq + BR * S, *sv = sk + BC * S;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	int seq = (int)a.seq, d = (int)a.head_dim, h = blockIdx.y, b = blockIdx.z;
	/* over the cache, query i is position st + i of keys' nk */
	int pad = a.pad[b], st = (int)a.start, nk = st + seq;
	int q0 = (int)(gridDim.x - 1 - blockIdx.x) * BR; /* the longest query tiles first */
	int i0 = q0 + warp * MT * 16, ilast = min(i0 + MT * 16, seq) - 1; /* the warp's queries */
	int c0 = st + i0, clast = st + ilast; /* their positions */
	bool live = ilast >= i0 && clast >= pad; /* some query of the warp sees a key */
	/* keys [kstart, kend): from the tile holding pad to the block's last
	 * query; none when every query of the block precedes pad */
	int win = (int)a.window, kfirst = win ? max(pad, st + q0 - win + 1) : pad;
	int kstart = kfirst / BC * BC, kend = st + q0 + BR > pad ? min(nk, st + q0 + BR) : kstart;
	int64_t row0 = (int64_t)b * a.seq; /* first query row of sequence b */
	int64_t krow0 = st ? (int64_t)b * a.stride : row0; /* its first key row */
	int64_t hk = GQA ? h / a.group : h; /* the k/v head of query head h */
	const uint16_t *kp = (const uint16_t *)a.k + (krow0 + kstart) * a.ldk + hk * d;
	const uint16_t *vp = (const uint16_t *)a.v + (krow0 + kstart) * a.ldv + hk * d;
	uint16_t *sqw = sq + warp * MT * 16 * S; /* the warp's rows of the query tile */
	uint32_t qf[MT][QREG ? DP / 16 : 1][4];
	float o[MT][DP / 8][4], m[MT][2], l[MT][2];

	pf_load_tile<DP, BR, THREADS>(sq, a.q + (row0 + q0) * a.ldq + (int64_t)h * d, a.ldq,
				      min(seq - q0, BR), d, op.vec);
	if (kstart < kend)
		pf_load_tile<DP, BC, THREADS>(sk, kp, a.ldk, min(nk - kstart, BC), d, op.vec,
					      pad - kstart);
	cb_cp_wait<0>();
	__syncthreads();
	if (op.neg) { /* a negative scale: -q, and |scale| from here on */
		for (int c = threadIdx.x; c < BR * S / 2; c += THREADS)
			((uint32_t *)sq)[c] ^= 0x80008000u;
		__syncthreads();
	}
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		const uint16_t *qrow = sqw + (mt * 16 + lane % 16) * S + (lane / 16) * 8;

		if (QREG)
#pragma unroll
			for (int kk = 0; kk < DP / 16; kk++)
				cb_ldmatrix_x4(qf[mt][QREG ? kk : 0], qrow + kk * 16);
		m[mt][0] = m[mt][1] = -INFINITY;
		l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
		for (int n = 0; n < DP / 8; n++)
			o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
	}

	for (int kb = kstart; kb < kend; kb += BC) {
		/* the warp's queries see keys of this tile (in a window: its
		 * first query sees the tile's last key at least); those that
		 * cross its diagonal or window edge or hold pad need the mask */
		bool act = live && kb <= clast && (!win || kb + BC - 1 > c0 - win);
		bool mask = kb < pad || kb + BC - 1 > c0 || (win && kb <= clast - win);
		uint32_t p[MT][BC / 16][4];

		cb_cp_wait<0>();
		__syncthreads(); /* K(kb) landed; every warp is done with the previous V */
		pf_load_tile<DP, BC, THREADS>(sv, vp, a.ldv, min(nk - kb, BC), d, op.vec, pad - kb);
		vp += BC * a.ldv;
		if (act && mask)
			pf_scores<DP, MT, MS, BC, QREG, true>(p, o, m, l, qf, sqw, sk, lane, c0,
							      kb, pad, win, op);
		else if (act)
			pf_scores<DP, MT, MS, BC, QREG, false>(p, o, m, l, qf, sqw, sk, lane, c0,
							       kb, pad, win, op);

		cb_cp_wait<0>();
		__syncthreads(); /* V(kb) landed; every warp is done with K(kb) */
		if (kb + BC < kend) {
			kp += BC * a.ldk;
			pf_load_tile<DP, BC, THREADS>(sk, kp, a.ldk, min(nk - kb - BC, BC), d,
						      op.vec);
		}
		if (act && mask)
			pf_pv<DP, MT, BC, true>(o, p, sv, lane, c0, kb);
		else if (act)
			pf_pv<DP, MT, BC, false>(o, p, sv, lane, c0, kb);
	}

	/* normalise into the warp's rows of the query tile (no other warp reads
	 * them any more); rows that saw no key (before pad) give zeros */
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int r = 0; r < 2; r++) {
			/* 1 <= tot <= keys: the fast reciprocal is close enough for fp16 */
			float tot = cb_sum_xor(l[mt][r], 4);
			float inv = tot > 0.0f ? __fdividef(1.0f, tot) : 0.0f;
			uint16_t *srow = sqw + (mt * 16 + g + r * 8) * S + 2 * t;

#pragma unroll
			for (int n = 0; n < DP / 8; n++)
				*(uint32_t *)(srow + n * 8) = cb_pack2(o[mt][n][2 * r] * inv,
								       o[mt][n][2 * r + 1] * inv);
		}
	__syncwarp();

	/* whole rows of the warp's queries to out */
	int rows = min(ilast - i0 + 1, MT * 16);
	uint16_t *obase = a.out + (row0 + i0) * a.ldo + (int64_t)h * d;

	if (op.ovec) {
		for (int c = lane; c < rows * (DP / 8); c += 32) {
			int r = c / (DP / 8), col = (c % (DP / 8)) * 8;

			if (col < d)
				*(uint4 *)(obase + r * a.ldo + col) =
					*(const uint4 *)(sqw + r * S + col);
		}
	} else {
		for (int c = lane; c < rows * DP; c += 32) {
			int r = c / DP, col = c % DP;

			if (col < d)
				obase[r * a.ldo + col] = sqw[r * S + col];
		}
	}
}

static struct pf_opts pf_opts_of(const struct cublas_attn *a)
{
	struct pf_opts op;
	int64_t d = a->head_dim;

	/* exp(x) = exp2(x log2 e); a zero scale (or one that underflows) takes
	 * the smallest normal: every exponent still rounds to 0, equal weights */
	op.sl2 = fabsf(a->scale) * 1.4426950408889634f;
	if (!(op.sl2 >= FLT_MIN))
		op.sl2 = FLT_MIN;
	op.vec = d % 8 == 0 && a->ldq % 8 == 0 && a->ldk % 8 == 0 && a->ldv % 8 == 0 &&
		 ((uintptr_t)a->q & 15) == 0 && ((uintptr_t)a->k & 15) == 0 &&
		 ((uintptr_t)a->v & 15) == 0;
	op.ovec = d % 8 == 0 && a->ldo % 8 == 0 && ((uintptr_t)a->out & 15) == 0;
	op.neg = a->scale < 0.0f;
	/* (a scale too small to matter leaves nothing to cap) */
	op.cin = op.cout = 0.0f;
	if (a->softcap > 0.0f && fabsf(a->scale) >= 1e-30f) {
		op.cin = fabsf(a->scale) / a->softcap;
		op.cout = a->softcap / fabsf(a->scale);
	}
	return op;
}

template <int DP, class SH>
static void pf_launch(cudaStream_t s, const struct cublas_attn *a)
{
	constexpr size_t smem = pf_smem_bytes<DP, SH::BR, SH::BC>();
	dim3 grid((unsigned)((a->seq + SH::BR - 1) / SH::BR), (unsigned)a->heads,
		  (unsigned)a->batch);
	struct pf_opts op = pf_opts_of(a);

	if (a->group > 1)
		cb_prefill_kernel<DP, true, SH><<<grid, SH::THREADS, smem, s>>>(*a, op);
	else
		cb_prefill_kernel<DP, false, SH><<<grid, SH::THREADS, smem, s>>>(*a, op);
}

/* Opt both instances of a shape in to the shared memory they use. */
template <int DP, class SH>
static cudaError_t pf_setup(void)
{
	constexpr int smem = (int)pf_smem_bytes<DP, SH::BR, SH::BC>();
	cudaError_t e = cudaFuncSetAttribute(cb_prefill_kernel<DP, false, SH>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);

	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(cb_prefill_kernel<DP, true, SH>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
	return e;
}

/* The default shapes (bench/prefill_sweep.cu on the H200, bench/RESULTS.md):
 * up to 1 023 queries a sequence, 4 warps of 16 queries, three blocks an SM
 * (at seq 512 the short rows of tiles favour occupancy, 2-7 % over 32
 * queries a warp); longer prompts 4 warps of 32 queries (+12 % at 2 048).
 * Both over 64-key tiles, Q fragments in registers up to DP 80. */
template <bool QREG>
using pf_short = pf_shape<4, 1, 64, 3, QREG>;
template <bool QREG>
using pf_long = pf_shape<4, 2, 64, 1, QREG>;

/* Heads of 256 (Gemma 2): one shape, 32-key tiles, Q re-read from shared
 * memory (the accumulators alone take 128 registers). */
using pf_wide = pf_shape<4, 1, 32, 1, false>;

template <int DP>
static void pf_launch_dp(cudaStream_t s, const struct cublas_attn *a)
{
	if constexpr (DP > 128)
		pf_launch<DP, pf_wide>(s, a);
	else if (a->seq < 1024)
		pf_launch<DP, pf_short<(DP <= 80)> >(s, a);
	else
		pf_launch<DP, pf_long<(DP <= 80)> >(s, a);
}

template <int DP>
static cudaError_t pf_setup_dp(void)
{
	if constexpr (DP > 128) {
		return pf_setup<DP, pf_wide>();
	} else {
		cudaError_t e = pf_setup<DP, pf_short<(DP <= 80)> >();

		return e == cudaSuccess ? pf_setup<DP, pf_long<(DP <= 80)> >() : e;
	}
}

extern "C" cudaError_t cublas_k_attention_prefill(cudaStream_t s, const struct cublas_attn *a)
{
	int64_t d = a->head_dim;

	if (d <= 32)
		pf_launch_dp<32>(s, a);
	else if (d <= 64)
		pf_launch_dp<64>(s, a);
	else if (d <= 80)
		pf_launch_dp<80>(s, a);
	else if (d <= 96)
		pf_launch_dp<96>(s, a);
	else if (d <= 128)
		pf_launch_dp<128>(s, a);
	else
		pf_launch_dp<256>(s, a);
	return cudaGetLastError();
}

extern "C" cudaError_t cublas_k_prefill_setup(void)
{
	cudaError_t e = pf_setup_dp<32>();

	if (e == cudaSuccess)
		e = pf_setup_dp<64>();
	if (e == cudaSuccess)
		e = pf_setup_dp<80>();
	if (e == cudaSuccess)
		e = pf_setup_dp<96>();
	if (e == cudaSuccess)
		e = pf_setup_dp<128>();
	if (e == cudaSuccess)
		e = pf_setup_dp<256>();
	return e;
}
