/* io_uring_nvme - a file tier on NVMe through io_uring (liburing).
 *
 * The tier file, its regions and the request queue are those of every
 * queue-driven file tier (file_regions.c, file_queue.c: O_DIRECT, requests cut
 * into request_size pieces, up to queue_depth in flight, bounce buffers for
 * unaligned requests).  This file is the kernel side: one ring with
 * queue_depth entries, the tier file registered with it, the bounce buffers
 * registered too (register_buffers) so that their pieces use
 * read_fixed/write_fixed, and optionally a kernel thread polling the
 * submission queue (sqpoll) so that submitting costs no system call.
 *
 * Fault injection and a slow disk come from the core's shim over every tier
 * (core/tier/fault_shim.c), as for any other plugin.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#include "plugins/storage/file_queue.h"

#define IU_NAME "io_uring_nvme"
#define IU_SQ_IDLE_MS 1000 /* the polling thread sleeps after this long without work */

struct io_uring_nvme_opts {
	struct file_queue_opts base;
	int sqpoll;
	int register_buffers;
};

static const struct fg_option io_uring_nvme_options[] = {
	FILE_QUEUE_OPTIONS(struct io_uring_nvme_opts, base),
	{ .key = "sqpoll", .type = FG_OPT_BOOL, .def = "false",
	  .help = "a kernel thread polls the submission queue (IORING_SETUP_SQPOLL): no system "
		  "call per submission, one CPU core busy while requests flow",
	  .offset = offsetof(struct io_uring_nvme_opts, sqpoll) },
	{ .key = "register_buffers", .type = FG_OPT_BOOL, .def = "true",
	  .help = "register the bounce buffers with the ring (read_fixed/write_fixed); aligned "
		  "requests go straight to the caller's memory either way",
	  .offset = offsetof(struct io_uring_nvme_opts, register_buffers) },
	{ .key = NULL },
};

struct iu_ring {
	struct io_uring ring;
	bool fixed_file;   /* the tier file is registered as file 0 */
	bool fixed_bufs;   /* the bounce buffers are registered */
	int fd;
};

static int io_uring_nvme_setup(struct file_queue *q, const void *opts, void **priv)
{
	const struct io_uring_nvme_opts *o = opts;
	const struct fg_host *host = file_queue_host(q);
	struct io_uring_params p;
	const struct iovec *iov;
	struct iu_ring *u;
	unsigned nbuf;
	int err;

	u = calloc(1, sizeof(*u));
	if (!u) {
		fg_error(host, IU_NAME ": out of memory");
		return -ENOMEM;
	}
	u->fd = file_queue_fd(q);
	memset(&p, 0, sizeof(p));
	if (o->sqpoll) {
		p.flags = IORING_SETUP_SQPOLL;
		p.sq_thread_idle = IU_SQ_IDLE_MS;
	}
	err = io_uring_queue_init_params(file_queue_queue_depth(q), &u->ring, &p);
	if (err && o->sqpoll) {
		fg_log(host, FG_LOG_WARN, IU_NAME ": %s: the kernel refuses sqpoll (%s); running "
		       "without it (older kernels need CAP_SYS_NICE; set sqpoll = false to "
		       "silence this)", file_queue_path(q), strerror(-err));
		memset(&p, 0, sizeof(p));
		err = io_uring_queue_init_params(file_queue_queue_depth(q), &u->ring, &p);
	}
	if (err) {
		fg_error(host, IU_NAME ": %s: cannot set up an io_uring of %u entries: %s; %s",
			 file_queue_path(q), file_queue_queue_depth(q), strerror(-err),
			 err == -ENOMEM ? "lower queue_depth or raise `ulimit -l`"
			 : err == -EPERM || err == -ENOSYS ? "io_uring is disabled here "
			 "(kernel.io_uring_disabled, seccomp): use plugin = libaio_nvme or "
			 "posix_file"
			 : "lower queue_depth or use plugin = libaio_nvme");
		free(u);
		return err;
	}
	/* A registered file spares a lookup per request (and old kernels need it
	 * with sqpoll); without it, the plain descriptor works as well. */
	u->fixed_file = io_uring_register_files(&u->ring, &u->fd, 1) == 0;
	iov = file_queue_bounce_iov(q, &nbuf);
	if (o->register_buffers && nbuf) {
		err = io_uring_register_buffers(&u->ring, iov, nbuf);
		if (err) {
			struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
			char lim[32] = "unlimited";
			size_t bytes = 0;

			for (unsigned i = 0; i < nbuf; i++)
				bytes += iov[i].iov_len;
			if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
				snprintf(lim, sizeof(lim), "%llu KiB",
					 (unsigned long long)(rl.rlim_cur >> 10));
			fg_log(host, FG_LOG_WARN, IU_NAME ": %s: cannot register %zu KiB of bounce "
			       "buffers (%s; locked-memory limit %s); using them unregistered "
			       "(raise `ulimit -l`, lower queue_depth or set register_buffers = "
			       "false)", file_queue_path(q), bytes >> 10, strerror(-err), lim);
		} else {
			u->fixed_bufs = true;
		}
	}
	fg_log(host, FG_LOG_DEBUG, IU_NAME ": %s: ring of %u entries%s%s%s", file_queue_path(q),
	       p.sq_entries, p.flags & IORING_SETUP_SQPOLL ? ", sqpoll" : "",
	       u->fixed_file ? ", registered file" : "",
	       u->fixed_bufs ? ", registered bounce buffers" : "");
	*priv = u;
	return 0;
}

