/* tests/test_optimizer.c - the policy optimizer: its memory model against a
 * real engine, the LP against brute force over the same cost model, FlexGen's
 * published T4 policies from FlexGen's fitted T4 constants, infeasible inputs,
 * monotonicity, the [hardware] section and its presets, the profiler on the
 * CPU config. */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include <fgcore/f8.h>
#include <fgcore/q4.h>
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "core/optimizer/cost_model.h"
#include "core/plan/plan.h"
#include "core/optimizer/optimize.h"
#include "core/optimizer/profile.h"

#define GiB 1073741824.0

static char tmpdir[256];

static void setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/var/tmp/fgcore-optimizer-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* FlexGen's fitted constants for a GCP T4 (flexgen/cost_model.py, GB = 2^30
 * bytes, T = 10^12), in [hardware] units (GB/s = 10^9 bytes/s, TFLOP/s):
 * ctog_bdw 12.89 GB, dtoc_bdw 0.473 GB, ctod_bdw_cache_p 0.746 GB,
 * mm_flops_p 21.24 T, mm_flops_g 4.3 T, bmm_flops_p 9.97 T, and bmm_flops_g
 * 0.079 T and cpu_flops 0.0123 T, which FlexGen counts as one flop per byte of
 * fp16 cache read, so they are 79 and 12.3 GB/s of cache.  gtoc_bdw is a
 * page-locked device-to-host copy, as fast as the other way on the T4's
 * PCIe; FlexGen's own gtoc fits (0.97 GB cache, 4.82 GB hidden) describe its
 * own store paths, which this engine does not have.  Capacities: a 16 GB T4,
 * 208 GB of DRAM, a 1.5 TB SSD. */
static void t4(struct fg_hardware *hw)
{
	memset(hw, 0, sizeof(*hw));
	hw->gpu_mem = (uint64_t)(16 * GiB);
	hw->cpu_mem = (uint64_t)(208 * GiB);
	hw->disk_mem = (uint64_t)(1536 * GiB);
	hw->ctog_bdw = 12.89 * GiB / 1e9;
	hw->gtoc_bdw = 12.89 * GiB / 1e9;
	hw->dtoc_bdw = 0.473 * GiB / 1e9;
	hw->ctod_bdw = 0.746 * GiB / 1e9;
	hw->mm_flops_prefill = 21.24;
	hw->mm_flops_decode = 4.3;
	hw->attn_flops = 9.97;
	hw->attn_decode_bdw = 79;
	hw->cpu_attn_bdw = 12.3;
	hw->act_bytes = 2;
}

static void t4_params(struct fg_optimize_params *p, const char *model)
{
	memset(p, 0, sizeof(*p));
	ck_assert_int_eq(fg_model_preset(model, &p->cc.model), 0);
	p->cc.prompt_len = 512;
	p->cc.gen_len = 32;
	t4(&p->cc.hw);
	p->margin = 0.2; /* FlexGen's alpha = 0.8 */
}

/* A stream of requests refilling the batch, priced in its steady state
 * (doc/COST_MODEL.md, "A stream of requests"): OPT-6.7B, prompt 512 + 32,
 * on FlexGen's T4 with room for any placement. */
static void refill_case(struct fg_cost_case *cc, double refill)
{
	memset(cc, 0, sizeof(*cc));
	ck_assert_int_eq(fg_model_preset("opt-6.7b", &cc->model), 0);
	cc->prompt_len = 512;
	cc->gen_len = 32;
	t4(&cc->hw);
	cc->hw.gpu_mem = (uint64_t)(80 * GiB);
	cc->refill = refill;
}

/* wg and cg percent of the weights and the cache on the GPU, the rest on the host */
static struct fg_policy refill_policy(int64_t gbs, int64_t nb, int wg, int cg)
{
	struct fg_policy p = { .gpu_batch_size = gbs, .num_gpu_batches = nb,
			       .weight = { 0, 100 - wg, wg }, .cache = { 0, 100 - cg, cg },
			       .act = { 0, 0, 100 }, .overlap = 1, .pin_weight = 1,
			       .attn_sparsity = 1, .exact = 1 };
	return p;
}

static void predict_ok(const struct fg_cost_case *cc, const struct fg_policy *p,
		       struct fg_cost_prediction *o)
{
	ck_assert_msg(fg_cost_predict(cc, p, o) == 0, "%s", fg_last_error_text());
}

#ifdef HAVE_GLPK

static void show(const char *title, const struct fg_optimize_out *o)
{
	printf("%s (%lld LPs):\n", title, (long long)o->lps);
	fg_optimize_print(stdout, o);
	fflush(stdout);
}

/* FlexGen's published OPT-30B policy on the T4 (benchmark suite, prompt 512,
 * gen 32): --percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 3
 * --cpu-cache-compute: weights mostly on the host, the cache on the host with
 * attention on the CPU, an effective batch of 144. */
START_TEST(test_t4_opt30b)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-30b");
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("OPT-30B on FlexGen's T4", &o);
	const struct fg_policy *b = &o.best[0].policy;
	int64_t batch = b->gpu_batch_size * b->num_gpu_batches;
	ck_assert_msg(b->weight[FG_ROLE_HOST] >= 60 && b->weight[FG_ROLE_COMPUTE] <= 30,
		      "weights %d%% compute, %d%% host: FlexGen keeps them mostly on the host",
		      b->weight[FG_ROLE_COMPUTE], b->weight[FG_ROLE_HOST]);
	ck_assert_msg(b->cache[FG_ROLE_HOST] >= 80 && b->cpu_cache_compute,
		      "cache %d%% on the host, cpu_cache_compute %d: FlexGen keeps it on the host with CPU attention",
		      b->cache[FG_ROLE_HOST], b->cpu_cache_compute);
	ck_assert_msg(batch >= 64, "effective batch %lld: FlexGen's is 144", (long long)batch);
	ck_assert(!b->compress_weight && !b->compress_cache); /* no int4 rate given */
	for (int r = 0; r < FG_ROLES; r++)
		ck_assert_uint_le(o.best[0].pred.mem.total[r], o.best[0].pred.capacity[r]);
	fg_optimize_out_free(&o);
}
END_TEST

/* FlexGen's published OPT-175B policy on the T4: --percent 0 50 0 0 0 100
 * --gpu-batch-size 32 --num-gpu-batches 8 --cpu-cache-compute: the weights
 * (325 GB, more than the DRAM) half on the host, half on disk, none on the
 * GPU; the cache on disk; an effective batch of 256. */
/* The Llama family plans like OPT: Llama-2-70B (grouped-query, 8 key/value
 * heads of 128) on FlexGen's T4.  Its KV cache is kv_heads wide: per
 * sequence and position 2 x 80 layers x 1024 values, an eighth of a
 * multi-head cache of the same hidden size. */
START_TEST(test_t4_llama2_70b)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "llama-2-70b");
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("Llama-2-70B on FlexGen's T4", &o);
	const struct fg_policy *b = &o.best[0].policy;
	for (int r = 0; r < FG_ROLES; r++)
		ck_assert_uint_le(o.best[0].pred.mem.total[r], o.best[0].pred.capacity[r]);
	const struct fg_plan *m = &o.best[0].pred.mem;
	uint64_t cache = 0;
	for (int r = 0; r < FG_ROLES; r++)
		cache += m->kv[r];
	uint64_t want = 0;
	for (int r = 0; r < FG_ROLES; r++)
		if (m->ccount[r])
			want += ((uint64_t)m->ccount[r] * 544 * 1024 * 2 + 63) & ~(uint64_t)63;
	ck_assert_msg(!b->compress_cache, "no int4 rate given");
	ck_assert_uint_eq(cache, want);
	fg_optimize_out_free(&o);
}
END_TEST

START_TEST(test_t4_opt175b)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-175b");
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("OPT-175B on FlexGen's T4", &o);
	const struct fg_policy *b = &o.best[0].policy;
	int64_t batch = b->gpu_batch_size * b->num_gpu_batches;
	ck_assert_msg(b->weight[FG_ROLE_COMPUTE] <= 10 && b->weight[FG_ROLE_HOST] >= 30 &&
		      b->weight[FG_ROLE_DISK] >= 20,
		      "weights %d/%d/%d: FlexGen splits them between host and disk",
		      b->weight[FG_ROLE_COMPUTE], b->weight[FG_ROLE_HOST], b->weight[FG_ROLE_DISK]);
	ck_assert_msg(b->cache[FG_ROLE_DISK] >= 80, "cache %d%% on disk: FlexGen keeps it there",
		      b->cache[FG_ROLE_DISK]);
	ck_assert_msg(batch >= 128, "effective batch %lld: FlexGen's is 256", (long long)batch);
	fg_optimize_out_free(&o);
}
END_TEST

/* FlexGen's published compressed OPT-175B policy on the T4: --percent 0 100
 * 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 3 --compress-weight
 * --compress-cache: with 4-bit weights (about 92 GB) everything fits on the
 * host.  FlexGen fits no int4 rate; 79 GB/s is assumed here (the policy keeps
 * its shape from 30 to 300 GB/s). */
START_TEST(test_t4_opt175b_compressed)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-175b");
	p.cc.hw.q4_decode_bdw = 79;
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("OPT-175B on FlexGen's T4, int4 allowed", &o);
	const struct fg_policy *b = &o.best[0].policy;
	int64_t batch = b->gpu_batch_size * b->num_gpu_batches;
	ck_assert_msg(b->compress_weight && b->compress_cache, "FlexGen compresses both");
	ck_assert_msg(b->weight[FG_ROLE_HOST] >= 90 && b->cache[FG_ROLE_HOST] >= 80,
		      "weights %d%%, cache %d%% on the host: FlexGen puts all of both there",
		      b->weight[FG_ROLE_HOST], b->cache[FG_ROLE_HOST]);
	ck_assert_msg(batch >= 64, "effective batch %lld: FlexGen's is 144", (long long)batch);
	fg_optimize_out_free(&o);
}
END_TEST

