#!/bin/sh
# bench/h200_run.sh - one full run on the H200 test machine: build with CUDA,
# the GPU op tests, the Hugging Face reference, scoring, policy and 4-bit
# tests on cublas, and two benchmarks (the first also with the fp16 residual
# stream) with the device's own time breakdown
# ([bench] device_timing): all on GPU, and weights on host (FlexGen's
# policies under a 16 GiB cap are bench/h200_predict.sh's).  Logs go to $OUT.
#   run there with .devdeps (../shared/tools/gpu-deps libpcre2-dev libpcre2-8-0
#   libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2) and
#   the test data copied to _gpudata/testdata carried along.
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
. .devdeps/env.sh
export FGCORE_TESTDATA=$PWD/_gpudata/testdata
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
step() { echo "== $*"; }
step build
if ! { autoreconf -fi && ./configure --with-cuda && make -j16 &&
       make -j16 check TESTS=; } > "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
step "GPU op tests"
timeout 240 make check TESTS="tests/test_cuda_mem tests/test_cublas tests/test_compute_conformance" \
	> "$out/tests.log" 2>&1
step "reference and policy tests on cublas"
FGCORE_TEST_BACKEND=cublas timeout 330 make check TESTS="tests/test_golden tests/test_scoring tests/test_policy tests/test_compression" \
	>> "$out/tests.log" 2>&1
grep -E "^(PASS|FAIL|SKIP|ERROR)" "$out/tests.log"
grep -h "perplexity\|max difference" tests/test_scoring.log
for t in test_cuda_mem test_cublas test_compute_conformance test_golden test_scoring test_policy \
	test_compression; do
	echo "#### $t" && cat "tests/$t.log"
done > "$out/test_logs.txt" 2>&1
grep -hE ":[EF]:" tests/test_cublas.log tests/test_golden.log tests/test_scoring.log tests/test_policy.log \
	tests/test_compression.log | head -20
grep -h "worst\|max |error|\|prefill logits" tests/test_cublas.log tests/test_golden.log | head -40
dt="-o bench.device_timing=true"
step "bench OPT-6.7B all on GPU, 256 x 1"
timeout 150 ./fgcore -c conf/h200_opt6.7b.ini $dt bench > "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
step "bench OPT-6.7B all on GPU, 256 x 1, fp16 residual stream (A/B)"
timeout 150 ./fgcore -c conf/h200_opt6.7b.ini -o compute.fp32_residual=false bench >> "$out/bench.log" 2>&1
tail -3 "$out/bench.log"
step "bench OPT-30B weights on host, 48 x 3"
timeout 200 ./fgcore -c conf/h200_opt30b_host.ini $dt bench >> "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
# FlexGen's two T4 policies for OPT-30B under a 16 GiB GPU cap (8 tokens run,
# the rest projected, as FlexGen's --cut-gen-len does)
cap="-o tier.compute.capacity=16G -o tier.host.capacity=110G"
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host"
step "bench OPT-30B 16 GiB, 20 80 0 100 0 100, 48 x 1, CPU attention"
# shellcheck disable=SC2086
timeout 150 ./fgcore $gpu $cap $dt --model facebook/opt-30b --path _DUMMY_ --percent 20 80 0 100 0 100 \
	--gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute --prompt-len 512 --gen-len 32 \
	--cut-gen-len 8 bench >> "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
step "bench OPT-30B 16 GiB, 0 100 0 100 0 100, 64 x 2, int4 cache"
# shellcheck disable=SC2086
timeout 150 ./fgcore $gpu $cap $dt --model facebook/opt-30b --path _DUMMY_ --percent 0 100 0 100 0 100 \
	--gpu-batch-size 64 --num-gpu-batches 2 --compress-cache --prompt-len 512 --gen-len 32 \
	--cut-gen-len 8 bench >> "$out/bench.log" 2>&1
tail -8 "$out/bench.log"
