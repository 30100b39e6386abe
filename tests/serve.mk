# tests/serve.mk - `fgcore serve` driven by the openai client, raw HTTP,
# run-batch's answers and SIGTERM (test_serve); the requests lm-evaluation-
# harness and HELM send, the tokenizer endpoints, log-probabilities in a
# stream (test_serve_harness, which uses test_serve.py's server and skips).
TESTS += tests/test_serve.sh tests/test_serve_harness.sh
EXTRA_DIST += tests/test_serve.sh tests/test_serve.py tests/test_serve_harness.sh \
	tests/test_serve_harness.py