/* With only an fp8 rate profiled (a backend that reads fp8 weights, no
 * int4), OPT-175B's 325 GB of fp16 weights would spill to the T4's disk;
 * in fp8 (about 175 GB) they fit its host memory: the optimizer stores them
 * so, and cannot compress the cache (no int4 rate). */
START_TEST(test_t4_opt175b_fp8)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-175b");
	p.cc.hw.f8_decode_bdw = 158;
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("OPT-175B on FlexGen's T4, fp8 weights allowed", &o);
	const struct fg_policy *b = &o.best[0].policy;
	ck_assert_msg(b->compress_weight && b->weight_fp8, "weights stored %s",
		      b->compress_weight ? "in 4-bit" : "in fp16");
	ck_assert_msg(!b->compress_cache, "a 4-bit cache with no int4 rate");
	ck_assert_msg(b->weight[FG_ROLE_DISK] == 0, "%d%% of the fp8 weights on disk",
		      b->weight[FG_ROLE_DISK]);
	fg_optimize_out_free(&o);
	/* with an fp8 cache's attention as fast a byte as fp16's, the host's
	 * room left beside 175 GB of weights holds twice the sequences in fp8:
	 * the optimizer stores the cache so */
	t4_params(&p, "opt-175b");
	p.cc.hw.f8_decode_bdw = 158;
	p.cc.hw.attn_decode_f8_bdw = p.cc.hw.attn_decode_bdw;
	p.cc.hw.cpu_attn_f8_bdw = p.cc.hw.cpu_attn_bdw;
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	show("OPT-175B on FlexGen's T4, fp8 weights and cache allowed", &o);
	b = &o.best[0].policy;
	ck_assert_msg(b->compress_weight && b->weight_fp8 && b->compress_cache && b->cache_fp8,
		      "weights %s, cache %s", b->weight_fp8 ? "fp8" : "not fp8",
		      !b->compress_cache ? "plain" : b->cache_fp8 ? "fp8" : "int4");
	fg_optimize_out_free(&o);
	/* --no-compress keeps them fp16 */
	t4_params(&p, "opt-175b");
	p.cc.hw.f8_decode_bdw = 158;
	p.no_compress = 1;
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(o.best[0].policy.compress_weight, 0);
	fg_optimize_out_free(&o);
}
END_TEST

/* Nothing fits: the error says how much is missing on which tier. */
START_TEST(test_infeasible)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	const char *msg;

	/* 325 GB of weights in 16 + 64 + 100 GB */
	t4_params(&p, "opt-175b");
	p.cc.hw.cpu_mem = (uint64_t)(64 * GiB);
	p.cc.hw.disk_mem = (uint64_t)(100 * GiB);
	p.margin = 0;
	ck_assert_int_eq(fg_optimize(&p, &o), -ENOSPC);
	msg = fg_last_error_text();
	printf("infeasible (memory): %s\n", msg);
	ck_assert_ptr_nonnull(strstr(msg, "opt-175b does not fit"));
	ck_assert_ptr_nonnull(strstr(msg, "disk tier"));
	ck_assert_int_eq(o.nbest, 0);
	/* at least the weights' excess over every tier together */
	double total = 0;
	for (int r = 0; r < FG_ROLES; r++)
		total += (double)o.missing[r];
	ck_assert_msg(total >= 325 * 1e9 - 180 * GiB, "missing %.1f GB in all", total / GiB);
	ck_assert_msg(o.missing[FG_ROLE_DISK] > 0, "the excess goes to the disk tier first");
	fg_optimize_out_free(&o);

	/* a GPU too small for one sequence's workspace: missing on the compute tier */
	t4_params(&p, "opt-30b");
	p.cc.hw.gpu_mem = 64 << 20;
	ck_assert_int_eq(fg_optimize(&p, &o), -ENOSPC);
	msg = fg_last_error_text();
	printf("infeasible (GPU): %s\n", msg);
	ck_assert_msg(o.missing[FG_ROLE_COMPUTE] > 0, "%s", msg);
	ck_assert_ptr_nonnull(strstr(msg, "compute tier"));
	fg_optimize_out_free(&o);

	/* bad inputs are refused with a line saying what */
	t4_params(&p, "opt-30b");
	p.cc.prompt_len = 2040; /* + 32 > 2048 positions */
	ck_assert_int_eq(fg_optimize(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "positions"));
	t4_params(&p, "opt-30b");
	p.margin = 0.9;
	ck_assert_int_eq(fg_optimize(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "margin"));
	t4_params(&p, "opt-30b");
	p.cc.hw.ctog_bdw = 0;
	ck_assert_int_eq(fg_optimize(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "ctog_bdw"));
	t4_params(&p, "opt-30b");
	p.cc.hw.act_bytes = 3;
	ck_assert_int_eq(fg_optimize(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "act_bytes"));
	t4_params(&p, "opt-30b");
	p.cc.hw.mm_flops_decode = NAN;
	ck_assert_int_eq(fg_optimize(&p, &o), -EINVAL);
}
END_TEST

/* More GPU memory never predicts a lower throughput (the optimum over a
 * larger feasible set), for the realized policy and for the LP's optimum. */
START_TEST(test_monotone_gpu_memory)
{
	static const char *const models[] = { "opt-6.7b", "opt-30b", "opt-175b" };
	static const double gb[] = { 3, 4, 6, 8, 12, 16, 32, 80 };
	for (int m = 0; m < 3; m++) {
		double prev = 0;
		for (size_t i = 0; i < sizeof(gb) / sizeof(gb[0]); i++) {
			struct fg_optimize_params p;
			struct fg_optimize_out o;
			t4_params(&p, models[m]);
			p.margin = 0.05;
			p.top = 1;
			p.cc.hw.gpu_mem = (uint64_t)(gb[i] * GiB);
			int rc = fg_optimize(&p, &o);
			double tps = rc ? 0 : o.best[0].pred.total_tps;
			printf("%s, %4.0f GB GPU: %s %.4f token/s\n", models[m], gb[i],
			       rc ? "nothing fits," : "best", tps);
			ck_assert_msg(rc == 0 || rc == -ENOSPC, "%s", fg_last_error_text());
			ck_assert_msg(tps >= prev * (1 - 1e-9),
				      "%s: %.0f GB of GPU memory predicts %.6f token/s, less than %.6f with less",
				      models[m], gb[i], tps, prev);
			prev = tps;
			if (!rc)
				fg_optimize_out_free(&o);
		}
	}
}
END_TEST

/* The LP solves the cost model: no policy of a percent grid, priced by the
 * same model and fitting the same capacities, beats the optimizer's best. */
START_TEST(test_lp_against_grid)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-30b");
	p.cc.hw.gpu_mem = (uint64_t)(24 * GiB);
	p.gpu_batch_size = 32;
	p.num_gpu_batches = 4;
	ck_assert_msg(fg_optimize(&p, &o) == 0, "%s", fg_last_error_text());
	double best = o.best[0].pred.total_tps, grid = 0;
	struct fg_policy gp = { 0 };
	for (int flags = 0; flags < 4; flags++)
		for (int wg = 0; wg <= 100; wg += 10)
			for (int wc = 0; wg + wc <= 100; wc += 10)
				for (int cg = 0; cg <= 100; cg += 10)
					for (int cc = 0; cg + cc <= 100; cc += 10)
						for (int hg = 0; hg <= 100; hg += 25) {
							struct fg_policy q = {
								.gpu_batch_size = 32, .num_gpu_batches = 4,
								.weight = { 100 - wg - wc, wc, wg },
								.cache = { 100 - cg - cc, cc, cg },
								.act = { 0, 100 - hg, hg },
								.overlap = 1, .sep_layer = flags & 1,
								.pin_weight = 1, .cpu_cache_compute = flags >> 1,
								.attn_sparsity = 1, .exact = 1,
							};
							struct fg_cost_prediction pr;
							ck_assert_int_eq(fg_cost_predict(&p.cc, &q, &pr), 0);
							int ok = 1;
							for (int r = 0; r < FG_ROLES; r++)
								ok &= (double)pr.mem.total[r] <=
								      (double)pr.capacity[r] * (1 - p.margin);
							if (ok && pr.total_tps > grid)
								grid = pr.total_tps, gp = q;
						}
	printf("LP best %.4f token/s (%d %d %d %d %d %d), grid best %.4f (%d %d %d %d %d %d)\n",
	       best, o.best[0].policy.weight[2], o.best[0].policy.weight[1],
	       o.best[0].policy.cache[2], o.best[0].policy.cache[1], o.best[0].policy.act[2],
	       o.best[0].policy.act[1], grid, gp.weight[2], gp.weight[1], gp.cache[2], gp.cache[1],
	       gp.act[2], gp.act[1]);
	ck_assert_msg(grid > 0, "some grid policy fits");
	ck_assert_msg(best >= grid * (1 - 1e-3), "the LP's %.4f token/s lose to a grid policy's %.4f",
		      best, grid);
	fg_optimize_out_free(&o);
}
END_TEST

/* A sliding window (Mistral-7B's 4096 on every layer) with a prompt of
 * 8192: the cache a ring of the window's length fits half again the batch
 * on the T4, and the optimizer finds the larger batch and a higher
 * throughput; without the ring (no_window_ring), the cache of every
 * position, the smaller one.  Within the window, the same policy. */
