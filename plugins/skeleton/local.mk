# plugins/skeleton: the commented example plugins, one per kind.  Built for the
# tests (check_LTLIBRARIES) and never installed; doc/PLUGINS.md points at them.

check_LTLIBRARIES += plugins/skeleton/storage_skeleton.la \
	plugins/skeleton/compute_skeleton.la plugins/skeleton/codec_skeleton.la

plugins_skeleton_storage_skeleton_la_SOURCES = plugins/skeleton/storage_skeleton.c
plugins_skeleton_storage_skeleton_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_skeleton_storage_skeleton_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_skeleton_storage_skeleton_la_LIBADD = $(PTHREAD_LIBS)

plugins_skeleton_compute_skeleton_la_SOURCES = plugins/skeleton/compute_skeleton.c
plugins_skeleton_compute_skeleton_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_skeleton_compute_skeleton_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_skeleton_compute_skeleton_la_LIBADD = -lm

plugins_skeleton_codec_skeleton_la_SOURCES = plugins/skeleton/codec_skeleton.c
plugins_skeleton_codec_skeleton_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_skeleton_codec_skeleton_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
