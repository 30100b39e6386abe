/* plugins/compute/cublas/k_linear.cu - kernels around linear: the epilogue
 * for combinations cuBLASLt cannot fuse, 4-bit weight dequantization (the
 * prefill path feeds cuBLASLt from it) and the fused 4-bit GEMM for small m.
 *
 * Every product ends in cb_epi_apply: bias, activation (ReLU or SiLU), the
 * gating multiplier, the residual, in fp32 with one rounding to fp16 (none
 * when out is the fp32 residual stream).
 *
 * The fused kernel reads each 4-bit weight once, straight into registers
 * (16 bytes of a row per lane, one stage ahead), and multiplies on the
 * tensor cores with the weights as the 16-row operand and x as the 8-row
 * one, so that m <= 8 pads nothing.  The weights become fp16 exactly as the
 * reference decodes them, fp16(q * scale + min) with one rounding: pre-scaling
 * x instead would round x * scale and miss the fp32 residual stream's bound.
 * A warp owns 32 weight rows (inside one quantization group) and a slice of
 * each stage's columns; x and the (scale, min) pairs of a stage go through
 * shared memory, shared by the warps of a block (64 or 128 rows, so x is read
 * from L2 at most twice per weight byte).  Warps that split a stage's columns
 * are summed through shared memory; when the grid would still leave SMs idle
 * or a partial wave, k is split across blocks and a second kernel adds the
 * partial sums and applies the epilogue.
 */
#include <stdint.h>

#include <fgcore/compute.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/fused.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CB_THREADS 256
#define CB_GRID_CAP 65535LL * 8

/* ---- epilogue ---------------------------------------------------------------------- */

template <typename TS>
__global__ void cb_epilogue_kernel(int64_t m, int64_t n, const TS *src, int64_t lds,
				   cublas_epi ep, void *out, int64_t ldo)
{
	int64_t total = m * n;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = e / n, j = e - i * n;
		float v = src ? cb_ld(src + i * lds + j) : 0.0f;

		cb_epi_store(ep, out, i * ldo + j, cb_epi_apply(ep, i, j, v));
	}
}

extern "C" cudaError_t cublas_k_epilogue(cudaStream_t s, int64_t m, int64_t n, const void *src,
					 int src_f32, int64_t lds, const struct cublas_epi *e,
					 void *out, int64_t ldo)
{
	unsigned blocks = cb_blocks(m * n, CB_THREADS, CB_GRID_CAP);

	if (src_f32)
		cb_epilogue_kernel<<<blocks, CB_THREADS, 0, s>>>(m, n, (const float *)src, lds, *e,
								 out, ldo);
	else
		cb_epilogue_kernel<<<blocks, CB_THREADS, 0, s>>>(m, n, (const uint16_t *)src, lds,
								 *e, out, ldo);
	return cudaGetLastError();
}

__global__ void cb_h2f_kernel(int64_t n, const uint16_t *src, float *dst)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = cb_h2f(src[i]);
}

extern "C" cudaError_t cublas_k_h2f(cudaStream_t s, int64_t n, const uint16_t *src, float *dst)
{
	cb_h2f_kernel<<<cb_blocks(n, CB_THREADS, CB_GRID_CAP), CB_THREADS, 0, s>>>(n, src, dst);
	return cudaGetLastError();
}

/* ---- dequantization ---------------------------------------------------------------- */

/* Scalar: one element per thread, any layout. */
__global__ void cb_dequant_scalar(const uint8_t *q4, int64_t rows, int64_t cols, int64_t r0,
				  int64_t nr, uint16_t *dst)
{
	const uint16_t *prm = (const uint16_t *)(q4 + cb_q4_data_bytes(rows, cols));
	int64_t total = nr * cols;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = r0 + e / cols, c = e % cols, el = r * cols + c;
		unsigned byte = q4[el >> 1], q = (el & 1) ? (byte & 15u) : (byte >> 4);
		int64_t g = (r / FG_Q4_GROUP) * cols + c;
		float sc = cb_h2f(prm[2 * g]), mn = cb_h2f(prm[2 * g + 1]);

		dst[e] = cb_f2h((float)q * sc + mn);
	}
}

