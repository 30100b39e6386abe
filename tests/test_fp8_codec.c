/* tests/test_fp8_codec.c - the fp8_e4m3_rows codec against a reference
 * written here, and the byte layout of fgcore/f8.h computed by hand.
 *
 * The reference uses none of f8.h: per row amax over the non-NaN values
 * clamped to 65504, scale = amax / 448 and inv = 448 / amax as fp32 divisions
 * (a double quotient rounded to float is the fp32 one; both 1 for an amax
 * below 2^-64), t = x * inv (a double
 * product of two floats is exact, rounded to float), the code of t the E4M3
 * value nearest |t| by a search over all 127 finite magnitudes, ties to the
 * even code, above 448 saturating; decoded = E4M3 value * scale.  Codes,
 * scales and decoded values must match it bit for bit on rows of every kind:
 * magnitudes from 2^-20 to beyond 65504, values that land in the subnormals,
 * exact midpoints between codes, +-inf, NaN, -0, zero rows, NaN rows, rows
 * whose amax lies about 2^-64 (fp32 subnormals too), rows of one element,
 * widths that are not a multiple of 64.
 * Then: sizes, padding and little-endian scales by hand; the fp16 entry
 * points against the fp32 ones; shapes refused (group_dim other than 1,
 * sizes that overflow) with nothing written; and a large tensor, encoded on
 * several threads, giving the bytes of its rows encoded one at a time; and
 * fgcore/f8_simd.h's bulk encoder against f8.h's one-value functions.
 * FGCORE_TEST_SEED changes the PRNG seed (default 4242). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/f8.h>
#include <fgcore/f8_simd.h>
#include <fgcore/half.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/codec_test.h"
#include "tests/fp8_threads.h"

static void setup(void)
{
	codec_load("fp8_e4m3_rows");
}

static void teardown(void)
{
	codec_unload();
}

/* ---- PRNG ---------------------------------------------------------------------- */

static float sign_of_rnd(float v)
{
	return rnd() & 1 ? -v : v;
}

/* ---- the reference --------------------------------------------------------------- */

/* The magnitude of a code 0..126 from its fields: exponent bias 7, 3 mantissa
 * bits; exponent 0 is subnormal, m * 2^-9. */
static double ref_e4m3(unsigned code)
{
	unsigned e = code >> 3, m = code & 7u;

	return e ? ldexp(8.0 + m, (int)e - 10) : ldexp(m, -9);
}

/* The code of t: the nearest finite magnitude, ties to the even code (codes
 * grow with their magnitude, so a tie is between c - 1 and c). */
static uint8_t ref_code_of(float t)
{
	double a = fabs((double)t), best = INFINITY;
	unsigned bc = 0;

	if (isnan(t))
		return 0x7f;
	if (a >= 448.0)
		bc = 0x7e;
	else
		for (unsigned c = 0; c <= 0x7e; c++) {
			double d = fabs(ref_e4m3(c) - a);

			if (d < best || (d == best && c % 2 == 0)) {
				best = d;
				bc = c;
			}
		}
	return (uint8_t)((signbit(t) ? 0x80u : 0u) | bc);
}

static double clamp16(double x)
{
	return x > 65504.0 ? 65504.0 : x < -65504.0 ? -65504.0 : x;
}

struct ref_row {
	float scale;
	uint8_t *code; /* cols */
	float *y;      /* cols */
};

/* One row x[0..cols) by the rule of the module comment. */
static void ref_row(const float *x, size_t cols, struct ref_row *out)
{
	double amax = 0.0;
	float a, inv;

	for (size_t j = 0; j < cols; j++)
		if (!isnan(x[j]))
			amax = fmax(amax, fmin(fabs((double)x[j]), 65504.0));
	a = (float)amax; /* a float's magnitude or 65504: exact */
	out->scale = a >= ldexpf(1, -64) ? (float)((double)a / 448.0) : 1.0f;
	inv = a >= ldexpf(1, -64) ? (float)(448.0 / (double)a) : 1.0f;
	for (size_t j = 0; j < cols; j++) {
		float xc = isnan(x[j]) ? x[j] : (float)clamp16(x[j]);
		float t = (float)((double)xc * (double)inv);
		uint8_t c = ref_code_of(t);
		double v = ref_e4m3(c & 0x7fu);

		out->code[j] = c;
		if ((c & 0x7fu) == 0x7fu)
			out->y[j] = NAN;
		else
			out->y[j] = (float)((c & 0x80u ? -v : v) * (double)out->scale);
	}
}

