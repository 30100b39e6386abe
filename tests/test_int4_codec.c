/* tests/test_int4_codec.c - the int4_group64 codec against the layout of
 * fgcore/q4.h and the encoder rules of doc/INT4.md.
 *
 * Every check reads the encoded bytes itself (group grid, params offset,
 * nibble order are computed here by hand, not through q4.h) and verifies:
 *  - mn is the largest fp16 <= the group's minimum and scale the smallest fp16
 *    with mn + 15 * scale >= its maximum (over the group's own non-NaN values,
 *    clamped to +-65504): the range is never widened by padding or NaN;
 *  - each value decodes to q * scale + mn from its own nibble, and
 *    |decode - x| <= scale / 2 + scale * 2^-16 + |mn| * 2^-23 (doc/INT4.md);
 *  - NaN encodes q = 0, +-inf saturate, padding bytes are zero.
 * NMSE of Gaussian and heavy-tailed tensors is printed for doc/INT4.md and
 * compared with the uniform-noise prediction sum(scale^2 / 12) / sum(x^2).
 * Then q4.h's own encoder (fg_q4_param_of, fg_q4_code, fg_q4_value, the byte
 * helpers), which out-of-tree plugins use, against the same rules and the
 * codec's bytes.
 * FGCORE_TEST_SEED changes the PRNG seed (default 4242). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/codec_test.h"
#include "tests/int4_threads.h"

#define F16_MAX 65504.0f

static void setup(void)
{
	codec_load("int4_group64");
}

static void teardown(void)
{
	codec_unload();
}

/* ---- distributions ---------------------------------------------------------- */

/* Student-t with 3 degrees of freedom: finite variance, heavy tails. */
static double student3(void)
{
	double z = gauss(), a = gauss(), b = gauss(), c = gauss();

	return z / sqrt((a * a + b * b + c * c) / 3.0);
}

/* Cauchy (Student-t with 1 dof), rejected beyond +-60000 to stay in fp16
 * range, where the error bound holds. */
static double cauchy(void)
{
	double v;

	do
		v = tan(M_PI * (unif() - 0.5));
	while (fabs(v) > 60000.0);
	return v;
}

enum dist { D_UNIFORM, D_GAUSS, D_STUDENT3, D_CAUCHY, D_COUNT };
static const char *const dist_name[D_COUNT] = { "uniform", "gaussian", "student-t3", "cauchy" };

static void fill(float *x, size_t n, enum dist d, double scale)
{
	for (size_t i = 0; i < n; i++) {
		double v = d == D_UNIFORM ? 2.0 * unif() - 1.0 : d == D_GAUSS ? gauss() :
			   d == D_STUDENT3 ? student3() : cauchy();

		x[i] = (float)(v * scale);
	}
}

/* ---- the layout, by hand --------------------------------------------------- */

static size_t hand_gcols(size_t cols, int gd)
{
	return gd == 0 ? cols : (cols + 63) / 64;
}

static size_t hand_groups(size_t rows, size_t cols, int gd)
{
	return gd == 0 ? (rows + 63) / 64 * cols : rows * ((cols + 63) / 64);
}

static size_t hand_data(size_t n)
{
	return ((n + 1) / 2 + 63) / 64 * 64;
}

static size_t hand_group_of(size_t r, size_t c, size_t cols, int gd)
{
	return gd == 0 ? (r / 64) * cols + c : r * hand_gcols(cols, gd) + c / 64;
}

static unsigned nibble(const uint8_t *enc, size_t e)
{
	return e % 2 == 0 ? enc[e / 2] >> 4 : enc[e / 2] & 15u;
}

static void params_at(const uint8_t *enc, size_t n, size_t g, uint16_t *hs, uint16_t *hm)
{
	const uint8_t *b = enc + hand_data(n) + 4 * g;

	*hs = (uint16_t)(b[0] | b[1] << 8);
	*hm = (uint16_t)(b[2] | b[3] << 8);
}

/* The next larger / smaller finite fp16 of a finite one. */
static uint16_t half_up(uint16_t h)
{
	if (h == 0x8000u || h == 0)
		return 1;
	return (h & 0x8000u) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}

