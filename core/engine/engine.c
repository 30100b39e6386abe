/* core/engine/engine.c - open an engine from a configuration: the compute
 * backend, the compute tier, the model's weights and its tokenizer. */
/* Angle brackets: "config.h" would find core/config/config.h first. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <fgcore/fgcore.h>
#include "core/config/config.h"
#include "core/dist/dist.h"
#include "core/engine/engine.h"
#include "core/exec/pipe.h"
#include "core/util/clock.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "core/util/utf8.h"

static int open_tier(const struct fg_config *c, const char *role, struct fg_tier *t)
{
	struct fg_plugin_handle ph;
	char section[32];
	void *opts;
	int rc;

	snprintf(section, sizeof(section), "tier.%s", role);
	rc = fg_config_open_plugin(c, section, FG_PLUGIN_STORAGE, &ph, &opts);
	if (rc)
		return rc;
	return fg_tier_open(t, role, &ph, opts, fg_config_size(c, section, "capacity"));
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *dir, const char *name)
{
	char p[4096];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0;
}

/* The tokenizer is optional for dummy models and token-id requests: when the
 * model names none, remember why, and fail only when text must be encoded. */
static int open_tokenizer(const struct fg_config *c, struct fg_engine *e)
{
	const char *dir = fg_config_str(c, "model", "tokenizer");
	const char *model = fg_config_str(c, "model", "path");
	int explicit = dir && *dir;

	if (!explicit)
		dir = model;
	if (!explicit && (!is_dir(dir) || (!file_exists(dir, "vocab.json") &&
					   !file_exists(dir, "tokenizer.json")))) {
		snprintf(e->tok_error, sizeof(e->tok_error),
			 "model %s has no tokenizer (tokenizer.json, or vocab.json and merges.txt): set [model] tokenizer = DIR to a folder holding them",
			 model);
		return 0;
	}
	return fg_tokenizer_load_dir(dir, &e->tok);
}

/* The token a text is read with first (-1: none).  As Hugging Face's
 * tokenizer for the folder encodes a text with special tokens where its
 * files say (a template post-processor, tokenizer_config.json's
 * add_bos_token): its bos; else as the family's checkpoints are fed
 * (fg_arch.text_bos): config.json's bos. */
static int32_t text_bos(const struct fg_engine *e)
{
	enum fg_tok_bos r = e->tok ? fg_tokenizer_bos_rule(e->tok) : FG_TOK_BOS_UNSAID;
	const struct fg_model_config *mc = &e->model.cfg;
	int32_t id = r == FG_TOK_BOS_ADD ? fg_tokenizer_bos_id(e->tok) : mc->bos_id;

	if (r == FG_TOK_BOS_NONE || (r == FG_TOK_BOS_UNSAID && !mc->arch->text_bos))
		return -1;
	return id >= 0 && id < mc->vocab ? id : -1;
}

/* The compute tier must be memory the backend computes on: a host-memory
 * backend over device memory (or the reverse) would fault in its first op. */
static int check_compute_tier(const struct fg_engine *e)
{
	const struct fg_tier *t = &e->tiers[FG_ROLE_COMPUTE];
	int dev_tier = !!(t->info.flags & FG_STORAGE_DEVICE_MEMORY);
	int host_tier = !!(t->info.flags & FG_STORAGE_HOST_MEMORY);
	int dev_be = FG_ABI_MINOR_OF(e->be.ph.plugin->abi_version) >= 1 && e->be.info.device_memory;

	if (!(t->info.flags & FG_STORAGE_ADDRESSABLE)) {
		FG_ERR("[tier.compute] plugin %s is not a memory tier: the compute tier must be addressable by the %s backend",
		       t->ph.plugin->name, e->be.ph.plugin->name);
		return -EINVAL;
	}
	if (dev_tier && !dev_be) {
		FG_ERR("[tier.compute] plugin %s is device memory, but [compute] plugin %s computes on host memory: use a host-memory compute tier (pinned_host) with %s, or a GPU backend (cublas) with %s",
		       t->ph.plugin->name, e->be.ph.plugin->name, e->be.ph.plugin->name,
		       t->ph.plugin->name);
		return -EINVAL;
	}
	if (dev_be && (host_tier || !dev_tier)) {
		FG_ERR("[tier.compute] plugin %s is not device memory, but [compute] plugin %s computes on device memory: use cuda_mem as the compute tier with %s",
		       t->ph.plugin->name, e->be.ph.plugin->name, e->be.ph.plugin->name);
		return -EINVAL;
	}
	return 0;
}

