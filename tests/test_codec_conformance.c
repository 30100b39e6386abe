/* tests/test_codec_conformance.c - every codec plugin in FGCORE_PLUGIN_PATH.
 *
 * fp16 (the reference codec, required) must be exact:
 *  - all 65 536 bit patterns decode to the bits fgcore/half.h gives (NaN: a NaN),
 *    and encode back to themselves (every non-NaN pattern);
 *  - floats (random bit patterns, values near a rounding midpoint, the subnormal
 *    range, the overflow boundary, a stride through all 2^32 patterns) encode to
 *    the portable round-to-nearest-even path of half.h and to a naive reference
 *    written here with double arithmetic (frexp / rint); the plugin takes the
 *    F16C path where the CPU has it, so this checks F16C against the portable one;
 *  - lengths that are not a multiple of 8 (vector tails), encoded_size, the
 *    fp16 in / fp16 out hooks (a copy), shapes too large refused.
 * Every other codec gets the generic round trip on random tensors: the error
 * is printed, a per-codec tolerance applies (relative to the tensor's range;
 * codecs without an entry get a loose sanity bound), fp16 must be exact there
 * too.  The core's wrappers (fg_codec_*, including the fp16 defaults through
 * float for codecs without fp16 hooks) are exercised on the way.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/half.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/test_rng.h"

/* Check's ck_assert* report every passing check to the parent process (one
 * write each), far too slow for millions of values: test with these. */
#define EXPECT(cond, ...)                            \
	do {                                         \
		if (!(cond))                         \
			ck_abort_msg(__VA_ARGS__);   \
	} while (0)
#define EXPECT_TRUE(cond) EXPECT(cond, "%s:%d: %s", __FILE__, __LINE__, #cond)

#define MAX_CODECS 16

struct codec_entry {
	char path[PATH_MAX];
	char name[64];
};

static struct codec_entry codecs[MAX_CODECS];
static int ncodecs;

/* Round-trip tolerance: max |decode(encode(x)) - x| / (max(x) - min(x)). */
struct codec_tolerance {
	const char *name;
	double rel; /* < 0: must equal the fp16 rounding of x exactly */
};

/* fp8_e4m3_rows (fgcore/f8.h): a value x of a row with amax A becomes
 * t = x * 448 / A (|t| <= 448 up to fp32 rounding), coded as the E4M3 value
 * nearest t: at most 16 away in the top binade [256, 448] (steps of 32), less
 * below, 2^-10 among the subnormals.  Decoded with scale A / 448, that is
 * |y - x| <= 16 * A / 448 = A / 28, plus what the four fp32 roundings (scale,
 * inv, x * inv, code * scale) add: about 4 * 2^-24 of |x| <= A, which 2^-21
 * of A covers.  Every tensor here holds values of both signs (uniform in
 * [-2, 2] plus up to 0.6), so A <= max |x| <= max - min: the error is at most
 * 1/28 of the range (near it only where max - min is close to max |x|; here
 * A is about 2.6 of a range of about 4.6, so about 0.02). */
static const struct codec_tolerance tolerances[] = {
	{ "fp16", -1 },
	{ "fp8_e4m3_rows", 1.0 / 28 + 0x1p-21 },
	{ NULL, 0.5 }, /* default: a sanity bound; codecs add their own entry */
};

/* ---- helpers ------------------------------------------------------------ */

static float rnd_uniform(float lo, float hi)
{
	return lo + (hi - lo) * (float)((rnd() >> 40) * (1.0 / 16777216.0));
}

