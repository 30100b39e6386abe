# bench/gpu.mk: GPU op timings with CUDA events (`make bench`; needs a GPU to run).
GPU_OPS_BENCH =
if HAVE_CUDA
EXTRA_PROGRAMS += bench/gpu_ops_bench
bench_gpu_ops_bench_SOURCES = bench/gpu_ops_bench.c
bench_gpu_ops_bench_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS)
bench_gpu_ops_bench_LDADD = libfgcore_internal.la $(CUDA_LIBS) -lm
GPU_OPS_BENCH += bench/gpu_ops_bench$(EXEEXT)
endif
bench: $(GPU_OPS_BENCH)
# automake does not clean EXTRA_PROGRAMS
CLEANFILES += $(GPU_OPS_BENCH)