static uint16_t half_down(uint16_t h)
{
	if (h == 0x8000u || h == 0)
		return 0x8001u;
	return (h & 0x8000u) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

static float clampf16(float x)
{
	return x < -F16_MAX ? -F16_MAX : x > F16_MAX ? F16_MAX : x;
}

/* The decode rule: q * scale + mn in fp32 (fused or not). */
static int decodes_as(float y, unsigned q, float s, float m)
{
	volatile float p = (float)q * s;
	float a = p + m, b = fmaf((float)q, s, m);

	if (isnan(a) || isnan(b))
		return isnan(y);
	return y == a || y == b;
}

/* The error bound of doc/INT4.md. */
static double err_bound(float s, float m)
{
	return 0.5 * s + ldexp(s, -16) + ldexp(fabs(m), -23) + FLT_TRUE_MIN;
}

struct stats {
	double err2, x2, pred2; /* sum (y - x)^2, sum x^2, sum scale^2 / 12 */
	double max_rel;         /* max |y - x| / scale over values of groups with scale > 0 */
};

/* Encode x [rows, cols] (group_dim gd), decode, and check everything the
 * module comment lists.  enc_out (optional) receives the malloc'ed bytes. */
static void roundtrip(size_t rows, size_t cols, int gd, const float *x, const char *label,
		      struct stats *st, uint8_t **enc_out)
{
	struct fg_codec_shape sh = { rows, cols, gd };
	size_t n = rows * cols, groups = hand_groups(rows, cols, gd);
	size_t size = hand_data(n) + 4 * groups;
	uint8_t *enc;
	float *y, *lo, *hi;

	ck_assert_uint_eq(ops->encoded_size(&sh), size);
	enc = malloc(size + GUARD);
	y = malloc((n ? n : 1) * sizeof(float));
	lo = malloc((groups ? groups : 1) * sizeof(float));
	hi = malloc((groups ? groups : 1) * sizeof(float));
	ck_assert(enc && y && lo && hi);
	memset(enc, 0xa5, size + GUARD); /* the encoder must overwrite every byte */
	ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
	for (size_t i = size; i < size + GUARD; i++)
		EXPECT(enc[i] == 0xa5, "%s: byte %zu past the end written", label, i);
	for (size_t i = (n + 1) / 2; i < hand_data(n); i++)
		EXPECT(enc[i] == 0, "%s: padding byte %zu is %#x", label, i, enc[i]);
	if (n % 2)
		EXPECT((enc[n / 2] & 15u) == 0, "%s: padding nibble not zero", label);
	ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);

	/* Each group's range over its own non-NaN values, clamped to fp16. */
	for (size_t g = 0; g < groups; g++) {
		lo[g] = INFINITY;
		hi[g] = -INFINITY;
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) {
			size_t g = hand_group_of(r, c, cols, gd);
			float v = x[r * cols + c];

			if (isnan(v))
				continue;
			lo[g] = fminf(lo[g], clampf16(v));
			hi[g] = fmaxf(hi[g], clampf16(v));
		}
	for (size_t g = 0; g < groups; g++) {
		uint16_t hs, hm;
		double s, m;

		params_at(enc, n, g, &hs, &hm);
		s = fg_half_to_float(hs);
		m = fg_half_to_float(hm);
		if (lo[g] > hi[g]) { /* only NaNs */
			EXPECT(hs == 0 && hm == 0, "%s: NaN group %zu: scale %#x min %#x",
				      label, g, hs, hm);
			continue;
		}
		EXPECT(isfinite(s) && s >= 0 && isfinite(m), "%s: group %zu params %#x %#x",
			      label, g, hs, hm);
		EXPECT(m <= lo[g] && fg_half_to_float(half_up(hm)) > lo[g],
			      "%s: group %zu: min %#x (%g) is not the largest fp16 <= %.9g",
			      label, g, hm, m, lo[g]);
		EXPECT(m + 15.0 * s >= hi[g], "%s: group %zu: %g + 15 * %g < max %.9g",
			      label, g, m, s, hi[g]);
		EXPECT(hs == 0 || m + 15.0 * fg_half_to_float(half_down(hs)) < hi[g],
			      "%s: group %zu: scale %#x (%g) is not the smallest covering "
			      "[%g, %.9g]", label, g, hs, s, m, hi[g]);
	}

	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) {
			size_t e = r * cols + c, g = hand_group_of(r, c, cols, gd);
			unsigned q = nibble(enc, e);
			uint16_t hs, hm;
			float s, m, v = x[e];
			double err;

			params_at(enc, n, g, &hs, &hm);
			s = fg_half_to_float(hs);
			m = fg_half_to_float(hm);
			EXPECT(decodes_as(y[e], q, s, m),
				      "%s: (%zu, %zu): decoded %.9g, not %u * %g + %g", label, r, c,
				      y[e], q, s, m);
			if (isnan(v)) {
				EXPECT(q == 0, "%s: (%zu, %zu): NaN encoded as %u", label, r,
					      c, q);
				continue;
			}
			err = fabs((double)y[e] - clampf16(v));
			EXPECT(err <= err_bound(s, m),
				      "%s: (%zu, %zu): |%.9g - %.9g| = %g > bound %g (scale %g, "
				      "min %g)", label, r, c, y[e], v, err, err_bound(s, m), s, m);
			if (st && isfinite(v)) {
				st->err2 += err * err;
				st->x2 += (double)v * v;
				st->pred2 += (double)s * s / 12.0;
				if (s > 0 && err / s > st->max_rel)
					st->max_rel = err / s;
			}
		}
	free(lo);
	free(hi);
	free(y);
	if (enc_out)
		*enc_out = enc;
	else
		free(enc);
}

/* ---- sizes and shapes ------------------------------------------------------- */

static const size_t shapes[][2] = {
	{ 1, 1 }, { 1, 2 }, { 2, 1 }, { 1, 63 }, { 1, 64 }, { 1, 65 }, { 63, 1 }, { 64, 1 },
	{ 65, 1 }, { 3, 5 }, { 64, 64 }, { 65, 67 }, { 127, 129 }, { 130, 3 }, { 3, 200 },
	{ 200, 257 }, { 129, 517 }, { 7, 1031 },
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

START_TEST(test_sizes)
{
	struct fg_codec_shape sh;
	float one = 1.0f, out;
	_Alignas(16) uint8_t buf[256];

	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < NSHAPES; i++) {
			size_t r = shapes[i][0], c = shapes[i][1];

			sh = (struct fg_codec_shape){ r, c, gd };
			ck_assert_uint_eq(ops->encoded_size(&sh),
					  hand_data(r * c) + 4 * hand_groups(r, c, gd));
			ck_assert_uint_eq(ops->encoded_size(&sh), fg_q4_bytes(r, c, gd));
		}
	/* 4096 x 4096: (0.5 + 4 / 64) bytes = 4.5 bits per value. */
	for (int gd = 0; gd < 2; gd++) {
		double bits;

		sh = (struct fg_codec_shape){ 4096, 4096, gd };
		bits = 8.0 * (double)ops->encoded_size(&sh) / (4096.0 * 4096.0);
		ck_assert_msg(bits >= 4.5 && bits <= 4.5 + 1e-3, "%g bits per value", bits);
		/* and the share of padding stays small for a large odd shape */
		sh = (struct fg_codec_shape){ 4099, 4097, gd };
		bits = 8.0 * (double)ops->encoded_size(&sh) / (4099.0 * 4097.0);
		ck_assert_msg(bits >= 4.5 && bits <= 4.5 + 0.01, "%g bits per value", bits);
	}

	/* group_dim other than 0 or 1: refused, nothing touched. */
	for (int gd = -1; gd <= 2; gd += 3) {
		sh = (struct fg_codec_shape){ 4, 4, gd };
		memset(buf, 0x5a, sizeof(buf));
		ck_assert_uint_eq(ops->encoded_size(&sh), 0);
		ck_assert_int_eq(ops->encode_f32(&sh, &one, buf), -EINVAL);
		ck_assert_int_eq(ops->decode_f32(&sh, buf, &out), -EINVAL);
		ck_assert_int_eq(ops->encode_f16(&sh, (const uint16_t *)buf, buf), -EINVAL);
		ck_assert_int_eq(ops->decode_f16(&sh, buf, (uint16_t *)buf), -EINVAL);
		for (size_t i = 0; i < sizeof(buf); i++)
			ck_assert_uint_eq(buf[i], 0x5a);
	}
	ck_assert_uint_eq(ops->encoded_size(NULL), 0);
	ck_assert_int_eq(ops->encode_f32(NULL, &one, buf), -EINVAL);
	ck_assert_int_eq(ops->decode_f32(NULL, buf, &out), -EINVAL);

	/* Sizes that overflow: refused before any pointer is read. */
	{
		static const uint64_t big[][2] = {
			{ 1ull << 32, 1ull << 32 }, { UINT64_MAX, 2 }, { 3, UINT64_MAX / 4 },
			{ UINT64_MAX, UINT64_MAX }, { 1ull << 62, 1ull << 1 },
		};

		for (int gd = 0; gd < 2; gd++)
			for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
				sh = (struct fg_codec_shape){ big[i][0], big[i][1], gd };
				ck_assert_uint_eq(ops->encoded_size(&sh), 0);
				ck_assert_int_eq(ops->encode_f32(&sh, NULL, NULL), -EINVAL);
				ck_assert_int_eq(ops->decode_f32(&sh, NULL, NULL), -EINVAL);
			}
	}
	/* Empty tensors: 0 bytes, nothing to do, success. */
	for (int gd = 0; gd < 2; gd++) {
		static const uint64_t empty[][2] = { { 0, 0 }, { 0, 5 }, { 7, 0 }, { UINT64_MAX, 0 },
						     { 0, UINT64_MAX } };

		for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
			sh = (struct fg_codec_shape){ empty[i][0], empty[i][1], gd };
			ck_assert_uint_eq(ops->encoded_size(&sh), 0);
			ck_assert_int_eq(ops->encode_f32(&sh, NULL, NULL), 0);
			ck_assert_int_eq(ops->decode_f32(&sh, NULL, NULL), 0);
		}
	}
	/* A real shape with a NULL buffer is an error, not a crash. */
	sh = (struct fg_codec_shape){ 2, 2, 1 };
	ck_assert_int_eq(ops->encode_f32(&sh, NULL, buf), -EINVAL);
	ck_assert_int_eq(ops->encode_f32(&sh, &one, NULL), -EINVAL);
	ck_assert_int_eq(ops->decode_f32(&sh, NULL, &out), -EINVAL);
	ck_assert_int_eq(ops->decode_f32(&sh, buf, NULL), -EINVAL);
}
END_TEST

