/* core/request/replicas.c - the messages of a job of replicas between
 * rank 0 and each other replica's stage 0 (its head).
 *
 * Rank 0 hands a head a piece: requests (wire.h's bytes) and how to run
 * them.  The head runs it through its own request layer and answers each
 * result as it is made, each token a streaming request emits, about every
 * second between decode steps that it is alive, and at the end of the piece
 * what it ran (fg_run_stats) and its outcome.  A head that says it failed,
 * whose messages cannot be read, or that stays silent past [distributed]
 * timeout is lost: its unanswered requests go back to rank 0's runner,
 * which hands them to the others; its later stages are told to leave.
 *
 * Every message is a fixed head (struct msg) under one tag, then, when it
 * announces any, its payload under another: messages between two ranks
 * with one tag arrive in order, so a payload always follows its head. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/dist.h"
#include "core/engine/engine.h"
#include "core/request/job.h"
#include "core/request/replicas.h"
#include "core/request/wire.h"
#include "core/util/clock.h"
#include "core/util/error.h"

enum {
	MSG_PIECE = 1, MSG_ABANDON, MSG_EXIT, /* to a head */
	MSG_RESULT, MSG_TOKEN, MSG_ALIVE, MSG_END, MSG_FAILED, /* from it */
};

struct msg {
	int32_t kind;
	int32_t piece;  /* the piece it is about (MSG_FAILED: any) */
	int64_t a;      /* MSG_RESULT, MSG_TOKEN: the request's place in the piece; MSG_END: rc */
	int64_t b;      /* MSG_TOKEN: the token */
	uint64_t len;   /* payload bytes that follow */
};

/* No payload is larger than this (a piece's requests, a result with its
 * scores): a head announcing more is not one to trust. */
#define PAYLOAD_MAX ((uint64_t)1 << 36)

enum { FREE, BUSY, LOST };

struct replica {
	int k, head, state;
	int32_t piece;
	size_t *index, n;        /* the piece's requests (fg_job.index), in its order */
	unsigned char *answered;
	double heard;            /* when it last said anything */
	struct msg in, out, stop;
	void *in_req, *out_req, *pay_req, *stop_req;
	void **gone_req;         /* telling its later stages to leave */
	int32_t gone;
	struct fg_wire w;        /* the piece's bytes, until sent */
};

struct fg_replicas {
	struct fg_engine *e;
	struct fg_dist *d;
	int n;                   /* replicas other than rank 0's */
	struct replica *r;
	int32_t pieces;
};

/* ---- rank 0 -------------------------------------------------------------- */

static int post_in(struct fg_replicas *rs, struct replica *rp)
{
	return fg_dist_world_irecv(rs->d, rp->head, FG_DIST_TAG_FROM_REPLICA, &rp->in,
				   sizeof(rp->in), &rp->in_req);
}

int fg_replicas_get(struct fg_engine *e, struct fg_replicas **out)
{
	struct fg_dist *d = e->world;
	struct fg_replicas *rs = e->replicas;

	if (rs) {
		*out = rs;
		return 0;
	}
	if (!(rs = calloc(1, sizeof(*rs))) || !(rs->r = calloc((size_t)d->replicas, sizeof(*rs->r)))) {
		free(rs);
		FG_ERR("out of memory for %d replicas", d->replicas);
		return -ENOMEM;
	}
	rs->e = e;
	rs->d = d;
	rs->n = d->replicas - 1;
	for (int k = 0; k < rs->n; k++) {
		struct replica *rp = &rs->r[k];
		rp->k = k + 1;
		rp->head = (k + 1) * d->info.size;
		rp->gone_req = calloc((size_t)d->info.size, sizeof(void *));
		if (!rp->gone_req || post_in(rs, rp)) {
			/* (a replica rank 0 cannot hear is one it never uses) */
			FG_LOG(FG_LOG_WARN, "replica %d (rank %d): cannot listen to it (%s): left out",
			       rp->k, rp->head, fg_last_error());
			rp->state = LOST;
		}
	}
	e->replicas = rs;
	e->replicas_close = fg_replicas_close;
	*out = rs;
	return 0;
}

