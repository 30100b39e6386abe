/* plugins/compute/cublas/check.c - validation of the tensor views passed to ops. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>

#include <fgcore/q4.h>

#include "plugins/compute/cublas/cublas_int.h"

const char *cublas_dtype_name(enum fg_dtype t)
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
	}
	return "an unknown dtype";
}

static int cublas_check_shape(struct cublas_ctx *c, const char *op, const char *name,
			      const struct fg_tensor *t, enum fg_dtype dtype, int64_t rows,
			      int64_t cols)
{
	const struct fg_host *h = c->host;

	if (t->dtype != dtype) {
		fg_error(h, "cublas: %s: %s is %s, expected %s", op, name,
			 cublas_dtype_name(t->dtype), cublas_dtype_name(dtype));
		return -EINVAL;
	}
	if (t->rows < 0 || t->cols < 0) {
		fg_error(h, "cublas: %s: %s has a negative shape [%" PRId64 ", %" PRId64 "]", op,
			 name, t->rows, t->cols);
		return -EINVAL;
	}
	if ((rows >= 0 && t->rows != rows) || (cols >= 0 && t->cols != cols)) {
		fg_error(h, "cublas: %s: %s is [%" PRId64 ", %" PRId64 "], expected [%" PRId64
			 ", %" PRId64 "]", op, name, t->rows, t->cols, rows >= 0 ? rows : t->rows,
			 cols >= 0 ? cols : t->cols);
		return -EINVAL;
	}
	return 0;
}

int cublas_check_tensor(struct cublas_ctx *c, const char *op, const char *name,
			const struct fg_tensor *t, enum fg_dtype dtype, int64_t rows, int64_t cols)
{
	const struct fg_host *h = c->host;
	int rc = cublas_check_shape(c, op, name, t, dtype, rows, cols);

	if (rc)
		return rc;
	if (t->ld < t->cols) {
		fg_error(h, "cublas: %s: %s has ld %" PRId64 " < cols %" PRId64
			 ", rows must not overlap", op, name, t->ld, t->cols);
		return -EINVAL;
	}
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (!t->data) {
		fg_error(h, "cublas: %s: %s has a NULL data pointer", op, name);
		return -EINVAL;
	}
	if (t->rows - 1 > (INT64_MAX / 8 - t->cols) / t->ld) {
		fg_error(h, "cublas: %s: %s [%" PRId64 ", %" PRId64 "] with ld %" PRId64
			 " is larger than the address space", op, name, t->rows, t->cols, t->ld);
		return -EINVAL;
	}
	if ((uintptr_t)t->data % fg_dtype_size(dtype)) {
		fg_error(h, "cublas: %s: %s at %p is not aligned to its %u-byte elements", op,
			 name, t->data, fg_dtype_size(dtype));
		return -EINVAL;
	}
	return 0;
}

int cublas_check_q4(struct cublas_ctx *c, const char *op, const char *name,
		    const struct fg_tensor *t, enum fg_dtype dtype, int64_t rows, int64_t cols)
{
	const struct fg_host *h = c->host;
	int rc = cublas_check_shape(c, op, name, t, dtype, rows, cols);

	if (rc)
		return rc;
	if (t->ld != t->cols) {
		fg_error(h, "cublas: %s: %s is a 4-bit tensor with ld %" PRId64 " != cols %" PRId64
			 "; a 4-bit view must cover its whole encoded tensor", op, name, t->ld,
			 t->cols);
		return -EINVAL;
	}
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (!t->data) {
		fg_error(h, "cublas: %s: %s has a NULL data pointer", op, name);
		return -EINVAL;
	}
	if (t->rows > (INT64_MAX / 8) / t->cols) {
		fg_error(h, "cublas: %s: %s [%" PRId64 ", %" PRId64 "] is too large", op, name,
			 t->rows, t->cols);
		return -EINVAL;
	}
	if ((uintptr_t)t->data % 4) {
		fg_error(h, "cublas: %s: 4-bit %s at %p is not 4-byte aligned; allocate it from "
			 "the tier (regions are 256-byte aligned)", op, name, t->data);
		return -EINVAL;
	}
	return 0;
}

uint64_t cublas_extent(const struct fg_tensor *t)
{
	if (t->rows == 0 || t->cols == 0)
		return 0;
	if (t->dtype == FG_DTYPE_Q4_ROWS || t->dtype == FG_DTYPE_Q4_COLS)
		return fg_q4_bytes((uint64_t)t->rows, (uint64_t)t->cols,
				   t->dtype == FG_DTYPE_Q4_ROWS ? 0 : 1);
	return (uint64_t)((t->rows - 1) * t->ld + t->cols) * fg_dtype_size(t->dtype);
}

int cublas_overlap(const struct fg_tensor *a, const struct fg_tensor *b)
{
	uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
	uint64_t an = cublas_extent(a), bn = cublas_extent(b);

	if (!an || !bn || !a->data || !b->data)
		return 0;
	return a0 < b0 + bn && b0 < a0 + an;
}

int cublas_same(const struct fg_tensor *a, const struct fg_tensor *b)
{
	return a->data == b->data && a->ld == b->ld && a->dtype == b->dtype;
}