/* ---- the layout, by hand --------------------------------------------------------- */

static size_t hand_data(size_t n)
{
	return (n + 63) / 64 * 64;
}

static size_t hand_size(size_t rows, size_t cols)
{
	return hand_data(rows * cols) + 4 * rows;
}

/* Row r's scale bytes, little-endian. */
static uint32_t scale_bits_at(const uint8_t *enc, size_t n, size_t r)
{
	const uint8_t *b = enc + hand_data(n) + 4 * r;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int same_value(float a, float b)
{
	return isnan(a) ? isnan(b) : fg_float_to_bits(a) == fg_float_to_bits(b);
}

/* Encode x [rows, cols] into a buffer filled with garbage first; check the
 * size, that nothing past it is written and that the padding is zero.
 * Returns the malloc'ed bytes. */
static uint8_t *encode_checked(size_t rows, size_t cols, const float *x, const char *label)
{
	struct fg_codec_shape sh = { rows, cols, 1 };
	size_t n = rows * cols, size = hand_size(rows, cols);
	uint8_t *enc = malloc(size + GUARD);

	ck_assert_ptr_nonnull(enc);
	ck_assert_uint_eq(ops->encoded_size(&sh), size);
	ck_assert_uint_eq(fg_f8_bytes(rows, cols), size);
	memset(enc, 0xa5, size + GUARD);
	ck_assert_int_eq(ops->encode_f32(&sh, x, enc), 0);
	for (size_t i = n; i < hand_data(n); i++)
		EXPECT(enc[i] == 0, "%s: padding byte %zu is %#x", label, i, enc[i]);
	for (size_t i = size; i < size + GUARD; i++)
		EXPECT(enc[i] == 0xa5, "%s: byte %zu past the end written", label, i);
	return enc;
}

/* ---- (a) the reference, on rows of every kind ------------------------------------- */

enum kind {
	K_GAUSS,     /* gaussian times 2^-20 .. 2^17 (beyond 65504: clamped) */
	K_SUBNORMAL, /* one 1, the rest 2^-6 .. 2^-22: codes in the subnormals and 0 */
	K_SPECIAL,   /* gaussian with +-inf, NaN, -0, 1e5, -1e30 mixed in */
	K_ZERO,      /* all zero (and -0) */
	K_BITS,      /* random float bit patterns: any magnitude, NaN */
	K_NAN,       /* all NaN: amax 0, scale 1, every code 0x7f */
	K_MIDPOINTS, /* 448 and the midpoints between codes, and their neighbours */
	K_HUGE,      /* all beyond 65504: every value clamped */
	K_HALF,      /* random fp16 bit patterns widened */
	K_TINY,      /* gaussian times 2^-62 .. 2^-142 a row: amax on either side of 2^-64 */
	K_COUNT
};

static float midpoint(size_t j)
{
	unsigned c = (unsigned)(j % 126);
	float m = (float)((ref_e4m3(c) + ref_e4m3(c + 1)) / 2); /* exact */

	switch (j / 126 % 3) {
	case 1:
		m = nextafterf(m, INFINITY);
		break;
	case 2:
		m = nextafterf(m, 0.0f);
		break;
	}
	return sign_of_rnd(m);
}

static void fill_row(float *x, size_t cols, enum kind k)
{
	int e = (int)(rnd() % 38) - 20;

	for (size_t j = 0; j < cols; j++) {
		switch (k) {
		case K_GAUSS:
			x[j] = (float)ldexp(gauss(), e);
			break;
		case K_SUBNORMAL:
			x[j] = j == cols / 2 ? 1.0f
					     : sign_of_rnd((float)ldexp(unif(), -6 - (int)(rnd() % 17)));
			break;
		case K_SPECIAL: {
			static const float sp[] = { INFINITY, -INFINITY, NAN, -0.0f, 1e5f, -1e30f };

			x[j] = rnd() % 4 == 0 ? sp[rnd() % 6] : (float)gauss();
			break;
		}
		case K_ZERO:
			x[j] = j % 3 ? 0.0f : -0.0f;
			break;
		case K_BITS:
			x[j] = fg_bits_to_float((uint32_t)rnd());
			break;
		case K_NAN:
			x[j] = j % 2 ? NAN : -NAN;
			break;
		case K_MIDPOINTS:
			x[j] = j == 0 ? 448.0f : midpoint(j - 1);
			break;
		case K_HUGE:
			x[j] = sign_of_rnd((float)ldexp(1.0 + unif(), 16 + (int)(rnd() % 100)));
			break;
		case K_TINY:
			x[j] = (float)ldexp(gauss(), -62 - 4 * abs(e)); /* 2^-62 .. 2^-142 a row */
			break;
		case K_HALF:
		default:
			x[j] = fg_half_to_float((uint16_t)rnd());
			break;
		}
	}
}

/* Encode x, decode it, and compare every code, scale and value with the
 * reference. */
static void check_against_ref(size_t rows, size_t cols, const float *x, const char *label)
{
	struct fg_codec_shape sh = { rows, cols, 1 };
	size_t n = rows * cols;
	uint8_t *enc = encode_checked(rows, cols, x, label), *code = malloc(cols ? cols : 1);
	float *y = malloc((n ? n : 1) * sizeof(float)), *ry = malloc((cols ? cols : 1) * sizeof(float));
	struct ref_row ref = { 0, code, ry };

	ck_assert(code && y && ry);
	ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
	for (size_t r = 0; r < rows; r++) {
		ref_row(x + r * cols, cols, &ref);
		EXPECT(scale_bits_at(enc, n, r) == fg_float_to_bits(ref.scale),
		       "%s: row %zu: scale %#x, the reference %a (%#x)", label, r,
		       scale_bits_at(enc, n, r), (double)ref.scale, fg_float_to_bits(ref.scale));
		for (size_t j = 0; j < cols; j++) {
			size_t e = r * cols + j;

			EXPECT(enc[e] == code[j], "%s: (%zu, %zu): %a coded %#x, the reference %#x",
			       label, r, j, (double)x[e], enc[e], code[j]);
			EXPECT(same_value(y[e], ry[j]),
			       "%s: (%zu, %zu): %#x decodes as %a, the reference %a", label, r, j,
			       enc[e], (double)y[e], (double)ry[j]);
		}
	}
	free(ry);
	free(y);
	free(code);
	free(enc);
}

static const size_t shapes[][2] = {
	{ 1, 1 }, { 9, 1 }, { 1, 7 }, { 9, 63 }, { 9, 64 }, { 9, 65 },
	{ 12, 100 }, { 3, 200 }, { 10, 1031 }, { 18, 129 },
};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

START_TEST(test_reference)
{
	char label[64];

	rng_seed(seed + (uint64_t)_i);
	for (size_t s = 0; s < NSHAPES; s++) {
		size_t rows = shapes[s][0], cols = shapes[s][1];
		float *x = malloc(rows * cols * sizeof(float));

		ck_assert_ptr_nonnull(x);
		/* every kind of row in each shape of 9 rows or more */
		for (size_t r = 0; r < rows; r++)
			fill_row(x + r * cols, cols, (enum kind)((r + s + (size_t)_i) % K_COUNT));
		snprintf(label, sizeof(label), "round %d %zux%zu", _i, rows, cols);
		check_against_ref(rows, cols, x, label);
		free(x);
	}
}
END_TEST

/* Ties and the neighbours of every midpoint, the subnormal/normal boundary
 * and saturation, with scale and inv exactly 1 (amax 448): t is x itself. */
START_TEST(test_ties)
{
	const size_t cols = 1 + 3 * 126;
	float x[1 + 3 * 126];
	uint8_t *enc;

	rng_seed(seed + 50);
	fill_row(x, cols, K_MIDPOINTS);
	check_against_ref(1, cols, x, "midpoints");
	enc = encode_checked(1, cols, x, "midpoints");
	ck_assert_uint_eq(scale_bits_at(enc, cols, 0), 0x3f800000u); /* 1.0f */
	/* spot checks by hand: 448 is 0x7e; the midpoint of 0 and 2^-9 ties to 0,
	 * of codes 1 and 2 to 2, of 0x0f (2^-6 * 1.875) and 0x10 (2^-5) to 0x10 */
	ck_assert_uint_eq(enc[0], 0x7e);
	ck_assert_uint_eq(enc[1] & 0x7fu, 0x00);
	ck_assert_uint_eq(enc[2] & 0x7fu, 0x02);
	ck_assert_uint_eq(enc[1 + 0x0f] & 0x7fu, 0x10);
	/* the midpoint of 416 and 448 ties to 448 (0x7e, even) */
	ck_assert_uint_eq(enc[1 + 0x7d] & 0x7fu, 0x7e);
	free(enc);
}
END_TEST

/* ---- (b) sizes and the layout by hand ------------------------------------------------ */

START_TEST(test_layout_by_hand)
{
	/* Row 0 {448, -1, 0.5, 3}: amax 448, scale 1; codes 0x7e, 0xb8, 0x30, 0x44.
	 * Row 1 {2, 1, 0, -0.0}: scale 2/448, inv 224: 2 -> 448 (0x7e), 1 -> 224
	 * = 1.75 * 2^7 (0x76), 0 -> 0x00, -0 -> 0x80. */
	const float x[8] = { 448, -1, 0.5f, 3, 2, 1, 0, -0.0f };
	const uint8_t codes[8] = { 0x7e, 0xb8, 0x30, 0x44, 0x7e, 0x76, 0x00, 0x80 };
	struct fg_codec_shape sh = { 2, 4, 1 };
	float y[8], s1 = (float)(2.0 / 448.0);
	uint32_t b1 = fg_float_to_bits(s1);
	uint8_t *enc = encode_checked(2, 4, x, "by hand");

	ck_assert_uint_eq(ops->encoded_size(&sh), 72);
	ck_assert_mem_eq(enc, codes, 8);
	ck_assert_uint_eq(enc[64], 0x00);
	ck_assert_uint_eq(enc[65], 0x00);
	ck_assert_uint_eq(enc[66], 0x80);
	ck_assert_uint_eq(enc[67], 0x3f);
	ck_assert_uint_eq(enc[68], b1 & 0xff);
	ck_assert_uint_eq(enc[69], (b1 >> 8) & 0xff);
	ck_assert_uint_eq(enc[70], (b1 >> 16) & 0xff);
	ck_assert_uint_eq(enc[71], b1 >> 24);
	ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
	ck_assert(y[0] == 448 && y[1] == -1 && y[2] == 0.5f && y[3] == 3);
	ck_assert(y[4] == 448 * s1 && y[5] == 224 * s1 && y[6] == 0);
	ck_assert(y[7] == 0 && signbit(y[7]));
	free(enc);
}
END_TEST

START_TEST(test_sizes)
{
	static const uint64_t more[][2] = { { 4096, 4096 }, { 4099, 4097 }, { 50272, 768 },
					    { 1, 64 * 1000 + 1 } };

	for (size_t i = 0; i < NSHAPES; i++) {
		struct fg_codec_shape sh = { shapes[i][0], shapes[i][1], 1 };

		ck_assert_uint_eq(ops->encoded_size(&sh), hand_size(shapes[i][0], shapes[i][1]));
		ck_assert_uint_eq(ops->encoded_size(&sh), fg_f8_bytes(sh.rows, sh.cols));
	}
	for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
		struct fg_codec_shape sh = { more[i][0], more[i][1], 1 };

		ck_assert_uint_eq(ops->encoded_size(&sh), hand_size(more[i][0], more[i][1]));
	}
	/* Empty tensors: no rows, no bytes; rows without columns keep their
	 * scales (1: amax 0), as fg_f8_bytes counts them. */
	{
		static const uint64_t empty[][2] = { { 0, 0 }, { 0, 5 }, { 0, UINT64_MAX } };
		struct fg_codec_shape sh = { 7, 0, 1 };
		uint8_t buf[28 + GUARD];

		for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
			struct fg_codec_shape e = { empty[i][0], empty[i][1], 1 };

			ck_assert_uint_eq(ops->encoded_size(&e), 0);
			ck_assert_int_eq(ops->encode_f32(&e, NULL, NULL), 0);
			ck_assert_int_eq(ops->decode_f32(&e, NULL, NULL), 0);
			ck_assert_int_eq(ops->encode_f16(&e, NULL, NULL), 0);
			ck_assert_int_eq(ops->decode_f16(&e, NULL, NULL), 0);
		}
		ck_assert_uint_eq(ops->encoded_size(&sh), 28);
		ck_assert_uint_eq(fg_f8_bytes(7, 0), 28);
		memset(buf, 0xa5, sizeof(buf));
		ck_assert_int_eq(ops->encode_f32(&sh, NULL, buf), 0);
		for (size_t r = 0; r < 7; r++)
			ck_assert_uint_eq(scale_bits_at(buf, 0, r), 0x3f800000u);
		for (size_t i = 28; i < sizeof(buf); i++)
			ck_assert_uint_eq(buf[i], 0xa5);
		ck_assert_int_eq(ops->encode_f32(&sh, NULL, NULL), -EINVAL);
		ck_assert_int_eq(ops->decode_f32(&sh, buf, NULL), 0);
	}
}
END_TEST

