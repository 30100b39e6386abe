/* core/optimizer/cost_model.c - link times and memory of a policy as linear
 * functions of its placement shares (doc/COST_MODEL.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>
#include "core/optimizer/cost_model.h"
#include "core/util/error.h"

#define GBPS 1e9
#define TFLOPS 1e12

double fg_lin_eval(const struct fg_lin *l, const double x[FG_X_N])
{
	double v = l->c;
	for (int i = 0; i < FG_X_N; i++)
		v += l->a[i] * x[i];
	return v;
}

static void fg_lin_scale(struct fg_lin *l, double by)
{
	l->c *= by;
	for (int i = 0; i < FG_X_N; i++)
		l->a[i] *= by;
}

/* Everything the term builder needs, in doubles. */
struct ctx {
	const struct fg_hardware *hw;
	const struct fg_model_config *c;
	double h, kv, qw, l, s, n, gbs, nb, a, e;
	/* rows of a GPU batch through the linear layers: gbs, but a refilled
	 * run's join step attends and caches its joining rows (gbs) and, unless
	 * it gathers them, computes every row before the last one */
	double gbs_lin;
	int ring_load;               /* a decode step loads a slot-held cache's whole ring */
	double hb; /* bytes of a residual-stream element (the hidden states) */
	int dev, cpu, sep;
	int cw;                      /* weights priced as encoded: 0 fp16, 1 4-bit, 2 fp8 */
	int cq;                      /* the cache: 0 plain, 1 4-bit, 2 fp8 */
	double ctog_w, ctog, gtoc, dtoc, ctod; /* bytes per second */
	double hmem;                 /* host memory under copies and host attention; 0: no bound */
	int hl;                      /* the link of the host's work (FG_LINK_HOST on a device) */
	double cols;                 /* cache columns a sequence (a window's ring, or s + n) */
	double w, fw;                /* the sliding window, the share of layers that have it */
};

/* The mean of min(L, w) over the integers L in [a, b] (a when b < a). */
static double mean_min(double a, double b, double w)
{
	if (b < a)
		b = a;
	if (b <= w)
		return (a + b) / 2;
	if (a >= w)
		return w;
	/* a .. w - 1 as they are, w .. b capped at w */
	double below = (a + w - 1) / 2 * (w - a);
	return (below + w * (b - w + 1)) / (b - a + 1);
}

/* A rate of the fp8 cache's, or where none was profiled the plain cache's. */
static double f8c_rate(double f8, double plain)
{
	return f8 > 0 ? f8 : plain;
}

/* Bytes through host memory by a copy or the host's own work: the shared bound. */
static void host_mem(const struct ctx *x, struct fg_lin *L, int share, double bytes)
{
	if (x->hmem > 0 && x->dev)
		L[FG_LINK_HMEM].a[share] += bytes / x->hmem;
}

/* Seconds of a linear layer of m rows, K inputs and N outputs (hardware.h):
 * straight lines between the measured points — one row, 64 rows and, when
 * profiled, the policy's GPU batch rows — and above the last the larger of
 * its time and the prefill rate's.  With 4-bit or fp8 weights the points are
 * their stored bytes over their own rates (int4's, fp8's), and no product is
 * faster than reading them. */
static double t_lin(const struct ctx *x, double m, double K, double N)
{
	const struct fg_hardware *hw = x->hw;
	double kn2 = 2 * K * N, R = hw->mm_batch_rows;
	double t64 = FG_HW_DECODE_ROWS * kn2 / (hw->mm_flops_decode * TFLOPS);
	double t1 = hw->mm_gemv_bdw > 0 ? kn2 / (hw->mm_gemv_bdw * GBPS) : t64;
	double q4 = x->cw == 1 ? (double)fg_q4_bytes((uint64_t)N, (uint64_t)K, 0)
		  : x->cw == 2 ? (double)fg_f8_bytes((uint64_t)N, (uint64_t)K) : 0;
	double one = x->cw == 1 ? hw->q4_decode_bdw : hw->f8_decode_bdw;
	double batch = x->cw == 1 ? hw->q4_batch_bdw : hw->f8_batch_bdw;
	double packed = x->cw ? q4 / (one * GBPS) : 0;
	double pr[3], pt[3], t;
	int n = 0;

	t1 = t1 < t64 ? t1 : t64;
	if (!x->cw) {
		pr[n] = 1, pt[n++] = t1;
		pr[n] = FG_HW_DECODE_ROWS, pt[n++] = t64;
		if (R > FG_HW_DECODE_ROWS && hw->mm_flops_batch > 0)
			pr[n] = R, pt[n++] = R * kn2 / (hw->mm_flops_batch * TFLOPS);
	} else if (R > 1 && batch > 0) {
		pr[n] = 1, pt[n++] = packed;
		pr[n] = R, pt[n++] = q4 / (batch * GBPS);
	} else {
		pr[n] = 1, pt[n++] = packed;
		pr[n] = FG_HW_DECODE_ROWS, pt[n++] = t64 > packed ? t64 : packed;
	}
	if (m >= pr[n - 1]) {
		double peak = m * kn2 / (hw->mm_flops_prefill * TFLOPS);
		t = pt[n - 1] > peak ? pt[n - 1] : peak;
	} else {
		int i = 1;
		while (m > pr[i])
			i++;
		t = pt[i - 1] + (pt[i] - pt[i - 1]) * (m - pr[i - 1]) / (pr[i] - pr[i - 1]);
	}
	return t > packed ? t : packed;
}

