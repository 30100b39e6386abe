#!/bin/sh
# examples/data_wrangle/run.sh - entity matching over a CSV of product pairs:
# few-shot prompts (make_prompts.py), fgcore run-batch, scored against the
# CSV's labels (score.py).
#   usage: run.sh [PAIRS.csv] [WORKDIR] -- [fgcore options before run-batch]
#   e.g.   run.sh products.csv /tmp/em -- -c opt-6.7b.ini
# FGCORE names the fgcore program (default: fgcore on PATH).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
csv=$here/products.csv
work=${TMPDIR:-/tmp}/fgcore-data-wrangle
[ $# -gt 0 ] && [ "$1" != -- ] && { csv=$1; shift; }
[ $# -gt 0 ] && [ "$1" != -- ] && { work=$1; shift; }
[ $# -gt 0 ] && [ "$1" = -- ] && shift
fg=${FGCORE:-fgcore}
mkdir -p "$work"
python3 "$here/make_prompts.py" "$csv" >"$work/requests.jsonl"
# failed lines would show in the score; run-batch's own exit status is kept
"$fg" "$@" run-batch --input "$work/requests.jsonl" --output "$work/results.jsonl" -q || {
	rc=$?
	[ $rc -eq 1 ] || exit $rc
}
python3 "$here/score.py" "$csv" "$work/results.jsonl"
