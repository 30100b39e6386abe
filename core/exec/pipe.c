/* core/exec/pipe.c - a pipeline stage's side of the forward pass.
 *
 * Rank 0 owns the requests: its fg_forward_new / prefill / decode / join /
 * free send the same command to every other rank first, whose worker loop
 * (fg_engine_follow_stage, core/engine/worker.c) makes the same call on its
 * own stage; a decode or join command carries rank 0's row masks, so that
 * every stage computes the same rows in the same layout.  Within a step,
 * each stage receives a GPU batch's activations from the previous stage
 * before its first unit and sends them to the next after its last one; the
 * last stage sends each GPU batch's greedy tokens (and logits, when asked)
 * to rank 0; a scored prefill's targets go from rank 0 to the last stage,
 * which sends back what it scored (a few numbers per position).  Transfers are non-blocking and posted ahead (every receive of
 * a step at its start), so a stage computes micro-batch g while g - 1
 * travels on.  Activations go through host buffers, or stay in GPU memory
 * with a transport that moves device memory: ordered on the compute stream
 * (nccl), or by this code (a CUDA-aware MPI: the stream is synchronized
 * before a send, a received buffer waited for before the compute).
 *
 * A run that a stage cannot make is refused on every stage (fg_pipe_agree).
 * A stage failing mid-step, or a wait running past [distributed] timeout,
 * stops the job: one line naming the rank, then every rank exits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/dist.h"
#include "core/exec/forward_int.h"
#include "core/exec/pipe.h"
#include "core/util/clock.h"
#include "core/util/error.h"

enum { WANT_TOP = 1, WANT_LOGITS = 2, WANT_SCORES = 4 };
enum {
	TAG_CMD = 1, TAG_PAD = 2, TAG_STATUS = 3, TAG_VERDICT = 4, TAG_TARGETS = 5,
	TAG_SCORE_LP = 6, TAG_SCORE_ID = 7, TAG_SCORE_TOP = 8, TAG_SHARE = 9, TAG_ROWS = 10,
	TAG_JOIN_CAPS = 11,
	TAG_HIDDEN = 16, TAG_TOP = 8192, TAG_LOGITS = 16384,
	/* + GPU batch (< 4096) */
};

struct pipe_status {
	int32_t rc;
	char text[2044];
};

struct fg_pipe_run {
	struct fg_dist *d;
	int rank, size, device;  /* device: activations move in compute-tier memory, stream-ordered */
	int device_sync;         /* ... in compute-tier memory, ordered here (CUDA-aware MPI) */
	int want;                /* this step's WANT_* */
	int64_t n;               /* tokens of this step */
	uint64_t stride;         /* bytes of one GPU batch's activation buffer */
	struct fg_region rbuf, sbuf; /* host staging: received / sent activations */
	void **rreq, **sreq, **treq, **lreq; /* per GPU batch */
	unsigned join_caps;      /* what every stage allows a join (FG_JOIN_*) */
	unsigned char *rows;     /* rank 0's live or joining rows (not rank 0) */
	int32_t *top;            /* the last stage's results (not rank 0) */
	float *logits;
	double t_step, wall;     /* this step's start; seconds inside steps */
	int64_t steps;
};

static const char *cmd_name(int op)
{
	static const char *const names[] = { "?",    "new run", "prefill", "decode",
					     "free", "exit",    "join" };
	return op > 0 && op <= FG_PIPE_JOIN ? names[op] : names[0];
}

/* Every failure in here ends the job: one line, every rank stops. */
static void fatal(struct fg_dist *d)
{
	const char *e = fg_last_error();
	if (strncmp(e, "rank ", 5) != 0) {
		char line[1024];
		snprintf(line, sizeof(line), "%s", e);
		FG_ERR("rank %d: %s", d->world_rank, line);
	}
	fg_dist_fatal(d);
}

