/* core/backend/backend.h - an opened compute backend and an opened codec, with
 * the core's defaults for their optional hooks. */
#ifndef FG_BACKEND_BACKEND_H
#define FG_BACKEND_BACKEND_H

#include <fgcore/codec.h>
#include <fgcore/compute.h>
#include "core/plugin/loader.h"

struct fg_backend {
	struct fg_plugin_handle ph;
	const struct fg_compute_ops *ops;
	void *opts; /* owned */
	void *ctx;
	struct fg_compute_info info;
	/* the plugin's compute ABI minor (compute's own counter, fgcore/compute.h):
	 * members of minor 1 are read only when >= 1 */
	uint32_t minor;
	int q4_native;  /* ABI 1.0 only: native_codecs lists int4_group64 */
};

/* Takes ownership of *ph and opts. */
int fg_backend_open(struct fg_backend *b, struct fg_plugin_handle *ph, void *opts);
void fg_backend_close(struct fg_backend *b);

/* Streams and events: the plugin's, or synchronous no-ops when it has none. */
int fg_backend_stream_create(struct fg_backend *b, void **stream);
void fg_backend_stream_destroy(struct fg_backend *b, void *stream);
int fg_backend_stream_sync(struct fg_backend *b, void *stream);
int fg_backend_event_create(struct fg_backend *b, void **event);
void fg_backend_event_destroy(struct fg_backend *b, void *event);
int fg_backend_event_record(struct fg_backend *b, void *event, void *stream);
int fg_backend_stream_wait(struct fg_backend *b, void *stream, void *event);
int fg_backend_event_sync(struct fg_backend *b, void *event);
/* Graphs (minor 5, fgcore/compute.h): has_graphs says whether the plugin
 * has the hooks; graph_begin is -ENOTSUP without them or when the plugin
 * declines (no error line then). */
int fg_backend_has_graphs(const struct fg_backend *b);
int fg_backend_graph_begin(struct fg_backend *b, void *stream, int piece);
int fg_backend_graph_end(struct fg_backend *b, void *stream, int launch);
/* Timers (compute ABI 1.2): -ENOTSUP when the plugin has none. */
int fg_backend_timer_create(struct fg_backend *b, void **timer);
void fg_backend_timer_destroy(struct fg_backend *b, void *timer);
int fg_backend_timer_record(struct fg_backend *b, void *timer, void *stream);
int fg_backend_timer_elapsed(struct fg_backend *b, void *start, void *end, double *seconds);
/* The plugin's copy on the stream, or memmove at once. */
int fg_backend_copy(struct fg_backend *b, void *stream, void *dst, const void *src, size_t len);
/* A copy of a few bytes that the stream's next op waits for (the host's
 * attention output, an activation reload): a minor-13 backend's copy_small,
 * which need not queue behind other streams' bulk transfers; else copy. */
int fg_backend_copy_small(struct fg_backend *b, void *stream, void *dst, const void *src,
			  size_t len);
/* fn(arg) on the host in the stream's order (a minor-14 backend's
 * host_call: queued, the caller goes on); else the stream synced, then
 * fn(arg) at once.  fn calls nothing of the backend. */
int fg_backend_has_host_call(const struct fg_backend *b);
int fg_backend_host_call(struct fg_backend *b, void *stream, void (*fn)(void *arg), void *arg);

/* Whether the backend runs `op` over operands of `dtype` (enum fg_op says
 * which operand): a 1.1 plugin's `supports`, or for a 1.0 plugin the 1.0 op
 * set with the codecs its native_codecs names. */
int fg_backend_supports(const struct fg_backend *b, enum fg_op op, enum fg_dtype dtype);
/* Does decode attention over a `dtype` cache run on a ring as short as a
 * sliding window, whatever the row's length (compute ABI 1.12 with
 * FG_OP_ATTENTION_RING)? */
int fg_backend_window_ring(const struct fg_backend *b, enum fg_dtype dtype);

/* Names for messages: "f16", "q4_cols", ...; "RMS norm", "linear with SiLU", ... */
const char *fg_dtype_name(enum fg_dtype t);
const char *fg_op_name(enum fg_op op);
/* The compute ABI minor that brought `op` (0 for the 1.0 ops): an op is
 * never asked of an older plugin, and a refusal names the minor needed. */
