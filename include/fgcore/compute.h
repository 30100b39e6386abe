/* fgcore/compute.h - compute backend plugins (kind FG_PLUGIN_COMPUTE).
 *
 * The op set a decoder-only transformer needs.  Every tensor argument lives in
 * the compute tier's memory (host memory for cpu_blas, device memory for
 * cublas); small index arrays (token ids, positions, pad counts) are host
 * memory and the backend copies them where it needs them.
 *
 * Element types: weights are FG_DTYPE_F16 (linear also takes FG_DTYPE_Q4_ROWS,
 * and from minor 15 FG_DTYPE_F8_ROWS);
 * activations, the KV cache and outputs use the backend's activation type
 * (fg_compute_info.act_dtype), except the residual stream, which uses
 * fg_compute_info.hidden_dtype (minor 3); the decode attention and kv_append
 * also take a FG_DTYPE_Q4_COLS cache, and from minor 16 FG_DTYPE_F8_COLS.  Accumulation is always in fp32 or wider.
 * attention_decode and kv_append also run on activations (q, out, src) of the
 * other plain type t, with a cache of t or FG_DTYPE_Q4_COLS, when the backend
 * answers supports(op, t): that is how the CPU backend (fp32) computes the
 * attention an fp16 GPU backend delegates to it (cpu_cache_compute).
 *
 * Ops are issued on a stream (the engine's compute stream from stream_create;
 * NULL for a backend without streams) and may run asynchronously; events order
 * streams.  A backend without streams runs every op to completion before
 * returning and leaves the stream hooks NULL.
 *
 * The core validates every op's arguments (dtypes, shapes, strides, that the
 * backend declared the op and dtype through `supports`) before it calls the
 * backend, and names the layer and op in its error line; a backend checks
 * only its own device limits.
 *
 * ABI history, in compute's own minor (FG_COMPUTE_ABI_MINOR below; every
 * kind shared one minor up to 1.10, and these are the steps compute took on
 * it).  Members marked "minor 1" are read only from plugins whose
 * abi_version is >= FG_ABI(1, 1); the core never asks a 1.0 plugin for them:
 *   1.0  embed with learned positions, layer norm, linear with ReLU, multi-head
 *        attention, KV append; `native_codecs` names the codecs read natively.
 *   1.1  RMS norm, optional beta and position table, SiLU and a gating
 *        multiplier in linear (SwiGLU), rotary position embedding, grouped-query
 *        attention (kv_heads), and `supports`, which replaces native_codecs.
 *   1.2  timers: marks on a stream whose elapsed time the core reads back, so
 *        a run's breakdown is the device's time, not the issuing thread's.
 *   1.3  hidden_dtype: the residual stream may be wider than the activations
 *        (an fp16 GPU backend keeps it in fp32, as the reference does).
 *   1.4  sample: each row's next token drawn where the logits are, as
 *        fgcore/sampling.h defines it, so sampled decoding copies no logits.
 *   1.5  graphs: the ops of a decode step recorded and launched in a few
 *        pieces (CUDA graphs), which spares the device the gaps between
 *        hundreds of small launches.
 *   1.6  logprob: log-probabilities and the most likely ids taken where the
 *        logits are, so that scoring copies a few numbers per position
 *        instead of whole rows of logits.
 *   1.7  argmax and sample answer -1 for a row with no logit above -inf
 *        (NaN counts as -inf: an overflow upstream), so that the core fails
 *        that request instead of emitting a made-up id; older plugins'
 *        answer for such a row (id 0, or the first id) is not caught.
 *   1.8  attention_prefill over the cache (start > 0): new tokens of each
 *        row attend to the positions cached before them too, in one op, so
 *        that a prompt's rest is computed on top of a shared prefix.
 *   1.9  attention_decode over a ring (`ring`): key position j of a row lives
 *        at its cache row j % ring, so that a run's columns wrap and rows
 *        join a running batch for as long as the job lasts.
 *   1.10 a generic tier beneath the fused ops, which mixture-of-experts
 *        layers are made of: add (with scales), route (a row softmax and its
 *        top k), gather and scatter-add of rows, and a grouped linear (the
 *        rows of each expert times that expert's weights, in one call).
 *        The last minor shared with the other kinds: the next addition here
 *        is compute 1.11 and leaves storage, codec and transport plugins alone.
 *   1.11 sliding-window attention (`window` in struct fg_attention_args):
 *        each query sees only the last `window` positions up to its own
 *        (Mistral's, Qwen2's windowed layers), in prefill and decode.
 *   1.12 Gemma 2's pieces: GELU (tanh form) in linear, RMS norm scaling by
 *        gamma + a shift (`gamma_shift`: Gemma's 1 + w), attention scores
 *        soft-capped (`softcap`), a softcap op for logits, and a ring of a
 *        windowed decode as short as the window.
 *   1.13 experts: a mixture's routed experts in one call, from the router's
 *        logits to the weighted sum added to the residual stream, so that a
 *        device routes and groups the rows itself and a decode step's
 *        mixture layers queue without a round trip to the host; and
 *        copy_small, for the few bytes a stream's next op waits for (the
 *        host's attention output, an activation reload), which a device may
 *        move without its copy engines, where they would wait behind other
 *        streams' bulk transfers.
 *   1.14 host_call: a host function run in a stream's order, so that the
 *        host's work on one GPU batch (its attention over a host cache)
 *        runs while the device works on the next, with no thread of the
 *        core blocked in between.
 *   1.15 fp8 weights: linear (and linear_grouped, experts) also take
 *        FG_DTYPE_F8_ROWS weights (E4M3 with an fp32 scale per output
 *        channel, fgcore/f8.h), where the backend answers supports(op,
 *        FG_DTYPE_F8_ROWS); the core never asks an older backend.
 *   1.16 fp8 KV cache: attention_decode (and its GQA, ring and softcap
 *        variants) and kv_append also take an FG_DTYPE_F8_COLS cache
 *        (E4M3, an fp32 scale per group of 64 values of a row, fgcore/f8.h)
 *        where the backend answers supports(op, FG_DTYPE_F8_COLS); the
 *        core never asks an older backend.
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

/* The compute ABI of this header: a compute plugin declares
 * `.abi_version = FG_COMPUTE_ABI_VERSION`.  Bumped by additions to this
 * header only (and by a change to what every kind shares, fgcore/plugin.h). */