/* ---- (c) fp16 in and out ----------------------------------------------------------- */

START_TEST(test_f16_hooks)
{
	char label[64];

	rng_seed(seed + 13);
	for (size_t i = 0; i < NSHAPES; i++) {
		size_t r = shapes[i][0], c = shapes[i][1], n = r * c;
		struct fg_codec_shape sh = { r, c, 1 };
		size_t size = hand_size(r, c);
		uint16_t *hx = malloc(n * 2), *hy = malloc(n * 2);
		float *x = malloc(n * 4), *y = malloc(n * 4);
		uint8_t *e32, *e16 = malloc(size + GUARD);

		ck_assert(hx && hy && x && y && e16);
		/* fp16 values of every kind: random patterns (inf, NaN, subnormal
		 * halves) in some rows, gaussians of several magnitudes in others */
		for (size_t rr = 0; rr < r; rr++) {
			int e = (int)(rnd() % 30) - 20;

			for (size_t j = 0; j < c; j++)
				hx[rr * c + j] = rr % 2 ? (uint16_t)rnd()
							: fg_float_to_half((float)ldexp(gauss(), e));
		}
		for (size_t e = 0; e < n; e++)
			x[e] = fg_half_to_float(hx[e]);
		snprintf(label, sizeof(label), "fp16 %zux%zu", r, c);
		e32 = encode_checked(r, c, x, label);
		memset(e16, 0xee, size + GUARD);
		ck_assert_int_eq(ops->encode_f16(&sh, hx, e16), 0);
		ck_assert_mem_eq(e16, e32, size);
		for (size_t b = size; b < size + GUARD; b++)
			ck_assert_uint_eq(e16[b], 0xee);
		ck_assert_int_eq(ops->decode_f32(&sh, e32, y), 0);
		ck_assert_int_eq(ops->decode_f16(&sh, e32, hy), 0);
		for (size_t e = 0; e < n; e++)
			EXPECT(hy[e] == fg_float_to_half(y[e]), "%s: e %zu: %#x vs %#x", label, e,
			       hy[e], fg_float_to_half(y[e]));
		free(e16), free(e32), free(y), free(x), free(hy), free(hx);
	}
}
END_TEST

