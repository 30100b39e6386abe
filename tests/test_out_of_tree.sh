#!/bin/sh
# tests/test_out_of_tree.sh - a third party's view: install the tree into a
# staging directory (make install DESTDIR=...), build the skeleton plugins
# with nothing but `cc -shared -fPIC $(pkg-config --cflags fgcore)`, and load
# them with the installed fgcore.  tests/out_of_tree/oot_q4.c uses every SDK
# helper the in-tree plugins use (fgcore/half.h, q4.h, fanout.h, fp16_simd.h)
# and must give the installed int4_group64 codec's bytes.
set -u

if [ -z "${FGCORE_BUILDDIR:-}" ] || [ -z "${FGCORE_SRCDIR:-}" ]; then
	echo "FGCORE_BUILDDIR / FGCORE_SRCDIR are not set: run this test through make check" >&2
	exit 99
fi
if ! command -v pkg-config >/dev/null 2>&1; then
	echo "pkg-config not found: skipping the out-of-tree build"
	exit 77
fi
cc=${CC:-cc}
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "no C compiler ($cc): skipping the out-of-tree build"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-test-oot.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
dest="$tmp/dest"
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# A nested make must not join the jobserver of the `make check` running us.
echo "installing into $dest"
if ! (cd "$FGCORE_BUILDDIR" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
	make install DESTDIR="$dest" >"$tmp/install.log" 2>&1); then
	tail -n 40 "$tmp/install.log"
	echo "FAIL: make install DESTDIR=$dest"
	exit 1
fi

pc=$(find "$dest" -name fgcore.pc | head -n 1)
bin=$(find "$dest" -type f -path '*/bin/fgcore' | head -n 1)
lib=$(find "$dest" -name 'libfgcore.so*' | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no fgcore.pc installed"; exit 1; }
[ -n "$bin" ] || { echo "FAIL: no bin/fgcore installed"; exit 1; }
[ -n "$lib" ] || { echo "FAIL: no libfgcore.so installed"; exit 1; }
libdir=$(dirname "$lib")
pkglibdir="$libdir/fgcore"
for h in plugin tensor storage compute codec fgcore half q4 fanout fp16_simd sampling; do
	[ -n "$(find "$dest" -path "*/include/fgcore/$h.h")" ] || fail "fgcore/$h.h not installed"
done
[ -n "$(find "$dest" -path '*/man1/fgcore.1')" ] || fail "fgcore.1 not installed"
[ -n "$(find "$dest" -path '*/man5/fgcore.ini.5')" ] || fail "fgcore.ini.5 not installed"

# pkg-config from the staging directory: the .pc names the final prefix, the
# sysroot variable maps it into $dest.
PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$dest"
export PKG_CONFIG_PATH PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags fgcore) || { echo "FAIL: pkg-config --cflags fgcore"; exit 1; }
echo "pkg-config --cflags fgcore: $cflags"
case "$cflags" in
*"$dest"*) ;;
*) fail "cflags '$cflags' do not point into the staging directory" ;;
esac

# Only the installed headers: strict C11, every warning an error, no
# undefined symbol left for the executable to provide.
mkdir -p "$tmp/plugins"
for kind in codec storage compute; do
	src="$FGCORE_SRCDIR/plugins/skeleton/${kind}_skeleton.c"
	so="$tmp/plugins/${kind}_skeleton.so"
	echo "$cc -shared -fPIC $cflags ${kind}_skeleton.c"
	# shellcheck disable=SC2086
	if ! "$cc" -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden $cflags \
		"$src" -o "$so" -Wl,--no-undefined -lm -lpthread 2>"$tmp/cc.log"; then
		cat "$tmp/cc.log"
		fail "${kind}_skeleton.c does not build out of tree"
	fi
done
# The SDK helpers: a 4-bit codec on fgcore/q4.h, fanout.h, fp16_simd.h, half.h.
echo "$cc -shared -fPIC $cflags oot_q4.c"
# shellcheck disable=SC2086
if ! "$cc" -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden $cflags \
	"$FGCORE_SRCDIR/tests/out_of_tree/oot_q4.c" -o "$tmp/plugins/oot_q4.so" \
	-Wl,--no-undefined -lm -lpthread 2>"$tmp/cc.log"; then
	cat "$tmp/cc.log"
	fail "oot_q4.c does not build out of tree"
fi
# The comparing program loads the installed int4_group64: in a sanitizer
# build that plugin needs the ASan runtime first, so the program links it too.
san=
ldd "$pkglibdir/int4_group64.so" 2>/dev/null | grep -q libasan && san="-fsanitize=address,undefined"
# shellcheck disable=SC2086
if ! "$cc" -std=c11 -Wall -Wextra -Werror $san $cflags \
	"$FGCORE_SRCDIR/tests/out_of_tree/oot_compare.c" -o "$tmp/oot_compare" -ldl -lm \
	2>"$tmp/cc.log"; then
	cat "$tmp/cc.log"
	fail "oot_compare.c does not build out of tree"
