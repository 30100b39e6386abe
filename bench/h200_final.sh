#!/bin/sh
# bench/h200_final.sh - after bench/h200_kernels.sh: the engine tests on
# cublas over the new kernels and the activation reload order, FlexGen's two
# 16 GiB policies again, and OPT-30B all on GPU.  Logs go to $OUT; run there
# as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "policy and 4-bit tests on cublas"
FGCORE_TEST_BACKEND=cublas gpu_tests 200 tests/test_policy tests/test_compression
grep -h "perplexity" tests/test_compression.log
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention ($(date +%T))" \
	$T4_POLICY
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache ($(date +%T))" $CC_POLICY
stamp "OPT-30B all on GPU, 96 x 1"
timeout 120 ./fgcore -c conf/h200_opt30b.ini -o bench.device_timing=true bench >> "$out/bench.log" 2>&1
tail -6 "$out/bench.log" | grep -E "throughput|time"
stamp done
