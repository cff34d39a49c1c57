/* How a tunnel ends (ws_close.h): the tunnel's close state (the await flags, the client's
 * close frame in waiting, t->down) and its one timer. The state only moves forward, OPEN to
 * CLOSING to CLOSED; ws_close_finish acts once, freeing the sockets, taking the gauge down
 * and calling the owner's closed hook (which may free the tunnel) at most once each. A
 * close frame is written only at a frame boundary. Nothing blocks: every wait is the timer
 * or a bufferevent callback. */
#include "proxy/ws_close.h"

#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/rand.h>

#include "proxy/config.h"
#include "proxy/metrics.h"
#include "proxy/ws_hooks.h"
#include "proxy/ws_frame.h"
#include "proxy/ws_tunnel.h"
#include "store/clock.h"

/* How long a closing tunnel may take to flush what it holds and to get the peers' answers
 * to its close frames. */
#define CLOSE_FLUSH_MS 2000

static bool queued(struct bufferevent *bev)
{
    return bev != NULL && evbuffer_get_length(bufferevent_get_output(bev)) > 0;
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

/* A closing tunnel ends once both sides are done: what was queued for each is written,
 * and each side we sent a close frame answered it or went away. */
static void end_when_done(struct ws_tunnel *t)
{
    if (t->state != TUNNEL_CLOSING)
        return;
    if (!queued(t->client) && t->await_client_close && t->client_close_len == 0)
        shut_client_writes(t); /* the client's EOF, or the timer, ends its side */
    if (!queued(t->client) && !queued(t->up) && !t->await_client_close && !t->await_up_close)
        ws_close_finish(t);
}

/* Stops reading the sides not asked for a close answer, and ends the tunnel once both are
 * done (or after CLOSE_FLUSH_MS). */
void ws_close_shutdown(struct ws_tunnel *t)
{
    if (t->state == TUNNEL_CLOSING || t->state == TUNNEL_CLOSED)
        return;
    t->state = TUNNEL_CLOSING;
    if (t->up != NULL && (t->await_up_close || t->client_close_len > 0))
        bufferevent_enable(t->up, EV_READ); /* even when backpressure had stopped it */
    else if (t->up != NULL)
        bufferevent_disable(t->up, EV_READ);
    if (t->client != NULL && !t->await_client_close)
        bufferevent_disable(t->client, EV_READ);
    struct timeval tv = store_ms_to_timeval(CLOSE_FLUSH_MS);
    evtimer_add(t->timer, &tv);
    end_when_done(t);
}

static void send_client_close(struct ws_tunnel *t)
{
    if (t->client_close_len > 0 && t->client != NULL)
        bufferevent_write(t->client, t->client_close, t->client_close_len);
    t->client_close_len = 0;
}

/* Follows the first n bytes of buf (the upstream's, toward the client) through t->down.
 * With stop_at_end it stops where the upstream's frame in flight ends. Returns the bytes
 * followed. */
static size_t follow_down(struct ws_tunnel *t, struct evbuffer *buf, size_t n, bool stop_at_end)
{
    struct evbuffer_iovec vec[8];
    struct evbuffer_ptr at;
    size_t done = 0;
    while (done < n) {
        evbuffer_ptr_set(buf, &at, done, EVBUFFER_PTR_SET);
        int nv = evbuffer_peek(buf, (ev_ssize_t)(n - done), &at, vec, 8);
        for (int i = 0; i < nv && i < 8 && done < n; i++) {
            size_t len = vec[i].iov_len < n - done ? vec[i].iov_len : n - done;
            size_t took = ws_frame_bounds_feed(&t->down, vec[i].iov_base, len, stop_at_end);
            done += took;
            if (took < len)
                return done;
        }
        if (nv <= 0)
            break;
    }
    return done;
}

void ws_close_follow_upstream(struct ws_tunnel *t, struct evbuffer *in)
{
    follow_down(t, in, evbuffer_get_length(in), false);
}

/* Our close frame toward the upstream: masked, as a client's (RFC 6455 5.3), after the
 * frames already queued for it. Only at a frame's end: in the middle of a frame it would be
 * read as payload, so then the upstream gets what is queued and a TCP close. */
static void close_upstream(struct ws_tunnel *t, uint16_t code, const char *reason, bool mid_frame)
{
    uint8_t mask[4], frame[136];
    if (t->up == NULL || mid_frame)
        return;
    if (RAND_bytes(mask, sizeof(mask)) != 1)
        return;
    size_t n = ws_close_frame_masked(code, reason, mask, frame, sizeof(frame));
    if (n > 0 && bufferevent_write(t->up, frame, n) == 0)
        t->await_up_close = true;
}

/* Ends the tunnel from our side with a close frame to each side, after what was already
 * queued for it (RFC 6455 7.1.1: we then wait for each side's answer, briefly); the slot
 * goes back at once. */
void ws_close_initiate(struct ws_tunnel *t, uint16_t code, const char *reason, bool mid_frame_upstream)
{
    t->hooks->release_slots(t->owner);
    close_upstream(t, code, reason, mid_frame_upstream);
    t->client_close_len = ws_close_frame(code, reason, t->client_close, sizeof(t->client_close));
    t->await_client_close = true;
    if (ws_frame_bounds_at_end(&t->down))
        send_client_close(t);
    /* else the rest of the upstream's frame in flight goes first (ws_close_upstream_read) */
    ws_close_shutdown(t);
}

/* Open: idle too long, close 1001 (as nginx does at proxy_read_timeout). Closing: the
 * flush or an answer to our close did not come in time. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN)
        ws_close_initiate(t, 1001, "idle timeout", t->frames.in_payload);
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
    if (t->state == TUNNEL_CLOSING && t->client_close_len > 0 && t->up != NULL && t->client != NULL &&
        evbuffer_get_length(bufferevent_get_output(t->client)) <= TUNNEL_LOW_WATER)
        bufferevent_enable(t->up, EV_READ); /* the rest of the upstream's frame in flight */
    end_when_done(t);
}

void ws_close_upstream_read(struct ws_tunnel *t)
{
    struct evbuffer *in = bufferevent_get_input(t->up);
    if (t->client_close_len > 0 && t->client != NULL) {
        struct evbuffer *out = bufferevent_get_output(t->client);
        size_t n = follow_down(t, in, evbuffer_get_length(in), true);
        evbuffer_remove_buffer(in, out, n);
        if (ws_frame_bounds_at_end(&t->down))
            send_client_close(t);
        else if (evbuffer_get_length(out) > TUNNEL_HIGH_WATER)
            bufferevent_disable(t->up, EV_READ); /* until the client has read (after_flush) */
    }
    evbuffer_drain(in, evbuffer_get_length(in));
}

void ws_close_client_gone(struct ws_tunnel *t)
{
    struct evbuffer *out = bufferevent_get_output(t->client);
    evbuffer_drain(out, evbuffer_get_length(out));
    t->await_client_close = false;
    t->client_close_len = 0;
    if (t->state == TUNNEL_CLOSING)
        end_when_done(t);
    else
        ws_close_shutdown(t);
}

void ws_close_upstream_gone(struct ws_tunnel *t)
{
    struct evbuffer *out = bufferevent_get_output(t->up);
    evbuffer_drain(out, evbuffer_get_length(out));
    t->await_up_close = false;
    if (t->client_close_len > 0) {
        /* its frame in flight will never end: the client gets a TCP close after it */
        t->client_close_len = 0;
        t->await_client_close = false;
    }
    if (t->state == TUNNEL_CLOSING)
        end_when_done(t);
    else
        ws_close_shutdown(t);
}