/* Seconds of one expert's linear in a step of m token rows, each routed to
 * k of E experts: the expert is used with p = 1 - (1 - k/E)^m and then
 * multiplies the m k / (E p) rows routed to it (m k / E on average). */
static double t_expert_lin(const struct ctx *x, double m, double K, double N)
{
	double k = (double)x->c->experts_per_tok, E = (double)x->c->experts;
	double p = 1 - pow(1 - k / E, m);

	return p > 0 ? p * t_lin(x, m * k / (E * p), K, N) : 0;
}

/* Seconds of the linear layers of a block kind over m rows: each linear
 * weight of the family's table, [N outputs, K inputs]; an expert's over the
 * rows routed to it. */
static double t_block_lin(const struct ctx *x, enum fg_block_kind kind, double m)
{
	const struct fg_arch *a = x->c->arch;
	const struct fg_tensor_def *defs[2] = { a->globals, a->layer };
	int counts[2] = { a->nglobals, a->nlayer };
	double t = 0;

	for (int g = 0; g < 2; g++)
		for (int i = 0; i < counts[g]; i++) {
			const struct fg_tensor_def *d = &defs[g][i];
			double K = (double)fg_dim_value(x->c, d->cols), N = (double)fg_dim_value(x->c, d->rows);
			if (d->block != kind || !(d->flags & FG_TD_LINEAR) || !fg_arch_present(x->c, d))
				continue;
			/* (an expert entry: every expert's alike) */
			double copies = (double)fg_arch_copies(x->c, d);
			if ((d->flags & FG_TD_EXPERTS) && x->c->experts_per_tok > 0)
				t += copies * t_expert_lin(x, m, K, N);
			else
				t += copies * t_lin(x, m, K, N);
		}
	return t;
}

/* Bytes moved into compute memory from the host (share host_i) or the disk
 * (share disk_i; -1: none), waited for at once (in comp) or as link traffic.
 * Disk data crosses the host first when the compute tier is device memory. */
static void load(const struct ctx *x, struct fg_lin *L, int host_i, int disk_i, double bytes,
		 double host_bw, int sync)
{
	if (host_i >= 0)
		host_mem(x, L, host_i, bytes);
	host_mem(x, L, disk_i, bytes);
	if (sync) {
		if (host_i >= 0)
			L[FG_LINK_COMP].a[host_i] += bytes / host_bw;
		L[FG_LINK_COMP].a[disk_i] += bytes / x->dtoc + (x->dev ? bytes / x->ctog : 0);
		return;
	}
	if (host_i >= 0)
		L[FG_LINK_CTOG].a[host_i] += bytes / host_bw;
	L[FG_LINK_DTOC].a[disk_i] += bytes / x->dtoc;
	if (x->dev)
		L[FG_LINK_CTOG].a[disk_i] += bytes / x->ctog;
}

/* The reverse way, behind the computation. */
static void store(const struct ctx *x, struct fg_lin *L, int host_i, int disk_i, double bytes)
{
	if (host_i >= 0) {
		L[FG_LINK_GTOC].a[host_i] += bytes / x->gtoc;
		host_mem(x, L, host_i, bytes);
	}
	host_mem(x, L, disk_i, bytes);
	L[FG_LINK_CTOD].a[disk_i] += bytes / x->ctod;
	if (x->dev)
		L[FG_LINK_GTOC].a[disk_i] += bytes / x->gtoc;
}

/* Cache positions a decode step loads into the slot for a slot-held
 * sequence: those before the new one, on average over the run (a windowed
 * layer: its last w - 1 only, core/exec/schedule.c, whether its cache is a
 * ring or not).  Once a refilled run's column has passed the ring's end,
 * every step loads the whole ring (fg_kv_columns), a windowed layer still
 * its w - 1. */
static double decode_load_len(const struct ctx *x)
{
	if (x->ring_load)
		return (1 - x->fw) * x->cols + x->fw * fmin(x->w - 1, x->cols);
	return (1 - x->fw) * (x->s + x->n / 2 - 1) +
	       x->fw * mean_min(x->s, x->s + x->n - 2, x->w - 1);
}

/* One layer (attention + MLP) of a prefill or decode step whose weights W
 * bytes; decode at the average cache length. */