/* Every op the family's bodies call, with the dtypes this policy gives its
 * operands, must be one the backend runs: refused before a weight is read. */
static int check_ops(const struct fg_backend *be, const char *section,
		     const struct fg_model_config *c, const struct fg_policy *p, int host_only)
{
	enum fg_dtype act = be->info.act_dtype;
	enum fg_dtype wdt = fg_plan_weight_dtype(p);
	enum fg_dtype cdt = fg_plan_cache_dtype(p, act);
	enum fg_op ops[16];
	enum fg_dtype dts[16];
	int n = c->arch->ops(c, wdt, act, cdt, ops, dts);
	const char *name = be->ph.plugin->name;

	for (int i = 0; i < n; i++) {
		/* The host backend of cpu_cache_compute only appends and attends. */
		if (host_only && ops[i] != FG_OP_ATTENTION_DECODE && ops[i] != FG_OP_KV_APPEND &&
		    ops[i] != FG_OP_ATTENTION_GQA && ops[i] != FG_OP_ATTENTION_SOFTCAP)
			continue;
		if (fg_backend_supports(be, ops[i], dts[i]))
			continue;
		if (dts[i] == FG_DTYPE_Q4_ROWS)
			FG_ERR("[policy] compress_weight = true, but %s %s does not read 4-bit (int4_group64) weights: set compress_weight = false or use a backend that does (cpu_blas, cublas)",
			       section, name);
		else if (dts[i] == FG_DTYPE_F8_ROWS)
			FG_ERR("[policy] compress_weight = true with weight_codec = fp8_e4m3_rows, but %s %s does not read fp8 weights: use weight_codec = int4_group64, compress_weight = false or a backend that does (cpu_blas)",
			       section, name);
		else if (dts[i] == FG_DTYPE_Q4_COLS)
			FG_ERR("[policy] compress_cache = true, but %s %s does not read a 4-bit (int4_group64) KV cache: set compress_cache = false or use a backend that does (cpu_blas, cublas)",
			       section, name);
		else if (dts[i] == FG_DTYPE_F8_COLS)
			FG_ERR("[policy] compress_cache = true with cache_codec = fp8_e4m3_group64, but %s %s does not read an fp8 KV cache: use cache_codec = int4_group64, compress_cache = false or a backend that does (cpu_blas, cublas)",
			       section, name);
		else if (be->minor < (uint32_t)fg_op_minor(ops[i]))
			FG_ERR("model %s (%s family): %s %s is built for compute ABI 1.%u, and the family needs %s (compute ABI 1.%d): use a backend built for 1.%d or later (cpu_blas)",
			       c->name, c->arch->name, section, name, be->minor, fg_op_name(ops[i]),
			       fg_op_minor(ops[i]), fg_op_minor(ops[i]));
		else
			FG_ERR("model %s (%s family): %s %s does not run %s over %s, which the family needs: use a backend that does (cpu_blas, cublas)",
			       c->name, c->arch->name, section, name, fg_op_name(ops[i]),
			       fg_dtype_name(dts[i]));
		return -ENOTSUP;
	}
	return 0;
}

static int need_tier(const struct fg_policy *p, enum fg_role r)
{
	return p->weight[r] || p->cache[r] || p->act[r];
}

void fg_engine_forward_env(struct fg_engine *e, int64_t nb, struct fg_forward_env *env)
{
	memset(env, 0, sizeof(*env));
	env->model = &e->model;
	env->dist = e->dist;
	env->be = &e->be;
	env->host_be = e->host_be.ops ? &e->host_be : &e->be;
	env->policy = e->policy;
	env->policy.num_gpu_batches = nb;
}

/* Attention delegated to the host needs a host backend when the compute
 * tier is device memory: cpu_blas, with its defaults. */
static int open_host_backend(struct fg_engine *e)
{
	struct fg_plugin_handle ph;
	void *opts;
	int rc = fg_plugin_load("cpu_blas", FG_PLUGIN_COMPUTE, &ph);
	if (rc)
		return rc;
	opts = fg_plugin_opts_new(ph.plugin);
	if (!opts && ph.plugin->opts_size) {
		fg_plugin_close(&ph);
		return -ENOMEM;
	}
	return fg_backend_open(&e->host_be, &ph, opts);
}

