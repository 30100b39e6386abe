/* core/backend/compute_ops.c - the compute ops as the engine calls them:
 * arguments validated once here, then the backend's hook.
 * (Pass-through placeholder: validation is filled in with the 1.1 ABI work.) */
#include <errno.h>
#include <string.h>

#include "core/backend/backend.h"
#include "core/util/error.h"

int fg_backend_supports(const struct fg_backend *b, enum fg_op op, enum fg_dtype dtype)
{
	if (FG_ABI_MINOR_OF(b->ph.plugin->abi_version) >= 1 && b->ops->supports)
		return b->ops->supports(b->ctx, op, dtype);
	switch (op) {
	case FG_OP_EMBED:
	case FG_OP_LAYER_NORM:
	case FG_OP_ATTENTION_PREFILL:
		return 1;
	case FG_OP_LINEAR:
		return dtype == FG_DTYPE_F16 ||
		       (dtype == FG_DTYPE_Q4_ROWS && strstr(b->info.native_codecs, "int4_group64"));
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_KV_APPEND:
		return dtype == b->info.act_dtype ||
		       (dtype == FG_DTYPE_Q4_COLS && strstr(b->info.native_codecs, "int4_group64"));
	default:
		return 0;
	}
}

int fg_backend_embed(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		     const struct fg_embed_args *a)
{
	return b->ops->embed(b->ctx, stream, a);
}

int fg_backend_norm(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_layer_norm_args *a)
{
	return b->ops->layer_norm(b->ctx, stream, a);
}

int fg_backend_linear(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		      const struct fg_linear_args *a)
{
	return b->ops->linear(b->ctx, stream, a);
}

int fg_backend_rope(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_rope_args *a)
{
	if (!b->ops->rope)
		return -ENOTSUP;
	return b->ops->rope(b->ctx, stream, a);
}

int fg_backend_attention_prefill(struct fg_backend *b, void *stream, int64_t layer,
				 const char *what, const struct fg_attention_args *a)
{
	return b->ops->attention_prefill(b->ctx, stream, a);
}

int fg_backend_attention_decode(struct fg_backend *b, void *stream, int64_t layer,
				const char *what, const struct fg_attention_args *a)
{
	return b->ops->attention_decode(b->ctx, stream, a);
}

int fg_backend_kv_append(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			 const struct fg_kv_append_args *a)
{
	return b->ops->kv_append(b->ctx, stream, a);
}

int fg_backend_argmax(struct fg_backend *b, void *stream, const struct fg_tensor *x, int32_t *out)
{
	if (!b->ops->argmax)
		return -ENOTSUP;
	return b->ops->argmax(b->ctx, stream, x, out);
}
