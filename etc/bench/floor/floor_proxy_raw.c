/* floor_proxy_raw: same MHD side as floor_proxy, upstream via a hand-written non-blocking
 * HTTP/1.1 keep-alive client on libevent: one pooled connection per in-flight request,
 * request written with one send(), response parsed (status line, Content-Length,
 * Content-Type). The upstream fd's EV_READ|EV_PERSIST event stays registered for the
 * connection's life (no epoll_ctl per request). Usage: floor_proxy_raw PORT UPSTREAM_PORT
 * Built with -DOPT (floor_proxy_raw_opt): resumes are batched into one MHD_run per loop pass. */
#include "floor_common.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in g_up;
static char g_host[64];

struct req;
struct uconn {
    int fd;
    struct event *ev;
    struct req *r;          /* NULL when idle */
    struct uconn *next;     /* idle list */
    int connecting;
    char *out; size_t outlen, outoff;
    char buf[8192]; size_t len;
};
static struct uconn *g_idle;

struct req {
    struct MHD_Connection *c;
    struct uconn *u;
    int state;            /* 0 new, 1 in flight, 2 done */
    long status;
    char ctype[128];
    char *buf;
    size_t len;
    char out[2048];
};

static void uconn_close(struct uconn *u)
{
    if (!u->r) /* idle: unlink from the idle list */
        for (struct uconn **pp = &g_idle; *pp; pp = &(*pp)->next)
            if (*pp == u) { *pp = u->next; break; }
    event_free(u->ev);
    close(u->fd);
    free(u);
}

static void finish(struct req *r, long status)
{
    r->status = status;
    r->state = 2;
    r->u = NULL;
    MHD_resume_connection(r->c);
#ifdef OPT /* floor_proxy_raw_opt: one MHD_run per loop pass for all resumes (zero timer) */
    static const struct timeval zero = {0, 0};
    evtimer_add(g_mhd_timer, &zero);
#else
    mhd_drive();
#endif
}

/* returns 1 when a complete response was parsed into r */
static int try_parse(struct uconn *u, struct req *r)
{
    char *he = memmem(u->buf, u->len, "\r\n\r\n", 4);
    if (!he) return 0;
    size_t hlen = (size_t)(he - u->buf) + 4;
    long status = 0;
    size_t clen = 0;
    int have_cl = 0;
    if (u->len < 12 || memcmp(u->buf, "HTTP/1.", 7)) return -1;
    status = strtol(u->buf + 9, NULL, 10);
    char *p = memchr(u->buf, '\n', hlen) + 1;
    r->ctype[0] = 0;
    while (p < u->buf + hlen - 2) {
        char *eol = memchr(p, '\n', (size_t)(u->buf + hlen - p));
        char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            char *v = colon + 1;
            while (*v == ' ') v++;
            char *ve = eol; if (ve > v && ve[-1] == '\r') ve--;
            size_t nlen = (size_t)(colon - p);
            if (nlen == 14 && !strncasecmp(p, "content-length", 14)) { clen = strtoul(v, NULL, 10); have_cl = 1; }
            else if (nlen == 12 && !strncasecmp(p, "content-type", 12)) {
                size_t vl = (size_t)(ve - v); if (vl >= sizeof r->ctype) vl = sizeof r->ctype - 1;
                memcpy(r->ctype, v, vl); r->ctype[vl] = 0;
            }
        }
        p = eol + 1;
    }
    if (!have_cl) return -1; /* floor client: Content-Length only */
    if (hlen + clen > sizeof u->buf) return -1;
    if (u->len < hlen + clen) return 0;
    r->buf = malloc(clen ? clen : 1);
    memcpy(r->buf, u->buf + hlen, clen);
    r->len = clen;
    r->status = status;
    u->len = 0; /* no pipelining */
    return 1;
}

static void on_uconn(evutil_socket_t fd, short what, void *arg)
{
    struct uconn *u = arg;
    struct req *r = u->r;
    if (what & EV_WRITE) { /* connect finished or partial write */
        if (u->connecting) {
            int err = 0; socklen_t sl = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
            if (err) { if (r) finish(r, 502); uconn_close(u); return; }
            u->connecting = 0;
        }
        while (u->outoff < u->outlen) {
            ssize_t n = send(fd, u->out + u->outoff, u->outlen - u->outoff, MSG_NOSIGNAL);
            if (n < 0) { if (errno == EAGAIN) return; if (r) finish(r, 502); uconn_close(u); return; }
            u->outoff += (size_t)n;
        }
        event_del(u->ev);
        event_assign(u->ev, g_base, fd, EV_READ | EV_PERSIST, on_uconn, u);
        event_add(u->ev, NULL);
        return;
    }
    for (;;) {
        ssize_t n = recv(fd, u->buf + u->len, sizeof u->buf - u->len, 0);
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0 || !r) { if (r) finish(r, 502); uconn_close(u); return; }
        u->len += (size_t)n;
        int k = try_parse(u, r);
        if (k < 0) { finish(r, 502); uconn_close(u); return; }
        if (k == 1) {
            u->r = NULL;
            u->next = g_idle; g_idle = u;
            finish(r, r->status);
            return;
        }
        if ((size_t)n < sizeof u->buf) return; /* short read: wait for more */
    }
}

static void upstream_start(struct req *r, const char *url)
{
    int n = snprintf(r->out, sizeof r->out, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", url, g_host);
    if (n <= 0 || (size_t)n >= sizeof r->out) { finish(r, 502); return; }
    struct uconn *u = g_idle;
    if (u) {
        g_idle = u->next;
        u->r = r; r->u = u;
        u->out = r->out; u->outlen = (size_t)n; u->outoff = 0;
        ssize_t k = send(u->fd, r->out, (size_t)n, MSG_NOSIGNAL);
        if (k == n) return;          /* the persistent EV_READ event picks up the response */
        if (k < 0 && errno != EAGAIN) { /* stale keep-alive connection: drop it, dial a new one */
            r->u = NULL; u->r = r; uconn_close(u); /* not in the idle list any more */
        } else {
            u->outoff = k > 0 ? (size_t)k : 0;
            event_del(u->ev);
            event_assign(u->ev, g_base, u->fd, EV_WRITE | EV_PERSIST, on_uconn, u);
            event_add(u->ev, NULL);
            return;
        }
    }
    u = calloc(1, sizeof *u);
    u->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(u->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    u->r = r; r->u = u;
    u->out = r->out; u->outlen = (size_t)n; u->outoff = 0;
    u->connecting = 1;
    if (connect(u->fd, (struct sockaddr *)&g_up, sizeof g_up) < 0 && errno != EINPROGRESS) {
        close(u->fd); free(u); finish(r, 502); return;
    }
    u->ev = event_new(g_base, u->fd, EV_WRITE | EV_PERSIST, on_uconn, u);
    event_add(u->ev, NULL);
}

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
        r->state = 1;
        MHD_suspend_connection(c);
        upstream_start(r, url);
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
    if (r->u) uconn_close(r->u); /* client gone mid-flight: the upstream stream is unusable */
    free(r->buf);
    free(r);
    *req_cls = NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    unsigned port = argc > 1 ? (unsigned)atoi(argv[1]) : 19030;
    const char *up = argc > 2 ? argv[2] : "19001";
    g_up.sin_family = AF_INET;
    g_up.sin_port = htons((uint16_t)atoi(up));
    g_up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(g_host, sizeof g_host, "127.0.0.1:%s", up);
    g_base = event_base_new();
    mhd_start(port, handler, completed);
    event_base_dispatch(g_base);
    return 0;
}