/* The core's wrapper turns the codec's -EINVAL into one error line. */
START_TEST(test_core_error_line)
{
	struct fg_plugin_handle h;
	struct fg_codec c;
	struct fg_codec_shape sh = { 4, 4, 2 };
	float x[16] = { 0 };
	uint8_t buf[128];

	ck_assert_int_eq(fg_plugin_load("int4_group64", FG_PLUGIN_CODEC, &h), 0);
	ck_assert_int_eq(fg_codec_open(&c, &h), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_codec_encode_f32(&c, &sh, x, buf), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "int4_group64") &&
		      strstr(fg_last_error(), "group_dim 2"), "error line: %s", fg_last_error());
	sh.group_dim = 1;
	ck_assert_int_eq(fg_codec_encode_f32(&c, &sh, x, buf), 0);
	fg_codec_close(&c);
}
END_TEST

/* ---- error bound on random tensors ------------------------------------------- */

START_TEST(test_bound_random)
{
	enum dist d = (enum dist)_i;
	static const double scales[] = { 1.0, 1e-5, 1e3 };
	char label[128];

	rng_seed(seed + (uint64_t)_i);
	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < NSHAPES; i++)
			for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++) {
				size_t r = shapes[i][0], c = shapes[i][1];
				float *x = malloc(r * c * sizeof(float));
				double sc = scales[k];

				/* Cauchy tails times 1e3 would leave the fp16 range. */
				if (d == D_CAUCHY && sc > 1.0)
					sc = 1.0;
				ck_assert_ptr_nonnull(x);
				fill(x, r * c, d, sc);
				snprintf(label, sizeof(label), "%s*%g %zux%zu gd%d", dist_name[d], sc,
					 r, c, gd);
				roundtrip(r, c, gd, x, label, NULL, NULL);
				free(x);
			}
}
END_TEST

/* Partial groups see only their own values: all-positive data keeps mn > 0
 * where zero padding would have pulled it to 0. */
START_TEST(test_partial_groups)
{
	static const size_t ps[][2] = { { 1, 65 }, { 65, 1 }, { 65, 67 }, { 3, 129 }, { 129, 3 },
					{ 1, 1 }, { 5, 7 } };
	char label[64];

	rng_seed(seed + 100);
	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
			size_t r = ps[i][0], c = ps[i][1], n = r * c;
			float *x = malloc(n * sizeof(float));
			uint8_t *enc;

			ck_assert_ptr_nonnull(x);
			for (size_t e = 0; e < n; e++)
				x[e] = (float)(1.0 + unif());
			snprintf(label, sizeof(label), "positive %zux%zu gd%d", r, c, gd);
			roundtrip(r, c, gd, x, label, NULL, &enc);
			for (size_t g = 0; g < hand_groups(r, c, gd); g++) {
				uint16_t hs, hm;

				params_at(enc, n, g, &hs, &hm);
				ck_assert_msg(fg_half_to_float(hm) >= 1.0f, "%s: group %zu min %g",
					      label, g, fg_half_to_float(hm));
			}
			free(enc);
			free(x);
		}
	/* A last group of one value that fp16 holds: scale 0, exact. */
	{
		struct fg_codec_shape sh = { 2, 65, 1 };
		float x[130], y[130];
		uint8_t enc[256];

		for (int e = 0; e < 130; e++)
			x[e] = (float)(e % 7) - 3.0f;
		x[64] = 1234.0f;
		x[129] = -0.375f;
		ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		ck_assert(y[64] == 1234.0f && y[129] == -0.375f);
	}
}
END_TEST

/* ---- constant groups, outliers, non-finite values ----------------------------- */

START_TEST(test_constant_groups)
{
	/* fp16 values: decode exactly, scale 0, every q 0 */
	static const float cs[] = { 0.0f, -0.0f, 1.0f, -3.5f, 1024.0f, 65504.0f, -65504.0f,
				    0x1p-24f, -0x1p-14f, 0x1.998p-4f /* fp16 next to 0.1 */ };
	char label[64];

	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
			size_t r = gd == 0 ? 130 : 3, c = gd == 0 ? 3 : 130, n = r * c;
			float x[390], y[390];
			uint8_t *enc;
			struct fg_codec_shape sh = { r, c, gd };

			for (size_t e = 0; e < n; e++)
				x[e] = cs[i];
			snprintf(label, sizeof(label), "constant %g gd%d", cs[i], gd);
			roundtrip(r, c, gd, x, label, NULL, &enc);
			ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
			for (size_t e = 0; e < n; e++) {
				ck_assert_msg(y[e] == cs[i], "%s: %zu decoded %g", label, e, y[e]);
				ck_assert_uint_eq(nibble(enc, e), 0);
			}
			for (size_t g = 0; g < hand_groups(r, c, gd); g++) {
				uint16_t hs, hm;

				params_at(enc, n, g, &hs, &hm);
				ck_assert_uint_eq(hs, 0);
				ck_assert(fg_half_to_float(hm) == cs[i]);
			}
			free(enc);
		}
	/* 0.1 is not an fp16: mn lies just below it, a tiny scale covers it and
	 * the value comes back within the bound. */
	{
		float x[64], y[64];
		uint8_t *enc;
		struct fg_codec_shape sh = { 1, 64, 1 };
		uint16_t hs, hm;

		for (int e = 0; e < 64; e++)
			x[e] = 0.1f;
		roundtrip(1, 64, 1, x, "constant 0.1", NULL, &enc);
		params_at(enc, 64, 0, &hs, &hm);
		ck_assert(hs != 0 && fg_half_to_float(hm) < 0.1f);
		/* one fp16 subnormal step (2^-24) above the exact need at most */
		ck_assert_double_le(fg_half_to_float(hs),
				    ((double)0.1f - fg_half_to_float(hm)) / 15.0 + 0x1p-24);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		for (int e = 0; e < 64; e++)
			ck_assert_float_le(fabsf(y[e] - 0.1f), fg_half_to_float(hs) / 2);
		free(enc);
	}
}
END_TEST

