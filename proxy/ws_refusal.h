/* [auth] ws_refusal = close: a WebSocket handshake the proxy refuses (401, 429, 503) is
 * completed with the proxy's own 101 and closed at once with a close code page script can
 * read (a browser shows any answer other than 101 to script as a bare 1006): 4401 no or
 * invalid key (reason "missing_api_key" or "invalid_api_key"), 4429 over a limit (reason
 * "retry after S"), 4503 unavailable (reason "retry after S" when it says when, else
 * "unavailable"). The 101 selects "tierproxy" when the client offered it (ws_auth.h) and
 * no extension. After its close frame the proxy stops writing and reads what the client
 * still sends (its close frame) until the client closes or CLOSE_LINGER_MS pass, so the
 * frame is read rather than lost to a reset. The upstream is never asked, and its own
 * refusals pass as they are. */
#pragma once
#include <stddef.h>

#include <microhttpd.h>

#include "proxy/header_field.h"

struct event_base;
struct ws_refusal;

struct ws_refusal_env {
    struct event_base *base;
    void (*kick_mhd)(void *ctx);   /* gets libmicrohttpd to run (after MHD_upgrade_action) */
    void *kick_ctx;
};

/* The close code standing for a refusal with this HTTP status; 0 when it has none (the
 * status is answered as it is). */
unsigned ws_refusal_close_code(unsigned status);

/* Queues the answer to a handshake (its fields: headers) refused with status and resp,
 * decided as decision (the access log's): a 101 that closes at once when the refusal has a
 * close code, setting *out to the state the caller frees with ws_refusal_free once
 * libmicrohttpd is done with the connection; else (no close code, *out already set, no
 * Sec-WebSocket-Key, an HTTP/1.0 handshake libmicrohttpd does not upgrade) resp itself.
 * Does not take resp. Returns what MHD_queue_response returned. */
enum MHD_Result ws_refusal_queue(const struct ws_refusal_env *env, struct MHD_Connection *conn,
                                 const struct gate_header *headers, size_t n_headers, const char *decision,
                                 unsigned status, struct MHD_Response *resp, struct ws_refusal **out);

/* The upstream's 101 to a handshake (its fields: headers) selects the client's offered
 * "tierproxy" when the upstream selected no subprotocol (ws_auth.h). */
void ws_select_marker(struct MHD_Response *switching, const struct gate_header *headers, size_t n_headers);

/* Frees the state (NULL is fine); the connection's socket is libmicrohttpd's. */
void ws_refusal_free(struct ws_refusal *rf);
