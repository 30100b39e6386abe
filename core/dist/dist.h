/* core/dist/dist.h - this process's place in a job of many ranks: the
 * transport plugin, opened only when an MPI launcher started the process
 * with more than one rank, and waits that never outlast [distributed]
 * timeout.  The ranks form [distributed] replicas pipelines of equal
 * length: replica k holds world ranks [k * stages, (k + 1) * stages), each
 * rank one stage of it.  The pipeline addresses stages (info.rank, a peer
 * given to fg_dist_isend); the replicas' dispatcher addresses world ranks
 * (fg_dist_world_*). */
#ifndef FG_DIST_DIST_H
#define FG_DIST_DIST_H

#include <stddef.h>

#include <fgcore/transport.h>
#include "core/plugin/loader.h"

struct fg_config;

struct fg_dist {
	struct fg_plugin_handle ph;
	const struct fg_transport_ops *ops;
	void *ctx, *opts;
	struct fg_transport_info info; /* rank and size: this stage among its replica's */
	int world_rank, world_size;    /* among every rank of the job */
	int replicas, replica;         /* [distributed] replicas; this rank's */
	int base;                      /* the world rank of this replica's stage 0 */
	/* Called before a rank leaves on a failure that stops only its replica
	 * (fg_dist_fatal); NULL: none. */
	void (*on_fatal)(struct fg_dist *d);
	/* A rank of the job died: leave without the transport's close, whose
	 * MPI_Finalize would wait for it (Open MPI 4 at times never returns). */
	int peer_lost;
	double timeout;   /* seconds, every wait on another rank */
	int64_t micro;    /* [distributed] micro_batches */
	char name[64];    /* the transport plugin */
};

/* Ranks of the job as the launcher's environment tells (Open MPI, PMIx,
 * MPICH's PMI); 0 when no launcher started this process.  *rank: this one. */
int fg_dist_launched(int *rank);

/* The world rank `rank` of `size` is stage *stage of replica *replica, of
 * *stages stages each, under [distributed] replicas `replicas`; -EINVAL with
 * a line when size is not a multiple of replicas. */
int fg_dist_layout(int size, int rank, int64_t replicas, int *replica, int *stage, int *stages);

/* The GPU a host's local rank `local` takes among `count` visible ones
 * (CUDA_VISIBLE_DEVICES `visible`, NULL: unset, devices 0..count-1): the
 * (local mod count)-th entry, into out (n bytes) as CUDA_VISIBLE_DEVICES
 * names it.  0, or -1 when there is nothing to pick (count < 2). */
int fg_dist_gpu_pick(const char *visible, int count, int local, char *out, size_t n);

/* *out = NULL when this process runs alone (no launcher, or one rank);
 * else the opened transport.  Errors have a line. */
int fg_dist_open(const struct fg_config *c, struct fg_dist **out);
void fg_dist_close(struct fg_dist *d);

/* peer: a stage of this rank's replica. */
int fg_dist_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len, unsigned mem,
		  void *stream, void **req);
int fg_dist_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, unsigned mem,
		  void *stream, void **req);
/* Tags of the replicas' messages (core/request/replicas.c), above the
 * pipeline's (core/exec/pipe.c). */
enum {
	FG_DIST_TAG_TO_REPLICA = 24576, /* rank 0 to a replica's stage 0 */
	FG_DIST_TAG_FROM_REPLICA,       /* back */
	FG_DIST_TAG_PAYLOAD_TO,         /* the bytes a header announces */
	FG_DIST_TAG_PAYLOAD_FROM,
	FG_DIST_TAG_REPLICA_GONE,       /* rank 0 to the later stages of a replica that failed */
};

/* peer: a world rank; host memory. */
int fg_dist_world_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len,
			void **req);
int fg_dist_world_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, void **req);
/* Wait for *req (NULL: nothing to wait for) at most `timeout` seconds (< 0:
 * without limit), polling with short sleeps so that a waiting rank leaves
 * the cores to the others.  -ETIMEDOUT with a line naming the peer and
 * `what`; the request is then cancelled.  *req is NULL afterwards. */
int fg_dist_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what);
/* 1: *req finished (NULL now), 0: not yet, < 0: it failed (a line). */
int fg_dist_test(struct fg_dist *d, void **req);
/* A short sleep between tests, growing from 2 us to 1 ms: *ns its state. */
void fg_dist_nap(long *ns);
/* The same with a world rank for peer. */
int fg_dist_world_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what);
/* FGCORE_TEST_RANK_KILL=R:N, a test hook: world rank R kills itself
 * (SIGKILL) at its N-th call here (*count counts them), as a machine dying
 * mid-job would: a replica's stage 0 calls it as it sends a result, a
 * pipeline's later stage as it takes a command.  FGCORE_TEST_RANK_STALL=
 * R:N:S instead makes rank R sleep S seconds there, as a machine that hangs
 * for a while and comes back would. */
void fg_dist_test_kill(const struct fg_dist *d, int *count);
/* One line "fgcore: rank R: <the last error>" on stderr, then stop every
 * rank; with replicas, a rank of a replica other than world rank 0's stops
 * only itself (its replica follows: the dispatcher gives its requests to
 * the others). */
void fg_dist_fatal(struct fg_dist *d);

#endif