static void wait_or_die(struct fg_dist *d, void **req, double timeout, int peer, const char *what)
{
	if (fg_dist_wait(d, req, timeout, peer, what))
		fatal(d);
}

/* Blocking host transfers with a world rank (the open's agreement spans
 * every replica). */
static void world_send_or_die(struct fg_dist *d, int peer, int tag, const void *buf, size_t len,
			      const char *what)
{
	void *req = NULL;
	if (fg_dist_world_isend(d, peer, tag, buf, len, &req) ||
	    fg_dist_world_wait(d, &req, d->timeout, peer, what))
		fatal(d);
}

static void world_recv_or_die(struct fg_dist *d, int peer, int tag, void *buf, size_t len,
			      double timeout, const char *what)
{
	void *req = NULL;
	if (fg_dist_world_irecv(d, peer, tag, buf, len, &req) ||
	    fg_dist_world_wait(d, &req, timeout, peer, what))
		fatal(d);
}

/* ... with a stage of this rank's replica. */
static void send_or_die(struct fg_dist *d, int peer, int tag, const void *buf, size_t len,
			const char *what)
{
	world_send_or_die(d, d->base + peer, tag, buf, len, what);
}

static void recv_or_die(struct fg_dist *d, int peer, int tag, void *buf, size_t len,
			double timeout, const char *what)
{
	world_recv_or_die(d, d->base + peer, tag, buf, len, timeout, what);
}

static void send_command(struct fg_dist *d, const struct fg_pipe_cmd *c, const int32_t *pad,
			 size_t npad)
{
	for (int r = 1; r < d->info.size; r++) {
		send_or_die(d, r, TAG_CMD, c, sizeof(*c), "command");
		if (pad)
			send_or_die(d, r, TAG_PAD, pad, npad * sizeof(int32_t), "paddings");
	}
}

/* ---- agreeing ------------------------------------------------------------- */

/* The first line of `a` that `b` does not have, as "key value". */
static int differ(const char *a, const char *b, char *out, size_t n)
{
	while (*a || *b) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		if (la != lb || memcmp(a, b, la) != 0) {
			snprintf(out, n, "%.*s there, %.*s on rank 0", (int)la, a, (int)lb, b);
			return 1;
		}
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
	}
	return 0;
}

/* Workers send (rc, text) to their leader, which decides for all: the
 * first failure, or with `compare` the first worker whose text differs from
 * the leader's.  The group: every rank of the job (`all`, at open), else
 * this rank's replica, led by its stage 0.  Workers return -ECANCELED when
 * the verdict is a failure (the leader reports it), the leader the failure
 * with a line naming the rank. */
static int agree(struct fg_dist *d, int rc, const char *text, int compare, int all)
{
	struct pipe_status st = { .rc = rc };
	int first = all ? 0 : d->base, n = all ? d->world_size : d->info.size;
	double to = d->timeout;

	if (d->world_rank != first) {
		snprintf(st.text, sizeof(st.text), "%s", rc ? fg_last_error() : text ? text : "");
		world_send_or_die(d, first, TAG_STATUS, &st, sizeof(st), "status");
		world_recv_or_die(d, first, TAG_VERDICT, &st, sizeof(st), to, "verdict");
		return st.rc ? -ECANCELED : 0;
	}
	struct pipe_status verdict = { .rc = rc };
	for (int r = first + 1; r < first + n; r++) {
		char why[1024];
		world_recv_or_die(d, r, TAG_STATUS, &st, sizeof(st), to, "status");
		if (verdict.rc)
			continue;
		if (st.rc) {
			st.text[sizeof(st.text) - 1] = '\0';
			FG_ERR("rank %d: %s", r, st.text);
			verdict.rc = st.rc;
		} else if (compare && differ(st.text, text, why, sizeof(why))) {
			FG_ERR("rank %d: configuration differs from rank %d's: %s: every rank needs the same build, model, batch shape and [distributed] keys (stages differ only in [distributed] percent)",
			       r, first, why);
			verdict.rc = -EINVAL;
		}
	}
	for (int r = first + 1; r < first + n; r++)
		world_send_or_die(d, r, TAG_VERDICT, &verdict, sizeof(verdict), "verdict");
	return verdict.rc;
}

