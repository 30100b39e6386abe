#!/bin/sh
# bench/h200_llama.sh - the Llama family on the H200 test machine.  Logs go
# to $OUT.  Run there with .devdeps and _gpudata/testdata carried along:
#   sh bench/h200_llama.sh tests   build, cublas op tests, the Llama references
#                                  and the policy matrix on cublas, Llama-3-8B
#                                  all on GPU at 256 and 512 x 1
#   sh bench/h200_llama.sh 70b     Llama-2-70B, 4-bit weights and cache (built tree)
# .devdeps: ../shared/tools/gpu-deps libpcre2-dev libpcre2-8-0 libpcre2-16-0
#   libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
. bench/h200_env.sh
bench() { # config, log, extra args
	echo "== $1 $3"
	timeout 400 ./fgcore -c "$1" $3 bench > "$out/$2" 2>&1
	grep -E "throughput|peak|time:|fgcore:" "$out/$2"
}
case "${1:-tests}" in
tests)
	step build
	h200_build || exit 1
	timeout 200 make check TESTS="tests/test_cublas" > "$out/tests.log" 2>&1
	FGCORE_TEST_BACKEND=cublas timeout 300 make check \
		TESTS="tests/test_golden tests/test_policy" >> "$out/tests.log" 2>&1
	grep -E "^(PASS|FAIL|SKIP|ERROR)" "$out/tests.log"
	for t in test_cublas test_golden test_policy; do
		echo "#### $t" && cat "tests/$t.log"
	done > "$out/test_logs.txt" 2>&1
	grep -hE ":[EF]:" tests/test_cublas.log tests/test_golden.log tests/test_policy.log | head -20
	bench conf/h200_llama3_8b.ini bench_8b_256.log ""
	bench conf/h200_llama3_8b.ini bench_8b_512.log "-o policy.gpu_batch_size=512"
	;;
70b)
	bench conf/h200_llama2_70b_int4.ini bench_70b.log ""
	;;
esac
