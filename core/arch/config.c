/* core/arch/config.c - a model's hyper-parameters from a preset name or a
 * Hugging Face config.json, handed to the family its model_type names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arch/arch.h"
#include "core/arch/config.h"
#include "core/util/fileio.h"
#include "core/util/error.h"

/* A config.json is a few hundred bytes; refuse to slurp anything huge. */
#define FG_CONFIG_MAX_BYTES (1u << 20)

static const struct fg_arch *const fg_archs[] = { &fg_arch_opt, &fg_arch_llama, &fg_arch_mistral,
						   &fg_arch_qwen2, &fg_arch_qwen3,
						   &fg_arch_mixtral, &fg_arch_qwen2_moe,
						   &fg_arch_qwen3_moe, &fg_arch_gemma2 };
#define FG_NARCHS (sizeof(fg_archs) / sizeof(fg_archs[0]))

const struct fg_arch *fg_arch_find(const char *model_type)
{
	for (size_t i = 0; i < FG_NARCHS; i++)
		if (strcmp(fg_archs[i]->name, model_type) == 0)
			return fg_archs[i];
	return NULL;
}

static void fg_arch_names(char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < FG_NARCHS && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s\"%s\"", i ? ", " : "",
					 fg_archs[i]->name);
}

int fg_model_preset(const char *name, struct fg_model_config *c)
{
	char names[512];
	size_t used = 0;
	int rc = -ENOENT;

	for (size_t i = 0; i < FG_NARCHS; i++) {
		if (!fg_archs[i]->preset)
			continue;
		rc = fg_archs[i]->preset(name, c);
		if (rc == 0)
			return fg_arch_check(c->arch);
		if (rc != -ENOENT)
			return rc;
	}
	names[0] = '\0';
	for (size_t i = 0; i < FG_NARCHS && used < sizeof(names); i++)
		if (fg_archs[i]->presets)
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
						 used ? ", " : "", fg_archs[i]->presets);
	FG_ERR("model preset \"%s\" is unknown; known presets: %s", name ? name : "", names);
	return -ENOENT;
}

/* Two JSON values equal as config values: numbers by value (8 and 8.0 are
 * the same factor), objects key by key, anything else as jansson compares. */
static int fg_json_same(json_t *a, json_t *b)
{
	const char *k;
	json_t *v;

	if (json_is_number(a) && json_is_number(b))
		return json_number_value(a) == json_number_value(b);
	if (!json_is_object(a) || !json_is_object(b))
		return json_equal(a, b);
	if (json_object_size(a) != json_object_size(b))
		return 0;
	json_object_foreach(a, k, v)
		if (!fg_json_same(v, json_object_get(b, k)))
			return 0;
	return 1;
}

/* A rope object as transformers 5 standardizes it: "type" is "rope_type",
 * and a missing rope_theta is the top-level one (or 10000).  NULL: out of
 * memory. */
static json_t *fg_rope_as_read(json_t *rope, json_t *root)
{
	json_t *r = json_deep_copy(rope), *theta = json_object_get(root, "rope_theta");

	if (!r)
		return NULL;
	if (!json_object_get(r, "rope_type") && json_object_get(r, "type"))
		json_object_set(r, "rope_type", json_object_get(r, "type"));
	json_object_del(r, "type");
	if (!json_object_get(r, "rope_theta"))
		json_object_set_new(r, "rope_theta", theta ? json_deep_copy(theta) : json_real(10000));
	return r;
}

/* rope_parameters (transformers 5) and the older rope_scaling + rope_theta:
 * transformers 5 reads a non-empty rope_scaling in place of rope_parameters
 * (as 4.x, which knows only rope_scaling, does), so a config.json with both
 * is refused unless they say the same: the family reads rope_parameters.
 * And rope_parameters without a rope_theta takes the top-level one, as
 * transformers 5 does (so the family finds it there). */
static int fg_rope_keys(const char *path, json_t *root)
{
	json_t *params = json_object_get(root, "rope_parameters");
	json_t *scaling = json_object_get(root, "rope_scaling");
	json_t *theta = json_object_get(root, "rope_theta");
	json_t *a, *b;
	char *ta, *tb;
	int same;

	if (json_is_object(params) && json_object_size(params) == 0) {
		/* read as nothing: the older keys decide, as in transformers */
		json_object_del(root, "rope_parameters");
		return 0;
	}
	if (!json_is_object(params))
		return 0;	/* null or absent: the older keys; else the family refuses it */
	if (json_is_object(scaling) && json_object_size(scaling) > 0) {
		a = fg_rope_as_read(params, root);
		b = fg_rope_as_read(scaling, root);
		same = a && b && fg_json_same(a, b);
		ta = a ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		tb = b ? json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(a);
		json_decref(b);
		if (!ta || !tb) {
			free(ta);
			free(tb);
			FG_ERR("%s: out of memory reading the rope keys", path);
			return -ENOMEM;
		}
		if (!same)
			FG_ERR("%s: both \"rope_parameters\" %.160s and the older \"rope_scaling\" "
			       "%.160s are set and differ: transformers 5 would use rope_scaling "
			       "(with the top-level rope_theta) and ignore rope_parameters; keep the "
			       "one that is right and remove the other", path, ta, tb);
		free(ta);
		free(tb);
		if (!same)	/* one of them is stale: which, only the user knows */
			return -EINVAL;
	}
	if (theta && !json_object_get(params, "rope_theta") &&
	    json_object_set(params, "rope_theta", theta)) {
		FG_ERR("%s: out of memory reading the rope keys", path);
		return -ENOMEM;
	}
	return 0;
}