static void cancel(struct fg_dist *d, void **req)
{
	if (*req)
		d->ops->cancel(d->ctx, *req);
	*req = NULL;
}

/* The piece's requests without a result. */
static size_t unanswered(const struct replica *rp, size_t *out)
{
	size_t m = 0;
	for (size_t i = 0; i < rp->n; i++)
		if (!rp->answered[i])
			out[m++] = rp->index[i];
	return m;
}

static void lose(struct fg_replicas *rs, struct replica *rp, const char *why,
		 const struct fg_replicas_events *ev)
{
	struct fg_dist *d = rs->d;
	size_t *left = rp->state == BUSY ? malloc((rp->n ? rp->n : 1) * sizeof(*left)) : NULL;
	size_t m = left ? unanswered(rp, left) : 0;

	FG_LOG(FG_LOG_WARN, "replica %d (rank %d) %s: %zu unfinished requests go to the other replicas, the job goes on",
	       rp->k, rp->head, why, m);
	rp->state = LOST;
	d->peer_lost = 1;
	cancel(d, &rp->in_req);
	cancel(d, &rp->out_req);
	cancel(d, &rp->pay_req);
	cancel(d, &rp->stop_req);
	/* Its later stages wait for its commands: they leave. */
	rp->gone = 1;
	for (int s = 1; s < d->info.size; s++)
		if (fg_dist_world_isend(d, rp->head + s, FG_DIST_TAG_REPLICA_GONE, &rp->gone,
					sizeof(rp->gone), &rp->gone_req[s]))
			rp->gone_req[s] = NULL;
	if (m)
		ev->lost(ev->arg, left, m);
	free(left);
}

/* One message of rp's (its head in rp->in): read its payload, act. */
static void handle(struct fg_replicas *rs, struct replica *rp, const struct fg_replicas_events *ev)
{
	struct fg_dist *d = rs->d;
	struct msg in = rp->in;
	unsigned char *buf = NULL;
	void *req = NULL;
	char why[1024];

	rp->heard = fg_now();
	if (in.len > PAYLOAD_MAX || (in.len && !(buf = malloc(in.len)))) {
		snprintf(why, sizeof(why), "announced %llu bytes (out of memory or not a message)",
			 (unsigned long long)in.len);
		lose(rs, rp, why, ev);
		return;
	}
	if (in.len && (fg_dist_world_irecv(d, rp->head, FG_DIST_TAG_PAYLOAD_FROM, buf, in.len, &req) ||
		       fg_dist_world_wait(d, &req, d->timeout, rp->head, "message"))) {
		snprintf(why, sizeof(why), "failed: %s", fg_last_error());
		lose(rs, rp, why, ev);
		free(buf);
		return;
	}
	struct fg_wire_reader rd = { buf, in.len, 0 };
	int ours = rp->state == BUSY && in.piece == rp->piece;
	switch (in.kind) {
	case MSG_RESULT:
		if (ours && in.a >= 0 && (uint64_t)in.a < rp->n && !rp->answered[in.a]) {
			struct fg_result res;
			if (fg_wire_get_result(&rd, &res)) {
				snprintf(why, sizeof(why), "sent a result that does not read (%s)",
					 fg_last_error());
				lose(rs, rp, why, ev);
				break;
			}
			rp->answered[in.a] = 1;
			ev->result(ev->arg, rp->index[in.a], &res);
		}
		break;
	case MSG_TOKEN:
		if (ours && in.a >= 0 && (uint64_t)in.a < rp->n && !rp->answered[in.a])
			ev->token(ev->arg, rp->index[in.a], (int32_t)in.b);
		break;
	case MSG_ALIVE:
		break;
	case MSG_END: {
		/* the counts, then the outcome as a result (its error: why it ran nothing) */
		struct fg_run_stats st;
		struct fg_result out;
		if (!ours)
			break;
		if (fg_wire_get_stats(&rd, &st) || fg_wire_get_result(&rd, &out)) {
			snprintf(why, sizeof(why), "sent counts that do not read (%s)", fg_last_error());
			lose(rs, rp, why, ev);
			break;
		}
		fg_run_stats_add(&rs->e->stats, &st);
		snprintf(why, sizeof(why), "%s", out.error ? out.error : "");
		fg_result_clear(&out);
		size_t *idx = malloc((rp->n ? rp->n : 1) * sizeof(*idx));
		size_t m = idx ? unanswered(rp, idx) : 0;
		rp->state = FREE;
		ev->ended(ev->arg, in.a < 0 ? (int)in.a : 0, why, idx, m);
		free(idx);
		break;
	}
	case MSG_FAILED:
		lose(rs, rp, "failed (its line above)", ev);
		break;
	default:
		snprintf(why, sizeof(why), "sent a message of unknown kind %d", in.kind);
		lose(rs, rp, why, ev);
	}
	free(buf);
}

