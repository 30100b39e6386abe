/* core/exec/schedule.c - FlexGen's block schedule.
 *
 * For each token, for each unit (the input block, then per layer its
 * attention and MLP blocks — one unit, or two with sep_layer — then the
 * output block), for each GPU batch.  A unit's weights are fetched once and
 * serve every GPU batch.  With overlap, while (unit u, batch k) computes,
 * unit u+1's weights and the next item's KV cache are loaded into the other
 * of two slots, and what (u, k) produced is stored back; a slot is refilled
 * only after its previous reader and its pending store are done, and is
 * written by compute (new K/V rows, in prefill too) only after the store
 * that last read it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/logprob.h>

#include "core/exec/forward_int.h"
#include "core/util/clock.h"
#include "core/util/error.h"

struct item {
	int64_t u, k, t; /* unit, GPU batch, running index (cache slot = t % 2) */
	int ws;          /* the weight slot holding the unit's weights */
	int fetched;     /* its activations were fetched before the next unit's weights */
};

static int unit_has_attn(const struct fg_forward *f, int64_t u)
{
	for (int64_t bi = f->ufirst[u]; bi < f->ufirst[u] + f->ucount[u]; bi++)
		if (f->m->blocks[bi].plan->kind == FG_BLOCK_ATTN)
			return 1;
	return 0;
}

static int64_t unit_layer(const struct fg_forward *f, int64_t u)
{
	return f->m->blocks[f->ufirst[u]].layer;
}

static enum fg_block_kind unit_kind(const struct fg_forward *f, int64_t u)
{
	return f->m->blocks[f->ufirst[u]].plan->kind;
}

/* Start loading item it's KV cache (decode steps only) into its slot. */
static int cache_prefetch(struct fg_forward *f, const struct item *it)
{
	int slot = (int)(it->t % SLOTS);
	char what[64];
	int rc;

	/* (a prefill's and a join's attention reads only the step's columns) */
	if (f->step == 0 || f->joining || !f->plan.n_off || !unit_has_attn(f, it->u))
		return 0;
	double t0 = fg_now();
	/* The slot's last store and its last reader come first. */
	rc = fg_xfer_wait(&f->cstore[slot], f->mv.load_stream);
	f->stats.wait_cache_s += fg_now() - t0;
	if (rc || (rc = fg_backend_stream_wait(f->be, f->mv.load_stream, f->cdone[slot])))
		return rc;
	snprintf(what, sizeof(what), "KV cache of layer %lld, GPU batch %lld",
		 (long long)unit_layer(f, it->u), (long long)it->k);
	if ((rc = fg_xfer_reset(&f->cload[slot], what)))
		return rc;
	/* A windowed layer's step reads only the last window - 1 positions before
	 * its new one (a step taking shared prefixes copies from column 0). */
	int64_t l = unit_layer(f, it->u), w = fg_layer_window(f->cfg, f->m->stage.layer0 + l);
	int64_t r0 = w > 0 && !f->sharing && f->step > w - 1 ? f->step - (w - 1) : 0;
	return fg_kv_move(f, &f->cload[slot], 1, it->k, l, slot, r0, f->step - r0);
}

static void *hidden_addr(const struct fg_forward *f, int64_t k, int slot)
{
	const struct gpu_batch *g = &f->gb[k];
	return g->hidden_role == FG_ROLE_COMPUTE ? g->hidden_home.addr : f->hslot[slot].addr;
}

/* Record piece `piece` of the step (the backend may decline). */
static int graph_record(struct fg_forward *f, int piece)
{
	int rc = fg_backend_graph_begin(f->be, f->stream, piece);

	f->graph_piece = piece;
	f->graphing = !rc;
	return rc == -ENOTSUP ? 0 : rc; /* declined: the ops run one by one */
}

/* A decode step that moves nothing between tiers - weights, KV cache and
 * activations all in the compute tier, one process - issues all its work on
 * the compute stream up to its first token read-out, so the backend may
 * record it and launch it as graphs (compute ABI 1.5): one piece per unit,
 * each launched while the next is recorded, so that the device starts on
 * the step while the host still records the rest.  Not a mixture of
 * experts: its router's choice comes back to the host mid-step. */