START_TEST(test_window_ring_optimize)
{
	struct fg_optimize_params p;
	struct fg_optimize_out ring, full;

	t4_params(&p, "mistral-7b");
	p.cc.prompt_len = 8192;
	p.cc.gen_len = 1024;
	p.no_compress = 1;
	/* the GPU and 24 GiB of host memory, no disk: the cache bounds the batch */
	p.cc.hw.cpu_mem = (uint64_t)(24 * GiB);
	p.cc.hw.disk_mem = 0;
	p.margin = 0.05;
	ck_assert_msg(fg_optimize(&p, &ring) == 0, "%s", fg_last_error_text());
	show("Mistral-7B on FlexGen's T4, 8192 + 1024 tokens, the window's ring", &ring);
	p.no_window_ring = 1;
	ck_assert_msg(fg_optimize(&p, &full) == 0, "%s", fg_last_error_text());
	show("the same, every position cached", &full);
	const struct fg_optimize_result *r = &ring.best[0], *f = &full.best[0];
	ck_assert(r->policy.window_ring && !f->policy.window_ring);
	ck_assert_int_eq(r->pred.mem.cols, 4096);
	ck_assert_int_eq(f->pred.mem.cols, 8192 + 1024);
	int64_t rb = r->policy.gpu_batch_size * r->policy.num_gpu_batches;
	int64_t fb = f->policy.gpu_batch_size * f->policy.num_gpu_batches;
	ck_assert_msg(rb > fb, "ring batch %lld, full %lld", (long long)rb, (long long)fb);
	ck_assert_msg(r->pred.total_tps > 1.1 * f->pred.total_tps, "ring %.3f token/s, full %.3f",
		      r->pred.total_tps, f->pred.total_tps);
	fg_optimize_out_free(&ring);
	fg_optimize_out_free(&full);

	/* within the window the ring changes nothing */
	p.cc.prompt_len = 512;
	p.cc.gen_len = 32;
	p.no_window_ring = 0;
	ck_assert_int_eq(fg_optimize(&p, &ring), 0);
	p.no_window_ring = 1;
	ck_assert_int_eq(fg_optimize(&p, &full), 0);
	ck_assert_int_eq(ring.best[0].pred.mem.cols, 512 + 32);
	ck_assert(ring.best[0].policy.gpu_batch_size == full.best[0].policy.gpu_batch_size &&
		  ring.best[0].policy.num_gpu_batches == full.best[0].policy.num_gpu_batches);
	ck_assert(ring.best[0].pred.total_tps == full.best[0].pred.total_tps);
	fg_optimize_out_free(&ring);
	fg_optimize_out_free(&full);
}
END_TEST


/* The optimizer under refill: its pick is at least as good, priced as a
 * refilled stream, as the static pick priced the same way, and its
 * prediction is that price.  OPT-30B on the H200 preset capped to 16 GiB,
 * where the static pick keeps the cache on the host (a join there computes
 * about its whole GPU batch) and the refilled one may not. */
START_TEST(test_refill_optimize)
{
	struct fg_optimize_params p;
	struct fg_optimize_out st, rf;
	struct fg_config *c;
	struct fg_cost_prediction sp, rp;

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(fg_model_preset("opt-30b", &p.cc.model), 0);
	ck_assert_int_eq(fg_config_new(&c), 0);
	ck_assert_msg(fg_hardware_load(c, "h200") == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(fg_hardware_from_config(c, &p.cc.hw), 0);
	fg_config_free(c);
	p.cc.hw.gpu_mem = (uint64_t)(16 * GiB);
	p.cc.prompt_len = 512;
	p.cc.gen_len = 32;
	p.margin = 0.05;
	ck_assert_msg(fg_optimize(&p, &st) == 0, "%s", fg_last_error_text());
	p.cc.refill = 0.25;
	ck_assert_msg(fg_optimize(&p, &rf) == 0, "%s", fg_last_error_text());
	show("OPT-30B, H200 under 16 GiB, static", &st);
	show("the same, a stream refilling a quarter of the batch", &rf);
	predict_ok(&p.cc, &st.best[0].policy, &sp);
	predict_ok(&p.cc, &rf.best[0].policy, &rp);
	printf("refilled: the static pick %.3f token/s, the refilled pick %.3f\n", sp.total_tps,
	       rp.total_tps);
	ck_assert_double_eq_tol(rf.best[0].pred.total_tps, rp.total_tps, 1e-12 * rp.total_tps);
	ck_assert_int_eq(rf.best[0].pred.steady, fg_cost_refills(&p.cc));
	ck_assert(rp.total_tps >= sp.total_tps * (1 - 1e-9));
	fg_optimize_out_free(&st);
	fg_optimize_out_free(&rf);

	/* At the refilled pick's shape (64 x 7, int4 weights and cache) no
	 * policy of a grid of placements, refilled, fitting the same memory,
	 * beats the search's. */
	p.gpu_batch_size = 64;
	p.num_gpu_batches = 7;
	ck_assert_msg(fg_optimize(&p, &rf) == 0, "%s", fg_last_error_text());
	double grid = 0;
	static const int cgs[] = { 0, 25, 50, 75, 92, 100 };
	for (int wg = 0; wg <= 30; wg++)
		for (size_t i = 0; i < sizeof(cgs) / sizeof(cgs[0]); i++) {
			struct fg_policy q = { .gpu_batch_size = 64, .num_gpu_batches = 7,
					       .weight = { 0, 100 - wg, wg },
					       .cache = { 0, 100 - cgs[i], cgs[i] },
					       .act = { 0, 0, 100 }, .overlap = 1, .pin_weight = 1,
					       .compress_weight = 1, .compress_cache = 1,
					       .attn_sparsity = 1, .exact = 1 };
			struct fg_cost_prediction g;
			predict_ok(&p.cc, &q, &g);
			int ok = 1;
			for (int r = 0; r < FG_ROLES; r++)
				ok &= (double)g.mem.total[r] <= (double)g.capacity[r] * (1 - p.margin);
			if (ok && g.total_tps > grid)
				grid = g.total_tps;
		}
	printf("refilled, 64 x 7: the search %.3f token/s, a grid's best %.3f\n",
	       rf.best[0].pred.total_tps, grid);
	ck_assert(grid > 0);
	ck_assert(rf.best[0].pred.total_tps >= grid * (1 - 1e-3));
	/* the LP prices the same turnover: its optimum is the pick's, to the
	 * rounding of the shares */
	printf("the LP's optimum %.3f token/s\n", rf.best[0].lp_tps);
	ck_assert_double_eq_tol(rf.best[0].lp_tps, rf.best[0].pred.total_tps,
				0.01 * rf.best[0].pred.total_tps);
	fg_optimize_out_free(&rf);
}
END_TEST

#else /* !HAVE_GLPK */

START_TEST(test_no_glpk)
{
	struct fg_optimize_params p;
	struct fg_optimize_out o;
	t4_params(&p, "opt-30b");
	ck_assert_int_eq(fg_optimize(&p, &o), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "libglpk-dev"));
}
END_TEST

#endif

