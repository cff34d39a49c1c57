#include "proxy/request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "proxy/access_log.h"
#include "proxy/asan_poison.h"
#include "proxy/bytebuf.h"
#include "proxy/client_watch.h"
#include "proxy/config.h"
#include "proxy/forward.h"
#include "proxy/gate.h"
#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/pool_trim.h"
#include "proxy/raw_response.h"
#include "proxy/rejection_log.h"
#include "proxy/request_head.h"
#include "proxy/respond.h"
#include "proxy/scratch.h"
#include "proxy/upstream_cap.h"
#include "proxy/websocket.h"
#include "proxy/ws_auth.h"
#include "proxy/ws_refusal.h"
#include "store/clock.h"
#include "store/limiter.h"
#include "tiers/request_target.h"
#include "tiers/snapshot.h"

/* Freed requests kept per worker: a request is a 2 KiB calloc, and one that size goes
 * through malloc's slow path (consolidation) every time. */
#define REQUEST_POOL_MAX 256

/* After a 413 sent in the middle of a chunked body, what the client still sends is read
 * and dropped for this long, so that closing with unread data (a reset) does not destroy
 * the answer before the client reads it; then the connection is closed. */
#define REFUSED_LINGER_MS 2000

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

static void on_client_gone(void *arg);
static void request_unref(struct request *r);
static void note_head_refusal(struct request *r);
static void on_head_rest(void *owner);

/* ---- the context and the pool ------------------------------------------------------ */

void request_context_init(struct request_context *ctx)
{
    LIST_INIT(&ctx->live);
    SLIST_INIT(&ctx->pool);
    ctx->n_pool = 0;
    ctx->active = 0;
}

struct snapshot *request_context_snapshot(struct request_context *ctx)
{
    uint64_t generation = snapshot_watch_generation(ctx->catalog);
    if (ctx->snap == NULL || generation != ctx->snap_generation) {
        struct snapshot *fresh = snapshot_watch_acquire(ctx->catalog);
        if (fresh != NULL) {
            if (ctx->snap != NULL)
                snapshot_unref(ctx->snap);
            ctx->snap = fresh;
            ctx->snap_generation = generation;
        }
    }
    return ctx->snap;
}

void request_context_close(struct request_context *ctx)
{
    ctx->closing = true;
    forwarder_close(ctx->forwarder);
    struct request *r;
    LIST_FOREACH(r, &ctx->live, live) {
        if (r->forwarded)
            upstream_abort(&r->up);
        if (r->suspended) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
    }
}

void request_context_destroy(struct request_context *ctx)
{
    struct request *r;
    while ((r = SLIST_FIRST(&ctx->pool)) != NULL) {
        ASAN_UNPOISON_MEMORY_REGION(r, sizeof(*r));
        SLIST_REMOVE_HEAD(&ctx->pool, pooled);
        scratch_free(&r->scratch);
        free(r);
    }
    ctx->n_pool = 0;
    if (ctx->snap != NULL)
        snapshot_unref(ctx->snap);
    ctx->snap = NULL;
}

/* A zeroed request, from the pool when it has one; its scratch is kept. */
static struct request *request_take(struct request_context *ctx)
{
    struct request *r = SLIST_FIRST(&ctx->pool);
    if (r == NULL)
        return calloc(1, sizeof(*r));
    ASAN_UNPOISON_MEMORY_REGION(r, sizeof(*r));
    SLIST_REMOVE_HEAD(&ctx->pool, pooled);
    ctx->n_pool--;
    struct scratch kept = r->scratch;
    memset(r, 0, sizeof(*r));
    r->scratch = kept;
    return r;
}

static void request_put_back(struct request_context *ctx, struct request *r)
{
    if (ctx->n_pool >= REQUEST_POOL_MAX) {
        scratch_free(&r->scratch);
        free(r);
        return;
    }
    scratch_reset(&r->scratch);
    SLIST_INSERT_HEAD(&ctx->pool, r, pooled); /* writes r alone: the others stay poisoned */
    ctx->n_pool++;
    ASAN_POISON_MEMORY_REGION(r, sizeof(*r));
}

