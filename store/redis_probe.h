/* `tierproxy --check` with one Redis: connects, logs in and asks it to answer (blocking
 * hiredis calls; never on a worker's event loop). The login step is shared with the
 * cluster probe (store/cluster_probe.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

#include "store/redis_url.h"

/* A connection to u, logged in (AUTH when u has a password), each step bounded by
 * timeout_ms. Returns it, or NULL with *pr set and why in why (never a password):
 * -EHOSTUNREACH when it cannot be reached, -EACCES when Redis refused the login. */
redisContext *redis_probe_login(const struct redis_url *u, int64_t timeout_ms, char *why, size_t whylen, int *pr);

/* True for an error reply that says the login is wrong or missing (WRONGPASS, NOAUTH,
 * NOPERM, ...): the store refuses us, which is not an outage. */
bool redis_reply_refuses_login(const char *reply);

/* Asks the Redis of url ([limits] redis: redis://..., unix://...) to answer PING after the
 * login and SELECT. Writes one line for the operator (never a password), such as
 * "127.0.0.1:6379 answers" or "cannot reach 127.0.0.1:6379: Connection refused". Returns 0,
 * -EINVAL (a bad URL), -EHOSTUNREACH (no answer: the store is away now, which a start
 * survives), -EACCES (wrong or missing password: every check would fail), -EIO (another
 * error reply). */
int redis_probe(const char *url, int64_t timeout_ms, char *report, size_t reportlen);
