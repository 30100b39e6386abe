#!/bin/sh
# tests/test_run_batch.sh - run-batch as a durable job: killed (SIGKILL) at
# several points, out of disk space mid-job, its journal torn, its input
# changed, and then run again, it ends with the bytes of an uninterrupted run;
# the OpenAI batch output fields; memory bounded by the window whatever the
# input's length; sampling on one CPU, on all, and (FGCORE_TEST_BACKEND=cublas)
# on the GPU.  On the tiny OPT of $FGCORE_TESTDATA (fast on two cores).
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the jobs run on its tiny OPT)"
	exit 77
fi
model="$FGCORE_TESTDATA/opt/opt-tiny-64x2"
[ -f "$model/config.json" ] || { echo "FAIL: $model missing"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-batch.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG
unset FGCORE_TEST_RUN_BATCH_KILL FGCORE_TEST_RUN_BATCH_ENOSPC

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# run WANT_RC CMD...: with a time limit; stderr in $tmp/err
run() {
	want=$1
	shift
	timeout 120 "$@" 2>"$tmp/err"
	rc=$?
	printf 'ran: %s (exit %s)\n' "$*" "$rc" >&2
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(cat "$tmp/err")"
}

has_err() {
	grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

# A job of 30 lines: prompt lengths 2 to 13, max_tokens 1 to 6, greedy and
# sampled (seeded), plain and OpenAI Batch lines (one with two prompts), two
# bad lines.  Windows of 8 lines, GPU batches of 2: many batches and windows.
m="-o model.path=$model -o policy.gpu_batch_size=2"
rb="$fg $m run-batch --window 8"
i=0
: >"$tmp/in.jsonl"
while [ $i -lt 30 ]; do
	ids=2
	k=0
	while [ $k -lt $((1 + (i * 7) % 12)) ]; do
		ids="$ids, $((100 + i * 13 + k))"
		k=$((k + 1))
	done
	case $((i % 5)) in
	0) printf '{"custom_id": "e%d", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": [%s], "max_tokens": %d}}\n' \
		$i "$ids" $((1 + i % 6)) ;;
	1) printf '{"custom_id": "t%d", "prompt_token_ids": [%s], "max_tokens": %d, "temperature": 0.9, "seed": %d, "ignore_eos": true}\n' \
		$i "$ids" $((1 + i % 6)) $i ;;
	*) printf '{"custom_id": "g%d", "prompt_token_ids": [%s], "max_tokens": %d, "ignore_eos": true}\n' \
		$i "$ids" $((1 + i % 6)) ;;
	esac >>"$tmp/in.jsonl"
	i=$((i + 1))
done
printf '{"custom_id": "two", "method": "POST", "url": "/v1/completions", "body": {"prompt": [[2, 7, 8], [2, 9]], "max_tokens": 2}}\n' >>"$tmp/in.jsonl"
printf '{"custom_id": "bad", "url": "/v1/chat/completions", "body": {"prompt": "x"}}\n' >>"$tmp/in.jsonl"
printf '{not json\n' >>"$tmp/in.jsonl"
n=33

run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/ref.jsonl"
[ "$(wc -l <"$tmp/ref.jsonl")" -eq $n ] || fail "one output line per input line"
has_err "fgcore: run-batch: $n lines (0 kept from an earlier run, 2 failed) in "
has_err "tokens/s after the load; padding waste "
has_err "2 of $n lines failed"
[ ! -e "$tmp/ref.jsonl.journal" ] || fail "a finished job left its journal"
# OpenAI's batch output line, every field deterministic
sed -n 1p "$tmp/ref.jsonl" | grep -q '^{"id":"batch_req_1","custom_id":"e0","response":{"status_code":200,"request_id":"req_1","body":{"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":\[{"text":' ||
	fail "batch output line: $(sed -n 1p "$tmp/ref.jsonl")"
sed -n 1p "$tmp/ref.jsonl" | grep -q '"finish_reason":"length"}\],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}},"error":null}$' ||
	fail "batch output line's end: $(sed -n 1p "$tmp/ref.jsonl")"
