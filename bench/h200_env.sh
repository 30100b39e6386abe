# bench/h200_env.sh - sourced by the H200 scripts (run from the project root
# there, with .devdeps and _gpudata/testdata carried along): where logs go,
# the unpacked build dependencies, the test data and the built plugins, and
#   step TEXT                 a heading in the output
#   stamp TEXT                the same with the time of day
#   h200_build                autoreconf, configure --with-cuda, make, the
#                             tests built (log: $out/build.log); 1 on failure
#   opt30b_16g NAME FLAGS...  OPT-30B under a 16 GiB GPU cap, prompt 512,
#                             gen 32, 8 tokens run and the rest projected
#                             (FlexGen's --cut-gen-len), with device timing,
#                             appended to $out/bench.log
#   gpu_tests SECONDS TESTS...  make check of those tests (with
#                             FGCORE_TEST_BACKEND as exported), appended to
#                             $out/tests.log, their logs to
#                             $out/test_logs.txt; prints the results and
#                             the failed checks
#   sweep_bin NAME            the path of bench/NAME_sweep.cu's program:
#                             _gpudata/NAME_sweep when carried (built
#                             elsewhere with the same CUDA), else built here
#   opt175b_int4              issue 19's OPT-175B case (4-bit weights and
#                             cache, all on the GPU, 32 x 1, fp8 prefill),
#                             log $out/bench_opt175b_int4.log
#   $T4_POLICY, $CC_POLICY    FlexGen's two T4 policies for OPT-30B: 48 x 1
#                             with CPU attention; 64 x 2 with a 4-bit cache
# .devdeps: ../shared/tools/gpu-deps libpcre2-dev libpcre2-8-0 libpcre2-16-0
#   libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
. .devdeps/env.sh
export FGCORE_TESTDATA=$PWD/_gpudata/testdata
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
step() { echo "== $*"; }
stamp() { step "$* ($(date +%T))"; }
T4_POLICY="--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute"
CC_POLICY="--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --compress-cache"
gpu_tests() { # seconds tests...
	secs=$1
	shift
	timeout "$secs" make check TESTS="$*" >> "$out/tests.log" 2>&1
	for t in "$@"; do
		grep -E "^(PASS|FAIL|SKIP|ERROR): $t\$" "$out/tests.log" | tail -1
		{ echo "#### $t" && cat "$t.log"; } >> "$out/test_logs.txt" 2>&1
		grep -hE ":[EF]:" "$t.log" | head -12
	done
}
sweep_bin() { # name
	if [ -x "_gpudata/$1_sweep" ]; then
		echo "_gpudata/$1_sweep"
	elif nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Iinclude \
		"bench/$1_sweep.cu" -o "./$1_sweep" >&2; then
		echo "./$1_sweep"
	fi
}
opt175b_int4() {
	stamp "OPT-175B int4 weights and cache, 32 x 1"
	timeout 200 ./fgcore -c conf/h200_opt175b_int4.ini -o compute.fp8_prefill=true \
		-o compute.scratch=512M -o compute.fp8_scratch=1G -o tier.compute.reserve=6G bench \
		> "$out/bench_opt175b_int4.log" 2>&1
	grep -E "throughput|latency|launched|rror" "$out/bench_opt175b_int4.log"
}
h200_build() {
	if ! { autoreconf -fi && ./configure --with-cuda && make -j16 && make -j16 check TESTS=; } \
		> "$out/build.log" 2>&1; then
		tail -40 "$out/build.log"
		return 1
	fi
}
opt30b_16g() { # name flags...
	step "$1"
	shift
	timeout 150 ./fgcore -o compute.plugin=cublas -o tier.compute.plugin=cuda_mem \
		-o tier.host.plugin=pinned_host -o tier.compute.capacity=16G \
		-o tier.host.capacity=110G -o bench.device_timing=true --model facebook/opt-30b \
		--path _DUMMY_ --prompt-len 512 --gen-len 32 --cut-gen-len 8 "$@" bench \
		>> "$out/bench.log" 2>&1
	tail -8 "$out/bench.log" | grep -E "latency|throughput|time"
}