void *request_begin(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct request_context *ctx = cls;
    struct request *r = request_take(ctx);
    if (r == NULL)
        return NULL;
    r->raw_uri = scratch_strndup(&r->scratch, uri, strlen(uri));
    if (r->raw_uri == NULL) {
        request_put_back(ctx, r);
        return NULL;
    }
    r->ctx = ctx;
    r->conn = conn;
    r->refs = 1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    client_watch_init(&r->watch, ctx->base, ci != NULL ? ci->connect_fd : -1, on_client_gone, r);
    r->started_ms = store_mono_ms();
    ctx->active++;
    LIST_INSERT_HEAD(&ctx->live, r, live);
    switch (request_head_begin(&r->head, conn, uri, ctx->base, &r->scratch, on_head_rest, r)) {
    case REQUEST_HEAD_GO:
        break;
    case REQUEST_HEAD_REFUSED:
        note_head_refusal(r);
        break;
    case REQUEST_HEAD_WAIT: /* until on_head_rest: libmicrohttpd must not read the rest */
        r->suspended = true;
        MHD_suspend_connection(conn);
        break;
    }
    return r;
}

/* ---- slots ------------------------------------------------------------------------- */

static void on_released(void *arg)
{
    struct request *r = arg;
    r->release_in_flight = false;
    void (*then)(struct request *) = r->after_release;
    r->after_release = NULL;
    if (then != NULL && !r->mhd_done)
        then(r);
    request_unref(r);
}

/* Gives back r's slots and calls then(r) once the store has applied that (at once when r
 * holds none). The end of a response goes to the client only after this, so the client's
 * next request cannot meet its own old slot. */
static void request_release_then(struct request *r, void (*then)(struct request *r))
{
    if (!r->lease_held) {
        then(r);
        return;
    }
    r->lease_held = false;
    r->release_in_flight = true;
    r->after_release = then;
    r->refs++; /* until on_released */
    limiter_release_notify(r->ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n,
                           r->lease_id, on_released, r);
}

/* True while r's slots are not known to be given back (the end of its response waits). */
static bool request_release_pending(const struct request *r)
{
    return r->lease_held || r->release_in_flight;
}

/* Gives back r's concurrency slots, if it holds any (idempotent). */
static void request_release_slots(struct request *r)
{
    if (!r->lease_held)
        return;
    r->lease_held = false;
    limiter_release(r->ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, r->lease_id);
}

/* Gives back r's place among the requests in flight to the upstream (idempotent): once
 * the upstream's answer is in, or the request will not go (refused, client gone). */
static void give_upstream_place(struct request *r)
{
    if (!r->upstream_place)
        return;
    r->upstream_place = false;
    upstream_cap_give(r->ctx->upstream_cap);
}

static void request_unref(struct request *r)
{
    if (--r->refs > 0)
        return;
    struct request_context *ctx = r->ctx;
    request_release_slots(r);
    give_upstream_place(r);
    client_watch_stop(&r->watch);
    request_head_free(&r->head);
    ws_free(r->ws);
    ws_refusal_free(r->ws_refusal);
    raw_response_free(r->raw);
    upstream_release(&r->up);
    if (r->pending != NULL)
        MHD_destroy_response(r->pending);
    if (r->stashed != NULL)
        MHD_destroy_response(r->stashed);
    if (r->snap != NULL)
        snapshot_unref(r->snap);
    bytebuf_free(&r->body);
    ctx->active--;
    LIST_REMOVE(r, live);
    request_put_back(ctx, r);
}

/* ---- suspending and waking the connection ------------------------------------------ */

/* Resumes the MHD connection if it is suspended and gets MHD to run. Safe from curl and
 * hiredis callbacks. */
static void request_wake(struct request *r)
{
    if (r->mhd_done)
        return;
    if (r->suspended) {
        r->suspended = false;
        client_watch_stop(&r->watch);
        MHD_resume_connection(r->conn);
    }
    r->ctx->kick_mhd(r->ctx->kick_ctx);
}

/* A later head refused before libmicrohttpd parsed it (request_head.h), answered already:
 * logged and counted as the intake does a first head's refusal. */
static void note_head_refusal(struct request *r)
{
    r->status = r->head.refused_status;
    r->decision = "malformed";
    r->method = r->head.method;
}

/* The rest of a split later head came, or the client left: libmicrohttpd goes on. */
static void on_head_rest(void *owner)
{
    struct request *r = owner;
    if (r->head.refused_status != 0)
        note_head_refusal(r);
    request_wake(r);
}

/* Sets the response to queue (an error or rejection) and wakes the connection. Takes
 * ownership of response. */
static void request_set_pending(struct request *r, unsigned status, struct MHD_Response *response)
{
    if (r->mhd_done || r->pending != NULL) {
        if (response != NULL)
            MHD_destroy_response(response);
        return;
    }
    r->pending = response;
    r->pending_status = status;
    request_wake(r);
}

/* The stashed response goes now that the slots are back. */
static void deliver_stashed(struct request *r)
{
    struct MHD_Response *resp = r->stashed;
    r->stashed = NULL;
    request_set_pending(r, r->stashed_status, resp);
}

