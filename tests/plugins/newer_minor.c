/* tests/plugins/newer_minor.c - same major, a codec minor newer than the
 * core's codec minor: refused, the line naming the kind. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(FG_ABI_MAJOR, FG_CODEC_ABI_MINOR + 1),
	.kind		= FG_PLUGIN_CODEC,
	.name		= "newer_minor",
	.description	= "test: ABI minor of the future",
	.ops		= &test_codec_ops,
};
