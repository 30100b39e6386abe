/* core/tier/fault_shim.c - the fault-injection and slow-disk shim stacked over
 * a storage plugin (see fault_shim.h). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tier/fault_shim.h"
#include "core/util/error.h"

#define SHIM_DELAY_MAX 1000000u

/* fg_io.priv while a request is the shim's (before the plugin has it) */
#define SHIM_LINK 0 /* next request in a list */
#define SHIM_DUE 1  /* delayed: when the plugin may have it (CLOCK_MONOTONIC ns) */
#define SHIM_MARK 2 /* SHIM_* */

#define SHIM_FORWARD 0
#define SHIM_INJECTED 1 /* failed here, never reaches the plugin */
#define SHIM_SHORT 2    /* performed here in two halves */

/* Plugins known by an older, shorter name in the variables. */
static const struct {
	const char *plugin, *old;
} shim_old_names[] = {
	{ "io_uring_nvme", "IO_URING" },
	{ "libaio_nvme", "LIBAIO" },
};

struct shim_list {
	struct fg_io *head, *tail;
};

struct fg_fault_shim {
	const struct fg_storage_ops *inner;
	void *ctx;
	char who[96], fault_env[64];
	struct fg_fault_rules rules;
	unsigned delay_us;

	pthread_mutex_t lock;
	pthread_cond_t more;         /* the done list grew, or a delayed request moved on */
	uint64_t count[2];           /* requests seen, per op */
	struct shim_list done;       /* completed here: injected, short, or for a plugin
				      * without submit */
	int64_t inner_out;           /* with the plugin's submit, not yet reaped */
	unsigned running;            /* being performed here by some thread */

	struct shim_list late;       /* delayed, not yet given to the plugin */
	pthread_cond_t late_more;
	pthread_t thread;
	bool thread_on, stopping;
};

/* ---- configuration -------------------------------------------------------- */

/* FGCORE_<NAME>_<what> with NAME the plugin's name in capitals. */
static void shim_env_name(char *buf, size_t n, const char *name, const char *what)
{
	size_t k = (size_t)snprintf(buf, n, "FGCORE_");

	for (const char *c = name; *c && k + 1 < n; c++)
		buf[k++] = isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_';
	buf[k] = '\0';
	snprintf(buf + k, n - k, "_%s", what);
}

/* The value of the plugin's variable `what`, its name in env; NULL if unset. */
static const char *shim_getenv(const char *plugin, const char *what, char *env, size_t n)
{
	const char *v;

	shim_env_name(env, n, plugin, what);
	v = getenv(env);
	if (v && *v)
		return v;
	for (size_t i = 0; i < sizeof(shim_old_names) / sizeof(shim_old_names[0]); i++) {
		if (strcmp(plugin, shim_old_names[i].plugin) != 0)
			continue;
		shim_env_name(env, n, shim_old_names[i].old, what);
		v = getenv(env);
		if (v && *v)
			return v;
	}
	shim_env_name(env, n, plugin, what);
	return NULL;
}

int fg_fault_shim_config(const char *plugin, const char *role, struct fg_fault_shim_opts *o)
{
	const char *fault, *delay;
	uint64_t v;

	memset(o, 0, sizeof(*o));
	snprintf(o->who, sizeof(o->who), "tier %s (%s)", role, plugin);
	fault = shim_getenv(plugin, "FAULT", o->fault_env, sizeof(o->fault_env));
	delay = shim_getenv(plugin, "DELAY_US", o->delay_env, sizeof(o->delay_env));
	if (fault && fg_fault_rules_parse(&o->rules, fault)) {
		FG_ERR("%s: %s=\"%s\": expected up to %d comma-separated rules "
		       "read|write:ERRNO:N (ERRNO a name such as EIO or ENOSPC, a number, or SHORT "
		       "for a short transfer; N >= 1), e.g. read:EIO:3", o->who, o->fault_env,
		       fault, FG_FAULT_RULES_MAX);
		return -EINVAL;
	}
	if (delay) {
		if (!fg_fault_rules_u64(delay, strlen(delay), &v) || v > SHIM_DELAY_MAX) {
			FG_ERR("%s: %s=\"%s\": expected microseconds, 0..%u", o->who, o->delay_env,
			       delay, SHIM_DELAY_MAX);
			return -EINVAL;
		}
		o->delay_us = (unsigned)v;
	}
	return o->rules.n || o->delay_us ? 1 : 0;
}

