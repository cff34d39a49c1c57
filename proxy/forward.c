#include "proxy/forward.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "proxy/config.h"
#include "proxy/head_screen.h"
#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/respond.h"
#include "proxy/upstream_tls.h"
#include "proxy/worker.h"
#include "store/clock.h"

/* Upstream bytes held per request before curl is paused until the client reads. */
#define RESP_BUFFER_HIGH (256 * 1024)
#define RESP_BUFFER_LOW (64 * 1024)

/* Every upstream socket curl opens has one of these, found by its descriptor (unique in
 * the process, and cleared in on_curl_close before the descriptor can be reused). curl
 * forgets a socket between two transfers on one kept-alive connection; keeping its event
 * registered meanwhile ("parked") saves an epoll_ctl DEL and ADD per request. */
struct curl_sock {
    struct worker *w;
    struct event ev;
    short kind;        /* what ev is registered for; 0 when it is not */
    bool parked;       /* the connection idles in curl's cache */
};

static struct curl_sock **sock_table;
static size_t sock_table_size;
static pthread_once_t sock_table_once = PTHREAD_ONCE_INIT;

static void sock_table_init(void)
{
    struct rlimit lim;
    size_t n = 65536;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        n = lim.rlim_cur;
    if (n > (1u << 22))
        n = 1u << 22;
    sock_table = calloc(n, sizeof(*sock_table));
    sock_table_size = sock_table != NULL ? n : 0;
}

static void check_finished(struct worker *w);

static void sock_unregister(struct curl_sock *cs)
{
    if (cs->kind != 0)
        event_del(&cs->ev);
    cs->kind = 0;
}

static void on_curl_event(evutil_socket_t fd, short what, void *arg)
{
    struct curl_sock *cs = arg;
    struct worker *w = cs->w;
    if (cs->parked) {
        /* An idle connection closed or spoke out of turn: curl finds it dead when it next
           looks at it; until then it must not wake the loop. */
        sock_unregister(cs);
        return;
    }
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(w->multi, fd, action, &running);
    check_finished(w);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct worker *w = userp;
    (void)easy;
    (void)socketp;
    if (fd < 0 || (size_t)fd >= sock_table_size)
        return -1;
    struct curl_sock *cs = sock_table[fd];
    if (what == CURL_POLL_REMOVE) {
        if (cs != NULL) {
            cs->parked = true;
            if (cs->kind != (EV_READ | EV_PERSIST))
                sock_unregister(cs); /* a parked writable socket would fire without end */
        }
        return 0;
    }
    if (cs == NULL) {
        cs = calloc(1, sizeof(*cs));
        if (cs == NULL)
            return -1;
        cs->w = w;
        sock_table[fd] = cs;
    }
    cs->parked = false;
    short kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (kind == cs->kind)
        return 0;
    sock_unregister(cs);
    event_assign(&cs->ev, w->base, fd, kind, on_curl_event, cs);
    if (event_add(&cs->ev, NULL) < 0)
        return -1;
    cs->kind = kind;
    return 0;
}

static int on_curl_close(void *clientp, curl_socket_t fd)
{
    (void)clientp;
    if (fd >= 0 && (size_t)fd < sock_table_size && sock_table[fd] != NULL) {
        struct curl_sock *cs = sock_table[fd];
        sock_unregister(cs);
        sock_table[fd] = NULL;
        free(cs);
    }
    return close(fd);
}

static void on_curl_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    int running;
    curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_finished(w);
}

static int on_curl_timer_set(CURLM *multi, long timeout_ms, void *userp)
{
    struct worker *w = userp;
    if (timeout_ms < 0) {
        evtimer_del(w->curl_timer);
        return 0;
    }
    struct timeval tv = store_ms_to_timeval(timeout_ms);
    evtimer_add(w->curl_timer, &tv);
    return 0;
}

