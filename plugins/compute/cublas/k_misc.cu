/* plugins/compute/cublas/k_misc.cu - layer norm and RMS norm, embedding
 * gather, rotary position embedding and KV cache append (fp16, or encoded to
 * 4-bit or fp8 groups along the row).
 *
 * Each kernel has a vector path (8 halves per 16-byte access, taken when
 * widths, leading dimensions and addresses allow) and a scalar path for
 * any other layout.
 */
#include <math.h>
#include <stdint.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CB_ROWS_CAP (1 << 20) /* grid cap for row-per-block kernels (they loop) */

static bool cb_vec8(int64_t cols, const void *p, int64_t ld)
{
	return cols % 8 == 0 && ld % 8 == 0 && ((uintptr_t)p & 15) == 0;
}

CB_DEV void cb_load8(const uint16_t *p, float v[8])
{
	uint4 u = *(const uint4 *)p;
	float2 a = cb_unpack2(u.x), b = cb_unpack2(u.y), c = cb_unpack2(u.z), d = cb_unpack2(u.w);

	v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
	v[4] = c.x, v[5] = c.y, v[6] = d.x, v[7] = d.y;
}

CB_DEV void cb_store8(uint16_t *p, const float v[8])
{
	*(uint4 *)p = make_uint4(cb_pack2(v[0], v[1]), cb_pack2(v[2], v[3]), cb_pack2(v[4], v[5]),
				 cb_pack2(v[6], v[7]));
}

/* The same for the fp32 residual stream (32 bytes, 16-byte aligned). */
CB_DEV void cb_load8(const float *p, float v[8])
{
	float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);

	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
	v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

