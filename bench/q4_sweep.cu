/* bench/q4_sweep.cu - the fused 4-bit linear (k_linear.cu's cb_q4_mma) in
 * several block shapes, timed at decode shapes, to choose each m's variant
 * from measurements.  A developer's tool, built by hand on a GPU machine:
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Iinclude \
 *        bench/q4_sweep.cu -o q4_sweep && ./q4_sweep
 *   ./q4_sweep one M N K V   one run of variant V (for ncu), after a warm-up
 *
 * Every variant's output is checked against the weight dequantized and
 * multiplied in fp32 by a plain kernel (different summation order: a
 * relative error of 1e-3 of the largest output is allowed); the rates are GB/s
 * of encoded bytes (codes and (scale, min) pairs), the median of 25 runs
 * over copies of the weight that together exceed the L2 cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <fgcore/half.h>

#include "plugins/compute/cublas/k_linear.cu"
#include "bench/cuda_check.h"

typedef void (*launch_fn)(cudaStream_t, int64_t, int64_t, int64_t, const uint16_t *, int64_t,
			  const void *, const cublas_epi &, void *, int64_t, int, float *);

struct variant {
	const char *name;
	cb_fused_shape shape;
	int bps; /* blocks an SM, by the occupancy calculator */
	launch_fn run;
};

template <int NT, int RT, int WR, int WK, int CW, int MINB>
static variant make(const char *name)
{
	typedef q4_cfg<NT, RT, WR, WK, CW> C;
	int bps = 0;

	CK(cudaFuncSetAttribute(cb_q4_mma<NT, RT, WR, WK, CW, MINB, false>,
				cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, cb_q4_mma<NT, RT, WR, WK, CW, MINB, false>,
							 C::THREADS, C::SMEM));
	return variant{ name, q4_shape_of<NT, RT, WR, WK, CW, MINB>(), bps,
			cb_q4_launch<NT, RT, WR, WK, CW, MINB> };
}

typedef std::vector<variant> vset;

