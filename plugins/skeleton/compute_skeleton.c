/* plugins/skeleton/compute_skeleton.c - the commented example of a compute plugin.
 *
 * A compute backend runs the handful of operations a decoder-only transformer
 * needs (fgcore/compute.h) on tensors that live in the compute tier's memory.
 * This one works on host memory with plain C loops: slow, but complete and
 * readable, so it shows exactly what each op must compute.  The core checks
 * every argument before an op runs, so a real backend (cpu_blas, cublas)
 * replaces the loops and adds checks of its own limits only.
 *
 * It implements compute ABI 1.1 (fgcore/compute.h): RMS norm, optional beta
 * and position table, SiLU and the `mul` gate in linear, rotary embedding,
 * grouped-query attention, and `supports`.  A plugin built for 1.0 still loads;
 * the core never asks it for what 1.1 added.
 *
 * Types: weights (embedding tables, linear weights, layer-norm parameters)
 * are fp16 bit patterns; activations, the KV cache and outputs use the
 * backend's activation type, fp32 here (see skeleton_compute_info).
 *
 * Streams and events are optional: without them the core treats every op as
 * complete when it returns, which is what this backend does.
 *
 * Out of tree, with only the installed headers:
 *     cc -shared -fPIC -fvisibility=hidden $(pkg-config --cflags fgcore) \
 *        compute_skeleton.c -o compute_skeleton.so -lm
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/compute.h>
#include <fgcore/half.h> /* the core's reference fp16 conversion */
#include <fgcore/plugin.h>
#include <fgcore/tensor.h>

/* ---- options ---------------------------------------------------------------- */

struct skeleton_compute_opts {
	int check_finite; /* FG_OPT_BOOL */
};

static const struct fg_option skeleton_compute_options[] = {
	{ .key = "check_finite", .type = FG_OPT_BOOL, .def = "false",
	  .help = "fail an op whose output holds NaN or infinity (slower; for debugging)",
	  .offset = offsetof(struct skeleton_compute_opts, check_finite) },
	{ .key = NULL },
};

struct skeleton_compute {
	const struct fg_host *host;
	struct skeleton_compute_opts opts;
};

/* ---- helpers ------------------------------------------------------------------- */

static const uint16_t *skeleton_h(const struct fg_tensor *t, int64_t r)
{
	return (const uint16_t *)t->data + r * t->ld;
}

static float *skeleton_f(const struct fg_tensor *t, int64_t r)
{
	return (float *)t->data + r * t->ld;
}

static int skeleton_finite(struct skeleton_compute *c, const char *op, const struct fg_tensor *t)
{
	if (!c->opts.check_finite)
		return 0;
	for (int64_t r = 0; r < t->rows; r++) {
		const float *row = skeleton_f(t, r);

		for (int64_t j = 0; j < t->cols; j++) {
			if (!isfinite(row[j])) {
				fg_error(c->host, "compute_skeleton: %s: output [%lld, %lld] is not "
					 "finite", op, (long long)r, (long long)j);
				return -EDOM;
			}
		}
	}
	return 0;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static int skeleton_compute_init(const struct fg_host *host, const void *opts, void **ctx)
{
	struct skeleton_compute *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		fg_error(host, "compute_skeleton: out of memory");
		return -ENOMEM;
	}
	c->host = host;
	c->opts = *(const struct skeleton_compute_opts *)opts;
	*ctx = c;
	return 0;
}

static void skeleton_compute_fini(void *ctx)
{
	free(ctx);
}

static void skeleton_compute_info(void *ctx, struct fg_compute_info *info)
{
	(void)ctx;
	info->act_dtype = FG_DTYPE_F32;
	info->native_codecs = NULL; /* read from ABI 1.0 plugins only; 1.1 answers `supports` */
}

/* What this backend runs, asked by the core before any op (and before a run,
 * so that a model, codec or policy it cannot serve is refused up front).
 * Here: every op and variant of ABI 1.1 on fp16 weights and fp32 activations
 * and caches; no 4-bit tensors (FG_DTYPE_Q4_ROWS / Q4_COLS). */
