/* core/backend/compute_ops.c - the compute ops as the engine calls them: every
 * argument checked once here against the contract of fgcore/compute.h, then
 * the backend's hook.  Backends check only their own device limits.
 *
 * The checks cost a few comparisons per tensor and one pass over the host
 * index arrays (ids, positions, pads), which the backends made before; text
 * is formatted only when a check fails. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/logprob.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/util/error.h"

/* Sizes and element counts beyond this are refused: a product of a checked
 * count and an element size (at most 8 bytes) stays inside int64_t. */
#define FG_SIZE_MAX (INT64_MAX / 8)

/* Who is calling, for the error line: plugin, layer, what and op. */
struct fg_call {
	const struct fg_backend *b;
	int64_t layer;    /* -1: none */
	const char *what; /* NULL: none */
	const char *op;
};

const char *fg_dtype_name(enum fg_dtype t)
{
	switch (t) {
	case FG_DTYPE_F32:
		return "f32";
	case FG_DTYPE_F16:
		return "f16";
	case FG_DTYPE_I32:
		return "i32";
	case FG_DTYPE_Q4_ROWS:
		return "q4_rows";
	case FG_DTYPE_Q4_COLS:
		return "q4_cols";
	case FG_DTYPE_F8_ROWS:
		return "f8_rows";
	case FG_DTYPE_F8_COLS:
		return "f8_cols";
	}
	return "an unknown dtype";
}

const char *fg_op_name(enum fg_op op)
{
	switch (op) {
	case FG_OP_EMBED:
		return "embed";
	case FG_OP_EMBED_TOKENS:
		return "embed without a position table";
	case FG_OP_LAYER_NORM:
		return "layer norm";
	case FG_OP_RMS_NORM:
		return "RMS norm";
	case FG_OP_LINEAR:
		return "linear";
	case FG_OP_LINEAR_SILU:
		return "linear with SiLU";
	case FG_OP_LINEAR_MUL:
		return "linear with a gating multiplier (mul)";
	case FG_OP_ROPE:
		return "rope";
	case FG_OP_ATTENTION_PREFILL:
		return "prefill attention";
	case FG_OP_ATTENTION_DECODE:
		return "decode attention";
	case FG_OP_ATTENTION_GQA:
		return "grouped-query attention";
	case FG_OP_KV_APPEND:
		return "kv_append";
	case FG_OP_SAMPLE:
		return "sample";
	case FG_OP_LOGPROB:
		return "logprob";
	case FG_OP_ATTENTION_CACHED:
		return "prefill attention over the cache";
	case FG_OP_ATTENTION_RING:
		return "decode attention over a ring";
	case FG_OP_ADD:
		return "add";
	case FG_OP_ROUTE:
		return "route";
	case FG_OP_GATHER:
		return "gather";
	case FG_OP_SCATTER_ADD:
		return "scatter_add";
	case FG_OP_LINEAR_GROUPED:
		return "grouped linear";
	case FG_OP_LINEAR_GELU:
		return "linear with GELU (tanh form)";
	case FG_OP_NORM_SHIFT:
		return "RMS norm with a gamma shift";
	case FG_OP_ATTENTION_SOFTCAP:
		return "attention with soft-capped scores";
	case FG_OP_SOFTCAP:
		return "softcap";
	case FG_OP_EXPERTS:
		return "experts";
	}
	return "an unknown op";
}

int fg_op_minor(enum fg_op op)
{
	switch (op) {
	case FG_OP_EMBED:
	case FG_OP_LAYER_NORM:
	case FG_OP_LINEAR:
	case FG_OP_ATTENTION_PREFILL:
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_KV_APPEND:
		return 0;
	case FG_OP_SAMPLE:
		return 4;
	case FG_OP_LOGPROB:
		return 6;
	case FG_OP_ATTENTION_CACHED:
		return 8;
	case FG_OP_ATTENTION_RING:
		return 9;
	case FG_OP_ADD:
	case FG_OP_ROUTE:
	case FG_OP_GATHER:
	case FG_OP_SCATTER_ADD:
	case FG_OP_LINEAR_GROUPED:
		return 10;
	case FG_OP_LINEAR_GELU:
	case FG_OP_NORM_SHIFT:
	case FG_OP_ATTENTION_SOFTCAP:
	case FG_OP_SOFTCAP:
		return 12;
	case FG_OP_EXPERTS:
		return 13;
	default:
		return 1;
	}
}

static int fg_call_fail(const struct fg_call *c, int rc, const char *fmt, ...) FG_PRINTF(3, 4);

/* One line: "<plugin>: layer <l>: <what> (<op>): <msg>"; returns rc. */
static int fg_call_fail(const struct fg_call *c, int rc, const char *fmt, ...)
{
	char msg[512], where[48] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->layer >= 0)
		snprintf(where, sizeof(where), "layer %" PRId64 ": ", c->layer);
	if (c->what && *c->what)
		FG_ERR("%s: %s%s (%s): %s", c->b->ph.plugin->name, where, c->what, c->op, msg);
	else
		FG_ERR("%s: %s%s: %s", c->b->ph.plugin->name, where, c->op, msg);
	return rc;
}

/* ---- what the backend runs ------------------------------------------------------ */

/* The ops with an optional hook of their own: a yes from `supports` counts
 * only with the hook set, so that a run is refused before it starts rather
 * than failing at the op. */
static int fg_has_hook(const struct fg_backend *b, enum fg_op op)
{
	const struct fg_compute_ops *o = b->ops;

	switch (op) {
	case FG_OP_SAMPLE:
		return o->sample != NULL;
	case FG_OP_LOGPROB:
		return o->logprob != NULL;
	case FG_OP_ADD:
		return o->add != NULL;
	case FG_OP_ROUTE:
		return o->route != NULL;
	case FG_OP_GATHER:
		return o->gather != NULL;
	case FG_OP_SCATTER_ADD:
		return o->scatter_add != NULL;
	case FG_OP_LINEAR_GROUPED:
		return o->linear_grouped != NULL;
	case FG_OP_SOFTCAP:
		return o->softcap != NULL;
	case FG_OP_EXPERTS:
		return o->experts != NULL;
	default:
		return 1;
	}
}

int fg_backend_supports(const struct fg_backend *b, enum fg_op op, enum fg_dtype dtype)
{
	/* `supports` is a minor-1 member: never read from a 1.0 plugin's table;
	 * an op of a later minor is never asked of an older plugin. */
	if (b->minor < (uint32_t)fg_op_minor(op) || !fg_has_hook(b, op) ||
	    (dtype == FG_DTYPE_F8_ROWS && b->minor < 15) || (dtype == FG_DTYPE_F8_COLS && b->minor < 16))
		return 0;
	if (b->minor >= 1)
		return b->ops->supports(b->ctx, op, dtype) != 0;
	switch (op) {
	case FG_OP_EMBED:
		return dtype == FG_DTYPE_F16;
	case FG_OP_LAYER_NORM:
	case FG_OP_ATTENTION_PREFILL:
		return dtype == b->info.act_dtype;
	case FG_OP_LINEAR:
		return dtype == FG_DTYPE_F16 || (dtype == FG_DTYPE_Q4_ROWS && b->q4_native);
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_KV_APPEND:
		return dtype == b->info.act_dtype || (dtype == FG_DTYPE_Q4_COLS && b->q4_native);
	default:
		return 0; /* the ops and variants of minor 1 */
	}
}