/* The client left while r waited (client_watch.h): its slots go back at once, and so
 * does its upstream transfer; without this, a slot stayed taken until the upstream
 * answered, or for good when libmicrohttpd missed the close while reading the body. */
static void on_client_gone(void *arg)
{
    struct request *r = arg;
    if (r->mhd_done || r->client_gone)
        return;
    r->client_gone = true;
    r->decision = r->decision != NULL ? r->decision : "client_closed";
    request_release_slots(r);
    if (!r->suspended) {
        /* libmicrohttpd reads the body and will never read the end of the stream: a hung-up
           socket is an error it does see (EPOLLHUP), and it ends the connection. */
        shutdown(r->watch.fd, SHUT_RDWR);
        return;
    }
    if (r->forwarded)
        upstream_abort(&r->up);
    if (r->raw != NULL) {
        raw_response_cut(r->raw); /* part of the answer is out: nothing more can go */
        request_wake(r);
    } else if (r->phase == PHASE_RESPONDING)
        request_wake(r); /* the body reader sees the transfer cut short and ends */
    else
        request_set_pending(r, 499, respond_error("client_closed_request", &r->bytes_sent));
}

/* Suspends r's MHD connection until request_wake, watching for the client leaving. */
static void request_suspend(struct request *r)
{
    if (r->suspended || r->ctx->closing)
        return;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    client_watch_start(&r->watch, CLIENT_WAIT_SUSPENDED);
}

static enum MHD_Result queue_pending(struct request *r)
{
    struct MHD_Response *resp = r->pending;
    r->pending = NULL;
    r->phase = PHASE_RESPONDING;
    if (resp == NULL)
        return MHD_NO;
    r->status = r->pending_status; /* a refusal closed with a code is logged as the refusal */
    enum MHD_Result ret =
        r->ws_upgrade && r->ws == NULL && r->ctx->cfg->ws_refusal_close /* the proxy's own refusal */
            ? ws_refusal_queue(&(struct ws_refusal_env){ r->ctx->base, r->ctx->kick_mhd, r->ctx->kick_ctx }, r->conn,
                               r->headers, r->n_headers, r->decision, r->pending_status, resp, &r->ws_refusal)
            : MHD_queue_response(r->conn, r->pending_status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result queue_now(struct request *r, unsigned status, struct MHD_Response *resp)
{
    r->pending = resp;
    r->pending_status = status;
    return queue_pending(r);
}

/* ---- the model the gate reads ------------------------------------------------------ */

/* Every header field of the request in order, as the gate reads them: one pass copying the
 * pointers into one allocation sized by the screening pass's count (check_header).
 * Names and values stay MHD's, valid until the request completes. */
struct header_gather {
    struct gate_header *fields;
    size_t n, cap;
};

static enum MHD_Result gather_field(void *cls, enum MHD_ValueKind kind, const char *name, size_t name_size,
                                    const char *value, size_t value_size)
{
    struct header_gather *g = cls;
    (void)kind;
    if (g->n == g->cap)
        return MHD_NO; /* the head changed between the passes: it cannot, but never overrun */
    g->fields[g->n++] = (struct gate_header){
        .name = name, .name_len = name_size,
        .value = value != NULL ? value : "", .value_len = value != NULL ? value_size : 0,
    };
    return MHD_YES;
}

/* Fills r->headers with the n_fields fields the screening pass counted. False when memory
 * runs out. */
static bool gather_headers(struct request *r, size_t n_fields)
{
    if (n_fields == 0)
        return true;
    struct header_gather copy = { .fields = scratch_alloc(&r->scratch, n_fields * sizeof(struct gate_header)),
                                  .cap = n_fields };
    if (copy.fields == NULL)
        return false;
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, gather_field, &copy);
    r->headers = copy.fields;
    r->n_headers = copy.n;
    return true;
}

/* The request model the gate reads (gate.h), from r's head and connection. */
static void request_model(const struct request *r, struct gate_request *out)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *out = (struct gate_request){
        .method = r->method,
        .target = &r->target,
        .headers = r->headers,
        .n_headers = r->n_headers,
        .peer = ci != NULL ? ci->client_addr : NULL,
        .websocket = r->ws_upgrade,
        .query_key = r->query_key,
        .cfg = r->ctx->cfg,
    };
}

/* r's decided check for the RateLimit headers and the log; NULL when there is none. */
static const struct limiter_result *decided(const struct request *r)
{
    return r->have_verdict ? &r->verdict : NULL;
}

static void add_ratelimit_headers(const struct request *r, struct MHD_Response *resp)
{
    if (resp != NULL)
        respond_add_ratelimit_headers(r->ctx->cfg->headers, &r->gate, decided(r), resp);
}

