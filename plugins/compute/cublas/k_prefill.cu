/* plugins/compute/cublas/k_prefill.cu - fused causal attention over a prompt
 * (flash-attention style), never materialising the score matrix.
 *
 * A block of 4 warps takes 64 queries of one (sequence, head); each warp owns
 * 16 of them.  Key/value tiles of 64 rows stream through shared memory:
 * S = Q·Kᵀ on the tensor cores (mma m16n8k16, fp32 accumulators), masked
 * (key j is visible to query i of row b when pad[b] <= j <= i), an online
 * softmax in the log2 domain, then O += P·V with P re-packed from the S
 * accumulators straight into A fragments.  Loading V overlaps the S product
 * and loading the next K overlaps the P·V product.  The head dimension is
 * padded with zeros to the instantiated DP (32, 64, 80, 96 or 128); any
 * head_dim up to 128 works, multiples of 8 with aligned rows take 16-byte
 * asynchronous copies, anything else a scalar copy.  Grouped-query attention
 * only changes which columns of k and v a block reads.
 */
#include <math.h>
#include <stdint.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define PF_BR 64 /* queries per block */
#define PF_BC 64 /* keys per tile */
#define PF_THREADS 128

template <int DP>
__host__ __device__ constexpr int pf_srow()
{
	return DP + 8; /* halves per shared row: 16-byte aligned, ldmatrix conflict-free */
}

template <int DP>
static constexpr size_t pf_smem_bytes()
{
	return (size_t)3 * PF_BR * pf_srow<DP>() * sizeof(uint16_t);
}

/* rows [r0, r0 + 64) of a [*, ld] matrix at column c0, width d (zero beyond
 * d and beyond `rows` valid rows) -> shared tile with DP columns. */
template <int DP>
CB_DEV void pf_load_tile(uint16_t *tile, const uint16_t *g, int64_t ld, int rows, int d,
			 bool vec)
{
	constexpr int S = pf_srow<DP>();

	if (vec) {
		for (int c = threadIdx.x; c < PF_BR * (DP / 8); c += PF_THREADS) {
			int r = c / (DP / 8), col = (c % (DP / 8)) * 8;
			bool ok = r < rows && col < d;

			cb_cp16(tile + r * S + col, ok ? g + r * ld + col : g, ok);
		}
	} else {
		for (int c = threadIdx.x; c < PF_BR * DP; c += PF_THREADS) {
			int r = c / DP, col = c % DP;

			tile[r * S + col] = r < rows && col < d ? g[r * ld + col] : (uint16_t)0;
		}
	}
	cb_cp_commit();
}

/* GQA: k/v head blockIdx.y / a.group (a separate instance, so that the
 * multi-head kernel keeps its registers). */
