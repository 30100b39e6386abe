# Benchmark programs (built by `make bench`, never run by `make check`).
include $(srcdir)/bench/gemm.mk
include $(srcdir)/bench/tokenizer.mk
.PHONY: bench
include $(srcdir)/bench/disk.mk
include $(srcdir)/bench/gpu.mk
include $(srcdir)/bench/sample.mk
include $(srcdir)/bench/host_attn.mk
EXTRA_DIST += bench/h200_run.sh bench/h200_llama.sh bench/h200_predict.sh bench/serve_load.py \
	bench/h200_mpi.sh bench/h200_batch.sh bench/batch_bench.sh bench/batch_1m.sh \
	bench/h200_grid.sh bench/h200_offload.sh bench/h200_env.sh bench/h200_diag.sh \
	bench/h200_fp8.sh bench/h200_sweeps.sh bench/h200_counters.sh bench/h200_step_kernels.sh \
	bench/h200_graphs.sh bench/h200_decode.sh bench/h200_q4.sh bench/decode_sweep.cu \
	bench/q4_sweep.cu bench/prefill_sweep.cu bench/cuda_check.h bench/sweep_compare.h
