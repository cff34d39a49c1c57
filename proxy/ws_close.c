#include "proxy/ws_close.h"

#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config.h"
#include "proxy/metrics.h"
#include "proxy/ws_hooks.h"
#include "proxy/ws_frame.h"
#include "proxy/ws_tunnel.h"
#include "store/clock.h"

/* How long a closing tunnel may take to flush what it holds. */
#define CLOSE_FLUSH_MS 2000

static bool output_pending(const struct ws_tunnel *t)
{
    return (t->up != NULL && evbuffer_get_length(bufferevent_get_output(t->up)) > 0) ||
           (t->client != NULL && evbuffer_get_length(bufferevent_get_output(t->client)) > 0);
}

/* After our own close frame has gone out: half-close, and wait for the client's close
 * (RFC 6455 7.1.1), so the client reads the frame instead of a reset. */
static void shut_client_writes(struct ws_tunnel *t)
{
    if (t->client_write_shut || t->client == NULL)
        return;
    t->client_write_shut = true;
    shutdown(bufferevent_getfd(t->client), SHUT_WR);
}

/* Ends the tunnel for good: sockets closed, slot given back, the owner let go. */
void ws_close_finish(struct ws_tunnel *t)
{
    if (t->state == TUNNEL_CLOSED)
        return;
    t->state = TUNNEL_CLOSED;
    if (t->timer != NULL)
        evtimer_del(t->timer);
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    if (t->client != NULL) {
        bufferevent_free(t->client);
        t->client = NULL;
    }
    if (t->urh != NULL) {
        MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
        t->urh = NULL;
        t->ctx->kick_mhd(t->ctx->kick_ctx);
    }
    if (t->counted) {
        metrics_add_websockets(t->ctx->metrics, -1);
        t->counted = false;
    }
    t->hooks->release_slots(t->owner);
    if (t->holds_owner) {
        t->holds_owner = false;
        t->hooks->closed(t->owner); /* may free the tunnel */
    }
}

/* Stops reading both sides and closes once what is queued has been written (or after
 * CLOSE_FLUSH_MS). */
void ws_close_shutdown(struct ws_tunnel *t)
{
    if (t->state == TUNNEL_CLOSING || t->state == TUNNEL_CLOSED)
        return;
    t->state = TUNNEL_CLOSING;
    if (t->up != NULL)
        bufferevent_disable(t->up, EV_READ);
    if (t->client != NULL && !t->await_client_close)
        bufferevent_disable(t->client, EV_READ);
    if (!output_pending(t) && !t->await_client_close) {
        ws_close_finish(t);
        return;
    }
    if (!output_pending(t))
        shut_client_writes(t);
    struct timeval tv = store_ms_to_timeval(CLOSE_FLUSH_MS);
    evtimer_add(t->timer, &tv);
}

/* Ends the tunnel from our side: the upstream and the slot at once, the client with a
 * close frame whose answer we wait for (RFC 6455 7.1.1). */
void ws_close_initiate(struct ws_tunnel *t, uint16_t code, const char *reason)
{
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    t->hooks->release_slots(t->owner);
    uint8_t frame[128];
    size_t n = ws_close_frame(code, reason, frame, sizeof(frame));
    bufferevent_write(t->client, frame, n);
    t->await_client_close = true;
    ws_close_shutdown(t);
}

/* Open: idle too long, close 1001 to the client (as nginx does at proxy_read_timeout).
 * Closing: what was queued did not flush in time. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN)
        ws_close_initiate(t, 1001, "idle timeout");
    else if (t->state == TUNNEL_CLOSING)
        ws_close_finish(t);
}

struct event *ws_close_timer_create(struct ws_tunnel *t)
{
    return evtimer_new(t->ctx->base, on_timer, t);
}

void ws_close_idle_arm(struct ws_tunnel *t)
{
    int64_t ms = t->ctx->cfg->websocket_idle_timeout_ms;
    if (ms <= 0 || t->state != TUNNEL_OPEN)
        return;
    struct timeval tv = store_ms_to_timeval(ms);
    evtimer_add(t->timer, &tv);
}

void ws_close_after_flush(struct ws_tunnel *t)
{
    if (t->state != TUNNEL_CLOSING || output_pending(t))
        return;
    if (t->await_client_close)
        shut_client_writes(t); /* the client's EOF, or the timer, ends it */
    else
        ws_close_finish(t);
}

void ws_close_client_gone(struct ws_tunnel *t)
{
    struct evbuffer *out = bufferevent_get_output(t->client);
    evbuffer_drain(out, evbuffer_get_length(out));
    t->await_client_close = false;
    if (t->state == TUNNEL_CLOSING && !output_pending(t))
        ws_close_finish(t);
    else
        ws_close_shutdown(t);
}
