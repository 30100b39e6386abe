/* tests/plugins/lazy_streams.c - a compute backend that runs cpu_blas's ops
 * as a GPU backend's streams would, at their most adversarial: every op,
 * copy and wait is queued on its stream and runs only when a sync demands it
 * (stream_sync, event_sync), each stream as late as its waits allow.  So a
 * consumer issued without a wait on its producer runs before it and reads
 * stale bytes, a store without a wait on the compute stores what was there
 * before: a missing wait of the engine's schedule gives other tokens, on a
 * CPU, every time.  With `device_memory = true` it says its operands live in
 * device memory (pair it with the fake_device_mem tier): the engine then
 * takes every path it takes with a GPU (bounce buffers, copies on streams).
 * cpu_blas.so is found in FGCORE_PLUGIN_PATH; host arrays an op reads (ids,
 * positions, pads, frequencies) are copied when it is queued, as a GPU
 * backend copies them to the device.
 *
 * Graphs (compute ABI 1.5, `graphs = true`): while a stream records, the
 * core may only queue ops, copies and event records on it; a sync, a wait
 * or work on another stream fails the run with an error line, so the
 * engine's tests catch a recorded step that breaks the promise.  Launched,
 * the recorded ops run as late as ever; dropped, they are unqueued.  The
 * generic tier (compute ABI 1.10) is queued the same way, but for route,
 * which hands its choice back on the host and so runs its stream first;
 * host_call's function (1.14) too. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/compute.h>
#include <fgcore/plugin.h>

struct ls_opts {
	int device_memory;
	int graphs;
};

static const struct fg_option ls_options[] = {
	{ .key = "device_memory", .type = FG_OPT_BOOL, .def = "false",
	  .help = "report the operands as device memory (use the fake_device_mem compute tier)",
	  .offset = offsetof(struct ls_opts, device_memory) },
	{ .key = "graphs", .type = FG_OPT_BOOL, .def = "true",
	  .help = "accept graph_begin (compute ABI 1.5) and check what the core does while a "
		  "stream records",
	  .offset = offsetof(struct ls_opts, graphs) },
	{ .key = NULL },
};

enum ls_kind { LS_EMBED, LS_NORM, LS_LINEAR, LS_PREFILL, LS_DECODE, LS_APPEND, LS_ROPE,
	       LS_COPY, LS_WAIT, LS_ADD, LS_GATHER, LS_SCATTER_ADD, LS_GROUPED, LS_SOFTCAP,
	       LS_HOST };

struct ls_stream;

struct ls_op {
	struct ls_op *next;
	enum ls_kind kind;
	union {
		struct fg_embed_args embed;
		struct fg_layer_norm_args norm;
		struct fg_linear_args linear;
		struct fg_attention_args attn;
		struct fg_kv_append_args append;
		struct fg_rope_args rope;
		struct fg_add_args add;
		struct fg_gather_args gather;
		struct fg_scatter_add_args scatter;
		struct fg_linear_grouped_args grouped;
		struct fg_softcap_args softcap;
		struct { void *dst; const void *src; size_t len; } copy;
		struct { void (*fn)(void *); void *arg; } host;
		struct { struct ls_stream *s; uint64_t pos; } wait;
	} a;
	void *arrays; /* the host arrays copied at queueing */
};

struct ls_stream {
	struct ls_op *head, *tail;
	uint64_t queued, done; /* ops queued and run so far */
	struct ls_stream *next_stream;
};

struct ls_event {
	struct ls_stream *s; /* NULL: never recorded (already happened) */
	uint64_t pos;
};

struct ls_ctx {
	const struct fg_host *host;
	void *dl;
	const struct fg_compute_ops *in;
	void *in_ctx;
	int device_memory;
	pthread_mutex_t lock; /* recursive: a wait runs another stream */
	struct ls_stream def, *streams;
	struct ls_stream *retired; /* destroyed, all run: kept for the waits and
				    * events that still name them, freed at fini */
	int err;              /* the first failure of a deferred op */
	int graphs;
	struct ls_stream *rec; /* the stream recording a graph (NULL: none) */
	uint64_t rec_from;     /* its ops queued before the recording */
};

/* -EPROTO and an error line when a graph is being recorded: `what` breaks
 * the promise of compute ABI 1.5 (called with the lock held). */
static int ls_recording(struct ls_ctx *c, const char *what)
{
	if (!c->rec)
		return 0;
	fg_error(c->host, "lazy_streams: %s while a graph is being recorded (compute ABI 1.5 "
		 "allows only ops, copies and event records on the recording stream)", what);
	return -EPROTO;
}

