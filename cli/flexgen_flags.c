/* cli/flexgen_flags.c - FlexGen's command-line flags as configuration
 * overrides, so that a FlexGen user's command line works unchanged:
 *   fgcore bench --model facebook/opt-30b --path _DUMMY_ --percent 20 80 0 100 0 100 \
 *                --gpu-batch-size 48 --num-gpu-batches 3 --cpu-cache-compute
 * They may stand before or after the command; each becomes a section.key=value. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flexgen_flags.h"

struct flag {
	const char *name;
	const char *key;  /* section.key; NULL: handled specially */
	int nargs;        /* 0: a switch setting "true"; 1: one value; -1: optional bool */
};

static const struct flag flags[] = {
	{ "--gpu-batch-size", "policy.gpu_batch_size", 1 },
	{ "--num-gpu-batches", "policy.num_gpu_batches", 1 },
	{ "--cpu-cache-compute", "policy.cpu_cache_compute", 0 },
	{ "--compress-weight", "policy.compress_weight", 0 },
	{ "--compress-cache", "policy.compress_cache", 0 },
	{ "--pin-weight", "policy.pin_weight", -1 },
	{ "--overlap", "policy.overlap", -1 },
	{ "--sep-layer", "policy.sep_layer", -1 },
	{ "--attn-sparsity", "policy.attn_sparsity", 1 },
	{ "--offload-dir", "tier.disk.dir", 1 },
	{ "--prompt-len", "bench.prompt_len", 1 },
	{ "--gen-len", "bench.gen_len", 1 },
	{ "--cut-gen-len", "bench.cut_gen_len", 1 },
	{ "--percent", NULL, 6 },
	{ "--model", NULL, 1 },
	{ "--path", NULL, 1 },
	{ NULL, NULL, 0 },
};

static int is_bool(const char *s)
{
	static const char *const v[] = { "true", "false", "yes", "no", "on", "off", "1", "0",
					 "True", "False", "t", "f", "y", "n", NULL };
	for (int i = 0; v[i]; i++)
		if (!strcmp(s, v[i]))
			return 1;
	return 0;
}

/* FlexGen's str2bool spellings to the configuration's. */
static const char *bool_word(const char *s)
{
	return strchr("tTyY1", s[0]) || !strcmp(s, "on") ? "true" : "false";
}

static int push(struct fg_flexgen_flags *ff, char *s)
{
	if (!s)
		return -ENOMEM;
	char **v = realloc(ff->sets, (ff->n + 1) * sizeof(*v));
	if (!v) {
		free(s);
		return -ENOMEM;
	}
	ff->sets = v;
	ff->sets[ff->n++] = s;
	return 0;
}

static char *join(const char *key, const char *value)
{
	size_t n = strlen(key) + strlen(value) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s=%s", key, value);
	return s;
}

int fg_flexgen_flags_take(struct fg_flexgen_flags *ff, int *argc, char **argv, char *err,
			  size_t errlen)
{
	const char *model = NULL, *path = NULL;
	int out = 1, rc = 0;

	memset(ff, 0, sizeof(*ff));
	for (int i = 1; i < *argc && !rc; i++) {
		const struct flag *f = flags;
		while (f->name && strcmp(f->name, argv[i]))
			f++;
		if (!f->name) {
			argv[out++] = argv[i];
			continue;
		}
		int need = f->nargs < 0 ? 0 : f->nargs == 0 ? 0 : f->nargs;
		if (i + need >= *argc) {
			snprintf(err, errlen, "%s needs %d value%s: see fgcore(1), FLEXGEN FLAGS",
				 f->name, need, need > 1 ? "s" : "");
			return -EINVAL;
		}
		if (!strcmp(f->name, "--percent")) {
			char buf[128] = "";
			for (int k = 1; k <= 6; k++) {
				strncat(buf, argv[i + k], sizeof(buf) - strlen(buf) - 2);
				if (k < 6)
					strcat(buf, " ");
			}
			rc = push(ff, join("policy.percent", buf));
		} else if (!strcmp(f->name, "--model")) {
			model = argv[i + 1];
		} else if (!strcmp(f->name, "--path")) {
			path = argv[i + 1];
		} else if (f->nargs == 1) {
			rc = push(ff, join(f->key, argv[i + 1]));
		} else if (f->nargs == -1 && i + 1 < *argc && is_bool(argv[i + 1])) {
			rc = push(ff, join(f->key, bool_word(argv[i + 1])));
			i++;
		} else {
			rc = push(ff, join(f->key, "true"));
		}
		i += need;
	}
	if (!rc && (model || path)) {
		/* FlexGen: --model facebook/opt-X with --path _DUMMY_ (generated weights)
		 * or a folder holding its converted opt-X-np folder. */
		const char *name = model ? model : "facebook/opt-6.7b";
		const char *slash = strrchr(name, '/');
		const char *base = slash ? slash + 1 : name;
		const char *home = getenv("HOME");
		char buf[4096];
		if (!path) /* FlexGen's default weight folder */
			snprintf(buf, sizeof(buf), "%s/opt_weights/%s-np", home ? home : ".", base);
		else if (!strcmp(path, "_DUMMY_"))
			snprintf(buf, sizeof(buf), "dummy:%s", base);
		else
			snprintf(buf, sizeof(buf), "%s/%s-np", path, base);
		rc = push(ff, join("model.path", buf));
	}
	if (rc) {
		snprintf(err, errlen, "out of memory");
		fg_flexgen_flags_free(ff);
		return rc;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

void fg_flexgen_flags_free(struct fg_flexgen_flags *ff)
{
	for (size_t i = 0; i < ff->n; i++)
		free(ff->sets[i]);
	free(ff->sets);
	memset(ff, 0, sizeof(*ff));
}
