#!/bin/sh
# tests/test_skeleton_conformance.sh - the example plugins of plugins/skeleton
# must keep meeting the contract real plugins meet: run each kind's
# conformance suite with the skeletons in the plugin path (beside the
# reference plugins the suites compare against).
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
B=$FGCORE_BUILDDIR
skel="$B/plugins/skeleton/.libs"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-test-skel.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
ran=0
failed=0
for kind in storage compute codec; do
	suite="$B/tests/test_${kind}_conformance"
	if [ ! -x "$suite" ]; then
		echo "$suite is not built: the $kind skeleton is not checked"
		continue
	fi
	[ -f "$skel/${kind}_skeleton.so" ] || { echo "FAIL: $skel/${kind}_skeleton.so missing"; exit 1; }
	echo "== $kind conformance with ${kind}_skeleton"
	# The skeleton first; the reference plugins of the kind after it.
	# (the compute suite encodes its 4-bit cases with the int4_group64 codec)
	if FGCORE_PLUGIN_PATH="$skel:$B/plugins/$kind/.libs:$B/plugins/codec/.libs" "$suite" >"$tmp/$kind.log" 2>&1; then
		grep -E '^[0-9]+%: Checks' "$tmp/$kind.log"
	else
		tail -n 30 "$tmp/$kind.log"
		echo "FAIL: ${kind}_skeleton does not pass $suite"
		failed=$((failed + 1))
	fi
	if ! grep -q "${kind}_skeleton" "$tmp/$kind.log"; then
		echo "FAIL: $suite did not take up ${kind}_skeleton"
		failed=$((failed + 1))
	fi
	ran=$((ran + 1))
done
[ $failed -eq 0 ] || exit 1
[ $ran -gt 0 ] || exit 77
exit 0