/* The cost model's link times respond to the hardware the way they must. */
START_TEST(test_cost_model_sanity)
{
	struct fg_cost_case cc = { .prompt_len = 512, .gen_len = 32 };
	struct fg_policy p = { .gpu_batch_size = 48, .num_gpu_batches = 3,
			       .weight = { 0, 80, 20 }, .cache = { 0, 100, 0 }, .act = { 0, 100, 0 },
			       .overlap = 1, .pin_weight = 1, .cpu_cache_compute = 1,
			       .attn_sparsity = 1, .exact = 1 };
	struct fg_cost_prediction a, b;

	ck_assert_int_eq(fg_model_preset("opt-30b", &cc.model), 0);
	t4(&cc.hw);
	ck_assert_msg(fg_cost_predict(&cc, &p, &a) == 0, "%s", fg_last_error_text());
	fg_cost_print(stdout, &a, NULL);
	ck_assert(a.prefill_s > 0 && a.decode_s > 0 && isfinite(a.total_tps));
	/* faster links or compute never predict slower runs */
	double *rates[] = { &cc.hw.ctog_bdw, &cc.hw.gtoc_bdw, &cc.hw.mm_flops_prefill,
			    &cc.hw.mm_flops_decode, &cc.hw.attn_flops, &cc.hw.cpu_attn_bdw };
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		double keep = *rates[i];
		*rates[i] *= 2;
		ck_assert_int_eq(fg_cost_predict(&cc, &p, &b), 0);
		ck_assert_msg(b.total_tps >= a.total_tps, "rate %zu doubled: %.4f < %.4f", i,
			      b.total_tps, a.total_tps);
		*rates[i] = keep;
	}
	/* Host attention is the host's work: the weight loads overlap it, and
	 * the decode layer is the longer of loads + device work and device +
	 * host work, never all three (the two sums, recomputed from the links). */
	double *dl = a.link[FG_STAGE_DECODE];
	ck_assert(dl[FG_LINK_HOST] > 0 && dl[FG_LINK_CTOG] > 0);
	double longer = fmax(dl[FG_LINK_CTOG] + dl[FG_LINK_COMP], dl[FG_LINK_COMP] + dl[FG_LINK_HOST]);
	ck_assert_msg(fabs(a.decode_s - longer) < 0.02 * longer + 0.05, "decode %.3f s, rule %.3f s",
		      a.decode_s, longer);
	ck_assert(a.decode_s < dl[FG_LINK_CTOG] + dl[FG_LINK_COMP] + dl[FG_LINK_HOST] - 0.1);
	/* With the host's attention beside the device's (host_overlap: GPU
	 * batches on two streams), a unit's run takes the longer side plus one
	 * GPU batch of the other; with one GPU batch, the two in turn. */
	struct fg_policy hp = p;
	hp.host_overlap = 1;
	ck_assert_int_eq(fg_cost_predict(&cc, &hp, &b), 0);
	double *hl = b.link[FG_STAGE_DECODE], nb = (double)hp.num_gpu_batches;
	ck_assert(fabs(hl[FG_LINK_HOST1] - hl[FG_LINK_HOST] / nb) < 1e-9 * hl[FG_LINK_HOST]);
	double beside = fmax(fmax(hl[FG_LINK_CTOG] + hl[FG_LINK_COMP],
				  hl[FG_LINK_COMP] + hl[FG_LINK_HOST] / nb),
			     hl[FG_LINK_HOST] + hl[FG_LINK_COMP] / nb);
	ck_assert_msg(fabs(b.decode_s - beside) < 0.02 * beside + 0.05, "beside: decode %.3f s, rule %.3f s",
		      b.decode_s, beside);
	ck_assert(b.decode_s <= a.decode_s + 1e-9);
	ck_assert(a.link[FG_STAGE_DECODE][FG_LINK_HOST1] == 0); /* (in turn: none) */
	hp.num_gpu_batches = p.num_gpu_batches = 1;
	struct fg_cost_prediction one, one_beside;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &one), 0);
	ck_assert_int_eq(fg_cost_predict(&cc, &hp, &one_beside), 0);
	ck_assert(fabs(one.decode_s - one_beside.decode_s) < 1e-9 * one.decode_s);
	p.num_gpu_batches = 3;
	/* with sep_layer the attention block's loads (a third of OPT's layer)
	 * do not hide behind the host's attention */
	ck_assert(dl[FG_LINK_ALOAD] == 0);
	struct fg_policy sp = p;
	sp.sep_layer = 1;
	ck_assert_int_eq(fg_cost_predict(&cc, &sp, &b), 0);
	double *sl = b.link[FG_STAGE_DECODE];
	ck_assert(fabs(sl[FG_LINK_ALOAD] - sl[FG_LINK_CTOG] / 3) < 0.01 * sl[FG_LINK_CTOG]);
	ck_assert(b.decode_s >= sl[FG_LINK_COMP] + sl[FG_LINK_HOST] + sl[FG_LINK_ALOAD] - 1e-9);
	/* host memory shared by the loads and host attention bounds the step:
	 * at 1 GB/s it is the slowest thing, at none it is no bound */
	ck_assert(dl[FG_LINK_HMEM] == 0);
	cc.hw.cpu_mem_bdw = 1;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &b), 0);
	ck_assert(b.link[FG_STAGE_DECODE][FG_LINK_HMEM] > longer);
	ck_assert(fabs(b.decode_s - b.link[FG_STAGE_DECODE][FG_LINK_HMEM]) < 1e-6 * b.decode_s + 0.05);
	cc.hw.cpu_mem_bdw = 0;
	/* host weights cross the link once per layer and step: moving them to disk costs */
	struct fg_policy d = p;
	d.weight[FG_ROLE_HOST] = 40;
	d.weight[FG_ROLE_DISK] = 40;
	ck_assert_int_eq(fg_cost_predict(&cc, &d, &b), 0);
	ck_assert(b.decode_s > a.decode_s);
	ck_assert_uint_lt(b.mem.total[FG_ROLE_HOST], a.mem.total[FG_ROLE_HOST]);
	/* compressed weights: about 4.5/16 of the bytes, and a rate is required */
	struct fg_policy q = p;
	q.compress_weight = 1;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &b), -EINVAL);
	cc.hw.q4_decode_bdw = 100;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &b), 0);
	double ratio = (double)b.mem.weights[FG_ROLE_HOST] / (double)a.mem.weights[FG_ROLE_HOST];
	printf("compressed / fp16 host weights: %.4f\n", ratio);
	ck_assert(ratio > 4.4 / 16 && ratio < 4.7 / 16);
	ck_assert(b.link[FG_STAGE_DECODE][FG_LINK_CTOG] < a.link[FG_STAGE_DECODE][FG_LINK_CTOG] * 0.3);
	/* a compressed cache takes about 4.5/16 of the memory; host attention over
	 * it needs its own rate, and costs in proportion to it */
	q = p;
	q.compress_cache = 1;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &b), -EINVAL);
	cc.hw.cpu_attn_q4_bdw = 2;
	ck_assert_msg(fg_cost_predict(&cc, &q, &b) == 0, "%s", fg_last_error_text());
	ck_assert(b.mem.total[FG_ROLE_HOST] < a.mem.total[FG_ROLE_HOST] * 0.6);
	struct fg_cost_prediction fast;
	cc.hw.cpu_attn_q4_bdw = 4;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &fast), 0);
	ck_assert(fast.decode_s < b.decode_s);
	q.cpu_cache_compute = 0;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &b), 0);
	ck_assert(b.mem.total[FG_ROLE_HOST] < a.mem.total[FG_ROLE_HOST] * 0.6);
	/* an fp8 cache: 1 + 4/64 bytes a value (the host tier's cache bytes,
	 * against fp16's 2, within the plan's 64-byte alignment), its host
	 * attention priced at cpu_attn_f8_bdw (at cpu_attn_bdw where none was
	 * profiled), in proportion to it */
	struct fg_cost_prediction f8a, f8b;
	q = p;
	q.compress_cache = 1;
	q.cache_fp8 = 1;
	ck_assert_msg(fg_cost_predict(&cc, &q, &f8a) == 0, "%s", fg_last_error_text());
	ratio = (double)f8a.mem.cache[FG_ROLE_HOST] / (double)a.mem.cache[FG_ROLE_HOST];
	printf("fp8 / fp16 host cache: %.4f\n", ratio);
	ck_assert(ratio > 1.0625 / 2 * 0.999 && ratio < 1.0625 / 2 * 1.001);
	cc.hw.cpu_attn_f8_bdw = cc.hw.cpu_attn_bdw / 2;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &f8b), 0);
	ck_assert(f8b.decode_s > f8a.decode_s);
	cc.hw.cpu_attn_f8_bdw = 0;
}
END_TEST

/* A mixture's experts are priced for the tokens routed to them (issue 34):
 * each of Mixtral's 8 is used with chance p = 1 - (1 - k/8)^m in a step of m
 * rows, and then multiplies m k / (8 p) rows.  k = 2 costs far less than 8
 * (every token through every expert, as if dense) in prefill and in a decode
 * step of one row (an expert read with chance 1/4); where a product's time
 * grows in step with its rows (a prefill of 64 x 512 rows), the device time
 * is affine in k (k = 2, 4, 8 evenly spaced by the experts' share).  A decode
 * step of 64 rows uses every expert, each read once: the same time for any k
 * on this hardware, where those reads bound it.  The weight bytes do not
 * depend on k. */
START_TEST(test_cost_active_experts)
{
	struct fg_cost_case cc = { .prompt_len = 512, .gen_len = 32 };
	struct fg_policy p = { .gpu_batch_size = 1, .num_gpu_batches = 1, .overlap = 1,
			       .pin_weight = 1 };
	struct fg_cost_prediction a[3];
	static const int ks[3] = { 2, 4, 8 };

	p.weight[FG_ROLE_COMPUTE] = p.cache[FG_ROLE_COMPUTE] = p.act[FG_ROLE_COMPUTE] = 100;
	ck_assert_int_eq(fg_model_preset("mixtral-8x7b", &cc.model), 0);
	ck_assert_int_eq(cc.model.experts_per_tok, 2);
	t4(&cc.hw);
	for (int bs = 1; bs <= 64; bs *= 64) {
		p.gpu_batch_size = bs;
		for (int i = 0; i < 3; i++) {
			cc.model.experts_per_tok = ks[i];
			ck_assert_msg(fg_cost_predict(&cc, &p, &a[i]) == 0, "%s", fg_last_error_text());
		}
		for (int st = 0; st < FG_STAGES; st++) {
			double t2 = a[0].link[st][FG_LINK_COMP], t4_ = a[1].link[st][FG_LINK_COMP];
			double t8 = a[2].link[st][FG_LINK_COMP];
			printf("mixtral %d x 1, stage %d: device %.4f / %.4f / %.4f s with 2 / 4 / 8 "
			       "experts a token\n", bs, st, t2, t4_, t8);
			ck_assert(t2 <= t4_ && t4_ <= t8);
			if (bs == 64 && st == FG_STAGE_DECODE) { /* every expert read once */
				ck_assert_msg(fabs(t2 - t8) < 0.01 * t8, "%.4f against %.4f", t2, t8);
				continue;
			}
			ck_assert_msg(t2 < 0.7 * t8, "stage %d: %.4f against %.4f", st, t2, t8);
			if (bs == 64) /* 8 192 rows an expert and more */
				ck_assert_msg(fabs((t4_ - t2) - 0.5 * (t8 - t4_)) < 0.05 * (t8 - t4_),
					      "%.4f %.4f %.4f: not affine in k", t2, t4_, t8);
		}
		ck_assert_uint_eq(a[0].mem.weights[FG_ROLE_COMPUTE], a[2].mem.weights[FG_ROLE_COMPUTE]);
	}
}
END_TEST

/* The cost model and a sliding window: the memory plan's cache is the
 * window's ring (bytes in proportion), a decode step reads and loads only
 * the window's positions of a windowed layer (cheaper than the same model
 * without a window, the more the longer the run), and a prefill's
 * attention sees at most the window.  A pipeline's stages keep every
 * position. */
