/* A newly accepted client connection waits here until its first request head has come in
 * and passed head_screen; only then does libmicrohttpd get the socket. The head is read
 * with MSG_PEEK, so libmicrohttpd reads the same bytes again. A refused head is answered
 * here with a JSON error and the connection closed after a short lingering read, so the
 * client sees the answer rather than a reset.
 *
 * Only the first request of a connection passes here: later ones on a kept-alive
 * connection are libmicrohttpd's (the proxy's own checks in request.c still apply to
 * them). Most connections send their head with the connect, and cost one recv() more.
 *
 * A head still incomplete waits on an edge-triggered event (peeking leaves the bytes in
 * place, so a level-triggered one would spin), for at most 60 s in all, which also ends a
 * slowloris that trickles a line at a time (libmicrohttpd's timeout counts only idle time).
 * A client that resets the connection mid-head wakes the event as EV_READ alone (libevent
 * maps EPOLLERR|EPOLLHUP to EV_READ|EV_WRITE, never EV_CLOSED) and MSG_PEEK still returns
 * the bytes sent before it, so the intake asks the socket for a pending error (SO_ERROR)
 * and closes at once.
 */
#pragma once
#include <sys/socket.h>

struct event_base;
struct metrics;
struct access_log;
struct intake;

/* What the intake tells its worker. */
struct intake_hooks {
    /* A connection whose first head passed: the socket is the callee's now. */
    void (*hand_over)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen);
    /* A waiting connection closed: there is room for another. */
    void (*closed)(void *ctx);
    /* [auth] key_query as configured now: a refused head's path is logged without it. */
    const char *(*key_query)(void *ctx);
    void *ctx;
};

/* One per worker loop. access_log may be NULL (off). NULL when memory runs out. */
struct intake *intake_create(struct event_base *base, struct metrics *metrics, struct access_log *access_log,
                             const struct intake_hooks *hooks);
/* Closes the connections still waiting and frees the intake (NULL is fine). */
void intake_destroy(struct intake *in);

/* Takes a connection just accepted. It is handed over at once when its head is already
 * there and acceptable, else waits on the worker's loop. */
void intake_take(struct intake *in, int fd, const struct sockaddr_storage *addr, socklen_t addrlen);

/* How many connections wait for their first head (they count against the worker's share). */
unsigned intake_waiting(const struct intake *in);

/* Closes every connection still waiting (stopping). */
void intake_close_all(struct intake *in);
