#!/bin/sh
# tests/test_run_batch_guard.sh - run-batch's job against what could spoil it:
# a second run of the job (or another job on its output or journal) while it
# runs, a resume with other settings (model, batch shape, --order, ...), a
# file size limit (ulimit -f) on the journal or the output, and a journal
# edited by hand.  Each is refused with one line, touches nothing of the
# running job or the journal, and the job then finishes with the bytes of an
# uninterrupted run.  On the small trained OPT of $FGCORE_TESTDATA (seconds).
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
if [ -z "${FGCORE_TESTDATA:-}" ]; then
	echo "FGCORE_TESTDATA unset: skipped (the jobs run on its small OPT)"
	exit 77
fi
model="$FGCORE_TESTDATA/opt/opt-py-128x4"
[ -f "$model/config.json" ] || { echo "FAIL: $model missing"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 is missing (see .ci/deps)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-guard.XXXXXX") || exit 99
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG
unset FGCORE_TEST_RUN_BATCH_KILL FGCORE_TEST_RUN_BATCH_ENOSPC
cd "$tmp" || exit 99

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# run WANT_RC CMD...: with a time limit; stderr in $tmp/err
run() {
	want=$1
	shift
	timeout 120 "$@" 2>"$tmp/err"
	rc=$?
	printf 'ran: %s (exit %s)\n' "$*" "$rc" >&2
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(cat "$tmp/err")"
}

has_err() {
	grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

lines_of() {
	if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi
}

one_line() {
	[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "stderr is not one line: $(cat "$tmp/err")"
}

# The files of a job as they are (inode, size, bytes): what a refused run
# must leave as it was.
state() {
	for f in "$@"; do
		if [ -e "$f" ]; then
			printf '%s %s\n' "$(stat -c '%i %s' "$f")" "$(cksum <"$f")"
		else
			echo "$f absent"
		fi
	done
}

# 40 lines asking for log-probabilities (and the prompt echoed), an OpenAI
# Batch line, a malformed line; windows of 16 lines, GPU batches of 4.
awk 'BEGIN { for (i = 0; i < 40; i++) { s = "2"; for (k = 0; k < 1 + (i * 7) % 12; k++) s = s ", " (100 + i * 13 + k)
	printf "{\"custom_id\": \"g%d\", \"prompt_token_ids\": [%s], \"max_tokens\": %d, \"ignore_eos\": true, \"logprobs\": 2, \"echo\": %s}\n", i, s, 1 + i % 6, i % 2 ? "true" : "false" } }' >in.jsonl
printf '{"custom_id": "e", "method": "POST", "url": "/v1/completions", "body": {"prompt": [[2, 7, 8], [2, 9]], "max_tokens": 2, "logprobs": 1}}\n' >>in.jsonl
printf '{not json\n' >>in.jsonl
m="-o model.path=$model -o policy.gpu_batch_size=4"
rb="$fg $m run-batch --window 16"
run 1 $rb --input in.jsonl --output ref.jsonl
[ "$(wc -l <ref.jsonl)" -eq 42 ] || fail "one output line per input line"

# ---- one job per output: a second run is refused and touches nothing ------------
# The job reads its input from a FIFO: after its first window it holds its
# OUT.tmp and journal, waiting for more lines, as long as the test wants.
mkfifo feed
$rb --input - --output o.jsonl <feed 2>"$tmp/a.err" &
pid=$!
exec 3>feed
head -n 16 in.jsonl >&3
i=0
while [ "$(lines_of o.jsonl.journal)" -lt 17 ] && [ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -e o.jsonl.tmp ] && [ "$(wc -l <o.jsonl.journal)" -eq 17 ] ||
	fail "the first run did not finish its first window: $(cat "$tmp/a.err")"
before=$(state o.jsonl.tmp o.jsonl.journal)
run 1 $rb --input in.jsonl --output o.jsonl
has_err "fgcore: run-batch: --output o.jsonl is being written by another run-batch (it holds o.jsonl.tmp): wait for that run to end, or give another output"
one_line
# once refused for other settings, which deleted the running job's OUT.tmp
run 1 $fg $m run-batch --window 9 --input in.jsonl --output o.jsonl
has_err "is being written by another run-batch"
# another output, the same journal
run 1 $rb --input in.jsonl --output o2.jsonl --journal o.jsonl.journal
has_err "fgcore: run-batch: the journal o.jsonl.journal is in use by another run-batch"
one_line
[ ! -e o2.jsonl ] && [ ! -e o2.jsonl.tmp ] || fail "a refused run left o2.jsonl or its .tmp"
[ "$(state o.jsonl.tmp o.jsonl.journal)" = "$before" ] ||
	fail "refused runs changed the running job's files: $before -> $(state o.jsonl.tmp o.jsonl.journal)"
tail -n +17 in.jsonl >&3
exec 3>&-
wait $pid
rc=$?
pid=
[ $rc -eq 1 ] || fail "the first run exited $rc, expected 1 (one malformed line): $(cat "$tmp/a.err")"
cmp -s o.jsonl ref.jsonl || fail "the first run's output differs from an uninterrupted run's"
[ ! -e o.jsonl.tmp ] && [ ! -e o.jsonl.journal ] || fail "the finished job left its .tmp or journal"
# OUT.tmp that run-batch did not make: refused at once, never opened
rm -f o.jsonl
mkfifo o.jsonl.tmp
run 2 $rb --input in.jsonl --output o.jsonl
has_err "fgcore: run-batch: o.jsonl.tmp (where --output o.jsonl is written) is a FIFO (named pipe): remove it, or give another output"
one_line
rm -f o.jsonl.tmp o.jsonl.journal

# ---- a resume with other settings: refused, naming what differs ---------------------
# a copy of the model (its folder's name is the model's name in the records)
mkdir mc
cp -pr "$model" mc/
mcopy=mc/${model##*/}
FGCORE_TEST_RUN_BATCH_KILL=9 run 137 $fg -o model.path=$mcopy -o policy.gpu_batch_size=4 run-batch --window 16 --input in.jsonl --output o.jsonl
before=$(state o.jsonl.journal)
refused() {
	what=$1
	shift
	run 2 "$@"
	has_err "fgcore: run-batch: the journal o.jsonl.journal is another job's: $what differs ("
	has_err "); give the same settings to resume it, or remove o.jsonl.journal to start over"
	one_line
	[ "$(state o.jsonl.journal)" = "$before" ] || fail "refused for $what: the journal changed"
	[ ! -e o.jsonl.tmp ] && [ ! -e o.jsonl ] || fail "refused for $what: an output was left"
}
mc="-o model.path=$mcopy -o policy.gpu_batch_size=4"
refused model.path $rb --input in.jsonl --output o.jsonl
refused policy.gpu_batch_size $fg $mc -o policy.gpu_batch_size=8 run-batch --window 16 --input in.jsonl --output o.jsonl
refused policy.num_gpu_batches $fg $mc -o policy.num_gpu_batches=2 run-batch --window 16 --input in.jsonl --output o.jsonl
refused --order $fg $mc run-batch --window 16 --order input --input in.jsonl --output o.jsonl
refused --window $fg $mc run-batch --window 8 --input in.jsonl --output o.jsonl
refused compute.fused_max_m $fg $mc -o compute.fused_max_m=1000 run-batch --window 16 --input in.jsonl --output o.jsonl
refused generate.max_new_tokens $fg $mc --gen-len 3 run-batch --window 16 --input in.jsonl --output o.jsonl
refused generate.top_p $fg $mc -o generate.top_p=0.5 run-batch --window 16 --input in.jsonl --output o.jsonl
touch -d '2001-02-03 04:05:06' $mcopy/model.safetensors
refused "model.path's files" $fg $mc run-batch --window 16 --input in.jsonl --output o.jsonl
has_err "newest modified"
touch -r "$model/model.safetensors" $mcopy/model.safetensors
run 1 $fg $mc run-batch --window 16 --input in.jsonl --output o.jsonl
has_err "lines finished by an earlier run are kept"
cmp -s o.jsonl ref.jsonl || fail "resumed with the same settings: the output differs"
# a journal of the format before settings were named
printf 'fgcore-run-batch-journal 1 0123456789abcdef\n' >o.jsonl.journal
run 2 $rb --input in.jsonl --output o.jsonl
has_err "was written by an earlier fgcore (journal format 1)"
one_line
rm -f o.jsonl.journal

# ---- a file size limit (ulimit -f): one line, and the job resumes ---------------------
# The journal's header (a job killed before any record) plus ~6 KiB: the
# limit strikes in the middle of the records (sh counts 512-byte blocks).
rm -f o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=0 run 137 $rb --input in.jsonl --output o.jsonl
blocks=$(( ($(wc -c <o.jsonl.journal) + 6000) / 512 ))
rm -f o.jsonl*
run 1 sh -c "ulimit -f $blocks && exec $rb --input in.jsonl --output o.jsonl"
has_err "fgcore: run-batch: writing the journal o.jsonl.journal failed: File too large; nothing written to o.jsonl; the "
has_err " lines finished before are kept: make room and run the same command again to resume (the room short is the file size limit: raise ulimit -f)"
one_line
said=$(sed -n 's/.*; the \([0-9]*\) lines finished before are kept.*/\1/p' "$tmp/err")
[ ! -e o.jsonl ] && [ ! -e o.jsonl.tmp ] || fail "ulimit -f: an output was left"
run 1 $rb --input in.jsonl --output o.jsonl
kept=$(sed -n 's/.*: \([0-9]*\) lines finished by an earlier run are kept/\1/p' "$tmp/err")
[ -n "$said" ] && [ "$said" -gt 0 ] && [ "$said" = "$kept" ] ||
	fail "ulimit -f: the message said $said lines are kept, the resumed run kept $kept"
cmp -s o.jsonl ref.jsonl || fail "ulimit -f then resumed: the output differs"
# no room even for the journal's header (stderr through a pipe: a file
# would be under the limit too)
rm -f o.jsonl*
{ sh -c "ulimit -f 0 && exec $rb --input in.jsonl --output o.jsonl" 2>&1; echo "exit $?"; } | cat >"$tmp/err"
has_err "fgcore: run-batch: cannot write the journal o.jsonl.journal: File too large"
has_err "exit 1"
[ ! -e o.jsonl ] && [ ! -e o.jsonl.tmp ] && [ ! -e o.jsonl.journal ] || fail "ulimit -f 0: files were left"
# the output past the limit (the journal complete, killed before the rename)
rm -f o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=rename run 137 $rb --input in.jsonl --output o.jsonl
run 1 sh -c "ulimit -f $(( $(wc -c <ref.jsonl) / 1024 )) && exec $rb --input in.jsonl --output o.jsonl"
has_err "fgcore: run-batch: writing o.jsonl.tmp failed: File too large; removed it, nothing written to o.jsonl; the 41 lines finished are kept in o.jsonl.journal: make room and run the same command again to resume (the room short is the file size limit: raise ulimit -f)"
[ ! -e o.jsonl ] && [ ! -e o.jsonl.tmp ] && [ -e o.jsonl.journal ] ||
	fail "ulimit -f on the output: an output was left, or the journal lost"
run 1 $rb --input in.jsonl --output o.jsonl
cmp -s o.jsonl ref.jsonl || fail "ulimit -f on the output then resumed: the output differs"

# ---- an edited journal: refused with its file:line, never copied ------------------------
# edit.py JOURNAL LINE PYTHON-EXPR [rehash]: the record on LINE replaced by
# the expression of `r` (its text) and, with rehash, its hash made right again.
cat >edit.py <<'EOF'
import json, sys
def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h
path, n, expr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(path, 'rb').read().split(b'\n')
ln, ih, rh, r = lines[n - 1].split(b' ', 3)
r = eval(expr)
if len(sys.argv) > 4:
    rh = b'%016x' % fnv(r)
lines[n - 1] = b' '.join([ln, ih, rh, r])
open(path, 'wb').write(b'\n'.join(lines))
EOF
edited() {
	rm -f o.jsonl*
	FGCORE_TEST_RUN_BATCH_KILL=9 run 137 $rb --input in.jsonl --output o.jsonl
	python3 edit.py o.jsonl.journal 3 "$@" || fail "edit.py $*"
	before=$(state o.jsonl.journal)
	run 2 $rb -q --input in.jsonl --output o.jsonl
	one_line
	[ "$(state o.jsonl.journal)" = "$before" ] || fail "refused journal ($*): it changed"
	[ ! -e o.jsonl ] && [ ! -e o.jsonl.tmp ] || fail "refused journal ($*): an output was left"
}
edited "r.replace(b'\"text\":\"', b'\"text\":\"X', 1)"
has_err "fgcore: run-batch: o.jsonl.journal:3: not a record as run-batch writes them (damaged or edited: its form or its hash is wrong): restore the journal, or remove o.jsonl.journal to start over"
edited "r.replace(b'\"custom_id\":\"g', b'\"custom_id\":\"x', 1)" rehash
has_err "o.jsonl.journal:3: not input line "
has_err "'s record (its custom_id is \"x"
edited "json.dumps({k: v for k, v in json.loads(r).items() if k != 'usage'}, separators=(',', ':')).encode()" rehash
has_err "'s record (not a record {custom_id, text, token_ids, finish_reason, usage[, logprobs]} of the line's request)"
edited "r[:-1]" rehash
has_err "'s record (not valid JSON)"
edited "b'[1]'" rehash
has_err "'s record (not a JSON object)"
# a record twice
rm -f o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=9 run 137 $rb --input in.jsonl --output o.jsonl
sed -n 3p o.jsonl.journal >>o.jsonl.journal
run 2 $rb -q --input in.jsonl --output o.jsonl
has_err "o.jsonl.journal:$(lines_of o.jsonl.journal): a second record of input line "
one_line
# a record for the malformed line 42 (its input hash right): never journaled
rm -f o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=9 run 137 $rb --input in.jsonl --output o.jsonl
python3 - <<'EOF' || fail "appending a record for line 42"
def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h
line = open('in.jsonl', 'rb').read().split(b'\n')[41]
r = b'{"custom_id":null,"line":42,"error":"x"}'
open('o.jsonl.journal', 'ab').write(b'42 %016x %016x %s\n' % (fnv(line), fnv(r), r))
EOF
# (found when its window comes: the windows before run, their lines journaled)
at=$(lines_of o.jsonl.journal)
run 2 $rb -q --input in.jsonl --output o.jsonl
has_err "o.jsonl.journal:$at: not input line 42's record (input line 42 is malformed, and a malformed line's record is never journaled)"
one_line
# and a journal left as the job wrote it still resumes to the same bytes
rm -f o.jsonl*
FGCORE_TEST_RUN_BATCH_KILL=9 run 137 $rb --input in.jsonl --output o.jsonl
run 1 $rb --input in.jsonl --output o.jsonl
cmp -s o.jsonl ref.jsonl || fail "resumed: the output differs"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