/* ---- lists ------------------------------------------------------------------ */

static void shim_push(struct shim_list *l, struct fg_io *io)
{
	io->priv[SHIM_LINK] = 0;
	if (l->tail)
		l->tail->priv[SHIM_LINK] = (uintptr_t)io;
	else
		l->head = io;
	l->tail = io;
}

static struct fg_io *shim_pop(struct shim_list *l)
{
	struct fg_io *io = l->head;

	if (io) {
		l->head = (struct fg_io *)(uintptr_t)io->priv[SHIM_LINK];
		if (!l->head)
			l->tail = NULL;
	}
	return io;
}

static uint64_t shim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- requests --------------------------------------------------------------- */

/* Count a request of op (lock held): the errno to inject, FG_FAULT_SHORT or 0. */
static int shim_fault(struct fg_fault_shim *s, int op)
{
	if (!s->rules.n)
		return 0;
	return fg_fault_rules_match(&s->rules, op, ++s->count[op]);
}

static int shim_rw(struct fg_fault_shim *s, int op, const struct fg_region *r, uint64_t off,
		   void *buf, size_t len)
{
	return op == FG_IO_READ ? s->inner->read(s->ctx, r, off, buf, len)
				: s->inner->write(s->ctx, r, off, buf, len);
}

/* A short transfer resumed: the plugin gets the first half, then the rest. */
static int shim_rw_short(struct fg_fault_shim *s, int op, const struct fg_region *r,
			 uint64_t off, void *buf, size_t len)
{
	size_t half = len / 2;
	int err = shim_rw(s, op, r, off, buf, half);

	return err ? err : shim_rw(s, op, r, off + half, (char *)buf + half, len - half);
}

static void shim_report(const struct fg_fault_shim *s, const struct fg_io *io)
{
	FG_ERR("%s: %s of %zu bytes at offset %" PRIu64 " failed: %s (injected by %s)", s->who,
	       io->op == FG_IO_READ ? "read" : "write", io->len, io->offset,
	       strerror(-io->result), s->fault_env);
}

static int shim_sync(struct fg_fault_shim *s, int op, const struct fg_region *r, uint64_t off,
		     void *buf, size_t len)
{
	struct fg_io io = { .op = (enum fg_io_op)op, .region = r, .offset = off, .len = len };
	int f;

	pthread_mutex_lock(&s->lock);
	f = shim_fault(s, op);
	pthread_mutex_unlock(&s->lock);
	if (f > 0) {
		io.result = -f;
		shim_report(s, &io);
		return -f;
	}
	if (f == FG_FAULT_SHORT)
		return shim_rw_short(s, op, r, off, buf, len);
	return shim_rw(s, op, r, off, buf, len);
}

static int fg_fault_shim_read(void *ctx, const struct fg_region *r, uint64_t off, void *dst,
			      size_t len)
{
	return shim_sync(ctx, FG_IO_READ, r, off, dst, len);
}

static int fg_fault_shim_write(void *ctx, const struct fg_region *r, uint64_t off,
			       const void *src, size_t len)
{
	return shim_sync(ctx, FG_IO_WRITE, r, off, (void *)src, len);
}

/* Perform an asynchronous request here, through the plugin's read/write. */
static void shim_perform(struct fg_fault_shim *s, struct fg_io *io)
{
	int err = io->priv[SHIM_MARK] == SHIM_SHORT
			  ? shim_rw_short(s, (int)io->op, io->region, io->offset, io->buf, io->len)
			  : shim_rw(s, (int)io->op, io->region, io->offset, io->buf, io->len);

	io->result = err > 0 ? -EIO : err;
}

/* Hand a delayed request on (lock held; dropped while it is performed here). */
static void shim_release(struct fg_fault_shim *s, struct fg_io *io)
{
	struct fg_io *one = io;
	int err;

	if (s->inner->submit && io->priv[SHIM_MARK] != SHIM_SHORT) {
		err = s->inner->submit(s->ctx, &one, 1);
		if (!err) {
			s->inner_out++;
			return;
		}
		io->result = err > 0 ? -EIO : err;
	} else {
		s->running++;
		pthread_mutex_unlock(&s->lock);
		shim_perform(s, io);
		pthread_mutex_lock(&s->lock);
		s->running--;
	}
	shim_push(&s->done, io);
}