CB_DEV void cb_store8(float *p, const float v[8])
{
	*(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
	*(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* Sum over the block; red holds 32 floats.  Every thread gets the total. */
CB_DEV float cb_block_sum(float v, float *red)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;

	v = cb_sum_xor(v, 32);
	__syncthreads(); /* red may still be read from a previous call */
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < nw ? red[lane] : 0.0f;
	return cb_sum_xor(v, 32);
}

/* ---- layer norm ----------------------------------------------------------------------- */

/* RMS is the layer norm with a mean of 0: the first pass is skipped and the
 * second sums x².  beta NULL adds nothing. */
template <typename TX, bool VEC, bool RMS>
__global__ void cb_layer_norm_kernel(int64_t n, int64_t h, const TX *x, int64_t ldx,
				     const uint16_t *gamma, const uint16_t *beta, float eps,
				     float shift, uint16_t *out, int64_t ldo)
{
	__shared__ float red[32];
	int64_t step = VEC ? 8 : 1;

	for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
		const TX *xr = x + row * ldx;
		uint16_t *orow = out + row * ldo;
		float s = 0.0f, mean = 0.0f, var, rstd;

		if (!RMS) {
			for (int64_t j = threadIdx.x * step; j < h; j += blockDim.x * step) {
				if (VEC) {
					float v[8];

					cb_load8(xr + j, v);
					for (int e = 0; e < 8; e++)
						s += v[e];
				} else {
					s += cb_ld(xr + j);
				}
			}
			mean = cb_block_sum(s, red) / (float)h;
			s = 0.0f;
		}
		for (int64_t j = threadIdx.x * step; j < h; j += blockDim.x * step) {
			if (VEC) {
				float v[8];

				cb_load8(xr + j, v);
				for (int e = 0; e < 8; e++)
					s += (v[e] - mean) * (v[e] - mean);
			} else {
				float d = cb_ld(xr + j) - mean;

				s += d * d;
			}
		}
		var = cb_block_sum(s, red) / (float)h;
		rstd = 1.0f / sqrtf(var + eps);
		/* Every read of x above happened before the barrier in cb_block_sum, and
		 * below each thread reads an element before it writes it: out may be x. */
		for (int64_t j = threadIdx.x * step; j < h; j += blockDim.x * step) {
			if (VEC) {
				float v[8], gm[8], bt[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

				cb_load8(xr + j, v);
				cb_load8(gamma + j, gm);
				if (beta)
					cb_load8(beta + j, bt);
				for (int e = 0; e < 8; e++)
					v[e] = (v[e] - mean) * rstd * (gm[e] + shift) + bt[e];
				cb_store8(orow + j, v);
			} else {
				float v = (cb_ld(xr + j) - mean) * rstd;

				orow[j] = cb_f2h(v * (cb_h2f(gamma[j]) + shift) +
						 (beta ? cb_h2f(beta[j]) : 0.0f));
			}
		}
		__syncthreads(); /* red is reused by the next row */
	}
}

template <typename TX, bool RMS>
static void cb_layer_norm_launch(cudaStream_t s, int64_t n, int64_t h, const TX *x,
				 int64_t ldx, const uint16_t *gamma, const uint16_t *beta,
				 float eps, float shift, uint16_t *out, int64_t ldo)
{
	unsigned blocks = cb_blocks(n, 1, CB_ROWS_CAP), threads = h > 2048 ? 256 : 128;

	if (cb_vec8(h, x, ldx) && cb_vec8(h, out, ldo) && cb_vec8(h, gamma, h) &&
	    (!beta || cb_vec8(h, beta, h)))
		cb_layer_norm_kernel<TX, true, RMS><<<blocks, threads, 0, s>>>(
			n, h, x, ldx, gamma, beta, eps, shift, out, ldo);
	else
		cb_layer_norm_kernel<TX, false, RMS><<<blocks, threads, 0, s>>>(
			n, h, x, ldx, gamma, beta, eps, shift, out, ldo);
}

template <typename TX>
static void cb_layer_norm_kind(cudaStream_t s, int64_t n, int64_t h, const TX *x, int64_t ldx,
			       const uint16_t *gamma, const uint16_t *beta, float eps, float shift,
			       int rms, uint16_t *out, int64_t ldo)
{
	if (rms)
		cb_layer_norm_launch<TX, true>(s, n, h, x, ldx, gamma, beta, eps, shift, out, ldo);
	else
		cb_layer_norm_launch<TX, false>(s, n, h, x, ldx, gamma, beta, eps, shift, out, ldo);
}

extern "C" cudaError_t cublas_k_layer_norm(cudaStream_t s, int64_t n, int64_t h, const void *x,
					   int x_f32, int64_t ldx, const uint16_t *gamma,
					   const uint16_t *beta, float eps, float shift, int rms,
					   uint16_t *out, int64_t ldo)
{
	if (x_f32)
		cb_layer_norm_kind(s, n, h, (const float *)x, ldx, gamma, beta, eps, shift, rms, out,
				   ldo);
	else
		cb_layer_norm_kind(s, n, h, (const uint16_t *)x, ldx, gamma, beta, eps, shift, rms,
				   out, ldo);
	return cudaGetLastError();
}

/* ---- embedding ------------------------------------------------------------------------ */

/* pos NULL: the token row alone (positions unread). */
template <typename TO, bool VEC>
__global__ void cb_embed_kernel(int64_t n, int64_t h, const int32_t *ids,
				const int32_t *positions, const uint16_t *tok, int64_t ldt,
				const uint16_t *pos, int64_t ldp, TO *out, int64_t ldo)
{
	int64_t step = VEC ? 8 : 1;

	for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
		const uint16_t *a = tok + (int64_t)ids[row] * ldt;
		const uint16_t *b = pos ? pos + (int64_t)positions[row] * ldp : NULL;
		TO *o = out + row * ldo;

		for (int64_t j = threadIdx.x * step; j < h; j += blockDim.x * step) {
			if (VEC) {
				float u[8], v[8];

				cb_load8(a + j, u);
				if (b) {
					cb_load8(b + j, v);
					for (int e = 0; e < 8; e++)
						u[e] += v[e];
				}
				cb_store8(o + j, u);
			} else {
				cb_st(o + j, cb_h2f(a[j]) + (b ? cb_h2f(b[j]) : 0.0f));
			}
		}
	}
}

template <typename TO>
static void cb_embed_launch(cudaStream_t s, int64_t n, int64_t h, const int32_t *ids,
			    const int32_t *positions, const uint16_t *tok, int64_t ldt,
			    const uint16_t *pos, int64_t ldp, TO *out, int64_t ldo)
{
	unsigned blocks = cb_blocks(n, 1, CB_ROWS_CAP);

	if (cb_vec8(h, tok, ldt) && (!pos || cb_vec8(h, pos, ldp)) && cb_vec8(h, out, ldo))
		cb_embed_kernel<TO, true><<<blocks, 128, 0, s>>>(n, h, ids, positions, tok, ldt,
								pos, ldp, out, ldo);
	else
		cb_embed_kernel<TO, false><<<blocks, 128, 0, s>>>(n, h, ids, positions, tok, ldt,
								 pos, ldp, out, ldo);
}

extern "C" cudaError_t cublas_k_embed(cudaStream_t s, int64_t n, int64_t h, const int32_t *ids,
				      const int32_t *positions, const uint16_t *tok, int64_t ldt,
				      const uint16_t *pos, int64_t ldp, void *out, int out_f32,
				      int64_t ldo)
{
	if (out_f32)
		cb_embed_launch(s, n, h, ids, positions, tok, ldt, pos, ldp, (float *)out, ldo);
	else
		cb_embed_launch(s, n, h, ids, positions, tok, ldt, pos, ldp, (uint16_t *)out, ldo);
	return cudaGetLastError();
}

/* ---- rotary position embedding ---------------------------------------------------------- */

/* A block per row (looping over rows), a thread per (head, pair): each pair is
 * read and written by one thread, so the update in place needs no barrier. */
__global__ void cb_rope_kernel(int64_t n, int64_t heads, int64_t head_dim, int64_t half,
			       const int32_t *positions, const float *inv_freq, float attn_factor,
			       uint16_t *x, int64_t ldx)
{
	int64_t pairs = heads * half;

	for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
		float p = (float)positions[row];
		uint16_t *xr = x + row * ldx;

		for (int64_t e = threadIdx.x; e < pairs; e += blockDim.x) {
			int64_t h = e / half, i = e - h * half;
			uint16_t *v = xr + h * head_dim + i;
			float sn, cs, a = cb_h2f(v[0]), b = cb_h2f(v[half]);

			sincosf(p * inv_freq[i], &sn, &cs); /* the fp32 angle, accurate sin/cos */
			cs *= attn_factor;
			sn *= attn_factor;
			v[0] = cb_f2h(a * cs - b * sn);
			v[half] = cb_f2h(b * cs + a * sn);
		}
	}
}

