/* One client request from the first byte to the last, on libmicrohttpd: the head screened
 * and normalised, the gate's admission, the store's check, the upstream (forward.c, or
 * websocket.c for a handshake) and the response, then metrics and the access log line.
 * request.c runs the request's life and owns the request_context (request_context.h), one
 * per worker; struct request (request_state.h) is private to it and its two parts,
 * request_slots.c (slots, the upstream place) and request_response.c (the response chosen,
 * the access-log line). */
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