/* What every stage of a pipeline must share, one "key value" per line. */
static void fingerprint(const struct fg_config *c, const struct fg_engine *e,
			const struct fg_model_config *mc, char *out, size_t n)
{
	const struct fg_policy *p = &e->policy;
	char abi[128];

	snprintf(out, n,
		 "build fgcore %s, plugin ABI %d (%s)\n"
		 "model %s (%s, %lld layers, hidden %lld, vocab %lld, %lld heads, %lld kv heads, ffn %lld)\n"
		 "[policy] gpu_batch_size %lld\n[policy] num_gpu_batches %lld\n"
		 "[policy] overlap %d, sep_layer %d, cpu_cache_compute %d\n"
		 "[policy] compress_weight %d (weight_fp8 %d), compress_cache %d (cache_fp8 %d)\n"
		 "activations of %u bytes ([compute] %s)\n"
		 "[distributed] layers \"%s\"\n[distributed] micro_batches %lld\n"
		 "[distributed] transport %s\n[distributed] replicas %lld\n",
		 PACKAGE_VERSION, FG_ABI_MAJOR, fg_plugin_abi_text(abi, sizeof(abi)), mc->name,
		 mc->arch->name,
		 (long long)mc->layers, (long long)mc->hidden, (long long)mc->vocab,
		 (long long)mc->heads, (long long)mc->kv_heads, (long long)mc->ffn,
		 (long long)p->gpu_batch_size, (long long)p->num_gpu_batches, p->overlap,
		 p->sep_layer, p->cpu_cache_compute, p->compress_weight, p->weight_fp8,
		 p->compress_cache, p->cache_fp8,
		 fg_dtype_size(e->be.info.act_dtype), e->be.ph.plugin->name,
		 fg_config_str(c, "distributed", "layers"),
		 (long long)fg_config_int(c, "distributed", "micro_batches"),
		 fg_config_str(c, "distributed", "transport"),
		 (long long)fg_config_int(c, "distributed", "replicas"));
}

/* A pipeline stage's own share of the tiers (before the tiers open). */
static int stage_policy(const struct fg_config *c, struct fg_engine *e)
{
	const struct fg_dist *d = e->world;
	char pct[256];
	int rc;

	if (!d)
		return 0;
	if ((rc = fg_stage_percent(fg_config_str(c, "distributed", "percent"), d->info.size,
				   d->info.rank, pct, sizeof(pct))))
		return rc;
	return *pct ? fg_policy_parse_percent(pct, &e->policy) : 0;
}

/* The layers this process holds. */
static int stage_layers(const struct fg_config *c, const struct fg_engine *e,
			const struct fg_model_config *mc, struct fg_stage *st)
{
	const struct fg_dist *d = e->world;

	if (!d) {
		fg_stage_whole(mc->layers, st);
		return 0;
	}
	return fg_stage_split(fg_config_str(c, "distributed", "layers"), mc->layers, d->info.size,
			      d->info.rank, st);
}

