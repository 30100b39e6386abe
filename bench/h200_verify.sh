#!/bin/sh
# bench/h200_verify.sh - the sampling op on the H200 in one call: build, the
# cublas op tests (the sample op's against the host definition among them),
# the engine's sampled and greedy runs on cublas (tests/test_run_batch.sh
# compares device against host sampling there), the op's rate
# (gpu_ops_bench sample), then bench/h200_sample.sh (greedy against sampling
# on the device, on the host over all CPUs and on one CPU) and the fresh
# profile of bench/h200_predict.sh.  Logs go to $OUT; run there as
# h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "GPU tests"
export FGCORE_TEST_BACKEND=cublas
gpu_tests 300 tests/test_cublas tests/test_run_batch.sh tests/test_golden tests/test_finished_rows
unset FGCORE_TEST_BACKEND
stamp "sample op rate"
make bench > "$out/ops_build.log" 2>&1 && timeout 60 bench/gpu_ops_bench sample > "$out/ops.txt" 2>&1
cat "$out/ops.txt"
sh bench/h200_sample.sh
stamp profile
sh bench/h200_predict.sh profile > "$out/predict_profile.txt" 2>&1
tail -30 "$out/predict_profile.txt"
stamp done
