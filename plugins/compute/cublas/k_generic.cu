/* plugins/compute/cublas/k_generic.cu - the generic tier's kernels (compute
 * ABI 1.10 and 1.12's softcap): element-wise add and softcap, the router's
 * top k, row gather and the ordered scatter-add.
 *
 * Everything is computed in fp32 and rounded once to the output's type.
 * Rows are either fp16 (bits) or fp32 (the residual stream); the element
 * types are template parameters, so each kernel is one loop.
 */
#include <math.h>
#include <stdint.h>

#include <fgcore/compute.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CG_THREADS 256
#define CG_GRID_CAP 65535u

static unsigned cg_blocks(int64_t n)
{
	int64_t b = (n + CG_THREADS - 1) / CG_THREADS;

	return b < 1 ? 1u : b > (int64_t)CG_GRID_CAP * 8 ? CG_GRID_CAP * 8 : (unsigned)b;
}

/* ---- add, softcap ---------------------------------------------------------------- */

template <typename TX, typename TY>
__global__ void cg_add_kernel(int64_t rows, int64_t cols, const TX *x, int64_t ldx, const TY *y,
			      int64_t ldy, float alpha, float beta, TX *out, int64_t ldo)
{
	int64_t n = rows * cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = e / cols, j = e % cols;
		float v = alpha * cb_ld(x + r * ldx + j);

		if (y)
			v += beta * cb_ld(y + r * ldy + j);
		cb_st(out + r * ldo + j, v);
	}
}

template <typename TX>
static void cg_add_y(cudaStream_t s, const struct cublas_add *a)
{
	unsigned blocks = cg_blocks(a->rows * a->cols);

	if (a->y_f32)
		cg_add_kernel<TX, float><<<blocks, CG_THREADS, 0, s>>>(
			a->rows, a->cols, (const TX *)a->x, a->ldx, (const float *)a->y, a->ldy,
			a->alpha, a->beta, (TX *)a->out, a->ldo);
	else
		cg_add_kernel<TX, uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			a->rows, a->cols, (const TX *)a->x, a->ldx, (const uint16_t *)a->y, a->ldy,
			a->alpha, a->beta, (TX *)a->out, a->ldo);
}

extern "C" cudaError_t cublas_k_add(cudaStream_t s, const struct cublas_add *a)
{
	if (a->x_f32)
		cg_add_y<float>(s, a);
	else
		cg_add_y<uint16_t>(s, a);
	return cudaGetLastError();
}

template <typename T>
__global__ void cg_softcap_kernel(int64_t rows, int64_t cols, const T *x, int64_t ldx, float cap,
				  T *out, int64_t ldo)
{
	int64_t n = rows * cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = e / cols, j = e % cols;

		cb_st(out + r * ldo + j, cap * tanhf(cb_ld(x + r * ldx + j) / cap));
	}
}

extern "C" cudaError_t cublas_k_softcap(cudaStream_t s, int64_t rows, int64_t cols, const void *x,
					int64_t ldx, int f32, float cap, void *out, int64_t ldo)
{
	unsigned blocks = cg_blocks(rows * cols);

	if (f32)
		cg_softcap_kernel<float><<<blocks, CG_THREADS, 0, s>>>(
			rows, cols, (const float *)x, ldx, cap, (float *)out, ldo);
	else
		cg_softcap_kernel<uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			rows, cols, (const uint16_t *)x, ldx, cap, (uint16_t *)out, ldo);
	return cudaGetLastError();
}

/* ---- route ----------------------------------------------------------------------- */

/* A logit's share before normalising, against the row's largest m (> -inf),
 * in double (as the reference backend): +inf logits share equally. */
CB_DEV double cg_share(float v, float m)
{
	if (m == INFINITY)
		return v == INFINITY ? 1.0 : 0.0;
	return exp((double)v - (double)m);
}

/* One thread per row (a router's rows are a few experts wide): the k
 * largest by insertion (ties keep the lower id first), then their shares
 * over the k (renorm) or over the whole row.  A NaN, or no logit above
 * -inf: ids -1, weights 0. */
template <typename T>
__global__ void cg_route_kernel(int64_t rows, int64_t cols, const T *x, int64_t ld, int k,
				int renorm, int32_t *ids_out, float *wt_out)
{
	for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
	     r += (int64_t)gridDim.x * blockDim.x) {
		const T *row = x + r * ld;
		int32_t *ids = ids_out + r * k;
		float *wt = wt_out + r * k;
		float top[FG_ROUTE_TOP_MAX];
		int held = 0;
		bool bad = false;
		double z = 0.0;

		top[0] = -INFINITY;
		for (int64_t j = 0; j < cols; j++) {
			float v = cb_ld(row + j);
			int p;

			if (v != v) {
				bad = true;
				break;
			}
			if (held == k && !(v > top[k - 1]))
				continue;
			p = held < k ? held++ : k - 1;
			for (; p > 0 && v > top[p - 1]; p--) {
				top[p] = top[p - 1];
				ids[p] = ids[p - 1];
			}
			top[p] = v;
			ids[p] = (int32_t)j;
		}
		if (bad || top[0] == -INFINITY) {
			for (int i = 0; i < k; i++) {
				ids[i] = -1;
				wt[i] = 0.0f;
			}
			continue;
		}
		if (renorm)
			for (int i = 0; i < k; i++)
				z += cg_share(top[i], top[0]);
		else
			for (int64_t j = 0; j < cols; j++)
				z += cg_share(cb_ld(row + j), top[0]);
		for (int i = 0; i < k; i++)
			wt[i] = (float)(cg_share(top[i], top[0]) / z);
	}
}

