#!/bin/sh
# bench/batch_1m.sh - a run-batch job of N lines (default 1 000 000) of tiny
# prompts with max_tokens 1: memory stays bounded by the window (run-batch's
# summary reports the peak, VmHWM) whatever N is.
#   usage: bench/batch_1m.sh [N] -- [fgcore options before run-batch]
#   e.g.   FGCORE=_build/dev/fgcore bench/batch_1m.sh 1000000 -- -c /dev/null \
#            -o model.path=$FGCORE_TESTDATA/opt/opt-tiny-64x2 -o policy.gpu_batch_size=1024
set -eu
n=${1:-1000000}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && [ "$1" = -- ] && shift
fg=${FGCORE:-fgcore}
out=${OUT:-$(mktemp -d -t fgcore-batch-1m.XXXXXX)}
mkdir -p "$out"
python3 - "$n" >"$out/requests.jsonl" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print('{"custom_id": "q%d", "prompt_token_ids": [2, %d, %d], "max_tokens": 1}'
          % (i, 4 + i % 1000, 5 + i % 997))
PY
echo "$(wc -l <"$out/requests.jsonl") lines, $(du -h "$out/requests.jsonl" | cut -f1)"
"$fg" "$@" run-batch --input "$out/requests.jsonl" --output "$out/results.jsonl" \
	--progress 60 2>"$out/err" || { cat "$out/err"; exit 1; }
tail -1 "$out/err"
echo "$(wc -l <"$out/results.jsonl") results, $(du -h "$out/results.jsonl" | cut -f1)"
rm -f "$out/requests.jsonl" "$out/results.jsonl"
