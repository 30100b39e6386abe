# tests/serve.mk - `fgcore serve` driven by the openai client, raw HTTP,
# run-batch's answers and SIGTERM (test_serve); the requests lm-evaluation-
# harness and HELM send, the tokenizer endpoints, log-probabilities in a
# stream (test_serve_harness); slow-loris connections, request deadlines,
# per-address limits, pipelining and shutdowns that hostile clients cannot
# hold (test_serve_hostile); requests joining the batch that runs
# (test_serve_join); the last three use test_serve.py's server and skips.
TESTS += tests/test_serve.sh tests/test_serve_harness.sh tests/test_serve_hostile.sh \
	tests/test_serve_join.sh
EXTRA_DIST += tests/test_serve.sh tests/test_serve.py tests/test_serve_harness.sh \
	tests/test_serve_harness.py tests/test_serve_hostile.sh tests/test_serve_hostile.py \
	tests/test_serve_join.sh tests/test_serve_join.py
