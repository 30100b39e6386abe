/* plugins/compute/cublas/graph.c - a stream's ops recorded and launched as one
 * CUDA graph (compute ABI 1.5: graph_begin, graph_end).
 *
 * The core records a decode step that moves nothing between tiers: a few
 * hundred kernels whose launches, one by one, leave the GPU idle between
 * the small ones.  It comes in pieces (a unit each: a layer's attention, its
 * MLP), each launched while the next is recorded.  graph_begin starts
 * capturing the stream and the ops then enqueue as usual, becoming the
 * graph's nodes.  graph_end ends the capture and updates the executable
 * graph of the same piece of the previous step in place when the new one has
 * the same nodes (only kernel arguments and grid sizes differ), which costs
 * far less than instantiating; otherwise (the first step, or a kernel choice
 * that changed with the length) it instantiates anew.  Then it launches it.
 *
 * The small host arrays an op stages (ids, positions, pads) cannot use the
 * staging ring while capturing: its slots are recycled by events, and an
 * event recorded in a capture only happens when the graph runs.  They go to
 * the stream's arena instead: page-locked chunks mirrored on the device,
 * filled from the start at every capture (after the previous launch has
 * read them) and copied to the device by the graph's own copy nodes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/compute/cublas/cublas_int.h"

#define ARENA_CHUNK_MIN (1u << 20)

int cublas_graph_begin(void *ctx, void *stream, int piece)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	struct cublas_graph *g = &s->g;
	cudaError_t e = cudaSuccess;
	int rc;

	if (!c->graphs)
		return -ENOTSUP;
	if ((rc = cublas_enter(c, "graph_begin")))
		return rc;
	if (g->on) {
		fg_error(c->host, "cublas: graph_begin: the stream is already recording a graph");
		return -EINVAL;
	}
	if (piece < 0 || piece >= CUBLAS_GRAPH_PIECES)
		return -ENOTSUP; /* the rest of a very deep model's step runs unrecorded */
	/* A step's first piece refills the arena from its start: the previous
	 * step's last launch must have read it. */
	if (!g->done)
		e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
	else if (piece == 0 && g->launched)
		e = cudaEventSynchronize(g->done);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, "graph_begin", "waiting for the previous graph", e);
	for (int i = 0; piece == 0 && i < g->nchunks; i++)
		g->chunk[i].used = 0;
	g->piece = piece;
	/* Relaxed: an op may still allocate (a new arena chunk, cuBLAS's own
	 * buffers) while the stream records. */
	e = cudaStreamBeginCapture(s->s, cudaStreamCaptureModeRelaxed);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, "graph_begin", "cudaStreamBeginCapture", e);
	g->on = 1;
	return 0;
}

int cublas_graph_end(void *ctx, void *stream, int launch)
{
	struct cublas_ctx *c = ctx;
	struct cublas_stream *s = cublas_stream_of(c, stream);
	struct cublas_graph *g = &s->g;
	cudaGraph_t graph = NULL;
	cudaError_t e;
	int rc;

	if ((rc = cublas_enter(c, "graph_end")))
		return rc;
	if (!g->on) {
		fg_error(c->host, "cublas: graph_end: the stream is not recording a graph");
		return -EINVAL;
	}
	g->on = 0;
	e = cudaStreamEndCapture(s->s, &graph);
	if (!launch || e != cudaSuccess) {
		if (graph)
			cudaGraphDestroy(graph);
		if (!launch) {
			(void)cudaGetLastError();
			return 0;
		}
		return cublas_cuda_fail(c, "graph_end", "cudaStreamEndCapture", e);
	}
	cudaGraphExec_t *exec = &g->exec[g->piece];
	if (*exec) {
#if CUDART_VERSION >= 12000
		cudaGraphExecUpdateResultInfo info;
		e = cudaGraphExecUpdate(*exec, graph, &info);
#else
		cudaGraphNode_t bad;
		cudaGraphExecUpdateResult res;
		e = cudaGraphExecUpdate(*exec, graph, &bad, &res);
#endif
		if (e == cudaSuccess) {
			g->updated++;
		} else { /* other nodes: instantiate below */
			(void)cudaGetLastError();
			cudaGraphExecDestroy(*exec);
			*exec = NULL;
		}
	}
	if (!*exec) {
		e = cudaGraphInstantiateWithFlags(exec, graph, 0);
		if (e != cudaSuccess) {
			*exec = NULL;
			cudaGraphDestroy(graph);
			return cublas_cuda_fail(c, "graph_end", "cudaGraphInstantiate", e);
		}
		g->instantiated++;
	}
	cudaGraphDestroy(graph);
	e = cudaGraphLaunch(*exec, s->s);
	if (e == cudaSuccess)
		e = cudaEventRecord(g->done, s->s);
	if (e != cudaSuccess)
		return cublas_cuda_fail(c, "graph_end", "cudaGraphLaunch", e);
	g->launched = 1;
	return 0;
}

