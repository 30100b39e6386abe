/* plugins/compute/cublas/check.c - the kernels' own limits.  The core checks
 * every argument against fgcore/compute.h before an op reaches the backend;
 * what remains here is what these kernels need beyond that contract. */
#include <errno.h>
#include <stdint.h>

#include "plugins/compute/cublas/cublas_int.h"

int cublas_need_align(struct cublas_ctx *c, const char *op, const char *name, const void *p,
		      unsigned bytes)
{
	if (((uintptr_t)p & (uintptr_t)(bytes - 1)) == 0)
		return 0;
	fg_error(c->host, "cublas: %s: %s at %p is not %u-byte aligned, which the kernel needs; "
		 "allocate it from the tier (regions are 256-byte aligned)", op, name, p, bytes);
	return -EINVAL;
}
