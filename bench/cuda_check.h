/* bench/cuda_check.h - CK(call): the developer tools' check of a CUDA runtime
 * call: on an error, the file, line, call and CUDA's message, then exit 1. */
#ifndef FG_BENCH_CUDA_CHECK_H
#define FG_BENCH_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define CK(x)                                                                              \
	do {                                                                               \
		cudaError_t e_ = (x);                                                      \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,         \
				cudaGetErrorString(e_));                                   \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#endif
