/* plugins/compute/cublas/cublas_int.h - internals shared by the host-side
 * files of the cublas backend. */
#ifndef FG_CUBLAS_INT_H
#define FG_CUBLAS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <fgcore/compute.h>
#include <fgcore/plugin.h>

struct cublas_opts {
	int64_t device;
	uint64_t workspace;    /* cuBLASLt workspace per stream */
	uint64_t scratch;      /* per stream: 4-bit dequant tiles, split-K partials, ... */
	int64_t q4_fused_max_m;
	int fp32_residual;
	int device_sampling;
	int device_logprobs;
	int fp8_prefill;
	int64_t fp8_min_rows;
	uint64_t fp8_scratch;  /* per stream, only with fp8_prefill */
	int cuda_graphs;
	int device_experts;
	uint64_t sm_copy_max;
};

/* Row-wise (outer-vector) scales of fp8 products came with cuBLAS 12.9;
 * with an older one the backend builds without fp8_prefill. */
#if CUBLAS_VER_MAJOR > 12 || (CUBLAS_VER_MAJOR == 12 && CUBLAS_VER_MINOR >= 9)
#define CUBLAS_HAVE_FP8 1
#else
#define CUBLAS_HAVE_FP8 0
#endif

/* A compute stream: the CUDA stream plus the memory ops on it may use.
 * Work on one stream is ordered, so its buffers need no other protection. */
/* An fp32 copy of a bias: what cuBLASLt's bias epilogue reads when D is the
 * fp32 residual stream (an fp16 bias is refused there). */
#define CUBLAS_BIAS32_MAX 65536
/* A stream's graphs (graph.c): the executable one of each piece of a step,
 * reused from step to step, and the arena of host arrays staged while
 * recording. */
#define CUBLAS_ARENA_CHUNKS 16
#define CUBLAS_GRAPH_PIECES 256 /* units of a step: 2 + 2 per layer (sep_layer) */
struct cublas_arena_chunk {
	uint8_t *host;     /* cudaHostAlloc */
	uint8_t *dev;      /* cudaMalloc, the same size */
	size_t cap, used;
};
struct cublas_graph {
	int on;            /* the stream is recording */
	int launched;      /* done has been recorded */
	int piece;         /* the piece being recorded */
	cudaGraphExec_t exec[CUBLAS_GRAPH_PIECES];
	cudaEvent_t done;  /* after the last launch: its arena bytes are read */
	struct cublas_arena_chunk chunk[CUBLAS_ARENA_CHUNKS];
	int nchunks;
	uint64_t instantiated, updated;
};

struct cublas_stream {
	cudaStream_t s;
	void *ws;          /* cuBLASLt workspace, ctx->ws_bytes */
	void *scratch;     /* ctx->scratch_bytes */
	float *bias32;     /* CUBLAS_BIAS32_MAX floats */
	void *fp8;         /* ctx->fp8_bytes (fp8_prefill): the products' fp8 operands,
			    * allocated at the stream's first fp8 product */
	int fp8_failed;    /* that allocation failed: the stream's products stay fp16 */
	struct cublas_graph g;
};

/* Small host arrays (ids, positions, pads) go to the device through a ring
 * of page-locked memory mirrored on the device.  Each use is tagged with an
 * event recorded after the kernels that read it, so a slot is reused only
 * once those finished; no global synchronisation. */
#define CUBLAS_STAGE_SLOTS 64
struct cublas_stage_use {
	size_t off, len;
	cudaEvent_t ev;
};
struct cublas_staging {
	uint8_t *host;     /* cudaHostAlloc */
	uint8_t *dev;      /* cudaMalloc */
	size_t cap, head;
	struct cublas_stage_use use[CUBLAS_STAGE_SLOTS];
	unsigned first, count; /* FIFO of uses still possibly in flight */
	cudaEvent_t evs[CUBLAS_STAGE_SLOTS]; /* idle events */
	unsigned nev;
};

/* cuBLASLt plans, kept per shape so repeated decode steps skip the heuristic. */
#define CUBLAS_PLANS 48
struct cublas_plan_key {
	int64_t m, n, k, lda, ldb, ldc, ldd;
	int epilogue;     /* cublasLtEpilogue_t */
	int beta;         /* C is read */
	int d32;          /* C and D are fp32 (the residual stream), else fp16 */
	int align[4];     /* A, B, C, D alignment in bytes (<= 256) */
	int fp8;          /* A and B are E4M3 with one fp32 scale per row (fp8_prefill) */
};
struct cublas_plan {
	struct cublas_plan_key key;
	int valid;
	int found;        /* 0: the heuristic had no algorithm for this key */
	uint64_t used;    /* LRU tick */
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c, d;
	cublasLtMatmulAlgo_t algo;
};

