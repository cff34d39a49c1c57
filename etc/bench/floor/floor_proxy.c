/* floor_proxy: MHD external-epoll + libevent front, libcurl multi-socket upstream.
 * Each request is suspended, forwarded with a pooled easy handle (connection reuse via the
 * multi's cache, CURLOPT_REQUEST_TARGET), and on completion resumed and answered with the
 * whole body as a MUST_COPY buffer response plus the upstream Content-Type.
 * Usage: floor_proxy PORT UPSTREAM_PORT
 * Built with -DOPT (floor_proxy_opt): two event-loop tricks tierproxy already uses, so the
 * floor is not overstated: (1) idle upstream sockets stay registered for EV_READ when curl
 * says CURL_POLL_REMOVE ("parked", fd-indexed table, freed from CURLOPT_CLOSESOCKETFUNCTION),
 * so a reused connection costs no epoll_ctl; (2) resumes are not followed by an immediate
 * MHD_run: a zero timer is armed instead (MHD 0.9.75's MHD_get_timeout() does not report a
 * pending resume), so one MHD_run serves every connection resumed in a loop pass; (3) the
 * library knobs: a 4 KiB MHD pool (floor_common.h), the upstream URL parsed once into a
 * CURLU handle every transfer names (CURLOPT_CURLU: curl parses no URL per transfer), and
 * CURLOPT_NOPROXY "*" (no getenv for proxy variables per transfer). */
#include "floor_common.h"
#include <curl/curl.h>
#include <unistd.h>
#include <event2/event_struct.h>

static CURLM *g_multi;
static struct event *g_curl_timer;
static char g_upstream[64];
#ifdef OPT
static CURLU *g_upstream_url;
#endif
static CURL *g_pool[4096];
static int g_npool;

struct req {
    struct MHD_Connection *c;
    CURL *e;
    int state;            /* 0 new, 1 in flight, 2 done */
    long status;
    char ctype[128];
    char *buf;
    size_t len, cap;
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct req *r = ud;
    size_t k = sz * n;
    if (r->len + k > r->cap) {
        size_t nc = r->cap ? r->cap : 1024;
        while (nc < r->len + k) nc *= 2;
        char *nb = realloc(r->buf, nc);
        if (!nb) return 0;
        r->buf = nb; r->cap = nc;
    }
    memcpy(r->buf + r->len, p, k);
    r->len += k;
    return k;
}

#ifdef OPT
static int on_curl_close(void *ud, curl_socket_t s);
#endif

static CURL *easy_get(void)
{
    if (g_npool) return g_pool[--g_npool];
    CURL *e = curl_easy_init();
#ifdef OPT
    curl_easy_setopt(e, CURLOPT_CURLU, g_upstream_url);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
#else
    curl_easy_setopt(e, CURLOPT_URL, g_upstream);
#endif
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
#ifdef OPT
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
#endif
    return e;
}

static void easy_put(CURL *e)
{
    if (g_npool < (int)(sizeof g_pool / sizeof g_pool[0])) g_pool[g_npool++] = e;
    else curl_easy_cleanup(e);
}

