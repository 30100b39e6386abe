/* core/plan/plan.c - placement of the family's tensors and the sizes of
 * every run buffer, as byte counts. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/f8.h>
#include <fgcore/q4.h>
#include "core/plan/plan.h"
#include "core/util/error.h"
#include "core/tier/tier.h"

#define ALIGN(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))

uint64_t fg_plan_tensor_bytes(const struct fg_plan_tensor *t, int64_t rows)
{
	if (t->dtype == FG_DTYPE_Q4_ROWS)
		return fg_q4_bytes((uint64_t)rows, (uint64_t)t->cols, 0);
	if (t->dtype == FG_DTYPE_F8_ROWS)
		return fg_f8_bytes((uint64_t)rows, (uint64_t)t->cols);
	return (uint64_t)rows * (uint64_t)t->cols * 2;
}

enum fg_dtype fg_plan_weight_dtype(const struct fg_policy *p)
{
	return !p->compress_weight ? FG_DTYPE_F16 : p->weight_fp8 ? FG_DTYPE_F8_ROWS
								 : FG_DTYPE_Q4_ROWS;
}

enum fg_dtype fg_plan_cache_dtype(const struct fg_policy *p, enum fg_dtype act)
{
	return !p->compress_cache ? act : p->cache_fp8 ? FG_DTYPE_F8_COLS : FG_DTYPE_Q4_COLS;
}

const char *fg_plan_weight_codec(enum fg_dtype t)
{
	return t == FG_DTYPE_Q4_ROWS ? "int4_group64" : t == FG_DTYPE_F8_ROWS ? "fp8_e4m3_rows" : NULL;
}

static void fg_plan_add_piece(struct fg_plan_tensor *t, enum fg_role role, int64_t row0,
			      int64_t rows)
{
	if (rows <= 0)
		return;
	t->piece[t->npieces++] = (struct fg_plan_piece){ .role = role, .row0 = row0, .rows = rows };
}

int64_t fg_plan_block_tensors(const struct fg_model_config *c, enum fg_block_kind kind)
{
	struct fg_tensor_list l;

	fg_tensor_list_block(&l, c, kind);
	return fg_tensor_list_count(&l);
}

/* Where the policy's weight shares cut a block of `total` elements: disk
 * below cut[0], host below cut[1], compute above. */
struct fg_plan_cuts {
	const int *pc;
	double total, cut[2];
	int exact;
};

/* Tensor t's pieces, its first element `pos` elements into the block (the
 * tensors before it, in list order: FlexGen's midpoint rule depends on it). */
static void fg_plan_pieces(const struct fg_plan_cuts *k, enum fg_block_kind kind, double pos,
			   struct fg_plan_tensor *t)
{
	double size = (double)t->rows * (double)t->cols, row = (double)t->cols;

	/* The input block's tables are gathered from, never split. */
	if (k->exact && kind != FG_BLOCK_INPUT && t->rows > 1) {
		int64_t g = t->dtype == FG_DTYPE_Q4_ROWS ? FG_Q4_GROUP : 1;
		int64_t r1 = (int64_t)((k->cut[0] - pos) / row / (double)g + 0.5) * g;
		int64_t r2 = (int64_t)((k->cut[1] - pos) / row / (double)g + 0.5) * g;
		r1 = r1 < 0 ? 0 : r1 > t->rows ? t->rows : r1;
		r2 = r2 < r1 ? r1 : r2 > t->rows ? t->rows : r2;
		fg_plan_add_piece(t, FG_ROLE_DISK, 0, r1);
		fg_plan_add_piece(t, FG_ROLE_HOST, r1, r2 - r1);
		fg_plan_add_piece(t, FG_ROLE_COMPUTE, r2, t->rows - r2);
	} else {
		fg_plan_add_piece(t, fg_policy_choice(k->pc, (pos + size / 2) / k->total * 100.0), 0,
				  t->rows);
	}
}

/* Do the tensors of the expert run, `at` elements into the block, lie whole
 * on one tier, `role`?  (An absent entry is none of them.) */
static int fg_plan_group_on(const struct fg_plan_cuts *k, enum fg_block_kind kind,
			    const struct fg_tensor_list *l, const struct fg_plan_tensor *model,
			    double at, enum fg_role role)
{
	for (int j = 0; j < l->nrun; j++) {
		struct fg_plan_tensor t = model[l->run[j]];
		if (!t.present)
			continue;
		fg_plan_pieces(k, kind, at, &t);
		if (t.npieces != 1 || t.piece[0].role != role)
			return 0;
		at += (double)t.rows * (double)t.cols;
	}
	return 1;
}

