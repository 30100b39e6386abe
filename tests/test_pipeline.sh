#!/bin/sh
# tests/test_pipeline.sh - pipeline stages over MPI on the CPU backend:
# `mpirun -np 2` and `-np 3` give exactly the one-process output of generate
# (greedy) and run-batch (greedy and seeded sampling; scored prompts, also
# with shared prompt prefixes; requests joining running batches, their
# columns wrapping) on the trained OPT and
# Llama checkpoints, with each stage's own offloading policy (weights, cache
# and activations on the host and disk tiers); mismatched configurations and
# a killed rank stop the job with a line naming the rank, within bounded time;
# prompt scores (echo + logprobs, score) and serve through the stages.
set -u
. "$FGCORE_SRCDIR/tests/mpi_env.sh"

# Each rank's OpenBLAS on one thread: the ranks share two cores.
base="-o compute.threads=1 -o tier.disk.dir=$tmp -o distributed.timeout=30"
prompts="$tmp/prompts.txt"
printf '%s\n' "def main():" "import os" "for i in range(10):" "class Foo(object):" \
	"return x +" > "$prompts"

# generate, greedy: 5 prompts over 3 GPU batches of 2 (one row padding).
check_generate() {
	name=$1; shift
	m="-o model.path=$td/$name $base -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=3"
	g="generate --prompt-file $prompts --max-new-tokens 12"
	"$fg" $m $g > "$tmp/one.txt" 2>"$tmp/err" || { die "$name one process: $(cat "$tmp/err")"; return; }
	[ -s "$tmp/one.txt" ] || die "$name: no output"
	run_np 2 "$fg" $m $g > "$tmp/two.txt" 2>"$tmp/err" || die "$name -np 2: $(cat "$tmp/err")"
	cmp -s "$tmp/one.txt" "$tmp/two.txt" || die "$name -np 2 output differs: $(diff "$tmp/one.txt" "$tmp/two.txt" | head -5)"
	# Three stages of 1, 2, 1 layers, each with its own tiers: stage 0 all on
	# the compute tier, stage 1 weights and cache over host and disk with
	# activations on the host, stage 2 weights on the disk, activations too.
	pct="100 0 100 0 100 0 | 20 40 50 30 0 100 | 0 0 0 100 0 0"
	run_np 3 "$fg" $m -o distributed.layers=1,2,1 -o "distributed.percent=$pct" $g \
		> "$tmp/three.txt" 2>"$tmp/err" || die "$name -np 3: $(cat "$tmp/err")"
	cmp -s "$tmp/one.txt" "$tmp/three.txt" || die "$name -np 3 output differs: $(diff "$tmp/one.txt" "$tmp/three.txt" | head -5)"
	# The finest overlap: every GPU batch its own micro-batch, no sep_layer, no overlap.
	run_np 2 "$fg" $m -o distributed.micro_batches=3 -o policy.sep_layer=false \
		-o policy.overlap=false -o "distributed.percent=0 100 0 100 0 100 | 50 50 100 0 100 0" $g \
		> "$tmp/two.txt" 2>"$tmp/err" || die "$name -np 2 micro-batches: $(cat "$tmp/err")"
	cmp -s "$tmp/one.txt" "$tmp/two.txt" || die "$name -np 2 micro-batches output differs"
}
check_generate opt/opt-py-128x4
check_generate llama/llama-py-128x4

# run-batch: greedy and seeded sampled requests (logits cross the pipeline).
m="-o model.path=$td/opt/opt-py-128x4 $base -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=2"
cat > "$tmp/in.jsonl" <<'EOF'
{"custom_id": "a", "prompt": "def add(a, b):", "max_tokens": 10}
{"custom_id": "b", "prompt": "import sys", "max_tokens": 6, "temperature": 0.8, "seed": 7}
{"custom_id": "c", "prompt": "while True:", "max_tokens": 9, "top_k": 5, "temperature": 1.2, "seed": 3}
{"custom_id": "d", "prompt": "x = [", "max_tokens": 4}
{"custom_id": "e", "prompt": "print(", "max_tokens": 8, "temperature": 0.5, "seed": 11}
EOF
"$fg" $m run-batch --input "$tmp/in.jsonl" --output "$tmp/one.jsonl" 2>"$tmp/err" || die "run-batch one process: $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/one.jsonl")" -eq 5 ] || die "run-batch: 5 records expected"
run_np 2 "$fg" $m run-batch --input "$tmp/in.jsonl" --output "$tmp/two.jsonl" 2>"$tmp/err" || die "run-batch -np 2: $(cat "$tmp/err")"
cmp -s "$tmp/one.jsonl" "$tmp/two.jsonl" || die "run-batch -np 2 differs: $(diff "$tmp/one.jsonl" "$tmp/two.jsonl" | head -4)"
run_np 3 "$fg" $m -o "distributed.percent=50 50 100 0 100 0 | 100 0 0 100 100 0 | 0 0 100 0 0 100" \
	run-batch --input "$tmp/in.jsonl" --output "$tmp/three.jsonl" 2>"$tmp/err" || die "run-batch -np 3: $(cat "$tmp/err")"
