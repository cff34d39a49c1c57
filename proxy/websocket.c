#include "proxy/websocket.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>

#include "proxy/access_log.h"
#include "proxy/config.h"
#include "proxy/forward.h"
#include "proxy/head_screen.h"
#include "proxy/metrics.h"
#include "proxy/pool_trim.h"
#include "proxy/request.h"
#include "proxy/respond.h"
#include "proxy/upstream_tls.h"
#include "proxy/worker.h"
#include "proxy/ws_frame.h"
#include "store/clock.h"
#include "store/local_limit.h"

#define MAX_HANDSHAKE_HEAD (16 * 1024)
#define MAX_REFUSAL_BODY (1024 * 1024)
/* Bytes queued toward one side before the other side is read no more. */
#define TUNNEL_HIGH_WATER (1024 * 1024)
#define TUNNEL_LOW_WATER (256 * 1024)
/* How long a closing tunnel may take to flush what it holds. */
#define CLOSE_FLUSH_MS 2000

enum tunnel_state {
    TUNNEL_CONNECTING,   /* connecting to the upstream, handshake queued */
    TUNNEL_HANDSHAKE,    /* waiting for the upstream's response head */
    TUNNEL_REFUSED_BODY, /* the upstream answered other than 101: reading its body */
    TUNNEL_WAIT_UPGRADE, /* 101 queued to the client; waiting for MHD to hand over its socket */
    TUNNEL_OPEN,
    TUNNEL_CLOSING,      /* flushing what is queued, then closed */
    TUNNEL_CLOSED,
};

struct ws_tunnel {
    struct request *r;
    struct worker *w;
    enum tunnel_state state;
    struct bufferevent *up;          /* an OpenSSL bufferevent for an https upstream */
    const struct upstream_addr *upstream;
    struct bufferevent *client;
    struct MHD_UpgradeResponseHandle *urh;
    /* While open: websocket_idle_timeout_ms, re-armed by traffic. While closing: how long
     * what is queued may take to flush (CLOSE_FLUSH_MS). */
    struct event *timer;
    bool counted;                    /* in the websockets gauge */
    bool await_client_close;         /* we sent the client a close frame: let it answer */
    bool client_write_shut;

    /* the upstream's answer when it is not 101 */
    long status;
    struct response_header *headers;
    size_t n_headers;
    int64_t body_need;               /* -1: until the upstream closes */

    /* an answer other than 101, sent once the slot is given back */
    struct MHD_Response *answer;
    unsigned answer_status;

    /* client-to-upstream message counting */
    struct ws_frame_reader frames;
    struct local_limit *messages;

    struct ws_upstreams *resolved;   /* holds t->upstream while a reload replaces the worker's */
};

struct upstream_addr {
    struct sockaddr_storage addr;
    socklen_t len;
    bool ok;
    bool tls;          /* https://: the tunnel speaks TLS (wss) */
    char host[256];    /* the URL's host: SNI and the name the certificate must carry */
    char url[300];     /* for log lines */
};

/* One configuration's upstreams, resolved. The worker holds the current set; a handshake
 * holds the set it picked from until it ends, so a reload can replace the worker's. */
struct ws_upstreams {
    unsigned refs;
    size_t n;
    struct upstream_addr addrs[];
};

static void upstreams_unref(struct ws_upstreams *set)
{
    if (set != NULL && --set->refs == 0)
        free(set);
}

