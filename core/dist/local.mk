# core/dist: a pipeline job's transport (a plugin, opened only under an MPI
# launcher) and which layers each stage holds.
libfgcore_internal_la_SOURCES += core/dist/dist.c core/dist/stage.c
noinst_HEADERS += core/dist/dist.h core/dist/stage.h
