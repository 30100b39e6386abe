#!/bin/sh
# bench/h200_batch.sh - run-batch at scale on the H200 test machine: 10 000
# requests of mixed prompt lengths (8-512 tokens, max_tokens 8) on OPT-6.7B
# all on GPU (conf/h200_opt6.7b.ini, batch 256), with length buckets and in
# input order (bench/batch_bench.sh): tokens/s and padding waste.  Logs go to
# $OUT; about 6 minutes (build included).
#   run there with .devdeps (../shared/tools/gpu-deps libpcre2-dev libpcre2-8-0
#   libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2);
#   N (default 10000) sets the number of requests.
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
. .devdeps/env.sh
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
echo "== build"
# (built already when an earlier script of the same lease built the tree)
if [ ! -x ./fgcore ] && ! { autoreconf -fi && ./configure --with-cuda && make -j16; } > "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
echo "== run-batch, ${N:-10000} requests, OPT-6.7B all on GPU, 256 x 1"
FGCORE=$PWD/fgcore OUT=$out/batch timeout 420 sh bench/batch_bench.sh "${N:-10000}" -- \
	-c conf/h200_opt6.7b.ini 2>&1 | tee "$out/batch.log"
rm -f "$out"/batch/*.jsonl
