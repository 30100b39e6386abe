/* plugins/compute/cublas/k_f8_linear.cu - the fused linear for fp8 weights
 * (F8_ROWS, fgcore/f8.h) and small m: out = epi(x · Wᵀ), reading each weight
 * byte once.
 *
 * A weight is its E4M3 code times its row's scale, so a row's sum is
 * scale · Σ x_j e_j: the codes become fp16 exactly (every E4M3 value is an
 * fp16 one; one cvt a pair), the tensor cores multiply them by x (fp16) in
 * fp32, and the scale multiplies the row's fp32 sum once, before the
 * epilogue.  No weight is rounded on the way.
 *
 * The codes are the A operand of m16n8k16 (16 weight rows x 16 columns), x
 * the B operand (8 rows of x), so m <= 8 pads nothing.  A warp owns R = 16 RT
 * weight rows and, per stage, CW chunks of 64 columns; lane (g, t) loads
 * straight into registers 16 bytes (columns 16 t .. 16 t + 15 of the chunk)
 * of rows g and g + 8 of each m16 tile, one stage ahead.  Product i of a
 * chunk puts the lane's columns 16 t + 4 i .. + 3 in its k slots (2 t,
 * 2 t + 1, 2 t + 8, 2 t + 9): a permutation both operands agree on, so x
 * needs none.  x goes through shared memory (cp.async, two buffers, one
 * barrier a stage), shared by the WR warps side by side in rows; WK warps
 * side by side in columns split the stage and are summed through shared
 * memory at the end; k is split across blocks as for the 4-bit kernel
 * (fused.cuh).
 */
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <fgcore/f8.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/fused.cuh"
#include "plugins/compute/cublas/kernels.h"

#define F8_CH 64 /* columns of a warp's chunk: 16 bytes per lane and row */
#define F8_THREADS 256
#define F8_GRID_CAP 65535LL * 8

template <int NT, int RT, int WR, int WK, int CW>
struct f8_cfg {
	static constexpr int M = 8 * NT;        /* rows of x in a tile */
	static constexpr int R = 16 * RT;       /* weight rows per warp */
	static constexpr int BR = R * WR;       /* weight rows per block */
	static constexpr int WC = F8_CH * CW;   /* columns per warp and stage */
	static constexpr int SC = WC * WK;      /* columns per stage */
	static constexpr int THREADS = 32 * WR * WK;
	/* bytes per row of x: 16 mod 128, so that the 8 lanes of a quarter warp
	 * (rows g, g + 1; t = 0..3, 32 bytes apart) read distinct banks */
	static constexpr int XROW = 2 * SC + 16;
	static constexpr int STAGE = M * XROW;
	static constexpr size_t RED = (size_t)WK * M * (BR + 4) * 4; /* cb_fused_sums' */
	static constexpr size_t SMEM = 2 * (size_t)STAGE > RED ? 2 * (size_t)STAGE : RED;
	static_assert(SC % 64 == 0, "XROW's bank spread needs whole 64-column chunks");
};