static int graph_begin(struct fg_forward *f, int64_t n)
{
	f->graphing = 0;
	if (n != 1 || f->step == 0 || f->pipe || f->plan.wslot || f->plan.n_off ||
	    f->plan.delegate || (f->cfg->features & FG_FEAT_MOE) || !fg_backend_has_graphs(f->be))
		return 0;
	for (int64_t k = 0; k < f->nb; k++)
		if (f->gb[k].hidden_role != FG_ROLE_COMPUTE)
			return 0;
	return graph_record(f, 0);
}

/* Launch what was recorded (launch = 0: drop it, after a failed op). */
static int graph_end(struct fg_forward *f, int launch)
{
	int rc;

	if (!f->graphing)
		return 0;
	f->graphing = 0;
	rc = fg_backend_graph_end(f->be, f->stream, launch);
	if (!rc && launch && f->graph_piece == 0)
		f->stats.graph_steps++;
	return rc;
}

/* Between two units of a recorded step: launch this piece, record the next. */
static int graph_cut(struct fg_forward *f)
{
	int rc;

	if (!f->graphing)
		return 0;
	if ((rc = graph_end(f, 1)))
		return rc;
	return graph_record(f, f->graph_piece + 1);
}

/* Run the unit's block bodies for GPU batch it->k. */
static int compute_item(struct fg_forward *f, const struct item *it, const int32_t *ids,
			int64_t n, void *h, float *logits, int32_t *top)
{
	struct fg_wview *w = f->views;
	int ws = it->ws;
	int64_t rows = fg_rows_computed(f, it->k);
	int rc;

	f->cur_k = it->k;
	f->cur_slot = (int)(it->t % SLOTS);
	/* The first GPU batch of a micro-batch with no row to compute runs
	 * for the weight slots' chain and a pipeline's transfers only. */
	if (!rows)
		return 0;
	for (int64_t bi = f->ufirst[it->u]; bi < f->ufirst[it->u] + f->ucount[it->u]; bi++) {
		const struct fg_block *b = &f->m->blocks[bi];
		struct fg_block_ctx x = {
			.be = f->be, .stream = f->stream, .cfg = f->cfg, .layer = b->layer,
			.bs = rows, .n = n, .step = f->step, .pad = f->gb[it->k].pad,
			.ids = ids ? ids + it->k * f->bs * n : NULL, .pos = f->out.pos,
			.h = fg_view(h, f->hid, rows * n, f->cfg->hidden), .w = w,
			.attend = fg_kv_attend, .sched = f,
		};
		for (int i = 0; i < f->plan.nws; i++)
			x.ws[i] = f->ws[i];
		fg_block_views(f, bi, ws, w);
		fg_block_out_last(&x, f->logits);
		if (b->plan->kind == FG_BLOCK_OUTPUT && f->score &&
		    (rc = fg_logits_score(f, &x, it->k, f->cfg->arch->body[FG_BLOCK_OUTPUT])))
			return rc;
		if ((rc = f->cfg->arch->body[b->plan->kind](&x)))
			return rc;
		/* A recorded step runs from here: the read-out waits for it. */
		if (b->plan->kind == FG_BLOCK_OUTPUT && (rc = graph_end(f, 1)))
			return rc;
		if (b->plan->kind == FG_BLOCK_OUTPUT &&
		    (rc = fg_logits_out(f, it->k * f->bs, rows,
					logits ? logits + it->k * f->bs * f->cfg->vocab : NULL,
					top ? top + it->k * f->bs : NULL)))
			return rc;
	}
	return 0;
}

/* Pipeline stages: the first unit's input comes from the previous stage. */
static int receives(const struct fg_forward *f, const struct item *it)
{
	return f->pipe && it->u == 0 && fg_pipe_has_prev(f);
}

