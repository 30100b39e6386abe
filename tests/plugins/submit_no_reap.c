/* tests/plugins/submit_no_reap.c - a storage plugin with asynchronous submit
 * but no reap: refused by the loader before any of its code runs (the tier
 * layer no longer checks hooks again). */
#include <stdlib.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

static int snr_probe(const struct fg_host *host)
{
	(void)host;
	abort(); /* the loader must never get here */
}

static int snr_open(const struct fg_host *host, const void *opts, void **ctx,
			struct fg_storage_info *info)
{
	abort();
}

static void snr_close(void *ctx)
{
	abort();
}

static int snr_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	abort();
}

static void snr_free(void *ctx, struct fg_region *r)
{
	abort();
}

static int snr_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	abort();
}

static int snr_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	abort();
}

static int snr_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
			 size_t len)
{
	abort();
}

static const struct fg_storage_ops snr_ops = {
	.open	= snr_open,
	.close	= snr_close,
	.alloc	= snr_alloc,
	.free	= snr_free,
	.read	= snr_read,
	.write	= snr_write,
	.submit	= snr_submit,
	/* .reap is missing */
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "submit_no_reap",
	.description	= "test: storage with submit but no reap",
	.probe		= snr_probe,
	.ops		= &snr_ops,
};
