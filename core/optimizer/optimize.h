/* core/optimizer/optimize.h - the policy search: for each gpu_batch_size x
 * num_gpu_batches and each combination of the binary choices (host attention,
 * compressed weights, compressed cache, sep_layer, activations off the compute
 * tier, disk use), a linear program (GLPK) picks the placement shares that
 * minimize the cost model's run time within the tiers' capacities; the shares
 * are rounded to what the engine can realize and priced again exactly. */
#ifndef FG_OPTIMIZER_OPTIMIZE_H
#define FG_OPTIMIZER_OPTIMIZE_H

#include <stdint.h>
#include <stdio.h>

#include "core/optimizer/cost_model.h"

struct fg_optimize_params {
	struct fg_cost_case cc; /* model, prompt and generation lengths, hardware */
	double margin;          /* fraction of every tier's capacity left free (0..0.5) */
	int64_t max_batch;      /* largest gpu_batch_size x num_gpu_batches tried (0: 4096) */
	int64_t gpu_batch_size; /* > 0: only this one */
	int64_t num_gpu_batches; /* > 0: only this one */
	int no_compress;        /* never compress (else: when [hardware] has an int4 rate) */
	int no_cpu_attention;   /* never delegate attention to the host */
	int no_window_ring;     /* price a windowed model's cache at every position, not
				 * the window's ring ([policy] window_ring = false) */
	int top;                /* policies kept (0: 5) */
};

struct fg_optimize_result {
	struct fg_policy policy;          /* runnable: placement = exact, overlap on */
	struct fg_cost_prediction pred;   /* of the policy as the engine realizes it */
	double lp_tps;                    /* the LP's optimum for its choices */
};

struct fg_optimize_out {
	struct fg_optimize_result *best; /* best first; nbest of them */
	int nbest;
	/* When nothing fits: bytes missing on each tier for the smallest run
	 * (one sequence), with the data spread to need the least. */
	uint64_t missing[FG_ROLES];
	int64_t lps;                     /* linear programs solved */
};

/* 0 with out->nbest > 0; -ENOSPC (line: how much is missing where, also in
 * out->missing) when no policy fits; -ENOTSUP without GLPK (the line names
 * the Debian package libglpk-dev); -EINVAL for bad parameters. */
int fg_optimize(const struct fg_optimize_params *p, struct fg_optimize_out *out);
void fg_optimize_out_free(struct fg_optimize_out *out);

/* One line per result: batch, percent, flags, throughput, memory per tier. */
void fg_optimize_print(FILE *f, const struct fg_optimize_out *out);

/* One way to spend a number of GPUs: `replicas` copies of an N-stage
 * pipeline ([distributed] replicas; mpirun -np replicas x stages), each
 * replica running its own batches, so the job runs about replicas times one
 * replica's throughput (rank 0's dispatch of the requests is not priced). */
struct fg_optimize_layout {
	int64_t replicas, stages;
	int rc;                          /* 0, or -ENOSPC: no policy fits a stage */
	struct fg_optimize_result best;  /* one replica's best policy (rc 0) */
	uint64_t missing[FG_ROLES];      /* rc -ENOSPC: as fg_optimize_out's */
	int64_t lps;
};

/* Every layout replicas x stages = gpus with at least one layer a stage,
 * each priced by fg_optimize with p->cc.stages set to its stages; *out (free
 * it) holds *n of them, those that fit first by the job's throughput (more
 * replicas first on a tie), then those that do not.  0 when one fits;
 * -ENOSPC (line: what the layout of the most stages misses) when none does,
 * *out still set; fg_optimize's other errors (nothing in *out). */
int fg_optimize_layouts(const struct fg_optimize_params *p, int64_t gpus,
			struct fg_optimize_layout **out, int *n);

/* One line per layout: replicas x stages, the best policy as
 * fg_optimize_print shows it with the job's throughput, or what it misses. */
void fg_optimize_layouts_print(FILE *f, const struct fg_optimize_layout *l, int n);

/* The policy as [policy] keys ("policy.percent=20 80 0 100 0 100", ...):
 * calls set(user, "section.key=value") for each; stops at the first error. */
int fg_optimize_policy_keys(const struct fg_policy *p,
			    int (*set)(void *user, const char *assignment), void *user);

#endif