START_TEST(test_outlier)
{
	for (int gd = 0; gd < 2; gd++) {
		size_t r = gd == 0 ? 64 : 2, c = gd == 0 ? 2 : 64, n = 128;
		float x[128], y[128];
		struct fg_codec_shape sh = { r, c, gd };
		size_t at = gd == 0 ? 17 * 2 : 17; /* element 17 of group 0 */
		float lo = INFINITY;
		double s;
		uint16_t hs, hm;
		uint8_t *enc;
		char label[32];

		rng_seed(seed + 7);
		for (size_t e = 0; e < n; e++)
			x[e] = (float)(0.01 * gauss());
		x[at] = 100.0f;
		snprintf(label, sizeof(label), "outlier gd%d", gd);
		roundtrip(r, c, gd, x, label, NULL, &enc);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		params_at(enc, n, 0, &hs, &hm);
		s = fg_half_to_float(hs);
		for (size_t e = 0; e < n; e++)
			if (hand_group_of(e / c, e % c, c, gd) == 0)
				lo = fminf(lo, x[e]);
		/* the outlier sets the scale (up to fp16 rounding of min and scale) ... */
		ck_assert_double_ge(s, (100.0 - lo) / 15.0);
		/* mn is at most one fp16 step (< 2^-16 here) below lo */
		ck_assert_double_le(s, (100.0 - lo + 0x1p-16) / 15.0 * (1.0 + 0x1p-10));
		/* ... is kept to within half a step ... */
		ck_assert_uint_eq(nibble(enc, at), 15);
		ck_assert_double_le(fabs(y[at] - 100.0), s / 2);
		/* ... and flattens the rest of its group to the two lowest codes, while
		 * the other group keeps its own fine scale. */
		for (size_t e = 0; e < n; e++)
			if (e != at && hand_group_of(e / c, e % c, c, gd) == 0)
				ck_assert_uint_le(nibble(enc, e), 1);
		params_at(enc, n, 1, &hs, &hm);
		ck_assert_float_lt(fg_half_to_float(hs), 0.02f);
		free(enc);
	}
}
END_TEST

START_TEST(test_nonfinite)
{
	for (int gd = 0; gd < 2; gd++) {
		/* five groups of 64: [NaN mixed] [+inf mixed] [-inf mixed] [all NaN]
		 * [all +inf, then finite beyond fp16] laid along the grouping dim */
		size_t r = gd == 0 ? 64 : 5, c = gd == 0 ? 5 : 64, n = 320;
		float x[320], y[320];
		uint16_t hf[320], h16[320];
		uint8_t *enc, enc16[1024];
		struct fg_codec_shape sh = { r, c, gd };
		uint16_t hs, hm;
		char label[32];

#define AT(g, k) (gd == 0 ? (size_t)(k) * 5 + (g) : (size_t)(g) * 64 + (k))
		rng_seed(seed + 9);
		for (int g = 0; g < 5; g++)
			for (int k = 0; k < 64; k++)
				x[AT(g, k)] = (float)gauss();
		x[AT(0, 3)] = NAN;
		x[AT(0, 40)] = -NAN;
		x[AT(1, 5)] = INFINITY;
		x[AT(2, 63)] = -INFINITY;
		for (int k = 0; k < 64; k++)
			x[AT(3, k)] = NAN;
		for (int k = 0; k < 64; k++)
			x[AT(4, k)] = k < 32 ? INFINITY : 1e6f;
		snprintf(label, sizeof(label), "non-finite gd%d", gd);
		roundtrip(r, c, gd, x, label, NULL, &enc);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);

		/* NaN: ignored by min/max (params as if absent), q = 0. */
		{
			float lo = INFINITY;

			for (int k = 0; k < 64; k++)
				if (!isnan(x[AT(0, k)]))
					lo = fminf(lo, x[AT(0, k)]);
			params_at(enc, n, 0, &hs, &hm);
			ck_assert(fg_half_to_float(hm) <= lo && fg_half_to_float(hm) > lo - 0.01f);
			ck_assert(fg_half_to_float(hs) < 1.0f);
			ck_assert_uint_eq(nibble(enc, AT(0, 3)), 0);
			ck_assert_uint_eq(nibble(enc, AT(0, 40)), 0);
			ck_assert(y[AT(0, 3)] == fg_half_to_float(hm));
		}
		/* +inf: the range reaches 65504, the value decodes to mn + 15 scale. */
		params_at(enc, n, 1, &hs, &hm);
		ck_assert_uint_eq(nibble(enc, AT(1, 5)), 15);
		ck_assert(isfinite(y[AT(1, 5)]) && y[AT(1, 5)] >= F16_MAX);
		/* -inf: mn = -65504 exactly, q = 0. */
		params_at(enc, n, 2, &hs, &hm);
		ck_assert_uint_eq(hm, 0xfbffu);
		ck_assert_uint_eq(nibble(enc, AT(2, 63)), 0);
		ck_assert(y[AT(2, 63)] == -F16_MAX);
		/* all NaN: mn = 0, scale = 0, decodes to 0 */
		params_at(enc, n, 3, &hs, &hm);
		ck_assert(hs == 0 && hm == 0);
		for (int k = 0; k < 64; k++)
			ck_assert(y[AT(3, k)] == 0.0f);
		/* all +inf or beyond: a constant 65504 group */
		params_at(enc, n, 4, &hs, &hm);
		ck_assert(hs == 0 && hm == 0x7bffu);
		for (int k = 0; k < 64; k++)
			ck_assert(y[AT(4, k)] == F16_MAX);

		/* The fp16 entry point treats fp16 NaN and inf the same way. */
		for (size_t e = 0; e < n; e++)
			hf[e] = fg_float_to_half(x[e]);
		for (size_t e = 0; e < n; e++)
			x[e] = fg_half_to_float(hf[e]);
		free(enc);
		roundtrip(r, c, gd, x, label, NULL, &enc);
		ck_assert_int_eq(ops->encode_f16(&sh, hf, enc16), 0);
		ck_assert_mem_eq(enc16, enc, fg_q4_bytes(r, c, gd));
		ck_assert_int_eq(ops->decode_f16(&sh, enc16, h16), 0);
		for (size_t e = 0; e < n; e++)
			ck_assert(!isnan(fg_half_to_float(h16[e])));
		free(enc);
#undef AT
	}
}
END_TEST

/* ---- the byte layout, computed by hand ----------------------------------------- */

