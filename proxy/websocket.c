/* Handshakes and the relay (websocket.h says what this file owns; ws_tunnel.h the fields,
 * ws_close.c the end). A tunnel is on its context's list from ws_start until ws_free, and
 * holds a reference on the resolved upstreams it picked from, so a reload never frees its
 * address; getaddrinfo runs at create and reload only. Frames pass unchanged: a client
 * frame's head goes on only once whole and judged. At most TUNNEL_HIGH_WATER bytes queue
 * toward a side before the other is read no more. */
#include "proxy/websocket.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>

#include "proxy/access_log.h"
#include "proxy/config.h"
#include "proxy/http1.h"
#include "proxy/metrics.h"
#include "proxy/pool_trim.h"
#include "proxy/rejection_log.h"
#include "proxy/upstream_error.h"
#include "proxy/upstream_tls.h"
#include "proxy/ws_101.h"
#include "proxy/ws_close.h"
#include "proxy/ws_frame.h"
#include "proxy/ws_tunnel.h"
#include "store/clock.h"
#include "store/memory/local_limit.h"

#define MAX_HANDSHAKE_HEAD (16 * 1024)
#define MAX_REFUSAL_BODY (1024 * 1024)

static void upstreams_unref(struct ws_upstreams *set)
{
    if (set != NULL && --set->refs == 0)
        free(set);
}

/* True when value[0, len) holds "websocket", in any case. */
static bool mentions_websocket(const char *value, size_t len)
{
    static const char word[] = "websocket";
    const size_t wlen = sizeof(word) - 1;
    for (size_t i = 0; i + wlen <= len; i++)
        if (strncasecmp(value + i, word, wlen) == 0)
            return true;
    return false;
}

bool ws_is_upgrade(const char *method, const struct gate_header *headers, size_t n_headers)
{
    if (strcmp(method, "GET") != 0)
        return false;
    for (size_t i = 0; i < n_headers; i++)
        if (http1_name_is(headers[i].name, headers[i].name_len, "Upgrade"))
            return mentions_websocket(headers[i].value, headers[i].value_len); /* the first, as MHD's lookup */
    return false;
}

/* "http://host:port/anything" -> host and port (80, or 443 for https, when absent). */
static int split_url(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *p = strstr(url, "://");
    p = p != NULL ? p + 3 : url;
    const char *end = p + strcspn(p, "/?#");
    const char *colon = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (close == NULL)
            return -EINVAL;
        if ((size_t)(close - p - 1) >= hostlen)
            return -EINVAL;
        memcpy(host, p + 1, (size_t)(close - p - 1));
        host[close - p - 1] = '\0';
        colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        const char *host_end = colon != NULL ? colon : end;
        if ((size_t)(host_end - p) >= hostlen)
            return -EINVAL;
        memcpy(host, p, (size_t)(host_end - p));
        host[host_end - p] = '\0';
    }
    if (colon != NULL && colon + 1 < end) {
        if ((size_t)(end - colon - 1) >= portlen)
            return -EINVAL;
        memcpy(port, colon + 1, (size_t)(end - colon - 1));
        port[end - colon - 1] = '\0';
    } else {
        snprintf(port, portlen, "%s", upstream_is_https(url) ? "443" : "80");
    }
    return 0;
}

/* Resolves cfg's upstreams into ctx->upstreams: a handshake under way keeps the set it
 * started with. Returns 0 (a name that does not resolve leaves its reason in err), or
 * -ENOMEM, keeping the set in use. */
static int resolve_upstreams(struct ws_context *ctx, const struct proxy_config *cfg, char *err, size_t errlen)
{
    struct ws_upstreams *set = calloc(1, sizeof(*set) + cfg->n_upstreams * sizeof(set->addrs[0]));
    if (set == NULL)
        return -ENOMEM;
    set->refs = 1;
    set->n = cfg->n_upstreams;
    struct upstream_addr *addrs = set->addrs;
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        char host[256], port[16];
        if (split_url(cfg->upstreams[i], host, sizeof(host), port, sizeof(port)) < 0)
            continue;
        addrs[i].tls = upstream_is_https(cfg->upstreams[i]);
        snprintf(addrs[i].host, sizeof(addrs[i].host), "%s", host);
        snprintf(addrs[i].url, sizeof(addrs[i].url), "%s", cfg->upstreams[i]);
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
        if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL) {
            /* Not fatal: plain HTTP goes through curl, which resolves by itself. */
            snprintf(err, errlen, "cannot resolve upstream %s for WebSocket tunnels", cfg->upstreams[i]);
            continue;
        }
        memcpy(&addrs[i].addr, res->ai_addr, res->ai_addrlen);
        addrs[i].len = res->ai_addrlen;
        addrs[i].ok = true;
        freeaddrinfo(res);
    }
    upstreams_unref(ctx->upstreams);
    ctx->upstreams = set;
    return 0;
}

