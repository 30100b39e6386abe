#!/bin/sh
# tests/test_device_timing.sh - [bench] device_timing: the `device time:`
# phases (the compute backend's timers, compute ABI 1.2) add up to the
# measured run, in the report and in --json, for a resident and an
# offloaded policy (weights and cache on the host, CPU attention); without
# it there is no such line.
set -u
fg="$FGCORE_BUILDDIR/fgcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-dt-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
small="-o model.path=dummy:opt-125m -o policy.gpu_batch_size=2 -o bench.prompt_len=16 -o bench.gen_len=4 -o bench.warmup=false -o tier.disk.dir=$tmp"

out=$("$fg" $small bench 2>&1) || die "bench: $out"
echo "$out" | grep -q '^device time:' && die "device time without device_timing: $out"
for policy in "" "--percent 0 100 0 100 100 0 --cpu-cache-compute"; do
	out=$("$fg" $small -o bench.device_timing=true $policy bench --json "$tmp/b.json" 2>&1) ||
		die "bench $policy: $out"
	echo "$out" | grep '^device time:' || die "no device time line ($policy): $out"
	python3 - "$tmp/b.json" "$policy" <<'PY' || die "device time against the run ($policy)"
import json, sys
r = json.load(open(sys.argv[1]))
d = r["device_time_s"]
phases = ["compute", "wait_weights", "wait_cache", "wait_activations", "host_attention", "logits"]
assert all(d[p] >= 0 for p in phases), d
assert abs(sum(d[p] for p in phases) - d["total"]) < 1e-6, d
run = r["total_latency_s"]
# the marks span the measured steps: their sum is the run's time, less the
# host's work between steps (sampling, the step loop)
assert 0.9 * run <= d["total"] <= run * 1.001 + 1e-3, (d, run)
if sys.argv[2]:
    assert d["host_attention"] > 0 and d["wait_weights"] > 0, d
PY
done
exit $fail
