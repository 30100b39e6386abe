/* plugins/compute/cublas/k_decode_mma.cuh - decode attention over a 4-bit
 * (Q4_COLS) cache on the tensor cores, included by k_decode.cu (and by
 * bench/decode_sweep.cu, which times its variants).
 *
 * The CUDA-core path of k_decode.cu spends per code a nibble extract, a byte
 * permute and an FFMA, for k and for v: about 8.7 thread instructions per
 * packed byte, which bounds it near 2.2 TB/s.  Here a block of 4 warps takes
 * one sequence, one k/v head, up to 8 of its query heads and a range of
 * positions; each warp takes tiles of 16 positions, copied by cp.async into
 * a private ring of DX_STAGES tiles:
 *   - scores transposed, Sᵀ = K·Qᵀ with mma m16n8k16 (M = 16 positions,
 *     N = 8 query heads, k = head dims): the dims inside each k16 block are
 *     permuted (q's fragment the same way) so that a lane's codes of one
 *     position are contiguous bytes, and each k16 block lies in one group of
 *     64 dims: score = Σ_g scale_g · Σ q·c + min_g · Σ_g q;
 *   - codes become fp16 pairs by one LOP3 ((w & 0x000F000F) | 0x64006400 is
 *     1024 + c) and one HADD2 (high nibbles: 1024 + 16 c and one HFMA2):
 *     exact, and the products accumulate in fp32;
 *   - the Sᵀ fragments, scaled per position by v's scale of each group and
 *     packed to fp16 twice (the value, then its rounding error: together
 *     about fp32's precision, which the engine's tests need), become P'ᵀ
 *     fragments by one movmatrix.trans each, and Oᵀ = Vᵀ·P'ᵀ by two mma;
 *     v's min term Σ p · min_g is added at the end;
 *   - online softmax in the log2 domain (the max moves only past 2^DX_LAZY,
 *     warp-uniformly, which keeps P' within fp16), the warps merged through
 *     shared memory, the positions split over blocks with k_decode.cu's
 *     combine kernel when too few blocks fill the GPU.
 * About 5.8 thread instructions per packed byte (414 SASS instructions per
 * 16 positions at d 128, sm_90), and k and v read once for 8 query heads
 * under grouped-query attention.  head_dim 64 and 128 with 16-byte aligned
 * k and v; anything else takes k_decode.cu's path.  P' = p · v_scale is
 * fp16 with p <= 2^DX_LAZY: a v group whose scale exceeds ~4000 (values past
 * ±30000) would overflow it. */

#include <algorithm>

#define DX_STAGES 3 /* the ring the H200 measured fastest (bench/decode_sweep.cu) */

#define DX_WARPS 4
#define DX_THREADS (32 * DX_WARPS)
#define DX_T 16           /* positions per tile: the k16 of the P·V product */
#define DX_LAZY 4.0f      /* move the running max only past 2^4 (P' is f16) */
#define DX_MIN_CHUNK 128  /* positions per block at least, when splitting */

/* Bytes of one stage: 16 positions of k codes, v codes, then per position
 * the k pairs and v pairs of the head's NG groups. */
template <int NG>
struct dx_geo {
	static constexpr int D = 64 * NG;
	static constexpr int ROW = 32 * NG; /* code bytes of one position of one head */
	static constexpr int PRM = 4 * NG;  /* pair bytes of one position of one head */
	static constexpr int STAGE = DX_T * (2 * ROW + 2 * PRM);
};

/* Where code byte `byte` of group gr of position p lies in the k (V false) or
 * v area of a stage.  Rows are permuted and their 32-byte group halves swapped
 * so that the fragment loads below hit 32 distinct banks (k: 8-byte loads of
 * positions g, 8 + g at byte 8t; v: 4-byte loads of positions 2t.. at byte 4g). */
template <int NG, bool V>
__host__ __device__ constexpr int dx_off(int p, int gr, int byte)
{
	int slot = p, sw = 0;

	if (!V)
		sw = NG == 2 ? (p >> 1) & 1 : 0;
	else if (NG == 2)
		slot = p ^ ((p >> 1) & 1), sw = (slot >> 2) & 1;
	else
		slot = (p & 8) | (p & 1) << 2 | ((p >> 2) & 1) << 1 | ((p >> 1) & 1);
	return slot * 32 * NG + 32 * (gr ^ sw) + byte;
}

