/* An asynchronous hiredis context on a worker's libevent loop, plain or over TLS
 * (rediss://). Plain, it is hiredis' own libevent adapter, unchanged. Over TLS, hiredis
 * keeps everything it does (formatting commands into its output buffer, the queue of reply
 * callbacks, parsing replies, the connect and disconnect callbacks, freeing), and this
 * adapter moves the bytes: OpenSSL over hiredis' socket, driven by the same loop. Private
 * to store/.
 *
 * How: hiredis 0.14's redisAsyncHandleRead and redisAsyncHandleWrite call read() and
 * write() themselves, and nothing else of the async context touches the socket. So a
 * rediss:// connection is an ordinary redisAsyncContext (from redisAsyncConnect) attached
 * by redis_async_attach instead of redisLibeventAttach: its two persistent events on
 * hiredis' socket run the TCP connect check, then the handshake, then SSL_read into
 * hiredis' reader (redisReaderFeed, then redisProcessCallbacks, which hiredis 0.14 exports
 * without declaring) and SSL_write of hiredis' output buffer (taking off what was written,
 * as hiredis' own write does). The connect callback comes after the handshake, with
 * REDIS_CONNECTED set as hiredis sets it; a failure is handed to hiredis as its own (the
 * connect callback with REDIS_ERR while connecting, then an error in the reader, on which
 * redisProcessCallbacks disconnects). A hiredis callback may free the context while the
 * adapter is in its event: hiredis' cleanup hook frees the events at once and leaves the
 * adapter's own state to the event, which checks for it after every call into hiredis. The
 * worker's thread is curl's too: the thread's OpenSSL error queue is emptied before each
 * TLS call, so SSL_get_error reads ours.
 */
#pragma once
#include <hiredis.h>
#include <async.h>
#include <openssl/ssl.h>

struct event_base;

/* Attaches ac, just made by redisAsyncConnect and not yet connected, to base: with tls
 * NULL as redisLibeventAttach does; else a TLS session over its socket that verifies the
 * server's certificate names host (store/redis/redis_tls.h), done before hiredis sees the
 * connection as connected. From then on, for the caller, ac behaves as a plain one:
 * connect callback (REDIS_ERR with ac->errstr, such as "TLS: certificate verify failed:
 * ...", when the TCP connection or the TLS handshake fails; ac->err is REDIS_ERR_OTHER then
 * for a certificate that is not trusted), commands, replies, disconnect callback,
 * redisAsyncFree. Returns REDIS_OK, or REDIS_ERR (nothing attached; free ac). */
int redis_async_attach(redisAsyncContext *ac, struct event_base *base, SSL_CTX *tls, const char *host);

/* Starts a connection to host:port, or to unix_path when that is not NULL, attached to
 * base as redis_async_attach does, with ac->data and both callbacks set. NULL (nothing
 * left to free) when it cannot start, with hiredis' reason copied to why. */
redisAsyncContext *redis_async_open(struct event_base *base, SSL_CTX *tls, const char *host, int port,
                                    const char *unix_path, void *data, redisConnectCallback *on_connect,
                                    redisDisconnectCallback *on_disconnect, char *why, size_t why_len);
