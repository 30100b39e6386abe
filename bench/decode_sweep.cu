/* bench/decode_sweep.cu - decode attention over a 4-bit (Q4_COLS) KV cache:
 * the tensor-core kernel (k_decode_mma.cuh) in several rings next to the
 * CUDA-core kernel it replaced for head sizes 64 and 128 (k_decode.cu's
 * DC_Q4X path, "cores", the baseline of the ratios) and to what the backend
 * runs now ("shipped": mma with DX_STAGES, or the cores where the mma
 * kernel does not apply, printed "fallback").  A developer's tool, built by
 * hand on a GPU machine:
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Iinclude \
 *        bench/decode_sweep.cu -o decode_sweep && ./decode_sweep
 *   ./decode_sweep one S V   shape S (index into shapes[]) with variant V
 *                            (and the baseline), checked, run twice: for ncu
 *
 * Variants: "mma stN", rings of N tiles (N - 1 in flight per warp: at 16
 * warps an SM, 2 or 3 tiles of 2304 bytes each are 74 or 110 KB an SM);
 * "mma st4kf" also leaves k's codes as 1024 + c and 1024 + 16 c (no HADD2 /
 * HFMA2 for k; q of high-nibble dims is pre-divided by 16, exact in f16 for
 * |q| >= 2^-10), and takes the offsets' share, 1024 · Σ q, out of each
 * tile's fresh fp32 sum: 389 instructions per 16 positions, ~5.4 a byte
 * (mma: 414, ~5.8; cores: ~628, ~8.7).  Its cost is cancellation: a
 * score's sum carries ~1024 |Σ q| for at most 4 mma, so a few fp32 ulps of
 * that (~1e-3 |Σ q|) times scale · sl2 reach the exponent, ~1e-4 for these
 * inputs; larger |q| or k ranges grow it proportionally.
 *
 * Inputs: random fp16 q in [-2, 2]; k and v random fp16 (|x| <= 2, a
 * different amplitude per group) encoded on the host by fgcore/q4.h's
 * encoder, rows drawn from a pool of encoded rows for the large shapes, laid
 * out as the backend's cache: rows b * stride + t (stride > len; the rows past
 * len hold data too, so reading them would show), codes then pairs.  Every
 * variant's output is checked against the CUDA-core kernel's (every row) and
 * against a double-precision host reference that decodes the cache with
 * fg_q4_value (every (row, head) of the edge shapes, every 13th of the timed
 * ones): max |x - ref| over a row over the row's max |ref| must be below
 * 2e-3 (the fp16 output alone may be off by 2^-11 ≈ 4.9e-4 of a value, the
 * f16 P' adds ~2^-12 per term, randomly; a host emulation of the kernel
 * stayed below 7e-4);
 * rows with pad >= len must be exactly 0; the output starts as NaN and has
 * 8 extra columns that must stay NaN.  Exits 1 naming any wrong variant.
 *
 * Rates: GB/s of packed bytes read, Σ_b (len - pad_b) · kv_heads ·
 * 2 · (head_dim / 2 + 4 · head_dim / 64) (codes and (scale, min) pairs of k
 * and v over [pad, len)), the median of 25 runs after 3 warm-ups, rotating
 * over copies of the cache that together exceed 256 MiB (> L2).  For GQA
 * the CUDA-core path reads k/v once per query head (L2 may absorb some):
 * the same formula still counts each cache byte once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "plugins/compute/cublas/k_decode.cu"
#include "bench/cuda_check.h"
#include "bench/sweep_compare.h"

/* a row's largest error over its largest value (see the header comment) */
#define TOL 2e-3

/* ---- variants ------------------------------------------------------------------------ */

struct runargs {
	int sms;
	float *part;
	size_t part_floats;
};

/* One attention; *splits and *fallback report what ran. */
typedef cudaError_t (*run_fn)(const struct cublas_attn *, const runargs &, int *splits,
			      bool *fallback);

/* k_decode.cu's CUDA-core kernel, which the backend ran for every 4-bit cache
 * before k_decode_mma.cuh: the baseline of the ratios. */