static void layer_terms(const struct ctx *x, struct fg_lin *L, double W, double Wa, int decode)
{
	double tok = decode ? 1 : x->s, m = x->gbs_lin * tok, h = x->h;
	double kvrow = 2 * x->kv * x->e, seqs = x->gbs * x->nb;
	double load_len = decode_load_len(x);
	/* a row attends its own positions: at the average length over its decode steps */
	double attn_len = (1 - x->fw) * (x->s + x->n / 2) +
			  x->fw * mean_min(x->s + 1, x->s + x->n - 1, x->w);
	double hid = x->gbs_lin * tok * h * x->hb * x->nb; /* every GPU batch's activations */
	double units = x->sep ? 2 : 1;

	/* Weights: once per layer and step, shared by the GPU batches. */
	load(x, L, FG_X_WC, FG_X_WN, W, x->ctog_w, 0);
	if (x->sep) { /* the attention block's part of those loads */
		L[FG_LINK_ALOAD].a[FG_X_WC] += Wa / x->ctog_w;
		L[FG_LINK_ALOAD].a[FG_X_WN] += Wa / x->dtoc + (x->dev ? Wa / x->ctog : 0);
	}

	/* Linear layers of every GPU batch. */
	L[FG_LINK_COMP].c += x->nb * (t_block_lin(x, FG_BLOCK_ATTN, m) + t_block_lin(x, FG_BLOCK_MLP, m));

	/* Activations off the compute tier: loaded before each unit (waited for at
	 * once, so in comp) and stored after it. */
	load(x, L, FG_X_HC, FG_X_HN, units * hid, x->ctog, 1);
	store(x, L, FG_X_HC, FG_X_HN, units * hid);

	/* new K, V rows; a prompt longer than a window's ring keeps its last ones */
	double cache_tok = seqs * (tok < x->cols ? tok : x->cols) * kvrow;
	/* Appends that run on the host, waited for: the delegated sequences'
	 * (the whole prompt in prefill) and, on a CPU run, every one.  From a
	 * device, a plain cache takes the rows by copy (below), and only an
	 * encoded one (4-bit, fp8) is appended (encoded) by the host. */
	const struct fg_hardware *hw = x->hw;
	double app_bdw = (x->cq == 1 ? hw->cpu_append_q4_bdw
			  : x->cq == 2 ? f8c_rate(hw->cpu_append_f8_bdw, hw->cpu_append_bdw)
				       : hw->cpu_append_bdw) * GBPS;
	if (app_bdw > 0 && ((x->cpu && x->cq) || !x->dev)) {
		L[x->hl].a[FG_X_CC] += cache_tok / app_bdw;
		host_mem(x, L, FG_X_CC, cache_tok);
		if (!x->dev) {
			L[FG_LINK_COMP].a[FG_X_CG] += cache_tok / app_bdw;
			L[FG_LINK_COMP].a[FG_X_CN] += cache_tok / app_bdw;
		}
	}
	if (!decode) {
		/* a windowed layer's query i sees min(i + 1, w) keys, not i + 1 */
		double seen = (1 - x->fw) + x->fw * mean_min(1, x->s, x->w) / ((1 + x->s) / 2);
		L[FG_LINK_COMP].c += x->nb * 4 * x->gbs * x->s * x->s * x->qw * seen /
				     (x->hw->attn_flops * TFLOPS);
		if (x->hw->prefill_other_bdw > 0) /* norms, epilogues, appends: profiled as a whole */
			L[FG_LINK_COMP].c += hid / (x->hw->prefill_other_bdw * GBPS);
		/* New rows of slot-held sequences go home from the slot. */
		store(x, L, x->cpu ? -1 : FG_X_CC, FG_X_CN, cache_tok);
		/* Delegated sequences: the prompt's k and v copied to the host (into
		 * the cache, or staged for the encoding), synchronously. */
		if (x->cpu && x->dev)
			L[FG_LINK_HOST].a[FG_X_CC] += cache_tok / kvrow * 2 * x->kv * x->a / x->gtoc;
		return;
	}
	double q4_attn = x->hw->attn_decode_q4_bdw > 0 ? x->hw->attn_decode_q4_bdw
						       : x->hw->q4_decode_bdw;
	double attn_bdw = (x->cq == 1 ? q4_attn
			   : x->cq == 2 ? f8c_rate(hw->attn_decode_f8_bdw, hw->attn_decode_bdw)
					: hw->attn_decode_bdw) * GBPS;
	double attn = seqs * attn_len * kvrow;
	L[FG_LINK_COMP].a[FG_X_CG] += attn / attn_bdw;
	L[FG_LINK_COMP].a[FG_X_CN] += attn / attn_bdw;
	if (x->cpu) {
		double host_bdw = x->cq == 1 ? hw->cpu_attn_q4_bdw
				  : x->cq == 2 ? f8c_rate(hw->cpu_attn_f8_bdw, hw->cpu_attn_bdw)
					       : hw->cpu_attn_bdw;
		L[x->hl].a[FG_X_CC] += attn / (host_bdw * GBPS);
		host_mem(x, L, FG_X_CC, attn);
		if (x->dev) /* q, k, v out and the result back, synchronously */
			L[FG_LINK_HOST].a[FG_X_CC] += seqs * (x->qw + 2 * x->kv) * x->a / x->gtoc +
						      seqs * x->qw * x->a / x->ctog;
	} else {
		L[FG_LINK_COMP].a[FG_X_CC] += attn / attn_bdw;
	}
	/* Slot-held sequences: the whole cache so far in, the new row out. */
	load(x, L, x->cpu ? -1 : FG_X_CC, FG_X_CN, seqs * load_len * kvrow, x->ctog, 0);
	store(x, L, x->cpu ? -1 : FG_X_CC, FG_X_CN, cache_tok);
}

/* The input block (embedding) and the output block (final norm, logits). */
static void io_terms(const struct ctx *x, struct fg_lin *L, double W, int decode)
{
	double tok = decode ? 1 : x->s;
	double hid = x->gbs_lin * tok * x->h * x->hb * x->nb;

	load(x, L, FG_X_IC, FG_X_IN, W, x->ctog_w, 0);
	/* A host-tier token table is staged by rows when the step's ids are few
	 * (core/exec/weight_slots.c): a decode step moves only its ids' rows. */
	double V = (double)x->c->vocab, table = V * x->h * 2, ids = x->gbs * x->nb * tok;
	if (decode && fg_plan_rows_staged(ids, V))
		L[FG_LINK_CTOG].a[FG_X_IC] -= (table - ids * x->h * 2) / x->ctog_w;
	/* logits of each sequence's last position, copied to the host at once */
	L[FG_LINK_COMP].c += x->nb * (t_block_lin(x, FG_BLOCK_OUTPUT, x->gbs_lin) +
				      x->gbs_lin * V * x->a / x->gtoc);
	load(x, L, FG_X_HC, FG_X_HN, hid, x->ctog, 1); /* output block */
	store(x, L, FG_X_HC, FG_X_HN, hid);            /* input block */
}

