/* core/optimizer/profile.c - `fgcore profile`: measure transfers and compute
 * through the configured plugins, the way the engine uses them.
 *
 * Every rate is the mean over repetitions lasting at least min_seconds, after
 * one untimed warm-up run.  Device work is synchronized before a clock is read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fgcore/q4.h>
#include "core/backend/backend.h"
#include "core/config/config.h"
#include "core/optimizer/profile.h"
#include "core/util/clock.h"
#include "core/tier/tier.h"
#include "core/util/error.h"

#define MiB (1024.0 * 1024.0)

struct prof {
	const struct fg_profile_params *pp;
	struct fg_backend be, host_be;
	int host_be_open;
	struct fg_tier tier[3]; /* compute, host, disk */
	int open[3];
	double min_s;
};

enum { T_COMPUTE, T_HOST, T_DISK };

static void say(const struct prof *p, const char *what, double v, const char *unit)
{
	if (p->pp->log)
		fprintf(p->pp->log, "profile: %-58s %10.3f %s\n", what, v, unit);
}

/* Mean seconds of fn(arg), which must finish its work before returning. */
static int timed(struct prof *p, int (*fn)(struct prof *, void *), void *arg, double *secs)
{
	int rc = fn(p, arg); /* warm-up */
	if (rc)
		return rc;
	double t0 = fg_now(), t;
	int64_t n = 0;
	do {
		if ((rc = fn(p, arg)))
			return rc;
		n++;
		t = fg_now() - t0;
	} while (t < p->min_s || n < 2);
	*secs = t / (double)n;
	return 0;
}

static int open_tier(struct prof *p, const struct fg_config *c, int i, const char *role)
{
	struct fg_plugin_handle ph;
	char section[32];
	void *opts;
	int rc;

	snprintf(section, sizeof(section), "tier.%s", role);
	if ((rc = fg_config_open_plugin(c, section, FG_PLUGIN_STORAGE, &ph, &opts)))
		return rc;
	if ((rc = fg_tier_open(&p->tier[i], role, &ph, opts, fg_config_size(c, section, "capacity"))))
		return rc;
	p->open[i] = 1;
	return 0;
}

/* ---- transfers -------------------------------------------------------------- */

struct copy_arg {
	void *dst;
	const void *src;
	size_t len;
};

static int do_copy(struct prof *p, void *arg)
{
	struct copy_arg *a = arg;
	int rc = fg_backend_copy(&p->be, NULL, a->dst, a->src, a->len);
	return rc ? rc : fg_backend_stream_sync(&p->be, NULL);
}

static int copy_rate(struct prof *p, void *dst, const void *src, size_t len, double *gbps)
{
	struct copy_arg a = { dst, src, len };
	double s;
	int rc = timed(p, do_copy, &a, &s);
	if (!rc)
		*gbps = (double)len / s / 1e9;
	return rc;
}

