/* The Redis limiter store: one asynchronous hiredis connection per event loop, one
 * EVALSHA of check.lua per check.
 *
 * Connection life: IDLE -> CONNECTING -> HANDSHAKE (AUTH, SELECT, SCRIPT LOAD pipelined)
 * -> READY. Only READY sends checks; in any other state limiter_check answers
 * LIMITER_UNAVAILABLE at once. A failed context is never reused: it is freed and a new one
 * is made after a backoff (50 ms doubling to 250 ms, back to 50 ms once READY).
 *
 * Commands in flight are kept in send order (which is reply order). A watchdog timer fails
 * the connection when the oldest has waited longer than command_timeout_ms, or when
 * connecting takes too long. Failing the connection frees the hiredis context, which calls
 * every pending reply callback with a NULL reply: that is how each check's done is called
 * exactly once, and why a check's state lives until its callback (hiredis callbacks cannot
 * be cancelled).
 *
 * Concurrency leases: a leased check that is allowed adds its leases to the limiter's lease
 * table when the reply comes (a check that fails on the way holds nothing here; a lease
 * Redis recorded anyway ends at its TTL). A timer every lease_ttl_ms / 3 sends renew.lua
 * once with every lease held (RENEW_BATCH leases per call at most), skipped while the
 * connection is not READY and sent again as soon as it is. limiter_release sends one ZREM
 * per lease, fire and forget; one that cannot be sent (not READY) or whose connection goes
 * before Redis answers is held back (up to MAX_DEFERRED_RELEASES) and sent first when the
 * connection is READY again, as are ZREMs for the leases of a leased check that was sent
 * and never answered (Redis may have recorded them). limiter_release_all sends renew.lua in
 * "release" mode.
 * limiter_destroy sends nothing: the leases it held stop counting at their TTL, as those
 * of a proxy that crashed.
 *
 * A cluster node (limiter_redis_node_create, store/limiter_redis_node.h: one per master of a
 * Redis Cluster, made by store/limiter_cluster.c) differs in four ways: no SELECT; a check
 * answered MOVED, ASK or TRYAGAIN goes to its redirect callback instead of done; a check
 * may be preceded by ASKING on the same connection; renew.lua declares no KEYS (the keys
 * of many slots go in ARGV: declared keys of several slots are CROSSSLOT).
 *
 * limiter_destroy must not be called from inside a done callback of the same limiter. */
#include "store/limiter_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <openssl/evp.h>

#include "lua_scripts.h"
#include "store/clock.h"
#include "store/limiter_redis_node.h"
#include "store/redis_url.h"
#include "store/store_status.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 250   /* enforcement is back well within 1 s of Redis returning */
/* After a reconnect, concurrency checks wait this long (answered as unavailable): a Redis
 * that restarted empty holds only the leases of the proxies that have renewed so far,
 * and every proxy reconnects and renews within BACKOFF_MAX_MS of it coming back. */
#define LEASE_GRACE_MS 400
#define DEFAULT_TIMEOUT_MS 200
#define MIN_CONNECT_TIMEOUT_MS 1000
#define MAX_ARGS (5 + 6 * LIMITER_MAX_RULES)
#define DEFAULT_LEASE_TTL_MS 30000
/* Releases held back while Redis is away, replayed when it is back (a bound on memory: past
 * it, a released lease ends at its TTL as before). */
#define MAX_DEFERRED_RELEASES 65536
#ifndef RENEW_BATCH
#define RENEW_BATCH 16384     /* leases per renew.lua call (a bound on one call's Redis time) */
#endif

enum conn_state { CONN_IDLE, CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY };

enum pending_kind { P_CHECK, P_AUTH, P_SELECT, P_LOAD, P_LOAD_RENEW, P_RENEW, P_RELEASE_ALL, P_ZREM, P_ASKING };

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
    struct pending *deferred;        /* ZREMs of leases released while Redis was away (LIFO) */
    size_t n_deferred;
    bool was_ready;                  /* connected before: a reconnect starts a grace */
    int64_t lease_grace_until_ms;    /* mono ms; concurrency checks unavailable until then */
    bool registering;                /* the renewal sent when READY is not answered yet:
                                        concurrency checks unavailable until it is */
    void (*ready_fn)(void *arg);     /* limiter_set_ready_hook */
    void *ready_arg;
    uint64_t lost_epoch_seen;        /* leases_lost_epoch when this limiter last renewed for it */
};

/* Raised by any limiter of the process whose check found that Redis had lost leases this
 * process holds (a FLUSHALL, a Redis restarted empty under a live connection): each
 * limiter renews its own leases at its next check, so they are all back at once rather
 * than at each one's next timer. */
static _Atomic uint64_t leases_lost_epoch;

/* Records why the store failed: unreachable (the connection) or an error reply. */
static void note_down(struct redis_limiter *rl, const char *what, const char *detail)
{
    store_status_fail(&rl->status, LIMITER_HEALTH_UNREACHABLE, what, detail);
}

static void note_error(struct redis_limiter *rl, const char *what, const char *detail)
{
    store_status_fail(&rl->status, LIMITER_HEALTH_ERROR, what, detail);
}

/* ---- in-flight list ---- */

static void inflight_append(struct redis_limiter *rl, struct pending *p)
{
    p->prev = rl->tail;
    p->next = NULL;
    if (rl->tail != NULL)
        rl->tail->next = p;
    else
        rl->head = p;
    rl->tail = p;
}

static void inflight_remove(struct redis_limiter *rl, struct pending *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        rl->head = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        rl->tail = p->prev;
    p->prev = p->next = NULL;
}

/* ---- connection management ---- */

