/* A response the proxy writes on the client's socket itself, for an upstream head too big
 * for libmicrohttpd's connection pool. libmicrohttpd 0.9.75 writes a response head into
 * the connection's pool next to the request head, and zeroes the whole pool after every
 * request: a pool big enough for SPEC's 64 KiB upstream heads made every request pay for
 * zeroing it (8-11% more proxy CPU per request, measured with etc/bench.sh). So the pool
 * stays small, and the rare answer whose head does not fit it goes out here: the
 * connection stays suspended in libmicrohttpd while the head and the body are written
 * from the worker's loop, with Connection: close (the body ends with the connection when
 * the upstream gave no length), and libmicrohttpd closes the connection afterwards.
 *
 * The end of the response (its last byte, or the close) waits until the owner's
 * concurrency slots are back, as it does for a response through libmicrohttpd. A client
 * that does not read for write_timeout_ms is cut off.
 *
 * The upstream's head is taken up to 64 KiB whatever it holds: neither the field count nor
 * the client side cuts that limit shorter. Which answers go out here is estimated from both
 * heads' sizes. A WebSocket handshake's answer (101, or a refusal) always goes through
 * libmicrohttpd: one whose head does not fit its pool is dropped without an answer.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct upstream;
struct raw_response;

struct raw_response_hooks {
    bool (*slots_pending)(void *owner);  /* the end waits while this is true */
    void (*over)(void *owner);           /* sent whole or cut short: the connection closes */
};

/* A response `status` on fd (a suspended libmicrohttpd connection's socket) from u's
 * answer. NULL when memory runs out. */
struct raw_response *raw_response_create(struct event_base *base, int fd, struct upstream *u, unsigned status,
                                         int64_t write_timeout_ms, const struct raw_response_hooks *hooks,
                                         void *owner);

/* Adds a head field; void *rr so it serves as a header_add_fn (ratelimit_headers.h). A
 * field that memory cannot hold makes raw_response_send fail. */
void raw_response_field(void *rr, const char *name, const char *value);

/* Adds Date, Content-Length (when content_length >= 0) and Connection: close, and starts
 * writing: the head, then (unless bodiless) the body as it arrives. Returns 0, or
 * -ENOMEM (nothing was written then). */
int raw_response_send(struct raw_response *rr, bool bodiless, int64_t content_length);

/* Body bytes arrived, the transfer ended, or the slots came back: write what can be. */
void raw_response_pump(struct raw_response *rr);

/* The client left: stop writing (no hook is called). */
void raw_response_cut(struct raw_response *rr);

/* True once the response was sent whole or cut short. */
bool raw_response_over(const struct raw_response *rr);

/* NULL is fine. */
void raw_response_free(struct raw_response *rr);
