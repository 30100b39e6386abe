# core/util
libfgcore_internal_la_SOURCES += core/util/error.c core/util/parse.c
noinst_HEADERS += core/util/error.h core/util/parse.h core/util/clock.h
