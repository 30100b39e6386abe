/* tests/test_compute_conformance.c - every compute plugin in FGCORE_PLUGIN_PATH
 * against naive double-precision references written here.
 *
 * Tolerances (max over all outputs of |got - ref| / (1 + |ref|)):
 *   fp32-activation backends: 1e-4   (fp32 accumulation over k <= 1024 of
 *                                     values in [-1, 1] stays near 1e-6; the
 *                                     margin covers any summation order)
 *   fp16-activation backends: 2e-2   (inputs and outputs rounded to fp16:
 *                                     2^-11 relative each, a few roundings
 *                                     per op, plus fp16 accumulation slack)
 * Rows an op must leave alone (padding columns between cols and ld, cache
 * rows outside the append, attention rows in the left padding and decode
 * rows with every position masked, as the engine gives finished sequences:
 * exact zeros) are checked exactly.
 *
 * Each op runs on random inputs over several shapes (odd sizes, ld > cols,
 * m = 1 decode shapes, k = 0), with every linear variant (bias, ReLU,
 * residual: none / separate / the same buffer as out), attention with pads
 * 0, random, all-but-one and all, batch > 1, heads > 1, cache_stride > len;
 * and the additions of compute ABI 1.1: RMS norm, layer norm without beta,
 * embed without a position table, SiLU and the `mul` gate, rope (a scaled
 * inv_freq table, attn_factor, partial rotary), grouped-query attention in
 * prefill and decode (fp32, fp16 and 4-bit caches); and the logprob op of
 * ABI 1.6 against tests/logprob_ref.h (ties, +-inf, NaN, rows with no
 * distribution, Llama 3's vocabulary, k up to 20 and above the vocabulary);
 * and the generic tier of ABI 1.10 (mixture-of-experts layers): add (f32 and
 * f16, alpha and beta, y none, out = x or y), route (8, 60 and 128 experts,
 * k 1, 2, 8 and up to 64, with and without renormalize; ids exactly, ties to
 * the lower id, NaN rows), gather and scatter_add (repeated indices, rows no
 * index names left bit for bit, weights or none), and the grouped linear
 * (1, 3 and 8 groups, empty ones, f16, 4-bit and fp8 weights, every act,
 * bias on some groups, mul), whose rows must also equal, bit for bit, the
 * backend's linear run on each group; and ABI 1.15's fp8 weights (linear
 * against references decoded with fgcore/f8.h, every code exactly, and
 * refused by older plugins).  A variant runs where the backend's `supports`
 * says it runs it (cpu_blas: everything).  Every op goes through the core's
 * wrappers (core/backend/compute_ops.c), which validate the arguments:
 * invalid ones must be refused with -EINVAL and one error line naming the
 * plugin, the layer and the op, never a crash; an op the backend does not
 * support with -ENOTSUP (the generic ops also for a plugin built for ABI
 * 1.0, tests/plugins/compute_abi10, found through FGCORE_BUILDDIR).  cpu_blas
 * also runs with its linear paths forced (OpenBLAS only, the fused kernel
 * only), thread counts 1 and 3, its plain C helpers (isa = none) and, on
 * AVX-512 machines, its AVX2 kernels; with the fused kernel, a row's result
 * must not depend on m (bit for bit).
 *
 * Memory: tensors come from malloc, which is right for host backends with
 * fp32 activations.  A backend with fp16 activations or device memory (a
 * future cublas) is skipped with a message: SKIP-DEVICE below marks where the
 * GPU issue adds tensors in the cuda_mem tier.  When no backend at all can
 * run the program exits 77; cpu_blas missing is a failure.
 *
 * Plugins are surveyed (probe, init, info) in a forked child so that no
 * plugin state (a CUDA context) is inherited by the test processes.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fgcore/f8.h>
#include <fgcore/half.h>
#include <fgcore/logprob.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"
#include "tests/logprob_ref.h"
#include "tests/test_rng.h"

/* Check's ck_assert* report every passing check to the parent process (one
 * write each), far too slow for millions of values: test with these. */
#define EXPECT(cond, ...)                            \
	do {                                         \
		if (!(cond))                         \
			ck_abort_msg(__VA_ARGS__);   \
	} while (0)
#define EXPECT_TRUE(cond) EXPECT(cond, "%s:%d: %s", __FILE__, __LINE__, #cond)

#define TOL_F32 1e-4
#define TOL_F16 2e-2 /* for an fp16-activation backend, once tested (SKIP-DEVICE) */

#define MAX_CONFS 16

struct conf {
	char label[128];
	char path[PATH_MAX];
	char name[64];
	const char *keys[3], *vals[3];
	int nopts;
};

static struct conf confs[MAX_CONFS];
static int nconfs;
static bool have_cpu_blas;

/* ---- PRNG and buffers ---------------------------------------------------------------- */

static int64_t irand(int64_t n) /* [0, n) */
{
	return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0;
}

#define SENTINEL 1234.5f

/* An f32 [rows, ld] buffer of random values (padding columns: SENTINEL). */
static float *f32_new(int64_t rows, int64_t cols, int64_t ld, bool random)
{
	size_t n = (size_t)(rows * ld) + 1;
	float *p = malloc(n * sizeof(*p));

	EXPECT_TRUE(p);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < ld; c++)
			p[r * ld + c] = c < cols ? (random ? urand() : 0.0f) : SENTINEL;
	return p;
}

static uint16_t *f16_new(int64_t rows, int64_t cols, int64_t ld, float scale)
{
	size_t n = (size_t)(rows * ld) + 1;
	uint16_t *p = malloc(n * sizeof(*p));

	EXPECT_TRUE(p);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < ld; c++)
			p[r * ld + c] = c < cols ? fg_float_to_half(urand() * scale) : 0x7e00;
	return p;
}

static struct fg_tensor tview(void *data, enum fg_dtype t, int64_t rows, int64_t cols, int64_t ld)
{
	struct fg_tensor v = { .data = data, .dtype = t, .rows = rows, .cols = cols, .ld = ld };

	return v;
}

static double h2d(uint16_t h)
{
	return fg_half_to_float(h);
}

/* Compare got (an f32 view) with ref ([rows, cols], dense); padding columns
 * must still hold SENTINEL. */
static void expect_close(const char *what, const float *got, int64_t ld, const double *ref,
			 int64_t rows, int64_t cols, double tol)
{
	double worst = 0;
	int64_t wr = 0, wc = 0;

	for (int64_t r = 0; r < rows; r++) {
		for (int64_t c = 0; c < ld; c++) {
			float g = got[r * ld + c];
			double e;

			if (c >= cols) {
				EXPECT(g == SENTINEL, "%s: padding [%lld, %lld] overwritten",
					      what, (long long)r, (long long)c);
				continue;
			}
			EXPECT(isfinite(g), "%s: [%lld, %lld] = %f", what, (long long)r,
				      (long long)c, (double)g);
			e = fabs(g - ref[r * cols + c]) / (1 + fabs(ref[r * cols + c]));
			if (e > worst) {
				worst = e;
				wr = r;
				wc = c;
			}
		}
	}
	EXPECT(worst <= tol, "%s: error %.3g > %.3g at [%lld, %lld]: got %.9g, want %.9g",
		      what, worst, tol, (long long)wr, (long long)wc,
		      (double)got[wr * ld + wc], ref[wr * cols + wc]);
}

/* ---- the backend under test ---------------------------------------------------------- */

struct env {
	struct fg_backend b;
	double tol;
	const char *label;
};

static void env_open(struct env *e, int ci)
{
	const struct conf *c = &confs[ci];
	struct fg_plugin_handle ph;
	void *opts;
	int rc;

	rng_state = 0x243f6a8885a308d3ull ^ (uint64_t)ci;
	rc = fg_plugin_open_file(c->path, FG_PLUGIN_COMPUTE, NULL, &ph);
	EXPECT(rc == 0, "%s", fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	EXPECT(opts, "%s", fg_last_error());
	for (int i = 0; i < c->nopts; i++)
		EXPECT(fg_plugin_opts_set(ph.plugin, opts, c->keys[i], c->vals[i], "test") == 0,
			      "%s", fg_last_error());
	rc = fg_backend_open(&e->b, &ph, opts);
	EXPECT(rc == 0, "%s: %s", c->label, fg_last_error());
	ck_assert_int_eq(e->b.info.act_dtype, FG_DTYPE_F32); /* others are skipped in main */
	e->tol = TOL_F32;
	e->label = c->label;
}

static void env_close(struct env *e)
{
	fg_backend_close(&e->b);
}

/* Every op goes through the core's wrappers, which validate the arguments
 * (core/backend/compute_ops.c) and name layer TEST_LAYER and "probe". */
#define TEST_LAYER 7

static int op_embed(struct env *e, const struct fg_embed_args *a)
{
	return fg_backend_embed(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_norm(struct env *e, const struct fg_layer_norm_args *a)
{
	return fg_backend_norm(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_linear(struct env *e, const struct fg_linear_args *a)
{
	return fg_backend_linear(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_rope(struct env *e, const struct fg_rope_args *a)
{
	return fg_backend_rope(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_prefill(struct env *e, const struct fg_attention_args *a)
{
	return fg_backend_attention_prefill(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_decode(struct env *e, const struct fg_attention_args *a)
{
	return fg_backend_attention_decode(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_kv_append(struct env *e, const struct fg_kv_append_args *a)
{
	return fg_backend_kv_append(&e->b, NULL, TEST_LAYER, "probe", a);
}

static bool supports(struct env *e, enum fg_op op, enum fg_dtype t)
{
	return fg_backend_supports(&e->b, op, t);
}

static bool conf_is_cpu_blas(int ci)
{
	return strcmp(confs[ci].name, "cpu_blas") == 0;
}

/* Open configuration ci when its backend runs op on t (its `supports`); else
 * say so and return false.  cpu_blas must run everything asked here. */
static bool env_open_for(struct env *e, int ci, enum fg_op op, enum fg_dtype t)
{
	env_open(e, ci);
	if (supports(e, op, t))
		return true;
	EXPECT(!conf_is_cpu_blas(ci), "%s: cpu_blas does not run %s on %s", e->label,
	       fg_op_name(op), fg_dtype_name(t));
	printf("%s: not run: the backend does not run %s on %s\n", e->label, fg_op_name(op),
	       fg_dtype_name(t));
	env_close(e);
	return false;
}

/* The error line of a refused call: "<plugin>: layer 7: probe (<op>): ...". */
static void expect_line(struct env *e, const char *what, const char *op)
{
	char want[160];

	snprintf(want, sizeof(want), "%s: layer %d: probe (%s): ", e->b.ph.plugin->name,
		 TEST_LAYER, op);
	EXPECT(strncmp(fg_last_error(), want, strlen(want)) == 0,
	       "%s: %s: the error line does not start with '%s': '%s'", e->label, what, want,
	       fg_last_error());
	EXPECT(strlen(fg_last_error()) > strlen(want) && !strchr(fg_last_error(), '\n'),
	       "%s: %s: no reason or more than one line in '%s'", e->label, what, fg_last_error());
}

/* Expect a refusal: rc and the core's error line naming layer, what and op. */
#define EXPECT_REFUSED(e, call, rc, op, what)                                                \
	do {                                                                                 \
		int rc_;                                                                     \
		fg_clear_error();                                                            \
		rc_ = (call);                                                                \
		EXPECT(rc_ == (rc), "%s: %s: got %d, expected %d (%s)", (e)->label, what,    \
		       rc_, (rc), fg_last_error());                                         \
		expect_line((e), what, op);                                                  \
	} while (0)
#define EXPECT_EINVAL(e, call, op, what) EXPECT_REFUSED(e, call, -EINVAL, op, what)

/* ---- linear -------------------------------------------------------------------------- */

enum { RES_NONE, RES_SEPARATE, RES_ALIAS };

/* The epilogue of fgcore/compute.h in double: act(s) ⊙ mul + residual. */
static double act_ref(double s, enum fg_activation act)
{
	if (act == FG_ACT_RELU)
		return s < 0 ? 0 : s;
	if (act == FG_ACT_SILU)
		return s / (1 + exp(-s));
	if (act == FG_ACT_GELU_TANH) /* ABI 1.12 */
		return 0.5 * s * (1 + tanh(sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
	return s;
}

static const char *act_name(enum fg_activation act)
{
	return act == FG_ACT_RELU ? "relu" : act == FG_ACT_SILU ? "silu" :
	       act == FG_ACT_GELU_TANH ? "gelu_tanh" : "none";
}

static void linear_case(struct env *e, int64_t m, int64_t n, int64_t k, int64_t pad, bool bias,
			enum fg_activation act, int res, bool mul)
{
	int64_t ldx = k + pad, ldw = k + pad, ldo = n + pad;
	float *x = f32_new(m, k, ldx, true), *out = f32_new(m, n, ldo, false);
	float *resb = res == RES_SEPARATE ? f32_new(m, n, ldo + 1, true) : NULL;
	float *mulb = mul ? f32_new(m, n, n + 2, true) : NULL;
	uint16_t *w = f16_new(n, k, ldw, 1.0f), *b = bias ? f16_new(1, n, n, 1.0f) : NULL;
	double *ref = malloc((size_t)(m * n + 1) * sizeof(*ref));
	struct fg_linear_args a;
	char what[160];

	EXPECT_TRUE(ref);
	if (res == RES_ALIAS) /* out holds the residual on entry */
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				out[i * ldo + j] = urand();
	for (int64_t i = 0; i < m; i++) {
		for (int64_t j = 0; j < n; j++) {
			double s = 0;

			for (int64_t q = 0; q < k; q++)
				s += (double)x[i * ldx + q] * h2d(w[j * ldw + q]);
			if (b)
				s += h2d(b[j]);
			s = act_ref(s, act);
			if (mulb)
				s *= mulb[i * (n + 2) + j];
			if (res == RES_SEPARATE)
				s += resb[i * (ldo + 1) + j];
			else if (res == RES_ALIAS)
				s += out[i * ldo + j];
			ref[i * n + j] = s;
		}
	}
	memset(&a, 0, sizeof(a));
	a.x = tview(x, FG_DTYPE_F32, m, k, ldx);
	a.w = tview(w, FG_DTYPE_F16, n, k, ldw);
	a.bias = tview(b, FG_DTYPE_F16, 1, n, n);
	a.act = act;
	a.out = tview(out, FG_DTYPE_F32, m, n, ldo);
	if (res == RES_SEPARATE)
		a.residual = tview(resb, FG_DTYPE_F32, m, n, ldo + 1);
	else if (res == RES_ALIAS)
		a.residual = a.out;
	if (mulb)
		a.mul = tview(mulb, FG_DTYPE_F32, m, n, n + 2);
	snprintf(what, sizeof(what), "%s: linear m=%lld n=%lld k=%lld pad=%lld bias=%d act=%s "
		 "res=%d mul=%d", e->label, (long long)m, (long long)n, (long long)k,
		 (long long)pad, bias, act_name(act), res, mul);
	EXPECT(op_linear(e, &a) == 0, "%s: %s", what, fg_last_error());
	expect_close(what, out, ldo, ref, m, n, e->tol);
	free(x), free(out), free(resb), free(mulb), free(w), free(b), free(ref);
}

static const int64_t linear_shapes[][3] = {
	{ 1, 1, 1 }, { 1, 7, 13 }, { 2, 3, 8 }, { 3, 5, 17 }, { 4, 24, 64 }, { 5, 25, 33 },
	{ 7, 49, 100 }, { 1, 130, 257 }, { 33, 70, 96 }, { 64, 96, 128 }, { 100, 65, 31 },
	{ 1, 300, 1024 }, { 130, 67, 200 }, { 20, 40, 2500 },
};

START_TEST(test_linear)
{
	struct env e;

	env_open(&e, _i);
	for (size_t s = 0; s < sizeof(linear_shapes) / sizeof(linear_shapes[0]); s++)
		for (int v = 0; v < 24; v++)
			linear_case(&e, linear_shapes[s][0], linear_shapes[s][1], linear_shapes[s][2],
				    (v & 1) ? 3 : 0, v & 2, (v & 4) ? FG_ACT_RELU : FG_ACT_NONE,
				    (v >> 3) % 3, false);
	env_close(&e);
}
END_TEST

/* ABI 1.1: SiLU and the gating multiplier (SwiGLU), with and without bias and
 * residual (none, separate, out itself), over the same shapes: for cpu_blas
 * the fused fp16 kernels (small m), OpenBLAS (large m, or fused_max_m = 0). */
START_TEST(test_linear_silu_mul)
{
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_LINEAR_SILU, FG_DTYPE_F16))
		return;
	ck_assert(supports(&e, FG_OP_LINEAR_MUL, FG_DTYPE_F16));
	for (size_t s = 0; s < sizeof(linear_shapes) / sizeof(linear_shapes[0]); s++)
		for (int v = 0; v < 12; v++) {
			enum fg_activation act = v % 3 == 0 ? FG_ACT_SILU :
						 v % 3 == 1 ? FG_ACT_NONE : FG_ACT_RELU;
			bool mul = v % 3 != 1 || v >= 6; /* every act with mul, SiLU without */

			linear_case(&e, linear_shapes[s][0], linear_shapes[s][1],
				    linear_shapes[s][2], (v & 1) ? 2 : 0, v & 2, act, (v / 4) % 3,
				    mul);
		}
	linear_case(&e, 3, 5, 0, 0, true, FG_ACT_SILU, RES_ALIAS, true); /* k = 0 */
	env_close(&e);
}
END_TEST

/* Shapes around the fused / BLAS boundaries, and k = 0 (out = act(bias) + residual). */
START_TEST(test_linear_edges)
{
	struct env e;

	env_open(&e, _i);
	for (int64_t m = 1; m <= 40; m += 3)
		linear_case(&e, m, 29, 71, 1, true, (m & 1) ? FG_ACT_RELU : FG_ACT_NONE, m % 3,
			    false);
	linear_case(&e, 3, 5, 0, 0, true, FG_ACT_RELU, RES_SEPARATE, false);
	linear_case(&e, 3, 5, 0, 2, false, FG_ACT_NONE, RES_ALIAS, false);
	/* cpu_blas: w tiles, row blocks */
	linear_case(&e, 3, 600, 8192, 0, true, FG_ACT_NONE, RES_SEPARATE, false);
	linear_case(&e, 40, 70000, 1, 0, true, FG_ACT_NONE, RES_ALIAS, false);
	if (supports(&e, FG_OP_LINEAR_SILU, FG_DTYPE_F16) &&
	    supports(&e, FG_OP_LINEAR_MUL, FG_DTYPE_F16)) {
		for (int64_t m = 1; m <= 40; m += 3)
			linear_case(&e, m, 29, 71, 1, true, FG_ACT_SILU, m % 3, m & 1);
		linear_case(&e, 3, 600, 8192, 0, true, FG_ACT_SILU, RES_SEPARATE, true);
		linear_case(&e, 40, 70000, 1, 0, false, FG_ACT_SILU, RES_ALIAS, true);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_linear_empty)
{
	struct env e;
	float x[4], out[4] = { 7, 7, 7, 7 };
	uint16_t w[4] = { 0 };
	struct fg_linear_args a;

	env_open(&e, _i);
	memset(&a, 0, sizeof(a));
	a.x = tview(x, FG_DTYPE_F32, 0, 2, 2);
	a.w = tview(w, FG_DTYPE_F16, 2, 2, 2);
	a.out = tview(out, FG_DTYPE_F32, 0, 2, 2);
	ck_assert_int_eq(op_linear(&e, &a), 0);
	a.x.rows = a.out.rows = 2;
	a.w.rows = a.out.cols = 0;
	ck_assert_int_eq(op_linear(&e, &a), 0);
	for (int i = 0; i < 4; i++)
		EXPECT_TRUE(out[i] == 7);
	env_close(&e);
}
END_TEST

START_TEST(test_linear_invalid)
{
	struct env e;
	float x[64], out[64], out2[64];
	uint16_t w[64], bias[8];
	struct fg_linear_args a, g;

	memset(x, 0, sizeof(x));
	memset(w, 0, sizeof(w));
	memset(bias, 0, sizeof(bias));
	env_open(&e, _i);
	memset(&g, 0, sizeof(g));
	g.x = tview(x, FG_DTYPE_F32, 4, 8, 8);
	g.w = tview(w, FG_DTYPE_F16, 6, 8, 8);
	g.out = tview(out, FG_DTYPE_F32, 4, 6, 6);
	g.bias = tview(bias, FG_DTYPE_F16, 1, 6, 6);
	EXPECT(op_linear(&e, &g) == 0, "%s", fg_last_error());

	a = g, a.w.dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "w f32");
	a = g, a.x.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "x f16");
	a = g, a.out.dtype = FG_DTYPE_I32;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "out i32");
	a = g, a.x.dtype = (enum fg_dtype)77;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "x dtype 77");
	a = g, a.w.cols = 7, a.w.ld = 7;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "k mismatch");
	a = g, a.out.cols = 5;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "n mismatch");
	a = g, a.out.rows = 3;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "m mismatch");
	a = g, a.x.ld = 7;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "ld < cols");
	a = g, a.x.rows = -1, a.out.rows = -1;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "negative rows");
	a = g, a.bias.cols = 5;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "bias shape");
	a = g, a.bias.dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "bias f32");
	a = g, a.residual = tview(out2, FG_DTYPE_F32, 4, 5, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "residual shape");
	a = g, a.act = (enum fg_activation)9;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "unknown activation");
	a = g, a.out = tview(x, FG_DTYPE_F32, 4, 6, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "out aliases x");
	a = g, a.residual = tview(out + 1, FG_DTYPE_F32, 4, 6, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "residual partly overlaps out");
	a = g, a.x.data = NULL;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "x NULL");
	a = g, a.x.ld = INT64_MAX / 2, a.x.rows = 4;
	EXPECT_EINVAL(&e, op_linear(&e, &a), "linear", "x larger than memory");
	EXPECT_EINVAL(&e, op_linear(&e, NULL), "linear", "NULL args");
	env_close(&e);
}
END_TEST

/* cpu_blas: with the fused kernel forced, a row's result is bit-identical
 * whatever m (hence the k blocking) and the thread count: policy equivalence
 * across batch splits relies on it. */
START_TEST(test_linear_batch_invariance)
{
	struct env e;
	int64_t n = 45, k = 2100, M = 19; /* k > 1024: cpu_blas blocks k when m > 8 */
	float *x = f32_new(M, k, k, true), *full = f32_new(M, n, n, false);
	float *part = f32_new(M, n, n, false);
	uint16_t *w = f16_new(n, k, k, 1.0f), *b = f16_new(1, n, n, 1.0f);
	struct fg_linear_args a;

	env_open(&e, _i);
	memset(&a, 0, sizeof(a));
	a.w = tview(w, FG_DTYPE_F16, n, k, k);
	a.bias = tview(b, FG_DTYPE_F16, 1, n, n);
	a.x = tview(x, FG_DTYPE_F32, M, k, k);
	a.out = tview(full, FG_DTYPE_F32, M, n, n);
	ck_assert_int_eq(op_linear(&e, &a), 0);
	for (int64_t m = 1; m <= 7; m += 2) {
		for (int64_t i0 = 0; i0 + m <= M; i0 += m) {
			a.x = tview(x + i0 * k, FG_DTYPE_F32, m, k, k);
			a.out = tview(part + i0 * n, FG_DTYPE_F32, m, n, n);
			ck_assert_int_eq(op_linear(&e, &a), 0);
		}
		for (int64_t i = 0; i < (M / m) * m * n; i++)
			EXPECT(memcmp(&part[i], &full[i], sizeof(float)) == 0,
				      "m=%lld: element %lld differs: %a vs %a", (long long)m,
				      (long long)i, (double)part[i], (double)full[i]);
	}
	env_close(&e);
	free(x), free(full), free(part), free(w), free(b);
}
END_TEST

/* ---- embed --------------------------------------------------------------------------- */

START_TEST(test_embed)
{
	static const int64_t shapes[][4] = { /* vocab, positions, hidden, n */
		{ 1, 1, 1, 1 }, { 50, 20, 33, 17 }, { 7, 9, 64, 5 }, { 300, 40, 128, 61 },
	};
	struct env e;

	env_open(&e, _i);
	for (size_t v = 0; v < 2 * sizeof(shapes) / sizeof(shapes[0]); v++) {
		size_t s = v / 2;
		bool nopos = v & 1; /* ABI 1.1: no position table (rotary models) */
		int64_t V = shapes[s][0], P = shapes[s][1], H = shapes[s][2], n = shapes[s][3];
		int64_t ldt = H + 2, ldp = H + 1, ldo = H + 3;
		uint16_t *tok = f16_new(V, H, ldt, 2.0f), *pos = f16_new(P, H, ldp, 2.0f);
		float *out = f32_new(n, H, ldo, false);
		int32_t *ids = malloc((size_t)n * sizeof(*ids)), *positions = malloc((size_t)n * 4);
		double *ref = malloc((size_t)(n * H) * sizeof(*ref));
		struct fg_embed_args a;

		EXPECT_TRUE(ids && positions && ref);
		for (int64_t i = 0; i < n; i++) {
			ids[i] = (int32_t)(i == 0 ? V - 1 : irand(V));
			positions[i] = (int32_t)(i == 1 ? P - 1 : irand(P));
			for (int64_t j = 0; j < H; j++)
				ref[i * H + j] = h2d(tok[ids[i] * ldt + j]) +
						 (nopos ? 0 : h2d(pos[positions[i] * ldp + j]));
		}
		memset(&a, 0, sizeof(a));
		a.ids = ids;
		a.positions = nopos ? NULL : positions;
		a.n = n;
		a.tok = tview(tok, FG_DTYPE_F16, V, H, ldt);
		if (!nopos)
			a.pos = tview(pos, FG_DTYPE_F16, P, H, ldp);
		a.out = tview(out, FG_DTYPE_F32, n, H, ldo);
		if (nopos && !supports(&e, FG_OP_EMBED_TOKENS, FG_DTYPE_F16)) {
			EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no embed without positions");
		} else {
			EXPECT(op_embed(&e, &a) == 0, "%s", fg_last_error());
			expect_close(nopos ? "embed without positions" : "embed", out, ldo, ref, n,
				     H, e.tol);
		}
		free(tok), free(pos), free(out), free(ids), free(positions), free(ref);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_embed_invalid)
{
	struct env e;
	uint16_t tok[40], pos[40];
	float out[40];
	int32_t ids[3] = { 0, 1, 2 }, positions[3] = { 0, 1, 2 };
	struct fg_embed_args a, g;

	memset(tok, 0, sizeof(tok));
	memset(pos, 0, sizeof(pos));
	env_open(&e, _i);
	memset(&g, 0, sizeof(g));
	g.ids = ids;
	g.positions = positions;
	g.n = 3;
	g.tok = tview(tok, FG_DTYPE_F16, 5, 4, 4);
	g.pos = tview(pos, FG_DTYPE_F16, 3, 4, 4);
	g.out = tview(out, FG_DTYPE_F32, 3, 4, 4);
	EXPECT(op_embed(&e, &g) == 0, "%s", fg_last_error());

	ids[1] = 5;
	EXPECT_EINVAL(&e, op_embed(&e, &g), "embed", "id == vocab");
	ids[1] = -1;
	EXPECT_EINVAL(&e, op_embed(&e, &g), "embed", "negative id");
	ids[1] = 1;
	positions[2] = 3;
	EXPECT_EINVAL(&e, op_embed(&e, &g), "embed", "position out of range");
	positions[2] = 2;
	a = g, a.tok.dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "tok f32");
	a = g, a.out.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "out f16");
	a = g, a.pos.cols = 3;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "hidden mismatch");
	a = g, a.out.rows = 2;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "n mismatch");
	a = g, a.ids = NULL;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "ids NULL");
	a = g, a.n = -2;
	EXPECT_EINVAL(&e, op_embed(&e, &a), "embed", "negative n");
	EXPECT_EINVAL(&e, op_embed(&e, NULL), "embed", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- layer norm ---------------------------------------------------------------------- */

START_TEST(test_layer_norm)
{
	static const int64_t shapes[][2] = { { 1, 1 }, { 7, 65 }, { 3, 768 }, { 20, 33 } };
	struct env e;

	env_open(&e, _i);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		for (int vi = 0; vi < 6; vi++) {
			/* layer norm with beta; ABI 1.1: without beta, RMS norm */
			int inplace = vi & 1, kind = vi / 2;
			const char *names[3] = { "layer_norm", "layer_norm without beta", "rms_norm" };
			int64_t n = shapes[s][0], h = shapes[s][1], ldx = h + 2;
			int64_t ldo = inplace ? ldx : h + 1;
			float *x = f32_new(n, h, ldx, true), *out = inplace ? x : f32_new(n, h, ldo, false);
			uint16_t *g = f16_new(1, h, h, 2.0f), *b = f16_new(1, h, h, 1.0f);
			double *ref = malloc((size_t)(n * h) * sizeof(*ref));
			struct fg_layer_norm_args a;

			EXPECT_TRUE(ref);
			for (int64_t i = 0; i < n; i++) {
				double mean = 0, var = 0;

				/* an offset makes the variance computation matter */
				for (int64_t j = 0; j < h; j++)
					x[i * ldx + j] += 3.0f;
				for (int64_t j = 0; j < h && kind < 2; j++)
					mean += x[i * ldx + j];
				mean /= (double)h;
				/* RMS: mean stays 0, var is mean(x²) */
				for (int64_t j = 0; j < h; j++)
					var += (x[i * ldx + j] - mean) * (x[i * ldx + j] - mean);
				var /= (double)h;
				for (int64_t j = 0; j < h; j++)
					ref[i * h + j] = (x[i * ldx + j] - mean) / sqrt(var + 1e-5) *
							 h2d(g[j]) + (kind ? 0 : h2d(b[j]));
			}
			memset(&a, 0, sizeof(a));
			a.x = tview(x, FG_DTYPE_F32, n, h, ldx);
			a.gamma = tview(g, FG_DTYPE_F16, 1, h, h);
			if (kind == 0)
				a.beta = tview(b, FG_DTYPE_F16, 1, h, h);
			a.eps = 1e-5f;
			a.out = tview(out, FG_DTYPE_F32, n, h, ldo);
			a.kind = kind == 2 ? FG_NORM_RMS : FG_NORM_LAYER;
			if (kind == 2 && !supports(&e, FG_OP_RMS_NORM, FG_DTYPE_F32)) {
				EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no RMS norm");
			} else {
				char what[96];

				snprintf(what, sizeof(what), "%s [%lld, %lld]%s", names[kind],
					 (long long)n, (long long)h, inplace ? " in place" : "");
				EXPECT(op_norm(&e, &a) == 0, "%s: %s", what, fg_last_error());
				expect_close(what, out, ldo, ref, n, h, e.tol);
			}
			if (!inplace)
				free(out);
			free(x), free(g), free(b), free(ref);
		}
	}
	env_close(&e);
}
END_TEST

