#!/bin/sh
# bench/h200_decode.sh - the tensor-core 4-bit-cache decode attention in the
# backend (k_decode_mma.cuh) on the H200 (issue 19), one call of about 7
# minutes: the build; the op tests (every 4-bit decode case against the
# double-precision reference), the conformance suite and the compressed-
# cache engine tests on cublas; bench/decode_sweep.cu (carried prebuilt as
# _gpudata/decode_sweep, else built here); OPT-175B with 4-bit weights and
# cache, all on the GPU (the case, fp8 prefill, graphs on).  Run
# from the project root with .devdeps and _gpudata/testdata carried along
# (bench/h200_env.sh).  Logs to $OUT.
. bench/h200_env.sh
stamp build
h200_build || exit 1
stamp "tests on cublas"
export FGCORE_TEST_BACKEND=cublas
gpu_tests 200 tests/test_cublas tests/test_compute_conformance tests/test_compression
unset FGCORE_TEST_BACKEND
b=$(sweep_bin decode)
stamp "decode sweep"
timeout 150 "$b" > "$out/decode_sweep.txt" 2>&1
echo "decode sweep: rc $?"
sed -n '/^## GB/,$p' "$out/decode_sweep.txt"
opt175b_int4
stamp done
