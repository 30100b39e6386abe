#!/bin/sh
# tests/test_serve_harness.sh - the evaluation harnesses' protocol against
# `fgcore serve` (tests/test_serve_harness.py), run as test_serve.sh runs its
# test.
FGCORE_SERVE_TEST=test_serve_harness.py
export FGCORE_SERVE_TEST
exec sh "$FGCORE_SRCDIR/tests/test_serve.sh"