START_TEST(test_layer_norm_invalid)
{
	struct env e;
	float x[32], out[32];
	uint16_t g[8], b[8];
	struct fg_layer_norm_args a, v;

	memset(x, 0, sizeof(x));
	memset(g, 0, sizeof(g));
	memset(b, 0, sizeof(b));
	env_open(&e, _i);
	memset(&v, 0, sizeof(v));
	v.x = tview(x, FG_DTYPE_F32, 4, 8, 8);
	v.gamma = tview(g, FG_DTYPE_F16, 1, 8, 8);
	v.beta = tview(b, FG_DTYPE_F16, 1, 8, 8);
	v.eps = 1e-5f;
	v.out = tview(out, FG_DTYPE_F32, 4, 8, 8);
	EXPECT(op_norm(&e, &v) == 0, "%s", fg_last_error());
	a = v, a.gamma.cols = 7;
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "gamma shape");
	a = v, a.beta.dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "beta f32");
	a = v, a.eps = -1;
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "negative eps");
	a = v, a.eps = NAN;
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "NaN eps");
	a = v, a.out = tview(x + 1, FG_DTYPE_F32, 4, 8, 8);
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "out partly overlaps x");
	a = v, a.out.rows = 5;
	EXPECT_EINVAL(&e, op_norm(&e, &a), "layer_norm", "out rows");
	EXPECT_EINVAL(&e, op_norm(&e, NULL), "layer_norm", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- attention ----------------------------------------------------------------------- */

/* Reference for one query: softmax(scale q·k_j) v_j over j in [lo, hi]. */
static double capped(double s);

static void attend_ref(const float *q, const float *k, int64_t ldk, const float *v, int64_t ldv,
		       int64_t lo, int64_t hi, int64_t hd, double scale, double *out)
{
	double mx = -INFINITY, sum = 0, *s;

	for (int64_t d = 0; d < hd; d++)
		out[d] = 0;
	if (lo > hi)
		return;
	s = malloc((size_t)(hi - lo + 1) * sizeof(*s));
	EXPECT_TRUE(s);
	for (int64_t j = lo; j <= hi; j++) {
		double t = 0;

		for (int64_t d = 0; d < hd; d++)
			t += (double)q[d] * k[j * ldk + d];
		s[j - lo] = capped(t * scale);
		mx = fmax(mx, s[j - lo]);
	}
	for (int64_t j = lo; j <= hi; j++) {
		s[j - lo] = exp(s[j - lo] - mx);
		sum += s[j - lo];
	}
	for (int64_t j = lo; j <= hi; j++)
		for (int64_t d = 0; d < hd; d++)
			out[d] += s[j - lo] / sum * v[j * ldv + d];
	free(s);
}

enum { PAD_ZERO, PAD_RANDOM, PAD_ALL_BUT_ONE, PAD_ALL, PAD_KINDS };

/* The soft cap on the scores of the attention cases (ABI 1.12; 0: none):
 * the references cap each scaled score at ±score_cap with tanh, as the
 * calls pass it in fg_attention_args.softcap. */
static double score_cap;

static double capped(double s)
{
	return score_cap > 0 ? score_cap * tanh(s / score_cap) : s;
}

/* The sliding window of the attention cases (ABI 1.11; 0: none), and the
 * first key the query at column i of a row padded by pad sees under it. */
static int64_t window;

static int64_t first_key(int64_t pad, int64_t i)
{
	return window > 0 && i - window + 1 > pad ? i - window + 1 : pad;
}

/* kv_heads KVH (0: heads): query head h reads key/value head h / (H / KVH). */
static void prefill_case(struct env *e, int64_t B, int64_t S, int64_t H, int64_t KVH, int64_t hd,
			 int padkind, int64_t ldpad, bool out_is_q)
{
	int64_t C = H * hd, R = B * S, ld = C + ldpad, G = KVH ? H / KVH : 1, KC = C / G;
	float *q = f32_new(R, C, ld, true), *k = f32_new(R, KC, ld + 1, true);
	float *v = f32_new(R, KC, ld + 2, true), *out = out_is_q ? q : f32_new(R, C, ld + 3, false);
	int64_t ldo = out_is_q ? ld : ld + 3;
	double *ref = malloc((size_t)(R * C) * sizeof(*ref));
	int32_t *pad = malloc((size_t)B * sizeof(*pad));
	struct fg_attention_args a;
	double scale = 1.0 / sqrt((double)hd);
	char what[160];

	EXPECT_TRUE(ref && pad);
	for (int64_t b = 0; b < B; b++)
		pad[b] = (int32_t)(padkind == PAD_ZERO ? 0 : padkind == PAD_RANDOM ? irand(S) :
				   padkind == PAD_ALL_BUT_ONE ? S - 1 : S);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < S; i++)
				attend_ref(q + (b * S + i) * ld + h * hd,
					   k + b * S * (ld + 1) + h / G * hd, ld + 1,
					   v + b * S * (ld + 2) + h / G * hd, ld + 2,
					   first_key(pad[b], i), i, hd, (float)scale,
					   ref + (b * S + i) * C + h * hd);
	memset(&a, 0, sizeof(a));
	a.q = tview(q, FG_DTYPE_F32, R, C, ld);
	a.k = tview(k, FG_DTYPE_F32, R, KC, ld + 1);
	a.v = tview(v, FG_DTYPE_F32, R, KC, ld + 2);
	a.out = tview(out, FG_DTYPE_F32, R, C, ldo);
	a.batch = B;
	a.seq = S;
	a.heads = H;
	a.kv_heads = KVH;
	a.head_dim = hd;
	a.scale = (float)scale;
	a.pad = pad;
	a.window = window;
	a.softcap = (float)score_cap;
	snprintf(what, sizeof(what), "%s: attention_prefill B=%lld S=%lld H=%lld KVH=%lld hd=%lld "
		 "pad=%d%s window=%lld softcap=%g", e->label, (long long)B, (long long)S,
		 (long long)H, (long long)KVH, (long long)hd, padkind, out_is_q ? " out=q" : "",
		 (long long)window, score_cap);
	EXPECT(op_prefill(e, &a) == 0, "%s: %s", what,
		      fg_last_error());
	expect_close(what, out, ldo, ref, R, C, e->tol);
	for (int64_t b = 0; b < B; b++)
		for (int64_t i = 0; i < pad[b]; i++)
			for (int64_t c = 0; c < C; c++)
				EXPECT(out[(b * S + i) * ldo + c] == 0.0f,
					      "%s: padded row %lld of batch %lld is not zero", what,
					      (long long)i, (long long)b);
	if (!out_is_q)
		free(out);
	free(q), free(k), free(v), free(ref), free(pad);
}

START_TEST(test_attention_prefill)
{
	static const int64_t shapes[][4] = { /* batch, seq, heads, head_dim */
		{ 1, 1, 1, 1 }, { 1, 5, 2, 4 }, { 2, 7, 3, 8 }, { 3, 9, 2, 16 }, { 2, 33, 2, 64 },
		{ 1, 70, 1, 12 },
	};
	struct env e;

	env_open(&e, _i);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int p = 0; p < PAD_KINDS; p++)
			prefill_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], 0, shapes[s][3], p,
				     (int64_t)(s % 3), false);
	prefill_case(&e, 2, 6, 2, 0, 8, PAD_RANDOM, 1, true);
	prefill_case(&e, 2, 5, 3, 3, 4, PAD_RANDOM, 0, false); /* kv_heads == heads */
	env_close(&e);
}
END_TEST

/* ABI 1.1: grouped-query prefill, groups of 2 to 8 query heads per kv head. */
START_TEST(test_attention_prefill_gqa)
{
	static const int64_t shapes[][5] = { /* batch, seq, heads, kv_heads, head_dim */
		{ 1, 1, 2, 1, 1 }, { 1, 5, 4, 2, 4 }, { 2, 7, 6, 3, 8 }, { 3, 9, 8, 1, 16 },
		{ 2, 33, 8, 2, 64 }, { 1, 20, 6, 2, 12 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_ATTENTION_GQA, FG_DTYPE_F32))
		return;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int p = 0; p < PAD_KINDS; p++)
			prefill_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
				     shapes[s][4], p, (int64_t)(s % 3), false);
	prefill_case(&e, 2, 6, 4, 2, 8, PAD_RANDOM, 1, true);
	env_close(&e);
}
END_TEST

/* Decode's pad of row b: PAD_ALL_BUT_ONE attends to the last position only;
 * PAD_ALL masks every position of the even rows (a finished sequence: its
 * output must be zeros) and a random share of the odd ones. */
static int32_t decode_pad(int padkind, int64_t b, int64_t len)
{
	return (int32_t)(padkind == PAD_ZERO ? 0 : padkind == PAD_RANDOM ? irand(len) :
			 padkind == PAD_ALL_BUT_ONE ? len - 1 : b % 2 ? irand(len) : len);
}

/* Every position of row b masked: its output row must be exactly zero. */
static void expect_masked_zero(const char *what, const float *out, int64_t ldo,
			       const int32_t *pad, int64_t B, int64_t C, int64_t len)
{
	for (int64_t b = 0; b < B; b++)
		for (int64_t c = 0; pad[b] == len && c < C; c++)
			EXPECT(out[b * ldo + c] == 0.0f, "%s: fully masked row %lld is not zero",
			       what, (long long)b);
}

static void decode_case(struct env *e, int64_t B, int64_t H, int64_t KVH, int64_t hd, int64_t len,
			int64_t stride, int padkind, bool out_is_q)
{
	int64_t C = H * hd, ld = C + 1, G = KVH ? H / KVH : 1, KC = C / G;
	float *q = f32_new(B, C, ld, true), *k = f32_new(B * stride, KC, ld + 2, true);
	float *v = f32_new(B * stride, KC, ld + 3, true);
	float *out = out_is_q ? q : f32_new(B, C, ld + 1, false);
	int64_t ldo = out_is_q ? ld : ld + 1;
	double *ref = malloc((size_t)(B * C) * sizeof(*ref));
	int32_t *pad = malloc((size_t)B * sizeof(*pad));
	struct fg_attention_args a;
	double scale = 0.7 / sqrt((double)hd);
	char what[160];

	EXPECT_TRUE(ref && pad);
	for (int64_t b = 0; b < B; b++)
		pad[b] = decode_pad(padkind, b, len);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			attend_ref(q + b * ld + h * hd, k + b * stride * (ld + 2) + h / G * hd, ld + 2,
				   v + b * stride * (ld + 3) + h / G * hd, ld + 3,
				   first_key(pad[b], len - 1), len - 1, hd, (float)scale,
				   ref + b * C + h * hd);
	memset(&a, 0, sizeof(a));
	a.q = tview(q, FG_DTYPE_F32, B, C, ld);
	a.k = tview(k, FG_DTYPE_F32, B * stride, KC, ld + 2);
	a.v = tview(v, FG_DTYPE_F32, B * stride, KC, ld + 3);
	a.out = tview(out, FG_DTYPE_F32, B, C, ldo);
	a.batch = B;
	a.seq = 1;
	a.len = len;
	a.cache_stride = stride;
	a.heads = H;
	a.kv_heads = KVH;
	a.head_dim = hd;
	a.scale = (float)scale;
	a.pad = pad;
	a.window = window;
	a.softcap = (float)score_cap;
	snprintf(what, sizeof(what), "%s: attention_decode B=%lld H=%lld KVH=%lld hd=%lld len=%lld "
		 "stride=%lld pad=%d%s window=%lld softcap=%g", e->label, (long long)B, (long long)H,
		 (long long)KVH, (long long)hd, (long long)len, (long long)stride, padkind,
		 out_is_q ? " out=q" : "", (long long)window, score_cap);
	EXPECT(op_decode(e, &a) == 0, "%s: %s", what,
		      fg_last_error());
	expect_close(what, out, ldo, ref, B, C, e->tol);
	expect_masked_zero(what, out, ldo, pad, B, C, len);
	if (!out_is_q)
		free(out);
	free(q), free(k), free(v), free(ref), free(pad);
}

START_TEST(test_attention_decode)
{
	static const int64_t shapes[][5] = { /* batch, heads, head_dim, len, cache_stride */
		{ 1, 1, 1, 1, 1 }, { 2, 3, 8, 5, 9 }, { 3, 2, 16, 17, 20 }, { 4, 4, 64, 33, 40 },
		{ 1, 2, 64, 130, 130 }, { 5, 1, 7, 2, 3 },
	};
	struct env e;

	env_open(&e, _i);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int p = 0; p < PAD_KINDS; p++)
			decode_case(&e, shapes[s][0], shapes[s][1], 0, shapes[s][2], shapes[s][3],
				    shapes[s][4], p, false);
	decode_case(&e, 3, 2, 0, 8, 6, 8, PAD_RANDOM, true);
	env_close(&e);
}
END_TEST

/* ABI 1.11: a sliding window over prefill and decode, plain and grouped,
 * windows of 1, shorter than the run, and longer than it; a backend built
 * for an older minor is refused the call with one line. */
START_TEST(test_attention_window)
{
	static const int64_t windows[] = { 1, 3, 8, 100 };
	struct env e;

	env_open(&e, _i);
	if (e.b.minor < 11) {
		int32_t pad = 0;
		float x[8] = { 0 };
		struct fg_attention_args a = {
			.q = tview(x, FG_DTYPE_F32, 1, 8, 8), .k = tview(x, FG_DTYPE_F32, 1, 8, 8),
			.v = tview(x, FG_DTYPE_F32, 1, 8, 8), .out = tview(x, FG_DTYPE_F32, 1, 8, 8),
			.batch = 1, .seq = 1, .heads = 1, .head_dim = 8, .scale = 1, .pad = &pad,
			.window = 4,
		};
		EXPECT(op_prefill(&e, &a) == -ENOTSUP && strstr(fg_last_error(), "1.11"),
		       "%s: a windowed call to a %u-minor backend: %s", e.label, e.b.minor,
		       fg_last_error());
		printf("%s: not run: built for compute minor %u, before sliding windows\n", e.label,
		       e.b.minor);
		env_close(&e);
		return;
	}
	for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
		window = windows[w];
		for (int p = 0; p < PAD_KINDS; p++) {
			prefill_case(&e, 2, 9, 2, 0, 8, p, 1, false);
			prefill_case(&e, 3, 17, 4, 2, 16, p, 0, false);
			decode_case(&e, 3, 2, 0, 8, 6, 8, p, false);
			decode_case(&e, 4, 4, 2, 16, 33, 40, p, false);
		}
	}
	window = 0;
	env_close(&e);
}
END_TEST

/* ABI 1.1: grouped-query decode over an fp32 cache. */
START_TEST(test_attention_decode_gqa)
{
	static const int64_t shapes[][6] = { /* batch, heads, kv_heads, head_dim, len, stride */
		{ 1, 2, 1, 1, 1, 1 }, { 2, 6, 3, 8, 5, 9 }, { 3, 4, 2, 16, 17, 20 },
		{ 4, 8, 2, 64, 33, 40 }, { 1, 8, 1, 64, 130, 130 }, { 5, 4, 1, 7, 2, 3 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_ATTENTION_GQA, FG_DTYPE_F32))
		return;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int p = 0; p < PAD_KINDS; p++)
			decode_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
				    shapes[s][4], shapes[s][5], p, false);
	decode_case(&e, 3, 4, 2, 8, 6, 8, PAD_RANDOM, true);
	env_close(&e);
}
END_TEST

START_TEST(test_attention_invalid)
{
	struct env e;
	float q[256], k[512], v[512], out[256];
	int32_t pad[2] = { 0, 1 };
	struct fg_attention_args a, p, d;

	memset(q, 0, sizeof(q));
	memset(k, 0, sizeof(k));
	memset(v, 0, sizeof(v));
	env_open(&e, _i);
	/* prefill: batch 2, seq 4, heads 2, head_dim 4 */
	memset(&p, 0, sizeof(p));
	p.q = tview(q, FG_DTYPE_F32, 8, 8, 8);
	p.k = tview(k, FG_DTYPE_F32, 8, 8, 8);
	p.v = tview(v, FG_DTYPE_F32, 8, 8, 8);
	p.out = tview(out, FG_DTYPE_F32, 8, 8, 8);
	p.batch = 2, p.seq = 4, p.heads = 2, p.head_dim = 4, p.scale = 0.5f, p.pad = pad;
	EXPECT(op_prefill(&e, &p) == 0, "%s", fg_last_error());
	pad[1] = 5;
	EXPECT_EINVAL(&e, op_prefill(&e, &p), "attention_prefill", "pad > seq");
	pad[1] = -1;
	EXPECT_EINVAL(&e, op_prefill(&e, &p), "attention_prefill", "negative pad");
	pad[1] = 1;
	a = p, a.pad = NULL;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "pad NULL");
	a = p, a.heads = 3;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "heads * head_dim");
	a = p, a.seq = 5;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "batch * seq");
	a = p, a.k.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "k f16");
	a = p, a.out = a.k;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "out aliases k");
	a = p, a.scale = INFINITY;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "scale inf");
	a = p, a.batch = -1;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "negative batch");
	a = p, a.heads = INT64_MAX / 2, a.head_dim = 4;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "heads overflow");
	EXPECT_EINVAL(&e, op_prefill(&e, NULL), "attention_prefill", "NULL args");
	/* decode: batch 2, len 3, cache_stride 5 */
	memset(&d, 0, sizeof(d));
	d.q = tview(q, FG_DTYPE_F32, 2, 8, 8);
	d.k = tview(k, FG_DTYPE_F32, 10, 8, 8);
	d.v = tview(v, FG_DTYPE_F32, 10, 8, 8);
	d.out = tview(out, FG_DTYPE_F32, 2, 8, 8);
	d.batch = 2, d.seq = 1, d.len = 3, d.cache_stride = 5;
	d.heads = 2, d.head_dim = 4, d.scale = 0.5f, d.pad = pad;
	EXPECT(op_decode(&e, &d) == 0, "%s", fg_last_error());
	a = d, a.len = 6;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "len > cache_stride");
	a = d, a.len = 0;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "len 0");
	a = d, a.k.rows = 9;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "cache too short");
	a = d, a.seq = 2;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "seq != 1");
	pad[0] = 4;
	EXPECT_EINVAL(&e, op_decode(&e, &d), "attention_decode", "pad > len");
	pad[0] = 0;
	EXPECT_EINVAL(&e, op_decode(&e, NULL), "attention_decode", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- rope (ABI 1.1) ------------------------------------------------------------------- */

/* Pair i of a head (values i and i + rot / 2) turns by the angle
 * positions[r] * inv_freq[i], computed in fp32 as fgcore/compute.h says;
 * cos, sin and the rotation in double.  Values past rot_dim stay exactly. */
static void rope_case(struct env *e, int64_t n, int64_t H, int64_t hd, int64_t rot, int64_t pad,
		      float factor, int32_t maxpos)
{
	int64_t C = H * hd, ld = C + pad, half = rot / 2;
	float *x = f32_new(n, C, ld, true), *x0 = malloc((size_t)(n * ld + 1) * sizeof(float));
	float *inv = malloc((size_t)(half + 1) * sizeof(float));
	double *ref = malloc((size_t)(n * C + 1) * sizeof(double));
	int32_t *pos = malloc((size_t)n * sizeof(int32_t));
	struct fg_rope_args a;
	char what[160];

	EXPECT_TRUE(x0 && inv && ref && pos);
	memcpy(x0, x, (size_t)(n * ld) * sizeof(float));
	/* A Llama-3-like table: base 500000, the low frequencies divided by 8,
	 * a smooth band between, as a scaling would leave it. */
	for (int64_t i = 0; i < half; i++) {
		double f = pow(500000.0, -2.0 * (double)i / (double)rot);
		double t = (double)i / (double)(half > 1 ? half - 1 : 1);

		inv[i] = (float)(t < 0.5 ? f : t < 0.75 ? f * (1 - (t - 0.5) * 3.5) : f / 8);
	}
	for (int64_t r = 0; r < n; r++)
		pos[r] = r == 0 ? maxpos : r == 1 ? 0 : (int32_t)irand((int64_t)maxpos + 1);
	for (int64_t r = 0; r < n; r++)
		for (int64_t c = 0; c < C; c++)
			ref[r * C + c] = x[r * ld + c];
	for (int64_t r = 0; r < n; r++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t i = 0; i < half; i++) {
				float ang = (float)pos[r] * inv[i];
				double cs = cos(ang) * factor, sn = sin(ang) * factor;
				double u = x[r * ld + h * hd + i], v = x[r * ld + h * hd + i + half];

				ref[r * C + h * hd + i] = u * cs - v * sn;
				ref[r * C + h * hd + i + half] = v * cs + u * sn;
			}
	memset(&a, 0, sizeof(a));
	a.x = tview(x, FG_DTYPE_F32, n, C, ld);
	a.positions = pos;
	a.n = n;
	a.heads = H;
	a.head_dim = hd;
	a.rot_dim = rot;
	a.inv_freq = inv;
	a.attn_factor = factor;
	snprintf(what, sizeof(what), "%s: rope n=%lld H=%lld hd=%lld rot=%lld factor=%g maxpos=%d",
		 e->label, (long long)n, (long long)H, (long long)hd, (long long)rot,
		 (double)factor, maxpos);
	EXPECT(op_rope(e, &a) == 0, "%s: %s", what, fg_last_error());
	expect_close(what, x, ld, ref, n, C, e->tol);
	for (int64_t r = 0; r < n; r++)
		for (int64_t h = 0; h < H; h++)
			EXPECT(memcmp(x + r * ld + h * hd + rot, x0 + r * ld + h * hd + rot,
				      (size_t)(hd - rot) * sizeof(float)) == 0,
			       "%s: values past rot_dim changed (row %lld, head %lld)", what,
			       (long long)r, (long long)h);
	free(x), free(x0), free(inv), free(ref), free(pos);
}

START_TEST(test_rope)
{
	static const int64_t shapes[][5] = { /* n, heads, head_dim, rot_dim, ld padding */
		{ 1, 1, 2, 2, 0 }, { 5, 2, 8, 8, 1 }, { 7, 4, 64, 64, 0 }, { 9, 3, 64, 32, 3 },
		{ 33, 8, 128, 128, 0 }, { 3, 2, 6, 4, 2 }, { 4, 5, 10, 0, 0 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_ROPE, FG_DTYPE_F32))
		return;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		rope_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
			  1.0f, 2047);
		rope_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
			  1.3f, 32767);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_rope_invalid)
{
	struct env e;
	float x[64], inv[4] = { 1, 0.5f, 0.25f, 0.125f };
	int32_t pos[4] = { 0, 1, 2, 3 };
	struct fg_rope_args a, g;

	memset(x, 0, sizeof(x));
	if (!env_open_for(&e, _i, FG_OP_ROPE, FG_DTYPE_F32))
		return;
	memset(&g, 0, sizeof(g));
	g.x = tview(x, FG_DTYPE_F32, 4, 16, 16);
	g.positions = pos, g.n = 4, g.heads = 2, g.head_dim = 8, g.rot_dim = 8;
	g.inv_freq = inv, g.attn_factor = 1;
	EXPECT(op_rope(&e, &g) == 0, "%s", fg_last_error());
	a = g, a.rot_dim = 7;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "odd rot_dim");
	a = g, a.rot_dim = 10;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "rot_dim > head_dim");
	a = g, a.heads = 3;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "x cols != heads * head_dim");
	a = g, a.n = 3;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "x rows != n");
	a = g, a.x.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "x f16");
	a = g, a.positions = NULL;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "positions NULL");
	a = g, a.inv_freq = NULL;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "inv_freq NULL");
	a = g, a.attn_factor = INFINITY;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "attn_factor inf");
	a = g, a.heads = -1;
	EXPECT_EINVAL(&e, op_rope(&e, &a), "rope", "negative heads");
	pos[2] = -5;
	EXPECT_EINVAL(&e, op_rope(&e, &g), "rope", "negative position");
	pos[2] = 2;
	inv[1] = NAN;
	EXPECT_EINVAL(&e, op_rope(&e, &g), "rope", "NaN frequency");
	inv[1] = 0.5f;
	EXPECT_EINVAL(&e, op_rope(&e, NULL), "rope", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- ABI 1.1 arguments refused by the core ------------------------------------------------ */

START_TEST(test_v11_invalid)
{
	struct env e;
	float x[64], out[64], mul[64], q[256], k[256], v[256], o[256];
	uint16_t w[64], g16[8], b16[8];
	int32_t pad[2] = { 0, 1 };
	struct fg_linear_args l, la;
	struct fg_layer_norm_args n, na;
	struct fg_attention_args p, pa;

	memset(x, 0, sizeof(x)), memset(mul, 0, sizeof(mul)), memset(w, 0, sizeof(w));
	memset(g16, 0, sizeof(g16)), memset(b16, 0, sizeof(b16));
	memset(q, 0, sizeof(q)), memset(k, 0, sizeof(k)), memset(v, 0, sizeof(v));
	if (!env_open_for(&e, _i, FG_OP_LINEAR_MUL, FG_DTYPE_F16))
		return;
	/* linear [4, 8] x [6, 8]ᵀ, SiLU, gated */
	memset(&l, 0, sizeof(l));
	l.x = tview(x, FG_DTYPE_F32, 4, 8, 8);
	l.w = tview(w, FG_DTYPE_F16, 6, 8, 8);
	l.out = tview(out, FG_DTYPE_F32, 4, 6, 6);
	l.mul = tview(mul, FG_DTYPE_F32, 4, 6, 6);
	l.act = FG_ACT_SILU;
	EXPECT(op_linear(&e, &l) == 0, "%s", fg_last_error());
	la = l, la.mul.cols = 5;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "mul shape");
	la = l, la.mul.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "mul f16");
	la = l, la.mul = tview(out + 2, FG_DTYPE_F32, 4, 6, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "mul overlaps out");
	la = l, la.mul = la.out;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "mul is out");
	la = l, la.mul.ld = 4;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "mul ld < cols");
	la = l, la.act = (enum fg_activation)(FG_ACT_GELU_TANH + 1); /* (3 is 1.12's GELU) */
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "an unknown activation");
	/* norms */
	memset(&n, 0, sizeof(n));
	n.x = tview(x, FG_DTYPE_F32, 4, 8, 8);
	n.gamma = tview(g16, FG_DTYPE_F16, 1, 8, 8);
	n.eps = 1e-6f;
	n.out = tview(out, FG_DTYPE_F32, 4, 8, 8);
	n.kind = FG_NORM_RMS;
	EXPECT(op_norm(&e, &n) == 0, "%s", fg_last_error());
	na = n, na.beta = tview(b16, FG_DTYPE_F16, 1, 8, 8);
	EXPECT_EINVAL(&e, op_norm(&e, &na), "rms_norm", "RMS norm with beta");
	na = n, na.gamma.cols = 7;
	EXPECT_EINVAL(&e, op_norm(&e, &na), "rms_norm", "RMS gamma shape");
	na = n, na.out = tview(x + 1, FG_DTYPE_F32, 4, 8, 8);
	EXPECT_EINVAL(&e, op_norm(&e, &na), "rms_norm", "RMS out partly overlaps x");
	na = n, na.kind = (enum fg_norm_kind)5;
	EXPECT_EINVAL(&e, op_norm(&e, &na), "layer_norm", "norm kind 5");
	na = n, na.kind = FG_NORM_LAYER; /* no beta: fine from ABI 1.1 */
	EXPECT(op_norm(&e, &na) == 0, "%s", fg_last_error());
	/* grouped-query prefill: batch 2, seq 4, heads 4 of 2, kv_heads 2 */
	memset(&p, 0, sizeof(p));
	p.q = tview(q, FG_DTYPE_F32, 8, 8, 8);
	p.k = tview(k, FG_DTYPE_F32, 8, 4, 4);
	p.v = tview(v, FG_DTYPE_F32, 8, 4, 4);
	p.out = tview(o, FG_DTYPE_F32, 8, 8, 8);
	p.batch = 2, p.seq = 4, p.heads = 4, p.kv_heads = 2, p.head_dim = 2, p.scale = 0.5f;
	p.pad = pad;
	EXPECT(op_prefill(&e, &p) == 0, "%s", fg_last_error());
	pa = p, pa.kv_heads = 3;
	EXPECT_EINVAL(&e, op_prefill(&e, &pa), "attention_prefill", "heads % kv_heads");
	pa = p, pa.kv_heads = 8;
	EXPECT_EINVAL(&e, op_prefill(&e, &pa), "attention_prefill", "kv_heads > heads");
	pa = p, pa.kv_heads = -2;
	EXPECT_EINVAL(&e, op_prefill(&e, &pa), "attention_prefill", "negative kv_heads");
	pa = p, pa.kv_heads = 0;
	EXPECT_EINVAL(&e, op_prefill(&e, &pa), "attention_prefill", "k cols for all heads");
	pa = p, pa.v.cols = 8, pa.v.ld = 8;
	EXPECT_EINVAL(&e, op_prefill(&e, &pa), "attention_prefill", "v cols");
	/* decode: batch 2, len 3, cache_stride 4 */
	pa = p, pa.q.rows = pa.out.rows = 2, pa.seq = 1, pa.len = 3, pa.cache_stride = 4;
	EXPECT(op_decode(&e, &pa) == 0, "%s", fg_last_error());
	pa.kv_heads = 3;
	EXPECT_EINVAL(&e, op_decode(&e, &pa), "attention_decode", "decode heads % kv_heads");
	env_close(&e);
}
END_TEST