bool ws_is_upgrade(struct MHD_Connection *conn, const char *method)
{
    if (strcmp(method, "GET") != 0)
        return false;
    const char *upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Upgrade");
    return upgrade != NULL && strcasestr(upgrade, "websocket") != NULL;
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

int ws_resolve_upstreams(struct worker *w, char *err, size_t errlen)
{
    const struct proxy_config *cfg = w->cfg;
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
    upstreams_unref(w->ws_upstreams);
    w->ws_upstreams = set;
    return 0;
}

void ws_free_upstreams(struct worker *w)
{
    upstreams_unref(w->ws_upstreams);
    w->ws_upstreams = NULL;
    upstream_tls_free(w->ws_tls);
    w->ws_tls = NULL;
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

/* Ends the tunnel for good: sockets closed, slot given back, the request let go. */
static void tunnel_closed(struct ws_tunnel *t)
{
    if (t->state == TUNNEL_CLOSED)
        return;
    t->state = TUNNEL_CLOSED;
    struct request *r = t->r;
    if (t->timer != NULL)
        evtimer_del(t->timer);
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    if (t->client != NULL) {
        bufferevent_free(t->client);
        t->client = NULL;
    }
    if (t->urh != NULL) {
        MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
        t->urh = NULL;
        worker_kick_mhd(t->w);
    }
    if (t->counted) {
        metrics_add_websockets(t->w->metrics, -1);
        t->counted = false;
    }
    request_release_slots(r);
    request_unref(r); /* the tunnel's reference */
}

static void arm_idle_timer(struct ws_tunnel *t)
{
    int64_t ms = t->w->cfg->websocket_idle_timeout_ms;
    if (ms <= 0 || t->state != TUNNEL_OPEN)
        return;
    struct timeval tv = store_ms_to_timeval(ms);
    evtimer_add(t->timer, &tv);
}

static void tunnel_shutdown(struct ws_tunnel *t);

/* Ends the tunnel from our side: the upstream and the slot at once, the client with a
 * close frame whose answer we wait for (RFC 6455 7.1.1). */
static void close_client_with(struct ws_tunnel *t, uint16_t code, const char *reason)
{
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    request_release_slots(t->r);
    uint8_t frame[128];
    size_t n = ws_close_frame(code, reason, frame, sizeof(frame));
    bufferevent_write(t->client, frame, n);
    t->await_client_close = true;
    tunnel_shutdown(t);
}

/* Open: idle too long, close 1001 to the client (as nginx does at proxy_read_timeout).
 * Closing: what was queued did not flush in time. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN)
        close_client_with(t, 1001, "idle timeout");
    else if (t->state == TUNNEL_CLOSING)
        tunnel_closed(t);
}

static bool output_pending(const struct ws_tunnel *t)
{
    return (t->up != NULL && evbuffer_get_length(bufferevent_get_output(t->up)) > 0) ||
           (t->client != NULL && evbuffer_get_length(bufferevent_get_output(t->client)) > 0);
}

/* After our own close frame has gone out: half-close, and wait for the client's close
 * (RFC 6455 7.1.1), so the client reads the frame instead of a reset. */
static void shut_client_writes(struct ws_tunnel *t)
{
    if (t->client_write_shut || t->client == NULL)
        return;
    t->client_write_shut = true;
    shutdown(bufferevent_getfd(t->client), SHUT_WR);
}

/* Stops reading both sides and closes once what is queued has been written (or after
 * CLOSE_FLUSH_MS). */
static void tunnel_shutdown(struct ws_tunnel *t)
{
    if (t->state == TUNNEL_CLOSING || t->state == TUNNEL_CLOSED)
        return;
    t->state = TUNNEL_CLOSING;
    if (t->up != NULL)
        bufferevent_disable(t->up, EV_READ);
    if (t->client != NULL && !t->await_client_close)
        bufferevent_disable(t->client, EV_READ);
    if (!output_pending(t) && !t->await_client_close) {
        tunnel_closed(t);
        return;
    }
    if (!output_pending(t))
        shut_client_writes(t);
    struct timeval tv = store_ms_to_timeval(CLOSE_FLUSH_MS);
    evtimer_add(t->timer, &tv);
}

static void maybe_closed_after_flush(struct ws_tunnel *t)
{
    if (t->state != TUNNEL_CLOSING || output_pending(t))
        return;
    if (t->await_client_close)
        shut_client_writes(t); /* the client's EOF, or the timer, ends it */
    else
        tunnel_closed(t);
}

/* Over the message limit: close 1008 to the client, and the upstream side at once. */
static void refuse_message(struct ws_tunnel *t)
{
    metrics_count_limit_hit(t->w->metrics, LIMIT_TYPE_WS_MESSAGE, t->r->plan != NULL ? t->r->plan->name : NULL);
    if (t->w->shared->log_warnings && t->r->plan != NULL)
        log_rejection(t->w->shared->rejection_warnings, t->r->user_id, t->r->plan->name, "ws_message",
                      t->r->gate.ws_rule.id, t->r->gate.ws_rule.rate, t->r->gate.ws_rule.rate);
    if (t->r->plan != NULL && t->r->plan->shadow)
        return; /* counted and reported; a shadow plan refuses nothing */
    close_client_with(t, 1008, "message rate limit exceeded");
}

static void protocol_error(struct ws_tunnel *t)
{
    close_client_with(t, 1002, "protocol error");
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
            !local_limit_check(t->messages, &t->r->gate.ws_rule, store_realtime_ms(), NULL)) {
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
    arm_idle_timer(t);
    if (t->state == TUNNEL_OPEN)
        pump_client(t, in);
    else /* closing: what the client still sends, its close frame included, goes nowhere */
        evbuffer_drain(in, evbuffer_get_length(in));
}

static void on_up_open_read(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state != TUNNEL_OPEN)
        return;
    arm_idle_timer(t);
    struct evbuffer *out = bufferevent_get_output(t->client);
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
    maybe_closed_after_flush(t);
}

static void on_up_drained(struct bufferevent *bev, void *arg)
{
    struct ws_tunnel *t = arg;
    if (t->state == TUNNEL_OPEN && t->client != NULL)
        bufferevent_enable(t->client, EV_READ);
    maybe_closed_after_flush(t);
}

static void on_client_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        /* The client is gone: nothing queued for it can be delivered. */
        evbuffer_drain(bufferevent_get_output(bev), evbuffer_get_length(bufferevent_get_output(bev)));
        t->await_client_close = false;
        if (t->state == TUNNEL_CLOSING && !output_pending(t))
            tunnel_closed(t);
        else
            tunnel_shutdown(t);
    }
}

