/* core/tier/tier.c - a storage plugin opened as a tier: accounting, bounds
 * checks, the default (synchronous) submit/reap, and the fault-injection shim
 * stacked over the plugin when the environment asks for it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tier/fault_shim.h"
#include "core/tier/tier.h"
#include "core/util/error.h"

/* Requests the default submit already performed, waiting to be reaped: a FIFO
 * ring.  `reserved` slots are promised to submits still doing their I/O, so
 * that appending never allocates (and never fails) after the I/O is done. */
struct fg_tier_pending {
	pthread_mutex_t lock;
	pthread_cond_t more;   /* signalled when a submit appends its requests */
	struct fg_io **ring;
	size_t cap, head, count, reserved;
};

const char *fg_format_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = -1;

	if (!buf || !len)
		return buf;
	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	/* Round as printed: 1023.999 KiB must read "1.00 MiB", not "1024.00 KiB". */
	if (v >= 1023.995 && u < 5) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.2f %s", v, units[u]);
	return buf;
}

static const char *fg_tier_plugin_name(const struct fg_tier *t)
{
	return t->ph.plugin && t->ph.plugin->name ? t->ph.plugin->name : "?";
}

int fg_tier_open(struct fg_tier *t, const char *role, struct fg_plugin_handle *ph, void *opts,
		 uint64_t cap)
{
	struct fg_plugin_handle own;
	struct fg_fault_shim_opts shim;
	const void *open_opts = opts;
	int err;

	if (!t || !role || !ph || !ph->plugin) {
		FG_ERR("tier: open called without a tier, role or plugin");
		if (ph)
			fg_plugin_close(ph);
		free(opts);
		return -EINVAL;
	}
	/* Ownership of the handle and options moves to the tier, even on failure. */
	own = *ph;
	memset(ph, 0, sizeof(*ph));
	memset(t, 0, sizeof(*t));
	snprintf(t->role, sizeof(t->role), "%s", role);
	t->ph = own;
	t->opts = opts;

	/* The loader refused plugins without their required hooks; the kind is
	 * the caller's to get right. */
	if (own.plugin->kind != FG_PLUGIN_STORAGE) {
		FG_ERR("tier %s: %s: plugin %s is a %s plugin, not a storage plugin", t->role,
		       own.path, fg_tier_plugin_name(t), fg_plugin_kind_name(own.plugin->kind));
		err = -EINVAL;
		goto fail;
	}
	t->ops = own.plugin->ops;
	err = fg_fault_shim_config(fg_tier_plugin_name(t), t->role, &shim);
	if (err < 0)
		goto fail;
	if (err > 0) {
		/* Every plugin gets the same injection, none contains any. */
		shim.inner = t->ops;
		shim.inner_opts = opts;
		t->ops = &fg_fault_shim_ops;
		open_opts = &shim;
	}
	t->pending = calloc(1, sizeof(*t->pending));
	if (!t->pending) {
		FG_ERR("tier %s (%s): out of memory", t->role, fg_tier_plugin_name(t));
		err = -ENOMEM;
		goto fail;
	}
	pthread_mutex_init(&t->pending->lock, NULL);
	pthread_cond_init(&t->pending->more, NULL);
	pthread_mutex_init(&t->lock, NULL);

	err = t->ops->open(fg_core_host(), open_opts, &t->ctx, &t->info);
	if (err) {
		if (err > 0)
			err = -EIO;
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->pending->more);
		pthread_mutex_destroy(&t->pending->lock);
		free(t->pending);
		t->pending = NULL;
		goto fail;
	}
	t->capacity = t->info.capacity;
	if (cap > 0 && cap < t->capacity)
		t->capacity = cap;
	if (!t->info.alignment)
		t->info.alignment = 1;
	return 0;
fail:
	fg_plugin_close(&t->ph);
	free(t->opts);
	t->opts = NULL;
	t->ops = NULL;
	return err;
}

void fg_tier_close(struct fg_tier *t)
{
	char b[32];

	if (!t || !t->ops)
		return;
	if (t->used)
		FG_LOG(FG_LOG_WARN, "tier %s (%s): closed with %s still allocated", t->role,
		       fg_tier_plugin_name(t), fg_format_bytes(t->used, b, sizeof(b)));
	t->ops->close(t->ctx);
	t->ctx = NULL;
	fg_plugin_close(&t->ph);
	free(t->opts);
	t->opts = NULL;
	if (t->pending) {
		pthread_cond_destroy(&t->pending->more);
		pthread_mutex_destroy(&t->pending->lock);
		free(t->pending->ring);
		free(t->pending);
		t->pending = NULL;
	}
	pthread_mutex_destroy(&t->lock);
	t->ops = NULL;
}

