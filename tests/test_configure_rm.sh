#!/bin/sh
# tests/test_configure_rm.sh - configure's cleanup after each check program
# ("rm -f core conftest.err ...", autoconf's, meant for core dumps) is quiet
# although the tree has a folder named core: the rm function configure.ac
# defines drops that operand while it is a folder, and still removes the rest;
# then configure itself, run in a folder with a core folder, says nothing of it.
set -u
src="${FGCORE_SRCDIR:-.}"
conf="$src/configure"
[ -r "$conf" ] || { echo "no $conf (run autoreconf)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-configure-rm-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

sed -n '/^rm () {$/,/^}$/p' "$conf" >"$tmp/rm.sh"
[ -s "$tmp/rm.sh" ] || { echo "FAIL: configure defines no rm function"; exit 1; }
cd "$tmp" || exit 99
mkdir core
: >conftest.err
: >"a file"
# shellcheck disable=SC1091
. ./rm.sh
rm -f core conftest.err "a file" 2>err
[ ! -s err ] || die "rm complained: $(cat err)"
[ -d core ] || die "the core folder was removed"
[ ! -e conftest.err ] && [ ! -e "a file" ] || die "the other operands were not removed"
# a core dump file (not a folder) is still removed
rmdir core && : >core
rm -f core 2>err
[ ! -e core ] && [ ! -s err ] || die "a core file was not removed"

# end to end: configure in a build folder that has a core folder (every used
# build tree has one: core/*.o) prints no rm complaint
mkdir -p "$tmp/build/core"
(cd "$tmp/build" && "$conf" --disable-sanitizers >out 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then
	echo "configure failed here ($rc): the end-to-end check skipped: $(tail -n 2 "$tmp/build/out")"
else
	grep -q 'rm: ' "$tmp/build/out" && die "configure: $(grep 'rm: ' "$tmp/build/out" | head -n 3)"
fi
exit $fail
