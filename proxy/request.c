#include "proxy/request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "proxy/access_log.h"
#include "proxy/asan_poison.h"
#include "proxy/config.h"
#include "proxy/metrics.h"
#include "proxy/forward.h"
#include "proxy/head_screen.h"
#include "proxy/http_token.h"
#include "proxy/netaddr.h"
#include "proxy/respond.h"
#include "proxy/websocket.h"
#include "proxy/worker.h"
#include "store/clock.h"
#include "tiers/plan_rules.h"

/* A suspension shorter than this ends before a departed client could matter; watching
 * every request's socket would cost two epoll_ctl calls each. */
#define CLOSE_WATCH_DELAY_MS 50

/* Freed requests kept per worker: a request is a 2 KiB calloc, and one that size goes
 * through malloc's slow path (consolidation) every time. */
#define REQUEST_POOL_MAX 256


int bytebuf_append(struct bytebuf *b, const void *src, size_t n)
{
    if (b->off > 0 && b->off + b->len + n > b->cap) {
        memmove(b->data, b->data + b->off, b->len);
        b->off = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return -ENOMEM;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->off + b->len, src, n);
    b->len += n;
    return 0;
}

void bytebuf_consume(struct bytebuf *b, size_t n)
{
    b->off += n;
    b->len -= n;
    if (b->len == 0)
        b->off = 0;
}

void bytebuf_free(struct bytebuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static void arm_close_watch(evutil_socket_t fd, short what, void *arg);

/* A zeroed request, from the pool when it has one; its scratch is kept. */
static struct request *request_take(struct worker *w)
{
    struct request *r = SLIST_FIRST(&w->request_pool);
    if (r == NULL)
        return calloc(1, sizeof(*r));
    ASAN_UNPOISON_MEMORY_REGION(r, sizeof(*r));
    SLIST_REMOVE_HEAD(&w->request_pool, pooled);
    w->n_request_pool--;
    struct scratch kept = r->scratch;
    memset(r, 0, sizeof(*r));
    r->scratch = kept;
    return r;
}

static void request_put_back(struct worker *w, struct request *r)
{
    if (w->n_request_pool >= REQUEST_POOL_MAX) {
        scratch_free(&r->scratch);
        free(r);
        return;
    }
    scratch_reset(&r->scratch);
    SLIST_INSERT_HEAD(&w->request_pool, r, pooled); /* writes r alone: the others stay poisoned */
    w->n_request_pool++;
    ASAN_POISON_MEMORY_REGION(r, sizeof(*r));
}

void request_pool_free(struct worker *w)
{
    struct request *r;
    while ((r = SLIST_FIRST(&w->request_pool)) != NULL) {
        ASAN_UNPOISON_MEMORY_REGION(r, sizeof(*r));
        SLIST_REMOVE_HEAD(&w->request_pool, pooled);
        scratch_free(&r->scratch);
        free(r);
    }
    w->n_request_pool = 0;
}

void *request_uri_logger(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct worker *w = cls;
    struct request *r = request_take(w);
    if (r == NULL)
        return NULL;
    r->raw_uri = scratch_strndup(&r->scratch, uri, strlen(uri));
    if (r->raw_uri == NULL) {
        request_put_back(w, r);
        return NULL;
    }
    r->w = w;
    r->conn = conn;
    r->refs = 1;
    evtimer_assign(&r->close_watch_delay, w->base, arm_close_watch, r);
    r->started_ms = store_mono_ms();
    r->resp_content_length = -1;
    r->upstream_ms = -1;
    w->active_requests++;
    LIST_INSERT_HEAD(&w->requests, r, live);
    return r;
}

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

void request_release_then(struct request *r, void (*then)(struct request *r))
{
    if (!r->lease_held) {
        then(r);
        return;
    }
    r->lease_held = false;
    r->release_in_flight = true;
    r->after_release = then;
    r->refs++; /* until on_released */
    limiter_release_notify(r->w->limiter, r->subject, strlen(r->subject), r->rules, r->n_checked, r->lease_id,
                           on_released, r);
}

bool request_release_pending(const struct request *r)
{
    return r->lease_held || r->release_in_flight;
}

void request_release_slots(struct request *r)
{
    if (!r->lease_held)
        return;
    r->lease_held = false;
    limiter_release(r->w->limiter, r->subject, strlen(r->subject), r->rules, r->n_checked, r->lease_id);
}

void request_unref(struct request *r)
{
    if (--r->refs > 0)
        return;
    request_release_slots(r);
    evtimer_del(&r->close_watch_delay);
    if (r->close_watch != NULL)
        event_free(r->close_watch);
    ws_release(r);
    forward_release(r);
    if (r->pending != NULL)
        MHD_destroy_response(r->pending);
    if (r->stashed != NULL)
        MHD_destroy_response(r->stashed);
    if (r->snap != NULL)
        snapshot_unref(r->snap);
    bytebuf_free(&r->body);
    r->w->active_requests--;
    LIST_REMOVE(r, live);
    request_put_back(r->w, r);
}

void request_wake(struct request *r)
{
    if (r->mhd_done)
        return;
    r->reader_waiting = false;
    if (r->suspended) {
        r->suspended = false;
        evtimer_del(&r->close_watch_delay);
        if (r->close_watch != NULL)
            event_del(r->close_watch);
        MHD_resume_connection(r->conn);
    }
    worker_kick_mhd(r->w);
}

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

/* MHD does not notice a client that leaves while its connection is suspended: without
 * this, a slot would stay taken until the upstream answered. */
static void on_client_closed(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    if (r->mhd_done || r->client_gone)
        return;
    if (!(what & EV_CLOSED)) {
        /* Readable: a reset or an orderly close reads as gone; a pipelined request does
         * not, and is left for MHD (this one-shot watch ends here, so it cannot spin). */
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
            return;
    }
    r->client_gone = true;
    r->decision = r->decision != NULL ? r->decision : "client_closed";
    request_release_slots(r);
    forward_abort(r);
    if (r->phase == PHASE_RESPONDING)
        request_wake(r); /* the body reader sees the transfer cut short and ends */
    else
        request_set_pending(r, 499, respond_error(r, "client_closed_request"));
}

static void arm_close_watch(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    (void)fd;
    (void)what;
    if (!r->suspended || r->mhd_done)
        return;
    if (r->close_watch == NULL) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci != NULL)
            r->close_watch = event_new(r->w->base, ci->connect_fd, EV_READ | EV_CLOSED, on_client_closed, r);
    }
    if (r->close_watch != NULL)
        event_add(r->close_watch, NULL);
}

