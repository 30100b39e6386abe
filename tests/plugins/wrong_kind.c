/* tests/plugins/wrong_kind.c - a kind the core does not know: refused. */
#include "tests/plugins/codec_ops.h"

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI_VERSION, /* no kind, so no kind's version: the shared one */
	.kind		= 42,
	.name		= "wrong_kind",
	.description	= "test: unknown kind",
	.ops		= &test_codec_ops,
};