struct ws_context *ws_context_create(const struct ws_context_params *p, char *err, size_t errlen)
{
    struct ws_context *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    *ctx = (struct ws_context){
        .base = p->base, .cfg = p->cfg, .metrics = p->metrics, .rejection_warnings = p->rejection_warnings,
        .pool_trim = p->pool_trim, .kick_mhd = p->kick_mhd, .kick_ctx = p->kick_ctx,
    };
    LIST_INIT(&ctx->tunnels);
    if (resolve_upstreams(ctx, p->cfg, err, errlen) < 0) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

int ws_context_reload(struct ws_context *ctx, const struct proxy_config *cfg, char *err, size_t errlen)
{
    ctx->cfg = cfg;
    return resolve_upstreams(ctx, cfg, err, errlen);
}

void ws_context_destroy(struct ws_context *ctx)
{
    if (ctx == NULL)
        return;
    upstreams_unref(ctx->upstreams);
    upstream_tls_free(ctx->tls);
    free(ctx);
}

static void free_headers(struct ws_tunnel *t)
{
    for (size_t i = 0; i < t->n_headers; i++) {
        free(t->headers[i].name);
        free(t->headers[i].value);
    }
    free(t->headers);
    t->headers = NULL;
    t->n_headers = 0;
}


/* Over the message limit: close 1008 to both sides. The refused frame's head was not
 * forwarded, so the upstream's stream ends at a frame's end. */
static void refuse_message(struct ws_tunnel *t)
{
    metrics_count_limit_hit(t->ctx->metrics, LIMIT_HIT_WS_MESSAGE, t->plan_name);
    if (log_enabled(LOG_LEVEL_WARN) && t->plan_name != NULL)
        log_rejection(t->ctx->rejection_warnings, t->user_id, t->plan_name, "ws_message", t->ws_rule.id,
                      t->ws_rule.rate, t->ws_rule.rate);
    if (t->shadow)
        return; /* counted and reported; a shadow plan refuses nothing */
    ws_close_initiate(t, 1008, "message rate limit exceeded", false);
}

/* A bad frame: close 1002 to both sides, after the frames forwarded before it. */
static void protocol_error(struct ws_tunnel *t)
{
    ws_close_initiate(t, 1002, "protocol error", false);
}

/* Moves client bytes to the upstream, a frame at a time as far as heads go, payloads in
 * bulk. A partial frame head stays in the input until it is whole. */
static void pump_client(struct ws_tunnel *t, struct evbuffer *in)
{
    struct evbuffer *out = bufferevent_get_output(t->up);
    while (t->state == TUNNEL_OPEN) {
        size_t avail = evbuffer_get_length(in);
        if (avail == 0)
            break;
        if (t->frames.in_payload) {
            size_t take = t->frames.payload_left < avail ? (size_t)t->frames.payload_left : avail;
            evbuffer_remove_buffer(in, out, take);
            t->frames.payload_left -= take;
            if (t->frames.payload_left == 0)
                t->frames.in_payload = false;
            continue;
        }
        uint8_t head[14];
        if (avail < 2)
            break;
        evbuffer_copyout(in, head, 2);
        size_t need = 2 + ((head[1] & 0x7f) == 126 ? 2 : (head[1] & 0x7f) == 127 ? 8 : 0) + ((head[1] & 0x80) ? 4 : 0);
        if (avail < need)
            break;
        evbuffer_copyout(in, head, need);
        size_t consumed;
        struct ws_frame_info f;
        /* Client frames must be masked (RFC 6455 5.1). */
        if (ws_frame_read(&t->frames, head, need, &consumed, &f) != WS_FRAME || !f.masked) {
            protocol_error(t);
            return;
        }
        if (f.ends_message && t->messages != NULL &&
            !local_limit_check(t->messages, &t->ws_rule, store_realtime_ms(), NULL)) {
            refuse_message(t);
            if (t->state != TUNNEL_OPEN)
                return;
        }
        evbuffer_remove_buffer(in, out, need);
    }
    if (t->up != NULL && evbuffer_get_length(out) > TUNNEL_HIGH_WATER)
        bufferevent_disable(t->client, EV_READ);
}

static void on_client_read(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    ws_close_idle_arm(t);
    if (t->state == TUNNEL_OPEN)
        pump_client(t, in);
    else /* closing: what the client still sends, its close frame included, goes nowhere */
        evbuffer_drain(in, evbuffer_get_length(in));
}

static void on_up_open_read(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_CLOSING)
        ws_close_upstream_read(t);
    if (t->state != TUNNEL_OPEN)
        return;
    ws_close_idle_arm(t);
    struct evbuffer *out = bufferevent_get_output(t->client);
    ws_close_follow_upstream(t, bufferevent_get_input(bev));
    evbuffer_add_buffer(out, bufferevent_get_input(bev));
    if (evbuffer_get_length(out) > TUNNEL_HIGH_WATER)
        bufferevent_disable(t->up, EV_READ);
}

