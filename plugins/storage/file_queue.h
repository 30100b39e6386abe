/* plugins/storage/file_queue.h - the queue core of every file tier
 * (posix_file, io_uring_nvme, libaio_nvme): the tier file and its regions
 * (file_regions.c), request queueing, cutting, bounce buffers, submit/reap and
 * completion.  Each plugin supplies only an engine, how a batch of transfers is
 * issued and completed (a pthread worker pool doing pread/pwrite, io_uring,
 * libaio), and its options.
 *
 * A request (an fg_io, or a synchronous read/write turned into one) is cut
 * into pieces of at most request_size bytes; up to queue_depth pieces are with
 * the engine at once, and a request completes when all of its pieces did.
 * With O_DIRECT, pieces whose file offset, length and memory are 4096-aligned
 * go straight to the caller's buffer; the others go through aligned bounce
 * buffers: partial blocks are read whole, and written by read-modify-write
 * under a per-block lock so that requests sharing a block do not undo each
 * other.  Short transfers are resubmitted for the rest, -EAGAIN/-EINTR are
 * retried, and what lies past the end of the file reads as zeros.
 *
 * One mutex guards the queue; whichever thread holds it (submit, reap, a
 * synchronous call, close, an engine's own thread) moves every request
 * forward.  The engine's hooks are only ever called with that mutex held.
 * Kernel-driven engines (io_uring, libaio) complete pieces inside wait; an
 * engine with threads of its own completes them there through
 * file_queue_done and lets wait sleep in file_queue_sleep.
 *
 * Fault injection is not here: the core stacks one shim over every tier
 * (core/tier/fault_shim.c).
 */
#ifndef FG_PLUGINS_STORAGE_FILE_QUEUE_H
#define FG_PLUGINS_STORAGE_FILE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

/* What the queue needs to know; the first member of the NVMe plugins' options
 * (posix_file derives it from its own, see file_engine.queue_opts). */
struct file_queue_opts {
	char dir[FG_OPT_STRING_MAX];
	char file[FG_OPT_STRING_MAX];
	uint64_t size;
	int o_direct;
	int64_t queue_depth;
	uint64_t request_size;
};

/* Table entries for those options, to splice into a plugin's option table;
 * T is the plugin's options struct, whose member B is the above. */
#define FILE_QUEUE_OPTIONS(T, B) \
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
 * gets none: FILE_QUEUE_DEFAULTS initializes the member B. */
#define FILE_QUEUE_DEFAULTS \
	{ .dir = "/var/tmp", .o_direct = 1, .queue_depth = 128, .request_size = 1 << 20 }

/* One piece of a request: one kernel transfer (or two, for read-modify-write). */
struct file_piece {
	struct fg_io *io;        /* the request it belongs to */
	struct file_piece *next; /* free list, retry list; the engine's while it holds it */
	uint64_t foff;           /* file offset of the transfer */
	size_t len;              /* its bytes */
	size_t done;             /* bytes transferred so far */
	size_t xfer;             /* bytes of the transfer staged now (usually len - done) */
	char *mem;               /* transfer memory: the caller's buffer or a bounce buffer */
	int op;                  /* the kernel operation now: FG_IO_READ or FG_IO_WRITE */
	int bounce;              /* bounce buffer index (registered buffer index), -1 none */
	unsigned kind;           /* FILE_PIECE_* */
	unsigned slot;           /* index of this piece: engines keep per-slot state */
	char *user;              /* the caller's bytes this piece covers ... */
	size_t skip, ulen;       /* ... are mem[skip, skip + ulen) */
	unsigned retries;
};

enum {
	FILE_PIECE_DIRECT = 0, /* the caller's memory */
	FILE_PIECE_BOUNCE = 1, /* a bounce buffer; copied in before a write, out after a read */
	FILE_PIECE_RMW = 2,    /* one partial block of a write: read, merge, write */
};

struct file_queue;

/* How transfers are issued and completed.  Every piece given to prep
 * completes exactly once, through file_queue_complete (from wait, with the
 * mutex held) or file_queue_done (from an engine thread, without it). */
struct file_engine {
	const char *name;      /* plugin name: the first word of every message */
	/* The plugin's options struct with every default, used when open gets
	 * none. */
	const void *defaults;
	/* optional: the queue's options from the plugin's; without it they are
	 * the first member of the plugin's options struct. */
	void (*queue_opts)(const void *opts, struct file_queue_opts *out);
	/* Set up for file_queue_queue_depth() pieces; plugin options in `opts`
	 * (never NULL).  May use file_queue_bounce_iov (to register them) and
	 * file_queue_fd(). */
	int (*setup)(struct file_queue *q, const void *opts, void **priv);
	/* Tear down; waits for, or cancels, what the kernel (or the engine's
	 * threads) still holds. */
	void (*teardown)(struct file_queue *q, void *priv);
	/* Stage the piece's next transfer: p->op at p->foff + p->done, of
	 * p->xfer bytes from/to p->mem + p->done. */
	void (*prep)(struct file_queue *q, void *priv, struct file_piece *p);
	/* Issue what is staged, then wait until at least `min` pieces completed
	 * (0: only what is there).  Returns the number completed or a fatal
	 * -errno. */
	int (*wait)(struct file_queue *q, void *priv, unsigned min);
};

/* For engines, with the queue's mutex held (inside wait): a finished
 * transfer, res = bytes or -errno. */
void file_queue_complete(struct file_queue *q, struct file_piece *p, long res);
/* For engine threads, without the mutex: the same, and the queue moves on
 * (the next pieces are handed to prep, sleepers wake up). */
void file_queue_done(struct file_queue *q, struct file_piece *p, long res);
/* For the wait of an engine that completes through file_queue_done: sleep
 * (the mutex released meanwhile) until `min` pieces completed or none is
 * left with the engine; the number completed. */
int file_queue_sleep(struct file_queue *q, unsigned min);

/* For engines. */
const struct fg_host *file_queue_host(const struct file_queue *q);
int file_queue_fd(const struct file_queue *q);
const char *file_queue_path(const struct file_queue *q);
bool file_queue_o_direct(const struct file_queue *q);
unsigned file_queue_queue_depth(const struct file_queue *q);
/* The bounce buffers (all 4096-aligned) as iovecs, index = file_piece.bounce. */
const struct iovec *file_queue_bounce_iov(const struct file_queue *q, unsigned *n);

/* Each plugin defines its engine under this name. */
extern const struct file_engine file_queue_engine;

/* The plugin's storage ops: open sets the tier up with file_queue_engine (and
 * its defaults when it gets no options); the rest are the same for every
 * engine. */
extern const struct fg_storage_ops file_queue_ops;

#endif
