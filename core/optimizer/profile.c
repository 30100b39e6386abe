/* core/optimizer/profile.c - `fgcore profile`: measure transfers and compute
 * through the configured plugins, the way the engine uses them.
 *
 * Every rate is the mean over repetitions lasting at least min_seconds, after
 * one untimed warm-up run.  Device work is synchronized before a clock is read. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fgcore/half.h>
#include <fgcore/f8.h>
#include <fgcore/q4.h>
#include "core/arch/arch.h"
#include "core/arch/block.h"
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

/* A compute-tier and a host-tier region of *len bytes for copies between
 * them (the host one written): copy_bytes (256 MiB) at most, and at most a
 * 1/share of either tier, to stay well inside both; *len 0, and nothing
 * allocated, when that leaves less than 4 KiB. */
static int copy_regions(struct prof *p, uint64_t share, struct fg_region *cr,
			struct fg_region *hr, uint64_t *len)
{
	uint64_t n = p->pp->copy_bytes ? p->pp->copy_bytes : 256ull << 20;
	uint64_t lim = p->tier[T_COMPUTE].capacity / share;
	int rc;

	if (p->tier[T_HOST].capacity / share < lim)
		lim = p->tier[T_HOST].capacity / share;
	n = (n > lim ? lim : n) & ~(uint64_t)4095;
	*len = n < 4096 ? 0 : n;
	if (!*len)
		return 0;
	if ((rc = fg_tier_alloc(&p->tier[T_COMPUTE], n, cr)) ||
	    (rc = fg_tier_alloc(&p->tier[T_HOST], n, hr)))
		return rc;
	memset(hr->addr, 1, n);
	return 0;
}

static void copy_regions_free(struct prof *p, struct fg_region *cr, struct fg_region *hr)
{
	if (cr->size)
		fg_tier_free(&p->tier[T_COMPUTE], cr);
	if (hr->size)
		fg_tier_free(&p->tier[T_HOST], hr);
}

static int transfers(struct prof *p, struct fg_hardware *hw)
{
	struct fg_region cr = { 0 }, hr = { 0 };
	void *pageable = NULL;
	uint64_t len;
	int rc;

	if ((rc = copy_regions(p, 4, &cr, &hr, &len)))
		goto out;
	if (!len) {
		FG_ERR("profile: the compute and host tiers have no room for a transfer test");
		return -ENOSPC;
	}
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
	copy_regions_free(p, &cr, &hr);
	return rc;
}

/* The file's passes: chunks of 8 MiB, 8 in flight, each into its own part of
 * a 64 MiB buffer. */
enum { CHUNK = 8 << 20, DEPTH = 8 };

/* One pass over the file's first len bytes in requests of `chunk` bytes (the
 * tier cuts each into its request_size pieces), `depth` <= DEPTH of them in
 * flight, request i of those in flight into buf + i * chunk. */
static int disk_pass(struct prof *p, struct fg_region *r, char *buf, uint64_t len,
		     uint64_t chunk, int depth, int write, double *secs)
{
	struct fg_tier *t = &p->tier[T_DISK];
	struct fg_io ios[DEPTH], *done[DEPTH];
	int busy[DEPTH] = { 0 };
	uint64_t next = 0;
	int inflight = 0, rc = 0;
	double t0 = fg_now();

	memset(ios, 0, sizeof(ios));
	while (next < len || inflight) {
		while (!rc && next < len && inflight < depth) {
			int i = 0;
			while (busy[i])
				i++;
			uint64_t n = len - next < chunk ? len - next : chunk;
			struct fg_io *io = &ios[i];
			*io = (struct fg_io){ .op = write ? FG_IO_WRITE : FG_IO_READ, .region = r,
					      .offset = next, .buf = buf + (size_t)i * chunk,
					      .len = (size_t)n, .user = &busy[i] };
			if ((rc = fg_tier_submit(t, &io, 1)))
				break;
			busy[i] = 1;
			inflight++;
			next += n;
		}
		if (!inflight)
			break;
		int got = fg_tier_reap(t, done, 1, depth);
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
	struct fg_region r = { 0 }, br = { 0 };
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
	    (rc = disk_pass(p, &r, buf, len, CHUNK, DEPTH, 1, &ws)))
		goto out;
	hw->ctod_bdw = (double)len / ws / 1e9;
	say(p, "host -> disk tier", hw->ctod_bdw, "GB/s");
	/* A burst at most a quarter of the file, in 4 KiB blocks, read into
	 * host-tier memory as the engine's bounce buffers are. */
	uint64_t burst = p->pp->disk_burst < len / 4 ? p->pp->disk_burst : len / 4;
	burst &= ~(uint64_t)4095;
	if (burst) {
		uint64_t span = len / burst * burst; /* whole bursts of the file */
		/* Reads as the engine issues units' disk-tier weights: a burst at a
		 * time, the next one issued before the current one is waited for
		 * (the mover reads the next unit's while the current unit's are
		 * reaped).  Two passes, the second timed: the engine reads the same
		 * weights again every decode step, and a virtual disk can serve a
		 * second read from its host's cache. */
		if ((rc = fg_tier_alloc(&p->tier[T_HOST], 2 * burst, &br)) ||
		    (rc = disk_pass(p, &r, br.addr, span, burst, 2, 0, &rs)) ||
		    (rc = disk_pass(p, &r, br.addr, span, burst, 2, 0, &rs)))
			goto out;
		hw->dtoc_bdw = (double)span / rs / 1e9;
		if (p->pp->log)
			fprintf(p->pp->log, "profile: disk tier -> host in reads of %.1f MiB, the next one issued before each is waited for (a layer's disk share), the file's second pass\n",
				(double)burst / MiB);
	} else {
		if ((rc = disk_pass(p, &r, buf, len, CHUNK, DEPTH, 0, &rs)))
			goto out;
		hw->dtoc_bdw = (double)len / rs / 1e9;
	}
	say(p, "disk tier -> host (may include the page cache without O_DIRECT)", hw->dtoc_bdw,
	    "GB/s");
out:
	if (br.size)
		fg_tier_free(&p->tier[T_HOST], &br);
	if (r.size)
		fg_tier_free(&p->tier[T_DISK], &r);
	free(buf);
	return rc;
}