/* A side's output drained below the low-water mark: read the other side again. */
static void on_client_drained(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN && t->up != NULL)
        bufferevent_enable(t->up, EV_READ);
    ws_close_after_flush(t);
}

static void on_up_drained(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN && t->client != NULL)
        bufferevent_enable(t->client, EV_READ);
    ws_close_after_flush(t);
}

static void on_client_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        ws_close_client_gone(t); /* nothing queued for it can be delivered */
}

static void on_up_open_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (t->state == TUNNEL_OPEN)
            on_up_open_read(bev, t); /* what it sent before closing still goes to the client */
        ws_close_upstream_gone(t);
    }
}

static void on_upgraded(void *cls, struct MHD_Connection *connection, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct ws_tunnel *t = cls;
    t->urh = urh;
    t->client = bufferevent_socket_new(t->ctx->base, sock, 0);
    if (t->client == NULL || t->up == NULL || t->state != TUNNEL_WAIT_UPGRADE) {
        ws_close_finish(t);
        return;
    }
    t->state = TUNNEL_OPEN;
    t->counted = true;
    metrics_add_websockets(t->ctx->metrics, 1);
    bufferevent_setcb(t->client, on_client_read, on_client_drained, on_client_event, t);
    bufferevent_setcb(t->up, on_up_open_read, on_up_drained, on_up_open_event, t);
    bufferevent_setwatermark(t->client, EV_WRITE, TUNNEL_LOW_WATER, 0);
    bufferevent_setwatermark(t->up, EV_WRITE, TUNNEL_LOW_WATER, 0);
    bufferevent_set_timeouts(t->up, NULL, NULL);
    bufferevent_enable(t->client, EV_READ | EV_WRITE);
    bufferevent_enable(t->up, EV_READ | EV_WRITE);
    ws_close_idle_arm(t);
    if (extra_in_size > 0) {
        /* What the client sent with its handshake. A bufferevent keeps the end of its input
         * frozen (only its own reads add there): without the thaw the bytes were lost. */
        struct evbuffer *in = bufferevent_get_input(t->client);
        evbuffer_unfreeze(in, 0);
        int rc = evbuffer_add(in, extra_in, extra_in_size);
        evbuffer_freeze(in, 0);
        if (rc < 0) {
            ws_close_finish(t);
            return;
        }
    }
    /* extra_in lives in the pool: given back once it is copied */
    pool_trim_upgraded(t->ctx->pool_trim, connection);
    if (extra_in_size > 0)
        pump_client(t, bufferevent_get_input(t->client));
    /* Frames the upstream sent right after its 101. */
    if (t->state == TUNNEL_OPEN && evbuffer_get_length(bufferevent_get_input(t->up)) > 0)
        on_up_open_read(t->up, t);
}

/* Ends the handshake with an answer other than 101 (the owner gives the slot back before
 * it sends it, so the client's next attempt cannot meet it). Takes ownership of resp. */
