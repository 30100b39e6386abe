/* core/model/opt_config.c - OPT hyper-parameters: FlexGen's presets and HF config.json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/model/fileio.h"
#include "core/model/opt_config.h"
#include "core/util/error.h"

/* Every size is bounded before anything is sized from it. */
#define FG_OPT_DIM_MAX (INT64_C(1) << 20)
/* A config.json is a few hundred bytes; refuse to slurp anything huge. */
#define FG_OPT_CONFIG_MAX_BYTES (1u << 20)

struct opt_preset {
	const char *name;
	int64_t hidden, layers, heads, ffn;
};

/* FlexGen's flexgen/opt_config.py shapes; vocab 50272 and 2048 positions for all. */
static const struct opt_preset opt_presets[] = {
	{ "opt-125m", 768, 12, 12, 3072 },
	{ "opt-1.3b", 2048, 24, 32, 8192 },
	{ "opt-2.7b", 2560, 32, 32, 10240 },
	{ "opt-6.7b", 4096, 32, 32, 16384 },
	{ "opt-13b", 5120, 40, 40, 20480 },
	{ "opt-30b", 7168, 48, 56, 28672 },
	{ "opt-66b", 9216, 64, 72, 36864 },
	{ "opt-175b", 12288, 96, 96, 49152 },
	{ "opt-iml-1.3b", 2048, 24, 32, 8192 },
	{ "opt-iml-30b", 7168, 48, 56, 28672 },
	{ "opt-iml-max-1.3b", 2048, 24, 32, 8192 },
	{ "opt-iml-max-30b", 7168, 48, 56, 28672 },
};

#define OPT_NPRESETS (sizeof(opt_presets) / sizeof(opt_presets[0]))

/* "opt-125m, opt-1.3b, ..." for error messages. */
static const char *opt_preset_names(char *buf, size_t len)
{
	size_t used = 0, i;

	buf[0] = '\0';
	for (i = 0; i < OPT_NPRESETS && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
					 opt_presets[i].name);
	return buf;
}

static void opt_defaults(struct fg_opt_config *out)
{
	memset(out, 0, sizeof(*out));
	out->vocab = 50272;
	out->max_pos = 2048;
	out->pad_id = 1;
	out->bos_id = 2;
	out->eos_id = 2;
}

int fg_opt_preset(const char *name, struct fg_opt_config *out)
{
	const char *base;
	char names[256];
	size_t i;

	if (!name || !out) {
		FG_ERR("OPT preset: no model name given; use one of %s",
		       opt_preset_names(names, sizeof(names)));
		return -EINVAL;
	}
	/* "facebook/opt-1.3b" is the Hub id FlexGen users pass. */
	base = name;
	if (strncasecmp(base, "facebook/", 9) == 0)
		base += 9;
	if (strcasecmp(base, "opt-350m") == 0) {
		FG_ERR("OPT preset \"%s\": opt-350m is post-LayerNorm OPT with project_in/out "
		       "(word_embed_proj_dim 512), which is not supported; use opt-125m or opt-1.3b",
		       name);
		return -ENOTSUP;
	}
	for (i = 0; i < OPT_NPRESETS; i++) {
		const struct opt_preset *p = &opt_presets[i];

		if (strcasecmp(base, p->name) != 0)
			continue;
		opt_defaults(out);
		snprintf(out->name, sizeof(out->name), "%s", p->name);
		out->hidden = p->hidden;
		out->layers = p->layers;
		out->heads = p->heads;
		out->ffn = p->ffn;
		return 0;
	}
	FG_ERR("OPT preset \"%s\" is unknown; known presets: %s", name,
	       opt_preset_names(names, sizeof(names)));
	return -ENOENT;
}

