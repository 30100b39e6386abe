#!/bin/sh
# bench/h200_sweeps.sh - the third session's kernel work on the H200 (issue
# 19) in one call of about 9 minutes: the build; the op tests; the issue's
# all-GPU cases with fp8 prefill (OPT-175B int4 first: the 4-bit linear
# decides it); the block-shape sweeps of the fused 4-bit linear and of
# prefill attention (bench/q4_sweep.cu, bench/prefill_sweep.cu: every
# variant checked against references); the 4-bit linear's rates through the
# backend.  The sweeps are built here unless _gpudata/q4_sweep and
# _gpudata/prefill_sweep were built elsewhere with the same CUDA and carried.
# Run from the project root with .devdeps and _gpudata/testdata carried along
# (bench/h200_env.sh).  Logs to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
make bench > "$out/ops_build.log" 2>&1 || { tail -20 "$out/ops_build.log"; exit 1; }
stamp "op tests"
gpu_tests 240 tests/test_cublas tests/test_compute_conformance
dt="-o bench.device_timing=true"
fp8="-o compute.fp8_prefill=true"
run_case() { # name seconds flags...
	name=$1 secs=$2
	shift 2
	stamp "$name"
	# shellcheck disable=SC2086
	timeout "$secs" ./fgcore $dt "$@" bench > "$out/bench_$name.log" 2>&1
	grep -E "throughput|^time" "$out/bench_$name.log"
}
run_case opt175b_int4_fp8 200 -c conf/h200_opt175b_int4.ini $fp8 -o compute.scratch=512M \
	-o compute.fp8_scratch=1G -o tier.compute.reserve=6G
run_case opt6.7b_fp8 100 -c conf/h200_opt6.7b.ini $fp8
run_case opt30b_fp8 150 -c conf/h200_opt30b.ini $fp8
for t in q4 prefill; do
	b=$(sweep_bin "$t")
	stamp "$t sweep"
	timeout 240 "$b" > "$out/${t}_sweep.txt" 2>&1
	echo "$t sweep: rc $?"
done
stamp "4-bit linear through the backend (bench/gpu_ops_bench q4)"
timeout 90 bench/gpu_ops_bench q4 > "$out/ops_q4.txt" 2>&1
grep -E "175b|30b-fc1" "$out/ops_q4.txt" | grep -v "\[" | head -24
sed -n '/^## TFLOP/,$p' "$out/prefill_sweep.txt" | head -60
head -3 "$out/q4_sweep.txt"