/* Activations of an off-compute GPU batch: fetched before its compute,
 * stored after it.  ahead: the next unit's weights are about to be queued;
 * they wait for this reload, which the very next compute needs, since the
 * copy engine would otherwise run the weights, issued first, before it. */
static int fetch_hidden(struct fg_forward *f, const struct item *it, int64_t n, int ahead)
{
	struct gpu_batch *g = &f->gb[it->k];
	int cs = (int)(it->t % SLOTS);
	void *h = hidden_addr(f, it->k, cs);
	size_t hlen = fg_hidden_len(f, n);
	double t0;
	int rc = 0;

	if (g->hidden_role == FG_ROLE_COMPUTE)
		return 0;
	/* The slot's previous store, and this batch's last one, must be done
	 * before the activations' stream reads the stored bytes back and
	 * before the compute stream writes the slot again. */
	t0 = fg_now();
	for (int s = 0; s < SLOTS && !rc; s++)
		rc = fg_xfer_wait(&f->hstore[s], f->hload.stream);
	/* The compute waits for those stores (all on the store stream), not for
	 * a load stream. */
	if (!rc && !(rc = fg_backend_event_record(f->be, f->hload.event, f->mv.store_stream)))
		rc = fg_backend_stream_wait(f->be, f->stream, f->hload.event);
	f->stats.wait_hidden_s += fg_now() - t0;
	if (rc || (rc = fg_devtime_mark(f, FG_DEV_WAIT_HIDDEN)))
		return rc;
	if (receives(f, it) || unit_kind(f, it->u) == FG_BLOCK_INPUT)
		return 0;
	t0 = fg_now();
	if ((rc = fg_xfer_reset(&f->hload, "activations")) ||
	    (rc = fg_xfer_load(&f->hload, h, g->hidden_role, &g->hidden_home, 0, hlen,
			       f->hbounce[cs].addr)) ||
	    (rc = fg_xfer_wait(&f->hload, f->stream)))
		return rc;
	if (ahead && ((rc = fg_backend_event_record(f->be, f->hloaded, f->hload.stream)) ||
		      (rc = fg_backend_stream_wait(f->be, f->mv.load_stream, f->hloaded))))
		return rc;
	f->stats.hidden_bytes += hlen;
	f->stats.wait_hidden_s += fg_now() - t0;
	return fg_devtime_mark(f, FG_DEV_WAIT_HIDDEN);
}