int fg_op_minor(enum fg_op op);

/* The compute ops, validated once here against fgcore/compute.h: dtypes,
 * shapes, strides, aliasing, index ranges, that the plugin's ABI has the
 * feature and that the backend supports the op.  `layer` (-1: none) and
 * `what` (e.g. "q_proj"; NULL: none) name the caller in the error line
 * "<plugin>: layer <l>: <what> (<op>): <what is wrong>".  -EINVAL for
 * arguments outside the contract; -ENOTSUP for an op, variant or dtype the
 * backend does not run (1.1 features asked of a 1.0 plugin included). */
int fg_backend_embed(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		     const struct fg_embed_args *a);
int fg_backend_norm(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_layer_norm_args *a);
int fg_backend_linear(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		      const struct fg_linear_args *a);
int fg_backend_rope(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		    const struct fg_rope_args *a);
int fg_backend_attention_prefill(struct fg_backend *b, void *stream, int64_t layer,
				 const char *what, const struct fg_attention_args *a);
int fg_backend_attention_decode(struct fg_backend *b, void *stream, int64_t layer,
				const char *what, const struct fg_attention_args *a);
int fg_backend_kv_append(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			 const struct fg_kv_append_args *a);
/* Row-wise argmax into host memory: the plugin's hook when it has one; else
 * -ENOTSUP without an error line (the caller copies the logits out and uses
 * fg_argmax). */
int fg_backend_argmax(struct fg_backend *b, void *stream, const struct fg_tensor *x, int32_t *out);
/* Each row's next token where the logits are (a minor-4 plugin's sample
 * hook, when it answers supports(FG_OP_SAMPLE)); -ENOTSUP otherwise (the
 * caller then samples host copies of the logits, with the same result). */
int fg_backend_can_sample(const struct fg_backend *b);
int fg_backend_sample(struct fg_backend *b, void *stream, const struct fg_sample_args *a);
/* Log-probabilities where the logits are (a minor-6 plugin's logprob op);
 * -ENOTSUP, with no error line, without one (the caller then computes them
 * from host copies of the logits, with fgcore/logprob.h). */
int fg_backend_can_logprob(const struct fg_backend *b);
int fg_backend_logprob(struct fg_backend *b, void *stream, const struct fg_logprob_args *a);
/* The generic tier of compute ABI 1.10 (mixture-of-experts layers): checked
 * as the ops above; -ENOTSUP with a line from a plugin without the op. */
int fg_backend_add(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		   const struct fg_add_args *a);
int fg_backend_route(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		     const struct fg_route_args *a);
int fg_backend_gather(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		      const struct fg_gather_args *a);
int fg_backend_scatter_add(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			   const struct fg_scatter_add_args *a);
int fg_backend_linear_grouped(struct fg_backend *b, void *stream, int64_t layer, const char *what,
			      const struct fg_linear_grouped_args *a);
/* minor 12: out = cap * tanh(x / cap) (Gemma 2's final logits). */
int fg_backend_softcap(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		       const struct fg_softcap_args *a);
/* minor 13: a mixture's routed experts in one call, checked as the ops
 * above; -ENOTSUP, with no error line, where the backend has no such op or
 * declines this call (the caller then composes the generic ops). */
int fg_backend_experts(struct fg_backend *b, void *stream, int64_t layer, const char *what,
		       const struct fg_experts_args *a);

struct fg_codec {
	struct fg_plugin_handle ph;
	const struct fg_codec_ops *ops;
};

int fg_codec_open(struct fg_codec *c, struct fg_plugin_handle *ph);
void fg_codec_close(struct fg_codec *c);
uint64_t fg_codec_encoded_size(const struct fg_codec *c, const struct fg_codec_shape *s);
int fg_codec_encode_f32(const struct fg_codec *c, const struct fg_codec_shape *s, const float *src, void *dst);
int fg_codec_decode_f32(const struct fg_codec *c, const struct fg_codec_shape *s, const void *src, float *dst);
/* The plugin's fp16 hooks, or the default through float with fgcore/half.h. */
int fg_codec_encode_f16(const struct fg_codec *c, const struct fg_codec_shape *s, const uint16_t *src, void *dst);
int fg_codec_decode_f16(const struct fg_codec *c, const struct fg_codec_shape *s, const void *src, uint16_t *dst);

#endif