void request_suspend(struct request *r)
{
    if (r->suspended || r->w->closing)
        return;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    struct timeval delay = store_ms_to_timeval(CLOSE_WATCH_DELAY_MS);
    evtimer_add(&r->close_watch_delay, &delay);
}

static enum MHD_Result queue_pending(struct request *r)
{
    struct MHD_Response *resp = r->pending;
    r->pending = NULL;
    r->phase = PHASE_RESPONDING;
    if (resp == NULL)
        return MHD_NO;
    r->status = r->pending_status;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->pending_status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result queue_now(struct request *r, unsigned status, struct MHD_Response *resp)
{
    r->pending = resp;
    r->pending_status = status;
    return queue_pending(r);
}

static enum MHD_Result reject_unauthorized(struct request *r, const char *code)
{
    r->decision = "unauthenticated";
    struct MHD_Response *resp = respond_error(r, code);
    if (resp != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return queue_now(r, MHD_HTTP_UNAUTHORIZED, resp);
}

/* The API key the client presented, or NULL. */
static const char *presented_key(struct request *r, size_t *plen)
{
    const struct proxy_config *cfg = r->w->cfg;
    const char *value = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, cfg->key_header);
    if (value == NULL)
        return NULL;
    if (strcasecmp(cfg->key_header, "Authorization") == 0) {
        if (strncasecmp(value, "Bearer", 6) != 0 || (value[6] != ' ' && value[6] != '\t'))
            return NULL;
        value += 6;
    }
    while (*value == ' ' || *value == '\t')
        value++;
    size_t len = strlen(value);
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len == 0)
        return NULL;
    *plen = len;
    return value;
}

/* The client's address: the peer, or, when the peer is a trusted proxy, the right-most
 * address of X-Forwarded-For that is not itself a trusted proxy. */
