#!/bin/sh
# bench/h200_run.sh - one full run on the H200 test machine: build with CUDA,
# the GPU op tests, the Hugging Face reference, scoring, policy and 4-bit
# tests on cublas, and benchmarks with the device's own time breakdown
# ([bench] device_timing): all on GPU,
# weights on host, FlexGen's two T4 policies under a 16 GiB cap, and the
# decode op rates (bench/gpu_ops_bench decode, at most 90 s).  Logs go
# to $OUT.  Run there with .devdeps and the test data copied to
# _gpudata/testdata carried along (bench/h200_env.sh).
. bench/h200_env.sh
step build
h200_build || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
step "GPU op tests"
gpu_tests 240 tests/test_cuda_mem tests/test_cublas tests/test_compute_conformance
step "reference and policy tests on cublas"
FGCORE_TEST_BACKEND=cublas gpu_tests 330 tests/test_golden tests/test_scoring tests/test_policy \
	tests/test_compression
grep -h "perplexity\|max difference" tests/test_scoring.log
grep -h "worst\|max |error|\|prefill logits" tests/test_cublas.log tests/test_golden.log | head -40
dt="-o bench.device_timing=true"
step "bench OPT-6.7B all on GPU, 256 x 1"
timeout 150 ./fgcore -c conf/h200_opt6.7b.ini $dt bench > "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
step "bench OPT-30B weights on host, 48 x 3"
timeout 200 ./fgcore -c conf/h200_opt30b_host.ini $dt bench >> "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
# FlexGen's two T4 policies for OPT-30B under a 16 GiB GPU cap (8 tokens run,
# the rest projected, as FlexGen's --cut-gen-len does)
# shellcheck disable=SC2086
opt30b_16g "bench OPT-30B 16 GiB, 20 80 0 100 0 100, 48 x 1, CPU attention" $T4_POLICY
# shellcheck disable=SC2086
opt30b_16g "bench OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache" $CC_POLICY
step "op rates (bench/gpu_ops_bench)"
if make bench > "$out/ops_build.log" 2>&1; then
	timeout 90 bench/gpu_ops_bench decode > "$out/ops.txt" 2>&1
	head -90 "$out/ops.txt"
else
	tail -5 "$out/ops_build.log"
fi
