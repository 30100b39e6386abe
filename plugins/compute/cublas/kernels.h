/* plugins/compute/cublas/kernels.h - launchers of the CUDA kernels (the .cu
 * files), callable from the C side.  Every launcher only enqueues work on
 * `s` and returns the launch status (cudaGetLastError()); shapes were
 * validated by the caller.  Tensors are fp16 (uint16_t bit patterns here),
 * except the residual stream, which may be fp32 (void * with a flag). */
#ifndef FG_CUBLAS_KERNELS_H
#define FG_CUBLAS_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- k_linear.cu ---------------------------------------------------------------- */

/* What follows the product in linear: v -> act(v + bias[j]) * mul[i, j] + res[i, j],
 * in fp32, rounded once to out's type.  bias, mul and res may each be NULL
 * (absent); res may be out; mul never overlaps out.  Offsets into mul and res
 * are the caller's (a tile at column n0 passes mul + n0).  f32: res and out
 * are the fp32 residual stream; otherwise fp16 like the rest. */
struct cublas_epi {
	const uint16_t *bias;
	const uint16_t *mul;
	const void *res;
	int64_t ldm, ldr;
	int act;              /* enum fg_activation */
	int f32;
};

/* out[i, j] = epi(src[i, j]) for i < m, j < n.  src may be NULL (treated as 0)
 * and may equal out; src is fp32 when src_f32, else fp16. */
cudaError_t cublas_k_epilogue(cudaStream_t s, int64_t m, int64_t n, const void *src,
			      int src_f32, int64_t lds, const struct cublas_epi *e, void *out,
			      int64_t ldo);

/* dst[i] = src[i] as fp32, i < n. */
cudaError_t cublas_k_h2f(cudaStream_t s, int64_t n, const uint16_t *src, float *dst);

/* Dequantize rows [r0, r0 + nr) of a Q4_ROWS weight [rows, cols] (the whole
 * encoded tensor starts at q4) into dst [nr, cols] fp16 with ld = cols. */
cudaError_t cublas_k_q4_dequant(cudaStream_t s, const void *q4, int64_t rows, int64_t cols,
				int64_t r0, int64_t nr, uint16_t *dst);

/* The fused 4-bit linear for small m: out = epi(x · Wᵀ) with W a
 * Q4_ROWS [n, k].  Needs k % 32 == 0, q4 16-byte aligned, x 16-byte aligned
 * with ldx % 8 == 0 (cublas_q4_fused_ok).  With ksplit > 1, partial sums go to
 * part (ksplit * m * n floats) and a second kernel finishes. */
int cublas_q4_fused_ok(const void *q4, int64_t k, const void *x, int64_t ldx);
/* ksplit and the partial-sum floats it needs, for a grid that fills `sms` SMs. */
int cublas_q4_fused_split(int64_t m, int64_t n, int64_t k, int sms, size_t max_part_floats);
cudaError_t cublas_k_q4_linear(cudaStream_t s, int64_t m, int64_t n, int64_t k,
			       const uint16_t *x, int64_t ldx, const void *q4,
			       const struct cublas_epi *e, void *out, int64_t ldo, int ksplit,
			       float *part);
/* The fused 4-bit linear over groups (the experts op): group e (blockIdx.z)
 * multiplies rows off[e] .. off[e + 1] of x (device offsets) by the
 * Q4_ROWS [n, k] at w[e] (a device array of pointers), the epilogue's mul
 * and out indexed by those rows; no residual, no k split.  max_rows bounds
 * any group's rows; mean_rows picks the variant. */
cudaError_t cublas_k_q4_grouped(cudaStream_t s, int64_t max_rows, int64_t mean_rows, int64_t n,
				int64_t k, const uint16_t *x, int64_t ldx, const void *const *w,
				const int32_t *off, int groups, const struct cublas_epi *e,
				void *out, int64_t ldo);
/* Opt the fused kernels into the dynamic shared memory they use. */
cudaError_t cublas_k_linear_setup(void);

/* ---- k_f8_linear.cu ------------------------------------------------------------- */

/* The fused fp8-weight linear for small m: out = epi(x · Wᵀ) with W an
 * F8_ROWS [n, k] (the whole encoded tensor at f8).  Needs k % 16 == 0, f8
 * 16-byte aligned, x 16-byte aligned with ldx % 8 == 0 (cublas_f8_fused_ok);
 * ksplit and part as for the 4-bit kernel. */