static int transfers(struct prof *p, struct fg_hardware *hw)
{
	uint64_t len = p->pp->copy_bytes ? p->pp->copy_bytes : 256ull << 20;
	struct fg_region cr = { 0 }, hr = { 0 };
	void *pageable = NULL;
	int rc;

	/* Stay well inside both tiers. */
	uint64_t lim = p->tier[T_COMPUTE].capacity / 4;
	if (p->tier[T_HOST].capacity / 4 < lim)
		lim = p->tier[T_HOST].capacity / 4;
	len = len > lim ? lim : len;
	len &= ~(uint64_t)4095;
	if (len < 4096) {
		FG_ERR("profile: the compute and host tiers have no room for a transfer test");
		return -ENOSPC;
	}
	if ((rc = fg_tier_alloc(&p->tier[T_COMPUTE], len, &cr)) ||
	    (rc = fg_tier_alloc(&p->tier[T_HOST], len, &hr)))
		goto out;
	memset(hr.addr, 1, len);
	if ((rc = copy_rate(p, cr.addr, hr.addr, len, &hw->ctog_bdw)))
		goto out;
	say(p, "host -> compute tier (page-locked)", hw->ctog_bdw, "GB/s");
	if ((rc = copy_rate(p, hr.addr, cr.addr, len, &hw->gtoc_bdw)))
		goto out;
	say(p, "compute tier -> host (page-locked)", hw->gtoc_bdw, "GB/s");
	pageable = malloc(len);
	if (!pageable) {
		FG_ERR("profile: out of memory for a %llu-byte pageable buffer", (unsigned long long)len);
		rc = -ENOMEM;
		goto out;
	}
	memset(pageable, 1, len);
	if ((rc = copy_rate(p, cr.addr, pageable, len, &hw->ctog_bdw_pageable)) ||
	    (rc = copy_rate(p, pageable, cr.addr, len, &hw->gtoc_bdw_pageable)))
		goto out;
	say(p, "host -> compute tier (pageable)", hw->ctog_bdw_pageable, "GB/s");
	say(p, "compute tier -> host (pageable)", hw->gtoc_bdw_pageable, "GB/s");
out:
	free(pageable);
	if (cr.size)
		fg_tier_free(&p->tier[T_COMPUTE], &cr);
	if (hr.size)
		fg_tier_free(&p->tier[T_HOST], &hr);
	return rc;
}

/* Chunks of 8 MiB, 8 in flight, each into its own part of a 64 MiB buffer. */
enum { CHUNK = 8 << 20, DEPTH = 8 };

static int disk_pass(struct prof *p, struct fg_region *r, char *buf, uint64_t len, int write,
		     double *secs)
{
	struct fg_tier *t = &p->tier[T_DISK];
	struct fg_io ios[DEPTH], *done[DEPTH];
	int busy[DEPTH] = { 0 };
	uint64_t next = 0;
	int inflight = 0, rc = 0;
	double t0 = fg_now();

	memset(ios, 0, sizeof(ios));
	while (next < len || inflight) {
		while (!rc && next < len && inflight < DEPTH) {
			int i = 0;
			while (busy[i])
				i++;
			uint64_t n = len - next < CHUNK ? len - next : CHUNK;
			struct fg_io *io = &ios[i];
			*io = (struct fg_io){ .op = write ? FG_IO_WRITE : FG_IO_READ, .region = r,
					      .offset = next, .buf = buf + (size_t)i * CHUNK,
					      .len = (size_t)n, .user = &busy[i] };
			if ((rc = fg_tier_submit(t, &io, 1)))
				break;
			busy[i] = 1;
			inflight++;
			next += n;
		}
		if (!inflight)
			break;
		int got = fg_tier_reap(t, done, 1, DEPTH);
		if (got < 0) {
			rc = rc ? rc : got;
			break; /* the tier is broken: nothing more will complete */
		}
		for (int k = 0; k < got; k++) {
			if (done[k]->result < 0 && !rc)
				rc = done[k]->result;
			*(int *)done[k]->user = 0;
			inflight--;
		}
	}
	*secs = fg_now() - t0;
	return rc;
}

static int disk(struct prof *p, struct fg_hardware *hw)
{
	uint64_t len = p->pp->disk_bytes ? p->pp->disk_bytes : 1ull << 30;
	struct fg_region r = { 0 };
	void *buf = NULL;
	double ws = 0, rs = 0;
	int rc;

	if (p->tier[T_DISK].capacity / 2 < len)
		len = p->tier[T_DISK].capacity / 2;
	len &= ~(uint64_t)(CHUNK - 1);
	if (len < CHUNK) {
		FG_ERR("profile: the disk tier has no room for an 8 MiB test file");
		return -ENOSPC;
	}
	/* One buffer serves every chunk: the disk, not memory, is measured. */
	if (posix_memalign(&buf, 4096, (size_t)CHUNK * DEPTH)) {
		FG_ERR("profile: out of memory for the disk test buffer");
		return -ENOMEM;
	}
	memset(buf, 7, (size_t)CHUNK * DEPTH);
	if ((rc = fg_tier_alloc(&p->tier[T_DISK], len, &r)) ||
	    (rc = disk_pass(p, &r, buf, len, 1, &ws)) || (rc = disk_pass(p, &r, buf, len, 0, &rs)))
		goto out;
	hw->ctod_bdw = (double)len / ws / 1e9;
	hw->dtoc_bdw = (double)len / rs / 1e9;
	say(p, "host -> disk tier", hw->ctod_bdw, "GB/s");
	say(p, "disk tier -> host (may include the page cache without O_DIRECT)", hw->dtoc_bdw,
	    "GB/s");
out:
	if (r.size)
		fg_tier_free(&p->tier[T_DISK], &r);
	free(buf);
	return rc;
}