int cublas_graph_reserve(struct cublas_ctx *c, struct cublas_stream *s, const char *op,
			 size_t need, uint8_t **host, uint8_t **dev)
{
	struct cublas_graph *g = &s->g;
	struct cublas_arena_chunk *k = g->nchunks ? &g->chunk[g->nchunks - 1] : NULL;
	cudaError_t e;

	/* Chunks fill in order; a step that needs more than the last one has
	 * left gets a new, larger one (kept for the next steps). */
	for (int i = 0; i < g->nchunks; i++)
		if (g->chunk[i].cap - g->chunk[i].used >= need) {
			k = &g->chunk[i];
			break;
		}
	if (!k || k->cap - k->used < need) {
		size_t cap = k ? 2 * k->cap : ARENA_CHUNK_MIN;
		if (g->nchunks == CUBLAS_ARENA_CHUNKS) {
			fg_error(c->host, "cublas: %s: a recorded step staged more host arrays than "
				 "%d arena chunks hold; turn cuda_graphs off", op, CUBLAS_ARENA_CHUNKS);
			return -ENOMEM;
		}
		while (cap < need)
			cap *= 2;
		k = &g->chunk[g->nchunks];
		memset(k, 0, sizeof(*k));
		e = cudaHostAlloc((void **)&k->host, cap, cudaHostAllocDefault);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&k->dev, cap);
		if (e != cudaSuccess) {
			cudaFreeHost(k->host);
			k->host = NULL;
			return cublas_cuda_fail(c, op, "allocating the graph arena", e);
		}
		k->cap = cap;
		g->nchunks++;
	}
	*host = k->host + k->used;
	*dev = k->dev + k->used;
	k->used += need;
	return 0;
}

void cublas_graph_fini(struct cublas_ctx *c, struct cublas_stream *s)
{
	struct cublas_graph *g = &s->g;

	if (g->on) { /* a run stopped mid-recording */
		cudaGraph_t graph = NULL;
		if (cudaStreamEndCapture(s->s, &graph) == cudaSuccess && graph)
			cudaGraphDestroy(graph);
		(void)cudaGetLastError();
	}
	if (g->instantiated)
		fg_log(c->host, FG_LOG_DEBUG, "cublas: %llu graphs launched: %llu instantiated, "
		       "%llu updated in place", (unsigned long long)(g->instantiated + g->updated),
		       (unsigned long long)g->instantiated, (unsigned long long)g->updated);
	for (int i = 0; i < CUBLAS_GRAPH_PIECES; i++)
		if (g->exec[i])
			cudaGraphExecDestroy(g->exec[i]);
	if (g->done)
		cudaEventDestroy(g->done);
	for (int i = 0; i < g->nchunks; i++) {
		cudaFreeHost(g->chunk[i].host);
		cudaFree(g->chunk[i].dev);
	}
	memset(g, 0, sizeof(*g));
}
