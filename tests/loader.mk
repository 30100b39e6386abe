# tests/loader.mk - the plugin loader, the configuration, the CLI, an
# out-of-tree plugin build against the installed headers, and the skeleton
# plugins through the conformance suites of their kinds.

# Broken plugins: each is refused by the loader for its own reason.
check_LTLIBRARIES += tests/plugins/bad_abi_major.la tests/plugins/newer_minor.la \
	tests/plugins/wrong_kind.la tests/plugins/no_entry.la tests/plugins/missing_hook.la tests/plugins/submit_no_reap.la \
	tests/plugins/name_mismatch.la tests/plugins/bad_option_table.la \
	tests/plugins/compute_no_rope.la tests/plugins/compute_no_supports.la \
	tests/plugins/compute_half_streams.la tests/plugins/compute_abi10.la \
	tests/plugins/compute_half_timers.la tests/plugins/entry_function.la \
	tests/plugins/entry_small.la tests/plugins/entry_misaligned.la \
	tests/plugins/storage_newer_minor.la tests/plugins/compute_storage_minor.la \
	tests/plugins/legacy_abi.la
noinst_HEADERS += tests/plugins/codec_ops.h tests/plugins/compute_ops.h

tests_plugins_bad_abi_major_la_SOURCES = tests/plugins/bad_abi_major.c
tests_plugins_bad_abi_major_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_bad_abi_major_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_newer_minor_la_SOURCES = tests/plugins/newer_minor.c
tests_plugins_newer_minor_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_newer_minor_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
# A minor per kind: storage's next minor refused, the same number on compute
# loaded when compute's minor is that far ahead; the pre-split FG_ABI_VERSION.
tests_plugins_storage_newer_minor_la_SOURCES = tests/plugins/storage_newer_minor.c
tests_plugins_storage_newer_minor_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_storage_newer_minor_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_storage_minor_la_SOURCES = tests/plugins/compute_storage_minor.c
tests_plugins_compute_storage_minor_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_storage_minor_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_legacy_abi_la_SOURCES = tests/plugins/legacy_abi.c
tests_plugins_legacy_abi_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_legacy_abi_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_wrong_kind_la_SOURCES = tests/plugins/wrong_kind.c
tests_plugins_wrong_kind_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_wrong_kind_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_no_entry_la_SOURCES = tests/plugins/no_entry.c
tests_plugins_no_entry_la_CFLAGS = $(PLUGIN_CFLAGS)
# exports its misspelled entry instead (an empty export list is not a valid
# version script)
tests_plugins_no_entry_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere \
	-export-symbols-regex '^fg_plugin_entyr$$' $(AM_LDFLAGS)
tests_plugins_missing_hook_la_SOURCES = tests/plugins/missing_hook.c
tests_plugins_missing_hook_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_missing_hook_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_submit_no_reap_la_SOURCES = tests/plugins/submit_no_reap.c
tests_plugins_submit_no_reap_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_submit_no_reap_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_name_mismatch_la_SOURCES = tests/plugins/name_mismatch.c
tests_plugins_name_mismatch_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_name_mismatch_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_bad_option_table_la_SOURCES = tests/plugins/bad_option_table.c
tests_plugins_bad_option_table_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_bad_option_table_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
# fg_plugin_entry that is no struct fg_plugin: a function, a smaller object,
# a misaligned one.
tests_plugins_entry_function_la_SOURCES = tests/plugins/entry_function.c
tests_plugins_entry_function_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_entry_function_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_entry_small_la_SOURCES = tests/plugins/entry_small.c
tests_plugins_entry_small_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_entry_small_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_entry_misaligned_la_SOURCES = tests/plugins/entry_misaligned.c
tests_plugins_entry_misaligned_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_entry_misaligned_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
# Compute ABI 1.1: without rope, without supports, half the stream hooks
# (refused); built for ABI 1.0 (loads, runs the 1.0 ops, refused 1.1 features).
tests_plugins_compute_half_timers_la_SOURCES = tests/plugins/compute_half_timers.c
tests_plugins_compute_half_timers_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_half_timers_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_no_rope_la_SOURCES = tests/plugins/compute_no_rope.c
tests_plugins_compute_no_rope_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_no_rope_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_no_supports_la_SOURCES = tests/plugins/compute_no_supports.c
tests_plugins_compute_no_supports_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_no_supports_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_half_streams_la_SOURCES = tests/plugins/compute_half_streams.c
tests_plugins_compute_half_streams_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_half_streams_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_abi10_la_SOURCES = tests/plugins/compute_abi10.c
tests_plugins_compute_abi10_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_compute_abi10_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_compute_abi10_la_LIBADD = -lm

check_PROGRAMS += tests/test_loader tests/test_config
tests_test_loader_SOURCES = tests/test_loader.c
tests_test_loader_CFLAGS = $(TEST_CFLAGS)
tests_test_loader_LDADD = $(TEST_LIBS) $(PTHREAD_LIBS)
tests_test_config_SOURCES = tests/test_config.c
tests_test_config_CFLAGS = $(TEST_CFLAGS)
tests_test_config_LDADD = $(TEST_LIBS)

TESTS += tests/test_loader tests/test_config tests/test_cli.sh tests/test_out_of_tree.sh \
	tests/test_skeleton_conformance.sh
EXTRA_DIST += tests/test_cli.sh tests/test_out_of_tree.sh tests/test_skeleton_conformance.sh \
	tests/out_of_tree/oot_q4.c tests/out_of_tree/oot_compare.c

# libfgcore.so exports exactly the extern functions of the installed headers.
TESTS += tests/test_exports.sh
EXTRA_DIST += tests/test_exports.sh

# fg_host.gpu_count: the GPUs the core counts without CUDA
check_PROGRAMS += tests/test_gpu_count
TESTS += tests/test_gpu_count
tests_test_gpu_count_SOURCES = tests/test_gpu_count.c
tests_test_gpu_count_CFLAGS = $(TEST_CFLAGS)
tests_test_gpu_count_LDADD = $(TEST_LIBS)

# the layers: core folders include downward, no include circle, the
# command's request path on the public header
TESTS += tests/test_layers.sh
EXTRA_DIST += tests/test_layers.sh
