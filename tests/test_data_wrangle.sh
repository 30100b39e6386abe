#!/bin/sh
# tests/test_data_wrangle.sh - the data-wrangling example end to end on a
# tiny model: the CSV of product pairs to few-shot prompts, fgcore run-batch,
# the answers scored against the labels.  The tiny model's accuracy means
# nothing; the pipeline must hold: one answer per pair, none failed, the
# score printed; a truncated results file is refused by the scorer.
set -u
if [ -z "${FGCORE_BUILDDIR:-}" ] || [ -z "${FGCORE_SRCDIR:-}" ]; then
	echo "FGCORE_BUILDDIR/FGCORE_SRCDIR not set: run this test through make check" >&2
	exit 99
fi
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the example runs on its tiny OPT with a tokenizer)"
	exit 77
fi
command -v python3 >/dev/null || { echo "FAIL: python3 is missing (see .ci/deps)"; exit 1; }
model="$FGCORE_TESTDATA/opt/opt-py-128x4"
[ -f "$model/config.json" ] || { echo "FAIL: $model missing"; exit 1; }
ex="$FGCORE_SRCDIR/examples/data_wrangle"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-wrangle.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

FGCORE="$FGCORE_BUILDDIR/fgcore" timeout 300 "$ex/run.sh" "$ex/products.csv" "$tmp" -- \
	-c /dev/null -o model.path="$model" -o model.tokenizer="$model" >"$tmp/score" 2>"$tmp/err"
rc=$?
cat "$tmp/score" "$tmp/err"
[ $rc -eq 0 ] || fail "run.sh exited $rc"
pairs=$(($(wc -l <"$ex/products.csv") - 1))
grep -Eq "^$pairs pairs, 0 failed, [0-9]+ answered Yes/No, accuracy [0-9.]+%$" "$tmp/score" ||
	fail "no score line for $pairs pairs: $(cat "$tmp/score")"
[ "$(wc -l <"$tmp/results.jsonl")" -eq "$pairs" ] || fail "one result per pair expected"
[ "$(grep -c '"status_code":200' "$tmp/results.jsonl")" -eq "$pairs" ] || fail "a pair's request failed"
head -n 3 "$tmp/results.jsonl" >"$tmp/cut.jsonl"
if python3 "$ex/score.py" "$ex/products.csv" "$tmp/cut.jsonl" >/dev/null 2>"$tmp/err"; then
	fail "score.py accepted 3 answers for $pairs pairs"
fi
grep -q "3 answers for $pairs pairs" "$tmp/err" || fail "score.py: $(cat "$tmp/err")"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