sed -n 31p "$tmp/ref.jsonl" | grep -q '"custom_id":"two".*"index":0.*"index":1' || fail "two prompts, two choices: $(sed -n 31p "$tmp/ref.jsonl")"
sed -n 32p "$tmp/ref.jsonl" | grep -q '^{"id":"batch_req_32","custom_id":"bad","response":null,"error":{"code":"invalid_request","message":"\\"url\\" must be' ||
	fail "a failed batch line: $(sed -n 32p "$tmp/ref.jsonl")"
sed -n 33p "$tmp/ref.jsonl" | grep -q '"line":33,"error":"not valid JSON' || fail "bad JSON: $(sed -n 33p "$tmp/ref.jsonl")"
# the same in input order, in other windows, from stdin to stdout
run 1 $rb --input - --output - --order input --window 5 -q <"$tmp/in.jsonl" >"$tmp/o.jsonl"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "input order / other windows / stdout changed the results: $(diff "$tmp/o.jsonl" "$tmp/ref.jsonl" | head -5)"
[ "$(cat "$tmp/err")" = "fgcore: run-batch: 2 of $n lines failed; see their error records in stdout" ] ||
	fail "-q: more than the failures on stderr: $(cat "$tmp/err")"

# ---- kill -9 at several points, then the same command -------------------------
for point in 0 1 5 13 rename unlink; do
	rm -f "$tmp"/o.jsonl*
	FGCORE_TEST_RUN_BATCH_KILL=$point run 137 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
	if [ $point = unlink ]; then
		cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "kill at $point: the renamed output is not complete"
	else
		[ ! -e "$tmp/o.jsonl" ] || fail "kill at $point: an incomplete output was put in place"
	fi
	[ -e "$tmp/o.jsonl.journal" ] || fail "kill at $point: no journal"
	run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
	case $point in
	0) ! grep -q "earlier run are kept" "$tmp/err" || fail "kill at 0: something was kept: $(cat "$tmp/err")" ;;
	*) has_err "lines finished by an earlier run are kept" ;;
	esac
	cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "kill at $point then resumed: the output differs from an uninterrupted run's"
	[ ! -e "$tmp/o.jsonl.journal" ] && [ ! -e "$tmp/o.jsonl.tmp" ] || fail "kill at $point: the resumed job left its journal or OUT.tmp"
done
# killed twice, resumed twice
rm -f "$tmp"/o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=4 run 137 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
FGCORE_TEST_RUN_BATCH_KILL=6 run 137 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
k1=$(sed -n 's/.*: \([0-9]*\) lines finished by an earlier run are kept/\1/p' "$tmp/err")
run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
k2=$(sed -n 's/.*: \([0-9]*\) lines finished by an earlier run are kept/\1/p' "$tmp/err")
[ "${k1:-0}" -ge 4 ] && [ "${k2:-0}" -ge $((k1 + 6)) ] || fail "killed twice: kept $k1, then $k2"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "killed twice: the output differs"
# log-probabilities to the last bit: a resumed job's batches are the first
# run's.  Sixteen prompts of 12 ids in batches of 8: resumed with 3 lines
# kept, a batch of 5 would take cpu_blas's other product path (m = 60 is
# fused, 96 is not) and round differently.
i=0
: >"$tmp/lp.jsonl"
while [ $i -lt 16 ]; do
	printf '{"custom_id": "s%d", "prompt_token_ids": [2, %d, 11, 12, 13, 14, 15, 16, 17, 18, 19, %d], "max_tokens": 2, "echo": true, "logprobs": 3}\n' \
		$i $((30 + i)) $((60 + i)) >>"$tmp/lp.jsonl"
	i=$((i + 1))
done
rbl="$fg -o model.path=$model -o policy.gpu_batch_size=8 run-batch"
rm -f "$tmp"/o.jsonl*
run 0 $rbl --input "$tmp/lp.jsonl" --output "$tmp/lpref.jsonl"
FGCORE_TEST_RUN_BATCH_ENOSPC=3 run 1 $rbl --input "$tmp/lp.jsonl" --output "$tmp/o.jsonl"
run 0 $rbl --input "$tmp/lp.jsonl" --output "$tmp/o.jsonl"
has_err ": 3 lines finished by an earlier run are kept"
cmp -s "$tmp/o.jsonl" "$tmp/lpref.jsonl" ||
	fail "logprobs, resumed after ENOSPC: not the uninterrupted run's bytes: $(diff "$tmp/o.jsonl" "$tmp/lpref.jsonl" | head -c 600)"