/* Any bytes decode without a fault, as the reference reads them. */
START_TEST(test_random_bytes)
{
	const size_t rows = 9, cols = 65, n = rows * cols, size = hand_size(rows, cols);
	struct fg_codec_shape sh = { rows, cols, 1 };
	uint8_t enc[640 + 4 * 9]; /* 585 codes padded to 640, 9 scales */
	float y[9 * 65];
	uint16_t h[9 * 65];

	rng_seed(seed + 11);
	ck_assert_uint_eq(sizeof(enc), size);
	for (int round = 0; round < 20; round++) {
		for (size_t b = 0; b < size; b++)
			enc[b] = (uint8_t)rnd();
		ck_assert_int_eq(ops->decode_f32(&sh, enc, y), 0);
		ck_assert_int_eq(ops->decode_f16(&sh, enc, h), 0);
		for (size_t e = 0; e < n; e++) {
			float s = fg_bits_to_float(scale_bits_at(enc, n, e / cols));
			uint8_t c = enc[e];
			double v = ref_e4m3(c & 0x7fu);
			float want = (c & 0x7fu) == 0x7fu ? NAN
							 : (float)((c & 0x80u ? -v : v) * (double)s);

			EXPECT(same_value(y[e], want), "e %zu: %#x with scale %a decodes as %a", e,
			       c, (double)s, (double)y[e]);
			EXPECT(h[e] == fg_float_to_half(y[e]) ||
				       (isnan(y[e]) && (h[e] & 0x7fffu) > 0x7c00u),
			       "e %zu: fp16 %#x for %a", e, h[e], (double)y[e]);
		}
	}
}
END_TEST

