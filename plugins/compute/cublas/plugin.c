/* plugins/compute/cublas/plugin.c - the "cublas" compute backend: entry point,
 * options, context, streams and events, and the staging ring that carries
 * small host arrays to the device.
 *
 * fp16 activations in device memory (the cuda_mem tier); fp16 weights go
 * through cuBLASLt (with fp8_prefill, large products through its fp8 kernels,
 * linear.c), 4-bit weights (Q4_ROWS) through the backend's own
 * kernels; compute ABI 1.1 (RMS norm, rotary embedding, SiLU and the gating
 * multiplier in linear, grouped-query attention) up to 1.12 (sampling where
 * the logits are, k_sample.cu; decode steps as CUDA graphs, graph.c; the
 * generic tier of mixture-of-experts layers, generic.c; sliding windows and
 * Gemma 2's soft caps, GELU and shifted RMS norm).  Every
 * op but argmax and sample (which return tokens) is asynchronous on its stream; NULL names the backend's default
 * stream, created at init (a blocking stream, so the synchronous cudaMemcpy of
 * the storage tiers stays ordered with the work on it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/compute/cublas/cublas_int.h"
#include "plugins/compute/cublas/kernels.h"

#define MiB (1024ull * 1024ull)

static const struct fg_option cublas_options[] = {
	{ .key = "device", .type = FG_OPT_INT, .def = "0",
	  .help = "CUDA device index the backend runs on.",
	  .offset = offsetof(struct cublas_opts, device), .min = 0, .max = 1023 },
	{ .key = "workspace", .type = FG_OPT_SIZE, .def = "64M",
	  .help = "cuBLASLt workspace per stream (device memory, allocated at init).",
	  .offset = offsetof(struct cublas_opts, workspace) },
	{ .key = "scratch", .type = FG_OPT_SIZE, .def = "64M",
	  .help = "Device scratch per stream for 4-bit dequantization tiles, split-K partial "
		  "sums and split attention (allocated at init; at least 4M).",
	  .offset = offsetof(struct cublas_opts, scratch) },
	{ .key = "q4_fused_max_m", .type = FG_OPT_INT, .def = "128",
	  .help = "linear with 4-bit or fp8 weights and at most this many rows uses the "
		  "fused kernel that reads each weight byte once; more rows dequantize to fp16 "
		  "and use cuBLASLt (on an H200 the fused 4-bit kernel is faster up to 128 rows).",
	  .offset = offsetof(struct cublas_opts, q4_fused_max_m), .min = 0, .max = 65536 },
	{ .key = "fp32_residual", .type = FG_OPT_BOOL, .def = "true",
	  .help = "keep the residual stream (the hidden states between layers) in fp32, as "
		  "the fp32 reference does; false: fp16 like the other activations, half the "
		  "activation memory and traffic, and larger errors in deep models.",
	  .offset = offsetof(struct cublas_opts, fp32_residual) },
	{ .key = "device_sampling", .type = FG_OPT_BOOL, .def = "true",
	  .help = "draw sampled tokens on the GPU, where the logits are (the sample op); "
		  "false: the core copies the logits to the host and samples there.  The "
		  "tokens are the same either way (fgcore/sampling.h defines them).",
	  .offset = offsetof(struct cublas_opts, device_sampling) },
	{ .key = "device_logprobs", .type = FG_OPT_BOOL, .def = "true",
	  .help = "take log-probabilities and the most likely tokens on the GPU, where the "
		  "logits are (the logprob op), so that scoring copies a few numbers per "
		  "position; false: the core copies each row of logits to the host.",
	  .offset = offsetof(struct cublas_opts, device_logprobs) },
	{ .key = "fp8_prefill", .type = FG_OPT_BOOL, .def = "false",
	  .help = "linear products with at least fp8_min_rows rows of x (prefill) run on the "
		  "fp8 tensor cores (compute capability 9.0): x and the weights are rounded to "
		  "E4M3 with one scale per row and multiplied in fp32, about twice the fp16 "
		  "rate, with errors of a few percent of each product (fp16: 0.1 percent); "
		  "ignored before compute capability 8.9.",
	  .offset = offsetof(struct cublas_opts, fp8_prefill) },
	{ .key = "fp8_min_rows", .type = FG_OPT_INT, .def = "1024",
	  .help = "with fp8_prefill, the fewest rows of x that take the fp8 path (smaller "
		  "products, decode among them, stay fp16).",
	  .offset = offsetof(struct cublas_opts, fp8_min_rows), .min = 1, .max = INT32_MAX },
	{ .key = "fp8_scratch", .type = FG_OPT_SIZE, .def = "256M",
	  .help = "with fp8_prefill, device memory per stream for a product's fp8 operands: "
		  "bands of x's rows, each quantized once, and the weight (rows x columns "
		  "bytes; in tiles of rows, quantized again for each band, when it does not "
		  "fit beside a band of 2048 rows; allocated at a stream's first fp8 product; "
		  "at least 1M).",
	  .offset = offsetof(struct cublas_opts, fp8_scratch) },
	{ .key = "cuda_graphs", .type = FG_OPT_BOOL, .def = "true",
	  .help = "launch each decode step that moves nothing between tiers (weights, cache "
		  "and activations all in GPU memory) as CUDA graphs, one per layer's attention "
		  "and MLP, each launched while the next is recorded: the GPU runs the kernels "
		  "back to back instead of idling between hundreds of small launches; false: "
		  "one launch per kernel.",
	  .offset = offsetof(struct cublas_opts, cuda_graphs) },
	{ .key = "sm_copy_max", .type = FG_OPT_SIZE, .def = "16M",
	  .help = "the small copies the compute waits for (the host's attention output, "
		  "activation reloads: copy_small), up to this many bytes between page-locked "
		  "host memory and the GPU, run as a kernel that reads or writes the host memory "
		  "over PCIe instead of on a copy engine, where they would wait behind other "
		  "streams' bulk transfers (a layer's weights); 0: on a copy engine.",
	  .offset = offsetof(struct cublas_opts, sm_copy_max) },
	{ .key = "device_experts", .type = FG_OPT_BOOL, .def = "true",
	  .help = "route a mixture's rows to its 4-bit experts, group them and multiply "
		  "them on the GPU in one op (decode-sized batches: at most q4_fused_max_m "
		  "rows an expert on average), so that no mixture layer waits for the host; "
		  "false: the router's choices come to the host, which groups the rows.",
	  .offset = offsetof(struct cublas_opts, device_experts) },
	{ .key = NULL },
};

int cublas_cuda_fail(struct cublas_ctx *c, const char *op, const char *what, cudaError_t e)
{
	fg_error(c->host, "cublas: %s: %s failed: %s (%s)", op, what, cudaGetErrorString(e),
		 cudaGetErrorName(e));
	(void)cudaGetLastError(); /* clears the error unless it is sticky */
	return -EIO;
}