static int rates_ok(const struct fg_hardware *hw, const struct fg_policy *p)
{
	int rc = fg_hardware_check(hw);
	if (rc)
		return rc;
	if (p->cpu_cache_compute && !(hw->cpu_attn_bdw > 0)) {
		FG_ERR("cost model: cpu_cache_compute needs [hardware] cpu_attn_bdw (host attention rate); run fgcore profile");
		return -EINVAL;
	}
	if (p->cpu_cache_compute && p->compress_cache && !p->cache_fp8 && !(hw->cpu_attn_q4_bdw > 0)) {
		FG_ERR("cost model: cpu_cache_compute with compress_cache needs [hardware] cpu_attn_q4_bdw (host attention over a 4-bit cache); run fgcore profile");
		return -EINVAL;
	}
	if (((p->compress_weight && !p->weight_fp8) || (p->compress_cache && !p->cache_fp8)) &&
	    !(hw->q4_decode_bdw > 0)) {
		FG_ERR("cost model: compressed weights or cache need [hardware] q4_decode_bdw (the backend's int4 rate); run fgcore profile with a backend that reads int4");
		return -EINVAL;
	}
	return 0;
}

/* Sequences of each GPU batch whose cache is on `role`, as the plan splits them. */
static int64_t cache_seqs(const struct fg_policy *p, int role)
{
	int64_t first[FG_ROLES], cnt[FG_ROLES];
	fg_policy_split(p->cache, p->gpu_batch_size, first, cnt);
	return cnt[role];
}

int fg_cost_refills(const struct fg_cost_case *cc)
{
	return cc->refill > 0 && cc->stages <= 1;
}

int64_t fg_cost_join_rows(const struct fg_cost_case *cc, const struct fg_policy *p)
{
	int64_t rows = p->gpu_batch_size * p->num_gpu_batches;
	/* (the tolerance: 0.25 x 256 is 64 rows, not 65) */
	int64_t j = (int64_t)ceil(cc->refill * (double)rows - 1e-9);
	return j < 1 ? 1 : j > rows ? rows : j;
}

/* Rows of a GPU batch a join step of k joining rows (of gbs) computes
 * through the linear layers (core/exec/join.c): they alone (the step
 * gathers them), but with attention on the host over host sequences every
 * row up to the last joining one, which for k rows at random places of gbs
 * is k (gbs + 1) / (k + 1) on average. */
static double join_rows_computed(const struct fg_policy *p, double k)
{
	double gbs = (double)p->gpu_batch_size;
	if (!p->cpu_cache_compute || cache_seqs(p, FG_ROLE_HOST) == 0)
		return k;
	return fmin(gbs, k * (gbs + 1) / (k + 1));
}

/* A stage's context: the run's, or in a refilled steady state a join step
 * (the joining rows spread over the GPU batches) and decode steps that load
 * the ring. */
static struct ctx stage_ctx(const struct ctx *x, const struct fg_cost_case *cc,
			    const struct fg_policy *p, int stage)
{
	struct ctx s = *x;
	if (!fg_cost_refills(cc))
		return s;
	s.ring_load = 1;
	if (stage == FG_STAGE_DECODE)
		return s;
	s.gbs = (double)fg_cost_join_rows(cc, p) / x->nb;
	s.gbs_lin = join_rows_computed(p, s.gbs);
	return s;
}

/* The plan's view of the case: one process may keep a window's ring (the
 * model assumes a backend of compute ABI 1.12, as cpu_blas; cublas, of
 * 1.10, has no sliding window at all), a pipeline's stages do not. */
static struct fg_plan_env plan_env(const struct fg_cost_case *cc)
{
	return (struct fg_plan_env){ .act_bytes = (unsigned)cc->hw.act_bytes,
				     .device = !cc->hw.compute_host_memory,
				     .hidden_bytes = (unsigned)fg_hardware_hidden_bytes(&cc->hw),
				     .window_ring = cc->stages <= 1 };
}

int fg_cost_terms(const struct fg_cost_case *cc, const struct fg_policy *p,
		  struct fg_cost_terms *t)
{
	const struct fg_model_config *c = &cc->model;
	const struct fg_hardware *hw = &cc->hw;
	struct fg_plan_block blk[FG_BLOCK_KINDS];
	struct fg_policy whole = *p;
	int rc;