static int skeleton_compute_supports(void *ctx, enum fg_op op, enum fg_dtype dtype)
{
	(void)ctx;
	switch (op) {
	case FG_OP_EMBED:
	case FG_OP_EMBED_TOKENS:
	case FG_OP_LINEAR:
	case FG_OP_LINEAR_SILU:
	case FG_OP_LINEAR_MUL:
		return dtype == FG_DTYPE_F16; /* the weights' type */
	case FG_OP_LAYER_NORM:
	case FG_OP_RMS_NORM:
	case FG_OP_ROPE:
	case FG_OP_ATTENTION_PREFILL:
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_ATTENTION_GQA:
	case FG_OP_KV_APPEND:
		return dtype == FG_DTYPE_F32; /* the activations' or the cache's type */
	case FG_OP_SAMPLE:
		return 0; /* optional: the core samples the logits on the host */
	case FG_OP_LOGPROB:
		return 0; /* optional: the core takes log-probabilities on the host */
	case FG_OP_ATTENTION_CACHED:
		return 0; /* optional: the core runs a decode op per new token instead */
	case FG_OP_ATTENTION_RING:
		return 0; /* optional: without it a run's columns do not wrap */
	case FG_OP_ADD:
	case FG_OP_ROUTE:
	case FG_OP_GATHER:
	case FG_OP_SCATTER_ADD:
	case FG_OP_LINEAR_GROUPED:
		return 0; /* optional: only mixture-of-experts models need them */
	case FG_OP_LINEAR_GELU:
	case FG_OP_NORM_SHIFT:
	case FG_OP_ATTENTION_SOFTCAP:
	case FG_OP_SOFTCAP:
		return 0; /* optional: only Gemma 2 needs them */
	case FG_OP_EXPERTS:
		return 0; /* optional: the core composes a mixture from the generic ops */
	}
	return 0; /* an op of a newer ABI */
}

/* ---- ops -------------------------------------------------------------------------
 * The core checks every argument against fgcore/compute.h before calling an op
 * (types, shapes, ld >= cols, index ranges, aliasing, that `supports` said
 * yes), so the ops below only compute.  A backend checks its own limits
 * only (cpu_blas: OpenBLAS's 32-bit sizes; cublas: its kernels' head_dim). */

/* out[i,:] = tok[ids[i],:] + pos[positions[i],:]; no position table (rotary
 * models): out[i,:] = tok[ids[i],:]. */
static int skeleton_compute_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t h = a->tok.cols;

	(void)stream;
	for (int64_t i = 0; i < a->n; i++) {
		const uint16_t *t = skeleton_h(&a->tok, a->ids[i]);
		const uint16_t *p = a->pos.data ? skeleton_h(&a->pos, a->positions[i]) : NULL;
		float *o = skeleton_f(&a->out, i);

		for (int64_t j = 0; j < h; j++)
			o[j] = fg_half_to_float(t[j]) + (p ? fg_half_to_float(p[j]) : 0.0f);
	}
	return skeleton_finite(c, "embed", &a->out);
}

/* Per row, in double: layer norm (x - mean) / sqrt(var + eps) * gamma (+ beta),
 * or RMS norm x / sqrt(mean(x²) + eps) * gamma. */
static int skeleton_compute_layer_norm(void *ctx, void *stream,
				       const struct fg_layer_norm_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t n = a->x.rows, h = a->x.cols;
	int rms = a->kind == FG_NORM_RMS;

	(void)stream;
	for (int64_t i = 0; i < n; i++) {
		const float *x = skeleton_f(&a->x, i);
		float *o = skeleton_f(&a->out, i); /* may be x: read the row first */
		double mean = 0, var = 0, inv;

		if (!rms) {
			for (int64_t j = 0; j < h; j++)
				mean += x[j];
			mean /= (double)(h ? h : 1);
		}
		for (int64_t j = 0; j < h; j++)
			var += (x[j] - mean) * (x[j] - mean);
		var /= (double)(h ? h : 1); /* biased, as PyTorch's LayerNorm; RMS: mean(x²) */
		inv = 1.0 / sqrt(var + a->eps);
		for (int64_t j = 0; j < h; j++) {
			double y = (x[j] - mean) * inv * fg_half_to_float(skeleton_h(&a->gamma, 0)[j]);

			if (a->beta.data) /* optional from ABI 1.1; never given with RMS */
				y += fg_half_to_float(skeleton_h(&a->beta, 0)[j]);
			o[j] = (float)y;
		}
	}
	return skeleton_finite(c, "layer_norm", &a->out);
}

