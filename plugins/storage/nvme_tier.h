/* plugins/storage/nvme_tier.h - the queue-driven O_DIRECT file tier shared by
 * io_uring_nvme and libaio_nvme; each supplies only its kernel interface (an
 * engine) and its extra options.
 *
 * A request (an fg_io, or a synchronous read/write turned into one) is cut
 * into pieces of at most request_size bytes; up to queue_depth pieces are in
 * the kernel at once, and a request completes when all of its pieces did.
 * With O_DIRECT, pieces whose file offset, length and memory are 4096-aligned
 * go straight to the caller's buffer; the others go through aligned bounce
 * buffers: partial blocks are read whole, and written by read-modify-write
 * under a per-block lock so that requests sharing a block do not undo each
 * other.  Short transfers are resubmitted for the rest, -EAGAIN/-EINTR are
 * retried, and what lies past the end of the file reads as zeros.
 *
 * One mutex guards the queue; whichever thread holds it (submit, reap, a
 * synchronous call, close) moves every request forward, so no thread of our
 * own is needed.  The engine is only ever called with that mutex held.
 *
 * Fault injection for tests, without touching libc: the environment variable
 * named by the engine (FGCORE_IO_URING_FAULT, FGCORE_LIBAIO_FAULT), read at
 * open, holds up to 8 comma-separated rules "read:EIO:N" / "write:ENOSPC:N":
 * the Nth read (write) piece of this tier, counting from 1 across synchronous
 * and asynchronous requests, completes with that errno (a name or a number)
 * without reaching the file; EAGAIN and EINTR are then retried like real ones.
 * ERRNO "SHORT" instead submits only half of that piece's bytes, so that the
 * rest must be resubmitted.  A malformed value makes open fail.
 */
#ifndef FG_PLUGINS_STORAGE_NVME_TIER_H
#define FG_PLUGINS_STORAGE_NVME_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

/* The options both plugins have; the first member of each plugin's options. */
struct nvme_tier_opts {
	char dir[FG_OPT_STRING_MAX];
	char file[FG_OPT_STRING_MAX];
	uint64_t size;
	int o_direct;
	int64_t queue_depth;
	uint64_t request_size;
};

/* Table entries for those options, to splice into a plugin's option table;
 * T is the plugin's options struct, whose member B is the above. */
#define NVME_TIER_OPTIONS(T, B) \
	{ .key = "dir", .type = FG_OPT_STRING, .def = "/var/tmp", \
	  .help = "directory of the tier file (created there and unlinked at once); must " \
		  "support O_DIRECT unless o_direct = false", \
	  .offset = offsetof(T, B.dir) }, \
	{ .key = "file", .type = FG_OPT_STRING, .def = NULL, \
	  .help = "use this file instead of a temporary one in dir (truncated, kept after " \
		  "exit)", \
	  .offset = offsetof(T, B.file) }, \
	{ .key = "size", .type = FG_OPT_SIZE, .def = "0", \
	  .help = "reserve this many bytes up front (fallocate) and never grow; 0 grows the " \
		  "file as regions are allocated", \
	  .offset = offsetof(T, B.size) }, \
	{ .key = "o_direct", .type = FG_OPT_BOOL, .def = "true", \
	  .help = "open the file with O_DIRECT (bypass the page cache); false allows file " \
		  "systems without it, such as some tmpfs", \
	  .offset = offsetof(T, B.o_direct) }, \
	{ .key = "queue_depth", .type = FG_OPT_INT, .def = "128", \
	  .help = "requests of request_size bytes in the kernel at once", \
	  .offset = offsetof(T, B.queue_depth), .min = 1, .max = 4096 }, \
	{ .key = "request_size", .type = FG_OPT_SIZE, .def = "1M", \
	  .help = "larger transfers are split into requests of this many bytes (a multiple " \
		  "of 4096, at most 1G), all in flight up to queue_depth", \
	  .offset = offsetof(T, B.request_size) }

/* Those defaults again, for the options struct open falls back on when it
 * gets none: NVME_TIER_DEFAULTS initializes the member B. */
