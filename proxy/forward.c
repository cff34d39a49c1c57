/* The forwarder and the upstream; forward.h says what each owns. A transfer's finished hook
 * is called at most once, and no hook after upstream_abort. Finished handles leave the
 * multi handle after curl_multi_info_read's loop, never inside a curl callback. Header
 * lines and response fields live in the owner's scratch, never freed here. curl pauses once
 * RESP_BUFFER_HIGH bytes wait for the client. sock_table's entry for a socket is freed in
 * curl's close-socket callback before the descriptor is closed: a reused one finds none. */
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
#include "proxy/http1.h"
#include "proxy/metrics.h"
#include "proxy/upstream_error.h"
#include "proxy/upstream_tls.h"
#include "proxy/upstream_urls.h"
#include "store/clock.h"

/* Reset easy handles kept for reuse: no per-request setup. */
#define EASY_POOL_MAX 256

struct forwarder {
    struct event_base *base;
    const struct proxy_config *cfg;
    struct metrics *metrics;
    bool closing;
    CURLM *multi;
    struct event *timer;
    CURLSH *share;                      /* DNS cache for the upstream names */
    char curl_error[CURL_ERROR_SIZE];   /* every easy handle's CURLOPT_ERRORBUFFER */
    CURL *easy_pool[EASY_POOL_MAX];
    size_t n_easy_pool;
    unsigned next;                      /* round robin over cfg->upstreams */
    struct upstream_urls urls;          /* cfg->upstreams parsed for curl */
};

/* Upstream bytes held per request before curl is paused until the client reads. */
#define RESP_BUFFER_HIGH (256 * 1024)
/* The most a response body's first block takes from its Content-Length alone. */
#define BODY_RESERVE_MAX (16 * 1024)
#define RESP_BUFFER_LOW (64 * 1024)

/* Every upstream socket curl opens has one of these, found by its descriptor (unique in
 * the process, and cleared in on_curl_close before the descriptor can be reused). curl
 * forgets a socket between two transfers on one kept-alive connection; keeping its event
 * registered meanwhile ("parked") saves an epoll_ctl DEL and ADD per request. */
struct curl_sock {
    struct forwarder *f;
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

static void check_finished(struct forwarder *f);

static void sock_unregister(struct curl_sock *cs)
{
    if (cs->kind != 0)
        event_del(&cs->ev);
    cs->kind = 0;
}

static void on_curl_event(evutil_socket_t fd, short what, void *arg)
{
    struct curl_sock *cs = arg;
    struct forwarder *f = cs->f;
    if (cs->parked) {
        /* An idle connection closed or spoke out of turn: curl finds it dead when it next
           looks at it; until then it must not wake the loop. */
        sock_unregister(cs);
        return;
    }
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(f->multi, fd, action, &running);
    check_finished(f);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct forwarder *f = userp;
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
        cs->f = f;
        sock_table[fd] = cs;
    }
    cs->parked = false;
    short kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (kind == cs->kind)
        return 0;
    sock_unregister(cs);
    event_assign(&cs->ev, f->base, fd, kind, on_curl_event, cs);
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
    struct forwarder *f = arg;
    int running;
    curl_multi_socket_action(f->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_finished(f);
}

static int on_curl_timer_set(CURLM *multi, long timeout_ms, void *userp)
{
    struct forwarder *f = userp;
    (void)multi;
    if (timeout_ms < 0) {
        evtimer_del(f->timer);
        return 0;
    }
    struct timeval tv = store_ms_to_timeval(timeout_ms);
    evtimer_add(f->timer, &tv);
    return 0;
}

struct forwarder *forwarder_create(struct event_base *base, const struct proxy_config *cfg, struct metrics *metrics)
{
    pthread_once(&sock_table_once, sock_table_init);
    if (sock_table == NULL)
        return NULL;
    struct forwarder *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    f->base = base;
    f->cfg = cfg;
    f->metrics = metrics;
    upstream_urls_use(&f->urls, cfg);
    f->multi = curl_multi_init();
    f->timer = evtimer_new(base, on_curl_timer, f);
    f->share = curl_share_init();
    if (f->multi == NULL || f->timer == NULL || f->share == NULL) {
        forwarder_destroy(f);
        return NULL;
    }
    curl_share_setopt(f->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETDATA, f);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer_set);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERDATA, f);
    /* Keep enough idle upstream connections for every client connection's reuse. */
    curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS, 1024L);
    return f;
}