int fg_backend_window_ring(const struct fg_backend *b, enum fg_dtype dtype)
{
	return b->minor >= 12 && fg_backend_supports(b, FG_OP_ATTENTION_RING, dtype);
}

static int fg_need(const struct fg_call *c, enum fg_op op, enum fg_dtype dtype)
{
	uint32_t v = c->b->ph.plugin->abi_version;

	if (fg_backend_supports(c->b, op, dtype))
		return 0;
	if (c->b->minor < (uint32_t)fg_op_minor(op))
		return fg_call_fail(c, -ENOTSUP, "%s needs a backend built for compute ABI 1.%d, "
				    "this plugin is built for %u.%u: use another backend",
				    fg_op_name(op), fg_op_minor(op), FG_ABI_MAJOR_OF(v),
				    FG_ABI_MINOR_OF(v));
	if (dtype == FG_DTYPE_F8_ROWS && c->b->minor < 15)
		return fg_call_fail(c, -ENOTSUP, "%s on f8_rows weights needs a backend built for "
				    "compute ABI 1.15, this plugin is built for %u.%u: use another "
				    "backend or codec", fg_op_name(op), FG_ABI_MAJOR_OF(v),
				    FG_ABI_MINOR_OF(v));
	return fg_call_fail(c, -ENOTSUP, "the backend does not run %s on %s operands (its "
			    "`supports` says no): use another backend, codec or policy",
			    fg_op_name(op), fg_dtype_name(dtype));
}

/* A feature of compute ABI 1.1: refused, with its name, for a 1.0 plugin. */
static int fg_need_11(const struct fg_call *c, const char *feature)
{
	uint32_t v = c->b->ph.plugin->abi_version;

	if (c->b->minor >= 1)
		return 0;
	return fg_call_fail(c, -ENOTSUP, "%s needs a backend built for compute ABI 1.1, this "
			    "plugin is built for %u.%u: rebuild it against this fgcore's headers "
			    "or use another backend", feature, FG_ABI_MAJOR_OF(v), FG_ABI_MINOR_OF(v));
}

/* The activations' dtype of decode attention and kv_append: the backend's, or
 * the other plain type when the backend runs the op on it (delegation). */
static enum fg_dtype fg_act_of(const struct fg_backend *b, enum fg_op op, enum fg_dtype t)
{
	if (t != b->info.act_dtype && (t == FG_DTYPE_F32 || t == FG_DTYPE_F16) &&
	    fg_backend_supports(b, op, t))
		return t;
	return b->info.act_dtype;
}

static int fg_act_known(enum fg_activation act)
{
	return act == FG_ACT_NONE || act == FG_ACT_RELU || act == FG_ACT_SILU ||
	       act == FG_ACT_GELU_TANH;
}

/* The op `supports` is asked for a linear with this activation. */
static enum fg_op fg_act_op(enum fg_activation act)
{
	return act == FG_ACT_SILU ? FG_OP_LINEAR_SILU :
	       act == FG_ACT_GELU_TANH ? FG_OP_LINEAR_GELU : FG_OP_LINEAR;
}

/* ---- tensor views --------------------------------------------------------------- */

/* The encoded types (4-bit, fp8): no row padding (codes, then their scales
 * or parameters), no element size, byte-aligned. */
static int fg_encoded(enum fg_dtype t)
{
	return t == FG_DTYPE_Q4_ROWS || t == FG_DTYPE_Q4_COLS || t == FG_DTYPE_F8_ROWS ||
	       t == FG_DTYPE_F8_COLS;
}

/* The type a KV cache is checked as: an encoded cache type it names, else
 * the activations' (whose check then names what it is). */
static enum fg_dtype fg_cache_type(enum fg_dtype t, enum fg_dtype act)
{
	return t == FG_DTYPE_Q4_COLS || t == FG_DTYPE_F8_COLS ? t : act;
}

/* The type a linear weight is checked as: an encoded weight type it names,
 * else f16 (whose check then names what it is). */
static enum fg_dtype fg_weight_type(enum fg_dtype t)
{
	return t == FG_DTYPE_Q4_ROWS || t == FG_DTYPE_F8_ROWS ? t : FG_DTYPE_F16;
}

/* dtype, shape (rows/cols < 0: any), ld, data and extent of one view. */
static int fg_check_tensor(const struct fg_call *c, const char *name, const struct fg_tensor *t,
			   enum fg_dtype dtype, int64_t rows, int64_t cols)
{
	if (t->dtype != dtype)
		return fg_call_fail(c, -EINVAL, "%s is %s, expected %s", name,
				    fg_dtype_name(t->dtype), fg_dtype_name(dtype));
	if (t->rows < 0 || t->cols < 0)
		return fg_call_fail(c, -EINVAL, "%s has a negative shape [%" PRId64 ", %" PRId64
				    "]", name, t->rows, t->cols);
	if ((rows >= 0 && t->rows != rows) || (cols >= 0 && t->cols != cols))
		return fg_call_fail(c, -EINVAL, "%s is [%" PRId64 ", %" PRId64 "], expected [%"
				    PRId64 ", %" PRId64 "]", name, t->rows, t->cols,
				    rows >= 0 ? rows : t->rows, cols >= 0 ? cols : t->cols);
	/* The encoded layouts have no row padding: their scales follow the data. */
	if (fg_encoded(dtype) && t->ld != t->cols)
		return fg_call_fail(c, -EINVAL, "%s is %s with ld %" PRId64 " != cols %" PRId64
				    ": an encoded view covers its whole encoded tensor", name,
				    fg_dtype_name(dtype), t->ld, t->cols);
	if (t->ld < t->cols)
		return fg_call_fail(c, -EINVAL, "%s has ld %" PRId64 " < cols %" PRId64
				    ": rows must not overlap", name, t->ld, t->cols);
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (!t->data)
		return fg_call_fail(c, -EINVAL, "%s [%" PRId64 ", %" PRId64 "] has a NULL data "
				    "pointer", name, t->rows, t->cols);
	/* (rows - 1) * ld + cols elements must be addressable. */
	if (fg_encoded(dtype) ? t->rows > FG_SIZE_MAX / t->cols :
			   t->rows - 1 > (FG_SIZE_MAX - t->cols) / t->ld)
		return fg_call_fail(c, -EINVAL, "%s [%" PRId64 ", %" PRId64 "] with ld %" PRId64
				    " is larger than the address space", name, t->rows, t->cols,
				    t->ld);
	if (!fg_encoded(dtype) && (uintptr_t)t->data % fg_dtype_size(dtype))
		return fg_call_fail(c, -EINVAL, "%s at %p is not aligned to its %u-byte elements",
				    name, t->data, fg_dtype_size(dtype));
	return 0;
}

