/* core/dist/dist.c - open the transport of a pipeline job; bounded waits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config/config.h"
#include "core/dist/dist.h"
#include "core/util/clock.h"
#include "core/util/error.h"

int fg_dist_launched(int *rank)
{
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE" };
	static const char *const ranks[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK" };

	*rank = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const char *s = getenv(sizes[i]), *r = getenv(ranks[i]);
		if (s && *s) {
			*rank = r ? atoi(r) : 0;
			return atoi(s);
		}
	}
	return 0;
}

int fg_dist_open(const struct fg_config *c, struct fg_dist **out)
{
	int rank, size = fg_dist_launched(&rank), rc;
	struct fg_dist *d;

	*out = NULL;
	if (size <= 1)
		return 0;
	if (!(d = calloc(1, sizeof(*d)))) {
		FG_ERR("out of memory");
		return -ENOMEM;
	}
	snprintf(d->name, sizeof(d->name), "%s", fg_config_str(c, "distributed", "transport"));
	d->timeout = fg_config_double(c, "distributed", "timeout");
	d->micro = fg_config_int(c, "distributed", "micro_batches");
	if ((rc = fg_plugin_load(d->name, FG_PLUGIN_TRANSPORT, &d->ph))) {
		char why[768];
		snprintf(why, sizeof(why), "%s", fg_last_error());
		FG_ERR("[distributed] transport = %s: %s (a pipeline of %d ranks needs it: build fgcore with MPI, see README)",
		       d->name, why, size);
		free(d);
		return rc;
	}
	d->ops = d->ph.plugin->ops;
	d->opts = fg_plugin_opts_new(d->ph.plugin);
	if (!d->opts && d->ph.plugin->opts_size) {
		fg_plugin_close(&d->ph);
		free(d);
		return -ENOMEM;
	}
	if ((rc = d->ops->open(fg_core_host(), d->opts, &d->ctx, &d->info))) {
		char why[768];
		snprintf(why, sizeof(why), "%s", fg_last_error());
		FG_ERR("[distributed] transport %s: %s", d->name, why);
		free(d->opts);
		fg_plugin_close(&d->ph);
		free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void fg_dist_close(struct fg_dist *d)
{
	if (!d)
		return;
	d->ops->close(d->ctx);
	free(d->opts);
	/* libmpi stays loaded: MPI cannot be initialized twice in one process. */
	free(d);
}

int fg_dist_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len, unsigned mem,
		  void *stream, void **req)
{
	return d->ops->isend(d->ctx, peer, tag, buf, len, mem, stream, req);
}

int fg_dist_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, unsigned mem,
		  void *stream, void **req)
{
	return d->ops->irecv(d->ctx, peer, tag, buf, len, mem, stream, req);
}

int fg_dist_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what)
{
	double t0 = fg_now();
	long ns = 2000;
	int rc;

	if (!*req)
		return 0;
	while (!(rc = d->ops->test(d->ctx, *req))) {
		if (timeout >= 0 && fg_now() - t0 > timeout) {
			d->ops->cancel(d->ctx, *req);
			*req = NULL;
			FG_ERR("rank %d: no %s from rank %d within %g s ([distributed] timeout): rank %d died or hangs",
			       d->info.rank, what, peer, timeout, peer);
			return -ETIMEDOUT;
		}
		/* Short sleeps first (a pipeline hands over often), up to 1 ms. */
		nanosleep(&(struct timespec){ 0, ns }, NULL);
		ns = ns < 1000000 ? ns * 2 : ns;
	}
	*req = NULL;
	if (rc < 0) {
		char why[768];
		snprintf(why, sizeof(why), "%s", fg_last_error());
		FG_ERR("rank %d: %s with rank %d failed: %s", d->info.rank, what, peer, why);
	}
	return rc < 0 ? rc : 0;
}

void fg_dist_fatal(struct fg_dist *d)
{
	fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
	fflush(stderr);
	d->ops->abort(d->ctx, 1);
}