static struct ls_stream *ls_stream_of(struct ls_ctx *c, void *stream)
{
	return stream ? stream : &c->def;
}

static int ls_exec(struct ls_ctx *c, struct ls_op *o);

/* Run stream s until `pos` of its ops have run (waits run their streams first). */
static int ls_run(struct ls_ctx *c, struct ls_stream *s, uint64_t pos)
{
	while (s->done < pos && s->head) {
		struct ls_op *o = s->head;
		int rc = o->kind == LS_WAIT ? ls_run(c, o->a.wait.s, o->a.wait.pos) : ls_exec(c, o);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->done++;
		free(o->arrays);
		free(o);
		if (rc && !c->err)
			c->err = rc;
	}
	return c->err;
}

static int ls_exec(struct ls_ctx *c, struct ls_op *o)
{
	const struct fg_compute_ops *in = c->in;

	switch (o->kind) {
	case LS_EMBED:
		return in->embed(c->in_ctx, NULL, &o->a.embed);
	case LS_NORM:
		return in->layer_norm(c->in_ctx, NULL, &o->a.norm);
	case LS_LINEAR:
		return in->linear(c->in_ctx, NULL, &o->a.linear);
	case LS_PREFILL:
		return in->attention_prefill(c->in_ctx, NULL, &o->a.attn);
	case LS_DECODE:
		return in->attention_decode(c->in_ctx, NULL, &o->a.attn);
	case LS_APPEND:
		return in->kv_append(c->in_ctx, NULL, &o->a.append);
	case LS_ROPE:
		return in->rope(c->in_ctx, NULL, &o->a.rope);
	case LS_COPY:
		memmove(o->a.copy.dst, o->a.copy.src, o->a.copy.len);
		return 0;
	case LS_ADD:
		return in->add(c->in_ctx, NULL, &o->a.add);
	case LS_GATHER:
		return in->gather(c->in_ctx, NULL, &o->a.gather);
	case LS_SCATTER_ADD:
		return in->scatter_add(c->in_ctx, NULL, &o->a.scatter);
	case LS_GROUPED:
		return in->linear_grouped(c->in_ctx, NULL, &o->a.grouped);
	case LS_SOFTCAP:
		return in->softcap(c->in_ctx, NULL, &o->a.softcap);
	case LS_HOST:
		o->a.host.fn(o->a.host.arg);
		return 0;
	case LS_WAIT:
		break;
	}
	return 0;
}