/* ---- compute ------------------------------------------------------------------ */

/* A tensor in compute-tier memory, zero-filled through a host buffer. */
static int ctensor(struct prof *p, struct fg_region *r, enum fg_dtype dt, int64_t rows,
		   int64_t cols, uint64_t bytes, struct fg_tensor *t)
{
	int rc;
	if (!bytes)
		bytes = (uint64_t)(rows * cols) * fg_dtype_size(dt);
	if ((rc = fg_tier_alloc(&p->tier[T_COMPUTE], bytes, r)))
		return rc;
	void *z = calloc(1, (size_t)bytes);
	if (!z) {
		FG_ERR("profile: out of memory");
		return -ENOMEM;
	}
	rc = fg_backend_copy(&p->be, NULL, r->addr, z, (size_t)bytes);
	if (!rc)
		rc = fg_backend_stream_sync(&p->be, NULL);
	free(z);
	*t = (struct fg_tensor){ .data = r->addr, .dtype = dt, .rows = rows, .cols = cols, .ld = cols };
	return rc;
}

/* Distinct weight matrices a linear measurement cycles through: together
 * more than any cache (an H200's L2 is 50 MB), so that a decode-shaped
 * product streams its weights from memory as the engine's layers do. */
#define LIN_COLD_BYTES (256u << 20)
#define LIN_MAX_W 64

struct lin_arg {
	struct fg_backend *be;
	struct fg_linear_args a;
	struct fg_tensor w[LIN_MAX_W];
	int nw, next;
};

static int do_linear(struct prof *p, void *arg)
{
	struct lin_arg *l = arg;
	l->a.w = l->w[l->next++ % l->nw];
	int rc = l->be->ops->linear(l->be->ctx, NULL, &l->a);
	(void)p;
	return rc ? rc : fg_backend_stream_sync(l->be, NULL);
}

static void free_all(struct prof *p, struct fg_region *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r[i].size)
			fg_tier_free(&p->tier[T_COMPUTE], &r[i]);
}

/* Seconds of out[m, n] = x[m, k] . w[n, k]^T + bias with w in `wdt`: the
 * engine's layers all add a bias, and on a CPU its epilogue is not free. */
static int linear_time(struct prof *p, int64_t m, int64_t k, int64_t n, enum fg_dtype wdt,
		       double *secs)
{
	enum fg_dtype act = p->be.info.act_dtype;
	struct fg_region r[3 + LIN_MAX_W] = { 0 };
	struct lin_arg l = { .be = &p->be };
	uint64_t wbytes = wdt == FG_DTYPE_Q4_ROWS ? fg_q4_bytes((uint64_t)n, (uint64_t)k, 0)
						  : (uint64_t)(n * k) * fg_dtype_size(wdt);
	int rc;

	l.nw = (int)(LIN_COLD_BYTES / wbytes) + 1;
	l.nw = l.nw > LIN_MAX_W ? LIN_MAX_W : l.nw;
	if (!(rc = ctensor(p, &r[0], act, m, k, 0, &l.a.x)) &&
	    !(rc = ctensor(p, &r[1], act, m, n, 0, &l.a.out)) &&
	    !(rc = ctensor(p, &r[2], FG_DTYPE_F16, 1, n, 0, &l.a.bias)))
		for (int i = 0; i < l.nw && !rc; i++)
			rc = ctensor(p, &r[3 + i], wdt, n, k, wbytes, &l.w[i]);
	if (!rc)
		rc = timed(p, do_linear, &l, secs);
	free_all(p, r, 3 + l.nw);
	return rc;
}