int cublas_f8_fused_ok(const void *f8, int64_t k, const void *x, int64_t ldx);
int cublas_f8_fused_split(int64_t m, int64_t n, int64_t k, int sms, size_t max_part_floats);
cudaError_t cublas_k_f8_linear(cudaStream_t s, int64_t m, int64_t n, int64_t k,
			       const uint16_t *x, int64_t ldx, const void *f8,
			       const struct cublas_epi *e, void *out, int64_t ldo, int ksplit,
			       float *part);
/* Its blocks an SM, from the occupancy calculator. */
cudaError_t cublas_k_f8_linear_setup(void);

/* ---- k_fp8.cu ------------------------------------------------------------------- */

/* The largest finite E4M3 value: a row's largest magnitude maps to it. */
#define CUBLAS_FP8_MAX 448.0f

/* Row-wise E4M3 quantization (the fp8 products of fp8_prefill).  For each row
 * r < rows of the fp16 matrix src [rows, cols] (ld lds):
 *   amax = max_j |src[r, j]| in fp32 (NaN ignored),
 *   inv = amax > 0 ? 448 / amax : 1 and scale[r] = amax > 0 ? amax / 448 : 1
 *   (fp32 divisions, rounded to nearest),
 *   dst[r, j] = E4M3(src[r, j] * inv) for j < cols: one fp32 multiply, then
 *   to nearest even, saturating at +-448 (__NV_SATFINITE), and dst[r, j] = 0
 *   for cols <= j < ldd.
 * dst 16-byte aligned, ldd a multiple of 16 and >= cols; rows < 2^31. */
cudaError_t cublas_k_fp8_rows(cudaStream_t s, int64_t rows, int64_t cols, const uint16_t *src,
			      int64_t lds, uint8_t *dst, int64_t ldd, float *scale);

/* Dequantize rows [r0, r0 + nr) of an F8_ROWS weight [rows, cols] (the whole
 * encoded tensor starts at f8) into dst [nr, cols] fp16 with ld = cols:
 * fp16(fg_f8_value(code, the row's scale)), one rounding. */
cudaError_t cublas_k_f8_dequant(cudaStream_t s, const void *f8, int64_t rows, int64_t cols,
				int64_t r0, int64_t nr, uint16_t *dst);

/* ---- k_misc.cu ------------------------------------------------------------------ */

/* dst = src, len bytes, copied by a kernel: one side is page-locked host
 * memory (its device address), the other device memory. */
cudaError_t cublas_k_copy(cudaStream_t s, void *dst, const void *src, size_t len);

/* Per row: rms == 0: (x - mean) / sqrt(var + eps) * (gamma + shift) + beta;
 * rms != 0: x / sqrt(mean(x²) + eps) * (gamma + shift) + beta.  beta may be
 * NULL (none).  x is fp32 when x_f32 (the residual stream), else fp16; out
 * is fp16. */
cudaError_t cublas_k_layer_norm(cudaStream_t s, int64_t n, int64_t h, const void *x,
				int x_f32, int64_t ldx, const uint16_t *gamma,
				const uint16_t *beta, float eps, float shift, int rms,
				uint16_t *out, int64_t ldo);

/* out[i, :] = tok[ids[i], :] + pos[positions[i], :]; ids/positions on the
 * device; pos NULL: out[i, :] = tok[ids[i], :] (positions unused).  out is
 * fp32 when out_f32, else fp16. */
cudaError_t cublas_k_embed(cudaStream_t s, int64_t n, int64_t h, const int32_t *ids,
			   const int32_t *positions, const uint16_t *tok, int64_t ldt,
			   const uint16_t *pos, int64_t ldp, void *out, int out_f32,
			   int64_t ldo);

/* Rotary embedding in place on x [n, heads * head_dim] (ld ldx): for pair
 * i < rot_dim / 2 of each head, (a, b) = values (i, i + rot_dim / 2), angle
 * = positions[r] * inv_freq[i] in fp32, (a, b) -> (a c - b s, b c + a s) with
 * c, s = cos, sin times attn_factor.  positions and inv_freq on the device. */