static void start_connect(struct redis_limiter *rl);
static void renew_now(struct redis_limiter *rl);
static void flush_deferred(struct redis_limiter *rl);

static void watchdog_arm(struct redis_limiter *rl)
{
    if (evtimer_pending(rl->watchdog, NULL))
        return;
    int64_t deadline = INT64_MAX;
    if (rl->ac != NULL && rl->state != CONN_READY)
        deadline = rl->attempt_ms + rl->connect_timeout_ms;
    if (rl->head != NULL && rl->head->sent_ms + rl->timeout_ms < deadline)
        deadline = rl->head->sent_ms + rl->timeout_ms;
    if (deadline == INT64_MAX)
        return;
    int64_t wait = deadline - store_mono_ms();
    struct timeval tv = store_ms_to_timeval(wait > 0 ? wait + 1 : 0);
    evtimer_add(rl->watchdog, &tv);
}

static void schedule_reconnect(struct redis_limiter *rl)
{
    if (rl->destroying || rl->parked || evtimer_pending(rl->retry, NULL))
        return;
    struct timeval tv = store_ms_to_timeval(rl->backoff_ms);
    evtimer_add(rl->retry, &tv);
    rl->backoff_ms = rl->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : rl->backoff_ms * 2;
}

/* The connection is gone or going: stop using it, come back later. */
static void lost_connection(struct redis_limiter *rl)
{
    rl->ac = NULL;
    rl->state = CONN_IDLE;
    schedule_reconnect(rl);
}

/* Frees the context now (from a timer or limiter_destroy, never from a hiredis callback
 * other than a reply callback): its pending callbacks run with NULL replies. */
static void drop_connection(struct redis_limiter *rl)
{
    redisAsyncContext *ac = rl->ac;
    if (ac == NULL)
        return;
    ac->data = NULL;   /* its disconnect callback is then ours no more */
    lost_connection(rl);
    redisAsyncFree(ac); /* inside a reply callback hiredis defers this until it returns */
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    if (rl->ac == NULL && !rl->parked)
        start_connect(rl);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    int64_t now = store_mono_ms();
    if (rl->ac != NULL && rl->state != CONN_READY && now >= rl->attempt_ms + rl->connect_timeout_ms) {
        note_down(rl, "connect", "timed out");
        drop_connection(rl);
    } else if (rl->head != NULL && now >= rl->head->sent_ms + rl->timeout_ms) {
        note_down(rl, "command", "timed out");
        drop_connection(rl);
    }
    watchdog_arm(rl);
}

/* A pending command with room for max_args arguments of bufsize bytes in all. */
static struct pending *pending_new(struct redis_limiter *rl, enum pending_kind kind, size_t max_args, size_t bufsize)
{
    struct pending *p = calloc(1, sizeof(*p) + max_args * sizeof(size_t) + bufsize);
    if (p != NULL) {
        p->rl = rl;
        p->kind = kind;
        p->buf = (char *)(p->lens + max_args);
    }
    return p;
}

static void pending_free(struct pending *p)
{
    free(p->lease);
    free(p);
}

/* Sends a command and puts it in flight. Returns 0, or -1 (p is then still the caller's). */
static int send_command(struct redis_limiter *rl, struct pending *p, redisCallbackFn *fn, int argc,
                        const char **argv, const size_t *lens)
{
    if (rl->ac == NULL || redisAsyncCommandArgv(rl->ac, fn, p, argc, argv, lens) != REDIS_OK)
        return -1;
    p->sent_ms = store_mono_ms();
    inflight_append(rl, p);
    watchdog_arm(rl);
    return 0;
}

static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    enum pending_kind kind = p->kind;
    inflight_remove(rl, p);
    free(p);
    if (reply == NULL || rl->ac != ac)
        return;   /* the connection is going away; that is handled where it goes */
    bool good = reply->type != REDIS_REPLY_ERROR;
    const struct script *script = kind == P_LOAD ? &rl->check : &rl->renew;
    if (kind == P_LOAD || kind == P_LOAD_RENEW)
        good = good && reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
               memcmp(reply->str, script->sha, 40) == 0;
    if (!good) {
        note_error(rl, kind == P_AUTH ? "AUTH" : kind == P_SELECT ? "SELECT" : "SCRIPT LOAD",
                   reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        drop_connection(rl);
        return;
    }
    if (kind == P_LOAD) {   /* the last of the handshake */
        if (rl->was_ready)
            rl->lease_grace_until_ms = store_mono_ms() + LEASE_GRACE_MS;
        rl->was_ready = true;
        rl->state = CONN_READY;
        rl->backoff_ms = BACKOFF_MIN_MS;
        evtimer_del(rl->watchdog);   /* the connect deadline no longer applies */
        watchdog_arm(rl);
        store_status_ok(&rl->status);
        /* Leases taken elsewhere while Redis was away (the local fallback's) become ours,
           so that the renewal below registers them. */
        if (rl->ready_fn != NULL)
            rl->ready_fn(rl->ready_arg);
        /* Leases given back while Redis was away must not count there any longer: the
           ZREMs go first, before any check of this connection. */
        flush_deferred(rl);
        /* Leases held across an outage (or a Redis that restarted empty): renew them now,
           and decide no concurrency rule here before Redis has them. */
        renew_now(rl);
        rl->registering = rl->renewing > 0;
    }
}