/* Bytes a checked view spans (0 for an empty one). */
static uint64_t fg_extent(const struct fg_tensor *t)
{
	if (t->rows == 0 || t->cols == 0 || !t->data)
		return 0;
	if (t->dtype == FG_DTYPE_F8_ROWS)
		return fg_f8_bytes((uint64_t)t->rows, (uint64_t)t->cols);
	if (t->dtype == FG_DTYPE_F8_COLS)
		return fg_f8c_bytes((uint64_t)t->rows, (uint64_t)t->cols);
	if (fg_encoded(t->dtype))
		return fg_q4_bytes((uint64_t)t->rows, (uint64_t)t->cols,
				   t->dtype == FG_DTYPE_Q4_ROWS ? 0 : 1);
	return (uint64_t)((t->rows - 1) * t->ld + t->cols) * fg_dtype_size(t->dtype);
}

/* 1 when two checked views share a byte. */
static int fg_overlap(const struct fg_tensor *a, const struct fg_tensor *b)
{
	uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
	uint64_t an = fg_extent(a), bn = fg_extent(b);

	return an && bn && a0 < b0 + bn && b0 < a0 + an;
}

/* 1 when two checked views of one shape are the same memory and layout. */
static int fg_same(const struct fg_tensor *a, const struct fg_tensor *b)
{
	return a->data == b->data && a->ld == b->ld && a->dtype == b->dtype;
}

static int fg_no_args(const struct fg_call *c)
{
	return fg_call_fail(c, -EINVAL, "no arguments (NULL)");
}

/* ---- embed ---------------------------------------------------------------------- */

int fg_backend_embed(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		     const struct fg_embed_args *a)
{
	struct fg_call c = { b, layer, what, "embed" };
	int has_pos, rc;
	int64_t h;

	if (!a)
		return fg_no_args(&c);
	has_pos = a->pos.data != NULL;
	if (!has_pos && (rc = fg_need_11(&c, "embed without a position table")))
		return rc;
	if (a->n < 0 || a->n > FG_SIZE_MAX)
		return fg_call_fail(&c, -EINVAL, "n = %" PRId64 " is out of range", a->n);
	h = a->tok.cols;
	if ((rc = fg_check_tensor(&c, "tok", &a->tok, FG_DTYPE_F16, -1, -1)) ||
	    (has_pos && (rc = fg_check_tensor(&c, "pos", &a->pos, FG_DTYPE_F16, -1, h))) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, b->info.hidden_dtype, a->n, h)))
		return rc;
	if (a->n > 0 && (!a->ids || (has_pos && !a->positions)))
		return fg_call_fail(&c, -EINVAL, "%s is NULL for %" PRId64 " tokens",
				    a->ids ? "positions" : "ids", a->n);
	for (int64_t i = 0; i < a->n; i++) {
		if (a->ids[i] < 0 || a->ids[i] >= a->tok.rows)
			return fg_call_fail(&c, -EINVAL, "ids[%" PRId64 "] = %" PRId32 " is outside "
					    "the vocabulary [0, %" PRId64 ")", i, a->ids[i],
					    a->tok.rows);
		if (has_pos && (a->positions[i] < 0 || a->positions[i] >= a->pos.rows))
			return fg_call_fail(&c, -EINVAL, "positions[%" PRId64 "] = %" PRId32
					    " is outside the position table [0, %" PRId64 ")", i,
					    a->positions[i], a->pos.rows);
	}
	if (fg_overlap(&a->out, &a->tok) || (has_pos && fg_overlap(&a->out, &a->pos)))
		return fg_call_fail(&c, -EINVAL, "out overlaps the embedding tables");
	if ((rc = fg_need(&c, has_pos ? FG_OP_EMBED : FG_OP_EMBED_TOKENS, a->tok.dtype)))
		return rc;
	return b->ops->embed(b->ctx, stream, a);
}

/* ---- norm ----------------------------------------------------------------------- */

int fg_backend_norm(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_layer_norm_args *a)
{
	struct fg_call c = { b, layer, what, "layer_norm" };
	int rms, has_beta, rc;
	int64_t n, h;

	if (!a)
		return fg_no_args(&c);
	if (a->kind != FG_NORM_LAYER && a->kind != FG_NORM_RMS)
		return fg_call_fail(&c, -EINVAL, "unknown norm kind %d: use FG_NORM_LAYER or "
				    "FG_NORM_RMS", (int)a->kind);
	rms = a->kind == FG_NORM_RMS;
	if (rms)
		c.op = "rms_norm";
	has_beta = a->beta.data != NULL;
	if ((rms && (rc = fg_need_11(&c, "RMS norm"))) ||
	    (!rms && !has_beta && (rc = fg_need_11(&c, "layer norm without beta"))))
		return rc;
	if (rms && has_beta)
		return fg_call_fail(&c, -EINVAL, "an RMS norm has no beta: pass beta with data "
				    "NULL");
	n = a->x.rows;
	h = a->x.cols;
	/* x is the residual stream, or activations */
	if ((rc = fg_check_tensor(&c, "x", &a->x, a->x.dtype == b->info.hidden_dtype ?
				  b->info.hidden_dtype : b->info.act_dtype, -1, -1)) ||
	    (rc = fg_check_tensor(&c, "gamma", &a->gamma, FG_DTYPE_F16, 1, h)) ||
	    (has_beta && (rc = fg_check_tensor(&c, "beta", &a->beta, FG_DTYPE_F16, 1, h))) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, b->info.act_dtype, n, h)))
		return rc;
	if (!isfinite(a->eps) || a->eps < 0)
		return fg_call_fail(&c, -EINVAL, "eps = %g, expected a finite value >= 0",
				    (double)a->eps);
	/* (a plugin older than 1.12 never reads gamma_shift: fg_need refuses it) */
	if (!isfinite(a->gamma_shift))
		return fg_call_fail(&c, -EINVAL, "gamma_shift is not finite");
	if (fg_overlap(&a->out, &a->x) && (!fg_same(&a->out, &a->x) || a->x.dtype != a->out.dtype))
		return fg_call_fail(&c, -EINVAL, "out partly overlaps x: pass the same view for "
				    "both or separate buffers");
	if (fg_overlap(&a->out, &a->gamma) || (has_beta && fg_overlap(&a->out, &a->beta)))
		return fg_call_fail(&c, -EINVAL, "out overlaps gamma or beta");
	if ((rc = fg_need(&c, rms ? FG_OP_RMS_NORM : FG_OP_LAYER_NORM, a->x.dtype)) ||
	    (a->gamma_shift != 0 && (rc = fg_need(&c, FG_OP_NORM_SHIFT, a->x.dtype))))
		return rc;
	return b->ops->layer_norm(b->ctx, stream, a);
}

