/* bench/gemm_bench.c - cpu_blas `linear` (fp32 x, fp16, 4-bit or fp8 w) against a
 * plain cblas_sgemm on fp32 operands of the same shape.
 *
 *   gemm_bench [-p PLUGIN.so] [-t THREADS] [-o key=value]... [-s SECONDS] [-q]
 *              [-w f16|q4|f8] [-e] [MxNxK ...]
 *
 * The plugin is loaded from -p, else by name ("cpu_blas") through
 * FGCORE_PLUGIN_PATH and the installed plugin directory.  Each shape is timed
 * in alternating rounds (linear, sgemm), keeping each side's best round, so
 * both see the same machine load; sgemm runs on -t threads (default: every
 * online CPU).  GFLOP/s counts 2*m*n*k; "w GB/s" is the
 * bytes of w as stored (fp16, or FG_DTYPE_Q4_ROWS with -w q4: random nibbles
 * and group parameters, or FG_DTYPE_F8_ROWS with -w f8: random finite codes
 * and row scales; the sgemm side gets their decoded values) per linear
 * call.  -e: linear also adds an fp16 bias, applies ReLU and adds a
 * residual (its epilogue; the sgemm side stays a plain product).  -q: fewer
 * shapes.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <fgcore/f8.h>
#include <fgcore/half.h>
#include <fgcore/q4.h>

#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

/* OpenBLAS extensions (declared by its cblas.h; repeated for other CBLAS headers). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);

struct shape {
	int64_t m, n, k;
	const char *kind;
};

static const struct shape default_shapes[] = {
	{ 1, 768, 768, "decode" },      { 1, 3072, 768, "decode" },
	{ 1, 4096, 4096, "decode" },    { 4, 4096, 4096, "decode" },
	{ 16, 4096, 4096, "decode" },   { 32, 768, 3072, "decode" },
	{ 32, 4096, 4096, "decode" },   { 64, 768, 768, "decode" },
	{ 64, 4096, 4096, "decode" },
	{ 512, 768, 768, "prefill" },   { 512, 3072, 768, "prefill" },
	{ 512, 4096, 4096, "prefill" }, { 2048, 768, 768, "prefill" },
	{ 2048, 768, 3072, "prefill" }, { 2048, 4096, 4096, "prefill" },
	{ 4096, 4096, 4096, "prefill" },
};

static const struct shape quick_shapes[] = {
	{ 1, 4096, 4096, "decode" },  { 16, 4096, 4096, "decode" },
	{ 64, 4096, 4096, "decode" }, { 512, 768, 768, "prefill" },
	{ 512, 4096, 4096, "prefill" },
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float urand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*s >> 40) * (2.0 / 16777216.0) - 1.0);
}

static unsigned rnd8(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(*s >> 56);
}

struct bench {
	struct fg_backend b;
	double seconds;
	int threads;
	enum fg_dtype wt; /* -w: FG_DTYPE_F16, Q4_ROWS or F8_ROWS */
	int epilogue; /* -e */
};

static void usage(void)
{
	fprintf(stderr, "usage: gemm_bench [-p PLUGIN.so] [-t THREADS] [-o key=value]... "
		"[-s SECONDS] [-q] [-w f16|q4|f8] [-e] [MxNxK ...]\n");
}

/* Best seconds per call of linear (which = 0) or sgemm (which = 1). */
static double time_round(struct bench *B, int which, const struct fg_linear_args *a,
			 const float *wf, float *c)
{
	double t0 = now(), t1;
	int it = 0;
	int m = (int)a->x.rows, n = (int)a->w.rows, k = (int)a->x.cols;

	do {
		if (which == 0) {
			if (B->b.ops->linear(B->b.ctx, NULL, a) != 0) {
				fprintf(stderr, "linear failed: %s\n", fg_last_error());
				exit(1);
			}
		} else {
			if (it == 0) /* the plugin may leave OpenBLAS at 1 thread (it splits) */
				openblas_set_num_threads(B->threads > 0 ? B->threads :
							 (int)sysconf(_SC_NPROCESSORS_ONLN));
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f,
				    a->x.data, k, wf, k, 0.0f, c, n);
		}
		it++;
		t1 = now();
	} while (t1 - t0 < B->seconds);
	return (t1 - t0) / it;
}