/* Vector: 8 columns per thread (cols % 8 == 0, 16-byte aligned q4 and dst). */
__global__ void cb_dequant_vec(const uint8_t *q4, int64_t rows, int64_t cols, int64_t r0,
			       int64_t nr, uint16_t *dst)
{
	const uint8_t *prm = q4 + cb_q4_data_bytes(rows, cols);
	int64_t c8 = cols / 8, total = nr * c8;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t rr = e / c8, c = (e - rr * c8) * 8, r = r0 + rr;
		uint32_t w = *(const uint32_t *)(q4 + ((r * cols + c) >> 1));
		const uint4 *pp = (const uint4 *)(prm + ((r / FG_Q4_GROUP) * cols + c) * 4);
		uint4 p0 = pp[0], p1 = pp[1];
		uint32_t pw[8] = { p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w };
		uint32_t o[4];

#pragma unroll
		for (int b = 0; b < 4; b++) {
			unsigned byte = (w >> (8 * b)) & 0xffu;
			float2 a = cb_unpack2(pw[2 * b]), z = cb_unpack2(pw[2 * b + 1]);

			/* (scale, min) pairs: .x is the scale, .y the minimum. */
			o[b] = cb_pack2((float)(byte >> 4) * a.x + a.y,
					(float)(byte & 15u) * z.x + z.y);
		}
		*(uint4 *)(dst + rr * cols + c) = make_uint4(o[0], o[1], o[2], o[3]);
	}
}

extern "C" cudaError_t cublas_k_q4_dequant(cudaStream_t s, const void *q4, int64_t rows,
					   int64_t cols, int64_t r0, int64_t nr, uint16_t *dst)
{
	const uint8_t *p = (const uint8_t *)q4;

	if (cols % 8 == 0 && ((uintptr_t)q4 & 15) == 0 && ((uintptr_t)dst & 15) == 0)
		cb_dequant_vec<<<cb_blocks(nr * (cols / 8), CB_THREADS, CB_GRID_CAP), CB_THREADS,
				 0, s>>>(p, rows, cols, r0, nr, dst);
	else
		cb_dequant_scalar<<<cb_blocks(nr * cols, CB_THREADS, CB_GRID_CAP), CB_THREADS, 0,
				    s>>>(p, rows, cols, r0, nr, dst);
	return cudaGetLastError();
}

/* ---- fused 4-bit GEMM ---------------------------------------------------------------- */

/* The weights are the A operand of m16n8k16 (16 weight rows x 16 columns),
 * x the B operand (16 columns x 8 rows of x), so m <= 8 pads nothing.  A warp
 * owns R = 16 RT weight rows (inside one group: one (scale, min) row serves
 * them) and, per stage, CW chunks of 128 columns; its lanes load the weights
 * straight into registers, 16 bytes (32 columns) of rows g and g + 8 of each
 * m16 tile per chunk, one stage ahead.  x and the (scale, min) pairs of a
 * stage go through shared memory (cp.async, two buffers, one barrier a
 * stage); WR warps side by side in rows share them, WK warps side by side in
 * columns split the stage and are summed through shared memory at the end. */
#define Q4_CH 128 /* columns of a warp's chunk: 16 bytes per lane and row */

/* The k slots of one m16n8k16 product are a permutation of 16 columns; any
 * permutation both operands agree on gives the same sum.  Lane t's 16 bytes
 * are 4 words of 8 codes (columns 32t + 8i .. + 7, word i); byte b of a word
 * holds columns 2b (high nibble) and 2b + 1.  Each word feeds two products:
 * the first puts its columns (0, 4) in slots (2t, 2t + 1) and (2, 6) in
 * (2t + 8, 2t + 9), the second does the same with (1, 5) and (3, 7).  x and
 * the (scale, min) pairs are permuted to match with byte permutes. */
#define Q4_PAIR_LO 0x5410 /* low halves of two words */
#define Q4_PAIR_HI 0x7632 /* high halves */

/* fp16 weights from the codes at bits 0-3 and 16-19 of w: (w & 0x000f000f) |
 * 0x6400 6400 are the halves 1024 + q exactly, minus 1024, times scale plus
 * min (one rounding, as the reference's fp16 of q * scale + min). */
CB_DEV uint32_t q4_wlo(uint32_t w, uint32_t s2, uint32_t mn2)
{
	uint32_t u = cb_f16_bits<0x000f000fu>(w);
	__half2 q = __hsub2(*(__half2 *)&u, __float2half2_rn(1024.0f));
	__half2 r = __hfma2(q, *(const __half2 *)&s2, *(const __half2 *)&mn2);

	return *(uint32_t *)&r;
}

