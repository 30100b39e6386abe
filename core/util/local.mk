# core/util
libfgcore_internal_la_SOURCES += core/util/error.c core/util/parse.c core/util/fileio.c core/util/utf8.c
noinst_HEADERS += core/util/error.h core/util/parse.h core/util/fileio.h core/util/utf8.h core/util/clock.h