void forwarder_set_config(struct forwarder *f, const struct proxy_config *cfg)
{
    f->cfg = cfg;
    upstream_urls_use(&f->urls, cfg);
}

void forwarder_close(struct forwarder *f)
{
    if (f != NULL)
        f->closing = true;
}

void forwarder_destroy(struct forwarder *f)
{
    if (f == NULL)
        return;
    while (f->n_easy_pool > 0)
        curl_easy_cleanup(f->easy_pool[--f->n_easy_pool]);
    upstream_urls_clear(&f->urls);
    if (f->multi != NULL)
        curl_multi_cleanup(f->multi);
    if (f->share != NULL)
        curl_share_cleanup(f->share);
    if (f->timer != NULL)
        event_free(f->timer);
    free(f);
}

/* The transfer is over (finished, failed or cut short): the owner decides what the client
 * gets. */
static void upstream_finished(struct upstream *u, CURLcode result)
{
    u->done = true;
    u->result = result;
    evtimer_del(&u->timer);
    if (!u->abandoned)
        u->hooks->finished(u->owner);
}

static void check_finished(struct forwarder *f)
{
    /* Handles are removed after the info_read loop, never inside curl's callbacks. */
    CURL *done[64];
    CURLcode results[64];
    size_t n;
    do {
        n = 0;
        CURLMsg *msg;
        int left;
        while (n < 64 && (msg = curl_multi_info_read(f->multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            done[n] = msg->easy_handle;
            results[n] = msg->data.result;
            n++;
        }
        for (size_t i = 0; i < n; i++) {
            struct upstream *u = NULL;
            curl_easy_getinfo(done[i], CURLINFO_PRIVATE, (char **)&u);
            if (results[i] != CURLE_OK)
                curl_easy_getinfo(done[i], CURLINFO_OS_ERRNO, &u->os_errno);
            curl_multi_remove_handle(f->multi, done[i]);
            upstream_tls_log_failure(done[i], results[i], f->curl_error);
            upstream_finished(u, results[i]);
        }
    } while (n == 64);
}

static void on_upstream_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *u = arg;
    (void)fd;
    (void)what;
    if (u->done)
        return;
    u->timed_out = true;
    curl_multi_remove_handle(u->f->multi, u->easy);
    upstream_finished(u, CURLE_OPERATION_TIMEDOUT);
}

static void arm_upstream_timer(struct upstream *u)
{
    struct timeval tv = store_ms_to_timeval(u->f->cfg->upstream_timeout_ms);
    evtimer_add(&u->timer, &tv);
}

/* The most field lines a head within FORWARD_UPSTREAM_HEAD_MAX can hold ("a:" and LF, 3
 * bytes each): a head SPEC lets through is never refused for its number of fields. */
#define MAX_RESP_FIELDS (FORWARD_UPSTREAM_HEAD_MAX / 3 + 1)

static int add_field(struct upstream *u, const struct http1_field *field)
{
    if (u->n_fields == u->cap_fields) {
        if (u->cap_fields >= MAX_RESP_FIELDS)
            return -E2BIG;
        size_t cap = u->cap_fields ? u->cap_fields * 2 : 16;
        if (cap > MAX_RESP_FIELDS)
            cap = MAX_RESP_FIELDS;
        /* The old arrays stay in scratch until the request ends: under 1 MiB all told, and
           that only for a head of thousands of empty fields. */
        struct upstream_field *grown = scratch_alloc(u->scratch, cap * sizeof(*grown));
        if (grown == NULL)
            return -ENOMEM;
        if (u->n_fields > 0)
            memcpy(grown, u->fields, u->n_fields * sizeof(*grown));
        u->fields = grown;
        u->cap_fields = cap;
    }
    char *n = scratch_strndup(u->scratch, field->name, field->name_len);
    char *v = scratch_strndup(u->scratch, field->value, field->value_len);
    if (n == NULL || v == NULL)
        return -ENOMEM;
    u->fields[u->n_fields++] = (struct upstream_field){ .name = n, .value = v };
    return 0;
}

/* The upstream's head is too big or malformed: curl stops (0 is a write error) and the
 * owner answers 502 bad_upstream_response. */
static size_t refuse_upstream_head(struct upstream *u)
{
    u->bad_head = true;
    return 0;
}

static size_t on_upstream_header(char *line, size_t size, size_t nitems, void *userdata)
{
    struct upstream *u = userdata;
    size_t taken = size * nitems, len = taken;
    if (u->abandoned)
        return 0;
    if (!u->head_done) {
        u->head_bytes += len;
        if (u->head_bytes > FORWARD_UPSTREAM_HEAD_MAX)
            return refuse_upstream_head(u);
    }
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new response head: an interim 1xx may come before the final one. */
        u->n_fields = 0;
        u->content_length = -1;
        u->status = http1_status_line(line, len);
        /* 101 switches protocols only when asked (RFC 9110 15.2.2), and a forwarded
           request never asks: Upgrade is hop-by-hop. curl would wait for a final answer
           that cannot come. WebSocket handshakes go through websocket.c, not here. */
        return u->status != 0 && u->status != 101 ? taken : refuse_upstream_head(u);
    }
    if (len == 0) {
        if (u->status >= 200 && !u->head_done) {
            u->head_done = true;
            int64_t waited_ns = store_mono_ns() - u->started_ns;
            u->waited_ms = waited_ns / 1000000;
            metrics_observe_upstream(u->f->metrics, waited_ns);
            arm_upstream_timer(u);
            /* libmicrohttpd asks for the response on its next turn: by then a small body
               has usually arrived too, and head and body leave in one write. */
            u->hooks->head_in(u->owner);
        }
        return taken;
    }
    if (line[0] == ' ' || line[0] == '\t')
        return taken; /* obsolete line folding: dropped, as RFC 9112 allows */
    struct http1_field field;
    if (http1_field_line(line, len, &field) < 0)
        return refuse_upstream_head(u);
    if (http1_is_hop_by_hop(field.name, field.name_len))
        return taken;
    if (http1_name_is(field.name, field.name_len, "Content-Length")) {
        int64_t n;
        if (http1_content_length(field.value, field.value_len, &n) < 0)
            return refuse_upstream_head(u);
        u->content_length = n;
        return taken;
    }
    int added = add_field(u, &field);
    if (added == -E2BIG)
        return refuse_upstream_head(u);
    return added == 0 ? taken : 0;
}