struct attn_arg {
	struct fg_backend *be;
	struct fg_attention_args a;
	int decode;
};

static int do_attention(struct prof *p, void *arg)
{
	struct attn_arg *t = arg;
	int rc = t->decode ? t->be->ops->attention_decode(t->be->ctx, NULL, &t->a)
			   : t->be->ops->attention_prefill(t->be->ctx, NULL, &t->a);
	(void)p;
	return rc ? rc : fg_backend_stream_sync(t->be, NULL);
}

static int64_t heads_of(int64_t hidden)
{
	return hidden % 128 == 0 ? hidden / 128 : hidden % 64 == 0 ? hidden / 64 : 1;
}

/* Seconds of t's decode attention over a cache of `cdt` (kv_bytes each for K
 * and V; 0: plain elements) in compute-tier memory. */
static int decode_attention_time(struct prof *p, struct attn_arg *t, enum fg_dtype cdt,
				 uint64_t kv_bytes, double *secs)
{
	enum fg_dtype act = p->be.info.act_dtype;
	int64_t b = t->a.batch, h = t->a.heads * t->a.head_dim, rows = b * t->a.cache_stride;
	struct fg_region r[4] = { 0 };
	int rc;

	if (!(rc = ctensor(p, &r[0], act, b, h, 0, &t->a.q)) &&
	    !(rc = ctensor(p, &r[1], cdt, rows, h, kv_bytes, &t->a.k)) &&
	    !(rc = ctensor(p, &r[2], cdt, rows, h, kv_bytes, &t->a.v)) &&
	    !(rc = ctensor(p, &r[3], act, b, h, 0, &t->a.out)))
		rc = timed(p, do_attention, t, secs);
	free_all(p, r, 4);
	return rc;
}

