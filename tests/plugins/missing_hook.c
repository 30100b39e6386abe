/* tests/plugins/missing_hook.c - a storage plugin without its required read
 * hook: refused before any of its code runs (its probe would abort). */
#include <stdlib.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

static int missing_probe(const struct fg_host *host)
{
	(void)host;
	abort(); /* the loader must never get here */
}

static int missing_open(const struct fg_host *host, const void *opts, void **ctx,
			struct fg_storage_info *info)
{
	abort();
}

static void missing_close(void *ctx)
{
	abort();
}

static int missing_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	abort();
}

static void missing_free(void *ctx, struct fg_region *r)
{
	abort();
}

static int missing_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
			 size_t len)
{
	abort();
}

static const struct fg_storage_ops missing_ops = {
	.open	= missing_open,
	.close	= missing_close,
	.alloc	= missing_alloc,
	.free	= missing_free,
	/* .read is missing */
	.write	= missing_write,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "missing_hook",
	.description	= "test: storage without read",
	.probe		= missing_probe,
	.ops		= &missing_ops,
};
