#!/bin/sh
# tests/test_hostile_input.sh - hostile input through the fgcore command line:
# FIFOs where files are expected (refused at once, never a hang), truncated
# plugins (refused, never SIGBUS), run-batch's output (checked before any
# work, never replaced where it must be written through, no cut .tmp left,
# never the input), SIGINT/SIGTERM (what was finished and where it is), a
# failing batch (the other requests still finish), and the options of
# generate and run-batch (unknown ones and missing values exit 2 with a line).
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
td=${FGCORE_TESTDATA:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-hostile.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# run WANT_RC CMD...: with a time limit (a hang is exit 124; the limit is
# far above the slowest run seen, the sanitizer build's on a loaded 2-core
# machine); stdout and stderr in $tmp/out and $tmp/err.
run() {
	want=$1
	shift
	timeout 300 "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	printf 'ran: %s (exit %s)\n' "$*" "$rc"
	[ "$rc" -ne 124 ] || fail "'$*' hung"
	[ "$rc" -lt 128 ] || [ "$want" -ge 128 ] || fail "'$*' died of signal $((rc - 128)): $(cat "$tmp/err")"
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(cat "$tmp/err")"
}

has_err() {
	grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

one_error_line() {
	n=$(wc -l <"$tmp/err")
	[ "$n" -eq 1 ] || fail "stderr has $n lines, expected one: $(cat "$tmp/err")"
	grep -q '^fgcore: ' "$tmp/err" || fail "stderr does not start with 'fgcore: '"
}

# ---- FIFOs where a file is expected: refused at once ---------------------------
mkfifo "$tmp/fifo.ini"
run 2 "$fg" -c "$tmp/fifo.ini" config
has_err "$tmp/fifo.ini: not a regular file (it is a FIFO (named pipe))"
one_error_line
run 0 "$fg" -c /dev/null config

cfg='{"activation_function": "relu", "bos_token_id": 2, "do_layer_norm_before": true,
"eos_token_id": 2, "ffn_dim": 256, "hidden_size": 64, "max_position_embeddings": 2048,
"model_type": "opt", "num_attention_heads": 4, "num_hidden_layers": 2, "pad_token_id": 1,
"vocab_size": 50272, "word_embed_proj_dim": 64, "enable_bias": true}'
mkdir "$tmp/m1" "$tmp/m2" "$tmp/m3" "$tmp/opt-125m-np"
mkfifo "$tmp/m1/config.json"
printf '%s\n' "$cfg" >"$tmp/m2/config.json"
mkfifo "$tmp/m2/model.safetensors"
printf '%s\n' "$cfg" >"$tmp/m3/config.json"
mkfifo "$tmp/m3/model.safetensors.index.json"
mkfifo "$tmp/opt-125m-np/decoder.embed_tokens.weight"
for f in m1/config.json m2/model.safetensors m3/model.safetensors.index.json \
	opt-125m-np/decoder.embed_tokens.weight; do
	run 1 "$fg" -o "model.path=$tmp/${f%/*}" -o bench.warmup=false bench
	has_err "$tmp/$f: not a regular file (it is a FIFO (named pipe))"
	one_error_line
done

printf '{"custom_id": "a", "prompt_token_ids": [2, 5], "max_tokens": 1}\n' >"$tmp/in.jsonl"
mkfifo "$tmp/in.fifo"
run 2 "$fg" -o model.path=dummy:opt-125m run-batch --input "$tmp/in.fifo" --output "$tmp/o.jsonl"
has_err "--input $tmp/in.fifo is a FIFO (named pipe): give a file, or '-' to read standard input"
one_error_line
run 2 "$fg" -o model.path=dummy:opt-125m generate --prompt-file "$tmp/in.fifo"
has_err "--prompt-file $tmp/in.fifo is not a regular file"
one_error_line
# an output FIFO nobody reads: at once, not when the results are ready
run 1 "$fg" -o model.path=dummy:opt-125m run-batch --input "$tmp/in.jsonl" --output "$tmp/in.fifo"
has_err "no process has it open for reading"
one_error_line

# ---- truncated plugins: refused and listed, never SIGBUS -----------------------
so="$FGCORE_BUILDDIR/plugins/codec/.libs/fp16.so"
pf="$FGCORE_BUILDDIR/plugins/storage/.libs/posix_file.so"
libs="$FGCORE_BUILDDIR/plugins/storage/.libs:$FGCORE_BUILDDIR/plugins/compute/.libs:$FGCORE_BUILDDIR/plugins/codec/.libs"
size=$(wc -c <"$so")
psize=$(wc -c <"$pf")
for cut in 100 1000 $((size / 2)) $((size - 1)); do
	rm -rf "$tmp/p"
	mkdir "$tmp/p"
	head -c "$cut" "$so" >"$tmp/p/fp16.so"
	FGCORE_PLUGIN_PATH="$tmp/p:$libs" run 0 "$fg" plugins
	grep -q "^fp16.so: refused: $tmp/p/fp16.so: not loadable as a plugin: truncated" "$tmp/out" ||
		fail "plugins: the $cut-byte fp16.so is not listed as truncated: $(grep fp16 "$tmp/out")"
	grep -q '^posix_file (storage plugin' "$tmp/out" || fail "plugins: the listing stopped"
	FGCORE_PLUGIN_PATH="$tmp/p:$libs" run 0 "$fg" config --man
	# the configuration names posix_file: a truncated one is refused by config
	head -c "$((cut * psize / size))" "$pf" >"$tmp/p/posix_file.so"
	FGCORE_PLUGIN_PATH="$tmp/p:$libs" run 2 "$fg" config
	has_err "$tmp/p/posix_file.so: not loadable as a plugin: truncated"
	one_error_line
done

# ---- run-batch: the output is checked before any work ---------------------------
# A model that cannot load: an output error reported instead proves the order.
nomodel="-o model.path=$tmp/no-such-model"
run 1 "$fg" $nomodel run-batch --input "$tmp/in.jsonl" --output "$tmp/missing/o.jsonl"
has_err "cannot create $tmp/missing/o.jsonl.tmp for --output $tmp/missing/o.jsonl: No such file or directory (does its folder exist?)"
one_error_line
mkdir "$tmp/outdir"
run 2 "$fg" $nomodel run-batch --input "$tmp/in.jsonl" --output "$tmp/outdir"
has_err "--output $tmp/outdir is a directory"
one_error_line
if [ "$(id -u)" -ne 0 ]; then
	mkdir "$tmp/ro" && chmod 500 "$tmp/ro"
	ro="$tmp/ro"
else
	ro=/sys # root writes anywhere but in sysfs
fi
if [ -d "$ro" ]; then
	run 1 "$fg" $nomodel run-batch --input "$tmp/in.jsonl" --output "$ro/fgcore-test-o.jsonl"
	grep -qE "cannot create $ro/fgcore-test-o.jsonl.tmp for --output $ro/fgcore-test-o.jsonl: (Permission denied|Read-only file system)$" \
		"$tmp/err" || fail "unwritable folder: $(cat "$tmp/err")"
	one_error_line
else
	echo "no unwritable folder to try (root without /sys): that case is skipped"
fi
[ ! -d "$tmp/ro" ] || chmod 700 "$tmp/ro"
# the requests are never replaced by the results: same path, a hard link, OUT.tmp
cp "$tmp/in.jsonl" "$tmp/keep.jsonl"
run 2 "$fg" $nomodel run-batch --input "$tmp/in.jsonl" --output "$tmp/in.jsonl"
has_err "is the input file"
one_error_line
ln "$tmp/in.jsonl" "$tmp/link.jsonl"
run 2 "$fg" $nomodel run-batch --input "$tmp/in.jsonl" --output "$tmp/link.jsonl"
has_err "is the input file"
cp "$tmp/in.jsonl" "$tmp/x.tmp"
run 2 "$fg" $nomodel run-batch --input "$tmp/x.tmp" --output "$tmp/x"
has_err "the input file"
cmp -s "$tmp/in.jsonl" "$tmp/keep.jsonl" && cmp -s "$tmp/x.tmp" "$tmp/keep.jsonl" ||
	fail "an input was changed"
run 2 "$fg" $nomodel run-batch --input - --output "$tmp/in.jsonl" <"$tmp/in.jsonl"
has_err "is the input file"
# nothing was created by the refusals
[ ! -e "$tmp/o.jsonl" ] && [ ! -e "$tmp/o.jsonl.tmp" ] && [ ! -e "$tmp/x" ] || fail "a refused run left files"

# ---- run-batch: where the results go -------------------------------------------
m="-o model.path=dummy:opt-125m -o policy.gpu_batch_size=2"
i=0
: >"$tmp/req.jsonl"
while [ $i -lt 6 ]; do
	printf '{"custom_id": "r%d", "prompt_token_ids": [2, %d, 200], "max_tokens": 3, "ignore_eos": true}\n' \
		$i $((100 + i)) >>"$tmp/req.jsonl"
	i=$((i + 1))
done
run 0 "$fg" $m run-batch --input "$tmp/req.jsonl" --output "$tmp/ref.jsonl"
[ "$(wc -l <"$tmp/ref.jsonl")" -eq 6 ] || fail "run-batch: 6 lines expected"
# '-' is standard output, no file named '-'
cd "$tmp" || exit 99
run 0 "$fg" $m run-batch --input req.jsonl --output -
cd - >/dev/null || exit 99
cmp -s "$tmp/out" "$tmp/ref.jsonl" || fail "--output - did not write the results to stdout"
[ ! -e "$tmp/-" ] || fail "--output - created a file named '-'"
# /dev/stdout is written through, also when stdout is a regular file
timeout 120 "$fg" $m run-batch --input "$tmp/req.jsonl" --output /dev/stdout >"$tmp/so.jsonl" 2>"$tmp/err" ||
	fail "--output /dev/stdout: $(cat "$tmp/err")"
cmp -s "$tmp/so.jsonl" "$tmp/ref.jsonl" || fail "--output /dev/stdout did not write through"
[ -L /dev/stdout ] || [ ! -e /dev/stdout.tmp ] || fail "/dev/stdout was replaced"
[ ! -e /dev/stdout.tmp ] || fail "--output /dev/stdout made /dev/stdout.tmp"
# a character device is written through: /dev/full reports ENOSPC
run 1 "$fg" $m run-batch --input "$tmp/req.jsonl" --output /dev/full
has_err "writing the results to /dev/full failed: No space left on device"
one_error_line
# a symbolic link: its target gets the results, the link stays
echo old >"$tmp/target.jsonl"
ln -s "$tmp/target.jsonl" "$tmp/sym.jsonl"
run 0 "$fg" $m run-batch --input "$tmp/req.jsonl" --output "$tmp/sym.jsonl"
[ -L "$tmp/sym.jsonl" ] || fail "the output symlink was replaced"
cmp -s "$tmp/target.jsonl" "$tmp/ref.jsonl" || fail "the symlink's target lacks the results"
# a write that fails (the file size limit: EFBIG) removes OUT.tmp, keeps OUT;
# the journal keeps what finished, and the same command finishes the job
echo old >"$tmp/lim.jsonl"
(ulimit -f 1 && trap '' XFSZ && exec timeout 120 "$fg" $m run-batch --input "$tmp/req.jsonl" \
	--output "$tmp/lim.jsonl") >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "a failed write must exit 1, not $rc: $(cat "$tmp/err")"
has_err "writing the journal $tmp/lim.jsonl.journal failed: File too large; nothing written to $tmp/lim.jsonl; the "
has_err "lines finished before are kept: make room and run the same command again to resume"
one_error_line
[ ! -e "$tmp/lim.jsonl.tmp" ] || fail "a cut .tmp was left behind"
[ "$(cat "$tmp/lim.jsonl")" = old ] || fail "the old output was changed by a failed run"
run 0 "$fg" $m run-batch --input "$tmp/req.jsonl" --output "$tmp/lim.jsonl"
has_err "lines finished by an earlier run are kept"
cmp -s "$tmp/lim.jsonl" "$tmp/ref.jsonl" || fail "the resumed job's output differs from an uninterrupted run's"
[ ! -e "$tmp/lim.jsonl.journal" ] || fail "the journal of a finished job was left"
# a stream output has no journal: a failed window write says so alone
(ulimit -f 1 && trap '' XFSZ && exec timeout 120 "$fg" $m run-batch --input "$tmp/req.jsonl" \
	--output - >"$tmp/lim2.jsonl") 2>"$tmp/err"
[ $? -eq 1 ] || fail "a failed write to stdout must exit 1: $(cat "$tmp/err")"
has_err "writing the results to stdout failed: File too large"
one_error_line

# ---- a batch that fails costs only what fails -----------------------------------
# Weights on the disk tier; the first read fails: the batch is run again one
# request at a time and every result is the one of an undisturbed run.
disk="$m -o tier.disk.dir=$tmp --percent 0 0 100 0 100 0"
run 0 "$fg" $disk run-batch --input "$tmp/req.jsonl" --output "$tmp/disk_ref.jsonl"
cmp -s "$tmp/disk_ref.jsonl" "$tmp/ref.jsonl" || fail "weights on disk changed the results"
FGCORE_POSIX_FILE_FAULT=read:EIO:1 run 0 "$fg" $disk run-batch --input "$tmp/req.jsonl" \
	--output "$tmp/fault.jsonl"
has_err "a batch of 2 requests failed"
cmp -s "$tmp/fault.jsonl" "$tmp/ref.jsonl" || fail "a failed batch lost or changed results"

# ---- signals: what was finished and where it is ----------------------------------
i=0
: >"$tmp/long.jsonl"
while [ $i -lt 40 ]; do
	printf '{"custom_id": "s%d", "prompt_token_ids": [2, %d], "max_tokens": 16, "ignore_eos": true}\n' \
		$i $((300 + i)) >>"$tmp/long.jsonl"
	i=$((i + 1))
done
# a file output: nothing written, the journal keeps what finished, the same
# command finishes the job with the output of an uninterrupted run
"$fg" $m run-batch --input "$tmp/long.jsonl" --output "$tmp/int.jsonl" 2>"$tmp/err" &
pid=$!
sleep 3
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "SIGINT: exit $rc, expected 130: $(cat "$tmp/err")"
one_error_line
[ ! -e "$tmp/int.jsonl.tmp" ] || fail "SIGINT left int.jsonl.tmp"
[ ! -e "$tmp/int.jsonl" ] || fail "SIGINT: an incomplete output was written"
if grep -q 'before any request finished; nothing written to' "$tmp/err"; then
	[ ! -e "$tmp/int.jsonl.journal" ] || fail "SIGINT before any result left a journal"
else
	has_err "fgcore: run-batch: interrupted (SIGINT) after the batch in flight: "
	has_err "kept in $tmp/int.jsonl.journal; nothing written to $tmp/int.jsonl: run the same command again to finish the job"
	done_n=$(sed -n 's/.*in flight: \([0-9]*\) lines finished.*/\1/p' "$tmp/err")
	echo "SIGINT after 3 s: ${done_n:-?} of 40 lines finished"
	[ "$(($(wc -l <"$tmp/int.jsonl.journal") - 1))" = "$done_n" ] || fail "SIGINT: $done_n lines announced, the journal differs"
fi
run 0 "$fg" $m run-batch --input "$tmp/long.jsonl" --output "$tmp/int.jsonl"
run 0 "$fg" $m run-batch --input "$tmp/long.jsonl" --output "$tmp/int_ref.jsonl" -q
[ ! -s "$tmp/err" ] || fail "-q: stderr is not empty: $(cat "$tmp/err")"
cmp -s "$tmp/int.jsonl" "$tmp/int_ref.jsonl" || fail "SIGINT then resumed: the output differs from an uninterrupted run's"
# a stream output (no journal): the finished results are written, the others
# get "interrupted" records
"$fg" $m run-batch --input "$tmp/long.jsonl" --output - >"$tmp/int2.jsonl" 2>"$tmp/err" &
pid=$!
sleep 3
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "SIGINT (stdout): exit $rc, expected 130: $(cat "$tmp/err")"
one_error_line
if ! grep -q 'before any request finished; nothing written to' "$tmp/err"; then
	has_err "fgcore: run-batch: interrupted (SIGINT) after the batch in flight: "
	done_n=$(sed -n 's/.*in flight: \([0-9]*\) of 40 lines finished.*/\1/p' "$tmp/err")
	[ "$(wc -l <"$tmp/int2.jsonl")" -eq 40 ] || fail "SIGINT: one record per input line expected"
	[ "$(grep -c '"token_ids"' "$tmp/int2.jsonl")" = "$done_n" ] || fail "SIGINT: $done_n results announced"
	[ "$(grep -c 'not run: the job was interrupted (SIGINT)' "$tmp/int2.jsonl")" = $((40 - done_n)) ] ||
		fail "SIGINT: the unfinished lines lack their records"
fi
# a second signal ends at once: nothing half-written is left
"$fg" $m run-batch --input "$tmp/long.jsonl" --output "$tmp/term.jsonl" 2>"$tmp/err" &
pid=$!
sleep 3
kill -TERM $pid
sleep 1
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM twice: exit $rc, expected 143: $(cat "$tmp/err")"
[ ! -e "$tmp/term.jsonl.tmp" ] || fail "SIGTERM left term.jsonl.tmp"
grep -q "^fgcore: run-batch: interrupted" "$tmp/err" || fail "SIGTERM: no message: $(cat "$tmp/err")"

# ---- options of generate and run-batch -------------------------------------------
for cmd in generate run-batch; do
	run 2 "$fg" $cmd --no-such-option
	has_err "fgcore: $cmd: unknown option '--no-such-option'"
	one_error_line
	run 2 "$fg" $cmd -Z
	has_err "fgcore: $cmd: unknown option '-Z'"
	one_error_line
done
run 2 "$fg" run-batch --input
has_err "fgcore: run-batch: option '--input' needs a value"
one_error_line
run 2 "$fg" generate --prompt x --max-new-tokens
has_err "fgcore: generate: option '--max-new-tokens' needs a value"
one_error_line
run 2 "$fg" generate --prompt x --stop 'a\qb'
has_err "unknown escape '\\q'"
one_error_line

# --gen-len: the default number of new tokens of run-batch (a request's max_tokens wins)
printf '{"custom_id": "g", "prompt_token_ids": [2, 7], "ignore_eos": true}\n{"custom_id": "h", "prompt_token_ids": [2, 7], "max_tokens": 2, "ignore_eos": true}\n' >"$tmp/gl.jsonl"
run 0 "$fg" $m run-batch --input "$tmp/gl.jsonl" --output - --gen-len 5
sed -n 1p "$tmp/out" | grep -q '"completion_tokens":5' || fail "--gen-len 5 not honoured: $(cat "$tmp/out")"
sed -n 2p "$tmp/out" | grep -q '"completion_tokens":2' || fail "max_tokens did not win over --gen-len"

if [ -n "$td" ]; then
	py="-o model.path=$td/opt/opt-py-128x4 -o model.tokenizer=$td/opt/opt-py-128x4"
	# --stop '\n' is a newline: the completion of "def f(x):" starts with one
	run 0 "$fg" $py generate --prompt 'def f(x):' --max-new-tokens 8
	[ "$(wc -l <"$tmp/out")" -gt 1 ] || fail "the model did not write a newline: $(cat "$tmp/out")"
	run 0 "$fg" $py generate --prompt 'def f(x):' --max-new-tokens 8 --stop '\n'
	[ "$(cat "$tmp/out")" = 'def f(x):' ] || fail "--stop '\\n' not a newline: $(cat "$tmp/out")"
	# --gen-len, and --max-new-tokens over it
	run 0 "$fg" $py generate --prompt 'import' --gen-len 3 --ignore-eos
	a=$(cat "$tmp/out")
	run 0 "$fg" $py generate --prompt 'import' --max-new-tokens 3 --ignore-eos
	[ "$a" = "$(cat "$tmp/out")" ] || fail "--gen-len 3 differs from --max-new-tokens 3"
	run 0 "$fg" $py generate --prompt 'import' --gen-len 9 --max-new-tokens 3 --ignore-eos
	[ "$a" = "$(cat "$tmp/out")" ] || fail "--max-new-tokens does not win over --gen-len"
	# several prompts: headed outputs; a prompt file of multi-line prompts
	printf '# one\ndef f(x):\n\f\nimport os\n\f\n' >"$tmp/prompts.txt"
	run 0 "$fg" $py generate --prompt-file "$tmp/prompts.txt" --max-new-tokens 4 --ignore-eos
	sed -n 1p "$tmp/out" | grep -qx '==> prompt 1 <==' || fail "no header: $(cat "$tmp/out")"
	sed -n 2,3p "$tmp/out" | tr '\n' '|' | grep -q '^# one|def f(x):' || fail "multi-line prompt: $(cat "$tmp/out")"
	grep -qx '==> prompt 2 <==' "$tmp/out" || fail "no second header: $(cat "$tmp/out")"
	[ "$(grep -c '^==> prompt' "$tmp/out")" -eq 2 ] || fail "two prompts expected: $(cat "$tmp/out")"
	grep -B1 '^==> prompt 2 <==' "$tmp/out" | head -1 | grep -qx '' || fail "no empty line between outputs"
	# one prompt per line when no line is a lone form feed
	printf 'import os\n\nimport sys\n' >"$tmp/lines.txt"
	run 0 "$fg" $py generate --prompt-file - --max-new-tokens 2 <"$tmp/lines.txt"
	[ "$(grep -c '^==> prompt' "$tmp/out")" -eq 2 ] || fail "line prompts: $(cat "$tmp/out")"
else
	echo "FGCORE_TESTDATA unset: the generate cases with a tokenizer are skipped"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