int fg_engine_open(const struct fg_config *c, struct fg_engine **out)
{
	static const char *const roles[FG_ROLES] = { "disk", "host", "compute" };
	struct fg_engine *e = calloc(1, sizeof(*e));
	struct fg_plugin_handle ph;
	struct fg_model_config mc;
	struct fg_weights *w = NULL;
	double t0;
	void *opts;
	int rc, agreed = 0; /* a pipeline's rounds of agreement passed */

	if (!e) {
		FG_ERR("out of memory");
		return -ENOMEM;
	}
	e->end_chance = fg_config_double(c, "bench", "end_chance");
	if ((rc = fg_policy_from_config(c, &e->policy)) || (rc = fg_dist_open(c, &e->world)))
		goto fail;
	/* The pipeline's side: a replica of more than one stage. */
	e->dist = e->world && e->world->info.size > 1 ? e->world : NULL;
	if ((rc = stage_policy(c, e)))
		goto fail;
	rc = fg_config_open_plugin(c, "compute", FG_PLUGIN_COMPUTE, &ph, &opts);
	if (rc)
		goto fail;
	rc = fg_backend_open(&e->be, &ph, opts);
	if (rc)
		goto fail;
	for (int r = FG_ROLES - 1; r >= 0; r--) {
		if (r == FG_ROLE_DISK && !need_tier(&e->policy, r))
			continue;
		if ((rc = open_tier(c, roles[r], &e->tiers[r])))
			goto fail;
		e->tier[r] = &e->tiers[r];
	}
	if ((rc = check_compute_tier(e)))
		goto fail;
	if (!(e->tiers[FG_ROLE_HOST].info.flags & FG_STORAGE_HOST_MEMORY)) {
		FG_ERR("[tier.host] plugin %s is not host memory: use pinned_host",
		       e->tiers[FG_ROLE_HOST].ph.plugin->name);
		rc = -EINVAL;
		goto fail;
	}
	/* A host-memory compute tier and the host tier are one RAM: one budget
	 * refuses what their shares ask together beyond it, before any weight is read. */
	struct fg_tier *members[FG_ROLES] = { e->tier[FG_ROLE_COMPUTE], e->tier[FG_ROLE_HOST],
					      e->tier[FG_ROLE_DISK] };
	fg_tier_budget_init(&e->host_mem, members, FG_ROLES);
	if (e->policy.cpu_cache_compute &&
	    !(e->tiers[FG_ROLE_COMPUTE].info.flags & FG_STORAGE_HOST_MEMORY) &&
	    (rc = open_host_backend(e)))
		goto fail;
	if (e->policy.compress_weight) {
		if ((rc = fg_plugin_load(fg_plan_weight_codec(fg_plan_weight_dtype(&e->policy)),
					 FG_PLUGIN_CODEC, &ph)) ||
		    (rc = fg_codec_open(&e->wcodec, &ph)))
			goto fail;
	}
	t0 = fg_now();
	rc = fg_weights_open(fg_config_str(c, "model", "path"), &mc, &w);
	/* Every stage checks the others' configuration before anything is read. */
	struct fg_stage stage;
	if (!rc)
		rc = stage_layers(c, e, &mc, &stage);
	if (e->world) {
		char fp[2048] = "";
		if (!rc)
			fingerprint(c, e, &mc, fp, sizeof(fp));
		rc = fg_pipe_agree_config(e->world, rc, fp);
		agreed = 1;
	}
	if (rc) {
		fg_weights_close(w);
		goto fail;
	}
	if ((rc = check_ops(&e->be, "[compute]", &mc, &e->policy, 0)) ||
	    (e->host_be.ops && (rc = check_ops(&e->host_be, "host backend", &mc, &e->policy, 1)))) {
		fg_weights_close(w);
		goto fail;
	}
	rc = fg_model_load_stage(&e->model, &mc, w, e->tier, &e->policy, e->wcodec.ops ? &e->wcodec : NULL,
				 &stage);
	fg_weights_close(w);
	if (e->world) {
		rc = fg_pipe_agree_all(e->world, rc);
		agreed = 2;
	}
	if (rc)
		goto fail;
	e->load_s = fg_now() - t0;
	if (e->world)
		FG_LOG(FG_LOG_INFO, "replica %d of %d, pipeline stage %d of %d: layers %lld..%lld%s%s, transport %s (%s)",
		       e->world->replica, e->world->replicas, e->world->info.rank,
		       e->world->info.size, (long long)stage.layer0,
		       (long long)(stage.layer0 + stage.nlayers - 1),
		       fg_stage_first(&stage) ? ", input block" : "",
		       fg_stage_last(&stage) ? ", output block" : "", e->world->name,
		       e->world->info.library);
	/* Only rank 0 reads and writes text. */
	rc = e->dist && e->dist->info.rank != 0 ? 0 : open_tokenizer(c, e);
	if (rc)
		goto fail;
	e->text_bos = text_bos(e);
	*out = e;
	return 0;
fail:
	/* The other stages wait for this one's outcome: give it to them. */
	if (e->world && agreed < 1)
		rc = fg_pipe_agree_config(e->world, rc, NULL);
	if (e->world && agreed < 2)
		rc = fg_pipe_agree_all(e->world, rc);
	fg_engine_close(e);
	return rc;
}

