/* One client request from the first byte to the last: authentication, the limiter
 * check, forwarding and the response. Its memory is freed only when libmicrohttpd, curl
 * and a pending limiter reply have all let go of it (hiredis callbacks cannot be
 * cancelled). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/event_struct.h>
#include <microhttpd.h>

#include "proxy/gate.h"
#include "tiers/request_target.h"
#include "proxy/scratch.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

struct worker;
struct ws_tunnel;

/* A growable byte buffer with a cap that input cannot push it past. */
struct bytebuf {
    char *data;
    size_t len;      /* bytes held, from data[off] */
    size_t off;      /* bytes already consumed from the front */
    size_t cap;      /* allocated */
};

/* Appends n bytes. Returns 0, or -ENOMEM. */
int bytebuf_append(struct bytebuf *b, const void *src, size_t n);
void bytebuf_consume(struct bytebuf *b, size_t n);
void bytebuf_free(struct bytebuf *b);

enum request_phase {
    PHASE_HEAD = 0,      /* the first call: headers are in, nothing decided */
    PHASE_CHECKING,      /* the head is in, waiting for the limiter; no body byte read */
    PHASE_BODY,          /* admitted: reading the request body */
    PHASE_FORWARDING,    /* waiting for the upstream's response head */
    PHASE_RESPONDING,    /* response queued; streaming the body */
};

struct response_header {
    char *name;
    char *value;
};

struct request {
    struct worker *w;
    LIST_ENTRY(request) live;     /* in the worker's list of live requests */
    SLIST_ENTRY(request) pooled;  /* in the worker's pool, once freed */
    struct scratch scratch;       /* what lives as long as the request; kept in the pool */
    struct MHD_Connection *conn;
    unsigned refs;                /* MHD, plus the limiter while a check is pending */
    enum request_phase phase;
    bool suspended;
    bool mhd_done;                /* MHD's completion callback ran */

    char *raw_uri;                /* exactly as the client sent it: path and query (scratch) */
    size_t head_bytes;            /* what the request head takes of MHD's connection pool */
    struct request_target target; /* raw_uri normalised: what is matched and forwarded (request_target.h) */
    struct gate_header *headers;  /* every field in order (the array in scratch, the bytes MHD's) */
    size_t n_headers;
    const char *method;           /* owned by MHD, valid until completion */
    int64_t started_ms;

    struct bytebuf body;
    bool admitted;                /* decided at head time: to be forwarded once the body is in */
    bool refused_in_body;         /* answered 413 on the socket in the middle of the body */
    int64_t refused_in_body_ms;   /* ... at this time */

    /* who is calling and what applies */
    struct snapshot *snap;        /* reference held for the request's lifetime */
    const struct tier_plan *plan; /* NULL for exempt paths */
    const char *user_id;          /* for X-Tier-User */
    bool exempt;
    struct gate_check gate;       /* who is calling and the limits the store checks (gate.h) */
    char lease_id[64];
    bool lease_held;              /* concurrency slots taken; given back exactly once */
    bool release_in_flight;       /* given back, the store's acknowledgement not yet in */
    void (*after_release)(struct request *r);
    struct ws_tunnel *ws;         /* when the request is a WebSocket handshake */
    struct event *close_watch;    /* notices a client that leaves while suspended */
    struct event close_watch_delay; /* arms close_watch once a suspension lasts */
    bool client_gone;
    bool ws_upgrade;              /* a WebSocket handshake */
    const char *limit_type;       /* what rejected it: "http", "concurrency", "ws_connection" */
    struct limiter_result verdict;
    bool have_verdict;            /* a decided check whose headers go on the response */

    /* a response decided here (error or rejection) waiting for MHD to ask for it */
    struct MHD_Response *pending;
    unsigned pending_status;

    /* the upstream side */
    CURL *easy;
    struct curl_slist *upstream_headers; /* nodes and lines in scratch: never curl_slist_free_all */
    struct curl_slist *upstream_headers_last;
    struct event upstream_timer;  /* assigned when forwarding starts */
    bool upstream_head_done;      /* the final (non-1xx) response head is in */
    size_t upstream_head_bytes;   /* of the upstream's response heads so far */
    bool bad_upstream_head;       /* over FORWARD_UPSTREAM_HEAD_MAX or malformed: a 502 */
    bool response_made;           /* forward_respond ran */
    bool upstream_done;           /* curl finished (with upstream_result) */
    CURLcode upstream_result;
    bool timed_out;
    long upstream_status;
    struct response_header *resp_headers; /* in scratch, like the names and values */
    size_t n_resp_headers, cap_resp_headers;
    int64_t resp_content_length;  /* -1 when the upstream did not say */
    struct bytebuf resp_body;
    bool curl_paused;

    /* for the access log and metrics */
    unsigned status;              /* the status queued; 0 when none was */
    const char *decision;
    int64_t store_started_ns;
    int64_t forwarded_ns;
    int64_t upstream_ms;          /* -1 when not forwarded */
    uint64_t bytes_sent;
    bool reader_waiting;          /* MHD asked for body bytes and we had none */
    bool resp_bodiless;           /* HEAD, 204, 304 or an empty body */
    struct MHD_Response *stashed; /* a bodiless response waiting for the slots' release */
};

/* libmicrohttpd callbacks, registered by the worker. */
/* The first thing MHD calls for a request (its URI log callback): makes the request,
 * keeping the target exactly as sent. */
void *request_begin(void *cls, const char *uri, struct MHD_Connection *conn);
enum MHD_Result request_handle(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **req_cls);
void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode toe);

/* Suspends r's MHD connection until request_wake, watching for the client leaving. */
void request_suspend(struct request *r);

/* Gives back r's slots and calls then(r) once the store has applied that (at once when
 * r holds none). The end of a response goes to the client only after this, so the
 * client's next request cannot meet its own old slot. */
void request_release_then(struct request *r, void (*then)(struct request *r));

/* True while r's slots are not known to be given back (the end of its response waits). */
bool request_release_pending(const struct request *r);

/* Gives back r's concurrency slots, if it holds any (idempotent). */
void request_release_slots(struct request *r);

/* The request model the gate reads (gate.h), from r's head and connection. */
void request_model(const struct request *r, struct gate_request *out);

/* Drops one reference; frees the request when none is left. */
void request_unref(struct request *r);

/* Frees the requests a worker keeps for reuse (when it stops). */
void request_pool_free(struct worker *w);

/* Resumes the MHD connection if it is suspended and gets MHD to run. Safe from curl and
 * hiredis callbacks. */
void request_wake(struct request *r);

/* Sets the response to queue (an error or rejection) and wakes the connection. Takes
 * ownership of response. */
void request_set_pending(struct request *r, unsigned status, struct MHD_Response *response);
