/* tests/plugins/storage_newer_minor.c - a complete storage plugin built for a
 * storage minor newer than the core's: refused before any of its code runs,
 * the line naming the kind and both storage versions. */
#include <stdlib.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

static int newer_open(const struct fg_host *host, const void *opts, void **ctx,
		      struct fg_storage_info *info)
{
	abort(); /* the loader must never get here */
}

static void newer_close(void *ctx)
{
	abort();
}

static int newer_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	abort();
}

static void newer_free(void *ctx, struct fg_region *r)
{
	abort();
}

static int newer_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	abort();
}

static int newer_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
		       size_t len)
{
	abort();
}

static const struct fg_storage_ops newer_ops = {
	.open	= newer_open,
	.close	= newer_close,
	.alloc	= newer_alloc,
	.free	= newer_free,
	.read	= newer_read,
	.write	= newer_write,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_ABI(FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR + 1),
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "storage_newer_minor",
	.description	= "test: storage ABI minor of the future",
	.ops		= &newer_ops,
};