/* ---- linear --------------------------------------------------------------------- */

int fg_backend_linear(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		      const struct fg_linear_args *a)
{
	struct fg_call c = { b, layer, what, "linear" };
	/* a linear that adds a residual writes the residual stream */
	enum fg_dtype act = b->info.act_dtype, hid = b->info.hidden_dtype;
	int64_t m, k, n;
	int has_mul, rc;

	if (!a)
		return fg_no_args(&c);
	if (!fg_act_known(a->act))
		return fg_call_fail(&c, -EINVAL, "unknown activation %d: use FG_ACT_NONE, "
				    "FG_ACT_RELU, FG_ACT_SILU or FG_ACT_GELU_TANH", (int)a->act);
	has_mul = a->mul.data != NULL;
	if ((a->act == FG_ACT_SILU && (rc = fg_need_11(&c, "SiLU"))) ||
	    (has_mul && (rc = fg_need_11(&c, "a gating multiplier (mul)"))))
		return rc;
	m = a->x.rows;
	k = a->x.cols;
	n = a->w.rows;
	if ((rc = fg_check_tensor(&c, "x", &a->x, act, -1, -1)) ||
	    (rc = fg_check_tensor(&c, "w", &a->w, fg_weight_type(a->w.dtype), -1, k)) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, a->residual.data ? hid : act, m, n)) ||
	    (a->bias.data && (rc = fg_check_tensor(&c, "bias", &a->bias, FG_DTYPE_F16, 1, n))) ||
	    (a->residual.data &&
	     (rc = fg_check_tensor(&c, "residual", &a->residual, hid, m, n))) ||
	    (has_mul && (rc = fg_check_tensor(&c, "mul", &a->mul, act, m, n))))
		return rc;
	if (fg_overlap(&a->out, &a->x) || fg_overlap(&a->out, &a->w) ||
	    (a->bias.data && fg_overlap(&a->out, &a->bias)))
		return fg_call_fail(&c, -EINVAL, "out overlaps x, w or bias: write to a separate "
				    "buffer");
	if (a->residual.data && fg_overlap(&a->out, &a->residual) &&
	    !fg_same(&a->out, &a->residual))
		return fg_call_fail(&c, -EINVAL, "out partly overlaps residual: pass the same view "
				    "for both or separate buffers");
	if (has_mul && fg_overlap(&a->out, &a->mul))
		return fg_call_fail(&c, -EINVAL, "out overlaps mul: write to a separate buffer");
	if ((rc = fg_need(&c, fg_act_op(a->act), a->w.dtype)) ||
	    (has_mul && (rc = fg_need(&c, FG_OP_LINEAR_MUL, a->w.dtype))))
		return rc;
	return b->ops->linear(b->ctx, stream, a);
}

/* ---- rope ----------------------------------------------------------------------- */

int fg_backend_rope(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_rope_args *a)
{
	struct fg_call c = { b, layer, what, "rope" };
	int rc;

	if (!a)
		return fg_no_args(&c);
	if ((rc = fg_need_11(&c, "rope")))
		return rc;
	if (a->n < 0 || a->heads < 0 || a->head_dim < 0 || a->n > FG_SIZE_MAX ||
	    (a->heads && a->head_dim > FG_SIZE_MAX / a->heads))
		return fg_call_fail(&c, -EINVAL, "n %" PRId64 ", heads %" PRId64 ", head_dim %"
				    PRId64 ": need non-negative sizes", a->n, a->heads,
				    a->head_dim);
	if (a->rot_dim < 0 || a->rot_dim % 2 || a->rot_dim > a->head_dim)
		return fg_call_fail(&c, -EINVAL, "rot_dim = %" PRId64 ": need an even value in "
				    "[0, head_dim = %" PRId64 "]", a->rot_dim, a->head_dim);
	if ((rc = fg_check_tensor(&c, "x", &a->x, b->info.act_dtype, a->n,
				  a->heads * a->head_dim)))
		return rc;
	if (!isfinite(a->attn_factor))
		return fg_call_fail(&c, -EINVAL, "attn_factor is not finite");
	if (a->n > 0 && !a->positions)
		return fg_call_fail(&c, -EINVAL, "positions is NULL for %" PRId64 " rows", a->n);
	for (int64_t i = 0; i < a->n; i++)
		if (a->positions[i] < 0)
			return fg_call_fail(&c, -EINVAL, "positions[%" PRId64 "] = %" PRId32
					    " is negative", i, a->positions[i]);
	if (a->rot_dim > 0 && !a->inv_freq)
		return fg_call_fail(&c, -EINVAL, "inv_freq is NULL, pass rot_dim / 2 = %" PRId64
				    " frequencies", a->rot_dim / 2);
	for (int64_t i = 0; i < a->rot_dim / 2; i++)
		if (!isfinite(a->inv_freq[i]))
			return fg_call_fail(&c, -EINVAL, "inv_freq[%" PRId64 "] is not finite", i);
	if ((rc = fg_need(&c, FG_OP_ROPE, a->x.dtype)))
		return rc;
	return b->ops->rope(b->ctx, stream, a);
}

/* ---- attention ------------------------------------------------------------------ */

