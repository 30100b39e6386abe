/* plugins/codec/int4_group64.c - the "int4_group64" codec: FlexGen's 4-bit
 * asymmetric group quantization, the byte layout of fgcore/q4.h.
 *
 * Encoder rules (q4.h states them and holds them: fg_q4_param_of, fg_q4_code,
 * fg_q4_value; doc/INT4.md derives the error bound):
 *  - a group's min and max are taken over its own values only (a last partial
 *    group has no padding values), ignoring NaN; they are clamped to the fp16
 *    range, so +-inf and finite values beyond +-65504 saturate there;
 *  - mn is stored as the largest fp16 <= min and scale as the smallest fp16
 *    with mn + 15 * scale >= max (both compared exactly), and q is computed
 *    against these STORED values: the decoder multiplies by exactly the scale
 *    the encoder assumed, and [mn, mn + 15 * scale] covers every value, so no
 *    value is clipped and |decode - x| <= scale / 2 up to fp32 rounding;
 *  - q = (x - mn) * (1 / scale) in fp32, clamped to 0..15 (a NaN to 0),
 *    rounded to nearest, ties to even; q = 0 when scale is 0.
 *
 * The hooks are pure functions of their arguments (no global state) and use
 * small stack tiles only, so they are safe to call from many threads at once.
 * Encoding a large tensor (2^21 values or more) spreads it over one thread per
 * CPU itself, with the same bytes as one thread (see int4_encode_run); codec
 * hooks take no options, so the count follows the process's CPU affinity.
 * A bad shape (group_dim not 0 or 1, sizes that overflow) gives -EINVAL, and
 * encoded_size 0; codec hooks get no fg_host, so the core's wrapper writes the
 * error line, naming the plugin, the shape and its group_dim.
 */
#define _GNU_SOURCE /* fgcore/fanout.h: sched_getaffinity */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/fanout.h>
#include <fgcore/fp16_simd.h>
#include <fgcore/half.h>
#include <fgcore/plugin.h>
#include <fgcore/q4.h>

#if defined(__SSE2__)
#define INT4_SSE2 1
#include <emmintrin.h>
#else
#define INT4_SSE2 0
#endif

#define INT4_G FG_Q4_GROUP
#define INT4_TILE 256 /* columns per tile when grouping along dimension 0 */
#define INT4_PER_THREAD ((size_t)1 << 20) /* values: ~2 ms of work, far above a thread's start */

/* The shape, checked, in the units the loops use. */
struct int4_dims {
	size_t rows, cols;
	size_t gcols;   /* columns of the group grid */
	size_t data;    /* bytes of the packed q values (params follow) */
	size_t total;   /* fg_q4_bytes() */
	int group_dim;
};

/* Values come from (or go to) fp32 or fp16 arrays; exactly one is set. */
struct int4_io {
	const float *f32_in;
	const uint16_t *f16_in;
	float *f32_out;
	uint16_t *f16_out;
};

static int int4_dims_of(const struct fg_codec_shape *s, struct int4_dims *d)
{
	uint64_t n, data, groups;

	if (!s || (s->group_dim != 0 && s->group_dim != 1))
		return -EINVAL;
	/* The fp32 side must be addressable: rows * cols * 4 bytes fits size_t. */
	if (s->rows && s->cols > (SIZE_MAX / sizeof(float)) / s->rows)
		return -EINVAL;
	n = s->rows * s->cols;
	d->rows = (size_t)s->rows;
	d->cols = (size_t)s->cols;
	d->group_dim = s->group_dim;
	if (n == 0) {
		/* Empty: no data, no groups (and rows + 63 must not wrap below). */
		d->gcols = 0;
		d->data = d->total = 0;
		return 0;
	}
	data = fg_q4_data_bytes(s->rows, s->cols);
	d->gcols = (size_t)fg_q4_grid_cols(s->cols, s->group_dim);
	groups = fg_q4_grid_rows(s->rows, s->group_dim) * d->gcols; /* <= n */
	if (groups > (SIZE_MAX - data) / 4)
		return -EINVAL;
	d->data = (size_t)data;
	d->total = (size_t)(data + 4 * groups);
	return 0;
}