static void io_uring_nvme_teardown(struct file_queue *q, void *priv)
{
	struct iu_ring *u = priv;

	/* Closing the ring waits for whatever the kernel still holds. */
	io_uring_queue_exit(&u->ring);
	free(u);
}

static void io_uring_nvme_prep(struct file_queue *q, void *priv, struct file_piece *p)
{
	struct iu_ring *u = priv;
	struct io_uring_sqe *sqe;
	char *mem = p->mem + p->done;
	unsigned len = (unsigned)p->xfer;
	uint64_t off = p->foff + p->done;
	int fd = u->fixed_file ? 0 : u->fd;

	/* The ring has a slot for every piece; a full one only means the kernel
	 * (or its polling thread) has not consumed the earlier ones yet. */
	while (!(sqe = io_uring_get_sqe(&u->ring))) {
		if (io_uring_submit(&u->ring) < 0)
			usleep(100);
		io_uring_sqring_wait(&u->ring);
	}
	if (u->fixed_bufs && p->bounce >= 0) {
		if (p->op == FG_IO_READ)
			io_uring_prep_read_fixed(sqe, fd, mem, len, off, p->bounce);
		else
			io_uring_prep_write_fixed(sqe, fd, mem, len, off, p->bounce);
	} else if (p->op == FG_IO_READ) {
		io_uring_prep_read(sqe, fd, mem, len, off);
	} else {
		io_uring_prep_write(sqe, fd, mem, len, off);
	}
	if (u->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, p);
}

static int io_uring_nvme_wait(struct file_queue *q, void *priv, unsigned min)
{
	struct iu_ring *u = priv;
	struct io_uring_cqe *cqe;
	unsigned head, seen, total = 0;
	int ret;

	for (;;) {
		ret = min > total ? io_uring_submit_and_wait(&u->ring, min - total)
				  : io_uring_submit(&u->ring);
		/* EINTR: a signal; EAGAIN/EBUSY: the kernel is short of room for now. */
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY && ret != -ETIME)
			return ret;
		seen = 0;
		io_uring_for_each_cqe(&u->ring, head, cqe) {
			file_queue_complete(q, io_uring_cqe_get_data(cqe), cqe->res);
			seen++;
		}
		io_uring_cq_advance(&u->ring, seen);
		total += seen;
		if (total >= min)
			return (int)total;
		if (ret == -EAGAIN || ret == -EBUSY)
			usleep(100);
	}
}

static const struct io_uring_nvme_opts io_uring_nvme_defaults = {
	.base = FILE_QUEUE_DEFAULTS,
	.register_buffers = 1,
};

const struct file_engine file_queue_engine = {
	.name		= IU_NAME,
	.defaults	= &io_uring_nvme_defaults,
	.setup		= io_uring_nvme_setup,
	.teardown	= io_uring_nvme_teardown,
	.prep		= io_uring_nvme_prep,
	.wait		= io_uring_nvme_wait,
};

/* Usable when the kernel lets us set up a ring (io_uring may be disabled). */
static int io_uring_nvme_probe(const struct fg_host *host)
{
	struct io_uring ring;

	if (io_uring_queue_init(2, &ring, 0) != 0)
		return 0;
	io_uring_queue_exit(&ring);
	return 1;
}

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= IU_NAME,
	.description	= "NVMe file tier through io_uring (O_DIRECT, deep queue)",
	.probe		= io_uring_nvme_probe,
	.ops		= &file_queue_ops,
	.options	= io_uring_nvme_options,
	.opts_size	= sizeof(struct io_uring_nvme_opts),
	.capabilities	= "async,o_direct,sparse",
};
