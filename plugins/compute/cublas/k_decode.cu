/* plugins/compute/cublas/k_decode.cu - attention of one new token over the KV
 * cache (fp16, or 4-bit or fp8 groups along the row), flash-decoding style.  A 4-bit
 * cache of head size 64 or 128 runs on the tensor cores instead
 * (k_decode_mma.cuh); this file's 4-bit paths take the other head sizes.
 *
 * Decode is bound by reading the cache, so the design keeps every warp's
 * loads in flight.  A block of 4 warps takes one sequence, G query heads of
 * one k/v head (G > 1 only for grouped-query attention over fp16: the k/v
 * bytes are read once for the G heads) and one chunk of the key positions.
 * Within a warp, lpp lanes (a power of two) share a key position, each owning
 * C consecutive columns of the head: 8 fp16 values, 16 fp8 or 32 4-bit codes
 * per 16-byte load; the warp's 32 / lpp slots each take their own position.  A
 * warp walks tiles of DC_U positions per slot, copied with cp.async into a
 * private ring of DC_STAGES tiles in shared memory (each lane reads back only
 * what it copied, so no barrier in the loop), k and v of a tile together,
 * the next DC_STAGES - 1 tiles in flight while one is computed.  Softmax is
 * online (running max, sum and unnormalised output per slot; the max is
 * only moved when a score exceeds it by 2^DC_LAZY, so rescaling is rare).
 * At the end the slots of a warp are merged by shuffles, the warps through
 * shared memory.  When batch * heads / G blocks are too few to fill the GPU
 * the positions are split over more blocks, each writing its max, sum and
 * unnormalised output, and a second kernel combines them; any len works in
 * one block (nothing is kept per position).
 *
 * 4-bit codes are made floats by one byte permute each (x = 0.5 + code /
 * 256); code · scale + min = 256 · scale · x + (min - 128 · scale), so the
 * scale goes on the dot product (or the probability) and the min on the sum
 * of q (or of the probabilities) once per lane and position.  fp8 codes become
 * fp16 pairs exactly (cb_f8_pair) and their group's scale goes on the dot
 * product or the probability the same way (16 columns of a lane lie in one
 * group of 64).  Heads whose
 * size or alignment rule out 16-byte loads take 4-byte codes, or scalar
 * loads (the correct fallback).
 */
#include <math.h>
#include <stdint.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/common.cuh"
#include "plugins/compute/cublas/kernels.h"

#define DC_WARPS 4
#define DC_THREADS (32 * DC_WARPS)
#define DC_U 2          /* positions per slot and tile */
#define DC_STAGES 3     /* tiles of a warp's ring: DC_STAGES - 1 in flight while one is used */
#define DC_LAZY 8.0f    /* move the running max only past 2^8 of growth (fp32 has room) */
#define DC_MIN_CHUNK 64 /* positions per block at least, when splitting */

/* How a lane gets its C columns of a row. */
enum {
	DC_F16,  /* 16-byte fp16 loads through the ring, C = 8 */
	DC_Q4X,  /* 16 bytes of codes (C = 32, half a group) and the (scale, min) pair */
	DC_Q4W,  /* 4 bytes of codes (C = 8), the pair */
	DC_F8X,  /* 16 bytes of codes (C = 16, a quarter group) and the group's scale */
	DC_F16S, /* scalar loads, any head_dim or alignment */
	DC_Q4S,
	DC_F8S,
};

struct dc_src {
	const uint8_t *p; /* fp16 rows, or the encoded Q4_COLS / F8_COLS tensor */
	const uint8_t *prm; /* encoded: the (scale, min) pairs or the scales */
	int64_t ld;       /* fp16: elements between rows */
	int64_t cols, groups;
};