static void client_address(struct request *r, char *buf, size_t buflen)
{
    const struct proxy_config *cfg = r->w->cfg;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    buf[0] = '\0';
    if (ci == NULL || ci->client_addr == NULL)
        return;
    sockaddr_to_text(ci->client_addr, buf, buflen);
    if (!cidr_match_sockaddr(cfg->trusted_proxies, cfg->n_trusted_proxies, ci->client_addr))
        return;
    const char *xff = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Forwarded-For");
    if (xff == NULL)
        return;
    const char *end = xff + strlen(xff);
    while (end > xff) {
        const char *start = end;
        while (start > xff && start[-1] != ',')
            start--;
        const char *a = start, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a && (size_t)(b - a) < buflen) {
            memcpy(buf, a, (size_t)(b - a));
            buf[b - a] = '\0';
            if (!cidr_match_text(cfg->trusted_proxies, cfg->n_trusted_proxies, a, (size_t)(b - a)))
                return;
        }
        end = start > xff ? start - 1 : xff;
    }
}

/* The limit closest to running out, by the one rule the headers and the access log share:
 * for a refused request, the one that refused it. */
static const struct limit_verdict *rejecting_verdict(const struct request *r)
{
    const struct limit_verdict *over = respond_closest_verdict(r);
    return over != NULL ? over : &r->verdict.verdicts[0];
}

static void start_upstream(struct request *r)
{
    if (r->ws_upgrade)
        ws_start(r);
    else
        forward_start(r);
}

static void apply_verdict(struct request *r, const struct limiter_result *result)
{
    struct worker *w = r->w;
    const struct proxy_config *cfg = w->cfg;
    if (r->store_started_ns > 0 && !result->remembered)
        metrics_observe_store(w->metrics, store_mono_ns() - r->store_started_ns);
    if (result->status != LIMITER_DECIDED) {
        metrics_count_store_error(w->metrics);
        r->decision = "store_unavailable";
        bool has_rate = false;
        for (size_t i = 0; i < r->n_checked; i++)
            has_rate |= r->rules[i].algorithm != LIMIT_CONCURRENCY;
        bool open = (!has_rate || cfg->rate_fail_open) && (!r->has_concurrency || cfg->concurrency_fail_open);
        if (open)
            start_upstream(r);
        else
            request_set_pending(r, MHD_HTTP_SERVICE_UNAVAILABLE, respond_error(r, "limiter_unavailable"));
        return;
    }
    r->verdict = *result;
    r->have_verdict = true;
    if (result->allowed) {
        r->lease_held = r->has_concurrency;
        r->decision = "allowed";
        start_upstream(r);
        return;
    }
    const struct limit_verdict *over = rejecting_verdict(r);
    bool rate_rejected = false;
    for (size_t i = 0; i < result->n; i++)
        rate_rejected |= !result->verdicts[i].allowed && r->rules[i].algorithm != LIMIT_CONCURRENCY;
    enum limit_type type = rate_rejected ? LIMIT_TYPE_HTTP
                           : r->ws_upgrade ? LIMIT_TYPE_WS_CONNECTION
                                           : LIMIT_TYPE_CONCURRENCY;
    static const char *const type_names[] = { "http", "concurrency", "ws_connection", "ws_message" };
    r->limit_type = type_names[type];
    metrics_count_limit_hit(w->metrics, type, r->plan->name);
    if (w->shared->log_warnings)
        log_rejection(w->shared->rejection_warnings, r->user_id, r->plan->name, r->limit_type,
                      r->rules[over - r->verdict.verdicts].id, over->limit - over->remaining, over->limit);
    if (r->plan->shadow) {
        r->decision = "shadow";
        start_upstream(r);
        return;
    }
    r->decision = "rejected";
    struct MHD_Response *resp = respond_limited(r, rate_rejected ? "rate_limit_exceeded" : "concurrency_limit_exceeded",
                                                respond_retry_after_s(r));
    if (resp != NULL)
        respond_add_ratelimit_headers(r, resp);
    request_set_pending(r, MHD_HTTP_TOO_MANY_REQUESTS, resp);
}

static void on_verdict(void *arg, const struct limiter_result *result)
{
    struct request *r = arg;
    if (!r->mhd_done && !r->client_gone) {
        apply_verdict(r, result);
    } else if (result->status == LIMITER_DECIDED && result->allowed && r->has_concurrency) {
        /* The client left while the store decided: the slot it was given goes back. */
        r->lease_held = true;
        request_release_slots(r);
    }
    request_unref(r);
}

static bool is_exempt(const struct proxy_config *cfg, const char *path)
{
    for (size_t i = 0; i < cfg->n_exempt_paths; i++)
        if (strncmp(path, cfg->exempt_paths[i], strlen(cfg->exempt_paths[i])) == 0)
            return true;
    return false;
}