cudaError_t cublas_k_rope(cudaStream_t s, int64_t n, int64_t heads, int64_t head_dim,
			  int64_t rot_dim, const int32_t *positions, const float *inv_freq,
			  float attn_factor, uint16_t *x, int64_t ldx);

/* cache[b * stride + start + i, :] = src[b * n + i, :] (fp16 cache). */
cudaError_t cublas_k_kv_append(cudaStream_t s, int64_t batch, int64_t n, int64_t start,
			       int64_t stride, int64_t h, const uint16_t *src, int64_t lds,
			       uint16_t *cache, int64_t ldc);

/* The same into a Q4_COLS cache [rows, h] (groups of 64 along a row), the
 * whole encoded tensor starting at q4 (4-byte aligned). */
cudaError_t cublas_k_kv_append_q4(cudaStream_t s, int64_t batch, int64_t n, int64_t start,
				  int64_t stride, int64_t h, const uint16_t *src, int64_t lds,
				  void *q4, int64_t rows);

/* The same into an F8_COLS cache [rows, h] (fgcore/f8.h: codes, then a scale
 * per group of 64 along a row), the whole encoded tensor starting at f8. */
cudaError_t cublas_k_kv_append_f8(cudaStream_t s, int64_t batch, int64_t n, int64_t start,
				  int64_t stride, int64_t h, const uint16_t *src, int64_t lds,
				  void *f8, int64_t rows);

/* ---- k_prefill.cu / k_decode.cu --------------------------------------------------- */

struct cublas_attn {
	const uint16_t *q;
	const void *k, *v;  /* fp16, or Q4_COLS / F8_COLS encoded tensors (decode) */
	uint16_t *out;
	int64_t ldq, ldk, ldv, ldo;
	int64_t kv_rows;    /* encoded: rows of the k and v tensors (equal) */
	int64_t batch, seq, len, stride, heads, head_dim;
	int64_t start;      /* prefill over the cache: positions before the queries (0: none) */
	int64_t kv_heads;   /* heads of k and v, dividing heads; rows kv_heads * head_dim wide */
	int group;          /* heads / kv_heads: query head h reads k/v head h / group */
	float scale;
	const int32_t *pad; /* device, batch entries */
	int q4;             /* decode: k and v are Q4_COLS */
	int f8;             /* decode: k and v are F8_COLS */
	int64_t ring;       /* decode: 0, or stride: position j of a sequence at its row j % ring */
	int64_t lo;         /* decode: the first position any row reads (len - ring in a
			     * ring, len - window in a window) */
	int64_t window;     /* 0, or a sliding window (compute ABI 1.11) */
	float softcap;      /* 0, or the cap on scale * q·k (compute ABI 1.12) */
};

/* head_dim <= CUBLAS_PREFILL_MAX_D. */
#define CUBLAS_PREFILL_MAX_D 256
#define CUBLAS_DECODE_MAX_D 256
cudaError_t cublas_k_attention_prefill(cudaStream_t s, const struct cublas_attn *a);
cudaError_t cublas_k_prefill_setup(void);

/* Splits of the key range and the scratch floats they need. */
int cublas_decode_splits(const struct cublas_attn *a, int sms, size_t max_floats,
			 size_t *floats);
cudaError_t cublas_k_attention_decode(cudaStream_t s, const struct cublas_attn *a, int splits,
				      float *part);
cudaError_t cublas_k_decode_setup(void);

/* out[r] = index of the largest value of row r of x [rows, cols] (first on ties). */
cudaError_t cublas_k_argmax(cudaStream_t s, int64_t rows, int64_t cols, const uint16_t *x,
			    int64_t ld, int32_t *out);

/* ---- k_generic.cu ------------------------------------------------------------------ */

/* out = alpha x + beta y element by element in fp32 (y NULL: alpha x); x and
 * out of one type (fp32 when x_f32, else fp16), y fp32 when y_f32, else fp16;
 * out may be x or y. */
struct cublas_add {
	int64_t rows, cols;
	const void *x, *y;
	void *out;
	int64_t ldx, ldy, ldo;
	float alpha, beta;
	int x_f32, y_f32;
};
cudaError_t cublas_k_add(cudaStream_t s, const struct cublas_add *a);