template <int DP, bool GQA>
__global__ void __launch_bounds__(PF_THREADS)
cb_prefill_kernel(struct cublas_attn a, float scale_log2, bool vec)
{
	constexpr int S = pf_srow<DP>(), KT = DP / 16, NT = DP / 8;
	extern __shared__ uint4 cb_smem[];
	uint16_t *sq = (uint16_t *)cb_smem, *sk = sq + PF_BR * S, *sv = sk + PF_BR * S;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	int64_t b = blockIdx.z, h = blockIdx.y, q0 = (int64_t)blockIdx.x * PF_BR;
	int64_t seq = a.seq, d = a.head_dim, pad = a.pad[b];
	int64_t row0 = b * seq; /* first row of sequence b */
	int64_t hk = GQA ? (int)blockIdx.y / a.group : h; /* the k/v head of query head h */
	const uint16_t *kbase = (const uint16_t *)a.k + row0 * a.ldk + hk * d;
	const uint16_t *vbase = (const uint16_t *)a.v + row0 * a.ldv + hk * d;
	int64_t kstart = pad / PF_BC * PF_BC, kend = min(seq, q0 + PF_BR);
	uint32_t qf[KT][4];
	float o[NT][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };

	pf_load_tile<DP>(sq, a.q + (row0 + q0) * a.ldq + h * d, a.ldq, (int)min(seq - q0,
			 (int64_t)PF_BR), (int)d, vec);
	if (kstart < kend)
		pf_load_tile<DP>(sk, kbase + kstart * a.ldk, a.ldk,
				 (int)min(seq - kstart, (int64_t)PF_BC), (int)d, vec);
	cb_cp_wait<0>();
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < KT; kk++)
		cb_ldmatrix_x4(qf[kk], sq + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
	for (int n = 0; n < NT; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

	for (int64_t kb = kstart; kb < kend; kb += PF_BC) {
		float s[PF_BC / 8][4];
		int krows = (int)min(seq - kb, (int64_t)PF_BC);

		cb_cp_wait<0>();
		__syncthreads(); /* K(kb) landed; every warp is done with the previous V */
		pf_load_tile<DP>(sv, vbase + kb * a.ldv, a.ldv, krows, (int)d, vec);

		/* S = Q · K(kb)ᵀ */
#pragma unroll
		for (int n = 0; n < PF_BC / 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < KT; kk++) {
#pragma unroll
			for (int np = 0; np < PF_BC / 16; np++) {
				uint32_t r[4], b0[2], b1[2];
				int mi = lane / 8;

				cb_ldmatrix_x4(r, sk + (np * 16 + (mi / 2) * 8 + lane % 8) * S +
						      kk * 16 + (mi % 2) * 8);
				b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
				cb_mma16816(s[2 * np], qf[kk], b0);
				cb_mma16816(s[2 * np + 1], qf[kk], b1);
			}
		}

		/* mask, online softmax; this lane holds rows g (e < 2) and g + 8 */
		float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
		for (int n = 0; n < PF_BC / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int64_t i = q0 + warp * 16 + g + (e >= 2 ? 8 : 0);
				int64_t j = kb + n * 8 + 2 * t + (e & 1);
				float v = j >= pad && j <= i ? s[n][e] * scale_log2 : -INFINITY;

				s[n][e] = v;
				mx[e >> 1] = fmaxf(mx[e >> 1], v);
			}
		float alpha[2], base[2], rs[2] = { 0.0f, 0.0f };
#pragma unroll
		for (int r = 0; r < 2; r++) {
			float mnew = fmaxf(m[r], cb_max_xor(mx[r], 4));

			base[r] = mnew == -INFINITY ? 0.0f : mnew;
			alpha[r] = exp2f(m[r] - base[r]);
			m[r] = mnew;
		}
		uint32_t pf[PF_BC / 16][4];
#pragma unroll
		for (int n = 0; n < PF_BC / 8; n++) {
			float p0 = exp2f(s[n][0] - base[0]), p1 = exp2f(s[n][1] - base[0]);
			float p2 = exp2f(s[n][2] - base[1]), p3 = exp2f(s[n][3] - base[1]);

			rs[0] += p0 + p1;
			rs[1] += p2 + p3;
			/* C tiles 2k and 2k+1 form the A fragment of key step k */
			pf[n / 2][(n % 2) * 2 + 0] = cb_pack2(p0, p1);
			pf[n / 2][(n % 2) * 2 + 1] = cb_pack2(p2, p3);
		}
		l[0] = l[0] * alpha[0] + rs[0];
		l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
		for (int n = 0; n < NT; n++) {
			o[n][0] *= alpha[0], o[n][1] *= alpha[0];
			o[n][2] *= alpha[1], o[n][3] *= alpha[1];
		}

		cb_cp_wait<0>();
		__syncthreads(); /* V(kb) landed; every warp is done with K(kb) */
		if (kb + PF_BC < kend)
			pf_load_tile<DP>(sk, kbase + (kb + PF_BC) * a.ldk, a.ldk,
					 (int)min(seq - kb - PF_BC, (int64_t)PF_BC), (int)d, vec);

		/* O += P · V(kb) */
#pragma unroll
		for (int ks = 0; ks < PF_BC / 16; ks++) {
#pragma unroll
			for (int dp = 0; dp < DP / 16; dp++) {
				uint32_t r[4], b0[2], b1[2];
				int mi = lane / 8;

				cb_ldmatrix_x4_trans(r, sv + (ks * 16 + (mi % 2) * 8 + lane % 8) * S +
							    dp * 16 + (mi / 2) * 8);
				b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
				cb_mma16816(o[2 * dp], pf[ks], b0);
				cb_mma16816(o[2 * dp + 1], pf[ks], b1);
			}
		}
	}

	/* normalise and store; rows that saw no key (before the pad) give zeros */
	float inv[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float tot = cb_sum_xor(l[r], 4);

		inv[r] = tot > 0.0f ? 1.0f / tot : 0.0f;
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int64_t i = q0 + warp * 16 + g + r * 8;
		uint16_t *orow = a.out + (row0 + i) * a.ldo + h * d;

		if (i >= seq)
			continue;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			int64_t c = n * 8 + 2 * t;

			if (c < d)
				orow[c] = cb_f2h(o[n][2 * r] * inv[r]);
			if (c + 1 < d)
				orow[c + 1] = cb_f2h(o[n][2 * r + 1] * inv[r]);
		}
	}
}

template <int DP>
static void pf_launch(cudaStream_t s, const struct cublas_attn *a, float sl2, bool vec)
{
	dim3 grid((unsigned)((a->seq + PF_BR - 1) / PF_BR), (unsigned)a->heads,
		  (unsigned)a->batch);

	if (a->group > 1)
		cb_prefill_kernel<DP, true><<<grid, PF_THREADS, pf_smem_bytes<DP>(), s>>>(*a, sl2,
											   vec);
	else
		cb_prefill_kernel<DP, false><<<grid, PF_THREADS, pf_smem_bytes<DP>(), s>>>(*a, sl2,
											    vec);
}

extern "C" cudaError_t cublas_k_attention_prefill(cudaStream_t s, const struct cublas_attn *a)
{
	int64_t d = a->head_dim;
	float sl2 = a->scale * 1.4426950408889634f; /* exp(x) = exp2(x log2 e) */
	bool vec = d % 8 == 0 && a->ldq % 8 == 0 && a->ldk % 8 == 0 && a->ldv % 8 == 0 &&
		   ((uintptr_t)a->q & 15) == 0 && ((uintptr_t)a->k & 15) == 0 &&
		   ((uintptr_t)a->v & 15) == 0;

	if (d <= 32)
		pf_launch<32>(s, a, sl2, vec);
	else if (d <= 64)
		pf_launch<64>(s, a, sl2, vec);
	else if (d <= 80)
		pf_launch<80>(s, a, sl2, vec);
	else if (d <= 96)
		pf_launch<96>(s, a, sl2, vec);
	else
		pf_launch<128>(s, a, sl2, vec);
	return cudaGetLastError();
}

template <int DP>
static cudaError_t pf_setup(void)
{
	cudaError_t e = cudaFuncSetAttribute(cb_prefill_kernel<DP, false>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)pf_smem_bytes<DP>());

	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(cb_prefill_kernel<DP, true>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 (int)pf_smem_bytes<DP>());
	return e;
}

extern "C" cudaError_t cublas_k_prefill_setup(void)
{
	cudaError_t e = pf_setup<32>();

	if (e == cudaSuccess)
		e = pf_setup<64>();
	if (e == cudaSuccess)
		e = pf_setup<80>();
	if (e == cudaSuccess)
		e = pf_setup<96>();
	if (e == cudaSuccess)
		e = pf_setup<128>();
	return e;
}