static size_t on_upstream_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct upstream *u = userdata;
    size_t len = size * nmemb;
    if (u->abandoned)
        return 0;
    if (u->body.len >= RESP_BUFFER_HIGH) {
        u->curl_paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    /* A body whose length the upstream gave gets one block of that size: a first append
       takes 4096 bytes, which malloc finds only after sweeping its small free lists
       (malloc_consolidate), on every response. */
    size_t expected = u->content_length > 0 ? (size_t)u->content_length : 0;
    if (bytebuf_reserve(&u->body, expected < BODY_RESERVE_MAX ? expected : BODY_RESERVE_MAX) < 0 ||
        bytebuf_append(&u->body, data, len) < 0)
        return 0;
    arm_upstream_timer(u);
    if (u->reader_waiting) {
        u->reader_waiting = false;
        u->hooks->body_in(u->owner);
    }
    return len;
}

static ssize_t read_response_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct upstream *u = cls;
    (void)pos;
    u->reader_waiting = false;
    if (u->f->closing)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    bool slots_pending = u->hooks->slots_pending(u->owner);
    size_t avail = u->body.len;
    if (avail > 0 && u->content_length >= 0 && slots_pending &&
        *u->bytes_sent + avail >= (uint64_t)u->content_length)
        avail--; /* the last byte ends the response: it waits for the slots to be given back */
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, u->body.data + u->body.off, n);
        upstream_body_sent(u, n);
        return (ssize_t)n;
    }
    if (u->done && !slots_pending && u->body.len == 0)
        return u->result == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing to send yet: sleep until curl brings more, instead of being polled. */
    u->reader_waiting = true;
    u->hooks->starved(u->owner);
    return 0;
}