static int fg_attention_check(const struct fg_call *c, const struct fg_attention_args *a,
			      int decode)
{
	const struct fg_backend *b = c->b;
	int cached = !decode && a && a->start != 0;
	int ring = decode && a && a->ring != 0;
	/* minor 12: a windowed decode reads only the last `window` positions,
	 * so a ring of at least the window holds whatever len - pad is */
	int window_ring = ring && b->minor >= 12 && a->window > 0 && a->ring >= a->window;
	enum fg_op op = decode ? FG_OP_ATTENTION_DECODE
			       : cached ? FG_OP_ATTENTION_CACHED : FG_OP_ATTENTION_PREFILL;
	int64_t kvh, hcols, kvcols, qrows, kvrows, keys;
	enum fg_dtype act, cache;
	int gqa, rc;

	if (!a)
		return fg_no_args(c);
	if (a->batch < 0 || a->seq < 0 || a->heads < 0 || a->head_dim < 0 || a->kv_heads < 0 ||
	    a->batch > FG_SIZE_MAX || a->seq > FG_SIZE_MAX ||
	    (a->heads && a->head_dim > FG_SIZE_MAX / a->heads))
		return fg_call_fail(c, -EINVAL, "batch %" PRId64 ", seq %" PRId64 ", heads %" PRId64
				    ", kv_heads %" PRId64 ", head_dim %" PRId64 ": need "
				    "non-negative sizes", a->batch, a->seq, a->heads, a->kv_heads,
				    a->head_dim);
	if (a->window < 0)
		return fg_call_fail(c, -EINVAL, "window %" PRId64 ": need 0 (none) or a positive "
				    "sliding window", a->window);
	if (a->window && b->minor < 11) {
		uint32_t v = b->ph.plugin->abi_version;
		return fg_call_fail(c, -ENOTSUP, "sliding-window attention needs a backend built for "
				    "compute ABI 1.11, this plugin is built for %u.%u: use another "
				    "backend", FG_ABI_MAJOR_OF(v), FG_ABI_MINOR_OF(v));
	}
	kvh = a->kv_heads ? a->kv_heads : a->heads;
	gqa = kvh != a->heads;
	if (gqa && (rc = fg_need_11(c, "grouped-query attention (kv_heads != heads)")))
		return rc;
	if (kvh > a->heads || (kvh && a->heads % kvh))
		return fg_call_fail(c, -EINVAL, "kv_heads %" PRId64 " does not divide heads %"
				    PRId64, a->kv_heads, a->heads);
	hcols = a->heads * a->head_dim;
	kvcols = kvh * a->head_dim;
	if (ring && (a->ring != a->cache_stride || a->len < 1 || a->len > INT32_MAX))
		return fg_call_fail(c, -EINVAL, "ring %" PRId64 ", cache_stride %" PRId64
				    ", len %" PRId64 ": need ring == cache_stride and 1 <= len "
				    "<= 2^31 - 1", a->ring, a->cache_stride, a->len);
	if (decode) {
		if (a->seq != 1 || a->len < 1 || (!ring && a->cache_stride < a->len) ||
		    (a->batch && a->cache_stride > FG_SIZE_MAX / a->batch))
			return fg_call_fail(c, -EINVAL, "seq %" PRId64 ", len %" PRId64
					    ", cache_stride %" PRId64 ": need seq == 1 and 1 <= len "
					    "<= cache_stride", a->seq, a->len, a->cache_stride);
		qrows = a->batch;
		kvrows = a->batch * a->cache_stride;
		keys = a->len;
		act = fg_act_of(b, op, a->q.dtype);
	} else {
		if (a->batch && a->seq > FG_SIZE_MAX / a->batch)
			return fg_call_fail(c, -EINVAL, "batch %" PRId64 " * seq %" PRId64
					    " overflows", a->batch, a->seq);
		qrows = kvrows = a->batch * a->seq;
		keys = a->seq;
		act = b->info.act_dtype;
		if (cached) {
			if (a->start < 0 || a->start > FG_SIZE_MAX - a->seq ||
			    a->cache_stride < a->start + a->seq ||
			    (a->batch && a->cache_stride > FG_SIZE_MAX / a->batch))
				return fg_call_fail(c, -EINVAL, "start %" PRId64 ", seq %" PRId64
						    ", cache_stride %" PRId64 ": need 0 <= start "
						    "and start + seq <= cache_stride", a->start,
						    a->seq, a->cache_stride);
			kvrows = a->batch * a->cache_stride;
			keys = a->start + a->seq;
		}
	}
	cache = decode ? fg_cache_type(a->k.dtype, act) : act;
	if ((rc = fg_check_tensor(c, "q", &a->q, act, qrows, hcols)) ||
	    (rc = fg_check_tensor(c, "out", &a->out, act, qrows, hcols)) ||
	    (rc = fg_check_tensor(c, "k", &a->k, cache, -1, kvcols)) ||
	    (rc = fg_check_tensor(c, "v", &a->v, cache, -1, kvcols)))
		return rc;
	if (a->k.rows < kvrows || a->v.rows < kvrows)
		return fg_call_fail(c, -EINVAL, "k has %" PRId64 " and v %" PRId64 " rows, need %"
				    PRId64 " (batch * %s)", a->k.rows, a->v.rows, kvrows,
				    decode || cached ? "cache_stride" : "seq");
	if (!isfinite(a->scale))
		return fg_call_fail(c, -EINVAL, "scale is not finite");
	if (!isfinite(a->softcap) || a->softcap < 0)
		return fg_call_fail(c, -EINVAL, "softcap = %g: need 0 (none) or a finite cap above 0",
				    (double)a->softcap);
	if (qrows > 0 && hcols > 0) {
		if (!a->pad)
			return fg_call_fail(c, -EINVAL, "pad is NULL: pass the left-pad count of "
					    "each of the %" PRId64 " rows", a->batch);
		for (int64_t i = 0; i < a->batch; i++) {
			if (a->pad[i] < 0 || a->pad[i] > keys)
				return fg_call_fail(c, -EINVAL, "pad[%" PRId64 "] = %" PRId32
						    " is outside [0, %" PRId64 "]", i, a->pad[i],
						    keys);
			/* a ring holds a row's last `ring` positions only; a window
			 * no longer than it reads no others (minor 12) */
			if (ring && keys - a->pad[i] > a->ring && !window_ring)
				return fg_call_fail(c, -EINVAL, "pad[%" PRId64 "] = %" PRId32
						    ": %" PRId64 " positions do not fit the ring of %"
						    PRId64, i, a->pad[i], keys - a->pad[i], a->ring);
		}
	}
	if ((fg_overlap(&a->out, &a->q) && !fg_same(&a->out, &a->q)) ||
	    fg_overlap(&a->out, &a->k) || fg_overlap(&a->out, &a->v))
		return fg_call_fail(c, -EINVAL, "out overlaps k or v (or part of q): use a "
				    "separate buffer");
	if ((rc = fg_need(c, op, cache)) || (gqa && (rc = fg_need(c, FG_OP_ATTENTION_GQA, cache))) ||
	    (ring && (rc = fg_need(c, FG_OP_ATTENTION_RING, cache))) ||
	    (a->softcap > 0 && (rc = fg_need(c, FG_OP_ATTENTION_SOFTCAP, cache))))
		return rc;
	return 0;
}

int fg_backend_attention_prefill(struct fg_backend *b, void *stream, int64_t layer,
				 const char *what, const struct fg_attention_args *a)
{
	struct fg_call c = { b, layer, what, "attention_prefill" };
	int rc = fg_attention_check(&c, a, 0);

	return rc ? rc : b->ops->attention_prefill(b->ctx, stream, a);
}

int fg_backend_attention_decode(struct fg_backend *b, void *stream, int64_t layer,
				const char *what, const struct fg_attention_args *a)
{
	struct fg_call c = { b, layer, what, "attention_decode" };
	int rc = fg_attention_check(&c, a, 1);

	return rc ? rc : b->ops->attention_decode(b->ctx, stream, a);
}

/* ---- KV append ------------------------------------------------------------------ */