int cublas_blas_fail(struct cublas_ctx *c, const char *op, const char *what,
		     cublasStatus_t st)
{
	fg_error(c->host, "cublas: %s: %s failed: %s (%d)", op, what, cublasGetStatusString(st),
		 (int)st);
	return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

int cublas_enter(struct cublas_ctx *c, const char *op)
{
	cudaError_t e = cudaSetDevice(c->device);

	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "cudaSetDevice", e);
}

/* ---- staging ring ---------------------------------------------------------------- */

static int cublas_stage_retire_one(struct cublas_ctx *c, const char *op)
{
	struct cublas_staging *st = &c->st;
	struct cublas_stage_use *u = &st->use[st->first];
	cudaError_t e;

	if (!u->ev) { /* staged by an op that failed before cublas_stage_done */
		e = cudaStreamSynchronize(NULL);
	} else {
		e = cudaEventSynchronize(u->ev);
		st->evs[st->nev++] = u->ev;
	}
	st->first = (st->first + 1) % CUBLAS_STAGE_SLOTS;
	st->count--;
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "waiting for a staging copy", e);
}

static int cublas_stage_grow(struct cublas_ctx *c, const char *op, size_t need)
{
	struct cublas_staging *st = &c->st;
	size_t cap = st->cap ? st->cap : 1 << 20;
	cudaError_t e;
	int rc;

	while (st->count)
		if ((rc = cublas_stage_retire_one(c, op)))
			return rc;
	while (cap < need)
		cap *= 2;
	if (st->host)
		cudaFreeHost(st->host);
	if (st->dev)
		cudaFree(st->dev);
	st->host = NULL;
	st->dev = NULL;
	st->cap = 0;
	st->head = 0;
	e = cudaHostAlloc((void **)&st->host, cap, cudaHostAllocDefault);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, op, "cudaHostAlloc of the staging ring", e);
	e = cudaMalloc((void **)&st->dev, cap);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, op, "cudaMalloc of the staging ring", e);
	st->cap = cap;
	return 0;
}

