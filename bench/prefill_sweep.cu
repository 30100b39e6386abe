/* bench/prefill_sweep.cu - the fused causal prefill attention
 * (k_prefill.cu's cb_prefill_kernel) in several block shapes, next to the
 * kernel it replaced (kept below as old_prefill_kernel), to choose each
 * head size's default from measurements.  A developer's tool, built by hand
 * on a GPU machine:
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Iinclude \
 *        bench/prefill_sweep.cu -o prefill_sweep && ./prefill_sweep
 *
 * Inputs are random fp16 in [-1, 1] (fixed seed).  Every variant's output is
 * checked, row by row, against the old kernel's and, for a few (sequence,
 * head) pairs of every shape (all of them for the small edge shapes),
 * against a double-precision reference on the host: the largest difference
 * in a row over the row's largest |value| must stay below 5e-3; rows before
 * pad must be exactly zero, no element may be left unwritten (the output
 * starts as NaNs) and none past the heads' columns written.  Times are the
 * median of 25 runs after a warm-up, in TFLOP/s counting the causal half
 * (4 hd seq (seq + 1) / 2 per sequence and head, also for padded rows) and
 * the full square (4 hd seq^2), as the profile does.  Exits 1 if any
 * variant is wrong, naming it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fgcore/half.h>

#include "plugins/compute/cublas/k_prefill.cu"
#include "bench/cuda_check.h"
#include "bench/sweep_compare.h"

/* a row's largest error over its largest value (see the header comment) */
#define TOL 5e-3

/* ---- the replaced kernel (k_prefill.cu before the 32-row warps), renamed ------------ */

#define OLD_BR 64 /* queries per block */
#define OLD_BC 64 /* keys per tile */
#define OLD_THREADS 128

template <int DP>
__host__ __device__ constexpr int old_srow()
{
	return DP + 8; /* halves per shared row: 16-byte aligned, ldmatrix conflict-free */
}

template <int DP>
static constexpr size_t old_smem_bytes()
{
	return (size_t)3 * OLD_BR * old_srow<DP>() * sizeof(uint16_t);
}

/* rows [r0, r0 + 64) of a [*, ld] matrix at column c0, width d (zero beyond
 * d and beyond `rows` valid rows) -> shared tile with DP columns. */
template <int DP>
CB_DEV void old_load_tile(uint16_t *tile, const uint16_t *g, int64_t ld, int rows, int d,
			 bool vec)
{
	constexpr int S = old_srow<DP>();

	if (vec) {
		for (int c = threadIdx.x; c < OLD_BR * (DP / 8); c += OLD_THREADS) {
			int r = c / (DP / 8), col = (c % (DP / 8)) * 8;
			bool ok = r < rows && col < d;

			cb_cp16(tile + r * S + col, ok ? g + r * ld + col : g, ok);
		}
	} else {
		for (int c = threadIdx.x; c < OLD_BR * DP; c += OLD_THREADS) {
			int r = c / DP, col = c % DP;

			tile[r * S + col] = r < rows && col < d ? g[r * ld + col] : (uint16_t)0;
		}
	}
	cb_cp_commit();
}

/* GQA: k/v head blockIdx.y / a.group (a separate instance, so that the
 * multi-head kernel keeps its registers). */
