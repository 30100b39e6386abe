# Engine tests against the Hugging Face reference outputs.
check_PROGRAMS += tests/test_golden
TESTS += tests/test_golden
tests_test_golden_SOURCES = tests/test_golden.c
tests_test_golden_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_golden_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)
# qwen2-tiny's checkpoint and Hugging Face references live in the tree (made
# by make_qwen2.py): the test reads them from the source tree, without FGCORE_TESTDATA
tests_test_golden_CFLAGS += -DFG_TEST_SRCDIR='"$(abs_top_srcdir)"'
# The parts make_qwen2.py, make_window.py, make_qwen_moe.py and make_gemma2.py share.
EXTRA_DIST += tests/reference/hf_golden.py
EXTRA_DIST += tests/reference/make_qwen2.py tests/data/qwen2-tiny/config.json \
	tests/data/qwen2-tiny/generation_config.json tests/data/qwen2-tiny/model.safetensors \
	tests/data/qwen2-tiny/golden.json tests/data/qwen2-tiny/golden_prefill_last_logits.f32
EXTRA_DIST += tests/reference/make_qwen_moe.py tests/data/qwen2-moe-tiny/config.json \
	tests/data/qwen2-moe-tiny/generation_config.json \
	tests/data/qwen2-moe-tiny/model.safetensors tests/data/qwen2-moe-tiny/golden.json \
	tests/data/qwen2-moe-tiny/golden_prefill_last_logits.f32 \
	tests/data/qwen3-moe-tiny/config.json tests/data/qwen3-moe-tiny/generation_config.json \
	tests/data/qwen3-moe-tiny/model.safetensors tests/data/qwen3-moe-tiny/golden.json \
	tests/data/qwen3-moe-tiny/golden_prefill_last_logits.f32 \
	tests/data/qwen2-moe-wide-tiny/config.json \
	tests/data/qwen2-moe-wide-tiny/generation_config.json \
	tests/data/qwen2-moe-wide-tiny/model.safetensors tests/data/qwen2-moe-wide-tiny/golden.json \
	tests/data/qwen2-moe-wide-tiny/golden_prefill_last_logits.f32 \
	tests/data/qwen3-moe-wide-tiny/config.json \
	tests/data/qwen3-moe-wide-tiny/generation_config.json \
	tests/data/qwen3-moe-wide-tiny/model.safetensors tests/data/qwen3-moe-wide-tiny/golden.json \
	tests/data/qwen3-moe-wide-tiny/golden_prefill_last_logits.f32
EXTRA_DIST += tests/reference/make_window.py tests/data/mistral-window-tiny/config.json \
	tests/data/mistral-window-tiny/generation_config.json \
	tests/data/mistral-window-tiny/model.safetensors \
	tests/data/mistral-window-tiny/golden.json \
	tests/data/mistral-window-tiny/golden_prefill_last_logits.f32 \
	tests/data/qwen2-window-tiny/config.json \
	tests/data/qwen2-window-tiny/generation_config.json \
	tests/data/qwen2-window-tiny/model.safetensors tests/data/qwen2-window-tiny/golden.json \
	tests/data/qwen2-window-tiny/golden_prefill_last_logits.f32
EXTRA_DIST += tests/reference/make_gemma2.py tests/data/gemma2-tiny/config.json \
	tests/data/gemma2-tiny/generation_config.json tests/data/gemma2-tiny/model.safetensors \
	tests/data/gemma2-tiny/golden.json tests/data/gemma2-tiny/golden_prefill_last_logits.f32

check_PROGRAMS += tests/test_policy
TESTS += tests/test_policy
tests_test_policy_SOURCES = tests/test_policy.c
tests_test_policy_CFLAGS = $(TEST_CFLAGS) -DFG_TEST_SRCDIR='"$(abs_top_srcdir)"'
# the NVMe variants run where configure built their plugin
if HAVE_LIBURING
tests_test_policy_CFLAGS += -DFG_TEST_IO_URING
endif
if HAVE_LIBAIO
tests_test_policy_CFLAGS += -DFG_TEST_LIBAIO
endif
tests_test_policy_LDADD = $(TEST_LIBS)

# The policy matrix again on cpu_blas behind lazy streams (a GPU backend's
# ordering at its most adversarial) over a tier that says it is device memory:
# every wait of the schedule, tested on a CPU.
check_LTLIBRARIES += tests/plugins/lazy_streams.la
tests_plugins_lazy_streams_la_SOURCES = tests/plugins/lazy_streams.c
tests_plugins_lazy_streams_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_lazy_streams_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_lazy_streams_la_LIBADD = -ldl $(PTHREAD_LIBS)
TESTS += tests/test_policy_lazy.sh
EXTRA_DIST += tests/test_policy_lazy.sh

