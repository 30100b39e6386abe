# core/optimizer: hardware description, memory layout, cost model, LP policy
# search (GLPK when configure found it) and the profiler.
libfgcore_internal_la_SOURCES += core/optimizer/hardware.c \
	core/optimizer/cost_model.c core/optimizer/optimize.c core/optimizer/profile.c \
	core/optimizer/bench_predict.c
noinst_HEADERS += core/optimizer/hardware.h \
	core/optimizer/cost_model.h core/optimizer/optimize.h core/optimizer/profile.h \
	core/optimizer/bench_predict.h
if HAVE_GLPK
libfgcore_internal_la_LIBADD += $(GLPK_LIBS)
endif
