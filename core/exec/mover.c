/* core/exec/mover.c - grouped, asynchronous tier-to-tier copies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/mover.h"
#include "core/util/clock.h"
#include "core/util/error.h"

int fg_mover_init(struct fg_mover *mv, struct fg_backend *be, struct fg_tier *tiers[FG_ROLES])
{
	int rc;
	memset(mv, 0, sizeof(*mv));
	mv->be = be;
	for (int r = 0; r < FG_ROLES; r++)
		mv->tier[r] = tiers[r];
	mv->device = !(tiers[FG_ROLE_COMPUTE]->info.flags & FG_STORAGE_HOST_MEMORY);
	if ((rc = fg_backend_stream_create(be, &mv->compute_stream)) ||
	    (rc = fg_backend_stream_create(be, &mv->load_stream)) ||
	    (rc = fg_backend_stream_create(be, &mv->store_stream)) ||
	    (rc = fg_backend_stream_create(be, &mv->hidden_stream)))
		return rc;
	return 0;
}

void fg_mover_fini(struct fg_mover *mv)
{
	if (mv->compute_stream)
		fg_backend_stream_destroy(mv->be, mv->compute_stream);
	if (mv->load_stream)
		fg_backend_stream_destroy(mv->be, mv->load_stream);
	if (mv->store_stream)
		fg_backend_stream_destroy(mv->be, mv->store_stream);
	if (mv->hidden_stream)
		fg_backend_stream_destroy(mv->be, mv->hidden_stream);
	memset(mv, 0, sizeof(*mv));
}

int fg_xfer_init(struct fg_xfer *x, struct fg_mover *mv, size_t cap)
{
	memset(x, 0, sizeof(*x));
	x->mv = mv;
	x->stream = mv->load_stream;
	x->cap = cap;
	x->ios = calloc(cap, sizeof(*x->ios));
	x->later = calloc(cap, sizeof(*x->later));
	if (!x->ios || !x->later) {
		FG_ERR("out of memory for %zu transfers", cap);
		return -ENOMEM;
	}
	int rc = fg_backend_event_create(mv->be, &x->event);
	return rc ? rc : fg_backend_event_create(mv->be, &x->bounce_event);
}

/* Return the group's error with its line (again: the line recorded when the
 * request was reaped may have been overwritten since). */
static int xfer_error(struct fg_xfer *x)
{
	struct fg_tier *disk = x->mv->tier[FG_ROLE_DISK];

	if (x->fail_len)
		FG_ERR("%s: disk tier (%s): %s of %zu bytes at offset %llu failed: %s", x->what,
		       disk->ph.plugin->name, x->fail_op == FG_IO_READ ? "read" : "write",
		       x->fail_len, (unsigned long long)x->fail_off, strerror(-x->err));
	else
		FG_ERR("%s: disk tier (%s): waiting for its requests failed: %s", x->what,
		       disk->ph.plugin->name, strerror(-x->err));
	x->reported = 1;
	return x->err;
}

/* An error of the group that no one was told about yet, or 0. */
static int xfer_unreported(struct fg_xfer *x)
{
	return x->err && !x->reported ? xfer_error(x) : 0;
}

int fg_xfer_fini(struct fg_xfer *x)
{
	int rc = 0;

	if (x->pending)
		rc = fg_xfer_wait(x, NULL);
	else if (x->mv)
		rc = xfer_unreported(x);
	if (x->event)
		fg_backend_event_destroy(x->mv->be, x->event);
	if (x->bounce_event)
		fg_backend_event_destroy(x->mv->be, x->bounce_event);
	free(x->ios);
	free(x->later);
	memset(x, 0, sizeof(*x));
	return rc;
}

int fg_xfer_reset(struct fg_xfer *x, const char *what)
{
	int rc = 0, r;

	/* Requests in flight own their slots of x->ios: finish them first. */
	if (x->pending) {
		rc = fg_xfer_wait(x, NULL);
		if (x->pending)
			return rc; /* the tier failed to reap: nothing can be reused */
	} else {
		rc = xfer_unreported(x);
	}
	/* Bounce buffers are refilled only after their last second hop read them. */
	if (x->bounced && (r = fg_backend_event_sync(x->mv->be, x->bounce_event)) && !rc)
		rc = r;
	x->bounced = 0;
	x->nios = x->nlater = 0;
	x->has_event = 0;
	x->loaded = 0;
	x->err = 0;
	x->reported = 0;
	x->fail_len = 0;
	snprintf(x->what, sizeof(x->what), "%s", what);
	return rc;
}

static int disk_io(struct fg_xfer *x, enum fg_io_op op, const struct fg_region *r, uint64_t off,
		   void *buf, size_t len)
{
	struct fg_io *io;
	int rc;

	if (x->nios == x->cap) {
		FG_ERR("%s: more than %zu disk requests in one group", x->what, x->cap);
		return -EINVAL;
	}
	io = &x->ios[x->nios++];
	*io = (struct fg_io){ .op = op, .region = r, .offset = off, .buf = buf, .len = len,
			      .user = x };
	x->pending++;
	rc = fg_tier_submit(x->mv->tier[FG_ROLE_DISK], &io, 1);
	if (rc) {
		x->pending--;
		x->nios--;
		return rc;
	}
	if (x->mv->disk_pending++ == 0)
		x->mv->disk_t0 = fg_now();
	if (op == FG_IO_READ)
		x->mv->disk_read_bytes += len;
	return 0;
}

