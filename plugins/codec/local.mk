# plugins/codec
pkglib_LTLIBRARIES += plugins/codec/fp16.la
plugins_codec_fp16_la_SOURCES = plugins/codec/fp16.c
plugins_codec_fp16_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_codec_fp16_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
include $(srcdir)/plugins/codec/int4.mk
# fp8_e4m3_rows (layout: include/fgcore/f8.h); threads through fgcore/fanout.h
pkglib_LTLIBRARIES += plugins/codec/fp8_e4m3_rows.la
plugins_codec_fp8_e4m3_rows_la_SOURCES = plugins/codec/fp8_e4m3_rows.c
plugins_codec_fp8_e4m3_rows_la_CFLAGS = $(PLUGIN_CFLAGS)
plugins_codec_fp8_e4m3_rows_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_codec_fp8_e4m3_rows_la_LIBADD = $(PTHREAD_LIBS)