static int is_half_nan(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

/* The naive reference: round |f| to a multiple of the binary16 quantum of its
 * binade with rint (ties to even in the default rounding mode), in double. */
static uint16_t ref_float_to_half(float f)
{
	uint16_t sign = signbit(f) ? 0x8000u : 0;
	double a = fabs((double)f), q, r, v;
	int e;

	if (isnan(f))
		return 0x7e00u | sign;
	if (isinf(a))
		return sign | 0x7c00u;
	if (a == 0)
		return sign;
	frexp(a, &e);         /* a = m * 2^e, m in [0.5, 1) */
	e -= 1;               /* a = 1.x * 2^e */
	q = ldexp(1.0, e < -14 ? -24 : e - 10);
	r = rint(a / q);      /* a / q is exact: q is a power of two */
	v = r * q;
	if (v >= 65536.0)
		return sign | 0x7c00u;
	if (v < ldexp(1.0, -14))
		return sign | (uint16_t)r; /* subnormal (r == 1024 is the smallest normal) */
	frexp(v, &e);
	e -= 1;
	return sign | (uint16_t)((e + 15) << 10) |
	       (uint16_t)(ldexp(v, -e) * 1024.0 - 1024.0);
}

static int find_codec(const char *name)
{
	for (int i = 0; i < ncodecs; i++)
		if (strcmp(codecs[i].name, name) == 0)
			return i;
	return -1;
}

static void open_codec(int i, struct fg_codec *c)
{
	struct fg_plugin_handle ph;
	int rc;

	rc = fg_plugin_open_file(codecs[i].path, FG_PLUGIN_CODEC, NULL, &ph);
	EXPECT(rc == 0, "%s: %s", codecs[i].path, fg_last_error());
	ck_assert_int_gt(fg_plugin_probe(&ph), 0);
	rc = fg_codec_open(c, &ph);
	EXPECT(rc == 0, "%s", fg_last_error());
}

static void open_fp16(struct fg_codec *c)
{
	int i = find_codec("fp16");

	EXPECT(i >= 0, "codec plugin fp16 not found in FGCORE_PLUGIN_PATH");
	open_codec(i, c);
}

static struct fg_codec_shape shape1(uint64_t n)
{
	struct fg_codec_shape s = { .rows = 1, .cols = n, .group_dim = 1 };

	return s;
}

/* Encode n floats with the codec in slices of odd lengths and offsets, so the
 * vector body and its scalar tail both see every kind of value. */
static void encode_sliced(const struct fg_codec *c, const float *src, uint16_t *dst, size_t n)
{
	size_t off = 0, len = 1;

	while (off < n) {
		struct fg_codec_shape s;

		if (len > n - off)
			len = n - off;
		s = shape1(len);
		EXPECT(fg_codec_encode_f32(c, &s, src + off, dst + off) == 0, "%s",
		       fg_last_error());
		off += len;
		len = len % 37 + 1;
	}
}

/* ---- fp16 --------------------------------------------------------------- */

START_TEST(test_fp16_present)
{
	EXPECT(find_codec("fp16") >= 0,
		      "the reference codec fp16 is missing from FGCORE_PLUGIN_PATH");
}
END_TEST

START_TEST(test_fp16_decode_all_patterns)
{
	struct fg_codec c;
	struct fg_codec_shape s = { .rows = 256, .cols = 256, .group_dim = 0 };
	uint16_t *h = malloc(65536 * sizeof(*h)), *back = malloc(65536 * sizeof(*back));
	float *f = malloc(65536 * sizeof(*f));

	EXPECT_TRUE(h && back && f);
	open_fp16(&c);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	ck_assert_int_eq(fg_codec_decode_f32(&c, &s, h, f), 0);
	for (uint32_t i = 0; i < 65536; i++) {
		float ref = fg_half_to_float((uint16_t)i);

		if (is_half_nan((uint16_t)i)) {
			EXPECT(isnan(f[i]), "0x%04x decodes to %a, expected a NaN", i,
				      (double)f[i]);
			continue;
		}
		EXPECT(fg_float_to_bits(f[i]) == fg_float_to_bits(ref),
			      "0x%04x decodes to %a, half.h gives %a", i, (double)f[i],
			      (double)ref);
		/* Independent check of the value: sign * mantissa * 2^exponent. */
		if ((i & 0x7c00u) != 0x7c00u) {
			int e = (int)((i >> 10) & 0x1f);
			double m = (double)(i & 0x3ff), v;

			v = e ? ldexp(1024.0 + m, e - 25) : ldexp(m, -24);
			if (i & 0x8000u)
				v = -v;
			EXPECT((double)f[i] == v && !!signbit(f[i]) == !!(i & 0x8000u),
				      "0x%04x decodes to %a, expected %a", i, (double)f[i], v);
		} else {
			EXPECT_TRUE(isinf(f[i]) && !!signbit(f[i]) == !!(i & 0x8000u));
		}
	}
	/* And back: every non-NaN pattern is a fixed point; NaNs stay NaNs. */
	ck_assert_int_eq(fg_codec_encode_f32(&c, &s, f, back), 0);
	for (uint32_t i = 0; i < 65536; i++) {
		if (is_half_nan((uint16_t)i))
			EXPECT(is_half_nan(back[i]), "NaN 0x%04x encodes to 0x%04x", i,
				      back[i]);
		else
			EXPECT(back[i] == i, "0x%04x round-trips to 0x%04x", i, back[i]);
	}
	/* The same through odd slices (vector tails). */
	memset(back, 0, 65536 * sizeof(*back));
	encode_sliced(&c, f, back, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		if (!is_half_nan((uint16_t)i))
			EXPECT(back[i] == i, "0x%04x round-trips to 0x%04x (sliced)", i,
				      back[i]);
	fg_codec_close(&c);
	free(h);
	free(back);
	free(f);
}
END_TEST

/* Compare the codec's encoding of n floats with half.h and the naive reference. */
static void check_encode(const struct fg_codec *c, const float *f, size_t n, const char *what)
{
	uint16_t *h = malloc(n * sizeof(*h));
	struct fg_codec_shape s = shape1(n);

	EXPECT_TRUE(h);
	ck_assert_int_eq(fg_codec_encode_f32(c, &s, f, h), 0);
	for (size_t i = 0; i < n; i++) {
		uint16_t port = fg_float_to_half(f[i]), ref = ref_float_to_half(f[i]);

		if (isnan(f[i])) {
			EXPECT(is_half_nan(h[i]) && is_half_nan(port),
				      "%s: NaN 0x%08x encodes to 0x%04x (half.h 0x%04x)", what,
				      fg_float_to_bits(f[i]), h[i], port);
			continue;
		}
		EXPECT(port == ref, "%s: half.h gives 0x%04x for %a (0x%08x), the "
			      "reference 0x%04x", what, port, (double)f[i],
			      fg_float_to_bits(f[i]), ref);
		EXPECT(h[i] == port, "%s: codec gives 0x%04x for %a (0x%08x), half.h "
			      "0x%04x", what, h[i], (double)f[i], fg_float_to_bits(f[i]), port);
	}
	/* Sliced encoding must agree with the one-shot encoding. */
	{
		uint16_t *h2 = malloc(n * sizeof(*h2));

		EXPECT_TRUE(h2);
		encode_sliced(c, f, h2, n);
		for (size_t i = 0; i < n; i++)
			if (!isnan(f[i]))
				EXPECT(h2[i] == h[i], "%s: sliced 0x%04x vs 0x%04x at %zu",
					      what, h2[i], h[i], i);
		free(h2);
	}
	free(h);
}

START_TEST(test_fp16_encode_random_bits)
{
	struct fg_codec c;
	size_t n = 1 << 20;
	float *f = malloc(n * sizeof(*f));

	EXPECT_TRUE(f);
	open_fp16(&c);
	for (size_t i = 0; i < n; i++)
		f[i] = fg_bits_to_float((uint32_t)rnd());
	check_encode(&c, f, n, "random bits");
	fg_codec_close(&c);
	free(f);
}
END_TEST

START_TEST(test_fp16_encode_midpoints)
{
	struct fg_codec c;
	size_t n = 0, cap = 65536 * 6;
	float *f = malloc(cap * sizeof(*f));

	EXPECT_TRUE(f);
	open_fp16(&c);
	/* For every finite half h: the midpoint to the next half up, and the
	 * floats one ulp either side of it. */
	for (uint32_t i = 0; i < 65536; i++) {
		uint16_t h = (uint16_t)i;
		double a, b, mid;
		float m;

		if ((h & 0x7c00u) == 0x7c00u || (h & 0x7fffu) == 0x7bffu)
			continue;
		a = fg_half_to_float(h);
		b = fg_half_to_float((uint16_t)(h + 1)); /* next away from zero */
		mid = (a + b) / 2;          /* exact in double, exact in float */
		m = (float)mid;
		EXPECT_TRUE(m == mid);
		f[n++] = m;
		f[n++] = nextafterf(m, INFINITY);
		f[n++] = nextafterf(m, -INFINITY);
	}
	/* The overflow boundary: 65504 (max), 65520 (midpoint to 2^16: rounds up). */
	f[n++] = 65504.0f;
	f[n++] = 65519.998f;
	f[n++] = 65520.0f;
	f[n++] = -65520.0f;
	f[n++] = nextafterf(65520.0f, 0);
	f[n++] = 65536.0f;
	f[n++] = 1e10f;
	f[n++] = -3.4e38f;
	f[n++] = INFINITY;
	f[n++] = -INFINITY;
	/* Below the smallest subnormal: 2^-25 ties to zero, just above rounds up. */
	f[n++] = 0x1p-25f;
	f[n++] = nextafterf(0x1p-25f, 1);
	f[n++] = -0x1p-25f;
	f[n++] = 0x1p-26f;
	f[n++] = 0x1.8p-25f;
	f[n++] = 0x1p-149f;
	f[n++] = -0.0f;
	f[n++] = 0.0f;
	f[n++] = 0x1.ffcp-15f; /* between the largest subnormal and 2^-14: ties to 0x0400 */
	EXPECT_TRUE(n <= cap);
	check_encode(&c, f, n, "midpoints");
	fg_codec_close(&c);
	free(f);
}
END_TEST

START_TEST(test_fp16_encode_ranges)
{
	struct fg_codec c;
	size_t n = 1 << 18, k = 0;
	float *f = malloc(4 * n * sizeof(*f));

	EXPECT_TRUE(f);
	open_fp16(&c);
	for (size_t i = 0; i < n; i++) {
		f[k++] = rnd_uniform(-0x1p-14f, 0x1p-14f);   /* subnormal halves */
		f[k++] = rnd_uniform(-0x1p-23f, 0x1p-23f);   /* around the smallest ones */
		f[k++] = rnd_uniform(60000.0f, 70000.0f) * ((rnd() & 1) ? 1 : -1); /* overflow */
		f[k++] = rnd_uniform(-8.0f, 8.0f);            /* the usual weights */
	}
	check_encode(&c, f, k, "ranges");
	fg_codec_close(&c);
	free(f);
}
END_TEST

/* A stride through all 2^32 float bit patterns (every exponent, both signs,
 * NaN payloads), in chunks; loop iteration _i covers a quarter of them. */
START_TEST(test_fp16_encode_stride)
{
	struct fg_codec c;
	const uint64_t stride = 257, chunk = 1 << 16;
	float *f = malloc(chunk * sizeof(*f));
	uint64_t u = (uint64_t)_i << 30, end = u + (1ull << 30);

	EXPECT_TRUE(f);
	open_fp16(&c);
	while (u < end) {
		size_t n = 0;

		for (; n < chunk && u < end; u += stride)
			f[n++] = fg_bits_to_float((uint32_t)u);
		check_encode(&c, f, n, "stride");
	}
	fg_codec_close(&c);
	free(f);
}
END_TEST

START_TEST(test_fp16_tails)
{
	struct fg_codec c;
	float f[64], d[64];
	uint16_t h[66], h2[64];

	open_fp16(&c);
	for (size_t n = 0; n <= 41; n++) {
		struct fg_codec_shape s = shape1(n);

		for (size_t i = 0; i < 64; i++)
			f[i] = rnd_uniform(-70000.0f, 70000.0f) * (float)ldexp(1.0, -(int)(rnd() % 40));
		for (size_t i = 0; i < 66; i++)
			h[i] = 0xabcd;
		/* Start at an odd element too: unaligned vectors. */
		ck_assert_int_eq(fg_codec_encode_f32(&c, &s, f + (n & 1), h + 1), 0);
		ck_assert_uint_eq(h[0], 0xabcd);
		ck_assert_uint_eq(h[n + 1], 0xabcd); /* nothing written past the end */
		for (size_t i = 0; i < n; i++)
			ck_assert_uint_eq(h[i + 1], fg_float_to_half(f[i + (n & 1)]));
		for (size_t i = 0; i < 64; i++)
			d[i] = 12345.0f;
		ck_assert_int_eq(fg_codec_decode_f32(&c, &s, h + 1, d), 0);
		for (size_t i = 0; i < n; i++)
			EXPECT_TRUE(fg_float_to_bits(d[i]) == fg_float_to_bits(fg_half_to_float(h[i + 1])));
		for (size_t i = n; i < 64; i++)
			EXPECT_TRUE(d[i] == 12345.0f);
		/* fp16 in / out: a copy. */
		memset(h2, 0, sizeof(h2));
		ck_assert_int_eq(fg_codec_encode_f16(&c, &s, h + 1, h2), 0);
		EXPECT_TRUE(memcmp(h2, h + 1, n * 2) == 0);
		memset(h2, 0, sizeof(h2));
		ck_assert_int_eq(fg_codec_decode_f16(&c, &s, h + 1, h2), 0);
		EXPECT_TRUE(memcmp(h2, h + 1, n * 2) == 0);
	}
	fg_codec_close(&c);
}
END_TEST

START_TEST(test_fp16_sizes)
{
	struct fg_codec c;
	struct fg_codec_shape s = { .rows = 3, .cols = 5, .group_dim = 0 };
	float f[1] = { 1 };
	uint16_t h[1];

	open_fp16(&c);
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &s), 30);
	s.group_dim = 1;
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &s), 30);
	s.rows = 0;
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &s), 0);
	s.rows = 50272;
	s.cols = 768;
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &s), 50272ull * 768 * 2);
	/* Too large to address: refused, not wrapped around. */
	s.rows = 1ull << 40;
	s.cols = 1ull << 40;
	ck_assert_uint_eq(fg_codec_encoded_size(&c, &s), 0);
	fg_clear_error();
	ck_assert_int_eq(fg_codec_encode_f32(&c, &s, f, h), -EINVAL);
	EXPECT_TRUE(strstr(fg_last_error(), "fp16") != NULL);
	ck_assert_int_eq(fg_codec_decode_f32(&c, &s, h, f), -EINVAL);
	fg_codec_close(&c);
}
END_TEST