extern "C" cudaError_t cublas_k_route(cudaStream_t s, int64_t rows, int64_t cols, const void *x,
				      int64_t ld, int f32, int k, int renorm, int32_t *ids,
				      float *wt)
{
	unsigned blocks = (unsigned)((rows + 127) / 128);

	if (blocks > CG_GRID_CAP)
		blocks = CG_GRID_CAP;
	if (f32)
		cg_route_kernel<float><<<blocks, 128, 0, s>>>(rows, cols, (const float *)x, ld, k,
							    renorm, ids, wt);
	else
		cg_route_kernel<uint16_t><<<blocks, 128, 0, s>>>(rows, cols, (const uint16_t *)x, ld,
							       k, renorm, ids, wt);
	return cudaGetLastError();
}

/* ---- gather, scatter-add ----------------------------------------------------------- */

template <typename T>
__global__ void cg_gather_kernel(int64_t n, int64_t cols, const T *x, int64_t ldx,
				 const int32_t *index, T *out, int64_t ldo)
{
	int64_t total = n * cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = e / cols, j = e % cols;

		out[i * ldo + j] = x[(int64_t)index[i] * ldx + j];
	}
}

extern "C" cudaError_t cublas_k_gather(cudaStream_t s, int64_t n, int64_t cols, const void *x,
				       int64_t ldx, int f32, const int32_t *index, void *out,
				       int64_t ldo)
{
	unsigned blocks = cg_blocks(n * cols);

	if (f32)
		cg_gather_kernel<float><<<blocks, CG_THREADS, 0, s>>>(
			n, cols, (const float *)x, ldx, index, (float *)out, ldo);
	else
		cg_gather_kernel<uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			n, cols, (const uint16_t *)x, ldx, index, (uint16_t *)out, ldo);
	return cudaGetLastError();
}

/* Output row rows[t] gets the terms term[start[t]] .. term[start[t + 1] - 1]
 * (rows of y, in the order the op listed them) times their weights, summed
 * in that order in fp32, then added to its value: the same sums whatever
 * the launch, so a result does not depend on the GPU. */
template <typename TY, typename TO>
__global__ void cg_scatter_kernel(const struct cublas_scatter a, const TY *y, TO *out)
{
	int64_t total = a.nrows * a.cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = e / a.cols, j = e % a.cols;
		float sum = 0.0f;

		for (int32_t u = a.start[t]; u < a.start[t + 1]; u++)
			sum += a.weight[u] * cb_ld(y + (int64_t)a.term[u] * a.ldy + j);
		TO *o = out + (int64_t)a.rows[t] * a.ldo + j;
		cb_st(o, cb_ld(o) + sum);
	}
}

extern "C" cudaError_t cublas_k_scatter_add(cudaStream_t s, const struct cublas_scatter *a)
{
	unsigned blocks = cg_blocks(a->nrows * a->cols);

	if (a->y_f32 && a->out_f32)
		cg_scatter_kernel<float, float><<<blocks, CG_THREADS, 0, s>>>(
			*a, (const float *)a->y, (float *)a->out);
	else if (a->out_f32)
		cg_scatter_kernel<uint16_t, float><<<blocks, CG_THREADS, 0, s>>>(
			*a, (const uint16_t *)a->y, (float *)a->out);
	else
		cg_scatter_kernel<uint16_t, uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			*a, (const uint16_t *)a->y, (uint16_t *)a->out);
	return cudaGetLastError();
}

/* ---- experts (compute 1.13): the routed rows grouped on the device ----------------- */

/* One block: each expert's row count (shared-memory atomics: a count is
 * the same in any order), the offsets, then each expert's rows placed in
 * row order (a warp an expert, ballots over the choices in order), and
 * each row's terms listed by expert id (the order the composition's
 * scatter-add sums them in: grouped position, which is expert-major). */
