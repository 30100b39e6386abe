#!/bin/sh
# tests/test_flexgen_cli.sh - `fgcore bench` with FlexGen's flags, through the
# program: exit 2 with one "fgcore: ..." line for every unknown option, missing
# value and bad FlexGen flag (a 200-digit --percent and 100 KB arguments
# included: under ASan an overflow aborts), --help lists FlexGen's flags,
# --log-file appends FlexGen's lines, --verbose 0, the debug modes, --ab
# across plugins that carry their own options.
set -u
if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 99
fi
fg="$FGCORE_BUILDDIR/fgcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-flexgen-cli-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*" | cut -c1-400; fail=1; }

: >"$tmp/empty.ini"
FGCORE_CONFIG="$tmp/empty.ini"
export FGCORE_CONFIG
cpu="-o compute.plugin=cpu_blas -o tier.compute.plugin=pinned_host -o tier.host.plugin=pinned_host"
small="$cpu -o model.path=dummy:opt-125m -o bench.prompt_len=8 -o bench.gen_len=6 -o bench.warmup=false -o policy.gpu_batch_size=2"

# usage WANT_TEXT ARGS...: exit 2 and exactly one line "fgcore: ...WANT_TEXT..."
usage() {
	want=$1
	shift
	"$fg" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" -eq 2 ] || die "'$*' exited $rc, expected 2: $(head -c 300 "$tmp/err")"
	[ "$(wc -l <"$tmp/err")" -eq 1 ] || die "'$*': $(wc -l <"$tmp/err") lines on stderr: $(head -c 300 "$tmp/err")"
	grep -q '^fgcore: ' "$tmp/err" || die "'$*': no 'fgcore: ' line: $(head -c 300 "$tmp/err")"
	grep -qF -- "$want" "$tmp/err" || die "'$*': stderr lacks '$want': $(head -c 300 "$tmp/err")"
	[ ! -s "$tmp/out" ] || die "'$*' wrote to stdout"
}

# ---- bench's own options: never silent ---------------------------------------
usage "bench: unknown option '--bogus'" bench --bogus
usage "bench: unknown option '-x'" bench -x
usage "bench: option '--json' needs a value" bench --json
usage "bench: option '--ab' needs a value" bench --ab
usage "bench: --rounds 0: expected 1..64" bench --rounds 0
usage "bench: --rounds 3x: expected 1..64" bench --rounds 3x
usage "bench: unexpected argument 'extra'" bench extra
usage "bench: option '--predict=1' takes no value" bench --predict=1

# ---- FlexGen's flags: hostile values ---------------------------------------------
d200=$(printf '9%.0s' $(seq 200))
kb100=$(head -c 102400 /dev/zero | tr '\0' 9)
usage "--percent: '9999999999" bench --percent "$d200" 2 3 4 5 6
usage "is not an integer 0..100" bench --percent "$kb100" 2 3 4 5 6
usage "--percent needs six integers" bench --percent 1 2 3
usage "--percent needs six integers (wg wc cg cc hg hc), got 0" bench --percent
usage "--gpu-batch-size needs a value" bench --gpu-batch-size
usage "--gpu-batch-size: the value is empty" bench --gpu-batch-size ''
usage "--model: the value is empty" bench --model ''
usage "--path: the value is empty" bench --path=
usage "--gpu-batch-size 9999999" bench --gpu-batch-size "$kb100"
usage "--model and --path: too long" bench --model "$kb100" --path _DUMMY_
"$fg" bench --log-file "$kb100/x" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q 'cannot append to it: File name too long' "$tmp/err" || die "a 100 KB --log-file: $(cut -c1-300 "$tmp/err")"
usage "ambiguous option: --c could match --cut-gen-len, --cpu-cache-compute, --compress-weight, --compress-cache" bench --c
usage "ambiguous option: --se could match --sep-layer, --set" --se x bench
usage "--debug-mode: invalid choice 'fast' (choose from 'fewer_batch', 'breakdown')" bench --debug fast
usage "--attn-sparsity 0.1: FlexGen's top-k sparse decode attention is not implemented" bench --attn-sparsity 0.1
usage "--cpu-cache-compute takes no value" bench --cpu=1
usage "--overlap maybe: a boolean value is expected" bench --overlap=maybe
usage "--verbose needs a number" bench --verbose
usage "--log-file is a flag of FlexGen's benchmark: only \`fgcore bench\` takes it, not generate" generate --log-file x
usage "--gpu-batch-size 0:" $small bench --gpu-batch-size 0
# a 100 KB option name goes to fgcore's parser, which names it (clipped)
usage "unknown option '--99999" "--$kb100" bench
usage "bench: unknown option '--99999" bench "--$kb100"

