# core/engine: the engine (open, generate, bench) and the forward pass:
# the block schedule, its buffers, weight slots, KV cache, host attention, logits.
libfgcore_internal_la_SOURCES += core/engine/engine.c core/engine/model.c \
	core/engine/schedule.c core/engine/buffers.c core/engine/weight_slots.c \
	core/engine/kv_cache.c core/engine/host_attention.c core/engine/logits.c core/engine/devtime.c \
	core/engine/sample.c core/engine/logprob.c core/engine/generate.c core/engine/bench.c core/engine/mover.c \
	core/engine/pipeline.c
noinst_HEADERS += core/engine/engine.h core/engine/model.h core/engine/forward.h \
	core/engine/forward_int.h core/engine/devtime.h core/engine/sample.h core/engine/logprob.h core/engine/bench.h core/engine/mover.h \
	core/engine/pipeline.h
