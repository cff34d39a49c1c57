/* What a limiter last met of its store, for /health and the log: answering, unreachable
 * (not connected, or a command timed out) or answering with errors (a wrong password, OOM,
 * a script error), with the reason. Written on the limiter's thread, read from any thread.
 * Private to store/ (limiter.h says what callers see).
 *
 * An error reply to a check is a store failure like a timeout (on_store_error decides) but
 * the connection is kept. The state is OK again once the store admits a check, the
 * handshake succeeds, or a second passes with no error reply (a refusal writes nothing, so
 * under OOM it proves nothing; and a worker that meets no traffic must not say error for
 * good). A TLS certificate that is not trusted is an ERROR, as WRONGPASS is (no retry mends
 * it); a server that closes without TLS' close_notify (Redis when it exits) is UNREACHABLE.
 */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"

#define STORE_REASON_MAX 200

struct store_status {
    pthread_mutex_t lock;            /* guards reason */
    _Atomic int health;              /* enum limiter_health */
    char reason[STORE_REASON_MAX];
    char where[64];                  /* "host:port" (or the socket path) the reasons are about */
    limiter_event_fn *hook;
    void *hook_arg;
};

/* An answering store at `where` (copied, cut to fit). */
void store_status_init(struct store_status *s, const char *where);
void store_status_destroy(struct store_status *s);

/* The store failed a check or a connection for `what` (a step: "connect", "AUTH", "check")
 * because of `detail` (hiredis' errstr, or the error reply as Redis wrote it): records it
 * and tells the hook. health is LIMITER_HEALTH_UNREACHABLE or LIMITER_HEALTH_ERROR. */
void store_status_fail(struct store_status *s, enum limiter_health health, const char *what, const char *detail);

/* A check the store could not decide because of the state recorded last: tells the hook
 * again (so the log can count), records nothing. */
void store_status_repeat(struct store_status *s);

/* The store answered a check: OK again (the hook hears of it when it was not). */
void store_status_ok(struct store_status *s);

/* The health recorded and, when not OK, its reason in reason (never a password: Redis'
 * replies and hiredis' errors hold none). */
enum limiter_health store_status_get(struct store_status *s, char *reason, size_t len);