START_TEST(test_window_cost_model)
{
	struct fg_cost_case cc = { .prompt_len = 8192, .gen_len = 1024 };
	struct fg_policy p = { .gpu_batch_size = 4, .num_gpu_batches = 2,
			       .weight = { 0, 100, 0 }, .cache = { 100, 0, 0 }, .act = { 0, 0, 100 },
			       .overlap = 1, .pin_weight = 1, .attn_sparsity = 1, .exact = 1,
			       .window_ring = 1 };
	struct fg_cost_prediction ring, full, none;

	ck_assert_int_eq(fg_model_preset("mistral-7b", &cc.model), 0);
	t4(&cc.hw);
	ck_assert_msg(fg_cost_predict(&cc, &p, &ring) == 0, "%s", fg_last_error_text());
	struct fg_policy q = p;
	q.window_ring = 0;
	ck_assert_int_eq(fg_cost_predict(&cc, &q, &full), 0);
	ck_assert_int_eq(ring.mem.cols, 4096);
	ck_assert_int_eq(full.mem.cols, 9216);
	/* the cache's bytes: the window's share of the positions */
	uint64_t kv = (uint64_t)fg_dim_value(&cc.model, FG_DIM_KV) * 2;
	ck_assert_uint_eq(ring.mem.kv[FG_ROLE_DISK], 4 * 4096 * kv);
	ck_assert_uint_eq(full.mem.kv[FG_ROLE_DISK], 4 * 9216 * kv);
	ck_assert_uint_eq(full.mem.total[FG_ROLE_DISK] - ring.mem.total[FG_ROLE_DISK],
			  (uint64_t)cc.model.layers * p.num_gpu_batches * 2 *
				  (full.mem.kv[FG_ROLE_DISK] - ring.mem.kv[FG_ROLE_DISK]));
	/* traffic: the window's positions whether the cache is a ring or not */
	ck_assert(fabs(ring.decode_s - full.decode_s) < 1e-9 * full.decode_s);
	/* the same model without a window reads and loads every position */
	struct fg_cost_case nw = cc;
	nw.model.sliding_window = 0;
	memset(nw.model.window_layers, 0, sizeof(nw.model.window_layers));
	ck_assert_int_eq(fg_cost_predict(&nw, &p, &none), 0);
	ck_assert_int_eq(none.mem.cols, 9216);
	double wl = ring.link[FG_STAGE_DECODE][FG_LINK_DTOC], nl = none.link[FG_STAGE_DECODE][FG_LINK_DTOC];
	printf("decode disk reads: windowed %.3f s, without a window %.3f s\n", wl, nl);
	/* loads of (4096 - 1) against ~ 8192 + 512 - 1 positions a step */
	ck_assert_msg(wl < 0.5 * nl && wl > 0.45 * nl, "windowed %.3f s, without %.3f s", wl, nl);
	ck_assert(ring.decode_s < none.decode_s && ring.prefill_s < none.prefill_s);
	/* within the window, nothing changes */
	cc.prompt_len = nw.prompt_len = 512;
	cc.gen_len = nw.gen_len = 32;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &ring), 0);
	ck_assert_int_eq(fg_cost_predict(&nw, &p, &none), 0);
	ck_assert_int_eq(ring.mem.cols, 544);
	ck_assert(ring.decode_s == none.decode_s && ring.prefill_s == none.prefill_s &&
		  ring.mem.total[FG_ROLE_DISK] == none.mem.total[FG_ROLE_DISK]);
	/* two pipeline stages: every position */
	cc.prompt_len = 8192;
	cc.gen_len = 1024;
	cc.stages = 2;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &ring), 0);
	ck_assert_int_eq(ring.mem.cols, 9216);
}
END_TEST

/* A pipeline of N stages (issue 13): each stage holds ceil(L / N) layers, so
 * its memory is the plan of that many layers and its step time that of the
 * shorter model; the pipeline pays (N - 1) / m of a step for filling and
 * draining m micro-batches and the activations' hops between stages.  An
 * N-stage run with the same policy is faster than one process, slower than N
 * times, and more micro-batches shrink the bubble. */
START_TEST(test_pipeline_stages)
{
	struct fg_cost_case one = { .prompt_len = 512, .gen_len = 32 }, two, part;
	struct fg_policy p = { .gpu_batch_size = 48, .num_gpu_batches = 4,
			       .weight = { 0, 100, 0 }, .cache = { 100, 0, 0 }, .act = { 100, 0, 0 },
			       .overlap = 1, .pin_weight = 1, .attn_sparsity = 1, .exact = 1 };
	struct fg_cost_prediction a, b, c, d;

	ck_assert_int_eq(fg_model_preset("opt-30b", &one.model), 0);
	t4(&one.hw);
	one.hw.gpu_mem = (uint64_t)(80 * GiB);
	ck_assert_int_eq(fg_cost_predict(&one, &p, &a), 0);
	two = one;
	two.stages = 2;
	ck_assert_int_eq(fg_cost_predict(&two, &p, &b), 0);
	/* the stage's memory: the plan of half the layers (48 of OPT-30B: 24) */
	part = one;
	part.model.layers = 24;
	ck_assert_int_eq(fg_cost_predict(&part, &p, &c), 0);
	for (int r = 0; r < FG_ROLES; r++)
		ck_assert_uint_eq(b.mem.total[r], c.mem.total[r]);
	ck_assert_uint_lt(b.mem.total[FG_ROLE_HOST], a.mem.total[FG_ROLE_HOST] * 0.6);
	/* time: the half model's, times 1 + (N - 1) / m with m = min(N, nb) = 2,
	 * plus the activations' hops (small against a step) */
	double fill = 1 + 1.0 / 2;
	ck_assert(b.decode_s >= c.decode_s * fill && b.decode_s < c.decode_s * fill * 1.05);
	ck_assert(b.total_tps > a.total_tps && b.total_tps < 2 * a.total_tps);
	/* four micro-batches: a quarter of a step's bubble instead of a half */
	two.micro_batches = 4;
	ck_assert_int_eq(fg_cost_predict(&two, &p, &d), 0);
	ck_assert(d.total_tps > b.total_tps);
	printf("OPT-30B weights on host, 48 x 4: one process %.2f token/s, 2 stages %.2f (2 micro-batches), %.2f (4)\n",
	       a.total_tps, b.total_tps, d.total_tps);
}
END_TEST

/* Products of fewer than 64 rows: without mm_gemv_bdw they cost as much as 64
 * rows (FlexGen's memory-bound rule); with it, a one-row product costs its
 * weights over that bandwidth and the time grows linearly to the 64-row one. */
START_TEST(test_small_products)
{
	struct fg_cost_case cc = { .prompt_len = 8, .gen_len = 2 };
	struct fg_policy p = { .gpu_batch_size = 1, .num_gpu_batches = 1,
			       .weight[FG_ROLE_COMPUTE] = 100, .cache[FG_ROLE_COMPUTE] = 100,
			       .act[FG_ROLE_COMPUTE] = 100, .overlap = 1, .pin_weight = 1,
			       .attn_sparsity = 1 };
	struct fg_cost_prediction flat[3], slope[3];
	static const int64_t bs[3] = { 1, 33, 64 };

	ck_assert_int_eq(fg_model_preset("opt-6.7b", &cc.model), 0);
	t4(&cc.hw);
	cc.hw.attn_decode_bdw = 1e6; /* leave the linear layers alone in the decode step */
	for (int i = 0; i < 3; i++) {
		p.gpu_batch_size = bs[i];
		cc.hw.mm_gemv_bdw = 0;
		ck_assert_int_eq(fg_cost_predict(&cc, &p, &flat[i]), 0);
		/* a one-row product at 1/8 of the 64-row time */
		cc.hw.mm_gemv_bdw = 8 * cc.hw.mm_flops_decode * 1e3 / 64;
		ck_assert_int_eq(fg_cost_predict(&cc, &p, &slope[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		printf("batch %lld: decode %.4f s flat, %.4f s with mm_gemv_bdw\n", (long long)bs[i],
		       flat[i].decode_s, slope[i].decode_s);
	/* 64 rows: unchanged.  Fewer: the saving is (t64 - t1) of every product,
	 * t1 = t64 / 8, scaled by 1 - (m - 1) / 63: all of it at one row, 31/63 of
	 * it at 33 rows.  One decode step of l layers (q, k, v, out: h x h; fc1,
	 * fc2: h x f) and the logits (h x V). */
	const struct fg_model_config *m = &cc.model;
	double flops64 = 2.0 * 64 * ((double)m->layers * (4.0 * m->hidden * m->hidden +
				     2.0 * m->hidden * m->ffn) + (double)m->hidden * m->vocab);
	double t64 = flops64 / (cc.hw.mm_flops_decode * 1e12);
	double save1 = flat[0].decode_s - slope[0].decode_s;
	double save33 = flat[1].decode_s - slope[1].decode_s;
	ck_assert_double_eq_tol(slope[2].decode_s, flat[2].decode_s, 1e-9 * flat[2].decode_s);
	ck_assert_double_eq_tol(save1, 7.0 / 8 * t64, 1e-6 * t64);
	ck_assert_double_eq_tol(save33, 31.0 / 63 * save1, 1e-6 * save1);
	/* 4-bit weights: a one-row product costs its packed bytes over q4_decode_bdw
	 * (doubling that rate saves half of it); 64 rows cost the fp16 64-row time */
	struct fg_cost_prediction q4a, q4b;
	double packed = 0;
	p.compress_weight = 1;
	p.gpu_batch_size = 1;
	cc.hw.mm_gemv_bdw = 0;
	for (int i = 0; i < m->layers; i++)
		packed += 4.0 * (double)fg_q4_bytes((uint64_t)m->hidden, (uint64_t)m->hidden, 0) +
			  (double)fg_q4_bytes((uint64_t)m->ffn, (uint64_t)m->hidden, 0) +
			  (double)fg_q4_bytes((uint64_t)m->hidden, (uint64_t)m->ffn, 0);
	packed += (double)fg_q4_bytes((uint64_t)m->vocab, (uint64_t)m->hidden, 0);
	cc.hw.q4_decode_bdw = 100;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4a), 0);
	cc.hw.q4_decode_bdw = 200;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4b), 0);
	double want = packed / 200e9;
	ck_assert_double_eq_tol(q4a.decode_s - q4b.decode_s, want, 1e-6 * want);
	p.gpu_batch_size = 64;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4a), 0);
	ck_assert_double_eq_tol(q4a.decode_s, flat[2].decode_s, 1e-9 * flat[2].decode_s);
	/* fp8 weights: the same with their stored bytes over f8_decode_bdw; with
	 * no fp8 rate profiled they are priced as fp16 products (flat[0]) */
	double stored = 0;
	p.weight_fp8 = 1;
	p.gpu_batch_size = 1;
	for (int i = 0; i < m->layers; i++)
		stored += 4.0 * (double)fg_f8_bytes((uint64_t)m->hidden, (uint64_t)m->hidden) +
			  (double)fg_f8_bytes((uint64_t)m->ffn, (uint64_t)m->hidden) +
			  (double)fg_f8_bytes((uint64_t)m->hidden, (uint64_t)m->ffn);
	stored += (double)fg_f8_bytes((uint64_t)m->vocab, (uint64_t)m->hidden);
	cc.hw.f8_decode_bdw = 0;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4a), 0);
	ck_assert_double_eq_tol(q4a.decode_s, flat[0].decode_s, 1e-9 * flat[0].decode_s);
	cc.hw.f8_decode_bdw = 100;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4a), 0);
	cc.hw.f8_decode_bdw = 200;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &q4b), 0);
	want = stored / 200e9;
	ck_assert_double_eq_tol(q4a.decode_s - q4b.decode_s, want, 1e-6 * want);
	cc.hw.f8_decode_bdw = 0;
	p.weight_fp8 = 0;
	p.compress_weight = 0;

	/* a one-row rate above the 64-row one is capped: never cheaper per row than 64 rows */
	cc.hw.mm_gemv_bdw = 1e6;
	p.gpu_batch_size = 64;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &slope[1]), 0);
	ck_assert_double_eq_tol(slope[1].decode_s, flat[2].decode_s, 1e-9 * flat[2].decode_s);
}
END_TEST

