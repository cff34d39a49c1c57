/* A request's life (request.h lists its stops): request.c owns struct request from the
 * worker's pool until it goes back there, and each worker's request_context (its live
 * requests, its pool). A suspended request is resumed by request_wake, which then kicks
 * the worker to run libmicrohttpd on its loop's next turn, never from the waking callback;
 * its slots go back at most once (request_slots.c). */
#include "proxy/request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "proxy/access_log.h"
#include "proxy/asan_poison.h"
#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/metrics.h"
#include "proxy/pool_trim.h"
#include "proxy/raw_response.h"
#include "proxy/rejection_log.h"
#include "proxy/request_response.h"
#include "proxy/request_slots.h"
#include "proxy/request_state.h"
#include "proxy/respond.h"
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

static void on_client_gone(void *arg);
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
    client_watch_init(&r->watch, ctx->base, ctx->watch_delay, ci != NULL ? ci->connect_fd : -1, on_client_gone, r);
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


void request_unref(struct request *r)
{
    if (--r->refs > 0)
        return;
    struct request_context *ctx = r->ctx;
    request_release_slots(r);
    request_give_upstream_place(r);
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

void request_wake(struct request *r)
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

void request_suspend(struct request *r)
{
    if (r->suspended || r->ctx->closing)
        return;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    client_watch_start(&r->watch, CLIENT_WAIT_SUSPENDED);
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

/* ---- the upstream side: what forward.c and websocket.c tell the request ------------ */

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
    request_give_upstream_place(r);
    if (!r->mhd_done)
        request_release_then(r, request_finish_client_side);
}

static void on_upstream_starved(void *owner)
{
    request_suspend(owner);
}


static const struct upstream_hooks upstream_hooks = {
    .head_in = on_upstream_progress,
    .body_in = on_upstream_progress,
    .finished = on_upstream_finished,
    .starved = on_upstream_starved,
    .slots_pending = request_waits_for_slots,
};

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
    .answer = request_ws_answer,
    .fail = request_ws_fail,
    .switching = request_ws_switching,
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
        const struct limit_verdict *over = request_rejecting_verdict(r);
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
        request_give_upstream_place(r);
        request_set_pending(r, MHD_HTTP_SERVICE_UNAVAILABLE, respond_error(out.error_code, &r->bytes_sent));
        break;
    case GATE_LIMITED: {
        request_give_upstream_place(r);
        struct MHD_Response *resp = respond_limited(&r->gate, request_decided(r), &out, &r->bytes_sent);
        request_add_ratelimit_headers(r, resp);
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
        return request_queue_refusal(r);
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
 * head time (so a shed request is answered before its body is read, and the upstream never
 * sees more than the cap). False when it is shed: 503
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
    *queued = request_refuse(r, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
    return false;
}

/* The head is in, no body byte read: the gate authenticates and picks the limits, the
 * store checks them. A refusal goes out before any body byte is read (request_queue_refusal:
 * with Connection: close when a body was announced, else keeping the connection); a target
 * refused (400) is queued on this first call and closes, as nginx closes after a 400. An
 * admitted request goes on to PHASE_BODY.
 * When the store has to be asked, the connection is suspended here and MHD repeats the
 * first call once it is woken. */
static enum MHD_Result admit_or_refuse_head(struct request *r, size_t n_fields)
{
    struct request_context *ctx = r->ctx;
    if (!parse_target(r)) {
        r->decision = "malformed";
        return request_queue_now(r, MHD_HTTP_BAD_REQUEST, respond_error("bad_request_target", &r->bytes_sent));
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
        return request_refuse(r, adm.refusal.status, resp);
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
    if (request_check_limits(r, on_verdict) < 0) {
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

/* The first call: the head is read whole. Screens it, then admits or refuses it. */
static enum MHD_Result handle_head(struct request *r, struct MHD_Connection *conn, const char *method,
                                   const char *version)
{
    pool_trim_request_head(r->ctx->pool_trim, conn, method);
    r->method = method;
    r->phase = PHASE_BODY;
    if (r->head.refused_status != 0)
        return MHD_NO; /* answered on the socket already (request_head.h) */
    struct head_verdict hv;
    request_head_check(&r->head, conn, method, version, r->raw_uri, r->ctx->cfg->max_body_bytes, &hv);
    r->head_bytes = hv.pool_bytes;
    if (hv.status != 0) {
        /* Answered on this first call, so MHD closes the connection after it: nothing the
           client sent after a head like this is read as another request (RFC 9112 6.1). */
        r->decision = hv.decision;
        return request_queue_now(r, hv.status, respond_problem(hv.status, hv.error_code, &r->bytes_sent));
    }
    r->expects_body = hv.expects_body;
    return admit_or_refuse_head(r, hv.fields);
}

/* A piece of the body: kept up to max_body_bytes, dropped once refused. */
static enum MHD_Result take_body(struct request *r, const char *upload_data, size_t *upload_data_size)
{
    if (r->refused_in_body) {
        *upload_data_size = 0;
        /* what the client still sends after the answer is dropped for a while */
        return store_mono_ms() - r->refused_in_body_ms < REFUSED_LINGER_MS ? MHD_YES : MHD_NO;
    }
    if ((int64_t)(r->body.len + *upload_data_size) > r->ctx->cfg->max_body_bytes) {
        refuse_in_body(r);
    } else if (bytebuf_append(&r->body, upload_data, *upload_data_size) < 0) {
        return MHD_NO;
    }
    *upload_data_size = 0;
    return MHD_YES;
}

/* The body has ended (the last call, with no data): forward, or answer what was kept. */
static enum MHD_Result body_done(struct request *r)
{
    client_watch_stop(&r->watch);
    if (r->refused_in_body)
        return MHD_NO; /* answered already: MHD closes the connection */
    if (r->pending != NULL || !r->admitted) /* a refusal kept for this last call, or the */
        return request_queue_pending(r);     /* 499 of a client that left meanwhile */
    start_upstream(r);
    if (r->pending != NULL)
        return request_queue_pending(r);
    request_suspend(r);
    return MHD_YES;
}

/* Called again while forwarding: answers once the upstream's head or a response is ready. */
static enum MHD_Result handle_forwarding(struct request *r)
{
    if (r->forwarded && r->up.head_done && !r->response_made && r->pending == NULL)
        request_respond_from_upstream(r);
    if (r->raw != NULL) {
        if (raw_response_over(r->raw))
            return MHD_NO; /* written without MHD: the connection closes */
        request_suspend(r);
        return MHD_YES;
    }
    if (r->pending != NULL)
        return request_queue_pending(r);
    request_suspend(r);
    return MHD_YES;
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

    switch (r->phase) {
    case PHASE_HEAD:
        return handle_head(r, conn, method, version);
    case PHASE_CHECKING:
        /* The first call again, after the store answered (or a spurious wake-up). */
        if (r->pending == NULL && !r->admitted) {
            request_suspend(r);
            return MHD_YES;
        }
        return after_decision(r);
    case PHASE_BODY:
        return *upload_data_size > 0 ? take_body(r, upload_data, upload_data_size) : body_done(r);
    case PHASE_FORWARDING:
        return handle_forwarding(r);
    case PHASE_RESPONDING:
        break;
    }
    return MHD_YES;
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
        request_note_unanswered(r, toe);
    if (r->status != 0)
        request_count_and_log(r);
    request_unref(r);
}

