/* plugins/skeleton/compute_skeleton.c - the commented example of a compute plugin.
 *
 * A compute backend runs the handful of operations a decoder-only transformer
 * needs (fgcore/compute.h) on tensors that live in the compute tier's memory.
 * This one works on host memory with plain C loops: slow, but complete and
 * readable, so it shows exactly what each op must compute.  A real backend
 * (cpu_blas, cublas) keeps the same argument checks and replaces the loops.
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

/* Check a tensor argument: type, shape (rows or cols < 0: any), layout.
 * Every argument is checked before anything is written. */
static int skeleton_tensor(struct skeleton_compute *c, const char *op, const char *arg,
			   const struct fg_tensor *t, enum fg_dtype dtype, int64_t rows,
			   int64_t cols)
{
	if (t->dtype != dtype) {
		fg_error(c->host, "compute_skeleton: %s: %s has dtype %d, expected %d", op, arg,
			 (int)t->dtype, (int)dtype);
		return -EINVAL;
	}
	if (t->rows < 0 || t->cols < 0 || t->ld < t->cols || (rows >= 0 && t->rows != rows) ||
	    (cols >= 0 && t->cols != cols)) {
		fg_error(c->host, "compute_skeleton: %s: %s is [%lld, %lld] with ld %lld, expected "
			 "[%lld, %lld] with ld >= cols", op, arg, (long long)t->rows,
			 (long long)t->cols, (long long)t->ld, (long long)rows, (long long)cols);
		return -EINVAL;
	}
	/* The view's last element must be addressable: row offsets are computed
	 * in int64_t and must not wrap around. */
	if (t->rows > 1 && t->ld > 0 && t->rows - 1 > (INT64_MAX / 8 - t->cols) / t->ld) {
		fg_error(c->host, "compute_skeleton: %s: %s of %lld rows with ld %lld is larger "
			 "than memory", op, arg, (long long)t->rows, (long long)t->ld);
		return -EINVAL;
	}
	if (t->data == NULL && t->rows > 0 && t->cols > 0) {
		fg_error(c->host, "compute_skeleton: %s: %s has no data", op, arg);
		return -EINVAL;
	}
	return 0;
}

/* Outputs may be the very same view as an input where the header says so
 * ("may be x"); any other overlap between an output and an input would make
 * the result depend on the order of the loops, so it is refused. */
static int skeleton_overlaps(const struct fg_tensor *a, const struct fg_tensor *b)
{
	uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
	uintptr_t a1, b1;

	if (a->data == NULL || b->data == NULL || a->rows == 0 || a->cols == 0 || b->rows == 0 ||
	    b->cols == 0)
		return 0;
	a1 = a0 + (uintptr_t)((a->rows - 1) * a->ld + a->cols) * fg_dtype_size(a->dtype);
	b1 = b0 + (uintptr_t)((b->rows - 1) * b->ld + b->cols) * fg_dtype_size(b->dtype);
	return a0 < b1 && b0 < a1;
}

static int skeleton_same(const struct fg_tensor *a, const struct fg_tensor *b)
{
	return a->data == b->data && a->ld == b->ld && a->rows == b->rows && a->cols == b->cols &&
	       a->dtype == b->dtype;
}

static int skeleton_alias(struct skeleton_compute *c, const char *op, const char *out_name,
			  const struct fg_tensor *out, const char *in_name,
			  const struct fg_tensor *in, int may_be_same)
{
	if (!skeleton_overlaps(out, in) || (may_be_same && skeleton_same(out, in)))
		return 0;
	fg_error(c->host, "compute_skeleton: %s: %s overlaps %s%s", op, out_name, in_name,
		 may_be_same ? " without being the same view" : "");
	return -EINVAL;
}

static int skeleton_null(struct skeleton_compute *c, const char *op, const void *args)
{
	if (args != NULL)
		return 0;
	fg_error(c->host, "compute_skeleton: %s: no arguments", op);
	return -EINVAL;
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
	info->native_codecs = "fp16"; /* weights are read as fp16 inside the ops */
}

/* ---- ops ------------------------------------------------------------------------- */

