# tests/serve.mk - `fgcore serve` driven by the openai client, raw HTTP,
# run-batch's answers, lm-evaluation-harness's request shapes, and SIGTERM.
TESTS += tests/test_serve.sh
EXTRA_DIST += tests/test_serve.sh tests/test_serve.py
