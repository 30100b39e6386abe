# core/exec: the executor - the forward pass of an effective batch in the
# block schedule: its buffers, weight slots, KV cache, host attention,
# logits, shared prompt prefixes, the tier-to-tier mover, device timing,
# the model's placed weights and a pipeline stage's per-step halves.
libfgcore_internal_la_SOURCES += core/exec/model.c core/exec/schedule.c core/exec/buffers.c \
	core/exec/weight_slots.c core/exec/kv_cache.c core/exec/host_attention.c \
	core/exec/logits.c core/exec/prefix.c core/exec/join.c core/exec/devtime.c core/exec/mover.c core/exec/pipe.c
noinst_HEADERS += core/exec/model.h core/exec/forward.h core/exec/forward_int.h \
	core/exec/devtime.h core/exec/mover.h core/exec/pipe.h
