/* libaio_nvme - a file tier on NVMe through Linux native AIO (libaio).
 *
 * The tier file, its regions and the request queue are those of every
 * queue-driven file tier (file_regions.c, file_queue.c: O_DIRECT, requests cut
 * into request_size pieces, up to queue_depth in flight, aligned bounce
 * buffers for unaligned requests).  This file is the kernel side: an AIO
 * context of queue_depth events, one iocb per piece slot, io_submit and
 * io_getevents.  For kernels or sandboxes without io_uring.
 *
 * Fault injection and a slow disk come from the core's shim over every tier
 * (core/tier/fault_shim.c), as for any other plugin.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libaio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fgcore/plugin.h>
#include <fgcore/storage.h>

#include "plugins/storage/file_queue.h"

#define LA_NAME "libaio_nvme"
#define LA_MAX_STALLS 10000 /* 1 ms naps while the kernel refuses every submission */

struct libaio_nvme_opts {
	struct file_queue_opts base;
};

static const struct fg_option libaio_nvme_options[] = {
	FILE_QUEUE_OPTIONS(struct libaio_nvme_opts, base),
	{ .key = NULL },
};

struct la_ctx {
	io_context_t ctx;
	int fd;
	unsigned qd;
	struct iocb *iocbs;      /* one per piece slot */
	struct iocb **staged;    /* prepared, not yet accepted by io_submit */
	unsigned nstaged;
	unsigned nkernel;        /* accepted, not yet reaped */
	struct io_event *events;
};

static void libaio_nvme_teardown(struct file_queue *q, void *priv)
{
	struct la_ctx *a = priv;
	struct io_event ev;

	/* io_destroy waits for what is in flight; reap it first all the same so
	 * that nothing is left pointing at our buffers. */
	while (a->nkernel && io_getevents(a->ctx, 1, 1, &ev, NULL) == 1)
		a->nkernel--;
	if (a->ctx)
		io_destroy(a->ctx);
	free(a->iocbs);
	free(a->staged);
	free(a->events);
	free(a);
}

static int libaio_nvme_setup(struct file_queue *q, const void *opts, void **priv)
{
	const struct fg_host *host = file_queue_host(q);
	struct la_ctx *a;
	int err;

	a = calloc(1, sizeof(*a));
	if (!a)
		goto nomem;
	a->fd = file_queue_fd(q);
	a->qd = file_queue_queue_depth(q);
	a->iocbs = calloc(a->qd, sizeof(*a->iocbs));
	a->staged = calloc(a->qd, sizeof(*a->staged));
	a->events = calloc(a->qd, sizeof(*a->events));
	if (!a->iocbs || !a->staged || !a->events)
		goto nomem;
	err = io_setup((int)a->qd, &a->ctx);
	if (err) {
		fg_error(host, LA_NAME ": %s: cannot set up an AIO context of %u requests: %s; %s",
			 file_queue_path(q), a->qd, strerror(-err),
			 err == -EAGAIN ? "the system-wide limit fs.aio-max-nr is reached: lower "
			 "queue_depth or raise that sysctl"
			 : err == -ENOSYS ? "this kernel has no native AIO: use plugin = posix_file"
			 : "lower queue_depth");
		a->ctx = 0;
		libaio_nvme_teardown(q, a);
		return err;
	}
	*priv = a;
	return 0;
nomem:
	if (a) {
		free(a->iocbs);
		free(a->staged);
		free(a->events);
		free(a);
	}
	fg_error(host, LA_NAME ": out of memory for a queue of %u requests",
		 file_queue_queue_depth(q));
	return -ENOMEM;
}

static void libaio_nvme_prep(struct file_queue *q, void *priv, struct file_piece *p)
{
	struct la_ctx *a = priv;
	struct iocb *cb = &a->iocbs[p->slot];
	char *mem = p->mem + p->done;
	size_t len = p->xfer;
	long long off = (long long)(p->foff + p->done);

	if (p->op == FG_IO_READ)
		io_prep_pread(cb, a->fd, mem, len, off);
	else
		io_prep_pwrite(cb, a->fd, mem, len, off);
	cb->data = p;
	a->staged[a->nstaged++] = cb;
}

/* Hand the staged iocbs to the kernel.  One it refuses outright (io_submit
 * reports the first bad iocb) completes with that error; EAGAIN leaves the
 * rest staged for the next call. */
static void la_flush(struct file_queue *q, struct la_ctx *a)
{
	while (a->nstaged) {
		int r = io_submit(a->ctx, (long)a->nstaged, a->staged);

		if (r == -EINTR)
			continue;
		if (r == -EAGAIN || r == 0)
			return;
		if (r < 0) {
			struct iocb *bad = a->staged[0];

			a->nstaged--;
			memmove(a->staged, a->staged + 1, a->nstaged * sizeof(*a->staged));
			file_queue_complete(q, bad->data, r);
			continue;
		}
		a->nkernel += (unsigned)r;
		a->nstaged -= (unsigned)r;
		memmove(a->staged, a->staged + r, a->nstaged * sizeof(*a->staged));
	}
}

static int libaio_nvme_wait(struct file_queue *q, void *priv, unsigned min)
{
	struct la_ctx *a = priv;
	struct timespec zero = { 0, 0 };
	unsigned total = 0, stalls = 0;
	int r;

	for (;;) {
		la_flush(q, a);
		if (!a->nkernel) {
			/* Nothing accepted: either all is done or the kernel refuses for now. */
			if (total >= min || !a->nstaged)
				return (int)total;
			if (++stalls > LA_MAX_STALLS) {
				struct iocb *cb = a->staged[0];

				a->nstaged--;
				memmove(a->staged, a->staged + 1, a->nstaged * sizeof(*a->staged));
				file_queue_complete(q, cb->data, -EAGAIN);
				total++;
				continue;
			}
			usleep(1000);
			continue;
		}
		r = io_getevents(a->ctx, total >= min ? 0 : (long)(min - total), (long)a->nkernel,
				 a->events, total >= min ? &zero : NULL);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		a->nkernel -= (unsigned)r;
		for (int i = 0; i < r; i++)
			file_queue_complete(q, a->events[i].data, (long)a->events[i].res);
		total += (unsigned)r;
		if (total >= min)
			return (int)total;
	}
}

static const struct libaio_nvme_opts libaio_nvme_defaults = {
	.base = FILE_QUEUE_DEFAULTS,
};

const struct file_engine file_queue_engine = {
	.name		= LA_NAME,
	.defaults	= &libaio_nvme_defaults,
	.setup		= libaio_nvme_setup,
	.teardown	= libaio_nvme_teardown,
	.prep		= libaio_nvme_prep,
	.wait		= libaio_nvme_wait,
};

/* Usable when the kernel gives us an AIO context. */
static int libaio_nvme_probe(const struct fg_host *host)
{
	io_context_t ctx = 0;

	if (io_setup(1, &ctx) != 0)
		return 0;
	io_destroy(ctx);
	return 1;
}

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_STORAGE_ABI_VERSION,
	.kind		= FG_PLUGIN_STORAGE,
	.name		= LA_NAME,
	.description	= "NVMe file tier through Linux native AIO (O_DIRECT, deep queue)",
	.probe		= libaio_nvme_probe,
	.ops		= &file_queue_ops,
	.options	= libaio_nvme_options,
	.opts_size	= sizeof(struct libaio_nvme_opts),
	.capabilities	= "async,o_direct,sparse",
};