static void on_up_open_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (t->state == TUNNEL_OPEN)
            on_up_open_read(bev, t); /* what it sent before closing still goes to the client */
        evbuffer_drain(bufferevent_get_output(bev), evbuffer_get_length(bufferevent_get_output(bev)));
        tunnel_shutdown(t);
    }
}

static void on_upgraded(void *cls, struct MHD_Connection *connection, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct ws_tunnel *t = cls;
    t->urh = urh;
    pool_trim_upgraded(t->w->pool_trim, connection);
    t->client = bufferevent_socket_new(t->w->base, sock, 0);
    if (t->client == NULL || t->up == NULL || t->state != TUNNEL_WAIT_UPGRADE) {
        tunnel_closed(t);
        return;
    }
    t->state = TUNNEL_OPEN;
    t->counted = true;
    metrics_add_websockets(t->w->metrics, 1);
    bufferevent_setcb(t->client, on_client_read, on_client_drained, on_client_event, t);
    bufferevent_setcb(t->up, on_up_open_read, on_up_drained, on_up_open_event, t);
    bufferevent_setwatermark(t->client, EV_WRITE, TUNNEL_LOW_WATER, 0);
    bufferevent_setwatermark(t->up, EV_WRITE, TUNNEL_LOW_WATER, 0);
    bufferevent_set_timeouts(t->up, NULL, NULL);
    bufferevent_enable(t->client, EV_READ | EV_WRITE);
    bufferevent_enable(t->up, EV_READ | EV_WRITE);
    arm_idle_timer(t);
    if (extra_in_size > 0) {
        /* What the client sent with its handshake. A bufferevent keeps the end of its input
         * frozen (only its own reads add there): without the thaw the bytes were lost. */
        struct evbuffer *in = bufferevent_get_input(t->client);
        evbuffer_unfreeze(in, 0);
        int rc = evbuffer_add(in, extra_in, extra_in_size);
        evbuffer_freeze(in, 0);
        if (rc < 0) {
            tunnel_closed(t);
            return;
        }
        pump_client(t, in);
    }
    /* Frames the upstream sent right after its 101. */
    if (t->state == TUNNEL_OPEN && evbuffer_get_length(bufferevent_get_input(t->up)) > 0)
        on_up_open_read(t->up, t);
}

