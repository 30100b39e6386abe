# core/plugin
libfgcore_internal_la_SOURCES += core/plugin/loader.c core/plugin/elf_check.c
noinst_HEADERS += core/plugin/loader.h core/plugin/elf_check.h