START_TEST(test_layout_by_hand)
{
	uint8_t enc[128];
	float y[6];

	/* [2, 3], groups along rows.  Row 0 {0, 7.5, 15}: mn 0, scale 1, q 0 8 15.
	 * Row 1 {2, 7, 32}: mn 2, scale 2, t = 2.5 rounds to even: q 0 2 15.
	 * Elements 0..5 = 0 8 15 | 0 2 15, even element in the high nibble. */
	{
		struct fg_codec_shape sh = { 2, 3, 1 };
		const float x[6] = { 0, 7.5f, 15, 2, 7, 32 };
		const uint8_t params[8] = { 0x00, 0x3c, 0x00, 0x00, 0x00, 0x40, 0x00, 0x40 };
		const float want[6] = { 0, 8, 15, 2, 6, 32 };

		ck_assert_uint_eq(ops->encoded_size(&sh), 72);
		ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
		ck_assert_uint_eq(enc[0], 0x08);
		ck_assert_uint_eq(enc[1], 0xf0);
		ck_assert_uint_eq(enc[2], 0x2f);
		for (int i = 3; i < 64; i++)
			ck_assert_uint_eq(enc[i], 0);
		ck_assert_mem_eq(enc + 64, params, 8);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		for (int i = 0; i < 6; i++)
			ck_assert_float_eq(y[i], want[i]);
	}
	/* [3, 2], groups along columns.  Column 0 {-1, 0.5, 14}: mn -1, scale 1,
	 * t = 1.5 rounds to even: q 0 2 15.  Column 1 {3, 3, 3}: mn 3, scale 0.
	 * Row-major q: 0 0 | 2 0 | 15 0; params: column 0 then column 1. */
	{
		struct fg_codec_shape sh = { 3, 2, 0 };
		const float x[6] = { -1, 3, 0.5f, 3, 14, 3 };
		const uint8_t params[8] = { 0x00, 0x3c, 0x00, 0xbc, 0x00, 0x00, 0x00, 0x42 };
		const float want[6] = { -1, 3, 1, 3, 14, 3 };

		ck_assert_uint_eq(ops->encoded_size(&sh), 72);
		ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
		ck_assert_uint_eq(enc[0], 0x00);
		ck_assert_uint_eq(enc[1], 0x20);
		ck_assert_uint_eq(enc[2], 0xf0);
		ck_assert_mem_eq(enc + 64, params, 8);
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		for (int i = 0; i < 6; i++)
			ck_assert_float_eq(y[i], want[i]);
	}
	/* Group grid order: [65, 2] along rows is a grid [2, 2]: (0,0) (0,1) (1,0)
	 * (1,1); [2, 65] along a row is [2, 2] too, group (r, g) at r * 2 + g.
	 * Constant groups 1, 2, 3, 4 show up as the mins in that order. */
	for (int gd = 0; gd < 2; gd++) {
		size_t r = gd == 0 ? 65 : 2, c = gd == 0 ? 2 : 65;
		struct fg_codec_shape sh = { r, c, gd };
		float x[130];
		uint8_t big[256];
		const uint16_t mins[4] = { 0x3c00, 0x4000, 0x4200, 0x4400 }; /* 1 2 3 4 */

		for (size_t i = 0; i < r; i++)
			for (size_t j = 0; j < c; j++)
				x[i * c + j] = gd == 0 ? (float)((i / 64) * 2 + j + 1) :
							 (float)(i * 2 + j / 64 + 1);
		ck_assert_uint_eq(ops->encoded_size(&sh), 128 + 16);
		ck_assert_int_eq(ops->encode_f32(&sh, x, big), 0);
		for (int g = 0; g < 4; g++) {
			ck_assert_uint_eq(big[128 + 4 * g], 0);
			ck_assert_uint_eq(big[128 + 4 * g + 1], 0);
			ck_assert_uint_eq(big[128 + 4 * g + 2], mins[g] & 0xff);
			ck_assert_uint_eq(big[128 + 4 * g + 3], mins[g] >> 8);
		}
	}
	/* Nibbles cross row boundaries: [3, 3] along a row, q = column index * 7
	 * (0, 7, 15 after rounding min 0 / max 15 / scale 1, x = 0, 7, 15). */
	{
		struct fg_codec_shape sh = { 3, 3, 1 };
		const float x[9] = { 0, 7, 15, 0, 7, 15, 0, 7, 15 };
		const uint8_t want[5] = { 0x07, 0xf0, 0x7f, 0x07, 0xf0 };

		ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
		ck_assert_mem_eq(enc, want, 5);
	}
}
END_TEST

/* Ties round to even in every kernel (long segments take the vector path):
 * mn 0 and scale 1 from the values 0 and 15, then x = k + 0.5. */
static unsigned round_even(double v)
{
	double f = floor(v), d = v - f;

	if (d != 0.5)
		return (unsigned)(d < 0.5 ? f : f + 1);
	return (unsigned)(fmod(f, 2.0) == 0.0 ? f : f + 1);
}

START_TEST(test_ties_to_even)
{
	for (int gd = 0; gd < 2; gd++) {
		/* gd 1: [3, 64], a row per group; gd 0: [3, 64] is 64 column groups
		 * of 3 rows: the first two rows pin mn and scale, the third rounds */
		size_t r = 3, c = 64, n = r * c;
		struct fg_codec_shape sh = { r, c, gd };
		float x[192];
		uint8_t enc[512];

		ck_assert_uint_le(ops->encoded_size(&sh), sizeof(enc));
		for (size_t i = 0; i < n; i++) {
			size_t j = gd == 0 ? i / c : i % c;

			x[i] = (float)(i % 15) + 0.5f;
			if (j == 0)
				x[i] = 0.0f;
			if (j == 1)
				x[i] = 15.0f;
		}
		ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
		for (size_t i = 0; i < n; i++) {
			size_t g = hand_group_of(i / c, i % c, c, gd);
			uint16_t hs, hm;

			params_at(enc, n, g, &hs, &hm);
			ck_assert_msg(hs == 0x3c00 && hm == 0, "gd%d group %zu: %#x %#x", gd, g, hs,
				      hm);
			EXPECT(nibble(enc, i) == round_even(x[i]), "gd%d element %zu: %g -> %u", gd,
			       i, x[i], nibble(enc, i));
		}
	}
}
END_TEST

/* ---- arbitrary bytes ---------------------------------------------------------- */

