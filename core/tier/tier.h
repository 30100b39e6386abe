/* core/tier/tier.h - a storage tier in a role (compute, host, disk): the plugin
 * plus the core's accounting (used, peak, capacity cap) and default hooks. */
#ifndef FG_TIER_TIER_H
#define FG_TIER_TIER_H

#include <pthread.h>
#include <stdint.h>

#include <fgcore/storage.h>
#include "core/plugin/loader.h"

struct fg_tier_pending; /* completed requests of the default (synchronous) submit */
struct fg_tier_budget;

#define FG_TIER_BUDGET_MAX 4 /* tiers of one run sharing a memory */

struct fg_tier {
	char role[32];               /* "compute", "host", "disk": used in messages */
	struct fg_plugin_handle ph;
	const struct fg_storage_ops *ops;
	void *opts;                  /* the plugin's option struct (owned) */
	void *ctx;
	struct fg_storage_info info;
	uint64_t capacity;           /* min(plugin's physical capacity, configured cap) */
	uint64_t used, peak;
	pthread_mutex_t lock;
	struct fg_tier_pending *pending;
	struct fg_tier_budget *budget; /* NULL: this tier's capacity only */
};

/* Tiers backed by one physical memory draw on one budget: every tier whose
 * plugin reports host memory (FG_STORAGE_HOST_MEMORY, page-locked or not) is
 * the machine's RAM, however much each claims.  A member allocates only when
 * its own capacity and the budget both have room; the budget's capacity is
 * the smallest capacity the members' plugins report (the physical size: the
 * configured `capacity` caps only its own tier). */
struct fg_tier_budget {
	pthread_mutex_t lock;
	uint64_t capacity, used, peak;
	int n;
	struct fg_tier *member[FG_TIER_BUDGET_MAX];
	char names[160]; /* "compute (pinned_host) and host (pinned_host)" */
};

/* Open the plugin in `ph` (ownership moves to the tier, as does `opts`) as the
 * tier `role`; cap > 0 limits its capacity to cap bytes.  On failure the
 * handle is closed and opts freed too (*ph is zeroed either way). */
int fg_tier_open(struct fg_tier *t, const char *role, struct fg_plugin_handle *ph, void *opts,
		 uint64_t cap);
void fg_tier_close(struct fg_tier *t);

/* Allocation with accounting.  Exceeding the capacity is -ENOSPC with the line
 * "tier <role> (<plugin>): cannot allocate <size>: <used> of <capacity> in use; ..." */
int fg_tier_alloc(struct fg_tier *t, uint64_t size, struct fg_region *r);
/* The same; `hint` (may be NULL), e.g. "largest batch that fits: 24", is
 * appended to the -ENOSPC line after "; ". */
int fg_tier_alloc_hint(struct fg_tier *t, uint64_t size, struct fg_region *r, const char *hint);
void fg_tier_free(struct fg_tier *t, struct fg_region *r);

int fg_tier_read(struct fg_tier *t, const struct fg_region *r, uint64_t off, void *dst, size_t len);
int fg_tier_write(struct fg_tier *t, const struct fg_region *r, uint64_t off, const void *src,
		  size_t len);
/* Asynchronous requests; without plugin hooks they run synchronously at submit. */
int fg_tier_submit(struct fg_tier *t, struct fg_io *const *ios, unsigned n);
int fg_tier_reap(struct fg_tier *t, struct fg_io **done, unsigned min, unsigned max);

/* Join the host-memory tiers among tiers[0..n) (NULL entries skipped) into
 * b, when there are two or more (otherwise b stays unused: returns 0 members).
 * Call before the members allocate; fg_tier_budget_fini after they are freed. */
int fg_tier_budget_init(struct fg_tier_budget *b, struct fg_tier *const *tiers, int n);
void fg_tier_budget_fini(struct fg_tier_budget *b);
/* Bytes t may still allocate: its own room, and its budget's. */
uint64_t fg_tier_room(const struct fg_tier *t);

/* Format bytes as "1.50 GiB" into buf. */
const char *fg_format_bytes(uint64_t bytes, char *buf, size_t len);

#endif
