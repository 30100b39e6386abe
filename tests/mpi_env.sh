# tests/mpi_env.sh - sourced by the tests that launch fgcore under mpirun:
# skips without MPI or the test data (fails when MPI is built but mpirun or
# a trained checkpoint is missing), a scratch folder $tmp removed at exit,
# `die` (a failure; the test ends with `exit $fail`), Open MPI set for a
# container, `run_np NP ARGS...` (bounded), and `shared_prefix_requests
# FILE` (12 run-batch requests in 4 groups whose prompts begin alike,
# echoed with logprobs).  Sets $fg, $td and $mpi, the launcher's command.
fg="$FGCORE_BUILDDIR/fgcore"
td=${FGCORE_TESTDATA:-}
if [ ! -e "$FGCORE_BUILDDIR/plugins/transport/mpi.la" ]; then
	echo "SKIP: fgcore was configured without MPI (no mpi transport plugin)"
	exit 77
fi
if [ -z "$td" ]; then
	echo "SKIP: FGCORE_TESTDATA is not set"
	exit 77
fi
command -v mpirun >/dev/null || { echo "FAIL: the mpi plugin is built but mpirun is not on PATH (Debian: openmpi-bin)"; exit 1; }
for m in opt/opt-py-128x4 llama/llama-py-128x4; do
	[ -f "$td/$m/config.json" ] || { echo "FAIL: $td/$m is missing"; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fgcore-$(basename "$0" .sh)-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

# Open MPI in a container: no network transports, no cross-memory attach
# (ptrace is often forbidden), no core binding on 2 shared cores; as root
# (CI), mpirun wants to be told.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_pml=ob1 OMPI_MCA_osc=pt2pt
# Under AddressSanitizer: Open MPI keeps what it allocates until exit, in
# modules it would unload; keep them loaded so these suppressions name them.
export OMPI_MCA_mca_base_component_disable_dlclose=1
printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libevent libhwloc mca_ \
	> "$tmp/lsan.supp"
export LSAN_OPTIONS="suppressions=$tmp/lsan.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
mpi="mpirun --oversubscribe -x FGCORE_PLUGIN_PATH -x LSAN_OPTIONS"
for v in ASAN_OPTIONS UBSAN_OPTIONS; do eval "[ -n \"\${$v:-}\" ]" && mpi="$mpi -x $v"; done
[ "$(id -u)" = 0 ] && mpi="$mpi --allow-run-as-root"
# LeakSanitizer's own tracer at times crashes at a process's exit ("Tracer
# caught signal 11 ... LeakSanitizer has encountered a fatal error": no leak
# found, the check itself failed; google/sanitizers#1353): `lsan_tries CMD`
# runs a command again when it ended so, up to five times in all (on a
# loaded 2-core machine it crashed three times running, once five), its
# earlier output dropped (CMD may be a function that first clears what a
# try leaves).  After five such crashes the command runs once more without
# the leak check, which says so on stderr: the test's own checks still
# judge it, a leak found in any try still fails it.  Its output is in
# $tmp/try.out and $tmp/try.err, its status returned.  Anything else stands.
lsan_tries() {
	for try in 1 2 3 4 5 6; do
		[ "$try" = 1 ] || sleep 3
		if [ "$try" = 6 ]; then
			echo "lsan_tries: leak check off after five tracer crashes: $*" >&2
			LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0" "$@" > "$tmp/try.out" 2> "$tmp/try.err"
			return $?
		fi
		"$@" > "$tmp/try.out" 2> "$tmp/try.err"
		rc=$?
		grep -q "LeakSanitizer has encountered a fatal error" "$tmp/try.err" || break
		echo "lsan_tries: LeakSanitizer's tracer crashed (try $try): $*" >&2
	done
	return $rc
}
# `run_np NP ARGS...`: fgcore's ARGS on NP ranks, bounded, through lsan_tries.
run_np() {
	np=$1
	shift
	lsan_tries timeout 120 $mpi -np "$np" "$@"
	rc=$?
	cat "$tmp/try.out"
	cat "$tmp/try.err" >&2
	return $rc
}
shared_prefix_requests() {
	python3 - "$1" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for q in range(4):
        for c in range(3):
            ids = [2] + [(37 * t + 11) % 8000 + 4 for t in range(20)] + \
                  [(13 * t + 101 * q) % 8000 + 4 for t in range(3 + q)] + [40 + c]
            f.write(json.dumps({"custom_id": f"q{q}c{c}", "prompt": ids, "max_tokens": 1 + c,
                                "echo": True, "logprobs": 2, "ignore_eos": True}) + "\n")
PY
}
