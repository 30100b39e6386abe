/* core/optimizer/optimize.c - the policy search: enumerate the batch shape
 * and the binary choices, solve an LP (GLPK) for the placement shares, round
 * to what the engine realizes, price exactly, keep the best. */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_GLPK
#include <glpk.h>
#endif

#include "core/optimizer/optimize.h"
#include "core/util/error.h"

#define GB 1073741824.0 /* FlexGen's GB, for printing */

void fg_optimize_out_free(struct fg_optimize_out *out)
{
	free(out->best);
	memset(out, 0, sizeof(*out));
}

int fg_optimize_policy_keys(const struct fg_policy *p,
			    int (*set)(void *user, const char *assignment), void *user)
{
	char kv[96];
	int rc;
	/* each key set as it is written: no count of them to keep in step */
#define KV(...)                                             \
	do {                                                \
		snprintf(kv, sizeof(kv), __VA_ARGS__);      \
		if ((rc = set(user, kv)))                   \
			return rc;                          \
	} while (0)
#define BOOL(x) ((x) ? "true" : "false")
	KV("policy.gpu_batch_size=%lld", (long long)p->gpu_batch_size);
	KV("policy.num_gpu_batches=%lld", (long long)p->num_gpu_batches);
	KV("policy.percent=%d %d %d %d %d %d", p->weight[FG_ROLE_COMPUTE], p->weight[FG_ROLE_HOST],
	   p->cache[FG_ROLE_COMPUTE], p->cache[FG_ROLE_HOST], p->act[FG_ROLE_COMPUTE],
	   p->act[FG_ROLE_HOST]);
	KV("policy.placement=%s", p->exact ? "exact" : "midpoint");
	KV("policy.overlap=%s", BOOL(p->overlap));
	KV("policy.sep_layer=%s", BOOL(p->sep_layer));
	KV("policy.pin_weight=%s", BOOL(p->pin_weight));
	KV("policy.cpu_cache_compute=%s", BOOL(p->cpu_cache_compute));
	KV("policy.compress_weight=%s", BOOL(p->compress_weight));
	KV("policy.weight_codec=%s", p->weight_fp8 ? "fp8_e4m3_rows" : "int4_group64");
	KV("policy.compress_cache=%s", BOOL(p->compress_cache));
	KV("policy.cache_codec=%s", p->cache_fp8 ? "fp8_e4m3_group64" : "int4_group64");
	KV("policy.window_ring=%s", BOOL(p->window_ring));
#undef BOOL
#undef KV
	return 0;
}

/* A result's columns from the batch on, its throughput times `scale`. */
static void print_result(FILE *f, const struct fg_optimize_result *r, double scale)
{
	const struct fg_policy *p = &r->policy;
	char batch[32], pct[32];
	snprintf(batch, sizeof(batch), "%lldx%lld", (long long)p->gpu_batch_size,
		 (long long)p->num_gpu_batches);
	snprintf(pct, sizeof(pct), "%d %d %d %d %d %d", p->weight[FG_ROLE_COMPUTE],
		 p->weight[FG_ROLE_HOST], p->cache[FG_ROLE_COMPUTE], p->cache[FG_ROLE_HOST],
		 p->act[FG_ROLE_COMPUTE], p->act[FG_ROLE_HOST]);
	fprintf(f, "%-11s %-20s %-4s %-4s %-4s %-4s %12.3f %12.3f %12.3f %7.2f GB %7.2f GB %7.2f GB\n",
		batch, pct, p->cpu_cache_compute ? "yes" : "no",
		!p->compress_weight ? "no" : p->weight_fp8 ? "fp8" : "int4",
		!p->compress_cache ? "no" : p->cache_fp8 ? "fp8" : "int4", p->sep_layer ? "yes" : "no",
		scale * r->pred.prefill_tps, scale * r->pred.decode_tps, scale * r->pred.total_tps,
		(double)r->pred.mem.total[FG_ROLE_COMPUTE] / GB,
		(double)r->pred.mem.total[FG_ROLE_HOST] / GB,
		(double)r->pred.mem.total[FG_ROLE_DISK] / GB);
}

static void print_header(FILE *f, const char *first, int width)
{
	fprintf(f, "%-*s %-11s %-20s %-4s %-4s %-4s %-4s %12s %12s %12s %10s %10s %10s\n", width,
		first, "batch", "percent", "cpu", "cw", "cc", "sep", "prefill t/s", "decode t/s",
		"total t/s", "compute", "host", "disk");
}

void fg_optimize_print(FILE *f, const struct fg_optimize_out *out)
{
	print_header(f, "rank", 4);
	for (int i = 0; i < out->nbest; i++) {
		fprintf(f, "%-4d ", i + 1);
		print_result(f, &out->best[i], 1);
	}
}

