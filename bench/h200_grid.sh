#!/bin/sh
# bench/h200_grid.sh - issue 14's last proof on the H200: the optimizer's
# pick for OPT-30B under a 16 GiB GPU cap (prompt 512, gen 32) against a
# hand-written grid of eight policies under the same cap, all measured with
# bench (8 tokens run, the rest projected as FlexGen does).  About 90 s a
# policy: `sh bench/h200_grid.sh pick 1 2 3` runs those (pick: the output
# of `optimize --hardware h200 --gpu-mem 16G`), any numbers of 1-8 in one
# call that fits.  Policies 1 and 2 are FlexGen's two T4 policies, which
# bench/h200_predict.sh 2 measures too (and the pick with $PICK).  Logs and
# the table go to $OUT.  Builds first unless ./fgcore exists.
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
export FGCORE_HARDWARE_PATH=$PWD/conf/hardware
if [ ! -x ./fgcore ] && ! { autoreconf -fi && ./configure --with-cuda && make -j16; } > "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host
     -o tier.disk.plugin=io_uring_nvme -o tier.disk.dir=/var/tmp -o tier.compute.capacity=16G"
run() { # name flags...
	name=$1
	shift
	# shellcheck disable=SC2086
	timeout 180 ./fgcore $gpu --model facebook/opt-30b --path _DUMMY_ --prompt-len 512 --gen-len 32 \
		--cut-gen-len 8 "$@" bench > "$out/grid_$(echo "$name" | tr -c 'A-Za-z0-9\n' _).log" 2>&1
	printf '%-52s %s\n' "$name" "$(grep -o 'total throughput: [0-9.]* token/s' \
		"$out/grid_$(echo "$name" | tr -c 'A-Za-z0-9\n' _).log" || echo failed)" | tee -a "$out/grid.txt"
}
for part in "$@"; do
	case $part in
	pick)
		./fgcore --model facebook/opt-30b --path _DUMMY_ --prompt-len 512 --gen-len 32 optimize \
			--hardware h200 --gpu-mem 16G --output "$out/pick.ini" --top 3 > "$out/optimize.txt" 2>&1
		tail -8 "$out/optimize.txt"
		timeout 240 ./fgcore -c "$out/pick.ini" -o tier.disk.dir=/var/tmp --cut-gen-len 8 bench \
			> "$out/grid_pick.log" 2>&1
		printf '%-52s %s\n' "optimizer's pick ($(grep '^percent' "$out/pick.ini"))" \
			"$(grep -o 'total throughput: [0-9.]* token/s' "$out/grid_pick.log" || echo failed)" |
			tee -a "$out/grid.txt" ;;
	1) run "1: 20 80 0 100 0 100, 48x1, CPU attention" --percent 20 80 0 100 0 100 \
		--gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute ;;
	2) run "2: 0 100 0 100 0 100, 64x2, int4 cache" --percent 0 100 0 100 0 100 \
		--gpu-batch-size 64 --num-gpu-batches 2 --compress-cache ;;
	# (16 x 2 needs 25.27 GiB under this cap now: the largest that fits is 9)
	3) run "3: 0 100 100 0 100 0, 8x2" --percent 0 100 100 0 100 0 --gpu-batch-size 8 \
		--num-gpu-batches 2 ;;
	4) run "4: 10 90 0 100 100 0, 64x4, int4 weights + cache" --percent 10 90 0 100 100 0 \
		--gpu-batch-size 64 --num-gpu-batches 4 --compress-weight --compress-cache ;;
	# (128 x 4 needs 100.44 GiB of host tier beside the weights: 2026-12-02)
	5) run "5: 0 100 0 100 100 0, 64x4, int4 cache" --percent 0 100 0 100 100 0 \
		--gpu-batch-size 64 --num-gpu-batches 4 --compress-cache ;;
	6) run "6: 20 80 0 100 100 0, 96x2, int4 weights + cache" --percent 20 80 0 100 100 0 \
		--gpu-batch-size 96 --num-gpu-batches 2 --compress-weight --compress-cache ;;
	# (96 x 3 with host attention over a 4-bit cache runs past the 180 s limit:
	# 3.5 GB/s of packed cache is about 17 s a step)
	7) run "7: 15 85 0 100 100 0, 32x16, int4 weights + cache" --percent 15 85 0 100 100 0 \
		--gpu-batch-size 32 --num-gpu-batches 16 --compress-weight --compress-cache ;;
	# (128 x 3 needs 15.53 GiB of the 9.51 the resident weights leave: 2026-12-02)
	8) run "8: 30 70 0 100 100 0, 64x3, int4 weights + cache" --percent 30 70 0 100 100 0 \
		--gpu-batch-size 64 --num-gpu-batches 3 --compress-weight --compress-cache ;;
	*) echo "h200_grid.sh: no policy '$part' (pick, 1-8)" ;;
	esac
done
cat "$out/grid.txt"