#define FG_COMPUTE_ABI_MINOR 16
#define FG_COMPUTE_ABI_VERSION FG_ABI(FG_ABI_MAJOR, FG_COMPUTE_ABI_MINOR)

struct fg_compute_info {
	enum fg_dtype act_dtype; /* activations, cache and outputs */
	/* ABI 1.0 only: comma-separated codec names read inside kernels, e.g.
	 * "fp16,int4_group64".  Ignored from 1.1 plugins, which answer `supports`. */
	const char *native_codecs;
	/* minor 1: nonzero when the operands live in device memory (the compute
	 * tier must then be a device-memory tier); 0: host memory. */
	int device_memory;
	/* minor 3: the residual stream's type - embed's out, a norm's x (which
	 * may also be act_dtype), and the residual and out of a linear that adds
	 * one.  f32 or f16; left unset, or from a plugin older than 1.3, it is
	 * act_dtype. */
	enum fg_dtype hidden_dtype;
};

enum fg_activation {
	FG_ACT_NONE = 0,
	FG_ACT_RELU = 1,
	FG_ACT_SILU = 2, /* minor 1: x * sigmoid(x) */
	/* minor 12: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x³))), computed
	 * in fp32 (PyTorch's gelu with approximate="tanh") */
	FG_ACT_GELU_TANH = 3,
};

enum fg_norm_kind {
	FG_NORM_LAYER = 0, /* (x - mean) / sqrt(var + eps) * gamma + beta */
	FG_NORM_RMS = 1,   /* minor 1: x / sqrt(mean(x²) + eps) * gamma */
};

