/* plugins/compute/cublas/k_logprob.cu - log-probabilities of rows of fp16
 * logits, as fgcore/logprob.h defines them, so that scoring copies a few
 * numbers per position to the host instead of a row of the vocabulary.
 *
 * One block per row.  Pass 1 finds the largest logit (NaN left out), counts
 * the +inf and finds the smallest sampling key (the top id); pass 2 sums
 * exp(l - max) in fp32; each further top id is one more pass, for the
 * smallest key above the previous one (k is at most 20, and a row of fp16
 * logits stays in L2 between passes). */
#include <math.h>
#include <stdint.h>

#include <fgcore/logprob.h>
#include <fgcore/sampling.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CL_THREADS 512
#define CL_WARPS (CL_THREADS / 32)

CB_DEV float cl_warp_max(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

CB_DEV float cl_warp_sum(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

CB_DEV uint64_t cl_warp_min(uint64_t v)
{
	for (int o = 16; o > 0; o /= 2) {
		uint64_t t = __shfl_xor_sync(0xffffffffu, v, o);
		v = t < v ? t : v;
	}
	return v;
}

/* The block's reductions: every thread gets the result. */
struct cl_smem {
	float f[CL_WARPS];
	uint64_t u[CL_WARPS];
};

CB_DEV float cl_block_max(struct cl_smem *s, float v)
{
	v = cl_warp_max(v);
	__syncthreads(); /* s is free: the previous reduction was read */
	if (threadIdx.x % 32 == 0)
		s->f[threadIdx.x / 32] = v;
	__syncthreads();
	v = s->f[0];
	for (int w = 1; w < CL_WARPS; w++)
		v = fmaxf(v, s->f[w]);
	return v;
}

CB_DEV float cl_block_sum(struct cl_smem *s, float v)
{
	v = cl_warp_sum(v);
	__syncthreads();
	if (threadIdx.x % 32 == 0)
		s->f[threadIdx.x / 32] = v;
	__syncthreads();
	v = 0;
	for (int w = 0; w < CL_WARPS; w++) /* the same order in every thread */
		v += s->f[w];
	return v;
}

CB_DEV uint64_t cl_block_min(struct cl_smem *s, uint64_t v)
{
	v = cl_warp_min(v);
	__syncthreads();
	if (threadIdx.x % 32 == 0)
		s->u[threadIdx.x / 32] = v;
	__syncthreads();
	v = s->u[0];
	for (int w = 1; w < CL_WARPS; w++)
		v = s->u[w] < v ? s->u[w] : v;
	return v;
}

/* The smallest key of the row above `above` (~0: none left). */
CB_DEV uint64_t cl_next_key(struct cl_smem *s, const uint16_t *row, int64_t cols, uint64_t above,
			    int first)
{
	uint64_t best = ~(uint64_t)0;

	for (int64_t j = threadIdx.x; j < cols; j += CL_THREADS) {
		uint64_t key = fg_sample_key(cb_h2f(row[j]), (int32_t)j);
		if ((first || key > above) && key < best)
			best = key;
	}
	return cl_block_min(s, best);
}

__global__ void __launch_bounds__(CL_THREADS)
cl_logprob_kernel(const uint16_t *x, int64_t cols, int64_t ld, const int32_t *target, int k,
		  float *lp, int32_t *top_id, float *top_lp)
{
	__shared__ struct cl_smem s;
	const int64_t r = blockIdx.x;
	const uint16_t *row = x + r * ld;
	float m = -INFINITY, z = 0;
	int ninf = 0;

	if (target[r] < 0)
		return; /* the whole block: target[r] is the same for every thread */
	for (int64_t j = threadIdx.x; j < cols; j += CL_THREADS) {
		float v = cb_h2f(row[j]);
		m = fmaxf(m, v); /* fmaxf leaves NaN out */
		ninf += v == INFINITY;
	}
	m = cl_block_max(&s, m);
	double lse;
	if (m == INFINITY) {
		lse = log((double)cl_block_sum(&s, (float)ninf)); /* exact below 2^24 */
	} else if (m == -INFINITY) {
		lse = NAN; /* no distribution */
	} else {
		for (int64_t j = threadIdx.x; j < cols; j += CL_THREADS) {
			float v = cb_h2f(row[j]);
			if (v == v)
				z += expf(v - m);
		}
		lse = (double)m + log((double)cl_block_sum(&s, z));
	}
	struct fg_logprob_norm norm = { m, lse };
	if (threadIdx.x == 0)
		lp[r] = fg_logprob_value(norm, cb_h2f(row[target[r]]));
	/* Past the vocabulary's end no key is above the last: ~0 (no real key
	 * is: a NaN's key has value bits 0xff800000), id -1. */
	uint64_t key = 0;
	for (int i = 0; i < k; i++) {
		key = cl_next_key(&s, row, cols, key, i == 0);
		if (threadIdx.x == 0) {
			int found = key != ~(uint64_t)0;
			int32_t id = found ? (int32_t)(uint32_t)key : -1;
			top_id[r * k + i] = id;
			top_lp[r * k + i] = found ? fg_logprob_value(norm, cb_h2f(row[id])) : -INFINITY;
		}
	}
}

extern "C" cudaError_t cublas_k_logprob(cudaStream_t s, int64_t rows, int64_t cols,
					const uint16_t *x, int64_t ld, const int32_t *target, int k,
					float *lp, int32_t *top_id, float *top_lp)
{
	if (rows > 0)
		cl_logprob_kernel<<<(unsigned)rows, CL_THREADS, 0, s>>>(x, cols, ld, target, k, lp,
									top_id, top_lp);
	return cudaGetLastError();
}
