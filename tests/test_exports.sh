#!/bin/sh
# tests/test_exports.sh - libfgcore.so exports its public API and nothing else:
#  - every defined dynamic symbol is a function (no data symbol leaks);
#  - each of them is declared with external linkage in an installed header
#    (include/fgcore/*.h): a program including every header and taking its
#    address compiles, and leaves it undefined for the library to provide
#    (a static inline helper of a header would be compiled in instead);
#  - conversely, every extern function of the headers is exported, so a
#    program written against them links.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ] || [ -z "${FGCORE_SRCDIR:-}" ]; then
	echo "FGCORE_BUILDDIR / FGCORE_SRCDIR are not set: run this test through make check" >&2
	exit 99
fi
so="$FGCORE_BUILDDIR/.libs/libfgcore.so"
if [ ! -e "$so" ]; then
	echo "no $so (configured with --disable-shared?): skipping"
	exit 77
fi
for tool in nm "${CC:-cc}"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "$tool not found: skipping"
		exit 77
	fi
done
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-test-exports.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# Linker-made symbols some toolchains leave in the dynamic table.
linker_syms=' _init _fini _edata _end __bss_start '

nm -D --defined-only "$so" >"$tmp/nm" || { echo "FAIL: nm -D $so"; exit 1; }
: >"$tmp/exported"
while read -r _addr type name; do
	name=${name%%@*}
	case "$linker_syms" in *" $name "*) continue ;; esac
	case "$type" in
	T | W | i) echo "$name" >>"$tmp/exported" ;;
	*) fail "libfgcore.so exports $name (nm type $type), not a function of the API" ;;
	esac
done <"$tmp/nm"
n=$(wc -l <"$tmp/exported")
echo "libfgcore.so exports $n functions"
[ "$n" -gt 0 ] || fail "libfgcore.so exports no function at all"

# Candidate names: every fg_...( of the headers outside comments and
# preprocessor lines; the compiler then says which are extern functions.
headers=$(ls "$FGCORE_SRCDIR"/include/fgcore/*.h) || exit 99
for h in $headers; do
	sed -e 's|/\*.*\*/||g' "$h" | awk '
		/\/\*/ { sub(/\/\*.*/, ""); print; skip = 1; next }
		skip && /\*\// { sub(/.*\*\//, ""); skip = 0 }
		!skip' | grep -v '^[[:space:]]*#' |
		grep -o 'fg_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//'
done | sort -u >"$tmp/candidates"
sort -u "$tmp/exported" "$tmp/candidates" >"$tmp/names"

# For each name, a program including every header and taking its address:
# a name the headers do not declare (or only as a macro) does not compile; an
# extern function stays undefined (U) in the object, a static inline does not.
for h in $headers; do
	echo "#include <fgcore/$(basename "$h")>"
done >"$tmp/includes.h"
: >"$tmp/extern"
while read -r name; do
	{ cat "$tmp/includes.h"; echo "void (*const fg_exports_probe)(void) = (void (*)(void))&$name;"; } \
		>"$tmp/one.c"
	if "$cc" -std=gnu11 -D_GNU_SOURCE -I"$FGCORE_SRCDIR/include" -c "$tmp/one.c" \
		-o "$tmp/one.o" 2>"$tmp/one.log" &&
		nm "$tmp/one.o" | grep -q "^[[:space:]]*U $name\$"; then
		echo "$name" >>"$tmp/extern"
	fi
done <"$tmp/names"

while read -r name; do
	grep -qx "$name" "$tmp/extern" ||
		fail "libfgcore.so exports $name, which no installed header declares extern"
done <"$tmp/exported"
while read -r name; do
	grep -qx "$name" "$tmp/exported" ||
		fail "$name is declared extern in an installed header but libfgcore.so does not export it"
done <"$tmp/extern"
echo "extern functions of the installed headers: $(wc -l <"$tmp/extern")"

if [ $failures -ne 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
exit 0
