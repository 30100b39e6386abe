/* plugins/compute/cpu_blas/cpu_blas.h - internals shared by the cpu_blas files. */
#ifndef FG_CPU_BLAS_H
#define FG_CPU_BLAS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/compute.h>
#include <fgcore/plugin.h>

/* ---- thread pool (pool.c) --------------------------------------------------- */

struct cpu_blas_pool;

/* fn handles indices [begin, end) on thread tid (0 = the caller). */
typedef void (*cpu_blas_task_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* threads counts the caller: threads - 1 workers are started. */
int cpu_blas_pool_create(struct cpu_blas_pool **pool, int threads);
void cpu_blas_pool_destroy(struct cpu_blas_pool *pool);
/* Run fn over [0, n) in chunks of `grain` indices; returns when all are done. */
void cpu_blas_pool_run(struct cpu_blas_pool *pool, int64_t n, int64_t grain,
		       cpu_blas_task_fn fn, void *arg);
/* The same on at most `threads` threads (tids 0 .. threads - 1). */
void cpu_blas_pool_run_on(struct cpu_blas_pool *pool, int threads, int64_t n, int64_t grain,
			  cpu_blas_task_fn fn, void *arg);

/* ---- context (plugin.c) ------------------------------------------------------ */

struct cpu_blas_opts {
	int64_t threads;
	int64_t fused_max_m;
	char isa[FG_OPT_STRING_MAX];
	int64_t tile_mib;
};

/* Vector kernels (fused.c, attention.c); NONE: OpenBLAS and plain C only. */
enum { CPU_BLAS_ISA_NONE = 0, CPU_BLAS_ISA_AVX2 = 1, CPU_BLAS_ISA_AVX512 = 2 };

struct cpu_blas_ctx {
	const struct fg_host *host;
	int threads;
	int64_t fused_max_m;  /* linear: m <= fused_max_m uses the fused kernel */
	size_t tile_bytes;    /* linear, BLAS path: widened weight tile */
	int isa;              /* CPU_BLAS_ISA_* in use */
	int blas_split;       /* linear, BLAS path: the pool splits sgemm (plugin.c) */
	struct cpu_blas_pool *pool;
	pthread_mutex_t lock; /* one op at a time: the pool and scratch are shared */
	float **scratch;      /* per pool thread */
	size_t scratch_len;   /* floats in each scratch[t] */
	float *tile;          /* linear: fp32 copy of a block of w rows (BLAS path) */
	size_t tile_len;
	float *ctile;         /* linear: product tile when out aliases residual */
	size_t ctile_len;
	float *xpack;         /* linear, fused path: x with aligned rows */
	size_t xpack_len;
};

/* Grow every thread's scratch to at least n floats (64-byte aligned). */
int cpu_blas_scratch(struct cpu_blas_ctx *c, size_t n);
/* Grow *buf (64-byte aligned) to at least n floats. */
int cpu_blas_buffer(struct cpu_blas_ctx *c, float **buf, size_t *len, size_t n, const char *what);

/* ---- fused fp32 x fp16 dot products (fused.c) ------------------------------------ */

/* 1 when this CPU runs the kernels of `isa`. */
int cpu_blas_isa_supported(int isa);
/* Rows of x one cpu_blas_fused_dot call handles: 4 (AVX2) or 8 (AVX-512). */
int cpu_blas_fused_rows(int isa);
/* Floats per accumulator: 8 (AVX2) or 16 (AVX-512). */
int cpu_blas_fused_lanes(int isa);

#define CPU_BLAS_DOT_FIRST 1 /* start from zero (else resume from state) */
#define CPU_BLAS_DOT_LAST 2  /* finish into acc (else park in state) */

/* acc[i][j] += x[i,:k] . w[j,:k] for i < im <= cpu_blas_fused_rows(isa),
 * j < jn <= 3; x rows are ldx floats apart, w rows (fp16) ldw apart.  A dot
 * product split over several calls (k a multiple of the lane count in all
 * but the last) parks its accumulators in state (3 * rows * lanes floats). */
void cpu_blas_fused_dot(int isa, int im, int jn, const float *x, int64_t ldx,
			const uint16_t *w, int64_t ldw, int64_t k, int flags, float *state,
			float acc[8][3]);

/* ---- fused fp32 x 4-bit dot products (fused.c; layout: fgcore/q4.h) ---------------------- */

/* Rows of x one cpu_blas_q4_dot call handles (8 with AVX-512, else 4), and
 * floats per accumulator (16 AVX-512, 8 AVX2, 16 plain C). */
int cpu_blas_q4_rows(int isa);
int cpu_blas_q4_lanes(int isa);
/* s[c], mn[c] = the fp16 (scale, min) pair p[c] (4 bytes, as the codec writes
 * them) in fp32 for c < k; zeros from k up to a multiple of 32. */
void cpu_blas_q4_params(int isa, const uint8_t *p, int64_t k, float *s, float *mn);
/* acc[i][j] += x[i,:k] . w_j[:k] for i < im <= cpu_blas_q4_rows(isa), j < jn <= 3,
 * where w_j[c] = q * s[c] + mn[c] (fp32) and q is nibble c of the bytes at
 * w + j * ldw (even c in the high nibble).  x rows and s, mn must hold zeros
 * from k up to the next multiple of 16 (they are read); flags and state as
 * for cpu_blas_fused_dot (state: 3 * rows * lanes floats).  Lane l sums
 * k = l (mod lanes) in k order: the result depends on the ISA only. */
void cpu_blas_q4_dot(int isa, int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		     int64_t ldw, const float *s, const float *mn, int64_t k, int flags,
		     float *state, float acc[8][3]);

/* dst[c] = q * s[c] + mn[c] for c < k, q = nibble c of the bytes at w: a row
 * of FG_DTYPE_Q4_ROWS that starts a byte, decoded as cpu_blas_q4_rows_row does. */
void cpu_blas_q4_decode(int isa, const uint8_t *w, const float *s, const float *mn, int64_t k,
			float *dst);

/* ---- fused fp32 x fp8 dot products (fused.c; layout: fgcore/f8.h) ------------------------ */

/* Rows of x one cpu_blas_f8_dot call handles (4), and floats per accumulator
 * (8 with AVX2 or AVX-512, which run the AVX2 kernels; 16 plain C). */
int cpu_blas_f8_rows(int isa);
int cpu_blas_f8_lanes(int isa);
/* acc[i][j] += x[i,:k] . w_j[:k] for i < im <= cpu_blas_f8_rows(isa), j < jn <= 3,
 * where w_j[c] = fg_f8_value(code c of the bytes at w + j * ldw, s[j]).  x
 * rows must hold zeros from k up to the next multiple of 16 (they are read);
 * flags and state as for cpu_blas_fused_dot (state: 3 * rows * lanes floats).
 * Lane l sums k = l (mod lanes) in k order: the result depends on the ISA only. */
void cpu_blas_f8_dot(int isa, int im, int jn, const float *x, int64_t ldx, const uint8_t *w,
		     int64_t ldw, const float *s, int64_t k, int flags, float *state,
		     float acc[8][3]);
/* dst[c] = fg_f8_value(w[c], scale) for c < k: a row of FG_DTYPE_F8_ROWS. */
void cpu_blas_f8_decode(int isa, const uint8_t *w, float scale, int64_t k, float *dst);

/* dst[0..w) = columns [c0, c0 + w) of row r of a checked fp32 or fp16 view
 * (ops.c).  Returns dst, or the view's own memory for fp32. */
const float *cpu_blas_load(const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
			   float *dst);
/* The same for a checked FG_DTYPE_F8_COLS view (an fp8 cache), decoded by
 * f8.h's rule (cpu_blas_f8_decode, a group's columns at a time). */
void cpu_blas_f8c_load(int isa, const struct fg_tensor *t, int64_t r, int64_t c0, int64_t w,
		       float *dst);

/* ---- 4-bit groups (ops.c; layout: fgcore/q4.h) ------------------------------------- */
/* dst[0..cols) = row r of a checked FG_DTYPE_Q4_ROWS view, decoded. */
void cpu_blas_q4_rows_row(const struct fg_tensor *t, int64_t r, float *dst);
/* Encode x[0..cols) as row r of a checked FG_DTYPE_Q4_COLS view, byte for byte
 * what the int4_group64 codec writes for that row (fgcore/q4.h's rule; the
 * nibble of a byte shared with a neighbouring row is kept), with the isa's
 * vector kernels. */
void cpu_blas_q4_cols_store(int isa, const struct fg_tensor *t, int64_t r, const float *x);

/* ---- attention (attention.c, attention_q4.c) ---------------------------------------- */

/* The row that holds key position j: j itself, or j % ring in a ring. */
static inline size_t cpu_blas_key_row(int64_t j, int64_t ring)
{
	return (size_t)(ring ? j % ring : j);
}

/* The first key column the query at column hi of row b sees: the row's
 * first real one, or within the sliding window (compute ABI 1.11). */
static inline int64_t cpu_blas_attn_first_key(const struct fg_attention_args *a, int64_t b,
					      int64_t hi)
{
	int64_t lo = a->pad[b];
	return a->window > 0 && hi - a->window + 1 > lo ? hi - a->window + 1 : lo;
}

/* The most keys one query attends to: a ring holds `ring` of them, a
 * window sees `window` (compute ABI 1.12: a ring as short as the window,
 * whatever len - pad is, since cpu_blas_attn_first_key starts within it). */
static inline int64_t cpu_blas_attn_keys(const struct fg_attention_args *a, int decode)
{
	int64_t n = !decode ? a->seq : a->ring && a->ring < a->len ? a->ring : a->len;
	return a->window > 0 && a->window < n ? a->window : n;
}

/* Decode over a 4-bit cache (FG_DTYPE_Q4_COLS k and v), arguments checked. */
int cpu_blas_attention_q4(struct cpu_blas_ctx *c, const struct fg_attention_args *a);

/* ---- ops ----------------------------------------------------------------------
 * The core validates every argument against fgcore/compute.h before calling
 * these (core/backend/compute_ops.c); they check only this backend's limits. */

int cpu_blas_embed(void *ctx, void *stream, const struct fg_embed_args *a);
int cpu_blas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a);
int cpu_blas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a);
int cpu_blas_linear(void *ctx, void *stream, const struct fg_linear_args *a);
int cpu_blas_attention_prefill(void *ctx, void *stream, const struct fg_attention_args *a);
int cpu_blas_attention_decode(void *ctx, void *stream, const struct fg_attention_args *a);
int cpu_blas_rope(void *ctx, void *stream, const struct fg_rope_args *a);
int cpu_blas_logprob(void *ctx, void *stream, const struct fg_logprob_args *a);
/* The generic tier, minor 10 (generic.c). */
int cpu_blas_add(void *ctx, void *stream, const struct fg_add_args *a);
int cpu_blas_route(void *ctx, void *stream, const struct fg_route_args *a);
int cpu_blas_gather(void *ctx, void *stream, const struct fg_gather_args *a);
int cpu_blas_scatter_add(void *ctx, void *stream, const struct fg_scatter_add_args *a);
int cpu_blas_linear_grouped(void *ctx, void *stream, const struct fg_linear_grouped_args *a);
/* minor 12 (generic.c): out = cap * tanh(x / cap). */
int cpu_blas_softcap(void *ctx, void *stream, const struct fg_softcap_args *a);
int cpu_blas_timer_create(void *ctx, void **timer);
void cpu_blas_timer_destroy(void *ctx, void *timer);
int cpu_blas_timer_record(void *ctx, void *timer, void *stream);
int cpu_blas_timer_elapsed(void *ctx, void *start, void *end, double *seconds);

#endif
