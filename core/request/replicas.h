/* core/request/replicas.h - data-parallel replicas ([distributed] replicas):
 * rank 0's side, which hands pieces of a fg_run call (a batch, or a few
 * with [policy] refill) to the other replicas' stage 0 and takes their
 * results back, and those ranks' side, which runs each piece through their
 * own request layer.  Rank 0 runs pieces of its own meanwhile (run.c);
 * the messages are core/request/wire.h's bytes over the job's transport. */
#ifndef FG_REQUEST_REPLICAS_H
#define FG_REQUEST_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include <fgcore/fgcore.h>

struct fg_engine;
struct fg_job;

/* What rank 0 hears from the replicas while it polls them. */
struct fg_replicas_events {
	/* A job's result (index: fg_job.index); the callee owns *res. */
	void (*result)(void *arg, size_t index, struct fg_result *res);
	/* A token a job streams (fg_request.on_token). */
	void (*token)(void *arg, size_t index, int32_t id);
	/* A replica finished its piece: rc < 0 when it could run none of it
	 * (why: its line); the jobs it gave no result have index[0..n). */
	void (*ended)(void *arg, int rc, const char *why, const size_t *index, size_t n);
	/* A replica failed or went silent: the jobs it gave no result. */
	void (*lost)(void *arg, const size_t *index, size_t n);
	void *arg;
};

/* Rank 0 of a job of replicas: e->replicas made on first use (-ENOMEM). */
int fg_replicas_get(struct fg_engine *e, struct fg_replicas **out);
/* At engine close: the other replicas stop (those failed: their later stages). */
void fg_replicas_close(struct fg_engine *e);
/* Every message that has arrived, and every busy replica silent past
 * [distributed] timeout; the events go to ev.  Returns how many came. */
int fg_replicas_poll(struct fg_replicas *rs, const struct fg_replicas_events *ev);
/* A replica ready for a piece, or -1. */
int fg_replicas_free(const struct fg_replicas *rs);
/* Replicas running a piece. */
int fg_replicas_busy(const struct fg_replicas *rs);
/* Hand jobs[0..n) to replica k as one piece, to run with fg_generate's
 * rule (fail_fast) or fg_run's, its run sized at least hint_plen +
 * hint_glen.  A failure to send marks the replica lost (through ev). */
int fg_replicas_send(struct fg_replicas *rs, int k, struct fg_job *const *jobs, size_t n,
		     int fail_fast, int64_t hint_plen, int64_t hint_glen,
		     const struct fg_replicas_events *ev);
/* A hard stop: every busy replica drops its piece at its next decode step. */
void fg_replicas_abandon(struct fg_replicas *rs);

/* A replica's stage 0 (world rank > 0): run rank 0's pieces until it says
 * stop.  0, or a negative errno with a line. */
int fg_replica_follow(struct fg_engine *e);

#endif
