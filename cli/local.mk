# cli: the fgcore program.  A new command is a row of fg_commands[] in
# cli/main.c plus its source file here.
fgcore_SOURCES += cli/main.c cli/commands.h cli/cmd_plugins.c cli/cmd_config.c \
	cli/cmd_bench.c cli/cmd_generate.c cli/cmd_run_batch.c cli/cmd_score.c cli/cmd_tokenize.c \
	cli/request.c cli/request.h cli/flexgen_flags.c cli/flexgen_flags.h \
	cli/cmd_profile.c cli/cmd_optimize.c \
	cli/completion.c cli/completion.h cli/cmd_serve.c \
	cli/cmd_stage.c cli/batch_journal.c cli/batch_journal.h \
	cli/batch_progress.c cli/batch_progress.h
# serve's HTTP front and engine thread, with libmicrohttpd (else serve says so)
if HAVE_MICROHTTPD
fgcore_SOURCES += cli/serve_http.c cli/serve_http.h cli/serve_queue.c cli/serve_queue.h \
	cli/serve_tokenize.c cli/serve_tokenize.h cli/serve_conns.c cli/serve_conns.h
fgcore_CFLAGS += $(MICROHTTPD_CFLAGS)
fgcore_LDADD += $(MICROHTTPD_LIBS) $(PTHREAD_LIBS)
else
EXTRA_DIST += cli/serve_http.c cli/serve_http.h cli/serve_queue.c cli/serve_queue.h \
	cli/serve_tokenize.c cli/serve_tokenize.h cli/serve_conns.c cli/serve_conns.h
endif