static int run_item(struct fg_forward *f, const struct item *it, const int32_t *ids, int64_t n,
		    float *logits, int32_t *top)
{
	int cs = (int)(it->t % SLOTS), attn = unit_has_attn(f, it->u);
	/* Pipeline stages: the last unit's output goes to the next one. */
	int recv = receives(f, it);
	int send = f->pipe && it->u == f->nunits - 1 && fg_pipe_has_next(f);
	int64_t n_off = f->plan.n_off;
	struct gpu_batch *g = &f->gb[it->k];
	size_t hlen = fg_hidden_len(f, n);
	double t0;
	int rc = 0;

	void *h = hidden_addr(f, it->k, cs);
	if (!it->fetched && (rc = fetch_hidden(f, it, n, 0)))
		return rc;
	if (recv)
		fg_pipe_recv_hidden(f, it->k, h, hlen);
	/* The compute below appends to the cache slot: the slot's store from two
	 * items back must have read it first.  Decode steps waited for it before
	 * their prefetch; prefill has no prefetch, so this is its only wait. */
	if (n_off && attn) {
		t0 = fg_now();
		rc = fg_xfer_wait(&f->cstore[cs], f->stream);
		f->stats.wait_cache_s += fg_now() - t0;
		if (rc || (rc = fg_devtime_mark(f, FG_DEV_WAIT_CACHE)))
			return rc;
	}
	/* This item's cache (prefetched, or loaded now without overlap). */
	if (f->step > 0 && n_off && attn) {
		if (!f->env.policy.overlap && (rc = cache_prefetch(f, it)))
			return rc;
		t0 = fg_now();
		rc = fg_xfer_wait(&f->cload[cs], f->stream);
		f->stats.wait_cache_s += fg_now() - t0;
		if (rc || (rc = fg_devtime_mark(f, FG_DEV_WAIT_CACHE)))
			return rc;
	}

	t0 = fg_now();
	if ((rc = compute_item(f, it, ids, n, h, logits, top)) ||
	    (rc = fg_devtime_mark(f, FG_DEV_COMPUTE)) ||
	    (rc = fg_backend_event_record(f->be, f->cdone[cs], f->stream)))
		return rc;
	f->stats.compute_s += fg_now() - t0;

	/* Store what this item produced: new cache rows of slot-held sequences, activations. */
	if (n_off && attn) {
		/* (the slot's previous store was waited for before the compute) */
		/* (a step that took shared prefixes changed the columns before it) */
		int64_t r0 = f->sharing ? 0 : f->step;
		if ((rc = fg_xfer_reset(&f->cstore[cs], "KV cache store")) ||
		    (rc = fg_kv_move(f, &f->cstore[cs], 0, it->k, unit_layer(f, it->u), cs, r0,
				     f->step + n - r0)))
			return rc;
		if (!f->env.policy.overlap) {
			t0 = fg_now();
			rc = fg_xfer_wait(&f->cstore[cs], f->mv.load_stream);
			f->stats.wait_cache_s += fg_now() - t0;
			if (rc)
				return rc;
		}
	}
	if (send) {
		fg_pipe_send_hidden(f, it->k, h, hlen);
	} else if (f->pipe && unit_kind(f, it->u) == FG_BLOCK_OUTPUT) {
		fg_pipe_send_results(f, it->k);
	} else if (g->hidden_role != FG_ROLE_COMPUTE && unit_kind(f, it->u) != FG_BLOCK_OUTPUT) {
		if ((rc = fg_xfer_reset(&f->hstore[cs], "activations store")) ||
		    (rc = fg_xfer_store(&f->hstore[cs], g->hidden_role, &g->hidden_home, 0, h, hlen,
					f->hbounce[cs].addr)))
			return rc;
		f->stats.hidden_bytes += hlen;
		if (!f->env.policy.overlap) {
			t0 = fg_now();
			rc = fg_xfer_wait(&f->hstore[cs], f->hload.stream);
			f->stats.wait_hidden_s += fg_now() - t0;
		}
	}
	return rc;
}

int fg_forward_drain(struct fg_forward *f)
{
	int rc = 0, r;
	for (int s = 0; s < SLOTS; s++) {
		if (s < f->nslots && (r = fg_xfer_wait(&f->wload[s], f->stream)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->cload[s], f->stream)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->cstore[s], f->stream)) && !rc)
			rc = r;
		if ((r = fg_xfer_wait(&f->hstore[s], f->stream)) && !rc)
			rc = r;
	}
	if ((r = fg_backend_stream_sync(f->be, f->stream)) && !rc)
		rc = r;
	if (f->two.stream[1] && (r = fg_backend_stream_sync(f->be, f->two.stream[1])) && !rc)
		rc = r;
	if (f->two.rc) { /* (its host_call ran on another thread: its message is copied) */
		FG_ERR("%s", f->two.err);
		rc = rc ? rc : f->two.rc;
		f->two.rc = 0;
	}
	return rc;
}

/* Two compute streams this step?  A decode step whose host attention is
 * queued in stream order (host_call): GPU batches take the streams in turn,
 * so that the host attends to one while the device computes the next.
 * Kept to the placements whose transfers order against the compute stream
 * item by item (no slot-held cache, no pipeline); device timing measures
 * the serial order. */
static int two_streams_on(const struct fg_forward *f, int64_t n)
{
	return f->two.stream[1] && n == 1 && f->step > 0 && !f->joining && !f->sharing &&
	       !f->pipe && !f->plan.n_off && !f->env.device_timing &&
	       fg_backend_has_host_call(f->be) && fg_host_stage_halves(f);
}

/* The item that runs on stream i (0 between items): the compute stream,
 * the one the mover orders its copies against, and the workspaces. */