fi
# The tiniest plugin, written here: a plugin needs nothing but the headers.
cat >"$tmp/tiny_codec.c" <<'EOF'
#include <string.h>
#include <fgcore/codec.h>

static uint64_t tiny_size(const struct fg_codec_shape *s) { return s->rows * s->cols * 4; }
static int tiny_enc(const struct fg_codec_shape *s, const float *src, void *dst)
{
	memcpy(dst, src, s->rows * s->cols * 4);
	return 0;
}
static int tiny_dec(const struct fg_codec_shape *s, const void *src, float *dst)
{
	memcpy(dst, src, s->rows * s->cols * 4);
	return 0;
}
static const struct fg_codec_ops tiny_ops = {
	.encoded_size = tiny_size, .encode_f32 = tiny_enc, .decode_f32 = tiny_dec,
};
FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version = FG_CODEC_ABI_VERSION, .kind = FG_PLUGIN_CODEC, .name = "tiny_codec",
	.description = "built by test_out_of_tree.sh", .ops = &tiny_ops,
};
EOF
# shellcheck disable=SC2086
"$cc" -shared -fPIC $cflags "$tmp/tiny_codec.c" -o "$tmp/plugins/tiny_codec.so" ||
	fail "tiny_codec.c does not build with cc -shared -fPIC \$(pkg-config --cflags fgcore)"
# The same written before each kind had its own minor (FG_ABI_VERSION, the
# shared version): old sources keep building and loading.
sed -e 's/FG_CODEC_ABI_VERSION/FG_ABI_VERSION/' -e 's/"tiny_codec"/"legacy_codec"/' \
	"$tmp/tiny_codec.c" >"$tmp/legacy_codec.c"
grep -q "abi_version = FG_ABI_VERSION," "$tmp/legacy_codec.c" || fail "legacy_codec.c: no FG_ABI_VERSION"
# shellcheck disable=SC2086
"$cc" -shared -fPIC $cflags "$tmp/legacy_codec.c" -o "$tmp/plugins/legacy_codec.so" ||
	fail "legacy_codec.c (FG_ABI_VERSION) does not build against the installed headers"

: >"$tmp/empty.ini"
installed() {
	env LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		FGCORE_CONFIG="$tmp/empty.ini" "$@"
}

installed env FGCORE_PLUGIN_PATH="$tmp/plugins" "$bin" plugins >"$tmp/out" 2>&1 ||
	fail "installed fgcore plugins exited $?: $(cat "$tmp/out")"
cat "$tmp/out"
# (any ABI version: they were built against these very headers)
for want in "codec_skeleton codec" "storage_skeleton storage" "compute_skeleton compute" \
	"tiny_codec codec" "legacy_codec codec" "oot_q4 codec"; do
	name=${want% *}
	kind=${want#* }
	grep -q "^$name ($kind plugin, ABI [0-9]*\.[0-9]*): usable\$" "$tmp/out" ||
		fail "installed fgcore plugins lacks '$name ($kind plugin, ABI ...): usable'"
done
grep -q "refused" "$tmp/out" && fail "a plugin built out of tree was refused"

# It works: the same bytes and values as the installed int4_group64 codec.
if [ -e "$pkglibdir/int4_group64.so" ] && [ -x "$tmp/oot_compare" ]; then
	"$tmp/oot_compare" "$tmp/plugins/oot_q4.so" "$pkglibdir/int4_group64.so" >"$tmp/out" 2>&1 ||
		fail "oot_q4 differs from the installed int4_group64: $(cat "$tmp/out")"
	cat "$tmp/out"
else
	fail "no installed int4_group64.so or no oot_compare to compare oot_q4 with"
fi

# The plugins installed with the tree load too.
if [ -d "$pkglibdir" ]; then
	installed env FGCORE_PLUGIN_PATH="$pkglibdir" "$bin" plugins >"$tmp/out" 2>&1 ||
		fail "installed fgcore plugins on $pkglibdir exited $?: $(cat "$tmp/out")"
	for so in "$pkglibdir"/*.so; do
		[ -e "$so" ] || continue
		name=$(basename "$so" .so)
		grep -qF "$name (" "$tmp/out" || fail "installed plugin $name not listed: $(cat "$tmp/out")"
	done
fi

# Configured through the installed fgcore, options checked against the
# out-of-tree plugin's table.
installed env FGCORE_PLUGIN_PATH="$tmp/plugins" "$bin" \
	-o compute.plugin=compute_skeleton -o tier.compute.plugin=storage_skeleton \
	-o tier.host.plugin=storage_skeleton -o tier.disk.plugin=storage_skeleton \
	-o tier.host.max_bytes=2G config >"$tmp/out" 2>&1 ||
	fail "installed fgcore config exited $?: $(cat "$tmp/out")"
grep -qF "max_bytes = 2G" "$tmp/out" || fail "config lacks the plugin option: $(cat "$tmp/out")"

if [ $failures -ne 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
exit 0