/* "1.20 GB more on the disk tier, ..." for the tiers that miss bytes; "" when none. */
static void missing_text(char *need, size_t n, const uint64_t missing[FG_ROLES])
{
	size_t len = 0;
	need[0] = 0;
	for (int r = FG_ROLES - 1; r >= 0 && len < n; r--)
		if (missing[r]) {
			int w = snprintf(need + len, n - len, "%s%.2f GB more on the %s tier",
					 len ? ", " : "", (double)missing[r] / GB, fg_role_name(r));
			len += w > 0 ? (size_t)w : 0;
		}
}

/* Fitting layouts first, by the job's throughput, then more replicas (fewer
 * hops between stages); those that do not fit after, more replicas first. */
static int layout_cmp(const void *pa, const void *pb)
{
	const struct fg_optimize_layout *a = pa, *b = pb;
	if (!a->rc != !b->rc)
		return a->rc ? 1 : -1;
	if (!a->rc) {
		double ta = (double)a->replicas * a->best.pred.total_tps;
		double tb = (double)b->replicas * b->best.pred.total_tps;
		if (fabs(ta - tb) > 1e-9 * fmax(ta, tb))
			return ta > tb ? -1 : 1;
	}
	return a->replicas > b->replicas ? -1 : a->replicas < b->replicas;
}

int fg_optimize_layouts(const struct fg_optimize_params *p, int64_t gpus,
			struct fg_optimize_layout **out, int *n)
{
	struct fg_optimize_params q = *p;
	char why[1024] = "";
	int k = 0, fit = 0;

	*out = NULL;
	*n = 0;
	if (gpus < 1) {
		FG_ERR("optimize: %lld GPUs: give at least one", (long long)gpus);
		return -EINVAL;
	}
	for (int64_t s = 1; s <= gpus && s <= p->cc.model.layers; s++)
		k += gpus % s == 0;
	struct fg_optimize_layout *l = calloc((size_t)(k ? k : 1), sizeof(*l));
	if (!l) {
		FG_ERR("optimize: out of memory");
		return -ENOMEM;
	}
	k = 0;
	for (int64_t s = 1; s <= gpus && s <= p->cc.model.layers; s++) {
		if (gpus % s)
			continue;
		struct fg_optimize_out o;
		q.cc.stages = s;
		int rc = fg_optimize(&q, &o);
		if (rc && rc != -ENOSPC) {
			fg_optimize_out_free(&o);
			free(l);
			return rc;
		}
		l[k] = (struct fg_optimize_layout){ .replicas = gpus / s, .stages = s, .rc = rc,
						    .lps = o.lps };
		if (rc) {
			memcpy(l[k].missing, o.missing, sizeof(o.missing));
			/* the last kept: the most stages, the least memory on each GPU */
			snprintf(why, sizeof(why), "%s", fg_last_error());
		} else {
			l[k].best = o.best[0];
			fit++;
		}
		fg_optimize_out_free(&o);
		k++;
	}
	qsort(l, (size_t)k, sizeof(*l), layout_cmp);
	*out = l;
	*n = k;
	if (!fit) { /* k >= 1: one stage always is a layout */
		FG_ERR("no layout of %lld GPUs fits; with %lld stages: %s", (long long)gpus,
		       (long long)l[k - 1].stages, why);
		return -ENOSPC;
	}
	return 0;
}

void fg_optimize_layouts_print(FILE *f, const struct fg_optimize_layout *l, int n)
{
	print_header(f, "rank layout", 14);
	for (int i = 0, rank = 0; i < n; i++) {
		char lay[48], need[256];
		snprintf(lay, sizeof(lay), "%lldx%lld", (long long)l[i].replicas,
			 (long long)l[i].stages);
		if (l[i].rc) {
			missing_text(need, sizeof(need), l[i].missing);
			fprintf(f, "%-4s %-9s does not fit: needs %s\n", "-", lay,
				need[0] ? need : "a little more memory than the rounding leaves");
			continue;
		}
		fprintf(f, "%-4d %-9s ", ++rank, lay);
		print_result(f, &l[i].best, (double)l[i].replicas);
	}
}

#ifndef HAVE_GLPK

int fg_optimize(const struct fg_optimize_params *p, struct fg_optimize_out *out)
{
	(void)p;
	memset(out, 0, sizeof(*out));
	FG_ERR("fgcore was built without GLPK, which the policy optimizer needs: install the Debian package libglpk-dev and run ./configure again");
	return -ENOTSUP;
}

#else

/* The discrete part of a policy; cw, cq: the weights' and the cache's codec,
 * 0 none, 1 4-bit, 2 fp8 (at most 2 x 3 x 3 x 2^4 = 288 choices). */
#define MAX_CHOICES 288
struct choice {
	int cpu, cw, cq, sep, act_off, dw, dc, overlap;
};

