#!/bin/sh
# tests/test_optimize_presets.sh - planning for machines one does not have:
# the hardware presets (conf/hardware) by name and by file, `optimize
# --hardware` writing configurations that validate and fit the machine
# planned for (`bench --predict-only`), a `profile --output` file dropped into
# a preset folder, and bad names and files.
set -u
fg="$FGCORE_BUILDDIR/fgcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-presets-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
# the source tree's presets (make check sets it; say so when run by hand)
[ -n "${FGCORE_HARDWARE_PATH:-}" ] || { echo "FGCORE_HARDWARE_PATH is not set"; exit 1; }

# every preset is a [hardware] section the cost model can price with
for f in "$FGCORE_SRCDIR"/conf/hardware/*.ini; do
	name=$(basename "$f" .ini)
	out=$("$fg" -o model.path=dummy:opt-1.3b -o policy.gpu_batch_size=8 bench --predict-only \
		--hardware "$name" 2>&1) || die "preset $name: $out"
	echo "$out" | grep -q '^fits:' || die "preset $name: no fit line: $out"
	# by file, the same figures
	out2=$("$fg" -o model.path=dummy:opt-1.3b -o policy.gpu_batch_size=8 bench --predict-only \
		--hardware "$f" 2>&1)
	[ "$out" = "$out2" ] || die "preset $name by name and by file differ"
done

# bad names and files: one line naming the presets, usage status
out=$("$fg" optimize --hardware no-such-gpu 2>&1)
[ $? -eq 2 ] || die "an unknown preset must be a usage error: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q 'no such hardware preset.*a100-80g, h100, h200, l4, t4' ||
	die "unknown preset message: $out"
out=$("$fg" bench --predict-only --hardware "$tmp/missing.ini" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'cannot read that file.*t4' || die "missing file: $out"
printf '[policy]\ngpu_batch_size = 2\n' > "$tmp/nohw.ini"
out=$("$fg" optimize --hardware "$tmp/nohw.ini" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'no \[hardware\] keys' || die "a file without [hardware]: $out"
printf '[hardware]\nctog_bdw = fast\n' > "$tmp/badhw.ini"
out=$("$fg" optimize --hardware "$tmp/badhw.ini" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'badhw.ini:2' || die "a bad value must name its line: $out"

# OPT-175B on FlexGen's T4: weights mostly off the GPU, a configuration that
# validates and fits the T4
out=$("$fg" --model facebook/opt-175b --path _DUMMY_ optimize --hardware t4 --output "$tmp/t4.ini" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'built without GLPK'; then
	echo "no GLPK: optimize cases skipped"
	exit $fail
fi
[ $rc -eq 0 ] || die "optimize --hardware t4: $out"
"$fg" -c "$tmp/t4.ini" config >/dev/null 2>"$tmp/err" || die "the T4 plan does not validate: $(cat "$tmp/err")"
grep -q '^plugin = cuda_mem$' "$tmp/t4.ini" || die "the T4 plan does not name the GPU tier"
wg=$(sed -n 's/^percent = \([0-9]*\) .*/\1/p' "$tmp/t4.ini")
[ -n "$wg" ] && [ "$wg" -le 20 ] || die "the T4 plan keeps $wg% of OPT-175B's weights on the GPU"
out=$("$fg" -c "$tmp/t4.ini" bench --predict-only 2>&1) || die "the T4 plan does not fit: $out"
echo "$out" | grep -q '^fits:.*compute [0-9.]* of 16.000 GB' || die "T4 fit line: $out"

# OPT-30B on the H200 capped to 16 GiB: the cap goes into the plan
# (and the workload planned for into [bench])
out=$("$fg" --model facebook/opt-30b --path _DUMMY_ optimize --hardware h200 --gpu-mem 16G \
	--gen-len 40 --output "$tmp/h200.ini" 2>&1) || die "optimize --hardware h200 --gpu-mem 16G: $out"
"$fg" -c "$tmp/h200.ini" config >/dev/null 2>"$tmp/err" || die "the H200 plan does not validate: $(cat "$tmp/err")"
sed -n '/^\[bench\]/,/^\[/p' "$tmp/h200.ini" | grep -q '^gen_len = 40$' ||
	die "--gen-len 40 is not the written [bench] gen_len"