/* ---- compute ------------------------------------------------------------------ */

/* What the measurements run: one layer's linear weights [n, k] and the
 * attention shapes of the configured model, or a hidden x hidden matrix and
 * hidden / 128 heads without one. */
struct shapes {
	int64_t k[16], n[16];
	int nlin;
	int64_t heads, kv_heads, head_dim;
	int64_t prefill_rows; /* rows of the prefill-shaped products */
	int64_t batch;        /* decode rows; sequences of every attention measurement */
	int64_t prefill_batch; /* sequences of the prefill attention */
	int64_t seq;          /* prompt length */
	int64_t len;          /* cache rows a decode step reads (the average over a run) */
	int64_t total;        /* cache rows per sequence (prompt + generated) */
};

static int64_t heads_of(int64_t hidden)
{
	return hidden % 128 == 0 ? hidden / 128 : hidden % 64 == 0 ? hidden / 64 : 1;
}

static void shapes_of(const struct fg_profile_params *pp, struct shapes *sh)
{
	const struct fg_model_config *c = pp->model;
	int64_t h = pp->hidden > 0 ? pp->hidden : 4096;

	memset(sh, 0, sizeof(*sh));
	sh->batch = pp->batch > 0 ? pp->batch : 16;
	sh->seq = pp->seq > 0 ? pp->seq : 512;
	sh->len = sh->seq + (pp->gen_len > 1 ? pp->gen_len / 2 : 0);
	sh->total = sh->seq + (pp->gen_len > 0 ? pp->gen_len : 0);
	if (!c) {
		sh->k[0] = sh->n[0] = h;
		sh->nlin = 1;
		sh->heads = sh->kv_heads = heads_of(h);
		sh->head_dim = h / sh->heads;
		sh->prefill_rows = pp->prefill_rows > 0 ? pp->prefill_rows : 2048;
		sh->prefill_batch = 1;
		return;
	}
	const struct fg_arch *a = c->arch;
	for (int i = 0; i < a->nlayer && sh->nlin < 16; i++) {
		const struct fg_tensor_def *d = &a->layer[i];
		if ((d->flags & FG_TD_LINEAR) && fg_arch_present(c, d)) {
			sh->k[sh->nlin] = fg_dim_value(c, d->cols);
			sh->n[sh->nlin++] = fg_dim_value(c, d->rows);
		}
	}
	sh->heads = c->heads;
	sh->kv_heads = c->kv_heads;
	sh->head_dim = c->head_dim;
	/* The engine's prefill products have batch x prompt rows; past a few
	 * thousand the rate no longer grows, and the buffers would. */
	int64_t rows = sh->batch * sh->seq;
	sh->prefill_rows = pp->prefill_rows > 0 ? pp->prefill_rows : rows < 8192 ? rows : 8192;
	sh->prefill_batch = sh->batch < 64 ? sh->batch : 64;
}

static struct fg_tensor view(void *addr, enum fg_dtype dt, int64_t rows, int64_t cols)
{
	return (struct fg_tensor){ .data = addr, .dtype = dt, .rows = rows, .cols = cols, .ld = cols };
}

/* Random values in [-0.1, 0.1) for plain fp16 and fp32 tensors (zeros draw
 * less power than the engine's real or dummy weights, and a GPU holding
 * its clocks on zeros runs products faster than it does on data); other
 * types stay zero (a 4-bit tensor's scales must stay finite).  One 1 MiB
 * block of them, repeated: a layer of OPT-175B is gigabytes. */
#define FILL_BLOCK (1u << 20)

static void fill_random(void *buf, enum fg_dtype dt, uint64_t bytes)
{
	static uint16_t h[FILL_BLOCK / 2];
	static float f[FILL_BLOCK / 4];
	static int made;
	const void *src = dt == FG_DTYPE_F16 ? (const void *)h : dt == FG_DTYPE_F32 ? (const void *)f : NULL;

	if (!src)
		return;
	if (!made) {
		uint64_t x = 0x9e3779b97f4a7c15ull;
		for (size_t i = 0; i < FILL_BLOCK / 2; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			float v = (float)(x >> 40) * 0x1.0p-24f * 0.2f - 0.1f;
			h[i] = fg_float_to_half(v);
			if (i < FILL_BLOCK / 4)
				f[i] = v;
		}
		made = 1;
	}
	for (uint64_t at = 0; at < bytes; at += FILL_BLOCK)
		memcpy((char *)buf + at, src, bytes - at < FILL_BLOCK ? (size_t)(bytes - at) : FILL_BLOCK);
}