int fg_model_config_load(const char *path, struct fg_model_config *out)
{
	struct fg_model_config tmp;
	const struct fg_arch *a;
	json_error_t jerr;
	json_t *root, *v;
	size_t len = 0;
	char *buf = NULL, names[128];
	int rc;

	rc = fg_read_small_file(path, FG_CONFIG_MAX_BYTES, &buf, &len);
	if (rc)
		return rc;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		FG_ERR("%s:%d:%d: not valid JSON: %s", path, jerr.line, jerr.column, jerr.text);
		return -EINVAL;
	}
	rc = -EINVAL;
	if (!json_is_object(root)) {
		FG_ERR("%s: the top level must be a JSON object", path);
		goto out;
	}
	v = json_object_get(root, "model_type");
	if (!v) {
		FG_ERR("%s: required key \"model_type\" is missing", path);
		goto out;
	}
	if (!json_is_string(v)) {
		FG_ERR("%s: key \"model_type\" must be a string", path);
		goto out;
	}
	a = fg_arch_find(json_string_value(v));
	if (!a) {
		fg_arch_names(names, sizeof(names));
		FG_ERR("%s: model_type \"%s\" is not supported; supported: %s", path,
		       json_string_value(v), names);
		rc = -ENOTSUP;
		goto out;
	}
	if ((rc = fg_arch_check(a)) || (rc = fg_rope_keys(path, root)))
		goto out;
	memset(&tmp, 0, sizeof(tmp));
	rc = a->config(path, root, &tmp);
	if (rc == 0) {
		tmp.arch = a;
		*out = tmp;
	}
out:
	json_decref(root);
	return rc;
}

int fg_json_dim(const char *path, json_t *root, const char *key, int64_t *out)
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
	if (x <= 0 || x > FG_CONFIG_DIM_MAX) {
		FG_ERR("%s: key \"%s\" is %lld; it must be between 1 and %lld", path, key,
		       (long long)x, (long long)FG_CONFIG_DIM_MAX);
		return -EINVAL;
	}
	*out = x;
	return 0;
}

int fg_json_token(const char *path, json_t *root, const char *key, int64_t vocab, int32_t *out)
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

int fg_json_bool(const char *path, json_t *root, const char *key, int *out)
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

int fg_json_number(const char *path, json_t *root, const char *key, double *out)
{
	json_t *v = json_object_get(root, key);

	if (!v)
		return 0;
	if (!json_is_number(v)) {
		FG_ERR("%s: key \"%s\" must be a number", path, key);
		return -EINVAL;
	}
	*out = json_number_value(v);
	return 0;
}

void fg_json_name_from_path(const char *path, const char *fallback, char *name, size_t len)
{
	char *real = realpath(path, NULL);
	const char *p = real ? real : path;
	const char *end = strrchr(p, '/');
	const char *start;

	snprintf(name, len, "%s", fallback);
	if (end && end > p) {
		start = end - 1;
		while (start > p && start[-1] != '/')
			start--;
		if (end > start)
			snprintf(name, len, "%.*s", (int)(end - start), start);
	}
	free(real);
}

int fg_json_eos(const char *path, json_t *root, int64_t vocab, int32_t *out)
{
	json_t *v = json_object_get(root, "eos_token_id"), *first;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return fg_json_token(path, root, "eos_token_id", vocab, out);
	first = json_array_get(v, 0);
	if (!json_is_integer(first) || json_integer_value(first) < 0 ||
	    json_integer_value(first) >= vocab) {
		FG_ERR("%s: eos_token_id[0] must be a token id in [0, %lld)", path, (long long)vocab);
		return -EINVAL;
	}
	*out = (int32_t)json_integer_value(first);
	return 0;
}

int fg_json_eps(const char *path, json_t *root, const char *key, float *out)
{
	double eps = *out;
	int rc = fg_json_number(path, root, key, &eps);

	if (rc)
		return rc;
	if (!(eps > 0) || eps > 1) {
		FG_ERR("%s: %s %g must be in (0, 1]", path, key, eps);
		return -EINVAL;
	}
	*out = (float)eps;
	return 0;
}

int fg_json_head_dim_ok(const char *path, int64_t head_dim)
{
	if (head_dim % 2 || head_dim > FG_ROPE_MAX) {
		FG_ERR("%s: head_dim %lld must be even and at most %d", path, (long long)head_dim,
		       FG_ROPE_MAX);
		return -EINVAL;
	}
	return 0;
}

int fg_json_activation(const char *path, json_t *root, const char *key, const char *want,
		       const char *family, const char *what)
{
	json_t *v = json_object_get(root, key);

	if (v && (!json_is_string(v) || strcmp(json_string_value(v), want) != 0)) {
		FG_ERR("%s: %s %s is not supported; %s models here compute \"%s\" (%s)", path, key,
		       json_is_string(v) ? json_string_value(v) : "(not a string)", family, want, what);
		return -ENOTSUP;
	}
	return 0;
}

int fg_json_refused(const char *path, json_t *root, const char *const *keys, size_t n,
		    const char *const *skip, const char *family)
{
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_object_get(root, keys[i]);
		int skipped = 0;

		for (const char *const *k = skip; k && *k && !skipped; k++)
			skipped = !strcmp(*k, keys[i]);
		if (!skipped && v && !json_is_null(v) && !json_is_false(v)) {
			FG_ERR("%s: key \"%s\" changes the model's math and is not implemented for %s models",
			       path, keys[i], family);
			return -ENOTSUP;
		}
	}
	return 0;
}