int forward_init(struct worker *w)
{
    pthread_once(&sock_table_once, sock_table_init);
    if (sock_table == NULL)
        return -ENOMEM;
    w->multi = curl_multi_init();
    w->curl_timer = evtimer_new(w->base, on_curl_timer, w);
    w->curl_share = curl_share_init();
    if (w->multi == NULL || w->curl_timer == NULL || w->curl_share == NULL)
        return -ENOMEM;
    curl_share_setopt(w->curl_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer_set);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);
    /* Keep enough idle upstream connections for every client connection's reuse. */
    curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS, 1024L);
    return 0;
}

void forward_destroy(struct worker *w)
{
    while (w->n_easy_pool > 0)
        curl_easy_cleanup(w->easy_pool[--w->n_easy_pool]);
    if (w->multi != NULL)
        curl_multi_cleanup(w->multi);
    if (w->curl_share != NULL)
        curl_share_cleanup(w->curl_share);
    if (w->curl_timer != NULL)
        event_free(w->curl_timer);
    w->multi = NULL;
    w->curl_share = NULL;
    w->curl_timer = NULL;
}

/* The upstream part is over and the slots are given back: the client side may end. */
static void finish_client_side(struct request *r)
{
    if (r->mhd_done)
        return;
    if (r->stashed != NULL) {
        struct MHD_Response *resp = r->stashed;
        r->stashed = NULL;
        request_set_pending(r, (unsigned)r->upstream_status, resp);
        return;
    }
    /* curl refuses some malformed heads itself (a field line without a colon) */
    if (r->bad_upstream_head || (!r->upstream_head_done && r->upstream_result == CURLE_WEIRD_SERVER_REPLY)) {
        request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error(r, "bad_upstream_response"));
    } else if (!r->upstream_head_done) {
        bool slow = r->timed_out || r->upstream_result == CURLE_OPERATION_TIMEDOUT;
        request_set_pending(r, slow ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_BAD_GATEWAY,
                            respond_error(r, slow ? "upstream_timeout" : "upstream_unavailable"));
    } else if (r->reader_waiting) {
        request_wake(r);
    }
}

/* The transfer is over (finished, failed or cut short): give the slots back, then tell
 * the client side. */
static void upstream_finished(struct request *r, CURLcode result)
{
    r->upstream_done = true;
    r->upstream_result = result;
    evtimer_del(&r->upstream_timer);
    if (r->mhd_done)
        return;
    request_release_then(r, finish_client_side);
}