# ---- --help lists FlexGen's flags ------------------------------------------------
"$fg" bench --help >"$tmp/out" 2>&1 || die "bench --help failed"
for f in --model --path --offload-dir --prompt-len --gen-len --cut-gen-len --debug-mode \
	--gpu-batch-size --num-gpu-batches --percent --overlap --sep-layer --pin-weight \
	--cpu-cache-compute --compress-weight --compress-cache --attn-sparsity --log-file \
	--no-log --verbose; do
	grep -q -- "$f" "$tmp/out" || die "bench --help lacks $f"
done

# ---- --log-file: FlexGen's five lines, appended; --no-log; --verbose 0 -------------
log="$tmp/run.log"
"$fg" $small bench --log-file "$log" >"$tmp/out" 2>&1 || die "bench --log-file: $(cat "$tmp/out")"
"$fg" $small bench --log-file="$log" --verbose=0 >"$tmp/out2" 2>&1 || die "bench --verbose 0"
[ "$(wc -l <"$log")" -eq 10 ] || die "two runs should append 10 lines: $(cat "$log")"
[ ! -s "$tmp/out2" ] || die "--verbose 0 printed: $(cat "$tmp/out2")"
sed -n 2p "$log" | grep -q '^peak gpu mem: [0-9.]* GB	projected: False$' || die "log line 2: $(sed -n 2p "$log")"
head -n 5 "$tmp/out" | sed -n 1p | cmp -s - "$(sed -n 1p "$log" >"$tmp/l1"; echo "$tmp/l1")" || die "stdout line 1 and log line 1 differ"
"$fg" $small bench --log-file "$log" --no-log >/dev/null 2>&1 || die "bench --no-log"
[ "$(wc -l <"$log")" -eq 10 ] || die "--no-log still wrote the log"
# a log that cannot be written fails before the run
out=$("$fg" $small -o bench.prompt_len=100000 bench --log-file "$tmp/no/such/dir/x.log" 2>&1)
[ $? -eq 1 ] || die "an unwritable --log-file must be a runtime error"
echo "$out" | grep -q "cannot append to it" || die "unwritable --log-file message: $out"
# --log-file auto: FlexGen's file name, in the current folder
(cd "$tmp" && "$fg" $small bench --model facebook/opt-125m --path _DUMMY_ --cpu --log-file auto >/dev/null 2>&1) ||
	die "bench --log-file auto"
[ -f "$tmp/fo-125m-gbs2-ngbs1-prompt8-gen6-percent-100-0-100-0-100-0-cpu-cache.log" ] ||
	die "--log-file auto: not FlexGen's name: $(ls "$tmp")"

# ---- debug modes: a few tokens timed, the rest projected ---------------------------
out=$("$fg" $small bench --debug fewer_batch 2>&1) || die "--debug fewer_batch: $out"
echo "$out" | grep -q 'projected: True' || die "fewer_batch is not projected: $out"
out=$("$fg" $small bench --debug-mode=breakdown 2>&1) || die "--debug-mode breakdown: $out"
echo "$out" | grep -q '^#layers: 12$' || die "breakdown: no #layers line: $out"
echo "$out" | grep -q '^#batches decoding: 60$' || die "breakdown: #batches decoding (5 x 12 x 1): $out"

# ---- FlexGen's defaults: prompt 512, gen 32 ----------------------------------------
out=$("$fg" $cpu -o model.path=dummy:opt-125m -o policy.gpu_batch_size=1 bench --cut-gen-len 4 --json "$tmp/d.json" --verbose 0 2>&1) ||
	die "bench with the defaults: $out"