/* Low nibbles of bytes 0 and 2 of x as the f16 pair (c0, c2): 1024 + c by the
 * bit pattern, minus 1024 exactly. */
CB_DEV uint32_t dx_lo(uint32_t x)
{
	uint32_t h = cb_f16_bits<0x000f000fu>(x), r;

	asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(h), "r"(0x64006400u));
	return r;
}

/* High nibbles of bytes 0 and 2: 1024 + 16 c, then x / 16 - 64 = c in one FMA. */
CB_DEV uint32_t dx_hi(uint32_t x)
{
	uint32_t h = cb_f16_bits<0x00f000f0u>(x), r;

	asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(h), "r"(0x2c002c00u), "r"(0xd400d400u));
	return r;
}

/* The 8x8 f16 matrix held as an mma fragment (lane 4 i + j: row i, columns
 * 2 j, 2 j + 1), transposed. */
CB_DEV uint32_t dx_trans(uint32_t x)
{
	uint32_t r;

	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
	return r;
}

CB_DEV uint32_t dx_pack(float lo, float hi)
{
	__half2 h = __floats2half2_rn(lo, hi);

	return *reinterpret_cast<uint32_t *>(&h);
}

/* 2^x as one MUFU.EX2; -inf gives 0. */
CB_DEV float dx_exp2(float x)
{
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* Grid (batch * kv_heads * ceil(group / 8), splits).  Lane (g, t) = (lane / 4,
 * lane % 4) in the mma fragment layouts. */
template <int NG, int ST, bool KF>
__global__ void __launch_bounds__(DX_THREADS, 4)
dx_kernel(struct cublas_attn a, float sl2, int64_t chunk, int splits, float *part)
{
	typedef dx_geo<NG> GE;
	constexpr int D = GE::D, ROW = GE::ROW, PRM = GE::PRM, STB = GE::STAGE, NB = 4 * NG;
	extern __shared__ uint4 dsm[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	const int G = a.group, nrc = (G + 7) / 8;
	int64_t bx = blockIdx.x;
	const int rc = (int)(bx % nrc);
	bx /= nrc;
	const int64_t hk = bx % a.kv_heads, b = bx / a.kv_heads, split = blockIdx.y;
	const int64_t hq0 = hk * G + rc * 8; /* the block's first query head */
	const int nrows = min(8, G - rc * 8);
	const int64_t t0 = max((int64_t)a.pad[b], split * chunk), t1 = min(a.len, (split + 1) * chunk);
	const int64_t cols = a.kv_heads * D, rowb = cols / 2, prow = a.kv_heads * NG * 4;
	const int64_t ntile = t1 > t0 ? (t1 - t0 + DX_T - 1) / DX_T : 0;
	const int64_t my = ntile > warp ? (ntile - warp + DX_WARPS - 1) / DX_WARPS : 0;
	const int64_t rbase = b * a.stride + t0; /* the cache row of position t0 */
	const uint8_t *kc = (const uint8_t *)a.k, *vc = (const uint8_t *)a.v;
	const uint8_t *kp = kc + cb_q4_data_bytes(a.kv_rows, cols);
	const uint8_t *vp = vc + cb_q4_data_bytes(a.kv_rows, cols);
	uint8_t *ring = (uint8_t *)dsm + (size_t)warp * ST * STB;

	/* The copies of the warp's next tile (tiles go in order): a lane copies NG
	 * 16-byte chunks of k and of v (pieces of the rows) and one position's
	 * pairs of k (lanes 0-15) or v (16-31); offsets advance after each tile,
	 * positions past t1 are zero-filled. */
	const int cp0 = lane / (2 * NG), cq = lane % (2 * NG); /* chunk i: position cp0 + 8 i */
	const int csk = dx_off<NG, false>(cp0, cq >> 1, 16 * (cq & 1));
	const int csv = DX_T * ROW + dx_off<NG, true>(cp0, cq >> 1, 16 * (cq & 1));
	const int ppos = lane & 15, pso = 2 * DX_T * ROW + ppos * 2 * PRM + (lane >> 4) * PRM;
	const uint8_t *pbase = lane >> 4 ? vp : kp;
	const int64_t vdelta = vc - kc;
	const uint8_t *kptr = kc + (rbase + warp * DX_T + cp0) * rowb + hk * ROW + 16 * cq;
	const uint8_t *pptr = pbase + (rbase + warp * DX_T + ppos) * prow + hk * PRM;
	int64_t rem = t1 - t0 - warp * DX_T; /* positions from the next tile's start to t1 */

	/* position p + 8 lies 8 rows (8 * ROW bytes) further in either area */
	static_assert(dx_off<NG, false>(9, 0, 0) == dx_off<NG, false>(1, 0, 0) + 8 * ROW, "k rows");
	static_assert(dx_off<NG, true>(9, 0, 0) == dx_off<NG, true>(1, 0, 0) + 8 * ROW, "v rows");
	auto issue = [&](int st) {
		uint8_t *s = ring + st * STB;

#pragma unroll
		for (int i = 0; i < NG; i++) {
			bool ok = cp0 + 8 * i < rem;
			const uint8_t *src = kptr + (int64_t)8 * i * rowb;

			dc_cp<16>(s + csk + 8 * i * ROW, ok ? src : kc, ok);
			dc_cp<16>(s + csv + 8 * i * ROW, ok ? src + vdelta : kc, ok);
		}
		dc_cp<PRM>(s + pso, ppos < rem ? pptr : pbase, ppos < rem);
		kptr += (int64_t)DX_WARPS * DX_T * rowb;
		pptr += (int64_t)DX_WARPS * DX_T * prow;
		rem -= DX_WARPS * DX_T;
	};

	/* the first tiles' copies go out before anything else waits on memory */
	for (int k = 0; k < ST - 1; k++) {
		if (k < my)
			issue(k);
		dc_commit(); /* empty groups too: the count stays uniform */
	}

	/* q as the B fragments of the score product: block j = (group j / 4,
	 * word (j / 2) % 2 of the lane's 8 bytes, byte pair j % 2), lane (g, t)
	 * query head g and the dims its codes hold (see the loop); the 4 lanes
	 * of a g hold all dims of the head once, so Σ q per group is their sum. */
	uint32_t qb[NB][2];
	float qs[NG][2]; /* sl2 · Σ q over each group, query heads 2t, 2t + 1 */
	float ko[NG][2]; /* KF: what the 1024 offsets add to a group's score sum */
	{
		const uint16_t *qr = a.q + b * a.ldq + (hq0 + g) * D;
		bool live = g < nrows;
		float qsum[NG], qoff[NG];

#pragma unroll
		for (int gr = 0; gr < NG; gr++)
			qsum[gr] = qoff[gr] = 0.0f;
#pragma unroll
		for (int j = 0; j < NB; j++) {
			int d0 = (j >> 2) * 64 + 16 * t + 8 * ((j >> 1) & 1) + 2 * (j & 1);
			uint16_t x1 = live ? qr[d0 + 1] : 0, x5 = live ? qr[d0 + 5] : 0;
			uint16_t x0 = live ? qr[d0] : 0, x4 = live ? qr[d0 + 4] : 0;
			float f0 = cb_h2f(x0), f1 = cb_h2f(x1), f4 = cb_h2f(x4), f5 = cb_h2f(x5);

			qsum[j >> 2] += (f0 + f1) + (f4 + f5);
			if (KF) { /* high-nibble codes come as 1024 + 16 c: q / 16 (exact) */
				x0 = cb_f2h(f0 * 0.0625f), x4 = cb_f2h(f4 * 0.0625f);
				qoff[j >> 2] += 1024.0f * ((f1 + f5) + (cb_h2f(x0) + cb_h2f(x4)));
			}
			qb[j][0] = x1 | (uint32_t)x5 << 16; /* low nibbles: dims d0 + 1, d0 + 5 */
			qb[j][1] = x0 | (uint32_t)x4 << 16; /* high nibbles: dims d0, d0 + 4 */
		}
#pragma unroll
		for (int gr = 0; gr < NG; gr++) {
			qsum[gr] += __shfl_xor_sync(0xffffffffu, qsum[gr], 1);
			qsum[gr] += __shfl_xor_sync(0xffffffffu, qsum[gr], 2);
			qs[gr][0] = __shfl_sync(0xffffffffu, qsum[gr], 8 * t) * sl2;
			qs[gr][1] = __shfl_sync(0xffffffffu, qsum[gr], 8 * t + 4) * sl2;
			ko[gr][0] = ko[gr][1] = 0.0f;
			if (KF) {
				qoff[gr] += __shfl_xor_sync(0xffffffffu, qoff[gr], 1);
				qoff[gr] += __shfl_xor_sync(0xffffffffu, qoff[gr], 2);
				ko[gr][0] = __shfl_sync(0xffffffffu, qoff[gr], 8 * t);
				ko[gr][1] = __shfl_sync(0xffffffffu, qoff[gr], 8 * t + 4);
			}
		}
	}

	/* o: Oᵀ fragments, tile mt = dims of group mt / 4; element e: query head
	 * 2t + (e & 1), dim 64 (mt / 4) + 8g + 2 (mt % 4) + (e >> 1) */
	float o[NB][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f }, corr[NG][2];

#pragma unroll
	for (int i = 0; i < NB; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
#pragma unroll
	for (int gr = 0; gr < NG; gr++)
		corr[gr][0] = corr[gr][1] = 0.0f;
	int st = 0, sn = ST - 1; /* the stage of tile k; the one to refill */

	for (int64_t k = 0; k < my; k++) {
		/* tile k landed for every lane, and every lane is done with stage sn
		 * (tile k - 1's) */
		dc_wait<ST - 2>();
		__syncwarp();
		if (k + ST - 1 < my)
			issue(sn);
		dc_commit();
		sn = st;

		const uint8_t *sk = ring + st * STB, *sv = sk + DX_T * ROW, *sp = sv + DX_T * ROW;
		int64_t tb = t0 + (warp + k * DX_WARPS) * DX_T;
		float acc[NG][4];

		/* Sᵀ = K Qᵀ per group: a lane holds positions g and g + 8; its 8
		 * bytes of a group are dims 16t.. of it, each word two k16 blocks */
#pragma unroll
		for (int gr = 0; gr < NG; gr++) {
			uint2 w0 = *(const uint2 *)(sk + dx_off<NG, false>(g, gr, 8 * t));
			uint2 w1 = *(const uint2 *)(sk + dx_off<NG, false>(g + 8, gr, 8 * t));

			acc[gr][0] = acc[gr][1] = acc[gr][2] = acc[gr][3] = 0.0f;
#pragma unroll
			for (int wi = 0; wi < 2; wi++) {
				uint32_t x0 = wi ? w0.y : w0.x, x1 = wi ? w1.y : w1.x;

#pragma unroll
				for (int sel = 0; sel < 2; sel++) {
					uint32_t af[4];

					if (sel)
						x0 >>= 8, x1 >>= 8; /* bytes 1, 3 */
					if (KF) { /* the offsets stay, ko takes them out */
						af[0] = cb_f16_bits<0x000f000fu>(x0);
						af[1] = cb_f16_bits<0x000f000fu>(x1);
						af[2] = cb_f16_bits<0x00f000f0u>(x0);
						af[3] = cb_f16_bits<0x00f000f0u>(x1);
					} else {
						af[0] = dx_lo(x0);
						af[1] = dx_lo(x1);
						af[2] = dx_hi(x0);
						af[3] = dx_hi(x1);
					}
					cb_mma16816(acc[gr], af, qb[gr * 4 + wi * 2 + sel]);
				}
			}
		}

		/* the pairs of positions g, g + 8: k (scale · sl2, min), v (scale, min) */
		float ksc[2][NG], kmn[2][NG], vsc[2][NG], vmn[2][NG];
#pragma unroll
		for (int pp = 0; pp < 2; pp++) {
			uint32_t w[2 * NG];

			if (NG == 2) {
				uint4 u = *(const uint4 *)(sp + (g + 8 * pp) * 2 * PRM);

				w[0] = u.x, w[1] = u.y, w[NG] = u.z, w[NG + 1] = u.w;
			} else {
				uint2 u = *(const uint2 *)(sp + (g + 8 * pp) * 2 * PRM);

				w[0] = u.x, w[NG] = u.y;
			}
#pragma unroll
			for (int gr = 0; gr < NG; gr++) {
				float2 f = cb_unpack2(w[gr]), h = cb_unpack2(w[NG + gr]);

				ksc[pp][gr] = f.x * sl2, kmn[pp][gr] = f.y;
				vsc[pp][gr] = h.x, vmn[pp][gr] = h.y;
			}
		}

		/* scores (log2 domain): element e = position g + 8 (e >> 1), head 2t + (e & 1) */
		float s[4], mt[2];
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int pp = e >> 1, r = e & 1;
			float v = 0.0f;

#pragma unroll
			for (int gr = 0; gr < NG; gr++)
				v += (KF ? acc[gr][e] - ko[gr][r] : acc[gr][e]) * ksc[pp][gr] +
				     kmn[pp][gr] * qs[gr][r];
			s[e] = tb + g + 8 * pp < t1 ? v : -INFINITY;
		}
#pragma unroll
		for (int r = 0; r < 2; r++) {
			mt[r] = fmaxf(s[r], s[r + 2]);
			mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 4));
			mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 8));
			mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 16));
		}
		/* a tile always has a valid position, so the first one sets m */
		if (__any_sync(0xffffffffu, mt[0] > m[0] + DX_LAZY || mt[1] > m[1] + DX_LAZY)) {
#pragma unroll
			for (int r = 0; r < 2; r++) {
				float al = 1.0f;

				if (mt[r] > m[r] + DX_LAZY) {
					al = dx_exp2(m[r] - mt[r]);
					m[r] = mt[r];
				}
				l[r] *= al;
#pragma unroll
				for (int gr = 0; gr < NG; gr++)
					corr[gr][r] *= al;
#pragma unroll
				for (int i = 0; i < NB; i++)
					o[i][r] *= al, o[i][r + 2] *= al;
			}
		}

		/* P' = p · v scale per group as two f16 pairs, hi + lo (lo the rounding
		 * error of hi: ~22 bits together, the fp32 kernel's precision), each
		 * transposed into P'ᵀ B fragments */
		float p[4];
		uint32_t pb[NG][2], pl[NG][2];
