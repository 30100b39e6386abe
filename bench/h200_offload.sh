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
FGCORE_TEST_BACKEND=cublas gpu_tests 200 tests/test_policy tests/test_compression
grep -hE "cpu attention|DIFFERENT" tests/test_policy.log tests/test_compression.log | head -12
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention" $T4_POLICY
# shellcheck disable=SC2086
opt30b_16g "the same, fp16 residual stream" $T4_POLICY -o compute.fp32_residual=false
# shellcheck disable=SC2086
opt30b_16g "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache, fp16 residual stream" $CC_POLICY \
	-o compute.fp32_residual=false
