/* plugins/compute/cublas/k_decode.cu - attention of one new token over the KV
 * cache (fp16 or 4-bit groups along the row), flash-decoding style.
 *
 * Decode is bound by reading the cache.  One block of 128 threads takes one
 * (sequence, head) and one chunk of the key positions; when batch * heads is
 * too small to fill the GPU the positions are split over more blocks, each
 * writing its running max, sum and unnormalised output, and a second kernel
 * combines them.  Scores: 8 lanes per key position, each reading 8 values
 * (16 bytes of fp16 or 4 bytes of nibbles) at a time; values: each thread
 * owns 8 output columns and a slice of the positions.  Grouped-query
 * attention: a block reads the k/v head of its query head (the k/v rows are
 * kv_heads * head_dim wide).
 */
#include <math.h>
#include <stdint.h>

#include <fgcore/q4.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define DC_THREADS 128
#define DC_MAX_CHUNK 8192 /* scores of one block, in shared memory */

struct dc_src {
	const uint8_t *p; /* fp16 rows, or the encoded Q4_COLS tensor */
	const uint8_t *prm;
	int64_t ld;       /* fp16: elements between rows */
	int64_t cols, groups;
};

/* Values [c, c + 8) of row r (those at or past `lim` read as 0). */
template <bool Q4, bool VEC>
CB_DEV void dc_load8(const dc_src &s, int64_t r, int64_t c, int64_t lim, float v[8])
{
	if (!Q4 && VEC) {
		uint4 u = *(const uint4 *)(s.p + (r * s.ld + c) * 2);
		float2 a = cb_unpack2(u.x), b = cb_unpack2(u.y), e = cb_unpack2(u.z),
		       f = cb_unpack2(u.w);

		v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
		v[4] = e.x, v[5] = e.y, v[6] = f.x, v[7] = f.y;
	} else if (!Q4) {
		const uint16_t *row = (const uint16_t *)s.p + r * s.ld;

		for (int j = 0; j < 8; j++)
			v[j] = c + j < lim ? cb_h2f(row[c + j]) : 0.0f;
	} else if (VEC) {
		uint32_t w = *(const uint32_t *)(s.p + ((r * s.cols + c) >> 1));
		float2 sm = cb_unpack2(*(const uint32_t *)(s.prm + (r * s.groups + c / FG_Q4_GROUP) * 4));

		for (int j = 0; j < 4; j++) {
			unsigned byte = (w >> (8 * j)) & 0xffu;

			v[2 * j] = (float)(byte >> 4) * sm.x + sm.y;
			v[2 * j + 1] = (float)(byte & 15u) * sm.x + sm.y;
		}
	} else {
		for (int j = 0; j < 8; j++) {
			int64_t col = c + j, el = r * s.cols + col;
			unsigned byte, q;
			float2 sm;

			if (col >= lim) {
				v[j] = 0.0f;
				continue;
			}
			byte = s.p[el >> 1];
			q = (el & 1) ? (byte & 15u) : (byte >> 4);
			sm = cb_unpack2(*(const uint32_t *)(s.prm + (r * s.groups + col / FG_Q4_GROUP) * 4));
			v[j] = (float)q * sm.x + sm.y;
		}
	}
}

/* The 8 codes of a word as floats, element order (byte j: high nibble first).
 * 0x4b0000nn is the float 2^23 + nn: one byte permute and one subtraction per
 * value instead of an integer-to-float conversion. */
CB_DEV void dc_nib8(uint32_t w, float n[8])
{
	uint32_t lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;

#pragma unroll
	for (int j = 0; j < 4; j++) {
		n[2 * j] = __int_as_float(__byte_perm(hi, 0x4b000000u, 0x7540 + j)) - 8388608.0f;
		n[2 * j + 1] = __int_as_float(__byte_perm(lo, 0x4b000000u, 0x7540 + j)) - 8388608.0f;
	}
}

static __host__ __device__ int64_t dc_round4(int64_t x)
{
	return (x + 3) & ~(int64_t)3;
}