/* The whole request is in: authenticate, check the limits, forward. */
static enum MHD_Result decide(struct request *r, const char *raw_path)
{
    struct worker *w = r->w;
    const struct proxy_config *cfg = w->cfg;
    r->ws_upgrade = ws_is_upgrade(r->conn, r->method);
    char normalized[4096];
    const char *path = tier_path_normalize(raw_path, normalized, sizeof(normalized));
    if (path == NULL)
        return queue_now(r, 414, respond_error(r, "uri_too_long"));

    if (is_exempt(cfg, path)) {
        r->exempt = true;
        r->decision = "exempt";
        start_upstream(r);
        goto started;
    }

    struct snapshot *snap = worker_snapshot(w);
    if (snap == NULL)
        return queue_now(r, MHD_HTTP_SERVICE_UNAVAILABLE, respond_error(r, "catalog_unavailable"));
    r->snap = snapshot_ref(snap);

    size_t key_len = 0;
    const char *key = presented_key(r, &key_len);
    if (key != NULL) {
        const struct tier_user *user = snapshot_find_key(r->snap, key, key_len);
        if (user == NULL)
            return reject_unauthorized(r, "invalid_api_key");
        r->plan = user->plan;
        r->user_id = user->id;
        snprintf(r->subject, sizeof(r->subject), "u:%s", user->id);
    } else if (cfg->anonymous_plan != NULL) {
        r->plan = snapshot_find_plan(r->snap, cfg->anonymous_plan);
        if (r->plan == NULL)
            return reject_unauthorized(r, "missing_api_key");
        char addr[64];
        client_address(r, addr, sizeof(addr));
        r->user_id = "anonymous";
        snprintf(r->subject, sizeof(r->subject), "ip:%s", addr);
    } else {
        return reject_unauthorized(r, "missing_api_key");
    }

    const struct tier_limit *ws = NULL;
    r->n_checked = tier_plan_rules(r->plan, r->method, path, cfg->lease_ttl_ms, r->rules, r->checked, &ws);
    if (ws != NULL && r->ws_upgrade) {
        r->has_ws_rule = true;
        r->ws_rule = ws->rule;
    }
    for (size_t i = 0; i < r->n_checked; i++)
        r->has_concurrency |= r->rules[i].algorithm == LIMIT_CONCURRENCY;
    if (r->n_checked == 0) {
        r->decision = "allowed";
        start_upstream(r);
        goto started;
    }

    r->phase = PHASE_CHECKING;
    r->refs++; /* the limiter's, until on_verdict */
    r->store_started_ns = store_mono_ns();
    int rc;
    if (r->has_concurrency) {
        snprintf(r->lease_id, sizeof(r->lease_id), "%s:%d:%llu", w->shared->instance_id, w->index,
                 (unsigned long long)++w->lease_seq);
        rc = limiter_check_leased(w->limiter, r->subject, strlen(r->subject), r->rules, r->n_checked, -1, r->lease_id,
                                  on_verdict, r);
    } else {
        rc = limiter_check(w->limiter, r->subject, strlen(r->subject), r->rules, r->n_checked, -1, on_verdict, r);
    }
    if (rc < 0) {
        r->refs--;
        struct limiter_result unavailable = { .status = LIMITER_UNAVAILABLE };
        apply_verdict(r, &unavailable);
    }
started:
    if (r->pending != NULL)
        return queue_pending(r);
    request_suspend(r);
    return MHD_YES;
}

/* What one pass over the request head finds wrong with it. */
struct head_check {
    size_t bytes;
    bool malformed;            /* a name that is no token, CR/LF/NUL in a value */
    const char *content_length;
    bool conflicting_length;   /* two Content-Length values that differ */
    bool transfer_encoding;
    bool unknown_coding;       /* a transfer coding other than chunked */
};

