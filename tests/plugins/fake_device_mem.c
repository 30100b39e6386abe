/* tests/plugins/fake_device_mem.c - a memory tier that says its regions are
 * device memory (they are malloc'd), to check that the engine refuses to pair
 * it with a host-memory compute backend before any op could touch it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/storage.h>

static int fdm_open(const struct fg_host *host, const void *opts, void **ctx,
		    struct fg_storage_info *info)
{
	(void)host, (void)opts;
	*ctx = NULL;
	info->capacity = UINT64_C(1) << 32;
	info->flags = FG_STORAGE_ADDRESSABLE | FG_STORAGE_DEVICE_MEMORY;
	info->alignment = 1;
	return 0;
}

static void fdm_close(void *ctx)
{
	(void)ctx;
}

static int fdm_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	(void)ctx;
	r->addr = calloc(1, size ? size : 1);
	r->size = size;
	return r->addr ? 0 : -ENOMEM;
}

static void fdm_free(void *ctx, struct fg_region *r)
{
	(void)ctx;
	free(r->addr);
}

static int fdm_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	(void)ctx;
	memcpy(dst, (char *)r->addr + off, len);
	return 0;
}

static int fdm_write(void *ctx, const struct fg_region *r, uint64_t off, const void *src,
		     size_t len)
{
	(void)ctx;
	memcpy((char *)r->addr + off, src, len);
	return 0;
}

static const struct fg_storage_ops fdm_ops = {
	.open	= fdm_open,
	.close	= fdm_close,
	.alloc	= fdm_alloc,
	.free	= fdm_free,
	.read	= fdm_read,
	.write	= fdm_write,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "fake_device_mem",
	.description	= "test: host memory that claims to be device memory",
	.ops		= &fdm_ops,
};