/* out = cap tanh(x / cap), element by element in fp32; out may be x. */
cudaError_t cublas_k_softcap(cudaStream_t s, int64_t rows, int64_t cols, const void *x,
			     int64_t ldx, int f32, float cap, void *out, int64_t ldo);

/* The router's top k of each row of x [rows, cols] (struct fg_route_args),
 * ids and weights [rows * k] on the device. */
cudaError_t cublas_k_route(cudaStream_t s, int64_t rows, int64_t cols, const void *x,
			   int64_t ld, int f32, int k, int renorm, int32_t *ids, float *wt);

/* out[i, :] = x[index[i], :], i < n (index on the device). */
cudaError_t cublas_k_gather(cudaStream_t s, int64_t n, int64_t cols, const void *x,
			    int64_t ldx, int f32, const int32_t *index, void *out, int64_t ldo);

/* A scatter-add by output row (device arrays): row rows[t] of out, t <
 * nrows, adds weight[u] y[term[u], :] for u in [start[t], start[t + 1]), in
 * that order, in fp32.  y fp16 or fp32 (y_f32); out fp16, or fp32 (out_f32). */
struct cublas_scatter {
	int64_t nrows, cols;
	const int32_t *rows, *start, *term;
	const float *weight;
	const void *y;
	void *out;
	int64_t ldy, ldo;
	int y_f32, out_f32;
};
cudaError_t cublas_k_scatter_add(cudaStream_t s, const struct cublas_scatter *a);

/* The experts op (compute 1.13): the router's choices ids, wt [rows * k]
 * (cublas_k_route's) grouped on the device.  cublas_k_moe_group fills
 * off [experts + 1] (expert e's grouped rows are off[e] .. off[e + 1]),
 * row [rows * k] (the row of x of each grouped position), and for each row
 * r its cnt[r] terms term, tw [r * k ..] (grouped positions and weights,
 * by expert id).  Arrays in device memory; the row count stays there. */
struct cublas_moe {
	int64_t rows;
	int k, experts;
	const int32_t *ids;
	const float *wt;
	int32_t *off, *row, *term, *cnt;
	float *tw;
};
cudaError_t cublas_k_moe_group(cudaStream_t s, const struct cublas_moe *g);
/* out[p] = x[row[p]] for p < off[experts]. */
cudaError_t cublas_k_moe_gather(cudaStream_t s, const struct cublas_moe *g, int64_t cols,
				const void *x, int64_t ldx, int f32, void *out, int64_t ldo);
/* out[r] += sum over u < cnt[r] of tw[r k + u] y[term[r k + u]] (y fp16). */
cudaError_t cublas_k_moe_combine(cudaStream_t s, const struct cublas_moe *g, int64_t cols,
				 const void *y, int64_t ldy, void *out, int64_t ldo, int out_f32);

/* ---- k_sample.cu ------------------------------------------------------------------ */

/* One row's parameters of cublas_k_sample (device memory). */
struct cublas_sample_row {
	uint64_t draw;        /* below 2^53 */
	float temperature;    /* <= 0: the argmax */
	float top_p;          /* off unless 0 < top_p < 1 */
	int32_t top_k;        /* off unless 0 < top_k < cols */
	int32_t unused;
};

/* out[r] = the token of row r of x [rows, cols] (cols < 2^31) with p[r]'s
 * parameters, as fgcore/sampling.h defines it; temperature <= 0: what
 * cublas_k_argmax gives.  p and out on the device. */
cudaError_t cublas_k_sample(cudaStream_t s, int64_t rows, int64_t cols, const uint16_t *x,
			    int64_t ld, const struct cublas_sample_row *p, int32_t *out);

/* ---- k_logprob.cu ------------------------------------------------------------------ */

/* For each row r of x [rows, cols] with target[r] >= 0: lp[r] = log p(target[r])
 * and its k most likely ids in top_id / top_lp[r * k ...], as fgcore/logprob.h
 * defines them.  target and the outputs on the device. */
cudaError_t cublas_k_logprob(cudaStream_t s, int64_t rows, int64_t cols, const uint16_t *x,
			     int64_t ld, const int32_t *target, int k, float *lp,
			     int32_t *top_id, float *top_lp);

#ifdef __cplusplus
}
#endif
#endif
