#!/bin/sh
# tests/test_optimize_replicas.sh - `optimize --replicas` and `--gpus`: data-
# parallel replicas of a pipeline run R times one replica's throughput; --gpus
# compares every replicas x stages of that many GPUs, best first, marks those
# that do not fit and writes the best with its [distributed] replicas; bad
# values are one line and a usage status.
set -u
fg="$FGCORE_BUILDDIR/fgcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-replicas-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
[ -n "${FGCORE_HARDWARE_PATH:-}" ] || { echo "FGCORE_HARDWARE_PATH is not set"; exit 1; }
# a small model and a small search: fast; FlexGen's T4 with this build's
# host-memory compute tier, so that the written configurations validate here
sed 's/^compute_host_memory = .*/compute_host_memory = true/' "$FGCORE_SRCDIR/conf/hardware/t4.ini" > "$tmp/t4cpu.ini"
opt="-o model.path=dummy:opt-125m -o bench.prompt_len=32 -o bench.gen_len=8"
small="--hardware $tmp/t4cpu.ini --max-batch 16 --top 1"

# bad values and combinations: one line, usage status, before any search
for args in "--replicas 0" "--replicas x" "--replicas 70000" "--gpus 0" "--gpus -4" \
	"--gpus 4 --stages 2" "--replicas 2 --gpus 4"; do
	out=$("$fg" $opt optimize $small $args 2>&1)
	rc=$?
	[ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] || die "optimize $args: status $rc: $out"
done
out=$("$fg" $opt optimize $small --replicas 0 2>&1)
echo "$out" | grep -q -- '^fgcore: optimize: --replicas 0: out of range' || die "--replicas 0: $out"
out=$("$fg" $opt optimize $small --gpus 4 --stages 2 2>&1)
echo "$out" | grep -q -- 'give it without --stages' || die "--gpus with --stages: $out"

out=$("$fg" $opt optimize $small --stages 2 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'built without GLPK'; then
	echo "no GLPK: optimize cases skipped"
	exit $fail
fi
[ $rc -eq 0 ] || die "optimize --stages 2: $out"
one=$(echo "$out" | sed -n 's/^predicted total throughput: \([0-9.]*\) token\/s$/\1/p')
echo "$out" | grep -q 'job' && die "without --replicas, no job line: $out"

# two replicas of two stages: twice one replica's throughput
out=$("$fg" $opt optimize $small --stages 2 --replicas 2 --output "$tmp/r.ini" 2>&1) ||
	die "optimize --stages 2 --replicas 2: $out"
job=$(echo "$out" | sed -n 's/^predicted throughput of the job, 2 x 2 .* total \([0-9.]*\) token\/s$/\1/p')
[ -n "$one" ] && [ -n "$job" ] && awk -v a="$one" -v b="$job" 'BEGIN { d = b - 2 * a; exit !(d < 0.002 && d > -0.002) }' ||
	die "2 replicas: $job token/s, not twice $one: $out"
echo "$out" | grep -q '^a stage of 2: 6 of the 12 layers' || die "--replicas: the stage line: $out"
echo "$out" | grep -q 'mpirun -np 4 fgcore -c .*r.ini run-batch' || die "--replicas: how to run it: $out"
sed -n '/^\[distributed\]/,/^\[/p' "$tmp/r.ini" | grep -q '^replicas = 2$' ||
	die "--replicas 2 --output does not write [distributed] replicas = 2"
"$fg" -c "$tmp/r.ini" config >/dev/null 2>"$tmp/err" || die "the replicas' configuration does not validate: $(cat "$tmp/err")"

# four GPUs: 4x1, 2x2, 1x4, each priced, best first by the job's throughput
out=$("$fg" $opt optimize $small --gpus 4 --output "$tmp/g.ini" 2>&1) || die "optimize --gpus 4: $out"
echo "$out" | grep -q '4 GPUs: 3 layouts' || die "--gpus 4: $out"
rows=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /x/ { print $2 }' | tr '\n' ' ')
for l in 4x1 2x2 1x4; do
	case " $rows" in *" $l "*) ;; *) die "--gpus 4 lacks layout $l: $out" ;; esac
done
# rank, layout, batch, six percents, four flags, prefill, decode, total
tps=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /x/ { print $16 }')
[ "$(echo "$tps" | sort -g -r)" = "$tps" ] || die "--gpus 4: not best first: $out"
# the 2x2 row is --stages 2 --replicas 2's job
row=$(echo "$out" | awk '$2 == "2x2" { print $16 }')
[ "$row" = "$job" ] || die "--gpus 4: 2x2 at $row token/s, --stages 2 --replicas 2 at $job"
best=$(echo "$rows" | cut -d' ' -f1)
r=${best%x*}
s=${best#*x}
echo "$out" | grep -q "mpirun -np 4 fgcore\|fgcore -c .*g.ini bench" || die "--gpus 4: how to run it: $out"
got=$(sed -n '/^\[distributed\]/,/^\[/s/^replicas = //p' "$tmp/g.ini")
[ "$got" = "$r" ] || die "--gpus 4: best $best, written replicas = $got"
"$fg" -c "$tmp/g.ini" config >/dev/null 2>"$tmp/err" || die "the best layout's configuration does not validate: $(cat "$tmp/err")"
[ "$s" -ge 1 ] || die "--gpus 4: best $best"

# layouts that do not fit are marked, after those that do: OPT-1.3B in 1 + 1
# GiB without compression needs more than one stage; no layout fits: status 1
big="-o model.path=dummy:opt-1.3b -o bench.prompt_len=32 -o bench.gen_len=8"
out=$("$fg" $big optimize $small --no-compress --gpu-mem 1G --cpu-mem 1G --disk-mem 0 --gpus 4 2>&1) ||
	die "optimize --gpus 4 (OPT-1.3B in 1 + 1 GiB): $out"
echo "$out" | grep -q '^[12]  *1x4 ' || die "--gpus 4: 1x4 fits: $out"
last=$(echo "$out" | sed -n '/^rank layout/,/^best:/p' | sed -n '$!p' | tail -n 1)
echo "$last" | grep -q '^-  *4x1  *does not fit: needs [0-9.]* GB more' || die "--gpus 4: 4x1 not marked last: $out"
out=$("$fg" $big optimize $small --no-compress --gpu-mem 200M --cpu-mem 200M --disk-mem 0 --gpus 2 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q '^fgcore: optimize: no layout of 2 GPUs fits; with 2 stages: ' ||
	die "--gpus 2 that fits nowhere: $out"
exit $fail
