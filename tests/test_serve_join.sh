#!/bin/sh
# tests/test_serve_join.sh - `fgcore serve` admitting requests into the batch
# it runs (tests/test_serve_join.py), run as test_serve.sh runs its test.
FGCORE_SERVE_TEST=test_serve_join.py
export FGCORE_SERVE_TEST
exec sh "$FGCORE_SRCDIR/tests/test_serve.sh"
