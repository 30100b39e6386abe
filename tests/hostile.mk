# tests/hostile.mk - hostile input: FIFOs where the loaders expect files,
# truncated plugins, run-batch's output and signals, generate's options, text
# that is not valid UTF-8 on its way to JSON.
check_PROGRAMS += tests/test_hostile_files tests/test_utf8_repair
TESTS += tests/test_hostile_files tests/test_utf8_repair tests/test_hostile_input.sh
EXTRA_DIST += tests/test_hostile_input.sh
tests_test_hostile_files_SOURCES = tests/test_hostile_files.c
tests_test_hostile_files_CFLAGS = $(TEST_CFLAGS)
tests_test_hostile_files_LDADD = $(TEST_LIBS)
tests_test_utf8_repair_SOURCES = tests/test_utf8_repair.c
tests_test_utf8_repair_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_utf8_repair_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)
