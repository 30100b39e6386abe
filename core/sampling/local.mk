# core/sampling: choosing tokens from logits (greedy, fgcore/sampling.h's
# draws) and their log-probabilities.
libfgcore_internal_la_SOURCES += core/sampling/sample.c core/sampling/logprob.c
noinst_HEADERS += core/sampling/sample.h core/sampling/logprob.h
