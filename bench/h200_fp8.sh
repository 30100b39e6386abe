#!/bin/sh
# bench/h200_fp8.sh - the cublas backend's fp8 prefill products on the H200
# (issue 19), in one call of about 7 minutes: the op tests (fp8 products
# against the host's exact mirror of the quantization), the fp16 and fp8
# product rates at prefill shapes, the quality cost (held-out perplexity of
# the two trained checkpoints with every product in fp8, against fp16 and
# Hugging Face), and the all-GPU cases of the issue with fp8 prefill:
#   sh bench/h200_fp8.sh [175b]   (175b adds OPT-175B int4, about 2 minutes)
# and OPT-6.7B's fp8 run predicted from a profile taken with fp8 on.
# Run from the project root with .devdeps and _gpudata/testdata carried
# along (bench/h200_env.sh).  Logs to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
stamp "op tests"
gpu_tests 200 tests/test_cublas
grep -h "fp8" tests/test_cublas.log | head -20
stamp "product rates, fp16 and fp8 (bench/gpu_ops_bench fp8)"
make bench > "$out/ops_build.log" 2>&1 && timeout 90 bench/gpu_ops_bench fp8 > "$out/ops.txt" 2>&1
cat "$out/ops.txt" | head -40

stamp "held-out perplexity, fp16 and fp8 products (Hugging Face: opt 8.7438, llama 6.1036)"
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host"
fp8="-o compute.fp8_prefill=true -o compute.fp8_min_rows=1"
for m in opt/opt-py-128x4 llama/llama-py-128x4; do
	python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['input_ids']: print(json.dumps(r))
" "$FGCORE_TESTDATA/$m/heldout.json" > "$out/ids.jsonl"
	for mode in fp16 fp8; do
		flags=
		[ $mode = fp8 ] && flags=$fp8
		# shellcheck disable=SC2086
		printf '%-24s %-5s %s\n' "$m" $mode "$(./fgcore $gpu $flags -o model.path="$FGCORE_TESTDATA/$m" \
			-o policy.gpu_batch_size=16 score --ids --json "$out/ids.jsonl" 2>&1 | tail -n 1)"
	done
done | tee "$out/perplexity.txt"

dt="-o bench.device_timing=true"
case_fp8() { # name config seconds "fp8 flags" modes...
	name=$1 conf=$2 secs=$3 more=$4
	shift 4
	for mode in "$@"; do
		flags=
		[ $mode = fp8 ] && flags="-o compute.fp8_prefill=true $more"
		log="$out/bench_$(basename "$conf" .ini)_$mode.log"
		stamp "$name, $mode"
		# shellcheck disable=SC2086
		timeout "$secs" ./fgcore -c "$conf" $dt $flags bench > "$log" 2>&1
		grep -E "throughput|^time|fp8" "$log"
	done
}
# (fp16: the same build's control; OPT-30B's and OPT-175B's fp16 figures are
# in bench/RESULTS.md, the engine's fp16 path unchanged)
case_fp8 "OPT-6.7B all on GPU, 256 x 1" conf/h200_opt6.7b.ini 100 "" fp16 fp8
case_fp8 "OPT-30B all on GPU, 96 x 1" conf/h200_opt30b.ini 150 "" fp8
# 4-bit weights are dequantized a `scratch` tile at a time: large tiles, and
# x's 16 384 rows in one fp8 band (fc2's 49 152 columns: 805 MB)
[ "${1:-}" = 175b ] && case_fp8 "OPT-175B int4 all on GPU, 32 x 1" conf/h200_opt175b_int4.ini 240 \
	"-o compute.scratch=512M -o compute.fp8_scratch=1G -o tier.compute.reserve=6G" fp8

# the cost model with fp8 products: a profile at the case's shapes with
# fp8_prefill on (its prefill products then run fp8), and the prediction
stamp "OPT-6.7B fp8: profile and bench --predict"
timeout 120 ./fgcore -c conf/h200_opt6.7b.ini -o compute.fp8_prefill=true profile --no-disk \
	--min-time 0.1 --output "$out/hw_6.7b_fp8.ini" > "$out/profile_6.7b_fp8.log" 2>&1
grep -E "matrix product|prefill" "$out/profile_6.7b_fp8.log"
timeout 100 ./fgcore -c conf/h200_opt6.7b.ini -o compute.fp8_prefill=true bench --predict \
	--hardware "$out/hw_6.7b_fp8.ini" > "$out/predict_6.7b_fp8.log" 2>&1
grep -E "throughput|predicted" "$out/predict_6.7b_fp8.log"
stamp done