extern "C" cudaError_t cublas_k_rope(cudaStream_t s, int64_t n, int64_t heads,
				     int64_t head_dim, int64_t rot_dim, const int32_t *positions,
				     const float *inv_freq, float attn_factor, uint16_t *x,
				     int64_t ldx)
{
	int64_t half = rot_dim / 2, pairs = heads * half;
	unsigned threads = pairs >= 256 ? 256 : pairs > 64 ? 128 : 64;

	cb_rope_kernel<<<cb_blocks(n, 1, CB_ROWS_CAP), threads, 0, s>>>(
		n, heads, head_dim, half, positions, inv_freq, attn_factor, x, ldx);
	return cudaGetLastError();
}

/* ---- KV append, fp16 ----------------------------------------------------------------- */

/* The cache row of source row i: sequence i / n, position start + i % n. */
CB_DEV int64_t cb_kv_row(int64_t i, int64_t n, int64_t start, int64_t stride)
{
	return (i / n) * stride + start + i % n;
}

template <bool VEC>
__global__ void cb_kv_append_kernel(int64_t rows, int64_t n, int64_t start, int64_t stride,
				    int64_t h, const uint16_t *src, int64_t lds,
				    uint16_t *cache, int64_t ldc)
{
	int64_t step = VEC ? 8 : 1;

	for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
		const uint16_t *a = src + i * lds;
		uint16_t *o = cache + cb_kv_row(i, n, start, stride) * ldc;

		for (int64_t j = threadIdx.x * step; j < h; j += blockDim.x * step) {
			if (VEC)
				*(uint4 *)(o + j) = *(const uint4 *)(a + j);
			else
				o[j] = a[j];
		}
	}
}

