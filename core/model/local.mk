# core/model: weight sources (safetensors, FlexGen .npy, dummy).
libfgcore_internal_la_SOURCES += \
	core/model/safetensors.c \
	core/model/npy.c \
	core/model/dummy.c \
	core/model/weights.c
noinst_HEADERS += \
	core/model/weights.h \
	core/model/safetensors.h \
	core/model/npy.h \
	core/model/dummy.h