static void use_stream(struct fg_forward *f, int i)
{
	struct fg_two_streams *t = &f->two;
	if (t->cur == i)
		return;
	t->cur = i;
	for (int w = 0; w < FG_WS_MAX; w++) {
		struct fg_tensor x = f->ws[w];
		f->ws[w] = t->ws[w];
		t->ws[w] = x;
	}
	struct fg_tensor lg = f->logits;
	f->logits = t->logits;
	t->logits = lg;
	f->stream = f->mv.compute_stream = t->stream[i];
}

/* Stream `to` waits for what stream `from` has queued so far. */
static int stream_follows(struct fg_forward *f, int to, int from)
{
	struct fg_two_streams *t = &f->two;
	int rc = fg_backend_event_record(f->be, t->ev[from], t->stream[from]);
	return rc ? rc : fg_backend_stream_wait(f->be, t->stream[to], t->ev[from]);
}

/* GPU batches [k0, k1) of micro-batch gi. */
static void group_range(const struct fg_forward *f, int64_t gi, int64_t *k0, int64_t *k1)
{
	*k0 = gi * f->nb / f->ngroups;
	*k1 = (gi + 1) * f->nb / f->ngroups;
}

/* Does GPU batch k compute this step?  Every one in prefill; in a decode
 * step, those with a row that fg_forward_set_live_rows left live (a batch
 * whose rows have all finished costs nothing more). */
static int computes(const struct fg_forward *f, int64_t k)
{
	return !fg_rows_masked(f) || f->mask.live[k];
}

/* Finished rows of GPU batch k that this step still computes (before its
 * last live row). */
static int64_t dead_rows(const struct fg_forward *f, int64_t k)
{
	int64_t n = 0, rows = fg_rows_computed(f, k);
	for (int64_t s = 0; s < rows; s++)
		n += fg_row_dead(f, k, s);
	return n;
}

/* The computing GPU batch of micro-batch gi after k (k0 - 1: the first), or
 * its end.  A micro-batch with none still runs its first: its runs chain
 * the weight slots. */
static int64_t next_k(const struct fg_forward *f, int64_t gi, int64_t k)
{
	int64_t k0, k1;
	group_range(f, gi, &k0, &k1);
	for (k++; k < k1; k++)
		if (computes(f, k))
			return k;
	return k1;
}

static int64_t first_k(const struct fg_forward *f, int64_t gi)
{
	int64_t k0, k1, k;
	group_range(f, gi, &k0, &k1);
	k = next_k(f, gi, k0 - 1);
	return k < k1 ? k : k0;
}

static int64_t last_k(const struct fg_forward *f, int64_t gi)
{
	int64_t k0, k1, last;
	group_range(f, gi, &k0, &k1);
	last = first_k(f, gi);
	for (int64_t k = next_k(f, gi, last); k < k1; k = next_k(f, gi, k))
		last = k;
	return last;
}

int fg_step_runs(const struct fg_forward *f, int64_t k)
{
	for (int64_t gi = 0; gi < f->ngroups; gi++) {
		int64_t k0, k1;
		group_range(f, gi, &k0, &k1);
		if (k >= k0 && k < k1)
			return computes(f, k) || k == first_k(f, gi);
	}
	return 0;
}

/* The item after (u, k) of micro-batch gi: the next computing GPU batch,
 * else the next unit's first, else the next micro-batch's first unit;
 * u = nunits: none. */
static struct item next_item(const struct fg_forward *f, int64_t gi, const struct item *it)
{
	int64_t k0, k1, kn = next_k(f, gi, it->k);
	group_range(f, gi, &k0, &k1);
	if (kn < k1)
		return (struct item){ .u = it->u, .k = kn, .t = it->t + 1 };
	if (it->u + 1 < f->nunits)
		return (struct item){ .u = it->u + 1, .k = first_k(f, gi), .t = it->t + 1 };
	if (gi + 1 < f->ngroups)
		return (struct item){ .u = 0, .k = first_k(f, gi + 1), .t = it->t + 1 };
	return (struct item){ .u = f->nunits, .t = it->t + 1 };
}