int fg_replicas_poll(struct fg_replicas *rs, const struct fg_replicas_events *ev)
{
	double now = fg_now();
	int came = 0;

	for (int k = 0; k < rs->n; k++) {
		struct replica *rp = &rs->r[k];
		char why[1024];
		int rc;

		while (rp->state != LOST && (rc = fg_dist_test(rs->d, &rp->in_req))) {
			if (rc < 0) {
				snprintf(why, sizeof(why), "failed: %s", fg_last_error());
				lose(rs, rp, why, ev);
				break;
			}
			came++;
			handle(rs, rp, ev);
			if (rp->state != LOST && post_in(rs, rp)) {
				snprintf(why, sizeof(why), "cannot be heard: %s", fg_last_error());
				lose(rs, rp, why, ev);
			}
		}
		if (rp->state == BUSY && now - rp->heard > rs->d->timeout) {
			snprintf(why, sizeof(why), "said nothing for %g s ([distributed] timeout)",
				 rs->d->timeout);
			lose(rs, rp, why, ev);
		}
	}
	return came;
}

int fg_replicas_free(const struct fg_replicas *rs)
{
	for (int k = 0; k < rs->n; k++)
		if (rs->r[k].state == FREE)
			return k;
	return -1;
}

int fg_replicas_busy(const struct fg_replicas *rs)
{
	int n = 0;
	for (int k = 0; k < rs->n; k++)
		n += rs->r[k].state == BUSY;
	return n;
}

int fg_replicas_send(struct fg_replicas *rs, int k, struct fg_job *const *jobs, size_t n,
		     int fail_fast, int64_t hint_plen, int64_t hint_glen,
		     const struct fg_replicas_events *ev)
{
	struct fg_dist *d = rs->d;
	struct replica *rp = &rs->r[k];
	size_t *index = realloc(rp->index, (n ? n : 1) * sizeof(*index));
	int rc = 0;

	if (index)
		rp->index = index;
	free(rp->answered);
	rp->answered = calloc(n ? n : 1, 1);
	if (!index || !rp->answered) {
		FG_ERR("out of memory for a piece of %zu requests", n);
		return -ENOMEM;
	}
	/* The piece is the replica's from here: a failure to send it hands its
	 * requests back (lose). */
	for (size_t i = 0; i < n; i++)
		rp->index[i] = jobs[i]->index;
	rp->n = n;
	rp->state = BUSY;
	rp->heard = fg_now();
	/* The previous piece's bytes went out before its head answered. */
	if (fg_dist_world_wait(d, &rp->out_req, d->timeout, rp->head, "piece") ||
	    fg_dist_world_wait(d, &rp->pay_req, d->timeout, rp->head, "piece")) {
		char why[1024];
		snprintf(why, sizeof(why), "failed: %s", fg_last_error());
		lose(rs, rp, why, ev);
		return 0;
	}
	rp->w.len = 0;
	rc = fg_wire_put_u64(&rp->w, (uint64_t)fail_fast) ||
	     fg_wire_put_u64(&rp->w, (uint64_t)hint_plen) ||
	     fg_wire_put_u64(&rp->w, (uint64_t)hint_glen) || fg_wire_put_u64(&rp->w, n);
	for (size_t i = 0; !rc && i < n; i++)
		rc = fg_wire_put_request(&rp->w, jobs[i]->req);
	if (rc) {
		rp->state = FREE; /* (nothing went out: the caller fails the call) */
		return -ENOMEM;
	}
	rp->piece = ++rs->pieces;
	rp->out = (struct msg){ .kind = MSG_PIECE, .piece = rp->piece, .len = rp->w.len };
	if (fg_dist_world_isend(d, rp->head, FG_DIST_TAG_TO_REPLICA, &rp->out, sizeof(rp->out),
				&rp->out_req) ||
	    fg_dist_world_isend(d, rp->head, FG_DIST_TAG_PAYLOAD_TO, rp->w.buf, rp->w.len,
				&rp->pay_req)) {
		char why[1024];
		snprintf(why, sizeof(why), "failed: %s", fg_last_error());
		lose(rs, rp, why, ev);
	}
	return 0;
}

