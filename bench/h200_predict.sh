#!/bin/sh
# bench/h200_predict.sh - the cost model against the H200 (issue 14), in
# parts that each fit one call:
#   sh bench/h200_predict.sh profile   a fresh `fgcore profile` at OPT-30B's
#       shapes (GPU batch 48, disk included) into $OUT/h200.ini, the
#       replacement for conf/hardware/h200.ini;
#   sh bench/h200_predict.sh 1 | 2 | pick   the issue's eight policies, three,
#       four and one: the measured throughput beside the prediction from a profile
#       at that case's own shapes (model, GPU batch rows, prompt and
#       generation lengths; the disk case's disk read as it reads a layer),
#       with the disk figures of _gpudata/h200.ini (the profile part's output,
#       carried along; profiled again when absent).  Part pick measures the
#       optimizer's pick for OPT-30B under 16 GiB: its flags in $PICK (from
#       `fgcore optimize --hardware h200 --gpu-mem 16G` with the new profile);
#   sh bench/h200_predict.sh disk   the disk case alone, $DISK_REPEAT times
#       (3), each with its own profile just before it.
# Short runs (--cut-gen-len: 8 tokens run, the rest projected); a case that
# would start past 7 minutes is skipped and says so.  Run there like
# bench/h200_run.sh (with .devdeps carried along); it builds first unless
# ./fgcore is already built.
set -u
part=${1:-profile}
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
start=$(date +%s)
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs
if [ ! -x ./fgcore ]; then
	echo "== build"
	if ! { autoreconf -fi && ./configure --with-cuda && make -j16; } > "$out/build.log" 2>&1; then
		tail -40 "$out/build.log"
		exit 1
	fi
fi
fg=./fgcore
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host
     -o tier.disk.plugin=io_uring_nvme -o tier.disk.dir=/var/tmp"
len="--prompt-len 512 --gen-len 32 --cut-gen-len 8"
cap16="-o tier.compute.capacity=16G -o tier.host.capacity=110G"

if [ "$part" = profile ] || [ ! -f _gpudata/h200.ini ]; then
	echo "== profile (OPT-30B shapes, GPU batch 48, disk included) -> $out/h200.ini"
	# shellcheck disable=SC2086
	timeout 150 $fg $gpu -o model.path=dummy:opt-30b -o policy.gpu_batch_size=48 \
		-o bench.prompt_len=512 -o bench.gen_len=32 profile --output "$out/h200.ini" \
		> "$out/profile.log" 2>&1 || { tail -20 "$out/profile.log"; exit 1; }
	cat "$out/profile.log"
else
	cp _gpudata/h200.ini "$out/h200.ini"
fi
[ "$part" = profile ] && exit 0
dtoc=$(sed -n 's/^dtoc_bdw = //p' "$out/h200.ini")
ctod=$(sed -n 's/^ctod_bdw = //p' "$out/h200.ini")
disk_mem=$(sed -n 's/^disk_mem = //p' "$out/h200.ini")

printf '%-44s %10s %10s %7s %7s %7s %8s\n' case "measured" predicted "m/p" "m/p pre" "m/p dec" seconds \
	> "$out/table.txt"
