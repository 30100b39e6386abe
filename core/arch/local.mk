# core/arch: model families (one file each: hyper-parameters, tensor table, block bodies).
libfgcore_internal_la_SOURCES += core/arch/config.c core/arch/tensors.c core/arch/block.c core/arch/opt.c core/arch/llama.c \
	core/arch/gemma2.c
noinst_HEADERS += core/arch/arch.h core/arch/config.h core/arch/block.h
