/* tests/plugins/fp16_only_abi10.c - a compute backend built for ABI 1.0
 * whose native_codecs name fp16 only: the engine must refuse compressed
 * weights or cache with it at configuration time.  Its ops are never reached
 * by the tests and fail if they are. */
#include <errno.h>

#include <fgcore/compute.h>

static int f1_init(const struct fg_host *host, const void *opts, void **ctx)
{
	(void)host, (void)opts;
	*ctx = NULL;
	return 0;
}

static void f1_fini(void *ctx)
{
	(void)ctx;
}

static void f1_info(void *ctx, struct fg_compute_info *info)
{
	(void)ctx;
	info->act_dtype = FG_DTYPE_F32;
	info->native_codecs = "fp16";
}

static int f1_embed(void *c, void *s, const struct fg_embed_args *a)
{
	(void)c, (void)s, (void)a;
	return -ENOTSUP;
}

static int f1_norm(void *c, void *s, const struct fg_layer_norm_args *a)
{
	(void)c, (void)s, (void)a;
	return -ENOTSUP;
}

static int f1_linear(void *c, void *s, const struct fg_linear_args *a)
{
	(void)c, (void)s, (void)a;
	return -ENOTSUP;
}

static int f1_attention(void *c, void *s, const struct fg_attention_args *a)
{
	(void)c, (void)s, (void)a;
	return -ENOTSUP;
}

static int f1_kv_append(void *c, void *s, const struct fg_kv_append_args *a)
{
	(void)c, (void)s, (void)a;
	return -ENOTSUP;
}

static const struct fg_compute_ops f1_ops = {
	.init			= f1_init,
	.fini			= f1_fini,
	.info			= f1_info,
	.embed			= f1_embed,
	.layer_norm		= f1_norm,
	.linear			= f1_linear,
	.attention_prefill	= f1_attention,
	.attention_decode	= f1_attention,
	.kv_append		= f1_kv_append,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(1, 0),
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "fp16_only_abi10",
	.description	= "test: an ABI 1.0 backend that reads fp16 weights only",
	.ops		= &f1_ops,
};