START_TEST(test_random_bytes)
{
	rng_seed(seed + 11);
	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < NSHAPES; i++)
			for (int round = 0; round < 3; round++) {
				size_t r = shapes[i][0], c = shapes[i][1], n = r * c;
				struct fg_codec_shape sh = { r, c, gd };
				size_t size = (size_t)ops->encoded_size(&sh);
				uint8_t *enc = malloc(size);
				float *y = malloc(n * sizeof(float));
				uint16_t *h = malloc(n * sizeof(uint16_t));

				ck_assert(enc && y && h);
				for (size_t b = 0; b < size; b++)
					enc[b] = (uint8_t)rnd();
				if (round == 2) /* every scale and min NaN or inf */
					for (size_t b = hand_data(n); b + 1 < size; b += 2)
						enc[b + 1] |= 0x7c;
				ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
				ck_assert_int_eq(ops->decode_f16(&sh, enc, h), 0);
				for (size_t e = 0; e < n; e++) {
					uint16_t hs, hm;
					float s, m;
					uint16_t want;

					params_at(enc, n, hand_group_of(e / c, e % c, c, gd), &hs,
						  &hm);
					s = fg_half_to_float(hs);
					m = fg_half_to_float(hm);
					EXPECT(decodes_as(y[e], nibble(enc, e), s, m),
						      "gd%d %zux%zu e %zu: %g from %u %#x %#x", gd, r,
						      c, e, y[e], nibble(enc, e), hs, hm);
					want = fg_float_to_half(y[e]);
					EXPECT(h[e] == want ||
						      (isnan(y[e]) && (h[e] & 0x7fffu) > 0x7c00u),
						      "gd%d e %zu: fp16 %#x, want %#x", gd, e, h[e], want);
				}
				free(h);
				free(y);
				free(enc);
			}
}
END_TEST

/* ---- fp16 hooks ---------------------------------------------------------------- */

START_TEST(test_f16_hooks)
{
	rng_seed(seed + 13);
	for (int gd = 0; gd < 2; gd++)
		for (size_t i = 0; i < NSHAPES; i++) {
			size_t r = shapes[i][0], c = shapes[i][1], n = r * c;
			struct fg_codec_shape sh = { r, c, gd };
			size_t size = (size_t)ops->encoded_size(&sh);
			uint16_t *hx = malloc(n * 2), *hy = malloc(n * 2);
			float *x = malloc(n * 4), *y = malloc(n * 4);
			uint8_t *e32 = malloc(size), *e16 = malloc(size);

			ck_assert(hx && hy && x && y && e32 && e16);
			fill(x, n, D_STUDENT3, 3.0);
			for (size_t e = 0; e < n; e++) {
				hx[e] = fg_float_to_half(x[e]);
				x[e] = fg_half_to_float(hx[e]);
			}
			memset(e16, 0xee, size);
			ck_assert_int_eq(ops->encode_f32(&sh, x, e32), 0);
			ck_assert_int_eq(ops->encode_f16(&sh, hx, e16), 0);
			ck_assert_mem_eq(e16, e32, size);
			ck_assert_int_eq(ops->decode_f32(&sh, e32, y), 0);
			ck_assert_int_eq(ops->decode_f16(&sh, e32, hy), 0);
			for (size_t e = 0; e < n; e++)
				EXPECT(hy[e] == fg_float_to_half(y[e]), "gd%d %zux%zu e %zu: %#x vs %#x",
				       gd, r, c, e, hy[e], fg_float_to_half(y[e]));
			free(e16);
			free(e32);
			free(y);
			free(x);
			free(hy);
			free(hx);
		}
}
END_TEST

/* ---- threads -------------------------------------------------------------------- */

struct job {
	struct fg_codec_shape sh;
	const float *x;
	uint8_t *enc;
	float *y;
	int rc;
};

static void *job_run(void *arg)
{
	struct job *j = arg;

	for (int k = 0; k < 4 && j->rc == 0; k++) {
		j->rc = ops->encode_f32(&j->sh, j->x, j->enc);
		if (j->rc == 0)
			j->rc = ops->decode_f32(&j->sh, j->enc, j->y);
	}
	return NULL;
}

START_TEST(test_threads)
{
	enum { T = 4, R = 131, C = 197 };
	struct job jobs[T];
	pthread_t th[T];
	float *x = malloc(R * C * sizeof(float)), *y = malloc(R * C * sizeof(float));
	size_t size[2];
	uint8_t *ref[2];

	ck_assert(x && y);
	rng_seed(seed + 17);
	fill(x, R * C, D_GAUSS, 1.0);
	for (int gd = 0; gd < 2; gd++) {
		struct fg_codec_shape sh = { R, C, gd };

		size[gd] = (size_t)ops->encoded_size(&sh);
		ref[gd] = malloc(size[gd]);
		ck_assert_ptr_nonnull(ref[gd]);
		ck_assert_int_eq(ops->encode_f32(&sh, x, ref[gd]), 0);
	}
	ck_assert_int_eq(ops->decode_f32(&(struct fg_codec_shape){ R, C, 1 }, ref[1], y), 0);
	for (int t = 0; t < T; t++) {
		jobs[t] = (struct job){ .sh = { R, C, t % 2 }, .x = x };
		jobs[t].enc = malloc(size[t % 2]);
		jobs[t].y = malloc(R * C * sizeof(float));
		ck_assert(jobs[t].enc && jobs[t].y);
		ck_assert_int_eq(pthread_create(&th[t], NULL, job_run, &jobs[t]), 0);
	}
	for (int t = 0; t < T; t++) {
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
		ck_assert_int_eq(jobs[t].rc, 0);
		ck_assert_mem_eq(jobs[t].enc, ref[t % 2], size[t % 2]);
		if (t % 2)
			ck_assert_mem_eq(jobs[t].y, y, R * C * sizeof(float));
		free(jobs[t].enc);
		free(jobs[t].y);
	}
	free(ref[0]);
	free(ref[1]);
	free(y);
	free(x);
}
END_TEST

/* ---- one encode on many threads ------------------------------------------------ */

/* Encode with `threads` threads (0: the plugin's own hooks, which pick their
 * count) into dst, first filled with garbage: a byte that a piece forgets to
 * zero or write, or one written past the end, shows. */
static void encode_with(const struct fg_codec_shape *sh, const float *x, const uint16_t *h,
			int threads, uint8_t *dst, size_t size)
{
	int rc;

	memset(dst, 0xa5, size + GUARD);
	if (threads == 0)
		rc = x ? ops->encode_f32(sh, x, dst) : ops->encode_f16(sh, h, dst);
	else
		rc = x ? int4_test_encode_f32(sh, x, dst, threads)
		       : int4_test_encode_f16(sh, h, dst, threads);
	ck_assert_int_eq(rc, 0);
	for (size_t i = size; i < size + GUARD; i++)
		EXPECT(dst[i] == 0xa5, "%llux%llu gd%d, %d threads: byte %zu past the end written",
		       (unsigned long long)sh->rows, (unsigned long long)sh->cols, sh->group_dim,
		       threads, i);
}

/* One thread and many give the same bytes, from fp32 and fp16 input, for
 * shapes with a partial last group, unit counts (bands of 64 rows, groups)
 * that no thread count divides, odd cols (every other row starts mid-byte,
 * so cuts must move to an even element), one long row (cuts inside it),
 * fewer units than threads; the plugin's own hooks agree. */