/* ---- the memory model against a real engine ------------------------------------ */

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static struct fg_config *cpu_config(void)
{
	struct fg_config *c;
	char kv[400];
	ck_assert_int_eq(fg_config_new(&c), 0);
	set(c, "model.path=dummy:opt-125m");
	set(c, "compute.plugin=cpu_blas");
	set(c, "tier.compute.plugin=pinned_host");
	set(c, "tier.host.plugin=pinned_host");
	set(c, "tier.disk.plugin=posix_file");
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmpdir);
	set(c, kv);
	return c;
}

struct mem_case {
	const char *set[6];
};

static const struct mem_case mem_cases[] = {
	{ { "policy.percent=100 0 100 0 100 0" } },
	{ { "policy.percent=0 100 0 100 0 100", "policy.gpu_batch_size=2", "policy.num_gpu_batches=3" } },
	{ { "policy.percent=30 50 30 50 30 50", "policy.gpu_batch_size=3", "policy.num_gpu_batches=4" } },
	{ { "policy.percent=30 50 30 50 30 50", "policy.placement=exact", "policy.gpu_batch_size=3", "policy.num_gpu_batches=4" } },
	{ { "policy.percent=20 30 25 25 0 50", "policy.placement=exact", "policy.sep_layer=false", "policy.overlap=false" } },
	{ { "policy.percent=0 0 0 0 0 0", "policy.gpu_batch_size=5" } },
	{ { "policy.percent=10 60 0 70 100 0", "policy.cpu_cache_compute=true", "policy.gpu_batch_size=7" } },
	{ { "policy.percent=10 60 20 50 100 0", "policy.cpu_cache_compute=true", "policy.placement=exact" } },
	{ { "policy.percent=20 50 20 50 50 50", "policy.compress_weight=true", "policy.compress_cache=true", "policy.num_gpu_batches=2" } },
	{ { "policy.percent=20 50 20 50 50 50", "policy.compress_weight=true", "policy.placement=exact", "policy.sep_layer=false" } },
};
#define NMEM (int)(sizeof(mem_cases) / sizeof(mem_cases[0]))

/* fg_layout_total equals the model's placed bytes plus fg_forward_bytes, on
 * the compute tier as it is (host memory) and as device memory would be (the
 * tier's host-memory flag cleared after opening: only allocation is tested). */
START_TEST(test_memory_matches_engine)
{
	const struct mem_case *mc = &mem_cases[_i];
	struct fg_config *c = cpu_config();
	struct fg_engine *e;
	for (int i = 0; i < 6 && mc->set[i]; i++)
		set(c, mc->set[i]);
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	for (int device = 0; device <= 1; device++) {
		if (device)
			e->tiers[FG_ROLE_COMPUTE].info.flags &= ~(uint32_t)FG_STORAGE_HOST_MEMORY;
		struct fg_forward_env env;
		struct fg_forward *f;
		uint64_t run[FG_ROLES];
		fg_engine_forward_env(e, e->policy.num_gpu_batches, &env);
		ck_assert_msg(fg_forward_new(&f, &env, 24, 8) == 0, "%s", fg_last_error_text());
		fg_forward_bytes(f, run);
		fg_forward_free(f);

		struct fg_plan_env le = { fg_dtype_size(e->be.info.act_dtype), device,
					   fg_dtype_size(e->be.info.hidden_dtype), 0, 1 };
		struct fg_plan lt;
		ck_assert_int_eq(fg_plan_make(&e->model.cfg, &e->policy, &le, 24, 8, &lt), 0);
		for (int r = 0; r < FG_ROLES; r++) {
			printf("case %d%s: %s: weights %llu (engine %llu), total %llu (engine %llu)\n",
			       _i, device ? " (device)" : "", fg_role_name(r),
			       (unsigned long long)lt.weights[r],
			       (unsigned long long)e->model.bytes[r],
			       (unsigned long long)lt.total[r],
			       (unsigned long long)(e->model.bytes[r] + run[r]));
			ck_assert_uint_eq(lt.weights[r], e->model.bytes[r]);
			ck_assert_uint_eq(lt.total[r], e->model.bytes[r] + run[r]);
		}
	}
	e->tiers[FG_ROLE_COMPUTE].info.flags |= FG_STORAGE_HOST_MEMORY;
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* The prediction of bench's policy uses the same memory model: predicted
 * per-tier bytes equal what a run places. */
START_TEST(test_predict_engine_policy)
{
	struct fg_config *c = cpu_config();
	struct fg_engine *e;
	set(c, "policy.percent=30 50 30 50 0 100");
	set(c, "policy.placement=exact");
	set(c, "policy.gpu_batch_size=4");
	set(c, "policy.num_gpu_batches=2");
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	struct fg_cost_case cc = { .model = e->model.cfg, .prompt_len = 32, .gen_len = 8 };
	t4(&cc.hw);
	cc.hw.act_bytes = 4;
	cc.hw.compute_host_memory = 1;
	struct fg_cost_prediction pr;
	ck_assert_int_eq(fg_cost_predict(&cc, &e->policy, &pr), 0);
	struct fg_forward_env env;
	struct fg_forward *f;
	uint64_t run[FG_ROLES];
	fg_engine_forward_env(e, 2, &env);
	ck_assert_int_eq(fg_forward_new(&f, &env, 32, 8), 0);
	fg_forward_bytes(f, run);
	fg_forward_free(f);
	for (int r = 0; r < FG_ROLES; r++)
		ck_assert_uint_eq(pr.mem.total[r], e->model.bytes[r] + run[r]);
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* ---- [hardware] and the profiler -------------------------------------------------- */

START_TEST(test_hardware_round_trip)
{
	struct fg_hardware hw, back;
	struct fg_config *c;
	char path[400];
	t4(&hw);
	hw.q4_decode_bdw = 123.456;
	hw.mm_gemv_bdw = 45.6;
	hw.gtoc_bdw_pageable = 7.89;
	hw.attn_decode_q4_bdw = 3.21;
	hw.cpu_attn_q4_bdw = 0.654;
	hw.f8_decode_bdw = 987.6;
	hw.f8_batch_bdw = 54.3;
	hw.compute_host_memory = 1;
	snprintf(path, sizeof(path), "%s/hw.ini", tmpdir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fg_hardware_write(f, &hw, "test"), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(fg_config_new(&c), 0);
	ck_assert_msg(fg_config_load(c, path) == 0, "%s", fg_last_error_text());
	ck_assert_msg(fg_hardware_from_config(c, &back) == 0, "%s", fg_last_error_text());
	ck_assert_uint_eq(back.gpu_mem, hw.gpu_mem);
	ck_assert_uint_eq(back.cpu_mem, hw.cpu_mem);
	ck_assert_uint_eq(back.disk_mem, hw.disk_mem);
	double *a[] = { &hw.ctog_bdw, &hw.gtoc_bdw, &hw.dtoc_bdw, &hw.ctod_bdw, &hw.mm_flops_prefill,
			&hw.mm_flops_decode, &hw.attn_flops, &hw.attn_decode_bdw, &hw.cpu_attn_bdw,
			&hw.q4_decode_bdw, &hw.mm_gemv_bdw, &hw.gtoc_bdw_pageable,
			&hw.attn_decode_q4_bdw, &hw.cpu_attn_q4_bdw, &hw.f8_decode_bdw,
			&hw.f8_batch_bdw };
	double *b[] = { &back.ctog_bdw, &back.gtoc_bdw, &back.dtoc_bdw, &back.ctod_bdw,
			&back.mm_flops_prefill, &back.mm_flops_decode, &back.attn_flops,
			&back.attn_decode_bdw, &back.cpu_attn_bdw, &back.q4_decode_bdw,
			&back.mm_gemv_bdw, &back.gtoc_bdw_pageable, &back.attn_decode_q4_bdw,
			&back.cpu_attn_q4_bdw, &back.f8_decode_bdw, &back.f8_batch_bdw };
	for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
		ck_assert_msg(fabs(*a[i] - *b[i]) <= 1e-5 * *a[i], "key %zu: %g != %g", i, *a[i], *b[i]);
	ck_assert_int_eq(back.act_bytes, 2);
	ck_assert_int_eq(back.compute_host_memory, 1);
	fg_config_free(c);

	/* a malformed value names the file and line */
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[hardware]\nctog_bdw = fast\n");
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(fg_config_new(&c), 0);
	ck_assert_int_ne(fg_config_load(c, path), 0);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "hw.ini:2"));
	fg_config_free(c);
}
END_TEST

/* A profiled batch-rows point (mm_batch_rows, mm_flops_batch): at those rows
 * a product costs rows x 2KN over that rate, halfway to them it costs the
 * mean of that and the 64-row time; without it, the 64-row time holds up to
 * the prefill rate. */
START_TEST(test_batch_rows_point)
{
	struct fg_cost_case cc = { .prompt_len = 8, .gen_len = 2 };
	struct fg_policy p = { .num_gpu_batches = 1, .weight[FG_ROLE_COMPUTE] = 100,
			       .cache[FG_ROLE_COMPUTE] = 100, .act[FG_ROLE_COMPUTE] = 100,
			       .overlap = 1, .pin_weight = 1, .attn_sparsity = 1 };
	struct fg_cost_prediction at64, mid, atR, flat;

	ck_assert_int_eq(fg_model_preset("opt-6.7b", &cc.model), 0);
	t4(&cc.hw);
	cc.hw.attn_decode_bdw = 1e12; /* leave the linear layers alone in the decode step */
	cc.hw.mm_flops_prefill = 1e4; /* and never compute-bound */
	const struct fg_model_config *m = &cc.model;
	double macs = (double)m->layers * (4.0 * m->hidden * m->hidden + 2.0 * m->hidden * m->ffn) +
		      (double)m->hidden * m->vocab;
	double t64 = 2.0 * 64 * macs / (cc.hw.mm_flops_decode * 1e12);
	p.gpu_batch_size = 64;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &at64), 0);
	p.gpu_batch_size = 256;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &flat), 0);
	cc.hw.mm_batch_rows = 256;
	cc.hw.mm_flops_batch = 2 * cc.hw.mm_flops_decode; /* 256 rows in twice the 64-row time */
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &atR), 0);
	p.gpu_batch_size = 160;
	ck_assert_int_eq(fg_cost_predict(&cc, &p, &mid), 0);
	/* decode_s is the one decode step (gen_len 2); besides the products it
	 * copies each row's logits to the host */
	double logit_row = (double)m->vocab * 2 / (cc.hw.gtoc_bdw * 1e9);
	double rest = at64.decode_s - t64 - 64 * logit_row;
	ck_assert_double_eq_tol(flat.decode_s - rest - 256 * logit_row, t64, 1e-6 * t64);
	ck_assert_double_eq_tol(atR.decode_s - rest - 256 * logit_row, 2 * t64, 1e-6 * t64);
	ck_assert_double_eq_tol(mid.decode_s - rest - 160 * logit_row, 1.5 * t64, 1e-6 * t64);
}
END_TEST