template <int NT, int RT, int WR, int WK, int CW, int MINB>
__global__ void __launch_bounds__(32 * WR * WK, CB_MINB_BEFORE(900, MINB))
cb_f8_mma(int64_t m, int64_t n, int64_t k, const uint16_t *__restrict__ x, int64_t ldx,
	  const uint8_t *__restrict__ f8, cublas_epi ep, void *out, int64_t ldo, int64_t kper,
	  float *part)
{
	typedef f8_cfg<NT, RT, WR, WK, CW> C;
	extern __shared__ uint4 cb_smem[];
	uint8_t *sm = (uint8_t *)cb_smem;
	/* (the scales start 64-byte aligned after the codes; fp32, little-endian as the device) */
	const float *scales = (const float *)(f8 + fg_f8_data_bytes((uint64_t)n, (uint64_t)k));
	int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	int wr = warp % WR, wk = warp / WR;
	int64_t n0 = (int64_t)blockIdx.x * C::BR, m0 = (int64_t)blockIdx.y * C::M;
	int64_t kbeg = (int64_t)blockIdx.z * kper, kend = min(k, kbeg + kper);
	int nst = kend > kbeg ? (int)((kend - kbeg + C::SC - 1) / C::SC) : 0;
	int mrows = (int)min((int64_t)C::M, m - m0);
	const uint8_t *wrow[RT][2];
	float acc[RT][NT][4];

	/* Rows past n read row n - 1 (their sums are never stored); columns past
	 * the split's end read the row's own codes again, but x is zero there. */
#pragma unroll
	for (int rt = 0; rt < RT; rt++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			wrow[rt][h] = f8 + min(n0 + wr * C::R + 16 * rt + 8 * h + g, n - 1) * k;
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

	/* x of stage s: mrows rows x SC / 8 units of 8 halves */
	auto issue = [&](int s) {
		uint8_t *xs = sm + (s & 1) * C::STAGE;
		int64_t kc = kbeg + (int64_t)s * C::SC;

		for (int c = tid; c < mrows * (C::SC / 8); c += C::THREADS) {
			int row = c / (C::SC / 8), u = c % (C::SC / 8);
			int64_t col = kc + 8 * u;
			bool ok = col < kend;

			cb_cp16(xs + row * C::XROW + 16 * u, ok ? x + (m0 + row) * ldx + col : x, ok);
		}
	};
	auto load = [&](int s, uint4 (&w)[CW][RT][2]) {
#pragma unroll
		for (int c = 0; c < CW; c++) {
			int64_t col = min(kbeg + (int64_t)s * C::SC + wk * C::WC + c * F8_CH + 16 * t,
					  k - 16);

#pragma unroll
			for (int rt = 0; rt < RT; rt++)
#pragma unroll
				for (int h = 0; h < 2; h++)
					w[c][rt][h] = cb_ldw_stream(wrow[rt][h] + col);
		}
	};
	auto compute = [&](int s, const uint4 (&w)[CW][RT][2]) {
		const uint8_t *xs = sm + (s & 1) * C::STAGE;

#pragma unroll
		for (int c = 0; c < CW; c++) {
			int cb = wk * C::WC + c * F8_CH + 16 * t; /* the lane's first column in the stage */
			uint4 xv[NT][2]; /* x's columns cb .. cb + 15 of each n8 tile's row g */

#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				const uint8_t *xr = xs + (8 * nt + g) * C::XROW + 2 * cb;

				xv[nt][0] = *(const uint4 *)xr;
				xv[nt][1] = *(const uint4 *)(xr + 16);
			}
#pragma unroll
			for (int rt = 0; rt < RT; rt++) {
				const uint32_t *r0 = (const uint32_t *)&w[c][rt][0];
				const uint32_t *r1 = (const uint32_t *)&w[c][rt][1];

#pragma unroll
				for (int i = 0; i < 4; i++) {
					/* rows g and g + 8, columns 4 i + (0, 1) then 4 i + (2, 3) */
					uint32_t a[4] = { cb_f8_pair(r0[i]), cb_f8_pair(r1[i]),
							  cb_f8_pair(r0[i] >> 16), cb_f8_pair(r1[i] >> 16) };

#pragma unroll
					for (int nt = 0; nt < NT; nt++)
						cb_mma16816(acc[rt][nt], a,
							    (const uint32_t *)&xv[nt][i / 2] + 2 * (i % 2));
				}
			}
		}
	};
	uint4 wa[CW][RT][2], wb[CW][RT][2];

	cb_fused_stages(nst, wa, wb, issue, load, [](int) {}, compute);
	cb_fused_sums<RT, NT, WK, C::M, C::BR, C::THREADS>(acc, wk, wr * C::R, g, t,
							    [&](int b, int r, float v) {
		int64_t row = m0 + b, col = n0 + r;

		if (row >= m || col >= n)
			return;
		v *= scales[col];
		if (part)
			part[((int64_t)blockIdx.z * m + row) * n + col] = v;
		else
			cb_epi_store(ep, out, row * ldo + col, cb_epi_apply(ep, row, col, v));
	});
}

