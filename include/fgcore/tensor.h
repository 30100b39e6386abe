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
};

static inline unsigned fg_dtype_size(enum fg_dtype t)
{
	return t == FG_DTYPE_F16 ? 2u : 4u;
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