# a stream output with a journal: the whole output again on resume
rm -f "$tmp"/j.journal
FGCORE_TEST_RUN_BATCH_KILL=5 run 137 $rb --input "$tmp/in.jsonl" --output - --journal "$tmp/j.journal" >/dev/null
run 1 $rb --input "$tmp/in.jsonl" --output - --journal "$tmp/j.journal" >"$tmp/o.jsonl"
has_err "lines finished by an earlier run are kept"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "stdout with a journal: the resumed output differs: $(diff "$tmp/o.jsonl" "$tmp/ref.jsonl" | head -5)"

# ---- a full disk mid-job: a clear error, and the job resumes once there is room --
rm -f "$tmp"/o.jsonl*
FGCORE_TEST_RUN_BATCH_ENOSPC=7 run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
has_err "fgcore: run-batch: writing the journal $tmp/o.jsonl.journal failed: No space left on device; nothing written to $tmp/o.jsonl; the 7 lines finished before are kept: make room and run the same command again to resume"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "ENOSPC: more than one line: $(cat "$tmp/err")"
[ ! -e "$tmp/o.jsonl" ] && [ ! -e "$tmp/o.jsonl.tmp" ] || fail "ENOSPC: an output was left"
run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
has_err ": 7 lines finished by an earlier run are kept"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "ENOSPC then resumed: the output differs"

# ---- a torn or foreign journal, a changed input ---------------------------------
rm -f "$tmp"/o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=5 run 137 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
printf '17 00000000deadbeef {"custom_id":"g1' >>"$tmp/o.jsonl.journal"
run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "a torn journal tail: the output differs"
FGCORE_TEST_RUN_BATCH_KILL=5 run 137 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
run 2 $fg $m run-batch --window 9 --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
has_err "is another job's: --window differs (\"8\" in the journal, \"9\" in this run)"
run 2 $fg $m -o generate.seed=5 run-batch --window 8 --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
has_err "is another job's: generate.seed differs (the default in the journal, \"5\" in this run)"
sed 's/"prompt_token_ids": \[2,/"prompt_token_ids": [2, 5,/; s/"prompt": \[2,/"prompt": [2, 5,/' "$tmp/in.jsonl" >"$tmp/in2.jsonl"
run 2 $rb --input "$tmp/in2.jsonl" --output "$tmp/o.jsonl"
has_err "is not the line the job of $tmp/o.jsonl.journal ran: the input changed since"
[ -e "$tmp/o.jsonl.journal" ] || fail "a changed input cost the journal"
run 1 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "resumed after a refused changed input: the output differs"
echo "not a journal" >"$tmp/o.jsonl.journal"
run 2 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl"
has_err "$tmp/o.jsonl.journal is not a run-batch journal"
cmp -s "$tmp/o.jsonl" "$tmp/ref.jsonl" || fail "a refused journal changed the output"
rm -f "$tmp/o.jsonl.journal"
run 2 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl" --journal "$tmp/in.jsonl"
has_err "is the input or the output"
run 2 $rb --input "$tmp/in.jsonl" --output "$tmp/o.jsonl" --window 0
has_err "--window 0: give a whole number"

# ---- memory bounded by the window, not the input --------------------------------
# 10 000 and 1 000 000 lines (3-token prompts, max_tokens 1: every line runs
# through the model — the trained OPT, whose 8 192-word vocabulary keeps a
# row cheap — in GPU batches of 1 024) have the same peak memory,
# within a margin far below what holding the other lines would take (~1 KiB
# each).  Under the sanitizers, which run everything several times slower,
# 100 000 lines make the same point.
big=1000000
grep -q '^SAN_CFLAGS = .*-fsanitize' "$FGCORE_BUILDDIR/Makefile" && big=100000
zlines() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++)
	printf "{\"custom_id\": \"z%d\", \"prompt_token_ids\": [8191, %d, %d], \"max_tokens\": 1}\n", i, 4 + i % 50, 7 + i % 13 }'; }