sed -n '/^\[tier.compute\]/,/^\[/p' "$tmp/h200.ini" | grep -q '^capacity = 16G$' ||
	die "--gpu-mem 16G did not cap [tier.compute]"
out=$("$fg" -c "$tmp/h200.ini" bench --predict-only 2>&1) || die "the H200 plan does not fit: $out"
echo "$out" | grep -q '^fits:.*compute [0-9.]* of 16.000 GB' || die "H200 fit line: $out"
# a plan that does not fit says so, with exit status 1
out=$("$fg" -c "$tmp/h200.ini" -o policy.percent='100 0 100 0 100 0' bench --predict-only 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q '^does not fit:.*compute [0-9.]* of 16.000 GB (over)' ||
	die "an over-capacity plan: $out"

# a stream refilling the batch: its steady state beside the static batch,
# --refill ranks by it (and writes the pick); refused where nothing joins
out=$("$fg" --model facebook/opt-6.7b --path _DUMMY_ optimize --hardware t4 --top 1 2>&1) ||
	die "optimize opt-6.7b on t4: $out"
echo "$out" | grep -q '^a stream refilling the batch (\[policy\] refill 0.25): .* rows a join, 4.00 joins per turnover: predicted total throughput [0-9.]* token/s (static batch [0-9.]*)' ||
	die "no steady state beside the static batch: $out"
out=$("$fg" --model facebook/opt-6.7b --path _DUMMY_ -o policy.refill=0.5 optimize --hardware t4 --top 1 \
	--refill --output "$tmp/refill.ini" 2>&1) || die "optimize --refill: $out"
echo "$out" | grep -q '^ranked by a stream.s steady state, \[policy\] refill 0.5' || die "optimize --refill: $out"
grep -q '^refill = 0.5$' "$tmp/refill.ini" || die "optimize --refill: the written configuration's refill"
out=$("$fg" --model facebook/opt-6.7b --path _DUMMY_ -o policy.refill=0 optimize --hardware t4 --refill 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q -- '--refill: \[policy\] refill is 0' || die "--refill with refill 0: $out"
out=$("$fg" --model facebook/opt-6.7b --path _DUMMY_ optimize --hardware t4 --refill --stages 2 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'one process only' || die "--refill --stages 2: $out"

# profile's output drops into a preset folder and is found by name
"$fg" -o model.path=dummy:opt-125m -o policy.gpu_batch_size=2 -o bench.prompt_len=16 \
	-o bench.gen_len=4 profile --quick --no-disk --copy-size 4M --min-time 0.01 \
	--output "$tmp/thisbox.ini" >/dev/null 2>"$tmp/err" || die "profile: $(cat "$tmp/err")"
grep -q 'shapes of opt-125m, GPU batch 2, prompt 16 + 4' "$tmp/thisbox.ini" ||
	die "profile does not say which shapes it measured"
out=$(FGCORE_HARDWARE_PATH="$tmp:$FGCORE_HARDWARE_PATH" "$fg" -o model.path=dummy:opt-125m \
	-o bench.prompt_len=16 -o bench.gen_len=4 optimize --hardware thisbox --max-batch 8 2>&1) ||
	die "optimize --hardware thisbox (a profile file in a preset folder): $out"

# one stage of a pipeline: planned with half the layers, written with how to run it
out=$("$fg" --model facebook/opt-30b --path _DUMMY_ optimize --hardware h200 --gpu-mem 16G \
	--stages 2 --output "$tmp/stage.ini" --top 1 2>&1) || die "optimize --stages 2: $out"
echo "$out" | grep -q 'a stage of 2: 24 of the 48 layers' || die "optimize --stages 2: $out"
echo "$out" | grep -q 'mpirun -np 2 fgcore -c' || die "optimize --stages 2: how to run it: $out"
"$fg" -c "$tmp/stage.ini" config >/dev/null 2>&1 || die "the stage's configuration does not validate"
out=$("$fg" --model facebook/opt-30b --path _DUMMY_ optimize --hardware h200 --stages 49 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'has 48 layers, at least one a stage' || die "--stages 49: $out"
exit $fail
