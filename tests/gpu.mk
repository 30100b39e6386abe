# tests/gpu.mk: the GPU plugins (cuda_mem, cublas).  Built in every
# configuration; without a GPU (or without the CUDA plugins) they exit 77.
check_PROGRAMS += tests/test_cuda_mem tests/test_cublas
TESTS += tests/test_cuda_mem tests/test_cublas

tests_test_cuda_mem_SOURCES = tests/test_cuda_mem.c tests/gpu_common.h
tests_test_cuda_mem_CFLAGS = $(TEST_CFLAGS)
tests_test_cuda_mem_LDADD = $(TEST_LIBS)

tests_test_cublas_SOURCES = tests/test_cublas.c tests/gpu_common.h
tests_test_cublas_CFLAGS = $(TEST_CFLAGS)
tests_test_cublas_LDADD = $(TEST_LIBS)
