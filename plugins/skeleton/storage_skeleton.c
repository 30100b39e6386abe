/* plugins/skeleton/storage_skeleton.c - the commented example of a storage plugin.
 *
 * A storage tier hands out regions and copies bytes between them and host
 * memory; it never looks at the bytes.  This one keeps each region in a
 * malloc'd buffer, so it is a (slow, unpinned) memory tier that really works:
 * copy this file to start a new tier.
 *
 * Build it out of tree with only the installed headers:
 *     cc -shared -fPIC -fvisibility=hidden $(pkg-config --cflags fgcore) \
 *        storage_skeleton.c -o storage_skeleton.so
 * and use it with
 *     FGCORE_PLUGIN_PATH=. fgcore -o tier.host.plugin=storage_skeleton config
 *
 * Rules every plugin follows (see doc/PLUGINS.md):
 *  - export exactly one symbol, `fg_plugin_entry`; everything else is static
 *    (and the build uses -fvisibility=hidden);
 *  - the file is <name>.so and fg_plugin_entry.name is <name>;
 *  - never call exit(), never print: report errors with fg_error(host, ...) as
 *    one line saying what is wrong and what to do, and return a negative errno;
 *  - hooks may be called from several threads at once (the core's mover and
 *    executor both use a tier): protect state shared between calls.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

/* ---- options --------------------------------------------------------------
 * The core fills this struct from the plugin's INI section ([tier.host] with
 * `plugin = storage_skeleton` ...) before calling open().  Each member is
 * described by a row of the options table below: key, type, default (text),
 * help, offset of the member and, for integers, the allowed range. */
struct skeleton_storage_opts {
	uint64_t max_bytes; /* FG_OPT_SIZE is a uint64_t */
	int zero_fill;      /* FG_OPT_BOOL is an int (0 or 1) */
	int64_t alignment;  /* FG_OPT_INT is an int64_t */
};

static const struct fg_option skeleton_storage_options[] = {
	{ .key = "max_bytes", .type = FG_OPT_SIZE, .def = "1G",
	  .help = "capacity this tier reports (the core may cap it lower with `capacity`)",
	  .offset = offsetof(struct skeleton_storage_opts, max_bytes) },
	{ .key = "zero_fill", .type = FG_OPT_BOOL, .def = "true",
	  .help = "fill new regions with zeros",
	  .offset = offsetof(struct skeleton_storage_opts, zero_fill) },
	{ .key = "alignment", .type = FG_OPT_INT, .def = "64",
	  .help = "alignment of region addresses in bytes (a power of two)",
	  .offset = offsetof(struct skeleton_storage_opts, alignment), .min = 64, .max = 65536 },
	{ .key = NULL }, /* the table ends with an empty row */
};

/* ---- the tier -------------------------------------------------------------- */

/* One allocation; fg_region.handle points at it.  The tier keeps a list of
 * them so that close() can release what the caller did not free. */
struct skeleton_block {
	struct skeleton_block *prev, *next;
	void *mem;
};

struct skeleton_storage {
	const struct fg_host *host; /* keep it: errors of later calls go through it */
	struct skeleton_storage_opts opts;
	/* State shared between calls (of any thread), hence the lock: the live
	 * blocks, and completed asynchronous requests linked through fg_io.priv[0]. */
	pthread_mutex_t lock;
	struct skeleton_block blocks; /* list head */
	struct fg_io *done_head, *done_tail;
};

/* Optional: is this plugin usable on this machine?  Called by `fgcore plugins`
 * after every check of the loader passed.  Return 0 when it is not (no device,
 * kernel too old, ...), > 0 when it is.  This tier only needs malloc. */
static int skeleton_storage_probe(const struct fg_host *host)
{
	(void)host;
	return 1;
}

static int skeleton_storage_open(const struct fg_host *host, const void *opts, void **ctx,
				 struct fg_storage_info *info)
{
	const struct skeleton_storage_opts *o = opts;
	struct skeleton_storage *s;