static uint64_t int4_encoded_size(const struct fg_codec_shape *shape)
{
	struct int4_dims d;

	/* 0 tells the core the shape cannot be encoded (bad group_dim, overflow);
	 * an empty tensor also takes 0 bytes. */
	if (int4_dims_of(shape, &d) < 0)
		return 0;
	return d.total;
}

/* ---- kernels: SSE2 on x86-64 (always present there), plain C elsewhere ------
 * The plain C is q4.h's fg_q4_code / fg_q4_value; the SSE2 loops are the same
 * fp32 operations in the same order (minps/maxps/cvtps2dq mean exactly q4.h's
 * C expressions), so both give the same bits. */

#if INT4_SSE2
static inline __m128 int4_t4(__m128 x, __m128 m, __m128 inv)
{
	__m128 t = _mm_mul_ps(_mm_sub_ps(x, m), inv);

	t = _mm_max_ps(t, _mm_setzero_ps()); /* t > 0 ? t : 0 */
	return _mm_min_ps(t, _mm_set1_ps(15.0f));
}

static inline __m128i int4_q16(__m128 t0, __m128 t1, __m128 t2, __m128 t3)
{
	__m128i a = _mm_packs_epi32(_mm_cvtps_epi32(t0), _mm_cvtps_epi32(t1));
	__m128i b = _mm_packs_epi32(_mm_cvtps_epi32(t2), _mm_cvtps_epi32(t3));

	return _mm_packus_epi16(a, b);
}

/* 16 q bytes as 16 floats. */
static inline void int4_widen16(__m128i q, __m128 f[4])
{
	__m128i z = _mm_setzero_si128();
	__m128i a = _mm_unpacklo_epi8(q, z), b = _mm_unpackhi_epi8(q, z);

	f[0] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(a, z));
	f[1] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(a, z));
	f[2] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(b, z));
	f[3] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(b, z));
}
#endif

/* Minimum and maximum of x[0..w), NaN skipped (a NaN x never wins x < lo). */
static void int4_range(const float *x, size_t w, float *lo, float *hi)
{
	float l = INFINITY, h = -INFINITY;
	size_t j = 0;

#if INT4_SSE2
	if (w >= 4) {
		__m128 vl = _mm_set1_ps(INFINITY), vh = _mm_set1_ps(-INFINITY);
		float a[4], b[4];

		for (; j + 4 <= w; j += 4) {
			__m128 v = _mm_loadu_ps(x + j);

			vl = _mm_min_ps(v, vl); /* v < vl ? v : vl */
			vh = _mm_max_ps(v, vh);
		}
		_mm_storeu_ps(a, vl);
		_mm_storeu_ps(b, vh);
		for (int k = 0; k < 4; k++) {
			l = a[k] < l ? a[k] : l;
			h = b[k] > h ? b[k] : h;
		}
	}
#endif
	for (; j < w; j++) {
		l = x[j] < l ? x[j] : l;
		h = x[j] > h ? x[j] : h;
	}
	*lo = l;
	*hi = h;
}

/* lo[j], hi[j] take in x[j]: the column ranges of a tile, row by row. */
static void int4_range_cols(const float *x, size_t w, float *lo, float *hi)
{
	size_t j = 0;

#if INT4_SSE2
	for (; j + 4 <= w; j += 4) {
		__m128 v = _mm_loadu_ps(x + j);

		_mm_storeu_ps(lo + j, _mm_min_ps(v, _mm_loadu_ps(lo + j)));
		_mm_storeu_ps(hi + j, _mm_max_ps(v, _mm_loadu_ps(hi + j)));
	}
#endif
	for (; j < w; j++) {
		lo[j] = x[j] < lo[j] ? x[j] : lo[j];
		hi[j] = x[j] > hi[j] ? x[j] : hi[j];
	}
}

/* q[j] of x[j] for one group's (m, inv). */
static void int4_quant(const float *x, size_t w, float m, float inv, uint8_t *q)
{
	size_t j = 0;

#if INT4_SSE2
	__m128 vm = _mm_set1_ps(m), vi = _mm_set1_ps(inv);

	for (; j + 16 <= w; j += 16)
		_mm_storeu_si128((__m128i *)(q + j),
				 int4_q16(int4_t4(_mm_loadu_ps(x + j), vm, vi),
					  int4_t4(_mm_loadu_ps(x + j + 4), vm, vi),
					  int4_t4(_mm_loadu_ps(x + j + 8), vm, vi),
					  int4_t4(_mm_loadu_ps(x + j + 12), vm, vi)));
#endif
	for (; j < w; j++)
		q[j] = (uint8_t)fg_q4_code(x[j], m, inv);
}

