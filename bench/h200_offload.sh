#!/bin/sh
# bench/h200_offload.sh - the offloaded cases of the GPU issue on the H200:
# build with CUDA, the policy and 4-bit tests on cublas (host attention, the
# cache copied straight to the host), then FlexGen's two T4 policies for
# OPT-30B under a 16 GiB GPU cap with the device's time breakdown, with the
# fp32 residual stream and without it (their activations live on the host,
# so the stream's width is traffic).  Logs go to $OUT.
#   run there as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
step build
h200_build || exit 1
step "policy and 4-bit tests on cublas"
FGCORE_TEST_BACKEND=cublas timeout 200 make check TESTS="tests/test_policy tests/test_compression" \
	> "$out/tests.log" 2>&1
grep -E "^(PASS|FAIL|SKIP|ERROR)" "$out/tests.log"
cat tests/test_policy.log tests/test_compression.log > "$out/test_logs.txt" 2>&1
grep -hE ":[EF]:|cpu attention|DIFFERENT" tests/test_policy.log tests/test_compression.log | head -12
t4="--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute"
cc="--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --compress-cache"
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention" $t4
# shellcheck disable=SC2086
opt30b_16g "the same, fp16 residual stream" $t4 -o compute.fp32_residual=false
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache, fp16 residual stream" $cc \
	-o compute.fp32_residual=false