extern "C" cudaError_t cublas_k_kv_append(cudaStream_t s, int64_t batch, int64_t n,
					  int64_t start, int64_t stride, int64_t h,
					  const uint16_t *src, int64_t lds, uint16_t *cache,
					  int64_t ldc)
{
	int64_t rows = batch * n;
	unsigned blocks = cb_blocks(rows, 1, CB_ROWS_CAP);

	if (cb_vec8(h, src, lds) && cb_vec8(h, cache, ldc))
		cb_kv_append_kernel<true><<<blocks, 128, 0, s>>>(rows, n, start, stride, h, src,
								lds, cache, ldc);
	else
		cb_kv_append_kernel<false><<<blocks, 128, 0, s>>>(rows, n, start, stride, h, src,
								 lds, cache, ldc);
	return cudaGetLastError();
}

/* ---- KV append, 4-bit ------------------------------------------------------------------ */

/* Groups are encoded by fgcore/q4.h's rule (fg_q4_param_of, fg_q4_code), the
 * one the int4_group64 codec follows, so a cache encoded here has the codec's
 * exact bytes. */

/* Vector path: 8 lanes per group of 64 columns, each lane 8 columns (h % 8 == 0,
 * src 16-byte aligned with lds % 8 == 0, q4 4-byte aligned).  Whole warps run
 * every iteration so that the shuffles always see all their lanes. */
__global__ void cb_kv_append_q4_vec(int64_t items, int64_t n, int64_t start, int64_t stride,
				    int64_t h, int64_t groups, const uint16_t *src, int64_t lds,
				    uint8_t *q4, uint8_t *prm)
{
	int64_t lanes = (items * 8 + 31) / 32 * 32;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < lanes;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t item = e / 8, i = item / groups, g = item - i * groups;
		int64_t col = g * FG_Q4_GROUP + (e % 8) * 8;
		bool on = item < items && col < h;
		float v[8], mn = INFINITY, mx = -INFINITY;
		struct fg_q4_param p;
		uint32_t word = 0;

		if (on) {
			cb_load8(src + i * lds + col, v);
			for (int j = 0; j < 8; j++) {
				mn = fminf(mn, v[j]); /* fminf/fmaxf skip NaN */
				mx = fmaxf(mx, v[j]);
			}
		}
		mn = -cb_max_xor(-mn, 8);
		mx = cb_max_xor(mx, 8);
		if (!on)
			continue;
		p = fg_q4_param_of(mn, mx);
		for (int j = 0; j < 4; j++)
			word |= ((fg_q4_code(v[2 * j], p.m, p.inv) << 4) |
				 fg_q4_code(v[2 * j + 1], p.m, p.inv)) << (8 * j);
		int64_t r = cb_kv_row(i, n, start, stride);
		*(uint32_t *)(q4 + ((r * h + col) >> 1)) = word;
		if (e % 8 == 0)
			*(uint32_t *)(prm + (r * groups + g) * 4) =
				(uint32_t)p.scale | ((uint32_t)p.min << 16);
	}
}

/* Scalar path: one thread per group, any width; nibbles are merged into their
 * 32-bit words atomically because with an odd h two rows share a byte. */
__global__ void cb_kv_append_q4_scalar(int64_t items, int64_t n, int64_t start,
				       int64_t stride, int64_t h, int64_t groups,
				       const uint16_t *src, int64_t lds, uint8_t *q4,
				       uint8_t *prm)
{
	for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < items;
	     item += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = item / groups, g = item - i * groups;
		int64_t c0 = g * FG_Q4_GROUP, c1 = min(h, c0 + FG_Q4_GROUP);
		int64_t r = cb_kv_row(i, n, start, stride);
		const uint16_t *a = src + i * lds;
		float mn = INFINITY, mx = -INFINITY;
		struct fg_q4_param p;

		for (int64_t c = c0; c < c1; c++) {
			float v = cb_h2f(a[c]);

			mn = fminf(mn, v);
			mx = fmaxf(mx, v);
		}
		p = fg_q4_param_of(mn, mx);
		for (int64_t c = c0; c < c1; c++) {
			int64_t el = r * h + c, byte = el >> 1;
			unsigned shift = 8 * (unsigned)(byte & 3) + ((el & 1) ? 0 : 4);
			unsigned *w = (unsigned *)(q4 + (byte & ~(int64_t)3));

			atomicAnd(w, ~(15u << shift));
			atomicOr(w, fg_q4_code(cb_h2f(a[c]), p.m, p.inv) << shift);
		}
		*(uint32_t *)(prm + (r * groups + g) * 4) = (uint32_t)p.scale | ((uint32_t)p.min << 16);
	}
}

