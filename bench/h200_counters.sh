#!/bin/sh
# bench/h200_counters.sh - issue 19, third session, call 1: the fused 4-bit
# linear's block-shape sweep (bench/q4_sweep.cu, built here with nvcc and carried
# as _gpudata/q4_sweep), Nsight Compute on the shipped kernel at OPT-175B fc1
# (m = 32, 1, 64), and OPT-6.7B decode at batch 1 and 8.  Logs to $OUT.
. bench/h200_env.sh
stamp start
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
(h200_build; echo "build rc=$?"; make bench > "$out/bench_build.log" 2>&1; echo "bench rc=$?") > "$out/bgbuild.txt" 2>&1 &
Q=./_gpudata/q4_sweep
$Q one 1 4096 4096 0 || { nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Iinclude bench/q4_sweep.cu -o /tmp/q4s && Q=/tmp/q4s; }
stamp sweep
timeout 200 $Q > "$out/q4_sweep.txt" 2>&1; echo "sweep rc=$?"
stamp ncu
NCU="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats -k regex:cb_q4_mma --launch-skip 1 --launch-count 1"
for m in 32 1 64; do timeout 60 $NCU $Q one $m 49152 12288 0 > "$out/ncu_q4_m$m.txt" 2>&1; done
wait
cat "$out/bgbuild.txt"
stamp "ncu decode"
timeout 90 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats --kernel-name-base demangled -k "regex:cb_decode_kernel<1," --launch-skip 2 --launch-count 1 bench/gpu_ops_bench decode > "$out/ncu_decode_q4.txt" 2>&1
timeout 60 bench/gpu_ops_bench decode > "$out/ops_decode.txt" 2>&1
stamp "6.7B batch 1"
timeout 120 ./fgcore -c conf/h200_opt6.7b.ini -o policy.gpu_batch_size=1 -o bench.device_timing=true bench > "$out/b1.log" 2>&1
tail -15 "$out/b1.log"
timeout 120 ./fgcore -c conf/h200_opt6.7b.ini -o policy.gpu_batch_size=8 -o bench.device_timing=true bench > "$out/b8.log" 2>&1
tail -15 "$out/b8.log"
cat "$out/q4_sweep.txt"
grep -h "attention_decode" "$out/ops_decode.txt"
for f in "$out"/ncu_*.txt; do echo "#### $f"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Issue Slots Busy|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Warp Cycles Per Issued|L2 Cache Throughput|L1/TEX Cache Throughput|Executed Ipc A" "$f" | head -20; done
cd "$out" && tar czf all.tgz *.txt *.log 2>/dev/null; ls
