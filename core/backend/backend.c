/* core/backend/backend.c - open compute backends and codecs; defaults for
 * their optional hooks (synchronous streams, fp16 through float). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/half.h>

#include "core/backend/backend.h"
#include "core/util/error.h"

/* A backend without events still hands out a non-NULL event, so callers can
 * keep "NULL means not created" bookkeeping. */
static char fg_backend_dummy_event;

/* 1 when the comma-separated list names `word` (spaces around names allowed). */
static int fg_backend_lists(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *s = list; *s;) {
		const char *e;

		while (*s == ' ' || *s == ',')
			s++;
		e = s;
		while (*e && *e != ',')
			e++;
		while (e > s && e[-1] == ' ')
			e--;
		if ((size_t)(e - s) == n && strncmp(s, word, n) == 0)
			return 1;
		s = e;
		while (*s && *s != ',')
			s++;
	}
	return 0;
}

static void fg_backend_release(struct fg_plugin_handle *ph, void *opts)
{
	free(opts);
	fg_plugin_close(ph);
}

int fg_backend_open(struct fg_backend *b, struct fg_plugin_handle *ph, void *opts)
{
	const struct fg_plugin *p = ph->plugin;
	const struct fg_compute_ops *o;
	void *ctx = NULL;
	int rc;

	memset(b, 0, sizeof(*b));
	if (!p || p->kind != FG_PLUGIN_COMPUTE || !p->ops) {
		FG_ERR("%s: not a compute plugin, name a compute backend (e.g. cpu_blas)",
		       ph->path);
		fg_backend_release(ph, opts);
		return -EINVAL;
	}
	/* The loader checked the hooks (required ones, the stream hooks all or
	 * none, those of minor 1 for a 1.1 plugin). */
	o = p->ops;
	fg_clear_error();
	rc = o->init(fg_core_host(), opts, &ctx);
	if (rc < 0) {
		if (!*fg_last_error())
			FG_ERR("%s: compute plugin %s failed to initialise (error %d)", ph->path,
			       p->name, rc);
		fg_backend_release(ph, opts);
		return rc;
	}
	if (rc > 0) {
		/* A positive return is a plugin bug; treat it as an error. */
		FG_ERR("%s: compute plugin %s: init returned %d, expected 0 or -errno",
		       ph->path, p->name, rc);
		if (o->fini)
			o->fini(ctx);
		fg_backend_release(ph, opts);
		return -EINVAL;
	}
	b->ph = *ph;
	b->ops = o;
	b->opts = opts;
	b->ctx = ctx;
	b->minor = FG_ABI_MINOR_OF(p->abi_version);
	b->info.hidden_dtype = (enum fg_dtype)-1; /* left alone: the activations' type */
	o->info(ctx, &b->info);
	if (b->info.act_dtype != FG_DTYPE_F32 && b->info.act_dtype != FG_DTYPE_F16) {
		FG_ERR("%s: compute plugin %s reports activation dtype %d, expected f32 or f16",
		       ph->path, p->name, (int)b->info.act_dtype);
		fg_backend_close(b);
		return -EINVAL;
	}
	/* hidden_dtype is a minor-3 member: an older plugin never wrote it. */
	if (b->minor < 3 || (int)b->info.hidden_dtype == -1)
		b->info.hidden_dtype = b->info.act_dtype;
	if (b->info.hidden_dtype != FG_DTYPE_F32 && b->info.hidden_dtype != FG_DTYPE_F16) {
		FG_ERR("%s: compute plugin %s reports residual-stream dtype %d, expected f32 or f16",
		       ph->path, p->name, (int)b->info.hidden_dtype);
		fg_backend_close(b);
		return -EINVAL;
	}
	if (!b->info.native_codecs)
		b->info.native_codecs = "";
	/* A 1.0 plugin names what it reads natively; 1.1 answers `supports`. */
	if (b->minor == 0)
		b->q4_native = fg_backend_lists(b->info.native_codecs, "int4_group64");
	return 0;
}

void fg_backend_close(struct fg_backend *b)
{
	if (!b->ops)
		return;
	if (b->ops->fini)
		b->ops->fini(b->ctx);
	fg_backend_release(&b->ph, b->opts);
	memset(b, 0, sizeof(*b));
}

int fg_backend_stream_create(struct fg_backend *b, void **stream)
{
	if (b->ops->stream_create)
		return b->ops->stream_create(b->ctx, stream);
	*stream = NULL; /* the default stream: every op is synchronous */
	return 0;
}

void fg_backend_stream_destroy(struct fg_backend *b, void *stream)
{
	if (b->ops->stream_destroy && stream)
		b->ops->stream_destroy(b->ctx, stream);
}