/* A tensor in compute-tier memory, filled through a host buffer. */
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
	fill_random(z, dt, bytes);
	rc = fg_backend_copy(&p->be, NULL, r->addr, z, (size_t)bytes);
	if (!rc)
		rc = fg_backend_stream_sync(&p->be, NULL);
	free(z);
	*t = view(r->addr, dt, rows, cols);
	return rc;
}

/* Copies of the layer's weights a linear measurement cycles through: together
 * more than any cache (an H200's L2 is 50 MB), so that a decode-shaped
 * product streams its weights from memory as the engine's layers do. */
#define LIN_COLD_BYTES (256u << 20)
#define LIN_MAX_W 96

struct lin_arg {
	struct fg_backend *be;
	const struct shapes *sh;
	struct fg_tensor x, out, bias, w[LIN_MAX_W];
	int64_t m;
	int nw;
};

/* One pass over every weight, synchronized once at the end as the engine's
 * stream is: no per-product launch and wait is timed. */
static int do_linear(struct prof *p, void *arg)
{
	struct lin_arg *l = arg;
	int rc = 0;
	(void)p;
	for (int i = 0; i < l->nw && !rc; i++) {
		int j = i % l->sh->nlin;
		struct fg_linear_args a = {
			.x = view(l->x.data, l->x.dtype, l->m, l->sh->k[j]),
			.w = l->w[i],
			.bias = view(l->bias.data, l->bias.dtype, 1, l->sh->n[j]),
			.out = view(l->out.data, l->out.dtype, l->m, l->sh->n[j]),
		};
		rc = l->be->ops->linear(l->be->ctx, NULL, &a);
	}
	return rc ? rc : fg_backend_stream_sync(l->be, NULL);
}

static void free_all(struct prof *p, struct fg_region *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r[i].size)
			fg_tier_free(&p->tier[T_COMPUTE], &r[i]);
}

/* Seconds of one layer's products out[m, n] = x[m, k] . w[n, k]^T + bias with
 * w in `wdt` (the engine's layers add a bias, and on a CPU its epilogue is not
 * free), and the bytes of those weights. */
static int linear_time(struct prof *p, const struct shapes *sh, int64_t m, enum fg_dtype wdt,
		       double *secs, double *wbytes_out)
{
	enum fg_dtype act = p->be.info.act_dtype;
	struct fg_region r[3 + LIN_MAX_W] = { 0 };
	struct lin_arg l = { .be = &p->be, .sh = sh, .m = m };
	uint64_t wb[16], layer = 0;
	int64_t kmax = 0, nmax = 0;
	int rc;

	for (int j = 0; j < sh->nlin; j++) {
		wb[j] = wdt == FG_DTYPE_Q4_ROWS ? fg_q4_bytes((uint64_t)sh->n[j], (uint64_t)sh->k[j], 0)
			: wdt == FG_DTYPE_F8_ROWS ? fg_f8_bytes((uint64_t)sh->n[j], (uint64_t)sh->k[j])
						  : (uint64_t)(sh->n[j] * sh->k[j]) * fg_dtype_size(wdt);
		layer += wb[j];
		kmax = sh->k[j] > kmax ? sh->k[j] : kmax;
		nmax = sh->n[j] > nmax ? sh->n[j] : nmax;
	}
	int copies = (int)(LIN_COLD_BYTES / layer) + 1;
	if (copies * sh->nlin > LIN_MAX_W)
		copies = LIN_MAX_W / sh->nlin;
	l.nw = copies * sh->nlin;
	if (!(rc = ctensor(p, &r[0], act, m, kmax, 0, &l.x)) &&
	    !(rc = ctensor(p, &r[1], act, m, nmax, 0, &l.out)) &&
	    !(rc = ctensor(p, &r[2], FG_DTYPE_F16, 1, nmax, 0, &l.bias)))
		for (int i = 0; i < l.nw && !rc; i++) {
			int j = i % sh->nlin;
			rc = ctensor(p, &r[3 + i], wdt, sh->n[j], sh->k[j], wb[j], &l.w[i]);
		}
	if (!rc)
		rc = timed(p, do_linear, &l, secs);
	free_all(p, r, 3 + l.nw);
	if (!rc)
		*secs /= copies;
	*wbytes_out = (double)layer;
	return rc;
}

/* The flops prefill attention is counted as: 4 * batch * seq^2 * hidden. */
static double attn_prefill_flops(int64_t batch, int64_t seq, int64_t qw)
{
	return 4.0 * (double)batch * (double)seq * (double)seq * (double)qw;
}

