#!/bin/sh
# tests/test_cli.sh - the fgcore command line: exit codes (0 ok, 2 usage or
# configuration, 1 runtime), one-line "fgcore: ..." errors, `plugins` and
# `config`, -c / FGCORE_CONFIG / -o.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
skel="$FGCORE_BUILDDIR/plugins/skeleton/.libs"
bad="$FGCORE_BUILDDIR/tests/plugins/.libs"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-test-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# run WANT_RC CMD...: run it, keep stdout and stderr in $tmp/out, $tmp/err.
run() {
	want=$1
	shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	echo "ran: $* (exit $rc)"
	if [ "$rc" != "$want" ]; then
		fail "'$*' exited $rc, expected $want; stderr: $(cat "$tmp/err")"
	fi
}

has_out() {
	grep -qF -- "$1" "$tmp/out" || fail "stdout lacks '$1'"
}

has_err() {
	grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

# An error is exactly one line starting "fgcore: ".
one_error_line() {
	n=$(wc -l <"$tmp/err")
	[ "$n" -eq 1 ] || fail "stderr has $n lines, expected one: $(cat "$tmp/err")"
	grep -q '^fgcore: ' "$tmp/err" || fail "stderr does not start with 'fgcore: '"
}

# Never read an installed default.ini; the tests name their files.
: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG
FGCORE_PLUGIN_PATH="$skel"
export FGCORE_PLUGIN_PATH

# Every plugin section on a skeleton, so that `config` checks pass here.
skeletons="-o compute.plugin=compute_skeleton -o tier.compute.plugin=storage_skeleton \
-o tier.host.plugin=storage_skeleton -o tier.disk.plugin=storage_skeleton"

# ---- options, usage ------------------------------------------------------------
run 0 "$fg" --version
has_out "fgcore "
# The ABI versions this build speaks, a minor per plugin kind, from the
# installed headers (FG_ABI_MINOR: the shared part's, which old plugins declare).
minor_of() { # MACRO HEADER
	m=$(sed -n "s/^#define $1 \([0-9]*\)\$/\1/p" "$FGCORE_SRCDIR/include/fgcore/$2.h")
	[ -n "$m" ] || { echo "FAIL: no $1 in fgcore/$2.h" >&2; exit 1; }
	echo "$m"
}
smin=$(minor_of FG_STORAGE_ABI_MINOR storage) || exit 1
cmin=$(minor_of FG_COMPUTE_ABI_MINOR compute) || exit 1
kmin=$(minor_of FG_CODEC_ABI_MINOR codec) || exit 1
tmin=$(minor_of FG_TRANSPORT_ABI_MINOR transport) || exit 1
minor=$(minor_of FG_ABI_MINOR plugin) || exit 1
kinds="storage 1.$smin, compute 1.$cmin, codec 1.$kmin, transport 1.$tmin"
has_out "(plugin ABI 1: $kinds)"
run 0 "$fg" --help
has_out "usage: fgcore [-c CONFIG] [-o section.key=value]... [-v|-q] [COMMAND [ARGS]]"
has_out "plugins"
has_out "config"
run 2 "$fg" --bogus
has_err "fgcore: unknown option '--bogus'"
one_error_line
run 2 "$fg" -c
has_err "fgcore: option '-c' needs an argument"
one_error_line
run 2 "$fg" no_such_command
has_err "fgcore: unknown command 'no_such_command': the commands are "
has_err "plugins"
has_err "config"
one_error_line

# ---- plugins ---------------------------------------------------------------------
# Broken ones first: the listing goes on after a refusal.
run 0 env FGCORE_PLUGIN_PATH="$bad:$skel" "$fg" plugins
has_out "bad_abi_major.so: refused: $bad/bad_abi_major.so: built for ABI 2.0, this fgcore speaks ABI 1 ($kinds): rebuild"
# a newer minor is its kind's: the line names the kind and both versions
has_out "newer_minor.so: refused: $bad/newer_minor.so: codec plugin built for codec ABI 1.$((kmin + 1)), newer than this fgcore's codec ABI 1.$kmin: upgrade fgcore"
has_out "storage_newer_minor.so: refused: $bad/storage_newer_minor.so: storage plugin built for storage ABI 1.$((smin + 1)), newer than this fgcore's storage ABI 1.$smin"
# declared before the split, FG_ABI_VERSION: loads
has_out "legacy_abi (codec plugin, ABI 1.$minor): usable"
has_out "missing_hook.so: refused: $bad/missing_hook.so: storage plugin lacks the required hook 'read'"
has_out "no_entry.so: refused: $bad/no_entry.so: no fg_plugin_entry symbol"
has_out "wrong_kind.so: refused:"
has_out "name_mismatch.so: refused:"
has_out "bad_option_table.so: refused:"
has_out "storage_skeleton (storage plugin, ABI 1.$smin): usable"
has_out "compute_skeleton (compute plugin, ABI 1.$cmin): usable"
has_out "codec_skeleton (codec plugin, ABI 1.$kmin): usable"
has_out "    capabilities: addressable,async"
has_out "    file:         $skel/storage_skeleton.so"
grep -q "max_bytes" "$tmp/out" && fail "options listed without -v"
grep -q "    abi: " "$tmp/out" && fail "ABI line shown without -v"
run 0 "$fg" plugins -v
has_out "    abi:          storage 1.$smin, as this fgcore"
has_out "    abi:          compute 1.$cmin, as this fgcore"
has_out "    abi:          codec 1.$kmin, as this fgcore"
has_out "      max_bytes (size, default 1G): capacity this tier reports"
has_out "      alignment (int 64..65536, default 64):"
has_out "    options:      none"
# an older plugin of its kind: loads, without what came after its minor
run 0 env FGCORE_PLUGIN_PATH="$bad" "$fg" plugins -v
has_out "    abi:          compute 1.0, older than this fgcore's compute 1.$cmin: what the kind added after 1.0 is not used with it"
run 0 "$fg" -v plugins
has_out "      zero_fill (bool, default true): fill new regions with zeros"
run 2 "$fg" plugins --bogus
one_error_line
# The real plugins, when they are built.
for p in storage/pinned_host storage/posix_file compute/cpu_blas codec/fp16; do
	dir="$FGCORE_BUILDDIR/plugins/${p%/*}/.libs"
	name=${p#*/}
	if [ -f "$dir/$name.so" ]; then
		run 0 env FGCORE_PLUGIN_PATH="$dir" "$fg" plugins
		has_out "$name ("
	fi
done
# Nothing to list: a runtime error, unless plugins are installed.
FGCORE_PLUGIN_PATH="$tmp" "$fg" plugins >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ]; then
	[ $rc -eq 1 ] || fail "plugins on an empty path exited $rc"
	has_err "fgcore: no plugin found in $tmp:"
fi

# ---- config ----------------------------------------------------------------------
run 0 "$fg" $skeletons -o policy.gpu_batch_size=8 -o tier.host.max_bytes=2097152 config
has_out "[policy]"
has_out "gpu_batch_size = 8"
has_out "max_bytes = 2M"
has_out "check_finite = false"
has_out "[tier.disk]"
cp "$tmp/out" "$tmp/printed.ini"
# The printed configuration reads back to the same text.
run 0 "$fg" -c "$tmp/printed.ini" config
cmp -s "$tmp/out" "$tmp/printed.ini" || fail "config output does not round-trip"

# Values: file, then FGCORE_CONFIG vs -c, then -o.
printf '[policy]\ngpu_batch_size = 3\n' >"$tmp/three.ini"
printf '[policy]\ngpu_batch_size = 5\n' >"$tmp/five.ini"
run 0 env FGCORE_CONFIG="$tmp/three.ini" "$fg" $skeletons config
has_out "gpu_batch_size = 3"
run 0 env FGCORE_CONFIG="$tmp/three.ini" "$fg" -c "$tmp/five.ini" $skeletons config
has_out "gpu_batch_size = 5"
run 0 "$fg" -c "$tmp/five.ini" $skeletons -o policy.gpu_batch_size=7 config
has_out "gpu_batch_size = 7"

# Configuration errors: exit 2, one line naming the origin.
run 2 "$fg" -o policy.gpu_batch_size=abc config
has_err "fgcore: -o policy.gpu_batch_size=abc: not an integer, use an integer from 1 to 65536"
one_error_line
run 2 "$fg" -o policy.gpu_batch_size config
has_err "fgcore: -o policy.gpu_batch_size: expected section.key=value"
one_error_line
run 2 "$fg" -o polcy.gpu_batch_size=2 config
has_err "fgcore: -o polcy.gpu_batch_size=2: unknown section [polcy]"
one_error_line
run 2 "$fg" -c "$tmp/missing.ini" config
has_err "fgcore: $tmp/missing.ini: cannot open: No such file or directory"
one_error_line
run 2 env FGCORE_CONFIG="$tmp/missing.ini" "$fg" config
has_err "fgcore: $tmp/missing.ini: cannot open: No such file or directory"
printf '[policy]\n\ngpu_batch_size = x\n' >"$tmp/bad.ini"
run 2 "$fg" -c "$tmp/bad.ini" config
has_err "fgcore: $tmp/bad.ini:3: [policy] gpu_batch_size = 'x': not an integer"
one_error_line
run 2 "$fg" $skeletons -o tier.disk.zero_fill=maybe config
has_err "fgcore: -o tier.disk.zero_fill=maybe: not a boolean"
one_error_line
run 2 "$fg" $skeletons -o tier.disk.bogus=1 config
has_err "fgcore: -o tier.disk.bogus=1: unknown key for plugin storage_skeleton, the keys of [tier.disk] are plugin, capacity"
has_err ", max_bytes, zero_fill, alignment"
run 2 "$fg" $skeletons -o compute.plugin=not_built_anywhere config
has_err "fgcore: -o compute.plugin=not_built_anywhere: plugin 'not_built_anywhere' not found: no not_built_anywhere.so in $skel:"
printf '[compute]\nplugin = not_built_anywhere\n' >"$tmp/missing_plugin.ini"
run 2 "$fg" -c "$tmp/missing_plugin.ini" config
has_err "fgcore: $tmp/missing_plugin.ini:2: [compute] plugin = 'not_built_anywhere': plugin 'not_built_anywhere' not found"
one_error_line
one_error_line
run 2 "$fg" config --bogus
one_error_line

# The command comes from [fgcore] command when the line names none.
printf '[fgcore]\ncommand = plugins\n' >"$tmp/cmd.ini"
run 0 "$fg" -c "$tmp/cmd.ini"
has_out "storage_skeleton (storage plugin"
run 0 "$fg" $skeletons -o fgcore.command=config -q
has_out "[tier.compute]"

# Runtime error: the output cannot be written.
if [ -w /dev/full ]; then
	"$fg" $skeletons config >/dev/full 2>"$tmp/err"
	rc=$?
	[ $rc -eq 1 ] || fail "config > /dev/full exited $rc, expected 1"
	has_err "fgcore: "
	one_error_line
fi

# fgcore.ini(5)
run 0 "$fg" config --man
has_out ".TH FGCORE.INI 5"
has_out ".SS storage_skeleton (storage)"

if [ $failures -ne 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
exit 0
