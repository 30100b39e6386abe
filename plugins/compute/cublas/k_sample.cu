/* plugins/compute/cublas/k_sample.cu - each row's next token where the
 * logits are: the argmax, or the token fgcore/sampling.h defines.
 *
 * One block per row.  The definition walks the ids in key order and stops
 * where a running count (top_k) or running weight (top_p, the draw) reaches a
 * target; here that walk is a search over histograms of the keys, every sum
 * exact (integers), so the order of the atomic additions does not matter.
 *
 * fp16 logits make the key's value part (its top 32 bits) a function of its
 * top 19 bits: a float converted from fp16 has 13 zero mantissa bits, so
 * bits 44..32 follow from the sign.  Bits 63..53 select one of 2048 "hi"
 * bins, bits 52..45 one of 256 "lo" bins inside it, and a (hi, lo) pair is
 * one logit value as the key sees it (-0 is 0, NaN is -inf): all its ids
 * weigh the same and follow each other in id order.  So:
 *   pass 0  the smallest key (the argmax, or the max and the first of the
 *           order) and, with top_k, the count of every hi bin;
 *   pass 1  the weight of every hi bin (only ids in the window, and with
 *           top_k only bins up to the top_k-th id's); with top_k, the lo
 *           counts of that id's bin;
 *   then    lo counts of the hi bins where the top_p cut and the draw land,
 *           a pass each unless already known (the pass for the cut also
 *           counts the bins the draw can reach, when few);
 *   last    the j-th id of the chosen value in id order (a count per thread
 *           over a contiguous range, a scan, one range walked again).
 * A greedy row costs pass 0 alone, a sampled one 3 to 5 passes over its
 * logits, of which only pass 1 evaluates weights (fp64, one per id in the
 * window).
 */
#include <math.h>
#include <stdint.h>

#include <fgcore/sampling.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define CS_THREADS 512
#define CS_WARPS (CS_THREADS / 32)
#define CS_HI 2048 /* key bits 63..53 */
#define CS_LO 256  /* key bits 52..45 */
#define CS_SLOTS 4 /* hi bins with lo counts: top_k's, top_p's and the draw's, or more */

CB_DEV uint32_t cs_hi(uint64_t key)
{
	return (uint32_t)(key >> 53);
}

CB_DEV uint32_t cs_lo(uint64_t key)
{
	return (uint32_t)(key >> 45) & (CS_LO - 1);
}

/* cs_finish_slots scans each slot's counts and weights with a warp apiece. */
static_assert(CS_WARPS >= 2 * CS_SLOTS, "too few warps for the slots' scans");

struct cs_smem {
	uint64_t w_hi[CS_HI];         /* weights, then their inclusive prefix sums */
	uint32_t c_hi[CS_HI];         /* counts (top_k only), then prefix sums */
	uint64_t w_lo[CS_SLOTS][CS_LO];
	uint32_t c_lo[CS_SLOTS][CS_LO];
	float v_lo[CS_SLOTS][CS_LO];  /* a logit of the bin (all weigh the same) */
	uint64_t red[CS_WARPS];
	unsigned long long kmin[2];   /* smallest key; smallest key of a non-NaN */
	int32_t found;
};

/* The hi bins whose lo counts are known (slot s holds bin[s]).  Indexed
 * with unrolled loops only, so that it stays in registers. */
struct cs_slots {
	int n;
	uint32_t bin[CS_SLOTS];

	__device__ __forceinline__ int find(uint32_t h) const
	{
		int s = -1;
#pragma unroll
		for (int i = 0; i < CS_SLOTS; i++)
			if (i < n && bin[i] == h)
				s = i;
		return s;
	}

	__device__ __forceinline__ void add(uint32_t h)
	{
#pragma unroll
		for (int i = 0; i < CS_SLOTS; i++)
			if (i == n)
				bin[i] = h;
		n++;
	}
};

/* f(id, logit) for ids j..j+7 from one 16-byte load. */
template <typename F>
CB_DEV void cs_eight(const uint16_t *row, int64_t j, F &f)
{
	uint4 u = *(const uint4 *)(row + j);
	uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
	for (int e = 0; e < 8; e++)
		f((int32_t)(j + e), cb_h2f((uint16_t)(w[e / 2] >> (16 * (e % 2)))));
}