/* The same for the codes at bits 4-7 and 20-23 without a shift: the halves
 * are 1024 + 16 q, and (1024 + 16 q) / 16 - 64 = q exactly in one FMA. */
CB_DEV uint32_t q4_whi(uint32_t w, uint32_t s2, uint32_t mn2)
{
	uint32_t u = cb_f16_bits<0x00f000f0u>(w);
	__half2 q = __hfma2(*(__half2 *)&u, __float2half2_rn(0.0625f), __float2half2_rn(-64.0f));
	__half2 r = __hfma2(q, *(const __half2 *)&s2, *(const __half2 *)&mn2);

	return *(uint32_t *)&r;
}

/* 8 columns of x (one 16-byte unit) in the products' k-slot order: the
 * pairs (0, 4), (2, 6), (1, 5), (3, 7). */
CB_DEV uint4 q4_xperm(uint4 v)
{
	return make_uint4(__byte_perm(v.x, v.z, Q4_PAIR_LO), __byte_perm(v.y, v.w, Q4_PAIR_LO),
			  __byte_perm(v.x, v.z, Q4_PAIR_HI), __byte_perm(v.y, v.w, Q4_PAIR_HI));
}

/* The (scale, min) pairs of 8 columns (units a, b) in the same order: the
 * four scale pairs in *s2, the four min pairs in *mn2. */
CB_DEV void q4_pperm(uint4 a, uint4 b, uint4 *s2, uint4 *mn2)
{
	*s2 = make_uint4(__byte_perm(a.x, b.x, Q4_PAIR_LO), __byte_perm(a.z, b.z, Q4_PAIR_LO),
			 __byte_perm(a.y, b.y, Q4_PAIR_LO), __byte_perm(a.w, b.w, Q4_PAIR_LO));
	*mn2 = make_uint4(__byte_perm(a.x, b.x, Q4_PAIR_HI), __byte_perm(a.z, b.z, Q4_PAIR_HI),
			  __byte_perm(a.y, b.y, Q4_PAIR_HI), __byte_perm(a.w, b.w, Q4_PAIR_HI));
}

/* Shared-memory swizzles (16-byte units) that keep the lanes' loads apart in
 * the banks: lane t reads x unit 4t + i of a chunk and (scale, min) units
 * 8t + 2i (+1), 64 or 128 bytes apart for consecutive t. */
CB_DEV int q4_xswz(int u)
{
	return u ^ ((u >> 3) & 1);
}

CB_DEV int q4_pswz(int u)
{
	return u ^ (((u >> 3) & 3) << 1);
}

template <int NT, int RT, int WR, int WK, int CW>
struct q4_cfg {
	static constexpr int M = 8 * NT;                /* rows of x in a tile */
	static constexpr int R = 16 * RT;               /* weight rows per warp */
	static constexpr int BR = R * WR;               /* weight rows per block */
	static constexpr int G = (BR + FG_Q4_GROUP - 1) / FG_Q4_GROUP; /* groups per block */
	static constexpr int WC = Q4_CH * CW;           /* columns per warp and stage */
	static constexpr int SC = WC * WK;              /* columns per stage */
	static constexpr int THREADS = 32 * WR * WK;
	static constexpr int XROW = 2 * SC + 32;        /* bytes per row of x: 32 mod 128 */
	static constexpr int XBYTES = M * XROW;
	static constexpr int STAGE = XBYTES + G * 4 * SC;
	/* Several warps share a stage's x and pairs: permute them once in shared
	 * memory (q4_xperm, q4_pperm) rather than in every warp that reads them. */
	static constexpr bool PERM = WR > 1;
	static constexpr size_t RED = (size_t)WK * M * (BR + 4) * 4; /* cb_fused_sums' */
	static constexpr size_t SMEM = 2 * (size_t)STAGE > RED ? 2 * (size_t)STAGE : RED;
	static_assert(R <= FG_Q4_GROUP && FG_Q4_GROUP % R == 0, "a warp's rows in one group");
	static_assert(BR % FG_Q4_GROUP == 0 || FG_Q4_GROUP % BR == 0, "blocks on group bounds");
};

/* GRP: blockIdx.z is a group (an expert): rows goff[z] .. goff[z + 1] of x,
 * mul and out, times the weights at gw[z]; kper is then k. */