void fg_replicas_abandon(struct fg_replicas *rs)
{
	for (int k = 0; k < rs->n; k++) {
		struct replica *rp = &rs->r[k];
		if (rp->state != BUSY)
			continue;
		if (fg_dist_world_wait(rs->d, &rp->stop_req, rs->d->timeout, rp->head, "stop"))
			continue; /* (silent: the poll loses it) */
		rp->stop = (struct msg){ .kind = MSG_ABANDON, .piece = rp->piece };
		if (fg_dist_world_isend(rs->d, rp->head, FG_DIST_TAG_TO_REPLICA, &rp->stop,
					sizeof(rp->stop), &rp->stop_req))
			rp->stop_req = NULL;
	}
}

void fg_replicas_close(struct fg_engine *e)
{
	struct fg_replicas *rs = e->replicas;

	if (!rs)
		return;
	struct fg_dist *d = rs->d;
	/* Bounded: a head that left meanwhile does not hold rank 0 up. */
	double to = d->timeout < 5 ? d->timeout : 5;
	for (int k = 0; k < rs->n; k++) {
		struct replica *rp = &rs->r[k];
		rp->out = (struct msg){ .kind = MSG_EXIT, .a = d->peer_lost };
		if (rp->state != LOST) {
			fg_dist_world_wait(d, &rp->out_req, to, rp->head, "piece");
			fg_dist_world_wait(d, &rp->pay_req, to, rp->head, "piece");
			fg_dist_world_wait(d, &rp->stop_req, to, rp->head, "stop");
			if (!fg_dist_world_isend(d, rp->head, FG_DIST_TAG_TO_REPLICA, &rp->out,
						 sizeof(rp->out), &rp->out_req) &&
			    fg_dist_world_wait(d, &rp->out_req, to, rp->head, "stop"))
				FG_LOG(FG_LOG_WARN, "%s", fg_last_error());
		} else if (!fg_dist_world_isend(d, rp->head, FG_DIST_TAG_TO_REPLICA, &rp->out,
						sizeof(rp->out), &rp->out_req)) {
			/* A replica given up for silence may yet be alive, waiting
			 * for its next piece: told to leave, it does not hold the
			 * launcher up.  A dead one never hears it (not waited on
			 * long, not reported). */
			fg_dist_world_wait(d, &rp->out_req, to < 1 ? to : 1, rp->head, "stop");
		}
		for (int s = 1; rp->gone_req && s < d->info.size; s++)
			if (fg_dist_world_wait(d, &rp->gone_req[s], to, rp->head + s, "stop"))
				cancel(d, &rp->gone_req[s]);
		cancel(d, &rp->in_req);
		cancel(d, &rp->out_req);
		cancel(d, &rp->pay_req);
		cancel(d, &rp->stop_req);
		free(rp->gone_req);
		free(rp->index);
		free(rp->answered);
		fg_wire_free(&rp->w);
	}
	free(rs->r);
	free(rs);
	e->replicas = NULL;
}

/* ---- a replica's head ------------------------------------------------------ */

struct head {
	struct fg_engine *e;
	struct fg_dist *d;
	struct msg in;           /* rank 0's next message, once in_req finishes */
	void *in_req;
	int pending;             /* in holds a message the piece's polls left */
	int32_t piece;
	const struct fg_request *reqs; /* the piece's */
	volatile sig_atomic_t abandon;
	double said;             /* when it last sent rank 0 anything */
	int sent;                /* results (fg_dist_test_kill) */
	struct fg_wire w;
};