/* Scalar path: values [c, c + 8) of row r (those at or past `lim` read as 0). */
template <int KIND>
CB_DEV void dc_load8(const dc_src &s, int64_t r, int64_t c, int64_t lim, float v[8])
{
	const uint16_t *row = (const uint16_t *)s.p + r * s.ld;

	for (int j = 0; j < 8; j++) {
		int64_t col = c + j, el = r * s.cols + col;
		unsigned byte, q;
		float2 sm;

		if (col >= lim) {
			v[j] = 0.0f;
		} else if (KIND == DC_F16S) {
			v[j] = cb_h2f(row[col]);
		} else if (KIND == DC_F8S) {
			v[j] = fg_f8_value(s.p[el], fg_f8_scale_load(s.prm, (uint64_t)(r * s.groups +
									   col / FG_F8_GROUP)));
		} else {
			byte = s.p[el >> 1];
			q = (el & 1) ? (byte & 15u) : (byte >> 4);
			sm = cb_unpack2(*(const uint32_t *)(s.prm +
							    (r * s.groups + col / FG_Q4_GROUP) * 4));
			v[j] = (float)q * sm.x + sm.y;
		}
	}
}

/* The 8 codes of a word as x = 0.5 + code / 256, element order (byte j: high
 * nibble first): the code becomes bits 16..19 of the float 0x3f000000 (0.5),
 * one byte permute per value and no conversion.  x has 9 significant bits,
 * so q · x is exact to fp32; the offset costs ~4 bits of the dot product. */
CB_DEV void dc_x8(uint32_t w, float x[8])
{
	uint32_t lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;

#pragma unroll
	for (int j = 0; j < 4; j++) {
		x[2 * j] = __int_as_float(__byte_perm(hi, 0x3f000000u, 0x7054 | (j << 8)));
		x[2 * j + 1] = __int_as_float(__byte_perm(lo, 0x3f000000u, 0x7054 | (j << 8)));
	}
}

/* N bytes global -> shared, zero-filled when !ok (then src is only a valid
 * address, not read).  The "memory" clobbers keep the compiler from moving
 * the ring's shared loads across the copies and waits: no barrier orders them. */
template <int N>
CB_DEV void dc_cp(void *dst, const void *src, bool ok)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	if (N == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
			     :: "r"(cb_smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0) : "memory");
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
			     :: "r"(cb_smem_addr(dst)), "l"(src), "n"(N), "r"(ok ? N : 0) : "memory");
#else
	if (N == 16)
		*(uint4 *)dst = ok ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
	else
		*(uint32_t *)dst = ok ? *(const uint32_t *)src : 0u;
#endif
}

CB_DEV void dc_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
CB_DEV void dc_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

/* Bytes of a ring slot: one lane's chunk of one row. */
static __host__ __device__ constexpr int dc_slot_bytes(int kind)
{
	return kind == DC_Q4W ? 4 : 16;
}

/* Ring slot of (stage, position u, k or v, lane); the pairs' ring has the same index. */
CB_DEV int dc_slot(int st, int u, int kv, int lane)
{
	return ((st * DC_U + u) * 2 + kv) * 32 + lane;
}

/* Where a lane's chunks of k, v and the pairs lie for its slot's position in
 * tile 0 (t0 + slot), and the bytes from one position to the next. */
struct dc_lane {
	const uint8_t *k, *v, *kp, *vp;
	int64_t rk, rv, rp;
	int64_t ring, wdt; /* in a ring, positions wdt on from the lane's first are ring rows back */
};

/* The row of a sequence that holds position t: t, or t % ring in a ring. */
CB_DEV int64_t dc_pos(const struct cublas_attn &a, int64_t t)
{
	return a.ring ? t % a.ring : t;
}

/* Copy the lane's chunks of the block's tile i (positions t0 + i * tp + u * P
 * + slot) into stage st; past t1 (or past the head) zero-filled. */