#define ADD(S, NT, RT, WR, WK, CW, MINB) \
	(S).push_back(make<NT, RT, WR, WK, CW, MINB>(#NT "," #RT "," #WR "," #WK "," #CW "," #MINB))

/* Candidates by rows of x; the first of each is the shipped one. */
static vset candidates(int64_t m)
{
	vset s;

	if (m <= 8) {
		ADD(s, 1, 2, 2, 4, 1, 2);
		ADD(s, 1, 2, 1, 8, 1, 2);
		ADD(s, 1, 2, 1, 8, 2, 2);
		ADD(s, 1, 2, 1, 8, 2, 1);
		ADD(s, 1, 4, 1, 8, 1, 1);
		ADD(s, 1, 1, 1, 8, 2, 2);
		ADD(s, 1, 2, 1, 4, 2, 4);
		ADD(s, 1, 4, 1, 4, 1, 2);
		ADD(s, 1, 2, 2, 4, 2, 1);
	} else if (m <= 16) {
		ADD(s, 2, 4, 2, 2, 1, 3);
		ADD(s, 2, 2, 2, 2, 1, 4);
		ADD(s, 2, 2, 4, 1, 2, 2);
		ADD(s, 2, 4, 2, 2, 1, 2);
		ADD(s, 2, 2, 4, 2, 1, 2);
		ADD(s, 2, 4, 4, 1, 1, 2);
		ADD(s, 2, 2, 2, 4, 1, 2);
		ADD(s, 2, 2, 8, 1, 1, 1);
		ADD(s, 2, 2, 4, 2, 1, 3);
	} else if (m <= 32) {
		ADD(s, 4, 2, 4, 1, 2, 3);
		ADD(s, 4, 2, 4, 1, 2, 2);
		ADD(s, 4, 2, 8, 1, 1, 1);
		ADD(s, 4, 2, 8, 1, 2, 1);
		ADD(s, 4, 4, 4, 1, 1, 1);
		ADD(s, 4, 4, 4, 1, 1, 2);
		ADD(s, 4, 4, 2, 2, 1, 2);
		ADD(s, 4, 1, 8, 1, 2, 2);
		ADD(s, 4, 2, 4, 2, 1, 2);
		ADD(s, 4, 2, 2, 2, 2, 2);
		ADD(s, 4, 2, 4, 2, 1, 3);
		ADD(s, 4, 4, 2, 2, 1, 3);
		ADD(s, 4, 2, 8, 1, 1, 2);
	} else {
		ADD(s, 8, 2, 4, 1, 2, 2);
		ADD(s, 8, 2, 8, 1, 1, 1);
		ADD(s, 8, 4, 4, 1, 1, 1);
		ADD(s, 8, 4, 2, 2, 1, 1);
		ADD(s, 8, 2, 4, 2, 1, 1);
		ADD(s, 4, 2, 4, 1, 2, 2);
		ADD(s, 4, 2, 8, 1, 1, 1);
		ADD(s, 4, 4, 4, 1, 1, 1);
		ADD(s, 8, 2, 4, 1, 1, 2);
		ADD(s, 8, 2, 8, 1, 1, 2);
	}
	return s;
}

static uint32_t rng = 12345;
static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

struct problem {
	int64_t m, n, k;
	size_t wbytes; /* one encoded weight */
	int copies;
	uint8_t *w;    /* copies back to back, each 256-byte aligned */
	size_t wstride;
	uint16_t *x, *out, *ref;
	float *part;
	size_t part_floats;
};

static void setup(problem &p, int64_t m, int64_t n, int64_t k)
{
	size_t data = cb_q4_data_bytes(n, k), groups = (n + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
	std::vector<uint8_t> hw;
	std::vector<uint16_t> hx(m * k);

	p.m = m, p.n = n, p.k = k;
	p.wbytes = data + groups * k * 4;
	p.wstride = (p.wbytes + 255) & ~(size_t)255;
	p.copies = (int)std::max<size_t>(1, (size_t)(256u << 20) / p.wbytes + 1);
	hw.resize(p.wbytes);
	for (size_t i = 0; i < data; i++)
		hw[i] = (uint8_t)next_u32();
	for (size_t g = 0; g < groups * k; g++) {
		/* scale in [0.001, 0.01), min in [-0.08, 0): plausible weights */
		uint16_t sc = fg_float_to_half(0.001f + 0.009f * (float)(next_u32() % 1000) / 1000.0f);
		uint16_t mn = fg_float_to_half(-0.08f * (float)(next_u32() % 1000) / 1000.0f);

		memcpy(&hw[data + 4 * g], &sc, 2);
		memcpy(&hw[data + 4 * g + 2], &mn, 2);
	}
	for (auto &v : hx)
		v = fg_float_to_half(((float)(next_u32() % 2001) - 1000.0f) / 1000.0f);
	CK(cudaMalloc(&p.w, p.wstride * p.copies));
	for (int c = 0; c < p.copies; c++)
		CK(cudaMemcpy(p.w + c * p.wstride, hw.data(), p.wbytes, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&p.x, m * k * 2));
	CK(cudaMemcpy(p.x, hx.data(), m * k * 2, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&p.out, m * n * 2));
	CK(cudaMalloc(&p.ref, m * n * 2));
	p.part_floats = (size_t)16 * m * n;
	CK(cudaMalloc(&p.part, p.part_floats * 4));
}

static void teardown(problem &p)
{
	CK(cudaFree(p.w));
	CK(cudaFree(p.x));
	CK(cudaFree(p.out));
	CK(cudaFree(p.ref));
	CK(cudaFree(p.part));
}

/* One product with the shipped k-split rule applied to v. */
static void run_once(const problem &p, const variant &v, int sms, int copy, uint16_t *out)
{
	cublas_epi ep;
	int z = cb_fused_split(&v.shape, v.bps, p.m, p.n, p.k, sms, p.part_floats, 0.5625);

	memset(&ep, 0, sizeof ep);
	v.run(0, p.m, p.n, p.k, p.x, p.k, p.w + (size_t)copy * p.wstride, ep, out, p.n, z, p.part);
	CK(cudaGetLastError());
	if (z > 1)
		cb_fused_finish<<<cb_blocks(p.m * p.n, CB_THREADS, CB_GRID_CAP), CB_THREADS>>>(
			p.m, p.n, z, p.part, ep, out, p.n);
	CK(cudaGetLastError());
}

/* The reference: the weight dequantized by cb_dequant_*, then one thread per
 * output summing in fp32. */
__global__ void ref_gemm(int64_t m, int64_t n, int64_t k, const uint16_t *x, const uint16_t *w,
			 uint16_t *out)
{
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = e / n, j = e % n;
	float acc = 0;

	if (e >= m * n)
		return;
	for (int64_t c = 0; c < k; c++)
		acc += cb_h2f(x[i * k + c]) * cb_h2f(w[j * k + c]);
	out[e] = cb_f2h(acc);
}

static void reference(const problem &p)
{
	uint16_t *w;

	CK(cudaMalloc(&w, (size_t)p.n * p.k * 2));
	CK(cublas_k_q4_dequant(0, p.w, p.n, p.k, 0, p.n, w));
	ref_gemm<<<(unsigned)((p.m * p.n + 127) / 128), 128>>>(p.m, p.n, p.k, p.x, w, p.ref);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	CK(cudaFree(w));
}

static double time_variant(const problem &p, const variant &v, int sms)
{
	cudaEvent_t a, b;
	std::vector<float> ms;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 3; i++)
		run_once(p, v, sms, i % p.copies, p.out);
	for (int i = 0; i < 25; i++) {
		float t;

		CK(cudaEventRecord(a));
		run_once(p, v, sms, i % p.copies, p.out);
		CK(cudaEventRecord(b));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&t, a, b));
		ms.push_back(t);
	}
	std::sort(ms.begin(), ms.end());
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return ms[ms.size() / 2];
}