START_TEST(test_encode_threads)
{
	static const struct {
		uint64_t rows, cols;
		int gd;
	} shp[] = {
		{ 64 * 37 + 13, 301, 0 }, { 64 * 41, 256, 0 },  { 517, 64 * 9 + 29, 1 },
		{ 600, 1000, 1 },         { 1, 64 * 2000 + 7, 1 }, { 3, 64 * 5 + 1, 1 },
		{ 5, 3, 0 },              { 130, 7, 0 },
	};
	static const int threads[] = { 0, 2, 3, 5, 7, 16, 64, 1000 };

	for (size_t k = 0; k < sizeof(shp) / sizeof(shp[0]); k++) {
		struct fg_codec_shape sh = { shp[k].rows, shp[k].cols, shp[k].gd };
		size_t n = (size_t)(sh.rows * sh.cols), size = (size_t)ops->encoded_size(&sh);
		float *x = malloc(n * sizeof(float));
		uint16_t *h = malloc(n * sizeof(uint16_t));
		uint8_t *ref = malloc(size + GUARD), *ref16 = malloc(size + GUARD);
		uint8_t *got = malloc(size + GUARD);

		ck_assert(x && h && ref && ref16 && got);
		rng_seed(seed + 300 + k);
		fill(x, n, D_GAUSS, 1.0);
		for (size_t i = 0; i < n; i++)
			h[i] = fg_float_to_half((float)(3.0 * gauss()));
		encode_with(&sh, x, NULL, 1, ref, size);
		encode_with(&sh, NULL, h, 1, ref16, size);
		for (size_t j = 0; j < sizeof(threads) / sizeof(threads[0]); j++) {
			encode_with(&sh, x, NULL, threads[j], got, size);
			ck_assert_msg(memcmp(ref, got, size) == 0,
				      "%llux%llu gd%d: f32 with %d threads differs from 1",
				      (unsigned long long)sh.rows, (unsigned long long)sh.cols,
				      sh.group_dim, threads[j]);
			encode_with(&sh, NULL, h, threads[j], got, size);
			ck_assert_msg(memcmp(ref16, got, size) == 0,
				      "%llux%llu gd%d: f16 with %d threads differs from 1",
				      (unsigned long long)sh.rows, (unsigned long long)sh.cols,
				      sh.group_dim, threads[j]);
		}
		free(got);
		free(ref16);
		free(ref);
		free(h);
		free(x);
	}
}
END_TEST

/* A tensor large enough (2^21 values or more) for the plugin's hooks to use a
 * thread per CPU themselves: every rule of doc/INT4.md holds for every group
 * and value (roundtrip checks them by hand), and the bytes equal one thread's. */
START_TEST(test_encode_threads_auto)
{
	const size_t rows = 64 * 33 + 5, cols = 1031, n = rows * cols;
	int gd = _i;
	struct fg_codec_shape sh = { rows, cols, gd };
	size_t size = (size_t)ops->encoded_size(&sh);
	float *x = malloc(n * sizeof(float));
	uint8_t *ref = malloc(size + GUARD), *enc = NULL;
	char label[64];

	ck_assert(x && ref);
	ck_assert_uint_gt(n, (size_t)2 << 20);
	rng_seed(seed + 400 + (uint64_t)gd);
	fill(x, n, D_STUDENT3, 1.0);
	snprintf(label, sizeof(label), "auto threads gd%d", gd);
	roundtrip(rows, cols, gd, x, label, NULL, &enc);
	encode_with(&sh, x, NULL, 1, ref, size);
	ck_assert_msg(memcmp(ref, enc, size) == 0, "%s: bytes differ from one thread's", label);
	free(enc);
	free(ref);
	free(x);
}
END_TEST

/* ---- NMSE ------------------------------------------------------------------------ */

START_TEST(test_nmse)
{
	static const enum dist ds[] = { D_GAUSS, D_STUDENT3, D_CAUCHY };
	const size_t r = 1024, c = 1024;
	float *x = malloc(r * c * sizeof(float));

	ck_assert_ptr_nonnull(x);
	for (size_t k = 0; k < sizeof(ds) / sizeof(ds[0]); k++)
		for (int gd = 0; gd < 2; gd++) {
			struct stats st = { 0 };
			char label[64];
			double nmse, pred;

			rng_seed(seed + 1000 + k);
			fill(x, r * c, ds[k], 1.0);
			snprintf(label, sizeof(label), "nmse %s gd%d", dist_name[ds[k]], gd);
			roundtrip(r, c, gd, x, label, &st, NULL);
			nmse = st.err2 / st.x2;
			pred = st.pred2 / st.x2;
			printf("int4_group64 NMSE %-10s group_dim %d (%zux%zu): %.3e (%.2f dB); "
			       "uniform-noise prediction %.3e; max |err|/scale %.6f\n",
			       dist_name[ds[k]], gd, r, c, nmse, 10.0 * log10(nmse), pred,
			       st.max_rel);
			fflush(stdout);
			/* Rounding to nearest gives noise ~ scale^2 / 12; truncation
			 * would give about 4 times that, and a wrong scale more.  Cauchy
			 * groups are mostly one huge value and a cluster the size of a
			 * small part of a step, so their noise falls well below it. */
			ck_assert_msg(nmse < 1.3 * pred, "%s: NMSE %g, prediction %g", label, nmse,
				      pred);
			if (ds[k] != D_CAUCHY)
				ck_assert_msg(nmse > 0.7 * pred, "%s: NMSE %g, prediction %g", label,
					      nmse, pred);
			ck_assert_msg(st.max_rel <= 0.5 + 1e-5, "%s: max err / scale %g", label,
				      st.max_rel);
			if (ds[k] == D_GAUSS)
				/* ~4.9 sigma per group range / 15 steps: (0.33)^2 / 12 */
				ck_assert_msg(nmse < 0.012, "%s: NMSE %g", label, nmse);
		}
	free(x);
}
END_TEST

/* ---- fgcore/q4.h's encoder, as out-of-tree plugins use it ----------------------- */

/* A bound for a group: random floats of every magnitude (bit patterns),
 * fp16 values and their float neighbours, and the non-finite ones. */
static float helper_bound(void)
{
	uint64_t r = rnd();
	uint16_t h = (uint16_t)(r >> 16);

	switch (r % 6) {
	case 0: {
		uint32_t u = (uint32_t)(r >> 32);
		float f;

		memcpy(&f, &u, sizeof(f));
		return f;
	}
	case 1:
		return fg_half_to_float(h);
	case 2:
		return nextafterf(fg_half_to_float(h), INFINITY);
	case 3:
		return nextafterf(fg_half_to_float(h), -INFINITY);
	case 4:
		return (float)(gauss() * ldexp(1.0, (int)(r >> 59) - 16));
	default:
		return (r >> 8) % 3 == 0 ? NAN : (r >> 8) % 3 == 1 ? INFINITY : -INFINITY;
	}
}

