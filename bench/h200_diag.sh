#!/bin/sh
# bench/h200_diag.sh - where the cost model's two misses on the H200 come
# from (issue 14), each beside the case it explains:
#   t4    FlexGen's T4 policy for OPT-30B (48 x 1, host attention) with every
#         weight on the GPU: the host attention chain without weight loads
#         beside it (the case itself: bench/h200_predict.sh 2);
#   disk  OPT-6.7B with 20 % of its weights on disk (64 x 1) at disk request
#         sizes 256K, 8M and 32M: the engine's read rate against its pattern,
#         and (bench's "disk reads" line) whether the disk is slow while busy
#         or idle between reads; first the profile's disk figures over 8 GiB
#         (does the disk slow down after its first gigabyte?).  DISK_RS
#         overrides the request sizes ("256K 8M 32M").
# Logs and a summary to $OUT; builds first unless ./fgcore exists.
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
if [ ! -x ./fgcore ] && ! { autoreconf -fi && ./configure --with-cuda && make -j16; } > "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host
     -o tier.disk.plugin=io_uring_nvme -o tier.disk.dir=/var/tmp"
len="--prompt-len 512 --gen-len 32 --cut-gen-len 8"
run() { # name model flags...
	name=$1 model=$2
	shift 2
	log="$out/diag_$(echo "$name" | tr -c 'A-Za-z0-9\n' _).log"
	# (the block devices' counters around the run: request sizes and time in flight as the kernel saw them)
	cat /proc/diskstats > "$log.diskstats0"
	# shellcheck disable=SC2086
	timeout 150 ./fgcore $gpu "$@" --model "facebook/$model" --path _DUMMY_ $len bench > "$log" 2>&1
	cat /proc/diskstats > "$log.diskstats1"
	printf '%-50s %s | %s %s\n' "$name" "$(grep -o 'decode latency: [0-9.]* s' "$log" || echo failed)" \
		"$(grep '^time:' "$log")" "$(grep '^disk reads:' "$log")" | tee -a "$out/diag.txt"
}
for what in "$@"; do
	case $what in
	t4) run "T4 policy, weights all on GPU" opt-30b --percent 100 0 0 100 0 100 \
		--gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute ;;
	disk) # the profile's disk figures over 8 GiB, as much as the 8-token run
		# reads: does the disk slow down after its first gigabyte?
		# shellcheck disable=SC2086
		timeout 120 ./fgcore $gpu --percent 80 0 100 0 100 0 --gpu-batch-size 64 \
			--model facebook/opt-6.7b --path _DUMMY_ $len profile --quick --disk-size 8G \
			> "$out/diag_disk_profile_8G.log" 2>&1
		grep "disk tier" "$out/diag_disk_profile_8G.log" | tee -a "$out/diag.txt"
		for rs in ${DISK_RS:-256K 8M 32M}; do
		run "6.7B 20% disk, request_size $rs" opt-6.7b -o tier.disk.request_size=$rs \
			--percent 80 0 100 0 100 0 --gpu-batch-size 64 --num-gpu-batches 1
	done ;;
	*) echo "h200_diag.sh: no diagnostic '$what' (t4, disk)" ;;
	esac
done