/* A Q4_ROWS weight on a backend whose `supports` says no: -ENOTSUP, one line. */
START_TEST(test_unsupported)
{
	struct env e;
	float x[16], out[16];
	uint8_t wq[1024];
	struct fg_linear_args l;

	env_open(&e, _i);
	memset(x, 0, sizeof(x)), memset(wq, 0, sizeof(wq));
	memset(&l, 0, sizeof(l));
	l.x = tview(x, FG_DTYPE_F32, 2, 8, 8);
	l.w = tview(wq, FG_DTYPE_Q4_ROWS, 6, 8, 8);
	l.out = tview(out, FG_DTYPE_F32, 2, 6, 6);
	if (supports(&e, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS))
		EXPECT(op_linear(&e, &l) == 0, "%s", fg_last_error());
	else
		EXPECT_REFUSED(&e, op_linear(&e, &l), -ENOTSUP, "linear", "q4 weight");
	env_close(&e);
}
END_TEST

/* ---- KV append ----------------------------------------------------------------------- */

START_TEST(test_kv_append)
{
	static const int64_t shapes[][5] = { /* batch, n, start, cache_stride, cols */
		{ 1, 1, 0, 1, 1 }, { 3, 2, 4, 9, 12 }, { 2, 5, 0, 5, 64 }, { 4, 1, 7, 8, 33 },
		{ 2, 0, 3, 4, 8 },
	};
	struct env e;

	env_open(&e, _i);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t B = shapes[s][0], n = shapes[s][1], start = shapes[s][2];
		int64_t stride = shapes[s][3], C = shapes[s][4];
		float *src = f32_new(B * n, C, C + 1, true), *cache = f32_new(B * stride, C, C + 2, true);
		float *orig = malloc((size_t)(B * stride * (C + 2) + 1) * sizeof(*orig));
		struct fg_kv_append_args a;

		EXPECT_TRUE(orig);
		memcpy(orig, cache, (size_t)(B * stride * (C + 2)) * sizeof(*orig));
		a.src = tview(src, FG_DTYPE_F32, B * n, C, C + 1);
		a.cache = tview(cache, FG_DTYPE_F32, B * stride, C, C + 2);
		a.batch = B;
		a.n = n;
		a.start = start;
		a.cache_stride = stride;
		EXPECT(op_kv_append(&e, &a) == 0, "%s", fg_last_error());
		for (int64_t b = 0; b < B; b++) {
			for (int64_t t = 0; t < stride; t++) {
				const float *got = cache + (b * stride + t) * (C + 2);
				bool in = t >= start && t < start + n;
				const float *want = in ? src + (b * n + t - start) * (C + 1)
						       : orig + (b * stride + t) * (C + 2);

				EXPECT(memcmp(got, want, (size_t)C * sizeof(float)) == 0,
					      "kv_append: cache row %lld of batch %lld is wrong",
					      (long long)t, (long long)b);
				EXPECT_TRUE(got[C] == SENTINEL && got[C + 1] == SENTINEL);
			}
		}
		free(src), free(cache), free(orig);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_kv_append_invalid)
{
	struct env e;
	float src[64], cache[256];
	struct fg_kv_append_args a, g;

	memset(src, 0, sizeof(src));
	env_open(&e, _i);
	memset(&g, 0, sizeof(g));
	g.src = tview(src, FG_DTYPE_F32, 4, 8, 8);
	g.cache = tview(cache, FG_DTYPE_F32, 12, 8, 8);
	g.batch = 2, g.n = 2, g.start = 3, g.cache_stride = 6;
	EXPECT(op_kv_append(&e, &g) == 0, "%s", fg_last_error());
	a = g, a.start = 5;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "start + n > cache_stride");
	a = g, a.start = -1;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "negative start");
	a = g, a.cache.rows = 11;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "cache too short");
	a = g, a.cache.cols = 7;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "cols mismatch");
	a = g, a.src.rows = 3;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "src rows");
	a = g, a.cache.dtype = FG_DTYPE_I32;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "cache i32");
	a = g, a.batch = INT64_MAX / 3, a.cache_stride = 6;
	EXPECT_EINVAL(&e, op_kv_append(&e, &a), "kv_append", "batch overflow");
	EXPECT_EINVAL(&e, op_kv_append(&e, NULL), "kv_append", "NULL args");
	env_close(&e);
}
END_TEST

/* The core's defaults for backends without streams: synchronous no-ops. */
START_TEST(test_streams)
{
	struct env e;
	void *s = NULL, *ev = NULL;

	env_open(&e, _i);
	ck_assert_int_eq(fg_backend_stream_create(&e.b, &s), 0);
	ck_assert_int_eq(fg_backend_event_create(&e.b, &ev), 0);
	ck_assert_ptr_nonnull(ev);
	ck_assert_int_eq(fg_backend_event_record(&e.b, ev, s), 0);
	ck_assert_int_eq(fg_backend_stream_wait(&e.b, NULL, ev), 0);
	ck_assert_int_eq(fg_backend_stream_sync(&e.b, s), 0);
	ck_assert_int_eq(fg_backend_stream_sync(&e.b, NULL), 0);
	fg_backend_event_destroy(&e.b, ev);
	fg_backend_stream_destroy(&e.b, s);
	env_close(&e);
}
END_TEST

START_TEST(test_cpu_blas_present)
{
	EXPECT(have_cpu_blas, "the reference compute plugin cpu_blas is missing from "
		      "FGCORE_PLUGIN_PATH");
}
END_TEST

/* ---- cpu_blas: fp16 and 4-bit KV cache, 4-bit weights ------------------------------------
 * cpu_blas also accepts (its own extension of the interface, for CPU attention
 * delegation and 4-bit caches/weights): attention_decode and kv_append with
 * every tensor fp16, or with a FG_DTYPE_Q4_COLS cache and fp32 or fp16 q/out/src;
 * linear with a FG_DTYPE_Q4_ROWS weight.  The references decode the 4-bit
 * bytes themselves (q4_value, from fgcore/q4.h's rules); encoded tensors come
 * from the int4_group64 codec plugin, and kv_append into a 4-bit cache must
 * give the codec's bytes exactly.  Tolerance for fp16 outputs: TOL_F16_OUT
 * (each output rounded once to fp16, 2^-11 relative, after fp32 math on
 * values in [-1, 1]). */

#define TOL_F16_OUT 2e-3

/* Element (r, c) of a 4-bit [rows, cols] tensor, decoded in double. */
static double q4_value(const uint8_t *buf, int64_t rows, int64_t cols, int group_dim,
		       int64_t r, int64_t c)
{
	uint64_t e = (uint64_t)(r * cols + c), g;
	const uint8_t *p = buf + fg_q4_data_bytes((uint64_t)rows, (uint64_t)cols);
	unsigned q = e % 2 ? buf[e / 2] & 15u : buf[e / 2] >> 4;

	if (group_dim == 0)
		g = (uint64_t)(r / 64 * cols + c);
	else
		g = (uint64_t)(r * ((cols + 63) / 64) + c / 64);
	p += 4 * g;
	return q * h2d((uint16_t)(p[0] | p[1] << 8)) + h2d((uint16_t)(p[2] | p[3] << 8));
}

static void codec_open_int4(struct fg_codec *cd)
{
	struct fg_plugin_handle ph;

	EXPECT(fg_plugin_load("int4_group64", FG_PLUGIN_CODEC, &ph) == 0, "int4_group64: %s",
	       fg_last_error());
	EXPECT(fg_codec_open(cd, &ph) == 0, "int4_group64: %s", fg_last_error());
}

/* The codec's encoding of a dense fp32 [rows, cols] (malloc'ed, *size bytes). */
static uint8_t *q4_encode(struct fg_codec *cd, const float *x, int64_t rows, int64_t cols,
			  int group_dim, size_t *size)
{
	struct fg_codec_shape sh = { (uint64_t)rows, (uint64_t)cols, group_dim };
	size_t n = (size_t)fg_codec_encoded_size(cd, &sh);
	uint8_t *b;

	EXPECT(n == fg_q4_bytes((uint64_t)rows, (uint64_t)cols, group_dim), "q4 size");
	b = malloc(n + 1);
	EXPECT_TRUE(b);
	EXPECT(fg_codec_encode_f32(cd, &sh, x, b) == 0, "encode: %s", fg_last_error());
	*size = n;
	return b;
}

/* ---- the fp8 cache (compute 1.16, FG_DTYPE_F8_COLS) --------------------------------
 * Each group of 64 values of a row is encoded as the fp8_e4m3_rows codec
 * encodes a one-row tensor (fgcore/f8.h: the cache layout's rule); the
 * references decode the bytes themselves (f8c_value), and kv_append into an
 * fp8 cache must give those bytes exactly. */

static void codec_open_fp8(struct fg_codec *cd)
{
	struct fg_plugin_handle ph;

	EXPECT(fg_plugin_load("fp8_e4m3_rows", FG_PLUGIN_CODEC, &ph) == 0, "fp8_e4m3_rows: %s",
	       fg_last_error());
	EXPECT(fg_codec_open(cd, &ph) == 0, "fp8_e4m3_rows: %s", fg_last_error());
}

/* The F8_COLS encoding of a dense fp32 [rows, cols], group by group through
 * the codec (malloc'ed, *size bytes; the layout by hand: codes row-major
 * padded to 64, then a 4-byte scale a group, row-major). */
static uint8_t *f8c_encode(struct fg_codec *cd, const float *x, int64_t rows, int64_t cols,
			   size_t *size)
{
	uint64_t gc = (uint64_t)(cols + 63) / 64, data = ((uint64_t)(rows * cols) + 63) / 64 * 64;
	size_t n = (size_t)(data + 4 * (uint64_t)rows * gc);
	uint8_t *b = calloc(1, n + 1), one[64 + 4];

	EXPECT_TRUE(b);
	EXPECT(n == fg_f8c_bytes((uint64_t)rows, (uint64_t)cols), "f8 cache size");
	for (int64_t r = 0; r < rows; r++)
		for (uint64_t g = 0; g < gc; g++) {
			int64_t c0 = (int64_t)g * 64, w = cols - c0 < 64 ? cols - c0 : 64;
			struct fg_codec_shape sh = { 1, (uint64_t)w, 1 };

			EXPECT(fg_codec_encoded_size(cd, &sh) == 64 + 4, "one-row fp8 size");
			EXPECT(fg_codec_encode_f32(cd, &sh, x + r * cols + c0, one) == 0, "encode: %s",
			       fg_last_error());
			memcpy(b + r * cols + c0, one, (size_t)w);
			memcpy(b + data + 4 * ((uint64_t)r * gc + g), one + 64, 4);
		}
	*size = n;
	return b;
}

/* Element (r, c) of an F8_COLS [rows, cols] tensor, decoded in double: the
 * E4M3 code's value from its fields times its group's little-endian scale. */
static double f8c_value(const uint8_t *buf, int64_t rows, int64_t cols, int64_t r, int64_t c)
{
	uint64_t gc = (uint64_t)(cols + 63) / 64, data = ((uint64_t)(rows * cols) + 63) / 64 * 64;
	const uint8_t *s = buf + data + 4 * ((uint64_t)r * gc + (uint64_t)c / 64);
	uint32_t u = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 |
		     (uint32_t)s[3] << 24;
	unsigned code = buf[r * cols + c], e = (code >> 3) & 15u, m = code & 7u;
	double v = e ? ldexp(8.0 + m, (int)e - 10) : ldexp(m, -9);
	float scale;

	memcpy(&scale, &u, 4);
	if ((code & 0x7fu) == 0x7fu)
		return NAN;
	return (code & 0x80u ? -v : v) * scale;
}

/* Random values with the encoder's special cases mixed in. */
static float special_value(void)
{
	static const float sp[] = { NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 70000.0f, -1e6f,
				    1e-6f, 3.0f };

	return rnd() % 5 == 0 ? sp[irand(sizeof(sp) / sizeof(sp[0]))] : urand() * 2;
}

/* cd: int4_group64 for a Q4_COLS cache, fp8_e4m3_rows for F8_COLS. */
static void kv_append_enc_case(struct env *e, struct fg_codec *cd, enum fg_dtype cdt, int64_t B,
			       int64_t n, int64_t start, int64_t stride, int64_t C, bool f16src)
{
	int64_t R = B * stride + 2; /* the view covers rows past batch * cache_stride */
	float *full = malloc((size_t)(R * C + 1) * sizeof(float));
	float *src = malloc((size_t)(B * n * C + 1) * sizeof(float));
	uint16_t *src16 = malloc((size_t)(B * n * C + 1) * sizeof(uint16_t));
	uint8_t *cache, *want;
	size_t sz, wsz;
	struct fg_kv_append_args a;
	char what[160];

	EXPECT_TRUE(full && src && src16);
	for (int64_t i = 0; i < R * C; i++)
		full[i] = urand();
	for (int64_t i = 0; i < B * n * C; i++) {
		src[i] = (i / C) % 3 == 2 ? 0.25f : special_value(); /* some constant rows */
		if (f16src) {
			src16[i] = fg_float_to_half(src[i]);
			src[i] = fg_half_to_float(src16[i]);
		}
	}
	cache = cdt == FG_DTYPE_F8_COLS ? f8c_encode(cd, full, R, C, &sz)
				       : q4_encode(cd, full, R, C, 1, &sz);
	for (int64_t b = 0; b < B; b++)
		for (int64_t i = 0; i < n; i++)
			memcpy(full + (b * stride + start + i) * C, src + (b * n + i) * C,
			       (size_t)C * sizeof(float));
	want = cdt == FG_DTYPE_F8_COLS ? f8c_encode(cd, full, R, C, &wsz)
				       : q4_encode(cd, full, R, C, 1, &wsz);
	memset(&a, 0, sizeof(a));
	a.src = f16src ? tview(src16, FG_DTYPE_F16, B * n, C, C) : tview(src, FG_DTYPE_F32, B * n, C, C);
	a.cache = tview(cache, cdt, R, C, C);
	a.batch = B, a.n = n, a.start = start, a.cache_stride = stride;
	snprintf(what, sizeof(what), "%s: kv_append %s B=%lld n=%lld start=%lld stride=%lld C=%lld %s",
		 e->label, fg_dtype_name(cdt), (long long)B, (long long)n, (long long)start,
		 (long long)stride, (long long)C, f16src ? "f16" : "f32");
	EXPECT(op_kv_append(e, &a) == 0, "%s: %s", what, fg_last_error());
	for (size_t i = 0; i < sz; i++)
		EXPECT(cache[i] == want[i], "%s: byte %zu of %zu is %#x, the codec wrote %#x",
		       what, i, sz, cache[i], want[i]);
	free(full), free(src), free(src16), free(cache), free(want);
}

START_TEST(test_kv_append_q4)
{
	static const int64_t shapes[][5] = { /* batch, n, start, cache_stride, cols */
		{ 1, 1, 0, 1, 1 }, { 3, 2, 4, 9, 33 }, { 2, 5, 0, 5, 64 }, { 4, 1, 7, 8, 129 },
		{ 2, 3, 1, 6, 7 }, { 1, 2, 2, 4, 200 },
		/* rows enough to spread over threads (chunks of 1 + 16384 / cols rows):
		 * even widths in parallel, odd ones (bytes shared between rows) on one */
		{ 3, 70, 5, 80, 256 }, { 2, 300, 0, 301, 72 }, { 4, 150, 3, 160, 99 },
	};
	struct env e;
	struct fg_codec cd;

	if (!env_open_for(&e, _i, FG_OP_KV_APPEND, FG_DTYPE_Q4_COLS))
		return;
	codec_open_int4(&cd);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int f = 0; f < 2; f++)
			if (!f || supports(&e, FG_OP_KV_APPEND, FG_DTYPE_F16))
				kv_append_enc_case(&e, &cd, FG_DTYPE_Q4_COLS, shapes[s][0],
						   shapes[s][1], shapes[s][2], shapes[s][3],
						   shapes[s][4], f);
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

/* kv_append into an fp8 cache (compute 1.16): the bytes of each group
 * encoded as the fp8_e4m3_rows codec encodes a row, with the encoder's
 * special values (NaN, infinities, values past 65504) and widths off 64. */
START_TEST(test_kv_append_f8)
{
	static const int64_t shapes[][5] = { /* batch, n, start, cache_stride, cols */
		{ 1, 1, 0, 1, 1 }, { 3, 2, 4, 9, 33 }, { 2, 5, 0, 5, 64 }, { 4, 1, 7, 8, 129 },
		{ 2, 3, 1, 6, 7 }, { 1, 2, 2, 4, 200 }, { 3, 70, 5, 80, 256 }, { 2, 300, 0, 301, 72 },
	};
	struct env e;
	struct fg_codec cd;

	if (!env_open_for(&e, _i, FG_OP_KV_APPEND, FG_DTYPE_F8_COLS))
		return;
	codec_open_fp8(&cd);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int f = 0; f < 2; f++)
			if (!f || supports(&e, FG_OP_KV_APPEND, FG_DTYPE_F16))
				kv_append_enc_case(&e, &cd, FG_DTYPE_F8_COLS, shapes[s][0],
						   shapes[s][1], shapes[s][2], shapes[s][3],
						   shapes[s][4], f);
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

START_TEST(test_kv_append_f16)
{
	int64_t B = 3, n = 2, start = 1, stride = 5, C = 13;
	uint16_t *src = f16_new(B * n, C, C + 1, 1), *cache = f16_new(B * stride, C, C + 2, 1);
	uint16_t *orig = malloc((size_t)(B * stride * (C + 2) + 1) * sizeof(*orig));
	struct fg_kv_append_args a;
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_KV_APPEND, FG_DTYPE_F16)) {
		free(src), free(cache), free(orig);
		return;
	}
	EXPECT_TRUE(orig);
	memcpy(orig, cache, (size_t)(B * stride * (C + 2)) * sizeof(*orig));
	a.src = tview(src, FG_DTYPE_F16, B * n, C, C + 1);
	a.cache = tview(cache, FG_DTYPE_F16, B * stride, C, C + 2);
	a.batch = B, a.n = n, a.start = start, a.cache_stride = stride;
	EXPECT(op_kv_append(&e, &a) == 0, "%s", fg_last_error());
	for (int64_t b = 0; b < B; b++)
		for (int64_t t = 0; t < stride; t++) {
			bool in = t >= start && t < start + n;
			const uint16_t *want = in ? src + (b * n + t - start) * (C + 1) :
						    orig + (b * stride + t) * (C + 2);

			EXPECT(memcmp(cache + (b * stride + t) * (C + 2), want,
				      (size_t)(C + 2 - (in ? 2 : 0)) * 2) == 0,
			       "kv_append f16: row %lld of batch %lld", (long long)t, (long long)b);
		}
	free(src), free(cache), free(orig);
	env_close(&e);
}
END_TEST

/* softmax(scale q·k_j) v_j over j in [lo, hi], all double, rows C apart. */
static void attend_ref_d(const double *q, const double *k, const double *v, int64_t ld,
			 int64_t lo, int64_t hi, int64_t hd, double scale, double *out)
{
	double mx = -INFINITY, sum = 0, *s;

	for (int64_t d = 0; d < hd; d++)
		out[d] = 0;
	if (lo > hi)
		return;
	s = malloc((size_t)(hi - lo + 1) * sizeof(*s));
	EXPECT_TRUE(s);
	for (int64_t j = lo; j <= hi; j++) {
		double t = 0;

		for (int64_t d = 0; d < hd; d++)
			t += q[d] * k[j * ld + d];
		s[j - lo] = capped(t * scale);
		mx = fmax(mx, s[j - lo]);
	}
	for (int64_t j = lo; j <= hi; j++) {
		s[j - lo] = exp(s[j - lo] - mx);
		sum += s[j - lo];
	}
	for (int64_t j = lo; j <= hi; j++)
		for (int64_t d = 0; d < hd; d++)
			out[d] += s[j - lo] / sum * v[j * ld + d];
	free(s);
}

/* q of decode_mixed_case: urand() times q_gain (1: scores within about ±1;
 * 8: softmax weights spread over orders of magnitude). */
static double q_gain = 1;

/* act: F32 or F16 (q, out); cache: F16, Q4_COLS or F8_COLS (k, v); cd: the
 * codec of an encoded cache (int4_group64, fp8_e4m3_rows). */
/* wrap > 0 (ABI 1.9): the cache a ring of `stride` rows, the call's positions
 * wrap more: len + wrap of them, each row's pad + wrap, position j at row
 * j % stride; the reference reads the rows in position order. */
static void decode_mixed_case(struct env *e, struct fg_codec *cd, int64_t B, int64_t H,
			      int64_t KVH, int64_t hd, int64_t len, int64_t stride, int padkind,
			      enum fg_dtype act, enum fg_dtype cache, bool out_is_q, int64_t wrap)
{
	int64_t C = H * hd, R = B * stride + 1, ldq = C + 1, ldo = out_is_q ? ldq : C + 3;
	int64_t G = KVH ? H / KVH : 1, KC = C / G; /* the cache: [R, KC] */
	int64_t ldk = cache == FG_DTYPE_F16 ? KC + 2 : KC;
	double scale = 0.7 / sqrt((double)hd);
	double *qd = malloc((size_t)(B * C) * sizeof(double)), *kd, *vd, *ref;
	float *kf = malloc((size_t)(R * KC) * sizeof(float)), *vf;
	void *q, *k, *v, *out;
	int32_t *pad = malloc((size_t)B * sizeof(*pad));
	struct fg_attention_args a;
	size_t sz;
	char what[200];