int fg_pipe_agree(struct fg_dist *d, int rc)
{
	return agree(d, rc, NULL, 0, 0);
}

int fg_pipe_agree_all(struct fg_dist *d, int rc)
{
	return agree(d, rc, NULL, 0, 1);
}

int fg_pipe_agree_config(struct fg_dist *d, int rc, const char *fingerprint)
{
	return agree(d, rc, fingerprint, 1, 1);
}

/* ---- rank 0's commands ------------------------------------------------------ */

int fg_pipe_announce_new(const struct fg_forward_env *env, int64_t prompt_len, int64_t gen_len)
{
	struct fg_pipe_cmd c = { .op = FG_PIPE_NEW, .nb = env->policy.num_gpu_batches,
			      .bs = env->policy.gpu_batch_size, .plen = prompt_len,
			      .glen = gen_len };
	if (env->dist->info.rank == 0)
		send_command(env->dist, &c, NULL, 0);
	return 0;
}

static int32_t wants(int logits, int top)
{
	return (top ? WANT_TOP : 0) | (logits ? WANT_LOGITS : 0);
}

int fg_pipe_step_command(struct fg_forward *f, const int32_t *pad, int want_logits, int want_top)
{
	struct fg_pipe_run *p = f->pipe;
	size_t rows = (size_t)(f->nb * f->bs);
	struct fg_pipe_cmd c = { .op = pad ? FG_PIPE_PREFILL : FG_PIPE_DECODE,
			      .want = wants(want_logits, want_top) | (pad && f->score ? WANT_SCORES : 0),
			      .score_k = pad && f->score ? f->score->k : 0,
			      /* a decode step computes the same rows on every stage */
			      .live_rows = !pad && f->mask.row_live };

	_Static_assert(FG_SHARE_LEVELS <= 4, "fg_pipe_cmd.share_split holds 4 levels");
	if (p->rank != 0)
		return 0;
	if (pad && f->share) {
		c.share_levels = f->share->levels;
		for (int k = 0; k < f->share->levels && k < FG_SHARE_LEVELS; k++)
			c.share_split[k] = f->share->split[k];
	}
	send_command(p->d, &c, pad, pad ? rows : 0);
	for (int r = 1; c.live_rows && r < p->size; r++)
		send_or_die(p->d, r, TAG_ROWS, f->mask.row_live, rows, "live rows");
	/* shared prefixes: every stage runs the same steps of the same rows */
	for (int r = 1; r < p->size; r++)
		for (int k = 0; k < c.share_levels && k < FG_SHARE_LEVELS; k++)
			send_or_die(p->d, r, TAG_SHARE, f->share->src[k],
				    (size_t)(f->nb * f->bs) * sizeof(int32_t), "shared prefixes");
	if (c.want & WANT_SCORES)
		send_or_die(p->d, p->size - 1, TAG_TARGETS, f->score->target,
			    (size_t)(f->nb * f->bs * f->plen) * sizeof(int32_t), "scored targets");
	return 0;
}

int fg_pipe_join_command(struct fg_forward *f, const unsigned char *join, const int32_t *pad,
			 int64_t n, int want_logits, int want_top)
{
	struct fg_pipe_run *p = f->pipe;
	size_t rows = (size_t)(f->nb * f->bs);
	struct fg_pipe_cmd c = { .op = FG_PIPE_JOIN, .want = wants(want_logits, want_top),
			      .join_n = n };

	if (p->rank != 0)
		return 0;
	/* (the ids only matter to stage 0, which embeds them) */
	send_command(p->d, &c, pad, rows);
	for (int r = 1; r < p->size; r++)
		send_or_die(p->d, r, TAG_ROWS, join, rows, "joining rows");
	return 0;
}