/* The experts from e on whose tensors all lie whole on expert e's tier (or
 * 0): a summary adds them at once instead of one tensor at a time, wide
 * mixtures having hundreds.  Tiers follow positions in order (disk, host,
 * compute; a split tensor between two), so for each matrix of an expert
 * "on e's tier" holds for a run of experts from e on and then never: the
 * experts that qualify are a prefix, found by bisection with the very
 * placement the walk would make.  group: the elements of one expert. */
static int64_t fg_plan_same_tier(const struct fg_plan_cuts *k, enum fg_block_kind kind,
				 const struct fg_tensor_list *l, const struct fg_plan_tensor *model,
				 int64_t e, double pos, double group, enum fg_role *role)
{
	struct fg_plan_tensor t = model[l->run[0]];
	int64_t lo = 1, hi = l->experts - e;

	if (!t.present)
		return 0;
	fg_plan_pieces(k, kind, pos, &t);
	*role = t.piece[0].role;
	if (t.npieces != 1 || !fg_plan_group_on(k, kind, l, model, pos, *role))
		return 0;
	while (lo < hi) { /* groups e .. e + lo - 1 qualify */
		int64_t mid = lo + (hi - lo + 1) / 2;
		if (fg_plan_group_on(k, kind, l, model, pos + (double)(mid - 1) * group, *role))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

void fg_plan_block(const struct fg_model_config *c, const struct fg_policy *p,
		   enum fg_block_kind kind, int gather, struct fg_plan_block *b,
		   struct fg_plan_tensor *out)
{
	struct fg_tensor_list l;
	/* each entry's tensor before placement, an expert entry's for every expert */
	struct fg_plan_tensor model[FG_ARCH_TABLE_MAX];
	struct fg_plan_cuts k = { .pc = p->weight, .exact = p->exact };
	const int *runs[3] = { l.pre, l.run, l.post };
	uint64_t late[FG_ROLES] = { 0 }, gathered = 0, group_bytes = 0;
	double pos = 0, group = 0;

	fg_tensor_list_block(&l, c, kind);
	int counts[3] = { l.npre, l.nrun, l.npost };
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < counts[r]; i++) {
			const struct fg_tensor_def *d = &l.tab[runs[r][i]];
			struct fg_plan_tensor *t = &model[runs[r][i]];
			*t = (struct fg_plan_tensor){ .def = d, .expert = -1 };
			t->present = fg_arch_present(c, d);
			t->rows = fg_dim_value(c, d->rows);
			t->cols = fg_dim_value(c, d->cols);
			t->dtype = d->flags & FG_TD_LINEAR ? fg_plan_weight_dtype(p) : FG_DTYPE_F16;
			if (!t->present)
				continue;
			k.total += (double)t->rows * (double)t->cols * (double)(r == 1 ? l.experts : 1);
			if (r == 1) {
				group += (double)t->rows * (double)t->cols;
				group_bytes += ALIGN(fg_plan_tensor_bytes(t, t->rows), 64);
			}
		}
	k.cut[0] = k.total * k.pc[FG_ROLE_DISK] / 100.0;
	k.cut[1] = k.total * (k.pc[FG_ROLE_DISK] + k.pc[FG_ROLE_HOST]) / 100.0;
	*b = (struct fg_plan_block){ .kind = kind, .ntensors = fg_tensor_list_count(&l) };

	/* Pieces at 64-byte aligned offsets, those of gathered tensors after the
	 * rest (which are staged in bulk): counted apart in `late` here, moved
	 * behind the bulk below; each tier's region a whole page. */
	for (int64_t i = 0; i < b->ntensors; i++) {
		struct fg_tensor_ref ref = fg_tensor_list_at(&l, i);
		struct fg_plan_tensor one, *t = out ? &out[i] : &one;
		enum fg_role role;
		int64_t n;
		/* (whole experts on one tier take no gather and pack in bulk) */
		if (!out && ref.expert >= 0 && ref.entry == l.run[0] &&
		    (n = fg_plan_same_tier(&k, kind, &l, model, ref.expert, pos, group, &role))) {
			b->bulk[role] += (uint64_t)n * group_bytes;
			pos += (double)n * group;
			i += n * l.nrun - 1;
			continue;
		}
		*t = model[ref.entry];
		t->expert = ref.expert;
		if (!t->present)
			continue;
		fg_plan_pieces(&k, kind, pos, t);
		pos += (double)t->rows * (double)t->cols;
		t->by_rows = kind == FG_BLOCK_INPUT && t->def->rows == FG_DIM_VOCAB &&
			     t->npieces == 1 && t->piece[0].role == FG_ROLE_HOST;
		t->gathered = (gather && t->npieces > 1) || t->by_rows;
		uint64_t *at = t->gathered ? late : b->bulk;
		for (int j = 0; j < t->npieces; j++) {
			struct fg_plan_piece *pp = &t->piece[j];
			pp->bytes = fg_plan_tensor_bytes(t, pp->rows);
			pp->offset = at[pp->role];
			at[pp->role] += ALIGN(pp->bytes, 64);
		}
		if (t->gathered) {
			t->gather = gathered;
			gathered += ALIGN(fg_plan_tensor_bytes(t, t->rows), 64);
		}
	}
	uint64_t bulk = b->bulk[FG_ROLE_HOST] + b->bulk[FG_ROLE_DISK];
	for (int64_t i = 0; out && i < b->ntensors; i++) {
		if (!out[i].gathered)
			continue;
		out[i].gather += bulk;
		for (int j = 0; j < out[i].npieces; j++)
			out[i].piece[j].offset += b->bulk[out[i].piece[j].role];
	}
	for (int r = 0; r < FG_ROLES; r++)
		b->bytes[r] = ALIGN(b->bulk[r] + late[r], 4096);
	b->staged = ALIGN(bulk + gathered, 4096);
}

int fg_plan_gather_ranges(const struct fg_plan_tensor *t, int k, uint64_t src[2], uint64_t at[2],
			  uint64_t len[2])
{
	const struct fg_plan_piece *p = &t->piece[k];
	uint64_t cols = (uint64_t)t->cols, r0 = (uint64_t)p->row0, nr = (uint64_t)p->rows;

	src[0] = 0;
	if (t->dtype == FG_DTYPE_F8_ROWS) { /* codes, then a scale per row */
		at[0] = r0 * cols;
		len[0] = nr * cols;
		src[1] = fg_f8_data_bytes(nr, cols);
		at[1] = fg_f8_data_bytes((uint64_t)t->rows, cols) + r0 * 4;
		len[1] = nr * 4;
		return 2;
	}
	if (t->dtype != FG_DTYPE_Q4_ROWS) {
		at[0] = r0 * cols * 2;
		len[0] = nr * cols * 2;
		return 1;
	}
	at[0] = r0 * cols / 2;
	len[0] = (nr * cols + 1) / 2;
	src[1] = fg_q4_data_bytes(nr, cols);
	at[1] = fg_q4_data_bytes((uint64_t)t->rows, cols) + r0 / FG_Q4_GROUP * cols * 4;
	len[1] = (nr + FG_Q4_GROUP - 1) / FG_Q4_GROUP * cols * 4;
	return 2;
}

uint64_t fg_plan_kv_bytes(const struct fg_model_config *c, int64_t nseq, int64_t total,
			  unsigned act_bytes, enum fg_dtype cdt)
{
	uint64_t rows = (uint64_t)(nseq * total), w = (uint64_t)fg_dim_value(c, FG_DIM_KV);
	if (cdt == FG_DTYPE_Q4_COLS)
		return ALIGN(fg_q4_bytes(rows, w, 1), 64);
	if (cdt == FG_DTYPE_F8_COLS)
		return ALIGN(fg_f8c_bytes(rows, w), 64);
	return ALIGN(rows * w * act_bytes, 64);
}

int64_t fg_plan_ring_window(const struct fg_model_config *c)
{
	if (c->sliding_window <= 0 || c->layers < 1)
		return 0;
	for (int64_t l = 0; l < c->layers; l++)
		if (fg_layer_window(c, l) <= 0)
			return 0;
	return c->sliding_window;
}

int64_t fg_plan_cache_cols(const struct fg_model_config *c, const struct fg_policy *p,
			   const struct fg_plan_env *env, int64_t total)
{
	int64_t w = fg_plan_ring_window(c);

	if (!env->window_ring || !p->window_ring || p->share_prefix > 0 || w <= 0 || w >= total)
		return total;
	return w;
}

int fg_plan_make(const struct fg_model_config *c, const struct fg_policy *p,
		 const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
		 struct fg_plan *o)
{
	int64_t bs = p->gpu_batch_size, nb = p->num_gpu_batches, total = prompt_len + gen_len;
	const struct fg_arch *a = c->arch;
	unsigned asz = env->act_bytes;
	int compress = p->compress_cache;
	enum fg_dtype cdt = fg_plan_cache_dtype(p, asz == 4 ? FG_DTYPE_F32 : FG_DTYPE_F16);

	memset(o, 0, sizeof(*o));
	if (bs < 1 || nb < 1 || prompt_len < 1 || gen_len < 0 || (asz != 2 && asz != 4)) {
		FG_ERR("plan: batch %lld x %lld, prompt %lld, gen %lld, activations of %u bytes: not a run the engine accepts",
		       (long long)nb, (long long)bs, (long long)prompt_len, (long long)gen_len, asz);
		return -EINVAL;
	}
	if (env->no_window && c->sliding_window > 0 && total > c->sliding_window) {
		FG_ERR("%s: config.json sets sliding_window %lld, and this run needs %lld positions: the compute backend cannot apply a sliding window (it needs compute ABI 1.11); use another backend, or keep prompt + generation within %lld tokens",
		       c->name, (long long)c->sliding_window, (long long)total,
		       (long long)c->sliding_window);
		return -ENOTSUP;
	}
	if (total > c->max_pos) {
		FG_ERR("prompt length %lld + generation length %lld exceed %s's %lld positions",
		       (long long)prompt_len, (long long)gen_len, c->name, (long long)c->max_pos);
		return -EINVAL;
	}
	if (compress && fg_dim_value(c, FG_DIM_KV) % FG_Q4_GROUP) {
		FG_ERR("compress_cache needs a key/value width that is a multiple of %d (its groups); %s has %lld",
		       FG_Q4_GROUP, c->name, (long long)fg_dim_value(c, FG_DIM_KV));
		return -EINVAL;
	}
	o->bs = bs;
	o->nb = nb;
	o->prompt_len = prompt_len;
	o->positions = total;
	o->cols = fg_plan_cache_cols(c, p, env, total);

	/* Weights. */
	for (int k = 0; k < FG_BLOCK_KINDS; k++)
		fg_plan_block(c, p, (enum fg_block_kind)k, env->device, &o->block[k], NULL);
	for (int r = 0; r < FG_ROLES; r++)
		o->weights[r] = o->block[FG_BLOCK_INPUT].bytes[r] + o->block[FG_BLOCK_OUTPUT].bytes[r] +
				(uint64_t)c->layers * (o->block[FG_BLOCK_ATTN].bytes[r] +
						       o->block[FG_BLOCK_MLP].bytes[r]);

	/* Splits of the cache (by sequence) and the activations (by GPU batch). */
	fg_policy_split(p->cache, bs, o->cfirst, o->ccount);
	fg_policy_split(p->act, nb, o->afirst, o->acount);
	o->delegate = p->cpu_cache_compute && o->ccount[FG_ROLE_HOST] > 0;
	o->n_off = o->delegate ? o->ccount[FG_ROLE_DISK]
			       : o->ccount[FG_ROLE_HOST] + o->ccount[FG_ROLE_DISK];
	o->nslots = p->overlap ? FG_PLAN_SLOTS : 1;

	/* Workspaces, in the family's order. */
	uint64_t rows = (uint64_t)(bs * prompt_len);
	o->nws = a->nworkspace;
	for (int i = 0; i < a->nworkspace; i++) {
		const struct fg_workspace_def *w = &a->workspace[i];
		o->ws_offset[i] = o->scratch;
		o->scratch += ALIGN((uint64_t)fg_ws_rows(c, w, bs, prompt_len) *
				    (uint64_t)fg_dim_value(c, w->cols) * asz, 64);
	}
	/* Delegated attention's decode steps run GPU batches on two streams in
	 * turn (schedule.c): the second's workspaces, for one token a row. */
	o->scratch_alt = 0;
	for (int i = 0; o->delegate && env->device && p->host_overlap && i < a->nworkspace; i++)
		o->scratch_alt += ALIGN((uint64_t)fg_ws_rows(c, &a->workspace[i], bs, 1) *
					(uint64_t)fg_dim_value(c, a->workspace[i].cols) * asz, 64);
	o->hidden = ALIGN(rows * (uint64_t)c->hidden * (env->hidden_bytes ? env->hidden_bytes : asz), 64);

	/* Weight slots: a unit is a layer's attention and MLP block (or one
	 * block with sep_layer), the input or the output block. */
	const struct fg_plan_block *B = o->block;
	o->stage[FG_BLOCK_MLP] = p->sep_layer ? 0 : B[FG_BLOCK_ATTN].staged;
	uint64_t units[4] = { B[FG_BLOCK_INPUT].staged, B[FG_BLOCK_OUTPUT].staged,
			      p->sep_layer ? B[FG_BLOCK_ATTN].staged
					   : B[FG_BLOCK_ATTN].staged + B[FG_BLOCK_MLP].staged,
			      p->sep_layer ? B[FG_BLOCK_MLP].staged : 0 };
	int nunits = c->layers ? 4 : 2;
	for (int i = 0; i < nunits; i++)
		o->wslot = units[i] > o->wslot ? units[i] : o->wslot;
	int any_disk = o->weights[FG_ROLE_DISK] > 0;
	o->wbounce = env->device && any_disk ? o->wslot : 0;

	/* KV cache: homes per tier, slots for the sequences computed off their
	 * home; o->cols columns a sequence (a ring of the window's, or every
	 * position). */
	for (int r = 0; r < FG_ROLES; r++) {
		o->kv[r] = o->ccount[r] ? fg_plan_kv_bytes(c, o->ccount[r], o->cols, asz, cdt) : 0;
		o->cache[r] = 2 * o->kv[r];
	}
	if (o->n_off) {
		o->kv_slot = fg_plan_kv_bytes(c, o->n_off, o->cols, asz, cdt);
		o->cslot = 2 * o->kv_slot;
		o->cbounce = env->device && o->ccount[FG_ROLE_DISK] ? o->cslot : 0;
	}
	/* Activations off the compute tier pass through slots. */
	int any_off_act = o->acount[FG_ROLE_HOST] + o->acount[FG_ROLE_DISK] > 0;
	o->hslot = any_off_act ? o->hidden : 0;
	o->hbounce = any_off_act && env->device && o->acount[FG_ROLE_DISK] ? o->hidden : 0;
	/* Delegated attention stages q, k, v and its result in host memory. */
	uint64_t qb = ALIGN(rows * (uint64_t)fg_dim_value(c, FG_DIM_Q) * asz, 64);
	uint64_t kb = ALIGN(rows * (uint64_t)fg_dim_value(c, FG_DIM_KV) * asz, 64);
	o->hstage = o->delegate && env->device ? 2 * (qb + kb) : 0; /* q, k, v, result */

	/* The host's view of one GPU batch's logits: floats for a host argmax
	 * (backends without one), the f16 copy that conversion reads, positions. */
	uint64_t lrows = (uint64_t)bs * (uint64_t)c->vocab;
	o->hs_logits = ALIGN(lrows * 4, 64);
	o->hs_pos = o->hs_logits + (asz == 2 ? ALIGN(lrows * 2, 64) : 0);
	o->host_scratch = o->hs_pos + ALIGN(rows * 4, 64);

	uint64_t *run = o->run;
	run[FG_ROLE_COMPUTE] = o->scratch + o->scratch_alt + (uint64_t)o->nslots * o->wslot +
			       FG_PLAN_SLOTS * (o->cslot + o->hslot);
	run[FG_ROLE_HOST] = (uint64_t)o->nslots * o->wbounce +
			    FG_PLAN_SLOTS * (o->cbounce + o->hbounce) + o->hstage + o->host_scratch;
	for (int r = 0; r < FG_ROLES; r++) {
		run[r] += (uint64_t)o->acount[r] * o->hidden + (uint64_t)nb * (uint64_t)c->layers * o->cache[r];
		o->total[r] = o->weights[r] + run[r];
	}
	return 0;
}

static uint64_t run_on(const struct fg_plan *pl, unsigned mask)
{
	uint64_t sum = 0;
	for (int r = 0; r < FG_ROLES; r++)
		if (mask & (1u << r))
			sum += pl->run[r];
	return sum;
}

/* The largest gpu_batch_size below p's whose run buffers on the tiers of
 * `mask` take at most `avail` bytes; 0: none. */
static int64_t largest_fit(const struct fg_model_config *c, const struct fg_policy *p,
			   const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
			   unsigned mask, uint64_t avail)
{
	struct fg_policy q = *p;
	int64_t fit = 0;

	for (int64_t lo = 1, hi = p->gpu_batch_size - 1; lo <= hi;) {
		int64_t mid = lo + (hi - lo) / 2;
		struct fg_plan smaller;
		q.gpu_batch_size = mid;
		if (!fg_plan_make(c, &q, env, prompt_len, gen_len, &smaller) &&
		    run_on(&smaller, mask) <= avail)
			fit = mid, lo = mid + 1;
		else
			hi = mid - 1;
	}
	return fit;
}

int fg_plan_fits(const struct fg_model_config *c, const struct fg_policy *p,
		 const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
		 const uint64_t avail[FG_ROLES], const char *const names[FG_ROLES])
{
	struct fg_plan plan;
	int rc;

	if ((rc = fg_plan_make(c, p, env, prompt_len, gen_len, &plan)))
		return rc;
	for (int r = 0; r < FG_ROLES; r++) {
		if (!plan.run[r] || plan.run[r] <= avail[r])
			continue;
		int64_t fit = largest_fit(c, p, env, prompt_len, gen_len, 1u << r, avail[r]);
		char need[32], free_[32];
		fg_format_bytes(plan.run[r], need, sizeof(need));
		fg_format_bytes(avail[r], free_, sizeof(free_));
		if (fit)
			FG_ERR("tier %s: a %lld x %lld batch of %lld + %lld tokens needs %s for cache, activations and buffers, %s are free: the largest gpu_batch_size that fits is %lld (or lower this tier's cache/activation share in [policy] percent)",
			       names[r], (long long)p->num_gpu_batches, (long long)p->gpu_batch_size,
			       (long long)prompt_len, (long long)gen_len, need, free_, (long long)fit);
		else
			FG_ERR("tier %s: a %lld x %lld batch of %lld + %lld tokens needs %s for cache, activations and buffers, %s are free: no gpu_batch_size fits; lower this tier's shares in [policy] percent or raise its capacity",
			       names[r], (long long)p->num_gpu_batches, (long long)p->gpu_batch_size,
			       (long long)prompt_len, (long long)gen_len, need, free_);
		return -ENOSPC;
	}
	return 0;
}

int fg_plan_fits_shared(const struct fg_model_config *c, const struct fg_policy *p,
			const struct fg_plan_env *env, int64_t prompt_len, int64_t gen_len,
			unsigned mask, uint64_t avail, const char *group)
{
	struct fg_plan plan;
	char need[32], free_[32], parts[FG_ROLES * 48] = "";
	size_t len = 0;
	int rc;

	if ((rc = fg_plan_make(c, p, env, prompt_len, gen_len, &plan)))
		return rc;
	if (run_on(&plan, mask) <= avail)
		return 0;
	for (int r = FG_ROLES - 1; r >= 0; r--) {
		char one[32];
		if (!(mask & (1u << r)))
			continue;
		int w = snprintf(parts + len, sizeof(parts) - len, "%s%s %s", len ? ", " : "",
				 fg_role_name(r), fg_format_bytes(plan.run[r], one, sizeof(one)));
		if (w > 0 && (size_t)w < sizeof(parts) - len)
			len += (size_t)w;
	}
	int64_t fit = largest_fit(c, p, env, prompt_len, gen_len, mask, avail);
	char tail[96];
	if (fit)
		snprintf(tail, sizeof(tail), "the largest gpu_batch_size that fits is %lld", (long long)fit);
	else
		snprintf(tail, sizeof(tail), "no gpu_batch_size fits");
	FG_ERR("tiers %s share one host memory: a %lld x %lld batch of %lld + %lld tokens needs %s there (%s) for cache, activations and buffers, %s are free: %s (or move cache/activation shares to the disk tier in [policy] percent)",
	       group, (long long)p->num_gpu_batches, (long long)p->gpu_batch_size,
	       (long long)prompt_len, (long long)gen_len,
	       fg_format_bytes(run_on(&plan, mask), need, sizeof(need)), parts,
	       fg_format_bytes(avail, free_, sizeof(free_)), tail);
	return -ENOSPC;
}
