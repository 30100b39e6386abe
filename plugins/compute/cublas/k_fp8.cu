/* plugins/compute/cublas/k_fp8.cu - row-wise E4M3 quantization, the first
 * half of an fp8 product (fp8_prefill; linear.c does the rest with cuBLASLt),
 * and the dequantization of stored fp8 weights (F8_ROWS, fgcore/f8.h) into
 * fp16 tiles for the fp16 path.
 *
 * One block per row: a first pass finds the row's largest magnitude, a second
 * pass reads the row again (from L2: a row is at most a few hundred KiB, and
 * the blocks in flight hold a few MiB) and writes its E4M3 codes, so a row of
 * any length needs no shared memory.  Rows of x are tokens, rows of the
 * weight output channels; both get one fp32 scale per row, which cuBLASLt
 * applies to the fp32 sums as outer-vector scales.
 *
 * The numbers are defined exactly (kernels.h), so that a host test can mirror
 * them bit for bit: the divisions and the multiply are spelled __fdiv_rn and
 * __fmul_rn, which are IEEE round-to-nearest whatever the compiler flags and
 * never contracted into an FMA.
 */
#include <stdint.h>

#include <cuda_fp8.h>

#include <fgcore/f8.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define FP8_THREADS 256

/* v * inv in fp32, then E4M3 to nearest even, saturating at +-448. */
CB_DEV uint32_t cb_e4m3(float v, float inv)
{
	return (uint32_t)__nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3);
}

/* VEC: the row starts are 16-byte aligned, so 8 values are read at a time. */
template <bool VEC>
__global__ void __launch_bounds__(FP8_THREADS)
cb_fp8_rows(int64_t cols, const uint16_t *__restrict__ src, int64_t lds,
	    uint8_t *__restrict__ dst, int64_t ldd, float *__restrict__ scale)
{
	__shared__ float warp_max[FP8_THREADS / 32];
	const uint16_t *row = src + (int64_t)blockIdx.x * lds;
	uint8_t *out = dst + (int64_t)blockIdx.x * ldd;
	int64_t nvec = VEC ? cols / 8 : 0;
	int tid = threadIdx.x;
	float amax = 0.0f, inv;

	/* fmaxf drops a NaN operand, so NaN values never become the maximum */
	for (int64_t v = tid; v < nvec; v += FP8_THREADS) {
		uint4 u = *(const uint4 *)(row + 8 * v);
		uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 f = cb_unpack2(w[i]);

			amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
		}
	}
	for (int64_t j = 8 * nvec + tid; j < cols; j += FP8_THREADS)
		amax = fmaxf(amax, fabsf(cb_h2f(row[j])));
	amax = cb_max_xor(amax, 32);
	if (tid % 32 == 0)
		warp_max[tid / 32] = amax;
	__syncthreads();
	amax = warp_max[0];
	for (int i = 1; i < FP8_THREADS / 32; i++)
		amax = fmaxf(amax, warp_max[i]);
	inv = amax > 0.0f ? __fdiv_rn(CUBLAS_FP8_MAX, amax) : 1.0f;
	if (tid == 0)
		scale[blockIdx.x] = amax > 0.0f ? __fdiv_rn(amax, CUBLAS_FP8_MAX) : 1.0f;

	for (int64_t v = tid; v < nvec; v += FP8_THREADS) {
		uint4 u = *(const uint4 *)(row + 8 * v);
		uint32_t w[4] = { u.x, u.y, u.z, u.w }, q[2] = { 0, 0 };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 f = cb_unpack2(w[i]); /* .x is the lower column */

			q[i / 2] |= (cb_e4m3(f.x, inv) | cb_e4m3(f.y, inv) << 8) << (16 * (i % 2));
		}
		*(uint2 *)(out + 8 * v) = make_uint2(q[0], q[1]);
	}
	for (int64_t j = 8 * nvec + tid; j < cols; j += FP8_THREADS)
		out[j] = (uint8_t)cb_e4m3(cb_h2f(row[j]), inv);
	for (int64_t j = cols + tid; j < ldd; j += FP8_THREADS)
		out[j] = 0; /* the padding to ldd adds zeros to the products' sums */
}

extern "C" cudaError_t cublas_k_fp8_rows(cudaStream_t s, int64_t rows, int64_t cols,
					 const uint16_t *src, int64_t lds, uint8_t *dst,
					 int64_t ldd, float *scale)
{
	if (rows <= 0)
		return cudaSuccess;
	if (((uintptr_t)src & 15) == 0 && lds % 8 == 0)
		cb_fp8_rows<true><<<(unsigned)rows, FP8_THREADS, 0, s>>>(cols, src, lds, dst, ldd,
									 scale);
	else
		cb_fp8_rows<false><<<(unsigned)rows, FP8_THREADS, 0, s>>>(cols, src, lds, dst, ldd,
									  scale);
	return cudaGetLastError();
}

/* ---- stored fp8 weights ---------------------------------------------------------------- */

/* One thread a value: the code's E4M3 value times its row's scale (f8.h's
 * rule, bit for bit), rounded once to fp16. */
__global__ void cb_f8_dequant(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
			      int64_t cols, int64_t r0, int64_t n, uint16_t *__restrict__ dst)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = r0 + i / cols;

		dst[i] = cb_f2h(fg_f8_value(codes[r0 * cols + i], fg_f8_scale_load(scales, (uint64_t)r)));
	}
}

extern "C" cudaError_t cublas_k_f8_dequant(cudaStream_t s, const void *f8, int64_t rows,
					   int64_t cols, int64_t r0, int64_t nr, uint16_t *dst)
{
	const uint8_t *p = (const uint8_t *)f8;

	if (nr <= 0 || cols <= 0)
		return cudaSuccess;
	cb_f8_dequant<<<cb_blocks(nr * cols, FP8_THREADS, 65535LL * 8), FP8_THREADS, 0, s>>>(
		p, p + fg_f8_data_bytes((uint64_t)rows, (uint64_t)cols), cols, r0, nr * cols, dst);
	return cudaGetLastError();
}