cmp -s "$tmp/one.jsonl" "$tmp/three.jsonl" || die "run-batch -np 3 differs: $(diff "$tmp/one.jsonl" "$tmp/three.jsonl" | head -4)"

# Continuous batching through the stages: rank 0's joins (the rows, their
# pads) and each decode step's live rows reach every stage, which joins
# alike, gathering joining rows only where every stage can.  30 requests,
# greedy and seeded sampled, in 6 rows; the first batch (--order input,
# greedy: sampled requests join it all the same) makes the run's 12 + 12
# columns, the others join as rows finish: one
# batch in all, whose steps go past its columns (6 tokens a step at most,
# more than 6 x 12 after the prefill: the columns wrap).  The one-process
# bytes and joins over 2 and 3 stages, each stage with its own placement
# (-np 3: stage 1's cache on the host, so no stage gathers rows), and over 2
# with attention on the host.
python3 - "$tmp/join.jsonl" <<'PY'
import json, random, sys
rng = random.Random(29)
with open(sys.argv[1], "w") as f:
    for i in range(30):
        first = i < 6
        n = 12 if first else rng.randint(3, 12)
        r = {"custom_id": "w%d" % i, "max_tokens": 12 if first else rng.randint(1, 12),
             "prompt_token_ids": [2] + [rng.randint(4, 7999) for _ in range(n - 1)]}
        if i % 2 or first:
            r["ignore_eos"] = True
        if i % 5 == 3 and not first:
            r.update(temperature=0.8, seed=i)
        f.write(json.dumps(r) + "\n")
PY
summary() { # what, file: the summary's number before "what"
	sed -n "s/.*[ ;] *\([0-9][0-9]*\) $1.*/\1/p" "$2" | tail -1
}
for model in opt/opt-py-128x4 llama/llama-py-128x4; do
	j="-o model.path=$td/$model $base -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=3 -o policy.refill=0.25"
	rb="run-batch --order input --input $tmp/join.jsonl"
	"$fg" $j $rb --output "$tmp/join1.jsonl" 2>"$tmp/err" || { die "joins, $model, one process: $(cat "$tmp/err")"; continue; }
	joined=$(summary "requests joined" "$tmp/err")
	[ "${joined:-0}" -gt 0 ] || die "joins, $model, one process: none joined: $(tail -1 "$tmp/err")"
	[ "$(summary "batches" "$tmp/err")" = 1 ] && [ "$(summary "tokens generated" "$tmp/err")" -gt 72 ] ||
		die "joins, $model, one process: not one batch past its columns: $(tail -1 "$tmp/err")"
	for v in 2 3 2h; do
		np=${v%h} p= h=
		[ $v = 3 ] && p="distributed.percent=50 50 100 0 100 0 | 100 0 0 100 100 0 | 0 0 100 0 0 100"
		# attention on the host over half of each stage's cache
		[ $v = 2h ] && p="distributed.percent=100 0 50 50 100 0 | 100 0 50 50 100 0" &&
			h=policy.cpu_cache_compute=true
		run_np $np "$fg" $j ${p:+-o "$p"} ${h:+-o $h} $rb --output "$tmp/join$np.jsonl" 2>"$tmp/err" ||
			{ die "joins, $model, -np $v: $(cat "$tmp/err")"; continue; }
		if ! cmp -s "$tmp/join1.jsonl" "$tmp/join$np.jsonl"; then
			die "joins, $model, -np $v differ: $(diff "$tmp/join1.jsonl" "$tmp/join$np.jsonl" | head -4)"
		elif [ "$(summary "requests joined" "$tmp/err")" != "$joined" ] ||
		     [ "$(summary "batches" "$tmp/err")" != 1 ]; then
			die "joins, $model, -np $v: not the $joined joins of one batch: $(grep 'run-batch:' "$tmp/err")"
		else
			echo "joins, $model, -np $v: the one-process bytes and its $joined joins in one batch"
		fi
	done