/* The limit closest to running out, by the one rule the headers and the access log share:
 * for a refused request, the one that refused it. */
static const struct limit_verdict *rejecting_verdict(const struct request *r)
{
    const struct limit_verdict *over = respond_closest_verdict(&r->gate, decided(r));
    return over != NULL ? over : &r->verdict.verdicts[0];
}

/* ---- the upstream side: what forward.c and websocket.c tell the request ------------ */

/* The transfer is over and the slots are given back: the client side may end. */
static void finish_client_side(struct request *r)
{
    if (r->stashed != NULL) {
        deliver_stashed(r);
        return;
    }
    if (r->raw != NULL) {
        raw_response_pump(r->raw); /* the end may go now */
        return;
    }
    const struct upstream *u = &r->up;
    /* curl refuses some malformed heads itself (a field line without a colon) */
    if (u->bad_head || (!u->head_done && u->result == CURLE_WEIRD_SERVER_REPLY)) {
        request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error("bad_upstream_response", &r->bytes_sent));
    } else if (!u->head_done) {
        bool slow = u->timed_out || u->result == CURLE_OPERATION_TIMEDOUT;
        request_set_pending(r, slow ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_BAD_GATEWAY,
                            respond_error(slow ? "upstream_timeout" : "upstream_unavailable", &r->bytes_sent));
    } else if (u->reader_waiting) {
        request_wake(r);
    }
}

static void on_upstream_progress(void *owner)
{
    struct request *r = owner;
    if (r->raw != NULL)
        raw_response_pump(r->raw);
    else
        request_wake(r);
}

static void on_upstream_finished(void *owner)
{
    struct request *r = owner;
    give_upstream_place(r);
    if (!r->mhd_done)
        request_release_then(r, finish_client_side);
}

static void on_upstream_starved(void *owner)
{
    request_suspend(owner);
}

static bool upstream_waits_for_slots(void *owner)
{
    return request_release_pending(owner);
}

static const struct upstream_hooks upstream_hooks = {
    .head_in = on_upstream_progress,
    .body_in = on_upstream_progress,
    .finished = on_upstream_finished,
    .starved = on_upstream_starved,
    .slots_pending = upstream_waits_for_slots,
};

static void on_raw_over(void *owner)
{
    struct request *r = owner;
    if (r->forwarded)
        upstream_abort(&r->up); /* cut short: the client is gone or stopped reading */
    request_wake(r); /* MHD asks again and is told to close the connection */
}

static const struct raw_response_hooks raw_hooks = {
    .slots_pending = upstream_waits_for_slots,
    .over = on_raw_over,
};

static void add_raw_field(void *rr, const char *name, const char *value)
{
    raw_response_field(rr, name, value);
}

/* The upstream's head does not fit MHD's connection pool beside the request's: the proxy
 * writes the response on the socket itself (raw_response.h). False when it cannot. */
static bool respond_raw(struct request *r)
{
    struct upstream *u = &r->up;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return false;
    r->raw = raw_response_create(r->ctx->base, ci->connect_fd, u, (unsigned)u->status, r->ctx->cfg->upstream_timeout_ms,
                                 &raw_hooks, r);
    if (r->raw == NULL)
        return false;
    for (size_t i = 0; i < u->n_fields; i++)
        raw_response_field(r->raw, u->fields[i].name, u->fields[i].value);
    respond_ratelimit_fields(r->ctx->cfg->headers, &r->gate, decided(r), add_raw_field, r->raw);
    bool bodiless = strcmp(r->method, "HEAD") == 0 || u->status == 204 || u->status == 304;
    r->status = (unsigned)u->status;
    if (raw_response_send(r->raw, bodiless, u->content_length) < 0) {
        raw_response_free(r->raw);
        r->raw = NULL;
        r->status = 0;
        return false;
    }
    return true;
}

/* MHD asks for the response and the upstream's head is in: it becomes r->pending, or
 * r->stashed when a bodiless response must wait for the slots' release, or goes out
 * without MHD when its head is too big for MHD, or a 502. */
static void respond_from_upstream(struct request *r)
{
    r->response_made = true;
    struct upstream *u = &r->up;
    if (!upstream_head_fits(u, r->head_bytes)) {
        if (respond_raw(r))
            return;
        upstream_abort(u);
        r->pending = respond_error("upstream_unavailable", &r->bytes_sent);
        r->pending_status = MHD_HTTP_BAD_GATEWAY;
        return;
    }
    bool bodiless;
    struct MHD_Response *resp = upstream_response(u, strcmp(r->method, "HEAD") == 0, &bodiless);
    if (resp == NULL) {
        upstream_abort(u);
        r->pending = respond_error("upstream_unavailable", &r->bytes_sent);
        r->pending_status = MHD_HTTP_BAD_GATEWAY;
        return;
    }
    add_ratelimit_headers(r, resp);
    if (bodiless && request_release_pending(r)) {
        r->stashed = resp; /* complete as soon as sent: it waits for the release */
        r->stashed_status = (unsigned)u->status;
    } else {
        r->pending = resp;
        r->pending_status = (unsigned)u->status;
    }
}