	kd = malloc((size_t)(R * KC) * sizeof(double));
	vd = malloc((size_t)(R * KC) * sizeof(double));
	ref = malloc((size_t)(B * C) * sizeof(double));
	vf = malloc((size_t)(R * KC) * sizeof(float));
	EXPECT_TRUE(qd && kd && vd && ref && kf && vf && pad);
	for (int64_t i = 0; i < R * KC; i++)
		kf[i] = urand(), vf[i] = urand();
	/* q and out: [B, C] with ld ldq / ldo; padding columns hold sentinels */
	if (act == FG_DTYPE_F32) {
		float *qq = f32_new(B, C, ldq, true);

		for (int64_t b = 0; b < B; b++)
			for (int64_t c = 0; c < C; c++)
				qd[b * C + c] = qq[b * ldq + c] *= (float)q_gain;
		q = qq;
		out = out_is_q ? q : f32_new(B, C, ldo, false);
	} else {
		uint16_t *qq = f16_new(B, C, ldq, (float)q_gain);

		for (int64_t b = 0; b < B; b++)
			for (int64_t c = 0; c < C; c++)
				qd[b * C + c] = h2d(qq[b * ldq + c]);
		q = qq;
		out = out_is_q ? q : f16_new(B, C, ldo, 0);
	}
	if (cache == FG_DTYPE_F16) {
		uint16_t *kk = malloc((size_t)(R * ldk + 1) * 2), *vv = malloc((size_t)(R * ldk + 1) * 2);

		EXPECT_TRUE(kk && vv);
		for (int64_t r = 0; r < R; r++)
			for (int64_t c = 0; c < ldk; c++) {
				kk[r * ldk + c] = c < KC ? fg_float_to_half(kf[r * KC + c]) : 0x7e00;
				vv[r * ldk + c] = c < KC ? fg_float_to_half(vf[r * KC + c]) : 0x7e00;
				if (c < KC) {
					kd[r * KC + c] = h2d(kk[r * ldk + c]);
					vd[r * KC + c] = h2d(vv[r * ldk + c]);
				}
			}
		k = kk, v = vv;
	} else if (cache == FG_DTYPE_F8_COLS) {
		uint8_t *kk = f8c_encode(cd, kf, R, KC, &sz);
		uint8_t *vv = f8c_encode(cd, vf, R, KC, &sz);

		for (int64_t r = 0; r < R; r++)
			for (int64_t c = 0; c < KC; c++) {
				kd[r * KC + c] = f8c_value(kk, R, KC, r, c);
				vd[r * KC + c] = f8c_value(vv, R, KC, r, c);
			}
		k = kk, v = vv;
	} else {
		uint8_t *kk = q4_encode(cd, kf, R, KC, 1, &sz);
		uint8_t *vv = q4_encode(cd, vf, R, KC, 1, &sz);

		for (int64_t r = 0; r < R; r++)
			for (int64_t c = 0; c < KC; c++) {
				kd[r * KC + c] = q4_value(kk, R, KC, 1, r, c);
				vd[r * KC + c] = q4_value(vv, R, KC, 1, r, c);
			}
		k = kk, v = vv;
	}
	for (int64_t b = 0; b < B; b++)
		pad[b] = decode_pad(padkind, b, len);
	/* in position order: position p of row b at row b * stride + (p + wrap) % stride */
	double *kp = kd, *vp = vd;
	int32_t *wpad = pad;
	if (wrap) {
		kp = malloc((size_t)(B * stride * KC) * sizeof(double));
		vp = malloc((size_t)(B * stride * KC) * sizeof(double));
		wpad = malloc((size_t)B * sizeof(*wpad));
		EXPECT_TRUE(kp && vp && wpad);
		for (int64_t b = 0; b < B; b++) {
			wpad[b] = (int32_t)(pad[b] + wrap);
			for (int64_t p = 0; p < stride; p++) {
				int64_t from = (b * stride + (p + wrap) % stride) * KC;
				memcpy(kp + (b * stride + p) * KC, kd + from, (size_t)KC * sizeof(double));
				memcpy(vp + (b * stride + p) * KC, vd + from, (size_t)KC * sizeof(double));
			}
		}
	}
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			attend_ref_d(qd + b * C + h * hd, kp + b * stride * KC + h / G * hd,
				     vp + b * stride * KC + h / G * hd, KC,
				     first_key(pad[b], len - 1), len - 1, hd, (float)scale,
				     ref + b * C + h * hd);
	memset(&a, 0, sizeof(a));
	a.q = tview(q, act, B, C, ldq);
	a.out = tview(out, act, B, C, ldo);
	a.k = tview(k, cache, R, KC, ldk);
	a.v = tview(v, cache, R, KC, ldk);
	a.batch = B, a.seq = 1, a.len = len + wrap, a.cache_stride = stride;
	a.heads = H, a.kv_heads = KVH, a.head_dim = hd, a.scale = (float)scale, a.pad = wpad;
	a.ring = wrap ? stride : 0;
	a.window = window;
	a.softcap = (float)score_cap;
	snprintf(what, sizeof(what), "%s: attention_decode %s/%s B=%lld H=%lld KVH=%lld hd=%lld "
		 "len=%lld stride=%lld pad=%d%s wrap=%lld window=%lld softcap=%g", e->label,
		 act == FG_DTYPE_F16 ? "f16" : "f32", fg_dtype_name(cache),
		 (long long)B, (long long)H, (long long)KVH, (long long)hd, (long long)len,
		 (long long)stride, padkind, out_is_q ? " out=q" : "", (long long)wrap,
		 (long long)window, score_cap);
	EXPECT(op_decode(e, &a) == 0, "%s: %s", what,
	       fg_last_error());
	if (act == FG_DTYPE_F32) {
		expect_close(what, out, ldo, ref, B, C, TOL_F32);
		expect_masked_zero(what, out, ldo, pad, B, C, len);
	} else {
		float *g = malloc((size_t)(B * ldo) * sizeof(float));
		const uint16_t *o = out;

		EXPECT_TRUE(g);
		for (int64_t i = 0; i < B * ldo; i++)
			g[i] = i % ldo < C ? fg_half_to_float(o[i]) : SENTINEL;
		for (int64_t b = 0; b < B; b++)
			for (int64_t c = C; c < ldo; c++)
				EXPECT(o[b * ldo + c] == 0x7e00, "%s: padding overwritten", what);
		expect_close(what, g, ldo, ref, B, C, TOL_F16_OUT);
		expect_masked_zero(what, g, ldo, pad, B, C, len);
		free(g);
	}
	if (!out_is_q)
		free(out);
	if (wrap)
		free(kp), free(vp), free(wpad);
	free(q), free(k), free(v), free(qd), free(kd), free(vd), free(kf), free(vf);
	free(ref), free(pad);
}

START_TEST(test_attention_decode_mixed)
{
	static const int64_t shapes[][5] = { /* batch, heads, head_dim, len, cache_stride */
		{ 1, 1, 1, 1, 1 }, { 2, 3, 8, 5, 9 }, { 3, 2, 48, 17, 20 }, { 4, 2, 64, 33, 40 },
		{ 1, 3, 7, 70, 70 }, { 2, 1, 100, 9, 12 },
	};
	static const enum fg_dtype kinds[][2] = {
		{ FG_DTYPE_F16, FG_DTYPE_F16 },	    { FG_DTYPE_F32, FG_DTYPE_Q4_COLS },
		{ FG_DTYPE_F16, FG_DTYPE_Q4_COLS }, { FG_DTYPE_F32, FG_DTYPE_F8_COLS },
		{ FG_DTYPE_F16, FG_DTYPE_F8_COLS },
	};
	/* ABI 1.1, grouped-query: batch, heads, kv_heads, head_dim, len, cache_stride */
	static const int64_t gqa[][6] = {
		{ 1, 2, 1, 1, 1, 1 }, { 2, 6, 3, 8, 5, 9 }, { 3, 4, 2, 48, 17, 20 },
		{ 2, 8, 2, 64, 33, 40 }, { 1, 6, 1, 7, 70, 70 },
		/* 8 query heads a key/value head, heads of two 4-bit groups; a head
		 * of 72 straddling a group boundary; one row for several threads */
		{ 2, 16, 2, 128, 150, 160 }, { 3, 6, 2, 72, 40, 41 }, { 1, 8, 1, 40, 90, 90 },
	};
	struct env e;
	struct fg_codec q4, f8;

	env_open(&e, _i);
	codec_open_int4(&q4);
	codec_open_fp8(&f8);
	for (size_t t = 0; t < sizeof(kinds) / sizeof(kinds[0]); t++) {
		enum fg_dtype act = kinds[t][0], cache = kinds[t][1];
		struct fg_codec *cd = cache == FG_DTYPE_F8_COLS ? &f8 : &q4;

		/* fp16 q/out on an fp32 backend: delegated attention, when it runs it */
		if ((act != e.b.info.act_dtype && !supports(&e, FG_OP_ATTENTION_DECODE, act)) ||
		    !supports(&e, FG_OP_ATTENTION_DECODE, cache)) {
			EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no decode %s/%s",
			       fg_dtype_name(act), fg_dtype_name(cache));
			continue;
		}
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int p = 0; p < PAD_KINDS; p++)
				decode_mixed_case(&e, cd, shapes[s][0], shapes[s][1], 0,
						  shapes[s][2], shapes[s][3], shapes[s][4], p, act,
						  cache, false, 0);
		decode_mixed_case(&e, cd, 3, 2, 0, 8, 6, 8, PAD_RANDOM, act, cache, true, 0);
		/* ABI 1.9: the cache a ring, positions wrapped once and more */
		for (size_t s = 0; supports(&e, FG_OP_ATTENTION_RING, cache) &&
				   s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int p = 0; p < PAD_KINDS; p++)
				decode_mixed_case(&e, cd, shapes[s][0], shapes[s][1], 0,
						  shapes[s][2], shapes[s][3], shapes[s][4], p, act,
						  cache, false, p % 2 ? 3 * shapes[s][4] - 1 : shapes[s][4] + 2);
		EXPECT(!conf_is_cpu_blas(_i) || supports(&e, FG_OP_ATTENTION_RING, cache),
		       "cpu_blas: no ring over %s", fg_dtype_name(cache));
		if (!supports(&e, FG_OP_ATTENTION_GQA, cache)) {
			EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no GQA over %s", fg_dtype_name(cache));
			continue;
		}
		for (size_t s = 0; s < sizeof(gqa) / sizeof(gqa[0]); s++)
			for (int p = 0; p < PAD_KINDS; p++)
				decode_mixed_case(&e, cd, gqa[s][0], gqa[s][1], gqa[s][2], gqa[s][3],
						  gqa[s][4], gqa[s][5], p, act, cache, false, 0);
		decode_mixed_case(&e, cd, 3, 4, 2, 8, 6, 8, PAD_RANDOM, act, cache, true, 0);
		for (size_t s = 0; supports(&e, FG_OP_ATTENTION_RING, cache) &&
				   s < sizeof(gqa) / sizeof(gqa[0]); s++)
			decode_mixed_case(&e, cd, gqa[s][0], gqa[s][1], gqa[s][2], gqa[s][3],
					  gqa[s][4], gqa[s][5], PAD_RANDOM, act, cache, false,
					  2 * gqa[s][5] + 1);
	}
	fg_codec_close(&q4);
	fg_codec_close(&f8);
	env_close(&e);
}
END_TEST

/* Decode over a 4-bit cache at the shapes of cpu_blas's integer kernels'
 * edges (plugins/compute/cpu_blas/attention_q4.c): heads of 64, 80, 128 and
 * 256 columns (80: groups of 64 straddle heads, segments of 48, 32, 16),
 * 8 query heads a key/value head, columns long enough for many blocks of
 * 16 positions and a length that is not a multiple of 16, softmax weights
 * spread over orders of magnitude (q_gain 8: each block's weights rounded
 * with its own scale), rings; against the double reference. */
START_TEST(test_attention_decode_q4)
{
	static const int64_t shapes[][6] = { /* batch, heads, kv_heads, head_dim, len, stride */
		{ 2, 4, 0, 64, 37, 40 },   { 2, 4, 0, 80, 50, 52 },   { 1, 3, 0, 128, 33, 33 },
		{ 2, 2, 0, 256, 21, 24 },  { 2, 16, 2, 80, 45, 47 },  { 1, 16, 2, 64, 70, 70 },
		{ 3, 8, 1, 128, 19, 32 },  { 1, 8, 1, 256, 40, 40 },  { 2, 2, 1, 64, 1500, 1501 },
		{ 1, 8, 2, 128, 1111, 1200 },
	};
	static const enum fg_dtype acts[] = { FG_DTYPE_F32, FG_DTYPE_F16 };
	struct env e;
	struct fg_codec cd;

	if (!env_open_for(&e, _i, FG_OP_ATTENTION_DECODE, FG_DTYPE_Q4_COLS))
		return;
	codec_open_int4(&cd);
	for (size_t t = 0; t < 2; t++) {
		if (acts[t] != e.b.info.act_dtype && !supports(&e, FG_OP_ATTENTION_DECODE, acts[t])) {
			EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no decode %s/q4",
			       fg_dtype_name(acts[t]));
			continue;
		}
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
			const int64_t *x = shapes[i];

			if (x[2] && !supports(&e, FG_OP_ATTENTION_GQA, FG_DTYPE_Q4_COLS))
				continue;
			for (int p = 0; p < PAD_KINDS; p += 1 + (x[4] > 100)) /* long: 2 pads */
				decode_mixed_case(&e, &cd, x[0], x[1], x[2], x[3], x[4], x[5], p,
						  acts[t], FG_DTYPE_Q4_COLS, false, 0);
			q_gain = 8;
			decode_mixed_case(&e, &cd, x[0], x[1], x[2], x[3], x[4], x[5], PAD_RANDOM,
					  acts[t], FG_DTYPE_Q4_COLS, false, 0);
			q_gain = 1;
			if (supports(&e, FG_OP_ATTENTION_RING, FG_DTYPE_Q4_COLS))
				decode_mixed_case(&e, &cd, x[0], x[1], x[2], x[3], x[4], x[5],
						  PAD_RANDOM, acts[t], FG_DTYPE_Q4_COLS, false,
						  x[5] / 2 + 3);
		}
	}
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

static bool cpu_has_avx2(void);

/* cpu_blas opened from configuration ci's file with isa and threads (NULL:
 * its defaults). */
static void cpu_blas_open(struct fg_backend *b, int ci, const char *isa, const char *threads)
{
	struct fg_plugin_handle ph;
	void *opts;

	EXPECT(fg_plugin_open_file(confs[ci].path, FG_PLUGIN_COMPUTE, NULL, &ph) == 0, "%s",
	       fg_last_error());
	opts = fg_plugin_opts_new(ph.plugin);
	EXPECT(opts, "%s", fg_last_error());
	EXPECT(!isa || fg_plugin_opts_set(ph.plugin, opts, "isa", isa, "test") == 0, "%s",
	       fg_last_error());
	EXPECT(!threads || fg_plugin_opts_set(ph.plugin, opts, "threads", threads, "test") == 0,
	       "%s", fg_last_error());
	EXPECT(fg_backend_open(b, &ph, opts) == 0, "cpu_blas isa=%s threads=%s: %s",
	       isa ? isa : "auto", threads ? threads : "auto", fg_last_error());
}

/* One decode over a 4-bit cache of random codes and parameters (scales of 0
 * among them) on each of the n backends: their outputs must agree bit for
 * bit.  ring: the cache a ring of `stride` rows, positions wrapped past it. */
static void q4_bitwise_case(struct fg_backend *be, const char *const *label, int n, int64_t B,
			    int64_t H, int64_t KVH, int64_t hd, int64_t len, int64_t stride,
			    enum fg_dtype act, bool ring, int64_t win, double cap, double gain)
{
	int64_t C = H * hd, KC = KVH * hd, R = B * stride, es = act == FG_DTYPE_F32 ? 4 : 2;
	size_t db = (size_t)fg_q4_data_bytes((uint64_t)R, (uint64_t)KC);
	size_t cb = (size_t)fg_q4_bytes((uint64_t)R, (uint64_t)KC, 1);
	uint8_t *k = malloc(cb), *v = malloc(cb), *q = malloc((size_t)(B * C * es));
	uint8_t *out[4];
	int32_t *pad = malloc((size_t)B * sizeof(*pad));
	struct fg_attention_args a;
	char what[200];

	EXPECT_TRUE(k && v && q && pad && n <= 4);
	rnd_fill(k, db), rnd_fill(v, db);
	for (size_t g = db; g + 4 <= cb; g += 4) /* (scale, min) pairs */
		for (int t = 0; t < 2; t++) {
			uint16_t sc = fg_float_to_half(rnd() % 9 ? (float)(rnd() % 1000) * 2e-4f : 0.0f);
			uint16_t mn = fg_float_to_half(-urand() * urand());
			uint8_t *p = (t ? v : k) + g;

			p[0] = (uint8_t)sc, p[1] = (uint8_t)(sc >> 8), p[2] = (uint8_t)mn;
			p[3] = (uint8_t)(mn >> 8);
		}
	for (int64_t i = 0; i < B * C; i++) {
		float x = urand() * (float)gain;

		if (act == FG_DTYPE_F32)
			((float *)q)[i] = x;
		else
			((uint16_t *)q)[i] = fg_float_to_half(x);
	}
	for (int64_t b = 0; b < B; b++)
		pad[b] = (int32_t)(ring ? len - stride + irand(stride + 1) : irand(len + 1));
	memset(&a, 0, sizeof(a));
	a.q = tview(q, act, B, C, C);
	a.k = tview(k, FG_DTYPE_Q4_COLS, R, KC, KC);
	a.v = tview(v, FG_DTYPE_Q4_COLS, R, KC, KC);
	a.batch = B, a.seq = 1, a.len = len, a.cache_stride = stride, a.ring = ring ? stride : 0;
	a.heads = H, a.kv_heads = KVH, a.head_dim = hd, a.scale = (float)(0.7 / sqrt((double)hd));
	a.pad = pad, a.window = win, a.softcap = (float)cap;
	snprintf(what, sizeof(what), "q4 decode B=%lld H=%lld KVH=%lld hd=%lld len=%lld stride=%lld "
		 "%s ring=%d window=%lld softcap=%g gain=%g", (long long)B, (long long)H,
		 (long long)KVH, (long long)hd, (long long)len, (long long)stride,
		 fg_dtype_name(act), ring, (long long)win, cap, gain);
	for (int i = 0; i < n; i++) {
		out[i] = malloc((size_t)(B * C * es));
		EXPECT_TRUE(out[i]);
		memset(out[i], 0x5a, (size_t)(B * C * es));
		a.out = tview(out[i], act, B, C, C);
		EXPECT(fg_backend_attention_decode(&be[i], NULL, TEST_LAYER, "probe", &a) == 0,
		       "%s: %s: %s", label[i], what, fg_last_error());
		for (int64_t j = 0; i > 0 && j < B * C * es; j++)
			EXPECT(out[i][j] == out[0][j], "%s: %s differs from %s at byte %lld", what,
			       label[i], label[0], (long long)j);
	}
	for (int i = 0; i < n; i++)
		free(out[i]);
	free(k), free(v), free(q), free(pad);
}

/* cpu_blas's decode over a 4-bit cache gives the same bits with its plain C
 * kernels (isa = none), its AVX2 ones and any thread count: head dims
 * from 1 to 256 (odd ones: codes that start mid-byte), MHA and GQA, lengths
 * around the kernels' block of 16, padding, rings, windows, soft caps and
 * widely spread weights. */
START_TEST(test_attention_q4_bitwise)
{
	static const int64_t hds[] = { 1, 2, 7, 8, 24, 40, 48, 64, 72, 80, 96, 100, 128, 130, 192, 256 };
	static const int64_t heads[][2] = { { 1, 1 }, { 3, 3 }, { 8, 1 }, { 6, 2 }, { 16, 2 } };
	static const int64_t lens[] = { 1, 15, 16, 17, 40, 300 };
	static const char *const labels[] = { "isa=none threads=1", "isa=none threads=3",
					      "isa=avx2 threads=1", "isa=avx2 threads=3" };
	struct fg_backend be[4];
	int ci = -1, n = cpu_has_avx2() ? 4 : 2;

	for (int i = 0; i < nconfs; i++)
		if (conf_is_cpu_blas(i) && confs[i].nopts == 0)
			ci = i;
	EXPECT(ci >= 0, "no cpu_blas configuration");
	rng_state = 0x5bd1e9955bd1e995ull;
	cpu_blas_open(&be[0], ci, "none", "1");
	cpu_blas_open(&be[1], ci, "none", "3");
	if (n == 4) {
		cpu_blas_open(&be[2], ci, "avx2", "1");
		cpu_blas_open(&be[3], ci, "avx2", "3");
	} else {
		printf("test_attention_q4_bitwise: no AVX2 here: plain C kernels only\n");
	}
	for (size_t i = 0; i < sizeof(hds) / sizeof(hds[0]); i++)
		for (size_t j = 0; j < sizeof(heads) / sizeof(heads[0]); j++) {
			size_t c = i * 5 + j;
			int64_t len = lens[c % 6], B = 1 + (int64_t)(c % 3);
			bool ring = c % 4 == 1 && len > 2;
			int64_t stride = ring ? len / 2 + 1 : len + (int64_t)(c % 2);

			q4_bitwise_case(be, labels, n, B, heads[j][0], heads[j][1], hds[i], len, stride,
					c % 2 ? FG_DTYPE_F16 : FG_DTYPE_F32, ring,
					ring ? stride : c % 7 == 3 ? 5 : 0, c % 5 == 2 ? 1.5 : 0,
					c % 3 == 0 ? 8 : 1);
		}
	/* many blocks, a key/value head for 8 query heads, many key/value heads a task */
	q4_bitwise_case(be, labels, n, 2, 16, 2, 128, 1100, 1100, FG_DTYPE_F16, false, 0, 0, 4);
	q4_bitwise_case(be, labels, n, 3, 56, 56, 128, 77, 80, FG_DTYPE_F32, false, 0, 0, 1);
	q4_bitwise_case(be, labels, n, 1, 64, 8, 64, 600, 600, FG_DTYPE_F32, false, 0, 0, 8);
	for (int i = 0; i < n; i++)
		fg_backend_close(&be[i]);
}
END_TEST

/* ABI 1.12: a windowed decode over a ring of `ring` rows (>= window) while
 * the rows hold many more positions (len - pad > ring): position j of row b
 * at cache row b * ring + j % ring, and only the last `window` positions
 * read.  The ring's other rows - positions before the window, still there
 * when ring > window - and every earlier position, whose rows later ones
 * took, hold values that change the result if read.  act: F32 or F16 (q,
 * out); cache: act's type or Q4_COLS. */
static void decode_window_ring_case(struct env *e, struct fg_codec *cd, int64_t B, int64_t H,
				    int64_t KVH, int64_t hd, int64_t ring, int64_t len,
				    int64_t win, int padkind, enum fg_dtype act, enum fg_dtype cache)
{
	int64_t C = H * hd, R = B * ring, ldq = C + 1, ldo = C + 3;
	int64_t G = KVH ? H / KVH : 1, KC = C / G, ldk = cache == FG_DTYPE_Q4_COLS ? KC : KC + 2;
	size_t esz = cache == FG_DTYPE_F32 ? 4 : 2;
	double scale = 0.7 / sqrt((double)hd);
	double *qd = malloc((size_t)(B * C) * sizeof(double)), *ref = malloc((size_t)(B * C) * sizeof(double));
	double *kd = malloc((size_t)(R * KC) * sizeof(double)), *vd = malloc((size_t)(R * KC) * sizeof(double));
	double *kp = malloc((size_t)(ring * KC) * sizeof(double)), *vp = malloc((size_t)(ring * KC) * sizeof(double));
	float *kf = malloc((size_t)(R * KC) * sizeof(float)), *vf = malloc((size_t)(R * KC) * sizeof(float));
	int32_t *pad = malloc((size_t)B * sizeof(*pad));
	void *q, *out, *k, *v;
	struct fg_attention_args a;
	char what[240];
	size_t sz;

	EXPECT_TRUE(qd && ref && kd && vd && kp && vp && kf && vf && pad);
	for (int64_t i = 0; i < R * KC; i++)
		kf[i] = urand() * 2, vf[i] = urand() * 2;
	if (act == FG_DTYPE_F32) {
		float *qq = f32_new(B, C, ldq, true);
		for (int64_t i = 0; i < B * C; i++)
			qd[i] = qq[i / C * ldq + i % C];
		q = qq;
		out = f32_new(B, C, ldo, false);
	} else {
		uint16_t *qq = f16_new(B, C, ldq, 1);
		for (int64_t i = 0; i < B * C; i++)
			qd[i] = h2d(qq[i / C * ldq + i % C]);
		q = qq;
		out = f16_new(B, C, ldo, 0);
	}
	if (cache == FG_DTYPE_Q4_COLS) {
		k = q4_encode(cd, kf, R, KC, 1, &sz);
		v = q4_encode(cd, vf, R, KC, 1, &sz);
		for (int64_t r = 0; r < R; r++)
			for (int64_t c = 0; c < KC; c++) {
				kd[r * KC + c] = q4_value(k, R, KC, 1, r, c);
				vd[r * KC + c] = q4_value(v, R, KC, 1, r, c);
			}
	} else {
		k = malloc((size_t)(R * ldk) * esz + 2);
		v = malloc((size_t)(R * ldk) * esz + 2);
		EXPECT_TRUE(k && v);
		for (int64_t r = 0; r < R; r++)
			for (int64_t c = 0; c < ldk; c++) {
				int64_t i = r * ldk + c;
				if (cache == FG_DTYPE_F32) {
					((float *)k)[i] = c < KC ? kf[r * KC + c] : SENTINEL;
					((float *)v)[i] = c < KC ? vf[r * KC + c] : SENTINEL;
					if (c < KC)
						kd[r * KC + c] = kf[r * KC + c], vd[r * KC + c] = vf[r * KC + c];
				} else {
					((uint16_t *)k)[i] = c < KC ? fg_float_to_half(kf[r * KC + c]) : 0x7e00;
					((uint16_t *)v)[i] = c < KC ? fg_float_to_half(vf[r * KC + c]) : 0x7e00;
					if (c < KC) {
						kd[r * KC + c] = h2d(((uint16_t *)k)[i]);
						vd[r * KC + c] = h2d(((uint16_t *)v)[i]);
					}
				}
			}
	}
	for (int64_t b = 0; b < B; b++)
		pad[b] = decode_pad(padkind, b, len);
	/* the reference: the window's positions, gathered from their ring rows */
	for (int64_t b = 0; b < B; b++) {
		int64_t lo = len - win > pad[b] ? len - win : pad[b], n = len - lo;
		for (int64_t j = lo; j < len; j++) {
			memcpy(kp + (j - lo) * KC, kd + (b * ring + j % ring) * KC, (size_t)KC * sizeof(double));
			memcpy(vp + (j - lo) * KC, vd + (b * ring + j % ring) * KC, (size_t)KC * sizeof(double));
		}
		for (int64_t h = 0; h < H; h++)
			attend_ref_d(qd + b * C + h * hd, kp + h / G * hd, vp + h / G * hd, KC, 0, n - 1,
				     hd, scale, ref + b * C + h * hd);
	}
	memset(&a, 0, sizeof(a));
	a.q = tview(q, act, B, C, ldq);
	a.out = tview(out, act, B, C, ldo);
	a.k = tview(k, cache, R, KC, ldk);
	a.v = tview(v, cache, R, KC, ldk);
	a.batch = B, a.seq = 1, a.len = len, a.cache_stride = ring, a.ring = ring;
	a.heads = H, a.kv_heads = KVH, a.head_dim = hd, a.scale = (float)scale, a.pad = pad;
	a.window = win;
	snprintf(what, sizeof(what), "%s: attention_decode %s/%s B=%lld H=%lld KVH=%lld hd=%lld "
		 "len=%lld ring=%lld window=%lld pad=%d", e->label, fg_dtype_name(act),
		 fg_dtype_name(cache), (long long)B, (long long)H, (long long)KVH, (long long)hd,
		 (long long)len, (long long)ring, (long long)win, padkind);
	EXPECT(op_decode(e, &a) == 0, "%s: %s", what, fg_last_error());
	if (act == FG_DTYPE_F32) {
		expect_close(what, out, ldo, ref, B, C, TOL_F32);
		expect_masked_zero(what, out, ldo, pad, B, C, len);
	} else {
		float *g = malloc((size_t)(B * ldo) * sizeof(float));
		const uint16_t *o = out;
		EXPECT_TRUE(g);
		for (int64_t i = 0; i < B * ldo; i++)
			g[i] = i % ldo < C ? fg_half_to_float(o[i]) : SENTINEL;
		expect_close(what, g, ldo, ref, B, C, TOL_F16_OUT);
		expect_masked_zero(what, g, ldo, pad, B, C, len);
		free(g);
	}
	/* a ring shorter than the window, or no window: the positions do not
	 * fit, refused with one line (where some row has more than the ring) */
	int64_t most = 0;
	for (int64_t b = 0; b < B; b++)
		most = len - pad[b] > most ? len - pad[b] : most;
	if (most > ring) {
		a.window = ring + 1;
		EXPECT(op_decode(e, &a) == -EINVAL && strstr(fg_last_error(), "ring"),
		       "%s: a window of ring + 1: %s", what, fg_last_error());
		a.window = 0;
		EXPECT(op_decode(e, &a) == -EINVAL && strstr(fg_last_error(), "ring"),
		       "%s: no window: %s", what, fg_last_error());
	}
	free(q), free(out), free(k), free(v), free(qd), free(ref), free(kd), free(vd);
	free(kp), free(vp), free(kf), free(vf), free(pad);
}

