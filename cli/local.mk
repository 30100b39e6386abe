# cli: the fgcore program.  A new command is a row of fg_commands[] in
# cli/main.c plus its source file here.
fgcore_SOURCES += cli/main.c cli/commands.h cli/cmd_plugins.c cli/cmd_config.c \
	cli/cmd_bench.c cli/cmd_generate.c cli/cmd_run_batch.c cli/cmd_tokenize.c \
	cli/request.c cli/request.h cli/flexgen_flags.c cli/flexgen_flags.h \
	cli/cmd_profile.c cli/cmd_optimize.c cli/batch_run.c cli/batch_run.h \
	cli/completion.c cli/completion.h cli/batch_journal.c cli/batch_journal.h \
	cli/batch_progress.c cli/batch_progress.h