static void answer_handshake(struct ws_tunnel *t, unsigned status, struct MHD_Response *resp, uint64_t body_bytes)
{
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    t->state = TUNNEL_CLOSED;
    t->hooks->answer(t->owner, status, resp, body_bytes);
}

static void fail_handshake(struct ws_tunnel *t, unsigned status, const char *code)
{
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    t->state = TUNNEL_CLOSED;
    t->hooks->fail(t->owner, status, code);
}

static int add_header(struct ws_tunnel *t, const char *name, size_t nlen, const char *value, size_t vlen)
{
    if (t->n_headers >= 128)
        return -E2BIG;
    struct ws_field *grown = realloc(t->headers, (t->n_headers + 1) * sizeof(*grown));
    if (grown == NULL)
        return -ENOMEM;
    t->headers = grown;
    char *n = strndup(name, nlen), *v = strndup(value, vlen);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        return -ENOMEM;
    }
    t->headers[t->n_headers].name = n;
    t->headers[t->n_headers].value = v;
    t->n_headers++;
    return 0;
}

/* Parses "HTTP/1.1 101 ...\r\nName: value\r\n...\r\n\r\n" with the rules curl's heads meet
 * (http1.h). Returns 0, -EINVAL, -ENOMEM, or -EPROTO for a 101 that is no WebSocket's
 * (ws_101.h). */
static int parse_head(struct ws_tunnel *t, char *head, size_t len)
{
    struct ws_101 seen = { 0 };
    char *line = head, *end = head + len;
    char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
    long status = eol != NULL ? http1_status_line(line, (size_t)(eol - line)) : 0;
    if (status == 0)
        return -EINVAL;
    t->status = status;
    t->body_need = -1;
    for (line = eol + 2; line < end; line = eol + 2) {
        eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (eol == NULL || eol == line)
            break;
        struct http1_field f;
        if (http1_field_line(line, (size_t)(eol - line), &f) < 0)
            return -EINVAL;
        if (http1_name_is(f.name, f.name_len, "Content-Length")) {
            int64_t n;
            if (http1_content_length(f.value, f.value_len, &n) < 0)
                return -EINVAL;
            t->body_need = n;
            continue;
        }
        if (status == 101)
            ws_101_field(&seen, &t->expect, f.name, f.name_len, f.value, f.value_len);
        bool keep = status == 101 ? !http1_name_is(f.name, f.name_len, "Connection")
                                  : !http1_is_hop_by_hop(f.name, f.name_len);
        if (keep && add_header(t, f.name, f.name_len, f.value, f.value_len) < 0)
            return -ENOMEM;
    }
    /* The upstream accepted compression: the client's compressed frames carry RSV1. */
    t->frames.per_message_deflate = seen.per_message_deflate;
    return status == 101 && !ws_101_valid(&seen) ? -EPROTO : 0;
}

/* The upstream refused the upgrade: its answer goes to the client as it is. */
static void relay_refusal(struct ws_tunnel *t, struct evbuffer *in)
{
    size_t len = evbuffer_get_length(in);
    if (t->body_need >= 0 && (int64_t)len > t->body_need)
        len = (size_t)t->body_need;
    void *body = malloc(len > 0 ? len : 1);
    if (body == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    evbuffer_remove(in, body, len);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    for (size_t i = 0; i < t->n_headers; i++)
        MHD_add_response_header(resp, t->headers[i].name, t->headers[i].value);
    answer_handshake(t, (unsigned)t->status, resp, len);
}

/* The upstream's answer head, once whole, parsed into t. Returns 1 when it is not whole
 * yet, 0 when parsed, -1 when the handshake failed (and was answered). */
static int read_answer_head(struct ws_tunnel *t, struct evbuffer *in)
{
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(in) <= MAX_HANDSHAKE_HEAD)
            return 1;
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return -1;
    }
    size_t head_len = (size_t)end.pos + 4;
    char *head = malloc(head_len);
    if (head == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return -1;
    }
    evbuffer_remove(in, head, head_len);
    int rc = parse_head(t, head, head_len);
    free(head);
    if (rc == -EPROTO || rc < 0 || t->status < 101) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, rc == -EPROTO ? "bad_upstream_response" : "upstream_unavailable");
        return -1;
    }
    return 0;
}