static int send_setup(struct redis_limiter *rl, enum pending_kind kind, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct pending *p = pending_new(rl, kind, 0, 0);
    if (p == NULL)
        return -1;
    if (send_command(rl, p, on_setup_reply, argc, argv, lens) != 0) {
        free(p);
        return -1;
    }
    return 0;
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    struct redis_limiter *rl = cac->data;
    if (rl == NULL || rl->ac != cac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context when this returns */
        note_down(rl, "connect", cac->errstr);
        rl->ac->data = NULL;
        lost_connection(rl);
        return;
    }
    rl->state = CONN_HANDSHAKE;
    /* Pipelined; if one cannot be sent the watchdog's connect deadline drops the connection. */
    if (rl->url.has_password) {
        const char *argv[3] = {"AUTH", rl->url.username, rl->url.password};
        if (rl->url.username[0] != '\0') {
            if (send_setup(rl, P_AUTH, 3, argv) != 0)
                return;
        } else {
            argv[1] = rl->url.password;
            if (send_setup(rl, P_AUTH, 2, argv) != 0)
                return;
        }
    }
    if (rl->url.db != 0 && !rl->cluster_node) {
        char db[16];
        snprintf(db, sizeof(db), "%d", rl->url.db);
        const char *argv[2] = {"SELECT", db};
        if (send_setup(rl, P_SELECT, 2, argv) != 0)
            return;
    }
    const char *load_renew[3] = {"SCRIPT", "LOAD", lua_renew};
    if (send_setup(rl, P_LOAD_RENEW, 3, load_renew) != 0)
        return;
    const char *argv[3] = {"SCRIPT", "LOAD", lua_check};
    send_setup(rl, P_LOAD, 3, argv);
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    struct redis_limiter *rl = cac->data;
    if (rl == NULL || rl->ac != cac)
        return;
    note_down(rl, "disconnected", cac->errstr[0] != '\0' ? cac->errstr : "connection closed");
    lost_connection(rl);
}

static void start_connect(struct redis_limiter *rl)
{
    redisAsyncContext *ac = rl->url.is_unix ? redisAsyncConnectUnix(rl->url.path)
                                            : redisAsyncConnect(rl->url.host, rl->url.port);
    if (ac == NULL || ac->err || redisLibeventAttach(ac, rl->evbase) != REDIS_OK) {
        note_down(rl, "connect", ac ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        schedule_reconnect(rl);
        return;
    }
    ac->data = rl;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    rl->ac = ac;
    rl->state = CONN_CONNECTING;
    rl->attempt_ms = store_mono_ms();
    watchdog_arm(rl);
}

/* ---- script calls ---- */

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata);
static void on_lease_reply(redisAsyncContext *ac, void *r, void *privdata);
static void on_zrem_reply(redisAsyncContext *ac, void *r, void *privdata);

static void on_asking_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    inflight_remove(p->rl, p);
    free(p);   /* an error here shows in the call that follows: it gets MOVED */
}

/* Sends p (again, after NOSCRIPT: as EVAL). Returns 0, or -1 (p is then still the caller's). */
static int send_pending(struct redis_limiter *rl, struct pending *p)
{
    if (p->asking) {
        /* back to back on one connection: Redis applies ASKING to the next command alone */
        struct pending *a = pending_new(rl, P_ASKING, 0, 0);
        static const char *asking[1] = {"ASKING"};
        static const size_t asking_len[1] = {6};
        if (a == NULL)
            return -1;
        if (send_command(rl, a, on_asking_reply, 1, asking, asking_len) != 0) {
            free(a);
            return -1;
        }
    }
    const char *stack_argv[MAX_ARGS];
    const char **argv = stack_argv;
    if (p->argc > MAX_ARGS) {
        argv = malloc((size_t)p->argc * sizeof(*argv));
        if (argv == NULL)
            return -1;
    }
    int first = 0;
    if (p->script != NULL) {
        if (p->retried) {
            argv[0] = "EVAL";
            argv[1] = p->script->text;
            p->lens[0] = 4;
            p->lens[1] = p->script->len;
        } else {
            argv[0] = "EVALSHA";
            argv[1] = p->script->sha;
            p->lens[0] = 7;
            p->lens[1] = 40;
        }
        first = 2;
    }
    const char *b = p->buf;
    for (int i = first; i < p->argc; i++) {
        argv[i] = b;
        b += p->lens[i];
    }
    redisCallbackFn *fn = p->kind == P_CHECK ? on_check_reply : p->kind == P_ZREM ? on_zrem_reply : on_lease_reply;
    int r = send_command(rl, p, fn, p->argc, argv, p->lens);
    if (argv != stack_argv)
        free(argv);
    return r;
}

/* The script cache was flushed (or a failover): send the script itself, once. Returns
 * true when p was sent again (its callback will run again). */
static bool retry_noscript(struct redis_limiter *rl, redisAsyncContext *ac, struct pending *p,
                           const redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return false;
    if (p->script == NULL || p->retried || strncmp(reply->str, "NOSCRIPT", 8) != 0 || rl->ac != ac ||
        rl->state != CONN_READY)
        return false;
    p->retried = true;
    return send_pending(rl, p) == 0;
}

static void put_arg(struct pending *p, size_t *off, const char *s, size_t len)
{
    memcpy(p->buf + *off, s, len);
    *off += len;
    p->lens[p->argc++] = len;
}

/* An argument already written at p->buf + *off. */
static void put_arg_length(struct pending *p, size_t *off, size_t len)
{
    *off += len;
    p->lens[p->argc++] = len;
}

static void put_int(struct pending *p, size_t *off, int64_t v)
{
    char tmp[24];
    int len = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    put_arg(p, off, tmp, (size_t)len);
}

/* Bytes a rule takes in check.lua's ARGV[2]. */
#define RULE_BYTES 43

