/* Which response a request gets and when it is queued (an error, a refusal, the upstream's
 * answer, a WebSocket handshake's), its RateLimit headers, and at its end the metrics and
 * the access-log line. */
#pragma once
#include <stdint.h>

#include <microhttpd.h>

#include "proxy/request_state.h"
#include "store/limiter.h"

/* Sets the response to queue (an error or rejection) and wakes the connection. Takes
 * ownership of response. */
void request_set_pending(struct request *r, unsigned status, struct MHD_Response *response);

/* The stashed response goes now that the slots are back. */
void request_deliver_stashed(struct request *r);

/* Queues r's pending response on this handler call (none: MHD_NO, the connection ends). */
enum MHD_Result request_queue_pending(struct request *r);

/* Queues response `status` on this handler call. Takes ownership of resp. */
enum MHD_Result request_queue_now(struct request *r, unsigned status, struct MHD_Response *resp);

/* Queues r's pending refusal (401, 429, 503), decided on the head, before any body byte is
 * read. A request that announced a body gets it on this first call: libmicrohttpd then
 * answers with Connection: close and never reads the body. One that announced none (no
 * Content-Length above 0, not chunked) gets it on its last call, which libmicrohttpd makes
 * next: an answer queued on the first call always closes the connection (0.9.75 takes it
 * as refusing the body), and a client refused for its key or a limit should not have to
 * reconnect for its next request. But for `Expect: 100-continue`: libmicrohttpd would send
 * 100 Continue before that last call, and a refused request never gets one, so that
 * refusal goes on the first call and closes. */
enum MHD_Result request_queue_refusal(struct request *r);

/* request_queue_refusal of the refusal `status`. Takes ownership of resp. */
enum MHD_Result request_refuse(struct request *r, unsigned status, struct MHD_Response *resp);

/* r's decided check for the RateLimit headers and the log; NULL when there is none. */
const struct limiter_result *request_decided(const struct request *r);

/* Adds the RateLimit headers of r's decided check, if it has one, to resp (may be NULL). */
void request_add_ratelimit_headers(const struct request *r, struct MHD_Response *resp);

/* The limit closest to running out, by the one rule the headers and the access log share:
 * for a refused request, the one that refused it. */
const struct limit_verdict *request_rejecting_verdict(const struct request *r);

/* The transfer is over and the slots are given back: the client side may end. */
void request_finish_client_side(struct request *r);

/* MHD asks for the response and the upstream's head is in: it becomes r->pending, or
 * r->stashed when a bodiless response must wait for the slots' release, or goes out
 * without MHD when its head is too big for MHD, or a 502. */
void request_respond_from_upstream(struct request *r);

/* ws_hooks (websocket.h), owner the request: the handshake's answer other than 101 and a
 * failed handshake, sent once the slots are back; the 101. */
void request_ws_answer(void *owner, unsigned status, struct MHD_Response *resp, uint64_t body_bytes);
void request_ws_fail(void *owner, unsigned status, const char *error_code);
void request_ws_switching(void *owner, struct MHD_Response *resp);

/* Metrics and the access log line, once the request is over. */
void request_count_and_log(struct request *r);

/* A request whose head was read and that ends with no answer is logged as nginx logs it:
 * 408 when libmicrohttpd timed the client out, else 499, the client went away. */
void request_note_unanswered(struct request *r, enum MHD_RequestTerminationCode toe);