/* f(id, logit) for every id of the row, spread over the block (VEC: n % 8
 * == 0 and the row 16-byte aligned). */
template <bool VEC, typename F>
CB_DEV void cs_each(const uint16_t *row, int64_t n, F f)
{
	if (VEC)
		for (int64_t j = (int64_t)threadIdx.x * 8; j < n; j += CS_THREADS * 8)
			cs_eight(row, j, f);
	else
		for (int64_t j = threadIdx.x; j < n; j += CS_THREADS)
			f((int32_t)j, cb_h2f(row[j]));
}

/* f(id, logit) for ids [b, e) in order, by one thread (VEC: b and e multiples of 8). */
template <bool VEC, typename F>
CB_DEV void cs_span(const uint16_t *row, int64_t b, int64_t e, F f)
{
	if (VEC)
		for (int64_t j = b; j < e; j += 8)
			cs_eight(row, j, f);
	else
		for (int64_t j = b; j < e; j++)
			f((int32_t)j, cb_h2f(row[j]));
}

CB_DEV uint64_t cs_warp_min(uint64_t v)
{
	for (int o = 16; o > 0; o >>= 1) {
		uint64_t t = __shfl_xor_sync(0xffffffffu, v, o);
		v = t < v ? t : v;
	}
	return v;
}

/* Sum of v over the threads before this one; the whole block calls it. */
CB_DEV uint64_t cs_block_excl(uint64_t v, uint64_t *red)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	uint64_t incl = v, off = 0;

	for (int o = 1; o < 32; o <<= 1) {
		uint64_t t = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += t;
	}
	if (lane == 31)
		red[warp] = incl;
	__syncthreads();
	for (int w = 0; w < warp; w++)
		off += red[w];
	__syncthreads(); /* red is free again */
	return off + incl - v;
}

/* a[0..nb) -> its inclusive prefix sums, by the whole block. */
template <typename T>
CB_DEV void cs_scan_block(T *a, int nb, uint64_t *red)
{
	int per = (nb + CS_THREADS - 1) / CS_THREADS, b0 = threadIdx.x * per;
	int b1 = b0 + per < nb ? b0 + per : nb;
	uint64_t s = 0;

	for (int i = b0; i < b1; i++)
		s += a[i];
	uint64_t run = cs_block_excl(s, red);
	for (int i = b0; i < b1; i++) {
		run += a[i];
		a[i] = (T)run;
	}
	__syncthreads();
}

/* The same for CS_LO entries, by one warp (8 per lane). */
template <typename T>
CB_DEV void cs_scan_warp(T *a)
{
	int lane = threadIdx.x % 32;
	T *p = a + lane * (CS_LO / 32);
	uint64_t s = 0, incl;

	for (int i = 0; i < CS_LO / 32; i++)
		s += p[i];
	incl = s;
	for (int o = 1; o < 32; o <<= 1) {
		uint64_t t = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += t;
	}
	uint64_t run = incl - s;
	for (int i = 0; i < CS_LO / 32; i++) {
		run += p[i];
		p[i] = (T)run;
	}
}