START_TEST(test_attention_window_ring)
{
	static const int64_t shapes[][7] = { /* batch, heads, kv_heads, head_dim, ring, len, window */
		{ 2, 2, 0, 8, 4, 13, 4 },    /* a ring of the window */
		{ 3, 4, 2, 16, 7, 40, 5 },   /* longer than the window: stale rows inside */
		{ 1, 2, 1, 64, 8, 100, 8 },
		{ 2, 2, 0, 8, 1, 9, 1 },     /* a window of one */
		{ 2, 3, 0, 8, 8, 5, 3 },     /* not wrapped yet */
		{ 1, 1, 0, 64, 6, 1000, 6 }, /* wrapped many times */
		{ 4, 6, 3, 32, 9, 31, 9 },
	};
	static const enum fg_dtype kinds[][2] = {
		{ FG_DTYPE_F32, FG_DTYPE_F32 }, { FG_DTYPE_F32, FG_DTYPE_Q4_COLS },
		{ FG_DTYPE_F16, FG_DTYPE_F16 }, { FG_DTYPE_F16, FG_DTYPE_Q4_COLS },
	};
	struct env e;
	struct fg_codec cd;

	env_open(&e, _i);
	if (e.b.minor < 12) {
		printf("%s: not run: built for compute minor %u, before rings as short as the window\n",
		       e.label, e.b.minor);
		env_close(&e);
		return;
	}
	codec_open_int4(&cd);
	for (size_t t = 0; t < sizeof(kinds) / sizeof(kinds[0]); t++) {
		enum fg_dtype act = kinds[t][0], cache = kinds[t][1];
		if ((act != e.b.info.act_dtype && !supports(&e, FG_OP_ATTENTION_DECODE, act)) ||
		    !supports(&e, FG_OP_ATTENTION_RING, cache) ||
		    !supports(&e, FG_OP_ATTENTION_GQA, cache)) {
			EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no windowed ring over %s/%s",
			       fg_dtype_name(act), fg_dtype_name(cache));
			continue;
		}
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int p = 0; p < PAD_KINDS; p++)
				decode_window_ring_case(&e, &cd, shapes[s][0], shapes[s][1], shapes[s][2],
							shapes[s][3], shapes[s][4], shapes[s][5],
							shapes[s][6], p, act, cache);
	}
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

/* A linear over the encoded weight w (type wt, [n, k]) whose values decode
 * to wd, against the double reference: random x, bias, mul and residual as
 * asked. */
static void linear_decoded_case(struct env *e, enum fg_dtype wt, void *w, const double *wd,
				int64_t m, int64_t n, int64_t k, bool bias,
				enum fg_activation act, int res, bool mul)
{
	int64_t ldx = k + 1, ldo = n + 2;
	float *x = f32_new(m, k, ldx, true), *out = f32_new(m, n, ldo, false);
	float *mulb = mul ? f32_new(m, n, n, true) : NULL, *resid = NULL;
	uint16_t *bs = bias ? f16_new(1, n, n, 1) : NULL;
	double *ref = malloc((size_t)(m * n + 1) * sizeof(double));
	struct fg_linear_args a;
	char what[160];

	EXPECT_TRUE(ref);
	if (res == RES_SEPARATE)
		resid = f32_new(m, n, ldo, true);
	else if (res == RES_ALIAS)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				out[i * ldo + j] = urand();
	if (res != RES_NONE && !resid)
		resid = out;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;

			for (int64_t c = 0; c < k; c++)
				s += (double)x[i * ldx + c] * wd[j * k + c];
			if (bias)
				s += h2d(bs[j]);
			s = act_ref(s, act);
			if (mulb)
				s *= mulb[i * n + j];
			if (resid)
				s += resid[i * ldo + j];
			ref[i * n + j] = s;
		}
	memset(&a, 0, sizeof(a));
	a.x = tview(x, FG_DTYPE_F32, m, k, ldx);
	a.w = tview(w, wt, n, k, k);
	if (bias)
		a.bias = tview(bs, FG_DTYPE_F16, 1, n, n);
	a.act = act;
	if (resid)
		a.residual = tview(resid, FG_DTYPE_F32, m, n, ldo);
	if (mulb)
		a.mul = tview(mulb, FG_DTYPE_F32, m, n, n);
	a.out = tview(out, FG_DTYPE_F32, m, n, ldo);
	snprintf(what, sizeof(what), "%s: linear %s m=%lld n=%lld k=%lld bias=%d act=%s res=%d "
		 "mul=%d", e->label, fg_dtype_name(wt), (long long)m, (long long)n, (long long)k,
		 bias, act_name(act), res, mul);
	EXPECT(op_linear(e, &a) == 0, "%s: %s", what, fg_last_error());
	expect_close(what, out, ldo, ref, m, n, TOL_F32);
	if (resid && resid != out)
		free(resid);
	free(x), free(out), free(mulb), free(bs), free(ref);
}

static void linear_q4_case(struct env *e, struct fg_codec *cd, int64_t m, int64_t n, int64_t k,
			   bool bias, enum fg_activation act, int res, bool mul)
{
	float *wf = malloc((size_t)(n * k + 1) * sizeof(float));
	double *wd = malloc((size_t)(n * k + 1) * sizeof(double));
	uint8_t *w;
	size_t sz;

	EXPECT_TRUE(wf && wd);
	for (int64_t i = 0; i < n * k; i++)
		wf[i] = urand() * 0.5f;
	/* some groups far from zero: the min term then dominates the product */
	for (int64_t c = 0; c < k; c += 5)
		for (int64_t r = 64; r < n && r < 128; r++)
			wf[r * k + c] += 3.0f;
	w = q4_encode(cd, wf, n, k, 0, &sz);
	for (int64_t j = 0; j < n; j++)
		for (int64_t c = 0; c < k; c++)
			wd[j * k + c] = q4_value(w, n, k, 0, j, c);
	linear_decoded_case(e, FG_DTYPE_Q4_ROWS, w, wd, m, n, k, bias, act, res, mul);
	free(wf), free(w), free(wd);
}

/* cpu_blas runs m <= fused_max_m (64 by default) through its fused 4-bit
 * kernels (AVX-512: 8 rows of x per call, AVX2 and plain C: 4; 32 values per
 * step; k cut in blocks of 1024 when m exceeds a call's rows; odd k realigns
 * rows), larger m through fp32 tiles: shapes around each of those limits,
 * several groups of 64 rows and partial last groups. */
START_TEST(test_linear_q4)
{
	static const int64_t shapes[][3] = { /* m, n, k */
		{ 1, 1, 1 }, { 1, 70, 33 }, { 5, 130, 64 }, { 17, 64, 100 }, { 3, 129, 5 },
		{ 1, 200, 768 }, { 8, 67, 96 }, { 2, 300, 47 }, { 4, 65, 31 }, { 9, 100, 2100 },
		{ 1, 513, 94 }, { 12, 40, 1041 }, { 33, 64, 63 }, { 64, 70, 1030 },
		{ 65, 70, 130 },
	};
	struct env e;
	struct fg_codec cd;

	bool v11;

	if (!env_open_for(&e, _i, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS))
		return;
	v11 = supports(&e, FG_OP_LINEAR_SILU, FG_DTYPE_Q4_ROWS) &&
	      supports(&e, FG_OP_LINEAR_MUL, FG_DTYPE_Q4_ROWS);
	codec_open_int4(&cd);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		for (int v = 0; v < 6; v++)
			linear_q4_case(&e, &cd, shapes[s][0], shapes[s][1], shapes[s][2], v & 1,
				       (v & 2) ? FG_ACT_RELU : FG_ACT_NONE, v % 3, false);
		/* ABI 1.1: SiLU, the gating multiplier, both (SwiGLU's gate) */
		for (int v = 0; v < 3 && v11; v++)
			linear_q4_case(&e, &cd, shapes[s][0], shapes[s][1], shapes[s][2], v & 1,
				       v ? FG_ACT_SILU : FG_ACT_NONE, (v + (int)s) % 3, v != 1);
	}
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

/* cpu_blas, fused 4-bit kernel: a row's result is bit-identical whatever m
 * (hence the k blocking and the x blocks) and the thread count. */
START_TEST(test_linear_q4_batch_invariance)
{
	struct env e;
	struct fg_codec cd;
	int64_t n = 150, k = 2100, M = 19;
	float *x, *full, *part, *wf;
	uint16_t *b;
	uint8_t *w;
	size_t sz;
	struct fg_linear_args a;

	if (!conf_is_cpu_blas(_i) || strstr(confs[_i].label, "fused_max_m=0"))
		return;
	env_open(&e, _i);
	codec_open_int4(&cd);
	x = f32_new(M, k, k, true), full = f32_new(M, n, n, false), part = f32_new(M, n, n, false);
	wf = f32_new(n, k, k, true), b = f16_new(1, n, n, 1.0f);
	w = q4_encode(&cd, wf, n, k, 0, &sz);
	memset(&a, 0, sizeof(a));
	a.w = tview(w, FG_DTYPE_Q4_ROWS, n, k, k);
	a.bias = tview(b, FG_DTYPE_F16, 1, n, n);
	a.act = FG_ACT_RELU;
	a.x = tview(x, FG_DTYPE_F32, M, k, k);
	a.out = tview(full, FG_DTYPE_F32, M, n, n);
	ck_assert_int_eq(op_linear(&e, &a), 0);
	for (int64_t m = 1; m <= 9; m += 2) {
		for (int64_t i0 = 0; i0 + m <= M; i0 += m) {
			a.x = tview(x + i0 * k, FG_DTYPE_F32, m, k, k);
			a.out = tview(part + i0 * n, FG_DTYPE_F32, m, n, n);
			ck_assert_int_eq(op_linear(&e, &a), 0);
		}
		for (int64_t i = 0; i < (M / m) * m * n; i++)
			EXPECT(memcmp(&part[i], &full[i], sizeof(float)) == 0,
			       "%s: m=%lld: element %lld differs: %a vs %a", e.label, (long long)m,
			       (long long)i, (double)part[i], (double)full[i]);
	}
	fg_codec_close(&cd);
	env_close(&e);
	free(x), free(full), free(part), free(wf), free(b), free(w);
}
END_TEST

START_TEST(test_mixed_invalid)
{
	struct env e;
	uint16_t q16[64], k16[256], o16[64];
	float q[64], out[64];
	uint8_t kq[1024], vq[1024], wq[1024];
	int32_t pad[2] = { 0, 1 };
	struct fg_attention_args d, a;
	struct fg_kv_append_args g, ka;
	struct fg_linear_args l, la;
	float x[64], lo[64];

	if (!conf_is_cpu_blas(_i))
		return;
	memset(q16, 0, sizeof(q16)), memset(k16, 0, sizeof(k16)), memset(q, 0, sizeof(q));
	memset(kq, 0, sizeof(kq)), memset(vq, 0, sizeof(vq)), memset(wq, 0, sizeof(wq));
	memset(x, 0, sizeof(x));
	env_open(&e, _i);
	/* decode, fp16: batch 2, len 3, cache_stride 5, heads 2, head_dim 4 */
	memset(&d, 0, sizeof(d));
	d.q = tview(q16, FG_DTYPE_F16, 2, 8, 8);
	d.k = tview(k16, FG_DTYPE_F16, 10, 8, 8);
	d.v = tview(k16 + 80, FG_DTYPE_F16, 10, 8, 8);
	d.out = tview(o16, FG_DTYPE_F16, 2, 8, 8);
	d.batch = 2, d.seq = 1, d.len = 3, d.cache_stride = 5;
	d.heads = 2, d.head_dim = 4, d.scale = 0.5f, d.pad = pad;
	EXPECT(op_decode(&e, &d) == 0, "%s", fg_last_error());
	a = d, a.out = tview(out, FG_DTYPE_F32, 2, 8, 8);
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "f16 q, f32 out");
	a = d, a.v.dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "f16 k, f32 v");
	a = d, a.q = tview(q, FG_DTYPE_F32, 2, 8, 8), a.out = tview(out, FG_DTYPE_F32, 2, 8, 8);
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "f32 q, f16 cache");
	a = d, a.seq = 3, a.batch = 1;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "f16 prefill");
	/* decode, 4-bit cache [10, 8]: 64 data bytes + 10 groups */
	a = d, a.k = tview(kq, FG_DTYPE_Q4_COLS, 10, 8, 8), a.v = tview(vq, FG_DTYPE_Q4_COLS, 10, 8, 8);
	EXPECT(op_decode(&e, &a) == 0, "%s", fg_last_error());
	a.q = tview(q, FG_DTYPE_F32, 2, 8, 8), a.out = tview(out, FG_DTYPE_F32, 2, 8, 8);
	EXPECT(op_decode(&e, &a) == 0, "%s", fg_last_error());
	a.out = tview(o16, FG_DTYPE_F16, 2, 8, 8);
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "f32 q, f16 out, q4");
	a.out = tview(out, FG_DTYPE_F32, 2, 8, 8), a.k.ld = 9;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "q4 ld != cols");
	a.k.ld = 8, a.v.dtype = FG_DTYPE_Q4_ROWS;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "q4_rows v");
	a.v.dtype = FG_DTYPE_Q4_COLS, a.k.rows = 9;
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "q4 cache too short");
	a.k.rows = 10, a.out = tview(kq + 8, FG_DTYPE_F32, 2, 8, 8);
	EXPECT_EINVAL(&e, op_decode(&e, &a), "attention_decode", "out inside q4 k");
	/* kv_append */
	g.src = tview(q16, FG_DTYPE_F16, 4, 8, 8);
	g.cache = tview(k16, FG_DTYPE_F16, 12, 8, 8);
	g.batch = 2, g.n = 2, g.start = 3, g.cache_stride = 6;
	EXPECT(op_kv_append(&e, &g) == 0, "%s", fg_last_error());
	ka = g, ka.src = tview(q, FG_DTYPE_F32, 4, 8, 8);
	EXPECT_EINVAL(&e, op_kv_append(&e, &ka), "kv_append", "f32 src, f16 cache");
	ka = g, ka.cache = tview(kq, FG_DTYPE_Q4_COLS, 12, 8, 8);
	EXPECT(op_kv_append(&e, &ka) == 0, "%s", fg_last_error());
	ka.cache.ld = 16;
	EXPECT_EINVAL(&e, op_kv_append(&e, &ka), "kv_append", "q4 cache ld");
	ka.cache.ld = 8, ka.cache.rows = 11;
	EXPECT_EINVAL(&e, op_kv_append(&e, &ka), "kv_append", "q4 cache too short");
	ka.cache.rows = 12, ka.cache.dtype = FG_DTYPE_Q4_ROWS;
	EXPECT_EINVAL(&e, op_kv_append(&e, &ka), "kv_append", "q4_rows cache");
	ka = g, ka.src = tview(kq, FG_DTYPE_Q4_COLS, 4, 8, 8);
	EXPECT_EINVAL(&e, op_kv_append(&e, &ka), "kv_append", "q4 src");
	/* linear with a 4-bit weight [6, 8] */
	memset(&l, 0, sizeof(l));
	l.x = tview(x, FG_DTYPE_F32, 2, 8, 8);
	l.w = tview(wq, FG_DTYPE_Q4_ROWS, 6, 8, 8);
	l.out = tview(lo, FG_DTYPE_F32, 2, 6, 6);
	EXPECT(op_linear(&e, &l) == 0, "%s", fg_last_error());
	la = l, la.w.dtype = FG_DTYPE_Q4_COLS;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "q4_cols weight");
	la = l, la.w.ld = 10;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "q4 weight ld");
	la = l, la.w.cols = 7;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "q4 weight cols");
	la = l, la.out = tview(wq + 4, FG_DTYPE_F32, 2, 6, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "out inside q4 weight");
	env_close(&e);
}
END_TEST

/* ---- survey and suite ---------------------------------------------------------------- */

enum { SURVEY_OK = 0, SURVEY_UNUSABLE = 2, SURVEY_F16 = 3, SURVEY_FAILED = 4 };

/* Probe, init and info in a child: no plugin state reaches the test processes. */
static int survey(const char *path)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return SURVEY_FAILED;
	if (pid == 0) {
		struct fg_plugin_handle ph;
		struct fg_backend b;

		if (fg_plugin_open_file(path, FG_PLUGIN_COMPUTE, NULL, &ph) != 0) {
			printf("  %s\n", fg_last_error());
			_exit(SURVEY_FAILED);
		}
		if (fg_plugin_probe(&ph) <= 0)
			_exit(SURVEY_UNUSABLE);
		if (fg_backend_open(&b, &ph, fg_plugin_opts_new(ph.plugin)) != 0) {
			printf("  %s\n", fg_last_error());
			_exit(SURVEY_FAILED);
		}
		status = b.info.act_dtype == FG_DTYPE_F32 ? SURVEY_OK : SURVEY_F16;
		fg_backend_close(&b);
		fflush(stdout);
		_exit(status);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return SURVEY_FAILED;
	return WEXITSTATUS(status);
}

static bool cpu_has_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
#else
	return false;
#endif
}

/* Backends whose tensors live in device memory (SKIP-DEVICE). */
static bool device_memory_backend(const char *name)
{
	return strcmp(name, "cublas") == 0;
}

static void add_conf3(const char *path, const char *name, const char *k0, const char *v0,
		      const char *k1, const char *v1, const char *k2, const char *v2)
{
	struct conf *c;

	if (nconfs == MAX_CONFS)
		return;
	c = &confs[nconfs++];
	snprintf(c->path, sizeof(c->path), "%s", path);
	snprintf(c->name, sizeof(c->name), "%s", name);
	if (k0) {
		c->keys[c->nopts] = k0;
		c->vals[c->nopts++] = v0;
	}
	if (k1) {
		c->keys[c->nopts] = k1;
		c->vals[c->nopts++] = v1;
	}
	if (k2) {
		c->keys[c->nopts] = k2;
		c->vals[c->nopts++] = v2;
	}
	snprintf(c->label, sizeof(c->label), "%s", name);
	for (int i = 0; i < c->nopts; i++) {
		size_t len = strlen(c->label);

		snprintf(c->label + len, sizeof(c->label) - len, "%s%s=%s", i ? "," : "[",
			 c->keys[i], c->vals[i]);
	}
	if (c->nopts)
		strncat(c->label, "]", sizeof(c->label) - strlen(c->label) - 1);
}

static void add_conf(const char *path, const char *name, const char *k0, const char *v0,
		     const char *k1, const char *v1)
{
	add_conf3(path, name, k0, v0, k1, v1, NULL, NULL);
}

static int collect(const char *path, void *user)
{
	struct fg_plugin_handle ph;
	char name[64];
	int s;

	(void)user;
	if (fg_plugin_open_file(path, 0, NULL, &ph) != 0) {
		printf("not a plugin: %s\n", fg_last_error());
		return 0;
	}
	if (ph.plugin->kind != FG_PLUGIN_COMPUTE) {
		fg_plugin_close(&ph);
		return 0;
	}
	snprintf(name, sizeof(name), "%s", ph.plugin->name);
	if (strcmp(name, "cpu_blas") == 0)
		have_cpu_blas = true;
	fg_plugin_close(&ph);
	if (device_memory_backend(name)) {
		/* SKIP-DEVICE: the GPU issue allocates tensors in the cuda_mem tier here. */
		printf("SKIP %s: its tensors live in device memory; this suite allocates host "
		       "memory only (exit-77 path for this plugin)\n", name);
		return 0;
	}
	s = survey(path);
	switch (s) {
	case SURVEY_OK:
		break;
	case SURVEY_UNUSABLE:
		printf("SKIP %s: its probe says it is unusable on this machine\n", name);
		return 0;
	case SURVEY_F16:
		/* SKIP-DEVICE: fp16 activations need f16 tensors and TOL_F16. */
		printf("SKIP %s: fp16 activations are not covered yet (exit-77 path for this "
		       "plugin)\n", name);
		return 0;
	default:
		printf("FAIL %s: cannot be initialised (see above)\n", name);
		add_conf(path, name, NULL, NULL, NULL, NULL); /* its tests will fail loudly */
		return 0;
	}
	add_conf(path, name, NULL, NULL, NULL, NULL);
	if (strcmp(name, "cpu_blas") == 0) {
		/* OpenBLAS only, with 1 MiB weight tiles (several per product) */
		add_conf3(path, name, "threads", "1", "fused_max_m", "0", "tile_mib", "1");
		add_conf(path, name, "threads", "3", "fused_max_m", "1000000"); /* fused only */
		add_conf(path, name, "isa", "none", NULL, NULL);               /* plain C helpers */
#if defined(__x86_64__) && defined(__GNUC__)
		/* the AVX2 kernels too, where AVX-512 would be picked */
		if (cpu_has_avx2() && __builtin_cpu_supports("avx512f")) {
			add_conf(path, name, "isa", "avx2", "fused_max_m", "1000000");
			add_conf(path, name, "isa", "avx2", "fused_max_m", "0"); /* its epilogue */
		}
#endif
	}
	return 0;
}

/* ---- logprob (ABI 1.6) ------------------------------------------------------------------ */

static double u01(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

/* rows rows of vocab logits (ld apart; +inf past vocab, which a read past the
 * row would take), every shape of tests/logprob_ref.h, targets at random
 * (-1 on every fifth row: skipped), k top ids; against the double-precision
 * reference. */
static void logprob_case(struct env *e, int64_t vocab, int64_t ld, int64_t rows, int k)
{
	float *x = malloc(sizeof(float) * (size_t)(rows * ld));
	float *lp = malloc(sizeof(float) * (size_t)rows);
	int32_t *tg = malloc(sizeof(int32_t) * (size_t)rows);
	int32_t *id = malloc(sizeof(int32_t) * (size_t)(rows * k + 1));
	float *tl = malloc(sizeof(float) * (size_t)(rows * k + 1));
	char what[160];
	int bad = 0;

	EXPECT_TRUE(x && lp && tg && id && tl);
	for (int64_t r = 0; r < rows; r++) {
		lp_fill(x + r * ld, vocab, (enum lp_shape)(r % LP_SHAPES), u01);
		for (int64_t i = vocab; i < ld; i++)
			x[r * ld + i] = INFINITY;
		tg[r] = r % 5 == 4 ? -1 : (int32_t)irand(vocab);
	}
	struct fg_logprob_args a = { tview(x, FG_DTYPE_F32, rows, vocab, ld), tg, k, lp,
				     k ? id : NULL, k ? tl : NULL };
	EXPECT(fg_backend_logprob(&e->b, NULL, &a) == 0, "%s: logprob: %s", e->label,
	       fg_last_error());
	snprintf(what, sizeof(what), "%s: logprob vocab %lld ld %lld k %d", e->label,
		 (long long)vocab, (long long)ld, k);
	for (int64_t r = 0; r < rows; r++)
		if (tg[r] >= 0)
			bad += lp_check_row(what, r, x + r * ld, vocab, tg[r], k, lp[r], id + r * k,
					    tl + r * k, e->tol / 10);
	EXPECT(bad == 0, "%s: %d values differ from the reference (printed above)", what, bad);
	free(x), free(lp), free(tg), free(id), free(tl);
}

START_TEST(test_logprob)
{
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_LOGPROB, FG_DTYPE_F32))
		return;
	EXPECT(fg_backend_can_logprob(&e.b), "%s: supports logprob without the op", e.label);
	logprob_case(&e, 128256, 128256, 9, 20); /* Llama 3's vocabulary, the API's largest k */
	logprob_case(&e, 1000, 1003, 40, 5);
	logprob_case(&e, 50, 50, 21, 1);
	logprob_case(&e, 7, 9, 14, 20);          /* k above the vocabulary */
	logprob_case(&e, 1, 1, 5, 3);
	logprob_case(&e, 300, 300, 10, 0);
	logprob_case(&e, 300, 300, 0, 4);        /* no rows */
	env_close(&e);
}
END_TEST

START_TEST(test_logprob_invalid)
{
	float x[4 * 8] = { 0 }, lp[4];
	int32_t tg[4] = { 0, 1, 2, 3 }, id[4 * 21];
	float tl[4 * 21];
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_LOGPROB, FG_DTYPE_F32))
		return;
	struct fg_logprob_args ok = { tview(x, FG_DTYPE_F32, 4, 8, 8), tg, 2, lp, id, tl }, a;
	EXPECT(fg_backend_logprob(&e.b, NULL, &ok) == 0, "%s: %s", e.label, fg_last_error());
	a = ok, a.k = FG_LOGPROB_TOP_MAX + 1;
	EXPECT(fg_backend_logprob(&e.b, NULL, &a) == -EINVAL, "%s: k 21 accepted", e.label);
	EXPECT(strstr(fg_last_error(), "logprob"), "%s: '%s'", e.label, fg_last_error());
	a = ok, a.k = -1;
	EXPECT(fg_backend_logprob(&e.b, NULL, &a) == -EINVAL, "%s: k -1 accepted", e.label);
	a = ok, a.top_id = NULL;
	EXPECT(fg_backend_logprob(&e.b, NULL, &a) == -EINVAL, "%s: no top_id accepted", e.label);
	a = ok, a.lp = NULL;
	EXPECT(fg_backend_logprob(&e.b, NULL, &a) == -EINVAL, "%s: no lp accepted", e.label);
	tg[2] = 8;
	EXPECT(fg_backend_logprob(&e.b, NULL, &ok) == -EINVAL, "%s: target 8 of 8 accepted",
	       e.label);
	EXPECT(strstr(fg_last_error(), "row 2"), "%s: '%s'", e.label, fg_last_error());
	tg[2] = 2;
	a = ok, a.logits.dtype = FG_DTYPE_F16;
	EXPECT(fg_backend_logprob(&e.b, NULL, &a) == -EINVAL, "%s: fp16 logits accepted", e.label);
	env_close(&e);
}
END_TEST

/* ---- the generic tier (ABI 1.10): add, route, gather, scatter_add, grouped linear ------ */