int cublas_stage(struct cublas_ctx *c, struct cublas_stream *s, const char *op,
		 const void *src0, size_t len0, const void *src1, size_t len1, void **dev0,
		 void **dev1)
{
	struct cublas_staging *st = &c->st;
	size_t at1 = (len0 + 255) & ~(size_t)255, len = at1 + len1;
	size_t need = (len + 255) & ~(size_t)255, off = 0;
	struct cublas_stage_use *u;
	uint8_t *host, *dev;
	cudaError_t e;
	int rc;

	if (need == 0)
		need = 256;
	if (s->g.on) { /* recording: the graph's arena, which no event recycles */
		if ((rc = cublas_graph_reserve(c, s, op, need, &host, &dev)))
			return rc;
	} else {
		if (need > st->cap && (rc = cublas_stage_grow(c, op, need)))
			return rc;
		off = st->head + need <= st->cap ? st->head : 0;
		/* Retire, oldest first, until nothing in flight overlaps [off, off + need). */
		for (;;) {
			int busy = st->count == CUBLAS_STAGE_SLOTS || st->nev == 0;

			for (unsigned i = 0; !busy && i < st->count; i++) {
				u = &st->use[(st->first + i) % CUBLAS_STAGE_SLOTS];
				busy = u->off < off + need && off < u->off + u->len;
			}
			if (!busy)
				break;
			if ((rc = cublas_stage_retire_one(c, op)))
				return rc;
		}
		host = st->host + off;
		dev = st->dev + off;
	}
	memcpy(host, src0, len0);
	if (len1)
		memcpy(host + at1, src1, len1);
	e = cudaMemcpyAsync(dev, host, len, cudaMemcpyHostToDevice, s->s);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, op, "cudaMemcpyAsync of staged host arrays", e);
	*dev0 = dev;
	if (dev1)
		*dev1 = dev + at1;
	if (s->g.on)
		return 0;
	u = &st->use[(st->first + st->count) % CUBLAS_STAGE_SLOTS];
	u->off = off;
	u->len = need;
	u->ev = NULL; /* recorded by cublas_stage_done */
	st->count++;
	st->head = off + need;
	return 0;
}

int cublas_stage_done(struct cublas_ctx *c, struct cublas_stream *s, const char *op)
{
	struct cublas_staging *st = &c->st;
	cudaError_t e = cudaSuccess;

	if (s->g.on) /* staged in the graph's arena: nothing to retire by event */
		return 0;
	for (unsigned i = 0; i < st->count; i++) {
		struct cublas_stage_use *u = &st->use[(st->first + i) % CUBLAS_STAGE_SLOTS];

		if (u->ev)
			continue;
		u->ev = st->evs[--st->nev]; /* cublas_stage kept one per use */
		if (e == cudaSuccess)
			e = cudaEventRecord(u->ev, s->s);
		else
			(void)cudaEventRecord(u->ev, s->s);
	}
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, op, "cudaEventRecord", e);
}

static void cublas_stage_free(struct cublas_ctx *c)
{
	struct cublas_staging *st = &c->st;

	while (st->count) {
		struct cublas_stage_use *u = &st->use[st->first];

		if (u->ev) {
			(void)cudaEventSynchronize(u->ev);
			st->evs[st->nev++] = u->ev;
		}
		st->first = (st->first + 1) % CUBLAS_STAGE_SLOTS;
		st->count--;
	}
	for (unsigned i = 0; i < st->nev; i++)
		cudaEventDestroy(st->evs[i]);
	st->nev = 0;
	if (st->host)
		cudaFreeHost(st->host);
	if (st->dev)
		cudaFree(st->dev);
	st->host = NULL;
	st->dev = NULL;
}

/* ---- streams ------------------------------------------------------------------------ */

static int cublas_stream_init(struct cublas_ctx *c, struct cublas_stream *s, const char *op)
{
	cudaError_t e;

	memset(s, 0, sizeof(*s));
	e = cudaStreamCreateWithFlags(&s->s, cudaStreamDefault);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, op, "cudaStreamCreate", e);
	e = cudaMalloc(&s->ws, c->ws_bytes);
	if (e == cudaSuccess)
		e = cudaMalloc(&s->scratch, c->scratch_bytes);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->bias32, CUBLAS_BIAS32_MAX * sizeof(float));
	if (e != cudaSuccess) {
		fg_error(c->host, "cublas: %s: cannot allocate %zu MiB of workspace and scratch on "
			 "device %d: %s; lower `workspace`/`scratch` or raise the reserve of the "
			 "cuda_mem tier", op, (size_t)((c->ws_bytes + c->scratch_bytes) / MiB), c->device,
			 cudaGetErrorString(e));
		goto fail;
	}
	/* (the fp8 buffer comes with a stream's first fp8 product, linear.c: the
	 * mover's load, store and activation streams never run one) */
	return 0;
fail:
	(void)cudaGetLastError();
	cudaFree(s->ws); /* cudaFree(NULL) does nothing */
	cudaFree(s->scratch);
	cudaFree(s->bias32);
	cudaStreamDestroy(s->s);
	memset(s, 0, sizeof(*s));
	return -ENOMEM;
}

static void cublas_stream_fini(struct cublas_ctx *c, struct cublas_stream *s)
{
	if (!s->s)
		return;
	cublas_graph_fini(c, s); /* ends a recording first: a capturing stream cannot sync */
	(void)cudaStreamSynchronize(s->s);
	cudaFree(s->ws);
	cudaFree(s->scratch);
	cudaFree(s->bias32);
	cudaFree(s->fp8);
	cudaStreamDestroy(s->s);
	memset(s, 0, sizeof(*s));
}