/* One step: for each micro-batch (one, without a pipeline), for each unit,
 * for each of its GPU batches.  A run of one unit over one micro-batch
 * reads the unit's weights once; runs alternate between the weight slots. */
int fg_step(struct fg_forward *f, const int32_t *ids, int64_t n, float *logits, int32_t *top)
{
	int overlap = f->env.policy.overlap;
	int stages = f->plan.wslot > 0; /* some unit's weights are staged into a slot */
	int64_t t = 0, nruns = f->ngroups * f->nunits;
	double t0;
	int rc = 0;

	f->in.ids = ids; /* whose rows a host-tier token table stages */
	f->in.n = ids ? f->nb * f->bs * n : 0;
	f->two.on = two_streams_on(f, n);
	if ((rc = fg_devtime_mark(f, FG_DEV_COMPUTE))) /* the step's start */
		goto out;
	if (f->pipe) {
		fg_pipe_results(f, &logits, &top);
		fg_pipe_step_begin(f, n, logits, top);
	}
	if ((rc = graph_begin(f, n)))
		goto out;
	if (overlap && stages && (rc = fg_unit_weights_load(f, 0, 0)))
		goto out;
	if (overlap && (rc = cache_prefetch(f, &(struct item){ .u = 0, .k = first_k(f, 0) })))
		goto out;
	for (int64_t gi = 0; gi < f->ngroups; gi++) {
		int64_t k0 = first_k(f, gi), klast = last_k(f, gi), k1;
		group_range(f, gi, &(int64_t){ 0 }, &k1);
		for (int64_t u = 0; u < f->nunits; u++) {
			int64_t ri = gi * f->nunits + u;
			int ws = (int)(ri % f->nslots);
			for (int64_t k = k0; k < k1; k = next_k(f, gi, k), t++) {
				struct item it = { u, k, t, ws, 0 };
				if (u == 0) { /* each computed GPU batch's positions, once a step */
					f->stats.positions += (uint64_t)(fg_rows_computed(f, k) * n);
					f->stats.dead_positions += (uint64_t)(dead_rows(f, k) * n);
				}
				if (k == k0) {
					if (!overlap && stages &&
					    (rc = fg_unit_weights_load(f, u, ws)))
						goto out;
					/* The next run's weights go into the other slot during
					 * this one, after the first item's activations. */
					if (overlap && stages && ri + 1 < nruns) {
						if ((rc = fetch_hidden(f, &it, n, 1)) ||
						    (rc = fg_unit_weights_load(f, (ri + 1) % f->nunits,
									       (ws + 1) % SLOTS)))
							goto out;
						it.fetched = 1;
					}
					t0 = fg_now();
					rc = fg_xfer_wait(&f->wload[ws], f->stream);
					f->stats.wait_weight_s += fg_now() - t0;
					if (rc || (rc = fg_devtime_mark(f, FG_DEV_WAIT_WEIGHT)))
						goto out;
					/* (two streams: the second starts after the first's waits) */
					if (f->two.on && (rc = stream_follows(f, 1, 0)))
						goto out;
				}
				struct item next = next_item(f, gi, &it);
				if (overlap && next.u < f->nunits && (rc = cache_prefetch(f, &next)))
					goto out;
				use_stream(f, f->two.on ? (int)(t % 2) : 0);
				rc = run_item(f, &it, ids, n, logits, top);
				use_stream(f, 0);
				if (rc)
					goto out;
				/* (two streams: the run ends when both have done its work) */
				if (k == klast && f->two.on && (rc = stream_follows(f, 0, 1)))
					goto out;
				if (k == klast && stages &&
				    (rc = fg_backend_event_record(f->be, f->wdone[ws], f->stream)))
					goto out;
			}
			if ((rc = graph_cut(f)))
				goto out;
		}
	}
out:
	f->in.ids = NULL;
	f->two.on = 0;
	{
		int r = graph_end(f, !rc); /* a step without an output block */
		if (!rc)
			rc = r;
	}
	{
		/* Nothing may stay in flight past a step, even after an error. */
		t0 = fg_now();
		int r = fg_forward_drain(f);
		f->stats.wait_cache_s += fg_now() - t0;
		if (!rc)
			rc = r;
		r = fg_devtime_collect(f);
		if (!rc)
			rc = r;
		f->stats.disk_read_bytes = f->mv.disk_read_bytes;
		f->stats.disk_busy_s = f->mv.disk_busy_s;
		memcpy(f->stats.loaded, f->mv.loaded, sizeof(f->stats.loaded));
		memcpy(f->stats.stored, f->mv.stored, sizeof(f->stats.stored));
	}
	/* A stage that failed mid-step leaves the others waiting: the job stops. */
	if (f->pipe) {
		if (rc)
			fg_pipe_fatal(f);
		fg_pipe_step_end(f);
	}
	if (!rc)
		f->step += n;
	return rc;
}