static cudaError_t run_cores(const struct cublas_attn *a, const runargs &r, int *splits,
			     bool *fallback)
{
	size_t floats;

	*splits = dc_splits(a, r.sms, r.part_floats, &floats);
	*fallback = false;
	if (floats > r.part_floats)
		return cudaErrorMemoryAllocation;
	return dc_attention(0, a, *splits, r.part);
}

/* What the backend runs now (the mma kernel with DX_STAGES, or the above). */
static cudaError_t run_shipped(const struct cublas_attn *a, const runargs &r, int *splits,
			       bool *fallback)
{
	size_t floats;

	*splits = cublas_decode_splits(a, r.sms, r.part_floats, &floats);
	*fallback = !dx_ok(a);
	if (floats > r.part_floats)
		return cudaErrorMemoryAllocation;
	return cublas_k_attention_decode(0, a, *splits, r.part);
}

template <int ST, bool KF>
static cudaError_t run_mma(const struct cublas_attn *a, const runargs &r, int *splits,
			   bool *fallback)
{
	size_t floats;

	if (!dx_ok(a)) {
		cudaError_t e = run_cores(a, r, splits, fallback);

		*fallback = true;
		return e;
	}
	*fallback = false;
	*splits = dx_splits(a, r.sms, r.part_floats, &floats);
	if (floats > r.part_floats)
		return cudaErrorMemoryAllocation;
	if (a->head_dim == 64)
		return dx_launch<1, ST, KF>(0, a, *splits, r.part);
	return dx_launch<2, ST, KF>(0, a, *splits, r.part);
}

struct variant {
	const char *name;
	run_fn run;
	int bps64, bps128; /* resident blocks an SM (occupancy calculator), head_dim 64 / 128 */
	int regs64, regs128, local64, local128; /* registers a thread, local (spill) bytes */
};

template <int ST, bool KF>
static variant make_mma(const char *name)
{
	variant v = { name, run_mma<ST, KF>, 0, 0, 0, 0, 0, 0 };
	cudaFuncAttributes fa;

	CK((dx_setup<1, ST, KF>()));
	CK((dx_setup<2, ST, KF>()));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.bps64, dx_kernel<1, ST, KF>,
							 DX_THREADS, dx_smem<1, ST>()));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.bps128, dx_kernel<2, ST, KF>,
							 DX_THREADS, dx_smem<2, ST>()));
	CK(cudaFuncGetAttributes(&fa, dx_kernel<1, ST, KF>));
	v.regs64 = fa.numRegs, v.local64 = (int)fa.localSizeBytes;
	CK(cudaFuncGetAttributes(&fa, dx_kernel<2, ST, KF>));
	v.regs128 = fa.numRegs, v.local128 = (int)fa.localSizeBytes;
	return v;
}

/* ---- shapes, data, references ---------------------------------------------------------- */

struct shape {
	const char *name;
	int64_t batch, heads, kv_heads, hd, len;
	int npad;        /* row b's pad: pads[b % npad]; 0: none */
	int32_t pads[4];
	int timed;       /* 0: correctness only, every (row, head) against the host */
};

static const shape shapes[] = {
	{ "OPT-6.7B b64", 64, 32, 32, 128, 544, 0, {}, 1 },
	{ "OPT-6.7B b256", 256, 32, 32, 128, 544, 0, {}, 1 },
	{ "OPT-30B b96", 96, 56, 56, 128, 544, 0, {}, 1 },
	{ "OPT-175B b32", 32, 96, 96, 128, 544, 0, {}, 1 },
	{ "GQA 32/8 b64 len1024", 64, 32, 8, 128, 1024, 0, {}, 1 },
	{ "6.7B-like b64 pads", 64, 32, 32, 128, 544, 4, { 0, 37, 300, 511 }, 1 },
	/* edges */
	{ "len 1", 3, 4, 4, 128, 1, 3, { 0, 0, 1 }, 0 },
	{ "len 77 pads", 4, 3, 3, 128, 77, 4, { 0, 13, 76, 77 }, 0 },
	{ "d64 len 200", 3, 5, 5, 64, 200, 3, { 0, 37, 199 }, 0 },
	{ "d80 (fallback)", 2, 4, 4, 80, 90, 2, { 0, 11 }, 0 },
	{ "gqa 8/2 len 100", 3, 8, 2, 128, 100, 3, { 0, 50, 99 }, 0 },
	{ "gqa 12/1 d64 (2 head blocks)", 2, 12, 1, 64, 150, 2, { 3, 0 }, 0 },
	{ "split 1x3000", 1, 2, 2, 128, 3000, 1, { 5 }, 0 },
	{ "split gqa 8/2 len 2000", 2, 8, 2, 128, 2000, 2, { 0, 700 }, 0 },
	{ "split d64 pad==len", 2, 3, 3, 64, 1500, 2, { 1500, 17 }, 0 },
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1) */
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* One encoded Q4_COLS tensor on the host. */
struct q4t {
	int64_t rows, cols, groups;
	std::vector<uint8_t> bytes;
	size_t data;
};

