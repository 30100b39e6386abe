/* tests/plugins/compute_half_streams.c - one stream hook of the seven that
 * come together: refused by the loader. */
#include "tests/plugins/compute_ops.h"

static const struct fg_compute_ops half_streams_ops = {
	TRAP_COMPUTE_OPS,
	.rope		= trap_rope,
	.supports	= trap_supports,
	.stream_create	= trap_stream_create, /* the other six are missing */
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_half_streams",
	.description	= "test: some stream hooks but not all",
	.ops		= &half_streams_ops,
};