/* Checked before a step starts (and before the other stages are told of it). */
static int check_ids(const struct fg_forward *f, const int32_t *ids, int64_t n)
{
	const struct fg_model_config *c = f->cfg;
	for (int64_t i = 0; ids && i < f->nb * f->bs * n; i++)
		if (ids[i] < 0 || ids[i] >= c->vocab) {
			FG_ERR("token id %d out of range: %s has %lld tokens", ids[i], c->name,
			       (long long)c->vocab);
			return -EINVAL;
		}
	return 0;
}

int fg_mask_alloc(struct fg_forward *f)
{
	int64_t rows = f->nb * f->bs;

	if (f->mask.row_live)
		return 0;
	f->mask.row_live = malloc((size_t)(rows + f->nb));
	f->mask.attn_pad = malloc(sizeof(int32_t) * (size_t)rows);
	if (!f->mask.row_live || !f->mask.attn_pad) {
		free(f->mask.row_live);
		free(f->mask.attn_pad);
		f->mask.row_live = NULL;
		f->mask.attn_pad = NULL;
		return -ENOMEM;
	}
	memset(f->mask.row_live, 1, (size_t)(rows + f->nb));
	f->mask.live = f->mask.row_live + rows;
	return 0;
}

void fg_forward_set_filled_rows(struct fg_forward *f, int64_t rows)
{
	f->filled = rows;
}

int fg_forward_prefill(struct fg_forward *f, const int32_t *ids, const int32_t *pad,
		       float *logits, int32_t *top)
{
	for (int64_t b = 0; b < f->nb; b++)
		for (int64_t s = 0; s < f->bs; s++) {
			int32_t p = pad[b * f->bs + s];
			if (p < 0 || p >= f->plen) {
				FG_ERR("prefill: row %lld has %d pads of %lld positions: every prompt needs a token",
				       (long long)(b * f->bs + s), p, (long long)f->plen);
				return -EINVAL;
			}
			f->gb[b].pad[s] = p;
		}
	int rc;
	if ((rc = check_ids(f, ids, f->plen)) ||
	    (f->pipe && (rc = fg_pipe_step_command(f, pad, logits != NULL, top != NULL))))
		return rc;
	f->step = 0;
	/* Every row is computed again, and so is live again, but for the rows
	 * after the filled ones. */
	if (f->mask.row_live)
		memset(f->mask.row_live, 1, (size_t)(f->nb * f->bs + f->nb));
	if (f->filled > 0 && f->filled < f->nb * f->bs && !f->pipe && fg_mask_alloc(f) == 0) {
		for (int64_t r = 0; r < f->nb * f->bs; r++) {
			f->mask.row_live[r] = r < f->filled;
			f->mask.attn_pad[r] = r < f->filled ? f->gb[r / f->bs].pad[r % f->bs]
							   : (int32_t)f->plen;
		}
		for (int64_t k = 0; k < f->nb; k++)
			f->mask.live[k] = k * f->bs < f->filled;
		f->prefill_masked = 1;
	}
	if (f->share)
		rc = fg_prefill_shared(f, ids, logits, top);
	else
		rc = fg_step(f, ids, f->plen, logits, top);
	f->share = NULL;
	f->prefill_masked = 0;
	return rc;
}

