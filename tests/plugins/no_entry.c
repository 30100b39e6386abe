/* tests/plugins/no_entry.c - exports no fg_plugin_entry (a misspelled one is
 * hidden by -export-symbols-regex): refused. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entyr = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "no_entry",
	.description	= "test: misspelled entry symbol",
	.ops		= &test_codec_ops,
};