/* fg_q4_param_of, fg_q4_code and fg_q4_value against the rules of the module
 * comment, checked here with the test's own fp16 neighbours. */
START_TEST(test_q4_rule)
{
	rng_seed(seed + 11);
	for (int i = 0; i < 2000000; i++) {
		float lo = helper_bound(), hi = helper_bound(), l, h, s, x, t;
		struct fg_q4_param p;
		unsigned q;

		if (i % 4 == 0)
			hi = lo; /* constant groups */
		if (lo > hi) {
			float tmp = lo;

			lo = hi;
			hi = tmp;
		}
		p = fg_q4_param_of(lo, hi);
		EXPECT(p.m == fg_half_to_float(p.min), "param_of(%a, %a): m %a, min %#x", lo, hi,
		       p.m, p.min);
		s = fg_half_to_float(p.scale);
		EXPECT(s > 0 ? p.inv == 1.0f / s : p.inv == 0.0f && p.scale == 0,
		       "param_of(%a, %a): inv %a for scale %#x", lo, hi, p.inv, p.scale);
		if (!(lo <= hi)) { /* a NaN bound: no value */
			EXPECT(p.scale == 0 && p.min == 0, "param_of(%a, %a): %#x %#x", lo, hi,
			       p.scale, p.min);
			continue;
		}
		l = clampf16(lo) + 0.0f;
		h = clampf16(hi) + 0.0f;
		EXPECT(p.m <= l && fg_half_to_float(half_up(p.min)) > l,
		       "param_of(%a, %a): min %#x is not the largest fp16 <= %a", lo, hi, p.min, l);
		EXPECT((p.min & 0x8000u) == 0 || p.m < 0, "param_of(%a, %a): min -0", lo, hi);
		EXPECT((double)p.m + 15.0 * s >= h, "param_of(%a, %a): %#x + 15 * %#x < %a", lo, hi,
		       p.min, p.scale, h);
		EXPECT(p.scale == 0 || (double)p.m + 15.0 * fg_half_to_float(half_down(p.scale)) < h,
		       "param_of(%a, %a): scale %#x is not the smallest", lo, hi, p.scale);
		/* a value of the group, and a NaN */
		x = l + (float)unif() * (h - l);
		x = x > h ? h : x;
		t = (x - p.m) * p.inv;
		t = t < 0 ? 0 : t > 15 ? 15 : t;
		q = fg_q4_code(x, p.m, p.inv);
		EXPECT(q == (unsigned)rintf(t), "code(%a; %#x %#x) = %u, not rint(%a)", x, p.scale,
		       p.min, q, t);
		EXPECT(fg_q4_code(NAN, p.m, p.inv) == 0, "NaN codes as %u",
		       fg_q4_code(NAN, p.m, p.inv));
		EXPECT(decodes_as(fg_q4_value(q, s, p.m), q, s, p.m), "value(%u, %a, %a) = %a", q,
		       s, p.m, fg_q4_value(q, s, p.m));
		EXPECT(fabs((double)fg_q4_value(q, s, p.m) - x) <= err_bound(s, p.m),
		       "value of code(%a) is %a: beyond the bound", x, fg_q4_value(q, s, p.m));
	}
}
END_TEST

/* fg_q4_encode_group, fg_q4_param_store and fg_q4_set_nibble give the
 * codec's bytes for rows grouped along dimension 1; fg_q4_nibble and
 * fg_q4_param_load read them back. */
START_TEST(test_q4_helpers_bytes)
{
	rng_seed(seed + 12);
	for (size_t k = 0; k < NSHAPES; k++) {
		size_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
		struct fg_codec_shape sh = { rows, cols, 1 };
		size_t size = (size_t)fg_q4_bytes(rows, cols, 1), data = (size_t)fg_q4_data_bytes(rows, cols);
		size_t gcols = (size_t)fg_q4_grid_cols(cols, 1);
		float *x = malloc(n * sizeof(float));
		uint8_t *want = malloc(size), *got = calloc(1, size), q[FG_Q4_GROUP];

		ck_assert(x && want && got);
		fill(x, n, D_STUDENT3, 3.0);
		for (size_t i = 0; i < n; i += 37)
			x[i] = i % 3 ? NAN : -INFINITY;
		ck_assert_int_eq(ops->encode_f32(&sh, x, want), 0);
		for (size_t r = 0; r < rows; r++)
			for (size_t g = 0; g < gcols; g++) {
				size_t c0 = g * FG_Q4_GROUP, w = cols - c0 < FG_Q4_GROUP ? cols - c0 : FG_Q4_GROUP;
				struct fg_q4_param p;
				float s, m;

				fg_q4_encode_group(x + r * cols + c0, w, &p, q);
				fg_q4_param_store(got + data, r * gcols + g, &p);
				for (size_t j = 0; j < w; j++) {
					fg_q4_set_nibble(got, r * cols + c0 + j, q[j]);
					EXPECT(fg_q4_nibble(got, r * cols + c0 + j) == q[j],
					       "%zux%zu: nibble %zu reads back wrong", rows, cols,
					       r * cols + c0 + j);
				}
				fg_q4_param_load(got + data, r * gcols + g, &s, &m);
				EXPECT(s == fg_half_to_float(p.scale) && m == p.m,
				       "%zux%zu: param_load of group %zu", rows, cols, r * gcols + g);
			}
		for (size_t i = 0; i < size; i++)
			EXPECT(got[i] == want[i], "%zux%zu: byte %zu of %zu: q4.h %#x, codec %#x", rows,
			       cols, i, size, got[i], want[i]);
		free(x), free(want), free(got);
	}
}
END_TEST

static Suite *int4_suite(void)
{
	Suite *s = suite_create("int4_group64");
	TCase *tc = tcase_create("codec");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_core_error_line);
	tcase_add_loop_test(tc, test_bound_random, 0, D_COUNT);
	tcase_add_test(tc, test_partial_groups);
	tcase_add_test(tc, test_constant_groups);
	tcase_add_test(tc, test_outlier);
	tcase_add_test(tc, test_nonfinite);
	tcase_add_test(tc, test_layout_by_hand);
	tcase_add_test(tc, test_ties_to_even);
	tcase_add_test(tc, test_random_bytes);
	tcase_add_test(tc, test_f16_hooks);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_encode_threads);
	tcase_add_loop_test(tc, test_encode_threads_auto, 0, 2);
	tcase_add_test(tc, test_nmse);
	tcase_add_test(tc, test_q4_rule);
	tcase_add_test(tc, test_q4_helpers_bytes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *e = getenv("FGCORE_TEST_SEED");
	SRunner *sr;
	int failed;

	if (e && *e)
		seed = strtoull(e, NULL, 0);
	sr = srunner_create(int4_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "FGCORE_TEST_SEED=%llu\n", (unsigned long long)seed);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