/* Largest |out - ref| over the largest |ref|. */
static double check(const problem &p)
{
	std::vector<uint16_t> o(p.m * p.n), r(p.m * p.n);
	double worst = 0, big = 0;

	CK(cudaMemcpy(o.data(), p.out, o.size() * 2, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(r.data(), p.ref, r.size() * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < o.size(); i++) {
		float fo = fg_half_to_float(o[i]), fr = fg_half_to_float(r[i]);

		if (fo != fo)
			return 1e30;
		worst = std::max(worst, (double)fabsf(fo - fr));
		big = std::max(big, (double)fabsf(fr));
	}
	return worst / (big > 0 ? big : 1);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; int64_t n, k; } shapes[] = {
		{ "175B proj", 12288, 12288 }, { "175B fc1", 49152, 12288 },
		{ "175B fc2", 12288, 49152 },  { "30B fc1", 28672, 7168 },
		{ "6.7B fc1", 16384, 4096 },   { "6.7B proj", 4096, 4096 },
	};
	static const int64_t ms[] = { 1, 8, 16, 32, 64 };
	int sms = 0, bad = 0;

	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	if (argc == 6 && !strcmp(argv[1], "one")) {
		problem p;
		int64_t m = atoll(argv[2]);
		vset s = candidates(m);
		int vi = atoi(argv[5]);

		if (vi < 0 || vi >= (int)s.size()) {
			fprintf(stderr, "variant %d out of range (0..%zu)\n", vi, s.size() - 1);
			return 2;
		}
		setup(p, m, atoll(argv[3]), atoll(argv[4]));
		run_once(p, s[vi], sms, 0, p.out);
		CK(cudaDeviceSynchronize());
		run_once(p, s[vi], sms, p.copies > 1 ? 1 : 0, p.out);
		CK(cudaDeviceSynchronize());
		teardown(p);
		return 0;
	}
	printf("# GB/s of encoded 4-bit bytes (median of 25), variant NT,RT,WR,WK,CW,MINB "
	       "(first = shipped); %d SMs\n", sms);
	for (int64_t m : ms) {
		vset s = candidates(m);

		for (auto &sh : shapes) {
			problem p;

			setup(p, m, sh.n, sh.k);
			reference(p);
			printf("m=%-3lld %-10s", (long long)m, sh.name);
			for (size_t i = 0; i < s.size(); i++) {
				double t = time_variant(p, s[i], sms), err;

				CK(cudaDeviceSynchronize());
				run_once(p, s[i], sms, 0, p.out);
				CK(cudaDeviceSynchronize());
				err = check(p);
				printf(" | %s %6.0f%s", s[i].name, (double)p.wbytes / t / 1e6,
				       err > 1e-3 ? " WRONG" : "");
				if (err > 1e-3) {
					fprintf(stderr, "m=%lld %s variant %s: error %.3g\n",
						(long long)m, sh.name, s[i].name, err);
					bad = 1;
				}
			}
			printf("\n");
			fflush(stdout);
			teardown(p);
		}
	}
	return bad;
}
