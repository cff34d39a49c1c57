/* The watch on a waiting request's client socket (client_watch.h). It owns one libevent
 * event, never the socket: the socket stays libmicrohttpd's, and the watch must be stopped
 * before libmicrohttpd closes it. The one event is first the CLIENT_WATCH_DELAY_MS timer,
 * then the socket, never both; pending says whether it is added, so a stop deletes only an
 * added event. gone(owner) is called only when poll confirms the peer closed or reset, and
 * the watch is stopped before, so it is called once per wait. */
#include "proxy/client_watch.h"

#include <poll.h>

#include <event2/event.h>


static const struct timeval plain_delay = { .tv_sec = 0, .tv_usec = CLIENT_WATCH_DELAY_MS * 1000 };

const struct timeval *client_watch_delay_for(struct event_base *base)
{
    const struct timeval *common = event_base_init_common_timeout(base, &plain_delay);
    return common != NULL ? common : &plain_delay;
}

void client_watch_init(struct client_watch *cw, struct event_base *base, const struct timeval *delay, int fd,
                       void (*gone)(void *owner), void *owner)
{
    *cw = (struct client_watch){ .base = base, .delay = delay, .fd = fd, .gone = gone, .owner = owner };
}

/* True when the client has closed its sending side or reset the connection, whatever it
 * sent before that (a pipelined request is no sign of staying). */
static bool peer_left(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static void on_socket(evutil_socket_t fd, short what, void *arg)
{
    struct client_watch *cw = arg;
    (void)what;
    /* Edge-triggered: a wake-up for bytes of a pipelined request comes once, not again
       until more arrive. */
    if (!peer_left(fd))
        return;
    client_watch_stop(cw);
    cw->gone(cw->owner);
}

/* The events that wake the watch. Suspended, libmicrohttpd watches nothing: a close and a
 * reset both (a reset reads as EV_READ, and bytes of a pipelined request too: on_socket
 * tells them apart). Reading the body, libmicrohttpd closes on a reset itself, and only
 * the close it may have missed wakes the watch, not every segment of the body. */
static short events_for(enum client_wait wait)
{
    short events = wait == CLIENT_WAIT_SUSPENDED ? EV_READ | EV_CLOSED : EV_CLOSED;
    return events | EV_ET | EV_PERSIST;
}

/* The wait has lasted: the same event now watches the socket (it is no longer pending, as
 * a timer that fired). A close or reset that came before is reported by the registration. */
static void on_delay(evutil_socket_t fd, short what, void *arg)
{
    struct client_watch *cw = arg;
    (void)fd;
    (void)what;
    event_assign(&cw->ev, cw->base, cw->fd, events_for(cw->wait), on_socket, cw);
    cw->pending = event_add(&cw->ev, NULL) == 0;
}

void client_watch_start(struct client_watch *cw, enum client_wait wait)
{
    client_watch_stop(cw);
    cw->wait = wait;
    evtimer_assign(&cw->ev, cw->base, on_delay, cw);
    cw->pending = evtimer_add(&cw->ev, cw->delay) == 0;
}

void client_watch_stop(struct client_watch *cw)
{
    if (cw->pending)
        event_del(&cw->ev);
    cw->pending = false;
}
