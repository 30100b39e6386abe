/* plugins/compute/cublas/k_linear.cu - kernels around linear: the epilogue
 * for combinations cuBLASLt cannot fuse, 4-bit weight dequantization (the
 * prefill path feeds cuBLASLt from it) and the fused 4-bit GEMM for small m.
 *
 * Every product ends in cb_epi_apply: bias, activation (ReLU or SiLU), the
 * gating multiplier, the residual, in fp32 with one rounding to fp16 (none
 * when out is the fp32 residual stream).
 *
 * The fused kernels read each 4-bit weight once.  A block owns 64 weight rows
 * - exactly one quantization group along dimension 0, so one row of (scale,
 * min) per column serves the whole tile - and up to 64 rows of x.  Weight
 * tiles stream through a multi-stage cp.async pipeline in shared memory;
 * warps turn the nibbles into fp16 mma B fragments in registers (q * scale +
 * min with half2 FMAs) and multiply them with x on the tensor cores (fp32
 * accumulators), each warp taking a slice of the columns so that x is read
 * once; the slices are summed through shared memory at the end.  m <= 16 uses
 * cb_q4_gemv (wide stages, x from L1), larger m cb_q4_fused (x staged too).
 * When the grid would be too small to fill the GPU, k is split across blocks
 * and a second kernel adds the partial sums and applies the epilogue.
 */
#include <stdint.h>

#include <fgcore/compute.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CB_THREADS 256
#define CB_GRID_CAP 65535LL * 8

/* ---- epilogue ---------------------------------------------------------------------- */

/* bias, activation, mul, residual - in this order, in fp32 (rounded once by the caller). */
CB_DEV float cb_epi_apply(const cublas_epi &e, int64_t i, int64_t j, float v)
{
	if (e.bias)
		v += cb_h2f(e.bias[j]);
	if (e.act == FG_ACT_RELU) {
		if (v < 0.0f)
			v = 0.0f;
	} else if (e.act == FG_ACT_SILU) {
		v = v / (1.0f + expf(-v)); /* v large negative: v / inf = -0 */
	}
	if (e.mul)
		v *= cb_h2f(e.mul[i * e.ldm + j]);
	if (e.res)
		v += e.f32 ? ((const float *)e.res)[i * e.ldr + j]
			   : cb_h2f(((const uint16_t *)e.res)[i * e.ldr + j]);
	return v;
}

/* out[at] = v in out's type: the fp32 residual stream or fp16. */
CB_DEV void cb_epi_store(const cublas_epi &e, void *out, int64_t at, float v)
{
	if (e.f32)
		((float *)out)[at] = v;
	else
		((uint16_t *)out)[at] = cb_f2h(v);
}

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

#define Q4_BN 64      /* weight rows per block: one group */
#define Q4_KC 128     /* columns per pipeline stage */
#define Q4_WROW 80    /* shared bytes per weight row: 64 + 16 against bank conflicts */
#define Q4_XROW 160   /* shared halves per x row: 128 + 32 against bank conflicts */
#define Q4_THREADS 128

template <int BM>
struct q4_stage {
	uint8_t w[Q4_BN * Q4_WROW];
	uint32_t prm[Q4_KC]; /* (scale, min) of each column, as in global memory */
	uint16_t x[BM * Q4_XROW];
};

/* The stages, or the final reduction buffer (4 warps x BM x their weight rows), whichever is larger. */
template <int BM, int NST>
static constexpr size_t q4_smem_bytes()
{
	return NST * sizeof(q4_stage<BM>) > (size_t)4 * BM * (BM <= 32 ? 64 : 32) * sizeof(float)
		       ? NST * sizeof(q4_stage<BM>)
		       : (size_t)4 * BM * (BM <= 32 ? 64 : 32) * sizeof(float);
}

/* Two dequantized fp16 weights from a word of 8 codes: the nibbles at bits
 * sh..sh+3 and sh+16..sh+19 become the halves 1024 + q (exactly), minus 1024,
 * times scale plus min (one rounding, in fp16). */
