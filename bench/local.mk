# Benchmark programs (built by `make bench`, never run by `make check`).
include $(srcdir)/bench/gemm.mk
include $(srcdir)/bench/tokenizer.mk
.PHONY: bench
include $(srcdir)/bench/disk.mk
include $(srcdir)/bench/gpu.mk
include $(srcdir)/bench/sample.mk
include $(srcdir)/bench/host_attn.mk
# The GPU runner (bench/gpu/run --list), the scripts and kernel sweeps it
# runs, and the run-batch and serve load generators.
EXTRA_DIST += bench/README.md bench/gpu/run bench/serve_load.py bench/hf_score.py bench/hf_generate.py \
	bench/batch_bench.sh bench/batch_1m.sh bench/replicas.sh bench/decode_sweep.cu bench/q4_sweep.cu \
	bench/prefill_sweep.cu bench/cuda_check.h bench/sweep_compare.h
