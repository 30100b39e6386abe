# bench/tokenizer.mk: GPT-2 BPE encode/decode throughput (`make bench`).
EXTRA_PROGRAMS += bench/tokenizer_bench
bench_tokenizer_bench_SOURCES = bench/tokenizer_bench.c
bench_tokenizer_bench_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PTHREAD_LIBS)
bench_tokenizer_bench_LDADD = libfgcore_internal.la $(JANSSON_LIBS) $(PTHREAD_LIBS)
bench: bench/tokenizer_bench$(EXEEXT)
# automake does not clean EXTRA_PROGRAMS
CLEANFILES += bench/tokenizer_bench$(EXEEXT)
