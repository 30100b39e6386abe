/* core/optimizer/hardware.h - the machine as the cost model sees it: tier
 * capacities, link bandwidths and compute rates, measured by `fgcore
 * profile` and kept in the configuration's [hardware] section.
 *
 * Units: capacities in bytes; bandwidths in GB/s (10^9 bytes per second);
 * compute rates in TFLOP/s (10^12).  0 means unknown. */
#ifndef FG_OPTIMIZER_HARDWARE_H
#define FG_OPTIMIZER_HARDWARE_H

#include <stdint.h>
#include <stdio.h>

struct fg_config;

/* Rows of the decode-shaped matrix product behind mm_flops_decode.  The cost
 * model prices a product of m rows from three measurements: below
 * FG_HW_DECODE_ROWS its time goes linearly from the one-row time (weights over
 * mm_gemv_bdw; memory-bound on a GPU, where it is flat) to the 64-row time
 * (compute grows with m on a CPU); above, the rate grows with m up to the
 * prefill rate. */
#define FG_HW_DECODE_ROWS 64

struct fg_hardware {
	uint64_t gpu_mem, cpu_mem, disk_mem; /* compute, host, disk tier capacities */
	double ctog_bdw, gtoc_bdw;           /* host -> compute, compute -> host (page-locked) */
	double ctog_bdw_pageable;            /* host -> compute from ordinary memory */
	double gtoc_bdw_pageable;            /* compute -> ordinary host memory (reported, unused) */
	double dtoc_bdw, ctod_bdw;           /* disk -> host, host -> disk */
	double mm_flops_prefill;             /* fp16-weight linear, >= 512 rows */
	double mm_flops_decode;              /* fp16-weight linear, FG_HW_DECODE_ROWS rows */
	double mm_gemv_bdw;                  /* fp16-weight linear, 1 row, GB/s of weights; 0: unknown */
	int mm_batch_rows;                   /* rows of the next two (a policy's GPU batch); 0: none */
	double mm_flops_batch;               /* fp16-weight linear, mm_batch_rows rows, TFLOP/s */
	double q4_batch_bdw;                 /* int4-weight linear, mm_batch_rows rows, GB/s packed */
	double attn_flops;                   /* prefill attention (4 * batch * seq^2 * hidden flops) */
	double prefill_other_bdw;            /* a prefill layer's other work, GB/s of hidden rows; 0: free */
	double attn_decode_bdw;              /* decode attention on the compute backend, GB/s of cache read */
	double cpu_attn_bdw;                 /* decode attention on the host, GB/s of cache read */
	double cpu_attn_q4_bdw;              /* the same over a 4-bit cache, GB/s packed; 0: unknown */
	double cpu_append_bdw;               /* prefill rows into a host cache, GB/s written; 0: unknown */
	double cpu_append_q4_bdw;            /* the same into a 4-bit cache, GB/s packed; 0: unknown */
	double cpu_mem_bdw;                  /* host memory shared by host attention and copies, GB/s; 0: unlimited */
	double q4_decode_bdw;                /* int4 weight GEMV, GB/s of packed weights; 0: no int4 */
	double attn_decode_q4_bdw;           /* decode attention over a 4-bit cache, GB/s packed; 0: unknown */
	double f8_decode_bdw;                /* fp8 weight GEMV, GB/s of stored bytes; 0: unknown */
	double f8_batch_bdw;                 /* fp8-weight linear, mm_batch_rows rows, GB/s stored; 0: unknown */
	double attn_decode_f8_bdw;           /* decode attention over an fp8 cache, GB/s stored; 0: unknown */
	double cpu_attn_f8_bdw;              /* the same on the host; 0: unknown */
	double cpu_append_f8_bdw;            /* prefill rows into an fp8 host cache, GB/s stored; 0: unknown */
	int act_bytes;                       /* the backend's activation size (2 or 4); 0: unknown */
	int hidden_bytes;                    /* its residual stream's (2 or 4); 0: act_bytes */
	int compute_host_memory;             /* 1: the compute tier is host memory (CPU run) */
};

/* Check that every rate the cost model divides by is positive and the
 * capacities are set; -EINVAL with a line naming the first missing key. */
int fg_hardware_check(const struct fg_hardware *hw);

/* Bytes of the residual stream's elements: hidden_bytes, or act_bytes when unset. */
static inline int fg_hardware_hidden_bytes(const struct fg_hardware *hw)
{
	return hw->hidden_bytes ? hw->hidden_bytes : hw->act_bytes;
}

/* Read [hardware] from a configuration; -ENOTSUP when this build's schema has
 * no [hardware] section yet. */
int fg_hardware_from_config(const struct fg_config *c, struct fg_hardware *hw);

/* A preset name (NAME.ini in $FGCORE_HARDWARE_PATH's folders, then
 * $(datadir)/fgcore/hardware) or a file path (it has a '/' or ends in .ini)
 * into path; -ENOENT with a line listing the presets. */
int fg_hardware_resolve(const char *name_or_file, char *path, size_t len);

/* Resolve, then set cfg's [hardware] keys from that file's (keys given with
 * -o on the command line keep their value). */
int fg_hardware_load(struct fg_config *cfg, const char *name_or_file);

/* Write hw as an INI [hardware] section (with a comment line per key). */
int fg_hardware_write(FILE *out, const struct fg_hardware *hw, const char *origin);

#endif