struct token_to {
	struct head *h;
	size_t at;
};

/* Every failure to talk to rank 0 ends this replica (fg_dist_fatal). */
static void say(struct head *h, int kind, int64_t a, int64_t b, const void *pay, size_t len)
{
	struct fg_dist *d = h->d;
	struct msg m = { .kind = kind, .piece = h->piece, .a = a, .b = b, .len = len };
	void *req = NULL;

	if (fg_dist_world_isend(d, 0, FG_DIST_TAG_FROM_REPLICA, &m, sizeof(m), &req) ||
	    fg_dist_world_wait(d, &req, d->timeout, 0, "answer"))
		fg_dist_fatal(d);
	if (len && (fg_dist_world_isend(d, 0, FG_DIST_TAG_PAYLOAD_FROM, pay, len, &req) ||
		    fg_dist_world_wait(d, &req, d->timeout, 0, "answer")))
		fg_dist_fatal(d);
	h->said = fg_now();
}

static int send_result(void *arg, size_t at, struct fg_result *res)
{
	struct head *h = arg;

	fg_dist_test_kill(h->d, &h->sent);

	h->w.len = 0;
	if (fg_wire_put_result(&h->w, res, h->reqs[at].top_logprobs))
		fg_dist_fatal(h->d);
	fg_result_clear(res);
	say(h, MSG_RESULT, (int64_t)at, 0, h->w.buf, h->w.len);
	return 0;
}

static void send_token(void *arg, int32_t id)
{
	struct token_to *t = arg;
	say(t->h, MSG_TOKEN, (int64_t)t->at, id, NULL, 0);
}

static int post_listen(struct head *h)
{
	h->pending = 0;
	if (fg_dist_world_irecv(h->d, 0, FG_DIST_TAG_TO_REPLICA, &h->in, sizeof(h->in), &h->in_req))
		fg_dist_fatal(h->d);
	return 0;
}

/* Between decode steps: alive about every second; rank 0's stop heard. */
static void between_steps(void *arg)
{
	struct head *h = arg;
	int rc;

	if (fg_now() - h->said >= 1.0)
		say(h, MSG_ALIVE, 0, 0, NULL, 0);
	if (h->pending || !(rc = fg_dist_test(h->d, &h->in_req)))
		return;
	if (rc < 0)
		fg_dist_fatal(h->d);
	if (h->in.kind == MSG_ABANDON) {
		h->abandon = h->in.piece == h->piece;
		post_listen(h);
	} else {
		h->pending = 1; /* (for the loop, after the piece) */
	}
}

/* The piece rank 0 announced in h->in: its requests in, through the
 * request layer, each result out as it is made, then the counts. */