static int cublas_stream_create(void *ctx, void **stream)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s;
	int rc;

	*stream = NULL;
	if ((rc = cublas_enter(c, "stream_create")))
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s) {
		fg_error(c->host, "cublas: stream_create: out of host memory");
		return -ENOMEM;
	}
	if ((rc = cublas_stream_init(c, s, "stream_create"))) {
		free(s);
		return rc;
	}
	*stream = s;
	return 0;
}

static void cublas_stream_destroy(void *ctx, void *stream)
{
	struct cublas_ctx *c = ctx;

	if (!stream || stream == &c->def)
		return;
	(void)cudaSetDevice(c->device);
	pthread_mutex_lock(&c->lock);
	cublas_stream_fini(c, stream); /* synchronises first: staging events may point at it */
	pthread_mutex_unlock(&c->lock);
	free(stream);
}

static int cublas_stream_sync(void *ctx, void *stream)
{
	struct cublas_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "stream_sync")))
		return rc;
	e = cudaStreamSynchronize(cublas_stream_of(c, stream)->s);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "stream_sync", "cudaStreamSynchronize", e);
}

/* An event for ordering (no timing: cheaper) or a timer (timing). */
static int cublas_event_new(struct cublas_ctx *c, unsigned flags, const char *what, void **event)
{
	cudaEvent_t ev;
	cudaError_t e;
	int rc;

	*event = NULL;
	if ((rc = cublas_enter(c, what)))
		return rc;
	e = cudaEventCreateWithFlags(&ev, flags);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, what, "cudaEventCreate", e);
	*event = ev;
	return 0;
}

static int cublas_event_create(void *ctx, void **event)
{
	return cublas_event_new(ctx, cudaEventDisableTiming, "event_create", event);
}

static void cublas_event_destroy(void *ctx, void *event)
{
	struct cublas_ctx *c = ctx;

	if (!event)
		return;
	(void)cudaSetDevice(c->device);
	cudaEventDestroy((cudaEvent_t)event);
}

static int cublas_event_record(void *ctx, void *event, void *stream)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s;
	cudaError_t e;
	int rc;

	if (!event) {
		fg_error(c->host, "cublas: event_record: NULL event");
		return -EINVAL;
	}
	if ((rc = cublas_enter(c, "event_record")))
		return rc;
	s = cublas_stream_of(c, stream);
	/* While recording: a node of the graph, so that the event (or timer)
	 * happens when the graph runs, as if recorded then. */
	e = s->g.on ? cudaEventRecordWithFlags((cudaEvent_t)event, s->s, cudaEventRecordExternal)
		    : cudaEventRecord((cudaEvent_t)event, s->s);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "event_record", "cudaEventRecord", e);
}

static int cublas_stream_wait(void *ctx, void *stream, void *event)
{
	struct cublas_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if (!event) {
		fg_error(c->host, "cublas: stream_wait: NULL event");
		return -EINVAL;
	}
	if ((rc = cublas_enter(c, "stream_wait")))
		return rc;
	e = cudaStreamWaitEvent(cublas_stream_of(c, stream)->s, (cudaEvent_t)event, 0);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "stream_wait", "cudaStreamWaitEvent", e);
}

static int cublas_event_sync(void *ctx, void *event)
{
	struct cublas_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "event_sync")))
		return rc;
	e = cudaEventSynchronize((cudaEvent_t)event);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "event_sync", "cudaEventSynchronize", e);
}

/* What memory p is (type cudaMemoryTypeUnregistered where CUDA cannot tell). */
static struct cudaPointerAttributes cublas_pointer(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		a.type = cudaMemoryTypeUnregistered;
	}
	return a;
}

/* Copies between device memory and (preferably page-locked) host memory, in
 * stream order; unified addressing tells the direction. */
static int cublas_copy(void *ctx, void *stream, void *dst, const void *src, size_t len)
{
	struct cublas_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "copy")))
		return rc;
	e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, cublas_stream_of(c, stream)->s);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "copy", "cudaMemcpyAsync", e);
}

/* Up to sm_copy_max bytes between page-locked host memory and the device
 * go through the SMs (a kernel reading or writing the host memory over
 * PCIe): a copy engine would run them after the bulk transfers other
 * streams queued first (a layer's weights), and the compute waiting for
 * them (the host's attention output, an activation reload) would wait for
 * those too.  Anything else is a plain copy. */