#pragma unroll
		for (int e = 0; e < 4; e++) {
			p[e] = dx_exp2(s[e] - m[e & 1]);
			l[e & 1] += p[e];
		}
#pragma unroll
		for (int gr = 0; gr < NG; gr++)
#pragma unroll
			for (int pp = 0; pp < 2; pp++) {
				corr[gr][0] += p[2 * pp] * vmn[pp][gr];
				corr[gr][1] += p[2 * pp + 1] * vmn[pp][gr];
				float x0 = p[2 * pp] * vsc[pp][gr], x1 = p[2 * pp + 1] * vsc[pp][gr];
				__half2 h = __floats2half2_rn(x0, x1);

				pb[gr][pp] = dx_trans(*reinterpret_cast<uint32_t *>(&h));
				pl[gr][pp] = dx_trans(dx_pack(x0 - __low2float(h), x1 - __high2float(h)));
			}

		/* Oᵀ += Vᵀ P'ᵀ: a lane holds positions 2t, 2t + 1, 2t + 8, 2t + 9 of
		 * dims 8g.. of each group; byte mm of two positions interleaved */
#pragma unroll
		for (int gr = 0; gr < NG; gr++) {
			uint32_t wa0 = *(const uint32_t *)(sv + dx_off<NG, true>(2 * t, gr, 4 * g));
			uint32_t wa1 = *(const uint32_t *)(sv + dx_off<NG, true>(2 * t + 1, gr, 4 * g));
			uint32_t wb0 = *(const uint32_t *)(sv + dx_off<NG, true>(2 * t + 8, gr, 4 * g));
			uint32_t wb1 = *(const uint32_t *)(sv + dx_off<NG, true>(2 * t + 9, gr, 4 * g));

#pragma unroll
			for (int mm = 0; mm < 4; mm++) {
				unsigned sel = mm | mm << 4 | (4 + mm) << 8 | (4 + mm) << 12;
				uint32_t xa = __byte_perm(wa0, wa1, sel), xb = __byte_perm(wb0, wb1, sel);
				uint32_t af[4] = { dx_hi(xa), dx_lo(xa), dx_hi(xb), dx_lo(xb) };

				cb_mma16816(o[gr * 4 + mm], af, pb[gr]);
				cb_mma16816(o[gr * 4 + mm], af, pl[gr]);
			}
		}
		st = st + 1 == ST ? 0 : st + 1;
	}

	/* the warp's sums over its positions (lanes of one t share the heads) */