/* The upstream's 101: the client's own, with the upstream's headers; upstream frames held
 * until the client side is joined. */
static void switch_protocols(struct ws_tunnel *t, struct bufferevent *bev)
{
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, t);
    if (resp == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    for (size_t i = 0; i < t->n_headers; i++)
        MHD_add_response_header(resp, t->headers[i].name, t->headers[i].value);
    free_headers(t);
    bufferevent_disable(bev, EV_READ);
    t->state = TUNNEL_WAIT_UPGRADE;
    t->holds_owner = true; /* until ws_close_finish */
    t->hooks->switching(t->owner, resp);
}

static void on_up_handshake_read(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (t->state == TUNNEL_REFUSED_BODY) {
        if (t->body_need >= 0 && (int64_t)evbuffer_get_length(in) >= t->body_need)
            relay_refusal(t, in);
        else if (evbuffer_get_length(in) > MAX_REFUSAL_BODY)
            fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    if (read_answer_head(t, in) != 0)
        return;
    bufferevent_set_timeouts(bev, NULL, NULL);
    t->upstream_ms = (store_mono_ns() - t->started_ns) / 1000000;
    if (t->hooks->abandoned(t->owner)) {
        /* The client left while the upstream answered (its slot is back already, and its
         * 499 is on the way): nothing is relayed, and the upstream side closes now. */
        bufferevent_free(t->up);
        t->up = NULL;
        t->state = TUNNEL_CLOSED;
        return;
    }
    if (t->status != 101) {
        t->state = TUNNEL_REFUSED_BODY;
        on_up_handshake_read(bev, t);
        return;
    }
    switch_protocols(t, bev);
}

static void on_up_handshake_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & BEV_EVENT_CONNECTED) {
        t->state = TUNNEL_HANDSHAKE;
        struct timeval tv = store_ms_to_timeval(t->ctx->cfg->upstream_timeout_ms);
        bufferevent_set_timeouts(bev, &tv, &tv);
        return;
    }
    if (t->state == TUNNEL_REFUSED_BODY && (what & BEV_EVENT_EOF)) {
        relay_refusal(t, bufferevent_get_input(bev));
        return;
    }
    bool slow = (what & BEV_EVENT_TIMEOUT) != 0;
    t->upstream_error = upstream_error_of_socket(what, errno);
    if (!slow && t->state == TUNNEL_CONNECTING && t->upstream->tls) {
        unsigned long code = bufferevent_get_openssl_error(bev);
        upstream_tls_log_handshake_failure(bufferevent_openssl_get_ssl(bev), code, t->upstream->url);
    }
    fail_handshake(t, slow ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_BAD_GATEWAY,
                   slow ? "upstream_timeout" : "upstream_unavailable");
}

/* The upstream side of a tunnel: a plain socket, or TLS over one for an https upstream
 * (verified as curl verifies, see upstream_tls.h). NULL on failure. */
