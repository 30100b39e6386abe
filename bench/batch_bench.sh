#!/bin/sh
# bench/batch_bench.sh - run-batch over N requests of mixed prompt lengths
# (uniform in 8-512 tokens, max_tokens 8, greedy, ignore_eos): tokens/s and
# padding waste with length buckets against batches in input order.
#   usage: bench/batch_bench.sh [N] -- [fgcore options before run-batch]
#   e.g.   FGCORE=_build/dev/fgcore bench/batch_bench.sh 10000 -- -c /dev/null \
#            -o model.path=$FGCORE_TESTDATA/opt/opt-tiny-64x2 -o policy.gpu_batch_size=32
# Prints run-batch's summary line of each order; OUT (default a temporary
# folder) keeps the requests and both outputs, which must be identical.
set -eu
n=${1:-10000}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && [ "$1" = -- ] && shift
fg=${FGCORE:-fgcore}
out=${OUT:-$(mktemp -d -t fgcore-batch-bench.XXXXXX)}
mkdir -p "$out"
python3 - "$n" >"$out/requests.jsonl" <<'PY'
import random, sys
rng = random.Random(17)
for i in range(int(sys.argv[1])):
    n = rng.randint(8, 512)
    ids = [2] + [rng.randint(4, 50000) for _ in range(n - 1)]
    print('{"custom_id": "r%d", "prompt_token_ids": %s, "max_tokens": 8, "ignore_eos": true}'
          % (i, ids))
PY
for order in buckets input; do
	rm -f "$out/$order.jsonl.journal"
	"$fg" "$@" run-batch --input "$out/requests.jsonl" --output "$out/$order.jsonl" \
		--order $order --progress 60 2>"$out/$order.err" || { cat "$out/$order.err"; exit 1; }
	echo "order $order: $(grep 'lines (' "$out/$order.err" | sed 's/^fgcore: run-batch: //')"
done
cmp -s "$out/buckets.jsonl" "$out/input.jsonl" || { echo "the two orders' results differ"; exit 1; }
echo "results identical; files in $out"