static int compute(struct prof *p, struct fg_hardware *hw)
{
	int64_t h = p->pp->hidden > 0 ? p->pp->hidden : 4096;
	int64_t m = p->pp->prefill_rows > 0 ? p->pp->prefill_rows : 2048;
	int64_t s = p->pp->seq > 0 ? p->pp->seq : 512;
	enum fg_dtype act = p->be.info.act_dtype;
	double secs;
	int rc;

	hw->act_bytes = (int)fg_dtype_size(act);
	if ((rc = linear_time(p, m, h, h, FG_DTYPE_F16, &secs)))
		return rc;
	hw->mm_flops_prefill = 2.0 * (double)m * (double)h * (double)h / secs / 1e12;
	say(p, "matrix product, prefill shape (TFLOP/s)", hw->mm_flops_prefill, "TFLOP/s");
	if ((rc = linear_time(p, FG_HW_DECODE_ROWS, h, h, FG_DTYPE_F16, &secs)))
		return rc;
	hw->mm_flops_decode = 2.0 * FG_HW_DECODE_ROWS * (double)h * (double)h / secs / 1e12;
	say(p, "matrix product, 64 rows (TFLOP/s)", hw->mm_flops_decode, "TFLOP/s");
	if ((rc = linear_time(p, 1, h, h, FG_DTYPE_F16, &secs)))
		return rc;
	hw->mm_gemv_bdw = 2.0 * (double)h * (double)h / secs / 1e9;
	say(p, "matrix-vector product, 1 row (GB/s of fp16 weights)", hw->mm_gemv_bdw, "GB/s");
	if (fg_backend_supports(&p->be, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS)) {
		if ((rc = linear_time(p, 1, h, h, FG_DTYPE_Q4_ROWS, &secs)))
			return rc;
		hw->q4_decode_bdw = (double)fg_q4_bytes((uint64_t)h, (uint64_t)h, 0) / secs / 1e9;
		say(p, "int4 matrix-vector product (GB/s of packed weights)", hw->q4_decode_bdw, "GB/s");
	}

	/* Attention: one sequence of s tokens; decode: 16 sequences over s cached rows. */
	struct fg_region r[4] = { 0 };
	struct attn_arg t = { .be = &p->be };
	int64_t nh = heads_of(h), b = 16;
	int32_t pad[16] = { 0 };
	t.a = (struct fg_attention_args){ .batch = 1, .seq = s, .heads = nh, .head_dim = h / nh,
					  .scale = 0.1f, .pad = pad };
	if (!(rc = ctensor(p, &r[0], act, s, h, 0, &t.a.q)) &&
	    !(rc = ctensor(p, &r[1], act, s, h, 0, &t.a.k)) &&
	    !(rc = ctensor(p, &r[2], act, s, h, 0, &t.a.v)) &&
	    !(rc = ctensor(p, &r[3], act, s, h, 0, &t.a.out)))
		rc = timed(p, do_attention, &t, &secs);
	free_all(p, r, 4);
	if (rc)
		return rc;
	hw->attn_flops = 4.0 * (double)s * (double)s * (double)h / secs / 1e12;
	say(p, "prefill attention (TFLOP/s, 4 * seq^2 * hidden)", hw->attn_flops, "TFLOP/s");

	t.decode = 1;
	t.a = (struct fg_attention_args){ .batch = b, .seq = 1, .len = s, .cache_stride = s,
					  .heads = nh, .head_dim = h / nh, .scale = 0.1f, .pad = pad };
	if ((rc = decode_attention_time(p, &t, act, 0, &secs)))
		return rc;
	hw->attn_decode_bdw = 2.0 * (double)(b * s * h) * fg_dtype_size(act) / secs / 1e9;
	say(p, "decode attention (GB/s of cache read)", hw->attn_decode_bdw, "GB/s");
	if (!hw->q4_decode_bdw)
		return 0;
	/* The same over a 4-bit cache (compress_cache): groups along the head dimension. */
	uint64_t kvq = fg_q4_bytes((uint64_t)(b * s), (uint64_t)h, 1);
	if ((rc = decode_attention_time(p, &t, FG_DTYPE_Q4_COLS, kvq, &secs)))
		return rc;
	hw->attn_decode_q4_bdw = 2.0 * (double)kvq / secs / 1e9;
	say(p, "decode attention, 4-bit cache (GB/s of packed cache read)", hw->attn_decode_q4_bdw,
	    "GB/s");
	return 0;
}

/* Host attention as cpu_cache_compute runs it: the host backend over host memory. */
static int host_attention(struct prof *p, struct fg_hardware *hw)
{
	struct fg_backend *hb = &p->be;
	int64_t h = p->pp->hidden > 0 ? p->pp->hidden : 4096, s = p->pp->seq > 0 ? p->pp->seq : 512;
	int64_t b = 16, nh = heads_of(h);
	int32_t pad[16] = { 0 };
	void *mem[4] = { 0 };
	int rc;

	if (!hw->compute_host_memory) {
		struct fg_plugin_handle ph;
		void *opts;
		if ((rc = fg_plugin_load("cpu_blas", FG_PLUGIN_COMPUTE, &ph)))
			return rc;
		opts = fg_plugin_opts_new(ph.plugin);
		if (!opts && ph.plugin->opts_size) {
			fg_plugin_close(&ph);
			return -ENOMEM;
		}
		if ((rc = fg_backend_open(&p->host_be, &ph, opts)))
			return rc;
		p->host_be_open = 1;
		hb = &p->host_be;
	}
	enum fg_dtype act = hb->info.act_dtype;
	size_t row = (size_t)h * fg_dtype_size(act);
	size_t sz[4] = { (size_t)b * row, (size_t)(b * s) * row, (size_t)(b * s) * row, (size_t)b * row };
	for (int i = 0; i < 4; i++) {
		if (!(mem[i] = malloc(sz[i]))) {
			rc = -ENOMEM;
			FG_ERR("profile: out of memory for host attention buffers");
			goto out;
		}
		/* Written, so that real pages (not the shared zero page) are read;
		 * 0x3c bytes are small numbers in fp16 and fp32 alike. */
		memset(mem[i], 0x3c, sz[i]);
	}
	struct attn_arg t = { .be = hb, .decode = 1 };
	t.a = (struct fg_attention_args){
		.q = { mem[0], act, b, h, h }, .k = { mem[1], act, b * s, h, h },
		.v = { mem[2], act, b * s, h, h }, .out = { mem[3], act, b, h, h },
		.batch = b, .seq = 1, .len = s, .cache_stride = s, .heads = nh, .head_dim = h / nh,
		.scale = 0.1f, .pad = pad,
	};
	double secs;
	if ((rc = timed(p, do_attention, &t, &secs)))
		goto out;
	hw->cpu_attn_bdw = 2.0 * (double)sz[1] / secs / 1e9;
	say(p, "host decode attention (GB/s of cache read)", hw->cpu_attn_bdw, "GB/s");
	/* The same over a 4-bit cache, in the first bytes of the K and V buffers
	 * (a 4-bit cache is smaller than any other); 0x3c bytes are finite groups. */
	uint64_t kvq = fg_q4_bytes((uint64_t)(b * s), (uint64_t)h, 1);
	if (kvq <= sz[1]) {
		t.a.k = (struct fg_tensor){ mem[1], FG_DTYPE_Q4_COLS, b * s, h, h };
		t.a.v = (struct fg_tensor){ mem[2], FG_DTYPE_Q4_COLS, b * s, h, h };
		if ((rc = timed(p, do_attention, &t, &secs)))
			goto out;
		hw->cpu_attn_q4_bdw = 2.0 * (double)kvq / secs / 1e9;
		say(p, "host decode attention, 4-bit cache (GB/s of packed cache read)",
		    hw->cpu_attn_q4_bdw, "GB/s");
	}
out:
	for (int i = 0; i < 4; i++)
		free(mem[i]);
	return rc;
}

