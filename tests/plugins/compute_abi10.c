/* tests/plugins/compute_abi10.c - a compute plugin built for ABI 1.0: the
 * 1.0 ops as plain loops (fp32 activations, fp16 weights), native_codecs
 * instead of supports.  It must load and run under a 1.1 core, which must
 * refuse every 1.1 feature for it (RMS norm, rope, SiLU, mul, GQA, embed
 * without positions, layer norm without beta) with a line naming it.
 *
 * A real 1.0 plugin's ops table ends at argmax; here the two members of
 * minor 1 hold traps that abort, so that a core calling them fails the test. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/compute.h>
#include <fgcore/half.h>
#include <fgcore/plugin.h>

static float *row(const struct fg_tensor *t, int64_t r)
{
	return (float *)t->data + r * t->ld;
}

static float h(const struct fg_tensor *t, int64_t r, int64_t c)
{
	return fg_half_to_float(((const uint16_t *)t->data)[r * t->ld + c]);
}

static int v10_init(const struct fg_host *host, const void *opts, void **ctx)
{
	(void)host, (void)opts;
	*ctx = NULL;
	return 0;
}

static void v10_fini(void *ctx)
{
	(void)ctx;
}

static void v10_info(void *ctx, struct fg_compute_info *info)
{
	(void)ctx;
	info->act_dtype = FG_DTYPE_F32;
	info->native_codecs = "fp16";
}

static int v10_embed(void *ctx, void *s, const struct fg_embed_args *a)
{
	(void)ctx, (void)s;
	for (int64_t i = 0; i < a->n; i++)
		for (int64_t j = 0; j < a->out.cols; j++)
			row(&a->out, i)[j] = h(&a->tok, a->ids[i], j) + h(&a->pos, a->positions[i], j);
	return 0;
}

static int v10_layer_norm(void *ctx, void *s, const struct fg_layer_norm_args *a)
{
	int64_t n = a->x.cols;

	(void)ctx, (void)s;
	for (int64_t i = 0; i < a->x.rows; i++) {
		const float *x = row(&a->x, i);
		double mean = 0, var = 0;

		for (int64_t j = 0; j < n; j++)
			mean += x[j] / (double)n;
		for (int64_t j = 0; j < n; j++)
			var += (x[j] - mean) * (x[j] - mean) / (double)n;
		for (int64_t j = 0; j < n; j++)
			row(&a->out, i)[j] = (float)((x[j] - mean) / sqrt(var + a->eps) *
						     h(&a->gamma, 0, j) + h(&a->beta, 0, j));
	}
	return 0;
}

static int v10_linear(void *ctx, void *s, const struct fg_linear_args *a)
{
	(void)ctx, (void)s;
	for (int64_t i = 0; i < a->x.rows; i++)
		for (int64_t j = 0; j < a->w.rows; j++) {
			double acc = a->bias.data ? h(&a->bias, 0, j) : 0;

			for (int64_t l = 0; l < a->x.cols; l++)
				acc += row(&a->x, i)[l] * h(&a->w, j, l);
			if (a->act == FG_ACT_RELU && acc < 0)
				acc = 0;
			if (a->residual.data)
				acc += row(&a->residual, i)[j];
			row(&a->out, i)[j] = (float)acc;
		}
	return 0;
}

/* out row = softmax(scale q·k_j) v_j over key rows base + [lo, hi]. */
static void attend(const struct fg_attention_args *a, int64_t qr, int64_t base, int64_t lo,
		   int64_t hi)
{
	int64_t d = a->head_dim;

	for (int64_t hh = 0; hh < a->heads; hh++) {
		float *o = row(&a->out, qr) + hh * d;
		double mx = -INFINITY, sum = 0, p[64];

		for (int64_t j = lo; j <= hi; j++) {
			double t = 0;

			for (int64_t e = 0; e < d; e++)
				t += row(&a->q, qr)[hh * d + e] * row(&a->k, base + j)[hh * d + e];
			p[j - lo] = t * a->scale;
			mx = fmax(mx, p[j - lo]);
		}
		for (int64_t j = lo; j <= hi; j++)
			sum += p[j - lo] = exp(p[j - lo] - mx);
		for (int64_t e = 0; e < d; e++) {
			double acc = 0;

			for (int64_t j = lo; j <= hi; j++)
				acc += p[j - lo] / sum * row(&a->v, base + j)[hh * d + e];
			o[e] = (float)acc;
		}
	}
}

static int v10_prefill(void *ctx, void *s, const struct fg_attention_args *a)
{
	(void)ctx, (void)s;
	if (a->seq > 64)
		return -ENOTSUP; /* this test plugin's own limit */
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->seq; i++)
			attend(a, b * a->seq + i, b * a->seq, a->pad[b], i);
	return 0;
}

static int v10_decode(void *ctx, void *s, const struct fg_attention_args *a)
{
	(void)ctx, (void)s;
	if (a->len > 64)
		return -ENOTSUP;
	for (int64_t b = 0; b < a->batch; b++)
		attend(a, b, b * a->cache_stride, a->pad[b], a->len - 1);
	return 0;
}

static int v10_kv_append(void *ctx, void *s, const struct fg_kv_append_args *a)
{
	(void)ctx, (void)s;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->n; i++)
			memcpy(row(&a->cache, b * a->cache_stride + a->start + i),
			       row(&a->src, b * a->n + i), (size_t)a->src.cols * sizeof(float));
	return 0;
}

static int v10_trap_rope(void *ctx, void *s, const struct fg_rope_args *a)
{
	(void)ctx, (void)s, (void)a;
	abort(); /* a 1.0 plugin has no rope: the core must never call this */
}

static int v10_trap_supports(void *ctx, enum fg_op op, enum fg_dtype t)
{
	(void)ctx, (void)op, (void)t;
	abort(); /* nor supports */
}

static const struct fg_compute_ops v10_ops = {
	.init			= v10_init,
	.fini			= v10_fini,
	.info			= v10_info,
	.embed			= v10_embed,
	.layer_norm		= v10_layer_norm,
	.linear			= v10_linear,
	.attention_prefill	= v10_prefill,
	.attention_decode	= v10_decode,
	.kv_append		= v10_kv_append,
	.rope			= v10_trap_rope,
	.supports		= v10_trap_supports,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(1, 0),
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_abi10",
	.description	= "test: a compute plugin built for ABI 1.0",
	.ops		= &v10_ops,
};
