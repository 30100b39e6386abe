/* tests/plugins/compute_storage_minor.c - a compute plugin that declares the
 * minor one past storage's (FG_STORAGE_ABI_MINOR + 1): each kind has its own
 * minor, so it loads exactly when compute's is that far ahead, whatever
 * storage's is.  Its hooks all abort: loading runs none of them.  (Should
 * that compute minor add a required hook, give it here.) */
#include <fgcore/storage.h>
#include "tests/plugins/compute_ops.h"

static const struct fg_compute_ops storage_minor_ops = {
	TRAP_COMPUTE_OPS,
	.rope		= trap_rope,
	.supports	= trap_supports,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR + 1),
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "compute_storage_minor",
	.description	= "test: compute plugin at the storage minor plus one",
	.ops		= &storage_minor_ops,
};
