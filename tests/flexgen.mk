# FlexGen's command lines: its flags as argparse parses them (a unit test of
# cli/flexgen_flags.c, built into the test), the fgcore command line's errors,
# and every line of FlexGen's own benchmark suite run through `fgcore bench`.
check_PROGRAMS += tests/test_flexgen_flags
TESTS += tests/test_flexgen_flags
tests_test_flexgen_flags_SOURCES = tests/test_flexgen_flags.c cli/flexgen_flags.c cli/flexgen_flags.h
tests_test_flexgen_flags_CFLAGS = $(TEST_CFLAGS)
tests_test_flexgen_flags_LDADD = $(CHECK_LIBS) -lm

TESTS += tests/test_flexgen_cli.sh tests/test_flexgen_suite.sh tests/test_configure_rm.sh
EXTRA_DIST += tests/test_flexgen_cli.sh tests/test_flexgen_suite.sh tests/flexgen_bench_suite.txt \
	tests/test_configure_rm.sh

# sampling: the partial selection gives the full sort's token, bit for bit
check_PROGRAMS += tests/test_sample
TESTS += tests/test_sample
tests_test_sample_SOURCES = tests/test_sample.c
tests_test_sample_CFLAGS = $(TEST_CFLAGS)
tests_test_sample_LDADD = $(TEST_LIBS)