static void run_piece(struct head *h)
{
	struct fg_engine *e = h->e;
	struct fg_dist *d = h->d;
	uint64_t len = h->in.len, fail_fast = 0, hp = 0, hg = 0, n = 0;
	unsigned char *buf = len <= PAYLOAD_MAX ? malloc(len ? len : 1) : NULL;
	struct fg_request *reqs = NULL;
	struct token_to *to = NULL;
	void *req = NULL;
	size_t got = 0;
	long rc;

	h->piece = h->in.piece;
	if (!buf) {
		FG_ERR("rank %d: no memory for a piece of %llu bytes", d->world_rank,
		       (unsigned long long)len);
		fg_dist_fatal(d);
	}
	if (fg_dist_world_irecv(d, 0, FG_DIST_TAG_PAYLOAD_TO, buf, len, &req) ||
	    fg_dist_world_wait(d, &req, d->timeout, 0, "piece"))
		fg_dist_fatal(d);
	struct fg_wire_reader rd = { buf, len, 0 };
	if (fg_wire_get_u64(&rd, &fail_fast) || fg_wire_get_u64(&rd, &hp) ||
	    fg_wire_get_u64(&rd, &hg) || fg_wire_get_u64(&rd, &n) || n > len ||
	    !(reqs = calloc(n ? n : 1, sizeof(*reqs))) || !(to = calloc(n ? n : 1, sizeof(*to)))) {
		FG_ERR("rank %d: rank 0's piece does not read: %s", d->world_rank, fg_last_error());
		fg_dist_fatal(d);
	}
	for (; got < n; got++) {
		int streams;
		if (fg_wire_get_request(&rd, &reqs[got], &streams)) {
			FG_ERR("rank %d: rank 0's piece does not read: %s", d->world_rank,
			       fg_last_error());
			fg_dist_fatal(d);
		}
		to[got] = (struct token_to){ h, got };
		if (streams) {
			reqs[got].on_token = send_token;
			reqs[got].on_token_arg = &to[got];
		}
	}
	post_listen(h);
	h->reqs = reqs;
	h->abandon = 0;
	struct fg_run_stats before = e->stats;
	memset(&e->stats, 0, sizeof(e->stats));
	struct fg_run_opts o = { .on_result = send_result, .arg = h, .input_order = 1,
				 .keep_run = 1, .abandon = &h->abandon };
	struct fg_piece_hooks hooks = { .poll = between_steps, .arg = h, .hint_plen = (int64_t)hp,
					.hint_glen = (int64_t)hg };
	rc = fg_run_piece(e, reqs, n, &o, fail_fast != 0, &hooks);
	char why[1024] = "";
	if (rc < 0)
		snprintf(why, sizeof(why), "%s", fg_last_error());
	struct fg_run_stats ran = e->stats;
	e->stats = before;
	fg_run_stats_add(&e->stats, &ran);
	struct fg_result out = { .finish_reason = FG_FINISH_ERROR, .error = *why ? why : NULL };
	h->w.len = 0;
	if (fg_wire_put_stats(&h->w, &ran) || fg_wire_put_result(&h->w, &out, 0))
		fg_dist_fatal(d);
	say(h, MSG_END, rc < 0 ? rc : 0, 0, h->w.buf, h->w.len);
	for (size_t i = 0; i < got; i++)
		fg_wire_request_free(&reqs[i]);
	free(reqs);
	free(to);
	free(buf);
}

/* Tell rank 0 this replica stops (fg_dist_fatal), briefly: it is going. */
static void say_failed(struct fg_dist *d)
{
	struct msg m = { .kind = MSG_FAILED };
	void *req = NULL;

	if (!fg_dist_world_isend(d, 0, FG_DIST_TAG_FROM_REPLICA, &m, sizeof(m), &req))
		fg_dist_world_wait(d, &req, d->timeout < 1 ? d->timeout : 1, 0, "goodbye");
}

int fg_replica_follow(struct fg_engine *e)
{
	struct head h = { .e = e, .d = e->world };
	long ns = 2000;
	int rc;

	h.d->on_fatal = say_failed;
	post_listen(&h);
	for (;;) {
		/* Rank 0 may take its time between pieces: no limit here. */
		while (!h.pending && !(rc = fg_dist_test(h.d, &h.in_req)))
			fg_dist_nap(&ns);
		if (!h.pending && rc < 0)
			fg_dist_fatal(h.d);
		ns = 2000;
		h.pending = 0;
		switch (h.in.kind) {
		case MSG_EXIT:
			h.d->peer_lost |= h.in.a != 0;
			fg_wire_free(&h.w);
			h.d->on_fatal = NULL;
			return 0;
		case MSG_ABANDON: /* (for a piece already over) */
			post_listen(&h);
			break;
		case MSG_PIECE:
			run_piece(&h);
			break;
		default:
			FG_ERR("rank %d: rank 0 sent a message of unknown kind %d", h.d->world_rank,
			       h.in.kind);
			fg_dist_fatal(h.d);
		}
	}
}

int fg_engine_follow(struct fg_engine *e)
{
	/* Another replica's stage 0 runs rank 0's pieces (commanding its own
	 * later stages as rank 0 does); a later stage follows its stage 0. */
	if (e->world && e->world->info.rank == 0)
		return fg_replica_follow(e);
	return fg_engine_follow_stage(e);
}