/* Block-wide reduction (max or sum) through red[32]; everyone gets the result. */
CB_DEV float dc_block_reduce(float v, float *red, bool is_max)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

	v = is_max ? cb_max_xor(v, 32) : cb_sum_xor(v, 32);
	__syncthreads();
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < DC_THREADS / 32 ? red[lane] : (is_max ? -INFINITY : 0.0f);
	return is_max ? cb_max_xor(v, 32) : cb_sum_xor(v, 32);
}

/* GQA: k/v head h / a.group, rows kv_heads * head_dim wide (a separate
 * instance, so that the multi-head kernel keeps its registers). */
template <bool Q4, bool VEC, bool GQA>
__global__ void __launch_bounds__(DC_THREADS)
cb_decode_kernel(struct cublas_attn a, float sl2, int64_t chunk, int splits, float *part)
{
	extern __shared__ float dsm[];
	int64_t d = a.head_dim, nvec = (d + 7) / 8;
	float *qs = dsm, *sc = qs + dc_round4(d), *red = sc + dc_round4(chunk), *acc = red + 32;
	float *qsum = acc + (DC_THREADS / nvec) * nvec * 8; /* 4-bit: sum of q over each 8 */
	int tid = threadIdx.x, grp = tid / 8, l8 = tid % 8;
	int64_t bh = blockIdx.x, split = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
	int64_t t0 = max((int64_t)a.pad[b], split * chunk), t1 = min(a.len, (split + 1) * chunk);
	int64_t nt = t1 > t0 ? t1 - t0 : 0, row0 = b * a.stride + t0, c0 = h * d;
	int64_t kc0 = GQA ? (int64_t)((int)h / a.group) * d : c0; /* columns of its k/v head */
	int64_t cols = (GQA ? a.kv_heads : a.heads) * d;
	int64_t groups = (cols + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
	dc_src ks = { (const uint8_t *)a.k, NULL, a.ldk, cols, groups };
	dc_src vs = { (const uint8_t *)a.v, NULL, a.ldv, cols, groups };
	float mx = -INFINITY, sum = 0.0f;

	if (Q4) {
		ks.prm = ks.p + cb_q4_data_bytes(a.kv_rows, cols);
		vs.prm = vs.p + cb_q4_data_bytes(a.kv_rows, cols);
	}
	for (int64_t j = tid; j < d; j += DC_THREADS)
		qs[j] = cb_h2f(a.q[b * a.ldq + c0 + j]) * sl2;
	__syncthreads();
	if (Q4 && VEC) {
		/* q·k over a group = scale · (q·codes) + min · sum(q) */
		for (int64_t vi = tid; vi < nvec; vi += DC_THREADS) {
			float t = 0.0f;

			for (int j = 0; j < 8; j++)
				t += qs[vi * 8 + j];
			qsum[vi] = t;
		}
		__syncthreads();
	}

	/* scores, in the log2 domain: 16 positions at a time, 8 lanes each */
	for (int64_t base = 0; base < nt; base += DC_THREADS / 8) {
		int64_t tt = base + grp;
		float s = 0.0f;

		if (tt < nt && Q4 && VEC) {
			int64_t r = row0 + tt;

			for (int64_t vi = l8; vi < nvec; vi += 8) {
				int64_t c = kc0 + vi * 8;
				uint32_t w = *(const uint32_t *)(ks.p + ((r * cols + c) >> 1));
				float2 sm = cb_unpack2(*(const uint32_t *)(ks.prm +
							(r * groups + c / FG_Q4_GROUP) * 4));
				float nv[8], dot = 0.0f;

				dc_nib8(w, nv);
#pragma unroll
				for (int j = 0; j < 8; j++)
					dot += qs[vi * 8 + j] * nv[j];
				s += sm.x * dot + sm.y * qsum[vi];
			}
		} else if (tt < nt) {
			for (int64_t vi = l8; vi < nvec; vi += 8) {
				float kv[8];

				dc_load8<Q4, VEC>(ks, row0 + tt, kc0 + vi * 8, kc0 + d, kv);
				for (int j = 0; j < 8 && vi * 8 + j < d; j++)
					s += qs[vi * 8 + j] * kv[j];
			}
		}
		s = cb_sum_xor(s, 8);
		if (tt < nt && l8 == 0)
			sc[tt] = s;
	}
	__syncthreads();
	for (int64_t tt = tid; tt < nt; tt += DC_THREADS)
		mx = fmaxf(mx, sc[tt]);
	mx = dc_block_reduce(mx, red, true);
	for (int64_t tt = tid; tt < nt; tt += DC_THREADS) {
		float p = exp2f(sc[tt] - mx);

		sc[tt] = p;
		sum += p;
	}
	sum = dc_block_reduce(sum, red, false); /* its barriers also publish sc[] */

	/* values: thread (slot, vi) sums positions slot, slot + slots, ... */
	int64_t slots = DC_THREADS / nvec, slot = tid / nvec, vi = tid % nvec;
	float o[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

	if (slot < slots) {
		if (Q4 && VEC) {
			/* p · (code · scale + min) = (p · scale) · code + p · min */
			int64_t c = kc0 + vi * 8, g = c / FG_Q4_GROUP;
			float pm = 0.0f;

			for (int64_t tt = slot; tt < nt; tt += slots) {
				int64_t r = row0 + tt;
				uint32_t w = *(const uint32_t *)(vs.p + ((r * cols + c) >> 1));
				float2 sm = cb_unpack2(*(const uint32_t *)(vs.prm + (r * groups + g) * 4));
				float nv[8], p = sc[tt], ps = p * sm.x;

				dc_nib8(w, nv);
				pm += p * sm.y;
#pragma unroll
				for (int j = 0; j < 8; j++)
					o[j] += ps * nv[j];
			}
			for (int j = 0; j < 8; j++)
				o[j] += pm;
		} else {
			for (int64_t tt = slot; tt < nt; tt += slots) {
				float vv[8], p = sc[tt];

				dc_load8<Q4, VEC>(vs, row0 + tt, kc0 + vi * 8, kc0 + d, vv);
				for (int j = 0; j < 8; j++)
					o[j] += p * vv[j];
			}
		}
		for (int j = 0; j < 8; j++)
			acc[slot * nvec * 8 + vi * 8 + j] = o[j];
	}
	__syncthreads();
	for (int64_t j = tid; j < d; j += DC_THREADS) {
		float r = 0.0f;

		for (int64_t sl = 0; sl < slots; sl++)
			r += acc[sl * nvec * 8 + j];
		if (splits == 1) {
			a.out[b * a.ldo + c0 + j] = cb_f2h(sum > 0.0f ? r / sum : 0.0f);
		} else {
			int64_t bhs = (int64_t)gridDim.x, idx = split * bhs + bh;

			part[2 * splits * bhs + idx * d + j] = r;
			if (j == 0) {
				part[idx] = nt ? mx : -INFINITY;
				part[splits * bhs + idx] = sum;
			}
		}
	}
}

__global__ void __launch_bounds__(DC_THREADS)
cb_decode_combine(struct cublas_attn a, int splits, int64_t bhs, const float *part)
{
	int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, d = a.head_dim;
	float m = -INFINITY, l = 0.0f;

	for (int s = 0; s < splits; s++)
		m = fmaxf(m, part[s * bhs + bh]);
	for (int s = 0; s < splits; s++) {
		float ms = part[s * bhs + bh];

		if (ms != -INFINITY)
			l += part[splits * bhs + s * bhs + bh] * exp2f(ms - m);
	}
	for (int64_t j = threadIdx.x; j < d; j += DC_THREADS) {
		float r = 0.0f;

		for (int s = 0; s < splits; s++) {
			float ms = part[s * bhs + bh];

			if (ms != -INFINITY)
				r += part[2 * splits * bhs + (s * bhs + bh) * d + j] * exp2f(ms - m);
		}
		a.out[b * a.ldo + h * d + j] = cb_f2h(l > 0.0f ? r / l : 0.0f);
	}
}

static int64_t dc_chunk(int64_t len, int splits)
{
	return (len + splits - 1) / splits;
}

static size_t dc_smem(int64_t d, int64_t chunk)
{
	int64_t nvec = (d + 7) / 8;

	return (size_t)(dc_round4(d) + dc_round4(chunk) + 32 + (DC_THREADS / nvec) * nvec * 8 +
			dc_round4(nvec)) * sizeof(float);
}

extern "C" int cublas_decode_splits(const struct cublas_attn *a, int sms, size_t max_floats,
				    size_t *floats)
{
	int64_t bh = a->batch * a->heads, want = 4 * (int64_t)sms, splits = 1;

	if (bh < want)
		splits = (want + bh - 1) / bh;
	if (splits > (a->len + 31) / 32)
		splits = (a->len + 31) / 32; /* at least 32 positions per block */
	if (splits < (a->len + DC_MAX_CHUNK - 1) / DC_MAX_CHUNK)
		splits = (a->len + DC_MAX_CHUNK - 1) / DC_MAX_CHUNK;
	if (splits < 1)
		splits = 1;
	splits = (a->len + dc_chunk(a->len, (int)splits) - 1) / dc_chunk(a->len, (int)splits);
	*floats = splits > 1 ? (size_t)(splits * bh * (a->head_dim + 2)) : 0;
	while (splits > 1 && *floats > max_floats &&
	       splits > (a->len + DC_MAX_CHUNK - 1) / DC_MAX_CHUNK) {
		splits--;
		*floats = splits > 1 ? (size_t)(splits * bh * (a->head_dim + 2)) : 0;
	}
	return (int)splits;
}

template <bool Q4, bool VEC>
static void dc_launch(cudaStream_t s, const struct cublas_attn *a, float sl2, int64_t chunk,
		      int splits, float *part)
{
	dim3 grid((unsigned)(a->batch * a->heads), (unsigned)splits);

	if (a->group > 1)
		cb_decode_kernel<Q4, VEC, true><<<grid, DC_THREADS, dc_smem(a->head_dim, chunk),
						  s>>>(*a, sl2, chunk, splits, part);
	else
		cb_decode_kernel<Q4, VEC, false><<<grid, DC_THREADS, dc_smem(a->head_dim, chunk),
						   s>>>(*a, sl2, chunk, splits, part);
}

extern "C" cudaError_t cublas_k_attention_decode(cudaStream_t s, const struct cublas_attn *a,
						 int splits, float *part)
{
	int64_t d = a->head_dim, chunk = dc_chunk(a->len, splits);
	float sl2 = a->scale * 1.4426950408889634f;
	bool vec;
	cudaError_t e;

	if (a->q4)
		vec = d % 8 == 0 && ((uintptr_t)a->k & 3) == 0 && ((uintptr_t)a->v & 3) == 0;
	else
		vec = d % 8 == 0 && a->ldk % 8 == 0 && a->ldv % 8 == 0 &&
		      ((uintptr_t)a->k & 15) == 0 && ((uintptr_t)a->v & 15) == 0;
	if (a->q4 && vec)
		dc_launch<true, true>(s, a, sl2, chunk, splits, part);
	else if (a->q4)
		dc_launch<true, false>(s, a, sl2, chunk, splits, part);
	else if (vec)
		dc_launch<false, true>(s, a, sl2, chunk, splits, part);
	else
		dc_launch<false, false>(s, a, sl2, chunk, splits, part);
	e = cudaGetLastError();
	if (e != cudaSuccess || splits == 1)
		return e;
	cb_decode_combine<<<(unsigned)(a->batch * a->heads), DC_THREADS, 0, s>>>(
		*a, splits, a->batch * a->heads, part);
	return cudaGetLastError();
}

extern "C" cudaError_t cublas_k_decode_setup(void)
{
	return cudaSuccess; /* at most ~37 KiB of shared memory: no opt-in needed */
}
