/* tests/plugins/compute_half_timers.c - an ABI 1.2 compute plugin with a
 * timer_create but none of the other timer hooks: refused. */
#include "tests/plugins/compute_ops.h"

static int half_timer_create(void *ctx, void **timer)
{
	(void)ctx, (void)timer;
	abort(); /* never called: the loader refuses the plugin */
}

static const struct fg_compute_ops half_timers_ops = {
	TRAP_COMPUTE_OPS,
	.supports	= trap_supports,
	.rope		= trap_rope,
	.timer_create	= half_timer_create,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(1, 2),
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_half_timers",
	.description	= "test: ABI 1.2 compute plugin with one of the four timer hooks",
	.probe		= NULL,
	.ops		= &half_timers_ops,
};
