/* hiredis' asynchronous API over TLS. See redis_async.h.
 *
 * hiredis 0.14 reads and writes its socket itself (redisAsyncHandleRead/Write call read()
 * and write()), so over TLS those two are never called. Instead this adapter's events
 * do what they do, with OpenSSL in between: bytes read are decrypted and fed to hiredis'
 * reply reader, and redisProcessCallbacks runs the callbacks of the replies complete;
 * hiredis' output buffer (c->obuf) is encrypted and written, and what was written taken
 * off it. The connect callback comes after the TLS handshake, when hiredis would call it
 * (the first writable event) on a plain connection, with REDIS_CONNECTED set as hiredis
 * sets it. A failure is handed to hiredis the way it meets one of its own: the connect
 * callback with REDIS_ERR before the connection is up, and in any case the reader's error,
 * on which redisProcessCallbacks disconnects (pending callbacks get NULL replies, the
 * disconnect callback runs, the context is freed), as after a failed read. */
#include "store/redis/redis_async.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <openssl/err.h>

#include "store/redis/redis_tls.h"

/* Exported by hiredis 0.14 (and declared by 1.x's async.h) but missing from 0.14's header. */
void redisProcessCallbacks(redisAsyncContext *ac);

enum phase { TCP_CONNECTING, HANDSHAKING, OPEN };

struct tls_link {
    redisAsyncContext *ac;
    SSL *ssl;
    struct event *rev, *wev;      /* persistent, on hiredis' socket */
    enum phase phase;
    bool write_wants_read;        /* SSL_write waits for a readable socket */
    bool read_wants_write;        /* SSL_read waits for a writable socket */
    int busy;                     /* inside on_event: hiredis' cleanup defers the free */
    bool freed;
};

static void link_free(struct tls_link *l)
{
    if (l->rev != NULL)
        event_free(l->rev);
    if (l->wev != NULL)
        event_free(l->wev);
    SSL_free(l->ssl);
    free(l);
}

/* ---- the hooks hiredis calls ---- */

static void hook_add_read(void *data)
{
    struct tls_link *l = data;
    if (l->phase == OPEN)
        event_add(l->rev, NULL);
}

static void hook_del_read(void *data)
{
    struct tls_link *l = data;
    if (l->phase == OPEN && !l->write_wants_read)
        event_del(l->rev);
}

static void hook_add_write(void *data)
{
    struct tls_link *l = data;
    if (l->phase == OPEN)   /* before: written once the handshake is done */
        event_add(l->wev, NULL);
}

static void hook_del_write(void *data)
{
    struct tls_link *l = data;
    if (l->phase == OPEN && !l->read_wants_write)
        event_del(l->wev);
}

/* hiredis is freeing the context (and closes its socket after this): the events go now,
 * the link itself when on_event, if it is running, is done with it. */
static void hook_cleanup(void *data)
{
    struct tls_link *l = data;
    event_free(l->rev);
    event_free(l->wev);
    l->rev = l->wev = NULL;
    l->ac = NULL;
    if (l->busy > 0)
        l->freed = true;
    else
        link_free(l);
}

/* ---- failing as hiredis fails ---- */

/* Ends the connection with why: the connect callback first if it is not up yet, then the
 * disconnect hiredis makes of a reader error. Frees ac (and, through cleanup, l). */
static void fail(struct tls_link *l, int code, const char *why)
{
    redisAsyncContext *ac = l->ac;
    redisContext *c = &ac->c;
    c->err = code;
    snprintf(c->errstr, sizeof(c->errstr), "%s", why);
    ac->err = code;
    ac->errstr = c->errstr;
    if (!(c->flags & REDIS_CONNECTED) && ac->onConnect != NULL)
        ac->onConnect(ac, REDIS_ERR);
    c->reader->err = code;
    snprintf(c->reader->errstr, sizeof(c->reader->errstr), "%s", why);
    redisProcessCallbacks(ac);
}

static void fail_tls(struct tls_link *l, int ret)
{
    char why[sizeof(l->ac->c.errstr)];
    enum redis_tls_outcome o = redis_tls_failure(l->ssl, ret, why, sizeof(why));
    fail(l, o == REDIS_TLS_UNTRUSTED ? REDIS_ERR_OTHER : o == REDIS_TLS_CLOSED ? REDIS_ERR_EOF : REDIS_ERR_IO, why);
}

/* ---- moving the bytes ---- */

/* Waits for the socket as OpenSSL asked (ret: the failed call's return). Returns false
 * when the call failed for good (the connection is then gone). */
static bool wait_or_fail(struct tls_link *l, int ret, bool *wants_other, short own)
{
    int saved_errno = errno;
    int e = SSL_get_error(l->ssl, ret);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        bool other = (own == EV_WRITE) == (e == SSL_ERROR_WANT_READ);
        if (wants_other != NULL)
            *wants_other = other;
        event_add(e == SSL_ERROR_WANT_READ ? l->rev : l->wev, NULL);
        return true;
    }
    errno = saved_errno;
    fail_tls(l, ret);
    return false;
}