/* ---- every codec: the generic round trip ------------------------------------ */

static double tolerance_of(const char *name)
{
	const struct codec_tolerance *t = tolerances;

	while (t->name && strcmp(t->name, name) != 0)
		t++;
	return t->rel;
}

START_TEST(test_round_trip)
{
	static const struct fg_codec_shape shapes[] = {
		{ 64, 64, 0 }, { 64, 64, 1 }, { 128, 192, 0 }, { 192, 128, 1 },
		{ 256, 64, 0 }, { 1, 64, 1 }, { 64, 1, 0 }, { 3, 7, 1 }, { 70, 130, 0 },
	};
	struct fg_codec c;
	double tol = tolerance_of(codecs[_i].name), worst = 0;
	int done = 0;

	open_codec(_i, &c);
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const struct fg_codec_shape *s = &shapes[si];
		size_t n = (size_t)(s->rows * s->cols);
		uint64_t bytes = fg_codec_encoded_size(&c, s);
		float *x = malloc(n * sizeof(*x)), *y = malloc(n * sizeof(*y));
		uint16_t *h = malloc(n * sizeof(*h)), *h2 = malloc(n * sizeof(*h2));
		unsigned char *e, *e2;
		float lo = INFINITY, hi = -INFINITY;
		double err = 0;
		int rc;

		EXPECT_TRUE(x && y && h && h2);
		if (bytes == 0) {
			printf("codec %s: shape [%llu, %llu] group_dim %d not supported\n",
			       codecs[_i].name, (unsigned long long)s->rows,
			       (unsigned long long)s->cols, s->group_dim);
			free(x), free(y), free(h), free(h2);
			continue;
		}
		e = malloc(bytes);
		e2 = malloc(bytes);
		EXPECT_TRUE(e && e2);
		for (size_t i = 0; i < n; i++) {
			/* fp16-representable values: codecs store fp16 tensors */
			x[i] = fg_half_to_float(fg_float_to_half(rnd_uniform(-2.0f, 2.0f) +
								 (float)(i % 7) * 0.1f));
			lo = fminf(lo, x[i]);
			hi = fmaxf(hi, x[i]);
		}
		rc = fg_codec_encode_f32(&c, s, x, e);
		if (rc == -EINVAL && tol >= 0) {
			printf("codec %s: shape [%llu, %llu] group_dim %d refused: %s\n",
			       codecs[_i].name, (unsigned long long)s->rows,
			       (unsigned long long)s->cols, s->group_dim, fg_last_error());
			free(x), free(y), free(h), free(h2), free(e), free(e2);
			continue;
		}
		EXPECT(rc == 0, "%s: encode: %s", codecs[_i].name, fg_last_error());
		/* Deterministic: encoding twice gives the same bytes. */
		ck_assert_int_eq(fg_codec_encode_f32(&c, s, x, e2), 0);
		EXPECT(memcmp(e, e2, bytes) == 0, "%s: encoding is not deterministic",
			      codecs[_i].name);
		ck_assert_int_eq(fg_codec_decode_f32(&c, s, e, y), 0);
		for (size_t i = 0; i < n; i++) {
			EXPECT(isfinite(y[i]), "%s: decoded value %zu is %f",
				      codecs[_i].name, i, (double)y[i]);
			if (tol < 0)
				EXPECT(y[i] == x[i], "%s: %a decodes as %a", codecs[_i].name,
					      (double)x[i], (double)y[i]);
			err = fmax(err, fabs((double)y[i] - x[i]));
		}
		err /= (hi > lo ? hi - lo : 1.0);
		worst = fmax(worst, err);
		EXPECT(tol < 0 || err <= tol, "%s: round-trip error %.3g of the range > %.3g",
			      codecs[_i].name, err, tol);
		/* fp16 in and out (the plugin's hooks or the core's default through
		 * float) agree with the float path: exactly for fp16, within the
		 * tolerance (plus one fp16 rounding) for the others. */
		for (size_t i = 0; i < n; i++)
			h[i] = fg_float_to_half(x[i]);
		ck_assert_int_eq(fg_codec_encode_f16(&c, s, h, e2), 0);
		if (tol < 0)
			EXPECT(memcmp(e, e2, bytes) == 0, "%s: encode_f16 differs from "
				      "encode_f32", codecs[_i].name);
		ck_assert_int_eq(fg_codec_decode_f16(&c, s, e2, h2), 0);
		for (size_t i = 0; i < n; i++) {
			double v = fg_half_to_float(h2[i]);

			if (tol < 0)
				EXPECT(h2[i] == h[i], "%s: fp16 0x%04x comes back as 0x%04x",
					      codecs[_i].name, h[i], h2[i]);
			else
				EXPECT(fabs(v - x[i]) <= tol * (hi - lo) + fabs(x[i]) / 1024,
					      "%s: fp16 round trip of %a gives %a", codecs[_i].name,
					      (double)x[i], v);
		}
		done++;
		free(x), free(y), free(h), free(h2), free(e), free(e2);
	}
	EXPECT(done > 0, "%s: no shape could be encoded", codecs[_i].name);
	if (tol < 0)
		printf("codec %s: worst round-trip error %.3g of the range (tolerance exact)\n",
		       codecs[_i].name, worst);
	else
		printf("codec %s: worst round-trip error %.3g of the range (tolerance %.3g)\n",
		       codecs[_i].name, worst, tol);
	fg_codec_close(&c);
}
END_TEST

