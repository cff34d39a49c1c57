/* A WebSocket tunnel's state, shared by the files that run it: websocket.c (the
 * worker's context, the handshake and the relay) and ws_close.c (how a tunnel ends: the
 * close handshake, the flush, the idle timeout). Nothing outside them includes this. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "proxy/ws_101.h"
#include "proxy/ws_frame.h"
#include "proxy/ws_hooks.h"
#include "store/limit.h"

struct bufferevent;
struct event;
struct event_base;
struct local_limit;
struct rejection_log;
struct metrics;
struct pool_trim;
struct proxy_config;
struct upstream_tls;

/* Bytes queued toward one side before the other side is read no more. */
#define TUNNEL_HIGH_WATER (1024 * 1024)
#define TUNNEL_LOW_WATER (256 * 1024)

enum tunnel_state {
    TUNNEL_CONNECTING,   /* connecting to the upstream, handshake queued */
    TUNNEL_HANDSHAKE,    /* waiting for the upstream's response head */
    TUNNEL_REFUSED_BODY, /* the upstream answered other than 101: reading its body */
    TUNNEL_WAIT_UPGRADE, /* 101 queued to the client; waiting for MHD to hand over its socket */
    TUNNEL_OPEN,
    TUNNEL_CLOSING,      /* flushing what is queued, then closed */
    TUNNEL_CLOSED,
};

struct ws_field {
    char *name;
    char *value;
};

/* One per worker: the upstreams resolved for tunnels and every tunnel of the worker. */
struct ws_context {
    struct event_base *base;
    const struct proxy_config *cfg;
    struct metrics *metrics;
    struct rejection_log *rejection_warnings;
    struct ws_upstreams *upstreams;  /* cfg's upstreams, resolved */
    struct upstream_tls *tls;        /* TLS settings of tunnels to https upstreams */
    unsigned next;                   /* round robin over the upstreams */
    struct pool_trim *pool_trim;     /* gives back an upgraded connection's pool */
    void (*kick_mhd)(void *ctx);     /* get libmicrohttpd to run (after MHD_upgrade_action) */
    void *kick_ctx;
    LIST_HEAD(, ws_tunnel) tunnels;
};

struct ws_tunnel {
    struct ws_context *ctx;
    LIST_ENTRY(ws_tunnel) all;       /* in ctx->tunnels, until ws_free */
    const struct ws_hooks *hooks;
    void *owner;
    bool holds_owner;                /* since hooks->switching, until hooks->closed */
    enum tunnel_state state;
    struct bufferevent *up;          /* an OpenSSL bufferevent for an https upstream */
    const struct upstream_addr *upstream;
    struct bufferevent *client;
    struct MHD_UpgradeResponseHandle *urh;
    /* While open: websocket_idle_timeout_ms, re-armed by traffic. While closing: how long
     * what is queued may take to flush (CLOSE_FLUSH_MS). */
    struct event *timer;
    bool counted;                    /* in the websockets gauge */
    bool await_client_close;         /* we sent the client a close frame: let it answer */
    bool await_up_close;             /* we sent the upstream a close frame: let it close */
    /* Where the upstream's frames toward the client begin and end, and our close frame for
     * the client while it waits for the end of the upstream's frame in flight. */
    struct ws_frame_bounds down;
    uint8_t client_close[128];
    size_t client_close_len;         /* 0: none waiting */
    bool client_write_shut;

    /* the upstream's answer when it is not 101 */
    long status;
    int64_t started_ns;              /* the handshake left for the upstream */
    int64_t upstream_ms;             /* until the upstream's answer; -1 before */
    const char *upstream_error;      /* why the handshake's connection failed (upstream_error.h) */
    struct ws_field *headers;
    size_t n_headers;
    int64_t body_need;               /* -1: until the upstream closes */

    struct ws_101_expect expect;     /* what the upstream's 101 must carry */

    /* client-to-upstream message counting against the --ws-messages limit */
    struct ws_frame_reader frames;
    struct local_limit *messages;    /* NULL without such a limit */
    struct limit_rule ws_rule;
    const char *plan_name;           /* for the metric and the rejection log (the owner's) */
    const char *user_id;
    bool shadow;

    struct ws_upstreams *resolved;   /* holds t->upstream while a reload replaces the worker's */
};

struct upstream_addr {
    struct sockaddr_storage addr;
    socklen_t len;
    bool ok;
    bool tls;          /* https://: the tunnel speaks TLS (wss) */
    char host[256];    /* the URL's host: SNI and the name the certificate must carry */
    char url[300];     /* for log lines */
};

/* One configuration's upstreams, resolved. The worker holds the current set; a handshake
 * holds the set it picked from until it ends, so a reload can replace the worker's. */
struct ws_upstreams {
    unsigned refs;
    size_t n;
    struct upstream_addr addrs[];
};