static void check_finished(struct worker *w)
{
    /* Handles are removed after the info_read loop, never inside curl's callbacks. */
    CURL *done[64];
    CURLcode results[64];
    size_t n;
    do {
        n = 0;
        CURLMsg *msg;
        int left;
        while (n < 64 && (msg = curl_multi_info_read(w->multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            done[n] = msg->easy_handle;
            results[n] = msg->data.result;
            n++;
        }
        for (size_t i = 0; i < n; i++) {
            struct request *r = NULL;
            curl_easy_getinfo(done[i], CURLINFO_PRIVATE, (char **)&r);
            curl_multi_remove_handle(w->multi, done[i]);
            if (w->shared->log_warnings)
                upstream_tls_log_failure(done[i], results[i], w->curl_error);
            upstream_finished(r, results[i]);
        }
    } while (n == 64);
}

static void on_upstream_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    if (r->upstream_done)
        return;
    r->timed_out = true;
    curl_multi_remove_handle(r->w->multi, r->easy);
    upstream_finished(r, CURLE_OPERATION_TIMEDOUT);
}

static void arm_upstream_timer(struct request *r)
{
    int64_t ms = r->w->cfg->upstream_timeout_ms;
    struct timeval tv = store_ms_to_timeval(ms);
    evtimer_add(&r->upstream_timer, &tv);
}


/* The most field lines a head within FORWARD_UPSTREAM_HEAD_MAX can hold ("a:" and LF, 3
 * bytes each): a head SPEC lets through is never refused for its number of fields. */
#define MAX_RESP_HEADERS (FORWARD_UPSTREAM_HEAD_MAX / 3 + 1)

static int add_resp_header(struct request *r, const char *name, size_t name_len, const char *value, size_t value_len)
{
    if (r->n_resp_headers == r->cap_resp_headers) {
        if (r->cap_resp_headers >= MAX_RESP_HEADERS)
            return -E2BIG;
        size_t cap = r->cap_resp_headers ? r->cap_resp_headers * 2 : 16;
        if (cap > MAX_RESP_HEADERS)
            cap = MAX_RESP_HEADERS;
        /* The old arrays stay in scratch until the request ends: under 1 MiB all told, and
           that only for a head of thousands of empty fields. */
        struct response_header *grown = scratch_alloc(&r->scratch, cap * sizeof(*grown));
        if (grown == NULL)
            return -ENOMEM;
        if (r->n_resp_headers > 0)
            memcpy(grown, r->resp_headers, r->n_resp_headers * sizeof(*grown));
        r->resp_headers = grown;
        r->cap_resp_headers = cap;
    }
    char *n = scratch_strndup(&r->scratch, name, name_len);
    char *v = scratch_strndup(&r->scratch, value, value_len);
    if (n == NULL || v == NULL)
        return -ENOMEM;
    r->resp_headers[r->n_resp_headers].name = n;
    r->resp_headers[r->n_resp_headers].value = v;
    r->n_resp_headers++;
    return 0;
}

static void clear_resp_headers(struct request *r)
{
    r->n_resp_headers = 0;
    r->resp_content_length = -1;
}

/* The upstream's head is too big or malformed: curl stops (0 is a write error) and the
 * client gets 502 bad_upstream_response. */
static size_t refuse_upstream_head(struct request *r)
{
    r->bad_upstream_head = true;
    return 0;
}

static size_t on_upstream_header(char *line, size_t size, size_t nitems, void *userdata)
{
    struct request *r = userdata;
    size_t len = size * nitems;
    if (r->mhd_done)
        return 0;
    if (!r->upstream_head_done) {
        r->upstream_head_bytes += len;
        if (r->upstream_head_bytes > FORWARD_UPSTREAM_HEAD_MAX)
            return refuse_upstream_head(r);
    }
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new response head: an interim 1xx may come before the final one. */
        clear_resp_headers(r);
        size_t line_len = len;
        while (line_len > 0 && (line[line_len - 1] == '\r' || line[line_len - 1] == '\n'))
            line_len--;
        long status = head_screen_status_line(line, line_len);
        if (status == 0)
            return refuse_upstream_head(r);
        r->upstream_status = status;
        return len;
    }
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    if (len == 0) {
        if (r->upstream_status >= 200 && !r->upstream_head_done) {
            r->upstream_head_done = true;
            int64_t waited_ns = store_mono_ns() - r->forwarded_ns;
            r->upstream_ms = waited_ns / 1000000;
            metrics_observe_upstream(r->w->metrics, waited_ns);
            arm_upstream_timer(r);
            /* MHD asks for the response on its next turn (forward_respond): by then a small
               body has usually arrived too, and head and body leave in one write. */
            request_wake(r);
        }
        return size * nitems;
    }
    if (line[0] == ' ' || line[0] == '\t')
        return size * nitems; /* obsolete line folding: dropped, as RFC 9112 allows */
    const char *colon = memchr(line, ':', len);
    if (colon == NULL || !head_screen_name_ok(line, (size_t)(colon - line)))
        return refuse_upstream_head(r);
    size_t name_len = (size_t)(colon - line);
    const char *value = colon + 1;
    size_t value_len = len - name_len - 1;
    if (!head_screen_value_ok(value, value_len))
        return refuse_upstream_head(r);
    while (value_len > 0 && (*value == ' ' || *value == '\t')) {
        value++;
        value_len--;
    }
    if (gate_is_hop_by_hop(line, name_len))
        return size * nitems;
    if (name_len == 14 && strncasecmp(line, "content-length", 14) == 0) {
        char buf[32];
        if (value_len == 0 || value_len >= sizeof(buf))
            return 0;
        memcpy(buf, value, value_len);
        buf[value_len] = '\0';
        char *end;
        errno = 0;
        long long n = strtoll(buf, &end, 10);
        if (errno != 0 || *end != '\0' || n < 0)
            return 0;
        r->resp_content_length = n;
        return size * nitems;
    }
    int added = add_resp_header(r, line, name_len, value, value_len);
    if (added == -E2BIG)
        return refuse_upstream_head(r);
    if (added < 0)
        return 0;
    return size * nitems;
}

