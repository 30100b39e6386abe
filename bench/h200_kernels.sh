#!/bin/sh
# bench/h200_kernels.sh - the decode kernels (issue 19) and the offloaded
# 16 GiB policies (issue 18) in one H200 call: build with CUDA, the op tests,
# the memory-bound op rates (gpu_ops_bench decode), FlexGen's T4 policy
# (activations on the host), OPT-6.7B all on GPU, and the int4-cache policy
# (4-bit decode attention on the GPU, activations on the host).  Logs go to
# $OUT; run there as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "op tests"
gpu_tests 150 tests/test_cublas tests/test_compute_conformance
stamp "decode op rates"
make bench > "$out/ops_build.log" 2>&1 && timeout 120 bench/gpu_ops_bench decode > "$out/ops.txt" 2>&1
grep -E "175b|attention_decode" "$out/ops.txt"
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention ($(date +%T))" \
	$T4_POLICY
stamp "OPT-6.7B all on GPU, 256 x 1"
timeout 100 ./fgcore -c conf/h200_opt6.7b.ini -o bench.device_timing=true bench >> "$out/bench.log" 2>&1
tail -6 "$out/bench.log" | grep -E "throughput|time"
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache ($(date +%T))" $CC_POLICY
stamp done