/* Multiply-adds of one layer's products per row. */
static double layer_macs(const struct shapes *sh)
{
	double v = 0;
	for (int j = 0; j < sh->nlin; j++)
		v += (double)sh->k[j] * (double)sh->n[j];
	return v;
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

/* Seconds of t's decode attention over a cache of `cdt` (kv_bytes each for K
 * and V; 0: plain elements) in compute-tier memory. */
static int decode_attention_time(struct prof *p, struct attn_arg *t, enum fg_dtype cdt,
				 uint64_t kv_bytes, double *secs)
{
	enum fg_dtype act = p->be.info.act_dtype;
	int64_t b = t->a.batch, qw = t->a.heads * t->a.head_dim;
	int64_t kvw = t->a.kv_heads * t->a.head_dim, rows = b * t->a.cache_stride;
	struct fg_region r[4] = { 0 };
	int rc;

	if (!(rc = ctensor(p, &r[0], act, b, qw, 0, &t->a.q)) &&
	    !(rc = ctensor(p, &r[1], cdt, rows, kvw, kv_bytes, &t->a.k)) &&
	    !(rc = ctensor(p, &r[2], cdt, rows, kvw, kv_bytes, &t->a.v)) &&
	    !(rc = ctensor(p, &r[3], act, b, qw, 0, &t->a.out)))
		rc = timed(p, do_attention, t, secs);
	free_all(p, r, 4);
	return rc;
}

/* A layer's products with encoded weights (dt: 4-bit or fp8, named `what`)
 * at one row and, where the fp16 batch rate was measured, at the GPU batch's
 * rows: GB/s of the stored weights. */
static int encoded_linear(struct prof *p, const struct shapes *sh, const struct fg_hardware *hw,
			  enum fg_dtype dt, const char *what, double *one, double *batch)
{
	double secs, wbytes;
	char label[120];
	int rc;

	if ((rc = linear_time(p, sh, 1, dt, &secs, &wbytes)))
		return rc;
	*one = wbytes / secs / 1e9;
	snprintf(label, sizeof(label), "%s matrix-vector product (GB/s of stored weights)", what);
	say(p, label, *one, "GB/s");
	if (!hw->mm_batch_rows)
		return 0;
	if ((rc = linear_time(p, sh, sh->batch, dt, &secs, &wbytes)))
		return rc;
	*batch = wbytes / secs / 1e9;
	snprintf(label, sizeof(label), "%s matrix product, the GPU batch rows (GB/s of stored "
		 "weights)", what);
	say(p, label, *batch, "GB/s");
	return 0;
}

/* t's decode attention over an encoded cache (dt, `bytes` each for K and
 * V, named `what`): GB/s of the stored bytes read, sh->len of sh->total
 * rows a sequence. */
static int encoded_decode_attention(struct prof *p, struct attn_arg *t, const struct shapes *sh,
				    enum fg_dtype dt, uint64_t bytes, const char *what,
				    double *rate)
{
	double secs;
	char label[120];
	int rc;

	if ((rc = decode_attention_time(p, t, dt, bytes, &secs)))
		return rc;
	*rate = 2.0 * (double)bytes * (double)sh->len / (double)sh->total / secs / 1e9;
	snprintf(label, sizeof(label), "decode attention, %s (GB/s of stored cache read)", what);
	say(p, label, *rate, "GB/s");
	return 0;
}

static int compute(struct prof *p, const struct shapes *sh, int32_t *pad, struct fg_hardware *hw)
{
	enum fg_dtype act = p->be.info.act_dtype;
	double macs = layer_macs(sh), secs, wbytes;
	int64_t m = sh->prefill_rows;
	int rc;

	hw->act_bytes = (int)fg_dtype_size(act);
	hw->hidden_bytes = (int)fg_dtype_size(p->be.info.hidden_dtype);
	if ((rc = linear_time(p, sh, m, FG_DTYPE_F16, &secs, &wbytes)))
		return rc;
	hw->mm_flops_prefill = 2.0 * (double)m * macs / secs / 1e12;
	say(p, "matrix product, prefill shape (TFLOP/s)", hw->mm_flops_prefill, "TFLOP/s");
	if ((rc = linear_time(p, sh, FG_HW_DECODE_ROWS, FG_DTYPE_F16, &secs, &wbytes)))
		return rc;
	hw->mm_flops_decode = 2.0 * FG_HW_DECODE_ROWS * macs / secs / 1e12;
	say(p, "matrix product, 64 rows (TFLOP/s)", hw->mm_flops_decode, "TFLOP/s");
	if ((rc = linear_time(p, sh, 1, FG_DTYPE_F16, &secs, &wbytes)))
		return rc;
	hw->mm_gemv_bdw = wbytes / secs / 1e9;
	say(p, "matrix-vector product, 1 row (GB/s of fp16 weights)", hw->mm_gemv_bdw, "GB/s");
	if (sh->batch > FG_HW_DECODE_ROWS) {
		if ((rc = linear_time(p, sh, sh->batch, FG_DTYPE_F16, &secs, &wbytes)))
			return rc;
		hw->mm_batch_rows = (int)sh->batch;
		hw->mm_flops_batch = 2.0 * (double)sh->batch * macs / secs / 1e12;
		say(p, "matrix product, the policy's GPU batch rows (TFLOP/s)", hw->mm_flops_batch,
		    "TFLOP/s");
	}
	int q4 = fg_backend_supports(&p->be, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS);
	if (q4 && (rc = encoded_linear(p, sh, hw, FG_DTYPE_Q4_ROWS, "int4", &hw->q4_decode_bdw,
				       &hw->q4_batch_bdw)))
		return rc;
	if (fg_backend_supports(&p->be, FG_OP_LINEAR, FG_DTYPE_F8_ROWS) &&
	    (rc = encoded_linear(p, sh, hw, FG_DTYPE_F8_ROWS, "fp8", &hw->f8_decode_bdw,
				 &hw->f8_batch_bdw)))
		return rc;

	/* Prefill attention over the prompt. */
	struct fg_region r[4] = { 0 };
	struct attn_arg t = { .be = &p->be };
	int64_t s = sh->seq, pb = sh->prefill_batch, qw = sh->heads * sh->head_dim;
	int64_t kvw = sh->kv_heads * sh->head_dim, b = sh->batch;
	float scale = 1.0f / sqrtf((float)sh->head_dim);
	t.a = (struct fg_attention_args){ .batch = pb, .seq = s, .heads = sh->heads,
					  .head_dim = sh->head_dim, .kv_heads = sh->kv_heads,
					  .scale = scale, .pad = pad };
	if (!(rc = ctensor(p, &r[0], act, pb * s, qw, 0, &t.a.q)) &&
	    !(rc = ctensor(p, &r[1], act, pb * s, kvw, 0, &t.a.k)) &&
	    !(rc = ctensor(p, &r[2], act, pb * s, kvw, 0, &t.a.v)) &&
	    !(rc = ctensor(p, &r[3], act, pb * s, qw, 0, &t.a.out)))
		rc = timed(p, do_attention, &t, &secs);
	free_all(p, r, 4);
	if (rc)
		return rc;
	hw->attn_flops = attn_prefill_flops(pb, s, qw) / secs / 1e12;
	say(p, "prefill attention (TFLOP/s, 4 * batch * seq^2 * hidden)", hw->attn_flops, "TFLOP/s");

	/* Decode attention: the GPU batch's sequences over the average cache length. */
	t.decode = 1;
	t.a = (struct fg_attention_args){ .batch = b, .seq = 1, .len = sh->len,
					  .cache_stride = sh->total, .heads = sh->heads,
					  .head_dim = sh->head_dim, .kv_heads = sh->kv_heads,
					  .scale = scale, .pad = pad };
	if ((rc = decode_attention_time(p, &t, act, 0, &secs)))
		return rc;
	hw->attn_decode_bdw = 2.0 * (double)(b * sh->len * kvw) * fg_dtype_size(act) / secs / 1e9;
	say(p, "decode attention (GB/s of cache read)", hw->attn_decode_bdw, "GB/s");
	/* The same over a 4-bit cache (compress_cache; groups along the head
	 * dimension) and an fp8 one (cache_codec = fp8_e4m3_group64). */
	if (q4 && (rc = encoded_decode_attention(p, &t, sh, FG_DTYPE_Q4_COLS,
			fg_q4_bytes((uint64_t)(b * sh->total), (uint64_t)kvw, 1), "a 4-bit cache",
			&hw->attn_decode_q4_bdw)))
		return rc;
	if (fg_backend_supports(&p->be, FG_OP_ATTENTION_DECODE, FG_DTYPE_F8_COLS))
		rc = encoded_decode_attention(p, &t, sh, FG_DTYPE_F8_COLS,
					      fg_f8c_bytes((uint64_t)(b * sh->total), (uint64_t)kvw),
					      "an fp8 cache", &hw->attn_decode_f8_bdw);
	return rc;
}

/* ---- a whole prefill layer, through the family's own block bodies ----------------
 * What a prefill layer costs beyond its products and attention (norms, the
 * epilogues' residual traffic, cache appends, rotary embedding) is the
 * layer's time less those two at the measured rates: priced by the cost
 * model per byte of residual-stream rows (prefill_other_bdw). */

#define LAYER_ROWS 8192 /* enough rows for the products' full rate, buffers of a few hundred MB */
#define LAYER_TENSORS FG_ARCH_TABLE_MAX /* entries of a family's layer table */

struct layer_arg {
	struct fg_backend *be;
	struct fg_block_ctx x;
	struct fg_wview *w[FG_BLOCK_KINDS]; /* each block's tensors, as its list has them */
	struct fg_tensor kc, vc; /* the layer's cache: seq rows per sequence */
};

/* The engine's attend for a compute-resident cache at step 0: append the
 * prompt's K and V, attend over the rows themselves. */
static int layer_attend(struct fg_block_ctx *x, struct fg_tensor q, struct fg_tensor k,
			struct fg_tensor v, struct fg_tensor out)
{
	const struct layer_arg *l = x->sched;
	const struct fg_model_config *c = x->cfg;
	struct fg_attention_args at = {
		.q = q, .k = k, .v = v, .out = out, .batch = x->bs, .seq = x->n, .len = x->n,
		.cache_stride = x->n, .heads = c->heads, .head_dim = c->head_dim,
		.scale = fg_attn_scale(c), .softcap = c->attn_softcap, .pad = x->pad, .kv_heads = c->kv_heads,
	};
	struct fg_kv_append_args ak = { k, l->kc, x->bs, x->n, 0, x->n };
	struct fg_kv_append_args av = { v, l->vc, x->bs, x->n, 0, x->n };
	int rc = x->be->ops->attention_prefill(x->be->ctx, x->stream, &at);

	if (!rc)
		rc = x->be->ops->kv_append(x->be->ctx, x->stream, &ak);
	return rc ? rc : x->be->ops->kv_append(x->be->ctx, x->stream, &av);
}

static int do_layer(struct prof *p, void *arg)
{
	struct layer_arg *l = arg;
	const struct fg_arch *a = l->x.cfg->arch;
	int rc = 0;
	(void)p;
	for (int kind = FG_BLOCK_ATTN; kind <= FG_BLOCK_MLP && !rc; kind++) {
		l->x.w = l->w[kind];
		rc = a->body[kind](&l->x);
	}
	return rc ? rc : fg_backend_stream_sync(l->be, NULL);
}

static int prefill_layer(struct prof *p, const struct shapes *sh, int32_t *pad,
			 struct fg_hardware *hw)
{
	const struct fg_model_config *c = p->pp->model;
	const struct fg_arch *a = c->arch;
	enum fg_dtype act = p->be.info.act_dtype, hid = p->be.info.hidden_dtype;
	int64_t s = sh->seq, bs = LAYER_ROWS / s > 0 ? LAYER_ROWS / s : 1;
	struct fg_region r[3 + FG_WS_MAX + LAYER_TENSORS] = { 0 };
	struct layer_arg *l = calloc(1, sizeof(*l));
	int32_t *pos = calloc((size_t)(bs * s), sizeof(int32_t));
	int nr = 0, rc = 0;
	double secs;

	bs = bs < sh->prefill_batch ? bs : sh->prefill_batch;
	if (a->nlayer > LAYER_TENSORS) {
		FG_ERR("profile: family %s has %d tensors a layer, more than the %d a prefill layer's measurement holds",
		       a->name, a->nlayer, LAYER_TENSORS);
		rc = -EINVAL;
		goto out;
	}
	if (!l || !pos) {
		FG_ERR("profile: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	int64_t m = bs * s, kvw = c->kv_heads * c->head_dim;
	l->be = &p->be;
	l->x = (struct fg_block_ctx){ .be = &p->be, .cfg = c, .bs = bs, .n = s,
				      .pad = pad, .pos = pos, .attend = layer_attend, .sched = l };
	if ((rc = ctensor(p, &r[nr++], hid, m, c->hidden, 0, &l->x.h)) ||
	    (rc = ctensor(p, &r[nr++], act, m, kvw, 0, &l->kc)) ||
	    (rc = ctensor(p, &r[nr++], act, m, kvw, 0, &l->vc)))
		goto out;
	for (int i = 0; i < a->nworkspace && !rc; i++) {
		const struct fg_workspace_def *d = &a->workspace[i];
		rc = ctensor(p, &r[nr++], act, fg_ws_rows(c, d, bs, s), fg_dim_value(c, d->cols), 0,
			     &l->x.ws[i]);
	}
	/* The layer's tensors, one per table entry: every expert of an expert
	 * entry computes with the same matrix (a product's time does not
	 * depend on its values), so a wide mixture's layer fits a device. */
	struct fg_tensor one[LAYER_TENSORS];
	for (int i = 0; i < a->nlayer && !rc; i++) {
		const struct fg_tensor_def *d = &a->layer[i];
		if (fg_arch_present(c, d))
			rc = ctensor(p, &r[nr++], FG_DTYPE_F16, fg_dim_value(c, d->rows),
				     fg_dim_value(c, d->cols), 0, &one[i]);
	}
	for (int k = FG_BLOCK_ATTN; k <= FG_BLOCK_MLP && !rc; k++) {
		struct fg_tensor_list tl;
		fg_tensor_list_block(&tl, c, (enum fg_block_kind)k);
		int64_t n = fg_tensor_list_count(&tl);
		if (!(l->w[k] = calloc((size_t)(n ? n : 1), sizeof(*l->w[k])))) {
			FG_ERR("profile: out of memory");
			rc = -ENOMEM;
			break;
		}
		for (int64_t i = 0; i < n; i++) {
			struct fg_tensor_ref ref = fg_tensor_list_at(&tl, i);
			if (!fg_arch_present(c, &a->layer[ref.entry]))
				continue;
			l->w[k][i].npieces = 1;
			l->w[k][i].piece[0].t = one[ref.entry];
		}
	}
	if (rc || (rc = timed(p, do_layer, l, &secs)))
		goto out;
	double priced = 2.0 * (double)m * layer_macs(sh) / (hw->mm_flops_prefill * 1e12) +
			attn_prefill_flops(bs, s, c->heads * c->head_dim) / (hw->attn_flops * 1e12);
	double other = secs > priced ? secs - priced : 0;
	double bytes = (double)m * (double)c->hidden * fg_dtype_size(hid);
	/* all of it priced already (a faster layer than its parts): no extra */
	hw->prefill_other_bdw = other > 0 ? bytes / other / 1e9 : 0;
	say(p, "prefill layer, the rest (GB/s of hidden rows)",
	    hw->prefill_other_bdw, "GB/s");
out:
	for (int i = 0; i < nr; i++)
		if (r[i].size)
			fg_tier_free(&p->tier[T_COMPUTE], &r[i]);
	for (int k = 0; l && k < FG_BLOCK_KINDS; k++)
		free(l->w[k]);
	free(pos);
	free(l);
	return rc;
}

struct append_arg {
	struct fg_backend *be;
	struct fg_kv_append_args a[2]; /* K and V */
};

static int do_append(struct prof *p, void *arg)
{
	struct append_arg *t = arg;
	int rc = 0;
	(void)p;
	for (int i = 0; i < 2 && !rc; i++)
		rc = t->be->ops->kv_append(t->be->ctx, NULL, &t->a[i]);
	return rc ? rc : fg_backend_stream_sync(t->be, NULL);
}

/* Host memory under two readers at once, as a decode step with host attention
 * and host-tier weights runs them: the attention t (attn_bytes of cache read)
 * while the compute backend copies from the host tier.  The copies are queued
 * to outlast the attention; what they moved during it is what was queued less
 * what the rest took at the solo rate. */
static int shared_host_memory(struct prof *p, struct attn_arg *t, double attn_bytes,
			      double attn_s, struct fg_hardware *hw)
{
	struct fg_region cr = { 0 }, hr = { 0 };
	double ctog = hw->ctog_bdw * 1e9, moved = 0, busy = 0;
	void *stream = NULL;
	uint64_t len = 0;
	int rc;

	if (!(ctog > 0))
		return 0; /* no copy rate: the figure stays 0 (not a limit) */
	if ((rc = copy_regions(p, 8, &cr, &hr, &len)) || !len ||
	    (rc = fg_backend_stream_create(&p->be, &stream)))
		goto out; /* no room: the figure stays 0 */
	int64_t n = (int64_t)ceil(2 * attn_s * ctog / (double)len) + 1;
	for (int rep = 0; rep < 8 && (rep < 3 || busy < p->min_s); rep++) {
		for (int64_t i = 0; i < n && !rc; i++)
			rc = fg_backend_copy(&p->be, stream, cr.addr, hr.addr, len);
		double t0 = fg_now();
		if (rc || (rc = do_attention(p, t)))
			goto out;
		double ta = fg_now() - t0;
		if ((rc = fg_backend_stream_sync(&p->be, stream)))
			goto out;
		double tail = fg_now() - t0 - ta, during = (double)n * (double)len - ctog * tail;
		if (tail < 0.05 * ta) { /* the copies ended first: queue more and again */
			n *= 2;
			continue;
		}
		moved += attn_bytes + (during > 0 ? during : 0);
		busy += ta;
	}
	if (busy > 0) {
		hw->cpu_mem_bdw = moved / busy / 1e9;
		say(p, "host memory, host attention + host -> compute copies (GB/s of both)",
		    hw->cpu_mem_bdw, "GB/s");
	}
out:
	if (stream)
		fg_backend_stream_destroy(&p->be, stream);
	copy_regions_free(p, &cr, &hr);
	return rc;
}

/* Host attention and appends over an encoded cache (dt, `bytes` each for K
 * and V) in t's K and V buffers: their rates in GB/s of the stored bytes
 * read (the cache's len of total rows) and written (the prompt's rows). */
static int host_encoded(struct prof *p, const struct shapes *sh, struct attn_arg *t,
			struct append_arg *ap, enum fg_dtype dt, uint64_t bytes, const char *what,
			double *attn, double *append)
{
	double secs, per_row = 2.0 * (double)bytes / (double)sh->total;
	char label[120];
	int rc;

	t->a.k.dtype = t->a.v.dtype = dt;
	if ((rc = timed(p, do_attention, t, &secs)))
		return rc;
	*attn = per_row * (double)sh->len / secs / 1e9;
	snprintf(label, sizeof(label), "host decode attention, %s (GB/s of stored cache read)", what);
	say(p, label, *attn, "GB/s");
	ap->a[0].cache = t->a.k;
	ap->a[1].cache = t->a.v;
	if ((rc = timed(p, do_append, ap, &secs)))
		return rc;
	*append = per_row * (double)sh->seq / secs / 1e9;
	snprintf(label, sizeof(label), "host cache append into %s (GB/s of stored cache written)",
		 what);
	say(p, label, *append, "GB/s");
	return 0;
}

/* Host attention as cpu_cache_compute runs it: the host backend over a cache
 * in the host tier's memory (page-locked, where the engine keeps it), in the
 * compute backend's activation type (the engine's host cache holds the
 * device's elements); then the same while the device copies from host memory
 * (cpu_mem_bdw); and the prefill's append of the prompt's K and V rows to
 * that cache. */
static int host_attention(struct prof *p, const struct shapes *sh, int32_t *pad,
			  struct fg_hardware *hw)
{
	struct fg_backend *hb = &p->be;
	int64_t b = sh->batch, qw = sh->heads * sh->head_dim, kvw = sh->kv_heads * sh->head_dim;
	struct fg_region mem[4] = { 0 };
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
	enum fg_dtype act = p->be.info.act_dtype;
	if (!fg_backend_supports(hb, FG_OP_ATTENTION_DECODE, act))
		act = hb->info.act_dtype;
	size_t es = fg_dtype_size(act);
	/* q and the output; K and V of b sequences of sh->total rows; the
	 * prompt's new rows (the append's source, the larger of q and them). */
	size_t src = (size_t)(b * sh->seq * kvw) * es;
	size_t sz[4] = { (size_t)(b * qw) * es, (size_t)(b * sh->total * kvw) * es,
			 (size_t)(b * sh->total * kvw) * es, src > (size_t)(b * qw) * es ? src : (size_t)(b * qw) * es };
	for (int i = 0; i < 4; i++) {
		if ((rc = fg_tier_alloc(&p->tier[T_HOST], sz[i], &mem[i])))
			goto out;
		/* Written, so that real pages (not the shared zero page) are read;
		 * 0x3c bytes are small numbers in fp16 and fp32 alike. */
		memset(mem[i].addr, 0x3c, sz[i]);
	}
	struct attn_arg t = { .be = hb, .decode = 1 };
	t.a = (struct fg_attention_args){
		.q = { mem[0].addr, act, b, qw, qw }, .k = { mem[1].addr, act, b * sh->total, kvw, kvw },
		.v = { mem[2].addr, act, b * sh->total, kvw, kvw }, .out = { mem[3].addr, act, b, qw, qw },
		.batch = b, .seq = 1, .len = sh->len, .cache_stride = sh->total, .heads = sh->heads,
		.head_dim = sh->head_dim, .kv_heads = sh->kv_heads,
		.scale = 1.0f / sqrtf((float)sh->head_dim), .pad = pad,
	};
	double secs, read = 2.0 * (double)(b * sh->len * kvw) * (double)es;
	if ((rc = timed(p, do_attention, &t, &secs)))
		goto out;
	hw->cpu_attn_bdw = read / secs / 1e9;
	say(p, "host decode attention (GB/s of cache read)", hw->cpu_attn_bdw, "GB/s");
	if (!hw->compute_host_memory && (rc = shared_host_memory(p, &t, read, secs, hw)))
		goto out;

	struct append_arg ap = { .be = hb };
	struct fg_tensor srct = { mem[3].addr, act, b * sh->seq, kvw, kvw };
	for (int i = 0; i < 2; i++)
		ap.a[i] = (struct fg_kv_append_args){ srct, i ? t.a.v : t.a.k, b, sh->seq, 0,
						      sh->total };
	if ((rc = timed(p, do_append, &ap, &secs)))
		goto out;
	hw->cpu_append_bdw = 2.0 * (double)src / secs / 1e9;
	say(p, "host cache append of the prompt's rows (GB/s written)", hw->cpu_append_bdw, "GB/s");

	/* The same over a 4-bit cache and an fp8 one, in the first bytes of the
	 * K and V buffers (each smaller than a plain cache): 0x3c bytes are
	 * finite 4-bit groups, and fp8 codes of 1.5 with scales of 0.0115. */
	uint64_t kvq = fg_q4_bytes((uint64_t)(b * sh->total), (uint64_t)kvw, 1);
	uint64_t kv8 = fg_f8c_bytes((uint64_t)(b * sh->total), (uint64_t)kvw);
	if (kvq <= sz[1] &&
	    (rc = host_encoded(p, sh, &t, &ap, FG_DTYPE_Q4_COLS, kvq, "a 4-bit cache",
			       &hw->cpu_attn_q4_bdw, &hw->cpu_append_q4_bdw)))
		goto out;
	if (kv8 <= sz[1] && fg_backend_supports(hb, FG_OP_ATTENTION_DECODE, FG_DTYPE_F8_COLS))
		rc = host_encoded(p, sh, &t, &ap, FG_DTYPE_F8_COLS, kv8, "an fp8 cache",
				  &hw->cpu_attn_f8_bdw, &hw->cpu_append_f8_bdw);
out:
	for (int i = 0; i < 4; i++)
		if (mem[i].size)
			fg_tier_free(&p->tier[T_HOST], &mem[i]);
	return rc;
}

int fg_profile_run(const struct fg_config *c, const struct fg_profile_params *pp,
		   struct fg_hardware *hw)
{
	struct prof *p = calloc(1, sizeof(*p));
	struct fg_plugin_handle ph;
	int32_t *pad = NULL;
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
	struct shapes sh;
	shapes_of(pp, &sh);
	if (!(pad = calloc((size_t)(sh.batch > sh.prefill_batch ? sh.batch : sh.prefill_batch),
			   sizeof(*pad)))) {
		FG_ERR("profile: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = transfers(p, hw)) || (rc = compute(p, &sh, pad, hw)) ||
	    (pp->model && (rc = prefill_layer(p, &sh, pad, hw))) ||
	    (rc = host_attention(p, &sh, pad, hw)))
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
	free(pad);
	free(p);
	return rc;
}
