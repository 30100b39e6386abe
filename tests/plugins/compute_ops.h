/* tests/plugins/compute_ops.h - a compute ops table for the broken compute
 * test plugins: every hook aborts, since the loader must refuse each plugin
 * before any of its code runs.  Each plugin copies it and breaks one thing. */
#ifndef FG_TESTS_COMPUTE_OPS_H
#define FG_TESTS_COMPUTE_OPS_H

#include <stdlib.h>

#include <fgcore/compute.h>
#include <fgcore/plugin.h>

/* Not every plugin uses every trap. */
#define TRAP static __attribute__((unused))

TRAP int trap_init(const struct fg_host *h, const void *o, void **c)
{
	(void)h, (void)o, (void)c;
	abort();
}

TRAP void trap_fini(void *c)
{
	(void)c;
	abort();
}

TRAP void trap_info(void *c, struct fg_compute_info *i)
{
	(void)c, (void)i;
	abort();
}

#define TRAP_OP(name, type)                                        \
	TRAP int trap_##name(void *c, void *s, const type *a)    \
	{                                                          \
		(void)c, (void)s, (void)a;                         \
		abort();                                           \
	}
TRAP_OP(embed, struct fg_embed_args)
TRAP_OP(layer_norm, struct fg_layer_norm_args)
TRAP_OP(linear, struct fg_linear_args)
TRAP_OP(attention, struct fg_attention_args)
TRAP_OP(kv_append, struct fg_kv_append_args)
TRAP_OP(rope, struct fg_rope_args)

TRAP int trap_supports(void *c, enum fg_op op, enum fg_dtype t)
{
	(void)c, (void)op, (void)t;
	abort();
}

TRAP int trap_stream_create(void *c, void **s)
{
	(void)c, (void)s;
	abort();
}

/* Everything of ABI 1.1 but the streams; a plugin removes what it lacks. */
#define TRAP_COMPUTE_OPS                              \
	.init			= trap_init,          \
	.fini			= trap_fini,          \
	.info			= trap_info,          \
	.embed			= trap_embed,         \
	.layer_norm		= trap_layer_norm,    \
	.linear			= trap_linear,        \
	.attention_prefill	= trap_attention,     \
	.attention_decode	= trap_attention,     \
	.kv_append		= trap_kv_append

#endif