static int skeleton_compute_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t h;
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "embed", a)))
		return rc;
	h = a->tok.cols;
	if (a->n < 0 || (a->n > 0 && (a->ids == NULL || a->positions == NULL))) {
		fg_error(c->host, "compute_skeleton: embed: %lld ids without id or position arrays",
			 (long long)a->n);
		return -EINVAL;
	}
	if ((rc = skeleton_tensor(c, "embed", "tok", &a->tok, FG_DTYPE_F16, -1, -1)) ||
	    (rc = skeleton_tensor(c, "embed", "pos", &a->pos, FG_DTYPE_F16, -1, h)) ||
	    (rc = skeleton_tensor(c, "embed", "out", &a->out, FG_DTYPE_F32, a->n, h)))
		return rc;
	/* Indices come from user input: check them all before writing. */
	for (int64_t i = 0; i < a->n; i++) {
		if (a->ids[i] < 0 || a->ids[i] >= a->tok.rows || a->positions[i] < 0 ||
		    a->positions[i] >= a->pos.rows) {
			fg_error(c->host, "compute_skeleton: embed: entry %lld has token %d and "
				 "position %d, outside the %lld tokens and %lld positions of the "
				 "tables", (long long)i, a->ids[i], a->positions[i],
				 (long long)a->tok.rows, (long long)a->pos.rows);
			return -EINVAL;
		}
	}
	for (int64_t i = 0; i < a->n; i++) {
		const uint16_t *t = skeleton_h(&a->tok, a->ids[i]);
		const uint16_t *p = skeleton_h(&a->pos, a->positions[i]);
		float *o = skeleton_f(&a->out, i);

		for (int64_t j = 0; j < h; j++)
			o[j] = fg_half_to_float(t[j]) + fg_half_to_float(p[j]);
	}
	return skeleton_finite(c, "embed", &a->out);
}

static int skeleton_compute_layer_norm(void *ctx, void *stream,
				       const struct fg_layer_norm_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t n, h;
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "layer_norm", a)))
		return rc;
	n = a->x.rows;
	h = a->x.cols;
	if (!(a->eps >= 0) || !isfinite(a->eps)) {
		fg_error(c->host, "compute_skeleton: layer_norm: eps = %g, expected a finite "
			 "number >= 0", (double)a->eps);
		return -EINVAL;
	}
	if ((rc = skeleton_tensor(c, "layer_norm", "x", &a->x, FG_DTYPE_F32, -1, -1)) ||
	    (rc = skeleton_tensor(c, "layer_norm", "gamma", &a->gamma, FG_DTYPE_F16, 1, h)) ||
	    (rc = skeleton_tensor(c, "layer_norm", "beta", &a->beta, FG_DTYPE_F16, 1, h)) ||
	    (rc = skeleton_tensor(c, "layer_norm", "out", &a->out, FG_DTYPE_F32, n, h)) ||
	    (rc = skeleton_alias(c, "layer_norm", "out", &a->out, "x", &a->x, 1)))
		return rc;
	for (int64_t i = 0; i < n; i++) {
		const float *x = skeleton_f(&a->x, i);
		float *o = skeleton_f(&a->out, i); /* may be x: read the row first */
		double mean = 0, var = 0, inv;

		for (int64_t j = 0; j < h; j++)
			mean += x[j];
		mean /= (double)(h ? h : 1);
		for (int64_t j = 0; j < h; j++)
			var += (x[j] - mean) * (x[j] - mean);
		var /= (double)(h ? h : 1); /* biased, as PyTorch's LayerNorm */
		inv = 1.0 / sqrt(var + a->eps);
		for (int64_t j = 0; j < h; j++)
			o[j] = (float)((x[j] - mean) * inv *
				       fg_half_to_float(skeleton_h(&a->gamma, 0)[j]) +
				       fg_half_to_float(skeleton_h(&a->beta, 0)[j]));
	}
	return skeleton_finite(c, "layer_norm", &a->out);
}