struct cublas_ctx {
	const struct fg_host *host;
	int device;
	int sms;
	int cc;               /* compute capability, major * 10 + minor */
	size_t ws_bytes, scratch_bytes;
	int64_t q4_fused_max_m;
	int f32_hidden;       /* the residual stream is fp32 (fp32_residual) */
	int device_sampling;  /* supports(FG_OP_SAMPLE) */
	int device_logprobs;  /* supports(FG_OP_LOGPROB) */
	int fp8;              /* fp8_prefill, on a device with fp8 tensor cores */
	int64_t fp8_min_rows; /* products with this many rows of x or more use fp8 */
	size_t fp8_bytes;     /* each stream's fp8 buffer; 0 without fp8 */
	int fp8_noted;        /* a product that fp8 could not take was reported */
	int graphs;           /* graph_begin records (cuda_graphs) */
	int device_experts;   /* supports(FG_OP_EXPERTS) (device_experts) */
	size_t sm_copy_max;   /* copies with host memory up to this size run as a kernel */
	cublasLtHandle_t lt;
	cublasHandle_t blas;  /* fallback when cuBLASLt has no algorithm */
	struct cublas_stream def;
	pthread_mutex_t lock; /* host-side state: staging, plans, handles */
	struct cublas_staging st;
	struct cublas_plan plans[CUBLAS_PLANS];
	uint64_t tick;
};

/* ---- plugin.c ------------------------------------------------------------------- */

/* The stream an op runs on (NULL: the backend's default stream). */
static inline struct cublas_stream *cublas_stream_of(struct cublas_ctx *c, void *stream)
{
	return stream ? (struct cublas_stream *)stream : &c->def;
}

/* -EIO and an error line "cublas: <op>: <what>: <CUDA error>" (clears the
 * error state when it is not sticky). */
int cublas_cuda_fail(struct cublas_ctx *c, const char *op, const char *what, cudaError_t e);
int cublas_blas_fail(struct cublas_ctx *c, const char *op, const char *what,
		     cublasStatus_t st);
/* Make the backend's device current on this thread. */
int cublas_enter(struct cublas_ctx *c, const char *op);

/* Copy one or two host arrays (len1 may be 0) to the device in stream order;
 * *dev0 and *dev1 receive their device addresses.  Call cublas_stage_done,
 * even on failure, once the kernels that read them are enqueued.  Called
 * with c->lock held, at most once per op. */
int cublas_stage(struct cublas_ctx *c, struct cublas_stream *s, const char *op,
		 const void *src0, size_t len0, const void *src1, size_t len1, void **dev0,
		 void **dev1);
int cublas_stage_done(struct cublas_ctx *c, struct cublas_stream *s, const char *op);

/* ---- graph.c ------------------------------------------------------------------- */

int cublas_graph_begin(void *ctx, void *stream, int piece);
int cublas_graph_end(void *ctx, void *stream, int launch);
/* need bytes of the graph's arena (page-locked *host, its device mirror
 * *dev), where cublas_stage puts host arrays while the stream records. */
int cublas_graph_reserve(struct cublas_ctx *c, struct cublas_stream *s, const char *op,
			 size_t need, uint8_t **host, uint8_t **dev);
/* Ends a recording left open, frees the graph and the arena. */
void cublas_graph_fini(struct cublas_ctx *c, struct cublas_stream *s);

/* ---- check.c ------------------------------------------------------------------- */

/* 0 when p is a multiple of bytes (a power of two), else -EINVAL and an error line. */
int cublas_need_align(struct cublas_ctx *c, const char *op, const char *name, const void *p,
		      unsigned bytes);

/* ---- ops ------------------------------------------------------------------------- */

int cublas_linear(void *ctx, void *stream, const struct fg_linear_args *a);
void cublas_plans_clear(struct cublas_ctx *c);
int cublas_embed(void *ctx, void *stream, const struct fg_embed_args *a);
int cublas_layer_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a);
int cublas_rope(void *ctx, void *stream, const struct fg_rope_args *a);
int cublas_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a);
int cublas_attention_prefill(void *ctx, void *stream, const struct fg_attention_args *a);
int cublas_attention_decode(void *ctx, void *stream, const struct fg_attention_args *a);

/* ---- generic.c ------------------------------------------------------------------- */

int cublas_add(void *ctx, void *stream, const struct fg_add_args *a);
int cublas_route(void *ctx, void *stream, const struct fg_route_args *a);
int cublas_gather(void *ctx, void *stream, const struct fg_gather_args *a);
int cublas_scatter_add(void *ctx, void *stream, const struct fg_scatter_add_args *a);
int cublas_linear_grouped(void *ctx, void *stream, const struct fg_linear_grouped_args *a);
int cublas_softcap(void *ctx, void *stream, const struct fg_softcap_args *a);
int cublas_experts(void *ctx, void *stream, const struct fg_experts_args *a);

#endif