	memset(t, 0, sizeof(*t));
	if ((rc = rates_ok(hw, p)))
		return rc;
	if (p->gpu_batch_size < 1 || p->num_gpu_batches < 1 || cc->prompt_len < 1 ||
	    cc->gen_len < 1 || c->hidden < 1 || c->layers < 0) {
		FG_ERR("cost model: batch %lld x %lld, prompt %lld, gen %lld: every size must be positive",
		       (long long)p->num_gpu_batches, (long long)p->gpu_batch_size,
		       (long long)cc->prompt_len, (long long)cc->gen_len);
		return -EINVAL;
	}
	/* Block sizes with everything on one tier: the bytes each block has. */
	whole.weight[FG_ROLE_COMPUTE] = 100;
	whole.weight[FG_ROLE_HOST] = whole.weight[FG_ROLE_DISK] = 0;
	for (int k = 0; k < FG_BLOCK_KINDS; k++)
		fg_plan_block(c, &whole, (enum fg_block_kind)k, !hw->compute_host_memory, &blk[k], NULL);
	double Wa = (double)blk[FG_BLOCK_ATTN].bytes[FG_ROLE_COMPUTE];
	double Wm = (double)blk[FG_BLOCK_MLP].bytes[FG_ROLE_COMPUTE];
	double Wi = (double)blk[FG_BLOCK_INPUT].bytes[FG_ROLE_COMPUTE];
	double Wo = (double)blk[FG_BLOCK_OUTPUT].bytes[FG_ROLE_COMPUTE];

	/* A pipeline stage holds its share of the layers: the slowest stage's. */
	int64_t layers = fg_cost_stage_layers(cc);
	struct ctx x = {
		.hw = hw, .c = c, .h = (double)c->hidden, .kv = (double)fg_dim_value(c, FG_DIM_KV),
		.qw = (double)fg_dim_value(c, FG_DIM_Q),
		.l = (double)layers, .s = (double)cc->prompt_len, .n = (double)cc->gen_len,
		.gbs = (double)p->gpu_batch_size, .nb = (double)p->num_gpu_batches,
		.gbs_lin = (double)p->gpu_batch_size,
		.a = hw->act_bytes, .hb = fg_hardware_hidden_bytes(hw),
		.dev = !hw->compute_host_memory, .cpu = p->cpu_cache_compute,
		/* fp8 weights: their bytes move (the plan's), their products at
		 * the profiled fp8 rate, as fp16 ones where none was profiled */
		.cw = !p->compress_weight ? 0 : !p->weight_fp8 ? 1 : hw->f8_decode_bdw > 0 ? 2 : 0,
		/* an fp8 cache: its bytes at its own rates, the plain cache's where
		 * none was profiled */
		.cq = !p->compress_cache ? 0 : p->cache_fp8 ? 2 : 1,
		.sep = p->sep_layer,
		.ctog = hw->ctog_bdw * GBPS, .gtoc = hw->gtoc_bdw * GBPS,
		/* no disk tier: a rate that makes it useless but keeps the LP finite */
		.dtoc = (hw->dtoc_bdw > 0 ? hw->dtoc_bdw : 1e-3) * GBPS,
		.ctod = (hw->ctod_bdw > 0 ? hw->ctod_bdw : 1e-3) * GBPS,
	};
	/* bytes a cached element: 4-bit codes or fp8 ones, with 4 bytes a group of 64 */
	x.e = !p->compress_cache ? x.a : (p->cache_fp8 ? 1.0 : 0.5) + 4.0 / FG_Q4_GROUP;
	x.hmem = hw->cpu_mem_bdw * GBPS;
	x.hl = x.dev ? FG_LINK_HOST : FG_LINK_COMP;
	x.ctog_w = !p->pin_weight && hw->ctog_bdw_pageable > 0 ? hw->ctog_bdw_pageable * GBPS : x.ctog;
	struct fg_plan_env pe = plan_env(cc);
	x.cols = (double)fg_plan_cache_cols(c, p, &pe, cc->prompt_len + cc->gen_len);
	int64_t windowed = 0;
	for (int64_t l = 0; l < c->layers; l++)
		windowed += fg_layer_window(c, l) > 0;
	x.w = (double)c->sliding_window;
	x.fw = c->layers > 0 && x.w > 0 ? (double)windowed / (double)c->layers : 0;

	for (int st = 0; st < FG_STAGES; st++) {
		struct ctx sx = stage_ctx(&x, cc, p, st);
		layer_terms(&sx, t->t[st][FG_PART_LAYER], Wa + Wm, Wa, st == FG_STAGE_DECODE);
		io_terms(&sx, t->t[st][FG_PART_IO], Wi + Wo, st == FG_STAGE_DECODE);
	}
	t->serial = !p->overlap || hw->compute_host_memory;
	/* GPU batches on two streams in turn (core/exec/schedule.c): a run of a
	 * unit takes the longer side plus one batch of the other (the first
	 * batch's device work before the host starts, the last one's host work
	 * before the device ends). */
	t->host_beside = x.cpu && x.dev && p->host_overlap && !t->serial;
	for (int part = 0; part < FG_PARTS; part++) {
		struct fg_lin *L = t->t[FG_STAGE_DECODE][part];
		L[FG_LINK_COMP1] = L[FG_LINK_COMP], L[FG_LINK_HOST1] = L[FG_LINK_HOST];
		fg_lin_scale(&L[FG_LINK_COMP1], t->host_beside ? 1 / x.nb : 0);
		fg_lin_scale(&L[FG_LINK_HOST1], t->host_beside ? 1 / x.nb : 0);
	}
	t->layers = layers;
	t->decode_steps = cc->gen_len - 1;
	/* A turnover of a refilled batch: every row joins once, join_rows at a
	 * time, and lives gen_len - 1 decode steps after its join's token. */
	t->steady = fg_cost_refills(cc);
	t->prefill_steps = t->steady ? x.gbs * x.nb / (double)fg_cost_join_rows(cc, p) : 1;
	t->tokens = x.gbs * x.nb * x.n;

