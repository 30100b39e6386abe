# plugins/codec/int4.mk - the int4_group64 codec (layout: include/fgcore/q4.h).
pkglib_LTLIBRARIES += plugins/codec/int4_group64.la
plugins_codec_int4_group64_la_SOURCES = plugins/codec/int4_group64.c
plugins_codec_int4_group64_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_codec_int4_group64_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_codec_int4_group64_la_LIBADD = $(PTHREAD_LIBS)
EXTRA_DIST += doc/INT4.md
