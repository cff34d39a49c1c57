/* The upstream side of a request: one libcurl transfer on the worker's loop (curl's multi
 * interface), and the client's response made from its answer. forward.c owns two things:
 * the forwarder, one per worker (the multi handle, its timer and socket events, the DNS
 * cache, reusable easy handles, the round robin over the upstreams), and the upstream,
 * one per forwarded request (as nginx's r->upstream): the easy handle, the header lines
 * sent, the response head and the body on its way. Only forward.c writes an upstream; the
 * request that owns it reads its outcome and is told of progress through its hooks. No
 * request or worker type is known here.
 *
 * Details. A bodiless answer (to HEAD, a 204 or a 304) carries the upstream's
 * Content-Length when it sent one (RFC 9110 9.3.2) and no other (8.6): libmicrohttpd 0.9.75
 * writes Content-Length: 0 for a response of size 0 (but a 204's), and frames one of
 * unknown size chunked with a last chunk after the head even when no body may follow; so a
 * HEAD answer or a 304 without the upstream's length is sent unframed
 * (MHD_RF_HTTP_1_0_COMPATIBLE_STRICT) with Connection: close. A 101 to a forwarded request
 * is 502 bad_upstream_response at once (Upgrade is hop-by-hop, and curl would wait for a
 * final answer after it). Easy handles are reused without curl_easy_reset: the options
 * every transfer shares are set once, and each transfer sets all the others again (HTTPGET
 * first, then the method, body and headers). The header list curl gets is built in the
 * request's scratch (curl only reads it). CURLOPT_NOPROXY "*": the upstream is the one
 * configured. Upstream connections stay in the multi handle's cache and their sockets stay
 * registered with the loop while idle (found by descriptor, dropped in curl's close-socket
 * callback), which saves an epoll_ctl pair per request.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <event2/event_struct.h>
#include <microhttpd.h>

#include "proxy/bytebuf.h"
#include "proxy/gate.h"
#include "proxy/scratch.h"

struct event_base;
struct metrics;
struct proxy_config;
struct forwarder;

/* The largest upstream response head taken (SPEC: over it, 502 bad_upstream_response). */
#define FORWARD_UPSTREAM_HEAD_MAX (64 * 1024)

/* libmicrohttpd's per-connection memory pool (MHD_OPTION_CONNECTION_MEMORY_LIMIT in
 * worker.c; the one size for every use of it). The request head (its bytes, and 64 bytes
 * of list entry per field) and the response head MHD writes must fit in it together, or
 * MHD drops the connection without an answer; a response head that would not fit goes out
 * without MHD (raw_response.h). libmicrohttpd 0.9.75 zeroes the whole pool after every
 * request, so its size is paid on every request: 96 KiB, enough for SPEC's 64 KiB upstream
 * heads, cost 8-11% more proxy CPU per request than 32 KiB (etc/bench.sh). 36 KiB is the
 * smallest size it maps with mmap (over 32 KiB, whole pages): page-aligned and untouched
 * pages free, so pool_trim.c can give an idle connection's pages back. It also holds a head
 * near MAX_HEAD_BYTES that is mostly a Cookie, which libmicrohttpd copies into the pool
 * beside it (21 KiB could not). */
#define FORWARD_CLIENT_POOL_BYTES (36 * 1024)

/* One per worker; it logs TLS failures. NULL when curl cannot be set up. */
struct forwarder *forwarder_create(struct event_base *base, const struct proxy_config *cfg, struct metrics *metrics);
/* The configuration later transfers use (a reload); transfers under way keep theirs. */
void forwarder_set_config(struct forwarder *f, const struct proxy_config *cfg);
/* Shutting down past the drain: response bodies still streaming end with an error. */
void forwarder_close(struct forwarder *f);
/* Frees the forwarder; every upstream must have been released first. NULL is fine. */
void forwarder_destroy(struct forwarder *f);

/* What forward.c tells the request that owns an upstream. Called from curl's callbacks
 * and the libmicrohttpd body reader, never after upstream_abort. */
