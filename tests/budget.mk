# tests/budget.mk - memory refused before it is taken: bench's check before its
# warm-up, the host's logits buffers in the plan and on the host tier, batches
# sized to the requests, and the one budget of the host-memory tiers (faked
# with storage_skeleton's max_bytes, built by plugins/skeleton/local.mk).
check_PROGRAMS += tests/test_budget
TESTS += tests/test_budget
tests_test_budget_SOURCES = tests/test_budget.c
tests_test_budget_CFLAGS = $(TEST_CFLAGS)
tests_test_budget_LDADD = $(TEST_LIBS)