/* q[j] of x[j] with column j's (m[j], inv[j]). */
static void int4_quant_cols(const float *x, size_t w, const float *m, const float *inv,
			    uint8_t *q)
{
	size_t j = 0;

#if INT4_SSE2
	for (; j + 16 <= w; j += 16) {
		__m128 t[4];

		for (int k = 0; k < 4; k++)
			t[k] = int4_t4(_mm_loadu_ps(x + j + 4 * k), _mm_loadu_ps(m + j + 4 * k),
				       _mm_loadu_ps(inv + j + 4 * k));
		_mm_storeu_si128((__m128i *)(q + j), int4_q16(t[0], t[1], t[2], t[3]));
	}
#endif
	for (; j < w; j++)
		q[j] = (uint8_t)fg_q4_code(x[j], m[j], inv[j]);
}

/* y[j] = q[j] * s + m for one group. */
static void int4_dequant(const uint8_t *q, size_t w, float s, float m, float *y)
{
	size_t j = 0;

#if INT4_SSE2
	__m128 vs = _mm_set1_ps(s), vm = _mm_set1_ps(m), f[4];

	for (; j + 16 <= w; j += 16) {
		int4_widen16(_mm_loadu_si128((const __m128i *)(q + j)), f);
		for (int k = 0; k < 4; k++)
			_mm_storeu_ps(y + j + 4 * k, _mm_add_ps(_mm_mul_ps(f[k], vs), vm));
	}
#endif
	for (; j < w; j++)
		y[j] = fg_q4_value(q[j], s, m);
}

/* y[j] = q[j] * s[j] + m[j]. */
static void int4_dequant_cols(const uint8_t *q, size_t w, const float *s, const float *m,
			      float *y)
{
	size_t j = 0;

#if INT4_SSE2
	__m128 f[4];

	for (; j + 16 <= w; j += 16) {
		int4_widen16(_mm_loadu_si128((const __m128i *)(q + j)), f);
		for (int k = 0; k < 4; k++)
			_mm_storeu_ps(y + j + 4 * k,
				      _mm_add_ps(_mm_mul_ps(f[k], _mm_loadu_ps(s + j + 4 * k)),
						 _mm_loadu_ps(m + j + 4 * k)));
	}
#endif
	for (; j < w; j++)
		y[j] = fg_q4_value(q[j], s[j], m[j]);
}

/* Store q[0..w) as elements e.. of the zeroed data area.  A byte holding the
 * last element of one segment and the first of the next is OR-ed, so segments
 * may be written in any order. */
static void int4_pack(uint8_t *data, size_t e, const uint8_t *q, size_t w)
{
	uint8_t *b = data + e / 2;
	size_t j = 0;

	if (w == 0)
		return;
	if (e & 1) { /* the low nibble of a byte shared with the element before */
		*b++ |= q[0];
		q++;
		w--;
	}
#if INT4_SSE2
	for (; j + 16 <= w; j += 16) {
		/* 16-bit lanes q0 | q1 << 8 become (q0 << 4 | q1) in their low byte */
		__m128i v = _mm_loadu_si128((const __m128i *)(q + j));
		__m128i p = _mm_or_si128(_mm_slli_epi16(v, 4), _mm_srli_epi16(v, 8));

		p = _mm_and_si128(p, _mm_set1_epi16(0xff));
		_mm_storel_epi64((__m128i *)(b + j / 2), _mm_packus_epi16(p, p));
	}
#endif
	for (; j + 1 < w; j += 2)
		b[j / 2] = (uint8_t)(q[j] << 4 | q[j + 1]);
	if (j < w)
		b[j / 2] |= (uint8_t)(q[j] << 4);
}

static void int4_unpack(const uint8_t *data, size_t e, uint8_t *q, size_t w)
{
	const uint8_t *b = data + e / 2;
	size_t j = 0;

	if (w == 0)
		return;
	if (e & 1) {
		*q++ = *b++ & 15u;
		w--;
	}
#if INT4_SSE2
	for (; j + 32 <= w; j += 32) {
		__m128i v = _mm_loadu_si128((const __m128i *)(b + j / 2));
		__m128i lo = _mm_and_si128(v, _mm_set1_epi8(15));
		__m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15));

		_mm_storeu_si128((__m128i *)(q + j), _mm_unpacklo_epi8(hi, lo));
		_mm_storeu_si128((__m128i *)(q + j + 16), _mm_unpackhi_epi8(hi, lo));
	}