static int cublas_copy_small(void *ctx, void *stream, void *dst, const void *src, size_t len)
{
	struct cublas_ctx *c = ctx;
	cudaStream_t s = cublas_stream_of(c, stream)->s;
	struct cudaPointerAttributes d, h;
	cudaError_t e;
	int rc;

	if (!len || len > c->sm_copy_max)
		return cublas_copy(ctx, stream, dst, src, len);
	if ((rc = cublas_enter(c, "copy_small")))
		return rc;
	/* (page-locked host memory is read or written at its device address) */
	if ((h = cublas_pointer(src)).type == cudaMemoryTypeHost && h.devicePointer &&
	    (d = cublas_pointer(dst)).type == cudaMemoryTypeDevice && d.device == c->device)
		e = cublas_k_copy(s, dst, h.devicePointer, len);
	else if ((h = cublas_pointer(dst)).type == cudaMemoryTypeHost && h.devicePointer &&
		 (d = cublas_pointer(src)).type == cudaMemoryTypeDevice && d.device == c->device)
		e = cublas_k_copy(s, h.devicePointer, src, len);
	else
		return cublas_copy(ctx, stream, dst, src, len);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "copy_small", "the copy kernel", e);
}

/* fn runs on a thread of the CUDA driver when the stream reaches it; the
 * stream's later work waits for it to return. */
static int cublas_host_call(void *ctx, void *stream, void (*fn)(void *arg), void *arg)
{
	struct cublas_ctx *c = ctx;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "host_call")))
		return rc;
	e = cudaLaunchHostFunc(cublas_stream_of(c, stream)->s, fn, arg);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "host_call", "cudaLaunchHostFunc", e);
}

/* ---- timers: events that record time ------------------------------------------------ */

static int cublas_timer_create(void *ctx, void **timer)
{
	return cublas_event_new(ctx, cudaEventDefault, "timer_create", timer);
}

static int cublas_timer_elapsed(void *ctx, void *start, void *end, double *seconds)
{
	struct cublas_ctx *c = ctx;
	float ms = 0;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "timer_elapsed")))
		return rc;
	e = cudaEventSynchronize((cudaEvent_t)end);
	if (e == cudaSuccess)
		e = cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end);
	*seconds = 1e-3 * (double)ms;
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "timer_elapsed", "cudaEventElapsedTime", e);
}

static int cublas_argmax(void *ctx, void *stream, const struct fg_tensor *x, int32_t *out)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	cudaError_t e;
	int rc;

	if (x->dtype != FG_DTYPE_F16 || x->rows < 0 || x->cols < 1 || x->ld < x->cols ||
	    (size_t)x->rows * sizeof(int32_t) > c->scratch_bytes) {
		fg_error(c->host, "cublas: argmax: need an fp16 [rows, cols] tensor with ld >= cols "
			 "and rows * 4 <= scratch bytes");
		return -EINVAL;
	}
	if ((rc = cublas_enter(c, "argmax")))
		return rc;
	e = cublas_k_argmax(s->s, x->rows, x->cols, x->data, x->ld, s->scratch);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(out, s->scratch, (size_t)x->rows * sizeof(int32_t),
				    cudaMemcpyDeviceToHost, s->s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s->s);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "argmax", "kernel or copy", e);
}

/* The parameters go to the device packed in one copy, ahead of the tokens,
 * in the stream's scratch. */
static int cublas_sample(void *ctx, void *stream, const struct fg_sample_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const struct fg_tensor *x = &a->logits;
	size_t rows = x->rows > 0 ? (size_t)x->rows : 0;
	size_t prm_bytes = rows * sizeof(struct cublas_sample_row);
	struct cublas_sample_row *p;
	int32_t *dout;
	cudaError_t e;
	int rc;

	if (x->dtype != FG_DTYPE_F16 || x->rows < 0 || x->rows > INT32_MAX || x->cols < 1 ||
	    x->cols > INT32_MAX || x->ld < x->cols) {
		fg_error(c->host, "cublas: sample: need fp16 logits [rows, vocab] with rows and "
			 "vocab below 2^31 and ld >= vocab");
		return -EINVAL;
	}
	if (prm_bytes + rows * sizeof(int32_t) > c->scratch_bytes) {
		fg_error(c->host, "cublas: sample: %zu rows need %zu bytes of stream scratch, which "
			 "has %zu; raise `scratch`", rows,
			 prm_bytes + rows * sizeof(int32_t), c->scratch_bytes);
		return -ENOMEM;
	}
	if (!rows)
		return 0;
	dout = (int32_t *)((char *)s->scratch + prm_bytes);
	if (!(p = malloc(prm_bytes))) {
		fg_error(c->host, "cublas: sample: out of host memory for %zu rows' parameters",
			 rows);
		return -ENOMEM;
	}
	for (size_t r = 0; r < rows; r++)
		p[r] = (struct cublas_sample_row){ .draw = a->draw[r],
						   .temperature = a->temperature[r],
						   .top_p = a->top_p[r], .top_k = a->top_k[r] };
	if ((rc = cublas_enter(c, "sample"))) {
		free(p);
		return rc;
	}
	e = cudaMemcpyAsync(s->scratch, p, prm_bytes, cudaMemcpyHostToDevice, s->s);
	if (e == cudaSuccess)
		e = cublas_k_sample(s->s, x->rows, x->cols, x->data, x->ld, s->scratch, dout);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(a->out, dout, rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
				    s->s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s->s);
	free(p);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "sample", "kernel or copy", e);
}

