/* The Redis limiter store: one asynchronous hiredis connection per event loop, one
 * EVALSHA of check.lua (with check_general.lua, one script) per check.
 *
 * Connection life: IDLE -> CONNECTING -> HANDSHAKE (AUTH answered first, then SELECT and
 * SCRIPT LOAD pipelined) -> READY. Only READY sends checks; in any other state
 * limiter_check answers LIMITER_UNAVAILABLE at once. A failed context is never reused: it
 * is freed and a new one is made after a backoff (50 ms doubling to 250 ms, back to 50 ms
 * once READY).
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
 * A cluster node (limiter_redis_node_create, store/redis/limiter_redis_node.h: one per master of a
 * Redis Cluster, made by store/cluster/limiter_cluster.c) differs in four ways: no SELECT; a check
 * answered MOVED, ASK or TRYAGAIN goes to its redirect callback instead of done; a check
 * may be preceded by ASKING on the same connection; renew.lua declares no KEYS (the keys
 * of many slots go in ARGV: declared keys of several slots are CROSSSLOT).
 *
 * limiter_destroy must not be called from inside a done callback of the same limiter.
 *
 * This file holds the limiter itself (made, ended, its ops); store/redis/limiter_redis_conn.c the
 * connection, store/redis/limiter_redis_check.c the checks and store/redis/limiter_redis_leases.c the
 * leases, each using only those before it (store/redis/limiter_redis_private.h ties them). */
#include "store/redis/limiter_redis_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>
#include <openssl/evp.h>

#include "lua_scripts.h"
#include "store/clock.h"
#include "store/redis/redis_tls.h"

#define DEFAULT_TIMEOUT_MS 200
#define MIN_CONNECT_TIMEOUT_MS 1000
#define DEFAULT_LEASE_TTL_MS 30000

/* The connection is ready again (READY), before anything else is sent on it. */
static void on_connected(struct redis_limiter *rl)
{
    /* Leases taken elsewhere while Redis was away (the local fallback's) become ours, so
       that the renewal below registers them. */
    if (rl->ready_fn != NULL)
        rl->ready_fn(rl->ready_arg);
    /* Leases given back while Redis was away must not count there any longer: the ZREMs
       go first, before any check of this connection. */
    redis_flush_deferred(rl);
    /* Leases held across an outage (or a Redis that restarted empty), and those taken
       locally meanwhile: renewed now, so Redis has them before any check sent after. */
    redis_renew_now(rl);
}

static void redis_destroy(struct limiter *limiter)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->destroying = true;
    redis_conn_drop(rl);   /* fails every pending check, ends a release_all */
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
    SSL_CTX_free(rl->tls);
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

static void redis_release(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len)
{
    limiter_release_held(limiter, subject, subject_len, rules, n, lease_id, lease_id_len, redis_give_back);
}

static const struct limiter_shared_ops redis_shared_ops = LIMITER_SHARED_OPS(redis, limiter_redis_node_adopt, NULL);
static const struct limiter_ops redis_ops = LIMITER_OPS(redis, limiter_leases_held, &redis_shared_ops);

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

/* The TLS context of rl->url: node_tls (a reference taken) for a cluster node, else one
 * made from options->tls_ca_file. Returns 0, or -1 with why in err. */
static int tls_init(struct redis_limiter *rl, const struct redis_store_options *options, SSL_CTX *node_tls,
                    char *err, size_t errlen)
{
    if (!rl->url.tls)
        return 0;
    if (node_tls != NULL) {
        SSL_CTX_up_ref(node_tls);
        rl->tls = node_tls;
        return 0;
    }
    char why[400];
    rl->tls = redis_tls_context_new(options->tls_ca_file, why, sizeof(why));
    if (rl->tls == NULL && err != NULL && errlen > 0)
        snprintf(err, errlen, "[limits] redis_ca_file: %s", why);
    return rl->tls != NULL ? 0 : -1;
}

/* rl->url: a cluster node's (db 0), else options->url parsed (the default when unset).
 * Returns 0, or -1 with why in err. */
static int url_init(struct redis_limiter *rl, const struct redis_store_options *options,
                    const struct redis_url *node_url, char *err, size_t errlen)
{
    if (node_url != NULL) {
        rl->url = *node_url;
        rl->url.db = 0;
        rl->cluster_node = true;
        return 0;
    }
    const char *url = options->url ? options->url : "redis://127.0.0.1:6379/0";
    return redis_url_parse(url, &rl->url, err, errlen) != 0 ? -1 : 0;
}

/* Where the status reports, the key prefix (rl->prefix NULL when out of memory), the
 * timeouts and the lease TTL, from options or their defaults. */
static void settings_init(struct redis_limiter *rl, struct event_base *base,
                          const struct redis_store_options *options)
{
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
    rl->connected = on_connected;
}

/* The connection's timers. Returns 0, or -1 when one could not be made (the others are
 * made all the same, for limiter_free_unstarted to free). */
static int timers_init(struct redis_limiter *rl, struct event_base *base)
{
    rl->retry = evtimer_new(base, redis_conn_on_retry, rl);
    rl->watchdog = evtimer_new(base, redis_conn_on_watchdog, rl);
    rl->renew_timer = evtimer_new(base, redis_on_renew_timer, rl);
    evtimer_assign(&rl->settle, base, redis_conn_on_settle, rl);
    return rl->retry == NULL || rl->watchdog == NULL || rl->renew_timer == NULL ? -1 : 0;
}

/* Frees a limiter that failed before its connection was started. */
static void limiter_free_unstarted(struct redis_limiter *rl)
{
    if (rl->retry)
        event_free(rl->retry);
    if (rl->watchdog)
        event_free(rl->watchdog);
    if (rl->renew_timer)
        event_free(rl->renew_timer);
    free(rl->prefix);
    store_status_destroy(&rl->status);
    SSL_CTX_free(rl->tls);
    explicit_bzero(&rl->url, sizeof(rl->url));
    free(rl);
}

/* A limiter on url (NULL: options->url parsed), or a cluster node's on node_url. */
static struct limiter *redis_create(struct event_base *base, const struct redis_store_options *options,
                                    const struct redis_url *node_url, SSL_CTX *node_tls, char *err, size_t errlen)
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
    if (url_init(rl, options, node_url, err, errlen) != 0) {
        free(rl);
        return NULL;
    }
    if (tls_init(rl, options, node_tls, err, errlen) != 0) {
        explicit_bzero(&rl->url, sizeof(rl->url));
        free(rl);
        return NULL;
    }
    settings_init(rl, base, options);
    int timers = timers_init(rl, base);
    if (rl->prefix == NULL || timers != 0 || script_init(&rl->check, lua_check) != 0 ||
        script_init(&rl->renew, lua_renew) != 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        limiter_free_unstarted(rl);
        return NULL;
    }
    redis_conn_start(rl);
    return &rl->base;
}

struct limiter *limiter_redis_create(struct event_base *base, const struct redis_store_options *options,
                                     char *err, size_t errlen)
{
    return redis_create(base, options, NULL, NULL, err, errlen);
}

struct limiter *limiter_redis_node_create(struct event_base *base, const struct redis_store_options *options,
                                          const struct redis_url *url, SSL_CTX *tls, char *err, size_t errlen)
{
    if (url == NULL || url->is_unix) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "a cluster node is reached over TCP");
        return NULL;
    }
    return redis_create(base, options, url, tls, err, errlen);
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
        redis_conn_start(rl);
    }
}