int fg_backend_kv_append(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			 const struct fg_kv_append_args *a)
{
	struct fg_call c = { b, layer, what, "kv_append" };
	enum fg_dtype act;
	int64_t h;
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (a->batch < 0 || a->n < 0 || a->start < 0 || a->cache_stride < 0 ||
	    a->start > a->cache_stride || a->n > a->cache_stride - a->start)
		return fg_call_fail(&c, -EINVAL, "batch %" PRId64 ", n %" PRId64 ", start %" PRId64
				    ", cache_stride %" PRId64 ": need 0 <= start and start + n <= "
				    "cache_stride", a->batch, a->n, a->start, a->cache_stride);
	if (a->cache_stride && a->batch > FG_SIZE_MAX / a->cache_stride)
		return fg_call_fail(&c, -EINVAL, "batch %" PRId64 " * cache_stride %" PRId64
				    " overflows", a->batch, a->cache_stride);
	act = fg_act_of(b, FG_OP_KV_APPEND, a->src.dtype);
	h = a->src.cols;
	if ((rc = fg_check_tensor(&c, "src", &a->src, act, a->batch * a->n, -1)) ||
	    (rc = fg_check_tensor(&c, "cache", &a->cache, fg_cache_type(a->cache.dtype, act), -1,
				  h)))
		return rc;
	if (a->cache.rows < a->batch * a->cache_stride)
		return fg_call_fail(&c, -EINVAL, "cache has %" PRId64 " rows, fewer than batch * "
				    "cache_stride = %" PRId64, a->cache.rows,
				    a->batch * a->cache_stride);
	if (fg_overlap(&a->src, &a->cache))
		return fg_call_fail(&c, -EINVAL, "src overlaps the cache: append from a separate "
				    "buffer");
	if ((rc = fg_need(&c, FG_OP_KV_APPEND, a->cache.dtype)))
		return rc;
	return b->ops->kv_append(b->ctx, stream, a);
}

/* ---- argmax, sample, logprob: rows of logits ----------------------------------- */

/* Logits in the activation type, each row with at least one column. */
static int check_logits(const struct fg_call *c, const char *name, const struct fg_tensor *t)
{
	int rc = fg_check_tensor(c, name, t, c->b->info.act_dtype, -1, -1);

	if (!rc && t->rows > 0 && t->cols == 0)
		return fg_call_fail(c, -EINVAL, "%s has %" PRId64 " rows of no columns", name,
				    t->rows);
	return rc;
}

/* ---- argmax --------------------------------------------------------------------- */

int fg_backend_argmax(struct fg_backend *b, void *stream, const struct fg_tensor *x, int32_t *out)
{
	struct fg_call c = { b, -1, NULL, "argmax" };
	int rc;

	if (!b->ops->argmax)
		return -ENOTSUP; /* the caller copies the logits out instead */
	if (!x || !out)
		return fg_call_fail(&c, -EINVAL, "x or out is NULL");
	if ((rc = check_logits(&c, "x", x)))
		return rc;
	return b->ops->argmax(b->ctx, stream, x, out);
}

/* ---- sample --------------------------------------------------------------------- */

int fg_backend_can_sample(const struct fg_backend *b)
{
	/* sample is a minor-4 member: a 1.3 plugin's table ends before it. */
	return b->minor >= 4 && b->ops->sample &&
	       fg_backend_supports(b, FG_OP_SAMPLE, b->info.act_dtype);
}

int fg_backend_sample(struct fg_backend *b, void *stream, const struct fg_sample_args *a)
{
	struct fg_call c = { b, -1, NULL, "sample" };
	int rc;

	if (!fg_backend_can_sample(b))
		return -ENOTSUP; /* the caller samples host copies of the logits */
	if (!a || !a->temperature || !a->top_k || !a->top_p || !a->draw || !a->out)
		return fg_call_fail(&c, -EINVAL, "a per-row array is NULL");
	if ((rc = check_logits(&c, "logits", &a->logits)))
		return rc;
	for (int64_t r = 0; r < a->logits.rows; r++)
		if (a->draw[r] >> 53 || a->top_k[r] < 0 || !(a->temperature[r] == a->temperature[r]))
			return fg_call_fail(&c, -EINVAL, "row %" PRId64 ": draw of more than 53 bits, "
					    "negative top_k or NaN temperature", r);
	return b->ops->sample(b->ctx, stream, a);
}

/* ---- logprob -------------------------------------------------------------------- */

int fg_backend_can_logprob(const struct fg_backend *b)
{
	/* logprob is a minor-6 member: a 1.5 plugin's table ends before it. */
	return b->minor >= 6 && b->ops->logprob &&
	       fg_backend_supports(b, FG_OP_LOGPROB, b->info.act_dtype);
}

int fg_backend_logprob(struct fg_backend *b, void *stream, const struct fg_logprob_args *a)
{
	struct fg_call c = { b, -1, NULL, "logprob" };
	int rc;

	if (!fg_backend_can_logprob(b))
		return -ENOTSUP; /* the caller computes from host copies of the logits */
	if (!a || !a->target || !a->lp)
		return fg_call_fail(&c, -EINVAL, "target or lp is NULL");
	if (a->k < 0 || a->k > FG_LOGPROB_TOP_MAX || (a->k && (!a->top_id || !a->top_lp)))
		return fg_call_fail(&c, -EINVAL, "k is %d: it must lie in [0, %d], with top_id and "
				    "top_lp when above 0", (int)a->k, FG_LOGPROB_TOP_MAX);
	if ((rc = check_logits(&c, "logits", &a->logits)))
		return rc;
	for (int64_t r = 0; r < a->logits.rows; r++)
		if (a->target[r] >= a->logits.cols)
			return fg_call_fail(&c, -EINVAL, "row %" PRId64 ": target %d is not below "
					    "the vocabulary's %" PRId64, r, (int)a->target[r],
					    a->logits.cols);
	return b->ops->logprob(b->ctx, stream, a);
}

/* ---- the generic tier (minor 10) ------------------------------------------------- */

/* A generic op: a minor-10 hook the plugin has, and `supports` saying yes. */
static int fg_need_generic(const struct fg_call *c, int has_hook, enum fg_op op,
			   enum fg_dtype dtype)
{
	uint32_t v = c->b->ph.plugin->abi_version;

	if (c->b->minor < 10 || !has_hook)
		return fg_call_fail(c, -ENOTSUP, "the backend has no %s (compute ABI 1.10's generic "
				    "ops; this plugin is built for %u.%u): use another backend",
				    fg_op_name(op), FG_ABI_MAJOR_OF(v), FG_ABI_MINOR_OF(v));
	return fg_need(c, op, dtype);
}

static int fg_plain(enum fg_dtype t)
{
	return t == FG_DTYPE_F32 || t == FG_DTYPE_F16;
}

/* Host indices: n entries, each in [0, limit). */
static int fg_check_index(const struct fg_call *c, const int32_t *index, int64_t n, int64_t limit,
			  const char *of)
{
	if (n < 0 || n > FG_SIZE_MAX)
		return fg_call_fail(c, -EINVAL, "n = %" PRId64 ": need a non-negative count", n);
	if (n && !index)
		return fg_call_fail(c, -EINVAL, "index is NULL");
	for (int64_t i = 0; i < n; i++)
		if (index[i] < 0 || index[i] >= limit)
			return fg_call_fail(c, -EINVAL, "index[%" PRId64 "] = %d: not a row of %s "
					    "(%" PRId64 " rows)", i, (int)index[i], of, limit);
	return 0;
}

