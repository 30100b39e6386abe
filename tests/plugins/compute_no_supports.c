/* tests/plugins/compute_no_supports.c - built for ABI 1.1 without its
 * required supports hook: refused with its own message. */
#include "tests/plugins/compute_ops.h"

static const struct fg_compute_ops no_supports_ops = {
	TRAP_COMPUTE_OPS,
	.rope		= trap_rope,
	/* .supports is missing */
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(1, 1),
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_no_supports",
	.description	= "test: ABI 1.1 compute plugin without supports",
	.ops		= &no_supports_ops,
};