#pragma unroll
	for (int r = 0; r < 2; r++)
		for (int off = 4; off < 32; off *= 2) {
			l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
#pragma unroll
			for (int gr = 0; gr < NG; gr++)
				corr[gr][r] += __shfl_xor_sync(0xffffffffu, corr[gr][r], off);
		}

	/* merge the warps; red overlays the rings, so wait until all copies are done */
	float *red = (float *)dsm, *wm = red + DX_WARPS * 8 * D, *wl = wm + DX_WARPS * 8;

	dc_wait<0>();
	__syncthreads();
#pragma unroll
	for (int i = 0; i < NB; i++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			red[(warp * 8 + 2 * t + (e & 1)) * D + (i >> 2) * 64 + 8 * g + 2 * (i & 3) +
			    (e >> 1)] = o[i][e] + corr[i >> 2][e & 1];
	if (g == 0)
		for (int r = 0; r < 2; r++) {
			wm[warp * 8 + 2 * t + r] = m[r];
			wl[warp * 8 + 2 * t + r] = l[r];
		}
	__syncthreads();
	for (int j = threadIdx.x; j < nrows * D; j += DX_THREADS) {
		int row = j / D, col = j % D;

		dc_merge<DX_WARPS, 8>(a, wm, wl, red, row, D, col, b, hq0 + row, D, split, splits,
				      part);
	}
}

