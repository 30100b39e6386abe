/* tests/plugins/bad_abi_major.c - built for the next ABI major: refused. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(FG_ABI_MAJOR + 1, 0),
	.kind		= FG_PLUGIN_CODEC,
	.name		= "bad_abi_major",
	.description	= "test: ABI major of the future",
	.ops		= &test_codec_ops,
};