/* LP columns (1-based, as GLPK numbers them). */
#define COL_X(i) (1 + (i))
#define COL_S (1 + FG_X_N)
#define COL_T(st, part) (2 + FG_X_N + 2 * (st) + (part))
#define COL_O(r) (6 + FG_X_N + (r)) /* overflow of tier r in GB (the "missing" LP) */
#define NCOLS (5 + FG_X_N + FG_ROLES)
#define MEM_UNIT 1e9 /* memory rows in GB: keeps the coefficients near 1 */

struct search {
	const struct fg_optimize_params *prm;
	const struct fg_cost_case *cc;
	double cap[FG_ROLES];   /* usable bytes per tier */
	int top;
	struct fg_optimize_result *best;
	int nbest;
	int64_t lps;
};

/* Does a refilled run of this choice join with attention on the host over
 * host sequences (its join steps computing the whole GPU batch, not the
 * joining rows alone: cost_model.c, join_rows_computed)? */
static int joins_whole(const struct search *s, const struct choice *ch)
{
	return ch->cpu && fg_cost_refills(s->cc);
}

/* The policy whose flags the cost terms read for a choice; its shares are
 * only mode markers (disk in use, activations off the compute tier). */
static void mode_policy(const struct search *s, struct fg_policy *p, int64_t gbs, int64_t nb,
			const struct choice *ch)
{
	memset(p, 0, sizeof(*p));
	/* a windowed model's cache a ring of the window, as the engine keeps it */
	p->window_ring = !s->prm->no_window_ring;
	p->gpu_batch_size = gbs;
	p->num_gpu_batches = nb;
	p->overlap = ch->overlap;
	p->sep_layer = ch->sep;
	p->pin_weight = 1;
	p->cpu_cache_compute = ch->cpu;
	p->host_overlap = 0; /* the engine's default (not yet measured on a GPU) */
	p->attn_sparsity = 1;
	p->compress_weight = ch->cw != 0;
	p->weight_fp8 = ch->cw == 2;
	p->compress_cache = ch->cq != 0;
	p->cache_fp8 = ch->cq == 2;
	p->exact = 1;
	p->weight[FG_ROLE_DISK] = ch->dw;
	p->weight[FG_ROLE_COMPUTE] = 100 - ch->dw;
	p->cache[FG_ROLE_DISK] = ch->dc;
	p->cache[FG_ROLE_COMPUTE] = 100 - ch->dc;
	if (joins_whole(s, ch)) { /* a marker: host sequences */
		p->cache[FG_ROLE_COMPUTE] = 0;
		p->cache[FG_ROLE_HOST] = 100 - ch->dc;
	}
	p->act[FG_ROLE_COMPUTE] = ch->act_off ? 50 : 100;
	p->act[FG_ROLE_HOST] = ch->act_off ? 50 : 0;
}

static void add_row(glp_prob *lp, int n, const int *ind, const double *val, int type, double lo,
		    double hi)
{
	int r = glp_add_rows(lp, 1);
	glp_set_mat_row(lp, r, n, ind, val);
	glp_set_row_bnds(lp, r, type, lo, hi);
}

/* Row: scale * (sum of lins(x)) + extra coefficients, bounded. */
struct row {
	int ind[NCOLS + 1];
	double val[NCOLS + 1];
	double acc[NCOLS + 1];
	double c;
};

static void row_init(struct row *r)
{
	memset(r, 0, sizeof(*r));
}

static void row_lin(struct row *r, const struct fg_lin *l, double scale)
{
	for (int i = 0; i < FG_X_N; i++)
		r->acc[COL_X(i)] += scale * l->a[i];
	r->c += scale * l->c;
}

static void row_add(glp_prob *lp, struct row *r, int type, double lo, double hi)
{
	int n = 0;
	for (int j = 1; j <= NCOLS; j++)
		if (r->acc[j] != 0) {
			n++;
			r->ind[n] = j;
			r->val[n] = r->acc[j];
		}
	add_row(lp, n, r->ind, r->val, type, lo, hi);
}

/* Solve the LP of one (batch shape, choice).  caps: bytes per tier.  With
 * `missing` (FG_ROLES values), memory may overflow into the O columns, the
 * overflow is what is minimized, and missing[] receives it.
 * Returns 0 with *obj and x[] set, 1 when infeasible. */