static int skeleton_compute_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t m, k, n;
	float *row;
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "linear", a)))
		return rc;
	m = a->x.rows;
	k = a->x.cols;
	n = a->w.rows;
	if ((rc = skeleton_tensor(c, "linear", "x", &a->x, FG_DTYPE_F32, -1, -1)) ||
	    (rc = skeleton_tensor(c, "linear", "w", &a->w, FG_DTYPE_F16, -1, k)) ||
	    (a->bias.data &&
	     (rc = skeleton_tensor(c, "linear", "bias", &a->bias, FG_DTYPE_F16, 1, n))) ||
	    (a->residual.data &&
	     (rc = skeleton_tensor(c, "linear", "residual", &a->residual, FG_DTYPE_F32, m, n))) ||
	    (rc = skeleton_tensor(c, "linear", "out", &a->out, FG_DTYPE_F32, m, n)) ||
	    (rc = skeleton_alias(c, "linear", "out", &a->out, "x", &a->x, 0)) ||
	    (rc = skeleton_alias(c, "linear", "out", &a->out, "w", &a->w, 0)) ||
	    (rc = skeleton_alias(c, "linear", "out", &a->out, "residual", &a->residual, 1)))
		return rc;
	if (a->act != FG_ACT_NONE && a->act != FG_ACT_RELU) {
		fg_error(c->host, "compute_skeleton: linear: unknown activation %d, expected "
			 "FG_ACT_NONE or FG_ACT_RELU", (int)a->act);
		return -EINVAL;
	}
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
			if (a->residual.data)
				acc += skeleton_f(&a->residual, i)[j];
			row[j] = (float)acc;
		}
		memcpy(skeleton_f(&a->out, i), row, (size_t)n * sizeof(*row));
	}
	free(row);
	return skeleton_finite(c, "linear", &a->out);
}

/* Softmax-weighted sum of v rows [first, last] for one query row and head:
 * out = sum_j softmax(scale * q . k_j) v_j.  k and v rows are base + j. */
static void skeleton_attend(const struct fg_attention_args *a, const float *q, int64_t head,
			    int64_t base, int64_t first, int64_t last, float *scores, float *out)
{
	int64_t d = a->head_dim, off = head * d;
	double max = -INFINITY, sum = 0;

	for (int64_t j = first; j <= last; j++) {
		const float *k = skeleton_f(&a->k, base + j) + off;
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
		const float *v = skeleton_f(&a->v, base + j) + off;
		float p = (float)(scores[j - first] / sum);

		for (int64_t e = 0; e < d; e++)
			out[off + e] += p * v[e];
	}
}

static int skeleton_attention_common(struct skeleton_compute *c, const char *op,
				     const struct fg_attention_args *a, int64_t q_rows,
				     int64_t kv_rows, int64_t limit)
{
	int64_t hd;
	int rc;

	if (!isfinite(a->scale)) {
		fg_error(c->host, "compute_skeleton: %s: scale = %g, expected a finite number", op,
			 (double)a->scale);
		return -EINVAL;
	}
	if (a->batch < 0 || a->seq < 0 || a->heads <= 0 || a->head_dim <= 0 ||
	    a->heads > INT64_MAX / a->head_dim || (a->batch > 0 && a->pad == NULL)) {
		fg_error(c->host, "compute_skeleton: %s: batch %lld, seq %lld, %lld heads of %lld "
			 "and %s pad array: expected positive sizes and a pad array", op,
			 (long long)a->batch, (long long)a->seq, (long long)a->heads,
			 (long long)a->head_dim, a->pad ? "a" : "no");
		return -EINVAL;
	}
	hd = a->heads * a->head_dim;
	if ((rc = skeleton_tensor(c, op, "q", &a->q, FG_DTYPE_F32, q_rows, hd)) ||
	    (rc = skeleton_tensor(c, op, "k", &a->k, FG_DTYPE_F32, -1, hd)) ||
	    (rc = skeleton_tensor(c, op, "v", &a->v, FG_DTYPE_F32, a->k.rows, hd)) ||
	    (rc = skeleton_tensor(c, op, "out", &a->out, FG_DTYPE_F32, q_rows, hd)) ||
	    (rc = skeleton_alias(c, op, "out", &a->out, "q", &a->q, 1)) ||
	    (rc = skeleton_alias(c, op, "out", &a->out, "k", &a->k, 0)) ||
	    (rc = skeleton_alias(c, op, "out", &a->out, "v", &a->v, 0)))
		return rc;
	if (a->k.rows < kv_rows) {
		fg_error(c->host, "compute_skeleton: %s: k and v have %lld rows, %lld needed", op,
			 (long long)a->k.rows, (long long)kv_rows);
		return -EINVAL;
	}
	for (int64_t b = 0; b < a->batch; b++) {
		if (a->pad[b] < 0 || a->pad[b] > limit) {
			fg_error(c->host, "compute_skeleton: %s: pad[%lld] = %d, expected 0..%lld", op,
				 (long long)b, a->pad[b], (long long)limit);
			return -EINVAL;
		}
	}
	return 0;
}

