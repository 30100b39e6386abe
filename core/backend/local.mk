# core/backend
libfgcore_internal_la_SOURCES += core/backend/backend.c core/backend/compute_ops.c
noinst_HEADERS += core/backend/backend.h