/* ---- (d) shapes refused ------------------------------------------------------------- */

START_TEST(test_bad_shapes)
{
	_Alignas(16) uint8_t buf[256];
	float one = 1.0f, out;
	struct fg_codec_shape sh;

	/* the group is the whole row: group_dim 1 only, nothing touched otherwise */
	for (int gd = -1; gd <= 3; gd++) {
		if (gd == 1)
			continue;
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
	ck_assert_int_eq(ops->encode_f16(NULL, (const uint16_t *)buf, buf), -EINVAL);
	ck_assert_int_eq(ops->decode_f16(NULL, buf, (uint16_t *)buf), -EINVAL);

	/* Sizes that overflow (the values, or the scales of rows without
	 * columns, or the codes plus the scales): refused before any pointer is read. */
	{
		const uint64_t big[][2] = {
			{ 1ull << 32, 1ull << 32 }, { UINT64_MAX, 2 }, { 3, UINT64_MAX / 4 },
			{ UINT64_MAX, UINT64_MAX }, { 1ull << 62, 2 }, { UINT64_MAX, 0 },
			{ SIZE_MAX / 4 + 1, 0 }, { SIZE_MAX / 4 - 16, 1 },
		};

		for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
			sh = (struct fg_codec_shape){ big[i][0], big[i][1], 1 };
			ck_assert_uint_eq(ops->encoded_size(&sh), 0);
			ck_assert_int_eq(ops->encode_f32(&sh, NULL, NULL), -EINVAL);
			ck_assert_int_eq(ops->decode_f32(&sh, NULL, NULL), -EINVAL);
			ck_assert_int_eq(ops->encode_f16(&sh, NULL, NULL), -EINVAL);
			ck_assert_int_eq(ops->decode_f16(&sh, NULL, NULL), -EINVAL);
		}
	}
	/* A real shape with a NULL buffer is an error, not a crash. */
	sh = (struct fg_codec_shape){ 2, 2, 1 };
	ck_assert_int_eq(ops->encode_f32(&sh, NULL, buf), -EINVAL);
	ck_assert_int_eq(ops->encode_f32(&sh, &one, NULL), -EINVAL);
	ck_assert_int_eq(ops->encode_f16(&sh, NULL, buf), -EINVAL);
	ck_assert_int_eq(ops->decode_f32(&sh, NULL, &out), -EINVAL);
	ck_assert_int_eq(ops->decode_f32(&sh, buf, NULL), -EINVAL);
	ck_assert_int_eq(ops->decode_f16(&sh, buf, NULL), -EINVAL);
}
END_TEST

