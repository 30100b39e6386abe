#!/bin/sh
# bench/replicas.sh - run-batch's throughput over 1, 2 and 4 data-parallel
# replicas ([distributed] replicas, mpirun -np R), measured in one run on
# the same requests: N requests of token-id prompts (32-256 ids) and budgets
# (16-64 new tokens, ignore_eos, greedy), each rank's compute on THREADS
# threads.  Prints each layout's generated tokens/s after the load and its
# ratio to one replica; every layout's output must equal one process's.
#   usage: bench/replicas.sh [N] -- [fgcore options before run-batch]
#   e.g.   FGCORE=_build/dev/fgcore bench/replicas.sh 256 -- -c /dev/null \
#            -o model.path=$FGCORE_TESTDATA/opt/opt-py-128x4
# REPLICAS (default "1 2 4") picks the layouts, MPIRUN the launcher (default
# `mpirun --oversubscribe`, plus --allow-run-as-root as root), OUT keeps the
# requests and outputs (default a temporary folder).  A replica needs a core
# of its own: on fewer cores than replicas the ratio measures the cores.
set -eu
n=${1:-256}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && [ "$1" = -- ] && shift
fg=${FGCORE:-fgcore}
out=${OUT:-$(mktemp -d -t fgcore-replicas-bench.XXXXXX)}
mpi=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [ -z "${MPIRUN:-}" ] && mpi="$mpi --allow-run-as-root"
mkdir -p "$out"
python3 - "$n" >"$out/requests.jsonl" <<'PY'
import random, sys
rng = random.Random(7)
for i in range(int(sys.argv[1])):
    ids = [2] + [rng.randint(4, 8000) for _ in range(rng.randint(32, 256) - 1)]
    print('{"custom_id": "r%d", "prompt_token_ids": %s, "max_tokens": %d, "ignore_eos": true}'
          % (i, ids, rng.randint(16, 64)))
PY
echo "$n requests, $(nproc) cores, $(date -u +%Y-%m-%d); fgcore $*"
layouts=${REPLICAS:-1 2 4}
first=${layouts%% *}
base=
for r in $layouts; do
	rm -f "$out/r$r.jsonl.journal"
	launch=
	[ "$r" = 1 ] || launch="$mpi -x FGCORE_PLUGIN_PATH -np $r"
	$launch "$fg" -o compute.threads="${THREADS:-1}" -o distributed.replicas="$r" "$@" \
		run-batch --input "$out/requests.jsonl" --output "$out/r$r.jsonl" 2>"$out/r$r.err" ||
		{ cat "$out/r$r.err"; exit 1; }
	tps=$(sed -n 's/.*, \([0-9.]*\) tokens\/s after the load.*/\1/p' "$out/r$r.err")
	[ -n "$tps" ] || { echo "replicas $r: no throughput in: $(cat "$out/r$r.err")"; exit 1; }
	[ -n "$base" ] || base=$tps
	[ "$r" = "$first" ] || cmp -s "$out/r$r.jsonl" "$out/r$first.jsonl" ||
		{ echo "replicas $r: the output differs from replicas $first's"; exit 1; }
	printf 'replicas %s: %10.1f generated tokens/s after the load, %.2fx replicas %s\n' \
		"$r" "$tps" "$(echo "$tps $base" | awk '{ print $1 / $2 }')" "$first"
done
echo "outputs identical; files in $out"