/* conf/hardware/t4.ini holds FlexGen's fitted T4 constants (the ones above),
 * found by name through FGCORE_HARDWARE_PATH; every preset passes the check. */
START_TEST(test_t4_preset)
{
	struct fg_config *c;
	struct fg_hardware want, got;
	static const char *const presets[] = { "t4", "h200", "a100-80g", "l4" };

	t4(&want);
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
		ck_assert_int_eq(fg_config_new(&c), 0);
		ck_assert_msg(fg_hardware_load(c, presets[i]) == 0, "%s: %s", presets[i],
			      fg_last_error_text());
		ck_assert_int_eq(fg_hardware_from_config(c, &got), 0);
		ck_assert_msg(fg_hardware_check(&got) == 0, "%s: %s", presets[i], fg_last_error_text());
		fg_config_free(c);
		if (strcmp(presets[i], "t4"))
			continue;
		ck_assert_uint_eq(got.gpu_mem, want.gpu_mem);
		ck_assert_uint_eq(got.cpu_mem, want.cpu_mem);
		ck_assert_uint_eq(got.disk_mem, want.disk_mem);
		double g[] = { got.ctog_bdw, got.dtoc_bdw, got.ctod_bdw, got.mm_flops_prefill,
			       got.mm_flops_decode, got.attn_flops, got.attn_decode_bdw, got.cpu_attn_bdw };
		double w[] = { want.ctog_bdw, want.dtoc_bdw, want.ctod_bdw, want.mm_flops_prefill,
			       want.mm_flops_decode, want.attn_flops, want.attn_decode_bdw,
			       want.cpu_attn_bdw };
		for (size_t k = 0; k < sizeof(g) / sizeof(g[0]); k++)
			ck_assert_msg(fabs(g[k] - w[k]) <= 1e-3 * w[k], "t4.ini rate %zu: %g, FlexGen's %g",
				      k, g[k], w[k]);
		ck_assert_int_eq(got.act_bytes, 2);
		ck_assert_int_eq(got.compute_host_memory, 0);
	}
	/* an unknown name: the line lists the presets */
	ck_assert_int_eq(fg_config_new(&c), 0);
	ck_assert_int_eq(fg_hardware_load(c, "no-such-gpu"), -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error_text(), "a100-80g, h100, h200, l4, t4"));
	fg_config_free(c);
}
END_TEST

/* The profiler at a model's shapes: a GPU batch above 64 rows adds the
 * batch-rows point, and every rate is measured. */
