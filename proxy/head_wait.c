/* The wait for the rest of a later head (head_wait.h). It owns struct head_wait and its two
 * events (the socket, edge-triggered, and the HEAD_WAIT_MS deadline), never the socket nor
 * the prefix, which are libmicrohttpd's. It only peeks (MSG_PEEK): the bytes stay for
 * libmicrohttpd to read once the connection is resumed. The field lines are joined in a
 * per-thread buffer that is never kept past one look. done is the owner's to act on; this
 * file never frees the wait itself (the owner does, with head_wait_free). */
#include "proxy/head_wait.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "store/clock.h"

struct head_wait {
    int fd;
    const char *prefix;
    size_t prefix_len;
    size_t max_bytes;
    size_t entry_bytes;
    head_wait_done_fn *done;
    void *owner;
    struct event readable; /* edge-triggered: peeking leaves the bytes in place */
    struct event deadline;
};

/* One per worker thread: the field lines, put together to be screened, never kept. */
static _Thread_local char joined[MAX_HEAD_BYTES];

/* Peeks at what has come, and tells the owner when the head is whole or refused. */
static void look(struct head_wait *w, bool peer_closed)
{
    size_t room = w->max_bytes < sizeof(joined) ? w->max_bytes : sizeof(joined);
    memcpy(joined, w->prefix, w->prefix_len);
    ssize_t n = recv(w->fd, joined + w->prefix_len, room - w->prefix_len, MSG_PEEK | MSG_DONTWAIT);
    bool again = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    if (n == 0 || (n < 0 && !again)) {
        w->done(w->owner, NULL);
        return;
    }
    struct head_screen hs = { .outcome = HEAD_INCOMPLETE };
    if (n > 0)
        hs = head_screen_fields(joined, w->prefix_len + (size_t)n, w->max_bytes, w->entry_bytes);
    if (hs.outcome != HEAD_INCOMPLETE)
        w->done(w->owner, &hs);
    else if (peer_closed)
        w->done(w->owner, NULL);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    look(arg, (what & EV_CLOSED) != 0);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct head_wait *w = arg;
    (void)fd;
    (void)what;
    w->done(w->owner, NULL);
}

struct head_wait *head_wait_start(struct event_base *base, int fd, const char *prefix, size_t prefix_len,
                                  size_t max_bytes, size_t entry_bytes, head_wait_done_fn *done, void *owner)
{
    struct head_wait *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    *w = (struct head_wait){
        .fd = fd, .prefix = prefix, .prefix_len = prefix_len, .max_bytes = max_bytes,
        .entry_bytes = entry_bytes, .done = done, .owner = owner,
    };
    event_assign(&w->readable, base, fd, EV_READ | EV_CLOSED | EV_ET | EV_PERSIST, on_readable, w);
    evtimer_assign(&w->deadline, base, on_deadline, w);
    struct timeval wait = store_ms_to_timeval(HEAD_WAIT_MS);
    if (event_add(&w->readable, NULL) != 0 || evtimer_add(&w->deadline, &wait) != 0) {
        head_wait_free(w);
        return NULL;
    }
    return w;
}

void head_wait_free(struct head_wait *w)
{
    if (w == NULL)
        return;
    event_del(&w->readable);
    event_del(&w->deadline);
    free(w);
}