static void connected(struct tls_link *l)
{
    redisAsyncContext *ac = l->ac;
    l->phase = OPEN;
    event_add(l->rev, NULL);
    if (sdslen(ac->c.obuf) == 0)
        event_del(l->wev);
    else
        event_add(l->wev, NULL);   /* commands queued before the connection was up */
    ac->c.flags |= REDIS_CONNECTED;
    if (ac->onConnect != NULL)
        ac->onConnect(ac, REDIS_OK);   /* may queue commands: the write event sends them */
}

static void handshake(struct tls_link *l)
{
    ERR_clear_error();   /* curl shares the thread's queue; SSL_get_error reads it */
    int r = SSL_connect(l->ssl);
    if (r == 1) {
        connected(l);
        return;
    }
    event_del(l->rev);
    event_del(l->wev);
    wait_or_fail(l, r, NULL, 0);
}

/* The TCP connection is up (or failed): its socket became writable. */
static void tcp_connected(struct tls_link *l)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(l->ac->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        fail(l, REDIS_ERR_IO, strerror(err));
        return;
    }
    l->phase = HANDSHAKING;
    handshake(l);
}

/* Nothing more to write: the write event rests unless a read waits for it. */
static void write_done(struct tls_link *l)
{
    if (!l->read_wants_write)
        event_del(l->wev);
}

static void write_some(struct tls_link *l)
{
    redisContext *c = &l->ac->c;
    size_t len = sdslen(c->obuf);
    l->write_wants_read = false;
    if (len == 0) {
        write_done(l);
        return;
    }
    ERR_clear_error();
    int n = SSL_write(l->ssl, c->obuf, len > INT_MAX ? INT_MAX : (int)len);
    if (n <= 0) {
        wait_or_fail(l, n, &l->write_wants_read, EV_WRITE);
        return;
    }
    if ((size_t)n == len) {   /* as hiredis' own write does */
        sdsfree(c->obuf);
        c->obuf = sdsempty();
        write_done(l);
    } else {
        sdsrange(c->obuf, n, -1);
    }
}

/* Reads what the socket has; feeds it to hiredis and runs the callbacks of the replies it
 * completes. Returns false when the connection is gone (or may be: a callback may free it). */
static bool read_some(struct tls_link *l)
{
    redisContext *c = &l->ac->c;
    char buf[16384];
    bool fed = false;
    int n;
    l->read_wants_write = false;
    ERR_clear_error();
    while ((n = SSL_read(l->ssl, buf, sizeof(buf))) > 0) {
        fed = true;   /* a feed that fails leaves the reader's error for the callbacks */
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
            break;
    }
    int saved_errno = errno;
    if (fed)
        redisProcessCallbacks(l->ac);   /* a reader error disconnects here */
    if (l->freed)
        return false;
    if (n > 0)
        return true;
    errno = saved_errno;
    return wait_or_fail(l, n, &l->read_wants_write, EV_READ);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    struct tls_link *l = arg;
    l->busy++;
    if (l->phase == TCP_CONNECTING) {
        tcp_connected(l);
    } else if (l->phase == HANDSHAKING) {
        handshake(l);
    } else {
        bool alive = true;
        if ((what & EV_READ) || l->read_wants_write)
            alive = read_some(l);
        if (alive && ((what & EV_WRITE) || l->write_wants_read))
            write_some(l);
    }
    l->busy--;
    if (l->freed && l->busy == 0)
        link_free(l);
}

int redis_async_attach(redisAsyncContext *ac, struct event_base *base, SSL_CTX *tls, const char *host)
{
    if (tls == NULL)
        return redisLibeventAttach(ac, base);
    if (ac->ev.data != NULL)
        return REDIS_ERR;
    struct tls_link *l = calloc(1, sizeof(*l));
    char err[200];
    if (l == NULL || (l->ssl = redis_tls_session_new(tls, ac->c.fd, host, err, sizeof(err))) == NULL ||
        (l->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, on_event, l)) == NULL ||
        (l->wev = event_new(base, ac->c.fd, EV_WRITE | EV_PERSIST, on_event, l)) == NULL) {
        if (l != NULL)
            link_free(l);
        return REDIS_ERR;
    }
    l->ac = ac;
    ac->ev.addRead = hook_add_read;
    ac->ev.delRead = hook_del_read;
    ac->ev.addWrite = hook_add_write;
    ac->ev.delWrite = hook_del_write;
    ac->ev.cleanup = hook_cleanup;
    ac->ev.data = l;
    event_add(l->wev, NULL);   /* writable: the TCP connection is up (or failed) */
    return REDIS_OK;
}

redisAsyncContext *redis_async_open(struct event_base *base, SSL_CTX *tls, const char *host, int port,
                                    const char *unix_path, void *data, redisConnectCallback *on_connect,
                                    redisDisconnectCallback *on_disconnect, char *why, size_t why_len)
{
    redisAsyncContext *ac = unix_path != NULL ? redisAsyncConnectUnix(unix_path) : redisAsyncConnect(host, port);
    if (ac == NULL || ac->err || redis_async_attach(ac, base, tls, host) != REDIS_OK) {
        snprintf(why, why_len, "%s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        return NULL;
    }
    ac->data = data;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    return ac;
}