#define NVME_TIER_DEFAULTS \
	{ .dir = "/var/tmp", .o_direct = 1, .queue_depth = 128, .request_size = 1 << 20 }

/* One piece of a request: one kernel transfer (or two, for read-modify-write). */
struct nvme_piece {
	struct fg_io *io;        /* the request it belongs to */
	struct nvme_piece *next; /* free list, retry list */
	uint64_t foff;           /* file offset of the transfer */
	size_t len;              /* its bytes */
	size_t done;             /* bytes transferred so far */
	size_t xfer;             /* bytes of the transfer staged now (usually len - done) */
	char *mem;               /* transfer memory: the caller's buffer or a bounce buffer */
	int op;                  /* the kernel operation now: FG_IO_READ or FG_IO_WRITE */
	int bounce;              /* bounce buffer index (registered buffer index), -1 none */
	unsigned kind;           /* NVME_PIECE_* */
	unsigned slot;           /* index of this piece: engines keep per-slot state */
	char *user;              /* the caller's bytes this piece covers ... */
	size_t skip, ulen;       /* ... are mem[skip, skip + ulen) */
	unsigned retries;
	bool injected;           /* failed by fault injection */
	bool short_fault;        /* fault injection: stop its next transfer half-way */
};

enum {
	NVME_PIECE_DIRECT = 0, /* the caller's memory */
	NVME_PIECE_BOUNCE = 1, /* a bounce buffer; copied in before a write, out after a read */
	NVME_PIECE_RMW = 2,    /* one partial block of a write: read, merge, write */
};

struct nvme_tier;

/* The kernel interface.  Every piece given to prep completes exactly once,
 * through nvme_tier_complete (called from prep's caller's later wait, or from
 * wait itself for pieces that could not be submitted). */
struct nvme_engine {
	const char *name;      /* plugin name: the first word of every message */
	const char *fault_env; /* "FGCORE_IO_URING_FAULT" */
	/* The plugin's options struct with every default, used when open gets
	 * none; its first member is a struct nvme_tier_opts. */
	const void *defaults;
	/* Set up for nt->queue_depth pieces; plugin options in `opts` (never
	 * NULL).  May use nt->bounce_iov/nbounce (to register them) and
	 * nvme_tier_fd(). */
	int (*setup)(struct nvme_tier *nt, const void *opts, void **priv);
	/* Tear down; waits for, or cancels, what the kernel still holds. */
	void (*teardown)(struct nvme_tier *nt, void *priv);
	/* Stage the piece's next transfer: p->op at p->foff + p->done, of
	 * p->xfer bytes from/to p->mem + p->done. */
	void (*prep)(struct nvme_tier *nt, void *priv, struct nvme_piece *p);
	/* Submit what is staged, then reap completions: at least `min` (0: only
	 * what is there).  Returns the number completed or a fatal -errno. */
	int (*wait)(struct nvme_tier *nt, void *priv, unsigned min);
};

/* Called by engines for each finished transfer: res = bytes or -errno. */
void nvme_tier_complete(struct nvme_tier *nt, struct nvme_piece *p, long res);

/* For engines. */
const struct fg_host *nvme_tier_host(const struct nvme_tier *nt);
int nvme_tier_fd(const struct nvme_tier *nt);
const char *nvme_tier_path(const struct nvme_tier *nt);
unsigned nvme_tier_queue_depth(const struct nvme_tier *nt);
/* The bounce buffers (all 4096-aligned) as iovecs, index = nvme_piece.bounce. */
const struct iovec *nvme_tier_bounce_iov(const struct nvme_tier *nt, unsigned *n);

/* Each plugin defines its engine under this name; its options struct starts
 * with a struct nvme_tier_opts. */
extern const struct nvme_engine nvme_tier_engine;

/* The plugin's storage ops: open sets the tier up with nvme_tier_engine (and
 * its defaults when it gets no options); the rest are the same for every
 * engine. */
extern const struct fg_storage_ops nvme_tier_ops;

#endif