/* out = act(x · wᵀ + bias) ⊙ mul + residual.  act: none, ReLU or SiLU
 * (x * sigmoid(x)); mul (ABI 1.1) gates the result element by element, which
 * makes SwiGLU two calls: up = x · w_upᵀ, then out = silu(x · w_gateᵀ) ⊙ up. */
static int skeleton_compute_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t m = a->x.rows, k = a->x.cols, n = a->w.rows;
	float *row;

	(void)stream;
	/* One output row at a time, through a scratch row: out may be the
	 * residual itself. */
	row = malloc((size_t)(n ? n : 1) * sizeof(*row));
	if (row == NULL) {
		fg_error(c->host, "compute_skeleton: linear: out of memory for %lld floats",
			 (long long)n);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < m; i++) {
		const float *x = skeleton_f(&a->x, i);

		for (int64_t j = 0; j < n; j++) {
			const uint16_t *w = skeleton_h(&a->w, j);
			double acc = 0;

			for (int64_t l = 0; l < k; l++)
				acc += (double)x[l] * fg_half_to_float(w[l]);
			if (a->bias.data)
				acc += fg_half_to_float(skeleton_h(&a->bias, 0)[j]);
			if (a->act == FG_ACT_RELU && acc < 0)
				acc = 0;
			else if (a->act == FG_ACT_SILU)
				acc = acc / (1.0 + exp(-acc));
			if (a->mul.data)
				acc *= skeleton_f(&a->mul, i)[j];
			if (a->residual.data)
				acc += skeleton_f(&a->residual, i)[j];
			row[j] = (float)acc;
		}
		memcpy(skeleton_f(&a->out, i), row, (size_t)n * sizeof(*row));
	}
	free(row);
	return skeleton_finite(c, "linear", &a->out);
}

/* Rotary position embedding, in place, rotate-half form: in every head the
 * first rot_dim values form pairs (i, i + rot_dim / 2) that turn by the angle
 * position * inv_freq[i] (the table comes from the core, any frequency
 * scaling already applied), cos and sin multiplied by attn_factor. */
static int skeleton_compute_rope(void *ctx, void *stream, const struct fg_rope_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t half = a->rot_dim / 2;

	(void)stream;
	for (int64_t r = 0; r < a->n; r++) {
		float *x = skeleton_f(&a->x, r);

		for (int64_t i = 0; i < half; i++) {
			/* the angle in fp32, as the contract says */
			float angle = (float)a->positions[r] * a->inv_freq[i];
			double cs = cos(angle) * a->attn_factor, sn = sin(angle) * a->attn_factor;

			for (int64_t h = 0; h < a->heads; h++) {
				float *p = x + h * a->head_dim;
				double u = p[i], v = p[i + half];

				p[i] = (float)(u * cs - v * sn);
				p[i + half] = (float)(v * cs + u * sn);
			}
		}
	}
	return skeleton_finite(c, "rope", &a->x);
}

/* Softmax-weighted sum of v rows [first, last] for one query row and head:
 * out = sum_j softmax(scale * q . k_j) v_j.  k and v rows are base + j; the
 * head reads the columns of its key/value head (grouped-query attention: query
 * head h uses kv head h / (heads / kv_heads); kv_heads 0 means heads). */
static void skeleton_attend(const struct fg_attention_args *a, const float *q, int64_t head,
			    int64_t base, int64_t first, int64_t last, float *scores, float *out)
{
	int64_t d = a->head_dim, off = head * d;
	int64_t kv_heads = a->kv_heads ? a->kv_heads : a->heads;
	int64_t koff = head / (a->heads / kv_heads) * d;
	double max = -INFINITY, sum = 0;

	for (int64_t j = first; j <= last; j++) {
		const float *k = skeleton_f(&a->k, base + j) + koff;
		double s = 0;

		for (int64_t e = 0; e < d; e++)
			s += (double)q[off + e] * k[e];
		scores[j - first] = (float)(s * a->scale);
		if (scores[j - first] > max)
			max = scores[j - first];
	}
	for (int64_t j = first; j <= last; j++) {
		scores[j - first] = (float)exp(scores[j - first] - max);
		sum += scores[j - first];
	}
	for (int64_t e = 0; e < d; e++)
		out[off + e] = 0;
	for (int64_t j = first; j <= last; j++) {
		const float *v = skeleton_f(&a->v, base + j) + koff;
		float p = (float)(scores[j - first] / sum);

		for (int64_t e = 0; e < d; e++)
			out[off + e] += p * v[e];
	}
}