extern "C" int cublas_f8_fused_ok(const void *f8, int64_t k, const void *x, int64_t ldx)
{
	return k % 16 == 0 && ((uintptr_t)f8 & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
	       ldx % 8 == 0;
}

/* The variants, by rows of x (NT, RT, WR, WK, CW, blocks per SM for the
 * register budget), after the 4-bit kernel's (the fp8 codes are twice the
 * bytes a column, so a chunk is 64 columns, not 128):
 *   m <= 8:  1 n8 tile,  warps of 32 rows, 2 x 4 warps, 512 columns a stage;
 *   m <= 16: 2 n8 tiles, the same;
 *   m <= 32: 4 n8 tiles, warps of 32 rows, 4 x 1 warps, 128 columns;
 *   larger:  8 n8 tiles (64 rows of x a block), 4 x 1 warps, 64 columns.
 * Not yet swept on a GPU (bench/q4_sweep.cu did the 4-bit kernel's). */
#define F8_V0 1, 2, 2, 4, 2, 2
#define F8_V1 2, 2, 2, 4, 2, 2
#define F8_V2 4, 2, 4, 1, 2, 2
#define F8_V3 8, 2, 4, 1, 1, 2
#define F8_NV 4

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static constexpr cb_fused_shape f8_shape_of()
{
	typedef f8_cfg<NT, RT, WR, WK, CW> C;

	return cb_fused_shape{ C::M, C::BR, C::SC, C::THREADS, MINB, C::SMEM };
}

static const cb_fused_shape f8_shapes[F8_NV] = {
	f8_shape_of<F8_V0>(), f8_shape_of<F8_V1>(), f8_shape_of<F8_V2>(), f8_shape_of<F8_V3>(),
};
static int f8_bps[F8_NV] = { 2, 2, 2, 2 }; /* cublas_k_f8_linear_setup asks the occupancy calculator */

static int cb_f8_var(int64_t m)
{
	return m <= 8 ? 0 : m <= 16 ? 1 : m <= 32 ? 2 : 3;
}

extern "C" int cublas_f8_fused_split(int64_t m, int64_t n, int64_t k, int sms,
				     size_t max_part_floats)
{
	int v = cb_f8_var(m);

	return cb_fused_split(&f8_shapes[v], f8_bps[v], m, n, k, sms, max_part_floats, 1.0);
}

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static void cb_f8_launch(cudaStream_t s, int64_t m, int64_t n, int64_t k, const uint16_t *x,
			 int64_t ldx, const void *f8, const cublas_epi &ep, void *out,
			 int64_t ldo, int ksplit, float *part)
{
	typedef f8_cfg<NT, RT, WR, WK, CW> C;
	int64_t stages = (k + C::SC - 1) / C::SC;
	int64_t kper = ((stages + ksplit - 1) / ksplit) * C::SC;
	dim3 grid((unsigned)((n + C::BR - 1) / C::BR), (unsigned)((m + C::M - 1) / C::M),
		  (unsigned)ksplit);

	cb_f8_mma<NT, RT, WR, WK, CW, MINB><<<grid, C::THREADS, C::SMEM, s>>>(
		m, n, k, x, ldx, (const uint8_t *)f8, ep, out, ldo, kper, ksplit > 1 ? part : NULL);
}

extern "C" cudaError_t cublas_k_f8_linear(cudaStream_t s, int64_t m, int64_t n, int64_t k,
					  const uint16_t *x, int64_t ldx, const void *f8,
					  const struct cublas_epi *e, void *out, int64_t ldo,
					  int ksplit, float *part)
{
	const cublas_epi ep = *e;
	cudaError_t err;

	switch (cb_f8_var(m)) {
	case 0:
		cb_f8_launch<F8_V0>(s, m, n, k, x, ldx, f8, ep, out, ldo, ksplit, part);
		break;
	case 1:
		cb_f8_launch<F8_V1>(s, m, n, k, x, ldx, f8, ep, out, ldo, ksplit, part);
		break;
	case 2:
		cb_f8_launch<F8_V2>(s, m, n, k, x, ldx, f8, ep, out, ldo, ksplit, part);
		break;
	default:
		cb_f8_launch<F8_V3>(s, m, n, k, x, ldx, f8, ep, out, ldo, ksplit, part);
		break;
	}
	err = cudaGetLastError();
	if (err != cudaSuccess || ksplit <= 1)
		return err;
	cb_fused_finish<<<cb_blocks(m * n, F8_THREADS, F8_GRID_CAP), F8_THREADS, 0, s>>>(
		m, n, ksplit, part, ep, out, ldo);
	return cudaGetLastError();
}

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static cudaError_t cb_f8_setup(int v)
{
	typedef f8_cfg<NT, RT, WR, WK, CW> C;
	int bps = 0;
	cudaError_t e = cudaFuncSetAttribute(cb_f8_mma<NT, RT, WR, WK, CW, MINB>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)C::SMEM);

	if (e == cudaSuccess)
		e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, cb_f8_mma<NT, RT, WR, WK, CW, MINB>,
								  C::THREADS, C::SMEM);
	if (e == cudaSuccess && bps > 0)
		f8_bps[v] = bps;
	return e;
}

extern "C" cudaError_t cublas_k_f8_linear_setup(void)
{
	cudaError_t e;

	if ((e = cb_f8_setup<F8_V0>(0)) != cudaSuccess || (e = cb_f8_setup<F8_V1>(1)) != cudaSuccess ||
	    (e = cb_f8_setup<F8_V2>(2)) != cudaSuccess)
		return e;
	return cb_f8_setup<F8_V3>(3);
}