CB_DEV uint32_t q4_deq2(uint32_t w, int sh, uint32_t s2, uint32_t mn2)
{
	uint32_t u = ((w >> sh) & 0x000f000fu) | 0x64006400u;
	__half2 q = __hsub2(*(__half2 *)&u, __float2half2_rn(1024.0f));
	__half2 r = __hfma2(q, *(const __half2 *)&s2, *(const __half2 *)&mn2);

	return *(uint32_t *)&r;
}

/* The k slots of one m16n8k16 product are a permutation of 16 columns; any
 * permutation both operands agree on gives the same sum.  Lane t takes the 8
 * columns c..c+7 (c = 8t in a step of 32): in a word of those 8 codes, byte b
 * holds columns 2b (high nibble) and 2b+1, so (w >> 4) & 0x000f000f yields
 * columns (0, 4), >> 12 (2, 6), >> 0 (1, 5), >> 8 (3, 7).  Half-step 0 puts
 * (0, 4) in slots (2t, 2t+1) and (2, 6) in (2t+8, 2t+9); half-step 1 does the
 * same with (1, 5) and (3, 7).  x and the (scale, min) pairs are permuted to
 * match with byte permutes. */
#define Q4_PAIR_LO 0x5410 /* low halves of two words */
#define Q4_PAIR_HI 0x7632 /* high halves */

/* NST-stage cp.async pipeline, one barrier per stage.  For BM <= 32 each warp
 * takes all 64 weight rows and a quarter of the stage's columns; for BM = 64
 * a warp takes 32 rows and half the columns.  So every x value is read from
 * shared memory once (twice for BM = 64), and the warps' partial sums are
 * added through shared memory at the end. */
