/* One client request from the first byte to the last, on libmicrohttpd: the head screened
 * and normalised, the gate's admission, the store's check, the upstream (forward.c, or
 * websocket.c for a handshake) and the response, then metrics and the access log line.
 * request.c runs the request's life and owns the request_context (request_context.h), one
 * per worker; struct request (request_state.h) is private to it and its two parts,
 * request_slots.c (slots, the upstream place) and request_response.c (the response chosen,
 * the access-log line).
 *
 * One ordinary request, a GET forwarded upstream with a small answer, stop by stop (a stop
 * starts where the loop or a library calls in; calls in parentheses return within the
 * stop):
 * 1. listen socket readable: worker.c accept_connections (intake.c intake_take: peek,
 *   head_screen; acceptable, so at once back through intake_hooks.hand_over to worker.c
 *   hand_to_mhd).
 * 2. MHD parsed the head: request_begin (on a kept-alive connection's later head,
 *   request_head.c screens it in MHD's pool first), request_handle's first call (the same
 *   rules on MHD's head, http1_content_length, request_target_parse, gate_admit, the store
 *   call); suspended.
 * 3. the store's reply: on_verdict (gate_verdict; wake, which runs the worker's
 *   kick_mhd).
 * 4. MHD runs: request_handle again, then its last call, which starts forward.c
 *   upstream_start (gate_upstream_headers into curl lines).
 * 5. the upstream socket: forward.c's curl callbacks: the head (upstream_hooks.head_in, a
 *   wake), the body, the end (upstream_hooks.finished, which gives slots back first when it
 *   holds any).
 * 6. MHD runs: request_handle (request_response.c: upstream_response, RateLimit headers),
 *   queued.
 * 7. sent: request_completed (upstream_abort; the access-log line), and the request goes
 *   back to the worker's pool.
 *
 * Where a refusal is queued (request_queue_refusal): libmicrohttpd 0.9.75 takes an answer
 * queued on the first call as refusing the body and closes the connection after it
 * (discard_request in MHD_queue_response). A request that announced a body (Content-Length
 * above 0, or chunked) or asks for 100 Continue is refused on the first call with
 * Connection: close (MHD sends 100 Continue to any Expect whose first call queued nothing,
 * so a bodiless one with Expect is closed too); any other 401, 429 or 503 is kept for the
 * last call, which MHD makes at once in the same run, and the connection stays open; a 400
 * of the target and the head screen's refusals close. When the store is asked the
 * connection is suspended on the first call and MHD repeats it after the resume
 * (PHASE_CHECKING); an admitted request goes on to PHASE_BODY. A concurrency slot is taken
 * at head time, so it is held while the body arrives and given back if the client leaves
 * mid-body. A chunked body that outgrows max_body_bytes cannot be answered through MHD
 * mid-body (responses are queued only on the first or last call): its 413 goes straight on
 * the socket with Connection: close, what follows is dropped for 2 s, then the connection
 * is closed.
 */
#pragma once
#include <microhttpd.h>

#include "proxy/request_context.h"

/* Readies ctx's own part (the worker's fields are set before or after). */
void request_context_init(struct request_context *ctx);

/* The snapshot requests are served from, refreshed when the watcher published a new one. */
struct snapshot *request_context_snapshot(struct request_context *ctx);

/* Past the drain: every live request's transfer stops and its suspended connection
 * resumes, so libmicrohttpd can end them as it stops. */
void request_context_close(struct request_context *ctx);

/* Frees what ctx keeps (the pool of requests, the snapshot); no request may be live. */
void request_context_destroy(struct request_context *ctx);

/* libmicrohttpd callbacks, registered by the worker with the request_context as cls. */
/* The first thing MHD calls for a request (its URI log callback): makes the request,
 * keeping the target exactly as sent. */
void *request_begin(void *cls, const char *uri, struct MHD_Connection *conn);
enum MHD_Result request_handle(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **req_cls);
void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode toe);