static struct bufferevent *upstream_bufferevent(struct ws_context *wc, const struct upstream_addr *ua)
{
    if (!ua->tls)
        return bufferevent_socket_new(wc->base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL_CTX *ctx;
    char err[256];
    if (upstream_tls_context(&wc->tls, wc->cfg, &ctx, err, sizeof(err)) < 0) {
        log_say(LOG_LEVEL_ERROR, "upstream %s: WebSocket TLS: %s", ua->url, err);
        return NULL;
    }
    SSL *ssl = upstream_tls_ssl_new(ctx, ua->host);
    if (ssl == NULL)
        return NULL;
    struct bufferevent *bev = bufferevent_openssl_socket_new(wc->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                             BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    /* An upstream that closes without close_notify ends the tunnel like a plain EOF. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

/* The handshake's header lines, as gate_upstream_headers gives them, into the upstream's
 * output. */
struct handshake_lines {
    struct evbuffer *out;
    struct scratch *scratch;
};

static int emit_line(void *arg, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct handshake_lines *h = arg;
    return evbuffer_add_printf(h->out, "%.*s:%s%.*s\r\n", (int)name_len, name, value_len > 0 ? " " : "",
                               (int)value_len, value) < 0 ? -ENOMEM : 0;
}

static void *alloc_line(void *arg, size_t n)
{
    struct handshake_lines *h = arg;
    return scratch_alloc(h->scratch, n);
}

struct ws_tunnel *ws_start(struct ws_context *ctx, const struct ws_handshake *hs, const struct ws_hooks *hooks,
                           void *owner)
{
    const struct proxy_config *cfg = ctx->cfg;
    struct ws_tunnel *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ctx = ctx;
    LIST_INSERT_HEAD(&ctx->tunnels, t, all);
    t->hooks = hooks;
    t->owner = owner;
    t->state = TUNNEL_CONNECTING;
    t->upstream_ms = -1;
    t->started_ns = store_mono_ns();
    ws_frame_reader_init(&t->frames);
    ws_101_expect_from(&t->expect, hs->model->headers, hs->model->n_headers);
    t->timer = ws_close_timer_create(t);
    const struct gate_check *check = hs->check;
    if (check != NULL) {
        t->plan_name = check->plan->name;
        t->user_id = check->user_id;
        t->shadow = check->plan->shadow;
        if (check->has_ws_rule) {
            t->ws_rule = check->ws_rule;
            t->messages = local_limit_create();
        }
    }
    size_t pick = ctx->next++ % cfg->n_upstreams;
    t->resolved = ctx->upstreams;
    t->resolved->refs++;
    const struct upstream_addr *ua = pick < t->resolved->n ? &t->resolved->addrs[pick] : NULL;
    if (t->timer == NULL || (check != NULL && check->has_ws_rule && t->messages == NULL) || ua == NULL || !ua->ok) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return t;
    }
    t->upstream = ua;
    t->up = upstream_bufferevent(ctx, ua);
    if (t->up == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return t;
    }
    struct evbuffer *out = bufferevent_get_output(t->up);
    struct handshake_lines lines = { .out = out, .scratch = hs->scratch };
    struct gate_header_sink sink = { .emit = emit_line, .alloc = alloc_line, .ctx = &lines };
    if (evbuffer_add_printf(out, "GET %s HTTP/1.1\r\n", hs->model->target->forward) < 0 ||
        gate_upstream_headers(hs->model, check, &sink) < 0 || evbuffer_add(out, "\r\n", 2) < 0) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return t;
    }
    bufferevent_setcb(t->up, on_up_handshake_read, NULL, on_up_handshake_event, t);
    struct timeval ct = store_ms_to_timeval(cfg->connect_timeout_ms);
    bufferevent_set_timeouts(t->up, &ct, &ct);
    bufferevent_enable(t->up, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(t->up, (struct sockaddr *)&ua->addr, (int)ua->len) < 0)
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
    return t;
}

void ws_close_all(struct ws_context *ctx)
{
    struct ws_tunnel *next;
    for (struct ws_tunnel *t = LIST_FIRST(&ctx->tunnels); t != NULL; t = next) {
        next = LIST_NEXT(t, all); /* closing may free t */
        if (t->state == TUNNEL_OPEN && t->client != NULL)
            ws_close_initiate(t, 1001, "going away", t->frames.in_payload);
        else if (t->state == TUNNEL_WAIT_UPGRADE) {
            ws_close_finish(t);
        }
    }
}

bool ws_connection_done(struct ws_tunnel *t, bool *upgrade_missed)
{
    *upgrade_missed = false;
    /* When the 101 went out, MHD called on_upgraded first, and calls this only once the
     * tunnel closed its side: still waiting means the upgrade will never come. */
    if (t->state == TUNNEL_WAIT_UPGRADE) {
        *upgrade_missed = true;
        ws_close_finish(t);
    }
    return t->state == TUNNEL_OPEN || t->state == TUNNEL_CLOSING;
}

int64_t ws_upstream_ms(const struct ws_tunnel *t)
{
    return t->upstream_ms;
}

const char *ws_upstream_error(const struct ws_tunnel *t)
{
    return t->upstream_error;
}

void ws_free(struct ws_tunnel *t)
{
    if (t == NULL)
        return;
    LIST_REMOVE(t, all);
    if (t->up != NULL)
        bufferevent_free(t->up);
    if (t->client != NULL)
        bufferevent_free(t->client);
    if (t->timer != NULL)
        event_free(t->timer);
    local_limit_destroy(t->messages);
    upstreams_unref(t->resolved);
    free_headers(t);
    free(t);
}