/* Stage 0 ANDs every stage's caps and sends the outcome back. */
void fg_pipe_agree_join_caps(struct fg_forward *f)
{
	struct fg_pipe_run *p = f->pipe;
	uint32_t caps = fg_join_own_caps(f), theirs;

	if (p->rank != 0) {
		send_or_die(p->d, 0, TAG_JOIN_CAPS, &caps, sizeof(caps), "join caps");
		recv_or_die(p->d, 0, TAG_JOIN_CAPS, &caps, sizeof(caps), p->d->timeout, "join caps");
	} else {
		for (int r = 1; r < p->size; r++) {
			recv_or_die(p->d, r, TAG_JOIN_CAPS, &theirs, sizeof(theirs), p->d->timeout,
				    "join caps");
			caps &= theirs;
		}
		for (int r = 1; r < p->size; r++)
			send_or_die(p->d, r, TAG_JOIN_CAPS, &caps, sizeof(caps), "join caps");
	}
	p->join_caps = caps;
}

unsigned fg_pipe_join_caps(const struct fg_forward *f)
{
	return f->pipe->join_caps;
}

/* ---- a run's buffers --------------------------------------------------------- */

int fg_pipe_has_prev(const struct fg_forward *f)
{
	return f->pipe->rank > 0;
}

int fg_pipe_has_next(const struct fg_forward *f)
{
	return f->pipe->rank < f->pipe->size - 1;
}

static int host_alloc(struct fg_forward *f, uint64_t size, struct fg_region *r, const char *what)
{
	char hint[128];
	if (!size)
		return 0;
	snprintf(hint, sizeof(hint), "(%s) a smaller gpu_batch_size x num_gpu_batches or shorter prompts would fit", what);
	int rc = fg_tier_alloc_hint(f->tier[FG_ROLE_HOST], size, r, hint);
	if (!rc && !r->addr) {
		fg_tier_free(f->tier[FG_ROLE_HOST], r);
		FG_ERR("pipeline: [tier.host] gave no address for %s: use a host-memory tier (pinned_host)", what);
		return -EINVAL;
	}
	return rc;
}

int fg_pipe_run_new(struct fg_forward *f)
{
	struct fg_dist *d = f->env.dist;
	struct fg_pipe_run *p = calloc(1, sizeof(*p));
	size_t nb = (size_t)f->nb;
	int all_act_on_compute = f->plan.acount[FG_ROLE_COMPUTE] == f->nb;
	int rc;

	if (!p) {
		FG_ERR("pipeline: out of memory");
		return -ENOMEM;
	}
	f->pipe = p;
	p->d = d;
	p->rank = d->info.rank;
	p->size = d->info.size;
	p->device = (d->info.mem & FG_TRANSPORT_DEVICE) && f->mv.device && all_act_on_compute;
	p->device_sync = !p->device && (d->info.mem & FG_TRANSPORT_DEVICE_SYNC) && f->mv.device &&
			 all_act_on_compute;
	p->stride = f->plan.hidden;
	/* FlexGen's inner iterations: by default as many micro-batches as stages. */
	f->ngroups = d->micro ? d->micro : p->size;
	f->ngroups = f->ngroups < f->nb ? f->ngroups : f->nb;
	p->rreq = calloc(nb, sizeof(void *));
	p->sreq = calloc(nb, sizeof(void *));
	p->treq = calloc(nb, sizeof(void *));
	p->lreq = calloc(nb, sizeof(void *));
	if (!p->rreq || !p->sreq || !p->treq || !p->lreq) {
		FG_ERR("pipeline: out of memory");
		return -ENOMEM;
	}
	if (!p->device && !p->device_sync && fg_pipe_has_prev(f) &&
	    (rc = host_alloc(f, nb * p->stride, &p->rbuf, "activations received")))
		return rc;
	if (!p->device && !p->device_sync && fg_pipe_has_next(f) &&
	    (rc = host_alloc(f, nb * p->stride, &p->sbuf, "activations sent")))
		return rc;
	if (p->rank != 0 && !fg_pipe_has_next(f)) {
		size_t rows = nb * (size_t)f->bs;
		p->top = malloc(rows * sizeof(int32_t));
		p->logits = malloc(rows * (size_t)f->cfg->vocab * sizeof(float));
		if (!p->top || !p->logits) {
			FG_ERR("pipeline: out of memory for the results of %zu sequences", rows);
			return -ENOMEM;
		}
	}
	if (p->rank != 0 && (!(p->rows = malloc(nb * (size_t)f->bs)) || fg_mask_alloc(f))) {
		FG_ERR("pipeline: out of memory for the masks of %zu sequences", nb * (size_t)f->bs);
		return -ENOMEM;
	}
	return 0;
}

