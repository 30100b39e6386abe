/* core/optimizer/hardware.c - [hardware]: read, check and write the
 * machine description the cost model prices policies with. */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/optimizer/hardware.h"
#include "core/util/error.h"

#ifndef FG_CONF_DIR
#define FG_CONF_DIR "/usr/local/share/fgcore"
#endif
#define FG_HARDWARE_DIR FG_CONF_DIR "/hardware"

enum kind { SIZE, RATE, INT, BOOL };

/* One row per key, in the order `fgcore profile` writes them. */
static const struct hw_key {
	const char *key;
	enum kind kind;
	size_t off;
	const char *what;
} keys[] = {
	{ "gpu_mem", SIZE, offsetof(struct fg_hardware, gpu_mem), "compute tier capacity, bytes" },
	{ "cpu_mem", SIZE, offsetof(struct fg_hardware, cpu_mem), "host tier capacity, bytes" },
	{ "disk_mem", SIZE, offsetof(struct fg_hardware, disk_mem), "disk tier capacity, bytes" },
	{ "ctog_bdw", RATE, offsetof(struct fg_hardware, ctog_bdw),
	  "host -> compute tier, page-locked, GB/s" },
	{ "gtoc_bdw", RATE, offsetof(struct fg_hardware, gtoc_bdw),
	  "compute tier -> host, page-locked, GB/s" },
	{ "ctog_bdw_pageable", RATE, offsetof(struct fg_hardware, ctog_bdw_pageable),
	  "host -> compute tier from pageable memory, GB/s" },
	{ "gtoc_bdw_pageable", RATE, offsetof(struct fg_hardware, gtoc_bdw_pageable),
	  "compute tier -> pageable host memory, GB/s" },
	{ "dtoc_bdw", RATE, offsetof(struct fg_hardware, dtoc_bdw), "disk -> host, GB/s" },
	{ "ctod_bdw", RATE, offsetof(struct fg_hardware, ctod_bdw), "host -> disk, GB/s" },
	{ "mm_flops_prefill", RATE, offsetof(struct fg_hardware, mm_flops_prefill),
	  "fp16-weight matrix product, prefill shape, TFLOP/s" },
	{ "mm_flops_decode", RATE, offsetof(struct fg_hardware, mm_flops_decode),
	  "fp16-weight matrix product, 64 rows, TFLOP/s" },
	{ "mm_gemv_bdw", RATE, offsetof(struct fg_hardware, mm_gemv_bdw),
	  "fp16-weight matrix-vector product (1 row), GB/s of weights" },
	{ "mm_batch_rows", INT, offsetof(struct fg_hardware, mm_batch_rows),
	  "rows of mm_flops_batch and q4_batch_bdw (the profiled policy's GPU batch; 0: none)" },
	{ "mm_flops_batch", RATE, offsetof(struct fg_hardware, mm_flops_batch),
	  "fp16-weight matrix product with mm_batch_rows rows, TFLOP/s" },
	{ "q4_batch_bdw", RATE, offsetof(struct fg_hardware, q4_batch_bdw),
	  "int4-weight matrix product with mm_batch_rows rows, GB/s of packed weights" },
	{ "attn_flops", RATE, offsetof(struct fg_hardware, attn_flops),
	  "prefill attention, TFLOP/s (4 * batch * seq^2 * hidden flops)" },
	{ "prefill_other_bdw", RATE, offsetof(struct fg_hardware, prefill_other_bdw),
	  "a prefill layer beyond its products and attention, GB/s of hidden rows (0: free)" },
	{ "attn_decode_bdw", RATE, offsetof(struct fg_hardware, attn_decode_bdw),
	  "decode attention on the compute backend, GB/s of cache read" },
	{ "cpu_attn_bdw", RATE, offsetof(struct fg_hardware, cpu_attn_bdw),
	  "decode attention on the host, GB/s of cache read" },
	{ "cpu_attn_q4_bdw", RATE, offsetof(struct fg_hardware, cpu_attn_q4_bdw),
	  "decode attention on the host over a 4-bit cache, GB/s of packed cache read" },
	{ "cpu_append_bdw", RATE, offsetof(struct fg_hardware, cpu_append_bdw),
	  "appending prefill rows to a host KV cache (cpu_cache_compute), GB/s of cache written" },
	{ "cpu_append_q4_bdw", RATE, offsetof(struct fg_hardware, cpu_append_q4_bdw),
	  "the same into a 4-bit cache (encoding included), GB/s of packed cache written" },
	{ "cpu_mem_bdw", RATE, offsetof(struct fg_hardware, cpu_mem_bdw),
	  "host memory under host attention and host<->device copies at once, GB/s of both (0: unlimited)" },
	{ "q4_decode_bdw", RATE, offsetof(struct fg_hardware, q4_decode_bdw),
	  "int4 weight matrix-vector product, GB/s of packed weights (0: no int4)" },
	{ "attn_decode_q4_bdw", RATE, offsetof(struct fg_hardware, attn_decode_q4_bdw),
	  "decode attention over a 4-bit cache, GB/s of packed cache read" },
	{ "f8_decode_bdw", RATE, offsetof(struct fg_hardware, f8_decode_bdw),
	  "fp8 weight (fp8_e4m3_rows) matrix-vector product, GB/s of stored bytes (0: unknown; fp8 weights are then priced as fp16 products)" },
	{ "f8_batch_bdw", RATE, offsetof(struct fg_hardware, f8_batch_bdw),
	  "fp8-weight matrix product with mm_batch_rows rows, GB/s of stored bytes" },
	{ "attn_decode_f8_bdw", RATE, offsetof(struct fg_hardware, attn_decode_f8_bdw),
	  "decode attention over an fp8 cache (fp8_e4m3_group64), GB/s of stored cache read (0: unknown; the optimizer then does not consider an fp8 cache)" },
	{ "cpu_attn_f8_bdw", RATE, offsetof(struct fg_hardware, cpu_attn_f8_bdw),
	  "decode attention on the host over an fp8 cache, GB/s of stored cache read" },
	{ "cpu_append_f8_bdw", RATE, offsetof(struct fg_hardware, cpu_append_f8_bdw),
	  "the same into an fp8 host cache (encoding included), GB/s of stored cache written" },
	{ "act_bytes", INT, offsetof(struct fg_hardware, act_bytes),
	  "bytes of the backend's activations (2: fp16, 4: fp32)" },
	{ "hidden_bytes", INT, offsetof(struct fg_hardware, hidden_bytes),
	  "bytes of its residual stream's elements (4: fp32; absent: act_bytes)" },
	{ "compute_host_memory", BOOL, offsetof(struct fg_hardware, compute_host_memory),
	  "the compute tier is host memory (a CPU run)" },
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

int fg_hardware_check(const struct fg_hardware *hw)
{
	const char *missing = NULL;

	if (!hw->gpu_mem)
		missing = "gpu_mem";
	else if (!hw->cpu_mem)
		missing = "cpu_mem";
	else if (!(hw->ctog_bdw > 0))
		missing = "ctog_bdw";
	else if (!(hw->gtoc_bdw > 0))
		missing = "gtoc_bdw";
	else if (hw->disk_mem && !(hw->dtoc_bdw > 0))
		missing = "dtoc_bdw";
	else if (hw->disk_mem && !(hw->ctod_bdw > 0))
		missing = "ctod_bdw";
	else if (!(hw->mm_flops_prefill > 0))
		missing = "mm_flops_prefill";
	else if (!(hw->mm_flops_decode > 0))
		missing = "mm_flops_decode";
	else if (!(hw->attn_flops > 0))
		missing = "attn_flops";
	else if (!(hw->attn_decode_bdw > 0))
		missing = "attn_decode_bdw";
	else if (hw->act_bytes != 2 && hw->act_bytes != 4)
		missing = "act_bytes (2 or 4)";
	else if (hw->hidden_bytes != 0 && hw->hidden_bytes != 2 && hw->hidden_bytes != 4)
		missing = "hidden_bytes (2 or 4)";
	if (missing) {
		FG_ERR("[hardware] %s is not set: run `fgcore -c CONFIG profile --output hw.ini`, then "
		       "`fgcore -c CONFIG optimize --hardware hw.ini` (or set the value in [hardware])",
		       missing);
		return -EINVAL;
	}
	return 0;
}

int fg_hardware_from_config(const struct fg_config *c, struct fg_hardware *hw)
{
	memset(hw, 0, sizeof(*hw));
	if (!fg_cfg_find_section("hardware")) {
		FG_ERR("this build's configuration schema has no [hardware] section yet (core/config/schema.c): give --gpu-mem/--cpu-mem/--disk-mem and rates another way");
		return -ENOTSUP;
	}
	for (size_t i = 0; i < NKEYS; i++) {
		const struct hw_key *k = &keys[i];
		char *dst = (char *)hw + k->off;
		if (fg_cfg_find_key("hardware", k->key) < 0)
			continue; /* an older schema: the key stays unknown (0) */
		switch (k->kind) {
		case SIZE:
			*(uint64_t *)(void *)dst = fg_config_size(c, "hardware", k->key);
			break;
		case RATE:
			*(double *)(void *)dst = fg_config_double(c, "hardware", k->key);
			break;
		case INT:
			*(int *)(void *)dst = (int)fg_config_int(c, "hardware", k->key);
			break;
		case BOOL:
			*(int *)(void *)dst = fg_config_bool(c, "hardware", k->key);
			break;
		}
	}
	return 0;
}

int fg_hardware_write(FILE *out, const struct fg_hardware *hw, const char *origin)
{
	fprintf(out, "[hardware]\n");
	if (origin && *origin)
		fprintf(out, "; %s\n", origin);
	for (size_t i = 0; i < NKEYS; i++) {
		const struct hw_key *k = &keys[i];
		const char *src = (const char *)hw + k->off;
		fprintf(out, "; %s\n", k->what);
		switch (k->kind) {
		case SIZE:
			fprintf(out, "%s = %llu\n", k->key,
				(unsigned long long)*(const uint64_t *)(const void *)src);
			break;
		case RATE:
			fprintf(out, "%s = %.6g\n", k->key, *(const double *)(const void *)src);
			break;
		case INT:
			fprintf(out, "%s = %d\n", k->key, *(const int *)(const void *)src);
			break;
		case BOOL:
			fprintf(out, "%s = %s\n", k->key,
				*(const int *)(const void *)src ? "true" : "false");
			break;
		}
	}
	return ferror(out) ? -EIO : 0;
}

/* ---- presets ---------------------------------------------------------------- */

/* The preset folders, in search order: $FGCORE_HARDWARE_PATH (colon-separated),
 * then the installed one.  cb returns non-zero to stop. */
static int each_dir(int (*cb)(const char *dir, void *user), void *user)
{
	const char *env = getenv("FGCORE_HARDWARE_PATH");
	int rc;

	if (env && *env) {
		char *copy = strdup(env), *save = NULL;
		if (!copy)
			return -ENOMEM;
		rc = 0;
		for (char *d = strtok_r(copy, ":", &save); d && !rc; d = strtok_r(NULL, ":", &save))
			rc = cb(d, user);
		free(copy);
		if (rc)
			return rc;
	}
	return cb(FG_HARDWARE_DIR, user);
}

struct find {
	const char *name;
	char *path;
	size_t len;
};

static int find_in(const char *dir, void *user)
{
	struct find *f = user;
	int n = snprintf(f->path, f->len, "%s/%s.ini", dir, f->name);
	return n > 0 && (size_t)n < f->len && access(f->path, R_OK) == 0;
}

enum { MAX_PRESETS = 64 };

struct list {
	char name[MAX_PRESETS][128];
	int count;
};

/* Every NAME.ini of a folder not listed yet (an earlier folder wins). */
static int list_in(const char *dir, void *user)
{
	struct list *l = user;
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)) && l->count < MAX_PRESETS) {
		size_t n = strlen(e->d_name);
		if (n <= 4 || n - 4 >= sizeof(l->name[0]) || strcmp(e->d_name + n - 4, ".ini") ||
		    e->d_name[0] == '.')
			continue;
		char *dst = l->name[l->count];
		snprintf(dst, sizeof(l->name[0]), "%.*s", (int)(n - 4), e->d_name);
		int dup = 0;
		for (int i = 0; i < l->count && !dup; i++)
			dup = !strcmp(l->name[i], dst);
		l->count += !dup;
	}
	closedir(d);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* "a100-80g, h200, l4, t4" */