START_TEST(test_profile_model_shapes)
{
	struct fg_config *c = cpu_config();
	struct fg_model_config model;
	ck_assert_int_eq(fg_model_preset("opt-125m", &model), 0);
	struct fg_profile_params pp = { .copy_bytes = 4 << 20, .model = &model, .batch = 72,
					 .prefill_rows = 128, .seq = 16, .gen_len = 4,
					 .min_seconds = 0.01, .skip_disk = 1, .log = stdout };
	struct fg_hardware hw;
	ck_assert_msg(fg_profile_run(c, &pp, &hw) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(hw.mm_batch_rows, 72);
	double r[] = { hw.mm_flops_batch, hw.q4_batch_bdw, hw.mm_gemv_bdw, hw.attn_decode_bdw,
		       hw.cpu_append_bdw, hw.cpu_append_q4_bdw };
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
		ck_assert_msg(r[i] > 0 && isfinite(r[i]), "rate %zu is %g", i, r[i]);
	fg_config_free(c);
}
END_TEST

/* The profiler on the CPU configuration measures every rate it writes
 * (values are not judged: timings belong in benchmarks). */
START_TEST(test_profile_cpu)
{
	struct fg_config *c = cpu_config();
	struct fg_profile_params pp = { .copy_bytes = 4 << 20, .disk_bytes = 16 << 20,
					 .disk_burst = 3 << 20, /* read as bursts of a layer */
					 .hidden = 256, .prefill_rows = 128, .seq = 64,
					 .min_seconds = 0.01, .log = stdout };
	struct fg_hardware hw;
	ck_assert_msg(fg_profile_run(c, &pp, &hw) == 0, "%s", fg_last_error_text());
	fg_hardware_write(stdout, &hw, "test");
	ck_assert_int_eq(hw.act_bytes, 4);
	ck_assert_int_eq(hw.compute_host_memory, 1);
	ck_assert(hw.gpu_mem > 0 && hw.cpu_mem > 0 && hw.disk_mem > 0);
	/* every rate, int4 included: cpu_blas reads 4-bit weights inside its ops */
	double r[] = { hw.ctog_bdw, hw.gtoc_bdw, hw.ctog_bdw_pageable, hw.gtoc_bdw_pageable,
		       hw.dtoc_bdw, hw.ctod_bdw, hw.mm_flops_prefill, hw.mm_flops_decode,
		       hw.mm_gemv_bdw, hw.attn_flops, hw.attn_decode_bdw, hw.cpu_attn_bdw,
		       hw.q4_decode_bdw, hw.attn_decode_q4_bdw, hw.cpu_attn_q4_bdw, hw.cpu_append_bdw,
		       hw.cpu_append_q4_bdw };
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
		ck_assert_msg(r[i] > 0 && isfinite(r[i]), "rate %zu is %g", i, r[i]);
	ck_assert_int_eq(fg_hardware_check(&hw), 0);
	fg_config_free(c);
}
END_TEST

/* refill = 1: rows join only when every row is free, all of them at once:
 * one join of the whole batch (a prefill) per turnover and gen_len - 1
 * decode steps: the static price exactly, where the cache is on the GPU.
 * With a slot-held cache (host) the run's column is past the ring's end:
 * each decode step loads the whole ring of prompt + gen columns, not the
 * static run's s + n/2 - 1 on average; the join loads nothing (its
 * attention reads the step's columns only), as a prefill. */
START_TEST(test_refill_whole_batch)
{
	struct fg_cost_case st, ss;
	struct fg_cost_prediction a, b;
	struct fg_policy p = refill_policy(32, 2, 100, 100);

	refill_case(&st, 0);
	refill_case(&ss, 1);
	predict_ok(&st, &p, &a);
	predict_ok(&ss, &p, &b);
	ck_assert(!a.steady && b.steady);
	ck_assert_int_eq(b.join_rows, 64);
	ck_assert_double_eq_tol(b.join_steps, 1, 1e-12);
	ck_assert_double_eq_tol(b.prefill_s, a.prefill_s, 1e-9 * a.prefill_s);
	ck_assert_double_eq_tol(b.decode_s, a.decode_s, 1e-9 * a.decode_s);
	ck_assert_double_eq_tol(b.total_tps, a.total_tps, 1e-9 * a.total_tps);

	p = refill_policy(32, 2, 0, 0);
	predict_ok(&st, &p, &a);
	predict_ok(&ss, &p, &b);
	double l = (double)st.model.layers, rows = 64, ctog = st.hw.ctog_bdw * 1e9;
	double kvrow = 2.0 * (double)st.model.hidden * 2, cols = 512 + 32;
	double decode_load = 31 * l * rows * (cols - (512 + 16 - 1)) * kvrow / ctog;
	printf("refill 1, cache on the host: join %.3f s (prefill %.3f), decode %.3f s (static %.3f + ring %.3f)\n",
	       b.prefill_s, a.prefill_s, b.decode_s, a.decode_s, decode_load);
	ck_assert_double_eq_tol(b.prefill_s, a.prefill_s, 1e-9 * a.prefill_s);
	ck_assert_double_eq_tol(b.decode_s - a.decode_s, decode_load, 1e-9 * a.decode_s);
}
END_TEST

/* With the weights on the host every join step streams all of them: a
 * quarter of the batch at a time takes 4 joins a turnover, half of it 2;
 * where a product's time is in step with its rows (one rate for every
 * product: FlexGen's decode rate) the joins' compute is that of the same
 * B x prompt tokens either way, and the difference is exactly the two
 * extra joins' weight traffic.  Decode steps do not depend on refill. */
START_TEST(test_refill_join_weights)
{
	struct fg_cost_case q, h;
	struct fg_cost_prediction a, b;
	struct fg_policy p = refill_policy(256, 1, 0, 100);

	refill_case(&q, 0.25);
	refill_case(&h, 0.5);
	q.hw.mm_flops_prefill = h.hw.mm_flops_prefill = q.hw.mm_flops_decode;
	predict_ok(&q, &p, &a);
	predict_ok(&h, &p, &b);
	ck_assert_int_eq(a.join_rows, 64);
	ck_assert_int_eq(b.join_rows, 128);
	ck_assert_double_eq_tol(a.join_steps, 4, 1e-12);
	ck_assert_double_eq_tol(b.join_steps, 2, 1e-12);
	ck_assert_double_eq_tol(a.decode_s, b.decode_s, 1e-12 * a.decode_s);
	double w = (double)a.mem.weights[FG_ROLE_HOST] / (q.hw.ctog_bdw * 1e9);
	printf("weights on the host: joins %.3f s (refill 0.25), %.3f s (0.5); a pass of the weights %.3f s\n",
	       a.prefill_s, b.prefill_s, w);
	ck_assert_double_eq_tol(a.prefill_s - b.prefill_s, 2 * w, 1e-9 * a.prefill_s);
	ck_assert(a.total_tps < b.total_tps);
}
END_TEST

/* Everything on the GPU: no traffic per join, and with products in step
 * with their rows the steady state is the static price for any refill.
 * At the T4's own rates a product of fewer rows than the prefill rate's
 * turning point costs as many (FlexGen's memory-bound rule): the joins'
 * logits are that fixed cost, so more joins cost a little more, and never
 * more than the logits' product at its 64-row time per extra join. */
START_TEST(test_refill_all_gpu)
{
	static const double r[3] = { 0.25, 0.5, 1 };
	struct fg_cost_case cc;
	struct fg_cost_prediction st, o[3];
	struct fg_policy p = refill_policy(256, 1, 100, 100);

	for (int flat = 1; flat >= 0; flat--) {
		refill_case(&cc, 0);
		if (flat)
			cc.hw.mm_flops_prefill = cc.hw.mm_flops_decode;
		predict_ok(&cc, &p, &st);
		for (int i = 0; i < 3; i++) {
			cc.refill = r[i];
			predict_ok(&cc, &p, &o[i]);
			printf("all on the GPU, %s rates, refill %.2f: %.4f token/s (static %.4f)\n",
			       flat ? "one" : "the T4's", r[i], o[i].total_tps, st.total_tps);
			ck_assert_double_eq_tol(o[i].decode_s, st.decode_s, 1e-12 * st.decode_s);
			if (flat)
				ck_assert_double_eq_tol(o[i].prefill_s, st.prefill_s, 1e-9 * st.prefill_s);
		}
		if (flat)
			continue;
		ck_assert_double_eq_tol(o[2].prefill_s, st.prefill_s, 1e-9 * st.prefill_s);
		ck_assert(o[0].prefill_s > o[1].prefill_s && o[1].prefill_s > o[2].prefill_s);
		/* the logits' product of 64 rows: 2 x hidden x vocab x 64 at the decode rate */
		double logits64 = 2.0 * (double)cc.model.hidden * (double)cc.model.vocab * 64 /
				  (cc.hw.mm_flops_decode * 1e12);
		ck_assert(o[0].prefill_s - o[2].prefill_s <= 3 * logits64);
	}
}
END_TEST

/* With attention on the host over host sequences a join step cannot
 * gather its rows (core/exec/join.c): it computes every row up to the last
 * joining one, k (gbs + 1) / (k + 1) of them for k joining rows at random
 * places; with the cache on the host but attention on the GPU it gathers
 * them, as with the cache on the GPU.  With attention nearly free and one
 * rate for every product, the joins' device work is the gathered joins'
 * times (gbs + 1) / (k + 1). */
START_TEST(test_refill_join_rows)
{
	struct fg_cost_case cc;
	struct fg_cost_prediction g, w;
	struct fg_policy on = refill_policy(256, 1, 100, 100), off = refill_policy(256, 1, 100, 0);
	struct fg_cost_prediction h;

	refill_case(&cc, 0.25);
	cc.hw.mm_flops_prefill = cc.hw.mm_flops_decode;
	cc.hw.attn_flops = 1e9;
	predict_ok(&cc, &on, &g);
	predict_ok(&cc, &off, &h);
	ck_assert_double_eq_tol(h.link[FG_STAGE_PREFILL][FG_LINK_COMP],
				g.link[FG_STAGE_PREFILL][FG_LINK_COMP],
				1e-9 * g.link[FG_STAGE_PREFILL][FG_LINK_COMP]);
	off.cpu_cache_compute = 1;
	predict_ok(&cc, &off, &w);
	double ratio = w.link[FG_STAGE_PREFILL][FG_LINK_COMP] / g.link[FG_STAGE_PREFILL][FG_LINK_COMP];
	printf("joins of 64 rows of 256: device work %.3f s gathered, %.3f s in place (x %.4f)\n",
	       g.link[FG_STAGE_PREFILL][FG_LINK_COMP], w.link[FG_STAGE_PREFILL][FG_LINK_COMP], ratio);
	ck_assert_double_eq_tol(ratio, 257.0 / 65, 1e-6);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("optimizer");
	TCase *tc = tcase_create("optimizer");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
#ifdef HAVE_GLPK
	tcase_add_test(tc, test_t4_opt30b);
	tcase_add_test(tc, test_t4_opt175b);
	tcase_add_test(tc, test_t4_llama2_70b);
	tcase_add_test(tc, test_t4_opt175b_compressed);
	tcase_add_test(tc, test_t4_opt175b_fp8);
	tcase_add_test(tc, test_infeasible);
	tcase_add_test(tc, test_monotone_gpu_memory);
	tcase_add_test(tc, test_lp_against_grid);
	tcase_add_test(tc, test_window_ring_optimize);
	tcase_add_test(tc, test_refill_optimize);
#else
	tcase_add_test(tc, test_no_glpk);
#endif
	tcase_add_test(tc, test_cost_model_sanity);
	tcase_add_test(tc, test_cost_active_experts);
	tcase_add_test(tc, test_window_cost_model);
	tcase_add_test(tc, test_pipeline_stages);
	tcase_add_test(tc, test_small_products);
	tcase_add_loop_test(tc, test_memory_matches_engine, 0, NMEM);
	tcase_add_test(tc, test_predict_engine_policy);
	tcase_add_test(tc, test_hardware_round_trip);
	tcase_add_test(tc, test_profile_cpu);
	tcase_add_test(tc, test_batch_rows_point);
	tcase_add_test(tc, test_t4_preset);
	tcase_add_test(tc, test_profile_model_shapes);
	tcase_add_test(tc, test_refill_whole_batch);
	tcase_add_test(tc, test_refill_join_weights);
	tcase_add_test(tc, test_refill_all_gpu);
	tcase_add_test(tc, test_refill_join_rows);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
