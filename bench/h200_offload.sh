#!/bin/sh
# bench/h200_offload.sh - the offloaded cases of the GPU issue on the H200:
# build with CUDA, the policy and 4-bit tests on cublas (host attention, the
# cache copied straight to the host), then FlexGen's two T4 policies for
# OPT-30B under a 16 GiB GPU cap with the device's time breakdown, with the
# fp32 residual stream and without it (their activations live on the host,
# so the stream's width is traffic).  Logs go to $OUT.
#   run there with .devdeps and _gpudata/testdata carried along (as h200_run.sh).
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
. .devdeps/env.sh
export FGCORE_TESTDATA=$PWD/_gpudata/testdata
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
step() { echo "== $*"; }
step build
if ! { autoreconf -fi && ./configure --with-cuda && make -j16 && make -j16 check TESTS=; } \
	> "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
step "policy and 4-bit tests on cublas"
FGCORE_TEST_BACKEND=cublas timeout 200 make check TESTS="tests/test_policy tests/test_compression" \
	> "$out/tests.log" 2>&1
grep -E "^(PASS|FAIL|SKIP|ERROR)" "$out/tests.log"
cat tests/test_policy.log tests/test_compression.log > "$out/test_logs.txt" 2>&1
grep -hE ":[EF]:|cpu attention|DIFFERENT" tests/test_policy.log tests/test_compression.log | head -12
cap="-o tier.compute.capacity=16G -o tier.host.capacity=110G"
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host"
run() { # name flags...
	name=$1
	shift
	step "$name"
	# shellcheck disable=SC2086
	timeout 150 ./fgcore $gpu $cap -o bench.device_timing=true --model facebook/opt-30b \
		--path _DUMMY_ --prompt-len 512 --gen-len 32 --cut-gen-len 8 "$@" bench \
		>> "$out/bench.log" 2>&1
	tail -8 "$out/bench.log" | grep -E "latency|throughput|time"
}
t4="--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute"
cc="--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --compress-cache"
# shellcheck disable=SC2086
run "OPT-30B 16 GiB, T4 policy 20 80 0 100 0 100, 48 x 1, CPU attention" $t4
# shellcheck disable=SC2086
run "the same, fp16 residual stream" $t4 -o compute.fp32_residual=false
# shellcheck disable=SC2086
run "OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache, fp16 residual stream" $cc \
	-o compute.fp32_residual=false
