libfgcore_internal_la_SOURCES += core/engine/engine.c core/engine/model.c core/engine/forward.c \
	core/engine/sample.c core/engine/generate.c core/engine/bench.c \
	core/engine/policy.c core/engine/mover.c
noinst_HEADERS += core/engine/engine.h core/engine/model.h core/engine/forward.h \
	core/engine/sample.h core/engine/bench.h \
	core/engine/policy.h core/engine/mover.h
