# core/plugin
libfgcore_internal_la_SOURCES += core/plugin/loader.c
noinst_HEADERS += core/plugin/loader.h