/* The core's wrapper turns the codec's -EINVAL into one error line. */
START_TEST(test_core_error_line)
{
	struct fg_plugin_handle h;
	struct fg_codec c;
	struct fg_codec_shape sh = { 4, 4, 0 };
	float x[16] = { 0 };
	uint8_t buf[128];

	ck_assert_int_eq(fg_plugin_load("fp8_e4m3_rows", FG_PLUGIN_CODEC, &h), 0);
	ck_assert_int_eq(fg_codec_open(&c, &h), 0);
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &sh), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_codec_encode_f32(&c, &sh, x, buf), -EINVAL);
	ck_assert_msg(strstr(fg_last_error(), "fp8_e4m3_rows") &&
		      strstr(fg_last_error(), "group_dim 0"), "error line: %s", fg_last_error());
	sh.group_dim = 1;
	ck_assert_int_eq(fg_codec_encode_f32(&c, &sh, x, buf), 0);
	fg_codec_close(&c);
}
END_TEST

/* ---- (e) a large tensor on several threads --------------------------------------------- */

/* The bytes of row r of enc [rows, cols] are those of the row alone. */
static void check_rows_alone(size_t rows, size_t cols, const float *x, const uint16_t *h,
			     const uint8_t *enc, const char *label)
{
	struct fg_codec_shape one = { 1, cols, 1 };
	size_t n = rows * cols, size1 = hand_size(1, cols);
	uint8_t *row = malloc(size1);

	ck_assert_ptr_nonnull(row);
	for (size_t r = 0; r < rows; r++) {
		if (x)
			ck_assert_int_eq(ops->encode_f32(&one, x + r * cols, row), 0);
		else
			ck_assert_int_eq(ops->encode_f16(&one, h + r * cols, row), 0);
		EXPECT(memcmp(row, enc + r * cols, cols) == 0, "%s: row %zu's codes differ from "
		       "the row encoded alone", label, r);
		EXPECT(scale_bits_at(row, cols, 0) == scale_bits_at(enc, n, r),
		       "%s: row %zu's scale differs from the row encoded alone", label, r);
	}
	free(row);
}

