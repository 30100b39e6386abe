#!/bin/sh
# tests/test_serve_hostile.sh - `fgcore serve` against hostile clients
# (tests/test_serve_hostile.py), run as test_serve.sh runs its test.
FGCORE_SERVE_TEST=test_serve_hostile.py
export FGCORE_SERVE_TEST
exec sh "$FGCORE_SRCDIR/tests/test_serve.sh"