template <int KIND>
CB_DEV void dc_issue(const dc_lane &ln, const dc_src &ks, const dc_src &vs, bool cok,
		     int64_t tl, int64_t t1, int64_t i, int64_t tp, int P, int lane, int st,
		     uint8_t *dat, uint32_t *prm)
{
	constexpr int SB = dc_slot_bytes(KIND);

#pragma unroll
	for (int u = 0; u < DC_U; u++) {
		int64_t dt = i * tp + u * P;
		bool ok = cok && tl + dt < t1;
		int ik = dc_slot(st, u, 0, lane), iv = dc_slot(st, u, 1, lane);
		int64_t rows = dt >= ln.wdt ? dt - ln.ring : dt; /* (a block's positions span <= ring) */

		/* nothing is read when !ok: the tensor's start stands in for the address */
		dc_cp<SB>(dat + ik * SB, ok ? ln.k + rows * ln.rk : ks.p, ok);
		dc_cp<SB>(dat + iv * SB, ok ? ln.v + rows * ln.rv : vs.p, ok);
		if (KIND != DC_F16) {
			dc_cp<4>(prm + ik, ok ? ln.kp + rows * ln.rp : ks.prm, ok);
			dc_cp<4>(prm + iv, ok ? ln.vp + rows * ln.rp : vs.prm, ok);
		}
	}
}

/* The lane's C values of one row: fp16 and scalar paths the values themselves
 * (0 when !ok); 4-bit ring paths x (dc_x8) and the (scale, min) pair in *sm;
 * the fp8 ring path the codes' E4M3 values and the group's scale in sm->x. */
template <int KIND>
CB_DEV void dc_vals(const dc_src &s, const uint8_t *dat, const uint32_t *prm, int i, int64_t r,
		    int64_t c, int64_t lim, bool ok, float *v, float2 *sm)
{
	if (KIND == DC_F16) {
		uint4 w = *(const uint4 *)(dat + i * 16);
		float2 a = cb_unpack2(w.x), b = cb_unpack2(w.y), e = cb_unpack2(w.z),
		       f = cb_unpack2(w.w);

		v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
		v[4] = e.x, v[5] = e.y, v[6] = f.x, v[7] = f.y;
	} else if (KIND == DC_Q4X) {
		uint4 w = *(const uint4 *)(dat + i * 16);

		dc_x8(w.x, v);
		dc_x8(w.y, v + 8);
		dc_x8(w.z, v + 16);
		dc_x8(w.w, v + 24);
		*sm = cb_unpack2(prm[i]);
	} else if (KIND == DC_Q4W) {
		dc_x8(*(const uint32_t *)(dat + i * 4), v);
		*sm = cb_unpack2(prm[i]);
	} else if (KIND == DC_F8X) {
		uint4 w = *(const uint4 *)(dat + i * 16);
		uint32_t wj[4] = { w.x, w.y, w.z, w.w };

#pragma unroll
		for (int j = 0; j < 4; j++) {
			float2 lo = cb_unpack2(cb_f8_pair(wj[j])), hi = cb_unpack2(cb_f8_pair(wj[j] >> 16));

			v[4 * j] = lo.x, v[4 * j + 1] = lo.y, v[4 * j + 2] = hi.x, v[4 * j + 3] = hi.y;
		}
		*sm = make_float2(__uint_as_float(prm[i]), 0.0f);
	} else if (ok) {
		dc_load8<KIND>(s, r, c, lim, v);
	} else {
		for (int j = 0; j < 8; j++)
			v[j] = 0.0f;
	}
}

/* Grid (batch * heads / G, splits).  lpp: lanes per position (a power of two,
 * at least the lane chunks of a head). */
/* Column col of query head h of sequence b, merged over the NW warps of a
 * block: each warp's max in wm and sum in wl (slot g of the S a warp keeps),
 * its unnormalised output in row (w * S + g) of red (ld values a row).  One
 * split writes the output; several write the unnormalised value, the max and
 * the sum to part, for cb_decode_combine. */
