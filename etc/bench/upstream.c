/* Fallback upstream for etc/bench.sh when nginx is not installed: one thread, epoll,
 * HTTP/1.1 keep-alive (pipelining too); every request is answered 200 with the fixed body
 * given on the command line. Request bodies (Content-Length) are read and dropped;
 * chunked request bodies are not supported (the benchmark sends GETs only).
 * Build: cc -O2 -o upstream upstream.c     Run: upstream PORT BODY  (listens on 127.0.0.1) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 65536

struct conn {
    int fd;
    size_t len;          /* bytes in in[] */
    size_t skip;         /* request-body bytes still to drop */
    char *out;           /* pending response bytes */
    size_t out_len, out_cap, out_off;
    int out_armed;       /* EPOLLOUT registered */
    char in[BUF];
};

static char resp[1024];
static size_t resp_len;

static void conn_close(int ep, struct conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->out);
    free(c);
}

static int queue(struct conn *c)
{
    if (c->out_len + resp_len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap * 2 : 16384;
        while (cap < c->out_len + resp_len)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p)
            return -1;
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, resp, resp_len);
    c->out_len += resp_len;
    return 0;
}

/* Parses complete requests in c->in, queues one response each; -1 = close. */
static int parse(struct conn *c)
{
    size_t pos = 0;
    for (;;) {
        if (c->skip) {
            size_t n = c->len - pos < c->skip ? c->len - pos : c->skip;
            pos += n;
            c->skip -= n;
            if (c->skip)
                break;
        }
        char *end = memmem(c->in + pos, c->len - pos, "\r\n\r\n", 4);
        if (!end)
            break;
        size_t hlen = (size_t)(end - (c->in + pos)) + 4;
        /* Content-Length, case-insensitively */
        for (char *l = memchr(c->in + pos, '\n', hlen); l && l < end; l = memchr(l + 1, '\n', (size_t)(end - l))) {
            if (strncasecmp(l + 1, "content-length:", 15) == 0)
                c->skip = strtoull(l + 16, NULL, 10);
        }
        pos += hlen;
        if (queue(c) < 0)
            return -1;
    }
    if (pos == 0 && c->len == BUF)
        return -1;                       /* header larger than the buffer */
    memmove(c->in, c->in + pos, c->len - pos);
    c->len -= pos;
    return 0;
}

static int flush(int ep, struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) {
                if (!c->out_armed) {
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                    c->out_armed = 1;
                }
                return 0;
            }
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    if (c->out_cap > 65536) {            /* give back a buffer grown by a burst */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    c->out_len = c->out_off = 0;
    if (c->out_armed) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->out_armed = 0;
    }
    return 0;
}

static void accept_all(int ep, int ls)
{
    int fd, one = 1;
    while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *nc = calloc(1, sizeof *nc);
        if (!nc) {
            close(fd);
            continue;
        }
        nc->fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = nc};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* One connection's events: write what waits, read and answer what came. */
static void serve(int ep, struct conn *c, uint32_t events)
{
    if ((events & EPOLLOUT) && flush(ep, c) < 0) {
        conn_close(ep, c);
        return;
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    ssize_t r = recv(c->fd, c->in + c->len, BUF - c->len, 0);
    if (r <= 0) {
        if (!(r < 0 && (errno == EAGAIN || errno == EINTR)))
            conn_close(ep, c);
        return;
    }
    c->len += (size_t)r;
    if (parse(c) < 0 || flush(ep, c) < 0)
        conn_close(ep, c);
}

static int listen_on(const char *port)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 4096) < 0) {
        perror("bind/listen");
        return -1;
    }
    return ls;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT BODY\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *body = argv[2];
    int hl = snprintf(resp, sizeof resp,
                      "HTTP/1.1 200 OK\r\nServer: bench-upstream\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: keep-alive\r\n\r\n%s", strlen(body), body);
    if (hl < 0 || (size_t)hl >= sizeof resp)
        return 2;
    resp_len = (size_t)hl;
    int ls = listen_on(argv[1]);
    if (ls < 0)
        return 1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno != EINTR) {
            perror("epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                accept_all(ep, ls);
            else
                serve(ep, evs[i].data.ptr, evs[i].events);
        }
    }
}