static int op_add(struct env *e, const struct fg_add_args *a)
{
	return fg_backend_add(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_route(struct env *e, const struct fg_route_args *a)
{
	return fg_backend_route(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_gather(struct env *e, const struct fg_gather_args *a)
{
	return fg_backend_gather(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_scatter_add(struct env *e, const struct fg_scatter_add_args *a)
{
	return fg_backend_scatter_add(&e->b, NULL, TEST_LAYER, "probe", a);
}

static int op_linear_grouped(struct env *e, const struct fg_linear_grouped_args *a)
{
	return fg_backend_linear_grouped(&e->b, NULL, TEST_LAYER, "probe", a);
}

/* The row ops take either plain type: f32, or f16 where `supports` says so. */
static const enum fg_dtype plain_types[] = { FG_DTYPE_F32, FG_DTYPE_F16 };

/* A [rows, cols] tensor of plain type t, ld apart, random in [-scale, scale)
 * (padding columns: SENTINEL, or f16's NaN 0x7e00). */
static void *plain_new(enum fg_dtype t, int64_t rows, int64_t cols, int64_t ld, float scale)
{
	float *p;

	if (t == FG_DTYPE_F16)
		return f16_new(rows, cols, ld, scale);
	p = f32_new(rows, cols, ld, true);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			p[r * ld + c] *= scale;
	return p;
}

/* Element i (row * ld + column) of a plain tensor, in double. */
static double plain_at(const void *p, enum fg_dtype t, int64_t i)
{
	return t == FG_DTYPE_F16 ? h2d(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void *bytes_dup(const void *p, size_t n)
{
	void *q = malloc(n + 1);

	EXPECT_TRUE(q);
	memcpy(q, p, n);
	return q;
}

/* The tolerance of an output of type t: f16 outputs are rounded once. */
static double tol_of(const struct env *e, enum fg_dtype t)
{
	return t == FG_DTYPE_F16 ? TOL_F16_OUT : e->tol;
}

/* expect_close for either plain type: f16 values widened, their padding
 * columns still 0x7e00. */
static void expect_close_plain(const char *what, const void *got, enum fg_dtype t, int64_t ld,
			       const double *ref, int64_t rows, int64_t cols, double tol)
{
	const uint16_t *h = got;
	float *g;

	if (t == FG_DTYPE_F32) {
		expect_close(what, got, ld, ref, rows, cols, tol);
		return;
	}
	g = malloc((size_t)(rows * ld + 1) * sizeof(*g));
	EXPECT_TRUE(g);
	for (int64_t i = 0; i < rows * ld; i++) {
		EXPECT(i % ld < cols || h[i] == 0x7e00, "%s: padding [%lld, %lld] overwritten", what,
		       (long long)(i / ld), (long long)(i % ld));
		g[i] = i % ld < cols ? fg_half_to_float(h[i]) : SENTINEL;
	}
	expect_close(what, g, ld, ref, rows, cols, tol);
	free(g);
}

/* Is t to be run?  f32 must be; f16 where the backend says so. */
static bool plain_runs(struct env *e, enum fg_op op, enum fg_dtype t)
{
	if (t == FG_DTYPE_F32 || supports(e, op, t))
		return true;
	printf("%s: not run: the backend does not run %s on %s\n", e->label, fg_op_name(op),
	       fg_dtype_name(t));
	return false;
}

/* ---- add ---- */

enum { ADD_SEPARATE, ADD_OUT_X, ADD_OUT_Y, ADD_SCALE, ADD_SCALE_IN_PLACE, ADD_MODES };

static void add_case(struct env *e, enum fg_dtype t, int64_t rows, int64_t cols, int64_t pad,
		     float alpha, float beta, int mode)
{
	static const char *modes[] = { "separate", "out=x", "out=y", "y none", "y none, out=x" };
	int64_t ldx = cols + pad, ldy = cols + pad + 1, ldo = cols + pad + 2;
	size_t es = fg_dtype_size(t);
	bool has_y = mode < ADD_SCALE;
	void *x = plain_new(t, rows, cols, ldx, 1.5f), *y = plain_new(t, rows, cols, ldy, 1.0f);
	void *sep = plain_new(t, rows, cols, ldo, 1.0f); /* its old values must not matter */
	void *x0 = bytes_dup(x, (size_t)(rows * ldx) * es);
	void *y0 = bytes_dup(y, (size_t)(rows * ldy) * es);
	double *ref = malloc((size_t)(rows * cols + 1) * sizeof(*ref));
	struct fg_add_args a;
	char what[200];

	EXPECT_TRUE(ref);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			ref[r * cols + c] = alpha * plain_at(x, t, r * ldx + c) +
					    (has_y ? beta * plain_at(y, t, r * ldy + c) : 0);
	memset(&a, 0, sizeof(a));
	a.x = tview(x, t, rows, cols, ldx);
	if (has_y)
		a.y = tview(y, t, rows, cols, ldy);
	a.alpha = alpha;
	a.beta = beta; /* without y: out = alpha · x whatever beta */
	a.out = mode == ADD_OUT_X || mode == ADD_SCALE_IN_PLACE ? a.x :
		mode == ADD_OUT_Y ? a.y : tview(sep, t, rows, cols, ldo);
	snprintf(what, sizeof(what), "%s: add %s [%lld, %lld] pad %lld alpha %g beta %g %s",
		 e->label, fg_dtype_name(t), (long long)rows, (long long)cols, (long long)pad,
		 (double)alpha, (double)beta, modes[mode]);
	EXPECT(op_add(e, &a) == 0, "%s: %s", what, fg_last_error());
	expect_close_plain(what, a.out.data, t, a.out.ld, ref, rows, cols, tol_of(e, t));
	/* the inputs that are not out are left alone, padding included */
	EXPECT(a.out.data == x || memcmp(x, x0, (size_t)(rows * ldx) * es) == 0, "%s: x changed",
	       what);
	EXPECT(a.out.data == y || memcmp(y, y0, (size_t)(rows * ldy) * es) == 0, "%s: y changed",
	       what);
	free(x), free(y), free(sep), free(x0), free(y0), free(ref);
}

START_TEST(test_add)
{
	static const int64_t shapes[][3] = { /* rows, cols, ld padding */
		{ 1, 1, 0 }, { 3, 17, 2 }, { 7, 64, 0 }, { 33, 100, 5 }, { 0, 8, 1 }, { 4, 0, 1 },
	};
	static const float coef[][2] = { /* alpha, beta */
		{ 1, 1 }, { 0.5f, -2 }, { -1.25f, 0.75f }, { 0, 1 }, { 1, 0 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_ADD, FG_DTYPE_F32))
		return;
	for (size_t t = 0; t < 2; t++) {
		if (!plain_runs(&e, FG_OP_ADD, plain_types[t]))
			continue;
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (size_t c = 0; c < sizeof(coef) / sizeof(coef[0]); c++)
				for (int m = 0; m < ADD_MODES; m++)
					add_case(&e, plain_types[t], shapes[s][0], shapes[s][1],
						 shapes[s][2], coef[c][0], coef[c][1], m);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_add_invalid)
{
	struct env e;
	float x[64], y[64], out[64];
	uint16_t h[64];
	uint8_t q[256];
	struct fg_add_args a, g;

	memset(x, 0, sizeof(x)), memset(y, 0, sizeof(y)), memset(h, 0, sizeof(h));
	memset(q, 0, sizeof(q));
	if (!env_open_for(&e, _i, FG_OP_ADD, FG_DTYPE_F32))
		return;
	memset(&g, 0, sizeof(g));
	g.x = tview(x, FG_DTYPE_F32, 4, 6, 8);
	g.y = tview(y, FG_DTYPE_F32, 4, 6, 6);
	g.out = tview(out, FG_DTYPE_F32, 4, 6, 7);
	g.alpha = 1, g.beta = -1;
	EXPECT(op_add(&e, &g) == 0, "%s", fg_last_error());
	a = g, a.y.cols = 5;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "y cols");
	a = g, a.y.rows = 3;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "y rows");
	a = g, a.out.rows = 5;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "out rows");
	a = g, a.y = tview(h, FG_DTYPE_F16, 4, 6, 6);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "f32 x, f16 y");
	a = g, a.out = tview(h, FG_DTYPE_F16, 4, 6, 6);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "f32 x, f16 out");
	a = g, a.x = tview(q, FG_DTYPE_Q4_ROWS, 4, 6, 6);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "q4 x");
	a = g, a.x.dtype = FG_DTYPE_I32;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "i32 x");
	a = g, a.out.ld = 5;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "out ld < cols");
	a = g, a.out = tview(x + 1, FG_DTYPE_F32, 4, 6, 8);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "out partly overlaps x");
	a = g, a.out = tview(x, FG_DTYPE_F32, 4, 6, 7);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "out on x with another ld");
	a = g, a.out = tview(y + 6, FG_DTYPE_F32, 4, 6, 6);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "out partly overlaps y");
	a = g, a.y.data = NULL, a.out = tview(x + 2, FG_DTYPE_F32, 4, 6, 8);
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "scale: out partly overlaps x");
	a = g, a.x.data = NULL;
	EXPECT_EINVAL(&e, op_add(&e, &a), "add", "x NULL");
	EXPECT_EINVAL(&e, op_add(&e, NULL), "add", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- route ---- */

enum { ROUTE_DISTINCT, ROUTE_TIES, ROUTE_SPECIAL, ROUTE_KINDS };

/* The router of fgcore/compute.h in double for one row: the k largest
 * logits, ties to the lower id (-inf logits too), and their weights; a NaN
 * anywhere: ids -1, weights 0. */
static void route_ref(const float *x, int64_t experts, int32_t k, bool renorm, int32_t *ids,
		      double *w)
{
	bool *taken = calloc((size_t)experts + 1, 1);
	double mx, sum = 0;

	EXPECT_TRUE(taken);
	for (int64_t c = 0; c < experts; c++)
		if (isnan(x[c])) {
			for (int32_t j = 0; j < k; j++)
				ids[j] = -1, w[j] = 0;
			free(taken);
			return;
		}
	for (int32_t j = 0; j < k; j++) {
		int64_t best = -1;

		for (int64_t c = 0; c < experts; c++)
			if (!taken[c] && (best < 0 || x[c] > x[best]))
				best = c;
		taken[best] = true;
		ids[j] = (int32_t)best;
	}
	mx = x[ids[0]];
	for (int64_t c = 0; c < experts; c++)
		if (renorm ? taken[c] : true)
			sum += exp(x[c] - mx);
	for (int32_t j = 0; j < k; j++)
		w[j] = exp(x[ids[j]] - mx) / sum;
	free(taken);
}

/* rows of logits [rows, experts], ld apart (+inf past the row, which a read
 * past it would choose).  DISTINCT: a shuffle of levels 0.07 apart, no near
 * ties; TIES: four levels, row 0 all equal; SPECIAL: a NaN in every third
 * row (first, last or any column), three -inf in the next. */
static void route_case(struct env *e, int64_t rows, int64_t experts, int64_t pad, int32_t k,
		       bool renorm, int kind)
{
	static const float levels[] = { -1, 0, 0.5f, 2 };
	static const char *kinds[] = { "distinct", "ties", "NaN and -inf" };
	int64_t ld = experts + pad, nk = rows * k;
	float *x = malloc((size_t)(rows * ld + 1) * sizeof(*x));
	int32_t *perm = malloc((size_t)experts * sizeof(*perm));
	int32_t *ids = malloc((size_t)(nk + 4) * sizeof(*ids));
	int32_t *rid = malloc((size_t)(nk + 1) * sizeof(*rid));
	float *w = malloc((size_t)(nk + 4) * sizeof(*w));
	double *rw = malloc((size_t)(nk + 1) * sizeof(*rw));
	struct fg_route_args a;
	char what[160];

	EXPECT_TRUE(x && perm && ids && rid && w && rw);
	for (int64_t r = 0; r < rows; r++) {
		float *row = x + r * ld;

		for (int64_t c = 0; c < experts; c++)
			perm[c] = (int32_t)c;
		for (int64_t c = experts - 1; c > 0; c--) {
			int64_t o = irand(c + 1);
			int32_t tmp = perm[c];

			perm[c] = perm[o], perm[o] = tmp;
		}
		for (int64_t c = 0; c < experts; c++)
			row[c] = kind == ROUTE_TIES ? (r == 0 ? 0.5f : levels[irand(4)]) :
				 (float)(((double)perm[c] + 0.3 * u01() - (double)experts / 2) * 0.07);
		if (kind == ROUTE_SPECIAL && r % 3 == 0)
			row[r == 0 ? 0 : r == 3 ? experts - 1 : irand(experts)] = NAN;
		if (kind == ROUTE_SPECIAL && r % 3 == 1)
			for (int i = 0; i < 3 && i < experts - 1; i++)
				row[perm[i]] = -INFINITY;
		for (int64_t c = experts; c < ld; c++)
			row[c] = INFINITY;
		route_ref(row, experts, k, renorm, rid + r * k, rw + r * k);
	}
	for (int64_t i = 0; i < nk + 4; i++)
		ids[i] = -7, w[i] = SENTINEL;
	memset(&a, 0, sizeof(a));
	a.logits = tview(x, FG_DTYPE_F32, rows, experts, ld);
	a.k = k;
	a.renormalize = renorm;
	a.ids = ids;
	a.weights = w;
	snprintf(what, sizeof(what), "%s: route [%lld, %lld] ld %lld k %d renormalize %d %s",
		 e->label, (long long)rows, (long long)experts, (long long)ld, (int)k, renorm,
		 kinds[kind]);
	EXPECT(op_route(e, &a) == 0, "%s: %s", what, fg_last_error());
	for (int64_t i = 0; i < nk; i++) {
		double err = fabs(w[i] - rw[i]) / (1 + fabs(rw[i]));

		EXPECT(ids[i] == rid[i], "%s: row %lld, choice %lld: id %d, want %d", what,
		       (long long)(i / k), (long long)(i % k), (int)ids[i], (int)rid[i]);
		EXPECT(rid[i] >= 0 ? err <= e->tol : w[i] == 0, "%s: row %lld, choice %lld "
		       "(id %d): weight %.9g, want %.9g", what, (long long)(i / k),
		       (long long)(i % k), (int)rid[i], (double)w[i], rw[i]);
	}
	for (int64_t i = nk; i < nk + 4; i++)
		EXPECT(ids[i] == -7 && w[i] == SENTINEL, "%s: written past rows * k", what);
	free(x), free(perm), free(ids), free(rid), free(w), free(rw);
}

START_TEST(test_route)
{
	static const int64_t experts[] = { 8, 60, 128 };
	static const int32_t ks[] = { 1, 2, 8 };
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_ROUTE, FG_DTYPE_F32))
		return;
	for (size_t x = 0; x < 3; x++)
		for (size_t k = 0; k < 3; k++)
			for (int v = 0; v < 2 * ROUTE_KINDS; v++)
				route_case(&e, 13, experts[x], (int64_t)(x + k) % 3, ks[k], v & 1,
					   v / 2);
	route_case(&e, 5, 60, 0, 60, true, ROUTE_DISTINCT); /* k = experts */
	route_case(&e, 4, 128, 1, FG_ROUTE_TOP_MAX, false, ROUTE_TIES);
	route_case(&e, 3, 1, 2, 1, true, ROUTE_DISTINCT);   /* one expert */
	route_case(&e, 0, 8, 0, 2, true, ROUTE_DISTINCT);   /* no rows */
	env_close(&e);
}
END_TEST

START_TEST(test_route_invalid)
{
	struct env e;
	float x[4 * 130];
	uint16_t h[4 * 8];
	int32_t ids[4 * 65];
	float w[4 * 65];
	struct fg_route_args a, g;

	memset(x, 0, sizeof(x)), memset(h, 0, sizeof(h));
	if (!env_open_for(&e, _i, FG_OP_ROUTE, FG_DTYPE_F32))
		return;
	memset(&g, 0, sizeof(g));
	g.logits = tview(x, FG_DTYPE_F32, 4, 8, 8);
	g.k = 2, g.renormalize = 1, g.ids = ids, g.weights = w;
	EXPECT(op_route(&e, &g) == 0, "%s", fg_last_error());
	a = g, a.k = 0;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "k 0");
	a = g, a.k = -1;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "k -1");
	a = g, a.k = 9;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "k > experts");
	a = g, a.logits = tview(x, FG_DTYPE_F32, 4, 130, 130), a.k = FG_ROUTE_TOP_MAX + 1;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "k > FG_ROUTE_TOP_MAX");
	a = g, a.ids = NULL;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "ids NULL");
	a = g, a.weights = NULL;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "weights NULL");
	a = g, a.logits = tview(h, FG_DTYPE_F16, 4, 8, 8);
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "f16 logits on an f32 backend");
	a = g, a.logits.cols = 0;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "no experts");
	a = g, a.logits.ld = 7;
	EXPECT_EINVAL(&e, op_route(&e, &a), "route", "ld < cols");
	EXPECT_EINVAL(&e, op_route(&e, NULL), "route", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- gather ---- */

static void gather_case(struct env *e, enum fg_dtype t, int64_t rows, int64_t cols, int64_t n,
			int64_t pad)
{
	size_t es = fg_dtype_size(t);
	int64_t ldx = cols + pad, ldo = cols + pad + 1;
	uint8_t *x = plain_new(t, rows, cols, ldx, 2.0f), *out = plain_new(t, n, cols, ldo, 1.0f);
	uint8_t *o0 = bytes_dup(out, (size_t)(n * ldo) * es);
	int32_t *index = malloc((size_t)(n + 1) * sizeof(*index));
	struct fg_gather_args a;
	char what[160];

	EXPECT_TRUE(index);
	/* -0 and a NaN with a payload: a copy keeps their bits */
	if (rows && cols) {
		uint32_t nan32 = 0x7fc01234u;
		uint16_t neg0 = 0x8000, nan16 = 0x7e12;

		if (t == FG_DTYPE_F16) {
			memcpy(x, &neg0, 2);
			memcpy(x + ((rows - 1) * ldx + cols - 1) * es, &nan16, 2);
		} else {
			float z = -0.0f;

			memcpy(x, &z, 4);
			memcpy(x + ((rows - 1) * ldx + cols - 1) * es, &nan32, 4);
		}
	}
	for (int64_t i = 0; i < n; i++) /* repeats, the first and the last row */
		index[i] = (int32_t)(i == 0 ? rows - 1 : i == 1 ? 0 : irand(rows));
	memset(&a, 0, sizeof(a));
	a.x = tview(x, t, rows, cols, ldx);
	a.index = index;
	a.n = n;
	a.out = tview(out, t, n, cols, ldo);
	snprintf(what, sizeof(what), "%s: gather %s [%lld, %lld] n %lld pad %lld", e->label,
		 fg_dtype_name(t), (long long)rows, (long long)cols, (long long)n, (long long)pad);
	EXPECT(op_gather(e, &a) == 0, "%s: %s", what, fg_last_error());
	for (int64_t i = 0; i < n; i++) {
		size_t o = (size_t)(i * ldo) * es, p = (size_t)(i * ldo + cols) * es;

		EXPECT(memcmp(out + o, x + (size_t)(index[i] * ldx) * es, (size_t)cols * es) == 0,
		       "%s: out row %lld is not x row %d", what, (long long)i, (int)index[i]);
		EXPECT(memcmp(out + p, o0 + p, (size_t)(ldo - cols) * es) == 0,
		       "%s: padding of out row %lld overwritten", what, (long long)i);
	}
	free(x), free(out), free(o0), free(index);
}

START_TEST(test_gather)
{
	static const int64_t shapes[][4] = { /* x rows, cols, n, ld padding */
		{ 1, 1, 1, 0 }, { 5, 7, 12, 2 }, { 9, 64, 4, 0 }, { 40, 33, 100, 3 }, { 3, 5, 0, 1 },
		{ 0, 4, 0, 0 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_GATHER, FG_DTYPE_F32))
		return;
	for (size_t t = 0; t < 2; t++)
		for (size_t s = 0; plain_runs(&e, FG_OP_GATHER, plain_types[t]) &&
				   s < sizeof(shapes) / sizeof(shapes[0]); s++)
			gather_case(&e, plain_types[t], shapes[s][0], shapes[s][1], shapes[s][2],
				    shapes[s][3]);
	env_close(&e);
}
END_TEST

START_TEST(test_gather_invalid)
{
	struct env e;
	float x[64], out[64];
	uint16_t h[64];
	uint8_t q[256];
	int32_t index[4] = { 3, 0, 3, 1 };
	struct fg_gather_args a, g;

	memset(x, 0, sizeof(x)), memset(h, 0, sizeof(h)), memset(q, 0, sizeof(q));
	if (!env_open_for(&e, _i, FG_OP_GATHER, FG_DTYPE_F32))
		return;
	memset(&g, 0, sizeof(g));
	g.x = tview(x, FG_DTYPE_F32, 5, 6, 8);
	g.index = index, g.n = 4;
	g.out = tview(out, FG_DTYPE_F32, 4, 6, 7);
	EXPECT(op_gather(&e, &g) == 0, "%s", fg_last_error());
	index[2] = 5;
	EXPECT_EINVAL(&e, op_gather(&e, &g), "gather", "index == x rows");
	index[2] = -1;
	EXPECT_EINVAL(&e, op_gather(&e, &g), "gather", "negative index");
	index[2] = 3;
	a = g, a.index = NULL;
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "index NULL");
	a = g, a.n = -1;
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "negative n");
	a = g, a.n = 3;
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "out rows != n");
	a = g, a.out.cols = 5;
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "out cols");
	a = g, a.out = tview(h, FG_DTYPE_F16, 4, 6, 6);
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "f32 x, f16 out");
	a = g, a.x = tview(q, FG_DTYPE_Q4_COLS, 5, 6, 6);
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "q4 x");
	a = g, a.out = tview(x + 16, FG_DTYPE_F32, 4, 6, 7);
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "out overlaps x");
	a = g, a.out = tview(x, FG_DTYPE_F32, 4, 6, 8);
	EXPECT_EINVAL(&e, op_gather(&e, &a), "gather", "out is x");
	EXPECT_EINVAL(&e, op_gather(&e, NULL), "gather", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- scatter_add ---- */

/* out [rows, cols] gets n = named * K terms: K for each of `named` rows (a
 * token's K experts), in shuffled order; the other rows must stay as they
 * were, bit for bit.  Weights: NULL (all 1), or route-like ones with a
 * zero and negatives mixed in. */
static void scatter_add_case(struct env *e, enum fg_dtype t, int64_t rows, int64_t cols,
			     int64_t named, int64_t K, int64_t pad, bool weighted)
{
	size_t es = fg_dtype_size(t);
	int64_t n = named * K, ldo = cols + pad, ldy = cols + pad + 1;
	uint8_t *out = plain_new(t, rows, cols, ldo, 1.0f), *y = plain_new(t, n, cols, ldy, 1.0f);
	uint8_t *o0;
	int32_t *index = malloc((size_t)(n + 1) * sizeof(*index));
	int32_t *order = malloc((size_t)(rows + 1) * sizeof(*order));
	float *w = malloc((size_t)(n + 1) * sizeof(*w));
	bool *hit = calloc((size_t)rows + 1, 1);
	double *ref = malloc((size_t)(rows * cols + 1) * sizeof(*ref));
	struct fg_scatter_add_args a;
	char what[160];

	EXPECT_TRUE(index && order && w && hit && ref);
	/* -0 in even rows: adding 0 to a row no index names would show */
	for (int64_t r = 0; r < rows && cols; r += 2) {
		if (t == FG_DTYPE_F16)
			((uint16_t *)out)[r * ldo] = 0x8000;
		else
			((float *)out)[r * ldo] = -0.0f;
	}
	o0 = bytes_dup(out, (size_t)(rows * ldo) * es);
	for (int64_t r = 0; r < rows; r++)
		order[r] = (int32_t)r;
	for (int64_t r = rows - 1; r > 0; r--) { /* the named rows: the first of a shuffle */
		int64_t o = irand(r + 1);
		int32_t tmp = order[r];

		order[r] = order[o], order[o] = tmp;
	}
	for (int64_t i = 0; i < n; i++)
		index[i] = order[i / K];
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t o = irand(i + 1);
		int32_t tmp = index[i];

		index[i] = index[o], index[o] = tmp;
	}
	for (int64_t i = 0; i < n; i++) {
		w[i] = i % 7 == 3 ? 0.0f : i % 5 == 2 ? -0.25f * (float)u01() : (float)u01();
		hit[index[i]] = true;
	}
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			ref[r * cols + c] = plain_at(out, t, r * ldo + c);
	for (int64_t i = 0; i < n; i++)
		for (int64_t c = 0; c < cols; c++)
			ref[index[i] * cols + c] += (weighted ? w[i] : 1.0) *
						    plain_at(y, t, i * ldy + c);
	memset(&a, 0, sizeof(a));
	a.y = tview(y, t, n, cols, ldy);
	a.index = index;
	a.weight = weighted ? w : NULL;
	a.n = n;
	a.out = tview(out, t, rows, cols, ldo);
	snprintf(what, sizeof(what), "%s: scatter_add %s [%lld, %lld] named %lld K %lld pad %lld%s",
		 e->label, fg_dtype_name(t), (long long)rows, (long long)cols, (long long)named,
		 (long long)K, (long long)pad, weighted ? " weighted" : "");
	EXPECT(op_scatter_add(e, &a) == 0, "%s: %s", what, fg_last_error());
	expect_close_plain(what, out, t, ldo, ref, rows, cols, tol_of(e, t));
	for (int64_t r = 0; r < rows; r++)
		EXPECT(hit[r] || memcmp(out + r * ldo * (int64_t)es, o0 + r * ldo * (int64_t)es,
					(size_t)cols * es) == 0,
		       "%s: row %lld, named by no index, changed", what, (long long)r);
	free(out), free(y), free(o0), free(index), free(order), free(w), free(hit), free(ref);
}

START_TEST(test_scatter_add)
{
	static const int64_t shapes[][5] = { /* out rows, cols, rows named, K each, ld padding */
		{ 1, 1, 1, 1, 0 }, { 7, 13, 5, 2, 2 }, { 20, 64, 15, 8, 0 }, { 33, 100, 30, 4, 3 },
		{ 6, 16, 6, 3, 0 }, { 5, 8, 0, 0, 1 },
	};
	struct env e;

	if (!env_open_for(&e, _i, FG_OP_SCATTER_ADD, FG_DTYPE_F32))
		return;
	for (size_t t = 0; t < 2; t++)
		for (size_t s = 0; plain_runs(&e, FG_OP_SCATTER_ADD, plain_types[t]) &&
				   s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int wtd = 0; wtd < 2; wtd++)
				scatter_add_case(&e, plain_types[t], shapes[s][0], shapes[s][1],
						 shapes[s][2], shapes[s][3], shapes[s][4], wtd);
	env_close(&e);
}
END_TEST

START_TEST(test_scatter_add_invalid)
{
	struct env e;
	float y[64], out[64], w[4] = { 0.5f, 1, 0.25f, 2 };
	uint16_t h[64];
	uint8_t q[256];
	int32_t index[4] = { 2, 0, 2, 4 };
	struct fg_scatter_add_args a, g;

	memset(y, 0, sizeof(y)), memset(out, 0, sizeof(out)), memset(h, 0, sizeof(h));
	memset(q, 0, sizeof(q));
	if (!env_open_for(&e, _i, FG_OP_SCATTER_ADD, FG_DTYPE_F32))
		return;
	memset(&g, 0, sizeof(g));
	g.y = tview(y, FG_DTYPE_F32, 4, 6, 8);
	g.index = index, g.weight = w, g.n = 4;
	g.out = tview(out, FG_DTYPE_F32, 5, 6, 7);
	EXPECT(op_scatter_add(&e, &g) == 0, "%s", fg_last_error());
	index[1] = 5;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &g), "scatter_add", "index == out rows");
	index[1] = -2;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &g), "scatter_add", "negative index");
	index[1] = 0;
	w[2] = NAN;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &g), "scatter_add", "NaN weight");
	w[2] = -INFINITY;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &g), "scatter_add", "-inf weight");
	w[2] = 0.25f;
	a = g, a.index = NULL;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "index NULL");
	a = g, a.n = 3;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "y rows != n");
	a = g, a.out.cols = 5;
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "out cols");
	a = g, a.out = tview(h, FG_DTYPE_F16, 5, 6, 6);
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "f32 y, f16 out");
	a = g, a.y = tview(q, FG_DTYPE_Q4_ROWS, 4, 6, 6);
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "q4 y");
	a = g, a.out = tview(y + 2, FG_DTYPE_F32, 5, 6, 7);
	EXPECT_EINVAL(&e, op_scatter_add(&e, &a), "scatter_add", "out overlaps y");
	EXPECT_EINVAL(&e, op_scatter_add(&e, NULL), "scatter_add", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- fp8 weights (compute ABI 1.15) ----------------------------------------------------
 * linear with a FG_DTYPE_F8_ROWS weight, where the backend's `supports` says
 * so (cpu_blas: always).  Weights are encoded here by fgcore/f8.h's rule
 * (this suite needs no fp8 codec plugin), the references decode them with
 * fg_f8_value: the decoded weights are exact, so the tolerances are the
 * 4-bit cases' (only the sums' order differs). */