/* The rules as check.lua's ARGV[2], one argument: per rule its kind (a byte), then rate,
 * burst, window (a quota: its period), cost, and a quota's period [from, to) holding now
 * on this clock (a concurrency rule: the leases held, 0; others 0, 0), each 7 bytes
 * big-endian (every one is below 2^52:
 * limit_rule_validate). One string instead of 5 arguments a rule, because Redis makes a
 * Lua string and a table slot of every argument on every call; the period spares the
 * script its calendar arithmetic whenever the clocks agree on it. */
static void put_rules(struct pending *p, size_t *off, const struct limit_rule *rules, size_t n, int64_t now_ms)
{
    unsigned char *out = (unsigned char *)p->buf + *off;
    int64_t clock_ms = now_ms;
    for (size_t i = 0; i < n; i++) {
        const struct limit_rule *r = &rules[i];
        bool quota = r->kind == LIMIT_QUOTA;
        if (quota && clock_ms < 0)
            clock_ms = store_realtime_ms();
        const int64_t fields[6] = {
            r->rate,
            r->burst,
            quota ? (int64_t)r->period : r->window_ms,
            r->kind == LIMIT_CONCURRENCY ? 1 : limit_rule_cost(r),
            quota ? limit_period_start_ms(r->period, clock_ms) : r->kind == LIMIT_CONCURRENCY ? r->held : 0,
            quota ? limit_period_end_ms(r->period, clock_ms) : 0,
        };
        *out++ = (unsigned char)r->kind;
        for (int f = 0; f < 6; f++)
            for (int shift = 48; shift >= 0; shift -= 8)
                *out++ = (unsigned char)((uint64_t)fields[f] >> shift);
    }
    put_arg_length(p, off, n * RULE_BYTES);
}

/* Bytes a key takes at most: "<prefix>{<subject>}:<rule id>". */
static size_t key_max(const struct redis_limiter *rl, size_t subject_len)
{
    return rl->prefix_len + subject_len + 24;
}

static void put_key(struct redis_limiter *rl, struct pending *p, size_t *off, const char *subject,
                    size_t subject_len, int64_t rule_id)
{
    char id[24];
    int idlen = snprintf(id, sizeof(id), "%" PRId64, rule_id);
    char *k = p->buf + *off;
    memcpy(k, rl->prefix, rl->prefix_len);
    size_t kl = rl->prefix_len;
    k[kl++] = '{';
    memcpy(k + kl, subject, subject_len);
    kl += subject_len;
    k[kl++] = '}';
    k[kl++] = ':';
    memcpy(k + kl, id, (size_t)idlen);
    kl += (size_t)idlen;
    *off += kl;
    p->lens[p->argc++] = kl;
}

/* ---- leases ---- */

static void renew_arm(struct redis_limiter *rl)
{
    if (rl->destroying || evtimer_pending(rl->renew_timer, NULL))
        return;
    struct timeval tv = store_ms_to_timeval(rl->renew_every_ms);
    evtimer_add(rl->renew_timer, &tv);
}

/* Builds one renew.lua call ("renew" or "release") for the leases from *pg / *pl on, at most
 * RENEW_BATCH of them, and moves the cursor past them (*pg NULL: all done). Returns NULL
 * on allocation failure (the cursor is then unchanged). */
static struct pending *lease_batch(struct redis_limiter *rl, enum pending_kind kind, struct lease_group **pg,
                                   struct lease **pl)
{
    /* First pass: how many keys, leases and bytes. */
    size_t keys = 0, leases = 0, bytes = 64;   /* numkeys, op, now */
    struct lease_group *g = *pg;
    struct lease *l = *pl;
    while (g != NULL && leases < RENEW_BATCH) {
        keys++;
        bytes += key_max(rl, g->subject_len) + 2 * 24;
        for (; l != NULL && leases < RENEW_BATCH; l = l->next) {
            leases++;
            bytes += l->id_len;
        }
        if (l == NULL) {
            g = g->next;
            l = g != NULL ? g->first : NULL;
        }
    }
    /* EVALSHA sha numkeys key... op now (ttl m id...)...; a cluster node:
       EVALSHA sha 0 op now nkeys (key ttl m id...)... */
    size_t max_args = 6 + 3 * keys + leases;
    struct pending *p = pending_new(rl, kind, max_args, bytes);
    if (p == NULL)
        return NULL;
    p->script = &rl->renew;
    p->argc = 2;
    size_t off = 0;
    /* KEYS first, then ARGV: the cursor is walked twice more, keys then their leases. */
    put_int(p, &off, rl->cluster_node ? 0 : (int64_t)keys);
    g = *pg;
    for (size_t k = 0; k < keys && !rl->cluster_node; k++) {
        put_key(rl, p, &off, g->subject, g->subject_len, g->rule_id);
        g = g->next;
    }
    static const char renew[] = "renew", release[] = "release";
    if (kind == P_RENEW)
        put_arg(p, &off, renew, sizeof(renew) - 1);
    else
        put_arg(p, &off, release, sizeof(release) - 1);
    put_int(p, &off, -1);   /* now: the server's clock */
    if (rl->cluster_node)
        put_int(p, &off, (int64_t)keys);
    g = *pg;
    l = *pl;
    size_t left = leases;
    for (size_t k = 0; k < keys; k++) {
        size_t m = 0;
        for (const struct lease *x = l; x != NULL && m < left; x = x->next)
            m++;
        if (rl->cluster_node)
            put_key(rl, p, &off, g->subject, g->subject_len, g->rule_id);
        put_int(p, &off, g->ttl_ms);
        put_int(p, &off, (int64_t)m);
        for (size_t j = 0; j < m; j++, l = l->next)
            put_arg(p, &off, l->id, l->id_len);
        left -= m;
        if (l == NULL) {
            g = g->next;
            l = g != NULL ? g->first : NULL;
        }
    }
    *pg = g;
    *pl = l;
    return p;
}