grep -q '"prompt_len": 512,' "$tmp/d.json" && grep -q '"gen_len": 32,' "$tmp/d.json" ||
	die "bench's defaults are not FlexGen's 512/32: $(grep _len "$tmp/d.json")"

# ---- --ab between plugins: the options of one are not given to the other ----------
# posix_file's `workers` is no option of libaio_nvme (nor cpu_blas's threads of cublas)
out=$("$fg" $small -o tier.disk.workers=2 -o tier.disk.dir="$tmp" bench --ab tier.disk.plugin=posix_file,libaio_nvme,posix_file --rounds 1 2>&1)
echo "$out" | grep -q 'unknown key' && die "--ab gave posix_file's options to libaio_nvme: $out"
[ "$(echo "$out" | grep -c 'round 1 tier.disk.plugin=posix_file')" -eq 2 ] || die "--ab did not run posix_file twice: $out"
if [ -e "$FGCORE_BUILDDIR/plugins/compute/.libs/cublas.so" ]; then
	out=$("$fg" $small -o compute.threads=1 bench --ab compute.plugin=cpu_blas,cublas --rounds 1 2>&1)
	echo "$out" | grep -q 'unknown key' && die "--ab gave cpu_blas's threads to cublas: $out"
fi

# ---- optimize's advice is a command line that works ---------------------------------
"$fg" $cpu optimize >/dev/null 2>"$tmp/err"
prof=$(sed -n 's/.*run `fgcore -c CONFIG profile --output hw.ini`, then `fgcore -c CONFIG optimize --hardware hw.ini`.*/ok/p' "$tmp/err")
[ "$prof" = ok ] || die "optimize's advice changed: $(cat "$tmp/err")"
(cd "$tmp" && "$fg" -c "$tmp/empty.ini" $cpu profile --output hw.ini --quick --no-disk --copy-size 4M --hidden 256 --min-time 0.01 >/dev/null 2>&1) ||
	die "the advice's profile command failed"
(cd "$tmp" && "$fg" -c "$tmp/empty.ini" $cpu optimize --hardware hw.ini >"$tmp/out" 2>&1) ||
	die "the advice's optimize command failed: $(cat "$tmp/out")"
# optimize's own --gpu-batch-size (fix the batch) is not FlexGen's flag there
(cd "$tmp" && "$fg" -c "$tmp/empty.ini" $cpu optimize --hardware hw.ini --gpu-batch-size 8 --top 3 >"$tmp/out" 2>&1) ||
	die "optimize --gpu-batch-size 8: $(cat "$tmp/out")"
[ "$(grep -c '^[0-9]  *8x' "$tmp/out")" -ge 1 ] && ! grep -q '^[0-9]  *\([0-79]\|[0-9][0-9]\)x' "$tmp/out" ||
	die "optimize --gpu-batch-size 8 searched other batch sizes: $(cat "$tmp/out")"

# ---- fgcore(1): the generate example keeps its quotes; every FlexGen flag documented --
man1="${FGCORE_SRCDIR:-.}/doc/fgcore.1"
if command -v nroff >/dev/null 2>&1; then
	nroff -man "$man1" 2>/dev/null | col -b >"$tmp/man.raw"
	tr -s ' \t\n' ' ' <"$tmp/man.raw" >"$tmp/man.txt"
	sed -n '/^FLEXGEN FLAGS/,/^EXIT STATUS/p' "$tmp/man.raw" >"$tmp/man.flexgen"
	grep -qF 'generate --prompt "Paris is the capital city of" --max-new-tokens 16' "$tmp/man.txt" ||
		die "fgcore(1): the generate example lost its quotes"
	for f in --model --path --offload-dir --prompt-len --gen-len --cut-gen-len --debug-mode \
		--gpu-batch-size --num-gpu-batches --percent --overlap --sep-layer --pin-weight \
		--cpu-cache-compute --compress-weight --compress-cache --attn-sparsity --log-file \
		--no-log --verbose; do
		grep -q -- "$f" "$tmp/man.flexgen" || die "fgcore(1) FLEXGEN FLAGS lacks $f"
	done
else
	echo "nroff not found: the manual page checks skipped"
fi

exit $fail