/* Encode with `threads` threads (0: the plugin's own hooks, which pick their
 * count) into dst, first filled with garbage. */
static void encode_with(const struct fg_codec_shape *sh, const float *x, const uint16_t *h,
			int threads, uint8_t *dst, size_t size)
{
	int rc;

	memset(dst, 0xa5, size + GUARD);
	if (threads == 0)
		rc = x ? ops->encode_f32(sh, x, dst) : ops->encode_f16(sh, h, dst);
	else
		rc = x ? fp8_test_encode_f32(sh, x, dst, threads)
		       : fp8_test_encode_f16(sh, h, dst, threads);
	ck_assert_int_eq(rc, 0);
	for (size_t i = size; i < size + GUARD; i++)
		EXPECT(dst[i] == 0xa5, "%llux%llu, %d threads: byte %zu past the end written",
		       (unsigned long long)sh->rows, (unsigned long long)sh->cols, threads, i);
	for (size_t i = (size_t)(sh->rows * sh->cols); i < hand_data(sh->rows * sh->cols); i++)
		EXPECT(dst[i] == 0, "%llux%llu, %d threads: padding byte %zu is %#x",
		       (unsigned long long)sh->rows, (unsigned long long)sh->cols, threads, i,
		       dst[i]);
}

/* 3000 x 1000 (3 * 10^6 values: the hooks use a thread per CPU, up to 2),
 * from fp32 and fp16: every row as if encoded alone, and the bytes of any
 * thread count those of one; shapes with rows that no count divides, and
 * fewer rows than threads. */
