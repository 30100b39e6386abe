#!/bin/sh
# bench/h200_prefill.sh - where the all-GPU prefill loses against its priced
# products (issues 14 and 19): OPT-30B and OPT-6.7B all on GPU at several GPU
# batch sizes (prompt 512, 8 tokens run), the residual stream in fp32 and in
# fp16, then the optimizer's pick under 16 GiB (from the fresh profile in
# _gpudata/h200.ini) measured against its prediction, and as many of the
# grid's first policies (bench/h200_grid.sh 1) as the call leaves time for.
# Logs go to $OUT; run there as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
start=$(date +%s)
stamp build
[ -x ./fgcore ] || h200_build || exit 1
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host"
pre() { # name model flags...
	name=$1 model=$2
	shift 2
	# shellcheck disable=SC2086
	timeout 120 ./fgcore $gpu "$@" bench --model "facebook/$model" --path _DUMMY_ --prompt-len 512 \
		--gen-len 32 --cut-gen-len 8 --percent 100 0 100 0 100 0 > "$out/pre.log" 2>&1
	printf '%-40s %s\n' "$name" "$(grep -E '^prefill latency' "$out/pre.log" || tail -1 "$out/pre.log")" |
		tee -a "$out/prefill.txt"
}
stamp "all-GPU prefill by batch"
pre "OPT-30B 16x1" opt-30b --gpu-batch-size 16 --num-gpu-batches 1
pre "OPT-30B 48x1" opt-30b --gpu-batch-size 48 --num-gpu-batches 1
pre "OPT-30B 96x1" opt-30b --gpu-batch-size 96 --num-gpu-batches 1
pre "OPT-30B 96x1 fp16 residual" opt-30b --gpu-batch-size 96 --num-gpu-batches 1 \
	-o compute.fp32_residual=false
pre "OPT-30B 16x6" opt-30b --gpu-batch-size 16 --num-gpu-batches 6
pre "OPT-6.7B 32x1" opt-6.7b --gpu-batch-size 32 --num-gpu-batches 1
pre "OPT-6.7B 256x1" opt-6.7b --gpu-batch-size 256 --num-gpu-batches 1
stamp "optimizer's pick under 16 GiB"
./fgcore --model facebook/opt-30b --path _DUMMY_ --prompt-len 512 --gen-len 32 optimize \
	--hardware _gpudata/h200.ini --gpu-mem 16G --output "$out/pick.ini" --top 3 > "$out/optimize.txt" 2>&1
tail -8 "$out/optimize.txt"
timeout 200 ./fgcore -c "$out/pick.ini" -o tier.disk.dir=/var/tmp --cut-gen-len 8 bench --predict \
	--hardware _gpudata/h200.ini > "$out/pick.log" 2>&1
grep -E "latency|throughput|predicted" "$out/pick.log"
stamp "grid, part 1, while time is left"
export FGCORE_HARDWARE_PATH=$PWD/conf/hardware
cap="-o tier.compute.capacity=16G -o tier.host.capacity=110G"
grid() { # name flags...
	name=$1
	shift
	[ $(( $(date +%s) - start )) -gt 440 ] && { echo "$name: skipped (time)"; return; }
	# shellcheck disable=SC2086
	timeout 120 ./fgcore $gpu $cap --model facebook/opt-30b --path _DUMMY_ --prompt-len 512 \
		--gen-len 32 --cut-gen-len 8 "$@" bench > "$out/grid.log" 2>&1
	printf '%-52s %s\n' "$name" "$(grep -o 'total throughput: [0-9.]* token/s' "$out/grid.log" ||
		tail -1 "$out/grid.log")" | tee -a "$out/grid.txt"
}
grid "3: 0 100 100 0 100 0, 16x2" --percent 0 100 100 0 100 0 --gpu-batch-size 16 \
	--num-gpu-batches 2
grid "4: 10 90 0 100 100 0, 64x4, int4 weights + cache" --percent 10 90 0 100 100 0 \
	--gpu-batch-size 64 --num-gpu-batches 4 --compress-weight --compress-cache
stamp done