static size_t on_upstream_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct request *r = userdata;
    size_t len = size * nmemb;
    if (r->mhd_done)
        return 0;
    if (r->resp_body.len >= RESP_BUFFER_HIGH) {
        r->curl_paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (bytebuf_append(&r->resp_body, data, len) < 0)
        return 0;
    arm_upstream_timer(r);
    if (r->reader_waiting)
        request_wake(r);
    return len;
}

static ssize_t read_response_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct request *r = cls;
    if (r->w->closing)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = r->resp_body.len;
    if (avail > 0 && r->resp_content_length >= 0 && request_release_pending(r) &&
        r->bytes_sent + avail >= (uint64_t)r->resp_content_length)
        avail--; /* the last byte ends the response: it waits for the slots to be given back */
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->resp_body.data + r->resp_body.off, n);
        bytebuf_consume(&r->resp_body, n);
        r->bytes_sent += n;
        if (r->curl_paused && r->resp_body.len < RESP_BUFFER_LOW && !r->upstream_done) {
            r->curl_paused = false;
            curl_easy_pause(r->easy, CURLPAUSE_CONT);
        }
        return (ssize_t)n;
    }
    if (r->upstream_done && !request_release_pending(r) && r->resp_body.len == 0)
        return r->upstream_result == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing to send yet: sleep until curl brings more, instead of being polled. */
    r->reader_waiting = true;
    request_suspend(r);
    return 0;
}

/* libmicrohttpd callocs the block with every response: a small body gets a small one. */
static size_t response_block_size(uint64_t size)
{
    const size_t largest = 16 * 1024;
    return size < largest ? (size_t)size : largest;
}

static struct MHD_Response *make_response(struct request *r)
{
    bool bodiless = strcmp(r->method, "HEAD") == 0 || r->upstream_status == 204 || r->upstream_status == 304 ||
                    r->resp_content_length == 0;
    r->resp_bodiless = bodiless;
    uint64_t size = r->resp_content_length >= 0 ? (uint64_t)r->resp_content_length : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp;
    if (bodiless && (size == MHD_SIZE_UNKNOWN || size == 0)) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else if (!bodiless && r->upstream_done && r->upstream_result == CURLE_OK && !request_release_pending(r)) {
        /* The whole body is in: MHD takes the buffer and sends it with the head. */
        struct bytebuf *b = &r->resp_body;
        size_t len = b->len;
        resp = MHD_create_response_from_buffer_with_free_callback_cls(len, len > 0 ? b->data + b->off : (void *)"",
                                                                      free, b->data);
        if (resp != NULL) {
            memset(b, 0, sizeof(*b));
            r->bytes_sent = len;
        }
    } else {
        resp = MHD_create_response_from_callback(size, response_block_size(size), read_response_body, r, NULL);
    }
    if (resp == NULL)
        return NULL;
    for (size_t i = 0; i < r->n_resp_headers; i++)
        MHD_add_response_header(resp, r->resp_headers[i].name, r->resp_headers[i].value);
    respond_add_ratelimit_headers(r, resp);
    return resp;
}

/* MHD writes the response head into the connection's pool, next to the request head;
 * when they do not fit together it drops the connection without a word (and the access log
 * would say 200). The room MHD's own lines (status, Date, Content-Length, Connection) and
 * the RateLimit headers take. */