static int run_shape(struct bench *B, const struct shape *s, double *ratio)
{
	int64_t m = s->m, n = s->n, k = s->k;
	float *x = malloc((size_t)(m * k) * sizeof(float));
	float *wf = malloc((size_t)(n * k) * sizeof(float));
	float *out = malloc((size_t)(m * n) * sizeof(float));
	float *ref = malloc((size_t)(m * n) * sizeof(float));
	size_t wbytes = B->wt == FG_DTYPE_Q4_ROWS ? (size_t)fg_q4_bytes((uint64_t)n, (uint64_t)k, 0)
			: B->wt == FG_DTYPE_F8_ROWS ? (size_t)fg_f8_bytes((uint64_t)n, (uint64_t)k)
			: (size_t)(n * k) * sizeof(uint16_t);
	uint8_t *w = malloc(wbytes);
	uint16_t *bias = malloc((size_t)n * sizeof(uint16_t));
	float *res = malloc((size_t)(m * n) * sizeof(float));
	struct fg_linear_args a;
	double tl = INFINITY, tb = INFINITY, flops = 2.0 * (double)m * (double)n * (double)k;
	double err = 0;
	uint64_t seed = 42;

	if (!x || !wf || !out || !ref || !w || !bias || !res) {
		fprintf(stderr, "out of memory for %" PRId64 "x%" PRId64 "x%" PRId64 "\n", m, n, k);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < m * k; i++)
		x[i] = urand(&seed);
	if (B->wt == FG_DTYPE_F8_ROWS) {
		uint8_t *sc = w + fg_f8_data_bytes((uint64_t)n, (uint64_t)k);

		for (int64_t r = 0; r < n; r++) {
			/* codes up to 448 times a scale: about [-1, 1] / sqrt(k), as the fp16 case */
			float scale = (1 + 0.1f * urand(&seed)) / (448 * sqrtf((float)k));

			fg_f8_scale_store(sc, (uint64_t)r, scale);
			for (int64_t c = 0; c < k; c++) {
				uint8_t q = (uint8_t)rnd8(&seed);

				q = (q & 0x7f) == FG_F8_NAN ? 0 : q;
				w[r * k + c] = q;
				wf[r * k + c] = fg_f8_value(q, scale);
			}
		}
	} else if (B->wt == FG_DTYPE_Q4_ROWS) {
		uint64_t db = fg_q4_data_bytes((uint64_t)n, (uint64_t)k);
		uint8_t *par = w + db;

		memset(w, 0, db);
		for (int64_t i = 0; i < n * k; i++) /* nibbles of the encoder's layout */
			w[i / 2] |= (uint8_t)((uint8_t)(rnd8(&seed) & 15) << (i & 1 ? 0 : 4));
		for (uint64_t g = 0; g < (uint64_t)((n + 63) / 64 * k); g++) {
			/* a group spanning about [-1, 1] / sqrt(k), as the fp16 case */
			uint16_t sc = fg_float_to_half((1 + 0.1f * urand(&seed)) * 2 / 15 /
						       sqrtf((float)k));
			uint16_t mn = fg_float_to_half((-1 + 0.1f * urand(&seed)) / sqrtf((float)k));

			par[4 * g] = (uint8_t)sc, par[4 * g + 1] = (uint8_t)(sc >> 8);
			par[4 * g + 2] = (uint8_t)mn, par[4 * g + 3] = (uint8_t)(mn >> 8);
		}
		for (int64_t r = 0; r < n; r++)
			for (int64_t c = 0; c < k; c++) {
				uint64_t e = (uint64_t)(r * k + c), g = (uint64_t)(r / 64 * k + c);
				unsigned q = e & 1 ? w[e / 2] & 15u : w[e / 2] >> 4u;

				wf[e] = (float)q * fg_half_to_float((uint16_t)(par[4 * g] |
									   par[4 * g + 1] << 8)) +
					fg_half_to_float((uint16_t)(par[4 * g + 2] | par[4 * g + 3] << 8));
			}
	} else {
		uint16_t *wh = (uint16_t *)w;

		for (int64_t i = 0; i < n * k; i++) {
			wh[i] = fg_float_to_half(urand(&seed) / sqrtf((float)k));
			wf[i] = fg_half_to_float(wh[i]);
		}
	}
	memset(&a, 0, sizeof(a));
	a.x = (struct fg_tensor){ x, FG_DTYPE_F32, m, k, k };
	a.w = (struct fg_tensor){ w, B->wt, n, k, k };
	a.out = (struct fg_tensor){ out, FG_DTYPE_F32, m, n, n };
	if (B->epilogue) {
		for (int64_t j = 0; j < n; j++)
			bias[j] = fg_float_to_half(urand(&seed));
		for (int64_t i = 0; i < m * n; i++)
			res[i] = urand(&seed);
		a.bias = (struct fg_tensor){ bias, FG_DTYPE_F16, 1, n, n };
		a.act = FG_ACT_RELU;
		a.residual = (struct fg_tensor){ res, FG_DTYPE_F32, m, n, n };
	}
	/* warm-up, and both results compared */
	time_round(B, 0, &a, wf, ref);
	time_round(B, 1, &a, wf, ref);
	for (int64_t i = 0; i < m * n; i++) {
		double want = ref[i];

		if (B->epilogue) {
			want += fg_half_to_float(bias[i % n]);
			want = (want < 0 ? 0 : want) + res[i];
		}
		err = fmax(err, fabs((double)out[i] - want) / (1 + fabs(want)));
	}
	for (int r = 0; r < 3; r++) {
		tl = fmin(tl, time_round(B, 0, &a, wf, out));
		tb = fmin(tb, time_round(B, 1, &a, wf, ref));
	}
	*ratio = tb / tl;
	printf("%-8s %5" PRId64 " %5" PRId64 " %5" PRId64 "   %8.1f   %8.1f   %5.2f   %7.2f   %.1e\n",
	       s->kind, m, n, k, flops / tl * 1e-9, flops / tb * 1e-9, *ratio,
	       (double)wbytes / tl * 1e-9, err);
	fflush(stdout);
	free(x), free(wf), free(out), free(ref), free(w), free(bias), free(res);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench B = { .seconds = 0.25, .wt = FG_DTYPE_F16 };
	struct fg_plugin_handle ph;
	const char *plugin = NULL, *okeys[16], *ovals[16];
	struct shape custom[64];
	const struct shape *shapes = default_shapes;
	size_t nshapes = sizeof(default_shapes) / sizeof(default_shapes[0]);
	int nopts = 0, ncustom = 0, opt, rc;
	double worst[2] = { INFINITY, INFINITY }, r;
	void *opts;
	char tbuf[32];

	while ((opt = getopt(argc, argv, "p:t:o:s:qw:eh")) != -1) {
		switch (opt) {
		case 'p':
			plugin = optarg;
			break;
		case 't':
			B.threads = atoi(optarg);
			break;
		case 'o': {
			char *eq = strchr(optarg, '=');

			if (!eq || nopts == 16) {
				usage();
				return 2;
			}
			*eq = '\0';
			okeys[nopts] = optarg;
			ovals[nopts++] = eq + 1;
			break;
		}
		case 's':
			B.seconds = atof(optarg);
			break;
		case 'w':
			if (strcmp(optarg, "q4") == 0)
				B.wt = FG_DTYPE_Q4_ROWS;
			else if (strcmp(optarg, "f8") == 0)
				B.wt = FG_DTYPE_F8_ROWS;
			else if (strcmp(optarg, "f16") == 0)
				B.wt = FG_DTYPE_F16;
			else {
				usage();
				return 2;
			}
			break;
		case 'e':
			B.epilogue = 1;
			break;
		case 'q':
			shapes = quick_shapes;
			nshapes = sizeof(quick_shapes) / sizeof(quick_shapes[0]);
			break;
		default:
			usage();
			return 2;
		}
	}
	for (int i = optind; i < argc && ncustom < 64; i++) {
		long long m, n, k;

		if (sscanf(argv[i], "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1) {
			usage();
			return 2;
		}
		custom[ncustom++] = (struct shape){ m, n, k, m <= 64 ? "decode" : "prefill" };
	}
	if (ncustom) {
		shapes = custom;
		nshapes = (size_t)ncustom;
	}

	rc = plugin ? fg_plugin_open_file(plugin, FG_PLUGIN_COMPUTE, "cpu_blas", &ph)
		    : fg_plugin_load("cpu_blas", FG_PLUGIN_COMPUTE, &ph);
	if (rc) {
		fprintf(stderr, "gemm_bench: %s\n", fg_last_error());
		return 1;
	}
	opts = fg_plugin_opts_new(ph.plugin);
	if (!opts) {
		fprintf(stderr, "gemm_bench: %s\n", fg_last_error());
		return 1;
	}
	if (B.threads > 0) {
		snprintf(tbuf, sizeof(tbuf), "%d", B.threads);
		rc = fg_plugin_opts_set(ph.plugin, opts, "threads", tbuf, "-t");
	}
	for (int i = 0; rc == 0 && i < nopts; i++)
		rc = fg_plugin_opts_set(ph.plugin, opts, okeys[i], ovals[i], "-o");
	if (rc) {
		fprintf(stderr, "gemm_bench: %s\n", fg_last_error());
		return 1;
	}
	if (fg_backend_open(&B.b, &ph, opts)) {
		fprintf(stderr, "gemm_bench: %s\n", fg_last_error());
		return 1;
	}
	printf("cpu_blas linear (fp32 x, %s w%s) vs cblas_sgemm (fp32 x, fp32 w)\n",
	       B.wt == FG_DTYPE_Q4_ROWS ? "4-bit FG_DTYPE_Q4_ROWS" :
	       B.wt == FG_DTYPE_F8_ROWS ? "fp8 FG_DTYPE_F8_ROWS" : "fp16",
	       B.epilogue ? ", + bias, ReLU, + residual" : "");
	printf("plugin %s; online CPUs %ld; threads %s", B.b.ph.path, sysconf(_SC_NPROCESSORS_ONLN),
	       B.threads > 0 ? tbuf : "auto (plugin default)");
	for (int i = 0; i < nopts; i++)
		printf("; %s=%s", okeys[i], ovals[i]);
	printf("\nOpenBLAS: %s; core %s\n", openblas_get_config(), openblas_get_corename());
	printf("%-8s %5s %5s %5s   %8s   %8s   %5s   %7s   %s\n", "regime", "m", "n", "k",
	       "linear", "sgemm", "ratio", "linear", "max rel diff");
	printf("%-8s %5s %5s %5s   %8s   %8s   %5s   %7s\n", "", "", "", "", "GFLOP/s", "GFLOP/s",
	       "", "w GB/s");
	for (size_t i = 0; i < nshapes; i++) {
		int pre = strcmp(shapes[i].kind, "prefill") == 0;

		if (run_shape(&B, &shapes[i], &r))
			return 1;
		worst[pre] = fmin(worst[pre], r);
	}
	if (isfinite(worst[0]))
		printf("worst ratio, decode-like: %.2f\n", worst[0]);
	if (isfinite(worst[1]))
		printf("worst ratio, prefill-like: %.2f\n", worst[1]);
	fg_backend_close(&B.b);
	return 0;
}