template <int BM, int NST>
__global__ void __launch_bounds__(Q4_THREADS)
cb_q4_fused(int64_t m, int64_t n, int64_t k, const uint16_t *__restrict__ x, int64_t ldx,
	    const uint8_t *__restrict__ q4, cublas_epi ep, void *out, int64_t ldo,
	    int64_t kper, float *part)
{
	constexpr int MT = BM / 16;                  /* m16 tiles */
	constexpr int WROWS = BM <= 32 ? 64 : 32;     /* weight rows per warp */
	constexpr int NT = WROWS / 8;                 /* n8 tiles per warp */
	constexpr int WSTEPS = BM <= 32 ? 1 : 2;      /* 32-column steps per warp per stage */
	extern __shared__ uint4 cb_smem[];
	q4_stage<BM> *st = (q4_stage<BM> *)cb_smem;
	const uint8_t *prm = q4 + cb_q4_data_bytes((uint64_t)n, (uint64_t)k);
	int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	int wr = BM <= 32 ? 0 : (warp / 2) * 32, wc = BM <= 32 ? warp * 32 : (warp % 2) * 64;
	int64_t m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * Q4_BN;
	int64_t kbeg = (int64_t)blockIdx.z * kper, kend = min(k, kbeg + kper);
	int nst = kend > kbeg ? (int)((kend - kbeg + Q4_KC - 1) / Q4_KC) : 0;
	int mrows = (int)min((int64_t)BM, m - m0); /* rows of x this block reads */
	const uint8_t *prow = prm + (n0 / FG_Q4_GROUP) * k * 4;
	float acc[MT][NT][4];

#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[i][j][e] = 0.0f;
	/* Rows of x past m are zero in every stage, once (published by the first barrier). */
	for (int s = 0; s < NST; s++)
		for (int c = tid; c < (BM - mrows) * (Q4_XROW / 8); c += Q4_THREADS)
			*(uint4 *)(st[s].x + (mrows + c / (Q4_XROW / 8)) * Q4_XROW + (c % (Q4_XROW / 8)) * 8) =
				make_uint4(0, 0, 0, 0);

	auto issue = [&](int s) {
		q4_stage<BM> *b = &st[s % NST];
		int64_t kc = kbeg + (int64_t)s * Q4_KC;

		/* weights: 64 rows x 4 chunks of 32 columns */
		for (int c = tid; c < Q4_BN * 4; c += Q4_THREADS) {
			int row = c / 4, part = c % 4;
			int64_t col = kc + part * 32;
			bool ok = n0 + row < n && col < kend;
			const uint8_t *src = ok ? q4 + (((n0 + row) * k + col) >> 1) : q4;

			cb_cp16(b->w + row * Q4_WROW + part * 16, src, ok);
		}
		/* (scale, min): 128 columns x 4 bytes */
		if (tid < Q4_KC / 4) {
			int64_t col = kc + tid * 4;
			bool ok = col < kend;

			cb_cp16(b->prm + tid * 4, ok ? prow + col * 4 : prm, ok);
		}
		/* x: mrows rows x 16 chunks of 8 halves */
		for (int c = tid; c < mrows * 16; c += Q4_THREADS) {
			int row = c / 16, part = c % 16;
			int64_t col = kc + part * 8;
			bool ok = col < kend;

			cb_cp16(b->x + row * Q4_XROW + part * 8, ok ? x + (m0 + row) * ldx + col : x,
				ok);
		}
	};

	for (int s = 0; s < NST - 1; s++) {
		if (s < nst)
			issue(s);
		cb_cp_commit(); /* empty groups keep the count uniform */
	}
	for (int s = 0; s < nst; s++) {
		cb_cp_wait<NST - 2>();
		__syncthreads(); /* stage s landed; everyone is done with stage s - 1 */
		if (s + NST - 1 < nst)
			issue(s + NST - 1); /* into the buffer of stage s - 1 */
		cb_cp_commit();

		const q4_stage<BM> *b = &st[s % NST];
#pragma unroll
		for (int ws = 0; ws < WSTEPS; ws++) {
			int cb = wc + ws * 32 + 8 * t; /* this lane's 8 columns */
			uint4 p0 = *(const uint4 *)(b->prm + cb), p1 = *(const uint4 *)(b->prm + cb + 4);
			/* pairs of columns (0, 4), (2, 6), (1, 5), (3, 7) */
			uint32_t s2[4] = { __byte_perm(p0.x, p1.x, Q4_PAIR_LO),
					   __byte_perm(p0.z, p1.z, Q4_PAIR_LO),
					   __byte_perm(p0.y, p1.y, Q4_PAIR_LO),
					   __byte_perm(p0.w, p1.w, Q4_PAIR_LO) };
			uint32_t mn2[4] = { __byte_perm(p0.x, p1.x, Q4_PAIR_HI),
					    __byte_perm(p0.z, p1.z, Q4_PAIR_HI),
					    __byte_perm(p0.y, p1.y, Q4_PAIR_HI),
					    __byte_perm(p0.w, p1.w, Q4_PAIR_HI) };
			uint32_t a[MT][2][4];

#pragma unroll
			for (int i = 0; i < MT; i++) {
				uint4 xa = *(const uint4 *)(b->x + (16 * i + g) * Q4_XROW + cb);
				uint4 xb = *(const uint4 *)(b->x + (16 * i + g + 8) * Q4_XROW + cb);

				a[i][0][0] = __byte_perm(xa.x, xa.z, Q4_PAIR_LO);
				a[i][0][1] = __byte_perm(xb.x, xb.z, Q4_PAIR_LO);
				a[i][0][2] = __byte_perm(xa.y, xa.w, Q4_PAIR_LO);
				a[i][0][3] = __byte_perm(xb.y, xb.w, Q4_PAIR_LO);
				a[i][1][0] = __byte_perm(xa.x, xa.z, Q4_PAIR_HI);
				a[i][1][1] = __byte_perm(xb.x, xb.z, Q4_PAIR_HI);
				a[i][1][2] = __byte_perm(xa.y, xa.w, Q4_PAIR_HI);
				a[i][1][3] = __byte_perm(xb.y, xb.w, Q4_PAIR_HI);
			}
#pragma unroll
			for (int j = 0; j < NT; j++) {
				uint32_t w = *(const uint32_t *)(b->w + (wr + 8 * j + g) * Q4_WROW + cb / 2);
				uint32_t b0[2] = { q4_deq2(w, 4, s2[0], mn2[0]),
						   q4_deq2(w, 12, s2[1], mn2[1]) };
				uint32_t b1[2] = { q4_deq2(w, 0, s2[2], mn2[2]),
						   q4_deq2(w, 8, s2[3], mn2[3]) };

#pragma unroll
				for (int i = 0; i < MT; i++) {
					cb_mma16816(acc[i][j], a[i][0], b0);
					cb_mma16816(acc[i][j], a[i][1], b1);
				}
			}
		}
	}
	cb_cp_wait<0>();
	__syncthreads(); /* the pipeline's shared memory becomes the reduction buffer */

	/* red[warp][BM][WROWS]: accumulator (i, j, e) is row 16i + g (+8 for e >= 2),
	 * weight row wr + 8j + 2t (+1) */
	float *red = (float *)cb_smem;
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				red[(warp * BM + 16 * i + g + (e >= 2 ? 8 : 0)) * WROWS + 8 * j + 2 * t +
				    (e & 1)] = acc[i][j][e];
	__syncthreads();
	for (int idx = tid; idx < BM * Q4_BN; idx += Q4_THREADS) {
		int r = idx / Q4_BN, c = idx % Q4_BN;
		int64_t row = m0 + r, col = n0 + c;
		float v;

		if (row >= m || col >= n)
			continue;
		if (BM <= 32) {
			v = red[(0 * BM + r) * WROWS + c] + red[(1 * BM + r) * WROWS + c] +
			    red[(2 * BM + r) * WROWS + c] + red[(3 * BM + r) * WROWS + c];
		} else {
			int h = c / 32, cc = c % 32;

			v = red[((2 * h) * BM + r) * WROWS + cc] + red[((2 * h + 1) * BM + r) * WROWS + cc];
		}
		if (part) {
			part[((int64_t)blockIdx.z * m + row) * n + col] = v;
			continue;
		}
		cb_epi_store(ep, out, row * ldo + col, cb_epi_apply(ep, row, col, v));
	}
}

