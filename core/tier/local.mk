# core/tier: a storage plugin opened as a tier (accounting, bounds, default submit/reap),
# and the fault-injection shim stacked over it.
libfgcore_internal_la_SOURCES += core/tier/tier.c core/tier/fault_shim.c core/tier/fault_rules.c
noinst_HEADERS += core/tier/tier.h core/tier/fault_shim.h core/tier/fault_rules.h