done

# Mismatched configurations (one rank with another batch shape): one line
# naming the rank, every rank stops, non-zero exit.
g="generate --prompt x --max-new-tokens 2"
timeout 120 $mpi -np 1 "$fg" $m $g : -np 1 "$fg" $m -o policy.gpu_batch_size=3 $g \
	> "$tmp/out" 2>"$tmp/err" && die "mismatched ranks: exit 0"
grep -q "fgcore: rank 1: configuration differs from rank 0's: \[policy\] gpu_batch_size 3 there, \[policy\] gpu_batch_size 2 on rank 0" "$tmp/err" ||
	die "mismatched ranks: $(cat "$tmp/err")"
[ "$(grep -c '^fgcore:' "$tmp/err")" -eq 1 ] || die "mismatched ranks: not one line: $(cat "$tmp/err")"
run_np 2 "$fg" $m -o distributed.layers=1,2 $g > "$tmp/out" 2>"$tmp/err" && die "layers 1,2 of 4 accepted"
grep -q "distributed\] layers \"1,2\": 2 stages of 3 layers" "$tmp/err" || die "bad layers: $(cat "$tmp/err")"
run_np 2 "$fg" $m -o "distributed.percent=100 0 100 0 100 0" $g > "$tmp/out" 2>"$tmp/err" && die "one percent for 2 stages accepted"
grep -q "distributed\] percent" "$tmp/err" || die "bad percent: $(cat "$tmp/err")"
# Scoring prompt positions through the stages (the last one sends each
# position's logits to rank 0): echo + logprobs and `score` give the
# one-process figures, over 2 and 3 stages with padded batches.
printf '%s\n' '{"custom_id": "s", "prompt": "a = 1", "max_tokens": 2, "echo": true, "logprobs": 3}' \
	'{"custom_id": "t", "prompt": "def main(argv):\n    return 0", "max_tokens": 0, "echo": true, "logprobs": 1}' \
	'{"custom_id": "u", "prompt": "import os", "max_tokens": 3, "logprobs": 2}' > "$tmp/echo.jsonl"
"$fg" $m run-batch --input "$tmp/echo.jsonl" --output "$tmp/echo1.out" 2>"$tmp/err" || die "echo, one process: $(cat "$tmp/err")"
run_np 2 "$fg" $m run-batch --input "$tmp/echo.jsonl" --output "$tmp/echo2.out" 2>"$tmp/err" || die "echo -np 2: $(cat "$tmp/err")"
run_np 3 "$fg" $m -o distributed.layers=1,2,1 run-batch --input "$tmp/echo.jsonl" --output "$tmp/echo3.out" 2>"$tmp/err" ||
	die "echo -np 3: $(cat "$tmp/err")"
cmp -s "$tmp/echo1.out" "$tmp/echo2.out" || die "echo + logprobs -np 2 differ: $(diff "$tmp/echo1.out" "$tmp/echo2.out" | head -4)"
cmp -s "$tmp/echo1.out" "$tmp/echo3.out" || die "echo + logprobs -np 3 differ"
grep -q '"token_logprobs":\[null,' "$tmp/echo1.out" || die "echo: no prompt scores: $(head -c 300 "$tmp/echo1.out")"
# Shared prompt prefixes through the stages: every stage runs the same steps
# of the same rows (rank 0's command carries the sharing), the one-process
# bytes, and the positions saved.
shared_prefix_requests "$tmp/mc.jsonl"
sp="-o policy.share_prefix=4 -o policy.gpu_batch_size=4"
"$fg" $m $sp run-batch --input "$tmp/mc.jsonl" --output "$tmp/mc1.out" 2>"$tmp/err" || die "sharing, one process: $(cat "$tmp/err")"
run_np 2 "$fg" $m $sp run-batch --input "$tmp/mc.jsonl" --output "$tmp/mc2.out" 2>"$tmp/err" || die "sharing -np 2: $(cat "$tmp/err")"
grep -q "shared prompt prefixes saved [1-9]" "$tmp/err" || die "sharing -np 2: nothing saved: $(cat "$tmp/err")"
run_np 3 "$fg" $m $sp -o distributed.layers=1,2,1 run-batch --input "$tmp/mc.jsonl" --output "$tmp/mc3.out" 2>"$tmp/err" ||
	die "sharing -np 3: $(cat "$tmp/err")"
