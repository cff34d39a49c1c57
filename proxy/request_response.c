/* A request's answer (request_response.h): pending, stashed and their statuses in struct
 * request (request_state.h). A request has at most one pending response: another, or one
 * set once libmicrohttpd is done with the request, is destroyed at once, so the first
 * decision stands; a queued one is destroyed once libmicrohttpd holds it. A stashed
 * response is queued only once the request's slots are back. */
#include "proxy/request_response.h"

#include <string.h>
#include <strings.h>

#include "proxy/access_log.h"
#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/raw_response.h"
#include "proxy/request_slots.h"
#include "proxy/respond.h"
#include "proxy/websocket.h"
#include "proxy/ws_auth.h"
#include "proxy/ws_refusal.h"
#include "store/clock.h"

/* ---- queueing ---------------------------------------------------------------------- */

void request_set_pending(struct request *r, unsigned status, struct MHD_Response *response)
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

void request_deliver_stashed(struct request *r)
{
    struct MHD_Response *resp = r->stashed;
    r->stashed = NULL;
    request_set_pending(r, r->stashed_status, resp);
}

enum MHD_Result request_queue_pending(struct request *r)
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

enum MHD_Result request_queue_now(struct request *r, unsigned status, struct MHD_Response *resp)
{
    r->pending = resp;
    r->pending_status = status;
    return request_queue_pending(r);
}

/* The client waits for 100 Continue, which libmicrohttpd sends (need_100_continue in
 * connection.c of 0.9.75: HTTP/1.1 and this value, a body or not) unless an answer is
 * queued on the first call. */
static bool waits_for_continue(const struct request *r)
{
    const char *expect = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return expect != NULL && strcasecmp(expect, "100-continue") == 0;
}

enum MHD_Result request_queue_refusal(struct request *r)
{
    if (r->expects_body || waits_for_continue(r))
        return request_queue_pending(r);
    r->phase = PHASE_BODY; /* its last call, next in this same run, queues it */
    return MHD_YES;
}

enum MHD_Result request_refuse(struct request *r, unsigned status, struct MHD_Response *resp)
{
    if (resp == NULL)
        return MHD_NO; /* out of memory: the connection closes */
    r->pending = resp;
    r->pending_status = status;
    return request_queue_refusal(r);
}

/* ---- RateLimit headers ------------------------------------------------------------- */

const struct limiter_result *request_decided(const struct request *r)
{
    return r->have_verdict ? &r->verdict : NULL;
}

void request_add_ratelimit_headers(const struct request *r, struct MHD_Response *resp)
{
    if (resp != NULL)
        respond_add_ratelimit_headers(r->ctx->cfg->headers, &r->gate, request_decided(r), resp);
}

const struct limit_verdict *request_rejecting_verdict(const struct request *r)
{
    const struct limit_verdict *over = respond_closest_verdict(&r->gate, request_decided(r));
    return over != NULL ? over : &r->verdict.verdicts[0];
}

/* ---- the upstream's answer -------------------------------------------------------- */

void request_finish_client_side(struct request *r)
{
    if (r->stashed != NULL) {
        request_deliver_stashed(r);
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

static void on_raw_over(void *owner)
{
    struct request *r = owner;
    if (r->forwarded)
        upstream_abort(&r->up); /* cut short: the client is gone or stopped reading */
    request_wake(r); /* MHD asks again and is told to close the connection */
}

static const struct raw_response_hooks raw_hooks = {
    .slots_pending = request_waits_for_slots,
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
    respond_ratelimit_fields(r->ctx->cfg->headers, &r->gate, request_decided(r), add_raw_field, r->raw);
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

void request_respond_from_upstream(struct request *r)
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
    request_add_ratelimit_headers(r, resp);
    if (bodiless && request_release_pending(r)) {
        r->stashed = resp; /* complete as soon as sent: it waits for the release */
        r->stashed_status = (unsigned)u->status;
    } else {
        r->pending = resp;
        r->pending_status = (unsigned)u->status;
    }
}

void request_ws_answer(void *owner, unsigned status, struct MHD_Response *resp, uint64_t body_bytes)
{
    struct request *r = owner;
    request_give_upstream_place(r);
    r->bytes_sent = body_bytes;
    request_add_ratelimit_headers(r, resp);
    r->stashed = resp;
    r->stashed_status = status;
    request_release_then(r, request_deliver_stashed);
}

void request_ws_fail(void *owner, unsigned status, const char *error_code)
{
    struct request *r = owner;
    request_give_upstream_place(r);
    r->stashed = respond_problem(status, error_code, &r->bytes_sent);
    r->stashed_status = status;
    request_release_then(r, request_deliver_stashed);
}

void request_ws_switching(void *owner, struct MHD_Response *resp)
{
    struct request *r = owner;
    request_give_upstream_place(r);   /* the handshake is answered; an open tunnel is not in flight */
    /* The method and the header fields are libmicrohttpd's, in the connection's pool, which
     * the tunnel gives back (pool_trim_upgraded); the access line at its end still names the
     * method, and only a GET is upgraded (ws_is_upgrade). */
    ws_select_marker(resp, r->headers, r->n_headers);
    r->method = "GET";
    r->headers = NULL;
    r->n_headers = 0;
    request_add_ratelimit_headers(r, resp);
    r->refs++; /* the tunnel's, until on_ws_closed */
    request_set_pending(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

/* ---- the end ----------------------------------------------------------------------- */

void request_count_and_log(struct request *r)
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
        const struct limit_verdict *closest = request_rejecting_verdict(r);
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

void request_note_unanswered(struct request *r, enum MHD_RequestTerminationCode toe)
{
    bool timed_out = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED;
    r->status = timed_out ? MHD_HTTP_REQUEST_TIMEOUT : 499;
    if (r->decision == NULL)
        r->decision = timed_out ? "client_timeout" : "client_closed";
}