struct upstream_hooks {
    void (*head_in)(void *owner);       /* the final response head is in: time to respond */
    void (*body_in)(void *owner);       /* the body reader slept and has bytes again */
    void (*finished)(void *owner);      /* the transfer is over: the outcome fields say how */
    void (*starved)(void *owner);       /* the body reader has nothing yet: sleep until body_in
                                           or finished */
    bool (*slots_pending)(void *owner); /* the owner's concurrency slots are not back yet: the
                                           response's last byte waits for them */
};

struct upstream_field {
    char *name;
    char *value;
};

/* What the upstream receives. */
struct upstream_request {
    const struct gate_request *model;   /* method, target and headers as the gate read them */
    const struct gate_check *check;     /* the caller and plan; NULL for an exempt path */
    const char *body;
    size_t body_len;
};

struct upstream_url_set;

struct upstream {
    /* set by upstream_init */
    struct forwarder *f;
    const struct upstream_hooks *hooks;
    void *owner;
    struct scratch *scratch;            /* the owner's: header lines and response fields live there */
    uint64_t *bytes_sent;               /* the owner's count of body bytes sent to the client */

    CURL *easy;
    struct upstream_url_set *url_set;   /* the parsed URL the transfer names (upstream_urls.h) */
    struct curl_slist *lines;           /* nodes and lines in scratch: never curl_slist_free_all */
    struct curl_slist *lines_last;
    struct event timer;                 /* upstream_timeout_ms without progress */
    bool started;
    bool abandoned;                     /* upstream_abort ran: no hook is called any more */
    int64_t started_ns;
    bool reader_waiting;                /* the body reader returned nothing and slept */
    bool curl_paused;
    bool head_bytes_counted;

    /* the outcome, read by the owner */
    bool head_done;                     /* the final (non-1xx) response head is in */
    bool bad_head;                      /* over FORWARD_UPSTREAM_HEAD_MAX or malformed */
    bool done;                          /* the transfer is over, with `result` */
    bool timed_out;
    CURLcode result;
    long os_errno;                      /* the system's error of a failed transfer (CURLINFO_OS_ERRNO) */
    long status;
    int64_t waited_ms;                  /* until the response head; -1 before */
    size_t head_bytes;                  /* of the response heads so far */
    struct upstream_field *fields;      /* the response head minus hop-by-hop fields */
    size_t n_fields, cap_fields;
    int64_t content_length;             /* -1 when the upstream did not say */
    struct bytebuf body;                /* received, not yet sent */
};

/* Ties u to its forwarder and owner; nothing is sent yet. */
void upstream_init(struct upstream *u, struct forwarder *f, struct scratch *scratch, const struct upstream_hooks *hooks,
                   void *owner, uint64_t *bytes_sent);

/* Starts the transfer. Returns 0, or a negative errno when it could not start (nothing
 * is under way then, and no hook will be called). */
int upstream_start(struct upstream *u, const struct upstream_request *req);

/* True when the response head fits libmicrohttpd's pool beside a request head that takes
 * client_head_bytes of it (MHD drops the connection without a word when it does not). */
bool upstream_head_fits(const struct upstream *u, size_t client_head_bytes);

/* The client's response once the head is in: the whole body at once when it has all
 * arrived (and the slots are back), else streamed from the body as it comes. *bodiless is
 * set for HEAD, 204, 304 and an empty body. NULL when memory runs out. */
struct MHD_Response *upstream_response(struct upstream *u, bool head_request, bool *bodiless);

/* For a response written without libmicrohttpd (raw_response.c): the body bytes received
 * and not yet sent (*data points at them), and the n of them that went to the client
 * (dropped, counted in the owner's bytes_sent; a paused transfer goes on). */
size_t upstream_body_pending(const struct upstream *u, const char **data);
/* ... and hooks->body_in is called when the next bytes come. */
void upstream_want_body(struct upstream *u);
void upstream_body_sent(struct upstream *u, size_t n);

/* Why the upstream gave no answer (upstream_error.h: "Connection refused", "Timeout was
 * reached", ...), or NULL when it answered or the transfer is not over. */
const char *upstream_failure(const struct upstream *u);

/* Stops a transfer still under way (the client left, or the request ends). Idempotent. */
void upstream_abort(struct upstream *u);

/* Aborts and frees what u holds (the easy handle goes back to the forwarder's pool). */
void upstream_release(struct upstream *u);