int fg_backend_add(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		   const struct fg_add_args *a)
{
	struct fg_call c = { b, layer, what, "add" };
	int has_y, rc;

	if (!a)
		return fg_no_args(&c);
	if (!fg_plain(a->x.dtype))
		return fg_call_fail(&c, -EINVAL, "x is %s: add takes f32 or f16",
				    fg_dtype_name(a->x.dtype));
	has_y = a->y.data != NULL;
	/* minor 12: y may be the activations' type where x and out are the
	 * residual stream's (a block's output added into the stream) */
	enum fg_dtype ty = has_y && b->minor >= 12 && a->x.dtype == b->info.hidden_dtype &&
			   a->y.dtype == b->info.act_dtype ? b->info.act_dtype : a->x.dtype;
	if ((rc = fg_check_tensor(&c, "x", &a->x, a->x.dtype, -1, -1)) ||
	    (has_y && (rc = fg_check_tensor(&c, "y", &a->y, ty, a->x.rows, a->x.cols))) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, a->x.dtype, a->x.rows, a->x.cols)))
		return rc;
	if ((fg_overlap(&a->out, &a->x) && !fg_same(&a->out, &a->x)) ||
	    (has_y && fg_overlap(&a->out, &a->y) && !fg_same(&a->out, &a->y)))
		return fg_call_fail(&c, -EINVAL, "out partly overlaps x or y: pass the same view "
				    "or separate buffers");
	if ((rc = fg_need_generic(&c, b->minor >= 10 && b->ops->add, FG_OP_ADD, a->x.dtype)))
		return rc;
	return b->ops->add(b->ctx, stream, a);
}

int fg_backend_route(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		     const struct fg_route_args *a)
{
	struct fg_call c = { b, layer, what, "route" };
	int rc;

	if (!a)
		return fg_no_args(&c);
	if ((rc = check_logits(&c, "logits", &a->logits)))
		return rc;
	if (a->k < 1 || a->k > a->logits.cols || a->k > FG_ROUTE_TOP_MAX)
		return fg_call_fail(&c, -EINVAL, "k = %d: it must lie in [1, min(experts = %" PRId64
				    ", %d)]", (int)a->k, a->logits.cols, FG_ROUTE_TOP_MAX);
	if (a->logits.rows && (!a->ids || !a->weights))
		return fg_call_fail(&c, -EINVAL, "ids or weights is NULL");
	if ((rc = fg_need_generic(&c, b->minor >= 10 && b->ops->route, FG_OP_ROUTE,
				  a->logits.dtype)))
		return rc;
	return b->ops->route(b->ctx, stream, a);
}

int fg_backend_gather(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		      const struct fg_gather_args *a)
{
	struct fg_call c = { b, layer, what, "gather" };
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (!fg_plain(a->x.dtype))
		return fg_call_fail(&c, -EINVAL, "x is %s: gather takes f32 or f16",
				    fg_dtype_name(a->x.dtype));
	if ((rc = fg_check_tensor(&c, "x", &a->x, a->x.dtype, -1, -1)) ||
	    (rc = fg_check_index(&c, a->index, a->n, a->x.rows, "x")) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, a->x.dtype, a->n, a->x.cols)))
		return rc;
	if (fg_overlap(&a->out, &a->x))
		return fg_call_fail(&c, -EINVAL, "out overlaps x: write to a separate buffer");
	if ((rc = fg_need_generic(&c, b->minor >= 10 && b->ops->gather, FG_OP_GATHER, a->x.dtype)))
		return rc;
	return b->ops->gather(b->ctx, stream, a);
}

int fg_backend_scatter_add(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			   const struct fg_scatter_add_args *a)
{
	struct fg_call c = { b, layer, what, "scatter_add" };
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (!fg_plain(a->y.dtype))
		return fg_call_fail(&c, -EINVAL, "y is %s: scatter_add takes f32 or f16",
				    fg_dtype_name(a->y.dtype));
	/* minor 12: out may be the residual stream (its type) where y holds activations */
	enum fg_dtype to = b->minor >= 12 && a->y.dtype == b->info.act_dtype &&
			   a->out.dtype == b->info.hidden_dtype ? b->info.hidden_dtype : a->y.dtype;
	if ((rc = fg_check_tensor(&c, "y", &a->y, a->y.dtype, a->n, -1)) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, to, -1, a->y.cols)) ||
	    (rc = fg_check_index(&c, a->index, a->n, a->out.rows, "out")))
		return rc;
	for (int64_t i = 0; a->weight && i < a->n; i++)
		if (!isfinite(a->weight[i]))
			return fg_call_fail(&c, -EINVAL, "weight[%" PRId64 "] is not a finite number",
					    i);
	if (fg_overlap(&a->out, &a->y))
		return fg_call_fail(&c, -EINVAL, "out overlaps y: write to a separate buffer");
	if ((rc = fg_need_generic(&c, b->minor >= 10 && b->ops->scatter_add, FG_OP_SCATTER_ADD,
				  a->y.dtype)))
		return rc;
	return b->ops->scatter_add(b->ctx, stream, a);
}

int fg_backend_linear_grouped(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			      const struct fg_linear_grouped_args *a)
{
	struct fg_call c = { b, layer, what, "grouped linear" };
	enum fg_dtype act = b->info.act_dtype, wt;
	int64_t m, k, n;
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (a->groups < 1 || !a->w || !a->offset)
		return fg_call_fail(&c, -EINVAL, "groups = %d, w or offset NULL: need at least one "
				    "group, its weights and offsets", (int)a->groups);
	if (!fg_act_known(a->act))
		return fg_call_fail(&c, -EINVAL, "unknown activation %d: use FG_ACT_NONE, "
				    "FG_ACT_RELU, FG_ACT_SILU or FG_ACT_GELU_TANH", (int)a->act);
	m = a->x.rows;
	k = a->x.cols;
	n = a->w[0].rows;
	wt = fg_weight_type(a->w[0].dtype);
	if ((rc = fg_check_tensor(&c, "x", &a->x, act, -1, -1)) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, act, m, n)) ||
	    (a->mul.data && (rc = fg_check_tensor(&c, "mul", &a->mul, act, m, n))))
		return rc;
	if (a->offset[0] != 0 || a->offset[a->groups] != m)
		return fg_call_fail(&c, -EINVAL, "offset runs from %" PRId64 " to %" PRId64
				    ": it must run from 0 to x's %" PRId64 " rows", a->offset[0],
				    a->offset[a->groups], m);
	for (int32_t g = 0; g < a->groups; g++) {
		char name[48];
		if (a->offset[g + 1] < a->offset[g])
			return fg_call_fail(&c, -EINVAL, "offset[%d] = %" PRId64 " is below offset[%d] "
					    "= %" PRId64 ": groups must not overlap", (int)g + 1,
					    a->offset[g + 1], (int)g, a->offset[g]);
		snprintf(name, sizeof(name), "w[%d]", (int)g);
		if ((rc = fg_check_tensor(&c, name, &a->w[g], wt, n, k)))
			return rc;
		if (fg_overlap(&a->out, &a->w[g]))
			return fg_call_fail(&c, -EINVAL, "out overlaps %s: write to a separate buffer",
					    name);
		if (a->bias && a->bias[g].data) {
			snprintf(name, sizeof(name), "bias[%d]", (int)g);
			if ((rc = fg_check_tensor(&c, name, &a->bias[g], FG_DTYPE_F16, 1, n)))
				return rc;
		}
	}
	if (fg_overlap(&a->out, &a->x) || (a->mul.data && fg_overlap(&a->out, &a->mul)))
		return fg_call_fail(&c, -EINVAL, "out overlaps x or mul: write to a separate buffer");
	if ((rc = fg_need_generic(&c, b->minor >= 10 && b->ops->linear_grouped,
				  FG_OP_LINEAR_GROUPED, wt)) ||
	    (a->act == FG_ACT_GELU_TANH && (rc = fg_need(&c, FG_OP_LINEAR_GELU, wt))))
		return rc;
	return b->ops->linear_grouped(b->ctx, stream, a);
}