void fg_engine_close(struct fg_engine *e)
{
	if (!e)
		return;
	if (e->replicas_close)
		e->replicas_close(e);
	fg_forward_free(e->kept);
	if (e->dist && e->model.blocks)
		fg_pipe_close(e->dist);
	fg_tokenizer_free(e->tok);
	if (e->model.blocks)
		fg_model_unload(&e->model);
	if (e->wcodec.ops)
		fg_codec_close(&e->wcodec);
	fg_tier_budget_fini(&e->host_mem);
	for (int r = 0; r < FG_ROLES; r++)
		if (e->tier[r])
			fg_tier_close(e->tier[r]);
	if (e->host_be.ops)
		fg_backend_close(&e->host_be);
	if (e->be.ops)
		fg_backend_close(&e->be);
	fg_dist_close(e->world);
	free(e);
}

int fg_engine_info(const struct fg_engine *e, struct fg_model_info *out)
{
	const struct fg_model_config *c = &e->model.cfg;

	memset(out, 0, sizeof(*out));
	out->name = c->name;
	out->family = c->arch ? c->arch->name : "";
	out->vocab = c->vocab;
	out->bos_id = c->bos_id;
	out->eos_id = c->eos_id;
	out->pad_id = c->pad_id;
	out->max_positions = c->max_pos;
	out->text_bos = e->text_bos;
	out->has_tokenizer = e->tok != NULL;
	out->gpu_batch_size = e->policy.gpu_batch_size;
	out->num_gpu_batches = e->policy.num_gpu_batches;
	out->batch = e->policy.gpu_batch_size * e->policy.num_gpu_batches;
	out->compute_plugin = e->be.ph.plugin->name;
	for (int r = 0; r < FG_ROLES; r++)
		out->tier_plugin[fg_public_tier(r)] = e->tier[r] ? e->tier[r]->ph.plugin->name : NULL;
	out->stages = e->dist ? e->dist->info.size : 1;
	return 0;
}

void fg_engine_stats(const struct fg_engine *e, struct fg_run_stats *out)
{
	*out = e->stats;
	out->padding_positions = out->positions + out->shared_positions - out->useful_positions -
				 out->dead_positions;
	for (int r = 0; r < FG_ROLES; r++)
		out->peak_bytes[fg_public_tier(r)] = e->tier[r] ? e->tier[r]->peak : 0;
}

uint64_t fg_engine_positions(const struct fg_engine *e)
{
	return e->stats.positions;
}

int fg_tokenize(struct fg_engine *e, const char *text, int32_t **ids, size_t *n)
{
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	return fg_tokenizer_encode(e->tok, text, strlen(text), ids, n);
}

int fg_tokenize_prompt(struct fg_engine *e, const char *text, int32_t **ids, size_t *n)
{
	int rc = fg_tokenize(e, text, ids, n);
	int32_t *p;

	if (rc || e->text_bos < 0)
		return rc;
	if (!(p = realloc(*ids, (*n + 1) * sizeof(*p)))) {
		free(*ids);
		*ids = NULL;
		FG_ERR("out of memory for a prompt of %zu tokens", *n);
		return -ENOMEM;
	}
	memmove(p + 1, p, *n * sizeof(*p));
	p[0] = e->text_bos;
	*ids = p;
	(*n)++;
	return 0;
}

int fg_detokenize(struct fg_engine *e, const int32_t *ids, size_t n, char **text)
{
	size_t len;
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	int rc = fg_tokenizer_decode(e->tok, ids, n, text, &len);
	if (!rc && (rc = fg_utf8_nul_free(text, len))) {
		free(*text);
		*text = NULL;
		FG_ERR("out of memory decoding %zu tokens", n);
	}
	return rc;
}

int fg_detokenize_offsets(struct fg_engine *e, const int32_t *ids, size_t n, size_t *chars)
{
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	return fg_tokenizer_decode_offsets(e->tok, ids, n, chars);
}

int fg_engine_special_tokens(const struct fg_engine *e, struct fg_special_tokens *out)
{
	out->bos = fg_tokenizer_bos_id(e->tok);
	out->eos = fg_tokenizer_eos_id(e->tok);
	out->unk = fg_tokenizer_unk_id(e->tok);
	out->pad = fg_tokenizer_pad_id(e->tok);
	if (!e->tok) {
		FG_ERR("%s", e->tok_error);
		return -EINVAL;
	}
	return 0;
}

int fg_engine_check_config(struct fg_config *c)
{
	struct fg_policy policy;
	int rc = fg_config_check(c);

	return rc ? rc : fg_policy_from_config(c, &policy);
}