#endif
	for (; j + 1 < w; j += 2) {
		q[j] = b[j / 2] >> 4;
		q[j + 1] = b[j / 2] & 15u;
	}
	if (j < w)
		q[j] = b[j / 2] >> 4;
}

/* ---- fp32 / fp16 sides ------------------------------------------------------ */

/* w values of the tensor from element e as floats: in place for fp32, else
 * widened into buf (w <= INT4_TILE). */
static const float *int4_load(const struct int4_io *io, size_t e, size_t w, float *buf)
{
	if (io->f32_in)
		return io->f32_in + e;
	fg_fp16_simd_to_f32(buf, io->f16_in + e, w);
	return buf;
}

/* Where w decoded values from element e go: straight into the fp32 output,
 * or into buf until int4_flush narrows them to fp16. */
static float *int4_out(const struct int4_io *io, size_t e, float *buf)
{
	return io->f32_out ? io->f32_out + e : buf;
}

static void int4_flush(const struct int4_io *io, size_t e, size_t w, const float *buf)
{
	if (io->f16_out)
		fg_fp16_simd_from_f32(io->f16_out + e, buf, w);
}

/* ---- encode ------------------------------------------------------------------ */

/* Groups [g0, g1) of 64 values along a row (row-major order of the grid). */
static void int4_encode_dim1(const struct int4_dims *d, const struct int4_io *io, uint8_t *dst,
			     size_t g0, size_t g1)
{
	uint8_t *params = dst + d->data;
	float buf[INT4_G];
	uint8_t q[INT4_G];
	struct fg_q4_param p;
	size_t r = g0 / d->gcols, gc = g0 % d->gcols;

	for (size_t g = g0; g < g1; g++) {
		size_t c0 = gc * INT4_G, e = r * d->cols + c0;
		size_t w = d->cols - c0 < INT4_G ? d->cols - c0 : INT4_G;
		const float *x = int4_load(io, e, w, buf);
		float lo, hi;

		int4_range(x, w, &lo, &hi);
		p = fg_q4_param_of(lo, hi);
		fg_q4_param_store(params, g, &p);
		int4_quant(x, w, p.m, p.inv, q);
		int4_pack(dst, e, q, w);
		if (++gc == d->gcols) {
			gc = 0;
			r++;
		}
	}
}

/* Groups of 64 rows of one column, for the bands of 64 rows [b0, b1), done in
 * tiles of 64 rows x INT4_TILE columns: one pass for the column minima and
 * maxima, one to quantize. */
static void int4_encode_dim0(const struct int4_dims *d, const struct int4_io *io, uint8_t *dst,
			     size_t b0, size_t b1)
{
	uint8_t *params = dst + d->data;
	float buf[INT4_TILE], lo[INT4_TILE], hi[INT4_TILE], m[INT4_TILE], inv[INT4_TILE];
	uint8_t q[INT4_TILE];
	struct fg_q4_param p;
	size_t r1 = b1 * INT4_G < d->rows ? b1 * INT4_G : d->rows;

	for (size_t r0 = b0 * INT4_G; r0 < r1; r0 += INT4_G) {
		size_t rh = d->rows - r0 < INT4_G ? d->rows - r0 : INT4_G;

		for (size_t c0 = 0; c0 < d->cols; c0 += INT4_TILE) {
			size_t w = d->cols - c0 < INT4_TILE ? d->cols - c0 : INT4_TILE;

			for (size_t j = 0; j < w; j++) {
				lo[j] = INFINITY;
				hi[j] = -INFINITY;
			}
			for (size_t r = r0; r < r0 + rh; r++) {
				const float *x = int4_load(io, r * d->cols + c0, w, buf);

				int4_range_cols(x, w, lo, hi);
			}
			for (size_t j = 0; j < w; j++) {
				p = fg_q4_param_of(lo[j], hi[j]);
				fg_q4_param_store(params, (r0 / INT4_G) * d->cols + c0 + j, &p);
				m[j] = p.m;
				inv[j] = p.inv;
			}
			for (size_t r = r0; r < r0 + rh; r++) {
				size_t e = r * d->cols + c0;
				const float *x = int4_load(io, e, w, buf);

				int4_quant_cols(x, w, m, inv, q);
				int4_pack(dst, e, q, w);
			}
		}
	}
}