/* What `supports` is asked about: an op, or a variant of one, with the dtype
 * of the operand named here.  The core asks before every call (a linear with
 * SiLU and a `mul` asks LINEAR_SILU and LINEAR_MUL; a grouped-query decode asks
 * ATTENTION_DECODE and ATTENTION_GQA), and for foreign activations (see above)
 * asks the op with the activations' dtype as well. */
enum fg_op {
	FG_OP_EMBED = 1,          /* embed with a position table; dtype: tok's */
	FG_OP_EMBED_TOKENS,       /* minor 1: embed without one (pos.data NULL); dtype: tok's */
	FG_OP_LAYER_NORM,         /* layer_norm, kind FG_NORM_LAYER; dtype: x's */
	FG_OP_RMS_NORM,           /* minor 1: layer_norm, kind FG_NORM_RMS; dtype: x's */
	FG_OP_LINEAR,             /* linear with act NONE or RELU; dtype: w's */
	FG_OP_LINEAR_SILU,        /* minor 1: linear with act SILU; dtype: w's */
	FG_OP_LINEAR_MUL,         /* minor 1: linear with a `mul` operand; dtype: w's */
	FG_OP_ROPE,               /* minor 1: rope; dtype: x's */
	FG_OP_ATTENTION_PREFILL,  /* dtype: act */
	FG_OP_ATTENTION_DECODE,   /* dtype: the cache's (act, FG_DTYPE_Q4_COLS or F8_COLS) */
	FG_OP_ATTENTION_GQA,      /* minor 1: either attention with kv_heads < heads; dtype: the cache's */
	FG_OP_KV_APPEND,          /* dtype: the cache's */
	FG_OP_SAMPLE,             /* minor 4: sample; dtype: the logits' (act) */
	FG_OP_LOGPROB,            /* minor 6: logprob; dtype: the logits' (act) */
	FG_OP_ATTENTION_CACHED,   /* minor 8: attention_prefill with start > 0; dtype: the cache's */
	FG_OP_ATTENTION_RING,     /* minor 9: attention_decode with ring > 0; dtype: the cache's */
	FG_OP_ADD,                /* minor 10: add; dtype: x's */
	FG_OP_ROUTE,              /* minor 10: route; dtype: the logits' (act) */
	FG_OP_GATHER,             /* minor 10: gather; dtype: x's */
	FG_OP_SCATTER_ADD,        /* minor 10: scatter_add; dtype: y's */
	FG_OP_LINEAR_GROUPED,     /* minor 10: linear_grouped; dtype: the weights' (all one) */
	FG_OP_LINEAR_GELU,        /* minor 12: linear (or linear_grouped) with act GELU_TANH; dtype: w's */
	FG_OP_NORM_SHIFT,         /* minor 12: layer_norm with gamma_shift != 0; dtype: x's */
	FG_OP_ATTENTION_SOFTCAP,  /* minor 12: either attention with softcap > 0; dtype: the cache's */
	FG_OP_SOFTCAP,            /* minor 12: softcap; dtype: x's */
	FG_OP_EXPERTS,            /* minor 13: experts; dtype: the experts' weights (all one) */
};

/* out[i,:] = tok[ids[i],:] + pos[positions[i],:] */
struct fg_embed_args {
	const int32_t *ids;       /* host, n entries, each in [0, tok.rows) */
	const int32_t *positions; /* host, n entries, each in [0, pos.rows); NULL without pos */
	int64_t n;
	struct fg_tensor tok;     /* [vocab, hidden] f16 */
	struct fg_tensor pos;     /* [positions, hidden] f16; minor 1: data NULL: none */
	struct fg_tensor out;     /* [n, hidden] act */
};

/* Per row: FG_NORM_LAYER: out = (x - mean) / sqrt(var + eps) * gamma + beta
 * (biased variance); FG_NORM_RMS: out = x / sqrt(mean(x²) + eps) * gamma.
 * Minor 12: gamma + gamma_shift in place of gamma, the sum taken in fp32
 * (Gemma's RMS norm scales by 1 + w); 0 for every other model. */
