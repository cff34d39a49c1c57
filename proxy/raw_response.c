/* An answer the proxy writes on the client's socket itself (raw_response.h). It owns struct
 * raw_response, its head buffer and its write event; the socket stays libmicrohttpd's (only
 * its sending side is shut here). Never blocks: sends are MSG_DONTWAIT, and a full socket
 * waits on the write event for at most write_timeout_ms. The last byte waits until
 * slots_pending is false. Once over is set nothing more is written; over(owner) is called
 * at most once, and not at all when the client left first (raw_response_cut). */
#include "proxy/raw_response.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/event.h>
#include <microhttpd.h>

#include "proxy/bytebuf.h"
#include "proxy/forward.h"
#include "store/clock.h"

struct raw_response {
    int fd;
    struct upstream *u;
    const struct raw_response_hooks *hooks;
    void *owner;
    int64_t write_timeout_ms;
    struct event *writable;     /* armed while the socket's buffer is full */
    struct bytebuf head;        /* the head, sent from head.off on */
    bool head_failed;           /* a field could not be added */
    bool sending;               /* raw_response_send ran */
    bool bodiless;
    unsigned status;
    int64_t content_length;     /* -1: the body ends with the connection */
    uint64_t body_sent;
    bool over;
};

static void on_writable(evutil_socket_t fd, short what, void *arg);

static void append(struct raw_response *rr, const char *text, size_t len);

struct raw_response *raw_response_create(struct event_base *base, int fd, struct upstream *u, unsigned status,
                                         int64_t write_timeout_ms, const struct raw_response_hooks *hooks,
                                         void *owner)
{
    struct raw_response *rr = malloc(sizeof(*rr));
    if (rr == NULL)
        return NULL;
    *rr = (struct raw_response){.fd = fd, .u = u, .hooks = hooks, .owner = owner,
                                .write_timeout_ms = write_timeout_ms, .status = status, .content_length = -1};
    rr->writable = event_new(base, fd, EV_WRITE, on_writable, rr);
    if (rr->writable == NULL) {
        free(rr);
        return NULL;
    }
    char line[160];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %u %s\r\n", status, MHD_get_reason_phrase_for(status));
    if (n < 0 || (size_t)n >= sizeof(line))
        rr->head_failed = true;
    else
        append(rr, line, (size_t)n);
    return rr;
}

static void append(struct raw_response *rr, const char *text, size_t len)
{
    if (bytebuf_append(&rr->head, text, len) < 0)
        rr->head_failed = true;
}

void raw_response_field(void *arg, const char *name, const char *value)
{
    struct raw_response *rr = arg;
    append(rr, name, strlen(name));
    append(rr, ": ", 2);
    append(rr, value, strlen(value));
    append(rr, "\r\n", 2);
}

int raw_response_send(struct raw_response *rr, bool bodiless, int64_t content_length)
{
    unsigned status = rr->status;
    char line[160];
    struct tm tm;
    time_t now = time(NULL);
    gmtime_r(&now, &tm);
    char date[64];
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    raw_response_field(rr, "Date", date);
    if (content_length >= 0 && !(status == 204 || status == 304)) {
        snprintf(line, sizeof(line), "%lld", (long long)content_length);
        raw_response_field(rr, "Content-Length", line);
    }
    raw_response_field(rr, "Connection", "close");
    append(rr, "\r\n", 2);
    if (rr->head_failed)
        return -ENOMEM;
    rr->bodiless = bodiless;
    rr->content_length = bodiless ? 0 : content_length;
    rr->sending = true;
    raw_response_pump(rr);
    return 0;
}

static void finish(struct raw_response *rr)
{
    rr->over = true;
    event_del(rr->writable);
    shutdown(rr->fd, SHUT_WR); /* the client reads the end before libmicrohttpd closes */
    rr->hooks->over(rr->owner);
}

/* Sends len bytes; how many went, 0 when the socket is full (the writable event is then
 * armed), -1 when the client is gone. */
static ssize_t send_some(struct raw_response *rr, const char *data, size_t len)
{
    ssize_t n = send(rr->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        struct timeval tv = store_ms_to_timeval(rr->write_timeout_ms);
        event_add(rr->writable, &tv);
        return 0;
    }
    return -1;
}

void raw_response_pump(struct raw_response *rr)
{
    if (rr->over || !rr->sending || event_pending(rr->writable, EV_WRITE, NULL))
        return;
    while (rr->head.len > 0) {
        ssize_t n = send_some(rr, rr->head.data + rr->head.off, rr->head.len);
        if (n < 0) {
            finish(rr);
            return;
        }
        if (n == 0)
            return;
        bytebuf_consume(&rr->head, (size_t)n);
    }
    struct upstream *u = rr->u;
    for (;;) {
        const char *data;
        size_t avail = rr->bodiless ? 0 : upstream_body_pending(u, &data);
        bool slots_pending = rr->hooks->slots_pending(rr->owner);
        if (avail > 0 && rr->content_length >= 0 && slots_pending && rr->body_sent + avail >= (uint64_t)rr->content_length)
            avail--; /* the last byte ends the response: it waits for the slots to be given back */
        if (avail == 0) {
            if (u->done && !slots_pending && (rr->bodiless || upstream_body_pending(u, &data) == 0))
                finish(rr); /* whole, or as much as the upstream gave before failing */
            else if (!u->done && !rr->bodiless)
                upstream_want_body(rr->u);
            return;
        }
        ssize_t n = send_some(rr, data, avail);
        if (n < 0) {
            finish(rr);
            return;
        }
        if (n == 0)
            return;
        rr->body_sent += (uint64_t)n;
        upstream_body_sent(rr->u, (size_t)n);
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct raw_response *rr = arg;
    (void)fd;
    if (what & EV_TIMEOUT) {
        finish(rr); /* the client stopped reading */
        return;
    }
    raw_response_pump(rr);
}

void raw_response_cut(struct raw_response *rr)
{
    rr->over = true;
    event_del(rr->writable);
}

bool raw_response_over(const struct raw_response *rr)
{
    return rr->over;
}

void raw_response_free(struct raw_response *rr)
{
    if (rr == NULL)
        return;
    event_free(rr->writable);
    bytebuf_free(&rr->head);
    free(rr);
}
