#!/bin/sh
# tests/test_exit_status.sh - the exit statuses fgcore(1) gives generate,
# score, tokenize, run-batch, bench and serve: 2 for what the command line or the
# configuration got wrong (an unknown option, an input that is not a regular
# file, a plugin that cannot be found or refuses an option, a bad [policy]),
# found before any work; 1 for what failed while running (an input that
# cannot be opened, a model that cannot be loaded).  Each with one line.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-status.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# run WANT_RC CMD...: stdin empty, a time limit (a FIFO must not hang it);
# stdout in $tmp/out, stderr in $tmp/err, which must be one line on failure
run() {
	want=$1
	shift
	timeout 60 "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
	rc=$?
	printf 'ran: %s (exit %s)\n' "$*" "$rc" >&2
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(cat "$tmp/err")"
	[ "$want" = 0 ] || [ "$(wc -l <"$tmp/err")" -eq 1 ] ||
		fail "'$*': stderr is not one line: $(cat "$tmp/err")"
}

has_err() {
	grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

mkdir "$tmp/dir"
mkfifo "$tmp/fifo"
echo "some text" >"$tmp/t.txt"
printf '{"custom_id": "a", "prompt_token_ids": [2, 5], "max_tokens": 1}\n' >"$tmp/in.jsonl"
d="-o model.path=dummy:opt-125m"

# an input that cannot be opened: 1, as run-batch's and score's
run 1 "$fg" $d generate --prompt-file "$tmp/missing"
has_err "fgcore: generate: cannot open $tmp/missing: No such file or directory"
run 1 "$fg" $d score "$tmp/missing"
run 1 "$fg" $d run-batch --input "$tmp/missing" --output "$tmp/o.jsonl"
# an input that is not a regular file: 2, and a FIFO never hangs
run 2 "$fg" $d generate --prompt-file "$tmp/dir"
run 2 "$fg" $d score "$tmp/dir"
has_err "fgcore: score: $tmp/dir is a directory: give a file, or '-' to read standard input"
run 2 "$fg" $d score "$tmp/fifo"
has_err "fgcore: score: $tmp/fifo is a FIFO (named pipe): give a file, or '-' to read standard input"
run 2 "$fg" $d run-batch --input "$tmp/fifo" --output "$tmp/o.jsonl"

# an unknown option: 2, tokenize's too (a TEXT that starts with '-' after --)
run 2 "$fg" $d tokenize --bogus
has_err "fgcore: tokenize: unknown option '--bogus': see fgcore tokenize --help"
run 2 "$fg" $d tokenize -x
run 2 "$fg" $d tokenize --
has_err "fgcore: tokenize: give one or more TEXT arguments"
run 0 "$fg" $d tokenize --help

# the configuration's plugins and [policy], as `fgcore config` checks them:
# 2, before any file is touched
for cmd in "generate --prompt x" "score $tmp/t.txt" \
	"run-batch --input $tmp/in.jsonl --output $tmp/o.jsonl" "bench" \
	"bench --ab policy.gpu_batch_size=1,2" "serve --port 0"; do
	run 2 "$fg" $d -o compute.no_such_key=1 $cmd
	has_err "fgcore: -o compute.no_such_key=1: unknown key for plugin"
	run 2 "$fg" $d -o compute.plugin=not_built_anywhere $cmd
	has_err "plugin 'not_built_anywhere' not found"
	run 2 "$fg" $d -o "policy.percent=90 20 100 0 100 0" $cmd
	has_err "90 + 20 exceed 100"
done
run 2 "$fg" $d -o compute.no_such_key=1 config
[ ! -e "$tmp/o.jsonl" ] && [ ! -e "$tmp/o.jsonl.tmp" ] && [ ! -e "$tmp/o.jsonl.journal" ] ||
	fail "a refused configuration left run-batch's files"
# a model that cannot be loaded: 1
run 1 "$fg" -o model.path="$tmp/no-such-model" generate --prompt x
run 1 "$fg" -o model.path="$tmp/no-such-model" score "$tmp/t.txt"

if [ -n "${FGCORE_TESTDATA:-}" ]; then
	tk="-o model.tokenizer=$FGCORE_TESTDATA/tokenizer/gpt2"
	run 0 "$fg" $tk tokenize -- -x "Hello world"
	[ "$(sed -n 2p "$tmp/out")" = "[15496, 995]" ] || fail "tokenize -- TEXT...: $(cat "$tmp/out")"
	run 0 "$fg" $tk tokenize -
	[ "$(cat "$tmp/out")" = "[12]" ] || fail "tokenize -: $(cat "$tmp/out")"
else
	echo "FGCORE_TESTDATA unset: tokenize's texts after -- not run (they need its GPT-2 tokenizer)"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
