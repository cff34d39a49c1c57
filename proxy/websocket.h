/* WebSocket tunnelling: the handshake is forwarded on a plain non-blocking socket, with TLS
 * over it for an https upstream (libcurl here has no WebSocket support), and after the
 * upstream's 101 the client socket that libmicrohttpd hands over and the upstream socket
 * are joined on the worker's loop. Frames pass unchanged; client-to-upstream frame heads
 * are read as they pass, to count messages against a --ws-messages limit.
 *
 * websocket.c owns the ws_context, one per worker (the upstreams resolved for tunnels,
 * their TLS settings, every tunnel of the worker), and each ws_tunnel. The request that
 * starts a tunnel is its owner, told what happens through ws_hooks; no request or worker
 * type is known here.
 *
 * Each worker resolves the upstreams for tunnels at start and again when a reload reaches
 * it (a blocking getaddrinfo on the worker's loop); the resolved set is reference-counted,
 * so a handshake under way keeps the address it picked while new handshakes use the new
 * list. The upstream's 101 is relayed only as ws_101.h says, else 502 bad_upstream_response
 * with the upstream side closed and the slot given back before the answer goes; when it
 * names permessage-deflate, RSV1 is allowed on the first frame of a client data message
 * (the payload is never inflated); RSV1 elsewhere, RSV2 and RSV3 are closed with 1002;
 * frames from the upstream are not judged. The slot is the tunnel's from the limiter's yes
 * until the tunnel closes: a client gone while the handshake waits, a 101 that could not be
 * sent (request_completed then ends the tunnel through ws_connection_done), and either side
 * closing all give it back; a 101 that arrives after the client left is not relayed.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "proxy/gate.h"
#include "proxy/scratch.h"
#include "proxy/ws_hooks.h"

struct event_base;
struct metrics;
struct rejection_log;
struct pool_trim;
struct proxy_config;
struct ws_context;
struct ws_tunnel;

struct ws_context_params {
    struct event_base *base;
    const struct proxy_config *cfg;
    struct metrics *metrics;
    struct rejection_log *rejection_warnings;
    struct pool_trim *pool_trim;   /* told when a connection is upgraded */
    void (*kick_mhd)(void *ctx);   /* gets libmicrohttpd to run soon (from a loop callback) */
    void *kick_ctx;
};

/* Resolves cfg's upstream addresses for the worker's tunnels. NULL when memory runs out; a
 * name that does not resolve leaves its reason in err and is not fatal. */
struct ws_context *ws_context_create(const struct ws_context_params *p, char *err, size_t errlen);
/* A reload: later handshakes use cfg's upstreams (one under way keeps the address it
 * started with). Returns 0 (a name that does not resolve leaves its reason in err), or
 * -ENOMEM, keeping the addresses in use. */
int ws_context_reload(struct ws_context *ctx, const struct proxy_config *cfg, char *err, size_t errlen);
/* Frees the context; every tunnel must have been freed first. NULL is fine. */
void ws_context_destroy(struct ws_context *ctx);

/* True for a GET whose (first) Upgrade field asks for websocket. */
bool ws_is_upgrade(const char *method, const struct gate_header *headers, size_t n_headers);

/* What the handshake sends upstream. */
struct ws_handshake {
    const struct gate_request *model;  /* the target and headers as the gate read them */
    const struct gate_check *check;    /* the caller and plan; NULL for an exempt path */
    struct scratch *scratch;           /* the owner's, for the header builder */
};

/* Forwards the handshake; every outcome reaches the owner through hooks (possibly before
 * this returns). Returns the tunnel, which the owner frees with ws_free once done with it,
 * or NULL when memory runs out (no hook is called then). */
struct ws_tunnel *ws_start(struct ws_context *ctx, const struct ws_handshake *hs, const struct ws_hooks *hooks,
                           void *owner);

/* Closes every open tunnel of the worker (SIGTERM). */
void ws_close_all(struct ws_context *ctx);

/* libmicrohttpd is done with the owner's connection. A handshake whose 101 could not be
 * sent (the client left first) ends here, with *upgrade_missed set: MHD never hands its
 * socket over, so its slot, its upstream connection and its hold on the owner go now.
 * Returns true while the tunnel is joined and holds the slot, which it gives back itself
 * when it closes. */
bool ws_connection_done(struct ws_tunnel *t, bool *upgrade_missed);

/* How long the upstream took to answer the handshake, in ms; -1 before it did. */
int64_t ws_upstream_ms(const struct ws_tunnel *t);
/* Why the handshake's connection to the upstream failed; NULL when it did not. */
const char *ws_upstream_error(const struct ws_tunnel *t);

/* Frees the tunnel (the owner, when it ends). NULL is fine. */
void ws_free(struct ws_tunnel *t);
