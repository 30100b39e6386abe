#!/bin/sh
# tests/test_score.sh - scoring from the command line against Hugging Face:
# `fgcore score` on the trained OPT's held-out sequences (its perplexity,
# whole and in sliding windows), text against the same text's token ids, bad
# input; run-batch's echo + logprobs with max_tokens 0 (the request
# lm-evaluation-harness sends) against heldout.json's log-probabilities.
set -u
fg="$FGCORE_BUILDDIR/fgcore"
td=${FGCORE_TESTDATA:-}
[ -n "$td" ] || { echo "FGCORE_TESTDATA is not set: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-score-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
dir="$td/opt/opt-py-128x4"
m="-o model.path=$dir -o policy.gpu_batch_size=4 -o policy.num_gpu_batches=2"
[ -f "$dir/heldout.json" ] || { echo "FAIL: $dir/heldout.json missing"; exit 1; }

# the held-out sequences as token-id lines, and Hugging Face's figures
python3 - "$dir/heldout.json" "$tmp" <<'PY' || die "reading heldout.json"
import json, sys
h = json.load(open(sys.argv[1]))
with open(sys.argv[2] + "/ids.jsonl", "w") as f:
    for r in h["input_ids"]:
        f.write(json.dumps(r) + "\n")
with open(sys.argv[2] + "/batch.jsonl", "w") as f:
    for i, r in enumerate(h["input_ids"][:4]):
        f.write(json.dumps({"custom_id": str(i), "prompt": r, "max_tokens": 0, "echo": True, "logprobs": 2}) + "\n")
print(h["perplexity"], file=open(sys.argv[2] + "/ppl", "w"))
PY

# whole sequences: Hugging Face's perplexity within 0.1 %, every token counted
out=$("$fg" $m score --ids --json "$tmp/ids.jsonl" 2>&1) || die "score --ids: $out"
total=$(echo "$out" | tail -n 1)
echo "$total"
python3 -c "
import json, sys
t = json.loads(sys.argv[1]); ref = float(open(sys.argv[2]).read())
assert t['tokens'] == 16 * 255, t
assert abs(t['perplexity'] / ref - 1) <= 1e-3, (t['perplexity'], ref)
" "$total" "$tmp/ppl" || die "score: perplexity against Hugging Face"
[ "$(echo "$out" | grep -c '"line"')" -eq 16 ] || die "score --ids: one record a line"

# sliding windows: every token still scored once, with less context at most
# a little worse; a window as long as the sequences is the whole-sequence score
win=$("$fg" $m score --ids --json --context 100 --stride 30 "$tmp/ids.jsonl" 2>&1 | tail -n 1) || die "score windows: $win"
same=$("$fg" $m score --ids --json --context 256 "$tmp/ids.jsonl" 2>&1 | tail -n 1) || die "score 256: $same"
python3 -c "
import json, sys
a, w, s = (json.loads(x) for x in sys.argv[1:4])
assert w['tokens'] == a['tokens'] == s['tokens'], (a, w)
assert a['perplexity'] <= w['perplexity'] <= 1.05 * a['perplexity'], (a, w)
assert abs(s['perplexity'] - a['perplexity']) < 1e-5, (a, s)
" "$total" "$win" "$same" || die "score: windows $win against $total"

# a text and its token ids (bos first, as the engine reads text) score alike
printf 'import os\n\ndef main(argv):\n    for name in os.listdir(argv[1]):\n        print(name)' > "$tmp/t.py"
ids=$("$fg" $m tokenize "$(cat "$tmp/t.py")") || die "tokenize"
echo "[8191, ${ids#[}" > "$tmp/t.jsonl"
a=$("$fg" $m score --json "$tmp/t.py" 2>&1) || die "score text: $a"
b=$("$fg" $m score --json --ids "$tmp/t.jsonl" 2>&1 | tail -n 1) || die "score ids: $b"
python3 -c "
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
assert a['tokens'] == b['tokens'] > 10 and abs(a['perplexity'] - b['perplexity']) < 1e-6, (a, b)
" "$a" "$b" || die "score: text $a against ids $b"

# bad input: a record for the bad line, the others scored, exit 1; usage errors exit 2
printf '[8191, 10, 20]\n{"ids": [1]}\nnot json\n[8191, 99999]\n' > "$tmp/bad.jsonl"
out=$("$fg" $m score --ids "$tmp/bad.jsonl" 2>"$tmp/err"); rc=$?
[ $rc -eq 1 ] || die "score with bad lines must exit 1 (got $rc)"
echo "$out" | grep -q '"line": 1, "tokens": 2' || die "score: good line: $out"
echo "$out" | grep -q '"line":2,"error":"a line must be' || die "score: short line: $out"
echo "$out" | grep -q '"line":3,"error":"not valid JSON' || die "score: bad JSON: $out"
echo "$out" | grep -q '"line":4,"error":"token 1 is not an id in \[0, 8192)' || die "score: bad id: $out"
grep -q '3 of 4 lines failed' "$tmp/err" || die "score summary: $(cat "$tmp/err")"
"$fg" $m score --context 10 --stride 10 "$tmp/t.py" 2>/dev/null; [ $? -eq 2 ] || die "stride >= context"
"$fg" $m score "$tmp/missing" 2>/dev/null; [ $? -eq 1 ] || die "missing file"
"$fg" $m score 2>/dev/null; [ $? -eq 2 ] || die "no file"
: > "$tmp/empty"
"$fg" $m score "$tmp/empty" 2>/dev/null; [ $? -eq 1 ] || die "empty text"

# run-batch, echo + logprobs + max_tokens 0: Hugging Face's log-probabilities
"$fg" $m run-batch --input "$tmp/batch.jsonl" --output "$tmp/out.jsonl" || die "run-batch echo"
python3 - "$dir/heldout.json" "$tmp/out.jsonl" <<'PY' || die "run-batch echo+logprobs against Hugging Face"
import json, math, sys
h = json.load(open(sys.argv[1]))
for i, line in enumerate(open(sys.argv[2])):
    r = json.loads(line)
    assert r["custom_id"] == str(i) and r["usage"]["completion_tokens"] == 0, r
    lp = r["logprobs"]
    n = len(h["input_ids"][i])
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    worst = max(abs(a - b) for a, b in zip(lp["token_logprobs"][1:], h["token_logprobs"][i]))
    assert worst <= 1e-3, worst
    for t in range(1, n):
        top = lp["top_logprobs"][t]
        # the 2 most likely, plus the scored token when it is not among them
        assert 2 <= len(top) <= 3 and max(top.values()) <= 0, top
        assert lp["tokens"][t] in top and abs(top[lp["tokens"][t]] - lp["token_logprobs"][t]) < 1e-6
    offs = lp["text_offset"]
    assert offs == sorted(offs) and offs[0] == 0 and offs[-1] <= len(r["text"]), offs
PY

# A token that decodes to a NUL byte (GPT-2's byte 0, id 188 here) in an
# echoed prompt: the text goes on past it (as U+FFFD: texts are C strings),
# each token's offset is where its text begins in it.
echo '{"custom_id": "nul", "prompt_token_ids": [2, 995, 188, 995, 188], "max_tokens": 2, "echo": true, "logprobs": 1}' \
	> "$tmp/nul.jsonl"
"$fg" $m run-batch --input "$tmp/nul.jsonl" --output "$tmp/nul.out" || die "run-batch with a NUL token"
python3 - "$tmp/nul.out" <<'PY' || die "a NUL token cuts the echoed text short"
import json, sys
r = json.loads(open(sys.argv[1]).read())
lp, text = r["logprobs"], r["text"]
assert " world\ufffd world\ufffd" in text, repr(text)
assert len(lp["tokens"]) == 7 and "".join(lp["tokens"]) == text, (lp["tokens"], text)
at = 0
for tok, off in zip(lp["tokens"], lp["text_offset"]):
    assert off == at, (lp["text_offset"], lp["tokens"])
    at += len(tok)
PY
exit $fail
