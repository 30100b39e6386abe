#!/bin/sh
# tests/test_refill.sh - [policy] refill (continuous batching) end to end: a
# run-batch job of prompts of many lengths and budgets, ending on their
# budget or on end of text, some with log-probabilities, some sampled, some
# echoed (scored in the join's step), gives with refill each request's tokens as it
# run alone (GPU batches of 1) and its log-probabilities within 1e-4; the
# summary says how many requests joined running batches, in fewer batches
# than without; the cache offloaded too, and 4-bit (against alone with it),
# and with attention on the host over half the cache; with
# [bench] end_chance, requests end early at the same tokens joined as alone.
# On the trained OPT and Llama of $FGCORE_TESTDATA.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the jobs run on its trained models)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-refill.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

python3 - "$tmp/in.jsonl" <<'PY'
import json, random, sys
rng = random.Random(11)
with open(sys.argv[1], "w") as f:
    for i in range(64):
        n = rng.randint(3, 40)
        r = {"custom_id": "r%d" % i, "max_tokens": rng.randint(1, 24),
             "prompt_token_ids": [2] + [rng.randint(4, 7999) for _ in range(n - 1)]}
        if i % 2:
            r["ignore_eos"] = True
        if i % 3 == 0:
            r["logprobs"] = 4 if i % 2 else 2
        if i % 11 == 5:
            r["echo"] = True
            r["logprobs"] = 1
        if i % 13 == 7:
            r.update(temperature=0.8, seed=i)
        f.write(json.dumps(r) + "\n")
PY

# compare A B: the same tokens a line, log-probabilities within 1e-4
compare() {
	python3 - "$1" "$2" <<'PY'
import json, os, sys
a = {json.loads(l)["custom_id"]: json.loads(l) for l in open(sys.argv[1])}
b = {json.loads(l)["custom_id"]: json.loads(l) for l in open(sys.argv[2])}
assert sorted(a) == sorted(b) and len(a) == int(os.environ.get("KCOUNT", "64")), "different lines"
worst = 0
for k in a:
    x, y = a[k], b[k]
    assert "error" not in x and "error" not in y, (x, y)
    assert x["token_ids"] == y["token_ids"], (k, x["token_ids"], y["token_ids"])
    assert x["text"] == y["text"] and x["finish_reason"] == y["finish_reason"], k
    if "logprobs" in x:
        for u, v in zip(x["logprobs"]["token_logprobs"], y["logprobs"]["token_logprobs"]):
            if u is not None:
                worst = max(worst, abs(u - v))
        assert x["logprobs"]["tokens"] == y["logprobs"]["tokens"], k
        for u, v in zip(x["logprobs"]["top_logprobs"], y["logprobs"]["top_logprobs"]):
            assert (u is None) == (v is None) and (u is None or u.keys() == v.keys()), (k, u, v)
            for t in u or {}:
                worst = max(worst, abs(u[t] - v[t]))
assert worst <= float(os.environ.get("TOL", "1e-4")), worst
PY
}

# echoed requests only (prompts scored, then tokens), for a batch of 2 rows
python3 - "$tmp/echo.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    for i in range(8):  # (short prompts, longer budgets: each can join)
        n = rng.randint(3, 8)
        f.write(json.dumps({"custom_id": "e%d" % i, "echo": True, "logprobs": 2,
                            "max_tokens": rng.randint(6, 12), "ignore_eos": True,
                            "prompt_token_ids": [2] + [rng.randint(4, 7999) for _ in range(n - 1)]}) + "\n")
PY

joined() { sed -n 's/.*; \([0-9]*\) requests joined running batches.*/\1/p' "$1"; }
batches() { sed -n 's/.* positions in \([0-9]*\) batches.*/\1/p' "$1"; }

for model in opt/opt-py-128x4 llama/llama-py-128x4; do
	m="-o model.path=$FGCORE_TESTDATA/$model -o tier.disk.dir=$tmp"
	"$fg" $m -o policy.gpu_batch_size=1 -o policy.refill=0 run-batch -q \
		--input "$tmp/in.jsonl" --output "$tmp/alone.jsonl" || fail "$model: alone"
	"$fg" $m -o policy.gpu_batch_size=6 -o policy.num_gpu_batches=2 -o policy.refill=0 \
		run-batch --input "$tmp/in.jsonl" --output "$tmp/static.jsonl" 2>"$tmp/static.err" ||
		fail "$model: without refill"
	[ -z "$(joined "$tmp/static.err")" ] || fail "$model: refill 0 joined requests"
	for p in "policy.refill=0.25" "policy.refill=1" \
		"policy.percent=100 0 0 100 100 0" "policy.percent=100 0 30 30 100 0"; do
		"$fg" $m -o policy.gpu_batch_size=6 -o policy.num_gpu_batches=2 -o "$p" run-batch \
			--input "$tmp/in.jsonl" --output "$tmp/refill.jsonl" 2>"$tmp/refill.err" ||
			{ fail "$model, $p: $(tail -1 "$tmp/refill.err")"; continue; }
		compare "$tmp/alone.jsonl" "$tmp/refill.jsonl" || fail "$model, $p: not each request's alone"
		j=$(joined "$tmp/refill.err")
		[ "${j:-0}" -gt 0 ] || fail "$model, $p: no request joined: $(tail -1 "$tmp/refill.err")"
		[ "$(batches "$tmp/refill.err")" -lt "$(batches "$tmp/static.err")" ] ||
			fail "$model, $p: no fewer batches than without refill"
		echo "$model, $p: ${j:-0} requests joined, $(batches "$tmp/refill.err") batches against $(batches "$tmp/static.err")"
	done
	# requests asking for more top log-probabilities than the batch they
	# would join computes wait for a batch of their own (input order: the
	# first batch asks for 1, the later ones for 5)
	python3 - "$tmp/k.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    for i in range(30):
        f.write(json.dumps({"custom_id": "k%d" % i, "max_tokens": 20 if i < 12 else 6,
                            "ignore_eos": True, "logprobs": 1 if i < 12 else 5,
                            "prompt_token_ids": [2] + [rng.randint(4, 7999) for _ in range(rng.randint(2, 12))]}) + "\n")
