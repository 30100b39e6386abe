# Tests: Check suites, one program per file; every fragment below adds its own.
# Plugins are found in the build tree; the Hugging Face reference data through
# FGCORE_TESTDATA (set by .ci/run; tests needing it skip with exit 77 when unset).
AM_TESTS_ENVIRONMENT = \
	FGCORE_PLUGIN_PATH='$(abs_top_builddir)/plugins/storage/.libs:$(abs_top_builddir)/plugins/compute/.libs:$(abs_top_builddir)/plugins/codec/.libs:$(abs_top_builddir)/plugins/transport/.libs'; \
	export FGCORE_PLUGIN_PATH; \
	FGCORE_BUILDDIR='$(abs_top_builddir)'; export FGCORE_BUILDDIR; \
	FGCORE_SRCDIR='$(abs_top_srcdir)'; export FGCORE_SRCDIR; \
	FGCORE_HARDWARE_PATH='$(abs_top_srcdir)/conf/hardware'; export FGCORE_HARDWARE_PATH; \
	ASAN_OPTIONS='detect_leaks=1:abort_on_error=1'; export ASAN_OPTIONS; \
	UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1'; export UBSAN_OPTIONS;

# the tests' shared pseudo-random generator and temporary folders
noinst_HEADERS += tests/test_rng.h tests/codec_test.h tests/test_tmpdir.h tests/logprob_ref.h tests/test_engine.h \
	tests/window_model.h tests/argmax.h

TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = libfgcore_internal.la $(CHECK_LIBS) -lm

include $(srcdir)/tests/loader.mk
include $(srcdir)/tests/storage.mk
include $(srcdir)/tests/compute.mk
include $(srcdir)/tests/tokenizer.mk
include $(srcdir)/tests/model.mk
include $(srcdir)/tests/engine.mk
include $(srcdir)/tests/int4.mk
include $(srcdir)/tests/fp8.mk
include $(srcdir)/tests/nvme.mk
include $(srcdir)/tests/gpu.mk
include $(srcdir)/tests/optimizer.mk
include $(srcdir)/tests/engine_checks.mk
include $(srcdir)/tests/budget.mk
include $(srcdir)/tests/hostile.mk
include $(srcdir)/tests/flexgen.mk
include $(srcdir)/tests/serve.mk