/* The handshake's answer other than 101: the slots go back before it is sent. */
static void on_ws_answer(void *owner, unsigned status, struct MHD_Response *resp, uint64_t body_bytes)
{
    struct request *r = owner;
    give_upstream_place(r);
    r->bytes_sent = body_bytes;
    add_ratelimit_headers(r, resp);
    r->stashed = resp;
    r->stashed_status = status;
    request_release_then(r, deliver_stashed);
}

static void on_ws_fail(void *owner, unsigned status, const char *error_code)
{
    struct request *r = owner;
    give_upstream_place(r);
    r->stashed = respond_problem(status, error_code, &r->bytes_sent);
    r->stashed_status = status;
    request_release_then(r, deliver_stashed);
}

static void on_ws_switching(void *owner, struct MHD_Response *resp)
{
    struct request *r = owner;
    give_upstream_place(r);   /* the handshake is answered; an open tunnel is not in flight */
    /* The method and the header fields are libmicrohttpd's, in the connection's pool, which
     * the tunnel gives back (pool_trim_upgraded); the access line at its end still names the
     * method, and only a GET is upgraded (ws_is_upgrade). */
    ws_select_marker(resp, r->headers, r->n_headers);
    r->method = "GET";
    r->headers = NULL;
    r->n_headers = 0;
    add_ratelimit_headers(r, resp);
    r->refs++; /* the tunnel's, until on_ws_closed */
    request_set_pending(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

static void on_ws_release_slots(void *owner)
{
    request_release_slots(owner);
}

static void on_ws_closed(void *owner)
{
    request_unref(owner);
}

static bool ws_abandoned(void *owner)
{
    const struct request *r = owner;
    return r->client_gone || r->pending != NULL;
}

static const struct ws_hooks ws_hooks = {
    .answer = on_ws_answer,
    .fail = on_ws_fail,
    .switching = on_ws_switching,
    .release_slots = on_ws_release_slots,
    .closed = on_ws_closed,
    .abandoned = ws_abandoned,
};

/* The body is in: the upstream gets the request (or the WebSocket handshake). A failure
 * to start becomes a pending 502. */
static void start_upstream(struct request *r)
{
    struct request_context *ctx = r->ctx;
    struct gate_request model;
    request_model(r, &model);
    const struct gate_check *check = r->plan != NULL ? &r->gate : NULL;
    r->phase = PHASE_FORWARDING;
    if (r->ws_upgrade) {
        struct ws_handshake hs = { .model = &model, .check = check, .scratch = &r->scratch };
        r->ws = ws_start(ctx->ws, &hs, &ws_hooks, r);
        if (r->ws == NULL)
            request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error("upstream_unavailable", &r->bytes_sent));
        return;
    }
    upstream_init(&r->up, ctx->forwarder, &r->scratch, &upstream_hooks, r, &r->bytes_sent);
    struct upstream_request req = {
        .model = &model,
        .check = check,
        .body = r->body.data != NULL ? r->body.data + r->body.off : NULL,
        .body_len = r->body.len,
    };
    if (upstream_start(&r->up, &req) < 0)
        request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error("upstream_unavailable", &r->bytes_sent));
    else
        r->forwarded = true;
}

/* ---- the decision, at head time ---------------------------------------------------- */

/* Decided at head time: the body may come (MHD sends 100 Continue after this), and the
 * request is forwarded once it is in. Wakes the repeated first call when the decision came
 * from the store. */
static void admit(struct request *r)
{
    r->admitted = true;
    request_wake(r);
}

/* The store's answer (or its failure) made into the request's fate by gate_verdict; here
 * only what the gate cannot do: metrics, the rejection log, the response. */
