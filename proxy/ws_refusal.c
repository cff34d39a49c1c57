/* The proxy's own refusing 101 (ws_refusal.h). It owns struct ws_refusal and its two
 * events; the socket stays libmicrohttpd's, handed back with MHD_UPGRADE_ACTION_CLOSE once
 * (urh is cleared when it is). The close frame goes in one non-blocking send; if it does
 * not all go, the connection closes at once rather than send half a frame. Nothing here
 * frees the struct: ws_refusal_free does, once libmicrohttpd is done with the connection.
 * The upstream is never asked. */
#include "proxy/ws_refusal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "proxy/ws_101.h"
#include "proxy/ws_auth.h"
#include "proxy/ws_frame.h"
#include "store/clock.h"

/* How long the client may take to answer the close frame before the connection closes. */
#define CLOSE_LINGER_MS 2000

struct ws_refusal {
    struct ws_refusal_env env;
    uint16_t code;
    char reason[64];
    struct MHD_UpgradeResponseHandle *urh;  /* from the upgrade until the close */
    struct event *readable;
    struct event *timer;
};

unsigned ws_refusal_close_code(unsigned status)
{
    switch (status) {
    case MHD_HTTP_UNAUTHORIZED:
        return 4401;
    case MHD_HTTP_TOO_MANY_REQUESTS:
        return 4429;
    case MHD_HTTP_SERVICE_UNAVAILABLE:
        return 4503;
    default:
        return 0;
    }
}

/* The close reason: the error code a status answer would carry for a key, else when to
 * come back (the refusal's Retry-After). */
static void set_reason(struct ws_refusal *rf, const char *decision, const char *retry_after)
{
    bool seconds = retry_after != NULL && retry_after[0] != '\0' && strspn(retry_after, "0123456789") == strlen(retry_after);
    if (rf->code == 4401)
        snprintf(rf->reason, sizeof(rf->reason), "%s",
                 decision != NULL && strcmp(decision, "invalid_key") == 0 ? "invalid_api_key" : "missing_api_key");
    else if (seconds)
        snprintf(rf->reason, sizeof(rf->reason), "retry after %.20s", retry_after);
    else
        snprintf(rf->reason, sizeof(rf->reason), "unavailable");
}

static void finish(struct ws_refusal *rf)
{
    if (rf->readable != NULL)
        event_del(rf->readable);
    if (rf->timer != NULL)
        evtimer_del(rf->timer);
    if (rf->urh == NULL)
        return;
    MHD_upgrade_action(rf->urh, MHD_UPGRADE_ACTION_CLOSE);
    rf->urh = NULL;
    rf->env.kick_mhd(rf->env.kick_ctx);
}

/* What the client sends after the close frame (its own close frame) is read and dropped;
 * its end of the stream ends the connection. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    char drop[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(fd, drop, sizeof(drop), MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        break;
    }
    finish(arg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    finish(arg);
}

static void on_upgraded(void *cls, struct MHD_Connection *connection, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct ws_refusal *rf = cls;
    rf->urh = urh;
    uint8_t frame[128];
    size_t n = ws_close_frame(rf->code, rf->reason, frame, sizeof(frame));
    /* a fresh connection's send buffer takes a few bytes at once */
    if (send(sock, frame, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) {
        finish(rf);
        return;
    }
    shutdown(sock, SHUT_WR);
    rf->readable = event_new(rf->env.base, sock, EV_READ | EV_PERSIST, on_readable, rf);
    rf->timer = evtimer_new(rf->env.base, on_timer, rf);
    struct timeval linger = store_ms_to_timeval(CLOSE_LINGER_MS);
    if (rf->readable == NULL || rf->timer == NULL || event_add(rf->readable, NULL) < 0 ||
        evtimer_add(rf->timer, &linger) < 0)
        finish(rf);
}

/* "tierproxy" as the client spelled it, into buf; false when it offered none. */
static bool offered_marker(const struct gate_header *headers, size_t n_headers, char *buf, size_t buflen)
{
    const char *marker;
    size_t len;
    if (!ws_auth_offered_marker(headers, n_headers, &marker, &len) || len >= buflen)
        return false;
    snprintf(buf, buflen, "%.*s", (int)len, marker);
    return true;
}

void ws_select_marker(struct MHD_Response *switching, const struct gate_header *headers, size_t n_headers)
{
    char protocol[16];
    if (switching != NULL && MHD_get_response_header(switching, "Sec-WebSocket-Protocol") == NULL &&
        offered_marker(headers, n_headers, protocol, sizeof(protocol)))
        MHD_add_response_header(switching, "Sec-WebSocket-Protocol", protocol);
}

/* The proxy's own 101 for the handshake: NULL when it has no key to answer. */
static struct MHD_Response *switching_response(struct ws_refusal *rf, const struct gate_header *headers,
                                               size_t n_headers)
{
    struct ws_101_expect expect;
    ws_101_expect_from(&expect, headers, n_headers);
    if (!expect.has_key)
        return NULL;
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, rf);
    if (resp == NULL)
        return NULL;
    char protocol[16];
    bool select = offered_marker(headers, n_headers, protocol, sizeof(protocol));
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket") != MHD_YES ||
        MHD_add_response_header(resp, "Sec-WebSocket-Accept", expect.accept) != MHD_YES ||
        (select && MHD_add_response_header(resp, "Sec-WebSocket-Protocol", protocol) != MHD_YES)) {
        MHD_destroy_response(resp);
        return NULL;
    }
    return resp;
}

enum MHD_Result ws_refusal_queue(const struct ws_refusal_env *env, struct MHD_Connection *conn,
                                 const struct gate_header *headers, size_t n_headers, const char *decision,
                                 unsigned status, struct MHD_Response *resp, struct ws_refusal **out)
{
    unsigned code = ws_refusal_close_code(status);
    struct ws_refusal *rf = code != 0 && resp != NULL && *out == NULL ? calloc(1, sizeof(*rf)) : NULL;
    if (rf != NULL) {
        rf->env = *env;
        rf->code = (uint16_t)code;
        set_reason(rf, decision, MHD_get_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER));
        struct MHD_Response *switching = switching_response(rf, headers, n_headers);
        /* libmicrohttpd upgrades HTTP/1.1 only: an HTTP/1.0 handshake keeps its status */
        enum MHD_Result ret = switching != NULL ? MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, switching)
                                                : MHD_NO;
        if (switching != NULL)
            MHD_destroy_response(switching);
        if (ret == MHD_YES) {
            *out = rf;
            return ret;
        }
        free(rf);
    }
    return MHD_queue_response(conn, status, resp);
}

void ws_refusal_free(struct ws_refusal *rf)
{
    if (rf == NULL)
        return;
    if (rf->readable != NULL)
        event_free(rf->readable);
    if (rf->timer != NULL)
        event_free(rf->timer);
    free(rf);
}