int fg_backend_stream_sync(struct fg_backend *b, void *stream)
{
	if (b->ops->stream_sync)
		return b->ops->stream_sync(b->ctx, stream);
	return 0;
}

int fg_backend_event_create(struct fg_backend *b, void **event)
{
	if (b->ops->event_create)
		return b->ops->event_create(b->ctx, event);
	*event = &fg_backend_dummy_event;
	return 0;
}

void fg_backend_event_destroy(struct fg_backend *b, void *event)
{
	if (b->ops->event_destroy && event)
		b->ops->event_destroy(b->ctx, event);
}

int fg_backend_event_record(struct fg_backend *b, void *event, void *stream)
{
	if (b->ops->event_record)
		return b->ops->event_record(b->ctx, event, stream);
	return 0;
}

int fg_backend_stream_wait(struct fg_backend *b, void *stream, void *event)
{
	if (b->ops->stream_wait)
		return b->ops->stream_wait(b->ctx, stream, event);
	return 0;
}

int fg_backend_event_sync(struct fg_backend *b, void *event)
{
	if (b->ops->event_sync)
		return b->ops->event_sync(b->ctx, event);
	return 0;
}

/* Timers are members of minor 2: a 1.1 plugin's table ends before them. */
static int fg_backend_has_timers(const struct fg_backend *b)
{
	return b->minor >= 2 && b->ops->timer_create;
}

int fg_backend_timer_create(struct fg_backend *b, void **timer)
{
	*timer = NULL;
	return fg_backend_has_timers(b) ? b->ops->timer_create(b->ctx, timer) : -ENOTSUP;
}

void fg_backend_timer_destroy(struct fg_backend *b, void *timer)
{
	if (timer && fg_backend_has_timers(b))
		b->ops->timer_destroy(b->ctx, timer);
}

int fg_backend_timer_record(struct fg_backend *b, void *timer, void *stream)
{
	return fg_backend_has_timers(b) ? b->ops->timer_record(b->ctx, timer, stream) : -ENOTSUP;
}

int fg_backend_timer_elapsed(struct fg_backend *b, void *start, void *end, double *seconds)
{
	return fg_backend_has_timers(b) ? b->ops->timer_elapsed(b->ctx, start, end, seconds)
					: -ENOTSUP;
}

/* Graphs are members of minor 5: a 1.4 plugin's table ends before them. */
int fg_backend_has_graphs(const struct fg_backend *b)
{
	return b->minor >= 5 && b->ops->graph_begin;
}

int fg_backend_graph_begin(struct fg_backend *b, void *stream, int piece)
{
	int rc;

	if (!fg_backend_has_graphs(b))
		return -ENOTSUP;
	fg_clear_error();
	rc = b->ops->graph_begin(b->ctx, stream, piece);
	if (rc && rc != -ENOTSUP && !*fg_last_error())
		FG_ERR("compute plugin %s: graph_begin failed (error %d)", b->ph.plugin->name, rc);
	return rc;
}

int fg_backend_graph_end(struct fg_backend *b, void *stream, int launch)
{
	int rc;

	if (!launch) /* after a failed op, whose error line stays the one shown */
		return b->ops->graph_end(b->ctx, stream, 0);
	fg_clear_error();
	rc = b->ops->graph_end(b->ctx, stream, 1);
	if (rc && !*fg_last_error())
		FG_ERR("compute plugin %s: graph_end failed (error %d)", b->ph.plugin->name, rc);
	return rc;
}

int fg_backend_copy(struct fg_backend *b, void *stream, void *dst, const void *src, size_t len)
{
	if (b->ops->copy)
		return b->ops->copy(b->ctx, stream, dst, src, len);
	memmove(dst, src, len);
	return 0;
}

int fg_backend_copy_small(struct fg_backend *b, void *stream, void *dst, const void *src,
			  size_t len)
{
	if (b->minor >= 13 && b->ops->copy_small)
		return b->ops->copy_small(b->ctx, stream, dst, src, len);
	return fg_backend_copy(b, stream, dst, src, len);
}

int fg_backend_has_host_call(const struct fg_backend *b)
{
	return b->minor >= 14 && b->ops->host_call;
}

int fg_backend_host_call(struct fg_backend *b, void *stream, void (*fn)(void *arg), void *arg)
{
	int rc;
	if (fg_backend_has_host_call(b))
		return b->ops->host_call(b->ctx, stream, fn, arg);
	if ((rc = fg_backend_stream_sync(b, stream)))
		return rc;
	fn(arg);
	return 0;
}

