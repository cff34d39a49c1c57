/* The Redis limiter's parts, shared by its three files and private to them:
 * store/redis/limiter_redis.c (the connection, its handshake and the commands in flight),
 * store/redis/limiter_redis_check.c (check.lua calls) and store/redis/limiter_redis_leases.c
 * (concurrency leases: tracked, renewed, given back).
 *
 * Back after an outage: the limiter reconnects with a backoff of 50 ms doubling to 250 ms.
 * A ZREM that could not be sent (a release while Redis was away, one sent on a connection
 * that died before Redis answered it, or the leases of a leased check that was never
 * answered: a frozen Redis runs what it had read once it thaws) is held back, up to 65536
 * (then the lease ends at its TTL), and sent first when the connection is READY again,
 * before the renewal of the leases still held. When the handshake completes, before
 * anything else is sent, the ready hook lets the local fallback hand over the leases it
 * took meanwhile (limiter_lease_adopt); the renewal that follows writes them (renew.lua
 * adds a lease it does not find), and no concurrency rule is decided until that renewal is
 * answered (rate checks are Redis's from the first READY). A check whose answer says Redis
 * held fewer leases than rule.held makes the limiter renew at once and raise a process-wide
 * epoch that makes every other worker renew at its next check.
 */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <openssl/ssl.h>

#include "store/limiter_impl.h"
#include "store/redis/limiter_redis_node.h"
#include "store/redis/redis_url.h"
#include "store/redis/store_status.h"

#define BACKOFF_MIN_MS 50    /* reconnecting: the first wait, doubled up to */
#define BACKOFF_MAX_MS 250   /* this: enforcement is back well within 1 s of Redis returning */

enum conn_state { CONN_IDLE, CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY };

enum pending_kind {
    P_CHECK, P_AUTH, P_SELECT, P_LOAD, P_LOAD_RENEW, P_RENEW, P_REGISTER, P_RELEASE_ALL, P_ZREM, P_ASKING
};

struct script {
    const char *text;
    size_t len;
    char sha[41];
};

/* What an allowed leased check adds to the lease table. */
struct lease_req {
    size_t n;
    int64_t rule_id[LIMITER_MAX_RULES], ttl_ms[LIMITER_MAX_RULES];
    size_t id_len, subject_len;
    char id[LEASE_ID_MAX];
    char subject[];
};

/* A limiter_release_all in progress: done once its last call is answered. */
struct release_all {
    void (*done)(void *arg);
    void *arg;
    int outstanding;
};

/* One command in flight. A script call keeps its arguments to resend them as EVAL on
 * NOSCRIPT. With a script, argv[0..1] are EVALSHA and the sha (or EVAL and the text) and
 * argv[2..argc-1] lie back to back in buf; without one, argv[0..argc-1] do. */
struct pending {
    struct pending *prev, *next;
    struct redis_limiter *rl;
    int64_t sent_ms;
    enum pending_kind kind;
    bool retried;
    bool asking;                    /* cluster: ASKING goes right before it (again on a resend) */
    bool is_release;                /* P_ZREM of a lease (not the PING of a sync): replayed if lost */
    const struct script *script;
    redisCallbackFn *on_reply;      /* where its reply goes (redis_send_pending) */
    limiter_done_fn *done;          /* P_CHECK */
    limiter_redirect_fn *redirected; /* P_CHECK of a cluster node: MOVED/ASK/TRYAGAIN go here */
    void *arg;
    size_t n;
    struct lease_req *lease;        /* P_CHECK with concurrency rules */
    struct release_all *all;        /* P_RELEASE_ALL */
    void (*synced)(void *arg);      /* P_ZREM of limiter_release_notify: its PING */
    void *synced_arg;
    int argc;
    char *buf;
    size_t lens[];                  /* argc of them, then buf */
};

struct redis_limiter {
    struct limiter base;
    struct event_base *evbase;
    struct redis_url url;
    SSL_CTX *tls;                    /* rediss://: verifies the server (NULL: plain) */
    char *prefix;
    size_t prefix_len;
    int64_t timeout_ms, connect_timeout_ms;
    redisAsyncContext *ac;
    _Atomic enum conn_state state;   /* read by the admin thread for /health */
    struct event *retry, *watchdog;
    int64_t backoff_ms;
    int64_t attempt_ms;       /* when the current connection attempt started */
    struct pending *head, *tail;
    struct script check, renew;
    struct event *renew_timer;
    int64_t lease_ttl_ms;     /* from the options; renewals every min(this, shortest TTL seen) / 3 */
    int64_t renew_every_ms;
    int renewing;             /* renewal calls in flight */
    bool destroying;
    bool cluster_node;        /* limiter_redis_node_create: renew.lua with keys in ARGV */
    bool parked;              /* a cluster node out of the map: no reconnecting while down */
    struct store_status status;      /* what /health and the log say of this connection */
    int64_t last_error_ms;           /* mono: the store's last error reply */
    struct event settle;             /* a READY connection's error state ends after a quiet while */
    struct pending *deferred;        /* ZREMs of leases released while Redis was away (LIFO) */
    size_t n_deferred;
    bool was_ready;                  /* connected before: a reconnect starts a grace */
    int64_t lease_grace_until_ms;    /* mono ms; concurrency checks unavailable until then */
    bool unregistered;               /* a lease held here may be missing in Redis (its
                                        registration or renewal failed): renewed again
                                        before the next check */
    void (*connected)(struct redis_limiter *rl);  /* READY again: called first (limiter_redis.c) */
    void (*ready_fn)(void *arg);     /* limiter_set_ready_hook */
    void *ready_arg;
    uint64_t lost_epoch_seen;        /* leases_lost_epoch when this limiter last renewed for it */
};

