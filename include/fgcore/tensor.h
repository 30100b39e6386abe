/* fgcore/tensor.h - element types and the 2-D tensor view passed to compute ops. */
#ifndef FGCORE_TENSOR_H
#define FGCORE_TENSOR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fg_dtype {
	FG_DTYPE_F32 = 0,
	FG_DTYPE_F16 = 1, /* IEEE binary16, stored as uint16_t */
	FG_DTYPE_I32 = 2,
	/* 4-bit groups of 64 (fgcore/q4.h): along dimension 0 (64 rows of one
	 * column share a scale: weights) or along dimension 1 (64 consecutive
	 * values of a row: the KV cache, grouped along the head dimension).
	 * A view of either must cover its whole encoded tensor (ld == cols). */
	FG_DTYPE_Q4_ROWS = 3,
	FG_DTYPE_Q4_COLS = 4,
	/* fp8 (E4M3) weights with one fp32 scale per row, an output channel
	 * (fgcore/f8.h; compute minor 15).  Like the 4-bit types, a view
	 * covers its whole encoded tensor (ld == cols). */
	FG_DTYPE_F8_ROWS = 5,
	/* An fp8 (E4M3) KV cache, one fp32 scale per group of 64 values along a
	 * row (fgcore/f8.h; compute minor 16); whole views, as above. */
	FG_DTYPE_F8_COLS = 6,
};

/* Bytes per element of the plain types (0 for the encoded ones: 4-bit, fp8). */
static inline unsigned fg_dtype_size(enum fg_dtype t)
{
	switch (t) {
	case FG_DTYPE_F16:
		return 2u;
	case FG_DTYPE_F32:
	case FG_DTYPE_I32:
		return 4u;
	default:
		return 0u;
	}
}

/* A row-major 2-D view.  `data` is an address in the compute tier (a host
 * pointer for cpu_blas, a device pointer for cublas).  Row r starts at
 * element r * ld.  Higher-rank tensors are viewed as 2-D (e.g. attention's
 * [batch, seq, heads * head_dim] is rows = batch * seq). */
struct fg_tensor {
	void *data;
	enum fg_dtype dtype;
	int64_t rows;
	int64_t cols;
	int64_t ld; /* elements between row starts; >= cols */
};

#ifdef __cplusplus
}
#endif
#endif
