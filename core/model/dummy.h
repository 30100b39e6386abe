/* core/model/dummy.h - "dummy:<preset>" weights: deterministic values, no file.
 *
 * Element i of tensor `name` depends only on (name, i): a 64-bit FNV-1a hash
 * of the name seeds splitmix64, whose output for block i / 4 gives four
 * 16-bit indices into a fixed table of fp16 values spread uniformly over
 * [-a, a].  How a tensor is filled is its family's table entry (enum
 * fg_init): matrices and embeddings use a = 0.0346 (std 0.02, like OPT's
 * init_std), biases a = 0.01, norm weights are exactly 1.  Integer
 * arithmetic only per element, so every machine produces the same bytes
 * and any row range reads the same values as the whole tensor.
 *
 * Large requests are split over threads (one per CPU of the process's
 * affinity mask, at most 64, each with at least 2^20 values); since a value
 * depends on its index alone, the split never changes a byte.
 */
#ifndef FG_MODEL_DUMMY_H
#define FG_MODEL_DUMMY_H

#include <stdint.h>

#include "core/arch/arch.h"

/* Write elements [elem0, elem0 + n) of the dummy tensor `name` as fp16. */
void fg_dummy_fill(const char *name, enum fg_init init, uint64_t elem0, uint64_t n,
		   uint16_t *dst);

/* The same with `threads` threads (at most 64, fewer when n is small);
 * threads <= 0 picks as fg_dummy_fill does.  For tests and benchmarks. */
void fg_dummy_fill_threads(const char *name, enum fg_init init, uint64_t elem0, uint64_t n,
			   uint16_t *dst, int threads);

#endif
