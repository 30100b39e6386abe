/* tests/plugins/name_mismatch.c - calls itself something else than its file: refused. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "some_other_name",
	.description	= "test: name differs from the file name",
	.ops		= &test_codec_ops,
};