static int solve(struct search *s, const struct fg_cost_terms *t, const struct choice *ch,
		 int64_t gbs, int64_t nb, const double caps[FG_ROLES], double *missing, double *obj,
		 double x[FG_X_N])
{
	glp_prob *lp = glp_create_prob();
	struct row r;
	int ret = 1;

	s->lps++;
	glp_set_obj_dir(lp, GLP_MIN);
	glp_add_cols(lp, NCOLS);
	for (int j = 1; j <= NCOLS; j++)
		glp_set_col_bnds(lp, j, GLP_LO, 0, 0);
	for (int i = 0; i < FG_X_N; i++)
		glp_set_col_bnds(lp, COL_X(i), GLP_DB, 0, 1);
	if (!ch->dw) {
		glp_set_col_bnds(lp, COL_X(FG_X_WN), GLP_FX, 0, 0);
		glp_set_col_bnds(lp, COL_X(FG_X_IN), GLP_FX, 0, 0);
	}
	if (!ch->dc)
		glp_set_col_bnds(lp, COL_X(FG_X_CN), GLP_FX, 0, 0);
	/* A join gathers its rows but with host attention over a host
	 * sequence (without one it is the policy without host attention). */
	if (joins_whole(s, ch))
		glp_set_col_bnds(lp, COL_X(FG_X_CC), GLP_DB, 1 / (double)gbs, 1);
	glp_set_col_bnds(lp, COL_X(FG_X_HN), GLP_FX, 0, 0); /* activations: compute or host */
	if (!ch->act_off) {
		glp_set_col_bnds(lp, COL_X(FG_X_HG), GLP_FX, 1, 1);
		glp_set_col_bnds(lp, COL_X(FG_X_HC), GLP_FX, 0, 0);
	} else if (nb > 1) {
		/* at least one GPU batch off the compute tier, else it is the other choice */
		glp_set_col_bnds(lp, COL_X(FG_X_HG), GLP_DB, 0, (double)(nb - 1) / (double)nb);
	} else {
		glp_set_col_bnds(lp, COL_X(FG_X_HG), GLP_FX, 0, 0);
	}
	if (!missing)
		for (int r0 = 0; r0 < FG_ROLES; r0++)
			glp_set_col_bnds(lp, COL_O(r0), GLP_FX, 0, 0);

	/* Shares of each kind add up to one; the input/output blocks follow the layers. */
	static const int sums[4][3] = { { FG_X_WG, FG_X_WC, FG_X_WN }, { FG_X_IG, FG_X_IC, FG_X_IN },
					{ FG_X_CG, FG_X_CC, FG_X_CN }, { FG_X_HG, FG_X_HC, FG_X_HN } };
	for (int k = 0; k < 4; k++) {
		row_init(&r);
		for (int i = 0; i < 3; i++)
			r.acc[COL_X(sums[k][i])] = 1;
		row_add(lp, &r, GLP_FX, 1, 1);
	}
	for (int i = 0; i < 2; i++) {
		row_init(&r);
		r.acc[COL_X(FG_X_IG + i)] = 1;
		r.acc[COL_X(FG_X_WG + i)] = -1;
		row_add(lp, &r, GLP_FX, 0, 0);
	}
	/* The weight slots hold the largest unit's off-compute weights. */
	for (int u = 0; u < t->nunits; u++) {
		row_init(&r);
		row_lin(&r, &t->unit[u], -1 / MEM_UNIT);
		r.acc[COL_S] = 1 / MEM_UNIT;
		row_add(lp, &r, GLP_LO, 0, 0);
	}
	/* Capacities. */
	for (int ro = 0; ro < FG_ROLES; ro++) {
		row_init(&r);
		row_lin(&r, &t->mem[ro], 1 / MEM_UNIT);
		r.acc[COL_S] = t->slot[ro] / MEM_UNIT;
		r.acc[COL_O(ro)] = -1;
		row_add(lp, &r, GLP_UP, 0, caps[ro] / MEM_UNIT - r.c);
	}
	/* Stage times: at least each sum of the overlap rule. */
	for (int st = 0; st < FG_STAGES; st++)
		for (int part = 0; part < FG_PARTS; part++) {
			const struct fg_lin *L = t->t[st][part];
			const struct fg_cost_rule *rule = fg_cost_rule(t, st);
			for (int k = 0; k < rule->nsets; k++) {
				row_init(&r);
				r.acc[COL_T(st, part)] = 1;
				for (const int *l = rule->set[k]; *l >= 0; l++)
					row_lin(&r, &L[*l], -1);
				row_add(lp, &r, GLP_LO, -r.c, 0);
			}
		}
	/* Objective: the run's time (a refilled turnover's: its join steps as
	 * prefill), or the memory missing. */
	double l = (double)t->layers, steps = (double)t->decode_steps, pre = t->prefill_steps;
	if (missing) {
		/* Prefer to report what is missing on the cheaper, larger tiers. */
		static const double w[FG_ROLES] = { 1, 2, 4 };
		for (int ro = 0; ro < FG_ROLES; ro++)
			glp_set_obj_coef(lp, COL_O(ro), w[ro]);
	} else {
		glp_set_obj_coef(lp, COL_T(FG_STAGE_PREFILL, FG_PART_LAYER), l * pre);
		glp_set_obj_coef(lp, COL_T(FG_STAGE_PREFILL, FG_PART_IO), pre);
		glp_set_obj_coef(lp, COL_T(FG_STAGE_DECODE, FG_PART_LAYER), l * steps);
		glp_set_obj_coef(lp, COL_T(FG_STAGE_DECODE, FG_PART_IO), steps);
	}

	glp_smcp parm;
	glp_init_smcp(&parm);
	parm.msg_lev = GLP_MSG_OFF;
	glp_scale_prob(lp, GLP_SF_AUTO);
	if (glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT) {
		*obj = glp_get_obj_val(lp);
		for (int i = 0; i < FG_X_N; i++)
			x[i] = glp_get_col_prim(lp, COL_X(i));
		if (missing)
			for (int ro = 0; ro < FG_ROLES; ro++)
				missing[ro] = glp_get_col_prim(lp, COL_O(ro)) * MEM_UNIT;
		ret = 0;
	}
	glp_delete_prob(lp);
	return ret;
}