struct fg_layer_norm_args {
	struct fg_tensor x;     /* [n, h] act */
	struct fg_tensor gamma; /* [1, h] f16 */
	struct fg_tensor beta;  /* [1, h] f16; minor 1: data NULL: none (always none for RMS) */
	float eps;
	struct fg_tensor out;   /* [n, h] act; may be x */
	enum fg_norm_kind kind; /* minor 1 */
	float gamma_shift;      /* minor 12 */
};

/* out = act(x · wᵀ + bias) ⊙ mul + residual (⊙: element-wise product).
 * SwiGLU is up = x · w_upᵀ, then out = silu(x · w_gateᵀ) ⊙ up. */
struct fg_linear_args {
	struct fg_tensor x;        /* [m, k] act */
	struct fg_tensor w;        /* [n, k] f16, or FG_DTYPE_Q4_ROWS / F8_ROWS (the whole encoded tensor) */
	struct fg_tensor bias;     /* [1, n] f16; data NULL: none */
	enum fg_activation act;
	struct fg_tensor residual; /* [m, n] act; data NULL: none; may be out */
	struct fg_tensor out;      /* [m, n] act */
	struct fg_tensor mul;      /* minor 1: [m, n] act; data NULL: none; must not overlap out */
};

/* Rotary position embedding, in place, on the first rot_dim values of every
 * head of x (rotate-half form, as Hugging Face's Llama): for pair i of a head
 * (values i and i + rot_dim/2), angle = positions[r] * inv_freq[i],
 * (a, b) -> (a cos - b sin, b cos + a sin), computed in fp32. */
struct fg_rope_args {
	struct fg_tensor x;        /* [n, heads * head_dim] act */
	const int32_t *positions;  /* host, n entries, each >= 0 */
	int64_t n;
	int64_t heads, head_dim;
	int64_t rot_dim;           /* even, <= head_dim */
	const float *inv_freq;     /* host, rot_dim / 2 entries, scaling already applied */
	float attn_factor;         /* multiplies cos and sin (1 unless a scaling says otherwise) */
};

/* Multi-head attention with a causal mask and left padding.
 * Prefill: q and out are [batch * seq, heads * head_dim], k and v
 * [batch * seq, kv_heads * head_dim]; query i of row b attends to keys j with
 * pad[b] <= j <= i.  Rows i < pad[b] produce zeros.
 * Decode: q and out are [batch, heads * head_dim]; k and v are the cache
 * viewed as [batch * cache_stride, kv_heads * head_dim] (row b, position t at
 * row b * cache_stride + t); query b attends to positions pad[b] <= t < len.
 * pad[b] == len masks every position: row b's output is zeros (the engine
 * gives a finished sequence that pad, so that it costs no attention).
 * Prefill over the cache (minor 8, start > 0): q and out are [batch * seq,
 * ...] as in prefill, the queries of row b being its positions start ..
 * start + seq - 1; k and v are the cache as in decode (its positions up to
 * start + seq - 1 written); query i of row b attends to positions pad[b] <=
 * t <= start + i, and gives zeros when start + i < pad[b].
 * Grouped-query attention: query head h reads key/value head
 * h / (heads / kv_heads). */
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
	int64_t kv_heads;     /* minor 1: heads of k and v, dividing heads; 0 means heads */
	int64_t start;        /* minor 8, prefill: positions cached before the queries (0: none) */
	/* minor 9, decode: 0, or cache_stride: key position j of entry b is its
	 * cache row j % ring (len may pass cache_stride; len - pad[b] <= ring). */
	int64_t ring;
	/* minor 11: 0, or a sliding window: the query at column i sees the key
	 * columns j with i - window < j <= i (and j >= pad[b]), in prefill as in
	 * decode (where i is len - 1). */
	int64_t window;
	/* minor 12: 0, or a cap on the scores: s = scale * q·k becomes
	 * softcap * tanh(s / softcap), in fp32, before the mask and softmax
	 * (Gemma 2).  Also minor 12, decode: with window > 0, a ring of at
	 * least `window` rows suffices (len - pad[b] may pass ring), since no
	 * position before len - window is read. */
	float softcap;
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

