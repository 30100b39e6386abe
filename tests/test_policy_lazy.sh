#!/bin/sh
# tests/test_policy_lazy.sh - the policy matrix (tests/test_policy) on the
# lazy_streams test backend: cpu_blas's ops queued on streams that run only
# when synced, each as late as its waits allow, over the fake_device_mem
# compute tier, so the engine takes a GPU's paths (bounce buffers, copies on
# the load and store streams).  A wait the schedule misses makes a consumer
# run before its producer: other tokens, every time.
if [ -z "${FGCORE_BUILDDIR:-}" ]; then
	echo "FGCORE_BUILDDIR is not set: run this test through make check" >&2
	exit 1
fi
FGCORE_PLUGIN_PATH="$FGCORE_BUILDDIR/tests/plugins/.libs:$FGCORE_PLUGIN_PATH"
export FGCORE_PLUGIN_PATH
exec env FGCORE_TEST_BACKEND=lazy_streams "$FGCORE_BUILDDIR/tests/test_policy"
