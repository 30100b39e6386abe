# bench/host_attn.mk: cpu_blas decode attention over an fp16 or 4-bit cache, the
# attention delegated to the host (`make bench`; run:
# FGCORE_PLUGIN_PATH=plugins/compute/.libs bench/host_attn_bench).
EXTRA_PROGRAMS += bench/host_attn_bench
bench_host_attn_bench_SOURCES = bench/host_attn_bench.c
bench_host_attn_bench_LDADD = libfgcore_internal.la -lm
bench: bench/host_attn_bench$(EXEEXT)
CLEANFILES += bench/host_attn_bench$(EXEEXT)