/* Sends every held lease in renew.lua calls. Returns the number of calls sent. */
static int send_leases(struct redis_limiter *rl, enum pending_kind kind, struct release_all *all)
{
    struct lease_group *g = rl->base.leases.groups;
    struct lease *l = g != NULL ? g->first : NULL;
    int sent = 0;
    while (g != NULL) {
        struct pending *p = lease_batch(rl, kind, &g, &l);
        if (p == NULL)
            break;
        p->all = all;
        if (send_pending(rl, p) != 0) {
            pending_free(p);
            break;
        }
        sent++;
    }
    return sent;
}

/* Renews every held lease now, unless the store is down (then: when it is READY again) or
 * a renewal is still in flight. */
static void renew_now(struct redis_limiter *rl)
{
    if (lease_table_count(&rl->base.leases) == 0)
        return;
    renew_arm(rl);
    if (rl->state != CONN_READY || rl->ac == NULL || rl->renewing > 0)
        return;
    rl->renewing += send_leases(rl, P_RENEW, NULL);
}

static void on_renew_timer(evutil_socket_t fd, short what, void *arg)
{
    renew_now(arg);   /* re-arms itself while leases are held */
}

static void on_lease_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    inflight_remove(rl, p);
    if (retry_noscript(rl, ac, p, reply))
        return;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
        note_error(rl, p->kind == P_RENEW ? "renew" : "release all", reply->str);
    struct release_all *all = p->all;
    if (p->kind == P_RENEW && --rl->renewing == 0 && reply != NULL)
        rl->registering = false;
    pending_free(p);
    if (all != NULL && --all->outstanding == 0) {
        void (*done)(void *) = all->done;
        void *arg = all->arg;
        free(all);
        done(arg);
    }
}

/* Holds a release's ZREM back until Redis is READY again (or frees it past the bound). */
static void defer_release(struct redis_limiter *rl, struct pending *p)
{
    if (rl->destroying || rl->n_deferred >= MAX_DEFERRED_RELEASES) {
        pending_free(p);
        return;
    }
    p->next = rl->deferred;
    rl->deferred = p;
    rl->n_deferred++;
}

static void flush_deferred(struct redis_limiter *rl)
{
    struct pending *p = rl->deferred;
    rl->deferred = NULL;
    rl->n_deferred = 0;
    while (p != NULL) {
        struct pending *next = p->next;
        p->next = NULL;
        if (send_pending(rl, p) != 0)
            defer_release(rl, p);
        p = next;
    }
}

static void on_zrem_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    redisReply *reply = r;
    inflight_remove(p->rl, p);
    if (reply == NULL && p->is_release) {
        /* the connection went before Redis answered: it may not have seen the ZREM */
        defer_release(p->rl, p);
        return;
    }
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
        note_error(p->rl, "release", reply->str);
    void (*synced)(void *) = p->synced;
    void *synced_arg = p->synced_arg;
    pending_free(p);
    if (synced != NULL)
        synced(synced_arg);
}

/* ZREM <key> <lease id>, fire and forget. While the store is down (or when the connection
 * goes before Redis answered) it is held back and sent first once Redis is READY again, so
 * a slot given back during an outage does not count there after it; past
 * MAX_DEFERRED_RELEASES the lease ends at its TTL. */
static void send_zrem(struct redis_limiter *rl, const char *subject, size_t subject_len, int64_t rule_id,
                      const char *id, size_t id_len)
{
    struct pending *p = pending_new(rl, P_ZREM, 3, 4 + key_max(rl, subject_len) + id_len);
    if (p == NULL)
        return;
    p->is_release = true;
    size_t off = 0;
    put_arg(p, &off, "ZREM", 4);
    put_key(rl, p, &off, subject, subject_len, rule_id);
    put_arg(p, &off, id, id_len);
    if (rl->state != CONN_READY || rl->ac == NULL || send_pending(rl, p) != 0)
        defer_release(rl, p);
}

static void redis_release(struct limiter *limiter, struct lease *lease)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    const struct lease_group *g = lease->group;
    send_zrem(rl, g->subject, g->subject_len, g->rule_id, lease->id, lease->id_len);
    lease_table_remove(&limiter->leases, lease);
}

/* Calls done once Redis has applied every command sent on this connection before: one
 * connection's commands run in order, so the reply to a PING sent now says so. At once
 * when the store is down. */
static void redis_sync(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    struct pending *p = NULL;
    if (rl->state == CONN_READY && rl->ac != NULL)
        p = pending_new(rl, P_ZREM, 1, 4);
    if (p == NULL) {
        done(arg);
        return;
    }
    p->synced = done;
    p->synced_arg = arg;
    size_t off = 0;
    put_arg(p, &off, "PING", 4);
    if (send_pending(rl, p) != 0) {
        pending_free(p);
        done(arg);
    }
}

static void redis_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    struct release_all *all = NULL;
    if (lease_table_count(&limiter->leases) > 0 && rl->state == CONN_READY && rl->ac != NULL)
        all = calloc(1, sizeof(*all));
    if (all != NULL) {
        all->done = done;
        all->arg = arg;
        all->outstanding = send_leases(rl, P_RELEASE_ALL, all);
    }
    lease_table_clear(&limiter->leases);
    if (all == NULL || all->outstanding == 0) {
        free(all);
        done(arg);
    }
}

