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
						   &fg_arch_qwen2 };
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
	if ((rc = fg_arch_check(a)))
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
