/* core/exec/buffers.c - a run's buffers, allocated exactly as the memory
 * plan sizes them, after checking that the plan fits the tiers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/forward_int.h"
#include "core/util/error.h"

static int alloc_on(struct fg_forward *f, enum fg_role role, uint64_t size, struct fg_region *r,
		    const char *what)
{
	char hint[160];
	if (!size)
		return 0;
	if (!f->tier[role]) {
		FG_ERR("%s needs the %s tier, which is not configured", what, fg_role_name(role));
		return -EINVAL;
	}
	snprintf(hint, sizeof(hint), "(%s) a smaller gpu_batch_size x num_gpu_batches, shorter prompts or another [policy] percent would fit",
		 what);
	return fg_tier_alloc_hint(f->tier[role], size, r, hint);
}

static void free_on(struct fg_forward *f, enum fg_role role, struct fg_region *r)
{
	if (r->size)
		fg_tier_free(f->tier[role], r);
	memset(r, 0, sizeof(*r));
}

/* How the compute tier and backend look to the plan. */
static void plan_env(const struct fg_forward_env *env, struct fg_plan_env *out)
{
	const struct fg_tier *ct = env->model->tier[FG_ROLE_COMPUTE];
	out->act_bytes = fg_dtype_size(env->be->info.act_dtype);
	out->hidden_bytes = fg_dtype_size(env->be->info.hidden_dtype);
	out->device = !(ct->info.flags & FG_STORAGE_HOST_MEMORY);
	out->no_window = env->be->minor < 11;
	/* A ring of the window's length: every backend that reads the cache
	 * runs one (the host's too, with cpu_cache_compute); one process only,
	 * a pipeline's stages keep every position. */
	enum fg_dtype cdt = fg_plan_cache_dtype(&env->policy, env->be->info.act_dtype);
	const struct fg_backend *hb = env->host_be ? env->host_be : env->be;
	out->window_ring = !env->dist && fg_backend_window_ring(env->be, cdt) &&
			   (!env->policy.cpu_cache_compute || fg_backend_window_ring(hb, cdt));
}

/* The model as this stage's plan sees it: its own layers' cache and buffers. */
static struct fg_model_config stage_cfg(const struct fg_model *m)
{
	struct fg_model_config c = m->cfg;
	c.layers = m->stage.nlayers;
	return c;
}

/* Units: the input block, per layer one (or with sep_layer two) units, the output block. */
static int plan_units(struct fg_forward *f)
{
	const struct fg_model *m = f->m;

	f->ufirst = calloc((size_t)m->nblocks, sizeof(int64_t));
	f->ucount = calloc((size_t)m->nblocks, sizeof(int64_t));
	if (!f->ufirst || !f->ucount)
		return -ENOMEM;
	for (int64_t bi = 0; bi < m->nblocks; bi++) {
		/* Without sep_layer an MLP block joins its layer's attention unit. */
		if (!f->env.policy.sep_layer && m->blocks[bi].plan->kind == FG_BLOCK_MLP) {
			f->ucount[f->nunits - 1]++;
		} else {
			f->ufirst[f->nunits] = bi;
			f->ucount[f->nunits++] = 1;
		}
	}
	return 0;
}

/* Before allocating: would the run buffers fit what each tier has free? */
static int check_fits(const struct fg_forward_env *env, const struct fg_plan_env *pe,
		      int64_t prompt_len, int64_t gen_len)
{
	const struct fg_model *m = env->model;
	const struct fg_model_config sc = stage_cfg(m);
	uint64_t avail[FG_ROLES];
	char names[FG_ROLES][96];
	const char *np[FG_ROLES];

	for (int r = 0; r < FG_ROLES; r++) {
		const struct fg_tier *t = m->tier[r];
		avail[r] = UINT64_MAX;
		snprintf(names[r], sizeof(names[r]), "%s", fg_role_name(r));
		if (t) {
			avail[r] = fg_tier_room(t);
			snprintf(names[r], sizeof(names[r]), "%s (%s)", t->role, t->ph.plugin->name);
		}
		np[r] = names[r];
	}
	int rc = fg_plan_fits(&sc, &env->policy, pe, prompt_len, gen_len, avail, np);
	/* Tiers of one memory must also fit it together. */
	const struct fg_tier_budget *b = m->tier[FG_ROLE_HOST] ? m->tier[FG_ROLE_HOST]->budget : NULL;
	if (!rc && b) {
		unsigned mask = 0;
		for (int r = 0; r < FG_ROLES; r++)
			if (m->tier[r] && m->tier[r]->budget == b)
				mask |= 1u << r;
		rc = fg_plan_fits_shared(&sc, &env->policy, pe, prompt_len, gen_len, mask,
					 b->capacity > b->used ? b->capacity - b->used : 0, b->names);
	}
	return rc;
}