zlines 10000 >"$tmp/z1.jsonl"
zlines $big >"$tmp/zbig.jsonl"
# (under AddressSanitizer freed memory waits in a quarantine: keep it small)
ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
export ASAN_OPTIONS
zm="-o model.path=$FGCORE_TESTDATA/opt/opt-py-128x4 -o policy.gpu_batch_size=1024"
run 0 $fg $zm run-batch --window 4096 --input "$tmp/z1.jsonl" --output "$tmp/z.jsonl"
p1=$(sed -n 's/.*peak memory \([0-9]*\) MiB.*/\1/p' "$tmp/err")
t0=$(date +%s)
timeout 900 $fg $zm run-batch --window 4096 --input "$tmp/zbig.jsonl" --output "$tmp/z.jsonl" 2>"$tmp/err" ||
	fail "$big lines: exit $?: $(tail -3 "$tmp/err")"
pbig=$(sed -n 's/.*peak memory \([0-9]*\) MiB.*/\1/p' "$tmp/err")
[ "$(wc -l <"$tmp/z.jsonl")" -eq $big ] || fail "$big lines in, $(wc -l <"$tmp/z.jsonl") out"
grep -c '"completion_tokens":1' "$tmp/z.jsonl" | grep -qx $big || fail "not every line of $big got its token"
echo "peak memory: $p1 MiB for 10 000 lines, $pbig MiB for $big ($(( $(date +%s) - t0 )) s)"
[ -n "$p1" ] && [ -n "$pbig" ] && [ "$pbig" -le $((p1 + 40)) ] ||
	fail "memory grows with the input: $p1 MiB for 10 000 lines, $pbig MiB for $big"
rm -f "$tmp/zbig.jsonl" "$tmp/z.jsonl"

# Sampled rows are drawn over the CPUs, each from its own request's stream:
# 24 sampled requests (with and without top_k / top_p) in one GPU batch
# give the same bytes on one CPU as on all of them.
awk 'BEGIN { for (i = 0; i < 24; i++)
	printf "{\"custom_id\": \"s%d\", \"prompt_token_ids\": [2, %d, %d], \"max_tokens\": 6, \"temperature\": 0.%d, \"top_k\": %d, \"top_p\": 0.%d, \"seed\": %d, \"ignore_eos\": true}\n", i, 100 + i, 300 + 7 * i, 5 + i % 5, (i % 3) * 20, 7 + i % 3, i }' \
	>"$tmp/s.jsonl"
sm="-o model.path=$model -o policy.gpu_batch_size=24"
run 0 $fg $sm run-batch --input "$tmp/s.jsonl" --output "$tmp/s_all.jsonl"
if command -v taskset >/dev/null; then
	run 0 taskset -c 0 $fg $sm run-batch --input "$tmp/s.jsonl" --output "$tmp/s_one.jsonl"
	cmp -s "$tmp/s_all.jsonl" "$tmp/s_one.jsonl" ||
		fail "sampled rows depend on the CPUs they were drawn on: $(diff "$tmp/s_all.jsonl" "$tmp/s_one.jsonl" | head -4)"
else
	fail "taskset (util-linux) is missing: cannot run the sampling on one CPU"
fi

# FGCORE_TEST_BACKEND=cublas: the same requests drawn on the GPU by the
# sample op (no logits copied out) and on the host give the same bytes.
if [ "${FGCORE_TEST_BACKEND:-}" = cublas ]; then
	gm="$sm -o compute.plugin=cublas -o tier.compute.plugin=cuda_mem -o tier.host.plugin=pinned_host"
	run 0 $fg $gm run-batch --input "$tmp/s.jsonl" --output "$tmp/s_dev.jsonl"
	run 0 $fg $gm -o compute.device_sampling=false run-batch --input "$tmp/s.jsonl" \
		--output "$tmp/s_host.jsonl"
	cmp -s "$tmp/s_dev.jsonl" "$tmp/s_host.jsonl" ||
		fail "the GPU's draws differ from the host's: $(diff "$tmp/s_dev.jsonl" "$tmp/s_host.jsonl" | head -4)"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
