/* A blocking connection to one Redis, plain or over TLS (rediss://), each connect, read and
 * write bounded by a timeout: for `tierproxy --check`'s probes and the fleet's catalog
 * (tierctl, the proxy's catalog thread), never a worker's loop. Plain connections are
 * hiredis' own; over TLS hiredis formats the commands and reads the replies, and OpenSSL
 * carries the bytes over hiredis' socket. Private to store/. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>
#include <openssl/ssl.h>

#include "store/redis/redis_url.h"

struct redis_sync;

/* Connects to u (TCP or a unix socket; with u->tls, TLS verified by tls, which must not be
 * NULL then), each step bounded by timeout_ms. Returns the connection, or NULL with why in
 * why and *pr: -EHOSTUNREACH (it cannot be reached) or -EPERM (its TLS certificate is not
 * trusted: tls' CAs did not sign it, or it does not name u->host). Logs nothing in. */
struct redis_sync *redis_sync_connect(const struct redis_url *u, SSL_CTX *tls, int64_t timeout_ms, char *why,
                                      size_t whylen, int *pr);

/* Sends one command (lens NULL: argv are C strings) and reads its reply. Returns the reply
 * (freeReplyObject it), or NULL when the connection failed (redis_sync_error says why; the
 * connection is of no further use). */
redisReply *redis_sync_command(struct redis_sync *c, int argc, const char **argv, const size_t *lens);

/* Why the last command failed ("" when none did). */
const char *redis_sync_error(const struct redis_sync *c);

/* Closes the connection (NULL: nothing). */
void redis_sync_free(struct redis_sync *c);
