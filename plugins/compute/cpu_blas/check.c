/* plugins/compute/cpu_blas/check.c - validation of tensor views passed to ops. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>

#include <fgcore/q4.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

const char *cpu_blas_dtype_name(enum fg_dtype t)
{
	switch (t) {
	case FG_DTYPE_F32:
		return "f32";
	case FG_DTYPE_F16:
		return "f16";
	case FG_DTYPE_I32:
		return "i32";
	case FG_DTYPE_Q4_ROWS:
		return "q4_rows";
	case FG_DTYPE_Q4_COLS:
		return "q4_cols";
	default:
		return "a dtype cpu_blas does not handle";
	}
}

int cpu_blas_check_tensor(struct cpu_blas_ctx *c, const char *op, const char *name,
			  const struct fg_tensor *t, enum fg_dtype dtype, int64_t rows, int64_t cols)
{
	const struct fg_host *h = c->host;

	if (t->dtype != dtype) {
		fg_error(h, "cpu_blas: %s: %s is %s, expected %s", op, name,
			 cpu_blas_dtype_name(t->dtype), cpu_blas_dtype_name(dtype));
		return -EINVAL;
	}
	if (t->rows < 0 || t->cols < 0) {
		fg_error(h, "cpu_blas: %s: %s has a negative shape [%" PRId64 ", %" PRId64 "]",
			 op, name, t->rows, t->cols);
		return -EINVAL;
	}
	if ((rows >= 0 && t->rows != rows) || (cols >= 0 && t->cols != cols)) {
		fg_error(h, "cpu_blas: %s: %s is [%" PRId64 ", %" PRId64 "], expected [%" PRId64
			 ", %" PRId64 "]", op, name, t->rows, t->cols,
			 rows >= 0 ? rows : t->rows, cols >= 0 ? cols : t->cols);
		return -EINVAL;
	}
	/* The grouped 4-bit layout has no row padding: params follow the data. */
	if ((t->dtype == FG_DTYPE_Q4_ROWS || t->dtype == FG_DTYPE_Q4_COLS) && t->ld != t->cols) {
		fg_error(h, "cpu_blas: %s: %s is %s with ld %" PRId64 " != cols %" PRId64
			 ", a 4-bit view must cover its whole encoded tensor", op, name,
			 cpu_blas_dtype_name(t->dtype), t->ld, t->cols);
		return -EINVAL;
	}
	if (t->ld < t->cols) {
		fg_error(h, "cpu_blas: %s: %s has ld %" PRId64 " < cols %" PRId64
			 ", rows must not overlap", op, name, t->ld, t->cols);
		return -EINVAL;
	}
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (!t->data) {
		fg_error(h, "cpu_blas: %s: %s has a NULL data pointer", op, name);
		return -EINVAL;
	}
	/* (rows - 1) * ld + cols elements must be addressable. */
	if (t->rows - 1 > (INT64_MAX / 8 - t->cols) / t->ld) {
		fg_error(h, "cpu_blas: %s: %s [%" PRId64 ", %" PRId64 "] with ld %" PRId64
			 " is larger than the address space", op, name, t->rows, t->cols, t->ld);
		return -EINVAL;
	}
	return 0;
}

size_t cpu_blas_extent(const struct fg_tensor *t)
{
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (t->dtype == FG_DTYPE_Q4_ROWS || t->dtype == FG_DTYPE_Q4_COLS)
		return (size_t)fg_q4_bytes((uint64_t)t->rows, (uint64_t)t->cols,
					   t->dtype == FG_DTYPE_Q4_ROWS ? 0 : 1);
	return (size_t)((t->rows - 1) * t->ld + t->cols) * fg_dtype_size(t->dtype);
}

int cpu_blas_overlap(const struct fg_tensor *a, const struct fg_tensor *b)
{
	uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
	size_t an = cpu_blas_extent(a), bn = cpu_blas_extent(b);

	if (!an || !bn)
		return 0;
	return a0 < b0 + bn && b0 < a0 + an;
}

int cpu_blas_same(const struct fg_tensor *a, const struct fg_tensor *b)
{
	return a->data == b->data && a->ld == b->ld && a->dtype == b->dtype;
}
