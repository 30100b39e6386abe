/* plugins/compute/cpu_blas/rope.c - rotary position embedding, in place, in
 * the rotate-half form (Hugging Face's Llama): per row, the cos and sin of
 * every pair are computed once in fp32 into the thread's scratch, then applied
 * to every head. */
#include <math.h>

#include "plugins/compute/cpu_blas/cpu_blas.h"

struct cb_rope {
	struct cpu_blas_ctx *c;
	const struct fg_rope_args *a;
};

static void cb_rope_rows(void *arg, int64_t b, int64_t e, int tid)
{
	struct cb_rope *R = arg;
	const struct fg_rope_args *a = R->a;
	int64_t half = a->rot_dim / 2;
	float *cs = R->c->scratch[tid], *sn = cs + half;

	for (int64_t r = b; r < e; r++) {
		float *x = (float *)a->x.data + r * a->x.ld;
		float pos = (float)a->positions[r];

		for (int64_t i = 0; i < half; i++) {
			float ang = pos * a->inv_freq[i];

			cs[i] = cosf(ang) * a->attn_factor;
			sn[i] = sinf(ang) * a->attn_factor;
		}
		for (int64_t h = 0; h < a->heads; h++) {
			float *p = x + h * a->head_dim;

			for (int64_t i = 0; i < half; i++) {
				float u = p[i], v = p[i + half];

				p[i] = u * cs[i] - v * sn[i];
				p[i + half] = v * cs[i] + u * sn[i];
			}
		}
	}
}

/* The core checked the arguments (core/backend/compute_ops.c). */
int cpu_blas_rope(void *ctx, void *stream, const struct fg_rope_args *a)
{
	struct cpu_blas_ctx *c = ctx;
	struct cb_rope R = { .c = c, .a = a };
	int64_t cols = a->heads * a->head_dim;
	int rc;

	(void)stream;
	if (a->n == 0 || a->rot_dim == 0 || cols == 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	rc = cpu_blas_scratch(c, (size_t)a->rot_dim);
	if (!rc)
		cpu_blas_pool_run(c->pool, a->n, 1 + 16384 / cols, cb_rope_rows, &R);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