/* ---- codecs ---------------------------------------------------------------- */

int fg_codec_open(struct fg_codec *c, struct fg_plugin_handle *ph)
{
	const struct fg_plugin *p = ph->plugin;
	const struct fg_codec_ops *o;

	memset(c, 0, sizeof(*c));
	if (!p || p->kind != FG_PLUGIN_CODEC || !p->ops) {
		FG_ERR("%s: not a codec plugin, name a codec (e.g. fp16)", ph->path);
		fg_plugin_close(ph);
		return -EINVAL;
	}
	o = p->ops; /* its required hooks were checked by the loader */
	c->ph = *ph;
	c->ops = o;
	return 0;
}

void fg_codec_close(struct fg_codec *c)
{
	if (!c->ops)
		return;
	fg_plugin_close(&c->ph);
	memset(c, 0, sizeof(*c));
}

uint64_t fg_codec_encoded_size(const struct fg_codec *c, const struct fg_codec_shape *s)
{
	return c->ops->encoded_size(s);
}

/* rows * cols as a size_t, or -EINVAL with an error line when it overflows. */
static int fg_codec_count(const struct fg_codec *c, const struct fg_codec_shape *s, size_t *n)
{
	if (s->rows && s->cols > SIZE_MAX / sizeof(float) / s->rows) {
		FG_ERR("%s: codec %s: tensor of %llu x %llu values is too large for this host",
		       c->ph.path, c->ph.plugin->name, (unsigned long long)s->rows,
		       (unsigned long long)s->cols);
		return -EINVAL;
	}
	*n = (size_t)(s->rows * s->cols);
	return 0;
}

static int fg_codec_failed(const struct fg_codec *c, const char *what,
			   const struct fg_codec_shape *s, int rc)
{
	/* Codec hooks have no host table: the core words the error. */
	FG_ERR("%s: codec %s: %s of a %llu x %llu tensor (group_dim %d) failed (error %d); "
	       "check the tensor shape", c->ph.path, c->ph.plugin->name, what,
	       (unsigned long long)s->rows, (unsigned long long)s->cols, s->group_dim, rc);
	return rc;
}

int fg_codec_encode_f32(const struct fg_codec *c, const struct fg_codec_shape *s,
			const float *src, void *dst)
{
	int rc = c->ops->encode_f32(s, src, dst);

	return rc < 0 ? fg_codec_failed(c, "encode_f32", s, rc) : 0;
}

int fg_codec_decode_f32(const struct fg_codec *c, const struct fg_codec_shape *s,
			const void *src, float *dst)
{
	int rc = c->ops->decode_f32(s, src, dst);

	return rc < 0 ? fg_codec_failed(c, "decode_f32", s, rc) : 0;
}

int fg_codec_encode_f16(const struct fg_codec *c, const struct fg_codec_shape *s,
			const uint16_t *src, void *dst)
{
	float *tmp;
	size_t n = 0;
	int rc;

	if (c->ops->encode_f16) {
		rc = c->ops->encode_f16(s, src, dst);
		return rc < 0 ? fg_codec_failed(c, "encode_f16", s, rc) : 0;
	}
	rc = fg_codec_count(c, s, &n);
	if (rc < 0)
		return rc;
	tmp = malloc(n ? n * sizeof(float) : 1);
	if (!tmp) {
		FG_ERR("%s: codec %s: out of memory widening %zu fp16 values", c->ph.path,
		       c->ph.plugin->name, n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		tmp[i] = fg_half_to_float(src[i]);
	rc = fg_codec_encode_f32(c, s, tmp, dst);
	free(tmp);
	return rc;
}

int fg_codec_decode_f16(const struct fg_codec *c, const struct fg_codec_shape *s,
			const void *src, uint16_t *dst)
{
	float *tmp;
	size_t n = 0;
	int rc;

	if (c->ops->decode_f16) {
		rc = c->ops->decode_f16(s, src, dst);
		return rc < 0 ? fg_codec_failed(c, "decode_f16", s, rc) : 0;
	}
	rc = fg_codec_count(c, s, &n);
	if (rc < 0)
		return rc;
	tmp = malloc(n ? n * sizeof(float) : 1);
	if (!tmp) {
		FG_ERR("%s: codec %s: out of memory decoding %zu values", c->ph.path,
		       c->ph.plugin->name, n);
		return -ENOMEM;
	}
	rc = fg_codec_decode_f32(c, s, src, tmp);
	if (rc == 0)
		for (size_t i = 0; i < n; i++)
			dst[i] = fg_float_to_half(tmp[i]);
	free(tmp);
	return rc;
}