PY
	"$fg" $m -o policy.gpu_batch_size=1 -o policy.refill=0 run-batch -q --input "$tmp/k.jsonl" \
		--output "$tmp/k_alone.jsonl" || fail "$model: top_logprobs alone"
	"$fg" $m -o policy.gpu_batch_size=6 -o policy.num_gpu_batches=2 run-batch -q --order input \
		--input "$tmp/k.jsonl" --output "$tmp/k_refill.jsonl" || fail "$model: top_logprobs"
	KCOUNT=30 compare "$tmp/k_alone.jsonl" "$tmp/k_refill.jsonl" ||
		fail "$model: top_logprobs of joining requests differ from alone"
	# [bench] end_chance: requests end early at the same token alone and joined
	e="-o bench.end_chance=0.08"
	"$fg" $m $e -o policy.gpu_batch_size=1 -o policy.refill=0 run-batch -q \
		--input "$tmp/in.jsonl" --output "$tmp/alone_end.jsonl" || fail "$model: end_chance alone"
	"$fg" $m $e -o policy.gpu_batch_size=6 -o policy.num_gpu_batches=2 run-batch -q \
		--input "$tmp/in.jsonl" --output "$tmp/refill_end.jsonl" || fail "$model: end_chance"
	compare "$tmp/alone_end.jsonl" "$tmp/refill_end.jsonl" ||
		fail "$model, end_chance: not each request's alone"
	python3 - "$tmp/alone_end.jsonl" "$tmp/alone.jsonl" <<'PY' || fail "$model, end_chance: no request ended early"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = {json.loads(l)["custom_id"]: json.loads(l) for l in open(sys.argv[2])}
early = sum(len(x["token_ids"]) < len(b[x["custom_id"]]["token_ids"]) and
            x["finish_reason"] == "stop" for x in a)
assert early >= 5, early
PY
	# a 4-bit cache in host memory: requests join, each as it runs alone
	# with that cache
	q=policy.compress_cache=true
	"$fg" $m -o $q -o "policy.percent=100 0 0 100 100 0" -o policy.gpu_batch_size=1 -o policy.refill=0 run-batch -q \
		--input "$tmp/in.jsonl" --output "$tmp/alone4.jsonl" || fail "$model: 4-bit alone"
	"$fg" $m -o $q -o "policy.percent=100 0 0 100 100 0" -o policy.gpu_batch_size=6 \
		-o policy.num_gpu_batches=2 run-batch --input "$tmp/in.jsonl" --output "$tmp/refill.jsonl" \
		2>"$tmp/refill.err" || fail "$model, 4-bit cache: $(tail -1 "$tmp/refill.err")"
	# (batched runs round differently, and a value moved across a 4-bit
	# step moves the log-probabilities more: 1e-3)
	TOL=1e-3 compare "$tmp/alone4.jsonl" "$tmp/refill.jsonl" ||
		fail "$model, 4-bit cache: not each request's alone"
	[ "$(joined "$tmp/refill.err")" -gt 0 ] 2>/dev/null || fail "$model, 4-bit cache: no request joined"
	echo "$model, 4-bit cache: $(joined "$tmp/refill.err") requests joined"
	# attention on the host, over half the cache: requests join, each as
	# it runs alone
	"$fg" $m -o policy.gpu_batch_size=6 -o policy.num_gpu_batches=2 \
		-o policy.cpu_cache_compute=true -o "policy.percent=100 0 50 50 100 0" run-batch \
		--input "$tmp/in.jsonl" --output "$tmp/refill.jsonl" 2>"$tmp/refill.err" ||
		fail "$model, cpu_cache_compute: failed"
	[ "$(joined "$tmp/refill.err")" -gt 0 ] 2>/dev/null ||
		fail "$model, cpu_cache_compute: no request joined"
	compare "$tmp/alone.jsonl" "$tmp/refill.jsonl" ||
		fail "$model, cpu_cache_compute: not each request's alone"
	echo "$model, attention on the host: $(joined "$tmp/refill.err") requests joined"
	# echoed requests join too, their prompts scored in the join's step:
	# one batch of 2 rows takes all 8
	"$fg" $m -o policy.gpu_batch_size=1 -o policy.refill=0 run-batch -q \
		--input "$tmp/echo.jsonl" --output "$tmp/alone_echo.jsonl" || fail "$model: echoed alone"
	"$fg" $m -o policy.gpu_batch_size=2 -o policy.refill=1 run-batch \
		--input "$tmp/echo.jsonl" --output "$tmp/refill.jsonl" 2>"$tmp/refill.err" ||
		fail "$model, echoed: $(tail -1 "$tmp/refill.err")"
	KCOUNT=8 compare "$tmp/alone_echo.jsonl" "$tmp/refill.jsonl" ||
		fail "$model, echoed: not each request's alone"
	[ "$(joined "$tmp/refill.err")" = 6 ] && [ "$(batches "$tmp/refill.err")" = 1 ] ||
		fail "$model, echoed: not 6 joined in 1 batch: $(tail -1 "$tmp/refill.err")"
done
[ $failures -eq 0 ] || exit 1
exit 0
