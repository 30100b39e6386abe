/* core/optimizer/profile.h - measure the machine through the configured
 * plugins: tier capacities, compute<->host and disk<->host bandwidths,
 * matrix-product and attention rates of the compute backend, host attention.
 * The result is a struct fg_hardware, written as [hardware] by `fgcore profile`. */
#ifndef FG_OPTIMIZER_PROFILE_H
#define FG_OPTIMIZER_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "core/optimizer/hardware.h"

struct fg_config;
struct fg_model_config;

struct fg_profile_params {
	uint64_t copy_bytes; /* per compute<->host transfer (0: 256 MiB) */
	uint64_t disk_bytes; /* file written then read on the disk tier (0: 1 GiB; skip: no disk) */
	uint64_t disk_burst; /* bytes the engine reads from the disk at once, one read waited for
			      * before the next (a layer's disk-tier weights); 0: 8 MiB x 8 streamed */
	/* The shapes measured: the model's layer (its linear weights, heads and
	 * grouped K/V heads) when set, else hidden x hidden and hidden / 128 heads. */
	const struct fg_model_config *model;
	int64_t hidden;      /* without a model: K = N of the products (0: 4096) */
	int64_t prefill_rows; /* rows of the prefill-shaped products (0: batch x seq, at most
			       * 8192; 2048 without a model) */
	int64_t batch;       /* the policy's GPU batch: decode rows and attention sequences (0: 16) */
	int64_t seq;         /* prompt length: prefill attention and host append (0: 512) */
	int64_t gen_len;     /* generated tokens: decode reads seq + gen_len / 2 rows (0: seq) */
	double min_seconds;  /* each measurement repeats at least this long (0: 0.25) */
	int skip_disk;       /* do not touch the disk tier */
	FILE *log;           /* one line per measurement (NULL: quiet) */
};

/* Open the configured compute backend and tiers, measure, close.  On error
 * nothing measured so far is lost: *hw holds what was measured. */
int fg_profile_run(const struct fg_config *c, const struct fg_profile_params *p,
		   struct fg_hardware *hw);

#endif
