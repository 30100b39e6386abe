/* core/optimizer/layout.c - fg_model_load's placement and fg_forward_new's
 * buffers as byte counts, for the cost model.  Keep in step with
 * core/engine/model.c and core/engine/forward.c (tests/test_optimizer.c
 * compares the two on a real engine). */
#include <errno.h>
#include <stdint.h>

#include <fgcore/q4.h>
#include "core/optimizer/layout.h"
#include "core/util/error.h"

#define ALIGN(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))

struct ltensor {
	int64_t rows, cols;
	int q4; /* stored as FG_DTYPE_Q4_ROWS */
};

static uint64_t tensor_bytes(const struct ltensor *t, int64_t rows)
{
	if (t->q4)
		return fg_q4_bytes((uint64_t)rows, (uint64_t)t->cols, 0);
	return (uint64_t)rows * (uint64_t)t->cols * 2;
}

/* The tensors of a block in model.c's order (its midpoint rule depends on it). */
static int describe(int kind, const struct fg_opt_config *c, int compress, struct ltensor *t)
{
	int64_t h = c->hidden, f = c->ffn;
	int n = 0;
#define T(r, cl, lin) (t[n++] = (struct ltensor){ (r), (cl), (lin) && compress })
	switch (kind) {
	case FG_LAYOUT_INPUT:
		T(c->vocab, h, 0);
		T(c->max_pos + 2, h, 0);
		break;
	case FG_LAYOUT_ATTN:
		for (int i = 0; i < 4; i++) {
			T(h, h, 1); /* q, k, v, out_proj */
			T(1, h, 0); /* its bias */
		}
		T(1, h, 0); /* layer norm */
		T(1, h, 0);
		break;
	case FG_LAYOUT_MLP:
		T(f, h, 1);
		T(1, f, 0);
		T(h, f, 1);
		T(1, h, 0);
		T(1, h, 0);
		T(1, h, 0);
		break;
	default:
		T(1, h, 0);
		T(1, h, 0);
		T(c->vocab, h, 1);
		break;
	}
#undef T
	return n;
}

static void place(int kind, const struct ltensor *t, int n, const struct fg_policy *p,
		  uint64_t bytes[FG_ROLES])
{
	double total = 0, pos = 0;
	const int *pc = p->weight;

	for (int r = 0; r < FG_ROLES; r++)
		bytes[r] = 0;
	for (int i = 0; i < n; i++)
		total += (double)t[i].rows * (double)t[i].cols;
	double cut1 = total * pc[FG_ROLE_DISK] / 100.0;
	double cut2 = total * (pc[FG_ROLE_DISK] + pc[FG_ROLE_HOST]) / 100.0;
	for (int i = 0; i < n; i++) {
		double size = (double)t[i].rows * (double)t[i].cols, row = (double)t[i].cols;
		if (p->exact && kind != FG_LAYOUT_INPUT && t[i].rows > 1) {
			int64_t g = t[i].q4 ? FG_Q4_GROUP : 1;
			int64_t r1 = (int64_t)((cut1 - pos) / row / (double)g + 0.5) * g;
			int64_t r2 = (int64_t)((cut2 - pos) / row / (double)g + 0.5) * g;
			r1 = r1 < 0 ? 0 : r1 > t[i].rows ? t[i].rows : r1;
			r2 = r2 < r1 ? r1 : r2 > t[i].rows ? t[i].rows : r2;
			int64_t rows[FG_ROLES] = { r1, r2 - r1, t[i].rows - r2 };
			for (int r = 0; r < FG_ROLES; r++)
				if (rows[r] > 0)
					bytes[r] += ALIGN(tensor_bytes(&t[i], rows[r]), 64);
		} else {
			enum fg_role r = fg_policy_choice(pc, (pos + size / 2) / total * 100.0);
			bytes[r] += ALIGN(tensor_bytes(&t[i], t[i].rows), 64);
		}
		pos += size;
	}
	for (int r = 0; r < FG_ROLES; r++)
		bytes[r] = ALIGN(bytes[r], 4096);
}

void fg_layout_blocks(const struct fg_opt_config *c, const struct fg_policy *p,
		      uint64_t bytes[FG_LAYOUT_KINDS][FG_ROLES])
{
	struct ltensor t[10];
	for (int k = 0; k < FG_LAYOUT_KINDS; k++) {
		int n = describe(k, c, p->compress_weight, t);
		place(k, t, n, p, bytes[k]);
	}
}

uint64_t fg_layout_kv_bytes(int64_t nseq, int64_t total, int64_t hidden, unsigned act_bytes,
			    int compress)
{
	uint64_t rows = (uint64_t)(nseq * total), h = (uint64_t)hidden;
	if (compress)
		return ALIGN(fg_q4_bytes(rows, h, 1), 64);
	return ALIGN(rows * h * act_bytes, 64);
}

/* Staged bytes of a unit (a layer's attention and MLP block, or one block with
 * sep_layer): its off-compute weights, each block aligned as plan_units does. */
static uint64_t staged(const uint64_t b[FG_ROLES])
{
	return ALIGN(b[FG_ROLE_HOST] + b[FG_ROLE_DISK], 4096);
}

