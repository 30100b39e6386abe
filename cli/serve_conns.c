/* cli/serve_conns.c - serve's open connections (see serve_conns.h).
 *
 * libmicrohttpd times a connection out only when nothing arrives for a
 * while, so a byte a second keeps it forever, and at its connection limit it
 * stops accepting: a few hundred such connections lock every client out.
 * Here each connection waiting for a request sits in a list, oldest first
 * (its deadline is its start plus a constant, so the list is in deadline
 * order too); a thread cuts the head when its deadline passes, and a new
 * connection past the limit cuts the head at once.  Cutting is shutdown()
 * of the socket, as MHD_stop_daemon does: the connection's thread reads
 * the end and MHD closes it.  MHD calls the CLOSED notification before it
 * closes the descriptor, and both take the lock, so a descriptor is never
 * shut after its number was reused. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "cli/serve_conns.h"

enum conn_state { WAITING, BUSY, CUT };

struct conn {
	struct fg_serve_conns *g;
	int fd;
	enum conn_state state;
	double since;                /* WAITING: when it began to wait */
	struct conn *prev, *next;    /* WAITING: the list */
};

struct fg_serve_conns {
	pthread_mutex_t lock;
	pthread_cond_t wake;         /* the guard: a new head, or stop */
	struct conn *head, *tail;    /* waiting, oldest first */
	unsigned open;               /* connections not cut */
	unsigned max, deadline_s;
	unsigned long long cut;
	int stopping;
	pthread_t thread;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void unlink_conn(struct fg_serve_conns *g, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		g->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		g->tail = c->prev;
	c->prev = c->next = NULL;
}

/* c starts waiting now; the guard is woken when c is the new head. */
static void append(struct fg_serve_conns *g, struct conn *c)
{
	c->state = WAITING;
	c->since = now_s();
	c->next = NULL;
	c->prev = g->tail;
	if (g->tail)
		g->tail->next = c;
	else
		g->head = c;
	g->tail = c;
	if (g->head == c)
		pthread_cond_signal(&g->wake);
}

static void cut(struct fg_serve_conns *g, struct conn *c)
{
	unlink_conn(g, c);
	c->state = CUT;
	g->open--;
	g->cut++;
	shutdown(c->fd, SHUT_RDWR);
}

static struct conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return i ? i->socket_context : NULL;
}

/* The guard: cut the head once its deadline has passed. */
static void *guard_main(void *arg)
{
	struct fg_serve_conns *g = arg;

	pthread_mutex_lock(&g->lock);
	while (!g->stopping) {
		if (!g->head) {
			pthread_cond_wait(&g->wake, &g->lock);
			continue;
		}
		double due = g->head->since + g->deadline_s;
		if (now_s() >= due) {
			cut(g, g->head);
			continue;
		}
		struct timespec t = { (time_t)due, (long)((due - (double)(time_t)due) * 1e9) };
		pthread_cond_timedwait(&g->wake, &g->lock, &t);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

int fg_serve_conns_new(struct fg_serve_conns **out, unsigned max, unsigned deadline_s)
{
	struct fg_serve_conns *g = calloc(1, sizeof(*g));
	pthread_condattr_t a;
	int rc;

	*out = NULL;
	if (!g)
		return -ENOMEM;
	g->max = max;
	g->deadline_s = deadline_s;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&g->wake, &a);
	pthread_condattr_destroy(&a);
	if (rc) {
		free(g);
		return -rc;
	}
	if ((rc = pthread_mutex_init(&g->lock, NULL))) {
		pthread_cond_destroy(&g->wake);
		free(g);
		return -rc;
	}
	if (deadline_s && (rc = pthread_create(&g->thread, NULL, guard_main, g))) {
		pthread_mutex_destroy(&g->lock);
		pthread_cond_destroy(&g->wake);
		free(g);
		return -rc;
	}
	*out = g;
	return 0;
}

void fg_serve_conns_free(struct fg_serve_conns *g, unsigned long long *cut_count)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	g->stopping = 1;
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->lock);
	if (g->deadline_s)
		pthread_join(g->thread, NULL);
	if (cut_count)
		*cut_count = g->cut;
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->wake);
	free(g);
}

void fg_serve_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
			   enum MHD_ConnectionNotificationCode code)
{
	struct fg_serve_conns *g = cls;
	struct conn *c = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *i =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		/* out of memory: the connection goes unguarded */
		if (!i || !(c = calloc(1, sizeof(*c))))
			return;
		c->g = g;
		c->fd = i->connect_fd;
		pthread_mutex_lock(&g->lock);
		append(g, c);
		g->open++;
		/* Past the limit: room for the newcomer at the expense of the
		 * connection that has waited longest (the newcomer itself when
		 * every other one is busy). */
		if (g->max && g->open > g->max)
			cut(g, g->head);
		pthread_mutex_unlock(&g->lock);
		*socket_context = c;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_CLOSED || !c)
		return;
	pthread_mutex_lock(&g->lock);
	if (c->state == WAITING)
		unlink_conn(g, c);
	if (c->state != CUT)
		g->open--;
	pthread_mutex_unlock(&g->lock);
	free(c);
	*socket_context = NULL;
}

void fg_serve_conns_busy(struct MHD_Connection *conn)
{
	struct conn *c = conn_of(conn);

	if (!c)
		return;
	pthread_mutex_lock(&c->g->lock);
	if (c->state == WAITING) {
		unlink_conn(c->g, c);
		c->state = BUSY;
	}
	pthread_mutex_unlock(&c->g->lock);
}

void fg_serve_conns_idle(struct MHD_Connection *conn)
{
	struct conn *c = conn_of(conn);

	if (!c)
		return;
	pthread_mutex_lock(&c->g->lock);
	if (c->state == BUSY)
		append(c->g, c);
	pthread_mutex_unlock(&c->g->lock);
}