void fg_pipe_run_free(struct fg_forward *f)
{
	struct fg_pipe_run *p = f->pipe;
	if (p->rank == 0) {
		struct fg_pipe_cmd c = { .op = FG_PIPE_FREE };
		send_command(p->d, &c, NULL, 0);
	}
	/* What the pipeline left idle on this stage (bench/RESULTS.md). */
	if (p->steps)
		FG_LOG(FG_LOG_INFO, "pipeline stage %d of %d: %lld steps in %.3f s, %.3f s (%.1f%%) waiting for other stages",
		       p->rank, p->size, (long long)p->steps, p->wall, f->stats.wait_stage_s,
		       p->wall > 0 ? 100.0 * f->stats.wait_stage_s / p->wall : 0.0);
	if (p->rbuf.size)
		fg_tier_free(f->tier[FG_ROLE_HOST], &p->rbuf);
	if (p->sbuf.size)
		fg_tier_free(f->tier[FG_ROLE_HOST], &p->sbuf);
	free(p->rreq);
	free(p->sreq);
	free(p->treq);
	free(p->lreq);
	free(p->rows);
	free(p->top);
	free(p->logits);
	free(p);
	f->pipe = NULL;
}

/* ---- a step ------------------------------------------------------------------- */

void fg_pipe_results(struct fg_forward *f, float **logits, int32_t **top)
{
	struct fg_pipe_run *p = f->pipe;
	if (p->rank == 0)
		return;
	*logits = p->top && (p->want & WANT_LOGITS) ? p->logits : NULL;
	*top = p->top && (p->want & WANT_TOP) ? p->top : NULL;
}

void fg_pipe_step_begin(struct fg_forward *f, int64_t n, float *logits, int32_t *top)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;
	int last = p->size - 1;

	p->n = n;
	p->t_step = fg_now();
	/* Every receive of the step, posted now: into host staging, or (CUDA-aware
	 * MPI) straight into each GPU batch's activations on the compute tier,
	 * which nothing touches before fg_pipe_recv_hidden waits for them.  Of
	 * the GPU batches the step runs: the same on every stage, whose masks
	 * rank 0's commands make alike. */
	if (!p->device && fg_pipe_has_prev(f))
		for (int64_t k = 0; k < f->nb; k++)
			if (fg_step_runs(f, k) && fg_dist_irecv(d, p->rank - 1, TAG_HIDDEN + (int)k,
					  p->device_sync ? f->gb[k].hidden_home.addr
							 : (char *)p->rbuf.addr + (uint64_t)k * p->stride,
					  fg_hidden_len(f, n),
					  p->device_sync ? FG_TRANSPORT_DEVICE_SYNC : FG_TRANSPORT_HOST,
					  NULL, &p->rreq[k]))
				fatal(d);
	if (p->rank != 0 || !fg_pipe_has_next(f))
		return;
	/* Rank 0: the last stage's results land in the caller's arrays. */
	for (int64_t k = 0; k < f->nb; k++) {
		if (!fg_step_runs(f, k))
			continue;
		if (top && fg_dist_irecv(d, last, TAG_TOP + (int)k, top + k * f->bs,
					 (size_t)f->bs * sizeof(int32_t), FG_TRANSPORT_HOST, NULL,
					 &p->treq[k]))
			fatal(d);
		if (logits &&
		    fg_dist_irecv(d, last, TAG_LOGITS + (int)k, logits + k * f->bs * f->cfg->vocab,
				  (size_t)(f->bs * f->cfg->vocab) * sizeof(float), FG_TRANSPORT_HOST,
				  NULL, &p->lreq[k]))
			fatal(d);
	}
}