/* Adds one lease to the table and renews often enough for its TTL. */
static int lease_add(struct redis_limiter *rl, const char *subject, size_t subject_len, int64_t rule_id,
                     int64_t ttl_ms, const char *id, size_t id_len)
{
    int r = lease_table_add(&rl->base.leases, subject, subject_len, rule_id, ttl_ms, id, id_len);
    if (r != 0)
        return r;
    if (ttl_ms / 3 < rl->renew_every_ms) {
        /* a rule with a shorter TTL than the options': renew often enough for it */
        rl->renew_every_ms = ttl_ms / 3 > 0 ? ttl_ms / 3 : 1;
        evtimer_del(rl->renew_timer);
    }
    return 0;
}

/* Adds the leases of an allowed check to the table. Returns 0, or -ENOMEM with none of
 * them added and a ZREM sent for each (the check then counts as failed). */
static int track(struct redis_limiter *rl, const struct lease_req *lr)
{
    struct lease_table *t = &rl->base.leases;
    size_t i = 0;
    for (; i < lr->n; i++) {
        int r = lease_add(rl, lr->subject, lr->subject_len, lr->rule_id[i], lr->ttl_ms[i], lr->id, lr->id_len);
        if (r != 0 && r != -EEXIST)   /* EEXIST: the same id twice in flight (a caller's bug); held once */
            break;
    }
    if (i == lr->n) {
        renew_arm(rl);
        return 0;
    }
    /* Out of memory: give back what Redis recorded, tracked or not. */
    for (size_t j = 0; j < lr->n; j++) {
        struct lease *l = lease_table_find(t, lr->subject, lr->subject_len, lr->rule_id[j], lr->id, lr->id_len);
        if (l != NULL)
            lease_table_remove(t, l);
        send_zrem(rl, lr->subject, lr->subject_len, lr->rule_id[j], lr->id, lr->id_len);
    }
    return -ENOMEM;
}

/* ---- checks ---- */

/* A signed 56-bit big-endian integer (check.lua's struct 'i7'). */
static int64_t read_i7(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 7; i++)
        v = v << 8 | b[i];
    if (v & ((uint64_t)1 << 55))
        v |= ~(((uint64_t)1 << 56) - 1);   /* negative: extend the sign */
    return (int64_t)v;
}

/* check.lua's answer: one string, now (i7) and all allowed (a byte), then per rule allowed
 * (a byte), limit, remaining and reset (i7 each). */
static int parse_reply(const redisReply *reply, size_t n, struct limiter_result *res, bool *plost)
{
    if (reply->type != REDIS_REPLY_STRING || reply->len != 8 + 22 * n)
        return -1;
    const unsigned char *b = (const unsigned char *)reply->str;
    memset(res, 0, sizeof(*res));
    res->status = LIMITER_DECIDED;
    res->n = n;
    res->now_ms = read_i7(b);
    res->allowed = (b[7] & 1) != 0;
    *plost = (b[7] & 2) != 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *v = b + 8 + 22 * i;
        res->verdicts[i].allowed = v[0] == 1;
        res->verdicts[i].limit = read_i7(v + 1);
        res->verdicts[i].remaining = read_i7(v + 8);
        res->verdicts[i].reset_ms = read_i7(v + 15);
    }
    return 0;
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    inflight_remove(rl, p);
    if (retry_noscript(rl, ac, p, reply))
        return;
    struct cluster_redirect redirect;
    if (p->redirected != NULL && reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        /* nothing was recorded: the cluster limiter sends the call where it is told, or
           again in a moment (TRYAGAIN: the keys of its slot are half migrated) */
        int parsed = cluster_redirect_parse(reply->str, reply->len, &redirect);
        bool again = parsed == 1 && reply->len >= 8 && memcmp(reply->str, "TRYAGAIN", 8) == 0;
        if (parsed == 0 || again) {
            if (parsed == 0 && redirect.host[0] == '\0')
                snprintf(redirect.host, sizeof(redirect.host), "%s", rl->url.host);
            limiter_redirect_fn *redirected = p->redirected;
            void *arg = p->arg;
            pending_free(p);
            redirected(arg, parsed == 0 ? &redirect : NULL);
            return;
        }
    }

    struct limiter_result res;
    if (reply == NULL && p->lease != NULL) {
        /* Sent, never answered (timed out, or the connection went): Redis may still have
           recorded the leases (a frozen Redis runs what it had read once it thaws). The
           check counts as failed and holds nothing here, so they are taken back: the ZREMs
           go first on the next connection. (Should Redis run the old connection's check
           after them, the lease ends at its TTL, as before.) */
        for (size_t i = 0; i < p->lease->n; i++)
            send_zrem(rl, p->lease->subject, p->lease->subject_len, p->lease->rule_id[i], p->lease->id,
                      p->lease->id_len);
    }
    bool lost = false;
    if (reply == NULL || parse_reply(reply, p->n, &res, &lost) != 0) {
        if (reply != NULL)
            note_error(rl, "check", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        limiter_result_unavailable(&res, p->n);
    } else if (res.allowed && p->lease != NULL && track(rl, p->lease) != 0) {
        limiter_result_unavailable(&res, p->n);
    } else if (res.allowed) {
        store_status_ok(&rl->status);
    }
    if (lost) {
        /* Redis holds fewer of this process's leases than it has: put them all back */
        rl->lost_epoch_seen = atomic_fetch_add(&leases_lost_epoch, 1) + 1;
        renew_now(rl);
    }
    limiter_done_fn *done = p->done;
    void *arg = p->arg;
    pending_free(p);
    done(arg, &res);
}