/* The budget's refusal of `size` more bytes on t: one line naming every member. */
static void fg_tier_budget_refuse(const struct fg_tier *t, const struct fg_tier_budget *b,
				  uint64_t size, const char *hint)
{
	char want[32], free_[32], cap[32], parts[FG_TIER_BUDGET_MAX * 48] = "";
	size_t len = 0;

	for (int i = 0; i < b->n && len < sizeof(parts); i++) {
		char one[32];
		int w = snprintf(parts + len, sizeof(parts) - len, "%s%s %s", i ? ", " : "",
				 b->member[i]->role,
				 fg_format_bytes(b->member[i]->used, one, sizeof(one)));
		if (w > 0)
			len += (size_t)w;
	}
	FG_ERR("tiers %s share one host memory of %s: cannot allocate %s on tier %s: %s free (in use: %s); "
	       "give these tiers smaller shares together ([policy] percent: the disk tier takes the rest)%s%s",
	       b->names, fg_format_bytes(b->capacity, cap, sizeof(cap)),
	       fg_format_bytes(size, want, sizeof(want)), t->role,
	       fg_format_bytes(b->capacity > b->used ? b->capacity - b->used : 0, free_, sizeof(free_)),
	       parts, hint && *hint ? "; " : "", hint && *hint ? hint : "");
}

int fg_tier_alloc_hint(struct fg_tier *t, uint64_t size, struct fg_region *r, const char *hint)
{
	char want[32], used[32], cap[32];
	struct fg_tier_budget *b;
	uint64_t in_use;
	int err;

	if (!t || !t->ops || !r) {
		FG_ERR("tier: alloc called without an open tier or a region");
		return -EINVAL;
	}
	b = t->budget;
	pthread_mutex_lock(&t->lock);
	in_use = t->used;
	if (size > t->capacity || in_use > t->capacity - size) {
		pthread_mutex_unlock(&t->lock);
		FG_ERR("tier %s (%s): cannot allocate %s: %s of %s in use; raise [tier.%s] "
		       "capacity or give this tier a smaller share%s%s", t->role,
		       fg_tier_plugin_name(t), fg_format_bytes(size, want, sizeof(want)),
		       fg_format_bytes(in_use, used, sizeof(used)),
		       fg_format_bytes(t->capacity, cap, sizeof(cap)), t->role,
		       hint && *hint ? "; " : "", hint && *hint ? hint : "");
		return -ENOSPC;
	}
	/* Lock order: the tier, then its budget. */
	if (b) {
		pthread_mutex_lock(&b->lock);
		if (size > b->capacity || b->used > b->capacity - size) {
			fg_tier_budget_refuse(t, b, size, hint);
			pthread_mutex_unlock(&b->lock);
			pthread_mutex_unlock(&t->lock);
			return -ENOSPC;
		}
		b->used += size;
		if (b->used > b->peak)
			b->peak = b->used;
		pthread_mutex_unlock(&b->lock);
	}
	/* Reserve first so that concurrent allocations cannot overshoot. */
	t->used += size;
	pthread_mutex_unlock(&t->lock);

	memset(r, 0, sizeof(*r));
	err = t->ops->alloc(t->ctx, size, r);
	pthread_mutex_lock(&t->lock);
	if (err) {
		t->used -= size;
		if (b) {
			pthread_mutex_lock(&b->lock);
			b->used -= size;
			pthread_mutex_unlock(&b->lock);
		}
	} else {
		if (t->used > t->peak)
			t->peak = t->used;
		r->size = size;
	}
	pthread_mutex_unlock(&t->lock);
	if (err > 0)
		err = -EIO;
	return err;
}

int fg_tier_alloc(struct fg_tier *t, uint64_t size, struct fg_region *r)
{
	return fg_tier_alloc_hint(t, size, r, NULL);
}

void fg_tier_free(struct fg_tier *t, struct fg_region *r)
{
	uint64_t size;

	if (!t || !t->ops || !r)
		return;
	size = r->size;
	t->ops->free(t->ctx, r);
	pthread_mutex_lock(&t->lock);
	if (size > t->used) {
		FG_LOG(FG_LOG_ERROR, "tier %s (%s): freeing %" PRIu64 " bytes but only %" PRIu64
		       " are accounted; double free?", t->role, fg_tier_plugin_name(t), size,
		       t->used);
		t->used = 0;
	} else {
		t->used -= size;
	}
	if (t->budget) {
		pthread_mutex_lock(&t->budget->lock);
		t->budget->used -= size < t->budget->used ? size : t->budget->used;
		pthread_mutex_unlock(&t->budget->lock);
	}
	pthread_mutex_unlock(&t->lock);
	memset(r, 0, sizeof(*r));
}