/* ---- suite ---------------------------------------------------------------- */

static int collect(const char *path, void *user)
{
	struct fg_plugin_handle ph;

	(void)user;
	if (fg_plugin_open_file(path, 0, NULL, &ph) != 0) {
		printf("skipping %s: %s\n", path, fg_last_error());
		return 0;
	}
	if (ph.plugin->kind == FG_PLUGIN_CODEC && ncodecs < MAX_CODECS) {
		snprintf(codecs[ncodecs].path, sizeof(codecs[ncodecs].path), "%s", path);
		snprintf(codecs[ncodecs].name, sizeof(codecs[ncodecs].name), "%s",
			 ph.plugin->name);
		ncodecs++;
	}
	fg_plugin_close(&ph);
	return 0;
}

static Suite *codec_conformance_suite(void)
{
	Suite *s = suite_create("codec_conformance");
	TCase *tc = tcase_create("fp16");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_fp16_present);
	tcase_add_test(tc, test_fp16_decode_all_patterns);
	tcase_add_test(tc, test_fp16_encode_random_bits);
	tcase_add_test(tc, test_fp16_encode_midpoints);
	tcase_add_test(tc, test_fp16_encode_ranges);
	tcase_add_loop_test(tc, test_fp16_encode_stride, 0, 4);
	tcase_add_test(tc, test_fp16_tails);
	tcase_add_test(tc, test_fp16_sizes);
	suite_add_tcase(s, tc);

	tc = tcase_create("round_trip");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_round_trip, 0, ncodecs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	if (fg_plugin_foreach(collect, NULL) < 0) {
		fprintf(stderr, "cannot list plugins: %s\n", fg_last_error());
		return 1;
	}
	printf("codecs found:");
	for (int i = 0; i < ncodecs; i++)
		printf(" %s (%s)", codecs[i].name, codecs[i].path);
	printf("\n");
	sr = srunner_create(codec_conformance_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