__global__ void cg_moe_group_kernel(const struct cublas_moe g)
{
	extern __shared__ int32_t cg_off[]; /* experts + 1 */
	int64_t m = g.rows * g.k;
	int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;

	for (int e = tid; e <= g.experts; e += blockDim.x)
		cg_off[e] = 0;
	__syncthreads();
	for (int64_t i = tid; i < m; i += blockDim.x) {
		int32_t id = g.ids[i];

		if (id >= 0 && id < g.experts)
			atomicAdd(&cg_off[id + 1], 1);
	}
	__syncthreads();
	if (tid == 0)
		for (int e = 0; e < g.experts; e++)
			cg_off[e + 1] += cg_off[e];
	__syncthreads();
	for (int e = tid; e <= g.experts; e += blockDim.x)
		g.off[e] = cg_off[e];
	for (int e = warp; e < g.experts; e += warps) {
		int32_t base = cg_off[e];

		for (int64_t i0 = 0; i0 < m; i0 += 32) {
			int64_t i = i0 + lane;
			bool hit = i < m && g.ids[i] == e;
			unsigned b = __ballot_sync(0xffffffffu, hit);

			if (hit) {
				int32_t p = base + __popc(b & ((1u << lane) - 1));

				g.row[p] = (int32_t)(i / g.k);
				g.term[i] = p; /* the choice's grouped position, sorted below */
			}
			base += __popc(b);
		}
	}
	__syncthreads(); /* (global writes of the block are visible to it after the barrier) */
	for (int64_t r = tid; r < g.rows; r += blockDim.x) {
		int32_t *term = g.term + r * g.k;
		float *tw = g.tw + r * g.k;
		int32_t id[FG_ROUTE_TOP_MAX];
		int n = 0;

		for (int j = 0; j < g.k; j++) {
			int32_t e = g.ids[r * g.k + j], p = term[j];
			float w = g.wt[r * g.k + j];
			int at;

			if (e < 0 || e >= g.experts)
				continue;
			for (at = n++; at > 0 && id[at - 1] > e; at--) {
				id[at] = id[at - 1];
				term[at] = term[at - 1];
				tw[at] = tw[at - 1];
			}
			id[at] = e;
			term[at] = p;
			tw[at] = w;
		}
		g.cnt[r] = n;
	}
}

extern "C" cudaError_t cublas_k_moe_group(cudaStream_t s, const struct cublas_moe *g)
{
	cg_moe_group_kernel<<<1, 1024, (size_t)(g->experts + 1) * sizeof(int32_t), s>>>(*g);
	return cudaGetLastError();
}

/* xg[p] = x[row[p]] for the off[experts] grouped positions (read on the device). */
template <typename T>
__global__ void cg_moe_gather_kernel(const struct cublas_moe g, int64_t cols, const T *x,
				     int64_t ldx, T *out, int64_t ldo)
{
	int64_t total = (int64_t)g.off[g.experts] * cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t p = e / cols, j = e % cols;

		out[p * ldo + j] = x[(int64_t)g.row[p] * ldx + j];
	}
}

extern "C" cudaError_t cublas_k_moe_gather(cudaStream_t s, const struct cublas_moe *g,
					   int64_t cols, const void *x, int64_t ldx, int f32,
					   void *out, int64_t ldo)
{
	unsigned blocks = cg_blocks(g->rows * g->k * cols);

	if (f32)
		cg_moe_gather_kernel<float><<<blocks, CG_THREADS, 0, s>>>(
			*g, cols, (const float *)x, ldx, (float *)out, ldo);
	else
		cg_moe_gather_kernel<uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			*g, cols, (const uint16_t *)x, ldx, (uint16_t *)out, ldo);
	return cudaGetLastError();
}

/* out[r] += its terms' weighted sum, summed in fp32 in the listed order
 * and added once, as cg_scatter_kernel does. */
template <typename TY, typename TO>
__global__ void cg_moe_combine_kernel(const struct cublas_moe g, int64_t cols, const TY *y,
				      int64_t ldy, TO *out, int64_t ldo)
{
	int64_t total = g.rows * cols;

	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = e / cols, j = e % cols;
		int32_t n = g.cnt[r];
		float sum = 0.0f;

		if (n == 0)
			continue;
		for (int32_t u = 0; u < n; u++)
			sum += g.tw[r * g.k + u] * cb_ld(y + (int64_t)g.term[r * g.k + u] * ldy + j);
		TO *o = out + r * ldo + j;
		cb_st(o, cb_ld(o) + sum);
	}
}

extern "C" cudaError_t cublas_k_moe_combine(cudaStream_t s, const struct cublas_moe *g,
					    int64_t cols, const void *y, int64_t ldy, void *out,
					    int64_t ldo, int out_f32)
{
	unsigned blocks = cg_blocks(g->rows * cols);

	if (out_f32)
		cg_moe_combine_kernel<uint16_t, float><<<blocks, CG_THREADS, 0, s>>>(
			*g, cols, (const uint16_t *)y, ldy, (float *)out, ldo);
	else
		cg_moe_combine_kernel<uint16_t, uint16_t><<<blocks, CG_THREADS, 0, s>>>(
			*g, cols, (const uint16_t *)y, ldy, (uint16_t *)out, ldo);
	return cudaGetLastError();
}
