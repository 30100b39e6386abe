#!/bin/sh
# bench/h200_q4.sh - the cublas tests and the 4-bit linear's sweep on the
# H200 (issue 19), one call of about 6 minutes: the build; the cublas tests
# (test_compression's host-attention check by step logits, the op tests, the
# all-placement and Hugging Face tests); bench/q4_sweep.cu (carried prebuilt
# as _gpudata/q4_sweep, else built here; build 8e08f6b's sweep tried weights
# through a ring of shared-memory stages); the op rates through the backend
# (bench/gpu_ops_bench q4).  Run from the project root with .devdeps and
# _gpudata/testdata carried along (bench/h200_env.sh).  Logs to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "tests on cublas"
export FGCORE_TEST_BACKEND=cublas
gpu_tests 420 tests/test_compression tests/test_cublas tests/test_compute_conformance \
	tests/test_policy tests/test_golden
unset FGCORE_TEST_BACKEND
grep -E "^  row|DIFFERENT" tests/test_compression.log
b=_gpudata/q4_sweep
[ -x "$b" ] || { b=./q4_sweep && nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
	-I. -Iinclude bench/q4_sweep.cu -o "$b"; }
stamp "q4 sweep"
timeout 200 "$b" > "$out/q4_sweep.txt" 2>&1
echo "q4 sweep: rc $?"
cat "$out/q4_sweep.txt"
stamp "gpu_ops_bench q4"
make bench/gpu_ops_bench >> "$out/build.log" 2>&1
timeout 60 bench/gpu_ops_bench q4 > "$out/gpu_ops_q4.txt" 2>&1
echo "gpu_ops_bench: rc $?"
cat "$out/gpu_ops_q4.txt"
stamp done