	/* Memory, linear in the shares (exact for a concrete policy: core/plan). */
	double kvs = x.cols * x.kv * x.e; /* one K (or V) of one sequence */
	double hsz = x.gbs * x.s * x.h * x.hb, nb = x.nb, gbs = x.gbs, l = x.l;
	/* The family's workspaces, and a decode step's again for the second
	 * stream of host attention (core/plan) */
	double scratch = 0, route = c->experts_per_tok > 0 ? (double)c->experts_per_tok : 1;
	int alt = x.cpu && x.dev && p->host_overlap;
	for (int i = 0; i < c->arch->nworkspace; i++) {
		const struct fg_workspace_def *w = &c->arch->workspace[i];
		double per = w->per_token == FG_WS_PER_SEQ ? 1 : w->per_token == FG_WS_PER_TOKEN ? x.s :
			     x.s * route;
		double per1 = w->per_token == FG_WS_PER_ROUTE ? route : 1;
		scratch += x.gbs * (per + (alt ? per1 : 0)) * (double)fg_dim_value(c, w->cols) * x.a;
	}
	double nslots = p->overlap ? 2 : 1;
	int act_off = p->act[FG_ROLE_COMPUTE] < 100, act_disk = p->act[FG_ROLE_DISK] > 0;
	int disk_w = p->weight[FG_ROLE_DISK] > 0, disk_c = p->cache[FG_ROLE_DISK] > 0;
	struct fg_lin *m = t->mem;
	double off_seq_cc = x.cpu ? 0 : 1; /* host sequences held in the slots */

	m[FG_ROLE_COMPUTE].c = scratch + (act_off ? 2 * hsz : 0);
	m[FG_ROLE_COMPUTE].a[FG_X_WG] = l * (Wa + Wm);
	m[FG_ROLE_COMPUTE].a[FG_X_IG] = Wi + Wo;
	m[FG_ROLE_COMPUTE].a[FG_X_HG] = nb * hsz;
	m[FG_ROLE_COMPUTE].a[FG_X_CG] = nb * l * 2 * gbs * kvs;
	m[FG_ROLE_COMPUTE].a[FG_X_CN] = 4 * gbs * kvs;
	m[FG_ROLE_COMPUTE].a[FG_X_CC] = 4 * gbs * kvs * off_seq_cc;
	t->slot[FG_ROLE_COMPUTE] = nslots;

	m[FG_ROLE_HOST].a[FG_X_WC] = l * (Wa + Wm);
	m[FG_ROLE_HOST].a[FG_X_IC] = Wi + Wo;
	m[FG_ROLE_HOST].a[FG_X_HC] = nb * hsz;
	m[FG_ROLE_HOST].a[FG_X_CC] = nb * l * 2 * gbs * kvs;
	if (x.dev) {
		if (disk_c) {
			m[FG_ROLE_HOST].a[FG_X_CN] += 4 * gbs * kvs;
			m[FG_ROLE_HOST].a[FG_X_CC] += 4 * gbs * kvs * off_seq_cc;
		}
		m[FG_ROLE_HOST].c += (act_disk ? 2 * hsz : 0) +
				     (x.cpu ? 2 * x.gbs * x.s * (x.qw + x.kv) * x.a : 0);
		t->slot[FG_ROLE_HOST] = disk_w ? nslots : 0;
	}
	m[FG_ROLE_DISK].a[FG_X_WN] = l * (Wa + Wm);
	m[FG_ROLE_DISK].a[FG_X_IN] = Wi + Wo;
	m[FG_ROLE_DISK].a[FG_X_HN] = nb * hsz;
	m[FG_ROLE_DISK].a[FG_X_CN] = nb * l * 2 * gbs * kvs;

	/* Units staged through the weight slots: their host and disk bytes. */
	int u = 0;
	t->unit[u].a[FG_X_IC] = t->unit[u].a[FG_X_IN] = Wi, u++;
	t->unit[u].a[FG_X_IC] = t->unit[u].a[FG_X_IN] = Wo, u++;
	if (c->layers && x.sep) {
		t->unit[u].a[FG_X_WC] = t->unit[u].a[FG_X_WN] = Wa, u++;
		t->unit[u].a[FG_X_WC] = t->unit[u].a[FG_X_WN] = Wm, u++;
	} else if (c->layers) {
		t->unit[u].a[FG_X_WC] = t->unit[u].a[FG_X_WN] = Wa + Wm, u++;
	}
	t->nunits = u;
	return 0;
}

/* Both stages: a disk read crosses to the device after it, and the host's
 * work is in the device's chain.  Prefill: the device's work waits for its
 * loads and its stores (fitted to the H200, as FlexGen fitted its decode
 * rule).  Decode: FlexGen's rule, host->compute traffic not hidden behind
 * the device's work but behind the host's (host attention runs while the
 * load stream fills the next unit's slot) - except, with sep_layer, the
 * attention block's own weights: they load behind the MLP block before it,
 * so the host's attention waits for them.  Host memory bounds both. */
static const struct fg_cost_rule rule_prefill = { 5, {
	{ FG_LINK_CTOG, FG_LINK_DTOC, -1 }, { FG_LINK_GTOC, FG_LINK_CTOD, -1 },
	{ FG_LINK_CTOG, FG_LINK_GTOC, FG_LINK_COMP, -1 }, { FG_LINK_COMP, FG_LINK_HOST, -1 },
	{ FG_LINK_HMEM, -1 } } };