/* Queue o on the stream; its host arrays (n of them: ptr and bytes) copied. */
static int ls_queue(struct ls_ctx *c, void *stream, struct ls_op *o, int n, const void **ptr,
		    const size_t *bytes)
{
	size_t total = 0, at = 0;

	for (int i = 0; i < n; i++)
		total += ptr[i] ? bytes[i] : 0;
	if (total && !(o->arrays = malloc(total))) {
		free(o);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		if (!ptr[i])
			continue;
		memcpy((char *)o->arrays + at, ptr[i], bytes[i]);
		ptr[i] = (char *)o->arrays + at;
		at += bytes[i];
	}
	pthread_mutex_lock(&c->lock);
	struct ls_stream *s = ls_stream_of(c, stream);
	int rc = o->kind == LS_WAIT ? ls_recording(c, "stream_wait")
		 : s != c->rec ? ls_recording(c, "work on another stream") : 0;
	if (rc) {
		pthread_mutex_unlock(&c->lock);
		free(o->arrays);
		free(o);
		return rc;
	}
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->queued++;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static struct ls_op *ls_op(enum ls_kind k)
{
	struct ls_op *o = calloc(1, sizeof(*o));
	if (o)
		o->kind = k;
	return o;
}

static int ls_embed(void *ctx, void *stream, const struct fg_embed_args *a)
{
	struct ls_op *o = ls_op(LS_EMBED);
	if (!o)
		return -ENOMEM;
	o->a.embed = *a;
	const void *p[2] = { a->ids, a->positions };
	size_t b[2] = { (size_t)a->n * sizeof(int32_t), (size_t)a->n * sizeof(int32_t) };
	int rc = ls_queue(ctx, stream, o, 2, p, b);
	if (!rc) {
		o->a.embed.ids = p[0];
		o->a.embed.positions = p[1];
	}
	return rc;
}

static int ls_norm(void *ctx, void *stream, const struct fg_layer_norm_args *a)
{
	struct ls_op *o = ls_op(LS_NORM);
	if (!o)
		return -ENOMEM;
	o->a.norm = *a;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

static int ls_linear(void *ctx, void *stream, const struct fg_linear_args *a)
{
	struct ls_op *o = ls_op(LS_LINEAR);
	if (!o)
		return -ENOMEM;
	o->a.linear = *a;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

static int ls_attention(void *ctx, void *stream, const struct fg_attention_args *a, int decode)
{
	struct ls_op *o = ls_op(decode ? LS_DECODE : LS_PREFILL);
	if (!o)
		return -ENOMEM;
	o->a.attn = *a;
	const void *p[1] = { a->pad };
	size_t b[1] = { (size_t)a->batch * sizeof(int32_t) };
	int rc = ls_queue(ctx, stream, o, 1, p, b);
	if (!rc)
		o->a.attn.pad = p[0];
	return rc;
}

static int ls_prefill(void *ctx, void *stream, const struct fg_attention_args *a)
{
	return ls_attention(ctx, stream, a, 0);
}

static int ls_decode(void *ctx, void *stream, const struct fg_attention_args *a)
{
	return ls_attention(ctx, stream, a, 1);
}

static int ls_append(void *ctx, void *stream, const struct fg_kv_append_args *a)
{
	struct ls_op *o = ls_op(LS_APPEND);
	if (!o)
		return -ENOMEM;
	o->a.append = *a;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

static int ls_rope(void *ctx, void *stream, const struct fg_rope_args *a)
{
	struct ls_op *o = ls_op(LS_ROPE);
	if (!o)
		return -ENOMEM;
	o->a.rope = *a;
	const void *p[2] = { a->positions, a->inv_freq };
	size_t b[2] = { (size_t)a->n * sizeof(int32_t), (size_t)(a->rot_dim / 2) * sizeof(float) };
	int rc = ls_queue(ctx, stream, o, 2, p, b);
	if (!rc) {
		o->a.rope.positions = p[0];
		o->a.rope.inv_freq = p[1];
	}
	return rc;
}

/* ---- the generic tier (compute ABI 1.10), queued as the ops above ---------------- */

static int ls_add(void *ctx, void *stream, const struct fg_add_args *a)
{
	struct ls_op *o = ls_op(LS_ADD);
	if (!o)
		return -ENOMEM;
	o->a.add = *a;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

/* compute ABI 1.12's softcap (Gemma 2's logits), queued likewise */
static int ls_softcap(void *ctx, void *stream, const struct fg_softcap_args *a)
{
	struct ls_op *o = ls_op(LS_SOFTCAP);
	if (!o)
		return -ENOMEM;
	o->a.softcap = *a;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

/* route hands its choice back on the host when it returns: the stream runs
 * first (a sync, so never while a graph records). */
static int ls_route(void *ctx, void *stream, const struct fg_route_args *a)
{
	struct ls_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct ls_stream *s = ls_stream_of(c, stream);
	int rc = ls_recording(c, "route (it syncs its stream)");
	if (!rc)
		rc = ls_run(c, s, s->queued);
	pthread_mutex_unlock(&c->lock);
	return rc ? rc : c->in->route(c->in_ctx, NULL, a);
}

static int ls_gather(void *ctx, void *stream, const struct fg_gather_args *a)
{
	struct ls_op *o = ls_op(LS_GATHER);
	if (!o)
		return -ENOMEM;
	o->a.gather = *a;
	const void *p[1] = { a->index };
	size_t b[1] = { (size_t)a->n * sizeof(int32_t) };
	int rc = ls_queue(ctx, stream, o, 1, p, b);
	if (!rc)
		o->a.gather.index = p[0];
	return rc;
}

static int ls_scatter_add(void *ctx, void *stream, const struct fg_scatter_add_args *a)
{
	struct ls_op *o = ls_op(LS_SCATTER_ADD);
	if (!o)
		return -ENOMEM;
	o->a.scatter = *a;
	const void *p[2] = { a->index, a->weight };
	size_t b[2] = { (size_t)a->n * sizeof(int32_t), (size_t)a->n * sizeof(float) };
	int rc = ls_queue(ctx, stream, o, 2, p, b);
	if (!rc) {
		o->a.scatter.index = p[0];
		o->a.scatter.weight = p[1];
	}
	return rc;
}

static int ls_linear_grouped(void *ctx, void *stream, const struct fg_linear_grouped_args *a)
{
	struct ls_op *o = ls_op(LS_GROUPED);
	if (!o)
		return -ENOMEM;
	o->a.grouped = *a;
	size_t g = (size_t)(a->groups > 0 ? a->groups : 0);
	const void *p[3] = { a->w, a->bias, a->offset };
	size_t b[3] = { g * sizeof(*a->w), g * sizeof(*a->bias), (g + 1) * sizeof(*a->offset) };
	int rc = ls_queue(ctx, stream, o, 3, p, b);
	if (!rc) {
		o->a.grouped.w = p[0];
		o->a.grouped.bias = p[1];
		o->a.grouped.offset = p[2];
	}
	return rc;
}

static int ls_copy(void *ctx, void *stream, void *dst, const void *src, size_t len)
{
	struct ls_op *o = ls_op(LS_COPY);
	if (!o)
		return -ENOMEM;
	o->a.copy.dst = dst;
	o->a.copy.src = src;
	o->a.copy.len = len;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

/* host_call (compute ABI 1.14): the function runs in the stream's order, as
 * late as the rest. */
static int ls_host_call(void *ctx, void *stream, void (*fn)(void *arg), void *arg)
{
	struct ls_op *o = ls_op(LS_HOST);
	if (!o)
		return -ENOMEM;
	o->a.host.fn = fn;
	o->a.host.arg = arg;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

/* ---- streams and events ------------------------------------------------------------- */

static int ls_stream_create(void *ctx, void **stream)
{
	struct ls_ctx *c = ctx;
	struct ls_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	s->next_stream = c->streams;
	c->streams = s;
	pthread_mutex_unlock(&c->lock);
	*stream = s;
	return 0;
}

static int ls_stream_sync(void *ctx, void *stream)
{
	struct ls_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct ls_stream *s = ls_stream_of(c, stream);
	int rc = ls_recording(c, "stream_sync");
	if (!rc)
		rc = ls_run(c, s, s->queued);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static void ls_stream_destroy(void *ctx, void *stream)
{
	struct ls_ctx *c = ctx;
	struct ls_stream *s = stream, **pp;
	(void)ls_stream_sync(ctx, stream); /* its work is not lost */
	pthread_mutex_lock(&c->lock);
	for (pp = &c->streams; *pp; pp = &(*pp)->next_stream)
		if (*pp == s) {
			*pp = s->next_stream;
			break;
		}
	s->next_stream = c->retired;
	c->retired = s;
	pthread_mutex_unlock(&c->lock);
}

static int ls_event_create(void *ctx, void **event)
{
	(void)ctx;
	*event = calloc(1, sizeof(struct ls_event));
	return *event ? 0 : -ENOMEM;
}

static void ls_event_destroy(void *ctx, void *event)
{
	(void)ctx;
	free(event);
}

static int ls_event_record(void *ctx, void *event, void *stream)
{
	struct ls_ctx *c = ctx;
	struct ls_event *e = event;
	pthread_mutex_lock(&c->lock);
	e->s = ls_stream_of(c, stream);
	e->pos = e->s->queued;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int ls_stream_wait(void *ctx, void *stream, void *event)
{
	struct ls_event *e = event;
	struct ls_op *o;
	if (!e->s)
		return 0;
	if (!(o = ls_op(LS_WAIT)))
		return -ENOMEM;
	o->a.wait.s = e->s; /* the event as recorded now */
	o->a.wait.pos = e->pos;
	return ls_queue(ctx, stream, o, 0, NULL, NULL);
}

static int ls_event_sync(void *ctx, void *event)
{
	struct ls_ctx *c = ctx;
	struct ls_event *e = event;
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	rc = ls_recording(c, "event_sync");
	if (!rc && e->s)
		rc = ls_run(c, e->s, e->pos);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- graphs --------------------------------------------------------------------------- */

static int ls_graph_begin(void *ctx, void *stream, int piece)
{
	struct ls_ctx *c = ctx;
	int rc;

	(void)piece;
	if (!c->graphs)
		return -ENOTSUP;
	pthread_mutex_lock(&c->lock);
	if (!(rc = ls_recording(c, "graph_begin"))) {
		c->rec = ls_stream_of(c, stream);
		c->rec_from = c->rec->queued;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int ls_graph_end(void *ctx, void *stream, int launch)
{
	struct ls_ctx *c = ctx;
	struct ls_stream *s;

	pthread_mutex_lock(&c->lock);
	s = ls_stream_of(c, stream);
	if (c->rec != s) {
		pthread_mutex_unlock(&c->lock);
		fg_error(c->host, "lazy_streams: graph_end on a stream that is not recording");
		return -EPROTO;
	}
	c->rec = NULL;
	if (!launch) { /* nothing recorded has run (no sync could): unqueue it */
		struct ls_op **pp = &s->head, *o;
		for (uint64_t at = s->done; *pp && at < c->rec_from; at++)
			pp = &(*pp)->next;
		o = *pp;
		*pp = NULL;
		while (o) {
			struct ls_op *next = o->next;
			free(o->arrays);
			free(o);
			o = next;
		}
		s->tail = NULL;
		for (o = s->head; o; o = o->next)
			s->tail = o;
		s->queued = c->rec_from;
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- the rest, forwarded ----------------------------------------------------------------- */

static void ls_fini(void *ctx)
{
	struct ls_ctx *c = ctx;
	if (!c)
		return;
	(void)ls_stream_sync(c, NULL);
	while (c->streams)
		ls_stream_destroy(c, c->streams);
	while (c->retired) {
		struct ls_stream *s = c->retired;
		c->retired = s->next_stream;
		free(s);
	}
	if (c->in_ctx)
		c->in->fini(c->in_ctx);
	if (c->dl)
		dlclose(c->dl);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static int ls_init(const struct fg_host *host, const void *opts, void **ctx)
{
	const struct ls_opts *o = opts;
	const char *path = getenv("FGCORE_PLUGIN_PATH");
	struct ls_ctx *c = calloc(1, sizeof(*c));
	pthread_mutexattr_t ma;
	char file[4096];
	int rc;

	*ctx = NULL;
	if (!c)
		return -ENOMEM;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&c->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	c->host = host;
	c->device_memory = o ? o->device_memory : 0;
	c->graphs = o ? o->graphs : 1;
	/* cpu_blas.so from the first FGCORE_PLUGIN_PATH directory that has it */
	for (const char *d = path; d && *d && !c->dl;) {
		size_t n = strcspn(d, ":");
		snprintf(file, sizeof(file), "%.*s/cpu_blas.so", (int)n, d);
		c->dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
		d += n + (d[n] == ':');
	}
	const struct fg_plugin *p = c->dl ? dlsym(c->dl, FG_PLUGIN_ENTRY) : NULL;
	if (!p) {
		fg_error(host, "lazy_streams: no cpu_blas.so in FGCORE_PLUGIN_PATH");
		ls_fini(c);
		return -ENOENT;
	}
	c->in = p->ops;
	if ((rc = c->in->init(host, NULL, &c->in_ctx)) < 0) {
		c->in_ctx = NULL;
		ls_fini(c);
		return rc;
	}
	*ctx = c;
	return 0;
}

static void ls_info(void *ctx, struct fg_compute_info *info)
{
	struct ls_ctx *c = ctx;
	c->in->info(c->in_ctx, info);
	info->device_memory = c->device_memory;
}

static int ls_supports(void *ctx, enum fg_op op, enum fg_dtype dtype)
{
	struct ls_ctx *c = ctx;
	return c->in->supports(c->in_ctx, op, dtype);
}

static const struct fg_compute_ops ls_ops = {
	.init			= ls_init,
	.fini			= ls_fini,
	.info			= ls_info,
	.embed			= ls_embed,
	.layer_norm		= ls_norm,
	.linear			= ls_linear,
	.attention_prefill	= ls_prefill,
	.attention_decode	= ls_decode,
	.kv_append		= ls_append,
	.stream_create		= ls_stream_create,
	.stream_destroy		= ls_stream_destroy,
	.stream_sync		= ls_stream_sync,
	.event_create		= ls_event_create,
	.event_destroy		= ls_event_destroy,
	.event_record		= ls_event_record,
	.stream_wait		= ls_stream_wait,
	.event_sync		= ls_event_sync,
	.copy			= ls_copy,
	.rope			= ls_rope,
	.supports		= ls_supports,
	.graph_begin		= ls_graph_begin,
	.graph_end		= ls_graph_end,
	.add			= ls_add,
	.route			= ls_route,
	.gather			= ls_gather,
	.scatter_add		= ls_scatter_add,
	.linear_grouped		= ls_linear_grouped,
	.softcap		= ls_softcap,
	.host_call		= ls_host_call,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "lazy_streams",
	.description	= "test: cpu_blas behind streams that run only when synced, as late as they may",
	.ops		= &ls_ops,
	.options	= ls_options,
	.opts_size	= sizeof(struct ls_opts),
};