/* The first key the query at column last of row b sees: the row's first
 * real position, or the window's first (compute ABI 1.11). */
static int64_t skeleton_first_key(const struct fg_attention_args *a, int64_t b, int64_t last)
{
	int64_t first = a->pad[b];

	if (a->window > 0 && last - a->window + 1 > first)
		first = last - a->window + 1;
	return first;
}

static int skeleton_compute_attention_prefill(void *ctx, void *stream,
					      const struct fg_attention_args *a)
{
	struct skeleton_compute *c = ctx;
	float *scores;

	(void)stream;
	scores = malloc((size_t)(a->seq ? a->seq : 1) * sizeof(*scores));
	if (scores == NULL) {
		fg_error(c->host, "compute_skeleton: attention_prefill: out of memory");
		return -ENOMEM;
	}
	for (int64_t b = 0; b < a->batch; b++) {
		for (int64_t i = 0; i < a->seq; i++) {
			int64_t r = b * a->seq + i;
			const float *q = skeleton_f(&a->q, r);
			float *o = skeleton_f(&a->out, r);

			for (int64_t h = 0; h < a->heads; h++) {
				if (i < a->pad[b]) { /* a padding query: zeros */
					memset(o + h * a->head_dim, 0,
					       (size_t)a->head_dim * sizeof(*o));
					continue;
				}
				/* causal: keys pad[b] .. i of the same sequence */
				skeleton_attend(a, q, h, b * a->seq, skeleton_first_key(a, b, i), i,
						scores, o);
			}
		}
	}
	free(scores);
	return skeleton_finite(c, "attention_prefill", &a->out);
}

static int skeleton_compute_attention_decode(void *ctx, void *stream,
					     const struct fg_attention_args *a)
{
	struct skeleton_compute *c = ctx;
	float *scores;

	(void)stream;
	scores = malloc((size_t)(a->len ? a->len : 1) * sizeof(*scores));
	if (scores == NULL) {
		fg_error(c->host, "compute_skeleton: attention_decode: out of memory");
		return -ENOMEM;
	}
	for (int64_t b = 0; b < a->batch; b++) {
		const float *q = skeleton_f(&a->q, b);
		float *o = skeleton_f(&a->out, b);

		for (int64_t h = 0; h < a->heads; h++) {
			if (a->pad[b] >= a->len) { /* nothing to attend to */
				memset(o + h * a->head_dim, 0, (size_t)a->head_dim * sizeof(*o));
				continue;
			}
			skeleton_attend(a, q, h, b * a->cache_stride,
					skeleton_first_key(a, b, a->len - 1), a->len - 1, scores, o);
		}
	}
	free(scores);
	return skeleton_finite(c, "attention_decode", &a->out);
}

static int skeleton_compute_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	int64_t hd = a->src.cols;

	(void)ctx;
	(void)stream;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->n; i++)
			memcpy(skeleton_f(&a->cache, b * a->cache_stride + a->start + i),
			       skeleton_f(&a->src, b * a->n + i), (size_t)hd * sizeof(float));
	return 0;
}

/* ---- the ops table and the one exported symbol --------------------------------- */

static const struct fg_compute_ops skeleton_compute_ops = {
	.init			= skeleton_compute_init,
	.fini			= skeleton_compute_fini,
	.info			= skeleton_compute_info,
	.embed			= skeleton_compute_embed,
	.layer_norm		= skeleton_compute_layer_norm,
	.linear			= skeleton_compute_linear,
	.attention_prefill	= skeleton_compute_attention_prefill,
	.attention_decode	= skeleton_compute_attention_decode,
	.kv_append		= skeleton_compute_kv_append,
	/* stream_* and event_* are optional: ops here finish before returning. */
	.rope			= skeleton_compute_rope,      /* required from ABI 1.1 */
	.supports		= skeleton_compute_supports,  /* required from ABI 1.1 */
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	/* Your kind's version (compute's own minor, fgcore/compute.h) from the
	 * headers you build with: what your ops table's layout follows.  The
	 * hooks of minors after 1.1 are optional, so this one leaves them NULL. */
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_skeleton",
	.description	= "example compute backend: plain C loops on fp32 (plugins/skeleton: copy it to write a backend)",
	.probe		= NULL, /* plain C: usable everywhere */
	.ops		= &skeleton_compute_ops,
	.options	= skeleton_compute_options,
	.opts_size	= sizeof(struct skeleton_compute_opts),
};