/* ---- encoding on several threads ---------------------------------------------
 * The work is cut into units, bands of 64 rows (group_dim 0) or groups
 * (group_dim 1), each of which owns its params.  Every cut falls on an even
 * element, so no data byte holds values of two pieces: the threads write
 * disjoint bytes, and each piece zeroes its own bytes first.  The encoding
 * of a unit does not depend on the others, so the bytes are those of one
 * thread for any count. */

struct int4_job {
	const struct int4_dims *d;
	const struct int4_io *io;
	uint8_t *dst;
	size_t u0, u1; /* units [u0, u1) */
};

static size_t int4_units(const struct int4_dims *d)
{
	return d->group_dim == 0 ? (d->rows + INT4_G - 1) / INT4_G : d->rows * d->gcols;
}

/* The first element of unit u (n for the end). */
static size_t int4_unit_elem(const struct int4_dims *d, size_t u)
{
	if (d->group_dim == 0)
		return (u * INT4_G < d->rows ? u * INT4_G : d->rows) * d->cols;
	if (u == d->rows * d->gcols)
		return d->rows * d->cols;
	return (u / d->gcols) * d->cols + (u % d->gcols) * INT4_G;
}

/* A cut at unit u < units, moved forward to the next even element: a band
 * always starts on one (64 * cols); a group does unless its row starts on an
 * odd element (odd cols, odd row), and then the next row does. */
static size_t int4_even_cut(const struct int4_dims *d, size_t u)
{
	if (d->group_dim == 1 && u < int4_units(d) && (int4_unit_elem(d, u) & 1))
		return (u / d->gcols + 1) * d->gcols;
	return u;
}

static void int4_encode_units(const struct int4_job *j)
{
	const struct int4_dims *d = j->d;
	size_t b0 = int4_unit_elem(d, j->u0) / 2;
	size_t b1 = j->u1 == int4_units(d) ? d->data : int4_unit_elem(d, j->u1) / 2;

	memset(j->dst + b0, 0, b1 - b0); /* padding, and the OR-ed shared bytes */
	if (d->group_dim == 1)
		int4_encode_dim1(d, j->io, j->dst, j->u0, j->u1);
	else
		int4_encode_dim0(d, j->io, j->dst, j->u0, j->u1);
}

static void int4_run(void *job)
{
	int4_encode_units(job);
}

/* threads <= 0: one per CPU, each with at least INT4_PER_THREAD values (so a
 * small tensor stays on the calling thread, with no thread started). */
static void int4_encode_run(const struct int4_dims *d, const struct int4_io *io, uint8_t *dst,
			    int threads)
{
	struct int4_job job[FG_FANOUT_MAX];
	size_t units = int4_units(d), cut = 0;
	int t = 0;

	threads = fg_fanout_threads(threads, (uint64_t)(d->rows * d->cols), INT4_PER_THREAD);
	threads = (size_t)threads < units ? threads : (int)units;
	if (threads <= 1) {
		int4_encode_units(&(struct int4_job){ d, io, dst, 0, units });
		return;
	}
	for (int k = 1; k <= threads && cut < units; k++) {
		size_t next = k == threads ? units
			      : units / (size_t)threads * (size_t)k +
					units % (size_t)threads * (size_t)k / (size_t)threads;

		next = int4_even_cut(d, next > cut ? next : cut);
		if (next > cut)
			job[t++] = (struct int4_job){ d, io, dst, cut, next };
		cut = next;
	}
	fg_fanout(int4_run, job, sizeof(job[0]), t);
}

static int int4_encode_threads(const struct fg_codec_shape *shape, const struct int4_io *io,
			       void *dst, int threads)
{
	struct int4_dims d;
	int rc = int4_dims_of(shape, &d);

	if (rc < 0)
		return rc;
	if (d.total == 0)
		return 0;
	if (!dst || (!io->f32_in && !io->f16_in))
		return -EINVAL;
	int4_encode_run(&d, io, dst, threads);
	return 0;
}

static int int4_encode(const struct fg_codec_shape *shape, const struct int4_io *io, void *dst)
{
	return int4_encode_threads(shape, io, dst, 0);
}