/* The targets go to the device and the outputs come back through the
 * stream's scratch: targets, lp, then the top ids and their values. */
static int cublas_logprob(void *ctx, void *stream, const struct fg_logprob_args *a)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	const struct fg_tensor *x = &a->logits;
	size_t rows = x->rows > 0 ? (size_t)x->rows : 0, k = (size_t)a->k;
	size_t bytes = rows * (2 + 2 * k) * 4;
	cudaError_t e;
	int rc;

	if (x->dtype != FG_DTYPE_F16 || x->rows > INT32_MAX || x->cols > INT32_MAX) {
		fg_error(c->host, "cublas: logprob: need fp16 logits [rows, vocab] with rows and "
			 "vocab below 2^31");
		return -EINVAL;
	}
	if (bytes > c->scratch_bytes) {
		fg_error(c->host, "cublas: logprob: %zu rows of %zu top ids need %zu bytes of "
			 "stream scratch, which has %zu; raise `scratch`", rows, k, bytes,
			 c->scratch_bytes);
		return -ENOMEM;
	}
	if (!rows)
		return 0;
	int32_t *dt = s->scratch, *did = dt + 2 * rows;
	float *dlp = (float *)(dt + rows), *dtop = (float *)(did + rows * k);
	if ((rc = cublas_enter(c, "logprob")))
		return rc;
	e = cudaMemcpyAsync(dt, a->target, rows * 4, cudaMemcpyHostToDevice, s->s);
	if (e == cudaSuccess)
		e = cublas_k_logprob(s->s, x->rows, x->cols, x->data, x->ld, dt, a->k, dlp, did,
				     dtop);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(a->lp, dlp, rows * 4, cudaMemcpyDeviceToHost, s->s);
	if (e == cudaSuccess && k)
		e = cudaMemcpyAsync(a->top_id, did, rows * k * 4, cudaMemcpyDeviceToHost, s->s);
	if (e == cudaSuccess && k)
		e = cudaMemcpyAsync(a->top_lp, dtop, rows * k * 4, cudaMemcpyDeviceToHost, s->s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s->s);
	return e == cudaSuccess ? 0 : cublas_cuda_fail(c, "logprob", "kernel or copy", e);
}

/* ---- context --------------------------------------------------------------------------- */

