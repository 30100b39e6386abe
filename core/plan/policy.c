/* core/engine/policy.c - the [policy] section as a struct, and FlexGen's rules
 * for turning percentages into tiers. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config.h"
#include "core/plan/policy.h"
#include "core/util/error.h"

const char *fg_role_name(enum fg_role r)
{
	static const char *const names[] = { "disk", "host", "compute" };
	return r < FG_ROLES ? names[r] : "?";
}

/* Where a percent text came from: the configuration's origin of the key
 * ("file:line" when `file`, else the -o text that set it), or NULL. */
struct origin {
	const char *where;
	bool file;
};

/* Errors name the origin as the configuration's own do: "file:line: [policy]
 * percent = '...': why", "-o ...: why", or "[policy] percent \"...\": why". */
__attribute__((format(printf, 3, 4)))
static int percent_error(struct origin o, const char *text, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (!o.where)
		FG_ERR("[policy] percent \"%s\": %s", text, why);
	else if (o.file)
		FG_ERR("%s: [policy] percent = '%.200s': %s", o.where, text, why);
	else
		FG_ERR("%s: %s", o.where, why);
	return -EINVAL;
}

static int parse_percent(struct origin o, const char *text, struct fg_policy *p)
{
	static const char shape[] = "expected six integers 0..100 (wg wc cg cc hg hc)";
	long v[6];
	int n = 0;
	const char *s = text;
	char *end;

	while (n < 6) {
		while (*s == ' ' || *s == '\t' || *s == ',')
			s++;
		if (!*s)
			break;
		errno = 0;
		v[n] = strtol(s, &end, 10);
		if (end == s || errno || v[n] < 0 || v[n] > 100)
			return percent_error(o, text, "%s", shape);
		s = end;
		n++;
	}
	while (*s == ' ' || *s == '\t')
		s++;
	if (n != 6 || *s)
		return percent_error(o, text, "%s", shape);
	static const char *const what[] = { "weights", "cache", "activations" };
	int *dst[] = { p->weight, p->cache, p->act };
	for (int i = 0; i < 3; i++) {
		if (v[2 * i] + v[2 * i + 1] > 100)
			return percent_error(o, text, "the %s shares %ld + %ld exceed 100 (disk "
					     "takes the remainder)", what[i], v[2 * i], v[2 * i + 1]);
		dst[i][FG_ROLE_COMPUTE] = (int)v[2 * i];
		dst[i][FG_ROLE_HOST] = (int)v[2 * i + 1];
		dst[i][FG_ROLE_DISK] = 100 - (int)(v[2 * i] + v[2 * i + 1]);
	}
	return 0;
}

int fg_policy_parse_percent(const char *text, struct fg_policy *p)
{
	return parse_percent((struct origin){ NULL, false }, text, p);
}

int fg_policy_from_config(const struct fg_config *c, struct fg_policy *p)
{
	struct origin o = {
		.where = fg_config_origin_text(c, "policy", "percent"),
		.file = fg_config_origin_of(c, "policy", "percent") == FG_CONFIG_FROM_FILE,
	};

	memset(p, 0, sizeof(*p));
	p->gpu_batch_size = fg_config_int(c, "policy", "gpu_batch_size");
	p->num_gpu_batches = fg_config_int(c, "policy", "num_gpu_batches");
	p->overlap = fg_config_bool(c, "policy", "overlap");
	p->sep_layer = fg_config_bool(c, "policy", "sep_layer");
	p->pin_weight = fg_config_bool(c, "policy", "pin_weight");
	p->cpu_cache_compute = fg_config_bool(c, "policy", "cpu_cache_compute");
	p->host_overlap = fg_config_bool(c, "policy", "host_overlap");
	p->attn_sparsity = fg_config_double(c, "policy", "attn_sparsity");
	p->compress_weight = fg_config_bool(c, "policy", "compress_weight");
	p->compress_cache = fg_config_bool(c, "policy", "compress_cache");
	p->weight_fp8 = !strcmp(fg_config_str(c, "policy", "weight_codec"), "fp8_e4m3_rows");
	p->cache_fp8 = !strcmp(fg_config_str(c, "policy", "cache_codec"), "fp8_e4m3_group64");
	p->score_chunk = fg_config_size(c, "policy", "score_chunk");
	p->share_prefix = fg_config_int(c, "policy", "share_prefix");
	p->window_ring = fg_config_bool(c, "policy", "window_ring");
	p->refill = fg_config_double(c, "policy", "refill");
	p->exact = !strcmp(fg_config_str(c, "policy", "placement"), "exact");
	if (p->attn_sparsity < 1) {
		FG_ERR("[policy] attn_sparsity = %g: sparse attention is not implemented yet; use 1",
		       p->attn_sparsity);
		return -ENOTSUP;
	}
	return parse_percent(o, fg_config_str(c, "policy", "percent"), p);
}

enum fg_role fg_policy_choice(const int percent[FG_ROLES], double cur)
{
	double cum = 0;
	for (int r = 0; r < FG_ROLES; r++) {
		cum += percent[r];
		if (cur < cum)
			return (enum fg_role)r;
	}
	return FG_ROLE_COMPUTE;
}

void fg_policy_split(const int percent[FG_ROLES], int64_t n, int64_t first[FG_ROLES],
		     int64_t count[FG_ROLES])
{
	int64_t c = (int64_t)llround((double)n * percent[FG_ROLE_COMPUTE] / 100.0);
	int64_t ch = (int64_t)llround((double)n *
				      (percent[FG_ROLE_COMPUTE] + percent[FG_ROLE_HOST]) / 100.0);
	first[FG_ROLE_COMPUTE] = 0;
	count[FG_ROLE_COMPUTE] = c;
	first[FG_ROLE_HOST] = c;
	count[FG_ROLE_HOST] = ch - c;
	first[FG_ROLE_DISK] = ch;
	count[FG_ROLE_DISK] = n - ch;
}