/* The first b whose inclusive prefix pre[b] reaches t (the last bin if none). */
template <typename T>
CB_DEV uint32_t cs_search(const T *pre, uint32_t nb, uint64_t t)
{
	uint32_t lo = 0, hi = nb - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if ((uint64_t)pre[mid] >= t)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

template <typename T>
CB_DEV uint64_t cs_before(const T *pre, uint32_t b)
{
	return b ? (uint64_t)pre[b - 1] : 0;
}

/* fp16 bit patterns by ascending value, NaNs outside [rank(-inf), rank(+inf)]. */
CB_DEV uint32_t cs_rank(uint16_t h)
{
	return (h & 0x8000u) ? 0x7fffu - (h & 0x7fffu) : 0x8000u + h;
}

CB_DEV uint16_t cs_unrank(uint32_t r)
{
	return (uint16_t)(r >= 0x8000u ? r - 0x8000u : 0x8000u | (0x7fffu - r));
}

/* The smallest fp16 logit in the window (fg_sample_in_window is monotone in
 * l, and the max is in it): below it every weight is 0 without computing it.
 * +inf when the max (bits mh) is not finite: only +inf can weigh then. */
CB_DEV float cs_window_floor(uint16_t mh, float max, float T, int S)
{
	if (!(max > -INFINITY && max < INFINITY))
		return INFINITY;
	uint32_t out = cs_rank(0xfc00u), in = cs_rank(mh);

	while (in - out > 1) {
		uint32_t mid = out + (in - out) / 2;
		if (fg_sample_in_window(cb_h2f(cs_unrank(mid)), max, T, S))
			in = mid;
		else
			out = mid;
	}
	return cb_h2f(cs_unrank(in));
}

/* What a row's parameters make of its logits, uniform over the block. */
struct cs_row {
	float max, T;
	int S;
};

/* After a pass counted slots [s0, s1): their lo weights (count x the
 * value's weight), then prefix sums of counts and weights. */
CB_DEV void cs_finish_slots(cs_smem &sm, int s0, int s1, const cs_row &rw)
{
	for (int i = threadIdx.x; i < (s1 - s0) * CS_LO; i += CS_THREADS) {
		int s = s0 + i / CS_LO, b = i % CS_LO;
		uint32_t c = sm.c_lo[s][b];

		sm.w_lo[s][b] = c ? c * fg_sample_weight(sm.v_lo[s][b], rw.max, rw.T, rw.S) : 0;
	}
	__syncthreads();
	int warp = threadIdx.x / 32;
	if (warp < 2 * (s1 - s0)) {
		if (warp % 2)
			cs_scan_warp(sm.w_lo[s0 + warp / 2]);
		else
			cs_scan_warp(sm.c_lo[s0 + warp / 2]);
	}
	__syncthreads();
}

/* Count id (key, logit) into its slot's lo bin when its hi bin is one of
 * slots [s0, sl.n); the first id of a bin leaves its logit. */
CB_DEV void cs_lo_count(cs_smem &sm, const cs_slots &sl, int s0, uint64_t key, float l)
{
	uint32_t h = cs_hi(key);
#pragma unroll
	for (int s = 0; s < CS_SLOTS; s++)
		if (s >= s0 && s < sl.n && h == sl.bin[s]) {
			uint32_t b = cs_lo(key);
			if (atomicAdd(&sm.c_lo[s][b], 1u) == 0)
				sm.v_lo[s][b] = l;
		}
}

/* A pass that counts the lo bins of slots [s0, sl.n). */
template <bool VEC>
CB_DEV void cs_lo_pass(cs_smem &sm, const uint16_t *row, int64_t n, const cs_slots &sl, int s0,
		       const cs_row &rw)
{
	cs_each<VEC>(row, n, [&](int32_t id, float l) {
		cs_lo_count(sm, sl, s0, fg_sample_key(l, id), l);
	});
	__syncthreads();
	cs_finish_slots(sm, s0, sl.n, rw);
}

/* Where the running weight first reaches t (1 <= t <= the kept weight): the
 * value (hi bin h with a slot, lo bin b), the weight before its first id,
 * and the weight of each of its ids (> 0). */
struct cs_at {
	uint32_t h, b;
	uint64_t before, w;
};

CB_DEV cs_at cs_locate(const cs_smem &sm, const cs_slots &sl, uint64_t t, const cs_row &rw)
{
	cs_at a;
	a.h = cs_search(sm.w_hi, CS_HI, t);
	int s = sl.find(a.h);
	uint64_t hb = cs_before(sm.w_hi, a.h);
	a.b = cs_search(sm.w_lo[s], CS_LO, t - hb);
	a.before = hb + cs_before(sm.w_lo[s], a.b);
	a.w = fg_sample_weight(sm.v_lo[s][a.b], rw.max, rw.T, rw.S);
	return a;
}

/* The j-th id (from 1) in id order whose key's top 19 bits are `value`. */
template <bool VEC>
CB_DEV int32_t cs_select(cs_smem &sm, const uint16_t *row, int64_t n, uint64_t value, uint64_t j)
{
	const int64_t step = VEC ? 8 : 1, chunk = CS_THREADS * step;
	int64_t per = (n + chunk - 1) / chunk * step, b0 = threadIdx.x * per;
	int64_t b1 = b0 + per < n ? b0 + per : n;
	uint64_t c = 0;

	if (b0 < b1)
		cs_span<VEC>(row, b0, b1, [&](int32_t id, float l) {
			c += (fg_sample_key(l, id) >> 45) == value;
		});
	uint64_t before = cs_block_excl(c, sm.red);
	if (before < j && j <= before + c) {
		uint64_t left = j - before;
		cs_span<VEC>(row, b0, b1, [&](int32_t id, float l) {
			if (left && (fg_sample_key(l, id) >> 45) == value && --left == 0)
				sm.found = id;
		});
	}
	__syncthreads();
	return sm.found;
}

template <bool VEC>
__global__ void __launch_bounds__(CS_THREADS, 2)
cs_sample_kernel(const uint16_t *x, int64_t n, int64_t ld, const struct cublas_sample_row *prm,
		 int32_t *out)
{
	__shared__ cs_smem sm;
	const uint16_t *row = x + (int64_t)blockIdx.x * ld;
	const struct cublas_sample_row p = prm[blockIdx.x];
	const bool greedy = p.temperature <= 0; /* NaN samples: every weight 0 */
	const bool topk = !greedy && p.top_k > 0 && p.top_k < n;
	const bool topp = p.top_p > 0 && p.top_p < 1;
	cs_slots sl;

	sl.n = 0;
	for (int i = threadIdx.x; i < CS_HI; i += CS_THREADS) {
		sm.w_hi[i] = 0;
		sm.c_hi[i] = 0;
	}
	for (int i = threadIdx.x; i < CS_SLOTS * CS_LO; i += CS_THREADS)
		sm.c_lo[i / CS_LO][i % CS_LO] = 0;
	if (threadIdx.x == 0) {
		sm.kmin[0] = sm.kmin[1] = ~0ull; /* no key: ids are below 2^31 */
		sm.found = 0;
	}
	__syncthreads();

	/* pass 0 */
	uint64_t kall = ~0ull, knum = ~0ull;
	cs_each<VEC>(row, n, [&](int32_t id, float l) {
		uint64_t k = fg_sample_key(l, id);
		kall = k < kall ? k : kall;
		if (l == l && k < knum)
			knum = k;
		if (topk)
			atomicAdd(&sm.c_hi[cs_hi(k)], 1u);
	});
	kall = cs_warp_min(kall);
	knum = cs_warp_min(knum);
	if (threadIdx.x % 32 == 0) {
		atomicMin(&sm.kmin[0], (unsigned long long)kall);
		atomicMin(&sm.kmin[1], (unsigned long long)knum);
	}
	__syncthreads();
	kall = sm.kmin[0];
	knum = sm.kmin[1];
	if (greedy) { /* cublas_k_argmax's answer: the first largest, NaN skipped; -1 when none is above -inf */
		if (threadIdx.x == 0)
			out[blockIdx.x] = knum == ~0ull || !(cb_h2f(row[(uint32_t)knum]) > -INFINITY)
						  ? -1 : (int32_t)(uint32_t)knum;
		return;
	}

	const uint16_t mh = row[(uint32_t)kall];
	cs_row rw;
	rw.max = cb_h2f(mh);
	if (rw.max != rw.max)
		rw.max = -INFINITY; /* the first is NaN only when nothing is above -inf */
	rw.T = p.temperature;
	rw.S = fg_sample_scale(n);
	const float floor_l = cs_window_floor(mh, rw.max, rw.T, rw.S);

	/* top_k: the hi bin of the top_k-th id and its rank there */
	uint32_t hk = CS_HI - 1;
	uint64_t k_in = 0;
	if (topk) {
		cs_scan_block(sm.c_hi, CS_HI, sm.red);
		hk = cs_search(sm.c_hi, CS_HI, (uint64_t)p.top_k);
		k_in = (uint64_t)p.top_k - cs_before(sm.c_hi, hk);
		sl.add(hk);
	}

	/* pass 1: bins past hk are never kept, their weights never read */
	cs_each<VEC>(row, n, [&](int32_t id, float l) {
		uint64_t k = fg_sample_key(l, id);
		uint32_t h = cs_hi(k);

		if (h <= hk && l >= floor_l) {
			uint64_t w = fg_sample_weight(l, rw.max, rw.T, rw.S);
			if (w)
				atomicAdd((unsigned long long *)&sm.w_hi[h], (unsigned long long)w);
		}
		if (topk)
			cs_lo_count(sm, sl, 0, k, l);
	});
	__syncthreads();
	if (topk)
		cs_finish_slots(sm, 0, 1, rw);
	cs_scan_block(sm.w_hi, CS_HI, sm.red);

	uint64_t sum = sm.w_hi[CS_HI - 1];
	if (topk) { /* the kept weight: through the k_in-th id of hk's value at the cut */
		uint32_t b = cs_search(sm.c_lo[0], CS_LO, k_in);
		uint64_t j = k_in - cs_before(sm.c_lo[0], b);
		sum = cs_before(sm.w_hi, hk) + cs_before(sm.w_lo[0], b) +
		      j * fg_sample_weight(sm.v_lo[0][b], rw.max, rw.T, rw.S);
	}
	if (sum == 0) { /* nothing above -inf: the row says nothing (fgcore/sampling.h) */
		if (threadIdx.x == 0)
			out[blockIdx.x] = -1;
		return;
	}

	/* Searches with the full bin weights stop within the kept ids: targets
	 * are at most the kept weight, which the bins up to the cut reach. */
	uint64_t mass = sum;
	if (topp) {
		uint64_t target = fg_sample_top_p_target(sum, p.top_p);
		uint32_t hp = cs_search(sm.w_hi, CS_HI, target);

		if (sl.find(hp) < 0) {
			int s0 = sl.n;
			/* the draw lands in [ha, hb] whatever the cut's value: count
			 * those bins in the same pass when the slots suffice */
			uint64_t most = sm.w_hi[hp] < sum ? sm.w_hi[hp] : sum;
			uint32_t ha = cs_search(sm.w_hi, CS_HI, fg_sample_point(p.draw, target) + 1);
			uint32_t hb = cs_search(sm.w_hi, CS_HI, fg_sample_point(p.draw, most) + 1);
			int need = 1;

			for (uint32_t h = ha; h <= hb && need <= CS_SLOTS; h++)
				need += h != hp && sl.find(h) < 0 && sm.w_hi[h] != cs_before(sm.w_hi, h);
			sl.add(hp);
			if (sl.n - 1 + need <= CS_SLOTS)
				for (uint32_t h = ha; h <= hb; h++)
					if (h != hp && sl.find(h) < 0 &&
					    sm.w_hi[h] != cs_before(sm.w_hi, h))
						sl.add(h);
			cs_lo_pass<VEC>(sm, row, n, sl, s0, rw);
		}
		cs_at a = cs_locate(sm, sl, target, rw);
		mass = a.before + (target - a.before + a.w - 1) / a.w * a.w;
	}

	/* the draw: the first id whose running weight exceeds r */
	uint64_t r = fg_sample_point(p.draw, mass);
	uint32_t hf = cs_search(sm.w_hi, CS_HI, r + 1);
	if (sl.find(hf) < 0) {
		int s0 = sl.n;
		sl.add(hf);
		cs_lo_pass<VEC>(sm, row, n, sl, s0, rw);
	}
	cs_at a = cs_locate(sm, sl, r + 1, rw);
	uint64_t j = (r - a.before) / a.w + 1;
	int32_t tok = cs_select<VEC>(sm, row, n, (uint64_t)a.h << 8 | a.b, j);
	if (threadIdx.x == 0)
		out[blockIdx.x] = tok;
}

extern "C" cudaError_t cublas_k_sample(cudaStream_t s, int64_t rows, int64_t cols,
				       const uint16_t *x, int64_t ld,
				       const struct cublas_sample_row *p, int32_t *out)
{
	if (rows <= 0)
		return cudaGetLastError();
	if (cols % 8 == 0 && ld % 8 == 0 && ((uintptr_t)x & 15) == 0)
		cs_sample_kernel<true><<<(unsigned)rows, CS_THREADS, 0, s>>>(x, cols, ld, p, out);
	else
		cs_sample_kernel<false><<<(unsigned)rows, CS_THREADS, 0, s>>>(x, cols, ld, p, out);
	return cudaGetLastError();
}