#define MHD_OWN_LINES_BYTES 512
_Static_assert(FORWARD_CLIENT_POOL_BYTES >= FORWARD_UPSTREAM_HEAD_MAX + MAX_HEAD_BYTES + MHD_OWN_LINES_BYTES,
               "the pool holds the largest request head next to the largest upstream head");

static bool response_head_fits(const struct request *r)
{
    size_t bytes = r->head_bytes + MHD_OWN_LINES_BYTES;
    for (size_t i = 0; i < r->n_resp_headers; i++)
        bytes += strlen(r->resp_headers[i].name) + strlen(r->resp_headers[i].value) + 4;
    return bytes <= FORWARD_CLIENT_POOL_BYTES;
}

void forward_respond(struct request *r)
{
    r->response_made = true;
    if (!response_head_fits(r)) {
        forward_abort(r);
        r->pending = respond_error(r, "bad_upstream_response");
        r->pending_status = MHD_HTTP_BAD_GATEWAY;
        return;
    }
    struct MHD_Response *resp = make_response(r);
    if (resp == NULL) {
        forward_abort(r);
        r->pending = respond_error(r, "upstream_unavailable");
        r->pending_status = MHD_HTTP_BAD_GATEWAY;
    } else if (r->resp_bodiless && request_release_pending(r)) {
        r->stashed = resp; /* complete as soon as sent: it waits for the release */
    } else {
        r->pending = resp;
        r->pending_status = (unsigned)r->upstream_status;
    }
}

/* curl only reads the list, so its nodes and lines are the request's scratch: no
 * curl_slist_append (two allocations a line) and no formatting. */
static int append_line(struct request *r, char *line)
{
    struct curl_slist *node = scratch_alloc(&r->scratch, sizeof(*node));
    if (node == NULL)
        return -ENOMEM;
    node->data = line;
    node->next = NULL;
    if (r->upstream_headers_last != NULL)
        r->upstream_headers_last->next = node;
    else
        r->upstream_headers = node;
    r->upstream_headers_last = node;
    return 0;
}

/* Collects the gate's upstream fields as curl lines, noting the ones curl would invent. */
struct curl_lines {
    struct request *r;
    bool saw_accept, saw_content_type;
};

static int append_header(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct curl_lines *c = ctx;
    char *line = scratch_alloc(&c->r->scratch, name_len + value_len + 3);
    if (line == NULL)
        return -ENOMEM;
    memcpy(line, name, name_len);
    /* curl drops "Name:" with an empty value; "Name;" sends it empty. */
    if (value_len == 0) {
        memcpy(line + name_len, ";", 2);
    } else {
        memcpy(line + name_len, ": ", 2);
        memcpy(line + name_len + 2, value, value_len);
        line[name_len + 2 + value_len] = '\0';
    }
    c->saw_accept |= name_len == 6 && strncasecmp(name, "Accept", 6) == 0;
    c->saw_content_type |= name_len == 12 && strncasecmp(name, "Content-Type", 12) == 0;
    return append_line(c->r, line);
}

static void *scratch_for_headers(void *ctx, size_t n)
{
    struct curl_lines *c = ctx;
    return scratch_alloc(&c->r->scratch, n);
}

/* "Name:": curl leaves out the header it would have added itself. */
static int append_removal(struct request *r, const char *line)
{
    return append_line(r, (char *)line);
}

int forward_build_headers(struct request *r, bool websocket)
{
    struct gate_request model;
    request_model(r, &model);
    model.websocket = websocket;
    struct curl_lines lines = { .r = r };
    struct gate_header_sink sink = { .emit = append_header, .alloc = scratch_for_headers, .ctx = &lines };
    int rc = gate_upstream_headers(&model, r->plan != NULL ? &r->gate : NULL, &sink);
    if (rc < 0 || websocket)
        return rc;
    /* Keep curl from adding headers the client did not send. */
    rc = append_removal(r, "Expect:");
    if (rc == 0 && !lines.saw_accept)
        rc = append_removal(r, "Accept:");
    if (rc == 0 && !lines.saw_content_type)
        rc = append_removal(r, "Content-Type:");
    return rc;
}