/* One check.lua call: a check, or with peek a read of every rule that records nothing. */
static int redis_call_check(struct limiter *limiter, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                            size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                            limiter_done_fn *done, void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    struct limiter_result res;
    if (rl->state != CONN_READY || rl->ac == NULL) {
        store_status_repeat(&rl->status);
        limiter_result_unavailable(&res, n);
        done(arg, &res);
        return 0;
    }
    if (lease_id != NULL && (rl->registering || (rl->lease_grace_until_ms > 0 &&
                                                 store_mono_ms() < rl->lease_grace_until_ms))) {
        limiter_result_unavailable(&res, n);
        done(arg, &res);
        return 0;
    }
    uint64_t lost = atomic_load_explicit(&leases_lost_epoch, memory_order_relaxed);
    if (lost != rl->lost_epoch_seen) {
        rl->lost_epoch_seen = lost;
        renew_now(rl);
    }

    size_t kmax = key_max(rl, subject_len);
    /* EVALSHA, sha, numkeys, n keys, now, rules, lease id: what the check's lens hold (not
       MAX_ARGS, the bound of any command: the pending is zeroed whole on every check). */
    struct pending *p = pending_new(rl, P_CHECK, n + 6, 24 + n * kmax + 32 + n * RULE_BYTES + lease_id_len);
    if (p == NULL)
        return -ENOMEM;
    if (lease_id != NULL) {
        struct lease_req *lr = calloc(1, sizeof(*lr) + subject_len);
        if (lr == NULL) {
            pending_free(p);
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            if (rules[i].kind != LIMIT_CONCURRENCY)
                continue;
            lr->rule_id[lr->n] = rules[i].id;
            lr->ttl_ms[lr->n] = rules[i].window_ms;
            lr->n++;
        }
        memcpy(lr->id, lease_id, lease_id_len);
        lr->id_len = lease_id_len;
        memcpy(lr->subject, subject, subject_len);
        lr->subject_len = subject_len;
        p->lease = lr;
    }
    p->script = &rl->check;
    p->done = done;
    p->redirected = redirected;
    p->asking = asking;
    p->arg = arg;
    p->n = n;
    p->argc = 2;

    /* EVALSHA sha numkeys key... now rules [lease id] */
    size_t off = 0;
    put_int(p, &off, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        put_key(rl, p, &off, subject, subject_len, rules[i].id);
    if (peek) {
        char now[32];
        int len = snprintf(now, sizeof(now), "peek:%" PRId64, now_ms >= 0 ? now_ms : -1);
        put_arg(p, &off, now, (size_t)len);
    } else {
        put_int(p, &off, now_ms >= 0 ? now_ms : -1);
    }
    put_rules(p, &off, rules, n, now_ms);
    if (lease_id != NULL)
        put_arg(p, &off, lease_id, lease_id_len);

    if (send_pending(rl, p) != 0) {
        pending_free(p);
        limiter_result_unavailable(&res, n);
        done(arg, &res);
    }
    return 0;
}

static int redis_check(struct limiter *limiter, const char *subject, size_t subject_len,
                       const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                       size_t lease_id_len, limiter_done_fn *done, void *arg)
{
    return redis_call_check(limiter, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, false, false,
                            NULL, done, arg);
}

static int redis_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                      const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg)
{
    return redis_call_check(limiter, subject, subject_len, rules, n, now_ms, NULL, 0, true, false, NULL, done, arg);
}

static void redis_destroy(struct limiter *limiter)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->destroying = true;
    drop_connection(rl);   /* fails every pending check, ends a release_all */
    while (rl->deferred != NULL) {   /* not given back: they end at their TTL */
        struct pending *p = rl->deferred;
        rl->deferred = p->next;
        pending_free(p);
    }
    event_free(rl->retry);
    event_free(rl->watchdog);
    event_free(rl->renew_timer);
    lease_table_clear(&limiter->leases);   /* not given back: they end at their TTL */
    store_status_destroy(&rl->status);
    free(rl->prefix);
    memset(&rl->url, 0, sizeof(rl->url));
    free(rl);
}

static bool redis_available(const struct limiter *limiter)
{
    const struct redis_limiter *rl = (const struct redis_limiter *)limiter;
    return rl->state == CONN_READY;
}

static enum limiter_health redis_health(const struct limiter *limiter, char *reason, size_t reason_len)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;   /* the status' lock */
    return store_status_get(&rl->status, reason, reason_len);
}

static void redis_set_event_hook(struct limiter *limiter, limiter_event_fn *fn, void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->status.hook = fn;
    rl->status.hook_arg = arg;
}

static void redis_set_ready_hook(struct limiter *limiter, void (*fn)(void *arg), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->ready_fn = fn;
    rl->ready_arg = arg;
}

static const struct limiter_ops redis_ops = {
    .check = redis_check,
    .peek = redis_peek,
    .destroy = redis_destroy,
    .available = redis_available,
    .release = redis_release,
    .release_all = redis_release_all,
    .sync = redis_sync,
    .health = redis_health,
    .set_event_hook = redis_set_event_hook,
    .adopt = limiter_redis_node_adopt,
    .set_ready_hook = redis_set_ready_hook,
};