/* Rows of random fp16 (amplitude per group in [0.25, 2]) encoded by q4.h;
 * beyond `pool` distinct rows, rows are copies of pool rows. */
static void make_cache(q4t &c, int64_t rows, int64_t cols, int64_t pool)
{
	std::vector<float> x(FG_Q4_GROUP);
	std::vector<uint8_t> q(FG_Q4_GROUP);

	c.rows = rows, c.cols = cols, c.groups = (cols + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
	c.data = fg_q4_data_bytes(rows, cols);
	c.bytes.assign(fg_q4_bytes(rows, cols, 1), 0);
	pool = std::min(pool, rows);
	for (int64_t r = 0; r < rows; r++) {
		uint8_t *codes = c.bytes.data(), *prm = c.bytes.data() + c.data;

		if (r >= pool) { /* cols is even: a row's codes are whole bytes */
			int64_t src = (int64_t)(urand() * (double)pool);

			memcpy(codes + r * cols / 2, codes + src * cols / 2, cols / 2);
			memcpy(prm + r * c.groups * 4, prm + src * c.groups * 4, c.groups * 4);
			continue;
		}
		for (int64_t gi = 0; gi < c.groups; gi++) {
			int64_t c0 = gi * FG_Q4_GROUP, n = std::min<int64_t>(FG_Q4_GROUP, cols - c0);
			float amp = (float)(0.25 + 1.75 * urand());
			struct fg_q4_param p;

			for (int64_t j = 0; j < n; j++)
				x[j] = h2f_tab[fg_float_to_half((float)(urand() * 2 - 1) * amp)];
			fg_q4_encode_group(x.data(), (size_t)n, &p, q.data());
			fg_q4_param_store(prm, (uint64_t)(r * c.groups + gi), &p);
			for (int64_t j = 0; j < n; j++)
				fg_q4_set_nibble(codes, (uint64_t)(r * cols + c0 + j), q[j]);
		}
	}
}

/* The decoded value of element (r, col), by the rule. */
static double q4_at(const q4t &c, int64_t r, int64_t col)
{
	float sc, mn;

	fg_q4_param_load(c.bytes.data() + c.data, (uint64_t)(r * c.groups + col / FG_Q4_GROUP), &sc,
			 &mn);
	return fg_q4_value(fg_q4_nibble(c.bytes.data(), (uint64_t)(r * c.cols + col)), sc, mn);
}

/* Output row (b, h) in double: ref [hd]; false when pad >= len (all zeros). */
static bool reference(const shape &sh, const struct cublas_attn &a, const uint16_t *q,
		      const q4t &k, const q4t &v, int32_t pad, int64_t b, int64_t h,
		      std::vector<double> &ref)
{
	int64_t d = sh.hd, hk = h / a.group, n = sh.len - pad;
	std::vector<double> w((size_t)std::max<int64_t>(n, 0)), qd((size_t)d);
	double mx = -INFINITY, sum = 0;

	ref.assign((size_t)d, 0.0);
	if (n <= 0)
		return false;
	for (int64_t c = 0; c < d; c++)
		qd[(size_t)c] = h2f_tab[q[b * a.ldq + h * d + c]];
	for (int64_t j = 0; j < n; j++) {
		int64_t r = b * a.stride + pad + j;
		double dot = 0;

		for (int64_t c = 0; c < d; c++)
			dot += qd[(size_t)c] * q4_at(k, r, hk * d + c);
		w[(size_t)j] = dot * (double)a.scale;
		mx = std::max(mx, w[(size_t)j]);
	}
	for (int64_t j = 0; j < n; j++)
		sum += (w[(size_t)j] = exp(w[(size_t)j] - mx));
	for (int64_t j = 0; j < n; j++) {
		int64_t r = b * a.stride + pad + j;
		double p = w[(size_t)j] / sum;

		for (int64_t c = 0; c < d; c++)
			ref[(size_t)c] += p * q4_at(v, r, hk * d + c);
	}
	return true;
}

static void print_cmp(const cmp &c)
{
	if (c.nonzero)
		printf("  %lld padded values not 0", (long long)c.nonzero);
	if (c.nonfinite)
		printf("  %lld values not finite/unwritten", (long long)c.nonfinite);
	if (c.outside)
		printf("  %lld written past the heads", (long long)c.outside);
}

struct result {
	const shape *sh;
	std::string name;
	double gbs, ratio;
	bool ok, fallback;
};

/* ./decode_sweep            every shape, every variant
 * ./decode_sweep one S V    shape S (index into shapes[]) with variant V only,
 *                           checked, then run twice (for ncu) */
int main(int argc, char **argv)
{
	int one_s = -1, one_v = -1;
	std::vector<variant> vs;
	std::vector<result> res;
	std::vector<std::string> bad;
	cudaDeviceProp prop;
	runargs ra;

	if (argc == 4 && !strcmp(argv[1], "one")) {
		one_s = atoi(argv[2]), one_v = atoi(argv[3]);
		if (one_s < 0 || one_s >= (int)(sizeof(shapes) / sizeof(shapes[0])) || one_v < 0) {
			fprintf(stderr, "usage: %s [one SHAPE VARIANT]\n", argv[0]);
			return 2;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [one SHAPE VARIANT]\n", argv[0]);
		return 2;
	}
	sweep_h2f_init();
	CK(cudaGetDeviceProperties(&prop, 0));
	ra.sms = prop.multiProcessorCount;
	printf("device: %s, %d SMs, cc %d.%d, L2 %d MiB\n", prop.name, ra.sms, prop.major,
	       prop.minor, prop.l2CacheSize >> 20);
	CK(cublas_k_decode_setup());
	vs.push_back(variant{ "cores", run_cores, 0, 0 });
	vs.push_back(variant{ "shipped", run_shipped, 0, 0 });
	vs.push_back(make_mma<4, false>("mma st4"));
	vs.push_back(make_mma<6, false>("mma st6"));
	vs.push_back(make_mma<4, true>("mma st4kf"));
	if (one_v >= (int)vs.size()) {
		fprintf(stderr, "variant %d out of range (0..%zu)\n", one_v, vs.size() - 1);
		return 2;
	}
	printf("variants: blocks an SM, registers (spill bytes), d64 / d128\n");
	for (const variant &v : vs)
		if (v.bps128)
			printf("  %-8s %d / %d blocks, %d (%d) / %d (%d) registers\n", v.name, v.bps64,
			       v.bps128, v.regs64, v.local64, v.regs128, v.local128);
	/* the plugin's default scratch: 64 MiB */
	ra.part_floats = (size_t)(64u << 20) / 4;
	CK(cudaMalloc(&ra.part, ra.part_floats * 4));

	for (const shape &sh : shapes) {
		if (one_s >= 0 && &sh != &shapes[one_s])
			continue;
		struct cublas_attn a;
		int64_t stride = sh.len + 5, rows = sh.batch * stride, cols = sh.kv_heads * sh.hd;
		int64_t ldq = sh.heads * sh.hd + (sh.timed ? 0 : 8), ldo = sh.heads * sh.hd + 8;
		std::vector<int32_t> pad((size_t)sh.batch, 0);
		std::vector<uint16_t> hq((size_t)(sh.batch * ldq)), base, hout;
		std::vector<uint8_t *> dk, dv;
		q4t k, v;
		uint16_t *q, *out;
		int32_t *dpad;
		size_t bytes, obytes = (size_t)(sh.batch * ldo) * 2;
		double packed = 0;
		int copies;

		for (int64_t b = 0; b < sh.batch; b++) {
			pad[(size_t)b] = sh.npad ? sh.pads[b % sh.npad] : 0;
			packed += (double)std::max<int64_t>(0, sh.len - pad[(size_t)b]);
		}
		packed *= (double)sh.kv_heads * 2 * (sh.hd / 2 + 4 * ((sh.hd + 63) / 64));
		for (uint16_t &x : hq)
			x = fg_float_to_half((float)(urand() * 4 - 2));
		make_cache(k, rows, cols, sh.timed ? 4096 : rows);
		make_cache(v, rows, cols, sh.timed ? 4096 : rows);
		bytes = k.bytes.size();
		copies = sh.timed ? (int)std::max<size_t>(1, ((size_t)256 << 20) / (2 * bytes) + 1) : 1;
		for (int c = 0; c < copies; c++) {
			uint8_t *pk, *pv;

			CK(cudaMalloc(&pk, bytes));
			CK(cudaMalloc(&pv, bytes));
			CK(cudaMemcpy(pk, k.bytes.data(), bytes, cudaMemcpyHostToDevice));
			CK(cudaMemcpy(pv, v.bytes.data(), bytes, cudaMemcpyHostToDevice));
			dk.push_back(pk);
			dv.push_back(pv);
		}
		CK(cudaMalloc(&q, hq.size() * 2));
		CK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMalloc(&out, obytes));
		CK(cudaMalloc(&dpad, pad.size() * 4));
		CK(cudaMemcpy(dpad, pad.data(), pad.size() * 4, cudaMemcpyHostToDevice));

		memset(&a, 0, sizeof(a));
		a.q = q, a.k = dk[0], a.v = dv[0], a.out = out, a.pad = dpad;
		a.ldq = ldq, a.ldk = cols, a.ldv = cols, a.ldo = ldo;
		a.kv_rows = rows;
		a.batch = sh.batch, a.seq = 1, a.len = sh.len, a.stride = stride;
		a.heads = sh.heads, a.head_dim = sh.hd, a.kv_heads = sh.kv_heads;
		a.group = (int)(sh.heads / sh.kv_heads);
		a.scale = 1.0f / sqrtf((float)sh.hd);
		a.q4 = 1;

		/* host references: every (row, head) of an edge shape, every 13th of a timed one */
		std::vector<std::pair<int64_t, std::vector<double>>> refs;
		for (int64_t i = 0; i < sh.batch * sh.heads; i++) {
			if (sh.timed && i % 13 && i != sh.batch * sh.heads - 1)
				continue;
			refs.push_back({ i, {} });
			reference(sh, a, hq.data(), k, v, pad[(size_t)(i / sh.heads)], i / sh.heads,
				  i % sh.heads, refs.back().second);
		}

		printf("\n## %s: batch %lld, heads %lld/%lld, head_dim %lld, len %lld, %.1f MB packed, "
		       "%d cop%s\n", sh.name, (long long)sh.batch, (long long)sh.heads,
		       (long long)sh.kv_heads, (long long)sh.hd, (long long)sh.len, packed / 1e6,
		       copies, copies > 1 ? "ies" : "y");
		printf("  %-10s %6s %9s %8s %8s %10s %10s\n", "variant", "splits", "us", "GB/s",
		       "vs cores", "err cores", "err host");

		double ship_gbs = 0;
		for (size_t vi = 0; vi < vs.size(); vi++) {
			if (one_v >= 0 && vi != 0 && (int)vi != one_v)
				continue; /* the cores always run: the baseline output */
			const variant &vr = vs[vi];
			cmp cs = { 0, 0, 0, 0 }, ch = { 0, 0, 0, 0 };
			std::vector<double> y((size_t)sh.hd);
			double us = 0, gbs = 0;
			int splits = 1;
			bool fb = false, ok;

			a.k = dk[0], a.v = dv[0];
			CK(cudaMemset(out, 0xff, obytes)); /* NaNs: nothing may stay unwritten */
			CK(vr.run(&a, ra, &splits, &fb));
			CK(cudaDeviceSynchronize());
			hout.resize(obytes / 2);
			CK(cudaMemcpy(hout.data(), out, obytes, cudaMemcpyDeviceToHost));
			if (vi == 0)
				base = hout;
			for (int64_t b = 0; b < sh.batch; b++) {
				for (int64_t h = 0; h < sh.heads; h++) {
					int64_t off = b * ldo + h * sh.hd;

					for (int64_t c = 0; c < sh.hd; c++)
						y[(size_t)c] = h2f_tab[base[off + c]];
					row_compare(cs, hout.data() + off, y.data(), sh.hd,
						    pad[(size_t)b] >= sh.len);
				}
				for (int64_t c = sh.heads * sh.hd; c < ldo; c++)
					cs.outside += hout[b * ldo + c] != 0xffff;
			}
			for (const auto &rf : refs) {
				int64_t b = rf.first / sh.heads, h = rf.first % sh.heads;

				row_compare(ch, hout.data() + b * ldo + h * sh.hd, rf.second.data(),
					    sh.hd, pad[(size_t)b] >= sh.len);
			}
			ok = cmp_ok(cs, TOL) && cmp_ok(ch, TOL);
			if (sh.timed) {
				static cudaEvent_t e0, e1;
				std::vector<float> ts;

				if (!e0) {
					CK(cudaEventCreate(&e0));
					CK(cudaEventCreate(&e1));
				}
				for (int i = 0; i < (one_s >= 0 ? 2 : 28); i++) {
					float ms;

					a.k = dk[i % copies], a.v = dv[i % copies];
					CK(cudaEventRecord(e0, 0));
					CK(vr.run(&a, ra, &splits, &fb));
					CK(cudaEventRecord(e1, 0));
					CK(cudaEventSynchronize(e1));
					CK(cudaEventElapsedTime(&ms, e0, e1));
					if (i >= 3 || one_s >= 0)
						ts.push_back(ms);
				}
				std::sort(ts.begin(), ts.end());
				us = ts[ts.size() / 2] * 1e3;
				gbs = packed / us / 1e3;
				if (vi == 0)
					ship_gbs = gbs;
			}
			printf("  %-10s %6d %9.1f %8.0f %8.2f %10.2e %10.2e%s", vr.name, splits, us,
			       gbs, ship_gbs > 0 ? gbs / ship_gbs : 0.0, cs.worst, ch.worst,
			       fb ? "  (fallback: cores)" : "");
			print_cmp(cs);
			print_cmp(ch);
			printf("%s\n", ok ? "" : "  WRONG");
			if (!ok)
				bad.push_back(std::string(vr.name) + " on " + sh.name);
			if (sh.timed)
				res.push_back(result{ &sh, vr.name, gbs,
						      ship_gbs > 0 ? gbs / ship_gbs : 0.0, ok, fb });
		}
		fflush(stdout);
		for (size_t c = 0; c < dk.size(); c++) {
			CK(cudaFree(dk[c]));
			CK(cudaFree(dv[c]));
		}
		CK(cudaFree(q));
		CK(cudaFree(out));
		CK(cudaFree(dpad));
	}

	printf("\n## GB/s of packed k/v bytes (ratio to the cores); * wrong, f fallback\n");
	for (const shape &sh : shapes) {
		if (!sh.timed)
			continue;
		printf("%-24s", sh.name);
		for (const result &r : res)
			if (r.sh == &sh)
				printf("  %s %5.0f (%.2f)%s%s", r.name.c_str(), r.gbs, r.ratio,
				       r.ok ? "" : "*", r.fallback ? "f" : "");
		printf("\n");
	}
	CK(cudaFree(ra.part));
	if (!bad.empty()) {
		printf("\nWRONG:\n");
		for (const std::string &b : bad)
			printf("  %s\n", b.c_str());
		return 1;
	}
	printf("\nall variants agree with the CUDA-core kernel and the host reference\n");
	return 0;
}