/* The integer percent p (0..100) whose split of n items gives k of them,
 * as fg_policy_split rounds; the nearest count when none does exactly. */
static int percent_for(int64_t n, int64_t k)
{
	int best = 0;
	double best_d = INFINITY;
	for (int p = 0; p <= 100; p++) {
		double cnt = (double)llround((double)n * p / 100.0);
		double d = fabs(cnt - (double)k) * 1000 + fabs(p - 100.0 * (double)k / (double)n);
		if (d < best_d)
			best_d = d, best = p;
	}
	return best;
}

static int same_policy(const struct fg_policy *a, const struct fg_policy *b)
{
	return a->gpu_batch_size == b->gpu_batch_size && a->num_gpu_batches == b->num_gpu_batches &&
	       !memcmp(a->weight, b->weight, sizeof(a->weight)) &&
	       !memcmp(a->cache, b->cache, sizeof(a->cache)) &&
	       !memcmp(a->act, b->act, sizeof(a->act)) && a->sep_layer == b->sep_layer &&
	       a->cpu_cache_compute == b->cpu_cache_compute &&
	       a->compress_weight == b->compress_weight && a->weight_fp8 == b->weight_fp8 &&
	       a->compress_cache == b->compress_cache && a->cache_fp8 == b->cache_fp8;
}

/* Better: more throughput; on a tie the larger batch, then the larger GPU batch. */
static int better(const struct fg_optimize_result *a, const struct fg_optimize_result *b)
{
	double ta = a->pred.total_tps, tb = b->pred.total_tps;
	if (fabs(ta - tb) > 1e-9 * fmax(ta, tb))
		return ta > tb;
	int64_t ba = a->policy.gpu_batch_size * a->policy.num_gpu_batches;
	int64_t bb = b->policy.gpu_batch_size * b->policy.num_gpu_batches;
	if (ba != bb)
		return ba > bb;
	if (a->policy.gpu_batch_size != b->policy.gpu_batch_size)
		return a->policy.gpu_batch_size > b->policy.gpu_batch_size;
	/* then the one that leaves the slower tiers emptier */
	for (int r = FG_ROLE_DISK; r < FG_ROLE_COMPUTE; r++)
		if (a->pred.mem.total[r] != b->pred.mem.total[r])
			return a->pred.mem.total[r] < b->pred.mem.total[r];
	return 0;
}

static void keep(struct search *s, const struct fg_optimize_result *r)
{
	for (int i = 0; i < s->nbest; i++)
		if (same_policy(&s->best[i].policy, &r->policy)) {
			if (better(r, &s->best[i]))
				s->best[i] = *r;
			goto sort;
		}
	if (s->nbest < s->top)
		s->best[s->nbest++] = *r;
	else if (better(r, &s->best[s->nbest - 1]))
		s->best[s->nbest - 1] = *r;
	else
		return;
sort:
	for (int i = s->nbest - 1; i > 0 && better(&s->best[i], &s->best[i - 1]); i--) {
		struct fg_optimize_result tmp = s->best[i];
		s->best[i] = s->best[i - 1];
		s->best[i - 1] = tmp;
	}
}

static int fits(const struct search *s, const struct fg_cost_prediction *pr, double over[FG_ROLES])
{
	int ok = 1;
	for (int r = 0; r < FG_ROLES; r++) {
		over[r] = (double)pr->mem.total[r] - s->cap[r];
		if (over[r] > 0)
			ok = 0;
	}
	return ok;
}

/* Round LP shares to the policies the engine realizes around them and keep
 * the best that fits.  Returns 1 with the worst overflow per tier when none fits. */