int fg_tier_budget_init(struct fg_tier_budget *b, struct fg_tier *const *tiers, int n)
{
	size_t len = 0;

	memset(b, 0, sizeof(*b));
	for (int i = 0; i < n; i++)
		if (tiers[i] && tiers[i]->ops && (tiers[i]->info.flags & FG_STORAGE_HOST_MEMORY) &&
		    b->n < FG_TIER_BUDGET_MAX)
			b->member[b->n++] = tiers[i];
	if (b->n < 2) {
		b->n = 0;
		return 0;
	}
	pthread_mutex_init(&b->lock, NULL);
	/* 0 is a plugin that does not know its size: no bound from it. */
	b->capacity = UINT64_MAX;
	for (int i = 0; i < b->n; i++) {
		struct fg_tier *t = b->member[i];
		if (t->info.capacity && t->info.capacity < b->capacity)
			b->capacity = t->info.capacity;
		b->used += t->used;
		int w = snprintf(b->names + len, sizeof(b->names) - len, "%s%s (%s)",
				 i == 0 ? "" : i + 1 == b->n ? " and " : ", ", t->role,
				 fg_tier_plugin_name(t));
		if (w > 0 && (size_t)w < sizeof(b->names) - len)
			len += (size_t)w;
	}
	b->peak = b->used;
	for (int i = 0; i < b->n; i++)
		b->member[i]->budget = b;
	return b->n;
}

void fg_tier_budget_fini(struct fg_tier_budget *b)
{
	if (!b || !b->n)
		return;
	for (int i = 0; i < b->n; i++)
		if (b->member[i]->budget == b)
			b->member[i]->budget = NULL;
	pthread_mutex_destroy(&b->lock);
	b->n = 0;
}

uint64_t fg_tier_room(const struct fg_tier *t)
{
	uint64_t own = t->capacity > t->used ? t->capacity - t->used : 0;
	const struct fg_tier_budget *b = t->budget;
	uint64_t shared = b ? (b->capacity > b->used ? b->capacity - b->used : 0) : UINT64_MAX;

	return own < shared ? own : shared;
}

static int fg_tier_check(const struct fg_tier *t, const struct fg_region *r, uint64_t off,
			 size_t len, const void *buf, const char *what)
{
	if (!t || !t->ops) {
		FG_ERR("tier: %s on a tier that is not open", what);
		return -EINVAL;
	}
	if (!r) {
		FG_ERR("tier %s (%s): %s without a region", t->role, fg_tier_plugin_name(t), what);
		return -EINVAL;
	}
	if (off > r->size || len > r->size - off) {
		FG_ERR("tier %s (%s): %s of %zu bytes at offset %" PRIu64 " is outside the %"
		       PRIu64 "-byte region", t->role, fg_tier_plugin_name(t), what, len, off,
		       r->size);
		return -EINVAL;
	}
	if (len && !buf) {
		FG_ERR("tier %s (%s): %s of %zu bytes with a NULL buffer", t->role,
		       fg_tier_plugin_name(t), what, len);
		return -EINVAL;
	}
	return 0;
}

int fg_tier_read(struct fg_tier *t, const struct fg_region *r, uint64_t off, void *dst, size_t len)
{
	int err = fg_tier_check(t, r, off, len, dst, "read");

	if (err)
		return err;
	err = t->ops->read(t->ctx, r, off, dst, len);
	return err > 0 ? -EIO : err;
}

int fg_tier_write(struct fg_tier *t, const struct fg_region *r, uint64_t off, const void *src,
		  size_t len)
{
	int err = fg_tier_check(t, r, off, len, src, "write");

	if (err)
		return err;
	err = t->ops->write(t->ctx, r, off, src, len);
	return err > 0 ? -EIO : err;
}

static int fg_tier_check_io(const struct fg_tier *t, const struct fg_io *io, unsigned i,
			    unsigned n)
{
	if (!io) {
		FG_ERR("tier %s (%s): request %u of %u is NULL", t->role, fg_tier_plugin_name(t),
		       i, n);
		return -EINVAL;
	}
	if (io->op != FG_IO_READ && io->op != FG_IO_WRITE) {
		FG_ERR("tier %s (%s): request %u of %u has an unknown type %d", t->role,
		       fg_tier_plugin_name(t), i, n, (int)io->op);
		return -EINVAL;
	}
	return fg_tier_check(t, io->region, io->offset, io->len, io->buf,
			     io->op == FG_IO_READ ? "read" : "write");
}

