/* core/plan/policy.h - where tensors live and how the work is batched
 * (FlexGen's policy), read from [policy]. */
#ifndef FG_PLAN_POLICY_H
#define FG_PLAN_POLICY_H

#include <stdint.h>

struct fg_config;

/* Tier roles, in the order FlexGen's placement rule fills them. */
enum fg_role {
	FG_ROLE_DISK = 0,
	FG_ROLE_HOST = 1,
	FG_ROLE_COMPUTE = 2,
	FG_ROLES = 3,
};

struct fg_policy {
	int64_t gpu_batch_size, num_gpu_batches;
	int weight[FG_ROLES];   /* percent of the weights on each tier (disk: the remainder) */
	int cache[FG_ROLES];    /* percent of the KV cache */
	int act[FG_ROLES];      /* percent of the activations */
	int overlap;            /* prefetch the next block while computing this one */
	int sep_layer;          /* attention and MLP are scheduled as separate blocks */
	int pin_weight;         /* weights on the host tier in page-locked memory */
	int cpu_cache_compute;  /* decode attention of host-resident cache runs on the host */
	int host_overlap;       /* ... beside the device's work on the next GPU batch */
	double attn_sparsity;   /* 1: dense attention */
	int compress_weight, compress_cache;
	int weight_fp8;         /* compressed weights are fp8_e4m3_rows, not int4_group64 */
	int cache_fp8;          /* a compressed cache is fp8_e4m3_group64, not int4_group64 */
	int exact;              /* placement = exact: split tensors by rows */
	uint64_t score_chunk;   /* bytes of compute tier for scored positions' logits */
	int64_t share_prefix;   /* shortest prompt prefix worth sharing (0: off) */
	int window_ring;        /* a windowed model's cache a ring of the window's length
				 * where the run allows (fg_plan_cache_cols) */
	double refill;          /* share of a batch's rows free before they take waiting
				 * requests between decode steps (0: never) */
};

/* Read and check [policy] (percent pairs summing to at most 100, ...). */
int fg_policy_from_config(const struct fg_config *c, struct fg_policy *p);

/* Parse FlexGen's "wg wc cg cc hg hc" (six integers 0..100). */
int fg_policy_parse_percent(const char *text, struct fg_policy *p);

const char *fg_role_name(enum fg_role r); /* "disk", "host", "compute" */

/* FlexGen's get_choice: the role whose cumulative share (disk, host, compute
 * in that order) first exceeds cur (0..100); the last one otherwise. */
enum fg_role fg_policy_choice(const int percent[FG_ROLES], double cur);

/* Split n items by the shares: first[r] .. first[r] + count[r] go to role r,
 * compute first, then host, then disk (cumulative rounding). */
void fg_policy_split(const int percent[FG_ROLES], int64_t n, int64_t first[FG_ROLES],
		     int64_t count[FG_ROLES]);

#endif
