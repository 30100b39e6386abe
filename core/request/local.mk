# core/request: the request layer - requests read once, length buckets,
# effective batches through the executor, shared prompt prefixes, retries
# and accounting (fg_run, fg_generate); in a job of replicas, rank 0 hands
# batches to the replicas and their results back (replicas.c).
libfgcore_internal_la_SOURCES += core/request/prepare.c core/request/batch.c core/request/run.c \
	core/request/share.c core/request/replicas.c \
	core/request/wire.c
noinst_HEADERS += core/request/job.h core/request/wire.h core/request/replicas.h
