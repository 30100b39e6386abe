#!/bin/sh
# bench/h200_step_kernels.sh - issue 19, third session, call 2: both
# block-shape sweeps (carried as _gpudata/prefill_sweep and _gpudata/q4_sweep),
# test_cublas, and every kernel's time in a 6.7B decode step (ncu
# gpu__time_duration over fgcore -c conf/h200_opt6.7b.ini, gen 4).  Logs to $OUT.
. bench/h200_env.sh
stamp start
(h200_build; echo "build rc=$?"; make bench > "$out/bench_build.log" 2>&1; echo "bench rc=$?") > "$out/bgbuild.txt" 2>&1 &
stamp "prefill sweep"
timeout 200 ./_gpudata/prefill_sweep > "$out/prefill_sweep.txt" 2>&1; echo "prefill sweep rc=$?"
stamp "q4 sweep"
timeout 240 ./_gpudata/q4_sweep > "$out/q4_sweep.txt" 2>&1; echo "q4 sweep rc=$?"
wait
cat "$out/bgbuild.txt"
stamp "test_cublas"
gpu_tests 200 tests/test_cublas
stamp "ncu decode q4"
timeout 90 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --kernel-name-base mangled -k regex:cb_decode_kernelILi1ELi1E --launch-skip 3 --launch-count 1 bench/gpu_ops_bench decode > "$out/ncu_decode_q4.txt" 2>&1
stamp "ncu decode step kernel times"
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base ./fgcore -c conf/h200_opt6.7b.ini -o bench.gen_len=4 bench > "$out/ncu_step.csv" 2>&1
echo "ncu step rc=$?"
tail -30 "$out/prefill_sweep.txt"; grep -iE "wrong|error" "$out/prefill_sweep.txt" | head
cat "$out/q4_sweep.txt"
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy|No Eligible|Warp Cycles Per Issued|L2 Cache Throughput|highest-utilized|Waves Per SM|Block Limit" "$out/ncu_decode_q4.txt" | head -20
cd "$out" && tar czf all.tgz *.txt *.log *.csv 2>/dev/null; ls
