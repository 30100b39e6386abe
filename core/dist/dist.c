/* core/dist/dist.c - open the transport of a job of many ranks, place this
 * rank in its replica's pipeline; bounded waits. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int fg_dist_layout(int size, int rank, int64_t replicas, int *replica, int *stage, int *stages)
{
	if (replicas < 1 || size % replicas) {
		FG_ERR("[distributed] replicas = %lld, but the job has %d ranks: run a multiple of %lld ranks (mpirun -np), each replica a pipeline of as many stages",
		       (long long)replicas, size, (long long)replicas);
		return -EINVAL;
	}
	*stages = size / (int)replicas;
	*replica = rank / *stages;
	*stage = rank % *stages;
	return 0;
}

int fg_dist_gpu_pick(const char *visible, int count, int local, char *out, size_t n)
{
	int k = count > 1 && local >= 0 ? local % count : -1;

	if (k < 0)
		return -1;
	if (!visible) {
		snprintf(out, n, "%d", k);
		return 0;
	}
	/* (count comes from the same list: its first count entries are valid) */
	for (const char *p = visible; *p; p++) {
		size_t len = strcspn(p, ",");
		if (k-- == 0) {
			while (len && (*p == ' ' || *p == '\t'))
				p++, len--;
			while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
				len--;
			snprintf(out, n, "%.*s", (int)len, p);
			return 0;
		}
		p += len;
		if (!*p)
			break;
	}
	return -1;
}

/* With [distributed] gpu_per_rank, the ranks of a host spread over its
 * GPUs, each seeing one: CUDA_VISIBLE_DEVICES narrowed before any plugin
 * starts CUDA (the transport's open included). */
static void pick_gpu(const struct fg_config *c, int rank)
{
	static const char *const sizes[] = { "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS" };
	static const char *const ranks[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID" };
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	int count = fg_core_host()->gpu_count;
	char pick[128];

	if (!fg_config_bool(c, "distributed", "gpu_per_rank"))
		return;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const char *ls = getenv(sizes[i]), *lr = getenv(ranks[i]);
		if (!ls || !lr || atoi(ls) < 2)
			continue;
		if (fg_dist_gpu_pick(visible, count, atoi(lr), pick, sizeof(pick)))
			return;
		FG_LOG(FG_LOG_INFO, "rank %d: GPU %s of the %d visible (local rank %s of %s; [distributed] gpu_per_rank)",
		       rank, pick, count, lr, ls);
		setenv("CUDA_VISIBLE_DEVICES", pick, 1);
		fg_core_host_set_gpu_count(1);
		return;
	}
}

int fg_dist_open(const struct fg_config *c, struct fg_dist **out)
{
	int rank, size = fg_dist_launched(&rank), rc, replica, stage, stages;
	struct fg_dist *d;

	*out = NULL;
	if (size <= 1)
		return 0;
	/* (rank 0 says what is wrong; the others leave quietly: fgcore stage) */
	if ((rc = fg_dist_layout(size, rank, fg_config_int(c, "distributed", "replicas"), &replica,
				 &stage, &stages)))
		return rank ? -ECANCELED : rc;
	pick_gpu(c, rank);
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
		FG_ERR("[distributed] transport = %s: %s (a job of %d ranks needs it: build fgcore with MPI, see README)",
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
	d->world_rank = d->info.rank;
	d->world_size = d->info.size;
	d->replicas = d->info.size / stages;
	d->replica = d->info.rank / stages;
	d->base = d->replica * stages;
	d->info.rank = d->world_rank - d->base;
	d->info.size = stages;
	*out = d;
	return 0;
}

void fg_dist_close(struct fg_dist *d)
{
	if (!d)
		return;
	if (!d->peer_lost)
		d->ops->close(d->ctx);
	free(d->opts);
	/* libmpi stays loaded: MPI cannot be initialized twice in one process. */
	free(d);
}

int fg_dist_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len, unsigned mem,
		  void *stream, void **req)
{
	return d->ops->isend(d->ctx, d->base + peer, tag, buf, len, mem, stream, req);
}

int fg_dist_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, unsigned mem,
		  void *stream, void **req)
{
	return d->ops->irecv(d->ctx, d->base + peer, tag, buf, len, mem, stream, req);
}

int fg_dist_world_isend(struct fg_dist *d, int peer, int tag, const void *buf, size_t len,
			void **req)
{
	return d->ops->isend(d->ctx, peer, tag, buf, len, FG_TRANSPORT_HOST, NULL, req);
}

int fg_dist_world_irecv(struct fg_dist *d, int peer, int tag, void *buf, size_t len, void **req)
{
	return d->ops->irecv(d->ctx, peer, tag, buf, len, FG_TRANSPORT_HOST, NULL, req);
}

int fg_dist_test(struct fg_dist *d, void **req)
{
	int rc;

	if (!*req)
		return 1;
	if ((rc = d->ops->test(d->ctx, *req)))
		*req = NULL;
	return rc;
}

void fg_dist_nap(long *ns)
{
	/* Short sleeps first (a pipeline hands over often), up to 1 ms. */
	nanosleep(&(struct timespec){ 0, *ns }, NULL);
	*ns = *ns < 1000000 ? *ns * 2 : *ns;
}

int fg_dist_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what)
{
	return fg_dist_world_wait(d, req, timeout, d->base + peer, what);
}

int fg_dist_world_wait(struct fg_dist *d, void **req, double timeout, int peer, const char *what)
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
			       d->world_rank, what, peer, timeout, peer);
			return -ETIMEDOUT;
		}
		fg_dist_nap(&ns);
	}
	*req = NULL;
	if (rc < 0) {
		char why[768];
		snprintf(why, sizeof(why), "%s", fg_last_error());
		FG_ERR("rank %d: %s with rank %d failed: %s", d->world_rank, what, peer, why);
	}
	return rc < 0 ? rc : 0;
}

void fg_dist_test_kill(const struct fg_dist *d, int *count)
{
	const char *kill = getenv("FGCORE_TEST_RANK_KILL"), *stall = getenv("FGCORE_TEST_RANK_STALL");
	int rank, n;
	unsigned s;

	if (!kill && !stall)
		return;
	++*count;
	if (kill && sscanf(kill, "%d:%d", &rank, &n) == 2 && rank == d->world_rank && *count >= n)
		raise(SIGKILL);
	if (stall && sscanf(stall, "%d:%d:%u", &rank, &n, &s) == 3 && rank == d->world_rank &&
	    *count == n)
		sleep(s);
}

void fg_dist_fatal(struct fg_dist *d)
{
	if (d->replicas > 1 && d->replica > 0) {
		/* The job goes on without this replica (with mpirun --enable-recovery;
		 * by default Open MPI stops every rank when one exits badly). */
		fprintf(stderr, "fgcore: %s: replica %d stops, the others go on\n",
			fg_last_error_text(), d->replica);
		fflush(stderr);
		if (d->on_fatal)
			d->on_fatal(d);
		_exit(1);
	}
	fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
	fflush(stderr);
	d->ops->abort(d->ctx, 1);
}
