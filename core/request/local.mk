# core/request: the request layer - requests read once, length buckets,
# effective batches through the executor, shared prompt prefixes, retries
# and accounting (fg_run, fg_generate).
libfgcore_internal_la_SOURCES += core/request/prepare.c core/request/batch.c core/request/run.c \
	core/request/share.c
noinst_HEADERS += core/request/job.h
