# core/tier: a storage plugin opened as a tier (accounting, bounds, default submit/reap).
libfgcore_internal_la_SOURCES += core/tier/tier.c
noinst_HEADERS += core/tier/tier.h
