/* The first-head intake (intake.h). It owns each waiting connection (struct intake_conn,
 * its two events, its socket until hand-over) and their list, whose length n_waiting and
 * the connections gauge always follow. A connection leaves the list once: handed over (the
 * socket is then the worker's) or closed here. Nothing is read off a socket before
 * hand-over but the empty lines before the request line, so libmicrohttpd reads the head
 * the screen passed. Never blocks: every recv is MSG_DONTWAIT. */
#include "proxy/intake.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <microhttpd.h>

#include "proxy/access_log.h"
#include "proxy/head_screen.h"
#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/respond.h"
#include "store/clock.h"

/* After a refusal, what the client still sends is read and dropped for this long before
 * the socket is closed: closing with unread data would send a reset, which can destroy
 * the answer before the client reads it. */
#define LINGER_MS 2000

/* Reads per wake-up while lingering: the rest comes with the next edge. */
#define LINGER_READS 16

/* One per worker: the connections waiting for their first head. */
struct intake {
    struct event_base *base;
    struct metrics *metrics;
    struct access_log *access_log;   /* NULL when off */
    struct intake_hooks hooks;
    LIST_HEAD(, intake_conn) waiting;
    unsigned n_waiting;
};

struct intake_conn {
    struct intake *in;
    int fd;
    bool lingering;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct event readable; /* edge-triggered: peeking leaves the bytes in place */
    struct event deadline;
    LIST_ENTRY(intake_conn) waiting; /* in in->waiting */
};

/* One per worker thread: the bytes are only looked at, never kept. */
static _Thread_local char peeked[MAX_HEAD_BYTES];

struct intake *intake_create(struct event_base *base, struct metrics *metrics, struct access_log *access_log,
                             const struct intake_hooks *hooks)
{
    struct intake *in = calloc(1, sizeof(*in));
    if (in == NULL)
        return NULL;
    in->base = base;
    in->metrics = metrics;
    in->access_log = access_log;
    in->hooks = *hooks;
    LIST_INIT(&in->waiting);
    return in;
}

void intake_destroy(struct intake *in)
{
    if (in == NULL)
        return;
    intake_close_all(in);
    free(in);
}

unsigned intake_waiting(const struct intake *in)
{
    return in->n_waiting;
}

static void release(struct intake_conn *c)
{
    struct intake *in = c->in;
    LIST_REMOVE(c, waiting);
    event_del(&c->readable);
    event_del(&c->deadline);
    in->n_waiting--;
    metrics_add_connections(in->metrics, -1);
    free(c);
}

static void close_conn(struct intake_conn *c)
{
    struct intake *in = c->in;
    close(c->fd);
    release(c);
    in->hooks.closed(in->hooks.ctx);
}

/* Reads and drops the empty lines a client sent before its first request line (RFC 9112
 * 2.2 lets a server ignore them; libmicrohttpd would too), so that libmicrohttpd has the
 * head at the start of its connection pool: pool_trim.c learns where the pool is from it.
 * The bytes were peeked, so they are there. False when the client is gone. */
static bool drop_leading_empty_lines(int fd, const struct head_screen *hs)
{
    size_t n = (size_t)(hs->method - peeked);
    return n == 0 || recv(fd, peeked, n, MSG_DONTWAIT) == (ssize_t)n;
}

static void hand_over(struct intake_conn *c)
{
    struct intake *in = c->in;
    int fd = c->fd;
    struct sockaddr_storage addr = c->addr;
    socklen_t addrlen = c->addrlen;
    release(c);
    in->hooks.hand_over(in->hooks.ctx, fd, (struct sockaddr *)&addr, addrlen);
}