/* m <= 16: the same products with wide stages, 256 bytes of every weight row
 * (512 columns) per stage, so that DRAM sees long runs of each row instead of
 * 64-byte pieces; x comes straight from global memory (it is small and stays
 * in L1), which leaves shared memory to three such stages.  Each of 8 warps
 * takes all 64 rows and an eighth of the stage's columns; two blocks (16 warps)
 * share an SM.  (Measured on the H200: 128 or 256 threads, 2 or 3 blocks per
 * SM, 64- or 256-byte row pieces all land at 1.3-1.6 TB/s for m <= 8; the
 * limit is not yet understood - see the report of the GPU issue.) */
#define Q4W_KC 512
#define Q4W_WROW 272  /* 256 + 16 against bank conflicts */
#define Q4W_NST 3
#define Q4W_WARPS 8   /* each takes all 64 rows and an eighth of the columns */
#define Q4W_THREADS (32 * Q4W_WARPS)
#ifndef Q4W_MINB
#define Q4W_MINB 2    /* blocks per SM the register budget must allow */
#endif

struct q4w_stage {
	uint8_t w[Q4_BN * Q4W_WROW];
	uint32_t prm[Q4W_KC];
};

/* The stages, or the final reduction buffer ([warp][16][64] floats). */
static constexpr size_t q4w_smem_bytes()
{
	return Q4W_NST * sizeof(q4w_stage) > (size_t)Q4W_WARPS * 16 * Q4_BN * sizeof(float)
		       ? Q4W_NST * sizeof(q4w_stage)
		       : (size_t)Q4W_WARPS * 16 * Q4_BN * sizeof(float);
}

