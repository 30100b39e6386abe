/* tests/test_policy.c - policy equivalence: every placement, schedule and
 * batch split gives exactly the logits and tokens of the run with everything
 * on the compute tier (cpu_blas: bit-identical).  Also: the per-tier memory
 * that bench reports matches what the placement predicts, and a tier with a
 * capacity refuses clearly.
 *
 * Cases that cannot run here are not run, each named: the NVMe tier variants
 * when the build has no such plugin (configure without liburing or libaio) or
 * its probe refuses this machine, the opt-tiny-64x2 cases without
 * FGCORE_TESTDATA.  Then the program exits 77 (skip) unless something failed,
 * as test_golden does; a plugin the build made that does not load fails. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "core/engine/bench.h"
#include "core/engine/engine.h"
#include "core/exec/forward.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/window_model.h"

#define NPROMPT 8
#define NEW 6

/* One policy of the matrix: overrides on top of the base configuration.
 * Tokens must always be identical.  Logits are bit-identical unless the
 * variant changes the shapes of the matrix products (other GPU batch sizes,
 * weights split by rows): BLAS may then sum in another order, so they agree
 * within LOGIT_TOL instead. */
struct variant {
	const char *name;
	const char *set[8];
};

#define LOGIT_TOL 1e-4

static int reshapes(const struct variant *v)
{
	for (int i = 0; i < 8 && v->set[i]; i++)
		if (strstr(v->set[i], "gpu_batch_size") || strstr(v->set[i], "exact"))
			return 1;
	return 0;
}

