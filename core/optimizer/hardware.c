/* core/optimizer/hardware.c - [hardware]: read, check and write the
 * machine description the cost model prices policies with. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/optimizer/hardware.h"
#include "core/util/error.h"

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
	{ "attn_flops", RATE, offsetof(struct fg_hardware, attn_flops),
	  "prefill attention, TFLOP/s (4 * batch * seq^2 * hidden flops)" },
	{ "attn_decode_bdw", RATE, offsetof(struct fg_hardware, attn_decode_bdw),
	  "decode attention on the compute backend, GB/s of cache read" },
	{ "cpu_attn_bdw", RATE, offsetof(struct fg_hardware, cpu_attn_bdw),
	  "decode attention on the host, GB/s of cache read" },
	{ "cpu_attn_q4_bdw", RATE, offsetof(struct fg_hardware, cpu_attn_q4_bdw),
	  "decode attention on the host over a 4-bit cache, GB/s of packed cache read" },
	{ "q4_decode_bdw", RATE, offsetof(struct fg_hardware, q4_decode_bdw),
	  "int4 weight matrix-vector product, GB/s of packed weights (0: no int4)" },
	{ "attn_decode_q4_bdw", RATE, offsetof(struct fg_hardware, attn_decode_q4_bdw),
	  "decode attention over a 4-bit cache, GB/s of packed cache read" },
	{ "act_bytes", INT, offsetof(struct fg_hardware, act_bytes),
	  "bytes of the backend's activations (2: fp16, 4: fp32)" },
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
