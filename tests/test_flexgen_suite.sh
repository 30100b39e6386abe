#!/bin/sh
# tests/test_flexgen_suite.sh - every command line of FlexGen's own benchmark
# suite (tests/flexgen_bench_suite.txt) given to `fgcore bench` unchanged, with
# CPU-sized substitutions appended (argparse, and fgcore, let the last one win):
#   --model facebook/opt-125m   every size (opt-1.3b ... opt-175b-stage)
#   --path _DUMMY_              random weights (the 1b3_test lines have no --path)
#   --prompt-len 8 --gen-len 6 --cut-gen-len 4   tiny lengths, projected decode
#   --gpu-batch-size 2          the lines' 1..160 are GPU-sized; num-gpu-batches kept
#   --offload-dir DIR --log-file FILE
# Each line must be accepted, run, keep its own --percent and --num-gpu-batches,
# and append FlexGen's five log lines; --attn-sparsity 0.1 must be refused with
# one line saying it is not implemented.
set -u
if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
suite="${FGCORE_SRCDIR:-.}/tests/flexgen_bench_suite.txt"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-flexgen-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG
cpu="-o compute.plugin=cpu_blas -o tier.compute.plugin=pinned_host -o tier.host.plugin=pinned_host -o bench.warmup=false"
sub="--model facebook/opt-125m --path _DUMMY_ --prompt-len 8 --gen-len 6 --cut-gen-len 4 --gpu-batch-size 2"
log="$tmp/flexgen.log"
n=0 ran=0
[ -r "$suite" ] || { echo "cannot read $suite" >&2; exit 99; }
while IFS='|' read -r name line; do
	case "$name" in '#'* | '') continue ;; esac
	n=$((n + 1))
	before=$(cat "$log" 2>/dev/null | wc -l)
	# shellcheck disable=SC2086 # the line is split into arguments on purpose
	out=$("$fg" $cpu bench $line $sub --offload-dir "$tmp/offload/$n" --log-file "$log" \
		--json "$tmp/r.json" 2>&1)
	rc=$?
	case "$line" in
	*--attn-sparsity*)
		[ "$rc" -eq 2 ] || die "$name #$n: --attn-sparsity 0.1 exited $rc: $out"
		[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q '^fgcore: --attn-sparsity 0.1: .*not implemented' ||
			die "$name #$n: --attn-sparsity message: $out"
		continue
		;;
	esac
	if [ "$rc" -ne 0 ]; then
		die "$name #$n: exited $rc: $line: $out"
		continue
	fi
	ran=$((ran + 1))
	[ -d "$tmp/offload/$n" ] || die "$name #$n: --offload-dir not created"
	# its own policy, not a default: percent and num-gpu-batches as given
	pct=$(echo "$line" | sed -n 's/.*--percent \([0-9]* [0-9]* [0-9]* [0-9]* [0-9]* [0-9]*\).*/\1/p')
	grep -q "\"percent\": \"$pct\"" "$tmp/r.json" || die "$name #$n: percent '$pct' not applied: $(grep percent "$tmp/r.json")"
	ngb=$(echo "$line" | sed -n 's/.*--num-gpu-batches \([0-9]*\).*/\1/p')
	grep -q "\"num_gpu_batches\": ${ngb:-1}," "$tmp/r.json" || die "$name #$n: num_gpu_batches ${ngb:-1} not applied"
	grep -q '"gpu_batch_size": 2,' "$tmp/r.json" || die "$name #$n: the substituted --gpu-batch-size 2 did not win"
	case "$line" in *--compress-weight*) w=int4_group64 ;; *) w=fp16 ;; esac
	echo "$out" | grep -q "^weights as stored: .* ($w)$" || die "$name #$n: weights not $w: $out"
	# FlexGen's five lines appended, in its format
	after=$(wc -l <"$log")
	[ "$after" -eq $((before + 5)) ] || die "$name #$n: the log grew from $before to $after lines"
	tail -n 5 "$log" >"$tmp/last"
	sed -n 1p "$tmp/last" | grep -q '^model size: [0-9.]* GB	cache size: [0-9.]* GB	hidden size (p): [0-9.]* GB$' || die "$name #$n: log line 1: $(sed -n 1p "$tmp/last")"
	sed -n 2p "$tmp/last" | grep -q '^peak gpu mem: [0-9.]* GB	projected: True$' || die "$name #$n: log line 2: $(sed -n 2p "$tmp/last")"
	sed -n 3p "$tmp/last" | grep -q '^prefill latency: [0-9.]* s	prefill throughput: [0-9.]* token/s$' || die "$name #$n: log line 3"
	sed -n 4p "$tmp/last" | grep -q '^decode latency: [0-9.]* s	decode throughput: [0-9.]* token/s$' || die "$name #$n: log line 4"
	sed -n 5p "$tmp/last" | grep -q '^total latency: [0-9.]* s	total throughput: [0-9.]* token/s$' || die "$name #$n: log line 5"
	# stdout says which memory FlexGen's "gpu" line was on this CPU run
	echo "$out" | grep -q '^peak gpu mem: [0-9.]* GB (compute tier: pinned_host, host memory)	projected: True$' || die "$name #$n: stdout peak line: $out"
done <"$suite"
[ "$n" -eq 55 ] || die "the fixture has $n lines, FlexGen's suite 55"
[ "$ran" -eq 54 ] || die "$ran of the 54 runnable lines ran"
echo "$ran of $n FlexGen suite lines ran, the --attn-sparsity 0.1 line refused"
exit $fail
