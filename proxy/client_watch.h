/* Notices a client that leaves while libmicrohttpd would not: one per request, on the
 * worker's loop, watching the request's client socket while the request waits.
 *
 * libmicrohttpd 0.9.75 does not see the client leave in two cases:
 * - a suspended connection is out of its epoll set: nothing is read or noticed until the
 *   connection is resumed;
 * - in external epoll mode it registers the socket edge-triggered, without EPOLLRDHUP,
 *   and takes a short recv() as "nothing more to read" (recv_param_adapter clears
 *   MHD_EPOLL_STATE_READ_READY). A FIN that came with the last bytes, or just after them
 *   but before the epoll_wait that reported them, makes no further edge: libmicrohttpd
 *   never reads the end of the stream and waits for body bytes that will not come (until
 *   its idle timeout). A reset does make an edge (EPOLLERR|EPOLLHUP), and it closes then.
 *
 * A wait that ends within CLIENT_WATCH_DELAY_MS costs no system call: the socket is
 * registered with the loop only once the wait lasts that long, and the registration
 * reports a close or reset that came before it.
 *
 * While suspended the watch is edge-triggered EV_READ|EV_CLOSED, and a wake-up for the
 * bytes of a pipelined request is told apart from a close by poll with POLLRDHUP (the watch
 * goes on). While an admitted body is read it is EV_CLOSED alone (libmicrohttpd sees a
 * reset itself, and the body's segments wake nothing); a close shuts the socket down, which
 * libmicrohttpd sees as EPOLLHUP and ends the connection. Either way the slot is given back
 * at once, and a request whose head was read and that ends without an answer is logged as
 * nginx logs it: 499 (408 when libmicrohttpd timed the client out).
 */
#pragma once
#include <stdbool.h>

#include <event2/event_struct.h>

/* A wait shorter than this ends before a departed client could matter; watching every
 * request's socket would cost two epoll_ctl calls each. */
#define CLIENT_WATCH_DELAY_MS 50

/* What the request waits for, which says what libmicrohttpd misses meanwhile. */
enum client_wait {
    CLIENT_WAIT_SUSPENDED, /* the connection is suspended (the store, the upstream): a
                              close and a reset are ours to notice */
    CLIENT_WAIT_BODY,      /* libmicrohttpd reads the body: a close is ours to notice */
};

struct client_watch {
    struct event_base *base;
    const struct timeval *delay; /* client_watch_delay_for(base) */
    int fd;                      /* the client's socket (libmicrohttpd's) */
    void (*gone)(void *owner);
    void *owner;
    enum client_wait wait;
    bool pending;                /* ev is added */
    struct event ev;             /* the delay, then the socket: one at a time, so one event
                                    (a request lives as long as its WebSocket tunnel) */
};

/* The delay for every watch on base's loop, once per worker: a libevent common timeout, so
 * that each wait joins a queue rather than the loop's timer heap (every watch waits as
 * long). A plain CLIENT_WATCH_DELAY_MS when libevent is out of memory. */
const struct timeval *client_watch_delay_for(struct event_base *base);

/* Readies cw for fd; gone(owner) is called once when the client has closed or reset its
 * side during a wait. Nothing is watched yet. delay: client_watch_delay_for(base). */
void client_watch_init(struct client_watch *cw, struct event_base *base, const struct timeval *delay, int fd,
                       void (*gone)(void *owner), void *owner);

/* Starts watching for a wait of the given kind (the socket from CLIENT_WATCH_DELAY_MS on),
 * replacing the watch of an earlier wait. */
void client_watch_start(struct client_watch *cw, enum client_wait wait);

/* Stops watching (idempotent). Must run before libmicrohttpd closes the socket. */
void client_watch_stop(struct client_watch *cw);

