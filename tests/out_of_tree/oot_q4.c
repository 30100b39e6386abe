/* tests/out_of_tree/oot_q4.c - a codec plugin a third party could write with
 * the installed SDK alone: the int4_group64 layout by fgcore/q4.h's encoder
 * rule and decoder, groups spread over threads with fgcore/fanout.h, the fp16
 * sides through fgcore/fp16_simd.h, fgcore/half.h in its probe.
 * tests/test_out_of_tree.sh builds it with `cc $(pkg-config --cflags fgcore)`
 * against a staged install, loads it with the installed fgcore, and compares
 * its bytes with the installed int4_group64 codec's (tests/out_of_tree/oot_compare.c).
 * No _GNU_SOURCE here: fg_cpus then counts the online CPUs, the strict C11
 * path of fanout.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/fanout.h>
#include <fgcore/fp16_simd.h>
#include <fgcore/half.h>
#include <fgcore/plugin.h>
#include <fgcore/q4.h>

struct oot_job {
	const struct fg_codec_shape *s;
	const float *x;
	uint8_t *q, *params; /* one code per element; the params area */
	uint64_t g0, g1;     /* groups of the grid, row-major */
};

static int oot_ok(const struct fg_codec_shape *s)
{
	return s && (s->group_dim == 0 || s->group_dim == 1) &&
	       (s->rows == 0 || s->cols <= (SIZE_MAX / 4) / s->rows);
}

static uint64_t oot_size(const struct fg_codec_shape *s)
{
	if (!oot_ok(s) || s->rows * s->cols == 0)
		return 0;
	return fg_q4_bytes(s->rows, s->cols, s->group_dim);
}

static void oot_groups(void *arg)
{
	struct oot_job *j = arg;
	uint64_t rows = j->s->rows, cols = j->s->cols;
	uint64_t gcols = fg_q4_grid_cols(cols, j->s->group_dim);
	float buf[FG_Q4_GROUP];
	uint8_t q[FG_Q4_GROUP];

	for (uint64_t g = j->g0; g < j->g1; g++) {
		uint64_t gr = g / gcols, gc = g % gcols, e0, step, w;
		struct fg_q4_param p;

		if (j->s->group_dim == 1) {
			e0 = gr * cols + gc * FG_Q4_GROUP, step = 1;
			w = cols - gc * FG_Q4_GROUP < FG_Q4_GROUP ? cols - gc * FG_Q4_GROUP : FG_Q4_GROUP;
		} else {
			e0 = gr * FG_Q4_GROUP * cols + gc, step = cols;
			w = rows - gr * FG_Q4_GROUP < FG_Q4_GROUP ? rows - gr * FG_Q4_GROUP : FG_Q4_GROUP;
		}
		for (uint64_t i = 0; i < w; i++)
			buf[i] = j->x[e0 + i * step];
		fg_q4_encode_group(buf, (size_t)w, &p, q);
		fg_q4_param_store(j->params, g, &p);
		for (uint64_t i = 0; i < w; i++)
			j->q[e0 + i * step] = q[i];
	}
}

static int oot_encode_f32(const struct fg_codec_shape *s, const float *x, void *dst)
{
	uint64_t n, groups, per;
	struct oot_job job[FG_FANOUT_MAX];
	uint8_t *q, *data = dst;
	int t;

	if (!oot_ok(s))
		return -EINVAL;
	n = s->rows * s->cols;
	if (n == 0)
		return 0;
	groups = fg_q4_grid_rows(s->rows, s->group_dim) * fg_q4_grid_cols(s->cols, s->group_dim);
	q = malloc((size_t)n);
	if (!q)
		return -ENOMEM;
	t = fg_fanout_threads(0, n, 4096);
	t = (uint64_t)t < groups ? t : (int)groups;
	per = (groups + (uint64_t)t - 1) / (uint64_t)t;
	for (int k = 0; k < t; k++) {
		uint64_t g0 = per * (uint64_t)k, g1 = g0 + per < groups ? g0 + per : groups;

		job[k] = (struct oot_job){ s, x, q, data + fg_q4_data_bytes(s->rows, s->cols),
					   g0 < groups ? g0 : groups, g1 };
	}
	fg_fanout(oot_groups, job, sizeof(job[0]), t);
	memset(data, 0, (size_t)fg_q4_data_bytes(s->rows, s->cols));
	for (uint64_t e = 0; e < n; e++)
		fg_q4_set_nibble(data, e, q[e]);
	free(q);
	return 0;
}

static int oot_decode_f32(const struct fg_codec_shape *s, const void *src, float *y)
{
	const uint8_t *data = src, *params;
	uint64_t gcols;

	if (!oot_ok(s))
		return -EINVAL;
	params = data + fg_q4_data_bytes(s->rows, s->cols);
	gcols = fg_q4_grid_cols(s->cols, s->group_dim);
	for (uint64_t r = 0; r < s->rows; r++)
		for (uint64_t c = 0; c < s->cols; c++) {
			uint64_t e = r * s->cols + c;
			uint64_t g = s->group_dim == 1 ? r * gcols + c / FG_Q4_GROUP
						       : (r / FG_Q4_GROUP) * gcols + c;
			float sc, mn;

			fg_q4_param_load(params, g, &sc, &mn);
			y[e] = fg_q4_value(fg_q4_nibble(data, e), sc, mn);
		}
	return 0;
}

static int oot_encode_f16(const struct fg_codec_shape *s, const uint16_t *x, void *dst)
{
	float *f;
	int rc;

	if (!oot_ok(s))
		return -EINVAL;
	f = malloc((size_t)(s->rows * s->cols) * sizeof(float) + 1);
	if (!f)
		return -ENOMEM;
	fg_fp16_simd_to_f32(f, x, (size_t)(s->rows * s->cols));
	rc = oot_encode_f32(s, f, dst);
	free(f);
	return rc;
}

static int oot_decode_f16(const struct fg_codec_shape *s, const void *src, uint16_t *y)
{
	float *f;
	int rc;

	if (!oot_ok(s))
		return -EINVAL;
	f = malloc((size_t)(s->rows * s->cols) * sizeof(float) + 1);
	if (!f)
		return -ENOMEM;
	rc = oot_decode_f32(s, src, f);
	if (rc == 0)
		fg_fp16_simd_from_f32(y, f, (size_t)(s->rows * s->cols));
	free(f);
	return rc;
}

static int oot_probe(const struct fg_host *host)
{
	fg_log(host, FG_LOG_INFO, "oot_q4: %d CPUs, F16C %s", fg_cpus(),
	       fg_fp16_simd_have_f16c() ? "yes" : "no");
	/* half.h round trip: a plugin that cannot convert is not usable */
	return fg_half_to_float(fg_float_to_half(0.5f)) == 0.5f;
}

static const struct fg_codec_ops oot_ops = {
	.encoded_size	= oot_size,
	.encode_f32	= oot_encode_f32,
	.decode_f32	= oot_decode_f32,
	.encode_f16	= oot_encode_f16,
	.decode_f16	= oot_decode_f16,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "oot_q4",
	.description	= "built by test_out_of_tree.sh from the installed SDK headers",
	.probe		= oot_probe,
	.ops		= &oot_ops,
};