/* Rows of x [rows, cols] encoded by fgcore/f8.h's rule (malloc'ed, *size bytes). */
static uint8_t *f8_encode(const float *x, int64_t rows, int64_t cols, size_t *size)
{
	size_t n = (size_t)fg_f8_bytes((uint64_t)rows, (uint64_t)cols);
	uint8_t *b = calloc(n + 1, 1), *sc;

	EXPECT_TRUE(b);
	sc = b + fg_f8_data_bytes((uint64_t)rows, (uint64_t)cols);
	for (int64_t r = 0; r < rows; r++) {
		float scale, inv;

		fg_f8_scale_of(fg_f8_amax(x + r * cols, (size_t)cols), &scale, &inv);
		fg_f8_scale_store(sc, (uint64_t)r, scale);
		for (int64_t c = 0; c < cols; c++)
			b[r * cols + c] = fg_f8_code(x[r * cols + c], inv);
	}
	*size = n;
	return b;
}

/* Element (r, c) of an fp8 [rows, cols] tensor, decoded. */
static float f8_at(const uint8_t *buf, int64_t rows, int64_t cols, int64_t r, int64_t c)
{
	const uint8_t *sc = buf + fg_f8_data_bytes((uint64_t)rows, (uint64_t)cols);

	return fg_f8_value(buf[r * cols + c], fg_f8_scale_load(sc, (uint64_t)r));
}

/* Random weights [n, k] with the rule's corners on some rows: an outlier
 * (small codes, subnormals), all zeros (scale 1), tiny values, values the
 * rule clamps (+-inf, beyond 65504: codes saturate). */
static float *f8_weights(int64_t n, int64_t k)
{
	float *wf = malloc((size_t)(n * k + 1) * sizeof(*wf));

	EXPECT_TRUE(wf);
	for (int64_t j = 0; j < n; j++)
		for (int64_t c = 0; c < k; c++) {
			float v = urand() * 0.5f;

			if (j % 11 == 5)
				v = 0;
			else if (j % 13 == 4)
				v *= 1e-3f;
			else if (j % 7 == 3 && c == j % k)
				v = 40.0f;
			else if (j % 17 == 8 && c == 0) /* one per row: no cancelling pair */
				v = j % 34 == 8 ? 70000.0f : -INFINITY;
			wf[j * k + c] = v;
		}
	return wf;
}

static void linear_f8_case(struct env *e, int64_t m, int64_t n, int64_t k, bool bias,
			   enum fg_activation act, int res, bool mul)
{
	float *wf = f8_weights(n, k);
	double *wd = malloc((size_t)(n * k + 1) * sizeof(double));
	uint8_t *w;
	size_t sz;

	EXPECT_TRUE(wd);
	w = f8_encode(wf, n, k, &sz);
	for (int64_t j = 0; j < n; j++)
		for (int64_t c = 0; c < k; c++)
			wd[j * k + c] = f8_at(w, n, k, j, c);
	linear_decoded_case(e, FG_DTYPE_F8_ROWS, w, wd, m, n, k, bias, act, res, mul);
	free(wf), free(w), free(wd);
}

/* cpu_blas runs m <= fused_max_m (64 by default) through its fused fp8
 * kernels (4 rows of x per call, 16 codes a step, k cut in blocks of 1024
 * when m > 4), larger m through fp32 tiles: m = 1, 3, 17 and over 64, k a
 * multiple of 16 or 64 and not, tails of 1 to 15 codes. */
START_TEST(test_linear_f8)
{
	static const int64_t shapes[][3] = { /* m, n, k */
		{ 1, 1, 1 }, { 1, 70, 33 }, { 3, 130, 64 }, { 17, 64, 100 }, { 3, 129, 5 },
		{ 1, 200, 768 }, { 8, 67, 96 }, { 2, 300, 47 }, { 4, 65, 31 }, { 17, 100, 2100 },
		{ 1, 513, 94 }, { 12, 40, 1041 }, { 33, 64, 63 }, { 64, 70, 1030 },
		{ 65, 70, 130 }, { 100, 90, 200 }, { 130, 33, 64 }, { 3, 37, 16 }, { 1, 24, 1024 },
	};
	struct env e;
	bool v11, gelu;

	if (!env_open_for(&e, _i, FG_OP_LINEAR, FG_DTYPE_F8_ROWS))
		return;
	v11 = supports(&e, FG_OP_LINEAR_SILU, FG_DTYPE_F8_ROWS) &&
	      supports(&e, FG_OP_LINEAR_MUL, FG_DTYPE_F8_ROWS);
	gelu = supports(&e, FG_OP_LINEAR_GELU, FG_DTYPE_F8_ROWS);
	EXPECT(!conf_is_cpu_blas(_i) || (v11 && gelu), "%s: cpu_blas: fp8 without SiLU, mul or "
	       "GELU", e.label);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		for (int v = 0; v < 6; v++)
			linear_f8_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], v & 1,
				       (v & 2) ? FG_ACT_RELU : FG_ACT_NONE, v % 3, false);
		/* SiLU, the gating multiplier, both (SwiGLU's gate); GELU */
		for (int v = 0; v < 3 && v11; v++)
			linear_f8_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], v & 1,
				       v ? FG_ACT_SILU : FG_ACT_NONE, (v + (int)s) % 3, v != 1);
		if (gelu)
			linear_f8_case(&e, shapes[s][0], shapes[s][1], shapes[s][2], s & 1,
				       FG_ACT_GELU_TANH, (int)s % 3, false);
	}
	linear_f8_case(&e, 3, 5, 0, true, FG_ACT_RELU, RES_ALIAS, false); /* k = 0 */
	linear_f8_case(&e, 100, 5, 0, true, FG_ACT_NONE, RES_SEPARATE, false);
	env_close(&e);
}
END_TEST

/* Every code decoded exactly: x one-hot, so out[i, j] is w[j, c] itself, the
 * sum of one product by 1 and zeros, whatever the path or the sums' order.
 * Rows run over the 254 finite codes from different starts, with scales
 * from a subnormal (the decode's one rounding) to 1e35 and negative ones
 * (the bytes are untrusted); two rows hold a NaN code (S.1111.111), which
 * must make the outputs that select it NaN.  m = 254 and batches of 3
 * (cpu_blas: its BLAS tiles and its fused kernels). */
START_TEST(test_linear_f8_decode)
{
	static const float scales[] = { 1.0f, 1.0f / 448, 3.3e-3f, 1e-40f, 7e-39f, -0.25f,
					1e35f, 65504.0f / 448, 0.0f, 2.5e-8f };
	const int64_t n = 40, k = 254, m = 254;
	size_t sz = (size_t)fg_f8_bytes((uint64_t)n, (uint64_t)k);
	uint8_t *w = calloc(sz, 1), *sc = w + fg_f8_data_bytes((uint64_t)n, (uint64_t)k), finite[254];
	float *x = f32_new(m, k, k, false), *out = f32_new(m, n, n, false);
	struct fg_linear_args a;
	struct env e;
	int nf = 0;

	EXPECT_TRUE(w);
	if (!env_open_for(&e, _i, FG_OP_LINEAR, FG_DTYPE_F8_ROWS)) {
		free(w), free(x), free(out);
		return;
	}
	for (int c = 0; c < 256; c++)
		if ((c & 0x7f) != FG_F8_NAN)
			finite[nf++] = (uint8_t)c;
	for (int64_t j = 0; j < n; j++) {
		for (int64_t c = 0; c < k; c++)
			w[j * k + c] = finite[(c * (j % 3 ? 1 : 253) + j * 37) % 254];
		fg_f8_scale_store(sc, (uint64_t)j,
				  scales[j % (int64_t)(sizeof(scales) / sizeof(scales[0]))]);
	}
	w[5 * k + 17] = FG_F8_NAN, w[22 * k + 200] = 0x80 | FG_F8_NAN;
	for (int64_t i = 0; i < m; i++)
		x[i * k + i % k] = 1.0f;
	memset(&a, 0, sizeof(a));
	a.w = tview(w, FG_DTYPE_F8_ROWS, n, k, k);
	for (int pass = 0; pass < 2; pass++) {
		int64_t mb = pass ? 3 : m;

		for (int64_t i0 = 0; i0 < m; i0 += mb) {
			int64_t rows = m - i0 < mb ? m - i0 : mb;

			a.x = tview(x + i0 * k, FG_DTYPE_F32, rows, k, k);
			a.out = tview(out + i0 * n, FG_DTYPE_F32, rows, n, n);
			EXPECT(op_linear(&e, &a) == 0, "%s: %s", e.label, fg_last_error());
		}
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				float want = f8_at(w, n, k, j, i % k), got = out[i * n + j];
				bool nan_row = j == 5 || j == 22;

				if (want != want)
					EXPECT(got != got, "%s: batches of %lld: [%lld, %lld] = %a, "
					       "want NaN", e.label, (long long)mb, (long long)i,
					       (long long)j, (double)got);
				else if (!nan_row) /* elsewhere 0 x NaN: NaN, unless a BLAS skips 0 */
					EXPECT(got == want, "%s: batches of %lld: code 0x%02x scale %a: "
					       "[%lld, %lld] = %a, want %a", e.label, (long long)mb,
					       w[j * k + i % k], (double)fg_f8_scale_load(sc, (uint64_t)j),
					       (long long)i, (long long)j, (double)got, (double)want);
			}
	}
	env_close(&e);
	free(w), free(x), free(out);
}
END_TEST

/* cpu_blas, fused fp8 kernels: a row's result is bit-identical whatever m
 * (1 to 17: the x blocks and k blocking) and the thread count (this
 * configuration's, and 1 thread on the same isa). */
START_TEST(test_linear_f8_batch_invariance)
{
	static const int64_t ms[] = { 1, 3, 5, 9, 17 };
	struct env e;
	struct fg_backend one;
	int64_t n = 150, k = 2100, M = 19;
	float *x, *full, *part, *wf;
	uint16_t *b;
	uint8_t *w;
	size_t sz;
	const char *isa = NULL;
	struct fg_linear_args a;

	if (!conf_is_cpu_blas(_i) || strstr(confs[_i].label, "fused_max_m=0"))
		return;
	env_open(&e, _i);
	for (int i = 0; i < confs[_i].nopts; i++)
		if (strcmp(confs[_i].keys[i], "isa") == 0)
			isa = confs[_i].vals[i];
	cpu_blas_open(&one, _i, isa, "1");
	x = f32_new(M, k, k, true), full = f32_new(M, n, n, false), part = f32_new(M, n, n, false);
	wf = f8_weights(n, k), b = f16_new(1, n, n, 1.0f);
	w = f8_encode(wf, n, k, &sz);
	memset(&a, 0, sizeof(a));
	a.w = tview(w, FG_DTYPE_F8_ROWS, n, k, k);
	a.bias = tview(b, FG_DTYPE_F16, 1, n, n);
	a.act = FG_ACT_RELU;
	a.x = tview(x, FG_DTYPE_F32, M, k, k);
	a.out = tview(full, FG_DTYPE_F32, M, n, n);
	ck_assert_int_eq(op_linear(&e, &a), 0);
	for (size_t t = 0; t < 2 * sizeof(ms) / sizeof(ms[0]); t++) {
		int64_t m = ms[t / 2];
		struct fg_backend *be = t & 1 ? &one : &e.b;

		for (int64_t i0 = 0; i0 + m <= M; i0 += m) {
			a.x = tview(x + i0 * k, FG_DTYPE_F32, m, k, k);
			a.out = tview(part + i0 * n, FG_DTYPE_F32, m, n, n);
			EXPECT(fg_backend_linear(be, NULL, TEST_LAYER, "probe", &a) == 0, "%s",
			       fg_last_error());
		}
		for (int64_t i = 0; i < (M / m) * m * n; i++)
			EXPECT(memcmp(&part[i], &full[i], sizeof(float)) == 0,
			       "%s: m=%lld threads=%s: element %lld differs: %a vs %a", e.label,
			       (long long)m, t & 1 ? "1" : "the configuration's", (long long)i,
			       (double)part[i], (double)full[i]);
	}
	fg_backend_close(&one);
	env_close(&e);
	free(x), free(full), free(part), free(wf), free(b), free(w);
}
END_TEST

/* fp8 weight views the core refuses (-EINVAL, on any backend), and a valid
 * one that runs or is -ENOTSUP as `supports` says. */
START_TEST(test_linear_f8_invalid)
{
	struct env e;
	float x[16], out[16];
	_Alignas(16) uint8_t wq[256]; /* [6, 8]: 64 code bytes, then 6 scales */
	int64_t off[3] = { 0, 1, 2 };
	struct fg_tensor ws[2];
	struct fg_linear_args l, la;
	struct fg_linear_grouped_args g;

	memset(x, 0, sizeof(x)), memset(wq, 0, sizeof(wq));
	env_open(&e, _i);
	memset(&l, 0, sizeof(l));
	l.x = tview(x, FG_DTYPE_F32, 2, 8, 8);
	l.w = tview(wq, FG_DTYPE_F8_ROWS, 6, 8, 8);
	l.out = tview(out, FG_DTYPE_F32, 2, 6, 6);
	if (supports(&e, FG_OP_LINEAR, FG_DTYPE_F8_ROWS))
		EXPECT(op_linear(&e, &l) == 0, "%s", fg_last_error());
	else
		EXPECT_REFUSED(&e, op_linear(&e, &l), -ENOTSUP, "linear", "f8 weight");
	la = l, la.w.ld = 10;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "f8 weight ld");
	la = l, la.w.cols = 7;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "f8 weight cols");
	la = l, la.w.data = NULL;
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "f8 weight NULL");
	la = l, la.out = tview(wq + 64, FG_DTYPE_F32, 2, 6, 6);
	EXPECT_EINVAL(&e, op_linear(&e, &la), "linear", "out over the f8 scales");
	la = l, la.out = tview(wq + 88, FG_DTYPE_F32, 2, 6, 6);
	EXPECT(op_linear(&e, &la) == 0 || !supports(&e, FG_OP_LINEAR, FG_DTYPE_F8_ROWS),
	       "%s: out just past the f8 scales: %s", e.label, fg_last_error());
	/* the grouped linear checks its weights before asking the backend */
	memset(&g, 0, sizeof(g));
	ws[0] = l.w, ws[1] = tview(wq + 128, FG_DTYPE_Q4_ROWS, 6, 8, 8);
	g.x = tview(x, FG_DTYPE_F32, 2, 8, 8);
	g.w = ws, g.offset = off, g.groups = 2;
	g.out = tview(out, FG_DTYPE_F32, 2, 6, 6);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &g), "grouped linear", "f8 and q4 weights");
	ws[1] = tview(wq + 128, FG_DTYPE_F8_ROWS, 6, 8, 9);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &g), "grouped linear", "f8 weight ld");
	env_close(&e);
}
END_TEST

/* ---- grouped linear ---- */

#define LG_MAX_GROUPS 8

struct lg_shape {
	int32_t groups;
	int64_t m, n, k;
	int64_t offset[LG_MAX_GROUPS + 1];
};

/* Empty groups first, in the middle and last; for cpu_blas groups on both
 * sides of fused_max_m (64 rows), and k > 1024 (its fused kernel's k blocks). */
static const struct lg_shape lg_shapes[] = {
	{ 1, 5, 7, 13, { 0, 5 } },
	{ 1, 0, 4, 6, { 0, 0 } },
	{ 3, 9, 24, 64, { 0, 4, 4, 9 } },
	{ 3, 90, 29, 70, { 0, 0, 75, 90 } },
	{ 8, 40, 33, 100, { 0, 0, 3, 3, 12, 13, 30, 40, 40 } },
	{ 8, 12, 20, 1100, { 0, 1, 2, 2, 5, 9, 9, 11, 12 } },
};

/* One shape, weights of type wt (a tensor per group: f16 with ld > k in odd
 * groups, or each group's own 4-bit or fp8 encoding), over act x bias x mul: bias
 * none (a NULL array), on the even groups, or on the odd ones.  Against the
 * double reference, and bit for bit against the backend's own linear run on
 * each group's rows (the contract: each group as a linear computes it). */
static void linear_grouped_case(struct env *e, struct fg_codec *cd, enum fg_dtype wt,
				const struct lg_shape *s)
{
	int32_t G = s->groups;
	int64_t m = s->m, n = s->n, k = s->k, ldx = k + 1, ldo = n + 2, ldm = n + 3;
	float *x = f32_new(m, k, ldx, true), *mul = f32_new(m, n, ldm, true);
	float *out = f32_new(m, n, ldo, true), *one = f32_new(m, n, ldo, false);
	double *pre = malloc((size_t)(m * n + 1) * sizeof(*pre));
	double *ref = malloc((size_t)(m * n + 1) * sizeof(*ref));
	struct fg_tensor w[LG_MAX_GROUPS], bias[LG_MAX_GROUPS];
	uint16_t *bs[LG_MAX_GROUPS];
	bool v11 = supports(e, FG_OP_LINEAR_SILU, wt) && supports(e, FG_OP_LINEAR_MUL, wt);

	EXPECT_TRUE(pre && ref);
	for (int32_t g = 0; g < G; g++) {
		double *wd = malloc((size_t)(n * k + 1) * sizeof(*wd));

		EXPECT_TRUE(wd);
		if (wt == FG_DTYPE_F16) {
			int64_t ldw = k + g % 2;
			uint16_t *p = f16_new(n, k, ldw, 1.0f);

			for (int64_t j = 0; j < n; j++)
				for (int64_t c = 0; c < k; c++)
					wd[j * k + c] = h2d(p[j * ldw + c]);
			w[g] = tview(p, FG_DTYPE_F16, n, k, ldw);
		} else {
			float *wf = malloc((size_t)(n * k + 1) * sizeof(*wf));
			uint8_t *p;
			size_t sz;

			EXPECT_TRUE(wf);
			for (int64_t i = 0; i < n * k; i++) /* a few columns far from zero */
				wf[i] = urand() * 0.5f + (i % k % 5 == g % 5 ? 2.0f : 0.0f);
			p = wt == FG_DTYPE_Q4_ROWS ? q4_encode(cd, wf, n, k, 0, &sz) :
						     f8_encode(wf, n, k, &sz);
			for (int64_t j = 0; j < n; j++)
				for (int64_t c = 0; c < k; c++)
					wd[j * k + c] = wt == FG_DTYPE_Q4_ROWS ?
							q4_value(p, n, k, 0, j, c) :
							f8_at(p, n, k, j, c);
			w[g] = tview(p, wt, n, k, k);
			free(wf);
		}
		bs[g] = f16_new(1, n, n, 1.0f);
		for (int64_t i = s->offset[g]; i < s->offset[g + 1]; i++)
			for (int64_t j = 0; j < n; j++) {
				double t = 0;

				for (int64_t c = 0; c < k; c++)
					t += (double)x[i * ldx + c] * wd[j * k + c];
				pre[i * n + j] = t;
			}
		free(wd);
	}
	for (int v = 0; v < 24; v++) {
		enum fg_activation act = (enum fg_activation)(v % 4); /* 3: ABI 1.12's GELU */
		int bmode = v / 4 % 3; /* 0: no bias array; 1: even groups; 2: odd groups */
		bool with_mul = v >= 12;
		struct fg_linear_grouped_args a;
		char what[200];

		if (!v11 && (act == FG_ACT_SILU || with_mul))
			continue;
		if (act == FG_ACT_GELU_TANH && !supports(e, FG_OP_LINEAR_GELU, wt)) {
			EXPECT(e->b.minor < 12 || !have_cpu_blas || strcmp(e->b.ph.plugin->name,
									   "cpu_blas"),
			       "cpu_blas: no grouped linear with GELU over %s", fg_dtype_name(wt));
			continue;
		}
		for (int32_t g = 0; g < G; g++) {
			memset(&bias[g], 0, sizeof(bias[g])); /* data NULL: none */
			if (bmode && g % 2 == bmode - 1)
				bias[g] = tview(bs[g], FG_DTYPE_F16, 1, n, n);
		}
		for (int32_t g = 0; g < G; g++)
			for (int64_t i = s->offset[g]; i < s->offset[g + 1]; i++)
				for (int64_t j = 0; j < n; j++) {
					double t = pre[i * n + j];

					if (bias[g].data)
						t += h2d(bs[g][j]);
					t = act_ref(t, act);
					ref[i * n + j] = with_mul ? t * mul[i * ldm + j] : t;
				}
		memset(&a, 0, sizeof(a));
		a.x = tview(x, FG_DTYPE_F32, m, k, ldx);
		a.w = w;
		a.bias = bmode ? bias : NULL;
		a.offset = s->offset;
		a.groups = G;
		a.act = act;
		if (with_mul)
			a.mul = tview(mul, FG_DTYPE_F32, m, n, ldm);
		a.out = tview(out, FG_DTYPE_F32, m, n, ldo);
		snprintf(what, sizeof(what), "%s: grouped linear %s groups %d m=%lld n=%lld k=%lld "
			 "act=%s bias=%s mul=%d", e->label, fg_dtype_name(wt), (int)G, (long long)m,
			 (long long)n, (long long)k, act_name(act),
			 bmode == 0 ? "none" : bmode == 1 ? "even groups" : "odd groups", with_mul);
		EXPECT(op_linear_grouped(e, &a) == 0, "%s: %s", what, fg_last_error());
		expect_close(what, out, ldo, ref, m, n, e->tol);
		/* each group's rows as the backend's linear gives them */
		for (int32_t g = 0; g < G; g++) {
			int64_t o = s->offset[g], rows = s->offset[g + 1] - o;
			struct fg_linear_args l;

			memset(&l, 0, sizeof(l));
			l.x = tview(x + o * ldx, FG_DTYPE_F32, rows, k, ldx);
			l.w = w[g];
			l.bias = bias[g];
			l.act = act;
			if (with_mul)
				l.mul = tview(mul + o * ldm, FG_DTYPE_F32, rows, n, ldm);
			l.out = tview(one + o * ldo, FG_DTYPE_F32, rows, n, ldo);
			EXPECT(op_linear(e, &l) == 0, "%s: group %d as a linear: %s", what, (int)g,
			       fg_last_error());
		}
		for (int64_t i = 0; i < m * ldo; i++)
			EXPECT(i % ldo >= n || memcmp(&out[i], &one[i], sizeof(float)) == 0,
			       "%s: [%lld, %lld] is %a, the group's linear gives %a", what,
			       (long long)(i / ldo), (long long)(i % ldo), (double)out[i],
			       (double)one[i]);
	}
	for (int32_t g = 0; g < G; g++)
		free(w[g].data), free(bs[g]);
	free(x), free(mul), free(out), free(one), free(pre), free(ref);
}

START_TEST(test_linear_grouped)
{
	struct env e;
	struct fg_codec cd;

	if (!env_open_for(&e, _i, FG_OP_LINEAR_GROUPED, FG_DTYPE_F16))
		return;
	codec_open_int4(&cd);
	for (size_t s = 0; s < sizeof(lg_shapes) / sizeof(lg_shapes[0]); s++)
		linear_grouped_case(&e, &cd, FG_DTYPE_F16, &lg_shapes[s]);
	if (supports(&e, FG_OP_LINEAR_GROUPED, FG_DTYPE_Q4_ROWS) &&
	    supports(&e, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS)) {
		for (size_t s = 0; s < sizeof(lg_shapes) / sizeof(lg_shapes[0]); s++)
			linear_grouped_case(&e, &cd, FG_DTYPE_Q4_ROWS, &lg_shapes[s]);
	} else {
		EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no grouped linear over q4_rows weights");
	}
	if (supports(&e, FG_OP_LINEAR_GROUPED, FG_DTYPE_F8_ROWS) &&
	    supports(&e, FG_OP_LINEAR, FG_DTYPE_F8_ROWS)) { /* compute ABI 1.15 */
		for (size_t s = 0; s < sizeof(lg_shapes) / sizeof(lg_shapes[0]); s++)
			linear_grouped_case(&e, &cd, FG_DTYPE_F8_ROWS, &lg_shapes[s]);
	} else {
		EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no grouped linear over f8_rows weights");
		printf("%s: not run: grouped linear over f8_rows weights\n", e.label);
	}
	fg_codec_close(&cd);
	env_close(&e);
}
END_TEST

START_TEST(test_linear_grouped_invalid)
{
	struct env e;
	float x[64], out[64], mul[64];
	uint16_t w16[3][40], b16[3][8];
	uint8_t wq[256];
	int64_t off[4] = { 0, 2, 2, 6 }, bad[4];
	struct fg_tensor w[3], ws[3], bias[3], bs[3];
	struct fg_linear_grouped_args a, g;

	memset(x, 0, sizeof(x)), memset(mul, 0, sizeof(mul)), memset(w16, 0, sizeof(w16));
	memset(b16, 0, sizeof(b16)), memset(wq, 0, sizeof(wq));
	if (!env_open_for(&e, _i, FG_OP_LINEAR_GROUPED, FG_DTYPE_F16))
		return;
	/* x [6, 8], three groups of weights [4, 8] (rows 0-1, none, 2-5), out [6, 4] */
	for (int i = 0; i < 3; i++) {
		w[i] = tview(w16[i], FG_DTYPE_F16, 4, 8, 8 + i % 2);
		memset(&bias[i], 0, sizeof(bias[i]));
	}
	bias[2] = tview(b16[2], FG_DTYPE_F16, 1, 4, 4);
	memset(&g, 0, sizeof(g));
	g.x = tview(x, FG_DTYPE_F32, 6, 8, 8);
	g.w = w, g.bias = bias, g.offset = off, g.groups = 3, g.act = FG_ACT_RELU;
	g.out = tview(out, FG_DTYPE_F32, 6, 4, 5);
	EXPECT(op_linear_grouped(&e, &g) == 0, "%s", fg_last_error());
#define LG_BAD_OFFSETS(o0, o1, o2, o3, what)                                                  \
	do {                                                                                  \
		bad[0] = o0, bad[1] = o1, bad[2] = o2, bad[3] = o3;                           \
		a = g, a.offset = bad;                                                        \
		EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", what);         \
	} while (0)
	LG_BAD_OFFSETS(1, 2, 2, 6, "offsets not from 0");
	LG_BAD_OFFSETS(0, 2, 2, 5, "offsets not to m");
	LG_BAD_OFFSETS(0, 2, 2, 7, "offsets past m");
	LG_BAD_OFFSETS(0, 4, 2, 6, "decreasing offsets");
	LG_BAD_OFFSETS(0, 7, 7, 6, "a group past m");
	LG_BAD_OFFSETS(0, -1, 2, 6, "a negative offset");
#undef LG_BAD_OFFSETS
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[1].rows = 3;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "w[1] of other n");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[2].cols = 7, ws[2].ld = 7;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "w[2] of other k");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[1] = tview(wq, FG_DTYPE_Q4_ROWS, 4, 8, 8);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "f16 and q4 weights");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[0] = tview(wq, FG_DTYPE_Q4_ROWS, 4, 8, 8);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "q4 and f16 weights");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[2].dtype = FG_DTYPE_F32;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "f32 weights");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[1].data = NULL;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "w[1] NULL");
	memcpy(ws, w, sizeof(ws));
	a = g, a.w = ws, ws[2] = tview(out, FG_DTYPE_F16, 4, 8, 8);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "out overlaps w[2]");
	memcpy(bs, bias, sizeof(bs));
	a = g, a.bias = bs, bs[2].cols = 3;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "bias[2] shape");
	memcpy(bs, bias, sizeof(bs));
	a = g, a.bias = bs, bs[0] = tview(mul, FG_DTYPE_F32, 1, 4, 4);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "f32 bias[0]");
	a = g, a.groups = 0;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "no groups");
	a = g, a.w = NULL;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "w NULL");
	a = g, a.offset = NULL;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "offset NULL");
	a = g, a.act = (enum fg_activation)9;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "unknown activation");
	a = g, a.x.dtype = FG_DTYPE_F16;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "f16 x");
	a = g, a.out.rows = 5;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "out rows");
	a = g, a.out.cols = 3;
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "out cols");
	a = g, a.out = tview(x + 8, FG_DTYPE_F32, 6, 4, 4);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "out overlaps x");
	a = g, a.mul = tview(mul, FG_DTYPE_F32, 6, 3, 4);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "mul shape");
	a = g, a.mul = tview(out + 1, FG_DTYPE_F32, 6, 4, 5);
	EXPECT_EINVAL(&e, op_linear_grouped(&e, &a), "grouped linear", "mul overlaps out");
	EXPECT_EINVAL(&e, op_linear_grouped(&e, NULL), "grouped linear", "NULL args");
	env_close(&e);
}
END_TEST

