/* plugins/compute/cublas/common.cuh - device helpers shared by the kernels:
 * fp16 bit casts, E4M3 pairs as fp16, tensor-core mma (m16n8k16, split in two k8 on sm_75),
 * ldmatrix, and cp.async with a synchronous fallback before sm_80. */
#ifndef FG_CUBLAS_COMMON_CUH
#define FG_CUBLAS_COMMON_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#define CB_DEV static __device__ __forceinline__

CB_DEV float cb_h2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

CB_DEV uint16_t cb_f2h(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

/* Two floats as a packed half2 (lo in the low 16 bits). */
CB_DEV uint32_t cb_pack2(float lo, float hi)
{
	return (uint32_t)cb_f2h(lo) | ((uint32_t)cb_f2h(hi) << 16);
}

CB_DEV float2 cb_unpack2(uint32_t u)
{
	return make_float2(cb_h2f((uint16_t)(u & 0xffffu)), cb_h2f((uint16_t)(u >> 16)));
}

/* The E4M3 codes in bits 0-15 of w (the lower column in the low byte) as an
 * fp16 pair, exactly (one cvt on sm_89 and later). */
CB_DEV uint32_t cb_f8_pair(uint32_t w)
{
	__half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);

	return (uint32_t)h.x | (uint32_t)h.y << 16;
}

/* One element of either type the kernels read and write: fp16 activations
 * (as bits) or the fp32 residual stream. */
CB_DEV float cb_ld(const uint16_t *p)
{
	return cb_h2f(*p);
}

CB_DEV float cb_ld(const float *p)
{
	return *p;
}

CB_DEV void cb_st(uint16_t *p, float v)
{
	*p = cb_f2h(v);
}

CB_DEV void cb_st(float *p, float v)
{
	*p = v;
}

CB_DEV bool cb_aligned(const void *p, unsigned bytes)
{
	return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* fg_q4_data_bytes (fgcore/q4.h) for device code: where the (scale, min) pairs start. */
__host__ __device__ __forceinline__ uint64_t cb_q4_data_bytes(uint64_t rows, uint64_t cols)
{
	return ((rows * cols + 1) / 2 + 63) & ~(uint64_t)63;
}

/* d += a · b for one m16n8k16 tile: a 4 regs (row-major A), b 2 regs (B as
 * [n][k]), d 4 floats; the register layouts are those of PTX mma.m16n8k16. */
CB_DEV void cb_mma16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
	/* k = 0..7 lives in a[0], a[1], b[0]; k = 8..15 in a[2], a[3], b[1]. */
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(b[0]));
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
}

CB_DEV uint32_t cb_smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8. */
CB_DEV void cb_ldmatrix_x4(uint32_t r[4], const void *row)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(cb_smem_addr(row)));
}

CB_DEV void cb_ldmatrix_x4_trans(uint32_t r[4], const void *row)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(cb_smem_addr(row)));
}

/* (x & MASK) | 0x64006400 in one LOP3: 4-bit codes under MASK become the
 * fp16 halves 1024 + code (or 1024 + 16 code).  Written in C it takes two
 * LOP3s, one immediate each. */
template <uint32_t MASK>
CB_DEV uint32_t cb_f16_bits(uint32_t x)
{
	uint32_t r;

	asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(r) : "r"(x), "n"(MASK), "r"(0x64006400u));
	return r;
}

/* 16 bytes global -> shared; zero-filled when !valid.  Asynchronous on sm_80+. */
CB_DEV void cb_cp16(void *dst, const void *src, bool valid)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
		     :: "r"(cb_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
#else
	*(uint4 *)dst = valid ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
#endif
}

CB_DEV void cb_cp_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/* Wait until at most n committed groups are still in flight. */
template <int N>
CB_DEV void cb_cp_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}

/* Butterfly reductions within groups of `width` lanes (a power of two). */
CB_DEV float cb_max_xor(float v, int width)
{
	for (int o = width / 2; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

CB_DEV float cb_sum_xor(float v, int width)
{
	for (int o = width / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Blocks an SM for __launch_bounds__, chosen on the H200: before compute
 * capability `arch` at most 2, where the older register allocation spilled
 * at the H200's choice of 3 (ptxas -v). */
#if defined(__CUDA_ARCH__)
#define CB_MINB_BEFORE(arch, b) (__CUDA_ARCH__ < (arch) && (b) > 2 ? 2 : (b))
#else
#define CB_MINB_BEFORE(arch, b) (b)
#endif

/* Launch geometry helper: blocks for n items of `per` each, capped for grid x. */
static inline unsigned cb_blocks(int64_t n, int64_t per, int64_t cap)
{
	int64_t b = (n + per - 1) / per;

	if (b < 1)
		b = 1;
	return (unsigned)(b > cap ? cap : b);
}

#endif
