# core/model: OPT configuration and weight sources (safetensors, FlexGen .npy, dummy).
libfgcore_internal_la_SOURCES += \
	core/model/fileio.c \
	core/model/opt_config.c \
	core/model/weight_names.c \
	core/model/safetensors.c \
	core/model/npy.c \
	core/model/dummy.c \
	core/model/weights.c
noinst_HEADERS += \
	core/model/fileio.h \
	core/model/opt_config.h \
	core/model/weights.h \
	core/model/safetensors.h \
	core/model/npy.h \
	core/model/dummy.h