/* ---- limiter_redis_conn.c: the connection ---- */

void redis_conn_start(struct redis_limiter *rl);
/* Frees the connection now (from a timer or the limiter's end, never from a hiredis
 * callback other than a reply callback): its pending callbacks run with NULL replies. */
void redis_conn_drop(struct redis_limiter *rl);
void redis_conn_on_retry(evutil_socket_t fd, short what, void *arg);
void redis_conn_on_watchdog(evutil_socket_t fd, short what, void *arg);
void redis_conn_on_settle(evutil_socket_t fd, short what, void *arg);

/* Records an error reply of the store (the connection is kept). */
void redis_note_error(struct redis_limiter *rl, const char *what, const char *detail);
/* A pending command with room for max_args arguments of bufsize bytes in all, whose reply
 * goes to on_reply (NULL: no memory). */
struct pending *redis_pending_new(struct redis_limiter *rl, enum pending_kind kind, redisCallbackFn *on_reply,
                                  size_t max_args, size_t bufsize);
void redis_pending_free(struct pending *p);
/* Sends p (again, after NOSCRIPT: as EVAL). Returns 0, or -1 (p is then still the caller's). */
int redis_send_pending(struct redis_limiter *rl, struct pending *p);
/* Takes a command whose reply came out of the in-flight list. */
void redis_inflight_remove(struct redis_limiter *rl, struct pending *p);
/* A script call's reply is in: takes p off the in-flight list and, when the script cache
 * was flushed (or a failover), sends the script itself, once. Returns true when p was sent
 * again (its callback will run again), false when the reply is the caller's to handle. */
bool redis_script_sent_again(redisAsyncContext *ac, struct pending *p, const redisReply *reply);
/* Appends one argument to p's buffer (and its length); the next ones follow it. */
void redis_put_arg(struct pending *p, size_t *off, const char *s, size_t len);
void redis_put_arg_length(struct pending *p, size_t *off, size_t len);
void redis_put_int(struct pending *p, size_t *off, int64_t v);
/* "<prefix>{<subject>}:<rule id>", and the most bytes it takes. */
void redis_put_key(struct redis_limiter *rl, struct pending *p, size_t *off, const char *subject,
                   size_t subject_len, int64_t rule_id);
size_t redis_key_max(const struct redis_limiter *rl, size_t subject_len);

/* ---- limiter_redis_check.c ---- */

void redis_on_check_reply(redisAsyncContext *ac, void *r, void *privdata);
int redis_call_check(struct limiter *limiter, const char *subject, size_t subject_len,
                     const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                     size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                     limiter_done_fn *done, void *arg);
int redis_check(struct limiter *limiter, const char *subject, size_t subject_len, const struct limit_rule *rules,
                size_t n, int64_t now_ms, const char *lease_id, size_t lease_id_len, limiter_done_fn *done, void *arg);
int redis_peek(struct limiter *limiter, const char *subject, size_t subject_len, const struct limit_rule *rules,
               size_t n, int64_t now_ms, limiter_done_fn *done, void *arg);

/* ---- limiter_redis_leases.c ---- */

void redis_on_lease_reply(redisAsyncContext *ac, void *r, void *privdata);
void redis_on_zrem_reply(redisAsyncContext *ac, void *r, void *privdata);
void redis_on_renew_timer(evutil_socket_t fd, short what, void *arg);
/* Renews every held lease now, unless the store is down (then: when it is READY again) or a
 * renewal is still in flight; and arms the renewal timer. */
void redis_renew_now(struct redis_limiter *rl);
void redis_renew_arm(struct redis_limiter *rl);
/* Sends the releases held back while Redis was away (READY again). */
void redis_flush_deferred(struct redis_limiter *rl);
/* Holds a release's ZREM back until Redis is READY again (or frees it past the bound). */
void redis_defer_release(struct redis_limiter *rl, struct pending *p);
/* ZREM <key> <lease id>, fire and forget; held back while the store is down. */
void redis_send_zrem(struct redis_limiter *rl, const char *subject, size_t subject_len, int64_t rule_id,
                     const char *id, size_t id_len);
/* Adds the leases of an allowed check to the table. Returns 0, or -ENOMEM with none of
 * them added and a ZREM sent for each (the check then counts as failed). */
int redis_track_leases(struct redis_limiter *rl, const struct lease_req *lr);
void redis_give_back(struct limiter *limiter, struct lease *lease);
void redis_sync(struct limiter *limiter, void (*done)(void *arg), void *arg);
void redis_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg);