/* A required positive integer, bounded. */
static int opt_get_dim(const char *path, json_t *root, const char *key, int64_t *out)
{
	json_t *v = json_object_get(root, key);
	json_int_t x;

	if (!v) {
		FG_ERR("%s: required key \"%s\" is missing", path, key);
		return -EINVAL;
	}
	if (!json_is_integer(v)) {
		FG_ERR("%s: key \"%s\" must be an integer", path, key);
		return -EINVAL;
	}
	x = json_integer_value(v);
	if (x <= 0 || x > FG_OPT_DIM_MAX) {
		FG_ERR("%s: key \"%s\" is %lld; it must be between 1 and %lld", path, key,
		       (long long)x, (long long)FG_OPT_DIM_MAX);
		return -EINVAL;
	}
	*out = x;
	return 0;
}

/* An optional token id in [0, vocab). */
static int opt_get_token(const char *path, json_t *root, const char *key, int64_t vocab,
			 int32_t *out)
{
	json_t *v = json_object_get(root, key);
	json_int_t x;

	if (!v)
		return 0;
	if (!json_is_integer(v)) {
		FG_ERR("%s: key \"%s\" must be an integer token id", path, key);
		return -EINVAL;
	}
	x = json_integer_value(v);
	if (x < 0 || x >= vocab) {
		FG_ERR("%s: key \"%s\" is %lld, outside the vocabulary [0, %lld)", path, key,
		       (long long)x, (long long)vocab);
		return -EINVAL;
	}
	*out = (int32_t)x;
	return 0;
}

/* An optional boolean: *out keeps its default when the key is absent. */
static int opt_get_bool(const char *path, json_t *root, const char *key, int *out)
{
	json_t *v = json_object_get(root, key);

	if (!v)
		return 0;
	if (!json_is_boolean(v)) {
		FG_ERR("%s: key \"%s\" must be true or false", path, key);
		return -EINVAL;
	}
	*out = json_is_true(v);
	return 0;
}

/* The folder holding config.json names the model ("opt-tiny-64x2"). */
static void opt_name_from_path(const char *path, char *name, size_t len)
{
	char *real = realpath(path, NULL);
	const char *p = real ? real : path;
	const char *end = strrchr(p, '/');
	const char *start;

	snprintf(name, len, "opt");
	if (end && end > p) {
		start = end - 1;
		while (start > p && start[-1] != '/')
			start--;
		if (end > start)
			snprintf(name, len, "%.*s", (int)(end - start), start);
	}
	free(real);
}