static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *name, size_t name_size,
                                    const char *value, size_t value_size)
{
    struct head_check *hc = cls;
    hc->bytes += name_size + value_size + 4;
    if (name_size == 0 || strlen(name) != name_size)
        hc->malformed = true;
    for (size_t i = 0; i < name_size && !hc->malformed; i++)
        if (!http_token_char((unsigned char)name[i]))
            hc->malformed = true;
    if (value != NULL) {
        /* A NUL shows as a value shorter than its size; CR and LF would end it upstream. */
        if (strlen(value) != value_size || memchr(value, '\r', value_size) || memchr(value, '\n', value_size))
            hc->malformed = true;
        if (strcasecmp(name, "Content-Length") == 0) {
            if (hc->content_length != NULL && strcmp(hc->content_length, value) != 0)
                hc->conflicting_length = true;
            hc->content_length = value;
        }
    }
    if (strcasecmp(name, "Transfer-Encoding") == 0) {
        hc->transfer_encoding = true;
        if (value == NULL || strcasecmp(value, "chunked") != 0)
            hc->unknown_coding = true;
    }
    return MHD_YES;
}

enum MHD_Result request_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **req_cls)
{
    struct request *r = *req_cls;
    if (r == NULL || r->w->closing)
        return MHD_NO; /* shutting down past the drain: MHD closes the connection */
    const struct proxy_config *cfg = r->w->cfg;

    switch (r->phase) {
    case PHASE_HEAD: {
        r->method = method;
        r->phase = PHASE_BODY;
        struct head_check hc = { .bytes = strlen(r->raw_uri) + strlen(method) };
        MHD_get_connection_values_n(conn, MHD_HEADER_KIND, check_header, &hc);
        if (hc.bytes > MAX_HEAD_BYTES)
            return queue_now(r, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, respond_error(r, "request_header_too_large"));
        /* Answered on this first call, so MHD closes the connection after it: nothing the
           client sent after a head like this is read as another request (RFC 9112 6.1). */
        if (hc.malformed || hc.conflicting_length || (hc.transfer_encoding && hc.content_length != NULL)) {
            r->decision = "malformed";
            return queue_now(r, MHD_HTTP_BAD_REQUEST, respond_error(r, "malformed_request"));
        }
        if (hc.unknown_coding) {
            r->decision = "malformed";
            return queue_now(r, MHD_HTTP_NOT_IMPLEMENTED, respond_error(r, "unsupported_transfer_coding"));
        }
        const char *cl = hc.content_length;
        if (cl != NULL) {
            char *end;
            errno = 0;
            long long n = strtoll(cl, &end, 10);
            if (errno == 0 && *end == '\0' && n > cfg->max_body_bytes)
                /* Answered before the body is read; MHD closes the connection after. */
                return queue_now(r, MHD_HTTP_CONTENT_TOO_LARGE, respond_error(r, "request_too_large"));
        }
        return MHD_YES;
    }
    case PHASE_BODY:
        if (*upload_data_size > 0) {
            if (!r->body_too_large) {
                if ((int64_t)(r->body.len + *upload_data_size) > cfg->max_body_bytes) {
                    r->body_too_large = true;
                    bytebuf_free(&r->body);
                } else if (bytebuf_append(&r->body, upload_data, *upload_data_size) < 0) {
                    return MHD_NO;
                }
            }
            *upload_data_size = 0;
            return MHD_YES;
        }
        if (r->body_too_large)
            return queue_now(r, MHD_HTTP_CONTENT_TOO_LARGE, respond_error(r, "request_too_large"));
        return decide(r, url);
    case PHASE_CHECKING:
    case PHASE_FORWARDING:
        if (r->phase == PHASE_FORWARDING && r->upstream_head_done && !r->response_made && r->pending == NULL)
            forward_respond(r);
        if (r->pending != NULL)
            return queue_pending(r);
        request_suspend(r);
        return MHD_YES;
    case PHASE_RESPONDING:
        break;
    }
    return MHD_YES;
}

/* Metrics and the access log line, once the request is over. */
static void account(struct request *r)
{
    struct worker *w = r->w;
    const char *plan = r->plan != NULL ? r->plan->name : NULL;
    metrics_count_request(w->metrics, plan, r->status);
    if (w->shared->access_log == NULL)
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
        .status = r->status,
        .user = r->plan != NULL ? r->user_id : NULL,
        .plan = plan,
        .decision = r->decision != NULL ? r->decision : "error",
        .upstream_ms = r->upstream_ms,
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
    access_log_write(w->shared->access_log, &e);
}

void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    struct request *r = *req_cls;
    if (r == NULL)
        return;
    *req_cls = NULL;
    r->mhd_done = true;
    forward_abort(r);
    if (!ws_connection_done(r))
        request_release_slots(r);
    if (r->status != 0)
        account(r);
    request_unref(r);
}
