/* core/optimizer/cost_model.h - predicted time and memory of a policy
 * (doc/COST_MODEL.md).
 *
 * FlexGen's model: the time of one layer in prefill and in a decode step is
 * the slowest of the links it uses (host->compute, compute->host,
 * disk->host, host->disk) and of its computation, with a rule for which of
 * them overlap (FlexGen's, with the host's work apart: fg_cost_rule); the
 * run is prefill + (gen_len - 1) decode steps at the average cache length,
 * or, for a stream of requests refilling the batch ([policy] refill), one
 * turnover of its steady state: B / join_rows join steps (a prefill of the
 * joining rows) + (gen_len - 1) decode steps over the cache's ring.
 * Extended with host attention (cpu_cache_compute),
 * 4-bit weights and cache, the input and output blocks, activations off the
 * compute tier, and this engine's exact buffers (the memory plan, core/plan/plan.h).
 *
 * Every link time is a linear function of the nine placement shares once the
 * discrete choices (batch shape, delegation, compression, ...) are fixed;
 * the optimizer's linear program and the prediction of a given policy both
 * use the same fg_cost_terms. */
#ifndef FG_OPTIMIZER_COST_MODEL_H
#define FG_OPTIMIZER_COST_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "core/plan/policy.h"
#include "core/arch/arch.h"
#include "core/optimizer/hardware.h"
#include "core/plan/plan.h"

/* The placement shares, fractions of each kind of data per tier.  The weights
 * of the layers (W*) and of the input/output blocks (I*) are separate because
 * the engine places the input block by FlexGen's midpoint rule only. */
enum fg_share {
	FG_X_WG, FG_X_WC, FG_X_WN, /* layer weights: compute, host, disk */
	FG_X_IG, FG_X_IC, FG_X_IN, /* input and output block weights */
	FG_X_CG, FG_X_CC, FG_X_CN, /* KV cache (sequences of each GPU batch) */
	FG_X_HG, FG_X_HC, FG_X_HN, /* activations (GPU batches) */
	FG_X_N,
};

/* c + sum a[i] * x[i] */
struct fg_lin {
	double c;
	double a[FG_X_N];
};

double fg_lin_eval(const struct fg_lin *l, const double x[FG_X_N]);

struct fg_cost_case;
/* The layers the slowest pipeline stage holds: ceil(layers / stages). */
int64_t fg_cost_stage_layers(const struct fg_cost_case *cc);

/* What runs: the model and the workload. */
struct fg_cost_case {
	struct fg_model_config model;
	int64_t prompt_len, gen_len;
	struct fg_hardware hw;
	/* Pipeline stages (mpirun -np N, FlexGen's distributed mode); 0 or 1:
	 * one process.  Each stage is a machine of `hw` holding its share of the
	 * layers with the same policy: the model prices the slowest stage
	 * (ceil(layers / N) layers and both the input and output blocks) and
	 * its memory, then the pipeline: the fill and drain of N - 1 of the
	 * micro-batches each step, and the activations passed between stages. */
	int64_t stages;
	int64_t micro_batches; /* [distributed] micro_batches; 0: min(stages, num_gpu_batches) */
	/* A stream of requests that refill the batch ([policy] refill, in
	 * (0, 1]): priced in its steady state (fg_cost_refills).  0: one static
	 * batch, as `fgcore bench` runs it. */
	double refill;
};

/* Does the case price its policies in a refilled steady state?  Refill on,
 * one process (a pipeline's joins are not priced yet: its stages' static
 * batches are). */
int fg_cost_refills(const struct fg_cost_case *cc);
/* Rows that join at once in that steady state: ceil(refill x batch), 1..batch. */
int64_t fg_cost_join_rows(const struct fg_cost_case *cc, const struct fg_policy *p);

/* What a stage's time is made of: the links between tiers, the compute
 * backend's work (and the transfers it waits for), the host's work for a
 * compute tier that is a device (host attention and cache appends, with
 * their round trips); and two bounds that are not more work (never added
 * in series): host memory shared by copies and host attention, and the
 * attention blocks' share of the weight loads (ctog's part that, with
 * sep_layer, is loaded behind the short MLP block, not behind the host's
 * attention). */