int fg_run_layout(const struct fg_opt_config *c, const struct fg_policy *p,
		  const struct fg_layout_env *env, const uint64_t blocks[FG_LAYOUT_KINDS][FG_ROLES],
		  int64_t prompt_len, int64_t gen_len, struct fg_run_layout *o)
{
	int64_t bs = p->gpu_batch_size, nb = p->num_gpu_batches, total = prompt_len + gen_len;
	unsigned asz = env->act_bytes;
	int64_t afirst[FG_ROLES], cfirst[FG_ROLES];

	*o = (struct fg_run_layout){ 0 };
	if (bs < 1 || nb < 1 || prompt_len < 1 || gen_len < 0 || (asz != 2 && asz != 4) ||
	    total > c->max_pos) {
		FG_ERR("layout: batch %lld x %lld, prompt %lld + gen %lld (of %lld positions), activations of %u bytes: not a run the engine accepts",
		       (long long)nb, (long long)bs, (long long)prompt_len, (long long)gen_len,
		       (long long)c->max_pos, asz);
		return -EINVAL;
	}
	if (p->compress_cache && c->hidden % FG_Q4_GROUP) {
		FG_ERR("layout: compress_cache needs a hidden size that is a multiple of %d; %s has %lld",
		       FG_Q4_GROUP, c->name, (long long)c->hidden);
		return -EINVAL;
	}
	fg_policy_split(p->cache, bs, cfirst, o->ccount);
	fg_policy_split(p->act, nb, afirst, o->acount);
	o->delegate = p->cpu_cache_compute && o->ccount[FG_ROLE_HOST] > 0;
	o->n_off = o->delegate ? o->ccount[FG_ROLE_DISK]
			       : o->ccount[FG_ROLE_HOST] + o->ccount[FG_ROLE_DISK];
	o->nslots = p->overlap ? FG_LAYOUT_SLOTS : 1;

	/* Weight slots: the largest unit's staged weights. */
	uint64_t layer = p->sep_layer ? 0 : staged(blocks[FG_LAYOUT_ATTN]) + staged(blocks[FG_LAYOUT_MLP]);
	uint64_t units[4] = { staged(blocks[FG_LAYOUT_INPUT]), staged(blocks[FG_LAYOUT_OUTPUT]),
			      p->sep_layer ? staged(blocks[FG_LAYOUT_ATTN]) : layer,
			      p->sep_layer ? staged(blocks[FG_LAYOUT_MLP]) : 0 };
	uint64_t slot = 0;
	for (int i = 0; i < 4; i++)
		slot = units[i] > slot ? units[i] : slot;
	if (c->layers == 0)
		slot = units[0] > units[1] ? units[0] : units[1];
	int any_disk = blocks[FG_LAYOUT_INPUT][FG_ROLE_DISK] || blocks[FG_LAYOUT_OUTPUT][FG_ROLE_DISK] ||
		       (c->layers && (blocks[FG_LAYOUT_ATTN][FG_ROLE_DISK] ||
				      blocks[FG_LAYOUT_MLP][FG_ROLE_DISK]));
	o->wslot = slot;
	o->wbounce = env->device && any_disk ? slot : 0;

	uint64_t rows = (uint64_t)(bs * prompt_len), h = (uint64_t)c->hidden;
	o->hidden = ALIGN(rows * h * asz, 64);
	o->scratch = 5 * o->hidden + ALIGN(rows * (uint64_t)c->ffn * asz, 64) +
		     ALIGN((uint64_t)bs * (uint64_t)c->vocab * asz, 64);
	for (int r = 0; r < FG_ROLES; r++)
		o->cache[r] = o->ccount[r]
			      ? 2 * fg_layout_kv_bytes(o->ccount[r], total, c->hidden, asz, p->compress_cache)
			      : 0;
	int any_off_act = o->acount[FG_ROLE_HOST] + o->acount[FG_ROLE_DISK] > 0;
	o->hslot = any_off_act ? o->hidden : 0;
	o->hbounce = any_off_act && env->device && o->acount[FG_ROLE_DISK] ? o->hidden : 0;
	if (o->n_off) {
		o->cslot = 2 * fg_layout_kv_bytes(o->n_off, total, c->hidden, asz, p->compress_cache);
		o->cbounce = env->device && o->ccount[FG_ROLE_DISK] ? o->cslot : 0;
	}
	o->hstage = o->delegate && env->device ? 4 * o->hidden : 0;

	uint64_t *run = o->run;
	run[FG_ROLE_COMPUTE] = o->scratch + (uint64_t)o->nslots * o->wslot +
			       FG_LAYOUT_SLOTS * (o->cslot + o->hslot);
	run[FG_ROLE_HOST] = (uint64_t)o->nslots * o->wbounce +
			    FG_LAYOUT_SLOTS * (o->cbounce + o->hbounce) + o->hstage;
	for (int r = 0; r < FG_ROLES; r++)
		run[r] += (uint64_t)o->acount[r] * o->hidden +
			  (uint64_t)nb * (uint64_t)c->layers * o->cache[r];
	return 0;
}

int fg_layout_total(const struct fg_opt_config *c, const struct fg_policy *p,
		    const struct fg_layout_env *env, int64_t prompt_len, int64_t gen_len,
		    struct fg_layout_total *out)
{
	uint64_t b[FG_LAYOUT_KINDS][FG_ROLES];
	int rc;

	fg_layout_blocks(c, p, b);
	if ((rc = fg_run_layout(c, p, env, b, prompt_len, gen_len, &out->run)))
		return rc;
	for (int r = 0; r < FG_ROLES; r++) {
		out->weights[r] = b[FG_LAYOUT_INPUT][r] + b[FG_LAYOUT_OUTPUT][r] +
				  (uint64_t)c->layers * (b[FG_LAYOUT_ATTN][r] + b[FG_LAYOUT_MLP][r]);
		out->total[r] = out->weights[r] + out->run.run[r];
	}
	return 0;
}