static void apply_verdict(struct request *r, const struct limiter_result *result)
{
    struct request_context *ctx = r->ctx;
    if (r->store_started_ns > 0 && !result->remembered)
        metrics_observe_store(ctx->metrics, store_mono_ns() - r->store_started_ns);
    struct gate_outcome out;
    gate_verdict(&r->gate, r->ws_upgrade, result, ctx->cfg, &out);
    r->decision = out.decision;
    if (out.store_error)
        metrics_count_store_error(ctx->metrics);
    if (!out.store_error || out.local) {
        r->verdict = *result;
        r->have_verdict = true;
        r->lease_held = out.lease_held;
    }
    if (out.over_limit) {
        const struct limit_verdict *over = rejecting_verdict(r);
        r->limit_type = out.limit_type_name;
        metrics_count_limit_hit(ctx->metrics, out.limit_type, r->plan->name);
        if (log_enabled(LOG_LEVEL_WARN))
            log_rejection(ctx->rejection_warnings, r->user_id, r->plan->name, r->limit_type,
                          r->gate.rules[over - r->verdict.verdicts].id, over->limit - over->remaining, over->limit);
    }
    switch (out.action) {
    case GATE_FORWARD:
        admit(r);
        break;
    case GATE_UNAVAILABLE:
        give_upstream_place(r);
        request_set_pending(r, MHD_HTTP_SERVICE_UNAVAILABLE, respond_error(out.error_code, &r->bytes_sent));
        break;
    case GATE_LIMITED: {
        give_upstream_place(r);
        struct MHD_Response *resp = respond_limited(&r->gate, decided(r), &out, &r->bytes_sent);
        add_ratelimit_headers(r, resp);
        request_set_pending(r, MHD_HTTP_TOO_MANY_REQUESTS, resp);
        break;
    }
    }
}

static void on_verdict(void *arg, const struct limiter_result *result)
{
    struct request *r = arg;
    if (!r->mhd_done && !r->client_gone) {
        apply_verdict(r, result);
    } else if (result->status == LIMITER_DECIDED && result->allowed && r->gate.has_concurrency) {
        /* The client left while the store decided: the slot it was given goes back. */
        r->lease_held = true;
        request_release_slots(r);
    }
    request_unref(r);
}

/* Where a first call (or its repetition after the store answered) leaves the request. */
static enum MHD_Result after_decision(struct request *r)
{
    if (r->pending != NULL)
        return queue_pending(r); /* early: MHD closes the connection after it */
    if (r->admitted) {
        r->phase = PHASE_BODY;
        if (r->expects_body)
            client_watch_start(&r->watch, CLIENT_WAIT_BODY);
        return MHD_YES;
    }
    request_suspend(r);
    return MHD_YES;
}

/* The target normalised (request_target.h) into r->target, which exempt paths, routes and
 * the upstream all use. False when it is refused. */
static bool parse_target(struct request *r)
{
    size_t raw_len = strlen(r->raw_uri);
    size_t size = request_target_buffer_size(raw_len);
    char *out = scratch_alloc(&r->scratch, size);
    return out != NULL && request_target_parse(r->method, r->raw_uri, raw_len, out, size, &r->target) == 0 &&
           ws_auth_query_take_into(&r->target, r->ctx->cfg->key_query, &r->scratch, &r->query_key) == 0;
}

/* upstream_max_inflight: takes r's place among the requests in flight to the upstream, at
 * head time (so a shed request is answered before its body is read, with Connection: close,
 * and the upstream never sees more than the cap). False when it is shed: 503
 * upstream_saturated with Retry-After: 1 is then queued. Taken before the store is asked, so
 * a shed request counts against no limit; given back if the store refuses it. */