int fg_forward_check(const struct fg_forward_env *env, int64_t prompt_len, int64_t gen_len)
{
	const struct fg_policy *p = &env->policy;
	struct fg_plan_env pe;

	plan_env(env, &pe);
	if (p->gpu_batch_size < 1 || p->num_gpu_batches < 1 || prompt_len < 1 || gen_len < 0) {
		FG_ERR("forward: invalid batch %lld x %lld, prompt %lld, gen %lld",
		       (long long)p->num_gpu_batches, (long long)p->gpu_batch_size,
		       (long long)prompt_len, (long long)gen_len);
		return -EINVAL;
	}
	return check_fits(env, &pe, prompt_len, gen_len);
}

/* The family's workspaces as views of the scratch region, for f->plen
 * tokens a row (the region holds f->cap_plen). */
int fg_workspace_views(struct fg_forward *f)
{
	const struct fg_model_config *c = f->cfg;
	const struct fg_arch *a = c->arch;

	f->logits = (struct fg_tensor){ 0 };
	for (int i = 0; i < a->nworkspace; i++) {
		const struct fg_workspace_def *w = &a->workspace[i];
		f->ws[i] = fg_view((char *)f->scratch.addr + f->plan.ws_offset[i], f->act,
				   fg_ws_rows(c, w, f->bs, f->plen), fg_dim_value(c, w->cols));
		if (strcmp(w->name, "logits") == 0)
			f->logits = f->ws[i];
	}
	if (!f->logits.data) {
		FG_ERR("forward: family %s declares no \"logits\" workspace", a->name);
		return -EINVAL;
	}
	return 0;
}

/* Host attention's decode steps (schedule.c): the second compute stream,
 * its workspaces (a decode step's: one token a row), the marks the streams
 * wait for, and the lock that runs one host attention at a time. */
static int two_streams_init(struct fg_forward *f)
{
	const struct fg_arch *a = f->cfg->arch;
	struct fg_two_streams *t = &f->two;
	uint64_t at = 0;
	int rc;

	t->stream[0] = f->mv.compute_stream;
	if (!f->plan.scratch_alt)
		return 0;
	if ((rc = pthread_mutex_init(&t->lock, NULL))) {
		FG_ERR("forward: cannot make a lock: %s", strerror(rc));
		return -rc;
	}
	t->lock_made = 1;
	if ((rc = fg_backend_stream_create(f->be, &t->stream[1])) ||
	    (rc = fg_backend_event_create(f->be, &t->ev[0])) ||
	    (rc = fg_backend_event_create(f->be, &t->ev[1])) ||
	    (rc = alloc_on(f, FG_ROLE_COMPUTE, f->plan.scratch_alt, &t->scratch,
			   "second compute stream's workspace")))
		return rc;
	for (int i = 0; i < a->nworkspace; i++) {
		const struct fg_workspace_def *w = &a->workspace[i];
		int64_t rows = fg_ws_rows(f->cfg, w, f->bs, 1), cols = fg_dim_value(f->cfg, w->cols);
		t->ws[i] = fg_view((char *)t->scratch.addr + at, f->act, rows, cols);
		if (strcmp(w->name, "logits") == 0)
			t->logits = t->ws[i];
		at += ((uint64_t)(rows * cols) * f->asz + 63) & ~(uint64_t)63; /* (as the plan) */
	}
	return 0;
}

static void two_streams_free(struct fg_forward *f)
{
	struct fg_two_streams *t = &f->two;
	for (int i = 0; i < 2; i++)
		if (t->ev[i])
			fg_backend_event_destroy(f->be, t->ev[i]);
	if (t->stream[1])
		fg_backend_stream_destroy(f->be, t->stream[1]);
	free_on(f, FG_ROLE_COMPUTE, &t->scratch);
	if (t->lock_made)
		pthread_mutex_destroy(&t->lock);
}