/* A new easy handle with the options every transfer shares. A handle goes back to the
 * worker's pool with them still set: no curl_easy_reset, which frees and re-copies every
 * option, and a few fewer option strings to copy each request. */
static CURL *new_easy(struct worker *w)
{
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SHARE, w->curl_share);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_upstream_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_upstream_body);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
    /* Why a transfer failed, for the TLS failure log (one buffer per worker: the text of
       the latest failure, read right after curl_multi_socket_action returns). */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, w->curl_error);
    /* The upstream is the configured address, never an http_proxy from the environment
     * (nginx and HAProxy do not read one either); this also spares curl five getenv()s. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    return e;
}

/* Sets what differs between transfers, every one of them, over what the handle's last
 * transfer left. */
static void set_transfer_options(CURL *e, struct request *r, const char *upstream)
{
    curl_easy_setopt(e, CURLOPT_URL, upstream);
    curl_easy_setopt(e, CURLOPT_REQUEST_TARGET, r->target.forward);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)r->w->cfg->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->upstream_headers);
    /* Set for every https transfer (so a reload reaches pooled handles); http ones ignore them. */
    if (upstream_is_https(upstream))
        upstream_tls_curl_options(e, r->w->cfg);

    const char *m = r->method;
    bool head = strcmp(m, "HEAD") == 0;
    bool has_body = !head && (r->body.len > 0 || strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 ||
                              strcmp(m, "PATCH") == 0);
    /* HTTPGET starts from a plain GET: no body, no upload, NOBODY off. */
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (head) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body.len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body.len > 0 ? r->body.data + r->body.off : "");
    }
    /* curl says GET, HEAD and POST-with-a-body by itself */
    bool curl_names_it = head || (has_body ? strcmp(m, "POST") == 0 : strcmp(m, "GET") == 0);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, curl_names_it ? NULL : m);
}

void forward_start(struct request *r)
{
    struct worker *w = r->w;
    const struct proxy_config *cfg = w->cfg;
    const char *upstream = cfg->upstreams[w->upstream_next++ % cfg->n_upstreams];

    r->resp_content_length = -1;
    evtimer_assign(&r->upstream_timer, w->base, on_upstream_timeout, r);
    r->easy = w->n_easy_pool > 0 ? w->easy_pool[--w->n_easy_pool] : new_easy(w);
    if (r->easy == NULL || forward_build_headers(r, false) < 0)
        goto fail;

    CURL *e = r->easy;
    set_transfer_options(e, r, upstream);

    arm_upstream_timer(r);
    r->phase = PHASE_FORWARDING;
    r->forwarded_ns = store_mono_ns();
    if (curl_multi_add_handle(w->multi, e) != CURLM_OK)
        goto fail;
    return;
fail:
    request_set_pending(r, MHD_HTTP_BAD_GATEWAY, respond_error(r, "upstream_unavailable"));
}

void forward_abort(struct request *r)
{
    if (r->easy != NULL && !r->upstream_done && r->phase >= PHASE_FORWARDING) {
        curl_multi_remove_handle(r->w->multi, r->easy);
        r->upstream_done = true;
        r->upstream_result = CURLE_ABORTED_BY_CALLBACK;
    }
}

void forward_release(struct request *r)
{
    forward_abort(r);
    if (r->easy != NULL) {
        struct worker *w = r->w;
        if (w->n_easy_pool < sizeof(w->easy_pool) / sizeof(w->easy_pool[0]) && w->multi != NULL) {
            /* The options naming r stay until set_transfer_options sets every one of them
               for the handle's next transfer; curl does not look at an idle handle. */
            w->easy_pool[w->n_easy_pool++] = r->easy;
        } else {
            curl_easy_cleanup(r->easy);
        }
    }
    r->easy = NULL;
    /* The header lists are in r's scratch, which goes with r. */
    bytebuf_free(&r->resp_body);
    if (event_initialized(&r->upstream_timer))
        evtimer_del(&r->upstream_timer);
}
