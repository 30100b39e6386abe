/* plugins/compute/cpu_blas/plugin.c - the "cpu_blas" compute backend: entry
 * point, options, context.  fp32 activations on the host; fp16 weights are
 * widened on the fly (see linear.c).  Ops run synchronously (no streams). */
#define _GNU_SOURCE /* sched_getaffinity, for fgcore/fanout.h */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include <fgcore/fanout.h>
#include "plugins/compute/cpu_blas/cpu_blas.h"

/* Declared by OpenBLAS's cblas.h; repeated so other CBLAS headers work too. */
void openblas_set_num_threads(int num_threads);

#define CPU_BLAS_MAX_THREADS 1024
#define CPU_BLAS_SPLIT_MAX_THREADS 4 /* up to this, the pool splits sgemm (see init) */

static const struct fg_option cpu_blas_options[] = {
	{ .key = "threads", .type = FG_OPT_INT, .def = "0",
	  .help = "Threads for OpenBLAS and for the backend's own pool; 0 = one per CPU this process may run on.",
	  .offset = offsetof(struct cpu_blas_opts, threads), .min = 0,
	  .max = CPU_BLAS_MAX_THREADS },
	{ .key = "fused_max_m", .type = FG_OPT_INT, .def = "64",
	  .help = "linear with at most this many rows uses the fused kernels (fp16 weights: "
		  "x86-64 with AVX2; 4-bit weights: any CPU) instead of OpenBLAS; 0 = always "
		  "OpenBLAS, a huge value = always fused (results then never depend on the "
		  "batch size).",
	  .offset = offsetof(struct cpu_blas_opts, fused_max_m), .min = 0,
	  .max = INT64_MAX },
	{ .key = "isa", .type = FG_OPT_STRING, .def = "auto",
	  .help = "Vector kernels: auto (the best this CPU has), avx512, avx2 or none "
		  "(OpenBLAS and plain C only).",
	  .offset = offsetof(struct cpu_blas_opts, isa) },
	{ .key = "tile_mib", .type = FG_OPT_INT, .def = "64",
	  .help = "MiB of fp32 weights the OpenBLAS path widens at a time (its scratch); "
		  "larger tiles mean fewer OpenBLAS calls.",
	  .offset = offsetof(struct cpu_blas_opts, tile_mib), .min = 1, .max = 65536 },
	{ .key = NULL },
};

static const char *const cpu_blas_isa_names[] = { "none", "avx2", "avx512" };

/* "auto": the best this CPU runs; a named one must be supported. */
static int cpu_blas_pick_isa(const struct fg_host *host, const char *want, int *isa)
{
	if (!want || !*want || strcmp(want, "auto") == 0) {
		*isa = cpu_blas_isa_supported(CPU_BLAS_ISA_AVX512) ? CPU_BLAS_ISA_AVX512 :
		       cpu_blas_isa_supported(CPU_BLAS_ISA_AVX2) ? CPU_BLAS_ISA_AVX2 :
		       CPU_BLAS_ISA_NONE;
		return 0;
	}
	for (int i = 0; i < 3; i++) {
		if (strcmp(want, cpu_blas_isa_names[i]) != 0)
			continue;
		if (!cpu_blas_isa_supported(i)) {
			fg_error(host, "cpu_blas: isa = %s: this CPU cannot run those kernels, "
				 "use isa = auto", want);
			return -ENOTSUP;
		}
		*isa = i;
		return 0;
	}
	fg_error(host, "cpu_blas: isa = '%s' is unknown, use auto, avx512, avx2 or none", want);
	return -EINVAL;
}

int cpu_blas_buffer(struct cpu_blas_ctx *c, float **buf, size_t *len, size_t n, const char *what)
{
	void *p;

	if (n <= *len)
		return 0;
	if (n > SIZE_MAX / sizeof(float) - 16) {
		fg_error(c->host, "cpu_blas: %s buffer of %zu floats is too large", what, n);
		return -ENOMEM;
	}
	/* Round up to a whole cache line. */
	n = (n + 15) & ~(size_t)15;
	if (posix_memalign(&p, 64, n * sizeof(float))) {
		fg_error(c->host, "cpu_blas: out of memory for a %zu-byte %s buffer",
			 n * sizeof(float), what);
		return -ENOMEM;
	}
	free(*buf);
	*buf = p;
	*len = n;
	return 0;
}