static void deliver_answer(struct request *r)
{
    struct ws_tunnel *t = r->ws;
    struct MHD_Response *resp = t->answer;
    t->answer = NULL;
    request_set_pending(r, t->answer_status, resp);
}

/* Ends the handshake with an answer other than 101: the slot goes back first, so the
 * client's next attempt cannot meet it. Takes ownership of resp. */
static void answer_handshake(struct ws_tunnel *t, unsigned status, struct MHD_Response *resp)
{
    if (t->up != NULL) {
        bufferevent_free(t->up);
        t->up = NULL;
    }
    t->state = TUNNEL_CLOSED;
    t->answer = resp;
    t->answer_status = status;
    request_release_then(t->r, deliver_answer);
}

static void fail_handshake(struct ws_tunnel *t, unsigned status, const char *code)
{
    answer_handshake(t, status, respond_error(t->r, code));
}

static int add_header(struct ws_tunnel *t, const char *name, size_t nlen, const char *value, size_t vlen)
{
    if (t->n_headers >= 128)
        return -E2BIG;
    struct response_header *grown = realloc(t->headers, (t->n_headers + 1) * sizeof(*grown));
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

/* True when a Sec-WebSocket-Extensions value (RFC 6455 9.1: extensions separated by
 * commas, each a token and its ;parameters) names permessage-deflate. */
static bool names_permessage_deflate(const char *v, size_t vlen)
{
    static const char name[] = "permessage-deflate";
    const size_t nlen = sizeof(name) - 1;
    const char *end = v + vlen;
    for (const char *p = v; p < end;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *token = p;
        while (p < end && *p != ';' && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        if ((size_t)(p - token) == nlen && strncasecmp(token, name, nlen) == 0)
            return true;
        while (p < end && *p != ',') /* its parameters */
            p++;
    }
    return false;
}

/* Parses "HTTP/1.1 101 ...\r\nName: value\r\n...\r\n\r\n". Returns 0 or -EINVAL. */
static int parse_head(struct ws_tunnel *t, char *head, size_t len)
{
    char *line = head, *end = head + len;
    char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
    long status = eol != NULL ? head_screen_status_line(line, (size_t)(eol - line)) : 0;
    if (status == 0)
        return -EINVAL;
    t->status = status;
    t->body_need = -1;
    for (line = eol + 2; line < end; line = eol + 2) {
        eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (eol == NULL || eol == line)
            break;
        char *colon = memchr(line, ':', (size_t)(eol - line));
        if (colon == NULL)
            return -EINVAL;
        size_t nlen = (size_t)(colon - line);
        char *v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t'))
            v++;
        size_t vlen = (size_t)(eol - v);
        if (nlen == 14 && strncasecmp(line, "content-length", 14) == 0) {
            char buf[24];
            if (vlen == 0 || vlen >= sizeof(buf))
                return -EINVAL;
            memcpy(buf, v, vlen);
            buf[vlen] = '\0';
            char *e;
            errno = 0;
            long long n = strtoll(buf, &e, 10);
            if (errno != 0 || *e != '\0' || n < 0)
                return -EINVAL;
            t->body_need = n;
            continue;
        }
        /* The upstream accepted compression: the client's compressed frames carry RSV1. */
        if (status == 101 && nlen == 24 && strncasecmp(line, "sec-websocket-extensions", 24) == 0 &&
            names_permessage_deflate(v, vlen))
            t->frames.per_message_deflate = true;
        bool keep = status == 101 ? !(nlen == 10 && strncasecmp(line, "connection", 10) == 0)
                                  : !gate_is_hop_by_hop(line, nlen);
        if (keep && add_header(t, line, nlen, v, vlen) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* The upstream refused the upgrade: its answer goes to the client as it is. */
static void relay_refusal(struct ws_tunnel *t, struct evbuffer *in)
{
    struct request *r = t->r;
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
    r->bytes_sent = len;
    for (size_t i = 0; i < t->n_headers; i++)
        MHD_add_response_header(resp, t->headers[i].name, t->headers[i].value);
    respond_add_ratelimit_headers(r, resp);
    answer_handshake(t, (unsigned)t->status, resp);
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
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(in) > MAX_HANDSHAKE_HEAD)
            fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    size_t head_len = (size_t)end.pos + 4;
    char *head = malloc(head_len);
    if (head == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    evbuffer_remove(in, head, head_len);
    int rc = parse_head(t, head, head_len);
    free(head);
    if (rc < 0 || t->status < 101) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    bufferevent_set_timeouts(bev, NULL, NULL);
    t->r->upstream_ms = (store_mono_ns() - t->r->forwarded_ns) / 1000000;
    if (t->r->client_gone || t->r->pending != NULL) {
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
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, t);
    if (resp == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    for (size_t i = 0; i < t->n_headers; i++)
        MHD_add_response_header(resp, t->headers[i].name, t->headers[i].value);
    respond_add_ratelimit_headers(t->r, resp);
    free_headers(t);
    /* Hold upstream frames until the client side is joined. */
    bufferevent_disable(bev, EV_READ);
    t->state = TUNNEL_WAIT_UPGRADE;
    t->r->refs++; /* the tunnel's, until tunnel_closed */
    request_set_pending(t->r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

static void on_up_handshake_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_tunnel *t = arg;
    if (what & BEV_EVENT_CONNECTED) {
        t->state = TUNNEL_HANDSHAKE;
        struct timeval tv = store_ms_to_timeval(t->w->cfg->upstream_timeout_ms);
        bufferevent_set_timeouts(bev, &tv, &tv);
        return;
    }
    if (t->state == TUNNEL_REFUSED_BODY && (what & BEV_EVENT_EOF)) {
        relay_refusal(t, bufferevent_get_input(bev));
        return;
    }
    bool slow = (what & BEV_EVENT_TIMEOUT) != 0;
    if (!slow && t->state == TUNNEL_CONNECTING && t->upstream->tls && t->w->shared->log_warnings) {
        unsigned long code = bufferevent_get_openssl_error(bev);
        upstream_tls_log_handshake_failure(bufferevent_openssl_get_ssl(bev), code, t->upstream->url);
    }
    fail_handshake(t, slow ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_BAD_GATEWAY,
                   slow ? "upstream_timeout" : "upstream_unavailable");
}

/* The upstream side of a tunnel: a plain socket, or TLS over one for an https upstream
 * (verified as curl verifies, see upstream_tls.h). NULL on failure. */
static struct bufferevent *upstream_bufferevent(struct worker *w, const struct upstream_addr *ua)
{
    if (!ua->tls)
        return bufferevent_socket_new(w->base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL_CTX *ctx;
    char err[256];
    if (upstream_tls_context(&w->ws_tls, w->cfg, &ctx, err, sizeof(err)) < 0) {
        if (w->shared->log_warnings)
            fprintf(stderr, "tierproxy: upstream %s: WebSocket TLS: %s\n", ua->url, err);
        return NULL;
    }
    SSL *ssl = upstream_tls_ssl_new(ctx, ua->host);
    if (ssl == NULL)
        return NULL;
    struct bufferevent *bev = bufferevent_openssl_socket_new(w->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                             BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    /* An upstream that closes without close_notify ends the tunnel like a plain EOF. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void ws_start(struct request *r)
{
    struct worker *w = r->w;
    const struct proxy_config *cfg = w->cfg;
    struct ws_tunnel *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error(r, "upstream_unavailable"));
        return;
    }
    r->ws = t;
    t->r = r;
    t->w = w;
    t->state = TUNNEL_CONNECTING;
    r->phase = PHASE_FORWARDING;
    r->forwarded_ns = store_mono_ns();
    ws_frame_reader_init(&t->frames);
    t->timer = evtimer_new(w->base, on_timer, t);
    if (r->gate.has_ws_rule)
        t->messages = local_limit_create();
    size_t pick = w->upstream_next++ % cfg->n_upstreams;
    t->resolved = w->ws_upstreams;
    t->resolved->refs++;
    const struct upstream_addr *ua = pick < t->resolved->n ? &t->resolved->addrs[pick] : NULL;
    if (t->timer == NULL || (r->gate.has_ws_rule && t->messages == NULL) || ua == NULL || !ua->ok ||
        forward_build_headers(r, true) < 0) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    t->upstream = ua;
    t->up = upstream_bufferevent(w, ua);
    if (t->up == NULL) {
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
        return;
    }
    struct evbuffer *out = bufferevent_get_output(t->up);
    evbuffer_add_printf(out, "GET %s HTTP/1.1\r\n", r->target.forward);
    for (struct curl_slist *h = r->upstream_headers; h != NULL; h = h->next) {
        size_t len = strlen(h->data);
        if (len > 0 && h->data[len - 1] == ';') /* curl's spelling of an empty header */
            evbuffer_add_printf(out, "%.*s:\r\n", (int)(len - 1), h->data);
        else
            evbuffer_add_printf(out, "%s\r\n", h->data);
    }
    evbuffer_add(out, "\r\n", 2);
    bufferevent_setcb(t->up, on_up_handshake_read, NULL, on_up_handshake_event, t);
    struct timeval ct = store_ms_to_timeval(cfg->connect_timeout_ms);
    bufferevent_set_timeouts(t->up, &ct, &ct);
    bufferevent_enable(t->up, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(t->up, (struct sockaddr *)&ua->addr, (int)ua->len) < 0)
        fail_handshake(t, MHD_HTTP_BAD_GATEWAY, "upstream_unavailable");
}

void ws_close_all(struct worker *w)
{
    struct request *next;
    for (struct request *r = LIST_FIRST(&w->requests); r != NULL; r = next) {
        next = LIST_NEXT(r, live); /* closing may free r */
        struct ws_tunnel *t = r->ws;
        if (t == NULL)
            continue;
        if (t->state == TUNNEL_OPEN && t->client != NULL)
            close_client_with(t, 1001, "going away");
        else if (t->state == TUNNEL_WAIT_UPGRADE) {
            tunnel_closed(t);
        }
    }
}

bool ws_connection_done(struct request *r)
{
    struct ws_tunnel *t = r->ws;
    if (t == NULL)
        return false;
    /* When the 101 went out, MHD called on_upgraded first, and calls this only once the
     * tunnel closed its side: still waiting means the upgrade will never come. */
    if (t->state == TUNNEL_WAIT_UPGRADE) {
        r->status = 499; /* logged as nginx does: the client closed before its answer went out */
        r->decision = "client_closed";
        tunnel_closed(t);
    }
    return t->state == TUNNEL_OPEN || t->state == TUNNEL_CLOSING;
}

void ws_release(struct request *r)
{
    struct ws_tunnel *t = r->ws;
    if (t == NULL)
        return;
    if (t->up != NULL)
        bufferevent_free(t->up);
    if (t->client != NULL)
        bufferevent_free(t->client);
    if (t->timer != NULL)
        event_free(t->timer);
    local_limit_destroy(t->messages);
    upstreams_unref(t->resolved);
    if (t->answer != NULL)
        MHD_destroy_response(t->answer);
    free_headers(t);
    free(t);
    r->ws = NULL;
}
