# bench/disk.mk: sequential bandwidth of the file tiers (posix_file,
# io_uring_nvme, libaio_nvme) through their plugins.  `make bench`.
EXTRA_PROGRAMS += bench/disk_bench
bench_disk_bench_SOURCES = bench/disk_bench.c
bench_disk_bench_CFLAGS = $(AM_CFLAGS)
bench_disk_bench_LDADD = libfgcore_internal.la -lm
bench: bench/disk_bench$(EXEEXT)