static void presets_line(char *buf, size_t len)
{
	struct list *l = calloc(1, sizeof(*l));
	size_t used = 0;

	snprintf(buf, len, "none installed");
	if (!l)
		return;
	each_dir(list_in, l);
	qsort(l->name, (size_t)l->count, sizeof(l->name[0]), cmp_name);
	for (int i = 0; i < l->count; i++) {
		int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", l->name[i]);
		if (w < 0 || used + (size_t)w >= len)
			break;
		used += (size_t)w;
	}
	free(l);
}

int fg_hardware_resolve(const char *arg, char *path, size_t len)
{
	char presets[1024];
	size_t n = strlen(arg);
	int is_file = strchr(arg, '/') || (n > 4 && !strcmp(arg + n - 4, ".ini"));

	if (!is_file && n && n < 128) {
		struct find f = { arg, path, len };
		if (each_dir(find_in, &f) > 0)
			return 0;
	}
	if (is_file && access(arg, R_OK) == 0 && n < len) {
		memcpy(path, arg, n + 1);
		return 0;
	}
	presets_line(presets, sizeof(presets));
	FG_ERR("--hardware %.200s: %s; give a preset (%s; folders: $FGCORE_HARDWARE_PATH, then %s) "
	       "or the path of a [hardware] file such as `fgcore profile --output FILE` writes",
	       arg, is_file ? "cannot read that file" : "no such hardware preset", presets,
	       FG_HARDWARE_DIR);
	return -ENOENT;
}

