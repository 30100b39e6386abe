#!/bin/sh
# bench/h200_q4.sh - the 4-bit linear on the H200 (issue 19), one call of
# about 7 minutes: the build; the cublas tests (test_compression's
# host-attention check, the op tests against cpu_blas, the conformance
# suite); bench/q4_sweep.cu (carried prebuilt as _gpudata/q4_sweep, else
# built here; a _gpudata/q4_sweep_old built from another tree runs first,
# as the same call's baseline); the op rates through the backend
# (bench/gpu_ops_bench q4); OPT-175B with 4-bit weights and cache, all on the
# GPU (the issue's case).  Run from the project root with .devdeps and
# _gpudata/testdata carried along (bench/h200_env.sh).  Logs to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "tests on cublas"
export FGCORE_TEST_BACKEND=cublas
gpu_tests 300 tests/test_compression tests/test_cublas tests/test_compute_conformance
unset FGCORE_TEST_BACKEND
grep -E "^  (row|all rows)|DIFFERENT" tests/test_compression.log
b=$(sweep_bin q4)
for s in _gpudata/q4_sweep_old "$b"; do
	[ -x "$s" ] || continue
	stamp "$s"
	timeout 100 "$s" > "$out/$(basename "$s").txt" 2>&1
	echo "$s: rc $?"
	cut -c1-60 "$out/$(basename "$s").txt"
done
stamp "gpu_ops_bench q4"
make bench/gpu_ops_bench >> "$out/build.log" 2>&1
timeout 60 bench/gpu_ops_bench q4 > "$out/gpu_ops_q4.txt" 2>&1
echo "gpu_ops_bench: rc $?"
grep -E "175b|30b-fc1" "$out/gpu_ops_q4.txt" | grep -v "\[" | head -24
opt175b_int4
stamp done
