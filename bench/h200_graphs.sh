#!/bin/sh
# bench/h200_graphs.sh - decode steps as CUDA graphs on the H200 (issue 19),
# one call of about 7 minutes: the build; the policy matrix
# (its all-GPU run must launch both decode steps as graphs, and every
# placement give its tokens) and the Hugging Face references on cublas with
# graphs on (the default); then the same benchmark with `cuda_graphs` on and
# off at OPT-6.7B batch 1, 8 and 256 and OPT-30B batch 96 (prompt 512, gen
# 32, fp8 prefill, host-clock decode time), and once with device timing
# (timers recorded inside the graph).  Run from the project root with
# .devdeps and _gpudata/testdata carried along (bench/h200_env.sh).  Logs
# to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "tests on cublas"
export FGCORE_TEST_BACKEND=cublas
gpu_tests 200 tests/test_policy tests/test_golden
unset FGCORE_TEST_BACKEND
fp8="-o compute.fp8_prefill=true"
ab() { # name seconds flags...: graphs on, then off
	name=$1 secs=$2
	shift 2
	for g in true false; do
		stamp "$name, cuda_graphs = $g"
		# shellcheck disable=SC2086
		timeout "$secs" ./fgcore "$@" -o compute.cuda_graphs=$g bench \
			> "$out/bench_${name}_$g.log" 2>&1
		grep -E "throughput|launched|rror" "$out/bench_${name}_$g.log"
	done
}
ab opt6.7b_b1 60 -c conf/h200_opt6.7b.ini $fp8 -o policy.gpu_batch_size=1
ab opt6.7b_b8 60 -c conf/h200_opt6.7b.ini $fp8 -o policy.gpu_batch_size=8
ab opt6.7b 90 -c conf/h200_opt6.7b.ini $fp8
ab opt30b 120 -c conf/h200_opt30b.ini $fp8
stamp "OPT-6.7B 256 x 1, graphs, device timing"
timeout 90 ./fgcore -c conf/h200_opt6.7b.ini $fp8 -o bench.device_timing=true bench \
	> "$out/bench_opt6.7b_devtime.log" 2>&1
grep -E "throughput|launched|device time|rror" "$out/bench_opt6.7b_devtime.log"
stamp done