cmp -s "$tmp/mc1.out" "$tmp/mc2.out" || die "sharing -np 2 differs: $(diff "$tmp/mc1.out" "$tmp/mc2.out" | head -4)"
cmp -s "$tmp/mc1.out" "$tmp/mc3.out" || die "sharing -np 3 differs"
printf 'import os\n\ndef main(argv):\n    for name in os.listdir(argv[1]):\n        print(name)\n' > "$tmp/t.py"
a1=$("$fg" $m score --json --context 16 --stride 8 "$tmp/t.py" 2>&1) || die "score, one process: $a1"
a2=$(run_np 2 "$fg" $m score --json --context 16 --stride 8 "$tmp/t.py" 2>"$tmp/err") || die "score -np 2: $(cat "$tmp/err")"
[ -n "$a1" ] && [ "$a1" = "$a2" ] || die "score -np 2: $a2, one process: $a1"
# A rank killed mid-job: the job ends, non-zero, naming the rank, in bounded time.
t0=$(date +%s)
export FGCORE_PIPE_TEST=$$
timeout 120 $mpi -x FGCORE_PIPE_TEST -np 2 "$fg" $base -o model.path=dummy:opt-125m -o bench.prompt_len=16 \
	-o bench.gen_len=2000 -o policy.gpu_batch_size=1 -o bench.warmup=false bench \
	> "$tmp/out" 2>"$tmp/err" &
job=$!
victim=
for i in $(seq 1 300); do
	for p in $(pgrep -f fgcore); do
		env=$({ tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null) || continue
		case "$env" in *"FGCORE_PIPE_TEST=$$"*) ;; *) continue ;; esac
		echo "$env" | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
	done
	[ -n "$victim" ] && break
	sleep 0.1
done
if [ -z "$victim" ]; then
	die "killed rank: no rank 1 process found"
	kill "$job" 2>/dev/null
else
	sleep 3 # into the generation
	kill -9 "$victim"
	wait "$job"
	rc=$?
	t1=$(date +%s)
	[ "$rc" -ne 0 ] || die "killed rank: exit 0"
	[ "$rc" -ne 124 ] || die "killed rank: the job hung until timeout(1) stopped it"
	[ $((t1 - t0)) -le 60 ] || die "killed rank: the job took $((t1 - t0)) s to stop"
	grep -q "rank 1" "$tmp/err" || die "killed rank: no line names rank 1: $(cat "$tmp/err")"
	cat "$tmp/err"
fi

# serve under mpirun: rank 0 answers over HTTP, the stages compute; the same
# greedy choices as one process; SIGTERM to the launcher ends the job cleanly.
if grep -q '^#define HAVE_MICROHTTPD 1' "$FGCORE_BUILDDIR/config.h"; then
	m="-o model.path=$td/opt/opt-py-128x4 $base -o policy.gpu_batch_size=2 -o policy.num_gpu_batches=2"
	body='{"prompt": ["def main():", "import os", "class Foo(object):"], "max_tokens": 10, "temperature": 0}'
	ask() { # port file: POST the body, print the choices' texts
		python3 - "$1" "$body" <<'PY'
import json, sys, time, urllib.request
port = None
for _ in range(600):
    try:
        port = open(sys.argv[1]).read().split("http://127.0.0.1:")[1].split()[0]
        break
    except (IndexError, OSError):
        time.sleep(0.1)
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, sys.argv[2].encode(),
                             {"Content-Type": "application/json"})
print(json.dumps([c["text"] for c in json.load(urllib.request.urlopen(req, timeout=60))["choices"]]))
PY
	}
	timeout 120 "$fg" $m serve --port 0 2>"$tmp/s1.err" &
	s1=$!
	one=$(ask "$tmp/s1.err") || die "serve, one process: $(cat "$tmp/s1.err")"
	kill -TERM $s1; wait $s1 || die "serve, one process: exit $? after SIGTERM"
	timeout 120 $mpi -np 2 "$fg" $m serve --port 0 2>"$tmp/s2.err" &
	s2=$!
	two=$(ask "$tmp/s2.err") || die "serve -np 2: $(cat "$tmp/s2.err")"
	kill -TERM $s2; wait $s2
	rc=$?
	[ "$rc" -ne 124 ] || die "serve -np 2: SIGTERM did not end the job"
	[ -n "$one" ] && [ "$one" = "$two" ] || die "serve -np 2 answered $two, one process $one"
fi
exit $fail