int cpu_blas_scratch(struct cpu_blas_ctx *c, size_t n)
{
	size_t len = c->scratch_len;

	if (n <= c->scratch_len)
		return 0;
	for (int t = 0; t < c->threads; t++) {
		len = c->scratch_len;
		if (cpu_blas_buffer(c, &c->scratch[t], &len, n, "scratch"))
			return -ENOMEM;
	}
	c->scratch_len = len;
	return 0;
}

static void cpu_blas_fini(void *ctx)
{
	struct cpu_blas_ctx *c = ctx;

	if (!c)
		return;
	cpu_blas_pool_destroy(c->pool);
	if (c->scratch)
		for (int t = 0; t < c->threads; t++)
			free(c->scratch[t]);
	free(c->scratch);
	free(c->tile);
	free(c->ctile);
	free(c->xpack);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static int cpu_blas_init(const struct fg_host *host, const void *opts, void **ctx)
{
	const struct cpu_blas_opts *o = opts;
	struct cpu_blas_ctx *c;
	int64_t threads = o ? o->threads : 0;
	int rc;

	*ctx = NULL;
	if (threads < 0 || threads > CPU_BLAS_MAX_THREADS) {
		fg_error(host, "cpu_blas: threads = %lld is out of range, use 0..%d",
			 (long long)threads, CPU_BLAS_MAX_THREADS);
		return -EINVAL;
	}
	if (threads == 0) {
		int n = fg_cpus();

		threads = n > CPU_BLAS_MAX_THREADS ? CPU_BLAS_MAX_THREADS : n;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		fg_error(host, "cpu_blas: out of memory for the context");
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->host = host;
	c->threads = (int)threads;
	c->fused_max_m = o ? o->fused_max_m : 64;
	c->tile_bytes = (size_t)(o && o->tile_mib > 0 ? o->tile_mib : 64) << 20;
	rc = cpu_blas_pick_isa(host, o ? o->isa : NULL, &c->isa);
	if (rc < 0) {
		cpu_blas_fini(c);
		return rc;
	}
	c->scratch = calloc((size_t)threads, sizeof(*c->scratch));
	if (!c->scratch) {
		fg_error(host, "cpu_blas: out of memory for the context");
		cpu_blas_fini(c);
		return -ENOMEM;
	}
	rc = cpu_blas_pool_create(&c->pool, c->threads);
	if (rc < 0) {
		fg_error(host, "cpu_blas: cannot start %d threads: %s; lower `threads`",
			 c->threads, strerror(-rc));
		cpu_blas_fini(c);
		return rc;
	}
	/* With few cores, OpenBLAS's own threads hurt: between sgemm calls they
	 * spin in sched_yield (perf, 2 cores, prefill: ~17% of all samples on
	 * its worker) while the pool runs widening, epilogues, attention, on the
	 * same cores.  There the pool splits each sgemm into single-threaded
	 * calls on 64-column blocks of the tile (measured, 2 cores, OPT-125M
	 * prefill: +9%).  With more threads OpenBLAS keeps its own threading
	 * (unmeasured here): its partition shares packed panels between threads,
	 * and a small tile has too few column blocks to feed many threads. */
	c->blas_split = c->threads > 1 && c->threads <= CPU_BLAS_SPLIT_MAX_THREADS;
	/* Process-wide in OpenBLAS: the linear op sets it again before sgemm. */
	openblas_set_num_threads(c->blas_split ? 1 : c->threads);
	fg_log(host, FG_LOG_DEBUG, "cpu_blas: %d threads, %s kernels, fused linear up to m = %lld",
	       c->threads, cpu_blas_isa_names[c->isa], (long long)c->fused_max_m);
	*ctx = c;
	return 0;
}

static void cpu_blas_info(void *ctx, struct fg_compute_info *info)
{
	(void)ctx;
	info->act_dtype = FG_DTYPE_F32;
	info->native_codecs = NULL; /* ABI 1.0 only: `supports` says it */
}

/* The linear weights it takes: fp16, 4-bit rows, fp8 rows (compute 1.15). */
static int cpu_blas_weight(enum fg_dtype dtype)
{
	return dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_ROWS || dtype == FG_DTYPE_F8_ROWS;
}

/* fp32 activations; fp16, 4-bit or fp8 weights (fused kernels or tile by tile);
 * decode attention and kv_append also over fp16 tensors (the attention an
 * fp16 GPU backend delegates) and a 4-bit cache; the generic tier's row ops
 * and softcap on either plain type. */
static int cpu_blas_supports(void *ctx, enum fg_op op, enum fg_dtype dtype)
{
	(void)ctx;
	switch (op) {
	case FG_OP_EMBED:
	case FG_OP_EMBED_TOKENS:
		return dtype == FG_DTYPE_F16;
	case FG_OP_LAYER_NORM:
	case FG_OP_RMS_NORM:
	case FG_OP_ROPE:
	case FG_OP_ATTENTION_PREFILL:
		return dtype == FG_DTYPE_F32;
	case FG_OP_LINEAR:
	case FG_OP_LINEAR_SILU:
	case FG_OP_LINEAR_MUL:
		return cpu_blas_weight(dtype);
	case FG_OP_ATTENTION_DECODE:
	case FG_OP_ATTENTION_GQA:
	case FG_OP_ATTENTION_RING:
	case FG_OP_KV_APPEND:
		return dtype == FG_DTYPE_F32 || dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_COLS ||
		       dtype == FG_DTYPE_F8_COLS;
	case FG_OP_SAMPLE:
		return 0; /* the core samples host memory the same way */
	case FG_OP_LOGPROB:
		return dtype == FG_DTYPE_F32;
	case FG_OP_ATTENTION_CACHED:
		return 0; /* the core runs a decode op a token: the same sums */
	case FG_OP_ADD:
	case FG_OP_GATHER:
	case FG_OP_SCATTER_ADD:
	case FG_OP_ROUTE:
		return dtype == FG_DTYPE_F32 || dtype == FG_DTYPE_F16;
	case FG_OP_LINEAR_GROUPED:
		return cpu_blas_weight(dtype); /* linear per group */
	/* compute ABI 1.12: Gemma 2's pieces */
	case FG_OP_LINEAR_GELU:
		return cpu_blas_weight(dtype); /* linear and grouped */
	case FG_OP_NORM_SHIFT:
		return dtype == FG_DTYPE_F32;
	case FG_OP_ATTENTION_SOFTCAP: /* prefill (f32) and decode, every cache */
		return dtype == FG_DTYPE_F32 || dtype == FG_DTYPE_F16 || dtype == FG_DTYPE_Q4_COLS ||
		       dtype == FG_DTYPE_F8_COLS;
	case FG_OP_SOFTCAP:
		return dtype == FG_DTYPE_F32 || dtype == FG_DTYPE_F16;
	case FG_OP_EXPERTS: /* the core's composition of the generic tier is the reference */
		return 0;
	}
	return 0;
}

static const struct fg_compute_ops cpu_blas_ops = {
	.init			= cpu_blas_init,
	.fini			= cpu_blas_fini,
	.info			= cpu_blas_info,
	.embed			= cpu_blas_embed,
	.layer_norm		= cpu_blas_layer_norm,
	.linear			= cpu_blas_linear,
	.attention_prefill	= cpu_blas_attention_prefill,
	.attention_decode	= cpu_blas_attention_decode,
	.kv_append		= cpu_blas_kv_append,
	.rope			= cpu_blas_rope,
	.supports		= cpu_blas_supports,
	.timer_create		= cpu_blas_timer_create,
	.timer_destroy		= cpu_blas_timer_destroy,
	.timer_record		= cpu_blas_timer_record,
	.timer_elapsed		= cpu_blas_timer_elapsed,
	.logprob		= cpu_blas_logprob,
	.add			= cpu_blas_add,
	.route			= cpu_blas_route,
	.gather			= cpu_blas_gather,
	.scatter_add		= cpu_blas_scatter_add,
	.linear_grouped		= cpu_blas_linear_grouped,
	.softcap		= cpu_blas_softcap,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	/* 1.1: rope, supports, RMS norm, SiLU, mul, GQA; 1.2: timers; 1.6: logprob;
	 * 1.10: the generic tier; 1.11: windows; 1.12: GELU, gamma shift, softcaps;
	 * 1.15: fp8 weights */
	.abi_version	= FG_COMPUTE_ABI_VERSION,
	.kind		= FG_PLUGIN_COMPUTE,
	.name		= "cpu_blas",
	.description	= "CPU backend: OpenBLAS sgemm on fp32 activations, fp16 weights widened on the fly",
	.probe		= NULL,
	.ops		= &cpu_blas_ops,
	.options	= cpu_blas_options,
	.opts_size	= sizeof(struct cpu_blas_opts),
	.capabilities	= NULL,
};