START_TEST(test_threads)
{
	static const struct {
		size_t rows, cols;
	} shp[] = { { 3000, 1000 }, { 517, 333 }, { 3, 70001 }, { 1, 5000 } };
	static const int threads[] = { 2, 3, 7, 16, 64, 1000 };
	char label[64];

	for (size_t k = 0; k < sizeof(shp) / sizeof(shp[0]); k++) {
		size_t rows = shp[k].rows, cols = shp[k].cols, n = rows * cols;
		struct fg_codec_shape sh = { rows, cols, 1 };
		size_t size = hand_size(rows, cols);
		float *x = malloc(n * sizeof(float));
		uint16_t *h = malloc(n * sizeof(uint16_t));
		uint8_t *ref = malloc(size + GUARD), *ref16 = malloc(size + GUARD);
		uint8_t *got = malloc(size + GUARD);

		ck_assert(x && h && ref && ref16 && got);
		rng_seed(seed + 300 + k);
		for (size_t r = 0; r < rows; r++) {
			int e = (int)(rnd() % 16) - 8; /* rows of different ranges */

			for (size_t j = 0; j < cols; j++) {
				x[r * cols + j] = (float)ldexp(gauss(), e);
				h[r * cols + j] = fg_float_to_half((float)ldexp(gauss(), e));
			}
		}
		snprintf(label, sizeof(label), "%zux%zu", rows, cols);
		encode_with(&sh, x, NULL, 0, ref, size);
		encode_with(&sh, NULL, h, 0, ref16, size);
		check_rows_alone(rows, cols, x, NULL, ref, label);
		check_rows_alone(rows, cols, NULL, h, ref16, label);
		encode_with(&sh, x, NULL, 1, got, size);
		ck_assert_msg(memcmp(ref, got, size) == 0, "%s: f32, 1 thread differs", label);
		for (size_t j = 0; j < sizeof(threads) / sizeof(threads[0]); j++) {
			encode_with(&sh, x, NULL, threads[j], got, size);
			ck_assert_msg(memcmp(ref, got, size) == 0, "%s: f32 with %d threads differs",
				      label, threads[j]);
			encode_with(&sh, NULL, h, threads[j], got, size);
			ck_assert_msg(memcmp(ref16, got, size) == 0,
				      "%s: f16 with %d threads differs", label, threads[j]);
		}
		free(got), free(ref16), free(ref), free(h), free(x);
	}
}
END_TEST

/* fgcore/f8_simd.h, the bulk encoder the codec and cpu_blas use, against
 * f8.h's one-value functions: every fp16 value and 2^22 random fp32 bit
 * patterns (all exponents, NaNs, infinities), each times inv values that
 * send them to E4M3's normals, subnormals, ties and saturation; lengths off
 * 8 (the tails); amax over runs holding NaN. */
START_TEST(test_simd_encoder)
{
	static const float invs[] = { 1.0f, 448.0f / 65504.0f, 3.0f, 0.0625f, 1e-5f, 7.0f / 9.0f,
				      0x1p-60f, 0x1p60f };
	enum { N = 1 << 16 };
	float *x = malloc(N * sizeof(float));
	uint8_t *got = malloc(N + 1);

	ck_assert(x && got);
	rng_seed(seed + 700);
	for (int round = 0; round < 65; round++) {
		for (size_t i = 0; i < N; i++)
			x[i] = round == 0 ? fg_half_to_float((uint16_t)i) : fg_bits_to_float((uint32_t)rnd());
		for (size_t v = 0; v < sizeof(invs) / sizeof(invs[0]); v++) {
			size_t n = N - (size_t)(round + v) % 8; /* tails of 0..7 */

			got[n] = 0xa5;
			fg_f8_simd_codes(got, x, invs[v], n);
			for (size_t i = 0; i < n; i++)
				ck_assert_msg(got[i] == fg_f8_code(x[i], invs[v]),
					      "bits %#x times %g: code %#x, f8.h %#x",
					      fg_float_to_bits(x[i]), (double)invs[v], got[i],
					      fg_f8_code(x[i], invs[v]));
			ck_assert_uint_eq(got[n], 0xa5);
		}
		for (size_t i = 0; i + 67 <= N; i += 67) {
			float a = fg_f8_simd_amax(x + i, 67 - i % 9);

			ck_assert_uint_eq(fg_float_to_bits(a), fg_float_to_bits(fg_f8_amax(x + i, 67 - i % 9)));
		}
	}
	printf("f8_simd.h: codes and amax equal f8.h's (AVX2 path: %s)\n",
	       fg_f8_simd_have_avx2() ? "yes" : "no, the scalar one");
	free(x), free(got);
}
END_TEST

static Suite *fp8_suite(void)
{
	Suite *s = suite_create("fp8_e4m3_rows");
	TCase *tc = tcase_create("codec");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_reference, 0, 8);
	tcase_add_test(tc, test_ties);
	tcase_add_test(tc, test_layout_by_hand);
	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_f16_hooks);
	tcase_add_test(tc, test_random_bytes);
	tcase_add_test(tc, test_bad_shapes);
	tcase_add_test(tc, test_core_error_line);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_simd_encoder);
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
	sr = srunner_create(fp8_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "FGCORE_TEST_SEED=%llu\n", (unsigned long long)seed);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