extern "C" cudaError_t cublas_k_kv_append_q4(cudaStream_t s, int64_t batch, int64_t n,
					     int64_t start, int64_t stride, int64_t h,
					     const uint16_t *src, int64_t lds, void *q4,
					     int64_t rows)
{
	int64_t groups = (h + FG_Q4_GROUP - 1) / FG_Q4_GROUP, items = batch * n * groups;
	uint8_t *data = (uint8_t *)q4, *prm = data + cb_q4_data_bytes(rows, h);

	if (cb_vec8(h, src, lds))
		cb_kv_append_q4_vec<<<cb_blocks(items * 8, 256, CB_ROWS_CAP), 256, 0, s>>>(
			items, n, start, stride, h, groups, src, lds, data, prm);
	else
		cb_kv_append_q4_scalar<<<cb_blocks(items, 128, CB_ROWS_CAP), 128, 0, s>>>(
			items, n, start, stride, h, groups, src, lds, data, prm);
	return cudaGetLastError();
}

/* Into an F8_COLS cache (fgcore/f8.h): each group of 64 values of a row
 * encoded as if it were a row, by the header's own rule, so the bytes equal
 * the host's.  Vector path: 8 lanes a group, each 8 columns (h % 8 == 0,
 * src as cb_vec8, the cache 8-byte aligned); the group's amax by shuffles. */
__global__ void cb_kv_append_f8_vec(int64_t items, int64_t n, int64_t start, int64_t stride,
				    int64_t h, int64_t groups, const uint16_t *src, int64_t lds,
				    uint8_t *codes, uint8_t *scales)
{
	int64_t lanes = (items * 8 + 31) / 32 * 32;

	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < lanes;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t item = e / 8, i = item / groups, g = item - i * groups;
		int64_t col = g * FG_F8_GROUP + (e % 8) * 8;
		bool on = item < items && col < h;
		float v[8], amax = 0.0f, scale, inv;
		uint32_t lo = 0, hi = 0;

		if (on) {
			cb_load8(src + i * lds + col, v);
			amax = fg_f8_amax(v, 8);
		}
		amax = cb_max_xor(amax, 8); /* (NaN never enters: fg_f8_amax skips it) */
		if (!on)
			continue;
		fg_f8_scale_of(amax, &scale, &inv);
		for (int j = 0; j < 4; j++) {
			lo |= (uint32_t)fg_f8_code(v[j], inv) << (8 * j);
			hi |= (uint32_t)fg_f8_code(v[j + 4], inv) << (8 * j);
		}
		int64_t r = cb_kv_row(i, n, start, stride);
		*(uint2 *)(codes + r * h + col) = make_uint2(lo, hi);
		if (e % 8 == 0)
			*(float *)(scales + fg_f8c_scale_index((uint64_t)h, (uint64_t)r, (uint64_t)g) * 4) =
				scale;
	}
}

/* Scalar path: one thread a group, any width (codes are whole bytes). */
__global__ void cb_kv_append_f8_scalar(int64_t items, int64_t n, int64_t start,
				       int64_t stride, int64_t h, int64_t groups,
				       const uint16_t *src, int64_t lds, uint8_t *codes,
				       uint8_t *scales)
{
	for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < items;
	     item += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = item / groups, g = item - i * groups;
		int64_t c0 = g * FG_F8_GROUP, c1 = min(h, c0 + FG_F8_GROUP);
		int64_t r = cb_kv_row(i, n, start, stride);
		const uint16_t *a = src + i * lds;
		float amax = 0.0f, scale, inv;

		for (int64_t c = c0; c < c1; c++) {
			float m = fg_f8_mag(cb_h2f(a[c]));

			amax = m > amax ? m : amax;
		}
		fg_f8_scale_of(amax, &scale, &inv);
		for (int64_t c = c0; c < c1; c++)
			codes[r * h + c] = fg_f8_code(cb_h2f(a[c]), inv);
		fg_f8_scale_store(scales, fg_f8c_scale_index((uint64_t)h, (uint64_t)r, (uint64_t)g),
				  scale);
	}
}

