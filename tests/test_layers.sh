#!/bin/sh
# tests/test_layers.sh - the source tree keeps its layers:
#  - a core folder includes only the folders below it (the order is
#    doc/ARCHITECTURE.md's), so no include circle can run between layers;
#  - no header includes one that, directly or through others, includes it
#    back;
#  - the request path of the command (generate, run-batch, score, serve and
#    their helpers) includes only <fgcore/...>, cli/ headers and core/util.
set -u
src=${FGCORE_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 99
order="optimizer request engine exec sampling dist plan model arch backend tier tokenizer config plugin util"
failures=0

rank() {
	i=0
	for l in $order; do
		[ "$l" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
	echo -1
}

# 1. layers include downward only
for dir in core/*/; do
	layer=$(basename "$dir")
	r=$(rank "$layer")
	if [ "$r" -lt 0 ]; then
		echo "core/$layer is not in the layer order of tests/test_layers.sh (and doc/ARCHITECTURE.md)"
		failures=$((failures + 1))
		continue
	fi
	for f in "$dir"*.c "$dir"*.h; do
		[ -e "$f" ] || continue
		for inc in $(sed -n 's|^#include "core/\([a-z_]*\)/.*|\1|p' "$f" | sort -u); do
			[ "$inc" = "$layer" ] && continue
			ri=$(rank "$inc")
			if [ "$ri" -le "$r" ]; then
				echo "$f includes core/$inc: core/$layer may include only the layers below it ($order)"
				failures=$((failures + 1))
			fi
		done
	done
done

# 2. no header reaches itself through its includes
edges=$(mktemp "${TMPDIR:-/tmp}/fgcore-layers.XXXXXX") || exit 99
trap 'rm -f "$edges"' EXIT
for h in core/*/*.h cli/*.h; do
	sed -n 's|^#include "\([a-z_/]*\.h\)".*|\1|p' "$h" | while read -r to; do
		echo "$h $to"
	done
done > "$edges"
cycle=$(awk '
	{ out[$1] = out[$1] " " $2 }
	function visit(n,   i, k, parts) {
		if (state[n] == 1) { found = found ? found : n; return }
		if (state[n] == 2) return
		state[n] = 1
		k = split(out[n], parts, " ")
		for (i = 1; i <= k; i++) visit(parts[i])
		state[n] = 2
	}
	END { for (n in out) visit(n); print found }' "$edges")
if [ -n "$cycle" ]; then
	echo "an include circle runs through $cycle"
	failures=$((failures + 1))
fi

# 3. the command's request path stands on the public header
for f in cli/cmd_generate.c cli/cmd_run_batch.c cli/cmd_score.c cli/cmd_serve.c \
	 cli/completion.c cli/completion.h cli/serve_queue.c cli/serve_queue.h \
	 cli/serve_http.c cli/serve_http.h cli/request.c cli/request.h \
	 cli/batch_journal.c cli/batch_journal.h cli/batch_progress.c cli/batch_progress.h; do
	[ -e "$f" ] || { echo "$f: listed here but missing"; failures=$((failures + 1)); continue; }
	bad=$(sed -n 's|^#include "\(core/[a-z_]*\)/.*|\1|p' "$f" | grep -v '^core/util$')
	if [ -n "$bad" ]; then
		echo "$f includes $(echo $bad): the request path may include only <fgcore/fgcore.h>, cli/ and core/util headers"
		failures=$((failures + 1))
	fi
done

if [ "$failures" -ne 0 ]; then
	echo "$failures layering problem(s)"
	exit 1
fi
echo "layers kept: $(echo $order | wc -w) core layers, no include circle, the request path on the public header"