static int script_init(struct script *s, const char *text)
{
    s->text = text;
    s->len = strlen(text);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(text, s->len, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
        return -1;
    for (unsigned i = 0; i < 20; i++)
        snprintf(s->sha + 2 * i, 3, "%02x", md[i]);
    return 0;
}

int limiter_redis_url_check(const char *url, char *err, size_t errlen)
{
    struct redis_url parsed;
    int r = redis_url_parse(url, &parsed, err, errlen) != 0 ? -EINVAL : 0;
    explicit_bzero(&parsed, sizeof(parsed)); /* the password, if any */
    return r;
}

int limiter_redis_cluster_seeds_check(const char *seeds, char *err, size_t errlen)
{
    struct redis_url *parsed = calloc(REDIS_SEEDS_MAX, sizeof(*parsed));
    if (parsed == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int n = redis_seed_list_parse(seeds, parsed, REDIS_SEEDS_MAX, err, errlen);
    explicit_bzero(parsed, REDIS_SEEDS_MAX * sizeof(*parsed)); /* the passwords, if any */
    free(parsed);
    return n > 0 ? 0 : -EINVAL;
}

/* A limiter on url (NULL: options->url parsed), or a cluster node's on node_url. */
static struct limiter *redis_create(struct event_base *base, const struct redis_store_options *options,
                                    const struct redis_url *node_url, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (base == NULL || options == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "no event loop or options");
        return NULL;
    }
    struct redis_limiter *rl = calloc(1, sizeof(*rl));
    if (rl == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (node_url != NULL) {
        rl->url = *node_url;
        rl->url.db = 0;
        rl->cluster_node = true;
    } else {
        const char *url = options->url ? options->url : "redis://127.0.0.1:6379/0";
        if (redis_url_parse(url, &rl->url, err, errlen) != 0) {
            free(rl);
            return NULL;
        }
    }
    char where[sizeof(rl->status.where)];
    if (rl->url.is_unix)
        snprintf(where, sizeof(where), "%.63s", rl->url.path);
    else
        snprintf(where, sizeof(where), "%.48s:%d", rl->url.host, rl->url.port);
    store_status_init(&rl->status, where);
    const char *prefix = options->key_prefix ? options->key_prefix : "tierproxy:";
    rl->base.ops = &redis_ops;
    lease_table_init(&rl->base.leases);
    rl->evbase = base;
    rl->prefix = strdup(prefix);
    rl->prefix_len = strlen(prefix);
    rl->timeout_ms = options->command_timeout_ms > 0 ? options->command_timeout_ms : DEFAULT_TIMEOUT_MS;
    rl->connect_timeout_ms = rl->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? rl->timeout_ms : MIN_CONNECT_TIMEOUT_MS;
    rl->backoff_ms = BACKOFF_MIN_MS;
    rl->lease_ttl_ms = options->lease_ttl_ms > 0 ? options->lease_ttl_ms : DEFAULT_LEASE_TTL_MS;
    rl->renew_every_ms = rl->lease_ttl_ms / 3 > 0 ? rl->lease_ttl_ms / 3 : 1;
    rl->retry = evtimer_new(base, on_retry, rl);
    rl->watchdog = evtimer_new(base, on_watchdog, rl);
    rl->renew_timer = evtimer_new(base, on_renew_timer, rl);
    if (rl->prefix == NULL || rl->retry == NULL || rl->watchdog == NULL || rl->renew_timer == NULL ||
        script_init(&rl->check, lua_check) != 0 || script_init(&rl->renew, lua_renew) != 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        if (rl->retry)
            event_free(rl->retry);
        if (rl->watchdog)
            event_free(rl->watchdog);
        if (rl->renew_timer)
            event_free(rl->renew_timer);
        free(rl->prefix);
        store_status_destroy(&rl->status);
        explicit_bzero(&rl->url, sizeof(rl->url));
        free(rl);
        return NULL;
    }
    start_connect(rl);
    return &rl->base;
}

struct limiter *limiter_redis_create(struct event_base *base, const struct redis_store_options *options,
                                     char *err, size_t errlen)
{
    return redis_create(base, options, NULL, err, errlen);
}

struct limiter *limiter_redis_node_create(struct event_base *base, const struct redis_store_options *options,
                                          const struct redis_url *url, char *err, size_t errlen)
{
    if (url == NULL || url->is_unix) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "a cluster node is reached over TCP");
        return NULL;
    }
    return redis_create(base, options, url, err, errlen);
}

int limiter_redis_node_call(struct limiter *node, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                            size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                            limiter_done_fn *done, void *arg)
{
    return redis_call_check(node, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, peek, asking,
                            redirected, done, arg);
}

void limiter_redis_node_park(struct limiter *node, bool parked)
{
    struct redis_limiter *rl = (struct redis_limiter *)node;
    if (rl->parked == parked)
        return;
    rl->parked = parked;
    if (parked) {
        evtimer_del(rl->retry);   /* a live connection stays; a lost one is not made again */
    } else if (rl->ac == NULL) {
        rl->backoff_ms = BACKOFF_MIN_MS;
        start_connect(rl);
    }
}

void limiter_redis_node_hand_over(struct limiter *from,
                                  struct limiter *(*route)(void *arg, const char *key, size_t key_len), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)from;
    struct pending *p = rl->deferred;
    rl->deferred = NULL;
    rl->n_deferred = 0;
    while (p != NULL) {
        struct pending *next = p->next;
        p->next = NULL;
        /* a held-back release is "ZREM <key> <lease id>", back to back in buf */
        struct limiter *to = p->argc == 3 ? route(arg, p->buf + p->lens[0], p->lens[1]) : NULL;
        struct redis_limiter *heir = to != NULL ? (struct redis_limiter *)to : rl;
        p->rl = heir;
        if (heir->state != CONN_READY || heir->ac == NULL || send_pending(heir, p) != 0)
            defer_release(heir, p);
        p = next;
    }
}

int limiter_redis_node_adopt(struct limiter *node, const char *subject, size_t subject_len, int64_t rule_id,
                             int64_t ttl_ms, const char *id, size_t id_len)
{
    struct redis_limiter *rl = (struct redis_limiter *)node;
    int r = lease_add(rl, subject, subject_len, rule_id, ttl_ms, id, id_len);
    if (r == 0)
        renew_arm(rl);
    return r;
}
