# core/backend
libfgcore_la_SOURCES += core/backend/backend.c
noinst_HEADERS += core/backend/backend.h