void upstream_want_body(struct upstream *u)
{
    u->reader_waiting = true;
}

size_t upstream_body_pending(const struct upstream *u, const char **data)
{
    *data = u->body.data != NULL ? u->body.data + u->body.off : "";
    return u->body.len;
}

void upstream_body_sent(struct upstream *u, size_t n)
{
    bytebuf_consume(&u->body, n);
    *u->bytes_sent += n;
    if (u->curl_paused && u->body.len < RESP_BUFFER_LOW && !u->done) {
        u->curl_paused = false;
        curl_easy_pause(u->easy, CURLPAUSE_CONT);
    }
}

/* libmicrohttpd callocs the block with every response: a small body gets a small one. */
static size_t response_block_size(uint64_t size)
{
    const size_t largest = 16 * 1024;
    return size < largest ? (size_t)size : largest;
}

static ssize_t no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* A HEAD answer or a 304 whose upstream sent no Content-Length: the proxy must not invent
 * one (RFC 9110 8.6), and libmicrohttpd 0.9.75 writes "Content-Length: 0" for a response of
 * size 0. Of a size it does not know it writes none; but over HTTP/1.1 it then frames it
 * chunked and, body or not, sends the last chunk "0\r\n\r\n" after the head, which a client
 * reads as the start of the next answer. So the answer is unframed, as to an HTTP/1.0
 * client, and the connection ends with it (Connection: close). */
static struct MHD_Response *bodiless_response_of_unknown_length(void)
{
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, no_body, NULL, NULL);
    if (resp != NULL && MHD_set_response_options(resp, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END) != MHD_YES) {
        MHD_destroy_response(resp);
        return NULL;
    }
    return resp;
}

struct MHD_Response *upstream_response(struct upstream *u, bool head_request, bool *bodiless)
{
    bool none = head_request || u->status == 204 || u->status == 304 || u->content_length == 0;
    *bodiless = none;
    uint64_t size = u->content_length >= 0 ? (uint64_t)u->content_length : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp;
    if (none && size == MHD_SIZE_UNKNOWN && u->status != 204) {
        resp = bodiless_response_of_unknown_length();
    } else if (none && (size == MHD_SIZE_UNKNOWN || size == 0)) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else if (!none && u->done && u->result == CURLE_OK && !u->hooks->slots_pending(u->owner)) {
        /* The whole body is in: MHD takes the buffer and sends it with the head. */
        struct bytebuf *b = &u->body;
        size_t len = b->len;
        resp = MHD_create_response_from_buffer_with_free_callback_cls(len, len > 0 ? b->data + b->off : (void *)"",
                                                                      free, b->data);
        if (resp != NULL) {
            memset(b, 0, sizeof(*b));
            *u->bytes_sent = len;
        }
    } else {
        resp = MHD_create_response_from_callback(size, response_block_size(size), read_response_body, u, NULL);
    }
    if (resp == NULL)
        return NULL;
    for (size_t i = 0; i < u->n_fields; i++)
        MHD_add_response_header(resp, u->fields[i].name, u->fields[i].value);
    return resp;
}

/* MHD writes the response head into the connection's pool, next to the request head;
 * when they do not fit together it drops the connection without a word (and the access log
 * would say 200). The room MHD's own lines (status, Date, Content-Length, Connection) and
 * the RateLimit headers take. */
