# The policy optimizer: memory model against the engine, LP, FlexGen's T4
# policies, infeasible inputs, monotonicity, [hardware], the profiler.
check_PROGRAMS += tests/test_optimizer
TESTS += tests/test_optimizer
tests_test_optimizer_SOURCES = tests/test_optimizer.c
tests_test_optimizer_CFLAGS = $(TEST_CFLAGS)
tests_test_optimizer_LDADD = $(TEST_LIBS)

# Hardware presets, optimize --hardware NAME|FILE, bench --predict-only.
TESTS += tests/test_optimize_presets.sh
EXTRA_DIST += tests/test_optimize_presets.sh

# optimize --replicas (data-parallel pipelines) and --gpus (every layout of G GPUs).
TESTS += tests/test_optimize_replicas.sh
EXTRA_DIST += tests/test_optimize_replicas.sh
