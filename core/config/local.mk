# core/config
libfgcore_internal_la_SOURCES += core/config/schema.c core/config/config.c core/config/man.c
noinst_HEADERS += core/config/schema.h core/config/config.h