/* Each row's next token from its logits (minor 4): rows with temperature <= 0
 * take the argmax (the first largest), the others the token fgcore/sampling.h
 * defines for their temperature, top_k, top_p and draw (minor 7: -1 for a
 * row with no logit above -inf, either way).  Host arrays of logits.rows
 * entries. */
struct fg_sample_args {
	struct fg_tensor logits; /* [rows, vocab] act */
	const float *temperature;
	const int32_t *top_k;    /* 0: off */
	const float *top_p;      /* off unless 0 < top_p < 1 */
	const uint64_t *draw;    /* below 2^53 */
	int32_t *out;            /* host memory, filled when the op returns */
};

/* Log-probabilities of rows of logits (minor 6), as fgcore/logprob.h
 * defines them: for each row r with target[r] >= 0, lp[r] = log p(target[r])
 * and its top k in top_id / top_lp[r * k, (r + 1) * k); a row with
 * target[r] < 0 is skipped and its outputs left alone.  Host arrays of
 * logits.rows entries (times k for the top), filled when the op returns. */
struct fg_logprob_args {
	struct fg_tensor logits; /* [rows, vocab] act */
	const int32_t *target;   /* each < vocab */
	int32_t k;               /* 0 .. FG_LOGPROB_TOP_MAX (fgcore/logprob.h) */
	float *lp;
	int32_t *top_id;         /* NULL when k is 0 */
	float *top_lp;           /* NULL when k is 0 */
};

/* ---- minor 10: the generic tier (mixture-of-experts layers) ------------- */

/* out = alpha · x + beta · y, element by element (y NULL-data: out = alpha ·
 * x, a scale), computed in fp32.  Tensors of one shape and type; out may be
 * x or y. */
struct fg_add_args {
	struct fg_tensor x, y, out; /* [rows, cols] */
	float alpha, beta;
};

/* A router's choice for each row of logits [rows, experts] (act): the k
 * experts of the largest logits, most likely first (ties: the lower id), and
 * their weights: with renormalize, the softmax over those k logits (they sum
 * to 1, Mixtral's rule); without, their probabilities in the softmax over all
 * experts (Qwen2-MoE without norm_topk_prob).  Computed in fp32 at least; a
 * row whose logits hold a NaN, or none above -inf, chooses ids -1 with
 * weights 0; +inf logits share the weight equally (as fgcore/logprob.h
 * reads them).  Host arrays of rows * k entries, filled when the op
 * returns: the core decides from the ids which experts a step needs. */
struct fg_route_args {
	struct fg_tensor logits;
	int32_t k;               /* 1 .. experts, at most FG_ROUTE_TOP_MAX */
	int renormalize;
	int32_t *ids;
	float *weights;
};
#define FG_ROUTE_TOP_MAX 64

/* out[i, :] = x[index[i], :] for i < n: rows gathered, e.g. by expert. */
struct fg_gather_args {
	struct fg_tensor x;      /* [rows, cols] */
	const int32_t *index;    /* host, n entries, each in [0, x.rows) */
	int64_t n;
	struct fg_tensor out;    /* [n, cols], the type of x; must not overlap x */
};

/* out[index[i], :] += weight[i] · y[i, :] for i < n.  An index may repeat
 * (a token's k experts add into its row): each row of out becomes its value
 * plus the sum of its terms, the terms summed in order of i in fp32, that
 * sum added to out's value in fp32 and the result rounded to out's type;
 * rows no index names are left alone. */
struct fg_scatter_add_args {
	struct fg_tensor y;      /* [n, cols] */
	const int32_t *index;    /* host, n entries, each in [0, out.rows) */
	const float *weight;     /* host, n entries; NULL: all 1 */
	int64_t n;
	struct fg_tensor out;    /* [rows, cols], the type of y; must not overlap y */
};

