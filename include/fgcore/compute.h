/* fgcore/compute.h - compute backend plugins (kind FG_PLUGIN_COMPUTE).
 *
 * The op set a decoder-only transformer needs.  Every tensor argument lives in
 * the compute tier's memory (host memory for cpu_blas, device memory for
 * cublas); small index arrays (token ids, positions, pad counts) are host
 * memory and the backend copies them where it needs them.
 *
 * Element types: weights are FG_DTYPE_F16; activations, the KV cache and
 * outputs use the backend's activation type (fg_compute_info.act_dtype).
 * Accumulation is always in fp32 or wider.
 *
 * Ops are issued on a stream (NULL: the default stream) and may run
 * asynchronously; events order streams.  A backend without streams runs every
 * op to completion before returning and may leave the stream hooks NULL.
 */
#ifndef FGCORE_COMPUTE_H
#define FGCORE_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>
#include <fgcore/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fg_compute_info {
	enum fg_dtype act_dtype; /* activations, cache and outputs */
	const char *native_codecs; /* comma-separated codec names read inside kernels, e.g. "fp16" */
};

enum fg_activation {
	FG_ACT_NONE = 0,
	FG_ACT_RELU = 1,
};

/* out[i,:] = tok[ids[i],:] + pos[positions[i],:] */
struct fg_embed_args {
	const int32_t *ids;       /* host, n entries, each in [0, tok.rows) */
	const int32_t *positions; /* host, n entries, each in [0, pos.rows) */
	int64_t n;
	struct fg_tensor tok;     /* [vocab, hidden] f16 */
	struct fg_tensor pos;     /* [positions, hidden] f16 */
	struct fg_tensor out;     /* [n, hidden] act */
};

/* out = (x - mean) / sqrt(var + eps) * gamma + beta, per row (biased variance). */
struct fg_layer_norm_args {
	struct fg_tensor x;     /* [n, h] act */
	struct fg_tensor gamma; /* [1, h] f16 */
	struct fg_tensor beta;  /* [1, h] f16 */
	float eps;
	struct fg_tensor out;   /* [n, h] act; may be x */
};

/* out = act(x · wᵀ + bias) + residual */
struct fg_linear_args {
	struct fg_tensor x;        /* [m, k] act */
	struct fg_tensor w;        /* [n, k] f16 */
	struct fg_tensor bias;     /* [1, n] f16; data NULL: none */
	enum fg_activation act;
	struct fg_tensor residual; /* [m, n] act; data NULL: none; may be out */
	struct fg_tensor out;      /* [m, n] act */
};

/* Multi-head attention with a causal mask and left padding.
 * Prefill: q, k, v and out are [batch * seq, heads * head_dim]; query i of
 * row b attends to keys j with pad[b] <= j <= i.  Rows i < pad[b] produce zeros.
 * Decode: q and out are [batch, heads * head_dim]; k and v are the cache
 * viewed as [batch * cache_stride, heads * head_dim] (row b, position t at
 * row b * cache_stride + t); query b attends to positions pad[b] <= t < len. */
struct fg_attention_args {
	struct fg_tensor q, k, v, out;
	int64_t batch;
	int64_t seq;          /* prefill: query and key length; decode: 1 */
	int64_t len;          /* decode: valid cache positions (incl. the new token) */
	int64_t cache_stride; /* decode: rows between batch entries in k, v */
	int64_t heads;
	int64_t head_dim;
	float scale;          /* multiplies q·k, usually 1/sqrt(head_dim) */
	const int32_t *pad;   /* host, batch entries: left pad count of each row */
};

/* Copy n new rows per batch entry into the cache:
 * cache[b * cache_stride + start + i, :] = src[b * n + i, :] for i < n. */
struct fg_kv_append_args {
	struct fg_tensor src;   /* [batch * n, heads * head_dim] act */
	struct fg_tensor cache; /* [batch * cache_stride, heads * head_dim] */
	int64_t batch;
	int64_t n;
	int64_t start;
	int64_t cache_stride;
};

struct fg_compute_ops {
	int (*init)(const struct fg_host *host, const void *opts, void **ctx);
	void (*fini)(void *ctx);
	void (*info)(void *ctx, struct fg_compute_info *info);

	int (*embed)(void *ctx, void *stream, const struct fg_embed_args *a);
	int (*layer_norm)(void *ctx, void *stream, const struct fg_layer_norm_args *a);
	int (*linear)(void *ctx, void *stream, const struct fg_linear_args *a);
	int (*attention_prefill)(void *ctx, void *stream, const struct fg_attention_args *a);
	int (*attention_decode)(void *ctx, void *stream, const struct fg_attention_args *a);
	int (*kv_append)(void *ctx, void *stream, const struct fg_kv_append_args *a);

	/* optional: streams and events; the core's defaults are synchronous no-ops. */
	int (*stream_create)(void *ctx, void **stream);
	void (*stream_destroy)(void *ctx, void *stream);
	int (*stream_sync)(void *ctx, void *stream);
	int (*event_create)(void *ctx, void **event);
	void (*event_destroy)(void *ctx, void *event);
	int (*event_record)(void *ctx, void *event, void *stream);
	int (*stream_wait)(void *ctx, void *stream, void *event);
	/* optional: block the calling thread until the event has happened. */
	int (*event_sync)(void *ctx, void *event);
	/* optional: copy len bytes on the stream, where each of dst and src is
	 * compute-tier memory or host memory (page-locked host memory lets a GPU
	 * backend overlap the copy with compute).  Default: memcpy at once. */
	int (*copy)(void *ctx, void *stream, void *dst, const void *src, size_t len);
	/* optional: out[r] = column of the largest value of row r of x (the first
	 * one on ties), written to host memory; returns once out is filled.  Lets
	 * greedy decoding skip copying whole logit rows out of the compute tier. */
	int (*argmax)(void *ctx, void *stream, const struct fg_tensor *x, int32_t *out);
};

#ifdef __cplusplus
}
#endif
#endif