/* ---- softcap (minor 12) ---------------------------------------------------------- */

int fg_backend_softcap(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		       const struct fg_softcap_args *a)
{
	struct fg_call c = { b, layer, what, "softcap" };
	uint32_t v = b->ph.plugin->abi_version;
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (!fg_plain(a->x.dtype))
		return fg_call_fail(&c, -EINVAL, "x is %s: softcap takes f32 or f16",
				    fg_dtype_name(a->x.dtype));
	if (!isfinite(a->cap) || !(a->cap > 0))
		return fg_call_fail(&c, -EINVAL, "cap = %g: need a finite cap above 0",
				    (double)a->cap);
	if ((rc = fg_check_tensor(&c, "x", &a->x, a->x.dtype, -1, -1)) ||
	    (rc = fg_check_tensor(&c, "out", &a->out, a->x.dtype, a->x.rows, a->x.cols)))
		return rc;
	if (fg_overlap(&a->out, &a->x) && !fg_same(&a->out, &a->x))
		return fg_call_fail(&c, -EINVAL, "out partly overlaps x: pass the same view or "
				    "separate buffers");
	if (b->minor < 12 || !b->ops->softcap)
		return fg_call_fail(&c, -ENOTSUP, "the backend has no softcap (compute ABI 1.12; "
				    "this plugin is built for %u.%u): use another backend",
				    FG_ABI_MAJOR_OF(v), FG_ABI_MINOR_OF(v));
	if ((rc = fg_need(&c, FG_OP_SOFTCAP, a->x.dtype)))
		return rc;
	return b->ops->softcap(b->ctx, stream, a);
}

/* ---- experts (minor 13) ---------------------------------------------------------- */

static int check_expert_weights(const struct fg_call *c, const char *name,
				const struct fg_tensor *w, int32_t experts, enum fg_dtype wt,
				int64_t rows, int64_t cols)
{
	char what[48];
	int rc;

	if (!w)
		return fg_call_fail(c, -EINVAL, "%s is NULL", name);
	for (int32_t e = 0; e < experts; e++) {
		snprintf(what, sizeof(what), "%s[%d]", name, (int)e);
		if ((rc = fg_check_tensor(c, what, &w[e], wt, rows, cols)))
			return rc;
	}
	return 0;
}

int fg_backend_experts(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		       const struct fg_experts_args *a)
{
	struct fg_call c = { b, layer, what, "experts" };
	enum fg_dtype act = b->info.act_dtype, wt;
	int64_t rows, hidden, ffn, m;
	int rc;

	if (!a)
		return fg_no_args(&c);
	if (b->minor < 13 || !b->ops->experts)
		return -ENOTSUP; /* the caller composes the generic ops */
	if (a->experts < 1 || !a->w_gate || !a->w_up || !a->w_down)
		return fg_call_fail(&c, -EINVAL, "experts = %d, or a weights array NULL: need at "
				    "least one expert and its gate, up and down", (int)a->experts);
	rows = a->x.rows;
	hidden = a->x.cols;
	ffn = a->w_gate[0].rows;
	m = rows * a->k;
	wt = fg_weight_type(a->w_gate[0].dtype);
	if ((rc = fg_check_tensor(&c, "x", &a->x, act, -1, -1)) ||
	    (rc = check_logits(&c, "logits", &a->logits)))
		return rc;
	if (a->logits.rows != rows || a->logits.cols != a->experts)
		return fg_call_fail(&c, -EINVAL, "logits are [%" PRId64 ", %" PRId64 "], expected [%"
				    PRId64 ", %d]", a->logits.rows, a->logits.cols, rows,
				    (int)a->experts);
	if (a->k < 1 || a->k > a->experts || a->k > FG_ROUTE_TOP_MAX)
		return fg_call_fail(&c, -EINVAL, "k = %d: it must lie in [1, min(experts = %d, %d)]",
				    (int)a->k, (int)a->experts, FG_ROUTE_TOP_MAX);
	if ((rc = check_expert_weights(&c, "w_gate", a->w_gate, a->experts, wt, ffn, hidden)) ||
	    (rc = check_expert_weights(&c, "w_up", a->w_up, a->experts, wt, ffn, hidden)) ||
	    (rc = check_expert_weights(&c, "w_down", a->w_down, a->experts, wt, hidden, ffn)) ||
	    (rc = fg_check_tensor(&c, "xg", &a->xg, act, -1, hidden)) ||
	    (rc = fg_check_tensor(&c, "gate", &a->gate, act, -1, ffn)) ||
	    (rc = fg_check_tensor(&c, "up", &a->up, act, -1, ffn)))
		return rc;
	if (a->xg.rows < m || a->gate.rows < m || a->up.rows < m)
		return fg_call_fail(&c, -EINVAL, "workspaces of %" PRId64 ", %" PRId64 " and %" PRId64
				    " rows: xg, gate and up need rows * k = %" PRId64, a->xg.rows,
				    a->gate.rows, a->up.rows, m);
	enum fg_dtype to = a->out.dtype == b->info.hidden_dtype ? b->info.hidden_dtype : act;
	if ((rc = fg_check_tensor(&c, "out", &a->out, to, rows, hidden)))
		return rc;
	if (fg_overlap(&a->xg, &a->gate) || fg_overlap(&a->xg, &a->up) ||
	    fg_overlap(&a->gate, &a->up) || fg_overlap(&a->out, &a->xg) ||
	    fg_overlap(&a->out, &a->gate) || fg_overlap(&a->out, &a->up) ||
	    fg_overlap(&a->x, &a->xg) || fg_overlap(&a->x, &a->out))
		return fg_call_fail(&c, -EINVAL, "x, out and the workspaces xg, gate, up must be "
				    "separate buffers");
	if (!fg_backend_supports(b, FG_OP_EXPERTS, wt))
		return -ENOTSUP;
	if (rows == 0)
		return 0;
	return b->ops->experts(b->ctx, stream, a);
}