/* A linear per group in one call: group g is rows [offset[g], offset[g +
 * 1]) of x and out, and its weights w[g] (bias[g], when given); each group
 * as struct fg_linear_args computes it (act, and mul's rows alike), with no
 * residual.  Empty groups are allowed.  The weights are all of one type; a
 * backend that answers supports(FG_OP_LINEAR_GROUPED, it) runs every
 * activation and mul with them. */
struct fg_linear_grouped_args {
	struct fg_tensor x;            /* [m, k] act, rows grouped */
	const struct fg_tensor *w;     /* host array of groups: each [n, k] f16 or Q4_ROWS */
	const struct fg_tensor *bias;  /* host array of groups ([1, n] f16, data NULL: none), or NULL */
	const int64_t *offset;         /* host, groups + 1 entries: 0 = offset[0] <= ... <= offset[groups] = m */
	int32_t groups;
	enum fg_activation act;
	struct fg_tensor mul;          /* [m, n] act; data NULL: none */
	struct fg_tensor out;          /* [m, n] act */
};

/* minor 12: out = cap * tanh(x / cap), element by element, in fp32 (Gemma
 * 2's final logits); out may be x. */
struct fg_softcap_args {
	struct fg_tensor x, out; /* [rows, cols], one type */
	float cap;               /* > 0 */
};

/* minor 13: a mixture's routed experts, where the logits are.  Exactly the
 * composition of the generic tier (what the core runs without it):
 *   route(logits, k, renormalize) -> each row's ids and weights;
 *   the (row, choice) pairs grouped by expert, experts ascending, rows
 *   ascending within one (a row whose ids are -1 takes no part);
 *   gather x's rows into xg in that order;
 *   linear_grouped: up = xg · w_upᵀ, gate = silu(xg · w_gateᵀ) ⊙ up,
 *   xg = gate · w_downᵀ (each expert's rows with its weights);
 *   scatter_add(xg, the pairs' rows, their weights) into out.
 * A backend computes each step as its own op would (its grouped products
 * may differ from its plain linear in the order of their sums), queues it
 * on the stream without returning anything to the host (so it may be
 * recorded in a graph), and may decline a call with -ENOTSUP (e.g. more
 * rows than its device path takes) without touching anything: the core
 * then runs the composition.  xg, gate and up are workspaces of at least
 * rows * k rows. */