static const struct fg_cost_rule rule_decode = { 6, {
	{ FG_LINK_CTOG, FG_LINK_DTOC, -1 }, { FG_LINK_CTOG, FG_LINK_GTOC, -1 },
	{ FG_LINK_CTOG, FG_LINK_CTOD, -1 }, { FG_LINK_CTOG, FG_LINK_COMP, -1 },
	{ FG_LINK_COMP, FG_LINK_HOST, FG_LINK_ALOAD, -1 }, { FG_LINK_HMEM, -1 } } };
static const struct fg_cost_rule rule_decode_beside = { 7, {
	{ FG_LINK_CTOG, FG_LINK_DTOC, -1 }, { FG_LINK_CTOG, FG_LINK_GTOC, -1 },
	{ FG_LINK_CTOG, FG_LINK_CTOD, -1 }, { FG_LINK_CTOG, FG_LINK_COMP, -1 },
	{ FG_LINK_COMP, FG_LINK_HOST1, FG_LINK_ALOAD, -1 },
	{ FG_LINK_HOST, FG_LINK_COMP1, FG_LINK_ALOAD, -1 }, { FG_LINK_HMEM, -1 } } };
static const struct fg_cost_rule rule_serial = { 1, {
	{ FG_LINK_CTOG, FG_LINK_GTOC, FG_LINK_DTOC, FG_LINK_CTOD, FG_LINK_COMP, FG_LINK_HOST, -1 } } };

const struct fg_cost_rule *fg_cost_rule(const struct fg_cost_terms *t, int stage)
{
	return t->serial ? &rule_serial : stage == FG_STAGE_PREFILL ? &rule_prefill :
	       t->host_beside ? &rule_decode_beside : &rule_decode;
}

double fg_cost_combine(const struct fg_cost_terms *t, int stage, const double k[FG_LINKS])
{
	const struct fg_cost_rule *r = fg_cost_rule(t, stage);
	double v = 0;
	for (int i = 0; i < r->nsets; i++) {
		double sum = 0;
		for (const int *l = r->set[i]; *l >= 0; l++)
			sum += k[*l];
		v = fmax(v, sum);
	}
	return v;
}

void fg_cost_shares(const struct fg_cost_case *cc, const struct fg_policy *p, double x[FG_X_N])
{
	const struct fg_model_config *c = &cc->model;
	struct fg_plan_block pb[FG_BLOCK_KINDS];
	uint64_t b[FG_BLOCK_KINDS][FG_ROLES];
	int64_t first[FG_ROLES], cnt[FG_ROLES];
	static const int wi[FG_ROLES] = { FG_X_WN, FG_X_WC, FG_X_WG };
	static const int ii[FG_ROLES] = { FG_X_IN, FG_X_IC, FG_X_IG };
	static const int ci[FG_ROLES] = { FG_X_CN, FG_X_CC, FG_X_CG };
	static const int hi[FG_ROLES] = { FG_X_HN, FG_X_HC, FG_X_HG };
	double lw = 0, iw = 0;

	for (int k = 0; k < FG_BLOCK_KINDS; k++) {
		fg_plan_block(c, p, (enum fg_block_kind)k, !cc->hw.compute_host_memory, &pb[k], NULL);
		for (int r = 0; r < FG_ROLES; r++)
			b[k][r] = pb[k].bytes[r];
	}
	for (int r = 0; r < FG_ROLES; r++) {
		lw += (double)(b[FG_BLOCK_ATTN][r] + b[FG_BLOCK_MLP][r]);
		iw += (double)(b[FG_BLOCK_INPUT][r] + b[FG_BLOCK_OUTPUT][r]);
	}
	for (int r = 0; r < FG_ROLES; r++) {
		x[wi[r]] = lw > 0 ? (double)(b[FG_BLOCK_ATTN][r] + b[FG_BLOCK_MLP][r]) / lw : 0;
		x[ii[r]] = iw > 0 ? (double)(b[FG_BLOCK_INPUT][r] + b[FG_BLOCK_OUTPUT][r]) / iw : 0;
	}
	fg_policy_split(p->cache, p->gpu_batch_size, first, cnt);
	for (int r = 0; r < FG_ROLES; r++)
		x[ci[r]] = (double)cnt[r] / (double)p->gpu_batch_size;
	fg_policy_split(p->act, p->num_gpu_batches, first, cnt);
	for (int r = 0; r < FG_ROLES; r++)
		x[hi[r]] = (double)cnt[r] / (double)p->num_gpu_batches;
}

int64_t fg_cost_stage_layers(const struct fg_cost_case *cc)
{
	int64_t l = cc->model.layers;
	return cc->stages > 1 ? (l + cc->stages - 1) / cc->stages : l;
}

/* The slowest stage's time to a pipeline's: each step, N - 1 of the m
 * micro-batches fill and drain the pipeline (a step needs the last one's
 * tokens before the next can start), and each micro-batch's activations
 * cross N - 1 boundaries through host memory on that fill path. */