static void check_multi_info(void)
{
    CURLMsg *m;
    int left, resumed = 0;
    while ((m = curl_multi_info_read(g_multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *e = m->easy_handle;
        struct req *r;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
        if (m->data.result == CURLE_OK) {
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
            char *ct = NULL;
            curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
            if (ct) snprintf(r->ctype, sizeof r->ctype, "%s", ct);
        } else {
            r->status = 502;
        }
        curl_multi_remove_handle(g_multi, e);
        easy_put(e);
        r->e = NULL;
        r->state = 2;
        MHD_resume_connection(r->c);
        resumed = 1;
    }
#ifdef OPT
    if (resumed) { /* zero timer: one MHD_run on the next loop pass serves every resume made in this one */
        static const struct timeval zero = {0, 0};
        evtimer_add(g_mhd_timer, &zero);
    }
#else
    if (resumed) mhd_drive(); /* process resumed connections now, not on the ITC wake-up */
#endif
}

static void on_curl_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    int running;
    curl_multi_socket_action(g_multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info();
}

static int on_curl_timer_set(CURLM *m, long ms, void *ud)
{
    (void)m; (void)ud;
    if (ms < 0) { evtimer_del(g_curl_timer); return 0; }
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(g_curl_timer, &tv);
    return 0;
}

#ifdef OPT
struct csock { struct event ev; short kind; int parked; };
static struct csock *g_socks[65536];

static void on_curl_event(evutil_socket_t fd, short what, void *arg)
{
    struct csock *cs = arg;
    if (cs->parked) { /* idle connection became readable (closed by the peer): stop watching */
        event_del(&cs->ev); cs->kind = 0; return;
    }
    int running, fl = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(g_multi, fd, fl, &running);
    check_multi_info();
}

static int on_curl_socket(CURL *e, curl_socket_t s, int what, void *ud, void *sockp)
{
    (void)e; (void)ud; (void)sockp;
    if (s < 0 || s >= 65536) return -1;
    struct csock *cs = g_socks[s];
    if (what == CURL_POLL_REMOVE) {
        if (cs) {
            cs->parked = 1;
            if (cs->kind != (EV_READ | EV_PERSIST)) { if (cs->kind) event_del(&cs->ev); cs->kind = 0; }
        }
        return 0;
    }
    if (!cs) { cs = calloc(1, sizeof *cs); g_socks[s] = cs; }
    cs->parked = 0;
    short kind = ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST;
    if (kind == cs->kind) return 0;
    if (cs->kind) event_del(&cs->ev);
    event_assign(&cs->ev, g_base, s, kind, on_curl_event, cs);
    event_add(&cs->ev, NULL);
    cs->kind = kind;
    return 0;
}

static int on_curl_close(void *ud, curl_socket_t s)
{
    (void)ud;
    if (s >= 0 && s < 65536 && g_socks[s]) {
        if (g_socks[s]->kind) event_del(&g_socks[s]->ev);
        free(g_socks[s]); g_socks[s] = NULL;
    }
    return close(s);
}
#else
static void on_curl_event(evutil_socket_t fd, short what, void *arg)
{
    (void)arg;
    int running, fl = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(g_multi, fd, fl, &running);
    check_multi_info();
}

static int on_curl_socket(CURL *e, curl_socket_t s, int what, void *ud, void *sockp)
{
    (void)e; (void)ud;
    struct event *ev = sockp;
    if (what == CURL_POLL_REMOVE) {
        if (ev) { event_free(ev); curl_multi_assign(g_multi, s, NULL); }
        return 0;
    }
    short kind = ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST;
    if (ev) {
        if (event_get_events(ev) == kind) return 0;
        event_del(ev);
        event_assign(ev, g_base, s, kind, on_curl_event, NULL);
    } else {
        ev = event_new(g_base, s, kind, on_curl_event, NULL);
        curl_multi_assign(g_multi, s, ev);
    }
    event_add(ev, NULL);
    return 0;
}
#endif

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **req_cls)
{
    (void)cls; (void)method; (void)version; (void)upload_data;
    struct req *r = *req_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        r->c = c;
        *req_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size) { *upload_data_size = 0; return MHD_YES; }
    if (r->state == 0) {
        r->e = easy_get();
        curl_easy_setopt(r->e, CURLOPT_REQUEST_TARGET, url);
        curl_easy_setopt(r->e, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(r->e, CURLOPT_PRIVATE, r);
        r->state = 1;
        MHD_suspend_connection(c);
        curl_multi_add_handle(g_multi, r->e);
        return MHD_YES;
    }
    if (r->state == 1) return MHD_YES;
    struct MHD_Response *resp = MHD_create_response_from_buffer(r->len, r->buf, MHD_RESPMEM_MUST_COPY);
    if (r->ctype[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls; (void)c; (void)t;
    struct req *r = *req_cls;
    if (!r) return;
    if (r->e) { curl_multi_remove_handle(g_multi, r->e); easy_put(r->e); }
    free(r->buf);
    free(r);
    *req_cls = NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    unsigned port = argc > 1 ? (unsigned)atoi(argv[1]) : 19020;
    snprintf(g_upstream, sizeof g_upstream, "http://127.0.0.1:%s", argc > 2 ? argv[2] : "19001");
    curl_global_init(CURL_GLOBAL_DEFAULT);
#ifdef OPT
    g_upstream_url = curl_url();
    if (!g_upstream_url || curl_url_set(g_upstream_url, CURLUPART_URL, g_upstream, 0) != CURLUE_OK) {
        fprintf(stderr, "bad upstream %s\n", g_upstream);
        return 1;
    }
#endif
    g_base = event_base_new();
    g_multi = curl_multi_init();
    g_curl_timer = evtimer_new(g_base, on_curl_timeout, NULL);
    curl_multi_setopt(g_multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(g_multi, CURLMOPT_TIMERFUNCTION, on_curl_timer_set);
    curl_multi_setopt(g_multi, CURLMOPT_MAXCONNECTS, 1024L);
    mhd_start(port, handler, completed);
    event_base_dispatch(g_base);
    return 0;
}