/* A copy of the group's between memories the backend addresses. */
static int xfer_copy(const struct fg_xfer *x, void *stream, void *dst, const void *src, size_t len)
{
	return x->small ? fg_backend_copy_small(x->mv->be, stream, dst, src, len)
			: fg_backend_copy(x->mv->be, stream, dst, src, len);
}

int fg_xfer_load(struct fg_xfer *x, void *dst, enum fg_role role, const struct fg_region *r,
		 uint64_t off, size_t len, void *bounce)
{
	struct fg_mover *mv = x->mv;

	if (!len)
		return 0;
	mv->loaded[role] += len;
	if (role != FG_ROLE_DISK) {
		/* Marked at once: the consumer waits for these copies, not for
		 * whatever the load stream takes on next (the next unit's weights,
		 * which would otherwise serialize compute with every transfer). */
		int rc = xfer_copy(x, x->stream, dst, (char *)r->addr + off, len);
		if (!rc)
			rc = fg_backend_event_record(mv->be, x->event, x->stream);
		x->has_event = 1;
		x->loaded = !rc;
		return rc;
	}
	if (!mv->device)
		return disk_io(x, FG_IO_READ, r, off, dst, len);
	if (x->nlater == x->cap) {
		FG_ERR("%s: more than %zu bounced copies in one group", x->what, x->cap);
		return -EINVAL;
	}
	x->later[x->nlater++] = (struct fg_xfer_copy){ dst, bounce, len };
	return disk_io(x, FG_IO_READ, r, off, bounce, len);
}

int fg_xfer_store(struct fg_xfer *x, enum fg_role role, const struct fg_region *r, uint64_t off,
		  const void *src, size_t len, void *bounce)
{
	struct fg_mover *mv = x->mv;
	int rc;

	if (!len)
		return 0;
	mv->stored[role] += len;
	/* The store stream starts after the compute issued so far. */
	if ((rc = fg_backend_event_record(mv->be, x->event, mv->compute_stream)) ||
	    (rc = fg_backend_stream_wait(mv->be, mv->store_stream, x->event)))
		return rc;
	if (role != FG_ROLE_DISK) {
		x->has_event = 1;
		return xfer_copy(x, mv->store_stream, (char *)r->addr + off, src, len);
	}
	if (!mv->device)
		return disk_io(x, FG_IO_WRITE, r, off, (void *)src, len);
	/* Device memory to disk: through the bounce buffer, which must hold the
	 * bytes before the disk write starts. */
	if ((rc = fg_backend_copy(mv->be, mv->store_stream, bounce, src, len)) ||
	    (rc = fg_backend_event_record(mv->be, x->event, mv->store_stream)) ||
	    (rc = fg_backend_event_sync(mv->be, x->event)))
		return rc;
	return disk_io(x, FG_IO_WRITE, r, off, bounce, len);
}

int fg_xfer_wait(struct fg_xfer *x, void *stream)
{
	struct fg_mover *mv = x->mv;
	struct fg_io *done[64];
	int rc;

	while (x->pending) {
		int n = fg_tier_reap(mv->tier[FG_ROLE_DISK], done, 1, 64);
		if (n < 0) {
			if (x->err)
				return xfer_error(x);
			FG_ERR("%s: disk tier (%s): waiting for %zu requests failed: %s", x->what,
			       mv->tier[FG_ROLE_DISK]->ph.plugin->name, x->pending, fg_last_error());
			x->err = n;
			x->reported = 1;
			return n;
		}
		/* Requests of other groups come back here too: each keeps its
		 * error until its own wait, reset or fini returns it. */
		for (int i = 0; i < n; i++) {
			struct fg_xfer *g = done[i]->user;
			g->pending--;
			if (mv->disk_pending && --mv->disk_pending == 0)
				mv->disk_busy_s += fg_now() - mv->disk_t0;
			if (done[i]->result < 0 && !g->err) {
				g->err = done[i]->result;
				g->fail_op = done[i]->op;
				g->fail_len = done[i]->len;
				g->fail_off = done[i]->offset;
			}
		}
	}
	if (x->err)
		return xfer_error(x);
	for (size_t i = 0; i < x->nlater; i++) {
		rc = fg_backend_copy(mv->be, x->stream, x->later[i].dst, x->later[i].src,
				     x->later[i].len);
		if (rc)
			return rc;
		x->has_event = 1;
	}
	if (x->nlater) {
		if ((rc = fg_backend_event_record(mv->be, x->bounce_event, x->stream)))
			return rc;
		x->bounced = 1;
		x->loaded = 0; /* the second hops just issued come after the mark */
	}
	x->nlater = 0;
	if (!stream)
		stream = mv->compute_stream;
	if (x->has_event) {
		/* Copies went to its load stream or the store stream; wait for both. */
		if ((!x->loaded && (rc = fg_backend_event_record(mv->be, x->event, x->stream))) ||
		    (rc = fg_backend_stream_wait(mv->be, stream, x->event)) ||
		    (rc = fg_backend_event_record(mv->be, x->event, mv->store_stream)) ||
		    (rc = fg_backend_stream_wait(mv->be, stream, x->event)))
			return rc;
		x->has_event = 0;
		x->loaded = 0;
	}
	return 0;
}