struct fg_experts_args {
	struct fg_tensor x;             /* [rows, hidden] act */
	struct fg_tensor logits;        /* [rows, experts] act */
	int32_t k;                      /* 1 .. experts, at most FG_ROUTE_TOP_MAX */
	int renormalize;
	int32_t experts;
	const struct fg_tensor *w_gate; /* host arrays of experts entries, one type: [ffn, hidden] */
	const struct fg_tensor *w_up;   /* [ffn, hidden] */
	const struct fg_tensor *w_down; /* [hidden, ffn] */
	struct fg_tensor xg;            /* [>= rows * k, hidden] act */
	struct fg_tensor gate, up;      /* [>= rows * k, ffn] act */
	struct fg_tensor out;           /* [rows, hidden] hidden_dtype (or act) */
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
	 * one on ties, NaN left out; minor 7: -1 when none is above -inf),
	 * written to host memory; returns once out is filled.  Lets
	 * greedy decoding skip copying whole logit rows out of the compute tier. */
	int (*argmax)(void *ctx, void *stream, const struct fg_tensor *x, int32_t *out);

	/* minor 1, required: rotary position embedding (struct fg_rope_args). */
	int (*rope)(void *ctx, void *stream, const struct fg_rope_args *a);
	/* minor 1, required: nonzero when the backend runs `op` with operands of
	 * `dtype` (see enum fg_op for which operand).  Asked before a run, so that
	 * an unsupported model, codec or policy is refused before any weight is read. */
	int (*supports)(void *ctx, enum fg_op op, enum fg_dtype dtype);

	/* minor 2, optional, all four or none: timers.  timer_record marks the
	 * point the stream has reached once the work queued before it is done;
	 * timer_elapsed waits for both marks and gives the seconds between them
	 * on the device's clock.  A synchronous backend records the time of the
	 * call. */
	int (*timer_create)(void *ctx, void **timer);
	void (*timer_destroy)(void *ctx, void *timer);
	int (*timer_record)(void *ctx, void *timer, void *stream);
	int (*timer_elapsed)(void *ctx, void *start, void *end, double *seconds);

	/* minor 4, optional: the next token of every row (struct fg_sample_args);
	 * returns once out is filled.  Without it the core copies the logits out
	 * and samples on the host, with the same result. */
	int (*sample)(void *ctx, void *stream, const struct fg_sample_args *a);

	/* minor 5, optional, both or neither: graphs.  After graph_begin the ops
	 * issued on `stream` are recorded instead of run; graph_end with launch
	 * nonzero runs what was recorded, in order, as one piece of work on the
	 * stream and returns without waiting for it; launch = 0 drops it (the
	 * core does so after an op failed).  In between the core issues only
	 * ops, copies between compute-tier buffers, event_record and
	 * timer_record on that stream: nothing that returns data to the host
	 * (argmax, sample, copy to host, stream_sync, event_sync) and no
	 * stream_wait.  Host arrays an op takes (ids, positions, pads) are read
	 * by the time the op returns, as always.  Events and timers recorded in
	 * between must be usable after the launch as if recorded then.
	 * A step may come in pieces: `piece` is 0 for a step's first recording
	 * and counts up for the ones that follow it in the same step, each
	 * begun right after the previous one's graph_end (the next step starts
	 * at 0 again), so a backend can reuse what it made of the same piece of
	 * the previous step.  graph_begin answers -ENOTSUP to decline (e.g.
	 * turned off by an option): the core then issues the ops as usual.  The
	 * core records decode steps that move nothing between tiers, a piece
	 * per unit (a layer's attention, its MLP, ...), up to the step's first
	 * token read-out. */
	int (*graph_begin)(void *ctx, void *stream, int piece);
	int (*graph_end)(void *ctx, void *stream, int launch);

	/* minor 6, optional: log-probabilities where the logits are (struct
	 * fg_logprob_args); returns once the outputs are filled.  Without it
	 * the core copies the logits out and computes them on the host. */
	int (*logprob)(void *ctx, void *stream, const struct fg_logprob_args *a);

	/* minor 10, optional (the core asks `supports` for each): the generic
	 * tier (struct fg_add_args and what follows it).  route returns once
	 * its host arrays are filled. */
	int (*add)(void *ctx, void *stream, const struct fg_add_args *a);
	int (*route)(void *ctx, void *stream, const struct fg_route_args *a);
	int (*gather)(void *ctx, void *stream, const struct fg_gather_args *a);
	int (*scatter_add)(void *ctx, void *stream, const struct fg_scatter_add_args *a);
	int (*linear_grouped)(void *ctx, void *stream, const struct fg_linear_grouped_args *a);

	/* minor 12, optional (supports(FG_OP_SOFTCAP, ...)): struct fg_softcap_args. */
	int (*softcap)(void *ctx, void *stream, const struct fg_softcap_args *a);

	/* minor 13, optional (supports(FG_OP_EXPERTS, weights' dtype)):
	 * struct fg_experts_args; -ENOTSUP declines a call. */
	int (*experts)(void *ctx, void *stream, const struct fg_experts_args *a);
	/* minor 13, optional: `copy` for a few bytes the stream's next op waits
	 * for; same contract.  A device backend may move them through its cores
	 * (not its copy engines, which run other streams' bulk transfers first).
	 * Default: copy. */
	int (*copy_small)(void *ctx, void *stream, void *dst, const void *src, size_t len);

	/* minor 14, optional: run fn(arg) on the host once the stream's work
	 * queued before it is done; the stream's later work waits for it to
	 * return.  Returns once it is queued.  fn calls nothing of the backend
	 * (a device runs it on a thread of its driver).  Default: stream_sync,
	 * then fn(arg). */
	int (*host_call)(void *ctx, void *stream, void (*fn)(void *arg), void *arg);
};

#ifdef __cplusplus
}
#endif
#endif
