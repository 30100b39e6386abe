/* core/exec/mover.h - copies between tiers, grouped so that a group can be
 * waited for as one.
 *
 * Memory tiers are copied with the backend's `copy` on a load stream (the
 * group's: the mover's, or the activations' own) or the store stream (a GPU
 * backend overlaps them with compute); the disk tier is read and
 * written with the storage plugin's asynchronous requests, directly into
 * compute-tier memory when that is host memory, else through page-locked
 * bounce buffers whose second hop is issued once the disk part completed. */
#ifndef FG_EXEC_MOVER_H
#define FG_EXEC_MOVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend/backend.h"
#include "core/plan/policy.h"
#include "core/tier/tier.h"

struct fg_mover {
	struct fg_backend *be;
	struct fg_tier *tier[FG_ROLES];
	int device;        /* compute-tier memory is not host memory */
	void *compute_stream;  /* where the ops run; the copies order against it */
	void *load_stream, *store_stream;
	/* Activations reload on their own stream: on the load stream they queued
	 * behind the next unit's weights, and each unit's compute waited for them. */
	void *hidden_stream;
	/* Disk use, for the breakdown: bytes read, and the time some request was
	 * in flight (from a submission to an idle disk until the reap that saw
	 * the last one done). */
	uint64_t disk_read_bytes;
	double disk_busy_s, disk_t0;
	/* Bytes loaded from and stored to each role's tier (fg_run_stats). */
	uint64_t loaded[FG_ROLES], stored[FG_ROLES];
	size_t disk_pending;
};

struct fg_xfer_copy {
	void *dst;
	const void *src;
	size_t len;
};

/* A group of transfers in flight. */
struct fg_xfer {
	struct fg_mover *mv;
	void *stream;            /* where its loads run: mv->load_stream unless set */
	struct fg_io *ios;       /* cap requests, reused */
	size_t nios, cap, pending;
	struct fg_xfer_copy *later; /* device copies to issue once the disk reads completed */
	size_t nlater;
	void *event;             /* recorded after the group's stream copies */
	int has_event;
	int loaded;              /* event is recorded right after its own loads (none pending) */
	int small;               /* a few bytes the compute waits for: fg_backend_copy_small */
	void *bounce_event;      /* recorded after the second hops out of bounce buffers */
	int bounced;
	int err;                 /* first error of the group, sticky until reset */
	int reported;            /* err was returned by a wait, reset or fini */
	int fail_op;             /* the failed disk request, for the error line */
	size_t fail_len;
	uint64_t fail_off;
	char what[64];           /* for messages: "weights of block 3" */
};

int fg_mover_init(struct fg_mover *mv, struct fg_backend *be, struct fg_tier *tiers[FG_ROLES]);
void fg_mover_fini(struct fg_mover *mv);

int fg_xfer_init(struct fg_xfer *x, struct fg_mover *mv, size_t cap);
/* Wait for what is in flight and free the group.  Returns an error of the
 * group that no wait returned (a request failed in flight), with its line. */
int fg_xfer_fini(struct fg_xfer *x);
/* Start a new use of the group: waits for requests still in flight, then
 * clears it.  Returns, with its error line, an error of the group's previous
 * use that no fg_xfer_wait returned (a request that failed while in flight,
 * possibly reaped by another group's wait), or the error of that wait; the
 * group is cleared all the same unless requests stay in flight. */
int fg_xfer_reset(struct fg_xfer *x, const char *what);

/* Load: compute-tier memory dst <- len bytes at off of region r on `role`'s
 * tier.  bounce: page-locked host memory of len bytes for a disk source when
 * the compute tier is device memory (else unused). */
int fg_xfer_load(struct fg_xfer *x, void *dst, enum fg_role role, const struct fg_region *r,
		 uint64_t off, size_t len, void *bounce);
/* Store: len bytes of compute-tier memory src -> region r at off on `role`'s
 * tier, after everything issued so far on the compute stream.  src must stay
 * unchanged until the group is waited for. */
int fg_xfer_store(struct fg_xfer *x, enum fg_role role, const struct fg_region *r, uint64_t off,
		  const void *src, size_t len, void *bounce);

/* Wait for the group's disk requests, issue its second hops, and make
 * `stream` (NULL: the mover's compute stream) wait for its copies.  Returns the first
 * error of the group, with an error line naming the transfer. */
int fg_xfer_wait(struct fg_xfer *x, void *stream);

#endif
