/* core/dist/dist.h - this process's place in a pipeline job: the transport
 * plugin, opened only when an MPI launcher started the process with more
 * than one rank, and waits that never outlast [distributed] timeout. */
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
	struct fg_transport_info info;
	double timeout;   /* seconds, every wait on another rank */
	int64_t micro;    /* [distributed] micro_batches */
	char name[64];    /* the transport plugin */
};

/* Ranks of the job as the launcher's environment tells (Open MPI, PMIx,
 * MPICH's PMI); 0 when no launcher started this process.  *rank: this one. */
int fg_dist_launched(int *rank);

/* *out = NULL when this process runs alone (no launcher, or one rank);
 * else the opened transport.  Errors have a line. */
int fg_dist_open(const struct fg_config *c, struct fg_dist **out);
void fg_dist_close(struct fg_dist *d);

int fg_dist_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len, unsigned mem,
		  void *stream, void **req);
int fg_dist_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, unsigned mem,
		  void *stream, void **req);
/* Wait for *req (NULL: nothing to wait for) at most `timeout` seconds (< 0:
 * without limit), polling with short sleeps so that a waiting rank leaves
 * the cores to the others.  -ETIMEDOUT with a line naming the peer and
 * `what`; the request is then cancelled.  *req is NULL afterwards. */
int fg_dist_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what);
/* One line "fgcore: rank R: <the last error>" on stderr, then stop every rank. */
void fg_dist_fatal(struct fg_dist *d);

#endif