static int realize(struct search *s, int64_t gbs, int64_t nb, const struct choice *ch,
		   const double x[FG_X_N], double lp_tps, double over_out[FG_ROLES])
{
	const double eps = 1e-6;
	int64_t w1[2] = { (int64_t)floor(100 * x[FG_X_WG] + eps), (int64_t)ceil(100 * x[FG_X_WG] - eps) };
	double wgc = x[FG_X_WG] + x[FG_X_WC];
	int64_t w12[2] = { (int64_t)floor(100 * wgc + eps), (int64_t)ceil(100 * wgc - eps) };
	double cgv = x[FG_X_CG] * (double)gbs, cgc = (x[FG_X_CG] + x[FG_X_CC]) * (double)gbs;
	int64_t k1[2] = { (int64_t)floor(cgv + eps), (int64_t)ceil(cgv - eps) };
	int64_t k12[2] = { (int64_t)floor(cgc + eps), (int64_t)ceil(cgc - eps) };
	double hgv = x[FG_X_HG] * (double)nb;
	int64_t a1[2] = { (int64_t)floor(hgv + eps), (int64_t)ceil(hgv - eps) };
	struct fg_optimize_result best;
	int have = 0;

	for (int r = 0; r < FG_ROLES; r++)
		over_out[r] = INFINITY;
	for (int m = 0; m < 16; m++) {
		int iw1 = m & 1, iw12 = (m >> 1) & 1, ik1 = (m >> 2) & 1, ik12 = (m >> 3) & 1;
		if ((iw1 && w1[1] == w1[0]) || (iw12 && w12[1] == w12[0]) ||
		    (ik1 && k1[1] == k1[0]) || (ik12 && k12[1] == k12[0]))
			continue;
		for (int ia = 0; ia < 2; ia++) {
			if (ia && a1[1] == a1[0])
				continue;
			struct fg_policy p;
			mode_policy(s, &p, gbs, nb, ch);
			int64_t pw1 = w1[iw1] < 0 ? 0 : w1[iw1] > 100 ? 100 : w1[iw1];
			int64_t pw12 = w12[iw12] < pw1 ? pw1 : w12[iw12] > 100 ? 100 : w12[iw12];
			int64_t kk1 = k1[ik1] < 0 ? 0 : k1[ik1] > gbs ? gbs : k1[ik1];
			int64_t kk12 = k12[ik12] < kk1 ? kk1 : k12[ik12] > gbs ? gbs : k12[ik12];
			int64_t aa1 = a1[ia] < 0 ? 0 : a1[ia] > nb ? nb : a1[ia];
			p.weight[FG_ROLE_COMPUTE] = (int)pw1;
			p.weight[FG_ROLE_HOST] = (int)(pw12 - pw1);
			p.weight[FG_ROLE_DISK] = (int)(100 - pw12);
			int c1 = percent_for(gbs, kk1), c12 = percent_for(gbs, kk12);
			c12 = c12 < c1 ? c1 : c12;
			p.cache[FG_ROLE_COMPUTE] = c1;
			p.cache[FG_ROLE_HOST] = c12 - c1;
			p.cache[FG_ROLE_DISK] = 100 - c12;
			int h1 = percent_for(nb, aa1);
			p.act[FG_ROLE_COMPUTE] = h1;
			p.act[FG_ROLE_HOST] = 100 - h1;
			p.act[FG_ROLE_DISK] = 0;

			struct fg_optimize_result res = { .policy = p, .lp_tps = lp_tps };
			double over[FG_ROLES];
			if (fg_cost_predict(s->cc, &p, &res.pred))
				continue;
			if (!fits(s, &res.pred, over)) {
				double worst = 0, prev = 0;
				for (int r = 0; r < FG_ROLES; r++)
					worst = fmax(worst, over[r]), prev = fmax(prev, over_out[r]);
				if (worst < prev || isinf(prev))
					memcpy(over_out, over, sizeof(over));
				continue;
			}
			if (!have || better(&res, &best))
				best = res, have = 1;
		}
	}
	if (!have)
		return 1;
	keep(s, &best);
	return 0;
}

/* LP, rounding, and LP again with tighter capacities while rounding overflows. */
static int try_shape(struct search *s, int64_t gbs, int64_t nb, const struct choice *ch,
		     double *lp_tps)
{
	struct fg_policy mp;
	struct fg_cost_terms t;
	double caps[FG_ROLES], x[FG_X_N], obj, over[FG_ROLES];

	mode_policy(s, &mp, gbs, nb, ch);
	if (fg_cost_terms(s->cc, &mp, &t))
		return -1;
	memcpy(caps, s->cap, sizeof(caps));
	for (int round = 0; round < 4; round++) {
		if (solve(s, &t, ch, gbs, nb, caps, NULL, &obj, x))
			return round == 0 ? -1 : 1;
		double tps = t.tokens / obj;
		if (round == 0)
			*lp_tps = tps;
		/* Not worth rounding: clearly below the worst policy kept. */
		if (s->nbest == s->top && tps < s->best[s->nbest - 1].pred.total_tps * 0.95)
			return 0;
		if (!realize(s, gbs, nb, ch, x, *lp_tps, over))
			return 0;
		int any = 0;
		for (int r = 0; r < FG_ROLES; r++)
			if (isfinite(over[r]) && over[r] > 0)
				caps[r] -= over[r] + 1048576, any = 1;
		if (!any)
			return 1;
	}
	return 1;
}