static void pipeline(const struct fg_cost_case *cc, const struct fg_policy *p,
		     double stage_s[FG_STAGES])
{
	double n = (double)cc->stages, nb = (double)p->num_gpu_batches;
	double m = cc->micro_batches > 0 ? (double)cc->micro_batches : (n < nb ? n : nb);
	const struct fg_hardware *hw = &cc->hw;
	/* through host memory: device -> host -> device, or a host copy */
	double bdw = hw->compute_host_memory ? hw->ctog_bdw : 1 / (1 / hw->ctog_bdw + 1 / hw->gtoc_bdw);
	double a = fg_hardware_hidden_bytes(hw), h = (double)cc->model.hidden, bs = (double)p->gpu_batch_size;

	m = m < 1 ? 1 : m > nb ? nb : m;
	for (int st = 0; st < FG_STAGES; st++) {
		double tokens = st == FG_STAGE_PREFILL ? (double)cc->prompt_len : 1;
		double steps = st == FG_STAGE_PREFILL ? 1 : (double)(cc->gen_len - 1);
		double hop = bs * (nb / m) * tokens * h * a / (bdw * GBPS); /* one micro-batch */
		stage_s[st] = stage_s[st] * (1 + (n - 1) / m) + steps * (n - 1) * hop;
	}
}

int fg_cost_predict(const struct fg_cost_case *cc, const struct fg_policy *p,
		    struct fg_cost_prediction *o)
{
	struct fg_cost_terms t;
	struct fg_plan_env env = plan_env(cc);
	double x[FG_X_N];
	int rc;

	/* a pipeline stage's memory: its share of the layers (the largest) */
	struct fg_model_config stage_model = cc->model;
	stage_model.layers = fg_cost_stage_layers(cc);
	memset(o, 0, sizeof(*o));
	if ((rc = fg_cost_terms(cc, p, &t)) ||
	    (rc = fg_plan_make(&stage_model, p, &env, cc->prompt_len, cc->gen_len, &o->mem)))
		return rc;
	fg_cost_shares(cc, p, x);
	double stage_s[FG_STAGES];
	for (int st = 0; st < FG_STAGES; st++) {
		double k[FG_PARTS][FG_LINKS];
		double mult = st == FG_STAGE_DECODE ? (double)t.decode_steps : t.prefill_steps;
		for (int part = 0; part < FG_PARTS; part++)
			for (int i = 0; i < FG_LINKS; i++) {
				k[part][i] = fg_lin_eval(&t.t[st][part][i], x);
				o->link[st][i] += mult * k[part][i] *
						  (part == FG_PART_LAYER ? (double)t.layers : 1);
			}
		stage_s[st] = mult * ((double)t.layers * fg_cost_combine(&t, st, k[FG_PART_LAYER]) +
				      fg_cost_combine(&t, st, k[FG_PART_IO]));
	}
	double rows = (double)(p->gpu_batch_size * p->num_gpu_batches);
	if (cc->stages > 1)
		pipeline(cc, p, stage_s);
	o->prefill_s = stage_s[FG_STAGE_PREFILL];
	o->decode_s = stage_s[FG_STAGE_DECODE];
	o->prefill_tps = rows * (double)cc->prompt_len / o->prefill_s;
	o->decode_tps = cc->gen_len > 1 ? rows * (double)(cc->gen_len - 1) / o->decode_s : 0;
	o->total_tps = t.tokens / (o->prefill_s + o->decode_s);
	o->capacity[FG_ROLE_COMPUTE] = cc->hw.gpu_mem;
	o->capacity[FG_ROLE_HOST] = cc->hw.cpu_mem;
	o->capacity[FG_ROLE_DISK] = cc->hw.disk_mem;
	o->steady = t.steady;
	o->join_rows = t.steady ? fg_cost_join_rows(cc, p) : 0;
	o->join_steps = t.steady ? t.prefill_steps : 0;
	o->fits = 1;
	for (int r = 0; r < FG_ROLES; r++)
		if (o->mem.total[r] > o->capacity[r])
			o->fits = 0;
	return 0;
}

void fg_cost_print(FILE *out, const struct fg_cost_prediction *pred,
			      const struct fg_cost_measured *m)
{
	static const double GB = 1073741824.0;
	static const char *const what[3] = { "prefill throughput", "decode throughput",
					     "total throughput" };
	double pv[3] = { pred->prefill_tps, pred->decode_tps, pred->total_tps };
	double mv[3] = { 0 };

	if (m)
		mv[0] = m->prefill_tps, mv[1] = m->decode_tps, mv[2] = m->total_tps;
	for (int i = 0; i < 3; i++) {
		fprintf(out, "predicted %s: %.3f token/s", what[i], pv[i]);
		if (m && mv[i] > 0)
			fprintf(out, "\tmeasured %.3f token/s\t(measured/predicted %.2f)", mv[i],
				mv[i] / pv[i]);
		fprintf(out, "\n");
	}
	static const char *const link[FG_LINKS] = { "ctog", "gtoc", "dtoc", "ctod", "comp", "host",
						    "hmem", "aload", "comp1", "host1" };
	fprintf(out, "predicted time: prefill %.3f s, decode %.3f s; links (s)", pred->prefill_s,
		pred->decode_s);
	for (int st = 0; st < FG_STAGES; st++) {
		fprintf(out, "%s %s", st ? "," : "", st ? "decode" : "prefill");
		for (int i = 0; i < FG_LINKS; i++)
			fprintf(out, " %s %.3f", link[i], pred->link[st][i]);
	}
	fprintf(out, "\n");
	fprintf(out, "predicted memory:");
	for (int r = FG_ROLES - 1; r >= 0; r--) {
		fprintf(out, "\t%s %.3f GB", fg_role_name(r), (double)pred->mem.total[r] / GB);
		if (m)
			fprintf(out, " (measured peak %.3f GB)", (double)m->peak[r] / GB);
	}
	fprintf(out, "\n");
}