int fg_hardware_load(struct fg_config *cfg, const char *arg)
{
	char path[4096];
	struct fg_config *hw;
	int rc, set = 0;

	if ((rc = fg_hardware_resolve(arg, path, sizeof(path))))
		return rc;
	if ((rc = fg_config_new(&hw)))
		return rc;
	if ((rc = fg_config_load(hw, path))) {
		fg_config_free(hw);
		return rc;
	}
	for (size_t i = 0; i < NKEYS && !rc; i++) {
		const char *key = keys[i].key;
		/* -o hardware.KEY=... on the command line wins over the file. */
		if (fg_config_origin_of(hw, "hardware", key) != FG_CONFIG_FROM_FILE ||
		    fg_config_origin_of(cfg, "hardware", key) == FG_CONFIG_FROM_ARGS)
			continue;
		char kv[256];
		snprintf(kv, sizeof(kv), "hardware.%s=%s", key, fg_config_get(hw, "hardware", key));
		rc = fg_config_set(cfg, kv, path);
		set++;
	}
	fg_config_free(hw);
	if (!rc && !set) {
		FG_ERR("%s: no [hardware] keys: a hardware file is a [hardware] section as `fgcore "
		       "profile --output FILE` writes it", path);
		rc = -EINVAL;
	}
	return rc;
}