template <int NG, int ST>
static size_t dx_smem(void)
{
	size_t ring = (size_t)DX_WARPS * ST * dx_geo<NG>::STAGE;
	size_t red = (size_t)DX_WARPS * 8 * dx_geo<NG>::D * 4;

	return std::max(ring, red) + 2 * DX_WARPS * 8 * 4;
}

static bool dx_ok(const struct cublas_attn *a)
{
	/* (a ring, a window or a softcap: k_decode.cu's kernels, whose lanes
	 * wrap and start at lo) */
	return a->q4 && !a->ring && !a->lo && a->softcap == 0.0f &&
	       (a->head_dim == 64 || a->head_dim == 128) &&
	       dc_aligned(a->k, 16) && dc_aligned(a->v, 16);
}

/* k_decode.cu's rule (~8 blocks an SM, else split), chunks a multiple of the tile. */
static int dx_splits(const struct cublas_attn *a, int sms, size_t max_floats, size_t *floats)
{
	int64_t blocks = a->batch * a->kv_heads * ((a->group + 7) / 8), want = 8 * (int64_t)sms;
	int64_t splits = 1, chunk;

	*floats = 0;
	if (a->len <= DX_MIN_CHUNK)
		return 1;
	if (blocks < want)
		splits = std::min((want + blocks - 1) / blocks,
				  (a->len + DX_MIN_CHUNK - 1) / DX_MIN_CHUNK);
	splits = std::min<int64_t>(std::max<int64_t>(splits, 1), 65535);
	for (;;) {
		chunk = ((a->len + splits - 1) / splits + DX_T - 1) / DX_T * DX_T;
		splits = (a->len + chunk - 1) / chunk;
		*floats = splits > 1 ? (size_t)(splits * a->batch * a->heads * (a->head_dim + 2)) : 0;
		if (splits <= 1 || *floats <= max_floats)
			return (int)splits;
		splits--;
	}
}