void fg_pipe_recv_hidden(struct fg_forward *f, int64_t k, void *h, size_t len)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;
	double t0 = fg_now();

	if (p->device) {
		/* Stream-ordered: the compute after it waits for the bytes on the GPU. */
		if (fg_dist_irecv(d, p->rank - 1, TAG_HIDDEN + (int)k, h, len, FG_TRANSPORT_DEVICE,
				  f->stream, &p->rreq[k]))
			fatal(d);
		return;
	}
	wait_or_die(d, &p->rreq[k], d->timeout, p->rank - 1, "activations");
	if (!p->device_sync && /* (else the bytes landed in h) */
	    fg_backend_copy(f->be, f->stream, h, (char *)p->rbuf.addr + (uint64_t)k * p->stride, len))
		fatal(d);
	f->stats.wait_stage_s += fg_now() - t0;
	f->stats.hidden_bytes += len;
}

void fg_pipe_send_hidden(struct fg_forward *f, int64_t k, const void *h, size_t len)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;
	int in_place = p->device || p->device_sync;
	void *sb = in_place ? (void *)h : (char *)p->sbuf.addr + (uint64_t)k * p->stride;
	unsigned mem = p->device ? FG_TRANSPORT_DEVICE
			 : p->device_sync ? FG_TRANSPORT_DEVICE_SYNC : FG_TRANSPORT_HOST;

	/* A host copy, or (CUDA-aware MPI) the activations in place once the
	 * stream has computed them; nccl orders the send on the stream itself. */
	if (!in_place && fg_backend_copy(f->be, f->stream, sb, h, len))
		fatal(d);
	if (!p->device && fg_backend_stream_sync(f->be, f->stream))
		fatal(d);
	if (fg_dist_isend(d, p->rank + 1, TAG_HIDDEN + (int)k, sb, len, mem, f->stream, &p->sreq[k]))
		fatal(d);
	f->stats.hidden_bytes += len;
}

void fg_pipe_send_results(struct fg_forward *f, int64_t k)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;

	if (p->rank == 0)
		return; /* one stage holds everything: the results are already in place */
	if ((p->want & WANT_TOP) &&
	    fg_dist_isend(d, 0, TAG_TOP + (int)k, p->top + k * f->bs, (size_t)f->bs * sizeof(int32_t),
			  FG_TRANSPORT_HOST, NULL, &p->treq[k]))
		fatal(d);
	if ((p->want & WANT_LOGITS) &&
	    fg_dist_isend(d, 0, TAG_LOGITS + (int)k, p->logits + k * f->bs * f->cfg->vocab,
			  (size_t)(f->bs * f->cfg->vocab) * sizeof(float), FG_TRANSPORT_HOST, NULL,
			  &p->lreq[k]))
		fatal(d);
}

/* What a scored prefill's last stage scored, between it and rank 0 (send
 * 1: from the last stage; 0: into rank 0's arrays). */
