/* An asynchronous hiredis context on a worker's libevent loop, plain or over TLS
 * (rediss://). Plain, it is hiredis' own libevent adapter, unchanged. Over TLS, hiredis
 * keeps everything it does (formatting commands into its output buffer, the queue of reply
 * callbacks, parsing replies, the connect and disconnect callbacks, freeing), and this
 * adapter moves the bytes: OpenSSL over hiredis' socket, driven by the same loop. Private
 * to store/. */
#pragma once
#include <hiredis.h>
#include <async.h>
#include <openssl/ssl.h>

struct event_base;

/* Attaches ac, just made by redisAsyncConnect and not yet connected, to base: with tls
 * NULL as redisLibeventAttach does; else a TLS session over its socket that verifies the
 * server's certificate names host (store/redis_tls.h), done before hiredis sees the
 * connection as connected. From then on, for the caller, ac behaves as a plain one:
 * connect callback (REDIS_ERR with ac->errstr, such as "TLS: certificate verify failed:
 * ...", when the TCP connection or the TLS handshake fails; ac->err is REDIS_ERR_OTHER then
 * for a certificate that is not trusted), commands, replies, disconnect callback,
 * redisAsyncFree. Returns REDIS_OK, or REDIS_ERR (nothing attached; free ac). */
int redis_async_attach(redisAsyncContext *ac, struct event_base *base, SSL_CTX *tls, const char *host);