#define MHD_OWN_LINES_BYTES 512
_Static_assert(FORWARD_CLIENT_POOL_BYTES >= MAX_HEAD_BYTES + MHD_OWN_LINES_BYTES + 4096,
               "the pool holds the largest request head and an ordinary response head");

bool upstream_head_fits(const struct upstream *u, size_t client_head_bytes)
{
    size_t bytes = client_head_bytes + MHD_OWN_LINES_BYTES;
    for (size_t i = 0; i < u->n_fields; i++)
        bytes += strlen(u->fields[i].name) + strlen(u->fields[i].value) + 4;
    return bytes <= FORWARD_CLIENT_POOL_BYTES;
}

/* curl only reads the list, so its nodes and lines are the request's scratch: no
 * curl_slist_append (two allocations a line) and no formatting. */
static int append_line(struct upstream *u, char *line)
{
    struct curl_slist *node = scratch_alloc(u->scratch, sizeof(*node));
    if (node == NULL)
        return -ENOMEM;
    node->data = line;
    node->next = NULL;
    if (u->lines_last != NULL)
        u->lines_last->next = node;
    else
        u->lines = node;
    u->lines_last = node;
    return 0;
}

/* Collects the gate's upstream fields as curl lines, noting the ones curl would invent. */
struct curl_lines {
    struct upstream *u;
    bool saw_accept, saw_content_type;
};

static int append_header(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct curl_lines *c = ctx;
    char *line = scratch_alloc(c->u->scratch, name_len + value_len + 3);
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
    c->saw_accept |= http1_name_is(name, name_len, "Accept");
    c->saw_content_type |= http1_name_is(name, name_len, "Content-Type");
    return append_line(c->u, line);
}

static void *scratch_for_headers(void *ctx, size_t n)
{
    struct curl_lines *c = ctx;
    return scratch_alloc(c->u->scratch, n);
}

/* Whether the transfer sends a body (curl's POSTFIELDS): POST, PUT and PATCH always (an
 * empty one has Content-Length: 0), another method when the client sent body bytes; never
 * HEAD. */
static bool request_sends_body(const struct upstream_request *req)
{
    const char *m = req->model->method;
    if (strcmp(m, "HEAD") == 0)
        return false;
    return req->body_len > 0 || strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0;
}

/* The upstream's header lines: what gate_upstream_headers says it receives, and "Name:"
 * lines that keep curl from adding headers the client did not send. curl adds Accept to
 * every request, Expect and Content-Type only to one that sends a body: each line costs
 * curl a scan per transfer, so the last two go only where curl would add its own. */
static int build_lines(struct upstream *u, const struct upstream_request *req, bool sends_body)
{
    struct curl_lines lines = { .u = u };
    struct gate_header_sink sink = { .emit = append_header, .alloc = scratch_for_headers, .ctx = &lines };
    int rc = gate_upstream_headers(req->model, req->check, &sink);
    if (rc == 0 && !lines.saw_accept)
        rc = append_line(u, (char *)"Accept:");
    if (!sends_body)
        return rc;
    if (rc == 0)
        rc = append_line(u, (char *)"Expect:");
    if (rc == 0 && !lines.saw_content_type)
        rc = append_line(u, (char *)"Content-Type:");
    return rc;
}

/* A new easy handle with the options every transfer shares. A handle goes back to the
 * forwarder's pool with them still set: no curl_easy_reset, which frees and re-copies
 * every option, and a few fewer option strings to copy each request. */
static CURL *new_easy(struct forwarder *f)
{
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SHARE, f->share);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_upstream_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_upstream_body);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
    /* Why a transfer failed, for the TLS failure log (one buffer per forwarder: the text
       of the latest failure, read right after curl_multi_socket_action returns). */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->curl_error);
    /* The upstream is the configured address, never an http_proxy from the environment
     * (nginx and HAProxy do not read one either); this also spares curl five getenv()s. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    return e;
}

/* Sets what differs between transfers, every one of them, over what the handle's last
 * transfer left. */