template <int DP, bool GQA>
__global__ void __launch_bounds__(OLD_THREADS)
old_prefill_kernel(struct cublas_attn a, float scale_log2, bool vec)
{
	constexpr int S = old_srow<DP>(), KT = DP / 16, NT = DP / 8;
	extern __shared__ uint4 cb_smem[];
	uint16_t *sq = (uint16_t *)cb_smem, *sk = sq + OLD_BR * S, *sv = sk + OLD_BR * S;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	int64_t b = blockIdx.z, h = blockIdx.y, q0 = (int64_t)blockIdx.x * OLD_BR;
	int64_t seq = a.seq, d = a.head_dim, pad = a.pad[b];
	int64_t row0 = b * seq; /* first row of sequence b */
	int64_t hk = GQA ? (int)blockIdx.y / a.group : h; /* the k/v head of query head h */
	const uint16_t *kbase = (const uint16_t *)a.k + row0 * a.ldk + hk * d;
	const uint16_t *vbase = (const uint16_t *)a.v + row0 * a.ldv + hk * d;
	int64_t kstart = pad / OLD_BC * OLD_BC, kend = min(seq, q0 + OLD_BR);
	uint32_t qf[KT][4];
	float o[NT][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };

	old_load_tile<DP>(sq, a.q + (row0 + q0) * a.ldq + h * d, a.ldq, (int)min(seq - q0,
			 (int64_t)OLD_BR), (int)d, vec);
	if (kstart < kend)
		old_load_tile<DP>(sk, kbase + kstart * a.ldk, a.ldk,
				 (int)min(seq - kstart, (int64_t)OLD_BC), (int)d, vec);
	cb_cp_wait<0>();
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < KT; kk++)
		cb_ldmatrix_x4(qf[kk], sq + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
	for (int n = 0; n < NT; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

	for (int64_t kb = kstart; kb < kend; kb += OLD_BC) {
		float s[OLD_BC / 8][4];
		int krows = (int)min(seq - kb, (int64_t)OLD_BC);

		cb_cp_wait<0>();
		__syncthreads(); /* K(kb) landed; every warp is done with the previous V */
		old_load_tile<DP>(sv, vbase + kb * a.ldv, a.ldv, krows, (int)d, vec);

		/* S = Q · K(kb)ᵀ */
#pragma unroll
		for (int n = 0; n < OLD_BC / 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < KT; kk++) {
#pragma unroll
			for (int np = 0; np < OLD_BC / 16; np++) {
				uint32_t r[4], b0[2], b1[2];
				int mi = lane / 8;

				cb_ldmatrix_x4(r, sk + (np * 16 + (mi / 2) * 8 + lane % 8) * S +
						      kk * 16 + (mi % 2) * 8);
				b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
				cb_mma16816(s[2 * np], qf[kk], b0);
				cb_mma16816(s[2 * np + 1], qf[kk], b1);
			}
		}

		/* mask, online softmax; this lane holds rows g (e < 2) and g + 8 */
		float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
		for (int n = 0; n < OLD_BC / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int64_t i = q0 + warp * 16 + g + (e >= 2 ? 8 : 0);
				int64_t j = kb + n * 8 + 2 * t + (e & 1);
				float v = j >= pad && j <= i ? s[n][e] * scale_log2 : -INFINITY;

				s[n][e] = v;
				mx[e >> 1] = fmaxf(mx[e >> 1], v);
			}
		float alpha[2], base[2], rs[2] = { 0.0f, 0.0f };
#pragma unroll
		for (int r = 0; r < 2; r++) {
			float mnew = fmaxf(m[r], cb_max_xor(mx[r], 4));

			base[r] = mnew == -INFINITY ? 0.0f : mnew;
			alpha[r] = exp2f(m[r] - base[r]);
			m[r] = mnew;
		}
		uint32_t pf[OLD_BC / 16][4];
#pragma unroll
		for (int n = 0; n < OLD_BC / 8; n++) {
			float p0 = exp2f(s[n][0] - base[0]), p1 = exp2f(s[n][1] - base[0]);
			float p2 = exp2f(s[n][2] - base[1]), p3 = exp2f(s[n][3] - base[1]);

			rs[0] += p0 + p1;
			rs[1] += p2 + p3;
			/* C tiles 2k and 2k+1 form the A fragment of key step k */
			pf[n / 2][(n % 2) * 2 + 0] = cb_pack2(p0, p1);
			pf[n / 2][(n % 2) * 2 + 1] = cb_pack2(p2, p3);
		}
		l[0] = l[0] * alpha[0] + rs[0];
		l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
		for (int n = 0; n < NT; n++) {
			o[n][0] *= alpha[0], o[n][1] *= alpha[0];
			o[n][2] *= alpha[1], o[n][3] *= alpha[1];
		}

		cb_cp_wait<0>();
		__syncthreads(); /* V(kb) landed; every warp is done with K(kb) */
		if (kb + OLD_BC < kend)
			old_load_tile<DP>(sk, kbase + (kb + OLD_BC) * a.ldk, a.ldk,
					 (int)min(seq - kb - OLD_BC, (int64_t)OLD_BC), (int)d, vec);

		/* O += P · V(kb) */
#pragma unroll
		for (int ks = 0; ks < OLD_BC / 16; ks++) {
#pragma unroll
			for (int dp = 0; dp < DP / 16; dp++) {
				uint32_t r[4], b0[2], b1[2];
				int mi = lane / 8;

				cb_ldmatrix_x4_trans(r, sv + (ks * 16 + (mi % 2) * 8 + lane % 8) * S +
							    dp * 16 + (mi / 2) * 8);
				b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
				cb_mma16816(o[2 * dp], pf[ks], b0);
				cb_mma16816(o[2 * dp + 1], pf[ks], b1);
			}
		}
	}

	/* normalise and store; rows that saw no key (before the pad) give zeros */
	float inv[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float tot = cb_sum_xor(l[r], 4);

		inv[r] = tot > 0.0f ? 1.0f / tot : 0.0f;
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int64_t i = q0 + warp * 16 + g + r * 8;
		uint16_t *orow = a.out + (row0 + i) * a.ldo + h * d;

		if (i >= seq)
			continue;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			int64_t c = n * 8 + 2 * t;

			if (c < d)
				orow[c] = cb_f2h(o[n][2 * r] * inv[r]);
			if (c + 1 < d)
				orow[c + 1] = cb_f2h(o[n][2 * r + 1] * inv[r]);
		}
	}
}

