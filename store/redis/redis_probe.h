/* `tierproxy --check` with one Redis: connects, logs in and asks it to answer (blocking
 * calls, store/redis/redis_sync.h; never on a worker's event loop). The login step is shared
 * with the cluster probe (store/cluster/cluster_probe.c) and the fleet's catalog
 * (store/redis/fleet_redis.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis/redis_sync.h"
#include "store/redis/redis_url.h"

/* A connection to u (over TLS verified by tls for rediss://), logged in (AUTH when u has a
 * password: AUTH user password for an ACL user), each step bounded by timeout_ms. Returns
 * it, or NULL with *pr set and why in why (never a password): -EHOSTUNREACH when it cannot
 * be reached, -EPERM when its TLS certificate is not trusted, -EACCES when Redis refused
 * the login. */
struct redis_sync *redis_probe_login(const struct redis_url *u, SSL_CTX *tls, int64_t timeout_ms, char *why,
                                     size_t whylen, int *pr);

/* The TLS context for URLs like u: NULL without TLS (*pr 0), else one verifying with
 * ca_file (NULL or "": the system's CAs), or NULL with why in why and *pr -EINVAL. */
SSL_CTX *redis_probe_tls(const struct redis_url *u, const char *ca_file, char *why, size_t whylen, int *pr);

/* True for an error reply that says the login is wrong or missing (WRONGPASS, NOAUTH,
 * NOPERM, ...): the store refuses us, which is not an outage. */
bool redis_reply_refuses_login(const char *reply);

/* Asks the Redis of url ([limits] redis: redis://..., rediss://..., unix://...; over TLS
 * verified with ca_file, NULL or "" for the system's CAs) to answer PING after the login and
 * SELECT. Writes one line for the operator (never a password), such as "127.0.0.1:6379
 * answers" or "cannot reach 127.0.0.1:6379: Connection refused". Returns 0, -EINVAL (a bad
 * URL or CA file), -EHOSTUNREACH (no answer: the store is away now, which a start
 * survives), -EPERM (its TLS certificate is not trusted), -EACCES (wrong or missing
 * password: every check would fail), -EIO (another error reply). */
int redis_probe(const char *url, const char *ca_file, int64_t timeout_ms, char *report, size_t reportlen);
