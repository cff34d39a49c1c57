/* A blocking Redis connection, plain or TLS. See redis_sync.h. */
#include "store/redis/redis_sync.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#include <openssl/err.h>

#include "store/redis/redis_tls.h"

struct redis_sync {
    redisContext *c;   /* the socket and the reply reader; plain: the I/O too */
    SSL *ssl;          /* rediss://: the session over c's socket */
    char err[200];     /* over TLS: why the last command failed */
};

void redis_sync_free(struct redis_sync *c)
{
    if (c == NULL)
        return;
    SSL_free(c->ssl);
    if (c->c != NULL)
        redisFree(c->c);
    free(c);
}

/* why from a TLS call on a blocking socket: there a wish to wait is the socket's timeout. */
static enum redis_tls_outcome tls_failed(SSL *ssl, int ret, char *why, size_t whylen)
{
    enum redis_tls_outcome o = redis_tls_failure(ssl, ret, why, whylen);
    if (o == REDIS_TLS_WANT_READ || o == REDIS_TLS_WANT_WRITE)
        snprintf(why, whylen, "TLS: timed out");
    return o;
}

struct redis_sync *redis_sync_connect(const struct redis_url *u, SSL_CTX *tls, int64_t timeout_ms, char *why,
                                      size_t whylen, int *pr)
{
    struct timeval tv = {.tv_sec = (time_t)(timeout_ms / 1000), .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000};
    *pr = -EHOSTUNREACH;
    struct redis_sync *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    c->c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv) : redisConnectWithTimeout(u->host, u->port, tv);
    if (c->c == NULL || c->c->err || redisSetTimeout(c->c, tv) != REDIS_OK) {
        snprintf(why, whylen, "%s", c->c != NULL && c->c->errstr[0] ? c->c->errstr : "cannot connect");
        goto fail;
    }
    if (!u->tls)
        return c;
    if (tls == NULL) {
        snprintf(why, whylen, "TLS: no TLS context");
        goto fail;
    }
    if ((c->ssl = redis_tls_session_new(tls, c->c->fd, u->host, why, whylen)) == NULL)
        goto fail;
    ERR_clear_error();
    int r = SSL_connect(c->ssl);
    if (r == 1)
        return c;
    enum redis_tls_outcome o = tls_failed(c->ssl, r, why, whylen);
    if (o == REDIS_TLS_UNTRUSTED)
        *pr = -EPERM;
    else if (o == REDIS_TLS_WANT_READ || o == REDIS_TLS_WANT_WRITE)   /* a plain Redis waits for a line */
        snprintf(why, whylen, "TLS: no answer to the handshake within %lld ms (a port without TLS?)",
                 (long long)timeout_ms);
fail:
    redis_sync_free(c);
    return NULL;
}

static int write_all(struct redis_sync *c, const char *buf, size_t len)
{
    ERR_clear_error();
    while (len > 0) {
        int n = SSL_write(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
        if (n <= 0) {
            tls_failed(c->ssl, n, c->err, sizeof(c->err));
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The next reply from the TLS session, read into hiredis' reader. */
static redisReply *read_reply(struct redis_sync *c)
{
    char buf[16384];
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->c->reader, &reply) != REDIS_OK) {
            snprintf(c->err, sizeof(c->err), "%s", c->c->reader->errstr);
            return NULL;
        }
        if (reply != NULL)
            return reply;
        ERR_clear_error();
        int n = SSL_read(c->ssl, buf, sizeof(buf));
        if (n <= 0) {
            tls_failed(c->ssl, n, c->err, sizeof(c->err));
            return NULL;
        }
        if (redisReaderFeed(c->c->reader, buf, (size_t)n) != REDIS_OK) {
            snprintf(c->err, sizeof(c->err), "%s", c->c->reader->errstr);
            return NULL;
        }
    }
}

redisReply *redis_sync_command(struct redis_sync *c, int argc, const char **argv, const size_t *lens)
{
    if (c->ssl == NULL)
        return redisCommandArgv(c->c, argc, argv, lens);
    if (c->err[0] != '\0')
        return NULL;   /* a connection that failed is not used again */
    char *cmd = NULL;
    long long len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0) {
        snprintf(c->err, sizeof(c->err), "out of memory");
        return NULL;
    }
    int r = write_all(c, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return r == 0 ? read_reply(c) : NULL;
}

const char *redis_sync_error(const struct redis_sync *c)
{
    return c->ssl != NULL ? c->err : c->c->errstr;
}