static int int4_encode_f32(const struct fg_codec_shape *shape, const float *src, void *dst)
{
	struct int4_io io = { .f32_in = src };

	return int4_encode(shape, &io, dst);
}

static int int4_encode_f16(const struct fg_codec_shape *shape, const uint16_t *src, void *dst)
{
	struct int4_io io = { .f16_in = src };

	return int4_encode(shape, &io, dst);
}

/* ---- decode ------------------------------------------------------------------ */

/* Any bytes decode: a NaN or inf scale or min just yields NaN or inf values. */
static void int4_decode_dim1(const struct int4_dims *d, const uint8_t *src,
			      const struct int4_io *io)
{
	const uint8_t *params = src + d->data;
	float buf[INT4_G], s, m;
	uint8_t q[INT4_G];

	for (size_t r = 0; r < d->rows; r++) {
		for (size_t gc = 0; gc < d->gcols; gc++) {
			size_t c0 = gc * INT4_G, e = r * d->cols + c0;
			size_t w = d->cols - c0 < INT4_G ? d->cols - c0 : INT4_G;
			float *y = int4_out(io, e, buf);

			fg_q4_param_load(params, r * d->gcols + gc, &s, &m);
			int4_unpack(src, e, q, w);
			int4_dequant(q, w, s, m, y);
			int4_flush(io, e, w, y);
		}
	}
}

static void int4_decode_dim0(const struct int4_dims *d, const uint8_t *src,
			      const struct int4_io *io)
{
	const uint8_t *params = src + d->data;
	float buf[INT4_TILE], s[INT4_TILE], m[INT4_TILE];
	uint8_t q[INT4_TILE];

	for (size_t r0 = 0; r0 < d->rows; r0 += INT4_G) {
		size_t rh = d->rows - r0 < INT4_G ? d->rows - r0 : INT4_G;

		for (size_t c0 = 0; c0 < d->cols; c0 += INT4_TILE) {
			size_t w = d->cols - c0 < INT4_TILE ? d->cols - c0 : INT4_TILE;

			for (size_t j = 0; j < w; j++)
				fg_q4_param_load(params, (r0 / INT4_G) * d->cols + c0 + j, &s[j],
						 &m[j]);
			for (size_t r = r0; r < r0 + rh; r++) {
				size_t e = r * d->cols + c0;
				float *y = int4_out(io, e, buf);

				int4_unpack(src, e, q, w);
				int4_dequant_cols(q, w, s, m, y);
				int4_flush(io, e, w, y);
			}
		}
	}
}

static int int4_decode(const struct fg_codec_shape *shape, const void *src,
		       const struct int4_io *io)
{
	struct int4_dims d;
	int rc = int4_dims_of(shape, &d);

	if (rc < 0)
		return rc;
	if (d.total == 0)
		return 0;
	if (!src || (!io->f32_out && !io->f16_out))
		return -EINVAL;
	if (d.group_dim == 1)
		int4_decode_dim1(&d, src, io);
	else
		int4_decode_dim0(&d, src, io);
	return 0;
}

static int int4_decode_f32(const struct fg_codec_shape *shape, const void *src, float *dst)
{
	struct int4_io io = { .f32_out = dst };

	return int4_decode(shape, src, &io);
}

static int int4_decode_f16(const struct fg_codec_shape *shape, const void *src, uint16_t *dst)
{
	struct int4_io io = { .f16_out = dst };

	return int4_decode(shape, src, &io);
}

static const struct fg_codec_ops int4_ops = {
	.encoded_size	= int4_encoded_size,
	.encode_f32	= int4_encode_f32,
	.decode_f32	= int4_decode_f32,
	.encode_f16	= int4_encode_f16,
	.decode_f16	= int4_decode_f16,
};

FG_PLUGIN_EXPORT const struct fg_plugin fg_plugin_entry = {
	.abi_version	= FG_CODEC_ABI_VERSION,
	.kind		= FG_PLUGIN_CODEC,
	.name		= "int4_group64",
	.description	= "4-bit asymmetric groups of 64, fp16 scale and min (FlexGen, fgcore/q4.h)",
	.probe		= NULL,
	.ops		= &int4_ops,
	.options	= NULL,
	.opts_size	= 0,
	.capabilities	= NULL,
};
