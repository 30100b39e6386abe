# core/engine: an open engine (tiers, backends, model, tokenizer), a
# pipeline rank's worker loop, what it is (fg_engine_info) and what it
# ran (fg_engine_stats), and the bench run.
libfgcore_internal_la_SOURCES += core/engine/engine.c core/engine/worker.c \
	core/engine/bench.c
noinst_HEADERS += core/engine/engine.h core/engine/bench.h
