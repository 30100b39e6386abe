# core/backend
libfgcore_la_SOURCES += core/backend/backend.c core/backend/compute_ops.c
noinst_HEADERS += core/backend/backend.h