__global__ void __launch_bounds__(Q4W_THREADS, Q4W_MINB)
cb_q4_gemv(int64_t m, int64_t n, int64_t k, const uint16_t *__restrict__ x, int64_t ldx,
	   const uint8_t *__restrict__ q4, cublas_epi ep, void *out, int64_t ldo,
	   int64_t kper, float *part)
{
	extern __shared__ uint4 cb_smem[];
	q4w_stage *st = (q4w_stage *)cb_smem;
	const uint8_t *prm = q4 + cb_q4_data_bytes((uint64_t)n, (uint64_t)k);
	int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	int64_t n0 = (int64_t)blockIdx.y * Q4_BN;
	int64_t kbeg = (int64_t)blockIdx.z * kper, kend = min(k, kbeg + kper);
	int nst = kend > kbeg ? (int)((kend - kbeg + Q4W_KC - 1) / Q4W_KC) : 0;
	const uint8_t *prow = prm + (n0 / FG_Q4_GROUP) * k * 4;
	const uint16_t *x0 = x + g * ldx, *x1 = x + (g + 8) * ldx;
	bool ok0 = g < m, ok1 = g + 8 < m;
	float acc[Q4_BN / 8][4];

#pragma unroll
	for (int j = 0; j < Q4_BN / 8; j++)
		acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

	auto issue = [&](int s) {
		q4w_stage *b = &st[s % Q4W_NST];
		int64_t kc = kbeg + (int64_t)s * Q4W_KC;

		/* weights: 64 rows x 16 chunks of 32 columns; a warp covers two rows */
		for (int c = tid; c < Q4_BN * 16; c += Q4W_THREADS) {
			int row = c / 16, part = c % 16;
			int64_t col = kc + part * 32;
			bool ok = n0 + row < n && col < kend;

			cb_cp16(b->w + row * Q4W_WROW + part * 16,
				ok ? q4 + (((n0 + row) * k + col) >> 1) : q4, ok);
		}
		/* (scale, min): 512 columns x 4 bytes */
		if (tid < Q4W_KC / 4) {
			int64_t col = kc + tid * 4;
			bool ok = col < kend;

			cb_cp16(b->prm + tid * 4, ok ? prow + col * 4 : prm, ok);
		}
	};

	for (int s = 0; s < Q4W_NST - 1; s++) {
		if (s < nst)
			issue(s);
		cb_cp_commit();
	}
	for (int s = 0; s < nst; s++) {
		int64_t kc = kbeg + (int64_t)s * Q4W_KC;

		cb_cp_wait<Q4W_NST - 2>();
		__syncthreads();
		if (s + Q4W_NST - 1 < nst)
			issue(s + Q4W_NST - 1);
		cb_cp_commit();

		const q4w_stage *b = &st[s % Q4W_NST];
#pragma unroll
		for (int ws = 0; ws < Q4W_KC / (32 * Q4W_WARPS); ws++) {
			int cb = warp * (Q4W_KC / Q4W_WARPS) + ws * 32 + 8 * t; /* this lane's 8 columns */
			bool in = kc + cb < kend; /* k % 32 == 0: all 8 or none */
			uint4 p0 = *(const uint4 *)(b->prm + cb), p1 = *(const uint4 *)(b->prm + cb + 4);
			uint4 xa = ok0 && in ? __ldg((const uint4 *)(x0 + kc + cb)) : make_uint4(0, 0, 0, 0);
			uint4 xb = ok1 && in ? __ldg((const uint4 *)(x1 + kc + cb)) : make_uint4(0, 0, 0, 0);
			uint32_t s2[4] = { __byte_perm(p0.x, p1.x, Q4_PAIR_LO),
					   __byte_perm(p0.z, p1.z, Q4_PAIR_LO),
					   __byte_perm(p0.y, p1.y, Q4_PAIR_LO),
					   __byte_perm(p0.w, p1.w, Q4_PAIR_LO) };
			uint32_t mn2[4] = { __byte_perm(p0.x, p1.x, Q4_PAIR_HI),
					    __byte_perm(p0.z, p1.z, Q4_PAIR_HI),
					    __byte_perm(p0.y, p1.y, Q4_PAIR_HI),
					    __byte_perm(p0.w, p1.w, Q4_PAIR_HI) };
			uint32_t a0[4] = { __byte_perm(xa.x, xa.z, Q4_PAIR_LO),
					   __byte_perm(xb.x, xb.z, Q4_PAIR_LO),
					   __byte_perm(xa.y, xa.w, Q4_PAIR_LO),
					   __byte_perm(xb.y, xb.w, Q4_PAIR_LO) };
			uint32_t a1[4] = { __byte_perm(xa.x, xa.z, Q4_PAIR_HI),
					   __byte_perm(xb.x, xb.z, Q4_PAIR_HI),
					   __byte_perm(xa.y, xa.w, Q4_PAIR_HI),
					   __byte_perm(xb.y, xb.w, Q4_PAIR_HI) };

#pragma unroll
			for (int j = 0; j < Q4_BN / 8; j++) {
				uint32_t w = *(const uint32_t *)(b->w + (8 * j + g) * Q4W_WROW + cb / 2);
				uint32_t b0[2] = { q4_deq2(w, 4, s2[0], mn2[0]),
						   q4_deq2(w, 12, s2[1], mn2[1]) };
				uint32_t b1[2] = { q4_deq2(w, 0, s2[2], mn2[2]),
						   q4_deq2(w, 8, s2[3], mn2[3]) };

				cb_mma16816(acc[j], a0, b0);
				cb_mma16816(acc[j], a1, b1);
			}
		}
	}
	cb_cp_wait<0>();
	__syncthreads();

	float *red = (float *)cb_smem; /* [warp][16][64] */
#pragma unroll
	for (int j = 0; j < Q4_BN / 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			red[(warp * 16 + g + (e >= 2 ? 8 : 0)) * Q4_BN + 8 * j + 2 * t + (e & 1)] =
				acc[j][e];
	__syncthreads();
	for (int idx = tid; idx < 16 * Q4_BN; idx += Q4W_THREADS) {
		int r = idx / Q4_BN, c = idx % Q4_BN;
		int64_t col = n0 + c;
		float v;

		if (r >= m || col >= n)
			continue;
		v = 0.0f;
#pragma unroll
		for (int w = 0; w < Q4W_WARPS; w++)
			v += red[(w * 16 + r) * Q4_BN + c];
		if (part) {
			part[((int64_t)blockIdx.z * m + r) * n + col] = v;
			continue;
		}
		cb_epi_store(ep, out, r * ldo + col, cb_epi_apply(ep, r, col, v));
	}
}

__global__ void cb_q4_finish(int64_t m, int64_t n, int ksplit, const float *part,
			     cublas_epi ep, void *out, int64_t ldo)
{
	int64_t total = m * n;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = e / n, j = e - i * n;
		float v = 0.0f;

		for (int z = 0; z < ksplit; z++)
			v += part[z * total + e];
		cb_epi_store(ep, out, i * ldo + j, cb_epi_apply(ep, i, j, v));
	}
}