static bool take_upstream_place(struct request *r, const struct tier_plan *plan, enum MHD_Result *queued)
{
    int priority = plan != NULL ? plan->priority : UPSTREAM_PRIORITY_DEFAULT;
    if (upstream_cap_take(r->ctx->upstream_cap, priority, &r->upstream_place))
        return true;
    r->decision = "shed";
    metrics_count_shed(r->ctx->metrics, plan != NULL ? plan->name : NULL);
    struct MHD_Response *resp = respond_error("upstream_saturated", &r->bytes_sent);
    if (resp != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    *queued = queue_now(r, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
    return false;
}

/* The head is in, no body byte read: the gate authenticates and picks the limits, the
 * store checks them. A refusal is queued on this first call, so MHD sends it with
 * Connection: close and never reads the body; an admitted request goes on to PHASE_BODY.
 * When the store has to be asked, the connection is suspended here and MHD repeats the
 * first call once it is woken. */
static enum MHD_Result admit_or_refuse_head(struct request *r, size_t n_fields)
{
    struct request_context *ctx = r->ctx;
    if (!parse_target(r)) {
        r->decision = "malformed";
        return queue_now(r, MHD_HTTP_BAD_REQUEST, respond_error("bad_request_target", &r->bytes_sent));
    }
    if (!gather_headers(r, n_fields))
        return MHD_NO;
    r->ws_upgrade = ws_is_upgrade(r->method, r->headers, r->n_headers);

    struct gate_request model;
    request_model(r, &model);
    struct snapshot *snap = request_context_snapshot(ctx);
    struct gate_admission adm;
    switch (gate_admit(&model, snap, &adm)) {
    case GATE_EXEMPT: {
        enum MHD_Result queued;
        if (!take_upstream_place(r, NULL, &queued))
            return queued;
        r->decision = "exempt";
        r->admitted = true;
        return after_decision(r);
    }
    case GATE_REFUSE: {
        r->decision = adm.refusal.decision;
        struct MHD_Response *resp = respond_problem(adm.refusal.status, adm.refusal.error_code, &r->bytes_sent);
        if (resp != NULL && adm.refusal.www_authenticate)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        return queue_now(r, adm.refusal.status, resp);
    }
    case GATE_UNLIMITED:
    case GATE_CHECK:
        break;
    }
    r->snap = snapshot_ref(snap); /* the plan and user names live in it */
    r->gate = adm.check;
    r->plan = r->gate.plan;
    r->user_id = r->gate.user_id;
    enum MHD_Result queued;
    if (!take_upstream_place(r, r->plan, &queued))
        return queued;
    if (adm.action == GATE_UNLIMITED) {
        r->decision = "allowed";
        r->admitted = true;
        return after_decision(r);
    }

    r->phase = PHASE_CHECKING;
    r->refs++; /* the limiter's, until on_verdict */
    r->store_started_ns = store_mono_ns();
    int rc;
    if (r->gate.has_concurrency) {
        snprintf(r->lease_id, sizeof(r->lease_id), "%s:%d:%llu", ctx->instance_id, ctx->worker_index,
                 (unsigned long long)++ctx->lease_seq);
        rc = limiter_check_leased(ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, -1,
                                  r->lease_id, on_verdict, r);
    } else {
        rc = limiter_check(ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, -1,
                           on_verdict, r);
    }
    if (rc < 0) {
        r->refs--;
        struct limiter_result unavailable = { .status = LIMITER_UNAVAILABLE };
        apply_verdict(r, &unavailable);
    }
    return after_decision(r);
}

/* A chunked body has grown past max_body_bytes (a Content-Length one is refused at head
 * time). MHD queues a response only on the first or the last call, and reading the body to
 * its end is what the answer must not wait for: the 413 goes straight on the socket, with
 * Connection: close, and the connection ends once the client stops sending. */
static void refuse_in_body(struct request *r)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL)
        respond_send_closing(ci->connect_fd, MHD_HTTP_CONTENT_TOO_LARGE, "request_too_large");
    r->refused_in_body = true;
    r->refused_in_body_ms = store_mono_ms();
    r->status = MHD_HTTP_CONTENT_TOO_LARGE;
    r->admitted = false;
    bytebuf_free(&r->body);
    request_release_slots(r); /* never forwarded */
}

enum MHD_Result request_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **req_cls)
{
    struct request *r = *req_cls;
    (void)cls;
    (void)url; /* MHD's decoded copy: r->target, from the raw target, is what counts */
    if (r == NULL || r->ctx->closing)
        return MHD_NO; /* shutting down past the drain: MHD closes the connection */
    const struct proxy_config *cfg = r->ctx->cfg;

    switch (r->phase) {
    case PHASE_HEAD: {
        pool_trim_request_head(r->ctx->pool_trim, conn, method);
        r->method = method;
        r->phase = PHASE_BODY;
        if (r->head.refused_status != 0)
            return MHD_NO; /* answered on the socket already (request_head.h) */
        struct head_verdict hv;
        request_head_check(&r->head, conn, method, version, r->raw_uri, cfg->max_body_bytes, &hv);
        r->head_bytes = hv.pool_bytes;
        if (hv.status != 0) {
            /* Answered on this first call, so MHD closes the connection after it: nothing the
               client sent after a head like this is read as another request (RFC 9112 6.1). */
            r->decision = hv.decision;
            return queue_now(r, hv.status, respond_problem(hv.status, hv.error_code, &r->bytes_sent));
        }
        r->expects_body = hv.expects_body;
        return admit_or_refuse_head(r, hv.fields);
    }
    case PHASE_CHECKING:
        /* The first call again, after the store answered (or a spurious wake-up). */
        if (r->pending == NULL && !r->admitted) {
            request_suspend(r);
            return MHD_YES;
        }
        return after_decision(r);
    case PHASE_BODY:
        if (*upload_data_size > 0) {
            if (r->refused_in_body) {
                *upload_data_size = 0;
                /* what the client still sends after the answer is dropped for a while */
                return store_mono_ms() - r->refused_in_body_ms < REFUSED_LINGER_MS ? MHD_YES : MHD_NO;
            }
            if ((int64_t)(r->body.len + *upload_data_size) > cfg->max_body_bytes) {
                refuse_in_body(r);
            } else if (bytebuf_append(&r->body, upload_data, *upload_data_size) < 0) {
                return MHD_NO;
            }
            *upload_data_size = 0;
            return MHD_YES;
        }
        client_watch_stop(&r->watch);
        if (r->refused_in_body)
            return MHD_NO; /* answered already: MHD closes the connection */
        start_upstream(r);
        if (r->pending != NULL)
            return queue_pending(r);
        request_suspend(r);
        return MHD_YES;
    case PHASE_FORWARDING:
        if (r->forwarded && r->up.head_done && !r->response_made && r->pending == NULL)
            respond_from_upstream(r);
        if (r->raw != NULL) {
            if (raw_response_over(r->raw))
                return MHD_NO; /* written without MHD: the connection closes */
            request_suspend(r);
            return MHD_YES;
        }
        if (r->pending != NULL)
            return queue_pending(r);
        request_suspend(r);
        return MHD_YES;
    case PHASE_RESPONDING:
        break;
    }
    return MHD_YES;
}

