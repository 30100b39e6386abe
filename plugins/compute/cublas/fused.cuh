/* plugins/compute/cublas/fused.cuh - what the fused linear kernels for
 * small m share (k_linear.cu: 4-bit weights; k_f8_linear.cu: fp8): the
 * epilogue, the streaming weight load, the kernel that adds k-split partial
 * sums, and the choice of that split. */
#ifndef FG_CUBLAS_FUSED_CUH
#define FG_CUBLAS_FUSED_CUH

#include <stdint.h>

#include <fgcore/compute.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

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
	} else if (e.act == FG_ACT_GELU_TANH) {
		v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
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

/* 16 bytes of weights, read once: no L1 allocation, and L2 fetches the 256
 * bytes around them (the row's next chunks come next). */
CB_DEV uint4 cb_ldw_stream(const uint8_t *p)
{
	uint4 r;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#else
	r = __ldg((const uint4 *)p);
#endif
	return r;
}

/* The stage loop of a fused kernel, two buffers deep: stage s waits for its
 * shared memory (cp.async), issues stage s + 1's (issue) and its weights
 * into the other register set (load), runs prep(s) (a pass over stage s's
 * shared memory ordered by its own barrier, or nothing), then multiplies s
 * (compute).  At the end the stages' shared memory is free. */
template <typename W, typename I, typename L, typename P, typename C>
CB_DEV void cb_fused_stages(int nst, W &wa, W &wb, I issue, L load, P prep, C compute)
{
	auto step = [&](int s, const W &cur, W &nxt) {
		cb_cp_wait<0>();
		__syncthreads(); /* stage s landed; everyone is done with s - 1's buffer */
		if (s + 1 < nst) {
			issue(s + 1);
			load(s + 1, nxt);
		}
		cb_cp_commit();
		prep(s);
		compute(s, cur);
	};

	if (nst > 0) {
		issue(0);
		load(0, wa);
	}
	cb_cp_commit();
	for (int s = 0; s < nst; s += 2) {
		step(s, wa, wb);
		if (s + 1 < nst)
			step(s + 1, wb, wa);
	}
	cb_cp_wait<0>();
	__syncthreads(); /* the stages' shared memory becomes the reduction buffer */
}

/* The m16n8k16 accumulators of WK warps side by side in columns, summed
 * through shared memory red[wk][row of x][weight row of the block] (rows
 * BR + 4 floats apart: 8 mod 32 words), then done(b, r, v) for every row b
 * of x (of M) and weight row r (of BR) with its sum v.  Accumulator (rt, nt,
 * e) of the warp whose rows start at wrow is weight row wrow + 16 rt + g
 * (+8 for e >= 2), row of x 8 nt + 2t (+1 for odd e). */
template <int RT, int NT, int WK, int M, int BR, int THREADS, typename D>
CB_DEV void cb_fused_sums(const float (&acc)[RT][NT][4], int wk, int wrow, int g, int t, D done)
{
	constexpr int BRP = BR + 4;
	extern __shared__ uint4 cb_smem[];
	float *red = (float *)cb_smem;

#pragma unroll
	for (int rt = 0; rt < RT; rt++)
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				red[(wk * M + 8 * nt + 2 * t + (e & 1)) * BRP + wrow + 16 * rt + g +
				    (e >= 2 ? 8 : 0)] = acc[rt][nt][e];
	__syncthreads();
	for (int idx = threadIdx.x; idx < M * BR; idx += THREADS) {
		int b = idx / BR, r = idx % BR;
		float v = 0.0f;

#pragma unroll
		for (int j = 0; j < WK; j++)
			v += red[(j * M + b) * BRP + r];
		done(b, r, v);
	}
}

/* out = epi(the sum of the ksplit partial sums part[z][m][n]). */
static __global__ void cb_fused_finish(int64_t m, int64_t n, int ksplit, const float *part,
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

/* A fused kernel's variant: rows of x and weight rows a block takes, columns
 * of a stage, threads, blocks an SM (launch bounds), shared memory. */
struct cb_fused_shape {
	int m, br, sc, threads, minb;
	size_t smem;
};

/* The k split that fills the GPU best for variant v (bps of its blocks an
 * SM): whole waves of blocks, each split a whole number of stages, weighed
 * against the partial sums' traffic (16 z m / k of the weight bytes at
 * wbytes a weight; 4-bit's 0.5625 is where the weights stand) and the
 * finishing kernel (about 2 us, against the time of the weight bytes at 3
 * TB/s).  bench/q4_sweep.cu applies it to its candidates. */
static inline int cb_fused_split(const cb_fused_shape *v, int bps, int64_t m, int64_t n,
				 int64_t k, int sms, size_t max_part_floats, double wbytes)
{
	int64_t tiles = ((n + v->br - 1) / v->br) * ((m + v->m - 1) / v->m);
	int64_t stages = (k + v->sc - 1) / v->sc, slots = (int64_t)sms * bps;
	double bytes = (double)n * (double)k * wbytes, fin = 6e6 / (bytes > 1 ? bytes : 1);
	double traffic = 16.0 * 0.5625 / wbytes, best = 0;
	int pick = 1;

	if (slots < 1)
		slots = 1;
	for (int64_t z = 1; z <= 16 && z <= stages; z++) {
		int64_t per = (stages + z - 1) / z, zz = (stages + per - 1) / per;
		int64_t blocks = tiles * zz, waves = (blocks + slots - 1) / slots;
		double eff = (double)blocks / (double)(waves * slots), score;

		if (zz > 1 && (size_t)(zz * m * n) > max_part_floats)
			break;
		score = eff / (zz > 1 ? 1.0 + traffic * (double)(zz * m) / (double)k + fin : 1.0);
		if (score > best * 1.02) { /* a split must pay for itself */
			best = score;
			pick = (int)zz;
		}
	}
	return pick;
}

#endif