static cudaError_t old_run(cudaStream_t s, const struct cublas_attn *a)
{
	dim3 grid((unsigned)((a->seq + OLD_BR - 1) / OLD_BR), (unsigned)a->heads,
		  (unsigned)a->batch);
	int64_t d = a->head_dim;
	float sl2 = a->scale * 1.4426950408889634f;
	bool vec = d % 8 == 0 && a->ldq % 8 == 0 && a->ldk % 8 == 0 && a->ldv % 8 == 0 &&
		   ((uintptr_t)a->q & 15) == 0 && ((uintptr_t)a->k & 15) == 0 &&
		   ((uintptr_t)a->v & 15) == 0;

#define OLD_LAUNCH(DP)                                                                     \
	do {                                                                               \
		if (a->group > 1)                                                          \
			old_prefill_kernel<DP, true><<<grid, OLD_THREADS,                  \
						       old_smem_bytes<DP>(), s>>>(*a, sl2, vec); \
		else                                                                       \
			old_prefill_kernel<DP, false><<<grid, OLD_THREADS,                 \
							old_smem_bytes<DP>(), s>>>(*a, sl2, vec); \
	} while (0)
	if (d <= 32)
		OLD_LAUNCH(32);
	else if (d <= 64)
		OLD_LAUNCH(64);
	else if (d <= 80)
		OLD_LAUNCH(80);
	else if (d <= 96)
		OLD_LAUNCH(96);
	else
		OLD_LAUNCH(128);
#undef OLD_LAUNCH
	return cudaGetLastError();
}