template <int NT, int RT, int WR, int WK, int CW, int MINB, bool GRP>
__global__ void __launch_bounds__(32 * WR * WK, CB_MINB_BEFORE(900, MINB))
cb_q4_mma(int64_t m, int64_t n, int64_t k, const uint16_t *__restrict__ x, int64_t ldx,
	  const uint8_t *__restrict__ q4, cublas_epi ep, void *out, int64_t ldo, int64_t kper,
	  float *part, const void *const *gw, const int32_t *goff)
{
	int64_t ro = 0; /* the group's first row */

	if (GRP) {
		ro = goff[blockIdx.z];
		m = goff[blockIdx.z + 1] - ro;
		if ((int64_t)blockIdx.y * (8 * NT) >= m)
			return; /* (the whole block: before any barrier) */
		x += ro * ldx;
		q4 = (const uint8_t *)gw[blockIdx.z];
	}
	typedef q4_cfg<NT, RT, WR, WK, CW> C;
	extern __shared__ uint4 cb_smem[];
	uint8_t *sm = (uint8_t *)cb_smem;
	const uint8_t *prm = q4 + cb_q4_data_bytes((uint64_t)n, (uint64_t)k);
	int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	int wr = warp % WR, wk = warp / WR;
	int64_t n0 = (int64_t)blockIdx.x * C::BR, m0 = (int64_t)blockIdx.y * C::M;
	int64_t kbeg = GRP ? 0 : (int64_t)blockIdx.z * kper, kend = min(k, kbeg + kper);
	int nst = kend > kbeg ? (int)((kend - kbeg + C::SC - 1) / C::SC) : 0;
	int mrows = (int)min((int64_t)C::M, m - m0);
	int64_t grp0 = n0 / FG_Q4_GROUP, ngrp = (n + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
	int gi = (wr * C::R) / FG_Q4_GROUP; /* this warp's group within the block */
	const uint8_t *wrow[RT][2];
	float acc[RT][NT][4];

	/* Rows past n read row n - 1 (their sums are never stored); columns past
	 * the split's end read real codes, but x and (scale, min) are zero there. */
#pragma unroll
	for (int rt = 0; rt < RT; rt++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			wrow[rt][h] = q4 + min(n0 + wr * C::R + 16 * rt + 8 * h + g, n - 1) * (k / 2);
#pragma unroll
	for (int rt = 0; rt < RT; rt++)
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
			acc[rt][nt][0] = acc[rt][nt][1] = acc[rt][nt][2] = acc[rt][nt][3] = 0.0f;
	/* Rows of x past m are zero in both buffers, once (published by the first barrier). */
	for (int b = 0; b < 2; b++)
		for (int c = tid; c < (C::M - mrows) * (C::XROW / 16); c += C::THREADS)
			*(uint4 *)(sm + b * C::STAGE + (mrows + c / (C::XROW / 16)) * C::XROW +
				   (c % (C::XROW / 16)) * 16) = make_uint4(0, 0, 0, 0);

	auto issue = [&](int s) {
		uint8_t *xs = sm + (s & 1) * C::STAGE, *ps = xs + C::XBYTES;
		int64_t kc = kbeg + (int64_t)s * C::SC;

		/* x: mrows rows x SC / 8 units of 8 halves */
		for (int c = tid; c < mrows * (C::SC / 8); c += C::THREADS) {
			int row = c / (C::SC / 8), u = c % (C::SC / 8);
			int64_t col = kc + 8 * u;
			bool ok = col < kend;

			cb_cp16(xs + row * C::XROW + 16 * q4_xswz(u),
				ok ? x + (m0 + row) * ldx + col : x, ok);
		}
		/* (scale, min): G groups x SC / 4 units of 4 columns */
		for (int c = tid; c < C::G * (C::SC / 4); c += C::THREADS) {
			int j = c / (C::SC / 4), u = c % (C::SC / 4);
			int64_t col = kc + 4 * u;
			bool ok = col < kend && grp0 + j < ngrp;

			cb_cp16(ps + j * 4 * C::SC + 16 * q4_pswz(u),
				ok ? prm + ((grp0 + j) * k + col) * 4 : prm, ok);
		}
	};
	/* Stage s in place into the k-slot order of the products: each 8 columns
	 * of x become (0, 4), (2, 6), (1, 5), (3, 7), and each 8 columns of
	 * (scale, min) the four scale pairs, then the four min pairs, in the same
	 * order (the swizzles keep a unit pair adjacent, so positions are kept). */
	auto permute = [&](int s) {
		uint8_t *xs = sm + (s & 1) * C::STAGE, *ps = xs + C::XBYTES;

		for (int c = tid; c < mrows * (C::SC / 8); c += C::THREADS) {
			uint4 *p = (uint4 *)(xs + (c / (C::SC / 8)) * C::XROW +
					     16 * q4_xswz(c % (C::SC / 8)));

			*p = q4_xperm(*p);
		}
		for (int c = tid; c < C::G * (C::SC / 8); c += C::THREADS) {
			uint4 *p = (uint4 *)(ps + (c / (C::SC / 8)) * 4 * C::SC +
					     16 * q4_pswz(2 * (c % (C::SC / 8))));

			q4_pperm(p[0], p[1], &p[0], &p[1]);
		}
	};
	auto load = [&](int s, uint4 (&w)[CW][RT][2]) {
#pragma unroll
		for (int c = 0; c < CW; c++) {
			int64_t col = min(kbeg + (int64_t)s * C::SC + wk * C::WC + c * Q4_CH + 32 * t,
					  k - 32);

#pragma unroll
			for (int rt = 0; rt < RT; rt++)
#pragma unroll
				for (int h = 0; h < 2; h++)
					w[c][rt][h] = cb_ldw_stream(wrow[rt][h] + col / 2);
		}
	};
	auto compute = [&](int s, const uint4 (&w)[CW][RT][2]) {
		const uint8_t *xs = sm + (s & 1) * C::STAGE;
		const uint8_t *ps = xs + C::XBYTES + gi * 4 * C::SC;

#pragma unroll
		for (int c = 0; c < CW; c++) {
			int cb = wk * C::WC + c * Q4_CH; /* the chunk's first column in the stage */

#pragma unroll
			for (int i = 0; i < 4; i++) {
				int pu = cb / 4 + 8 * t + ((2 * i) ^ (2 * t));
				uint4 s2 = *(const uint4 *)(ps + 16 * pu);
				uint4 mn2 = *(const uint4 *)(ps + 16 * (pu + 1));
				uint4 xp[NT]; /* x's B operands: .x .y of the first product, .z .w of the second */

				if (!C::PERM)
					q4_pperm(s2, mn2, &s2, &mn2);
#pragma unroll
				for (int nt = 0; nt < NT; nt++) {
					xp[nt] = *(const uint4 *)(xs + (8 * nt + g) * C::XROW +
								  16 * (cb / 8 + 4 * t + (i ^ (t >> 1))));
					if (!C::PERM)
						xp[nt] = q4_xperm(xp[nt]);
				}
#pragma unroll
				for (int rt = 0; rt < RT; rt++) {
					const uint32_t *r0 = (const uint32_t *)&w[c][rt][0];
					const uint32_t *r1 = (const uint32_t *)&w[c][rt][1];
					uint32_t w0 = r0[i], w1 = r1[i], v0 = w0 >> 8, v1 = w1 >> 8;
					uint32_t a0[4] = { q4_whi(w0, s2.x, mn2.x), q4_whi(w1, s2.x, mn2.x),
							   q4_whi(v0, s2.y, mn2.y), q4_whi(v1, s2.y, mn2.y) };
					uint32_t a1[4] = { q4_wlo(w0, s2.z, mn2.z), q4_wlo(w1, s2.z, mn2.z),
							   q4_wlo(v0, s2.w, mn2.w), q4_wlo(v1, s2.w, mn2.w) };

#pragma unroll
					for (int nt = 0; nt < NT; nt++) {
						const uint32_t *xb = (const uint32_t *)&xp[nt];

						cb_mma16816(acc[rt][nt], a0, xb);
						cb_mma16816(acc[rt][nt], a1, xb + 2);
					}
				}
			}
		}
	};
	/* Several warps share a stage: its x and (scale, min) permuted once */
	auto prep = [&](int s) {
		if (C::PERM) {
			permute(s);
			__syncthreads();
		}
	};
	uint4 wa[CW][RT][2], wb[CW][RT][2];

	cb_fused_stages(nst, wa, wb, issue, load, prep, compute);
	cb_fused_sums<RT, NT, WK, C::M, C::BR, C::THREADS>(acc, wk, wr * C::R, g, t,
							    [&](int b, int r, float v) {
		int64_t row = m0 + b, col = n0 + r;

		if (row >= m || col >= n)
			return;
		if (part)
			part[((int64_t)blockIdx.z * m + row) * n + col] = v;
		else
			cb_epi_store(ep, out, (ro + row) * ldo + col,
				     cb_epi_apply(ep, ro + row, col, v));
	});
}

extern "C" int cublas_q4_fused_ok(const void *q4, int64_t k, const void *x, int64_t ldx)
{
	return k % 32 == 0 && ((uintptr_t)q4 & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
	       ldx % 8 == 0;
}

/* The variants, by rows of x (NT, RT, WR, WK, CW, blocks per SM for the
 * register budget), the fastest of bench/q4_sweep.cu's candidates at OPT's
 * decode shapes on the H200 (bench/RESULTS.md):
 *   m <= 8:  1 n8 tile,  warps of 32 rows, 2 x 4 warps, 512 columns a stage;
 *   m <= 16: 2 n8 tiles, warps of 64 rows, 2 x 2 warps, 256 columns;
 *   m <= 32: 4 n8 tiles, warps of 32 rows, 4 x 1 warps, 256 columns;
 *   larger:  8 n8 tiles (64 rows of x a block), warps of 32 rows, 4 x 1, 256
 *            (74 KiB of shared memory: where the device cannot give it, m > 32
 *            runs the m <= 32 variant on 32-row slabs of x).
 * Blocks of 64 or 128 weight rows keep x's re-reads from L2 at most twice
 * the weight bytes. */
#define Q4_V0 1, 2, 2, 4, 1, 2
#define Q4_V1 2, 4, 2, 2, 1, 3
#define Q4_V2 4, 2, 4, 1, 2, 3
#define Q4_V3 8, 2, 4, 1, 2, 2
#define Q4_NV 4

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static constexpr cb_fused_shape q4_shape_of()
{
	typedef q4_cfg<NT, RT, WR, WK, CW> C;

	return cb_fused_shape{ C::M, C::BR, C::SC, C::THREADS, MINB, C::SMEM };
}

static const cb_fused_shape q4_shapes[Q4_NV] = {
	q4_shape_of<Q4_V0>(), q4_shape_of<Q4_V1>(), q4_shape_of<Q4_V2>(), q4_shape_of<Q4_V3>(),
};

/* Blocks per SM of each variant (cublas_k_linear_setup asks the occupancy
 * calculator; until then, what the launch bounds ask for). */
static int q4_bps[Q4_NV] = { 2, 3, 3, 2 };
static int q4_v3_ok = 0; /* set by cublas_k_linear_setup where its shared memory fits */

static int cb_q4_var(int64_t m)
{
	return m <= 8 ? 0 : m <= 16 ? 1 : m <= 32 || !q4_v3_ok ? 2 : 3;
}

extern "C" int cublas_q4_fused_split(int64_t m, int64_t n, int64_t k, int sms,
				     size_t max_part_floats)
{
	int v = cb_q4_var(m);

	return cb_fused_split(&q4_shapes[v], q4_bps[v], m, n, k, sms, max_part_floats, 0.5625);
}

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static void cb_q4_launch(cudaStream_t s, int64_t m, int64_t n, int64_t k, const uint16_t *x,
			 int64_t ldx, const void *q4, const cublas_epi &ep, void *out,
			 int64_t ldo, int ksplit, float *part)
{
	typedef q4_cfg<NT, RT, WR, WK, CW> C;
	int64_t stages = (k + C::SC - 1) / C::SC;
	int64_t kper = ((stages + ksplit - 1) / ksplit) * C::SC;
	dim3 grid((unsigned)((n + C::BR - 1) / C::BR), (unsigned)((m + C::M - 1) / C::M),
		  (unsigned)ksplit);

	cb_q4_mma<NT, RT, WR, WK, CW, MINB, false><<<grid, C::THREADS, C::SMEM, s>>>(
		m, n, k, x, ldx, (const uint8_t *)q4, ep, out, ldo, kper, ksplit > 1 ? part : NULL,
		NULL, NULL);
}

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static void cb_q4_grouped_launch(cudaStream_t s, int64_t max_rows, int64_t n, int64_t k,
				 const uint16_t *x, int64_t ldx, const void *const *w,
				 const int32_t *off, int groups, const cublas_epi &ep, void *out,
				 int64_t ldo)
{
	typedef q4_cfg<NT, RT, WR, WK, CW> C;
	dim3 grid((unsigned)((n + C::BR - 1) / C::BR), (unsigned)((max_rows + C::M - 1) / C::M),
		  (unsigned)groups);

	cb_q4_mma<NT, RT, WR, WK, CW, MINB, true><<<grid, C::THREADS, C::SMEM, s>>>(
		max_rows, n, k, x, ldx, NULL, ep, out, ldo, k, NULL, w, off);
}

extern "C" cudaError_t cublas_k_q4_linear(cudaStream_t s, int64_t m, int64_t n, int64_t k,
					  const uint16_t *x, int64_t ldx, const void *q4,
					  const struct cublas_epi *e, void *out, int64_t ldo,
					  int ksplit, float *part)
{
	const cublas_epi ep = *e;
	cudaError_t err;

	switch (cb_q4_var(m)) {
	case 0:
		cb_q4_launch<Q4_V0>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	case 1:
		cb_q4_launch<Q4_V1>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	case 2:
		cb_q4_launch<Q4_V2>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	default:
		cb_q4_launch<Q4_V3>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	}
	err = cudaGetLastError();
	if (err != cudaSuccess || ksplit <= 1)
		return err;
	cb_fused_finish<<<cb_blocks(m * n, CB_THREADS, CB_GRID_CAP), CB_THREADS, 0, s>>>(
		m, n, ksplit, part, ep, out, ldo);
	return cudaGetLastError();
}

extern "C" cudaError_t cublas_k_q4_grouped(cudaStream_t s, int64_t max_rows, int64_t mean_rows,
					   int64_t n, int64_t k, const uint16_t *x, int64_t ldx,
					   const void *const *w, const int32_t *off, int groups,
					   const struct cublas_epi *e, void *out, int64_t ldo)
{
	const cublas_epi ep = *e;

	switch (cb_q4_var(mean_rows)) {
	case 0:
		cb_q4_grouped_launch<Q4_V0>(s, max_rows, n, k, x, ldx, w, off, groups, ep, out, ldo);
		break;
	case 1:
		cb_q4_grouped_launch<Q4_V1>(s, max_rows, n, k, x, ldx, w, off, groups, ep, out, ldo);
		break;
	case 2:
		cb_q4_grouped_launch<Q4_V2>(s, max_rows, n, k, x, ldx, w, off, groups, ep, out, ldo);
		break;
	default:
		cb_q4_grouped_launch<Q4_V3>(s, max_rows, n, k, x, ldx, w, off, groups, ep, out, ldo);
		break;
	}
	return cudaGetLastError();
}

/* Opt into the variant's shared memory and note how many of its blocks an SM holds. */
template <int NT, int RT, int WR, int WK, int CW, int MINB>
static cudaError_t cb_q4_setup(int v)
{
	typedef q4_cfg<NT, RT, WR, WK, CW> C;
	int bps = 0;
	cudaError_t e = cudaFuncSetAttribute(cb_q4_mma<NT, RT, WR, WK, CW, MINB, false>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)C::SMEM);

	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(cb_q4_mma<NT, RT, WR, WK, CW, MINB, true>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM);
	if (e != cudaSuccess)
		return e;
	e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps,
							  cb_q4_mma<NT, RT, WR, WK, CW, MINB, false>,
							  C::THREADS, C::SMEM);
	if (e == cudaSuccess && bps > 0)
		q4_bps[v] = bps;
	return e;
}

extern "C" cudaError_t cublas_k_linear_setup(void)
{
	int dev = 0, optin = 0;
	cudaError_t e;

	if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
	    (e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) !=
		    cudaSuccess)
		return e;
	if ((e = cb_q4_setup<Q4_V0>(0)) != cudaSuccess || (e = cb_q4_setup<Q4_V1>(1)) != cudaSuccess ||
	    (e = cb_q4_setup<Q4_V2>(2)) != cudaSuccess)
		return e;
	q4_v3_ok = optin >= (int)q4_shapes[3].smem;
	return q4_v3_ok ? cb_q4_setup<Q4_V3>(3) : cudaSuccess;
}
