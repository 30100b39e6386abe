/* tests/plugins/bad_option_table.c - an option whose member lies outside the
 * options struct: refused. */
#include <stddef.h>

#include "tests/plugins/codec_ops.h"

struct bad_opts {
	int64_t depth;
};

static const struct fg_option bad_options[] = {
	{ .key = "depth", .type = FG_OPT_INT, .def = "4", .help = "fine",
	  .offset = offsetof(struct bad_opts, depth), .min = 1, .max = 64 },
	{ .key = "width", .type = FG_OPT_INT, .def = "8", .help = "outside the struct",
	  .offset = sizeof(struct bad_opts), .min = 1, .max = 64 },
	{ .key = NULL },
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "bad_option_table",
	.description	= "test: option offset past opts_size",
	.ops		= &test_codec_ops,
	.options	= bad_options,
	.opts_size	= sizeof(struct bad_opts),
};