extern "C" cudaError_t cublas_k_kv_append_f8(cudaStream_t s, int64_t batch, int64_t n,
					     int64_t start, int64_t stride, int64_t h,
					     const uint16_t *src, int64_t lds, void *f8,
					     int64_t rows)
{
	int64_t groups = (int64_t)fg_f8c_grid_cols((uint64_t)h), items = batch * n * groups;
	uint8_t *codes = (uint8_t *)f8, *scales = codes + fg_f8_data_bytes((uint64_t)rows, (uint64_t)h);

	if (cb_vec8(h, src, lds) && ((uintptr_t)f8 & 7) == 0)
		cb_kv_append_f8_vec<<<cb_blocks(items * 8, 256, CB_ROWS_CAP), 256, 0, s>>>(
			items, n, start, stride, h, groups, src, lds, codes, scales);
	else
		cb_kv_append_f8_scalar<<<cb_blocks(items, 128, CB_ROWS_CAP), 128, 0, s>>>(
			items, n, start, stride, h, groups, src, lds, codes, scales);
	return cudaGetLastError();
}

/* ---- argmax over rows: greedy decoding without copying logits out ---------------- */

#define CB_ARGMAX_THREADS 256

__global__ void cb_argmax_kernel(const uint16_t *x, int64_t cols, int64_t ld, int32_t *out)
{
	__shared__ float best_v[CB_ARGMAX_THREADS];
	__shared__ int32_t best_i[CB_ARGMAX_THREADS];
	const uint16_t *row = x + (int64_t)blockIdx.x * ld;
	float bv = -INFINITY;
	int32_t bi = INT32_MAX;

	for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
		float v = cb_h2f(row[j]);
		if (v > bv || (bi == INT32_MAX && v == v)) { /* first in index order wins ties */
			bv = v;
			bi = (int32_t)j;
		}
	}
	best_v[threadIdx.x] = bv;
	best_i[threadIdx.x] = bi;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s /= 2) {
		if (threadIdx.x < s) {
			float ov = best_v[threadIdx.x + s];
			int32_t oi = best_i[threadIdx.x + s];
			if (ov > best_v[threadIdx.x] ||
			    (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
				best_v[threadIdx.x] = ov;
				best_i[threadIdx.x] = oi;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = best_i[0] == INT32_MAX || !(best_v[0] > -INFINITY) ? -1 : best_i[0];
}

extern "C" cudaError_t cublas_k_argmax(cudaStream_t s, int64_t rows, int64_t cols,
				       const uint16_t *x, int64_t ld, int32_t *out)
{
	if (rows > 0)
		cb_argmax_kernel<<<(unsigned)rows, CB_ARGMAX_THREADS, 0, s>>>(x, cols, ld, out);
	return cudaGetLastError();
}

/* ---- copies through the SMs ----------------------------------------------------- */

/* len bytes from src to dst, one side page-locked host memory read or
 * written over PCIe by the SMs: 16 bytes a thread where both ends and len
 * allow, else a byte a thread. */
__global__ void cb_copy_kernel(uint8_t *dst, const uint8_t *src, size_t len, bool wide)
{
	size_t n = wide ? len / 16 : len;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		if (wide)
			((uint4 *)dst)[i] = ((const uint4 *)src)[i];
		else
			dst[i] = src[i];
	}
}

extern "C" cudaError_t cublas_k_copy(cudaStream_t s, void *dst, const void *src, size_t len)
{
	bool wide = (((uintptr_t)dst | (uintptr_t)src | len) & 15) == 0;
	size_t n = wide ? len / 16 : len;
	unsigned blocks = (unsigned)((n + 255) / 256);

	if (len == 0)
		return cudaSuccess;
	/* a few blocks an SM keep enough PCIe reads in flight */
	cb_copy_kernel<<<blocks < 1024 ? blocks : 1024, 256, 0, s>>>((uint8_t *)dst,
								      (const uint8_t *)src, len, wide);
	return cudaGetLastError();
}
