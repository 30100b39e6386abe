/* tests/plugins/legacy_abi.c - a codec written before each kind had its own
 * minor: it declares FG_ABI_VERSION (the shared version, deprecated for
 * plugins), and still builds and loads. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "legacy_abi",
	.description	= "test: the pre-split FG_ABI_VERSION",
	.ops		= &test_codec_ops,
};