/* ---- the end ----------------------------------------------------------------------- */

/* Metrics and the access log line, once the request is over. */
static void count_and_log(struct request *r)
{
    struct request_context *ctx = r->ctx;
    const char *plan = r->plan != NULL ? r->plan->name : NULL;
    metrics_count_request(ctx->metrics, plan, r->status);
    if (ctx->access_log == NULL)
        return;
    char client[64] = "";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci != NULL && ci->client_addr != NULL)
        sockaddr_to_text(ci->client_addr, client, sizeof(client));
    struct access_entry e = {
        .time_unix_ms = store_realtime_ms(),
        .decision_unix_ms = r->have_verdict && r->verdict.status == LIMITER_DECIDED ? r->verdict.now_ms : 0,
        .client = client,
        .method = r->method,
        .path = r->raw_uri,
        .path_key_query = ctx->cfg->key_query,
        .status = r->status,
        .user = r->plan != NULL ? r->user_id : NULL,
        .plan = plan,
        .decision = r->decision != NULL ? r->decision : "error",
        .upstream_ms = r->ws != NULL ? ws_upstream_ms(r->ws) : r->forwarded ? r->up.waited_ms : -1,
        .upstream_error = r->ws != NULL ? ws_upstream_error(r->ws) : r->forwarded ? upstream_failure(&r->up) : NULL,
        .total_ms = store_mono_ms() - r->started_ms,
        .bytes_sent = r->bytes_sent,
    };
    if (r->have_verdict && r->verdict.status == LIMITER_DECIDED && r->verdict.n > 0) {
        /* the same limit the draft and x headers describe */
        const struct limit_verdict *closest = rejecting_verdict(r);
        e.has_limit = true;
        e.limit = closest->limit;
        e.remaining = closest->remaining;
        if (!r->verdict.allowed) { /* closest is then one that refused */
            e.limit_type = r->limit_type != NULL ? r->limit_type : "http";
            e.current_count = closest->limit - closest->remaining;
        }
    }
    access_log_write(ctx->access_log, &e);
}

/* A request whose head was read and that ends with no answer is logged as nginx logs it:
 * 408 when libmicrohttpd timed the client out, else 499, the client went away. */
static void note_unanswered(struct request *r, enum MHD_RequestTerminationCode toe)
{
    bool timed_out = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED;
    r->status = timed_out ? MHD_HTTP_REQUEST_TIMEOUT : 499;
    if (r->decision == NULL)
        r->decision = timed_out ? "client_timeout" : "client_closed";
}

void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    struct request_context *ctx = cls;
    pool_trim_request_done(ctx->pool_trim, conn);
    struct request *r = *req_cls;
    if (r == NULL)
        return;
    *req_cls = NULL;
    r->mhd_done = true;
    client_watch_stop(&r->watch); /* MHD closes the socket */
    if (r->forwarded)
        upstream_abort(&r->up);
    if (r->raw != NULL)
        raw_response_cut(r->raw); /* MHD closes the socket */
    bool tunnel_holds_slots = false;
    if (r->ws != NULL) {
        bool upgrade_missed;
        tunnel_holds_slots = ws_connection_done(r->ws, &upgrade_missed);
        if (upgrade_missed) {
            r->status = 499; /* logged as nginx does: the client closed before its answer went out */
            r->decision = "client_closed";
        }
    }
    if (!tunnel_holds_slots)
        request_release_slots(r);
    if (r->status == 0 && r->method != NULL && !ctx->closing)
        note_unanswered(r, toe);
    if (r->status != 0)
        count_and_log(r);
    request_unref(r);
}