static void set_transfer_options(struct upstream *u, const struct upstream_request *req, bool has_body,
                                 size_t index, const char *upstream)
{
    CURL *e = u->easy;
    const struct proxy_config *cfg = u->f->cfg;
    u->url_set = upstream_urls_name(&u->f->urls, e, index, upstream);
    curl_easy_setopt(e, CURLOPT_REQUEST_TARGET, req->model->target->forward);
    curl_easy_setopt(e, CURLOPT_PRIVATE, u);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, u);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, u);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, u->lines);
    /* Set for every https transfer (so a reload reaches pooled handles); http ones ignore them. */
    if (upstream_is_https(upstream))
        upstream_tls_curl_options(e, cfg);

    const char *m = req->model->method;
    bool head = strcmp(m, "HEAD") == 0;
    /* HTTPGET starts from a plain GET: no body, no upload, NOBODY off. */
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (head) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body_len > 0 ? req->body : "");
    }
    /* curl says GET, HEAD and POST-with-a-body by itself */
    bool curl_names_it = head || (has_body ? strcmp(m, "POST") == 0 : strcmp(m, "GET") == 0);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, curl_names_it ? NULL : m);
}

const char *upstream_failure(const struct upstream *u)
{
    if (u->bad_head)
        return "bad response head (malformed, or over 64 KiB)";
    if (u->head_done || !u->done)
        return NULL;
    return upstream_error_of_transfer(u->result, u->os_errno, u->timed_out);
}

void upstream_init(struct upstream *u, struct forwarder *f, struct scratch *scratch, const struct upstream_hooks *hooks,
                   void *owner, uint64_t *bytes_sent)
{
    memset(u, 0, sizeof(*u));
    u->f = f;
    u->scratch = scratch;
    u->hooks = hooks;
    u->owner = owner;
    u->bytes_sent = bytes_sent;
    u->content_length = -1;
    u->waited_ms = -1;
}

int upstream_start(struct upstream *u, const struct upstream_request *req)
{
    struct forwarder *f = u->f;
    const struct proxy_config *cfg = f->cfg;
    size_t index = f->next++ % cfg->n_upstreams;
    const char *upstream = cfg->upstreams[index];
    evtimer_assign(&u->timer, f->base, on_upstream_timeout, u);
    u->easy = f->n_easy_pool > 0 ? f->easy_pool[--f->n_easy_pool] : new_easy(f);
    bool sends_body = request_sends_body(req);
    if (u->easy == NULL || build_lines(u, req, sends_body) < 0)
        return -ENOMEM;
    set_transfer_options(u, req, sends_body, index, upstream);
    arm_upstream_timer(u);
    u->started_ns = store_mono_ns();
    if (curl_multi_add_handle(f->multi, u->easy) != CURLM_OK) {
        evtimer_del(&u->timer);
        return -EIO;
    }
    u->started = true;
    return 0;
}

void upstream_abort(struct upstream *u)
{
    u->abandoned = true;
    if (u->started && !u->done) {
        curl_multi_remove_handle(u->f->multi, u->easy);
        u->done = true;
        u->result = CURLE_ABORTED_BY_CALLBACK;
    }
}

void upstream_release(struct upstream *u)
{
    if (u->f == NULL)
        return; /* never initialised */
    upstream_abort(u);
    struct forwarder *f = u->f;
    if (u->easy != NULL) {
        if (f->n_easy_pool < EASY_POOL_MAX) {
            /* The options naming u stay until set_transfer_options sets every one of them
               for the handle's next transfer; curl does not look at an idle handle. */
            f->easy_pool[f->n_easy_pool++] = u->easy;
        } else {
            curl_easy_cleanup(u->easy);
        }
    }
    u->easy = NULL;
    upstream_urls_done(u->url_set);
    u->url_set = NULL;
    /* The header lines are in the owner's scratch, which goes with it. */
    bytebuf_free(&u->body);
    if (event_initialized(&u->timer))
        evtimer_del(&u->timer);
}