enum fg_link {
	FG_LINK_CTOG, FG_LINK_GTOC, FG_LINK_DTOC, FG_LINK_CTOD, FG_LINK_COMP, FG_LINK_HOST,
	FG_LINK_HMEM, FG_LINK_ALOAD,
	/* With the host's attention beside the device's (policy.host_overlap):
	 * one GPU batch's share of the device's and of the host's work (comp
	 * and host over num_gpu_batches), what the other side waits for at a
	 * run's start or end.  Not more work: derived from comp and host. */
	FG_LINK_COMP1, FG_LINK_HOST1, FG_LINKS
};
/* The overlap rule: a stage's part takes the longest of the sums of link
 * times in its sets (each ends at -1). */
#define FG_COST_SETS 7
struct fg_cost_rule {
	int nsets;
	int set[FG_COST_SETS][FG_LINKS + 1];
};
enum { FG_STAGE_PREFILL, FG_STAGE_DECODE, FG_STAGES };
enum { FG_PART_LAYER, FG_PART_IO, FG_PARTS }; /* one layer; the input + output blocks */

/* Link times and memory of one choice of the discrete parts of a policy
 * (gpu_batch_size, num_gpu_batches, overlap, sep_layer, cpu_cache_compute,
 * compress_*: read from the policy; its percentages are ignored). */
struct fg_cost_terms {
	struct fg_lin t[FG_STAGES][FG_PARTS][FG_LINKS]; /* seconds */
	int serial;             /* links run one after another (no overlap) */
	int host_beside;        /* decode: the host's attention beside the device's work */
	int64_t layers, decode_steps;
	/* Prefill steps a run prices: 1; a refilled steady state's join steps
	 * per turnover of the batch, batch / join rows (the prefill stage's
	 * terms are then a join step's). */
	double prefill_steps;
	int steady;             /* priced as a refilled steady state */
	/* bytes per tier = mem[r] + slot[r] * S, S >= unit[u] for every unit u */
	struct fg_lin mem[FG_ROLES];
	double slot[FG_ROLES];
	struct fg_lin unit[4];
	int nunits;
	double tokens;          /* generated tokens of a run: batch * gen_len */
};

/* 0, or -EINVAL (with a line) for hardware or a case the model cannot price. */
int fg_cost_terms(const struct fg_cost_case *cc, const struct fg_policy *p,
		  struct fg_cost_terms *t);

/* The overlap rule of a stage (or every link in series without overlap). */
const struct fg_cost_rule *fg_cost_rule(const struct fg_cost_terms *t, int stage);

/* Seconds of a stage's part from its link times, by that rule. */
double fg_cost_combine(const struct fg_cost_terms *t, int stage, const double link[FG_LINKS]);

/* The shares a concrete policy realizes in the engine (byte shares of the
 * placed weights, sequence and batch counts of the splits). */
void fg_cost_shares(const struct fg_cost_case *cc, const struct fg_policy *p, double x[FG_X_N]);

struct fg_cost_prediction {
	/* whole run; a refilled steady state: one turnover of the batch, its
	 * join steps as prefill */
	double prefill_s, decode_s;
	double prefill_tps, decode_tps, total_tps; /* as `fgcore bench` counts them */
	double link[FG_STAGES][FG_LINKS];    /* seconds per run on each link */
	struct fg_plan mem;                  /* the memory plan: bytes per tier, exact */
	uint64_t capacity[FG_ROLES];
	int fits;                            /* every tier within its capacity */
	int steady;                          /* a refilled steady state (fg_cost_refills) */
	int64_t join_rows;                   /* steady: rows of each join step */
	double join_steps;                   /* steady: join steps per turnover */
};

/* Predict a policy on a case: time from the cost model, memory exact. */
int fg_cost_predict(const struct fg_cost_case *cc, const struct fg_policy *p,
		    struct fg_cost_prediction *out);

/* Print the prediction of `p` beside a measurement (either may be NULL):
 * prefill, decode and total throughput and per-tier memory, one line each.
 * meas_* < 0 means not measured. */
struct fg_cost_measured {
	double prefill_s, decode_s, prefill_tps, decode_tps, total_tps;
	uint64_t peak[FG_ROLES];
};
void fg_cost_print(FILE *out, const struct fg_cost_prediction *pred,
			      const struct fg_cost_measured *meas);

#endif
