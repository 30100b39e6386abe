/* tests/plugins/nan_embed.c - cpu_blas, except that the embedding of one
 * token id (option poison_id) is NaN: a stand-in for activations that
 * overflow (fp16 on a GPU), on a CPU, for one chosen request.  The NaN stays
 * in its row (every op is row-wise, attention per sequence), so the logits
 * of that sequence from the poisoned position on hold no number and every
 * other row computes what cpu_blas computes.  cpu_blas.so is found in
 * FGCORE_PLUGIN_PATH. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/compute.h>
#include <fgcore/plugin.h>

struct ne_opts {
	int64_t poison_id;
};

static const struct fg_option ne_options[] = {
	{ .key = "poison_id", .type = FG_OPT_INT, .def = "-1",
	  .help = "the token id whose embedding is NaN (-1: none)",
	  .offset = offsetof(struct ne_opts, poison_id), .min = -1, .max = INT32_MAX },
	{ .key = NULL },
};

struct ne_ctx {
	void *dl;
	const struct fg_compute_ops *inner;
	void *ictx;
	int64_t poison;
};

static void ne_fini(void *ctx)
{
	struct ne_ctx *c = ctx;

	if (c->ictx)
		c->inner->fini(c->ictx);
	if (c->dl)
		dlclose(c->dl);
	free(c);
}

static int ne_init(const struct fg_host *host, const void *opts, void **ctx)
{
	const struct ne_opts *o = opts;
	const char *path = getenv("FGCORE_PLUGIN_PATH");
	struct ne_ctx *c = calloc(1, sizeof(*c));
	char file[4096];
	int rc;

	if (!c)
		return -ENOMEM;
	c->poison = o ? o->poison_id : -1;
	for (const char *d = path; d && *d && !c->dl;) {
		size_t n = strcspn(d, ":");
		snprintf(file, sizeof(file), "%.*s/cpu_blas.so", (int)n, d);
		c->dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
		d += n + (d[n] == ':');
	}
	const struct fg_plugin *p = c->dl ? dlsym(c->dl, FG_PLUGIN_ENTRY) : NULL;
	if (!p) {
		fg_error(host, "nan_embed: no cpu_blas.so in FGCORE_PLUGIN_PATH");
		ne_fini(c);
		return -ENOENT;
	}
	c->inner = p->ops;
	/* cpu_blas with its defaults */
	if ((rc = c->inner->init(host, NULL, &c->ictx))) {
		c->ictx = NULL;
		ne_fini(c);
		return rc;
	}
	*ctx = c;
	return 0;
}

static void ne_info(void *ctx, struct fg_compute_info *info)
{
	struct ne_ctx *c = ctx;
	c->inner->info(c->ictx, info);
}

static int ne_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct ne_ctx *c = ctx;
	int rc = c->inner->embed(c->ictx, stream, a);

	if (rc || a->out.dtype != FG_DTYPE_F32)
		return rc; /* cpu_blas's residual stream is fp32 */
	for (int64_t i = 0; i < a->n; i++)
		if (a->ids[i] == c->poison)
			for (int64_t j = 0; j < a->out.cols; j++)
				((float *)a->out.data)[i * a->out.ld + j] = NAN;
	return 0;
}

#define FORWARD(name, type)                                           \
	static int ne_##name(void *ctx, void *stream, const type *a) \
	{                                                             \
		struct ne_ctx *c = ctx;                               \
		return c->inner->name(c->ictx, stream, a);            \
	}
FORWARD(layer_norm, struct fg_layer_norm_args)
FORWARD(linear, struct fg_linear_args)
FORWARD(attention_prefill, struct fg_attention_args)
FORWARD(attention_decode, struct fg_attention_args)
FORWARD(kv_append, struct fg_kv_append_args)
FORWARD(rope, struct fg_rope_args)
FORWARD(logprob, struct fg_logprob_args)

static int ne_supports(void *ctx, enum fg_op op, enum fg_dtype dtype)
{
	struct ne_ctx *c = ctx;
	return c->inner->supports(c->ictx, op, dtype);
}

static const struct fg_compute_ops ne_ops = {
	.init			= ne_init,
	.fini			= ne_fini,
	.info			= ne_info,
	.embed			= ne_embed,
	.layer_norm		= ne_layer_norm,
	.linear			= ne_linear,
	.attention_prefill	= ne_attention_prefill,
	.attention_decode	= ne_attention_decode,
	.kv_append		= ne_kv_append,
	.rope			= ne_rope,
	.supports		= ne_supports,
	.logprob		= ne_logprob,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "nan_embed",
	.description	= "test: cpu_blas with one token id's embedding NaN (activations that overflowed)",
	.ops		= &ne_ops,
	.options	= ne_options,
	.opts_size	= sizeof(struct ne_opts),
};
