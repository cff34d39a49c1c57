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
 * limiter_destroy must not be called from inside a done callback of the same limiter.
 *
 * This file holds the connection; store/limiter_redis_check.c the checks and
 * store/limiter_redis_leases.c the leases (store/limiter_redis_private.h ties them). */
#include "store/limiter_redis_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>
#include <openssl/evp.h>

#include "lua_scripts.h"
#include "store/clock.h"

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

/* Records why the store failed: unreachable (the connection) or an error reply. */
static void note_down(struct redis_limiter *rl, const char *what, const char *detail)
{
    store_status_fail(&rl->status, LIMITER_HEALTH_UNREACHABLE, what, detail);
}

/* An error reply's state ends when the store has answered no command with an error for
 * this long (or at once when it admits a check): a refusal writes nothing, so it proves
 * nothing under OOM, and a worker that meets no traffic must not say error for good. */
#define ERROR_SETTLE_MS 1000

void redis_note_error(struct redis_limiter *rl, const char *what, const char *detail)
{
    rl->last_error_ms = store_mono_ms();
    store_status_fail(&rl->status, LIMITER_HEALTH_ERROR, what, detail);
    if (!evtimer_pending(&rl->settle, NULL)) {
        struct timeval tv = store_ms_to_timeval(ERROR_SETTLE_MS);
        evtimer_add(&rl->settle, &tv);
    }
}

static void on_settle(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    int64_t quiet = store_mono_ms() - rl->last_error_ms;
    if (quiet < ERROR_SETTLE_MS) {
        struct timeval tv = store_ms_to_timeval(ERROR_SETTLE_MS - quiet);
        evtimer_add(&rl->settle, &tv);
    } else if (rl->state == CONN_READY) {
        store_status_ok(&rl->status);   /* not READY: its own failure, or READY, says */
    }
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

void redis_inflight_remove(struct redis_limiter *rl, struct pending *p)
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
struct pending *redis_pending_new(struct redis_limiter *rl, enum pending_kind kind, size_t max_args, size_t bufsize)
{
    struct pending *p = calloc(1, sizeof(*p) + max_args * sizeof(size_t) + bufsize);
    if (p != NULL) {
        p->rl = rl;
        p->kind = kind;
        p->buf = (char *)(p->lens + max_args);
    }
    return p;
}

void redis_pending_free(struct pending *p)
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
    redis_inflight_remove(rl, p);
    free(p);
    if (reply == NULL || rl->ac != ac)
        return;   /* the connection is going away; that is handled where it goes */
    bool good = reply->type != REDIS_REPLY_ERROR;
    const struct script *script = kind == P_LOAD ? &rl->check : &rl->renew;
    if (kind == P_LOAD || kind == P_LOAD_RENEW)
        good = good && reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
               memcmp(reply->str, script->sha, 40) == 0;
    if (!good) {
        redis_note_error(rl, kind == P_AUTH ? "AUTH" : kind == P_SELECT ? "SELECT" : "SCRIPT LOAD",
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
        redis_flush_deferred(rl);
        /* Leases held across an outage (or a Redis that restarted empty), and those taken
           locally meanwhile: renewed now, so Redis has them before any check sent after. */
        redis_renew_now(rl);
    }
}

static int send_setup(struct redis_limiter *rl, enum pending_kind kind, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct pending *p = redis_pending_new(rl, kind, 0, 0);
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

static void on_asking_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    redis_inflight_remove(p->rl, p);
    free(p);   /* an error here shows in the call that follows: it gets MOVED */
}

/* Sends p (again, after NOSCRIPT: as EVAL). Returns 0, or -1 (p is then still the caller's). */
int redis_send_pending(struct redis_limiter *rl, struct pending *p)
{
    if (p->asking) {
        /* back to back on one connection: Redis applies ASKING to the next command alone */
        struct pending *a = redis_pending_new(rl, P_ASKING, 0, 0);
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
    redisCallbackFn *fn = p->kind == P_CHECK ? redis_on_check_reply : p->kind == P_ZREM ? redis_on_zrem_reply : redis_on_lease_reply;
    int r = send_command(rl, p, fn, p->argc, argv, p->lens);
    if (argv != stack_argv)
        free(argv);
    return r;
}

/* The script cache was flushed (or a failover): send the script itself, once. Returns
 * true when p was sent again (its callback will run again). */
bool redis_retry_noscript(struct redis_limiter *rl, redisAsyncContext *ac, struct pending *p,
                           const redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return false;
    if (p->script == NULL || p->retried || strncmp(reply->str, "NOSCRIPT", 8) != 0 || rl->ac != ac ||
        rl->state != CONN_READY)
        return false;
    p->retried = true;
    return redis_send_pending(rl, p) == 0;
}

void redis_put_arg(struct pending *p, size_t *off, const char *s, size_t len)
{
    memcpy(p->buf + *off, s, len);
    *off += len;
    p->lens[p->argc++] = len;
}

/* An argument already written at p->buf + *off. */
void redis_put_arg_length(struct pending *p, size_t *off, size_t len)
{
    *off += len;
    p->lens[p->argc++] = len;
}

void redis_put_int(struct pending *p, size_t *off, int64_t v)
{
    char tmp[24];
    int len = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    redis_put_arg(p, off, tmp, (size_t)len);
}

/* Bytes a key takes at most: "<prefix>{<subject>}:<rule id>". */
size_t redis_key_max(const struct redis_limiter *rl, size_t subject_len)
{
    return rl->prefix_len + subject_len + 24;
}

void redis_put_key(struct redis_limiter *rl, struct pending *p, size_t *off, const char *subject,
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

/* ---- the limiter ---- */

static void redis_destroy(struct limiter *limiter)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->destroying = true;
    drop_connection(rl);   /* fails every pending check, ends a release_all */
    while (rl->deferred != NULL) {   /* not given back: they end at their TTL */
        struct pending *p = rl->deferred;
        rl->deferred = p->next;
        redis_pending_free(p);
    }
    event_free(rl->retry);
    event_free(rl->watchdog);
    event_free(rl->renew_timer);
    evtimer_del(&rl->settle);
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
    rl->renew_timer = evtimer_new(base, redis_on_renew_timer, rl);
    evtimer_assign(&rl->settle, base, on_settle, rl);
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