template <int DP>
static void old_setup1(void)
{
	int smem = (int)old_smem_bytes<DP>();

	CK(cudaFuncSetAttribute(old_prefill_kernel<DP, false>,
				cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	CK(cudaFuncSetAttribute(old_prefill_kernel<DP, true>,
				cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

static void old_setup(void)
{
	old_setup1<32>();
	old_setup1<64>();
	old_setup1<80>();
	old_setup1<96>();
	old_setup1<128>();
}

/* ---- variants --------------------------------------------------------------------- */

typedef cudaError_t (*launch_fn)(cudaStream_t, const struct cublas_attn *);

struct variant {
	char name[40];
	int dp;   /* the padded head size it serves; 0: any (the plugin's dispatch) */
	int bps;  /* resident blocks per SM (without GQA) */
	launch_fn run;
};

template <int DP, class SH>
static cudaError_t run_shape(cudaStream_t s, const struct cublas_attn *a)
{
	pf_launch<DP, SH>(s, a);
	return cudaGetLastError();
}

template <int DP, int WARPS, int MT, int BC, int MINB, bool QREG>
static variant make(void)
{
	typedef pf_shape<WARPS, MT, BC, MINB, QREG> SH;
	size_t smem = pf_smem_bytes<DP, SH::BR, SH::BC>();
	variant v;

	CK((pf_setup<DP, SH>()));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.bps, cb_prefill_kernel<DP, false, SH>,
							 SH::THREADS, smem));
	snprintf(v.name, sizeof(v.name), "%dw x%d bc%d b%d %s", WARPS, MT, BC, MINB,
		 QREG ? "qreg" : "qsmem");
	v.dp = DP;
	v.run = run_shape<DP, SH>;
	return v;
}

/* The shapes compared for one padded head size; Q in registers where it
 * fits without spilling (-Xptxas -v shows none for any of these on sm_90). */
template <int DP>
static void add_shapes(std::vector<variant> &vs)
{
	constexpr bool QR = DP <= 80;

	vs.push_back(make<DP, 4, 2, 64, 1, QR>()); /* the default: 128 queries, 32 per warp */
	vs.push_back(make<DP, 4, 2, 32, 1, QR>()); /* the same over 32-key tiles */
	vs.push_back(make<DP, 8, 1, 64, 1, true>()); /* 128 queries, 16 per warp */
	vs.push_back(make<DP, 4, 1, 64, 3, QR>()); /* the old shape, 3 blocks per SM */
	if constexpr (QR)
		vs.push_back(make<DP, 4, 2, 64, 1, false>()); /* Q re-read per key step */
	else
		vs.push_back(make<DP, 8, 2, 64, 1, false>()); /* 256 queries, 32 per warp */
}

/* ---- shapes, data, references ------------------------------------------------------- */

struct shape {
	const char *name;
	int64_t batch, seq, heads, kv_heads, hd;
	int pad_kind;   /* 0: none, 1: (b * 37) % 300, 2: the list in pads */
	int pads[4];
	float scale;    /* 0: 1 / sqrt(hd) unless zero_scale */
	int zero_scale;
	int64_t extra;  /* e: leading dimensions grow by e (q, k), 2e (v), 3e (out) */
	int timed;      /* 0: correctness only */
	int refs;       /* (sequence, head) pairs checked against the host, -1: all */
};

static const shape shapes[] = {
	{ "16x512 h32 d128", 16, 512, 32, 32, 128, 0, {}, 0, 0, 0, 1, 3 },
	{ "64x512 h32 d128", 64, 512, 32, 32, 128, 0, {}, 0, 0, 0, 1, 3 },
	{ "32x512 h32 d64", 32, 512, 32, 32, 64, 0, {}, 0, 0, 0, 1, 3 },
	{ "16x512 h32 d80", 16, 512, 32, 32, 80, 0, {}, 0, 0, 0, 1, 3 },
	{ "4x2048 h32 d128", 4, 2048, 32, 32, 128, 0, {}, 0, 0, 0, 1, 3 },
	{ "16x512 h32 d128 pad", 16, 512, 32, 32, 128, 1, {}, 0, 0, 0, 1, 4 },
	{ "16x512 h32/8 d128 gqa", 16, 512, 32, 8, 128, 0, {}, 0, 0, 0, 1, 3 },
	/* edges: odd sizes, GQA, the scalar path, pad == seq, negative and zero scales */
	{ "3x77 h4/2 d72 pad", 3, 77, 4, 2, 72, 2, { 0, 13, 76 }, 0, 0, 0, 0, -1 },
	{ "2x130 h3 d36 pad", 2, 130, 3, 3, 36, 2, { 0, 129 }, 0.2f, 0, 0, 0, -1 },
	{ "2x70 h2/1 d100 neg", 2, 70, 2, 1, 100, 2, { 5, 70 }, -0.15f, 0, 0, 0, -1 },
	{ "1x50 h2 d32 zero", 1, 50, 2, 2, 32, 0, {}, 0, 1, 0, 0, -1 },
	{ "2x200 h2 d128 ld+4", 2, 200, 2, 2, 128, 2, { 3, 64 }, 0, 0, 4, 0, -1 },
	{ "2x300 h4/2 d64 ld+8", 2, 300, 4, 2, 64, 2, { 0, 100 }, 0, 0, 8, 0, -1 },
};

static int dp_of(int64_t hd)
{
	return hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 80 ? 80 : hd <= 96 ? 96 : 128;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint16_t rand_half(void)
{
	uint16_t h;

	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	h = fg_float_to_half((float)((double)(rng >> 11) / 9007199254740992.0) * 2.0f - 1.0f);
	return (h & 0x7fff) ? h : (uint16_t)0x1400; /* never zeros */
}

/* The rows of one (sequence b, head h) in double precision: ref [seq, hd]. */
static void reference(const shape &sh, const struct cublas_attn &a, const uint16_t *q,
		      const uint16_t *k, const uint16_t *v, const int32_t *pad, int64_t b,
		      int64_t h, std::vector<double> &ref)
{
	int64_t S = sh.seq, d = sh.hd, hk = h / a.group;
	std::vector<double> w((size_t)S);

	ref.assign((size_t)(S * d), 0.0);
	for (int64_t i = pad[b]; i < S; i++) {
		const uint16_t *qi = q + (b * S + i) * a.ldq + h * d;
		double mx = -INFINITY, sum = 0;

		for (int64_t j = pad[b]; j <= i; j++) {
			const uint16_t *kj = k + (b * S + j) * a.ldk + hk * d;
			double dot = 0;

			for (int64_t c = 0; c < d; c++)
				dot += (double)h2f_tab[qi[c]] * (double)h2f_tab[kj[c]];
			w[(size_t)j] = dot * (double)a.scale;
			mx = std::max(mx, w[(size_t)j]);
		}
		for (int64_t j = pad[b]; j <= i; j++)
			sum += (w[(size_t)j] = exp(w[(size_t)j] - mx));
		for (int64_t j = pad[b]; j <= i; j++) {
			const uint16_t *vj = v + (b * S + j) * a.ldv + hk * d;
			double p = w[(size_t)j] / sum;

			for (int64_t c = 0; c < d; c++)
				ref[(size_t)(i * d + c)] += p * (double)h2f_tab[vj[c]];
		}
	}
}

/* out against base (both fp16 [batch * seq, ldo]), every row. */
static cmp compare_all(const shape &sh, const struct cublas_attn &a, const uint16_t *out,
		       const uint16_t *base, const int32_t *pad)
{
	cmp r = { 0, 0, 0, 0 };
	std::vector<double> y((size_t)sh.hd);

	for (int64_t b = 0; b < sh.batch; b++)
		for (int64_t i = 0; i < sh.seq; i++) {
			const uint16_t *row = out + (b * sh.seq + i) * a.ldo;

			for (int64_t h = 0; h < sh.heads; h++) {
				int64_t off = (b * sh.seq + i) * a.ldo + h * sh.hd;

				for (int64_t c = 0; c < sh.hd; c++)
					y[(size_t)c] = h2f_tab[base[off + c]];
				row_compare(r, out + off, y.data(), sh.hd, i < pad[b]);
			}
			for (int64_t c = sh.heads * sh.hd; c < a.ldo; c++)
				r.outside += row[c] != 0xffff;
		}
	return r;
}

struct pair_ref {
	int64_t b, h;
	std::vector<double> ref;
};

static cmp compare_refs(const shape &sh, const struct cublas_attn &a, const uint16_t *out,
			const std::vector<pair_ref> &refs, const int32_t *pad)
{
	cmp r = { 0, 0, 0, 0 };

	for (const pair_ref &p : refs)
		for (int64_t i = 0; i < sh.seq; i++)
			row_compare(r, out + (p.b * sh.seq + i) * a.ldo + p.h * sh.hd,
				    p.ref.data() + i * sh.hd, sh.hd, i < pad[p.b]);
	return r;
}

static double median_ms(launch_fn run, const struct cublas_attn *a, int reps)
{
	static cudaEvent_t e0, e1;
	std::vector<float> t;

	if (!e0) {
		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
	}
	for (int i = 0; i < 3; i++)
		CK(run(0, a));
	for (int i = 0; i < reps; i++) {
		float ms;

		CK(cudaEventRecord(e0, 0));
		CK(run(0, a));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t.push_back(ms);
	}
	std::sort(t.begin(), t.end());
	return t[t.size() / 2];
}

struct result {
	const shape *sh;
	const char *name;
	double ms, tf_causal, tf_full;
	bool ok;
};

int main(void)
{
	std::vector<variant> vs;
	std::vector<result> res;
	std::vector<std::string> bad;
	cudaDeviceProp prop;

	sweep_h2f_init();
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
	       prop.minor);
	old_setup();
	CK(cublas_k_prefill_setup());
	{
		variant v;

		snprintf(v.name, sizeof(v.name), "default");
		v.dp = 0;
		v.bps = 0;
		v.run = cublas_k_attention_prefill;
		vs.push_back(v);
	}
	add_shapes<64>(vs);
	add_shapes<80>(vs);
	add_shapes<128>(vs);
	printf("variants (blocks per SM):\n");
	for (const variant &v : vs)
		if (v.dp)
			printf("  d%-3d %-26s %d\n", v.dp, v.name, v.bps);

	for (const shape &sh : shapes) {
		int64_t rows = sh.batch * sh.seq, hc = sh.heads * sh.hd, kc = sh.kv_heads * sh.hd;
		struct cublas_attn a;
		std::vector<int32_t> pad((size_t)sh.batch, 0);
		std::vector<uint16_t> hq, hk, hv, hold, hout;
		std::vector<pair_ref> refs;
		uint16_t *q, *k, *v, *out;
		int32_t *dpad;
		double flops_c = 4.0 * (double)sh.hd * (double)sh.seq * (double)(sh.seq + 1) / 2 *
				 (double)(sh.batch * sh.heads);
		double flops_f = 4.0 * (double)sh.hd * (double)sh.seq * (double)sh.seq *
				 (double)(sh.batch * sh.heads);
		size_t obytes;

		memset(&a, 0, sizeof(a));
		a.ldq = hc + sh.extra;
		a.ldk = kc + sh.extra;
		a.ldv = kc + 2 * sh.extra;
		a.ldo = hc + 3 * sh.extra;
		a.batch = sh.batch, a.seq = sh.seq, a.heads = sh.heads, a.kv_heads = sh.kv_heads;
		a.group = (int)(sh.heads / sh.kv_heads);
		a.head_dim = sh.hd;
		a.scale = sh.zero_scale ? 0.0f : sh.scale != 0 ? sh.scale :
			  1.0f / sqrtf((float)sh.hd);
		for (int64_t b = 0; b < sh.batch; b++)
			pad[(size_t)b] = sh.pad_kind == 1 ? (int32_t)((b * 37) % 300) :
					 sh.pad_kind == 2 ? sh.pads[b] : 0;
		hq.resize((size_t)(rows * a.ldq));
		hk.resize((size_t)(rows * a.ldk));
		hv.resize((size_t)(rows * a.ldv));
		for (uint16_t &x : hq)
			x = rand_half();
		for (uint16_t &x : hk)
			x = rand_half();
		for (uint16_t &x : hv)
			x = rand_half();
		obytes = (size_t)(rows * a.ldo) * 2;
		CK(cudaMalloc(&q, hq.size() * 2));
		CK(cudaMalloc(&k, hk.size() * 2));
		CK(cudaMalloc(&v, hv.size() * 2));
		CK(cudaMalloc(&out, obytes));
		CK(cudaMalloc(&dpad, pad.size() * 4));
		CK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(k, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(v, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dpad, pad.data(), pad.size() * 4, cudaMemcpyHostToDevice));
		a.q = q, a.k = k, a.v = v, a.out = out, a.pad = dpad;

		/* the host references: a few pairs, or all of a small shape */
		for (int64_t b = 0; b < sh.batch; b++)
			for (int64_t h = 0; h < sh.heads; h++) {
				bool pick = sh.refs < 0 || (b == 0 && h == 0) ||
					    (b == sh.batch - 1 && h == sh.heads - 1) ||
					    (sh.refs > 2 && b == sh.batch / 2 &&
					     h == sh.heads / 2) ||
					    (sh.refs > 3 && b == 1 && h == 1);

				if (!pick)
					continue;
				refs.push_back(pair_ref{ b, h, {} });
				reference(sh, a, hq.data(), hk.data(), hv.data(), pad.data(), b, h,
					  refs.back().ref);
			}

		printf("\n## %s (batch %lld, seq %lld, heads %lld/%lld, head_dim %lld, scale %g)\n",
		       sh.name, (long long)sh.batch, (long long)sh.seq, (long long)sh.heads,
		       (long long)sh.kv_heads, (long long)sh.hd, (double)a.scale);
		printf("  %-26s %9s %8s %8s %9s %9s\n", "variant", "ms", "TF caus", "TF full",
		       "vs old", "vs ref");

		/* the old kernel: the baseline output */
		hold.resize(obytes / 2);
		hout.resize(obytes / 2);
		CK(cudaMemset(out, 0xff, obytes)); /* NaNs: nothing may stay unwritten */
		CK(old_run(0, &a));
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(hold.data(), out, obytes, cudaMemcpyDeviceToHost));
		{
			cmp cr = compare_refs(sh, a, hold.data(), refs, pad.data());
			double ms = sh.timed ? median_ms(old_run, &a, 25) : 0;

			printf("  %-26s %9.4f %8.1f %8.1f %9s %9.2e%s\n", "old 4w x1 bc64", ms,
			       ms > 0 ? flops_c / ms / 1e9 : 0, ms > 0 ? flops_f / ms / 1e9 : 0,
			       "-", cr.worst, cmp_ok(cr, TOL) ? "" : "  (old kernel off the reference)");
			if (sh.timed)
				res.push_back(result{ &sh, "old", ms, flops_c / ms / 1e9,
						      flops_f / ms / 1e9, true });
		}

		for (const variant &vr : vs) {
			cmp co, cr;
			double ms = 0;
			bool ok;

			if (vr.dp && vr.dp != dp_of(sh.hd))
				continue;
			CK(cudaMemset(out, 0xff, obytes));
			CK(vr.run(0, &a));
			CK(cudaDeviceSynchronize());
			CK(cudaMemcpy(hout.data(), out, obytes, cudaMemcpyDeviceToHost));
			co = compare_all(sh, a, hout.data(), hold.data(), pad.data());
			cr = compare_refs(sh, a, hout.data(), refs, pad.data());
			ok = cmp_ok(co, TOL) && cmp_ok(cr, TOL);
			if (sh.timed)
				ms = median_ms(vr.run, &a, 25);
			printf("  %-26s %9.4f %8.1f %8.1f %9.2e %9.2e", vr.name, ms,
			       ms > 0 ? flops_c / ms / 1e9 : 0, ms > 0 ? flops_f / ms / 1e9 : 0,
			       co.worst, cr.worst);
			if (co.nonzero + cr.nonzero)
				printf("  %lld padded values not zero",
				       (long long)(co.nonzero + cr.nonzero));
			if (co.nonfinite + cr.nonfinite)
				printf("  %lld values not finite or unwritten",
				       (long long)(co.nonfinite + cr.nonfinite));
			if (co.outside)
				printf("  %lld values written past the heads",
				       (long long)co.outside);
			printf("%s\n", ok ? "" : "  WRONG");
			if (!ok)
				bad.push_back(std::string(vr.name) + " on " + sh.name);
			if (sh.timed)
				res.push_back(result{ &sh, vr.name, ms, flops_c / ms / 1e9,
						      flops_f / ms / 1e9, ok });
		}
		fflush(stdout);
		CK(cudaFree(q));
		CK(cudaFree(k));
		CK(cudaFree(v));
		CK(cudaFree(out));
		CK(cudaFree(dpad));
	}

	printf("\n## TFLOP/s, causal half (full square in parentheses); * wrong\n");
	for (const shape &sh : shapes) {
		if (!sh.timed)
			continue;
		printf("%s\n", sh.name);
		for (const result &r : res)
			if (r.sh == &sh)
				printf("  %-26s %7.1f (%7.1f)%s\n", r.name, r.tf_causal, r.tf_full,
				       r.ok ? "" : " *");
	}
	if (!bad.empty()) {
		printf("\nWRONG:\n");
		for (const std::string &b : bad)
			printf("  %s\n", b.c_str());
		return 1;
	}
	printf("\nall variants agree with the old kernel and the reference\n");
	return 0;
}
