#!/bin/sh
# bench/h200_final.sh - after bench/h200_kernels.sh: the engine tests on
# cublas over the new kernels and the activation reload order, FlexGen's two
# 16 GiB policies again, and OPT-30B all on GPU.  Logs go to $OUT; run there
# as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
stamp() { step "$* ($(date +%T))"; }
stamp build
h200_build || exit 1
stamp "policy and 4-bit tests on cublas"
FGCORE_TEST_BACKEND=cublas timeout 200 make check TESTS="tests/test_policy tests/test_compression" \
	> "$out/tests.log" 2>&1
grep -E "^(PASS|FAIL|ERROR)" "$out/tests.log"
cat tests/test_policy.log tests/test_compression.log > "$out/test_logs.txt" 2>&1
grep -hE ":[EF]:|perplexity" tests/test_policy.log tests/test_compression.log | head -12
opt30b_16g "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention ($(date +%T))" \
	--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute
opt30b_16g "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache ($(date +%T))" \
	--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --compress-cache
stamp "OPT-30B all on GPU, 96 x 1"
timeout 120 ./fgcore -c conf/h200_opt30b.ini -o bench.device_timing=true bench >> "$out/bench.log" 2>&1
tail -6 "$out/bench.log" | grep -E "throughput|time"
stamp done