extern "C" int cublas_q4_fused_ok(const void *q4, int64_t k, const void *x, int64_t ldx)
{
	return k % 32 == 0 && ((uintptr_t)q4 & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
	       ldx % 8 == 0;
}

static int cb_q4_bm(int64_t m)
{
	return m <= 16 ? 16 : m <= 32 ? 32 : 64;
}

/* BM = 64 takes 3 stages (78 KiB of shared memory) where the device allows it
 * (sm_80, sm_86, sm_90), 2 on sm_75.  Set by cublas_k_linear_setup. */
static int cb_q4_big_smem = 0;

#define Q4_STAGES 4 /* for BM 16 and 32; minimum stages per split, too */

extern "C" int cublas_q4_fused_split(int64_t m, int64_t n, int64_t k, int sms,
				     size_t max_part_floats)
{
	int64_t bm = cb_q4_bm(m);
	int64_t blocks = ((m + bm - 1) / bm) * ((n + Q4_BN - 1) / Q4_BN);
	int64_t stages = (k + Q4_KC - 1) / Q4_KC, want = 4 * (int64_t)sms, ks, per;

	if (m <= 16) {
		/* cb_q4_gemv: three blocks of 57 KiB fit an SM; one wave, any stage count */
		stages = (k + Q4W_KC - 1) / Q4W_KC;
		want = 3 * (int64_t)sms;
		if (blocks >= want || stages < 2)
			return 1;
		ks = (want + blocks - 1) / blocks;
		if (ks > 16)
			ks = 16;
		if (ks > stages)
			ks = stages;
	} else {
		if (blocks >= want || stages < 2 * Q4_STAGES)
			return 1;
		ks = (want + blocks - 1) / blocks;
		if (ks > 16)
			ks = 16;
		if (ks > stages / Q4_STAGES)
			ks = stages / Q4_STAGES;
	}
	while (ks > 1 && (size_t)(ks * m * n) > max_part_floats)
		ks--;
	if (ks <= 1)
		return 1;
	/* No empty splits: every split gets the same whole number of stages. */
	per = (stages + ks - 1) / ks;
	return (int)((stages + per - 1) / per);
}

template <int BM, int NST>
static void cb_q4_launch(cudaStream_t s, int64_t m, int64_t n, int64_t k, const uint16_t *x,
			 int64_t ldx, const void *q4, const cublas_epi &ep, void *out,
			 int64_t ldo, int ksplit, float *part)
{
	int64_t stages = (k + Q4_KC - 1) / Q4_KC;
	int64_t kper = ((stages + ksplit - 1) / ksplit) * Q4_KC;
	dim3 grid((unsigned)((m + BM - 1) / BM), (unsigned)((n + Q4_BN - 1) / Q4_BN),
		  (unsigned)ksplit);

	cb_q4_fused<BM, NST><<<grid, Q4_THREADS, q4_smem_bytes<BM, NST>(), s>>>(
		m, n, k, x, ldx, (const uint8_t *)q4, ep, out, ldo, kper, ksplit > 1 ? part : NULL);
}

extern "C" cudaError_t cublas_k_q4_linear(cudaStream_t s, int64_t m, int64_t n, int64_t k,
					  const uint16_t *x, int64_t ldx, const void *q4,
					  const struct cublas_epi *e, void *out, int64_t ldo,
					  int ksplit, float *part)
{
	const cublas_epi ep = *e;
	cudaError_t err;

	switch (cb_q4_bm(m)) {
	case 16: {
		int64_t stages = (k + Q4W_KC - 1) / Q4W_KC;
		int64_t kper = ((stages + ksplit - 1) / ksplit) * Q4W_KC;
		dim3 grid(1, (unsigned)((n + Q4_BN - 1) / Q4_BN), (unsigned)ksplit);

		cb_q4_gemv<<<grid, Q4W_THREADS, q4w_smem_bytes(), s>>>(
			m, n, k, x, ldx, (const uint8_t *)q4, ep, out, ldo, kper,
			ksplit > 1 ? part : NULL);
		break;
	}
	case 32:
		cb_q4_launch<32, Q4_STAGES>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	default:
		if (cb_q4_big_smem)
			cb_q4_launch<64, 3>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		else
			cb_q4_launch<64, 2>(s, m, n, k, x, ldx, q4, ep, out, ldo, ksplit, part);
		break;
	}
	err = cudaGetLastError();
	if (err != cudaSuccess || ksplit <= 1)
		return err;
	cb_q4_finish<<<cb_blocks(m * n, CB_THREADS, CB_GRID_CAP), CB_THREADS, 0, s>>>(
		m, n, ksplit, part, ep, out, ldo);
	return cudaGetLastError();
}

template <int BM, int NST>
static cudaError_t cb_q4_setup(void)
{
	return cudaFuncSetAttribute(cb_q4_fused<BM, NST>,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)q4_smem_bytes<BM, NST>());
}

extern "C" cudaError_t cublas_k_linear_setup(void)
{
	int dev = 0, optin = 0;
	cudaError_t e;

	if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
	    (e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) !=
		    cudaSuccess)
		return e;
	cb_q4_big_smem = optin >= (int)q4_smem_bytes<64, 3>();
	if ((e = cudaFuncSetAttribute(cb_q4_gemv, cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)q4w_smem_bytes())) != cudaSuccess ||
	    (e = cb_q4_setup<32, Q4_STAGES>()) != cudaSuccess)
		return e;
	return cb_q4_big_smem ? cb_q4_setup<64, 3>() : cb_q4_setup<64, 2>();
}