/* Make room for n more completed requests in the ring. */
static int fg_pending_reserve(struct fg_tier_pending *p, unsigned n)
{
	size_t need, cap;
	struct fg_io **ring;

	pthread_mutex_lock(&p->lock);
	need = p->count + p->reserved + n;
	if (need > p->cap) {
		cap = p->cap ? p->cap : 64;
		while (cap < need)
			cap *= 2;
		ring = malloc(cap * sizeof(*ring));
		if (!ring) {
			pthread_mutex_unlock(&p->lock);
			return -ENOMEM;
		}
		for (size_t i = 0; i < p->count; i++)
			ring[i] = p->ring[(p->head + i) % p->cap];
		free(p->ring);
		p->ring = ring;
		p->cap = cap;
		p->head = 0;
	}
	p->reserved += n;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int fg_tier_submit(struct fg_tier *t, struct fg_io *const *ios, unsigned n)
{
	struct fg_tier_pending *p;
	int err;

	if (!t || !t->ops) {
		FG_ERR("tier: submit on a tier that is not open");
		return -EINVAL;
	}
	if (!n)
		return 0;
	if (!ios) {
		FG_ERR("tier %s (%s): submit of %u requests without an array", t->role,
		       fg_tier_plugin_name(t), n);
		return -EINVAL;
	}
	/* All or nothing: refuse the batch before any request is queued. */
	for (unsigned i = 0; i < n; i++) {
		err = fg_tier_check_io(t, ios[i], i, n);
		if (err)
			return err;
	}
	if (t->ops->submit) {
		err = t->ops->submit(t->ctx, ios, n);
		return err > 0 ? -EIO : err;
	}

	p = t->pending;
	if (fg_pending_reserve(p, n)) {
		FG_ERR("tier %s (%s): out of memory queueing %u requests", t->role,
		       fg_tier_plugin_name(t), n);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct fg_io *io = ios[i];

		if (io->op == FG_IO_READ)
			err = t->ops->read(t->ctx, io->region, io->offset, io->buf, io->len);
		else
			err = t->ops->write(t->ctx, io->region, io->offset, io->buf, io->len);
		io->result = err > 0 ? -EIO : err;
	}
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < n; i++) {
		p->ring[(p->head + p->count) % p->cap] = ios[i];
		p->count++;
	}
	p->reserved -= n;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int fg_tier_reap(struct fg_tier *t, struct fg_io **done, unsigned min, unsigned max)
{
	struct fg_tier_pending *p;
	unsigned k = 0;
	int got;

	if (!t || !t->ops) {
		FG_ERR("tier: reap on a tier that is not open");
		return -EINVAL;
	}
	if (!max)
		return 0;
	if (!done) {
		FG_ERR("tier %s (%s): reap without an array", t->role, fg_tier_plugin_name(t));
		return -EINVAL;
	}
	if (min > max)
		min = max;
	if (t->ops->reap) {
		got = t->ops->reap(t->ctx, done, min, max);
		if (got < 0)
			return got;
		if ((unsigned)got > max) {
			FG_ERR("tier %s (%s): plugin reaped %d requests, more than the %u asked",
			       t->role, fg_tier_plugin_name(t), got, max);
			return -EIO;
		}
		for (int i = 0; i < got; i++) {
			char b[32];

			/* The plugin's own message was recorded on its worker thread. */
			if (done[i]->result < 0)
				FG_ERR("tier %s (%s): %s of %s at offset %" PRIu64 " failed: %s",
				       t->role, fg_tier_plugin_name(t),
				       done[i]->op == FG_IO_READ ? "read" : "write",
				       fg_format_bytes(done[i]->len, b, sizeof(b)),
				       done[i]->offset, strerror(-done[i]->result));
		}
		return got;
	}
	/* Default path: requests complete inside submit.  Wait only for submits
	 * still running on other threads, never for requests nobody submitted. */
	p = t->pending;
	pthread_mutex_lock(&p->lock);
	while (p->count < min && p->reserved)
		pthread_cond_wait(&p->more, &p->lock);
	while (k < max && p->count) {
		done[k++] = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		p->count--;
	}
	pthread_mutex_unlock(&p->lock);
	return (int)k;
}
