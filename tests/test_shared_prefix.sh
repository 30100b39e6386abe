#!/bin/sh
# tests/test_shared_prefix.sh - [policy] share_prefix end to end: a job of
# multiple-choice prompts (a few-shot header per subject, a question, a
# choice; echo + logprobs and a few new tokens) through run-batch, shared
# prompt prefixes on, gives each request's tokens and log-probabilities as
# the request run alone (GPU batches of 1, nothing to share) within 1e-4,
# with the cache offloaded too; the summary says how many positions sharing
# saved; the shuffled job gives the same results; a batch too large for its
# tier runs in halves.  On the trained OPT and
# Llama of $FGCORE_TESTDATA.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
cmp_scores="$FGCORE_SRCDIR/tests/compare_scores.py"
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the jobs run on its trained models)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-share.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# 3 subjects x 5 questions x 4 choices, and prompts sharing nothing; the
# choices of a question differ in their last token only.
python3 - "$tmp" <<'PY'
import json, random, sys
rng = random.Random(5)
lines = []
for s in range(3):
    header = [2] + [rng.randint(4, 400) for _ in range(30)]
    for q in range(5):
        question = [rng.randint(4, 400) for _ in range(rng.randint(4, 12))]
        for c in range(4):
            lines.append({"custom_id": f"s{s}q{q}c{c}", "prompt": header + question + [10 + c],
                          "max_tokens": 1 + (q + c) % 3, "echo": True, "logprobs": 2,
                          "ignore_eos": True})
for i in range(4):
    lines.append({"custom_id": f"x{i}", "prompt": [2] + [rng.randint(4, 400) for _ in range(9 + i)],
                  "max_tokens": 3, "echo": True, "logprobs": 2, "ignore_eos": True})
with open(sys.argv[1] + "/in.jsonl", "w") as f:
    f.writelines(json.dumps(l) + "\n" for l in lines)
rng.shuffle(lines)
with open(sys.argv[1] + "/shuffled.jsonl", "w") as f:
    f.writelines(json.dumps(l) + "\n" for l in lines)
PY

for m in opt/opt-py-128x4 llama/llama-py-128x4; do
	o="-o model.path=$FGCORE_TESTDATA/$m -o tier.disk.dir=$tmp"
	# shellcheck disable=SC2086
	timeout 300 "$fg" $o -o policy.gpu_batch_size=1 run-batch --input "$tmp/in.jsonl" \
		--output "$tmp/alone.jsonl" -q || fail "$m: the requests alone: exit $?"
	for p in "100 0 100 0 100 0" "30 50 0 100 50 50" "100 0 30 30 100 0"; do
		# shellcheck disable=SC2086
		timeout 300 "$fg" $o -o policy.gpu_batch_size=8 -o policy.num_gpu_batches=2 \
			-o "policy.percent=$p" -o policy.share_prefix=8 run-batch \
			--input "$tmp/in.jsonl" --output "$tmp/shared.jsonl" 2>"$tmp/err" ||
			fail "$m, $p: shared: exit $?: $(cat "$tmp/err")"
		grep -q "shared prompt prefixes saved [1-9][0-9]* positions" "$tmp/err" ||
			fail "$m, $p: no positions saved: $(cat "$tmp/err")"
		grep -q "padding waste [0-9]\.[0-9]%\|padding waste [1-9][0-9]\.[0-9]%" "$tmp/err" ||
			fail "$m, $p: padding waste out of range: $(cat "$tmp/err")"
		python3 "$cmp_scores" "$tmp/alone.jsonl" "$tmp/shared.jsonl" 1e-4 ||
			fail "$m, $p: shared prefixes against each request alone"
	done
	# the same requests in another order: the same batches form
	# shellcheck disable=SC2086
	timeout 300 "$fg" $o -o policy.gpu_batch_size=8 -o policy.num_gpu_batches=2 \
		-o policy.share_prefix=8 run-batch --input "$tmp/shuffled.jsonl" \
		--output "$tmp/shuffled.out.jsonl" -q || fail "$m: shuffled: exit $?"
	python3 "$cmp_scores" "$tmp/alone.jsonl" "$tmp/shuffled.out.jsonl" 1e-4 ||
		fail "$m: the shuffled job against each request alone"
done

# A batch too large for its tier runs in halves (each still sharing), not
# one request at a time: the compute tier holds the weights and a few rows.
o="-o model.path=$FGCORE_TESTDATA/opt/opt-py-128x4 -o policy.gpu_batch_size=64"
# shellcheck disable=SC2086
timeout 300 "$fg" -v $o -o tier.compute.capacity=9M -o policy.share_prefix=8 run-batch \
	--input "$tmp/in.jsonl" --output "$tmp/halves.jsonl" 2>"$tmp/err" || fail "halves: exit $?"
grep -q "info: a batch of 32 requests does not fit (tier compute .*: in halves" "$tmp/err" ||
	fail "halves: no batch was halved: $(cat "$tmp/err")"
grep -q "shared prompt prefixes saved [1-9]" "$tmp/err" || fail "halves: no sharing: $(cat "$tmp/err")"
# shellcheck disable=SC2086
timeout 300 "$fg" $o -o policy.gpu_batch_size=1 run-batch --input "$tmp/in.jsonl" \
	--output "$tmp/alone.jsonl" -q || fail "alone: exit $?"
python3 "$cmp_scores" "$tmp/alone.jsonl" "$tmp/halves.jsonl" 1e-4 ||
	fail "halves against each request alone"

[ "$failures" -eq 0 ] || exit 1
echo "PASS: shared prompt prefixes give each request's results alone"