static int64_t dx_chunk(int64_t len, int splits)
{
	return ((len + splits - 1) / splits + DX_T - 1) / DX_T * DX_T;
}

template <int NG, int ST, bool KF>
static cudaError_t dx_launch(cudaStream_t s, const struct cublas_attn *a, int splits, float *part)
{
	dim3 grid((unsigned)(a->batch * a->kv_heads * ((a->group + 7) / 8)), (unsigned)splits);
	float sl2 = a->scale * 1.4426950408889634f;
	cudaError_t e;

	dx_kernel<NG, ST, KF><<<grid, DX_THREADS, dx_smem<NG, ST>(), s>>>(*a, sl2,
								     dx_chunk(a->len, splits),
								     splits, part);
	e = cudaGetLastError();
	if (e != cudaSuccess || splits == 1)
		return e;
	cb_decode_combine<<<(unsigned)(a->batch * a->heads), DC_THREADS, 0, s>>>(
		*a, splits, a->batch * a->heads, part);
	return cudaGetLastError();
}

/* Rings past 48 KiB of shared memory need the opt-in. */
template <int NG, int ST, bool KF>
static cudaError_t dx_setup(void)
{
	return cudaFuncSetAttribute(dx_kernel<NG, ST, KF>,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)dx_smem<NG, ST>());
}