# case NAME LIMIT_S MODEL DISK FLAGS...: profile at the case's shapes (DISK
# "disk": its disk too, read as the case reads it; "-": the disk figures of
# $out/h200.ini), then bench --predict with it.
case_run() {
	name=$1 limit=$2 model=$3 disk=$4
	shift 4
	now=$(date +%s)
	if [ $((now - start)) -gt 440 ]; then
		printf '%-44s skipped: the 10-minute call would run out\n' "$name" >> "$out/table.txt"
		return
	fi
	safe=$(echo "$name" | tr -c 'A-Za-z0-9.\n' '_')
	echo "== $name"
	# shellcheck disable=SC2086
	nodisk=--no-disk
	[ "$disk" = disk ] && nodisk=
	# shellcheck disable=SC2086
	if ! timeout 90 $fg $gpu "$@" --model "facebook/$model" --path _DUMMY_ $len profile $nodisk \
		--min-time 0.1 --output "$out/hw_$safe.ini" > "$out/profile_$safe.log" 2>&1; then
		printf '%-44s profile failed: %s\n' "$name" "$(tail -1 "$out/profile_$safe.log")" >> "$out/table.txt"
		return
	fi
	t0=$(date +%s)
	# shellcheck disable=SC2086
	[ "$disk" = disk ] || sed -i -e "s/^dtoc_bdw = .*/dtoc_bdw = $dtoc/" -e "s/^ctod_bdw = .*/ctod_bdw = $ctod/" \
		-e "s/^disk_mem = .*/disk_mem = $disk_mem/" "$out/hw_$safe.ini"
	timeout "$limit" $fg $gpu "$@" bench --model "facebook/$model" --path _DUMMY_ $len \
		--predict --hardware "$out/hw_$safe.ini" > "$out/bench_$safe.log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - t0 ))
	if [ $rc -ne 0 ]; then
		printf '%-44s failed (exit %d after %d s): %s\n' "$name" $rc $secs \
			"$(tail -1 "$out/bench_$safe.log")" >> "$out/table.txt"
		return
	fi
	awk -v name="$name" -v secs="$secs" '
		/^predicted prefill throughput/ { pre = $NF; sub(/\)/, "", pre) }
		/^predicted decode throughput/ { dec = $NF; sub(/\)/, "", dec) }
		/^predicted total throughput/ { p = $4; m = $7; tot = $NF; sub(/\)/, "", tot) }
		END { printf "%-44s %10s %10s %7s %7s %7s %8s\n", name, m, p, tot, pre, dec, secs }
	' "$out/bench_$safe.log" >> "$out/table.txt"
	tail -4 "$out/bench_$safe.log"
}

if [ "$part" = 1 ]; then
	case_run "OPT-6.7B all GPU 256x1" 90 opt-6.7b - \
		--percent 100 0 100 0 100 0 --gpu-batch-size 256 --num-gpu-batches 1
	case_run "OPT-30B all GPU 96x1" 120 opt-30b - \
		--percent 100 0 100 0 100 0 --gpu-batch-size 96 --num-gpu-batches 1
	case_run "OPT-30B weights on host 48x3" 120 opt-30b - \
		--percent 0 100 100 0 100 0 --gpu-batch-size 48 --num-gpu-batches 3
elif [ "$part" = disk ]; then
	# the disk case alone, DISK_REPEAT times (3), each run predicted from a
	# profile of its own taken just before it: the virtio disk's rate moves
	# by half from one minute to the next (bench/RESULTS.md, 2026-12-02)
	i=1
	while [ "$i" -le "${DISK_REPEAT:-3}" ]; do
		case_run "OPT-6.7B 20% of weights on disk 64x1 #$i" 90 opt-6.7b disk \
			--percent 80 0 100 0 100 0 --gpu-batch-size 64 --num-gpu-batches 1
		i=$((i + 1))
	done
elif [ "$part" = pick ]; then
	# the whole host memory, as optimize planned it (its 117 GB of host
	# tier do not fit the 110G cap of the other cases)
	# shellcheck disable=SC2086
	case_run "OPT-30B optimizer's pick 16G" 240 opt-30b - -o tier.compute.capacity=16G ${PICK:?}
else
	case_run "OPT-30B FlexGen T4 20 80 0 100 0 100 48x1 cpu" 120 opt-30b - $cap16 \
		--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 1 --cpu-cache-compute
	case_run "OPT-30B 0 100 0 100 0 100 64x2 int4 cache" 120 opt-30b - $cap16 \
		--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --compress-cache
	# weights on disk: a fifth of OPT-6.7B's (2.7 GB a step at the disk's rate)
	case_run "OPT-6.7B 20% of weights on disk 64x1" 90 opt-6.7b disk \
		--percent 80 0 100 0 100 0 --gpu-batch-size 64 --num-gpu-batches 1
	# last: loading and encoding 175 B dummy values takes minutes of host time
	case_run "OPT-175B int4 all GPU 32x1" 200 opt-175b - \
		--percent 100 0 100 0 100 0 --gpu-batch-size 32 --num-gpu-batches 1 \
		--compress-weight --compress-cache
fi
echo "== measured / predicted total throughput (token/s), $(( $(date +%s) - start )) s in all"
cat "$out/table.txt"