TESTS += tests/test_commands.sh tests/test_run_batch.sh tests/test_data_wrangle.sh
# run-batch against a second run, other settings, ulimit -f, an edited journal;
# the exit statuses of generate, score, tokenize and run-batch against fgcore(1)
TESTS += tests/test_run_batch_guard.sh tests/test_exit_status.sh
EXTRA_DIST += tests/test_run_batch_guard.sh tests/test_exit_status.sh
EXTRA_DIST += tests/test_commands.sh tests/test_run_batch.sh tests/test_data_wrangle.sh \
	examples/data_wrangle/run.sh examples/data_wrangle/make_prompts.py \
	examples/data_wrangle/score.py examples/data_wrangle/products.csv
# pipeline stages over MPI (mpirun -np 2 and 3), data-parallel replicas
TESTS += tests/test_pipeline.sh tests/test_replicas.sh
EXTRA_DIST += tests/test_pipeline.sh tests/test_replicas.sh tests/mpi_env.sh
# One MPI test at a time under make -j: their ranks oversubscribe the cores,
# and two jobs of them at once is where LeakSanitizer's tracer crashed.  (A
# variable: a literal target would replace automake's own rule for it.)
mpi_second_log = tests/test_replicas.sh.log
$(mpi_second_log): tests/test_pipeline.sh.log

check_PROGRAMS += tests/test_compression
TESTS += tests/test_compression
tests_test_compression_SOURCES = tests/test_compression.c tests/heldout.c tests/heldout.h
tests_test_compression_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS) -DFG_TEST_SRCDIR='"$(abs_top_srcdir)"'
tests_test_compression_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)

# the mover: failed disk requests surface from reset and fini
check_PROGRAMS += tests/test_mover
TESTS += tests/test_mover
tests_test_mover_SOURCES = tests/test_mover.c
tests_test_mover_CFLAGS = $(TEST_CFLAGS)
tests_test_mover_LDADD = $(TEST_LIBS)

# log-probabilities out of fg_generate (prompt scores, completion scores) against Hugging Face
check_PROGRAMS += tests/test_scoring
TESTS += tests/test_scoring
tests_test_scoring_SOURCES = tests/test_scoring.c tests/heldout.c tests/heldout.h
tests_test_scoring_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_scoring_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)

# fgcore score and run-batch's echo + logprobs against Hugging Face's held-out log-probabilities
TESTS += tests/test_score.sh
EXTRA_DIST += tests/test_score.sh

# bench's device time (compute ABI 1.2 timers) adds up to the run
TESTS += tests/test_device_timing.sh
EXTRA_DIST += tests/test_device_timing.sh

# shared prompt prefixes: the scores of unshared and of one-by-one decode steps
check_PROGRAMS += tests/test_join
TESTS += tests/test_join
tests_test_join_SOURCES = tests/test_join.c
tests_test_join_CFLAGS = $(TEST_CFLAGS)
tests_test_join_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/test_wire
TESTS += tests/test_wire
tests_test_wire_SOURCES = tests/test_wire.c
tests_test_wire_CFLAGS = $(TEST_CFLAGS)
tests_test_wire_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/test_shared_prefix
TESTS += tests/test_shared_prefix
tests_test_shared_prefix_SOURCES = tests/test_shared_prefix.c
tests_test_shared_prefix_CFLAGS = $(TEST_CFLAGS)
tests_test_shared_prefix_LDADD = $(TEST_LIBS)

TESTS += tests/test_shared_prefix.sh
EXTRA_DIST += tests/test_shared_prefix.sh tests/compare_scores.py

TESTS += tests/test_refill.sh
EXTRA_DIST += tests/test_refill.sh

# a GPU batch whose rows have all finished is not run again; results unchanged
check_PROGRAMS += tests/test_finished_rows
TESTS += tests/test_finished_rows
tests_test_finished_rows_SOURCES = tests/test_finished_rows.c
tests_test_finished_rows_CFLAGS = $(TEST_CFLAGS)
tests_test_finished_rows_LDADD = $(TEST_LIBS)

# the request layer: the bos rule, fg_run's results, batches within the positions
check_PROGRAMS += tests/test_request
TESTS += tests/test_request
tests_test_request_SOURCES = tests/test_request.c
tests_test_request_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_request_LDADD = $(TEST_LIBS) $(JANSSON_LIBS)

# Logits with no number (activations that overflowed) fail their own request,
# with a line saying so, and the rest of the job goes on: a cpu_blas whose
# embedding of one token id is NaN stands in for an fp16 overflow.
check_LTLIBRARIES += tests/plugins/nan_embed.la
tests_plugins_nan_embed_la_SOURCES = tests/plugins/nan_embed.c
tests_plugins_nan_embed_la_CFLAGS = $(PLUGIN_CFLAGS)
tests_plugins_nan_embed_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS) $(AM_LDFLAGS)
tests_plugins_nan_embed_la_LIBADD = -ldl
TESTS += tests/test_nan_logits.sh
EXTRA_DIST += tests/test_nan_logits.sh