	/* The core checked types and ranges from the table; checks the table
	 * cannot express are ours. */
	if (o->alignment & (o->alignment - 1)) {
		fg_error(host, "storage_skeleton: alignment = %lld is not a power of two: use "
			 "64, 128, 256, ...", (long long)o->alignment);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		fg_error(host, "storage_skeleton: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	s->blocks.prev = s->blocks.next = &s->blocks;
	s->host = host;
	s->opts = *o; /* the options struct belongs to the core: keep a copy */
	info->capacity = o->max_bytes;
	/* Regions have host addresses, so the core may memcpy them directly. */
	info->flags = FG_STORAGE_ADDRESSABLE | FG_STORAGE_HOST_MEMORY;
	info->alignment = 1; /* read/write have no alignment needs */
	*ctx = s;
	fg_log(host, FG_LOG_DEBUG, "storage_skeleton: opened, %llu bytes",
	       (unsigned long long)o->max_bytes);
	return 0;
}

static void skeleton_storage_close(void *ctx)
{
	/* Closing releases everything, regions still allocated included (the
	 * core warns about those). */
	struct skeleton_storage *s = ctx;

	while (s->blocks.next != &s->blocks) {
		struct skeleton_block *b = s->blocks.next;

		s->blocks.next = b->next;
		free(b->mem);
		free(b);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int skeleton_storage_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct skeleton_storage *s = ctx;
	size_t align = (size_t)s->opts.alignment;
	struct skeleton_block *b;
	size_t bytes;
	void *p;

	/* aligned_alloc wants a multiple of the alignment; round up, and never
	 * allocate 0 bytes so that every region has its own address. */
	if (size > SIZE_MAX - align) {
		fg_error(s->host, "storage_skeleton: cannot allocate %llu bytes: too large",
			 (unsigned long long)size);
		return -ENOMEM;
	}
	bytes = ((size_t)size + align - 1) / align * align;
	if (bytes == 0)
		bytes = align;
	p = aligned_alloc(align, bytes);
	b = malloc(sizeof(*b));
	if (p == NULL || b == NULL) {
		free(p);
		free(b);
		fg_error(s->host, "storage_skeleton: cannot allocate %llu bytes: out of memory",
			 (unsigned long long)size);
		return -ENOMEM;
	}
	if (s->opts.zero_fill)
		memset(p, 0, bytes);
	b->mem = p;
	pthread_mutex_lock(&s->lock);
	b->next = s->blocks.next;
	b->prev = &s->blocks;
	b->next->prev = b;
	s->blocks.next = b;
	pthread_mutex_unlock(&s->lock);
	r->size = size;
	r->addr = p;
	r->handle = (uint64_t)(uintptr_t)b; /* anything the plugin likes */
	return 0;
}

static void skeleton_storage_free(void *ctx, struct fg_region *r)
{
	struct skeleton_storage *s = ctx;
	struct skeleton_block *b = (struct skeleton_block *)(uintptr_t)r->handle;

	if (b == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	b->prev->next = b->next;
	b->next->prev = b->prev;
	pthread_mutex_unlock(&s->lock);
	free(b->mem);
	free(b);
	r->handle = 0;
	r->addr = NULL;
}

/* The core checks off + len <= r->size before calling; a plugin that must be
 * robust on its own checks again (it is cheap). */
static int skeleton_storage_check(struct skeleton_storage *s, const struct fg_region *r,
				  uint64_t off, size_t len)
{
	if (off > r->size || len > r->size - off) {
		fg_error(s->host, "storage_skeleton: %zu bytes at offset %llu lie outside the "
			 "%llu-byte region", len, (unsigned long long)off,
			 (unsigned long long)r->size);
		return -EINVAL;
	}
	return 0;
}

static int skeleton_storage_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst,
				 size_t len)
{
	int rc = skeleton_storage_check(ctx, r, off, len);

	if (rc == 0 && len > 0)
		memcpy(dst, (const char *)r->addr + off, len);
	return rc;
}

static int skeleton_storage_write(void *ctx, const struct fg_region *r, uint64_t off,
				  const void *src, size_t len)
{
	int rc = skeleton_storage_check(ctx, r, off, len);

	if (rc == 0 && len > 0)
		memcpy((char *)r->addr + off, src, len);
	return rc;
}

/* Optional asynchronous interface.  A real tier (io_uring) queues the
 * requests and returns; this one completes them at once and keeps them on a
 * list for reap, which is what the contract allows.  Leave both NULL and the
 * core does the same with read/write. */
static int skeleton_storage_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct skeleton_storage *s = ctx;

	for (unsigned i = 0; i < n; i++) {
		struct fg_io *io = ios[i];

		if (io->op == FG_IO_READ)
			io->result = skeleton_storage_read(s, io->region, io->offset, io->buf,
							   io->len);
		else
			io->result = skeleton_storage_write(s, io->region, io->offset, io->buf,
							    io->len);
		/* priv[] is the plugin's scratch space inside the request. */
		io->priv[0] = 0;
		pthread_mutex_lock(&s->lock);
		if (s->done_tail)
			s->done_tail->priv[0] = (uint64_t)(uintptr_t)io;
		else
			s->done_head = io;
		s->done_tail = io;
		pthread_mutex_unlock(&s->lock);
	}
	return 0;
}

static int skeleton_storage_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct skeleton_storage *s = ctx;
	unsigned n = 0;

	/* Everything submitted is already complete, so there is never anything
	 * to wait for: asking for more than is outstanding returns what there is
	 * (waiting would never end). */
	(void)min;
	pthread_mutex_lock(&s->lock);
	while (n < max && s->done_head) {
		struct fg_io *io = s->done_head;

		s->done_head = (struct fg_io *)(uintptr_t)io->priv[0];
		if (s->done_head == NULL)
			s->done_tail = NULL;
		done[n++] = io;
	}
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}

/* ---- the ops table and the one exported symbol ----------------------------- */

static const struct fg_storage_ops skeleton_storage_ops = {
	.open	= skeleton_storage_open,
	.close	= skeleton_storage_close,
	.alloc	= skeleton_storage_alloc,
	.free	= skeleton_storage_free,
	.read	= skeleton_storage_read,
	.write	= skeleton_storage_write,
	.submit	= skeleton_storage_submit,
	.reap	= skeleton_storage_reap,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	/* storage's own ABI version (fgcore/storage.h) in the headers it was
	 * built with: a compute addition does not move it */
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= "storage_skeleton", /* = the file's base name */
	.description	= "example memory tier on malloc (plugins/skeleton: copy it to write a tier)",
	.probe		= skeleton_storage_probe,
	.ops		= &skeleton_storage_ops,
	.options	= skeleton_storage_options,
	.opts_size	= sizeof(struct skeleton_storage_opts),
	.capabilities	= "addressable,async",
};