static int opt_parse(const char *path, json_t *root, struct fg_opt_config *out)
{
	json_t *v;
	int64_t proj;
	int flag;
	int rc;

	if (!json_is_object(root)) {
		FG_ERR("%s: the top level must be a JSON object", path);
		return -EINVAL;
	}
	v = json_object_get(root, "model_type");
	if (!v) {
		FG_ERR("%s: required key \"model_type\" is missing", path);
		return -EINVAL;
	}
	if (!json_is_string(v)) {
		FG_ERR("%s: key \"model_type\" must be a string", path);
		return -EINVAL;
	}
	if (strcmp(json_string_value(v), "opt") != 0) {
		FG_ERR("%s: model_type \"%s\" is not supported; only OPT models (\"opt\") are",
		       path, json_string_value(v));
		return -ENOTSUP;
	}

	opt_defaults(out);
	if ((rc = opt_get_dim(path, root, "vocab_size", &out->vocab)) ||
	    (rc = opt_get_dim(path, root, "hidden_size", &out->hidden)) ||
	    (rc = opt_get_dim(path, root, "num_attention_heads", &out->heads)) ||
	    (rc = opt_get_dim(path, root, "num_hidden_layers", &out->layers)) ||
	    (rc = opt_get_dim(path, root, "ffn_dim", &out->ffn)) ||
	    (rc = opt_get_dim(path, root, "max_position_embeddings", &out->max_pos)))
		return rc;
	if (out->hidden % out->heads != 0) {
		FG_ERR("%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path,
		       (long long)out->hidden, (long long)out->heads);
		return -EINVAL;
	}
	if ((rc = opt_get_token(path, root, "pad_token_id", out->vocab, &out->pad_id)) ||
	    (rc = opt_get_token(path, root, "bos_token_id", out->vocab, &out->bos_id)) ||
	    (rc = opt_get_token(path, root, "eos_token_id", out->vocab, &out->eos_id)))
		return rc;

	/* Refusals: shapes of OPT this engine does not compute. */
	flag = 1;
	if ((rc = opt_get_bool(path, root, "do_layer_norm_before", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: do_layer_norm_before is false: post-LayerNorm OPT (opt-350m style) "
		       "with project_in/out is not supported; use another OPT size",
		       path);
		return -ENOTSUP;
	}
	proj = out->hidden;
	if (json_object_get(root, "word_embed_proj_dim") &&
	    (rc = opt_get_dim(path, root, "word_embed_proj_dim", &proj)))
		return rc;
	if (proj != out->hidden) {
		FG_ERR("%s: word_embed_proj_dim %lld differs from hidden_size %lld: OPT with "
		       "project_in/out is not supported; use another OPT size",
		       path, (long long)proj, (long long)out->hidden);
		return -ENOTSUP;
	}
	v = json_object_get(root, "activation_function");
	if (v && !json_is_string(v)) {
		FG_ERR("%s: key \"activation_function\" must be a string", path);
		return -EINVAL;
	}
	if (v && strcmp(json_string_value(v), "relu") != 0) {
		FG_ERR("%s: activation_function \"%s\" is not supported; OPT uses \"relu\"", path,
		       json_string_value(v));
		return -ENOTSUP;
	}
	flag = 1;
	if ((rc = opt_get_bool(path, root, "enable_bias", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: enable_bias is false: OPT without biases is not supported", path);
		return -ENOTSUP;
	}
	flag = 1;
	if ((rc = opt_get_bool(path, root, "layer_norm_elementwise_affine", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: layer_norm_elementwise_affine is false: layer norms without weight "
		       "and bias are not supported",
		       path);
		return -ENOTSUP;
	}
	flag = 0;
	if ((rc = opt_get_bool(path, root, "_remove_final_layer_norm", &flag)))
		return rc;
	if (flag) {
		FG_ERR("%s: _remove_final_layer_norm is true: OPT without the final layer norm "
		       "is not supported",
		       path);
		return -ENOTSUP;
	}
	/* lm_head is never read: it must be the token embedding. */
	flag = 1;
	if ((rc = opt_get_bool(path, root, "tie_word_embeddings", &flag)))
		return rc;
	if (!flag) {
		FG_ERR("%s: tie_word_embeddings is false: an lm_head separate from "
		       "embed_tokens is not supported",
		       path);
		return -ENOTSUP;
	}
	opt_name_from_path(path, out->name, sizeof(out->name));
	return 0;
}

int fg_opt_config_load(const char *path, struct fg_opt_config *out)
{
	struct fg_opt_config tmp;
	json_error_t jerr;
	json_t *root;
	size_t len = 0;
	char *buf = NULL;
	int rc;

	rc = fg_read_small_file(path, FG_OPT_CONFIG_MAX_BYTES, &buf, &len);
	if (rc)
		return rc;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		FG_ERR("%s:%d:%d: not valid JSON: %s", path, jerr.line, jerr.column, jerr.text);
		return -EINVAL;
	}
	rc = opt_parse(path, root, &tmp);
	json_decref(root);
	if (rc == 0)
		*out = tmp;
	return rc;
}

uint64_t fg_opt_param_count(const struct fg_opt_config *c)
{
	uint64_t h = (uint64_t)c->hidden, f = (uint64_t)c->ffn;
	/* q, k, v, out (weight + bias), fc1, fc2, two layer norms. */
	uint64_t layer = 4 * (h * h + h) + (f * h + f) + (h * f + h) + 2 * 2 * h;

	return (uint64_t)c->vocab * h + ((uint64_t)c->max_pos + 2) * h + 2 * h +
	       (uint64_t)c->layers * layer;
}