static void move_scores(struct fg_forward *f, const struct fg_prompt_scores *s, int send)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;
	size_t pos = (size_t)(f->nb * f->bs * f->plen), k = (size_t)s->k;
	struct {
		int tag;
		void *buf;
		size_t len;
	} m[3] = { { TAG_SCORE_LP, s->lp, pos * sizeof(float) },
		   { TAG_SCORE_ID, s->top_id, pos * k * sizeof(int32_t) },
		   { TAG_SCORE_TOP, s->top_lp, pos * k * sizeof(float) } };

	for (int i = 0; i < (k ? 3 : 1); i++) {
		if (send)
			send_or_die(d, 0, m[i].tag, m[i].buf, m[i].len, "prompt scores");
		else
			recv_or_die(d, p->size - 1, m[i].tag, m[i].buf, m[i].len, d->timeout,
				    "prompt scores");
	}
}

void fg_pipe_step_end(struct fg_forward *f)
{
	struct fg_pipe_run *p = f->pipe;
	struct fg_dist *d = p->d;
	double t0 = fg_now();

	if (p->rank == 0 && f->score && p->size > 1)
		move_scores(f, f->score, 0);

	for (int64_t k = 0; k < f->nb; k++) {
		int res_peer = p->rank == 0 ? p->size - 1 : 0;
		wait_or_die(d, &p->rreq[k], d->timeout, p->rank - 1, "activations");
		wait_or_die(d, &p->sreq[k], d->timeout, p->rank + 1, "receipt of activations");
		wait_or_die(d, &p->treq[k], d->timeout, res_peer, "tokens");
		wait_or_die(d, &p->lreq[k], d->timeout, res_peer, "logits");
	}
	f->stats.wait_stage_s += fg_now() - t0;
	p->wall += fg_now() - p->t_step;
	p->steps++;
}

void fg_pipe_fatal(struct fg_forward *f)
{
	fatal(f->pipe->d);
}

/* ---- the other ranks ------------------------------------------------------------ */

int fg_pipe_close(struct fg_dist *d)
{
	if (d->info.rank == 0) {
		/* want: a rank of the job died (struct fg_dist.peer_lost) */
		struct fg_pipe_cmd c = { .op = FG_PIPE_EXIT, .want = d->peer_lost };
		send_command(d, &c, NULL, 0);
	}
	return 0;
}

void fg_pipe_next_command(struct fg_dist *d, struct fg_pipe_cmd *c)
{
	void *req = NULL, *gone = NULL;
	int32_t why;
	long ns = 2000;
	int rc;

	/* Stage 0 may take its time between batches (reading input, serving
	 * requests): this wait has no limit; a rank that dies ends the job
	 * through the launcher.  A later replica's stage also hears from rank 0
	 * when its replica failed: then it leaves. */
	if (fg_dist_irecv(d, 0, TAG_CMD, c, sizeof(*c), FG_TRANSPORT_HOST, NULL, &req))
		fatal(d);
	if (d->replica > 0 &&
	    fg_dist_world_irecv(d, 0, FG_DIST_TAG_REPLICA_GONE, &why, sizeof(why), &gone))
		fatal(d);
	while (!(rc = fg_dist_test(d, &req))) {
		if (gone && (rc = fg_dist_test(d, &gone))) {
			if (rc < 0)
				fatal(d);
			d->ops->cancel(d->ctx, req);
			c->op = FG_PIPE_EXIT;
			d->peer_lost = 1;
			return;
		}
		fg_dist_nap(&ns);
	}
	if (rc < 0)
		fatal(d);
	if (gone)
		d->ops->cancel(d->ctx, gone);
}

/* The last stage's side of a scored prefill: rank 0's targets in, the
 * scores out once the step is done. */