static const struct variant variants[] = {
	{ "weights on host", { "policy.percent=0 100 100 0 100 0" } },
	{ "weights on disk", { "policy.percent=0 0 100 0 100 0" } },
	{ "weights 30/50/20", { "policy.percent=30 50 100 0 100 0" } },
	{ "weights 30/50/20 exact", { "policy.percent=30 50 100 0 100 0", "policy.placement=exact" } },
	{ "cache on host", { "policy.percent=100 0 0 100 100 0" } },
	{ "cache on disk", { "policy.percent=100 0 0 0 100 0" } },
	{ "cache 30/50/20", { "policy.percent=100 0 30 50 100 0" } },
	{ "cache on host, cpu attention", { "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true" } },
	{ "cache 30/50/20, cpu attention", { "policy.percent=100 0 30 50 100 0", "policy.cpu_cache_compute=true" } },
	{ "cpu attention beside, 4 batches", { "policy.percent=100 0 30 50 100 0", "policy.cpu_cache_compute=true", "policy.host_overlap=true", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" } },
	{ "cpu attention beside, 3 batches, activations off", { "policy.percent=0 50 0 100 30 50", "policy.cpu_cache_compute=true", "policy.host_overlap=true", "policy.gpu_batch_size=3", "policy.num_gpu_batches=3" } },
	{ "cache on host, cpu attention beside", { "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true", "policy.host_overlap=true" } },
	{ "cpu attention in turn, 4 batches", { "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" } },
	{ "activations on host", { "policy.percent=100 0 100 0 0 100" } },
	{ "activations on disk", { "policy.percent=100 0 100 0 0 0" } },
	{ "activations 30/50/20, 4 batches", { "policy.percent=100 0 100 0 30 50", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" } },
	{ "all mixed 30/50/20 exact", { "policy.percent=30 50 30 50 30 50", "policy.placement=exact", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" } },
	{ "2 GPU batches", { "policy.gpu_batch_size=4", "policy.num_gpu_batches=2" } },
	{ "3 GPU batches", { "policy.gpu_batch_size=3", "policy.num_gpu_batches=3" } },
	{ "4 GPU batches, all offloaded", { "policy.percent=0 50 0 50 0 100", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" } },
	{ "no overlap, all offloaded", { "policy.percent=0 50 0 50 0 100", "policy.overlap=false" } },
	{ "no sep_layer, all offloaded", { "policy.percent=0 50 0 50 0 100", "policy.sep_layer=false" } },
	{ "no overlap, no sep_layer, 2 batches", { "policy.percent=20 30 20 30 100 0", "policy.overlap=false", "policy.sep_layer=false", "policy.gpu_batch_size=4", "policy.num_gpu_batches=2" } },
	{ "disk posix_file O_DIRECT", { "policy.percent=0 0 0 0 0 0", "tier.disk.o_direct=true" } },
	{ "disk io_uring_nvme", { "policy.percent=0 0 0 0 0 0", "tier.disk.plugin=io_uring_nvme" } },
	{ "disk libaio_nvme", { "policy.percent=0 0 0 0 0 0", "tier.disk.plugin=libaio_nvme" } },
};
#define NVARIANTS (int)(sizeof(variants) / sizeof(variants[0]))

static char model[4200];
static char tmpdir[256];

static void set(struct fg_config *c, const char *kv)
{
	ck_assert_msg(fg_config_set(c, kv, "test") == 0, "%s: %s", kv, fg_last_error_text());
}

static struct fg_config *base_config(void)
{
	struct fg_config *c;
	char kv[4400];
	ck_assert_int_eq(fg_config_new(&c), 0);
	snprintf(kv, sizeof(kv), "model.path=%s", model);
	set(c, kv);
	set(c, "policy.gpu_batch_size=8");
	set(c, "policy.num_gpu_batches=1");
	set(c, "policy.percent=100 0 100 0 100 0");
	/* FGCORE_TEST_BACKEND=cublas: the compute tier on the GPU;
	 * lazy_streams (tests/test_policy_lazy.sh): a GPU's ordering simulated */
	const char *b = getenv("FGCORE_TEST_BACKEND");
	if (b && *b && !strcmp(b, "lazy_streams")) {
		set(c, "compute.plugin=lazy_streams");
		set(c, "compute.device_memory=true");
		set(c, "tier.compute.plugin=fake_device_mem");
	} else if (b && *b && strcmp(b, "cpu_blas")) {
		snprintf(kv, sizeof(kv), "compute.plugin=%s", b);
		set(c, kv);
		set(c, "tier.compute.plugin=cuda_mem");
	}
	snprintf(kv, sizeof(kv), "tier.disk.dir=%s", tmpdir);
	set(c, kv);
	return c;
}

/* NULL when every plugin variant v needs can run here, else why not.
 * FG_TEST_IO_URING / FG_TEST_LIBAIO: configure built that plugin. */
static const char *cannot_run(const struct variant *v)
{
	static const struct {
		const char *name;
		int built;
	} nvme[] = {
#ifdef FG_TEST_IO_URING
		{ "io_uring_nvme", 1 },
#else
		{ "io_uring_nvme", 0 },
#endif
#ifdef FG_TEST_LIBAIO
		{ "libaio_nvme", 1 },
#else
		{ "libaio_nvme", 0 },
#endif
	};
	for (size_t i = 0; i < sizeof(nvme) / sizeof(nvme[0]); i++) {
		struct fg_plugin_handle h;
		if (!strstr(v->name, nvme[i].name))
			continue;
		if (!nvme[i].built)
			return "the plugin was not built (configure found no library for it)";
		/* built: it must load (else the case runs, and fails); its probe
		 * may still refuse this machine (no io_uring in the kernel) */
		if (fg_plugin_load(nvme[i].name, FG_PLUGIN_STORAGE, &h) != 0)
			return NULL;
		int usable = fg_plugin_probe(&h);
		fg_plugin_close(&h);
		if (usable == 0)
			return "its probe says it cannot run on this machine";
	}
	return NULL;
}

/* Prompts of different lengths (left padding), greedy, NEW tokens each;
 * tokens into out[NPROMPT][NEW]; prefill logits of an 8-row batch into lg. */
/* Decode steps the last run()'s forward pass launched as graphs. */
static uint64_t graph_steps;

static void run(struct fg_config *c, int32_t out[NPROMPT][NEW], float **lg)
{
	struct fg_engine *e;
	struct fg_request req[NPROMPT];
	struct fg_result res[NPROMPT];
	int32_t ids[NPROMPT][12];

	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	memset(req, 0, sizeof(req));
	for (int r = 0; r < NPROMPT; r++) {
		for (int i = 0; i < 12; i++)
			ids[r][i] = i == 0 ? 2 : 100 + 37 * r + 11 * i;
		req[r].prompt_ids = ids[r];
		req[r].n_prompt_ids = (size_t)(3 + r);
		req[r].max_new_tokens = NEW;
	}
	ck_assert_msg(fg_generate(e, req, NPROMPT, res) == 0, "%s", fg_last_error_text());
	for (int r = 0; r < NPROMPT; r++) {
		ck_assert_int_eq(res[r].n_tokens, NEW);
		memcpy(out[r], res[r].token_ids, sizeof(int32_t) * NEW);
		fg_result_clear(&res[r]);
	}
	/* Logits of a full prefill and two decode steps, for a bitwise comparison. */
	struct fg_forward_env env;
	struct fg_forward *f;
	int64_t rows = e->policy.gpu_batch_size * e->policy.num_gpu_batches, V = e->model.cfg.vocab;
	int32_t *pids = calloc((size_t)rows * 12, sizeof(int32_t)), *pad = calloc((size_t)rows, 4);
	int32_t *next = calloc((size_t)rows, 4);
	float *l = malloc(sizeof(float) * (size_t)(rows * V));
	*lg = malloc(sizeof(float) * (size_t)(NPROMPT * V) * 3);
	for (int64_t r = 0; r < rows; r++) {
		pad[r] = (int32_t)(r % NPROMPT);
		for (int i = 0; i < 12; i++)
			pids[r * 12 + i] = i < pad[r] ? 1 : ids[r % NPROMPT][i - pad[r]];
		next[r] = (int32_t)((1000 + r % NPROMPT) % V);
	}
	fg_engine_forward_env(e, e->policy.num_gpu_batches, &env);
	ck_assert_msg(fg_forward_new(&f, &env, 12, 4) == 0, "%s", fg_last_error_text());
	for (int s = 0; s < 3; s++) {
		int rc = s == 0 ? fg_forward_prefill(f, pids, pad, l, NULL) : fg_forward_decode(f, next, l, NULL);
		ck_assert_msg(rc == 0, "%s", fg_last_error_text());
		memcpy(*lg + (size_t)s * NPROMPT * V, l, sizeof(float) * (size_t)(NPROMPT * V));
	}
	graph_steps = fg_forward_stats(f)->graph_steps;
	fg_forward_free(f);
	free(pids);
	free(pad);
	free(next);
	free(l);
	fg_engine_close(e);
}

static void setup(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	snprintf(tmpdir, sizeof(tmpdir), "/var/tmp/fgcore-policy-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	/* the golden checkpoint when there is one, else a generated OPT-125M */
	if (td && *td)
		snprintf(model, sizeof(model), "%s/opt/opt-tiny-128x4", td);
	else
		snprintf(model, sizeof(model), "dummy:opt-125m");
}

static void teardown(void)
{
	rmdir(tmpdir);
}

static void equivalence(const struct variant *v)
{
	int32_t want[NPROMPT][NEW], got[NPROMPT][NEW];
	float *lw, *lg;
	struct fg_config *c;

	c = base_config();
	run(c, want, &lw);
	/* The all-compute run's two decode steps move nothing between tiers: a
	 * backend with graphs (compute ABI 1.5) ran each as graphs, so every
	 * variant that moves something is checked against recorded steps (a
	 * mixture of experts, whose router answers on the host, records none). */
	const char *gb = getenv("FGCORE_TEST_BACKEND");
	int moe = strstr(model, "mixtral") || strstr(model, "-moe-");
	if (gb && (!strcmp(gb, "lazy_streams") || !strcmp(gb, "cublas")))
		ck_assert_msg(graph_steps == (moe ? 0 : 2), "the all-compute run launched %llu of its 2 decode "
			      "steps as graphs%s", (unsigned long long)graph_steps,
			      moe ? " (a mixture of experts: none expected)" : "");
	for (int i = 0; i < 8 && v->set[i]; i++)
		set(c, v->set[i]);
	run(c, got, &lg);
	printf("%s: %s\n", v->name, memcmp(want, got, sizeof(want)) ? "DIFFERENT" : "same tokens");
	ck_assert_msg(!memcmp(want, got, sizeof(want)), "%s: tokens differ from the all-compute run",
		      v->name);
	struct fg_engine *e;
	ck_assert_int_eq(fg_engine_open(c, &e), 0);
	size_t n = (size_t)(NPROMPT * e->model.cfg.vocab) * 3;
	fg_engine_close(e);
	const char *b = getenv("FGCORE_TEST_BACKEND");
	/* (lazy_streams computes with cpu_blas: bit for bit too) */
	int gpu = b && *b && strcmp(b, "cpu_blas") && strcmp(b, "lazy_streams");
	if (!reshapes(v) && !gpu) {
		ck_assert_msg(!memcmp(lw, lg, n * sizeof(float)),
			      "%s: logits differ from the all-compute run", v->name);
	} else {
		double worst = 0;
		for (size_t i = 0; i < n; i++)
			worst = fmax(worst, fabs((double)lw[i] - lg[i]) / (1 + fabs((double)lw[i])));
		printf("%s: logits within %.2g of the all-compute run\n", v->name, worst);
		ck_assert_msg(worst <= (gpu ? 5e-2 : LOGIT_TOL), "%s: logits differ by %g", v->name,
			      worst);
	}
	free(lw);
	free(lg);
	fg_config_free(c);
}

START_TEST(test_equivalence)
{
	equivalence(&variants[_i]);
}
END_TEST

/* The whole matrix again on more models, each with math the tiny OPT lacks. */
static const struct matrix_model {
	const char *dir; /* below $FGCORE_TESTDATA, or (intree) below tests/data */
	int intree;
} matrix_models[] = {
	/* grouped-query attention (2 query heads over 1 key/value head), rotary
	 * positions, SwiGLU, tied embeddings */
	{ "llama/llama-py-128x4", 0 },
	/* a sparse mixture of 4 experts, 2 per token, placed as any weight
	 * (exact placement splits one, and the MLP then runs a product per
	 * expert and piece instead of grouped ones) */
	{ "moe/mixtral-py-128x4", 0 },
	/* per-head q and k norms */
	{ "llama/qwen3-py-128x4", 0 },
	/* a sliding window of 8 on every layer, past which the runs go, so each
	 * placement's attention (host attention too) applies it */
	{ "mistral-window-tiny", 1 },
	/* routed experts and a shared one, whose gate comes back to the host
	 * mid-block */
	{ "qwen2-moe-tiny", 1 },
	/* 60 narrow experts, 4 per token, and the shared one: each placement
	 * spreads the experts over the tiers (exact placement splits some) */
	{ "qwen2-moe-wide-tiny", 1 },
	/* 64 experts, 8 per token, renormalised */
	{ "qwen3-moe-wide-tiny", 1 },
	/* Gemma 2: soft-capped scores (host attention too), alternating
	 * windows, norms after each block, final logits capped in the output
	 * block */
	{ "gemma2-tiny", 1 },
};
#define NMATRIX (int)(sizeof(matrix_models) / sizeof(matrix_models[0]))

START_TEST(test_equivalence_models)
{
	const struct matrix_model *mm = &matrix_models[_i / NVARIANTS];
	const char *src = getenv("FGCORE_SRCDIR");

	if (mm->intree)
		snprintf(model, sizeof(model), "%s/tests/data/%s", src && *src ? src : FG_TEST_SRCDIR,
			 mm->dir);
	else
		snprintf(model, sizeof(model), "%s/%s", getenv("FGCORE_TESTDATA"), mm->dir);
	equivalence(&variants[_i % NVARIANTS]);
}
END_TEST

/* The same matrix, in part, on the other golden checkpoint and on a generated
 * OPT-125M (12 layers): a variant of each kind of move. */
static const int subset[] = { 1, 3, 7, 14, 16, 20 };

START_TEST(test_equivalence_other_models)
{
	const char *td = getenv("FGCORE_TESTDATA");
	char saved[sizeof(model)];
	int v = subset[_i % 6];
	struct fg_config *c;
	int32_t want[NPROMPT][NEW], got[NPROMPT][NEW];
	float *lw, *lg;

	memcpy(saved, model, sizeof(model));
	/* (main registers _i < 6 only with FGCORE_TESTDATA) */
	if (_i < 6)
		snprintf(model, sizeof(model), "%s/opt/opt-tiny-64x2", td);
	else
		snprintf(model, sizeof(model), "dummy:opt-125m");
	c = base_config();
	run(c, want, &lw);
	for (int i = 0; i < 8 && variants[v].set[i]; i++)
		set(c, variants[v].set[i]);
	run(c, got, &lg);
	printf("%s, %s: %s\n", model, variants[v].name,
	       memcmp(want, got, sizeof(want)) ? "DIFFERENT" : "same tokens");
	ck_assert_msg(!memcmp(want, got, sizeof(want)), "%s, %s: tokens differ", model,
		      variants[v].name);
	free(lw);
	free(lg);
	fg_config_free(c);
	memcpy(model, saved, sizeof(model));
}
END_TEST

/* bench's per-tier peaks equal the bytes the placement and the run's buffers add up to. */
START_TEST(test_memory_accounting)
{
	static const char *percents[] = { "100 0 100 0 100 0", "0 100 0 100 100 0",
					  "30 50 30 50 0 100", "0 0 0 0 0 0" };
	for (int i = 0; i < 4; i++) {
		struct fg_config *c = base_config();
		struct fg_engine *e;
		struct fg_bench_result r;
		struct fg_bench_params p = { .prompt_len = 16, .gen_len = 4, .warmup = 1 };
		char kv[64];
		snprintf(kv, sizeof(kv), "policy.percent=%s", percents[i]);
		set(c, kv);
		ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
		ck_assert_msg(fg_bench_run(e, &p, &r) == 0, "%s", fg_last_error_text());
		for (int t = 0; t < FG_ROLES; t++) {
			printf("percent %s: %s tier peak %llu, placed %llu\n", percents[i],
			       fg_role_name(t), (unsigned long long)r.peak[t],
			       (unsigned long long)r.placed[t]);
			ck_assert_msg(r.peak[t] == r.placed[t], "%s tier: peak %llu != placed %llu",
				      fg_role_name(t), (unsigned long long)r.peak[t],
				      (unsigned long long)r.placed[t]);
		}
		fg_engine_close(e);
		fg_config_free(c);
	}
}
END_TEST

/* A capped tier names itself, the bytes asked and what would fit. */
START_TEST(test_capacity_refusal)
{
	struct fg_config *c = base_config();
	struct fg_engine *e;
	set(c, "tier.compute.capacity=1M");
	ck_assert_int_ne(fg_engine_open(c, &e), 0);
	const char *msg = fg_last_error_text();
	printf("capacity refusal: %s\n", msg);
	ck_assert_ptr_nonnull(strstr(msg, "compute"));
	ck_assert_ptr_nonnull(strstr(msg, "percent"));
	fg_config_free(c);
}
END_TEST

static int skipped;

/* ---- a window's ring against the full cache ------------------------------------ */

/* A model windowed on every layer keeps its cache as a ring of the window's
 * 8 positions ([policy] window_ring, on by default); window_ring = false
 * keeps every position.  Runs well past the window - prompts longer than
 * the ring, 4.5 windows in all - must give the same tokens, log-probabilities
 * and logits, bit for bit, under each placement of the cache (a 4-bit one
 * too), and the full cache's the all-compute run's. */
#define RING_ROWS 8
#define RP 20 /* the forward runs' prompt columns: up to 2.5 windows */
#define RG 22 /* new tokens: 42 positions */
#define RWIN 8

static const char *const ring_sets[][4] = {
	{ NULL },
	{ "policy.percent=100 0 0 100 100 0" },
	{ "policy.percent=100 0 0 0 100 0" },
	{ "policy.percent=100 0 30 50 100 0" },
	{ "policy.percent=100 0 0 100 100 0", "policy.cpu_cache_compute=true" },
	{ "policy.percent=100 0 30 50 100 0", "policy.cpu_cache_compute=true" },
	{ "policy.percent=0 50 0 50 0 100", "policy.gpu_batch_size=2", "policy.num_gpu_batches=4" },
	{ "policy.percent=0 50 0 50 0 100", "policy.overlap=false", "policy.sep_layer=false" },
	/* a 4-bit cache: only where the key/value width is a multiple of 64 */
	{ "policy.compress_cache=true" },
	{ "policy.compress_cache=true", "policy.percent=100 0 30 50 100 0" },
	{ "policy.compress_cache=true", "policy.percent=100 0 0 100 100 0",
	  "policy.cpu_cache_compute=true" },
};
#define RING_SETS (int)(sizeof(ring_sets) / sizeof(ring_sets[0]))
#define RING_PLAIN 8 /* the sets before the 4-bit ones */

/* The models: in tree, windowed on every layer (kv width 32) and on one of
 * two layers (Qwen2's max_window_layers: no ring, every position kept, a
 * windowed layer's loads cut to the window); and tests/window_model.h's. */
enum { RM_MISTRAL, RM_QWEN2_MIXED, RM_WINDOW_LLAMA, RING_MODELS };

struct ring_out {
	float *logits; /* RG steps x RING_ROWS x vocab: the forward run's */
	int32_t tok[RG][RING_ROWS];
	int32_t gen[RING_ROWS][RG];   /* fg_generate's tokens, */
	float glp[RING_ROWS][RG];     /* their log-probabilities */
	float plp[RING_ROWS][RP];     /* and the prompts' */
	int64_t cols, vocab;
	uint64_t bytes[FG_ROLES];
};

static int64_t ring_len(int64_t r)
{
	return 4 + (r * 5) % 17; /* 4 .. 20 tokens: most longer than the window */
}

static void ring_run(const char *path, const char *const *sets, int ring, struct ring_out *o)
{
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_request req[RING_ROWS];
	struct fg_result res[RING_ROWS];
	int32_t ids[RING_ROWS][RP];

	snprintf(model, sizeof(model), "%s", path);
	c = base_config();
	for (int i = 0; i < 4 && sets[i]; i++)
		set(c, sets[i]);
	set(c, ring ? "policy.window_ring=true" : "policy.window_ring=false");
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	int64_t V = e->model.cfg.vocab;
	o->vocab = V;
	memset(req, 0, sizeof(req));
	for (int r = 0; r < RING_ROWS; r++) {
		for (int i = 0; i < RP; i++)
			ids[r][i] = (int32_t)(4 + (7 * r + 13 * i + i * i) % (V - 4));
		req[r].prompt_ids = ids[r];
		req[r].n_prompt_ids = (size_t)ring_len(r);
		req[r].max_new_tokens = RG;
		req[r].logprobs = 1;
		req[r].score_prompt = 1;
	}
	ck_assert_msg(fg_generate(e, req, RING_ROWS, res) == 0, "%s", fg_last_error_text());
	memset(o->plp, 0, sizeof(o->plp));
	for (int r = 0; r < RING_ROWS; r++) {
		ck_assert_msg(res[r].n_tokens == RG, "row %d: %zu tokens", r, res[r].n_tokens);
		memcpy(o->gen[r], res[r].token_ids, sizeof(int32_t) * RG);
		memcpy(o->glp[r], res[r].token_logprobs, sizeof(float) * RG);
		/* (position 0's score is NAN: nothing precedes it) */
		memcpy(o->plp[r], res[r].prompt_logprobs + 1, sizeof(float) * (size_t)(ring_len(r) - 1));
		fg_result_clear(&res[r]);
	}
	/* The executor itself: a prefill and RG - 1 greedy steps, every step's logits. */
	struct fg_forward_env env;
	struct fg_forward *f;
	int32_t pids[RING_ROWS * RP], pad[RING_ROWS];
	float *l = malloc(sizeof(float) * (size_t)(RING_ROWS * V));
	ck_assert_ptr_nonnull(o->logits = malloc(sizeof(float) * (size_t)(RG * RING_ROWS * V)));
	ck_assert_ptr_nonnull(l);
	for (int r = 0; r < RING_ROWS; r++) {
		pad[r] = (int32_t)(RP - ring_len(r));
		for (int i = 0; i < RP; i++)
			pids[r * RP + i] = i < pad[r] ? (int32_t)e->model.cfg.pad_id : ids[r][i - pad[r]];
	}
	fg_engine_forward_env(e, e->policy.num_gpu_batches, &env);
	ck_assert_msg(fg_forward_new(&f, &env, RP, RG) == 0, "%s", fg_last_error_text());
	o->cols = fg_forward_cache_columns(f);
	fg_forward_bytes(f, o->bytes);
	for (int s = 0; s < RG; s++) {
		int rc = s == 0 ? fg_forward_prefill(f, pids, pad, l, o->tok[s])
				: fg_forward_decode(f, o->tok[s - 1], l, o->tok[s]);
		ck_assert_msg(rc == 0, "step %d: %s", s, fg_last_error_text());
		memcpy(o->logits + (size_t)s * RING_ROWS * V, l, sizeof(float) * (size_t)(RING_ROWS * V));
	}
	fg_forward_free(f);
	free(l);
	fg_engine_close(e);
	fg_config_free(c);
}

/* a and b the same, bit for bit. */
static void ring_same(const char *what, const struct ring_out *a, const struct ring_out *b)
{
	size_t n = (size_t)(RG * RING_ROWS * a->vocab);
	ck_assert_msg(!memcmp(a->gen, b->gen, sizeof(a->gen)), "%s: generated tokens differ", what);
	ck_assert_msg(!memcmp(a->glp, b->glp, sizeof(a->glp)), "%s: token log-probabilities differ",
		      what);
	ck_assert_msg(!memcmp(a->plp, b->plp, sizeof(a->plp)), "%s: prompt log-probabilities differ",
		      what);
	ck_assert_msg(!memcmp(a->tok, b->tok, sizeof(a->tok)), "%s: the forward run's tokens differ",
		      what);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(!memcmp(&a->logits[i], &b->logits[i], sizeof(float)),
			      "%s: logit %zu (step %zu) %.9g != %.9g", what, i,
			      i / (size_t)(RING_ROWS * a->vocab), a->logits[i], b->logits[i]);
}

static char window_dir[256];

START_TEST(test_window_ring)
{
	int m = _i / RING_SETS, si = _i % RING_SETS;
	const char *const *sets = ring_sets[si];
	const char *src = getenv("FGCORE_SRCDIR");
	char path[4200], what[4600];
	struct ring_out full, ringed, ref;

	if (m == RM_WINDOW_LLAMA)
		snprintf(path, sizeof(path), "%s", window_dir);
	else
		snprintf(path, sizeof(path), "%s/tests/data/%s", src && *src ? src : FG_TEST_SRCDIR,
			 m == RM_MISTRAL ? "mistral-window-tiny" : "qwen2-window-tiny");
	ring_run(path, sets, 0, &full);
	ring_run(path, sets, 1, &ringed);
	snprintf(what, sizeof(what), "%s, %s%s%s: the ring against the full cache", path,
		 sets[0] ? sets[0] : "all on the compute tier", sets[0] && sets[1] ? ", " : "",
		 sets[0] && sets[1] ? sets[1] : "");
	/* the ring is in force where the model is windowed on every layer */
	ck_assert_int_eq(full.cols, RP + RG);
	ck_assert_msg(ringed.cols == (m == RM_QWEN2_MIXED ? RP + RG : RWIN), "%s: %lld columns",
		      what, (long long)ringed.cols);
	uint64_t fb = 0, rb = 0;
	for (int r = 0; r < FG_ROLES; r++)
		fb += full.bytes[r], rb += ringed.bytes[r];
	ck_assert_msg(m == RM_QWEN2_MIXED ? rb == fb : rb < fb, "%s: %llu bytes, full %llu", what,
		      (unsigned long long)rb, (unsigned long long)fb);
	ring_same(what, &ringed, &full);
	/* the full cache (windowed loads: core/exec/schedule.c) as the
	 * all-compute run, where the products keep their shapes */
	int reshaped = 0;
	for (int i = 0; i < 4 && sets[i]; i++)
		reshaped |= strstr(sets[i], "gpu_batch_size") != NULL;
	if (si > 0 && si != RING_PLAIN && !reshaped) {
		const char *none[1] = { NULL };
		const char *q4[2] = { "policy.compress_cache=true", NULL };
		ring_run(path, si >= RING_PLAIN ? q4 : none, 0, &ref);
		snprintf(what, sizeof(what), "%s, %s: the full cache against the all-compute run",
			 path, sets[0]);
		ring_same(what, &full, &ref);
		free(ref.logits);
	}
	printf("%s, %s: ring of %lld columns (%llu bytes) as the full cache of %d (%llu bytes)\n",
	       path, sets[0] ? sets[0] : "all compute", (long long)ringed.cols,
	       (unsigned long long)rb, RP + RG, (unsigned long long)fb);
	free(full.logits);
	free(ringed.logits);
}
END_TEST

static int ring_ok(int i)
{
	int m = i / RING_SETS, si = i % RING_SETS;
	if (m != RM_WINDOW_LLAMA)
		return si < RING_PLAIN; /* (kv width 32: no 4-bit cache) */
	if (!window_dir[0]) {
		printf("skipped: the 4-bit ring cases: FGCORE_TESTDATA is not set\n");
		skipped++;
		return 0;
	}
	return 1;
}

/* The plan: a windowed model's cache is the window's, so a batch that did
 * not fit does; a mixed model's, a pipeline stage's and share_prefix keep
 * every position. */
START_TEST(test_window_ring_plan)
{
	const char *src = getenv("FGCORE_SRCDIR");
	char path[4200];
	struct fg_config *c;
	struct fg_engine *e;

	snprintf(path, sizeof(path), "%s/tests/data/mistral-window-tiny",
		 src && *src ? src : FG_TEST_SRCDIR);
	snprintf(model, sizeof(model), "%s", path);
	c = base_config();
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	struct fg_model_config mc = e->model.cfg;
	struct fg_policy p = e->policy;
	struct fg_plan_env env = { 4, 0, 4, 0, 1 }, no = env;
	struct fg_plan ring, full;
	no.window_ring = 0;
	ck_assert_int_eq(fg_plan_ring_window(&mc), RWIN);
	ck_assert_int_eq(fg_plan_make(&mc, &p, &env, 100, 100, &ring), 0);
	ck_assert_int_eq(fg_plan_make(&mc, &p, &no, 100, 100, &full), 0);
	ck_assert_int_eq(ring.cols, RWIN);
	ck_assert_int_eq(full.cols, 200);
	/* one K (or V) of a GPU batch: the window's rows, fp32 activations */
	uint64_t kvw = (uint64_t)(mc.kv_heads * mc.head_dim);
	ck_assert_uint_eq(ring.kv[FG_ROLE_COMPUTE], (uint64_t)p.gpu_batch_size * RWIN * kvw * 4);
	ck_assert_uint_eq(full.kv[FG_ROLE_COMPUTE], (uint64_t)p.gpu_batch_size * 200 * kvw * 4);
	ck_assert_uint_eq(full.run[FG_ROLE_COMPUTE] - ring.run[FG_ROLE_COMPUTE],
			  (uint64_t)mc.layers * 2 * (full.kv[FG_ROLE_COMPUTE] - ring.kv[FG_ROLE_COMPUTE]));
	/* a compute tier that holds the ring's batch and not the full one's */
	uint64_t avail[FG_ROLES] = { UINT64_MAX, UINT64_MAX, ring.run[FG_ROLE_COMPUTE] };
	const char *names[FG_ROLES] = { "disk", "host", "compute" };
	ck_assert_int_eq(fg_plan_fits(&mc, &p, &env, 100, 100, avail, names), 0);
	ck_assert_int_eq(fg_plan_fits(&mc, &p, &no, 100, 100, avail, names), -ENOSPC);
	/* a run within the window: every position; share_prefix, window_ring
	 * off: every position */
	ck_assert_int_eq(fg_plan_cache_cols(&mc, &p, &env, RWIN), RWIN);
	ck_assert_int_eq(fg_plan_cache_cols(&mc, &p, &env, 5), 5);
	p.share_prefix = 32;
	ck_assert_int_eq(fg_plan_cache_cols(&mc, &p, &env, 100), 100);
	p.share_prefix = 0;
	p.window_ring = 0;
	ck_assert_int_eq(fg_plan_cache_cols(&mc, &p, &env, 100), 100);
	p.window_ring = 1;
	/* one layer without the window: every position */
	mc.window_layers[0] &= ~1ull;
	ck_assert_int_eq(fg_plan_ring_window(&mc), 0);
	ck_assert_int_eq(fg_plan_cache_cols(&mc, &p, &env, 100), 100);
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* share_prefix's prefill steps attend over the cache many tokens at a
 * time: a run with the ring refuses them in one line. */
START_TEST(test_window_ring_share_refused)
{
	const char *src = getenv("FGCORE_SRCDIR");
	struct fg_config *c;
	struct fg_engine *e;
	struct fg_forward_env env;
	struct fg_forward *f;

	snprintf(model, sizeof(model), "%s/tests/data/mistral-window-tiny",
		 src && *src ? src : FG_TEST_SRCDIR);
	c = base_config();
	ck_assert_msg(fg_engine_open(c, &e) == 0, "%s", fg_last_error_text());
	fg_engine_forward_env(e, 1, &env);
	ck_assert_msg(fg_forward_new(&f, &env, 12, 8) == 0, "%s", fg_last_error_text());
	ck_assert_int_eq(fg_forward_cache_columns(f), RWIN);
	int32_t ids[8 * 12], pad[8] = { 0 }, src0[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
	for (int i = 0; i < 8 * 12; i++)
		ids[i] = 5 + i % 12;
	struct fg_prefix_share sh = { .levels = 1, .split = { 6 }, .src = { src0 } };
	fg_forward_set_shared_prefix(f, &sh);
	ck_assert_int_eq(fg_forward_prefill(f, ids, pad, NULL, NULL), -ENOTSUP);
	ck_assert_msg(strstr(fg_last_error_text(), "share_prefix"), "%s", fg_last_error_text());
	fg_forward_free(f);
	fg_engine_close(e);
	fg_config_free(c);
}
END_TEST

/* Register test over the indices of [0, n) for which ok(i), in runs. */
static void add_runnable(TCase *tc, const TTest *test, int n, int (*ok)(int))
{
	int run[NVARIANTS * (NMATRIX + 1)];
	for (int i = 0; i < n; i++)
		run[i] = ok(i);
	for (int i = 0, j; i < n; i = j + 1) {
		for (j = i; j < n && run[j]; j++)
			;
		if (j > i)
			tcase_add_loop_test(tc, test, i, j);
	}
}

static int variant_ok(int i)
{
	const char *why = cannot_run(&variants[i]);
	if (why) {
		printf("skipped: %s: %s\n", variants[i].name, why);
		skipped++;
	}
	return !why;
}

static int matrix_ok(int i)
{
	const struct matrix_model *mm = &matrix_models[i / NVARIANTS];
	const char *td = getenv("FGCORE_TESTDATA");
	const char *why = cannot_run(&variants[i % NVARIANTS]);
	if (!why && !mm->intree && (!td || !*td))
		why = "FGCORE_TESTDATA is not set";
	if (why) {
		printf("skipped: %s, %s: %s\n", mm->dir, variants[i % NVARIANTS].name, why);
		skipped++;
	}
	return !why;
}

static int other_ok(int i)
{
	const char *td = getenv("FGCORE_TESTDATA");
	const char *why = cannot_run(&variants[subset[i % 6]]);
	if (!why && i < 6 && (!td || !*td))
		why = "FGCORE_TESTDATA is not set";
	if (why) {
		printf("skipped: %s, %s: %s\n", i < 6 ? "opt-tiny-64x2" : "dummy:opt-125m",
		       variants[subset[i % 6]].name, why);
		skipped++;
	}
	return !why;
}

int main(void)
{
	const char *td = getenv("FGCORE_TESTDATA");
	/* A slow disk: posix_file requests wait 1 ms in their worker, so a
	 * schedule that reuses a buffer before its disk request finished fails
	 * here every time, not once in a loaded run (a prefill once refilled the
	 * cache slot while its store to disk was still reading it). */
	setenv("FGCORE_POSIX_FILE_DELAY_US", "1000", 0);
	if (!td || !*td) {
		printf("FGCORE_TESTDATA is not set: the matrix runs on dummy:opt-125m instead of opt-tiny-128x4\n");
		skipped++;
	}
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("equivalence");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 900);
	add_runnable(tc, test_equivalence, NVARIANTS, variant_ok);
	add_runnable(tc, test_equivalence_other_models, 12, other_ok);
	add_runnable(tc, test_equivalence_models, NMATRIX * NVARIANTS, matrix_ok);
	if (td && *td && window_model_make(window_dir, sizeof(window_dir), RWIN)) {
		printf("could not make the windowed llama-py-128x4 in /var/tmp\n");
		return 1;
	}
	/* (CK_RUN_CASE="window ring": these alone) */
	TCase *rc = tcase_create("window ring");
	tcase_add_checked_fixture(rc, setup, teardown);
	tcase_set_timeout(rc, 900);
	add_runnable(rc, test_window_ring, RING_MODELS * RING_SETS, ring_ok);
	tcase_add_test(rc, test_window_ring_plan);
	tcase_add_test(rc, test_window_ring_share_refused);
	suite_add_tcase(s, rc);
	tcase_add_test(tc, test_memory_accounting);
	tcase_add_test(tc, test_capacity_refusal);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (window_dir[0])
		window_model_remove(window_dir);
	if (!failed && skipped)
		printf("%d cases could not run here: skip\n", skipped);
	return failed ? 1 : skipped ? 77 : 0;
}