int fg_profile_run(const struct fg_config *c, const struct fg_profile_params *pp,
		   struct fg_hardware *hw)
{
	struct prof *p = calloc(1, sizeof(*p));
	struct fg_plugin_handle ph;
	void *opts;
	int rc;

	memset(hw, 0, sizeof(*hw));
	if (!p) {
		FG_ERR("profile: out of memory");
		return -ENOMEM;
	}
	p->pp = pp;
	p->min_s = pp->min_seconds > 0 ? pp->min_seconds : 0.25;
	if ((rc = fg_config_open_plugin(c, "compute", FG_PLUGIN_COMPUTE, &ph, &opts)) ||
	    (rc = fg_backend_open(&p->be, &ph, opts)))
		goto out;
	if ((rc = open_tier(p, c, T_COMPUTE, "compute")) || (rc = open_tier(p, c, T_HOST, "host")))
		goto out;
	hw->gpu_mem = p->tier[T_COMPUTE].capacity;
	hw->cpu_mem = p->tier[T_HOST].capacity;
	hw->compute_host_memory = !!(p->tier[T_COMPUTE].info.flags & FG_STORAGE_HOST_MEMORY);
	if (hw->compute_host_memory && hw->gpu_mem == hw->cpu_mem) {
		/* Both tiers report all of the RAM: give each half rather than count it twice. */
		hw->gpu_mem /= 2;
		hw->cpu_mem /= 2;
		if (pp->log)
			fprintf(pp->log, "profile: the compute and host tiers share the RAM: half each (set [tier.compute] and [tier.host] capacity to divide it otherwise)\n");
	}
	if ((rc = transfers(p, hw)) || (rc = compute(p, hw)) || (rc = host_attention(p, hw)))
		goto out;
	if (!pp->skip_disk) {
		if ((rc = open_tier(p, c, T_DISK, "disk")))
			goto out;
		hw->disk_mem = p->tier[T_DISK].capacity;
		rc = disk(p, hw);
	}
out:
	for (int i = 0; i < 3; i++)
		if (p->open[i])
			fg_tier_close(&p->tier[i]);
	if (p->host_be_open)
		fg_backend_close(&p->host_be);
	if (p->be.ops)
		fg_backend_close(&p->be);
	free(p);
	return rc;
}