/* The slow disk: each delayed request waits out its time, then moves on. */
static void *shim_delay_main(void *arg)
{
	struct fg_fault_shim *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct fg_io *io = s->late.head;
		uint64_t now;

		if (!io) {
			if (s->stopping)
				break;
			pthread_cond_wait(&s->late_more, &s->lock);
			continue;
		}
		now = shim_now_ns();
		if (!s->stopping && now < io->priv[SHIM_DUE]) {
			struct timespec ts = {
				.tv_sec = (time_t)(io->priv[SHIM_DUE] / 1000000000u),
				.tv_nsec = (long)(io->priv[SHIM_DUE] % 1000000000u),
			};

			pthread_cond_timedwait(&s->late_more, &s->lock, &ts);
			continue;
		}
		shim_pop(&s->late);
		shim_release(s, io);
		pthread_cond_broadcast(&s->more);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* What submit does with each request of a batch. */
static bool shim_here(const struct fg_fault_shim *s, unsigned char kind)
{
	return kind == SHIM_SHORT || (kind == SHIM_FORWARD && !s->inner->submit);
}

static int fg_fault_shim_submit(void *ctx, struct fg_io *const *ios, unsigned n)
{
	struct fg_fault_shim *s = ctx;
	struct fg_io *fwd_stack[64], **fwd = fwd_stack;
	unsigned char kind_stack[64], *kind = kind_stack;
	uint64_t saved[2], due;
	unsigned m = 0, nhere = 0;
	int err = 0;

	if (!n)
		return 0;
	if (!ios) {
		FG_ERR("%s: submit of %u requests without an array", s->who, n);
		return -EINVAL;
	}
	if (n > sizeof(kind_stack)) {
		fwd = malloc(n * sizeof(*fwd));
		kind = malloc(n);
		if (!fwd || !kind) {
			free(fwd);
			free(kind);
			FG_ERR("%s: out of memory queueing %u requests", s->who, n);
			return -ENOMEM;
		}
	}
	/* A request the plugin has is its own: its priv is never looked at again,
	 * so the batch's plan is kept here. */
	pthread_mutex_lock(&s->lock);
	saved[0] = s->count[0];
	saved[1] = s->count[1];
	for (unsigned i = 0; i < n; i++) {
		struct fg_io *io = ios[i];
		int f = shim_fault(s, (int)io->op);

		kind[i] = f > 0 ? SHIM_INJECTED : f ? SHIM_SHORT : SHIM_FORWARD;
		io->result = f > 0 ? -f : 0;
		io->priv[SHIM_MARK] = kind[i];
		if (s->delay_us || f > 0)
			continue;
		if (shim_here(s, kind[i]))
			nhere++;
		else
			fwd[m++] = io;
	}
	/* All or nothing: only a plugin that queued its part makes the batch queued. */
	if (m && (err = s->inner->submit(s->ctx, fwd, m))) {
		s->count[0] = saved[0];
		s->count[1] = saved[1];
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	s->inner_out += m;
	due = shim_now_ns() + (uint64_t)s->delay_us * 1000u;
	for (unsigned i = 0; i < n; i++) {
		if (kind[i] == SHIM_INJECTED) {
			shim_push(&s->done, ios[i]);
		} else if (s->delay_us) {
			ios[i]->priv[SHIM_DUE] = due;
			shim_push(&s->late, ios[i]);
		}
	}
	s->running += nhere;
	pthread_cond_broadcast(&s->late_more);
	pthread_cond_broadcast(&s->more);
	pthread_mutex_unlock(&s->lock);
	if (!nhere)
		goto out;

	/* Requests done here: performed now, outside the lock, then completed. */
	for (unsigned i = 0; i < n; i++)
		if (shim_here(s, kind[i]))
			shim_perform(s, ios[i]);
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < n; i++)
		if (shim_here(s, kind[i]))
			shim_push(&s->done, ios[i]);
	s->running -= nhere;
	pthread_cond_broadcast(&s->more);
	pthread_mutex_unlock(&s->lock);
out:
	if (fwd != fwd_stack) {
		free(fwd);
		free(kind);
	}
	return err > 0 ? -EIO : err;
}

static int fg_fault_shim_reap(void *ctx, struct fg_io **done, unsigned min, unsigned max)
{
	struct fg_fault_shim *s = ctx;
	struct fg_io *injected = NULL, *io;
	unsigned k = 0;
	int got, err = 0;

	if (!max)
		return 0;
	if (!done) {
		FG_ERR("%s: reap without an array", s->who);
		return -EINVAL;
	}
	if (min > max)
		min = max;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (k < max && (io = shim_pop(&s->done))) {
			if (io->priv[SHIM_MARK] == SHIM_INJECTED)
				injected = io;
			io->priv[SHIM_MARK] = 0;
			done[k++] = io;
		}
		if (k >= max || (k >= min && !s->inner_out))
			break;
		if (s->inner_out > 0) {
			/* Also collects what the plugin has finished when min is met. */
			pthread_mutex_unlock(&s->lock);
			got = s->inner->reap(s->ctx, done + k, min > k ? min - k : 0, max - k);
			pthread_mutex_lock(&s->lock);
			if (got < 0) {
				err = got;
				break;
			}
			s->inner_out -= got;
			k += (unsigned)got;
			if (k >= min)
				break;
			continue;
		}
		/* Wait only for requests that exist: delayed or being performed. */
		if (!s->late.head && !s->running)
			break;
		pthread_cond_wait(&s->more, &s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	if (injected)
		shim_report(s, injected);
	return k || !err ? (int)k : err;
}

/* ---- regions ------------------------------------------------------------------ */

static int fg_fault_shim_alloc(void *ctx, uint64_t size, struct fg_region *r)
{
	struct fg_fault_shim *s = ctx;

	return s->inner->alloc(s->ctx, size, r);
}

static void fg_fault_shim_free(void *ctx, struct fg_region *r)
{
	struct fg_fault_shim *s = ctx;

	s->inner->free(s->ctx, r);
}

/* ---- open / close -------------------------------------------------------------- */

static void shim_destroy(struct fg_fault_shim *s)
{
	pthread_cond_destroy(&s->late_more);
	pthread_cond_destroy(&s->more);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void fg_fault_shim_close(void *ctx)
{
	struct fg_fault_shim *s = ctx;

	if (s->thread_on) {
		/* Delayed requests go on at once: the plugin must finish them before
		 * it closes. */
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_cond_broadcast(&s->late_more);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->thread, NULL);
	}
	s->inner->close(s->ctx);
	shim_destroy(s);
}

static int fg_fault_shim_open(const struct fg_host *host, const void *opts, void **ctx,
			      struct fg_storage_info *info)
{
	const struct fg_fault_shim_opts *o = opts;
	struct fg_fault_shim *s;
	pthread_condattr_t ca;
	int err;

	if (!o || !o->inner) {
		FG_ERR("fault shim: opened without a plugin to stack on");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		FG_ERR("%s: out of memory", o->who);
		return -ENOMEM;
	}
	s->inner = o->inner;
	memcpy(s->who, o->who, sizeof(s->who));
	memcpy(s->fault_env, o->fault_env, sizeof(s->fault_env));
	s->rules = o->rules;
	s->delay_us = o->delay_us;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->more, NULL);
	/* The delay thread sleeps until a monotonic deadline. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->late_more, &ca);
	pthread_condattr_destroy(&ca);

	err = s->inner->open(host, o->inner_opts, &s->ctx, info);
	if (err) {
		shim_destroy(s);
		return err;
	}
	if (s->delay_us) {
		err = pthread_create(&s->thread, NULL, shim_delay_main, s);
		if (err) {
			FG_ERR("%s: cannot start the thread of %s: %s", o->who, o->delay_env,
			       strerror(err));
			s->inner->close(s->ctx);
			shim_destroy(s);
			return -err;
		}
		s->thread_on = true;
	}
	FG_LOG(FG_LOG_DEBUG, "%s: fault shim: %d rule(s) from %s, delay %u us", s->who,
	       s->rules.n, s->fault_env, s->delay_us);
	*ctx = s;
	return 0;
}

const struct fg_storage_ops fg_fault_shim_ops = {
	.open	= fg_fault_shim_open,
	.close	= fg_fault_shim_close,
	.alloc	= fg_fault_shim_alloc,
	.free	= fg_fault_shim_free,
	.read	= fg_fault_shim_read,
	.write	= fg_fault_shim_write,
	.submit	= fg_fault_shim_submit,
	.reap	= fg_fault_shim_reap,
};