/* Is the LP of (gbs, nb, choice) feasible at all? */
static int feasible(struct search *s, int64_t gbs, int64_t nb, const struct choice *ch)
{
	struct fg_policy mp;
	struct fg_cost_terms t;
	double x[FG_X_N], obj;
	mode_policy(s, &mp, gbs, nb, ch);
	return !fg_cost_terms(s->cc, &mp, &t) && !solve(s, &t, ch, gbs, nb, s->cap, NULL, &obj, x);
}

static int64_t largest_nb(struct search *s, int64_t gbs, int64_t cap, const struct choice *ch)
{
	int64_t lo = 1, hi;
	if (!feasible(s, gbs, 1, ch))
		return 0;
	for (hi = 2; hi <= cap && feasible(s, gbs, hi, ch); hi *= 2)
		lo = hi;
	if (hi > cap) {
		if (feasible(s, gbs, cap, ch))
			return cap;
		hi = cap;
	}
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;
		if (feasible(s, gbs, mid, ch))
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static int64_t next_size(int64_t v)
{
	/* 1 2 3 4 6 8 12 16 24 32 48 64 ... */
	if (v < 4)
		return v + 1;
	int64_t p = 4;
	while (p * 2 <= v)
		p *= 2;
	return v == p ? p + p / 2 : 2 * p;
}

static int nchoices(const struct search *s, int any_disk, int overlap, struct choice *out)
{
	const struct fg_hardware *hw = &s->cc->hw;
	int q4 = hw->q4_decode_bdw > 0 && !s->prm->no_compress;
	/* fp8 weights where their rate was profiled: fewer bytes than fp16, more than 4-bit */
	int f8 = hw->f8_decode_bdw > 0 && !s->prm->no_compress;
	int cpu = hw->cpu_attn_bdw > 0 && !s->prm->no_cpu_attention;
	int disk = any_disk || s->cap[FG_ROLE_DISK] > 0;
	int dev = !hw->compute_host_memory;
	/* an fp8 cache where its attention rates were profiled (the host's too with cpu) */
	int f8c = hw->attn_decode_f8_bdw > 0 && !s->prm->no_compress;
	int codecs[3], ncodecs = 0, n = 0;

	codecs[ncodecs++] = 0;
	if (q4)
		codecs[ncodecs++] = 1;
	if (f8)
		codecs[ncodecs++] = 2;
	for (int c = 0; c <= cpu; c++) {
		int caches[3], ncaches = 0;

		caches[ncaches++] = 0;
		if (q4 && (!c || hw->cpu_attn_q4_bdw > 0))
			caches[ncaches++] = 1;
		if (f8c && (!c || hw->cpu_attn_f8_bdw > 0))
			caches[ncaches++] = 2;
		for (int w = 0; w < ncodecs; w++)
			for (int q = 0; q < ncaches; q++)
				for (int sep = 0; sep <= 1; sep++)
					for (int act = 0; act <= 1; act++)
						for (int dw = dev ? 0 : disk; dw <= disk; dw++)
							for (int dc = dev ? 0 : disk; dc <= disk; dc++)
								out[n++] = (struct choice){ c, codecs[w],
											    caches[q], sep,
											    act, dw, dc,
											    overlap };
	}
	return n;
}

/* Where memory is missing for the smallest run, spread to need the least. */
static void report_missing(struct search *s, struct fg_optimize_out *out)
{
	struct choice ch[MAX_CHOICES];
	int n = nchoices(s, 1, 0, ch);
	double best = INFINITY, x[FG_X_N], obj, miss[FG_ROLES];
	int64_t gbs = s->prm->gpu_batch_size > 0 ? s->prm->gpu_batch_size : 1;
	int64_t nb = s->prm->num_gpu_batches > 0 ? s->prm->num_gpu_batches : 1;

	for (int i = 0; i < n; i++) {
		struct fg_policy mp;
		struct fg_cost_terms t;
		mode_policy(s, &mp, gbs, nb, &ch[i]);
		if (fg_cost_terms(s->cc, &mp, &t) ||
		    solve(s, &t, &ch[i], gbs, nb, s->cap, miss, &obj, x))
			continue;
		if (obj < best) {
			best = obj;
			for (int r = 0; r < FG_ROLES; r++)
				out->missing[r] = (uint64_t)ceil(miss[r]);
		}
	}
	char need[256];
	missing_text(need, sizeof(need), out->missing);
	FG_ERR("%s does not fit with prompt %lld + %lld tokens in %.2f + %.2f + %.2f GB (compute, host, disk, after a %.0f%% margin): it needs at least %s",
	       s->cc->model.name, (long long)s->cc->prompt_len, (long long)s->cc->gen_len,
	       s->cap[FG_ROLE_COMPUTE] / GB, s->cap[FG_ROLE_HOST] / GB, s->cap[FG_ROLE_DISK] / GB,
	       100 * s->prm->margin, need[0] ? need : "a little more memory than the rounding leaves");
}

/* Every batch shape and choice: the LPs, their rounding, the best kept. */
static void search(struct search *s, int n, const struct choice *ch, int64_t max_batch)
{
	const struct fg_optimize_params *prm = s->prm;

	for (int64_t gbs = prm->gpu_batch_size > 0 ? prm->gpu_batch_size : 1; gbs <= max_batch;
	     gbs = next_size(gbs)) {
		int any = 0;
		for (int i = 0; i < n; i++) {
			int64_t cap = max_batch / gbs, top;
			if (prm->num_gpu_batches > 0)
				top = prm->num_gpu_batches <= cap &&
				      feasible(s, gbs, prm->num_gpu_batches, &ch[i])
				      ? prm->num_gpu_batches : 0;
			else
				top = largest_nb(s, gbs, cap, &ch[i]);
			if (!top)
				continue;
			any = 1;
			/* 1 2 3 4 6 8 12 ... below the largest, and the largest */
			int64_t nb = prm->num_gpu_batches > 0 ? top : 1;
			while (nb < top) {
				double lp_tps = 0;
				try_shape(s, gbs, nb, &ch[i], &lp_tps);
				nb = next_size(nb);
			}
			/* At the memory edge the rounded shares may not fit where the
			 * LP's do: step down a little until one does. */
			int64_t steps = prm->num_gpu_batches > 0 ? 1 : 8;
			for (int64_t k = top; k >= 1 && k > top - steps; k--) {
				double lp_tps = 0;
				if (try_shape(s, gbs, k, &ch[i], &lp_tps) == 0)
					break;
			}
		}
		/* A larger GPU batch only needs more memory: stop at the first that fits nowhere. */
		if (!any || prm->gpu_batch_size > 0)
			break;
	}
}

int fg_optimize(const struct fg_optimize_params *prm, struct fg_optimize_out *out)
{
	const struct fg_cost_case *cc = &prm->cc;
	struct search s = { .prm = prm, .cc = cc, .top = prm->top > 0 ? prm->top : 5 };
	struct choice ch[MAX_CHOICES];
	int64_t max_batch = prm->max_batch > 0 ? prm->max_batch : 4096;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!(prm->margin >= 0 && prm->margin <= 0.5) || prm->gpu_batch_size < 0 ||
	    prm->num_gpu_batches < 0 || prm->max_batch < 0 || prm->top < 0 || prm->top > 1000) {
		FG_ERR("optimize: margin %g (0..0.5), batch sizes and counts must not be negative",
		       prm->margin);
		return -EINVAL;
	}
	if ((rc = fg_hardware_check(&cc->hw)))
		return rc;
	if (cc->prompt_len < 1 || cc->gen_len < 1 ||
	    cc->prompt_len + cc->gen_len > cc->model.max_pos) {
		FG_ERR("optimize: prompt %lld + generation %lld tokens: both at least 1 and together at most %s's %lld positions",
		       (long long)cc->prompt_len, (long long)cc->gen_len, cc->model.name,
		       (long long)cc->model.max_pos);
		return -EINVAL;
	}
	s.cap[FG_ROLE_COMPUTE] = (double)cc->hw.gpu_mem * (1 - prm->margin);
	s.cap[FG_ROLE_HOST] = (double)cc->hw.cpu_mem * (1 - prm->margin);
	s.cap[FG_ROLE_DISK] = (double)cc->hw.disk_mem * (1 - prm->margin);
	s.best = calloc((size_t)s.top, sizeof(*s.best));
	if (!s.best) {
		FG_ERR("optimize: out of memory");
		return -ENOMEM;
	}
	glp_term_out(GLP_OFF);
	/* Without overlap only one weight slot is needed: the fallback when nothing fits. */
	for (int overlap = 1; overlap >= 0 && !s.nbest; overlap--)
		search(&s, nchoices(&s, 0, overlap, ch), ch, max_batch);
	out->lps = s.lps;
	if (!s.nbest) {
		free(s.best);
		report_missing(&s, out);
		out->lps = s.lps;
		return -ENOSPC;
	}
	out->best = s.best;
	out->nbest = s.nbest;
	return 0;
}

#endif /* HAVE_GLPK */
