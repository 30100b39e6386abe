#!/bin/sh
# tests/test_commands.sh - the generation commands end to end: bench (five
# FlexGen lines, --json, --ab, FlexGen flags), generate, run-batch (good and
# malformed lines, OpenAI envelope, atomic output), tokenize, and every file
# in conf/ (validated, then run small on the CPU).
set -u
fg="$FGCORE_BUILDDIR/fgcore"
td=${FGCORE_TESTDATA:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-cmd-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
small="-o bench.prompt_len=8 -o bench.gen_len=3 -o bench.warmup=false -o tier.disk.dir=$tmp"

# bench: FlexGen's five lines in order, then the breakdown; --json complete
out=$("$fg" -o model.path=dummy:opt-125m $small -o policy.gpu_batch_size=2 bench --json "$tmp/b.json" 2>&1) || die "bench failed: $out"
echo "$out" | sed -n 1p | grep -q '^model size: .* GB	cache size: .* GB	hidden size (p): .* GB$' || die "bench line 1: $out"
echo "$out" | sed -n 2p | grep -q '^peak gpu mem: [0-9.]* GB (compute tier: pinned_host, host memory)	projected: False$' || die "bench line 2: $out"
echo "$out" | sed -n 3p | grep -q '^prefill latency: .* s	prefill throughput: .* token/s$' || die "bench line 3"
echo "$out" | sed -n 4p | grep -q '^decode latency: .* s	decode throughput: .* token/s$' || die "bench line 4"
echo "$out" | sed -n 5p | grep -q '^total latency: .* s	total throughput: .* token/s$' || die "bench line 5"
grep -q '"total_throughput"' "$tmp/b.json" && grep -q '"peak_bytes"' "$tmp/b.json" || die "bench --json"
[ ! -e "$tmp/b.json.tmp" ] || die "bench left its temporary JSON"

# FlexGen's flags, anywhere on the line
out=$("$fg" $small bench --model facebook/opt-125m --path _DUMMY_ --percent 0 100 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --cut-gen-len 4 --gen-len 6 2>&1) || die "FlexGen flags: $out"
echo "$out" | grep -q 'projected: True' || die "cut_gen_len did not project: $out"
"$fg" bench --percent 1 2 3 >/dev/null 2>&1; [ $? -eq 2 ] || die "a short --percent must be a usage error"
"$fg" -o 'policy.percent=60 60 100 0 100 0' config >/dev/null 2>&1 && die "percent pairs above 100 accepted"

# --ab: both values, medians and ratios
out=$("$fg" -o model.path=dummy:opt-125m $small bench --ab policy.sep_layer=true,false --rounds 1 2>&1) || die "bench --ab: $out"
echo "$out" | grep -q 'policy.sep_layer=false .*(x' || die "bench --ab output: $out"

if [ -n "$td" ]; then
	m="-o model.path=$td/opt/opt-tiny-64x2 -o model.tokenizer=$td/tokenizer/gpt2"
	# generate: the prompt then its completion; seeded sampling repeats
	a=$("$fg" $m generate --prompt "Hello world" --max-new-tokens 5 --temperature 0.8 --seed 3 --ignore-eos 2>&1) || die "generate: $a"
	b=$("$fg" $m generate --prompt "Hello world" --max-new-tokens 5 --temperature 0.8 --seed 3 --ignore-eos 2>&1)
	[ "$a" = "$b" ] || die "same seed, other text: '$a' vs '$b'"
	case "$a" in "Hello world"*) ;; *) die "generate does not echo the prompt: $a" ;; esac
	"$fg" $m generate >/dev/null 2>&1; [ $? -eq 2 ] || die "generate without a prompt must be a usage error"

	# the Llama family: bench on the trained checkpoint, plain and with 4-bit weights and cache
	for extra in "" "-o policy.compress_weight=true -o policy.compress_cache=true"; do
		out=$("$fg" -o model.path="$td/llama/llama-py-128x4" $small $extra -o policy.gpu_batch_size=2 bench 2>&1) ||
			die "bench on llama-py-128x4 $extra: $out"
	done

	# run-batch: plain and enveloped requests, malformed lines get their own records
	cat > "$tmp/in.jsonl" <<'JSONL'
{"custom_id": "a", "prompt": "Hello world", "max_tokens": 4, "ignore_eos": true}
{"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt_token_ids": [2, 100, 200], "max_tokens": 3, "temperature": 0.7, "seed": 5}}
{"custom_id": "c", "prompt": 
{"custom_id": "d", "prompt": "x", "max_tokens": -1}
{"custom_id": "e", "prompt": "x", "best_of": 3, "temperature": 1}
{"custom_id": "f", "prompt_token_ids": [2, 99999999], "max_tokens": 2}
JSONL
	"$fg" $m run-batch --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/err"
	[ $? -eq 1 ] || die "run-batch with bad lines must exit 1"
	[ "$(wc -l < "$tmp/out.jsonl")" -eq 6 ] || die "run-batch: one output line per input line"
	sed -n 1p "$tmp/out.jsonl" | grep -q '"custom_id": *"a".*"finish_reason": *"length"' || die "run-batch line 1: $(sed -n 1p "$tmp/out.jsonl")"
	sed -n 1p "$tmp/out.jsonl" | grep -q '"completion_tokens": *4' || die "run-batch usage"
	sed -n 2p "$tmp/out.jsonl" | grep -q '"custom_id": *"b".*"response": *{"status_code": *200.*"object": *"text_completion"' || die "run-batch envelope: $(sed -n 2p "$tmp/out.jsonl")"
	sed -n 3p "$tmp/out.jsonl" | grep -q '"line": *3.*"error": *"not valid JSON' || die "run-batch bad JSON: $(sed -n 3p "$tmp/out.jsonl")"
	sed -n 4p "$tmp/out.jsonl" | grep -q '"custom_id": *"d".*max_tokens' || die "run-batch bad max_tokens"
	sed -n 5p "$tmp/out.jsonl" | grep -q '\\"best_of\\" (3) greater than \\"n\\" (1) with sampling' || die "run-batch unimplemented field: $(sed -n 5p "$tmp/out.jsonl")"
	sed -n 6p "$tmp/out.jsonl" | grep -q '"custom_id": *"f".*99999999' || die "run-batch bad id"
	grep -q '4 of 6 lines failed' "$tmp/err" || die "run-batch summary: $(cat "$tmp/err")"
	[ ! -e "$tmp/out.jsonl.tmp" ] || die "run-batch left its temporary file"
	"$fg" $m run-batch --input "$tmp/missing.jsonl" --output "$tmp/o2.jsonl" 2>/dev/null; [ $? -eq 1 ] || die "missing input"
	[ ! -e "$tmp/o2.jsonl" ] || die "run-batch wrote output for a missing input"

	# tokenize: GPT-2's ids for a golden text
	out=$("$fg" -o model.tokenizer=$td/tokenizer/gpt2 tokenize "Hello world" 2>&1)
	[ "$out" = "[15496, 995]" ] || die "tokenize: $out"
	# a folder holding only a tokenizer.json (the trained Llama's): its golden prompt's ids
	out=$("$fg" -o model.path="$td/llama/llama-py-128x4" tokenize "import inspect

" 2>&1)
	[ "$out" = "[320, 634, 1035, 806, 628]" ] || die "tokenize with tokenizer.json: $out"
else
	echo "FGCORE_TESTDATA unset: generate, run-batch and tokenize cases skipped"
fi
"$fg" -o model.path=dummy:opt-125m tokenize x >/dev/null 2>&1; [ $? -eq 2 ] || die "tokenize without a tokenizer must be a usage error"

# a failing disk stops the run with one clear line, no hang, no output passed off as complete
disk="-o model.path=dummy:opt-125m $small -o policy.gpu_batch_size=2"
out=$(FGCORE_POSIX_FILE_FAULT=read:EIO:3 timeout 120 "$fg" $disk bench --percent 0 0 100 0 100 0 --json "$tmp/f.json" 2>&1)
[ $? -eq 1 ] || die "EIO on a weight read must be a runtime error: $out"
echo "$out" | grep -q 'disk tier (posix_file): read of .* failed: Input/output error' || die "EIO message: $out"
[ ! -e "$tmp/f.json" ] || die "a failed bench wrote its report"
out=$(FGCORE_POSIX_FILE_FAULT=write:ENOSPC:2 timeout 120 "$fg" $disk bench --percent 100 0 0 0 100 0 2>&1)
[ $? -eq 1 ] || die "ENOSPC on a cache write must be a runtime error: $out"
echo "$out" | grep -q 'No space left on device' || die "ENOSPC message: $out"
out=$(timeout 120 "$fg" $disk -o tier.disk.capacity=1M bench --percent 0 0 100 0 100 0 2>&1)
[ $? -eq 1 ] || die "a full disk tier must be a runtime error: $out"
echo "$out" | grep -q 'tier disk (posix_file): cannot allocate' || die "disk capacity message: $out"

# a capped compute tier names itself, the bytes asked and the largest batch that fits
out=$("$fg" -o model.path=dummy:opt-125m -o tier.compute.capacity=400M -o policy.gpu_batch_size=64 -o bench.warmup=false bench 2>&1)
[ $? -eq 1 ] || die "an over-capacity batch must be a runtime error: $out"
echo "$out" | grep -q 'tier compute (pinned_host): a 1 x 64 batch .* needs .* the largest gpu_batch_size that fits is [0-9]' || die "capacity hint: $out"

# profile -> optimize -> run: a capacity given to optimize caps the written configuration
opt="-o model.path=dummy:opt-125m $small"
"$fg" $opt profile --quick --no-disk --hidden 256 --output "$tmp/hw.ini" >/dev/null 2>"$tmp/err" ||
	die "profile: $(cat "$tmp/err")"
out=$("$fg" $opt optimize --hardware "$tmp/hw.ini" --gpu-mem 200M --disk-mem 0 --max-batch 8 \
	--output "$tmp/pick.ini" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'built without GLPK'; then
	echo "no GLPK: optimize case skipped"
else
	[ $rc -eq 0 ] || die "optimize: $out"
	sed -n '/^\[tier.compute\]/,/^\[/p' "$tmp/pick.ini" | grep -q '^capacity = 200M$' ||
		die "optimize --gpu-mem 200M did not cap [tier.compute] in $tmp/pick.ini"
	"$fg" -c "$tmp/pick.ini" -o bench.gen_len=2 bench >/dev/null 2>"$tmp/err" ||
		die "the optimizer's configuration does not run: $(cat "$tmp/err")"
fi

# conf/: every file validates, and runs small with host tiers and cpu_blas
for f in "$FGCORE_SRCDIR"/conf/*.ini; do
	"$fg" -c "$f" config >/dev/null 2>"$tmp/err" || { die "$f: $(cat "$tmp/err")"; continue; }
	"$fg" -c "$f" $small -o model.path=dummy:opt-125m -o compute.plugin=cpu_blas \
		-o tier.compute.plugin=pinned_host -o tier.disk.plugin=posix_file \
		-o policy.gpu_batch_size=2 -o policy.num_gpu_batches=1 -o policy.cpu_cache_compute=false \
		-o policy.compress_weight=false -o policy.compress_cache=false -o bench.cut_gen_len=0 \
		bench >/dev/null 2>"$tmp/err" || die "$f does not run: $(cat "$tmp/err")"
done
exit $fail
