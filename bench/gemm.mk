# bench/gemm.mk: cpu_blas `linear` (fp16 weights) against plain fp32 cblas_sgemm
# (`make bench`; run: FGCORE_PLUGIN_PATH=plugins/compute/.libs bench/gemm_bench).
EXTRA_PROGRAMS += bench/gemm_bench
bench_gemm_bench_SOURCES = bench/gemm_bench.c
bench_gemm_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)
bench_gemm_bench_LDADD = libfgcore_internal.la $(BLAS_LIBS) -lm
bench: bench/gemm_bench$(EXEEXT)
# automake does not clean EXTRA_PROGRAMS
CLEANFILES += bench/gemm_bench$(EXEEXT)
