# tests/engine_checks.mk - pairings of plugins and policy the engine refuses
# before running, with the test plugin that provokes one (compute_abi10, an
# ABI 1.0 backend reading fp16 weights only, is built by tests/loader.mk).
check_LTLIBRARIES += tests/plugins/fake_device_mem.la
tests_plugins_fake_device_mem_la_SOURCES = tests/plugins/fake_device_mem.c
tests_plugins_fake_device_mem_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_fake_device_mem_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)

check_PROGRAMS += tests/test_engine_checks
TESTS += tests/test_engine_checks
tests_test_engine_checks_SOURCES = tests/test_engine_checks.c
tests_test_engine_checks_CFLAGS = $(TEST_CFLAGS)
tests_test_engine_checks_LDADD = $(TEST_LIBS)
