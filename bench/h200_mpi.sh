#!/bin/sh
# bench/h200_mpi.sh - pipeline stages on the H200 test machine (issue 13):
# build with CUDA, MPI and NCCL; 2 ranks sharing the one GPU, each a stage on
# cublas, must give the one-process tokens (OPT and Llama test checkpoints);
# then OPT-30B (dummy weights) over 2 stages on the one GPU beside the
# one-process figure.  NCCL refuses two ranks of one communicator on one GPU,
# so the nccl transport is tried and its answer recorded; the figures use mpi
# (activations staged through host memory).  Logs go to $OUT; at most ~8 min.
#   run there with .devdeps (../shared/tools/gpu-deps libpcre2-dev libpcre2-8-0
#   libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2) and
#   the test data copied to _gpudata/testdata carried along.
set -u
out=${OUT:-/tmp/fgcore-out}
mkdir -p "$out"
. .devdeps/env.sh
export FGCORE_TESTDATA=$PWD/_gpudata/testdata
export FGCORE_PLUGIN_PATH=$PWD/plugins/storage/.libs:$PWD/plugins/compute/.libs:$PWD/plugins/codec/.libs:$PWD/plugins/transport/.libs
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
mpi="mpirun --oversubscribe -x FGCORE_PLUGIN_PATH -x LD_LIBRARY_PATH"
[ "$(id -u)" = 0 ] && mpi="$mpi --allow-run-as-root"
step() { echo "== $*"; }
step build
# (built already when an earlier script of the same lease built the tree)
if [ ! -x ./fgcore ] && ! { autoreconf -fi && ./configure --with-cuda && make -j16; } > "$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	exit 1
fi
grep -E "MPI|NCCL" "$out/build.log" | tail -2
ls plugins/transport/.libs/*.so
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gpu="-o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o distributed.timeout=120"

step "tokens: 1 process vs 2 stages sharing the GPU (cublas, mpi transport)"
printf '%s\n' "def main():" "import os" "for i in range(10):" "class Foo(object):" "return x +" > "$out/prompts.txt"
for m in opt/opt-py-128x4 llama/llama-py-128x4; do
	a="$gpu -o model.path=$FGCORE_TESTDATA/$m -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=3"
	g="generate --prompt-file $out/prompts.txt --max-new-tokens 24"
	timeout 60 ./fgcore $a $g > "$out/one_${m#*/}.txt" 2>&1
	timeout 90 $mpi -np 2 ./fgcore -v $a -o tier.compute.capacity=8G -o tier.compute.pool=8G $g > "$out/two_${m#*/}.txt" 2>"$out/two_${m#*/}.err"
	if cmp -s "$out/one_${m#*/}.txt" "$out/two_${m#*/}.txt"; then echo "$m: 2 stages == 1 process"
	else echo "$m: DIFFERENT"; diff "$out/one_${m#*/}.txt" "$out/two_${m#*/}.txt" | head -8; tail -5 "$out/two_${m#*/}.err"; fi
	grep "pipeline stage" "$out/two_${m#*/}.err" | head -4
done

step "OPT-30B, dummy weights, all on the GPU: 1 process vs 2 stages on the one GPU"
b="-c conf/h200_opt30b.ini -o bench.gen_len=32 -o bench.warmup=false"
timeout 120 ./fgcore $b -o policy.gpu_batch_size=48 -o policy.num_gpu_batches=2 bench > "$out/opt30b_one.log" 2>&1
grep -E "throughput" "$out/opt30b_one.log"
for mb in 2; do
	timeout 150 $mpi -np 2 ./fgcore -v $b -o policy.gpu_batch_size=48 -o policy.num_gpu_batches=2 \
		-o tier.compute.capacity=66G -o tier.compute.pool=66G -o distributed.micro_batches=$mb bench \
		> "$out/opt30b_two.log" 2>&1
	echo "2 stages, micro_batches $mb: exit $?"
	grep -E "throughput|pipeline stage" "$out/opt30b_two.log"
done

step "nccl transport, 2 ranks on one GPU (NCCL is expected to refuse it)"
m=opt/opt-py-128x4
a="$gpu -o model.path=$FGCORE_TESTDATA/$m -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=3"
timeout 60 $mpi -np 2 ./fgcore $a -o tier.compute.capacity=8G -o tier.compute.pool=8G -o distributed.transport=nccl \
	generate --prompt-file "$out/prompts.txt" --max-new-tokens 24 > "$out/nccl.txt" 2>"$out/nccl.err"
echo "exit $?"; grep -v '^-\|^$' "$out/nccl.err" | head -4
if cmp -s "$out/one_opt-py-128x4.txt" "$out/nccl.txt"; then echo "nccl: 2 stages == 1 process"; fi
