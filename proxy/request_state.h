/* struct request, shared by the three files of a request: request.c (its life: the head,
 * the decision, the body, the upstream, the end), request_slots.c (concurrency slots and
 * the upstream place) and request_response.c (which response it gets, the access-log
 * line). Private to them: every other file reaches a request through hooks. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <microhttpd.h>

#include "proxy/bytebuf.h"
#include "proxy/client_watch.h"
#include "proxy/forward.h"
#include "proxy/gate.h"
#include "proxy/request_context.h"
#include "proxy/request_head.h"
#include "proxy/scratch.h"
#include "store/limiter.h"
#include "tiers/request_target.h"

struct raw_response;
struct ws_auth_key;
struct ws_refusal;
struct ws_tunnel;

enum request_phase {
    PHASE_HEAD = 0,      /* the first call: headers are in, nothing decided */
    PHASE_CHECKING,      /* the head is in, waiting for the limiter; no body byte read */
    PHASE_BODY,          /* admitted: reading the request body */
    PHASE_FORWARDING,    /* waiting for the upstream's response head */
    PHASE_RESPONDING,    /* response queued; streaming the body */
};

/* Its memory is freed only when libmicrohttpd, a pending limiter reply and an open tunnel
 * have all let go of it (hiredis callbacks cannot be cancelled): refs counts them. */
struct request {
    struct request_context *ctx;
    LIST_ENTRY(request) live;     /* in ctx->live */
    SLIST_ENTRY(request) pooled;  /* in ctx->pool, once freed */
    struct scratch scratch;       /* what lives as long as the request; kept in the pool */
    struct MHD_Connection *conn;
    unsigned refs;                /* MHD, the limiter while a check is pending, an open tunnel */
    enum request_phase phase;
    bool suspended;
    bool mhd_done;                /* MHD's completion callback ran */

    /* the head */
    struct request_head head;     /* its screen (request_head.h) */
    char *raw_uri;                /* exactly as the client sent it: path and query (scratch) */
    size_t head_bytes;            /* what the request head takes of MHD's connection pool */
    struct request_target target; /* raw_uri normalised: what is matched and forwarded */
    struct ws_auth_key *query_key; /* taken out of target (key_query); NULL when off (scratch) */
    struct gate_header *headers;  /* every field in order (the array in scratch, the bytes MHD's) */
    size_t n_headers;
    const char *method;           /* owned by MHD, valid until completion */
    bool ws_upgrade;              /* a WebSocket handshake */
    int64_t started_ms;

    /* the body, read only once admitted, up to max_body_bytes */
    bool expects_body;            /* a Content-Length above 0, or chunked */
    struct bytebuf body;
    bool admitted;                /* decided at head time: to be forwarded once the body is in */
    bool refused_in_body;         /* answered 413 on the socket in the middle of the body */
    int64_t refused_in_body_ms;   /* ... at this time */

    /* who is calling and what applies */
    struct snapshot *snap;        /* reference held for the request's lifetime */
    const struct tier_plan *plan; /* NULL for exempt paths */
    const char *user_id;          /* for X-Tier-User */
    struct gate_check gate;       /* who is calling and the limits the store checks (gate.h) */
    struct limiter_result verdict;
    bool have_verdict;            /* a decided check whose headers go on the response */
    const char *limit_type;       /* what rejected it: "http", "concurrency", "ws_connection" */
    char lease_id[64];
    bool lease_held;              /* concurrency slots taken; given back exactly once */
    bool release_in_flight;       /* given back, the store's acknowledgement not yet in */
    void (*after_release)(struct request *r);

    /* the client leaving while the request waits (client_watch.h) */
    struct client_watch watch;
    bool client_gone;

    /* the response */
    struct MHD_Response *pending; /* decided, waiting for MHD to ask for it */
    unsigned pending_status;
    struct MHD_Response *stashed; /* decided, waiting for the slots' release first */
    unsigned stashed_status;
    bool response_made;           /* the upstream's answer became the response */

    /* the upstream side */
    bool upstream_place;          /* counted in ctx->upstream_cap (upstream_max_inflight) */
    bool forwarded;               /* up was started (forward.c's) */
    struct upstream up;
    struct ws_tunnel *ws;         /* a WebSocket handshake's tunnel (websocket.c's) */
    struct ws_refusal *ws_refusal; /* a refused handshake closed with a code (ws_refusal.h) */
    struct raw_response *raw;     /* the response written without MHD (a head too big for it) */

    /* for the access log and metrics */
    unsigned status;              /* the status queued; 0 when none was */
    const char *decision;
    int64_t store_started_ns;
    uint64_t bytes_sent;
};
/* request.c's, called back by the other two. */

/* Drops one reference; the last one frees r (back to the worker's pool). */
void request_unref(struct request *r);

/* Resumes r's connection if it is suspended and gets libmicrohttpd to run. Safe from curl
 * and hiredis callbacks. */
void request_wake(struct request *r);

/* Suspends r's connection until request_wake, watching for the client leaving. */
void request_suspend(struct request *r);