static void copy_text(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void account_refusal(struct intake *in, const struct sockaddr_storage *addr, const struct head_screen *hs)
{
    metrics_count_request(in->metrics, NULL, hs->status);
    if (in->access_log == NULL)
        return;
    char client[64] = "", method[64], path[2048];
    sockaddr_to_text((const struct sockaddr *)addr, client, sizeof(client));
    struct access_entry e = {
        .time_unix_ms = store_realtime_ms(),
        .client = client,
        .status = hs->status,
        .decision = "malformed",
        .upstream_ms = -1,
    };
    if (hs->method != NULL) {
        copy_text(method, sizeof(method), hs->method, hs->method_len);
        copy_text(path, sizeof(path), hs->target, hs->target_len);
        e.method = method;
        e.path = path;
        e.path_key_query = in->hooks.key_query != NULL ? in->hooks.key_query(in->hooks.ctx) : NULL;
    }
    access_log_write(in->access_log, &e);
}


static void linger_read(struct intake_conn *c)
{
    for (int i = 0; i < LINGER_READS; i++) {
        ssize_t n = recv(c->fd, peeked, sizeof(peeked), MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        close_conn(c); /* the client has read the answer and closed, or is gone */
        return;
    }
}

static void start_lingering(struct intake_conn *c)
{
    c->lingering = true;
    struct timeval linger = store_ms_to_timeval(LINGER_MS);
    evtimer_add(&c->deadline, &linger);
    linger_read(c);
}

/* True when the client reset the connection. A reset wakes the edge-triggered event as
 * EV_READ alone (libevent maps EPOLLERR|EPOLLHUP to EV_READ|EV_WRITE, never EV_CLOSED), and
 * MSG_PEEK still returns the bytes that came before it: without asking, a half head
 * followed by a reset waited out HEAD_WAIT_MS. */
static bool reset_by_peer(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0;
}

/* Peeks at what the client has sent and acts on it. peer_closed: the client has shut its
 * side, so an incomplete head will stay incomplete. */
static void screen(struct intake_conn *c, bool peer_closed)
{
    ssize_t n = recv(c->fd, peeked, sizeof(peeked), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(c);
        return;
    }
    if (n < 0) {
        if (peer_closed)
            close_conn(c);
        return;
    }
    struct head_screen hs = head_screen(peeked, (size_t)n, MAX_HEAD_BYTES);
    switch (hs.outcome) {
    case HEAD_ACCEPTABLE:
        if (drop_leading_empty_lines(c->fd, &hs))
            hand_over(c);
        else
            close_conn(c);
        break;
    case HEAD_REFUSED:
        account_refusal(c->in, &c->addr, &hs);
        respond_send_closing(c->fd, hs.status, hs.error_code);
        start_lingering(c);
        break;
    case HEAD_INCOMPLETE:
        if (peer_closed || reset_by_peer(c->fd))
            close_conn(c);
        break;
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct intake_conn *c = arg;
    if (c->lingering)
        linger_read(c);
    else
        screen(c, (what & EV_CLOSED) != 0);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    close_conn(arg);
}

void intake_take(struct intake *in, int fd, const struct sockaddr_storage *addr, socklen_t addrlen)
{
    /* Most clients send their head with the connect: then no allocation, no event. */
    struct head_screen hs = { .outcome = HEAD_INCOMPLETE };
    ssize_t n = recv(fd, peeked, sizeof(peeked), MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        hs = head_screen(peeked, (size_t)n, MAX_HEAD_BYTES);
    else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close(fd); /* gone already */
        return;
    }
    if (hs.outcome == HEAD_ACCEPTABLE) {
        if (drop_leading_empty_lines(fd, &hs))
            in->hooks.hand_over(in->hooks.ctx, fd, (const struct sockaddr *)addr, addrlen);
        else
            close(fd);
        return;
    }
    struct intake_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    c->in = in;
    c->fd = fd;
    c->addr = *addr;
    c->addrlen = addrlen;
    event_assign(&c->readable, in->base, fd, EV_READ | EV_CLOSED | EV_ET | EV_PERSIST, on_readable, c);
    evtimer_assign(&c->deadline, in->base, on_deadline, c);
    struct timeval wait = store_ms_to_timeval(HEAD_WAIT_MS);
    if (event_add(&c->readable, NULL) != 0 || evtimer_add(&c->deadline, &wait) != 0) {
        event_del(&c->readable);
        free(c);
        close(fd);
        return;
    }
    LIST_INSERT_HEAD(&in->waiting, c, waiting);
    in->n_waiting++;
    metrics_add_connections(in->metrics, 1);
    if (hs.outcome == HEAD_REFUSED) {
        account_refusal(in, addr, &hs);
        respond_send_closing(fd, hs.status, hs.error_code);
        start_lingering(c);
    }
}

void intake_close_all(struct intake *in)
{
    struct intake_conn *c;
    while ((c = LIST_FIRST(&in->waiting)) != NULL) {
        close(c->fd);
        release(c);
    }
}