int fg_forward_prefill_scored(struct fg_forward *f, const int32_t *ids, const int32_t *pad,
			      float *logits, int32_t *top, const struct fg_prompt_scores *s)
{
	if (!s || !s->target || !s->lp || s->k < 0 || s->k > FG_LOGPROB_TOP_MAX ||
	    (s->k && (!s->top_id || !s->top_lp))) {
		FG_ERR("prefill: scoring needs targets, lp and, with k in [1, %d], the tops",
		       FG_LOGPROB_TOP_MAX);
		return -EINVAL;
	}
	for (int64_t i = 0; i < f->nb * f->bs * f->plen; i++)
		if (s->target[i] >= f->cfg->vocab) {
			FG_ERR("prefill: scored position %lld names id %d, outside the vocabulary of %lld",
			       (long long)i, (int)s->target[i], (long long)f->cfg->vocab);
			return -EINVAL;
		}
	f->score = s;
	int rc = fg_forward_prefill(f, ids, pad, logits, top);
	f->score = NULL;
	return rc;
}

int fg_forward_decode(struct fg_forward *f, const int32_t *ids, float *logits, int32_t *top)
{
	if (f->step == 0 || (f->step >= f->total && !fg_forward_wraps(f)) ||
	    f->step >= INT32_MAX) {
		FG_ERR("decode: no room: %lld of %lld positions used", (long long)f->step,
		       (long long)f->total);
		return -EINVAL;
	}
	int rc;
	/* Where the columns wrap, each live row must still fit them. */
	for (int64_t r = 0; f->step >= f->total && r < f->nb * f->bs; r++) {
		int32_t p = f->gb[r / f->bs].pad[r % f->bs];
		if ((!f->mask.row_live || f->mask.row_live[r]) && f->step + 1 - p > f->total) {
			FG_ERR("decode: row %lld would hold %lld positions, the run's columns %lld",
			       (long long)r, (long long)(f->step + 1 - p), (long long)f->total);
			return -EINVAL;
		}
	}
	if ((rc = check_ids(f, ids, 1)) ||
	    (f->pipe && (rc = fg_pipe_step_command(f, NULL, logits != NULL, top != NULL))))
		return rc;
	/* A finished row's attention sees no position: pad = len. */
	for (int64_t r = 0; f->mask.row_live && r < f->nb * f->bs; r++)
		f->mask.attn_pad[r] = f->mask.row_live[r] ? f->gb[r / f->bs].pad[r % f->bs]
						: (int32_t)(f->step + 1);
	return fg_step(f, ids, 1, logits, top);
}

int fg_forward_set_token_scores(struct fg_forward *f, const struct fg_token_scores *s)
{
	if (s && (f->pipe || !fg_backend_can_logprob(f->be) || s->k < 0 ||
		  s->k > FG_LOGPROB_TOP_MAX))
		return -ENOTSUP;
	f->tok_scores = s;
	return 0;
}

int fg_forward_set_sampling(struct fg_forward *f, const struct fg_row_sampling *s)
{
	/* A pipeline's last stage computes the logits without the rows' requests. */
	if (s && (f->pipe || !fg_backend_can_sample(f->be)))
		return -ENOTSUP;
	f->sampling = s;
	return 0;
}

void fg_forward_set_live_rows(struct fg_forward *f, const unsigned char *row_live)
{
	int64_t rows = f->nb * f->bs;

	if (fg_mask_alloc(f))
		return; /* without the mask every row computes: only slower */
	memset(f->mask.live, 0, (size_t)f->nb);
	for (int64_t r = 0; r < rows; r++) {
		/* A finished row stays so: its cache was not kept up to date. */
		f->mask.row_live[r] &= row_live[r] != 0;
		f->mask.live[r / f->bs] |= f->mask.row_live[r];
	}
}

const struct fg_forward_stats *fg_forward_stats(const struct fg_forward *f)
{
	return &f->stats;
}
