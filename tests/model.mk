# tests/model.mk - OPT configuration and weight sources.
check_PROGRAMS += tests/test_model_config tests/test_weights
TESTS += tests/test_model_config tests/test_weights
tests_test_model_config_SOURCES = tests/test_model_config.c
tests_test_model_config_CFLAGS = $(TEST_CFLAGS)
tests_test_model_config_LDADD = $(TEST_LIBS)
tests_test_weights_SOURCES = tests/test_weights.c
tests_test_weights_CFLAGS = $(TEST_CFLAGS)
tests_test_weights_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