static int follow_scored(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c,
			 const int32_t *pad)
{
	size_t pos = (size_t)(f->nb * f->bs * f->plen), k = (size_t)c->score_k;
	int32_t *target = malloc(pos * sizeof(int32_t)), *top_id = malloc(pos * k * sizeof(int32_t) + 1);
	float *lp = malloc(pos * sizeof(float)), *top_lp = malloc(pos * k * sizeof(float) + 1);
	struct fg_prompt_scores s = { target, c->score_k, lp, k ? top_id : NULL, k ? top_lp : NULL };
	int rc;

	if (!target || !top_id || !lp || !top_lp) {
		FG_ERR("rank %d: out of memory for the scores of %zu positions", d->world_rank, pos);
		rc = -ENOMEM;
	} else {
		recv_or_die(d, 0, TAG_TARGETS, target, pos * sizeof(int32_t), d->timeout,
			    "scored targets");
		rc = fg_forward_prefill_scored(f, NULL, pad, NULL, NULL, &s);
		if (!rc)
			move_scores(f, &s, 1);
	}
	free(target);
	free(top_id);
	free(lp);
	free(top_lp);
	return rc;
}

static void follow_prefill(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c,
			   int32_t *pad)
{
	size_t rows = (size_t)(f->nb * f->bs);
	int levels = c->share_levels, rc;
	struct fg_prefix_share sh = { .levels = levels };
	int32_t *src = NULL;

	recv_or_die(d, 0, TAG_PAD, pad, rows * sizeof(int32_t), d->timeout, "paddings");
	if (levels < 0 || levels > FG_SHARE_LEVELS ||
	    (levels && !(src = malloc(rows * (size_t)levels * sizeof(int32_t))))) {
		FG_ERR("rank %d: no room for %d levels of shared prefixes", d->world_rank, levels);
		fatal(d);
	}
	for (int k = 0; k < levels; k++) {
		recv_or_die(d, 0, TAG_SHARE, src + (size_t)k * rows, rows * sizeof(int32_t),
			    d->timeout, "shared prefixes");
		sh.split[k] = c->share_split[k];
		sh.src[k] = src + (size_t)k * rows;
	}
	if (levels)
		fg_forward_set_shared_prefix(f, &sh);
	/* the last stage scores the prompt positions for rank 0 */
	rc = (c->want & WANT_SCORES) && !fg_pipe_has_next(f) ? follow_scored(d, f, c, pad)
							      : fg_forward_prefill(f, NULL, pad, NULL, NULL);
	free(src);
	if (rc)
		fatal(d);
}

/* Rank 0's live rows, as its fg_forward_set_live_rows left them. */
static void follow_decode(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c)
{
	struct fg_pipe_run *p = f->pipe;

	if (c->live_rows) {
		recv_or_die(d, 0, TAG_ROWS, p->rows, (size_t)(f->nb * f->bs), d->timeout,
			    "live rows");
		fg_forward_set_live_rows(f, p->rows);
	}
	if (fg_forward_decode(f, NULL, NULL, NULL))
		fatal(d);
}

/* The joining rows' prompts on this stage (stage 0 embeds their ids). */
static void follow_join(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c,
			int32_t *pad)
{
	struct fg_pipe_run *p = f->pipe;
	size_t rows = (size_t)(f->nb * f->bs);

	recv_or_die(d, 0, TAG_PAD, pad, rows * sizeof(int32_t), d->timeout, "paddings");
	recv_or_die(d, 0, TAG_ROWS, p->rows, rows, d->timeout, "joining rows");
	if (fg_forward_join(f, p->rows, NULL, pad, c->join_n, NULL, NULL, NULL))
		fatal(d);
}

void fg_pipe_follow_step(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c,
			 int32_t *pad)
{
	if (!f) {
		FG_ERR("rank %d: stage 0 asked for a %s without a run", d->world_rank, cmd_name(c->op));
		fatal(d);
	}
	f->pipe->want = c->want;
	if (c->op == FG_PIPE_PREFILL)
		follow_prefill(d, f, c, pad);
	else if (c->op == FG_PIPE_JOIN)
		follow_join(d, f, c, pad);
	else
		follow_decode(d, f, c);
}

void fg_pipe_die(struct fg_dist *d)
{
	fatal(d);
}