template <int NW, int S, typename I>
CB_DEV void dc_merge(const struct cublas_attn &a, const float *wm, const float *wl,
		     const float *red, I g, I ld, I col, int64_t b, int64_t h, int64_t d,
		     int64_t split, int splits, float *part)
{
	float mm = -INFINITY, sum = 0.0f, r = 0.0f;

	for (int w = 0; w < NW; w++)
		mm = fmaxf(mm, wm[w * S + g]);
	for (int w = 0; w < NW; w++) {
		float mw = wm[w * S + g];

		if (mw != -INFINITY) {
			float f = exp2f(mw - mm);

			sum += wl[w * S + g] * f;
			r += red[(w * S + g) * ld + col] * f;
		}
	}
	if (splits == 1) {
		a.out[b * a.ldo + h * d + col] = cb_f2h(sum > 0.0f ? r / sum : 0.0f);
	} else {
		int64_t bhs = a.batch * a.heads, idx = split * bhs + b * a.heads + h;

		part[2 * splits * bhs + idx * d + col] = r;
		if (col == 0) {
			part[idx] = mm;
			part[splits * bhs + idx] = sum;
		}
	}
}

template <int KIND, int G>
__global__ void __launch_bounds__(DC_THREADS)
cb_decode_kernel(struct cublas_attn a, float sl2, float cap2, int64_t chunk, int splits, int lpp,
		 float *part)
{
	constexpr bool Q4 = KIND == DC_Q4X || KIND == DC_Q4W || KIND == DC_Q4S;
	constexpr bool F8 = KIND == DC_F8X || KIND == DC_F8S;
	constexpr bool RING = KIND == DC_F16 || KIND == DC_Q4X || KIND == DC_Q4W || KIND == DC_F8X;
	constexpr bool AFFINE = KIND == DC_Q4X || KIND == DC_Q4W; /* one pair per lane chunk */
	constexpr bool SCALED = KIND == DC_F8X;                   /* one scale per lane chunk */
	constexpr int C = KIND == DC_Q4X ? 32 : KIND == DC_F8X ? 16 : 8, SB = dc_slot_bytes(KIND);
	constexpr int RSLOTS = DC_STAGES * DC_U * 2 * 32; /* ring slots of a warp */
	extern __shared__ uint4 dsm[];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, P = 32 / lpp;
	int slot = lane / lpp, ci = lane % lpp;
	int64_t d = a.head_dim, nvec = (d + C - 1) / C, tp = (int64_t)P * DC_U;
	int64_t hpb = a.heads / G, bh = blockIdx.x, split = blockIdx.y;
	int64_t b = bh / hpb, h0 = bh % hpb * G;
	int64_t t0 = max((int64_t)a.pad[b], a.lo + split * chunk);
	int64_t t1 = min(a.len, a.lo + (split + 1) * chunk);
	int64_t nt = t1 > t0 ? t1 - t0 : 0, row0 = b * a.stride;
	int64_t kc0 = h0 / a.group * d, c = kc0 + ci * C; /* the lane's first column of k/v */
	int64_t cols = (a.group > 1 ? a.kv_heads : a.heads) * d;
	int64_t groups = (cols + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
	int64_t ntile = (nt + tp - 1) / tp, my = ntile > warp ? (ntile - warp + DC_WARPS - 1) / DC_WARPS : 0;
	bool cok = ci < nvec;
	dc_src ks = { (const uint8_t *)a.k, NULL, a.ldk, cols, groups };
	dc_src vs = { (const uint8_t *)a.v, NULL, a.ldv, cols, groups };
	uint8_t *dat = (uint8_t *)dsm + (size_t)warp * RSLOTS * SB;
	uint32_t *prm = (uint32_t *)((uint8_t *)dsm + (size_t)DC_WARPS * RSLOTS * SB) + warp * RSLOTS;
	dc_lane ln = { NULL, NULL, NULL, NULL, 0, 0, 0, a.ring, INT64_MAX };
	float q[G][C], qsum[G], o[G][C], corr[G], m[G], l[G];

	if (Q4) {
		ks.prm = ks.p + cb_q4_data_bytes(a.kv_rows, cols);
		vs.prm = vs.p + cb_q4_data_bytes(a.kv_rows, cols);
	} else if (F8) {
		ks.prm = ks.p + fg_f8_data_bytes((uint64_t)a.kv_rows, (uint64_t)cols);
		vs.prm = vs.p + fg_f8_data_bytes((uint64_t)a.kv_rows, (uint64_t)cols);
	}
#pragma unroll
	for (int g = 0; g < G; g++) {
		const uint16_t *qr = a.q + b * a.ldq + (h0 + g) * d;

		qsum[g] = 0.0f;
#pragma unroll
		for (int i = 0; i < C; i++) {
			int64_t col = ci * C + i;

			q[g][i] = cok && col < d ? cb_h2f(qr[col]) * sl2 : 0.0f;
			qsum[g] += q[g][i];
			o[g][i] = 0.0f;
		}
		corr[g] = 0.0f;
		m[g] = -INFINITY;
		l[g] = 0.0f;
	}

	if (RING) {
		int64_t r = row0 + dc_pos(a, t0 + slot);

		if (a.ring)
			ln.wdt = a.ring - dc_pos(a, t0 + slot);
		if (KIND == DC_F16) {
			ln.k = ks.p + (r * a.ldk + c) * 2;
			ln.v = vs.p + (r * a.ldv + c) * 2;
			ln.rk = a.ldk * 2;
			ln.rv = a.ldv * 2;
		} else if (F8) {
			ln.k = ks.p + r * cols + c;
			ln.v = vs.p + r * cols + c;
			ln.kp = ks.prm + (r * groups + c / FG_F8_GROUP) * 4;
			ln.vp = vs.prm + (r * groups + c / FG_F8_GROUP) * 4;
			ln.rk = ln.rv = cols;
			ln.rp = groups * 4;
		} else {
			/* cols is even here: r * cols / 2 + c / 2 */
			ln.k = ks.p + r * (cols / 2) + c / 2;
			ln.v = vs.p + r * (cols / 2) + c / 2;
			ln.kp = ks.prm + (r * groups + c / FG_Q4_GROUP) * 4;
			ln.vp = vs.prm + (r * groups + c / FG_Q4_GROUP) * 4;
			ln.rk = ln.rv = cols / 2;
			ln.rp = groups * 4;
		}
		for (int k = 0; k < DC_STAGES - 1; k++) {
			if (k < my)
				dc_issue<KIND>(ln, ks, vs, cok, t0 + slot, t1, warp + k * DC_WARPS, tp,
					       P, lane, k, dat, prm);
			dc_commit(); /* empty groups too: the count of groups stays uniform */
		}
	}
	for (int64_t k = 0, st = 0, sn = DC_STAGES - 1; k < my; k++) {
		int64_t tbase = t0 + (warp + k * DC_WARPS) * tp;
		float s[G][DC_U], p[G][DC_U];

		if (RING) {
			/* tile k (stage st) has landed; refill stage sn, used by tile k - 1 */
			dc_wait<DC_STAGES - 2>();
			if (k + DC_STAGES - 1 < my)
				dc_issue<KIND>(ln, ks, vs, cok, t0 + slot, t1,
					       warp + (k + DC_STAGES - 1) * DC_WARPS, tp, P, lane,
					       (int)sn, dat, prm);
			dc_commit();
			sn = st;
		}
		/* scores, in the log2 domain */
#pragma unroll
		for (int u = 0; u < DC_U; u++) {
			int64_t t = tbase + u * P + slot;
			bool ok = t < t1;
			float v[C];
			float2 sm = make_float2(0.0f, 0.0f);

			dc_vals<KIND>(ks, dat, prm, dc_slot((int)st, u, 0, lane), row0 + dc_pos(a, t), c, kc0 + d,
				      ok && cok, v, &sm);
#pragma unroll
			for (int g = 0; g < G; g++) {
				float dp[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, dot;

				/* four chains, not one of C dependent FMAs */
#pragma unroll
				for (int i = 0; i < C; i++)
					dp[i % 4] += q[g][i] * v[i];
				dot = (dp[0] + dp[1]) + (dp[2] + dp[3]);
				if (AFFINE)
					dot = 256.0f * sm.x * dot + (sm.y - 128.0f * sm.x) * qsum[g];
				else if (SCALED)
					dot *= sm.x;
				dot = cb_sum_xor(dot, lpp);
				if (cap2 > 0.0f) /* softcap, in the log2 domain: cap2 = cap log2(e) */
					dot = cap2 * tanhf(dot / cap2);
				s[g][u] = ok ? dot : -INFINITY;
			}
		}
		/* online softmax; positions past t1 have p = 0 (and zero-filled values) */
#pragma unroll
		for (int g = 0; g < G; g++) {
			float mt = s[g][0], mu;

#pragma unroll
			for (int u = 1; u < DC_U; u++)
				mt = fmaxf(mt, s[g][u]);
			if (mt > m[g] + DC_LAZY) { /* the first tile always: m = -inf gives 0 */
				float al = exp2f(m[g] - mt);

				l[g] *= al;
				corr[g] *= al;
#pragma unroll
				for (int i = 0; i < C; i++)
					o[g][i] *= al;
				m[g] = mt;
			}
			mu = m[g] == -INFINITY ? 0.0f : m[g]; /* no position yet: all p = 0 */
#pragma unroll
			for (int u = 0; u < DC_U; u++) {
				p[g][u] = exp2f(s[g][u] - mu);
				l[g] += p[g][u];
			}
		}
		/* values */
#pragma unroll
		for (int u = 0; u < DC_U; u++) {
			int64_t t = tbase + u * P + slot;
			float v[C];
			float2 sm = make_float2(0.0f, 0.0f);

			dc_vals<KIND>(vs, dat, prm, dc_slot((int)st, u, 1, lane), row0 + dc_pos(a, t), c, kc0 + d,
				      t < t1 && cok, v, &sm);
#pragma unroll
			for (int g = 0; g < G; g++) {
				float pv = p[g][u];

				if (AFFINE) {
					corr[g] += pv * (sm.y - 128.0f * sm.x);
					pv *= 256.0f * sm.x;
				} else if (SCALED) {
					pv *= sm.x;
				}
#pragma unroll
				for (int i = 0; i < C; i++)
					o[g][i] += pv * v[i];
			}
		}
		st = st + 1 == DC_STAGES ? 0 : st + 1;
	}

	/* merge the slots of the warp: lanes lpp, 2 lpp, ... apart own the same columns */
#pragma unroll
	for (int g = 0; g < G; g++) {
#pragma unroll
		for (int i = 0; i < C; i++)
			o[g][i] += corr[g];
		for (int off = lpp; off < 32; off *= 2) {
			float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
			float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
			float mm = fmaxf(m[g], mo);
			float fa = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mm);
			float fb = mo == -INFINITY ? 0.0f : exp2f(mo - mm);

			l[g] = l[g] * fa + lo * fb;
#pragma unroll
			for (int i = 0; i < C; i++)
				o[g][i] = o[g][i] * fa + __shfl_xor_sync(0xffffffffu, o[g][i], off) * fb;
			m[g] = mm;
		}
	}

	/* merge the warps; red overlays the rings, so wait until all are done */
	int64_t dn = nvec * C, ring = RING ? DC_WARPS * RSLOTS * (SB + (KIND == DC_F16 ? 0 : 4)) / 4 : 0;
	float *red = (float *)dsm, *wm = red + max(ring, DC_WARPS * G * dn), *wl = wm + DC_WARPS * G;

	if (RING)
		dc_wait<0>();
	__syncthreads();
	if (slot == 0 && cok) {
#pragma unroll
		for (int g = 0; g < G; g++)
#pragma unroll
			for (int i = 0; i < C; i++)
				red[(warp * G + g) * dn + ci * C + i] = o[g][i];
	}
	if (lane == 0) {
#pragma unroll
		for (int g = 0; g < G; g++) {
			wm[warp * G + g] = m[g];
			wl[warp * G + g] = l[g];
		}
	}
	__syncthreads();
	for (int64_t j = threadIdx.x; j < G * d; j += DC_THREADS) {
		int64_t g = j / d, col = j % d;

		dc_merge<DC_WARPS, G>(a, wm, wl, red, g, dn, col, b, h0 + g, d, split, splits, part);
	}
}

/* part: [splits][batch * heads] maxima, then sums, then [splits][batch * heads][d]
 * unnormalised outputs. */
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

static bool dc_aligned(const void *p, unsigned bytes)
{
	return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* Columns of a lane's chunk (the kernel's C). */
static int dc_cols(int kind)
{
	return kind == DC_Q4X ? 32 : kind == DC_F8X ? 16 : 8;
}

/* The launch of one attention: path, query heads per block, lanes per position. */
struct dc_plan {
	int kind, g, lpp;
};

static struct dc_plan dc_plan_of(const struct cublas_attn *a)
{
	struct dc_plan p;
	int64_t d = a->head_dim, nvec;

	if (a->q4 && d % 32 == 0 && dc_aligned(a->k, 16) && dc_aligned(a->v, 16))
		p.kind = DC_Q4X;
	else if (a->q4 && d % 8 == 0 && dc_aligned(a->k, 4) && dc_aligned(a->v, 4))
		p.kind = DC_Q4W;
	else if (a->q4)
		p.kind = DC_Q4S;
	else if (a->f8 && d % 16 == 0 && dc_aligned(a->k, 16) && dc_aligned(a->v, 16))
		p.kind = DC_F8X; /* (a lane's 16 columns start at a multiple of 16: one group) */
	else if (a->f8)
		p.kind = DC_F8S;
	else if (d % 8 == 0 && a->ldk % 8 == 0 && a->ldv % 8 == 0 && dc_aligned(a->k, 16) &&
		 dc_aligned(a->v, 16))
		p.kind = DC_F16;
	else
		p.kind = DC_F16S;
	/* k/v read once for G query heads: fp16 up to 4, fp8 up to 2 (its 16
	 * columns a lane take 217 registers at G = 4, two blocks an SM: 0.96 TB/s
	 * on an H100 where one head a block reads 2.9; the 4-bit path's 32 would
	 * not fit G times in registers) */
	p.g = 1;
	if (p.kind == DC_F16 && a->group % 4 == 0)
		p.g = 4;
	else if ((p.kind == DC_F16 || p.kind == DC_F8X) && a->group % 2 == 0)
		p.g = 2;
	nvec = (d + dc_cols(p.kind) - 1) / dc_cols(p.kind);
	for (p.lpp = 1; p.lpp < nvec; p.lpp *= 2)
		;
	return p;
}

static size_t dc_smem(const struct dc_plan *p, int64_t d)
{
	int64_t c = dc_cols(p->kind), nvec = (d + c - 1) / c;
	int64_t red = (int64_t)DC_WARPS * p->g * nvec * c * 4, ring = 0;

	if (p->kind == DC_F16 || p->kind == DC_Q4X || p->kind == DC_Q4W || p->kind == DC_F8X)
		ring = (int64_t)DC_WARPS * DC_STAGES * DC_U * 2 * 32 *
		       (dc_slot_bytes(p->kind) + (p->kind == DC_F16 ? 0 : 4));
	/* red overlays the ring; the warps' maxima and sums follow (as in the kernel) */
	return (size_t)((ring > red ? ring : red) + 2 * DC_WARPS * p->g * 4);
}

static int64_t dc_chunk(int64_t len, int splits)
{
	return (len + splits - 1) / splits;
}

static int dc_splits(const struct cublas_attn *a, int sms, size_t max_floats, size_t *floats)
{
	struct dc_plan p = dc_plan_of(a);
	int64_t bh = a->batch * a->heads, blocks = bh / p.g, want = 8 * (int64_t)sms, splits = 1;

	int64_t span = a->len - a->lo; /* the positions the rows may read */

	*floats = 0;
	if (span <= DC_MIN_CHUNK)
		return 1;
	/* ~8 blocks per SM keep the loads in flight; fewer split the positions */
	if (blocks < want)
		splits = (want + blocks - 1) / blocks;
	if (splits > (span + DC_MIN_CHUNK - 1) / DC_MIN_CHUNK)
		splits = (span + DC_MIN_CHUNK - 1) / DC_MIN_CHUNK;
	if (splits > 65535)
		splits = 65535;
	if (splits < 1)
		splits = 1;
	splits = (span + dc_chunk(span, (int)splits) - 1) / dc_chunk(span, (int)splits);
	*floats = splits > 1 ? (size_t)(splits * bh * (a->head_dim + 2)) : 0;
	while (splits > 1 && *floats > max_floats) {
		splits--;
		*floats = splits > 1 ? (size_t)(splits * bh * (a->head_dim + 2)) : 0;
	}
	return (int)splits;
}

template <int KIND, int G>
static void dc_launch(cudaStream_t s, const struct cublas_attn *a, const struct dc_plan *p,
		      float sl2, int64_t chunk, int splits, float *part)
{
	dim3 grid((unsigned)(a->batch * a->heads / G), (unsigned)splits);
	float cap2 = a->softcap > 0.0f ? a->softcap * 1.4426950408889634f : 0.0f;

	cb_decode_kernel<KIND, G><<<grid, DC_THREADS, dc_smem(p, a->head_dim), s>>>(
		*a, sl2, cap2, chunk, splits, p->lpp, part);
}

static cudaError_t dc_attention(cudaStream_t s, const struct cublas_attn *a, int splits,
				float *part)
{
	struct dc_plan p = dc_plan_of(a);
	int64_t chunk = dc_chunk(a->len - a->lo, splits);
	float sl2 = a->scale * 1.4426950408889634f;
	cudaError_t e;

	switch (p.kind) {
	case DC_F16:
		if (p.g == 4)
			dc_launch<DC_F16, 4>(s, a, &p, sl2, chunk, splits, part);
		else if (p.g == 2)
			dc_launch<DC_F16, 2>(s, a, &p, sl2, chunk, splits, part);
		else
			dc_launch<DC_F16, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	case DC_Q4X:
		dc_launch<DC_Q4X, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	case DC_Q4W:
		dc_launch<DC_Q4W, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	case DC_Q4S:
		dc_launch<DC_Q4S, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	case DC_F8X:
		if (p.g == 2)
			dc_launch<DC_F8X, 2>(s, a, &p, sl2, chunk, splits, part);
		else
			dc_launch<DC_F8X, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	case DC_F8S:
		dc_launch<DC_F8S, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	default:
		dc_launch<DC_F16S, 1>(s, a, &p, sl2, chunk, splits, part);
		break;
	}
	e = cudaGetLastError();
	if (e != cudaSuccess || splits == 1)
		return e;
	cb_decode_combine<<<(unsigned)(a->batch * a->heads), DC_THREADS, 0, s>>>(
		*a, splits, a->batch * a->heads, part);
	return cudaGetLastError();
}

/* A 4-bit cache of head size 64 or 128 goes to the tensor cores. */
#include "plugins/compute/cublas/k_decode_mma.cuh"

extern "C" int cublas_decode_splits(const struct cublas_attn *a, int sms, size_t max_floats,
				    size_t *floats)
{
	return dx_ok(a) ? dx_splits(a, sms, max_floats, floats)
			: dc_splits(a, sms, max_floats, floats);
}

extern "C" cudaError_t cublas_k_attention_decode(cudaStream_t s, const struct cublas_attn *a,
						 int splits, float *part)
{
	if (!dx_ok(a))
		return dc_attention(s, a, splits, part);
	if (a->head_dim == 64)
		return dx_launch<1, DX_STAGES, false>(s, a, splits, part);
	return dx_launch<2, DX_STAGES, false>(s, a, splits, part);
}

extern "C" cudaError_t cublas_k_decode_setup(void)
{
	/* (the CUDA-core kernels stay within ~31 KiB of shared memory) */
	cudaError_t e = dx_setup<1, DX_STAGES, false>();

	return e == cudaSuccess ? dx_setup<2, DX_STAGES, false>() : e;
}
