# bench/sample.mk: host sampling over an OPT-sized vocabulary, partial
# selection against the full sort (`make bench`).
EXTRA_PROGRAMS += bench/sample_bench
bench_sample_bench_SOURCES = bench/sample_bench.c
bench_sample_bench_CFLAGS = $(AM_CFLAGS)
bench_sample_bench_LDADD = libfgcore_internal.la -lm
bench: bench/sample_bench$(EXEEXT)
CLEANFILES += bench/sample_bench$(EXEEXT)
