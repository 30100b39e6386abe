#!/bin/sh
# tests/test_nan_logits.sh - logits with no number above -inf (activations
# that overflowed, as fp16 can on a GPU) fail their own request with an error
# record that says so, whether they score the prompt, pick a greedy or a
# sampled token, and the job's other requests give what they give without
# it.  tests/plugins/nan_embed (cpu_blas with token 9's embedding NaN)
# stands in for the overflow, on the tiny OPT of $FGCORE_TESTDATA.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the jobs run on its tiny OPT)"
	exit 77
fi
model="$FGCORE_TESTDATA/opt/opt-tiny-64x2"
[ -f "$model/config.json" ] || { echo "FAIL: $model missing"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-nan.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
FGCORE_PLUGIN_PATH="$FGCORE_BUILDDIR/tests/plugins/.libs:$FGCORE_PLUGIN_PATH"
export FGCORE_CONFIG FGCORE_PLUGIN_PATH

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# Token 9 in a prompt poisons that row from there on: p1 scores a prompt
# through it, g1 and s1 (sampled) read it at their last prompt position;
# p0, g0 and s0 never see it.
cat >"$tmp/in.jsonl" <<'JSON'
{"custom_id": "p0", "prompt": [2, 5, 6, 7, 8], "max_tokens": 1, "echo": true, "logprobs": 2}
{"custom_id": "p1", "prompt": [2, 5, 9, 7, 8], "max_tokens": 1, "echo": true, "logprobs": 2}
{"custom_id": "g0", "prompt": [2, 11, 12], "max_tokens": 4, "ignore_eos": true}
{"custom_id": "g1", "prompt": [2, 11, 9], "max_tokens": 4, "ignore_eos": true}
{"custom_id": "s0", "prompt": [2, 13, 14], "max_tokens": 3, "temperature": 0.8, "seed": 3, "ignore_eos": true}
{"custom_id": "s1", "prompt": [2, 13, 9], "max_tokens": 3, "temperature": 0.8, "seed": 3, "ignore_eos": true}
JSON
m="-o model.path=$model -o policy.gpu_batch_size=6"
timeout 120 "$fg" $m run-batch --input "$tmp/in.jsonl" --output "$tmp/ref.jsonl" 2>"$tmp/err0"
rc=$?
[ $rc = 0 ] || fail "cpu_blas: exit $rc: $(cat "$tmp/err0")"
timeout 120 "$fg" $m -o compute.plugin=nan_embed -o compute.poison_id=9 run-batch \
	--input "$tmp/in.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/err"
rc=$?
# Some lines failed: exit 1, the job complete, the failures named.
[ $rc = 1 ] || fail "nan_embed: exit $rc, expected 1 (some lines failed): $(cat "$tmp/err")"
grep -q "3 of 6 lines failed" "$tmp/err" || fail "stderr does not count 3 failed lines: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/out.jsonl")" = 6 ] || fail "not one record per line: $(cat "$tmp/out.jsonl")"
for id in p0 g0 s0; do
	grep "\"custom_id\":\"$id\"" "$tmp/out.jsonl" >"$tmp/a"
	grep "\"custom_id\":\"$id\"" "$tmp/ref.jsonl" >"$tmp/b"
	cmp -s "$tmp/a" "$tmp/b" || fail "$id, never poisoned, differs from cpu_blas's: $(cat "$tmp/a")"
done
want() {
	grep "\"custom_id\":\"$1\"" "$tmp/out.jsonl" | grep -qF "$2" ||
		fail "$1: no error '$2': $(grep "\"custom_id\":\"$1\"" "$tmp/out.jsonl")"
}
want p1 '"error":"the logits scoring prompt token 3 held no number above -inf (NaN or -inf: the activations overflowed'
want g1 '"error":"the logits of new token 0 held no number above -inf'
want s1 '"error":"the logits of new token 0 held no number above -inf'
[ $failures = 0 ] || exit 1
echo "PASS: logits with no number fail their own request; the rest of the job as without"