static void cublas_fini(void *ctx)
{
	struct cublas_ctx *c = ctx;

	if (!c)
		return;
	(void)cudaSetDevice(c->device);
	cublas_stage_free(c);
	cublas_stream_fini(c, &c->def);
	cublas_plans_clear(c);
	if (c->lt)
		cublasLtDestroy(c->lt);
	if (c->blas)
		cublasDestroy(c->blas);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static int cublas_init(const struct fg_host *host, const void *opts, void **ctx)
{
	static const struct cublas_opts defaults = {
		.device = 0, .workspace = 64 * MiB, .scratch = 64 * MiB, .q4_fused_max_m = 128,
		.fp32_residual = 1, .device_sampling = 1, .device_logprobs = 1, .fp8_prefill = 0, .fp8_min_rows = 1024,
		.fp8_scratch = 256 * MiB, .cuda_graphs = 1,
		.device_experts = 1, .sm_copy_max = 16 * MiB,
	};
	const struct cublas_opts *o = opts ? opts : &defaults;
	struct cudaDeviceProp prop;
	struct cublas_ctx *c;
	cublasStatus_t bs;
	cudaError_t e;
	int n = 0, rc;

	*ctx = NULL;
	if (o->workspace > 16384 * MiB || o->scratch > 16384 * MiB || o->scratch < 4 * MiB) {
		fg_error(host, "cublas: workspace = %llu and scratch = %llu bytes: use up to 16G "
			 "each, and at least 4M of scratch", (unsigned long long)o->workspace,
			 (unsigned long long)o->scratch);
		return -EINVAL;
	}
	if (o->fp8_prefill && (o->fp8_scratch < MiB || o->fp8_scratch > 65536 * MiB)) {
		fg_error(host, "cublas: fp8_scratch = %llu bytes: use 1M to 64G (the fp8 copies of "
			 "a product's operands; 256M holds OPT-30B's largest weight)",
			 (unsigned long long)o->fp8_scratch);
		return -EINVAL;
	}
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n < 1) {
		(void)cudaGetLastError();
		fg_error(host, "cublas: no usable CUDA device (%s); use the cpu_blas backend on "
			 "this machine", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return -ENODEV;
	}
	if (o->device < 0 || o->device >= n) {
		fg_error(host, "cublas: device = %lld, but this machine has %d CUDA device%s "
			 "(0..%d)", (long long)o->device, n, n == 1 ? "" : "s", n - 1);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		fg_error(host, "cublas: out of host memory for the context");
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->host = host;
	c->device = (int)o->device;
	c->ws_bytes = (size_t)o->workspace;
	c->scratch_bytes = (size_t)o->scratch;
	c->q4_fused_max_m = o->q4_fused_max_m;
	c->f32_hidden = o->fp32_residual != 0;
	c->device_sampling = o->device_sampling != 0;
	c->device_logprobs = o->device_logprobs != 0;
	c->graphs = o->cuda_graphs != 0;
	c->device_experts = o->device_experts != 0;
	c->sm_copy_max = (size_t)o->sm_copy_max;
	if ((rc = cublas_enter(c, "init")))
		goto fail;
	e = cudaGetDeviceProperties(&prop, c->device);
	if (e != cudaSuccess) {
		rc = cublas_cuda_fail(c, "init", "cudaGetDeviceProperties", e);
		goto fail;
	}
	c->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
	c->cc = prop.major * 10 + prop.minor;
	if (c->cc < 75) {
		fg_error(host, "cublas: device %d (%s) has compute capability %d.%d; this build "
			 "needs 7.5 or newer", c->device, prop.name, prop.major, prop.minor);
		rc = -ENOTSUP;
		goto fail;
	}
	/* fp8 tensor cores came with 8.9; the row-wise (outer-vector) scales of
	 * this path are documented for 9.0, and where cuBLASLt has no algorithm
	 * for a product it runs in fp16 (linear.c says so once). */
	if (o->fp8_prefill && !CUBLAS_HAVE_FP8)
		fg_log(host, FG_LOG_WARN, "cublas: fp8_prefill ignored: this backend was built with "
		       "cuBLAS %d.%d, whose fp8 products have no row-wise scales (12.9 or newer); "
		       "products stay fp16", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
	else if (o->fp8_prefill && c->cc < 89)
		fg_log(host, FG_LOG_WARN, "cublas: fp8_prefill ignored: device %d (%s) has compute "
		       "capability %d.%d and no fp8 tensor cores (8.9 or newer); products stay "
		       "fp16", c->device, prop.name, prop.major, prop.minor);
	c->fp8 = CUBLAS_HAVE_FP8 && o->fp8_prefill && c->cc >= 89;
	c->fp8_min_rows = o->fp8_min_rows > 1 ? o->fp8_min_rows : 1;
	c->fp8_bytes = c->fp8 ? (size_t)o->fp8_scratch : 0;
	if ((bs = cublasLtCreate(&c->lt)) != CUBLAS_STATUS_SUCCESS) {
		rc = cublas_blas_fail(c, "init", "cublasLtCreate", bs);
		goto fail;
	}
	if ((bs = cublasCreate(&c->blas)) != CUBLAS_STATUS_SUCCESS) {
		rc = cublas_blas_fail(c, "init", "cublasCreate", bs);
		goto fail;
	}
	if ((rc = cublas_stream_init(c, &c->def, "init")))
		goto fail;
	for (c->st.nev = 0; c->st.nev < CUBLAS_STAGE_SLOTS; c->st.nev++) {
		e = cudaEventCreateWithFlags(&c->st.evs[c->st.nev], cudaEventDisableTiming);
		if (e != cudaSuccess) {
			rc = cublas_cuda_fail(c, "init", "cudaEventCreate", e);
			goto fail;
		}
	}
	if ((rc = cublas_stage_grow(c, "init", 4 << 20))) /* ids and positions of 500k tokens */
		goto fail;
	if ((e = cublas_k_linear_setup()) != cudaSuccess ||
	    (e = cublas_k_f8_linear_setup()) != cudaSuccess ||
	    (e = cublas_k_prefill_setup()) != cudaSuccess ||
	    (e = cublas_k_decode_setup()) != cudaSuccess) {
		rc = cublas_cuda_fail(c, "init", "configuring the kernels' shared memory", e);
		goto fail;
	}
	fg_log(host, FG_LOG_DEBUG, "cublas: device %d (%s), %d SMs, compute capability %d.%d%s",
	       c->device, prop.name, c->sms, prop.major, prop.minor,
	       c->fp8 ? "; fp8 products from fp8_min_rows rows (fp8_prefill)" : "");
	*ctx = c;
	return 0;
fail:
	cublas_fini(c);
	return rc;
}

static void cublas_info(void *ctx, struct fg_compute_info *info)
{
	const struct cublas_ctx *c = ctx;

	info->act_dtype = FG_DTYPE_F16;
	info->hidden_dtype = c->f32_hidden ? FG_DTYPE_F32 : FG_DTYPE_F16;
	info->native_codecs = "fp16,int4_group64"; /* read by 1.0 hosts only; `supports` says it now */
	info->device_memory = 1; /* its operands live in GPU memory (cuda_mem) */
}

/* Exactly the ops and operand types the kernels implement: fp16 everywhere,
 * norms of the fp32 residual stream, 4-bit and fp8 weights (Q4_ROWS,
 * F8_ROWS: fused kernels for small m, else dequantized tiles, linear.c) in linear, a
 * 4-bit or fp8 cache (Q4_COLS, F8_COLS) in decode, append and grouped-query decode;
 * prefill over an fp16 cache. */
static int cublas_supports(void *ctx, enum fg_op op, enum fg_dtype dtype)
{
	const struct cublas_ctx *c = ctx;

	switch (op) {
	case FG_OP_LAYER_NORM:
	case FG_OP_RMS_NORM:
		return dtype == FG_DTYPE_F16 || (dtype == FG_DTYPE_F32 && c->f32_hidden);
	case FG_OP_EMBED:
	case FG_OP_EMBED_TOKENS:
	case FG_OP_ROPE:
	case FG_OP_ATTENTION_PREFILL:
	case FG_OP_ATTENTION_CACHED:
		return dtype == FG_DTYPE_F16;
	case FG_OP_LINEAR:
	case FG_OP_LINEAR_SILU:
	case FG_OP_LINEAR_MUL:
		return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_ROWS ||
		       dtype == FG_DTYPE_F8_ROWS;
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_ATTENTION_GQA:
	case FG_OP_ATTENTION_RING: /* (k_decode.cu's kernels, not the 4-bit mma one) */
	case FG_OP_KV_APPEND:
		return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_COLS ||
		       dtype == FG_DTYPE_F8_COLS;
	case FG_OP_SAMPLE:
		return dtype == FG_DTYPE_F16 && c->device_sampling;
	case FG_OP_LOGPROB:
		return dtype == FG_DTYPE_F16 && c->device_logprobs;
	case FG_OP_ADD:
	case FG_OP_ROUTE:
	case FG_OP_GATHER:
	case FG_OP_SCATTER_ADD:
	case FG_OP_SOFTCAP:
		return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_F32;
	case FG_OP_LINEAR_GROUPED:
	case FG_OP_LINEAR_GELU:
		return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_ROWS ||
		       dtype == FG_DTYPE_F8_ROWS;
	case FG_OP_NORM_SHIFT:
		return dtype == FG_DTYPE_F16 || (dtype == FG_DTYPE_F32 && c->f32_hidden);
	case FG_OP_ATTENTION_SOFTCAP: /* (k_decode.cu's kernels for an encoded cache) */
		return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_COLS ||
		       dtype == FG_DTYPE_F8_COLS;
	case FG_OP_EXPERTS: /* (the fused 4-bit kernel over groups; fp16 experts: composed) */
		return dtype == FG_DTYPE_Q4_ROWS && c->device_experts;
	}
	return 0;
}

static int cublas_probe(const struct fg_host *host)
{
	int n = 0;

	(void)host;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n > 0 ? 1 : 0;
}

static const struct fg_compute_ops cublas_ops = {
	.init			= cublas_init,
	.fini			= cublas_fini,
	.info			= cublas_info,
	.embed			= cublas_embed,
	.layer_norm		= cublas_layer_norm,
	.linear			= cublas_linear,
	.attention_prefill	= cublas_attention_prefill,
	.attention_decode	= cublas_attention_decode,
	.kv_append		= cublas_kv_append,
	.stream_create		= cublas_stream_create,
	.stream_destroy		= cublas_stream_destroy,
	.stream_sync		= cublas_stream_sync,
	.event_create		= cublas_event_create,
	.event_destroy		= cublas_event_destroy,
	.event_record		= cublas_event_record,
	.stream_wait		= cublas_stream_wait,
	.event_sync		= cublas_event_sync,
	.copy			= cublas_copy,
	.argmax			= cublas_argmax,
	.timer_create		= cublas_timer_create,
	.timer_destroy		= cublas_event_destroy, /* a timer is an event */
	.timer_record		= cublas_event_record,
	.timer_elapsed		= cublas_timer_elapsed,
	.rope			= cublas_rope,
	.supports		= cublas_supports,
	.sample			= cublas_sample,
	.logprob		= cublas_logprob,
	.graph_begin		= cublas_graph_begin,
	.graph_end		= cublas_graph_end,
	.add			= cublas_add,
	.route			= cublas_route,
	.gather			= cublas_gather,
	.scatter_add		= cublas_scatter_add,
	.linear_grouped		= cublas_linear_grouped,
	.softcap		= cublas_softcap,
	.experts		= cublas_experts,
	.copy_small		= cublas_copy_small,
	.host_call		= cublas_host_call,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "cublas",
	.description	= "NVIDIA GPU backend: cuBLASLt fp16 GEMMs, fused 4-bit linear and "
			  "flash attention kernels",
	.probe		= cublas_probe,
	.ops		= &cublas_ops,
	.options	= cublas_options,
	.opts_size	= sizeof(struct cublas_opts),
	.capabilities	= "streams,events,fp16,int4_group64",
};