static int forward_new(struct fg_forward **out, const struct fg_forward_env *env,
		       int64_t prompt_len, int64_t gen_len)
{
	const struct fg_policy *p = &env->policy;
	const struct fg_model_config *c = &env->model->cfg;
	const struct fg_model_config sc = stage_cfg(env->model);
	int64_t nl = sc.layers;
	struct fg_plan_env pe;
	struct fg_forward *f;
	int rc = -ENOMEM;

	plan_env(env, &pe);
	if ((rc = fg_forward_check(env, prompt_len, gen_len)))
		return rc;
	f = calloc(1, sizeof(*f));
	if (!f) {
		FG_ERR("forward: out of memory");
		return -ENOMEM;
	}
	f->env = *env;
	f->m = env->model;
	f->cfg = &f->m->cfg;
	f->be = env->be;
	f->hb = env->host_be ? env->host_be : env->be;
	f->tier = f->m->tier;
	f->act = f->be->info.act_dtype;
	f->asz = fg_dtype_size(f->act);
	f->hid = f->be->info.hidden_dtype;
	f->cdt = fg_plan_cache_dtype(p, f->act);
	f->kvw = fg_dim_value(c, FG_DIM_KV);
	if ((rc = fg_plan_make(&sc, p, &pe, prompt_len, gen_len, &f->plan)))
		goto fail;
	const struct fg_plan *pl = &f->plan;
	int64_t bs = pl->bs, nb = pl->nb;
	f->bs = bs;
	f->nb = nb;
	f->plen = prompt_len;
	f->total = pl->positions;
	f->cols = pl->cols;
	f->nslots = pl->nslots;
	if ((rc = fg_mover_init(&f->mv, f->be, f->tier)))
		goto fail;
	f->stream = f->mv.compute_stream;
	/* requests per group: K and V, up to two ranges each, per sequence; or a
	 * unit's weights: two bulk ranges per block, and two ranges per piece of
	 * each gathered tensor (a token table's rows: one per sequence) */
	size_t cap = (size_t)(4 * bs + 16), most = 1;
	for (int k = 0; k < FG_BLOCK_KINDS; k++) {
		const struct fg_plan_block *pb = &f->m->kind[k];
		for (int64_t i = 0; i < pb->ntensors; i++)
			if (f->m->placed[k][i].gathered)
				cap += 2 * (size_t)f->m->placed[k][i].npieces;
		cap += 2;
		most = (size_t)pb->ntensors > most ? (size_t)pb->ntensors : most;
	}
	f->views = calloc(most, sizeof(*f->views));
	if (!f->views) {
		FG_ERR("forward: out of memory for the views of %zu weights", most);
		rc = -ENOMEM;
		goto fail;
	}
	for (int s = 0; s < SLOTS; s++) {
		if ((rc = fg_xfer_init(&f->wload[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->cload[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->cstore[s], &f->mv, cap)) ||
		    (rc = fg_xfer_init(&f->hstore[s], &f->mv, cap)) ||
		    (rc = fg_backend_event_create(f->be, &f->wdone[s])) ||
		    (rc = fg_backend_event_create(f->be, &f->cdone[s])))
			goto fail;
	}
	if ((rc = fg_xfer_init(&f->hload, &f->mv, cap)))
		goto fail;
	f->hload.stream = f->mv.hidden_stream;
	/* A decode step's activations are a few rows the compute waits for. */
	f->hload.small = 1;
	for (int s = 0; s < SLOTS; s++)
		f->hstore[s].small = 1;
	if ((rc = fg_backend_event_create(f->be, &f->hloaded)))
		goto fail;
	f->xfer_ready = 1;
	if ((rc = plan_units(f))) {
		FG_ERR("forward: out of memory");
		goto fail;
	}

	f->gb = calloc((size_t)nb, sizeof(*f->gb));
	if (!f->gb) {
		FG_ERR("forward: out of memory for a %lld x %lld batch", (long long)nb,
		       (long long)bs);
		rc = -ENOMEM;
		goto fail;
	}
	/* The host's copies of a GPU batch's logits, and its positions, come from
	 * the host tier: they scale with gpu_batch_size x vocab, so the plan and
	 * the tier's accounting must see them. */
	if ((rc = alloc_on(f, FG_ROLE_HOST, pl->host_scratch, &f->out.scratch, "logits on the host")))
		goto fail;
	if (!f->out.scratch.addr) {
		FG_ERR("forward: [tier.host] plugin %s gave no address for the host logits: use a host-memory tier (pinned_host)",
		       f->tier[FG_ROLE_HOST]->ph.plugin->name);
		rc = -EINVAL;
		goto fail;
	}
	f->out.argmax = f->out.scratch.addr;
	f->out.logits = f->asz == 2 ? (char *)f->out.scratch.addr + pl->hs_logits : NULL;
	f->out.pos = (int32_t *)(void *)((char *)f->out.scratch.addr + pl->hs_pos);
	/* The family's workspaces, one region on the compute tier. */
	if ((rc = alloc_on(f, FG_ROLE_COMPUTE, pl->scratch, &f->scratch, "workspace")))
		goto fail;
	f->cap_plen = prompt_len;
	if ((rc = fg_workspace_views(f)) || (rc = two_streams_init(f)))
		goto fail;
	/* Weight slots (and their bounce buffers when disk feeds device memory). */
	for (int s = 0; s < f->nslots; s++) {
		if ((rc = alloc_on(f, FG_ROLE_COMPUTE, pl->wslot, &f->wslot[s], "weight buffer")) ||
		    (rc = alloc_on(f, FG_ROLE_HOST, pl->wbounce, &f->wbounce[s], "weight bounce buffer")))
			goto fail;
	}
	/* Activations: each GPU batch's hidden state lives on one tier. */
	for (int64_t b = 0; b < nb; b++) {
		struct gpu_batch *g = &f->gb[b];
		g->hidden_role = b < pl->acount[FG_ROLE_COMPUTE] ? FG_ROLE_COMPUTE
				 : b < pl->acount[FG_ROLE_COMPUTE] + pl->acount[FG_ROLE_HOST] ? FG_ROLE_HOST
											  : FG_ROLE_DISK;
		g->pad = calloc((size_t)bs, sizeof(int32_t));
		for (int r = 0; r < FG_ROLES; r++)
			g->cache[r] = calloc((size_t)nl + 1, sizeof(struct fg_region));
		if (!g->pad || !g->cache[0] || !g->cache[1] || !g->cache[2]) {
			FG_ERR("forward: out of memory");
			rc = -ENOMEM;
			goto fail;
		}
		if ((rc = alloc_on(f, g->hidden_role, pl->hidden, &g->hidden_home, "activations")))
			goto fail;
		for (int64_t l = 0; l < nl; l++)
			for (int r = 0; r < FG_ROLES; r++)
				if ((rc = alloc_on(f, r, pl->cache[r], &g->cache[r][l], "KV cache")))
					goto fail;
	}
	for (int s = 0; s < SLOTS; s++) {
		if ((rc = alloc_on(f, FG_ROLE_COMPUTE, pl->hslot, &f->hslot[s], "activation buffer")) ||
		    (rc = alloc_on(f, FG_ROLE_HOST, pl->hbounce, &f->hbounce[s], "activation bounce buffer")) ||
		    (rc = alloc_on(f, FG_ROLE_COMPUTE, pl->cslot, &f->cslot[s], "KV cache buffer")) ||
		    (rc = alloc_on(f, FG_ROLE_HOST, pl->cbounce, &f->cbounce[s], "KV cache bounce buffer")))
			goto fail;
	}
	if ((rc = alloc_on(f, FG_ROLE_HOST, pl->hstage, &f->hstage, "host attention staging")))
		goto fail;
	f->ngroups = 1;
	if (env->dist && (rc = fg_pipe_run_new(f)))
		goto fail;
	*out = f;
	return 0;
fail:
	fg_forward_free(f);
	return rc;
}

int fg_forward_new(struct fg_forward **out, const struct fg_forward_env *env,
		   int64_t prompt_len, int64_t gen_len)
{
	int rc;

	*out = NULL;
	/* A pipeline's stages make their runs together and agree on the outcome. */
	if (env->dist && (rc = fg_pipe_announce_new(env, prompt_len, gen_len)))
		return rc;
	rc = forward_new(out, env, prompt_len, gen_len);
	if (env->dist && (rc = fg_pipe_agree(env->dist, rc)) && *out) {
		fg_forward_free(*out);
		*out = NULL;
	}
	/* Rows join on every stage alike, or on none. */
	if (env->dist && !rc)
		fg_pipe_agree_join_caps(*out);
	return rc;
}

int fg_forward_reuse(struct fg_forward *f, int64_t nb, int64_t bs, int64_t prompt_len,
		     int64_t gen_len)
{
	/* A pipeline's other stages hold runs of their own, made to rank 0's
	 * commands: they are remade together. */
	if (f->pipe || nb != f->nb || bs != f->bs || prompt_len < 1 || gen_len < 0 ||
	    prompt_len > f->cap_plen || prompt_len + gen_len > f->total)
		return -EAGAIN;
	int rc = fg_forward_drain(f);
	if (rc)
		return rc;
	f->plen = prompt_len;
	f->step = 0;
	f->sampling = NULL;
	f->tok_scores = NULL;
	f->share = NULL;
	return fg_workspace_views(f);
}

void fg_forward_free(struct fg_forward *f)
{
	if (!f)
		return;
	if (f->pipe)
		fg_pipe_run_free(f);
	/* A transfer still failing here has no caller left to return it to: say
	 * so rather than drop it (after a step, fg_forward_drain returned it). */
	int first = f->xfer_ready ? fg_forward_drain(f) : 0, r;
	for (int s = 0; s < SLOTS; s++) {
		struct fg_xfer *xs[4] = { &f->wload[s], &f->cload[s], &f->cstore[s], &f->hstore[s] };
		for (int i = 0; i < 4; i++)
			if ((r = fg_xfer_fini(xs[i])) && !first)
				first = r;
		if (f->wdone[s])
			fg_backend_event_destroy(f->be, f->wdone[s]);
		if (f->cdone[s])
			fg_backend_event_destroy(f->be, f->cdone[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->wslot[s]);
		free_on(f, FG_ROLE_HOST, &f->wbounce[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->cslot[s]);
		free_on(f, FG_ROLE_HOST, &f->cbounce[s]);
		free_on(f, FG_ROLE_COMPUTE, &f->hslot[s]);
		free_on(f, FG_ROLE_HOST, &f->hbounce[s]);
	}
	if ((r = fg_xfer_fini(&f->hload)) && !first)
		first = r;
	if (f->hloaded)
		fg_backend_event_destroy(f->be, f->hloaded);
	if (first)
		FG_LOG(FG_LOG_WARN, "freeing a forward pass: a transfer failed: %s",
		       fg_last_error());
	fg_devtime_free(f);
	fg_logits_free(f);
	free(f->mask.row_live); /* f->mask.live included */
	free(f->in.seen);
	free(f->mask.attn_pad);
	free(f->chunk_pad);
	free(f->join_pad);
	free(f->join_row);
	free_on(f, FG_ROLE_HOST, &f->hstage);
	free_on(f, FG_ROLE_HOST, &f->out.scratch);
	for (int64_t b = 0; f->gb && b < f->nb; b++) {
		struct gpu_batch *g = &f->gb[b];
		for (int r = 0; r < FG_ROLES; r++) {
			for (int64_t l = 0; g->cache[r] && l < f->m->stage.nlayers; l++)
				free_on(f, r, &g->cache[r][l]);
			free(g->cache[r]);
		}
		free_on(f, g->hidden_role, &g->hidden_home);
		free(g->pad);
	}
	free_on(f, FG_ROLE_COMPUTE, &f->scratch);
	two_streams_free(f);
	if (f->mv.be)
		fg_mover_fini(&f->mv);
	free(f->gb);
	free(f->ufirst);
	free(f->ucount);
	free(f->views);
	free(f);
}

int64_t fg_forward_cache_columns(const struct fg_forward *f)
{
	return f->cols;
}

void fg_forward_bytes(const struct fg_forward *f, uint64_t bytes[FG_ROLES])
{
	for (int r = 0; r < FG_ROLES; r++)
		bytes[r] = 0;
	for (int s = 0; s < SLOTS; s++) {
		bytes[FG_ROLE_COMPUTE] += f->wslot[s].size + f->cslot[s].size + f->hslot[s].size;
		bytes[FG_ROLE_HOST] += f->wbounce[s].size + f->cbounce[s].size + f->hbounce[s].size;
	}
	bytes[FG_ROLE_HOST] += f->hstage.size + f->out.scratch.size;
	bytes[FG_ROLE_COMPUTE] += f->scratch.size + f->two.scratch.size;
	for (int64_t b = 0; b < f->nb; b++) {
		const struct gpu_batch *g = &f->gb[b];
		bytes[g->hidden_role] += g->hidden_home.size;
		for (int r = 0; r < FG_ROLES; r++)
			for (int64_t l = 0; l < f->m->stage.nlayers; l++)
				bytes[r] += g->cache[r][l].size;
	}
}
