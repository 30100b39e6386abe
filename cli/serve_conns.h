/* cli/serve_conns.h - serve's open connections and what each is doing:
 * waiting for a whole request (since when), or busy with one.  A connection
 * must deliver a whole request within a deadline of opening or of its
 * previous answer, and when every slot is open the one that has waited
 * longest is closed to make room: connections that send nothing, or a byte
 * now and then, cannot starve the clients that send requests.  A busy
 * connection (its request whole: queued, running or being answered) is
 * never cut here. */
#ifndef FG_CLI_SERVE_CONNS_H
#define FG_CLI_SERVE_CONNS_H

#include <microhttpd.h>

struct fg_serve_conns;

/* At most max connections open (0: no limit here), each given deadline_s
 * seconds per request (0: no deadline).  0 or -errno. */
int fg_serve_conns_new(struct fg_serve_conns **out, unsigned max, unsigned deadline_s);
/* After every connection is closed: end the guard's thread, free g; the
 * connections it cut are counted in *cut. */
void fg_serve_conns_free(struct fg_serve_conns *g, unsigned long long *cut);

/* MHD_OPTION_NOTIFY_CONNECTION's callback (cls: g). */
void fg_serve_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
			   enum MHD_ConnectionNotificationCode code);
/* conn's request has arrived whole: no deadline until its answer is done. */
void fg_serve_conns_busy(struct MHD_Connection *conn);
/* conn's answer is done: it waits for its next request, deadline anew. */
void fg_serve_conns_idle(struct MHD_Connection *conn);

#endif
