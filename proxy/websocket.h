/* WebSocket tunnelling: the handshake is forwarded on a plain non-blocking socket, with TLS
 * over it for an https upstream (libcurl here has no WebSocket support), and after the upstream's 101 the client socket that
 * libmicrohttpd hands over and the upstream socket are joined on the worker's loop. Frames
 * pass unchanged; client-to-upstream frame heads are read as they pass, to count
 * messages against a --ws-messages limit. */
#pragma once
#include <stdbool.h>

#include <microhttpd.h>

struct request;
struct worker;

/* True for a GET that asks to upgrade to websocket. */
bool ws_is_upgrade(struct MHD_Connection *conn, const char *method);

/* Resolves w->cfg's upstream addresses for the worker's tunnels: at start, and again after
 * each reload (a handshake under way keeps the address it started with). Returns 0 (a name
 * that does not resolve leaves its reason in err), or -ENOMEM, keeping the addresses in use. */
int ws_resolve_upstreams(struct worker *w, char *err, size_t errlen);
void ws_free_upstreams(struct worker *w);

/* Forwards r's handshake; the answer (101 or any other) becomes r's pending response. */
void ws_start(struct request *r);

/* Closes every open tunnel of the worker (SIGTERM). */
void ws_close_all(struct worker *w);

/* libmicrohttpd is done with r's connection (request_completed). A handshake whose 101
 * could not be sent (the client left first) is ended here: MHD never hands its socket over,
 * so its slot, its upstream connection and its hold on r go now. Returns true while r's
 * tunnel is joined and holds the slot, which it gives back itself when it closes. */
bool ws_connection_done(struct request *r);

/* Frees r's tunnel state (from request_unref). */
void ws_release(struct request *r);
