# plugins/codec
pkglib_LTLIBRARIES += plugins/codec/fp16.la
plugins_codec_fp16_la_SOURCES = plugins/codec/fp16.c
plugins_codec_fp16_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_codec_fp16_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
include $(srcdir)/plugins/codec/int4.mk