static int skeleton_compute_attention_prefill(void *ctx, void *stream,
					      const struct fg_attention_args *a)
{
	struct skeleton_compute *c = ctx;
	float *scores;
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "attention_prefill", a)))
		return rc;
	if (a->batch < 0 || a->seq < 0 || (a->seq > 0 && a->batch > INT64_MAX / a->seq)) {
		fg_error(c->host, "compute_skeleton: attention_prefill: batch %lld x seq %lld is "
			 "not a valid size", (long long)a->batch, (long long)a->seq);
		return -EINVAL;
	}
	rc = skeleton_attention_common(c, "attention_prefill", a, a->batch * a->seq,
				       a->batch * a->seq, a->seq);
	if (rc)
		return rc;
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
				skeleton_attend(a, q, h, b * a->seq, a->pad[b], i, scores, o);
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
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "attention_decode", a)))
		return rc;
	/* len counts the new token's position, so it is at least 1. */
	if (a->seq != 1 || a->len < 1 || a->cache_stride < a->len || a->batch < 0 ||
	    a->batch > INT64_MAX / a->cache_stride) {
		fg_error(c->host, "compute_skeleton: attention_decode: seq %lld, len %lld and "
			 "cache_stride %lld: expected seq 1 and 1 <= len <= cache_stride",
			 (long long)a->seq, (long long)a->len, (long long)a->cache_stride);
		return -EINVAL;
	}
	rc = skeleton_attention_common(c, "attention_decode", a, a->batch,
				       a->batch * a->cache_stride, a->len);
	if (rc)
		return rc;
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
			skeleton_attend(a, q, h, b * a->cache_stride, a->pad[b], a->len - 1, scores,
					o);
		}
	}
	free(scores);
	return skeleton_finite(c, "attention_decode", &a->out);
}

static int skeleton_compute_kv_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct skeleton_compute *c = ctx;
	int64_t hd;
	int rc;

	(void)stream;
	if ((rc = skeleton_null(c, "kv_append", a)))
		return rc;
	hd = a->cache.cols;
	if (a->batch < 0 || a->n < 0 || a->start < 0 || a->cache_stride < 0 ||
	    a->n > a->cache_stride || a->start > a->cache_stride - a->n ||
	    (a->n > 0 && a->batch > INT64_MAX / a->n) ||
	    (a->cache_stride > 0 && a->batch > INT64_MAX / a->cache_stride)) {
		fg_error(c->host, "compute_skeleton: kv_append: %lld rows at %lld of a cache of "
			 "%lld rows per entry do not fit", (long long)a->n, (long long)a->start,
			 (long long)a->cache_stride);
		return -EINVAL;
	}
	if ((rc = skeleton_tensor(c, "kv_append", "src", &a->src, FG_DTYPE_F32, a->batch * a->n,
				  hd)) ||
	    (rc = skeleton_tensor(c, "kv_append", "cache", &a->cache, FG_DTYPE_F32, -1, -1)) ||
	    (rc = skeleton_alias(c, "kv_append", "cache", &a->cache, "src", &a->src, 0)))
		return rc;
	if (a->cache.rows < a->batch * a->cache_stride) {
		fg_error(c->host, "compute_skeleton: kv_append: cache has %lld rows, %lld needed",
			 (long long)a->cache.rows, (long long)(a->batch * a->cache_stride));
		return -EINVAL;
	}
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
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_skeleton",
	.description	= "example compute backend: plain C loops on fp32 (plugins/skeleton: copy it to write a backend)",
	.probe		= NULL, /* plain C: usable everywhere */
	.ops		= &skeleton_compute_ops,
	.options	= skeleton_compute_options,
	.opts_size	= sizeof(struct skeleton_compute_opts),
};