/* ---- the generic ops where the backend does not run them ---- */

/* Each generic op and operand type once, on small valid arguments: it runs
 * where `supports` says so, and is refused with -ENOTSUP and one line
 * naming the plugin and the op where it does not. */
static void generic_probe(struct env *e)
{
	float x[48], out[48], y[48];
	uint16_t h[48], ho[48], w16[2][24];
	uint8_t wq[2][128]; /* [4, 6] encoded: 4-bit or fp8 */
	int32_t index[4] = { 3, 0, 3, 1 }, ids[8];
	float wts[8];
	int64_t off[3] = { 0, 1, 4 };
	struct fg_tensor w[2];
	char what[64];

	memset(x, 0, sizeof(x)), memset(y, 0, sizeof(y)), memset(h, 0, sizeof(h));
	memset(w16, 0, sizeof(w16)), memset(wq, 0, sizeof(wq));
	for (int ti = 0; ti < 2; ti++) {
		enum fg_dtype t = plain_types[ti];
		void *xs = t == FG_DTYPE_F16 ? (void *)h : (void *)x;
		void *os = t == FG_DTYPE_F16 ? (void *)ho : (void *)out;
		struct fg_add_args ad = { tview(xs, t, 4, 6, 6), tview(xs, t, 4, 6, 6),
					  tview(os, t, 4, 6, 6), 1, 1 };
		struct fg_gather_args ga = { tview(xs, t, 4, 6, 6), index, 4, tview(os, t, 4, 6, 6) };
		struct fg_scatter_add_args sa = { tview(xs, t, 4, 6, 6), index, NULL, 4,
						  tview(os, t, 4, 6, 6) };

#define RUNS_OR_NOTSUP(op, dt, call, name)                                                    \
	do {                                                                                  \
		snprintf(what, sizeof(what), "%s on %s", name, fg_dtype_name(dt));            \
		if (supports(e, op, dt))                                                      \
			EXPECT((call) == 0, "%s: %s: %s", e->label, what, fg_last_error());   \
		else                                                                          \
			EXPECT_REFUSED(e, call, -ENOTSUP, name, what);                        \
	} while (0)
		RUNS_OR_NOTSUP(FG_OP_ADD, t, op_add(e, &ad), "add");
		RUNS_OR_NOTSUP(FG_OP_GATHER, t, op_gather(e, &ga), "gather");
		RUNS_OR_NOTSUP(FG_OP_SCATTER_ADD, t, op_scatter_add(e, &sa), "scatter_add");
	}
	struct fg_route_args ro = { tview(x, FG_DTYPE_F32, 4, 6, 6), 2, 1, ids, wts };
	RUNS_OR_NOTSUP(FG_OP_ROUTE, FG_DTYPE_F32, op_route(e, &ro), "route");
	/* x [4, 6] in groups of 1 and 3 rows, weights [4, 6] */
	for (int q = 0; q < 3; q++) {
		enum fg_dtype wt = q == 2 ? FG_DTYPE_F8_ROWS : q ? FG_DTYPE_Q4_ROWS : FG_DTYPE_F16;
		struct fg_linear_grouped_args lg;

		for (int g = 0; g < 2; g++)
			w[g] = tview(q ? (void *)wq[g] : (void *)w16[g], wt, 4, 6, 6);
		memset(&lg, 0, sizeof(lg));
		lg.x = tview(x, FG_DTYPE_F32, 4, 6, 6);
		lg.w = w, lg.offset = off, lg.groups = 2;
		lg.out = tview(out, FG_DTYPE_F32, 4, 4, 4);
		RUNS_OR_NOTSUP(FG_OP_LINEAR_GROUPED, wt, op_linear_grouped(e, &lg), "grouped linear");
	}
#undef RUNS_OR_NOTSUP
}

START_TEST(test_generic_unsupported)
{
	struct env e;

	env_open(&e, _i);
	generic_probe(&e);
	env_close(&e);
}
END_TEST

/* The plugin built for ABI 1.0 (tests/plugins/compute_abi10) as a backend;
 * false, with a line, where FGCORE_BUILDDIR does not say where it is. */
static bool abi10_open(struct env *e)
{
	const char *dir = getenv("FGCORE_BUILDDIR");
	char path[PATH_MAX];
	struct fg_plugin_handle ph;

	if (!dir || !*dir) {
		printf("compute_abi10: not run: FGCORE_BUILDDIR is not set (make check sets it)\n");
		return false;
	}
	snprintf(path, sizeof(path), "%s/tests/plugins/.libs/compute_abi10.so", dir);
	EXPECT(fg_plugin_open_file(path, FG_PLUGIN_COMPUTE, NULL, &ph) == 0, "%s",
	       fg_last_error());
	EXPECT(fg_backend_open(&e->b, &ph, fg_plugin_opts_new(ph.plugin)) == 0, "%s",
	       fg_last_error());
	e->tol = TOL_F32;
	e->label = "compute_abi10";
	return true;
}

/* A plugin built for ABI 1.0 (tests/plugins/compute_abi10, which has none
 * of the generic hooks): `supports` says no for the core, every generic op
 * is refused with -ENOTSUP and its line. */
START_TEST(test_generic_abi10)
{
	static const enum fg_op ops[] = { FG_OP_ADD, FG_OP_ROUTE, FG_OP_GATHER, FG_OP_SCATTER_ADD,
					  FG_OP_LINEAR_GROUPED };
	static const enum fg_dtype types[] = { FG_DTYPE_F32, FG_DTYPE_F16, FG_DTYPE_Q4_ROWS,
					       FG_DTYPE_F8_ROWS };
	struct env e;

	if (!abi10_open(&e))
		return;
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
			EXPECT(!supports(&e, ops[o], types[t]), "compute_abi10: supports %s on %s",
			       fg_op_name(ops[o]), fg_dtype_name(types[t]));
	generic_probe(&e);
	env_close(&e);
}
END_TEST

/* ---- compute ABI 1.12: Gemma 2's pieces ------------------------------------------------- */

/* Does the backend run this 1.12 piece?  cpu_blas must; an older or other
 * backend is skipped with a line. */
static bool v12_runs(struct env *e, int ci, enum fg_op op, enum fg_dtype t)
{
	if (supports(e, op, t))
		return true;
	EXPECT(!conf_is_cpu_blas(ci), "%s: cpu_blas does not run %s on %s", e->label,
	       fg_op_name(op), fg_dtype_name(t));
	printf("%s: not run: the backend does not run %s on %s\n", e->label, fg_op_name(op),
	       fg_dtype_name(t));
	return false;
}

/* GELU (tanh form) in the linear: with and without the gating multiplier
 * (GeGLU's gate), bias and residual, over the fused and BLAS shapes, fp16
 * and 4-bit weights; the grouped linear's GELU is in test_linear_grouped. */
START_TEST(test_linear_gelu)
{
	struct env e;
	struct fg_codec cd;

	env_open(&e, _i);
	if (v12_runs(&e, _i, FG_OP_LINEAR_GELU, FG_DTYPE_F16)) {
		for (size_t s = 0; s < sizeof(linear_shapes) / sizeof(linear_shapes[0]); s++)
			for (int v = 0; v < 6; v++)
				linear_case(&e, linear_shapes[s][0], linear_shapes[s][1],
					    linear_shapes[s][2], (v & 1) ? 2 : 0, v & 2,
					    FG_ACT_GELU_TANH, v % 3, v < 3);
		linear_case(&e, 3, 5, 0, 0, true, FG_ACT_GELU_TANH, RES_ALIAS, true); /* k = 0 */
	}
	if (v12_runs(&e, _i, FG_OP_LINEAR_GELU, FG_DTYPE_Q4_ROWS) &&
	    supports(&e, FG_OP_LINEAR_MUL, FG_DTYPE_Q4_ROWS)) {
		static const int64_t shapes[][3] = { /* m, n, k */
			{ 1, 70, 33 }, { 5, 130, 64 }, { 9, 100, 2100 }, { 65, 70, 130 },
		};
		codec_open_int4(&cd);
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int v = 0; v < 3; v++)
				linear_q4_case(&e, &cd, shapes[s][0], shapes[s][1], shapes[s][2], v & 1,
					       FG_ACT_GELU_TANH, v, v != 1);
		fg_codec_close(&cd);
	}
	env_close(&e);
}
END_TEST

/* RMS norm (and layer norm) scaling by gamma + gamma_shift: Gemma's 1 + w
 * with w near 0, and a negative shift; in place and not. */
START_TEST(test_norm_shift)
{
	static const int64_t shapes[][2] = { { 1, 1 }, { 7, 65 }, { 3, 768 } };
	static const float shifts[] = { 1.0f, -0.75f };
	struct env e;

	env_open(&e, _i);
	if (!v12_runs(&e, _i, FG_OP_NORM_SHIFT, FG_DTYPE_F32)) {
		env_close(&e);
		return;
	}
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int vi = 0; vi < 8; vi++) {
			int inplace = vi & 1, rms = vi & 2;
			float shift = shifts[vi / 4];
			int64_t n = shapes[s][0], h = shapes[s][1], ldx = h + 2;
			int64_t ldo = inplace ? ldx : h + 1;
			float *x = f32_new(n, h, ldx, true), *out = inplace ? x : f32_new(n, h, ldo, false);
			uint16_t *g = f16_new(1, h, h, 0.3f);
			double *ref = malloc((size_t)(n * h) * sizeof(*ref));
			struct fg_layer_norm_args a;
			char what[96];

			EXPECT_TRUE(ref);
			for (int64_t i = 0; i < n; i++) {
				double mean = 0, var = 0;

				for (int64_t j = 0; j < h; j++)
					x[i * ldx + j] += 2.0f;
				for (int64_t j = 0; j < h && !rms; j++)
					mean += x[i * ldx + j];
				mean /= (double)h;
				for (int64_t j = 0; j < h; j++)
					var += (x[i * ldx + j] - mean) * (x[i * ldx + j] - mean);
				var /= (double)h;
				for (int64_t j = 0; j < h; j++)
					ref[i * h + j] = (x[i * ldx + j] - mean) / sqrt(var + 1e-6) *
							 (h2d(g[j]) + shift);
			}
			memset(&a, 0, sizeof(a));
			a.x = tview(x, FG_DTYPE_F32, n, h, ldx);
			a.gamma = tview(g, FG_DTYPE_F16, 1, h, h);
			a.eps = 1e-6f;
			a.out = tview(out, FG_DTYPE_F32, n, h, ldo);
			a.kind = rms ? FG_NORM_RMS : FG_NORM_LAYER;
			a.gamma_shift = shift;
			snprintf(what, sizeof(what), "%s: %s [%lld, %lld] gamma_shift %g%s", e.label,
				 rms ? "rms_norm" : "layer_norm without beta", (long long)n,
				 (long long)h, (double)shift, inplace ? " in place" : "");
			EXPECT(op_norm(&e, &a) == 0, "%s: %s", what, fg_last_error());
			expect_close(what, out, ldo, ref, n, h, e.tol);
			if (!inplace)
				free(out);
			free(x), free(g), free(ref);
		}
	env_close(&e);
}
END_TEST

/* Soft-capped scores in prefill and decode: caps that bend every score
 * (0.5) and only the largest (2), with and without a window, plain and
 * grouped heads, every pad kind; decode over fp16 and 4-bit caches and a
 * ring as well. */
START_TEST(test_attention_softcap)
{
	static const double caps[] = { 0.5, 2.0 };
	static const int64_t windows[] = { 0, 3 };
	static const enum fg_dtype kinds[][2] = {
		{ FG_DTYPE_F16, FG_DTYPE_F16 }, { FG_DTYPE_F32, FG_DTYPE_Q4_COLS },
		{ FG_DTYPE_F16, FG_DTYPE_Q4_COLS }, { FG_DTYPE_F16, FG_DTYPE_F8_COLS },
	};
	struct env e;
	struct fg_codec q4, f8;

	env_open(&e, _i);
	if (!v12_runs(&e, _i, FG_OP_ATTENTION_SOFTCAP, FG_DTYPE_F32)) {
		env_close(&e);
		return;
	}
	codec_open_int4(&q4);
	codec_open_fp8(&f8);
	for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++)
		for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
			score_cap = caps[c];
			window = windows[w];
			for (int p = 0; p < PAD_KINDS; p++) {
				prefill_case(&e, 2, 9, 2, 0, 8, p, 1, false);
				prefill_case(&e, 3, 17, 4, 2, 16, p, 0, false);
				decode_case(&e, 3, 2, 0, 8, 6, 8, p, false);
				decode_case(&e, 4, 4, 2, 16, 33, 40, p, false);
			}
			prefill_case(&e, 2, 6, 4, 2, 8, PAD_RANDOM, 1, true);
			decode_case(&e, 3, 4, 2, 8, 6, 8, PAD_RANDOM, true);
			for (size_t t = 0; t < sizeof(kinds) / sizeof(kinds[0]); t++) {
				enum fg_dtype act = kinds[t][0], cache = kinds[t][1];
				struct fg_codec *cd = cache == FG_DTYPE_F8_COLS ? &f8 : &q4;

				if (!supports(&e, FG_OP_ATTENTION_SOFTCAP, cache) ||
				    !supports(&e, FG_OP_ATTENTION_DECODE, act) ||
				    !supports(&e, FG_OP_ATTENTION_DECODE, cache)) {
					EXPECT(!conf_is_cpu_blas(_i), "cpu_blas: no soft-capped decode %s/%s",
					       fg_dtype_name(act), fg_dtype_name(cache));
					continue;
				}
				decode_mixed_case(&e, cd, 3, 4, 2, 48, 17, 20, PAD_RANDOM, act, cache,
						  false, 0);
				decode_mixed_case(&e, cd, 2, 3, 0, 8, 5, 9, PAD_ZERO, act, cache, false,
						  0);
				if (supports(&e, FG_OP_ATTENTION_RING, cache))
					decode_mixed_case(&e, cd, 2, 8, 2, 64, 33, 40, PAD_RANDOM, act,
							  cache, false, 41);
			}
		}
	score_cap = 0;
	window = 0;
	fg_codec_close(&q4);
	fg_codec_close(&f8);
	env_close(&e);
}
END_TEST

/* The softcap op: cap tanh(x / cap) on f32 and f16 rows with padding
 * columns, in place and into another buffer, values far past the cap. */
START_TEST(test_softcap)
{
	static const float caps[] = { 3.0f, 30.0f, 0.25f };
	static const int64_t shapes[][2] = { { 1, 1 }, { 3, 512 }, { 17, 33 } };
	struct env e;

	env_open(&e, _i);
	for (int ti = 0; ti < 2; ti++) {
		enum fg_dtype t = plain_types[ti];

		if (!v12_runs(&e, _i, FG_OP_SOFTCAP, t))
			continue;
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int v = 0; v < 6; v++) {
				int64_t rows = shapes[s][0], cols = shapes[s][1], ld = cols + 3;
				bool inplace = v & 1;
				float cap = caps[v / 2];
				void *x = plain_new(t, rows, cols, ld, 20.0f);
				void *out = inplace ? x : plain_new(t, rows, cols, ld, 0.0f);
				double *ref = malloc((size_t)(rows * cols + 1) * sizeof(*ref));
				struct fg_softcap_args a;
				char what[128];

				EXPECT_TRUE(ref);
				for (int64_t r = 0; r < rows; r++)
					for (int64_t c = 0; c < cols; c++)
						ref[r * cols + c] = cap * tanh(plain_at(x, t, r * ld + c) / cap);
				/* padding columns of a fresh out: what plain_new left there */
				if (!inplace && t == FG_DTYPE_F32)
					for (int64_t i = 0; i < rows * ld; i++)
						if (i % ld < cols)
							((float *)out)[i] = 0;
				a.x = tview(x, t, rows, cols, ld);
				a.out = tview(out, t, rows, cols, ld);
				a.cap = cap;
				snprintf(what, sizeof(what), "%s: softcap %s [%lld, %lld] cap %g%s",
					 e.label, fg_dtype_name(t), (long long)rows, (long long)cols,
					 (double)cap, inplace ? " in place" : "");
				fg_clear_error();
				EXPECT(fg_backend_softcap(&e.b, NULL, TEST_LAYER, "probe", &a) == 0,
				       "%s: %s", what, fg_last_error());
				expect_close_plain(what, out, t, ld, ref, rows, cols, tol_of(&e, t));
				if (!inplace)
					free(out);
				free(x), free(ref);
			}
	}
	env_close(&e);
}
END_TEST

/* The core refuses 1.12's arguments outside the contract with one line. */
START_TEST(test_v12_invalid)
{
	struct env e;
	float x[64], out[64];
	uint16_t g[8], w[64];
	int32_t pad[2] = { 0, 0 };

	memset(x, 0, sizeof(x)), memset(g, 0, sizeof(g)), memset(w, 0, sizeof(w));
	env_open(&e, _i);
	struct fg_layer_norm_args n = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .gamma = tview(g, FG_DTYPE_F16, 1, 8, 8),
		.out = tview(out, FG_DTYPE_F32, 2, 8, 8), .eps = 1e-6f, .kind = FG_NORM_RMS,
		.gamma_shift = NAN,
	};
	EXPECT_EINVAL(&e, op_norm(&e, &n), "rms_norm", "gamma_shift NaN");
	n.gamma_shift = INFINITY;
	EXPECT_EINVAL(&e, op_norm(&e, &n), "rms_norm", "gamma_shift inf");

	struct fg_linear_args l = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .w = tview(w, FG_DTYPE_F16, 4, 8, 8),
		.out = tview(out, FG_DTYPE_F32, 2, 4, 4), .act = (enum fg_activation)4,
	};
	EXPECT_EINVAL(&e, op_linear(&e, &l), "linear", "activation 4");

	struct fg_attention_args a = {
		.q = tview(x, FG_DTYPE_F32, 2, 8, 8), .k = tview(x + 16, FG_DTYPE_F32, 2, 8, 8),
		.v = tview(x + 32, FG_DTYPE_F32, 2, 8, 8), .out = tview(out, FG_DTYPE_F32, 2, 8, 8),
		.batch = 1, .seq = 2, .heads = 1, .head_dim = 8, .scale = 1, .pad = pad,
		.softcap = -1,
	};
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "softcap -1");
	a.softcap = NAN;
	EXPECT_EINVAL(&e, op_prefill(&e, &a), "attention_prefill", "softcap NaN");

	struct fg_softcap_args c = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .out = tview(out, FG_DTYPE_F32, 2, 8, 8),
		.cap = 0,
	};
#define SOFTCAP(args) fg_backend_softcap(&e.b, NULL, TEST_LAYER, "probe", (args))
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "cap 0");
	c.cap = NAN;
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "cap NaN");
	c.cap = 3;
	c.out = tview(out, FG_DTYPE_F32, 2, 7, 8);
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "out of another shape");
	c.out = tview(out, FG_DTYPE_F16, 2, 8, 8);
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "out of another type");
	c.out = tview(x + 4, FG_DTYPE_F32, 2, 8, 8);
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "out partly over x");
	c.x = tview(w, FG_DTYPE_Q4_ROWS, 2, 8, 8);
	c.out = tview(out, FG_DTYPE_Q4_ROWS, 2, 8, 8);
	EXPECT_EINVAL(&e, SOFTCAP(&c), "softcap", "4-bit x");
	EXPECT_EINVAL(&e, SOFTCAP(NULL), "softcap", "no arguments");
#undef SOFTCAP
	env_close(&e);
}
END_TEST

/* A plugin built for compute ABI 1.0 (tests/plugins/compute_abi10.c) is
 * refused each 1.12 piece with a line naming 1.12, before it is called. */
START_TEST(test_v12_old_plugin)
{
	struct env e;
	float x[64], out[64];
	uint16_t g[8], w[64];
	int32_t pad[2] = { 0, 0 };

	if (!abi10_open(&e))
		return;
	memset(x, 0, sizeof(x)), memset(g, 0, sizeof(g)), memset(w, 0, sizeof(w));

	struct fg_layer_norm_args n = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .gamma = tview(g, FG_DTYPE_F16, 1, 8, 8),
		.beta = tview(g, FG_DTYPE_F16, 1, 8, 8), .out = tview(out, FG_DTYPE_F32, 2, 8, 8),
		.eps = 1e-6f, .kind = FG_NORM_LAYER, .gamma_shift = 1,
	};
	struct fg_linear_args l = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .w = tview(w, FG_DTYPE_F16, 4, 8, 8),
		.out = tview(out, FG_DTYPE_F32, 2, 4, 4), .act = FG_ACT_GELU_TANH,
	};
	struct fg_attention_args a = {
		.q = tview(x, FG_DTYPE_F32, 2, 8, 8), .k = tview(x + 16, FG_DTYPE_F32, 2, 8, 8),
		.v = tview(x + 32, FG_DTYPE_F32, 2, 8, 8), .out = tview(out, FG_DTYPE_F32, 2, 8, 8),
		.batch = 1, .seq = 2, .heads = 1, .head_dim = 8, .scale = 1, .pad = pad,
		.softcap = 5,
	};
	struct fg_softcap_args c = {
		.x = tview(x, FG_DTYPE_F32, 2, 8, 8), .out = tview(x, FG_DTYPE_F32, 2, 8, 8),
		.cap = 3,
	};
	EXPECT_REFUSED(&e, op_norm(&e, &n), -ENOTSUP, "layer_norm", "gamma_shift");
	EXPECT(strstr(fg_last_error(), "compute ABI 1.12"), "%s", fg_last_error());
	EXPECT_REFUSED(&e, op_linear(&e, &l), -ENOTSUP, "linear", "GELU");
	EXPECT(strstr(fg_last_error(), "compute ABI 1.12"), "%s", fg_last_error());
	EXPECT_REFUSED(&e, op_prefill(&e, &a), -ENOTSUP, "attention_prefill", "softcap");
	EXPECT(strstr(fg_last_error(), "compute ABI 1.12"), "%s", fg_last_error());
	EXPECT_REFUSED(&e, fg_backend_softcap(&e.b, NULL, TEST_LAYER, "probe", &c), -ENOTSUP,
		       "softcap", "softcap op");
	EXPECT(strstr(fg_last_error(), "compute ABI 1.12"), "%s", fg_last_error());
	env_close(&e);
}
END_TEST

/* fp8 weights (compute ABI 1.15) on the 1.0 plugin: `supports` is never
 * asked, the linear is refused with a line naming 1.15. */
START_TEST(test_f8_old_plugin)
{
	struct env e;
	float x[16], out[16];
	_Alignas(16) uint8_t w[128];
	struct fg_linear_args l;

	if (!abi10_open(&e))
		return;
	memset(x, 0, sizeof(x)), memset(w, 0, sizeof(w));
	memset(&l, 0, sizeof(l));
	l.x = tview(x, FG_DTYPE_F32, 2, 8, 8);
	l.w = tview(w, FG_DTYPE_F8_ROWS, 6, 8, 8);
	l.out = tview(out, FG_DTYPE_F32, 2, 6, 6);
	EXPECT(!supports(&e, FG_OP_LINEAR, FG_DTYPE_F8_ROWS), "compute_abi10: supports f8");
	EXPECT_REFUSED(&e, op_linear(&e, &l), -ENOTSUP, "linear", "f8 weight");
	EXPECT(strstr(fg_last_error(), "compute ABI 1.15"), "%s", fg_last_error());
	env_close(&e);
}
END_TEST

static Suite *compute_conformance_suite(void)
{
	Suite *s = suite_create("compute_conformance");
	TCase *tc = tcase_create("present");

	tcase_add_test(tc, test_cpu_blas_present);
	suite_add_tcase(s, tc);

	tc = tcase_create("ops");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_linear, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_edges, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_empty, 0, nconfs);
	tcase_add_loop_test(tc, test_embed, 0, nconfs);
	tcase_add_loop_test(tc, test_layer_norm, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_prefill, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_decode, 0, nconfs);
	tcase_add_loop_test(tc, test_kv_append, 0, nconfs);
	tcase_add_loop_test(tc, test_streams, 0, nconfs);
	tcase_add_loop_test(tc, test_kv_append_q4, 0, nconfs);
	tcase_add_loop_test(tc, test_kv_append_f8, 0, nconfs);
	tcase_add_loop_test(tc, test_kv_append_f16, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_decode_mixed, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_decode_q4, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_window_ring, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_q4, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_q4_batch_invariance, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_f8, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_f8_decode, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_f8_batch_invariance, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_silu_mul, 0, nconfs);
	tcase_add_loop_test(tc, test_rope, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_prefill_gqa, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_decode_gqa, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_window, 0, nconfs);
	tcase_add_loop_test(tc, test_logprob, 0, nconfs);
	tcase_add_loop_test(tc, test_add, 0, nconfs);
	tcase_add_loop_test(tc, test_route, 0, nconfs);
	tcase_add_loop_test(tc, test_gather, 0, nconfs);
	tcase_add_loop_test(tc, test_scatter_add, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_grouped, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_gelu, 0, nconfs);
	tcase_add_loop_test(tc, test_norm_shift, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_softcap, 0, nconfs);
	tcase_add_loop_test(tc, test_softcap, 0, nconfs);
	suite_add_tcase(s, tc);

	tc = tcase_create("invalid");
	tcase_add_loop_test(tc, test_linear_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_embed_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_layer_norm_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_attention_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_kv_append_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_mixed_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_rope_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_v11_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_unsupported, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_f8_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_logprob_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_add_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_route_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_gather_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_scatter_add_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_linear_grouped_invalid, 0, nconfs);
	tcase_add_loop_test(tc, test_generic_unsupported, 0, nconfs);
	tcase_add_test(tc, test_generic_abi10);
	tcase_add_loop_test(tc, test_v12_invalid, 0, nconfs);
	tcase_add_test(tc, test_v12_old_plugin);
	tcase_add_test(tc, test_f8_old_plugin);
	suite_add_tcase(s, tc);

	/* The fused kernel exists on x86-64 with AVX2, FMA and F16C only. */
	tc = tcase_create("cpu_blas");
	tcase_set_timeout(tc, 60);
	for (int i = 0; i < nconfs && cpu_has_avx2(); i++)
		if (strstr(confs[i].label, "fused_max_m=1000000"))
			tcase_add_loop_test(tc, test_linear_batch_invariance, i, i + 1);
	if (have_cpu_blas)
		tcase_add_test(tc, test_attention_q4_bitwise);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (fg_plugin_foreach(collect, NULL) < 0) {
		fprintf(stderr, "cannot list plugins: %s\n", fg_last_error());
		return 1;
	}
	printf("compute configurations:");
	for (int i = 0; i < nconfs; i++)
		printf(" %s", confs[i].label);
	printf("\n");
	if (nconfs == 0 && have_cpu_blas) {
		printf("SKIP: no compute backend runs on this machine with host memory\n");
		return 77;
	}
	sr = srunner_create(compute_conformance_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
