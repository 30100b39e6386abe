# core/plan: the policy and the memory plan (placement and every run buffer's bytes).
libfgcore_internal_la_SOURCES += core/plan/policy.c core/plan/plan.c
noinst_HEADERS += core/plan/policy.h core/plan/plan.h
