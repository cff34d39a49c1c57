/* The Redis Cluster limiter (issue 14, SPEC "A fleet larger than one Redis"): a limiter made
 * of one Redis limiter per master (store/redis/limiter_redis_node.h), each with its own async
 * connection, backoff, watchdog, script loading and leases, and a slot map that says which
 * of them a check goes to.
 *
 * The map: CLUSTER SLOTS asked of one node at a time (the masters known, then the seeds)
 * on a connection of its own, at start, every REFRESH_MS, at most every REFRESH_GAP_MS
 * after a MOVED or a check a node could not answer, and every REFRESH_FAST_MS while a
 * master of the map is not connected (that is how a failover is learnt: the dead master's
 * slots are served by its promoted replica once the cluster says so). Until the first map,
 * checks answer LIMITER_UNAVAILABLE at once.
 *
 * A check goes to the master of the slot of its first key as limiter_redis builds it
 * ("<prefix>{<subject>}:<rule id>"; every key of one check shares that slot). A master that
 * is down answers LIMITER_UNAVAILABLE at once for its own slots only (the local fallback in
 * front decides what that becomes); the others go on. MOVED: the slot's owner is changed
 * at once, a refresh asked for, and the call sent again on the named node; ASK: ASKING and
 * the call on that node's connection back to back, map unchanged. At most MAX_REDIRECTS
 * per check, then LIMITER_UNAVAILABLE. TRYAGAIN (keys of one check on both sides of a
 * migration, between two MIGRATE calls): sent again TRYAGAIN_DELAY_MS later, a few times.
 * The call keeps a copy of its arguments for that (the caller's may be gone when the
 * redirect comes).
 *
 * Leases: each node limiter holds the leases admitted on its node and renews them there in
 * one call per interval (renew.lua with the keys in ARGV: many slots, one node). After each
 * new map, a lease whose slot another master serves now (failover, reshard) moves to that
 * master's limiter, which renews it from then on. A release goes to whichever node limiter
 * holds the lease.
 *
 * A node that leaves the map is kept (it may hold leases until the next map moves them, and
 * may come back); the number of nodes is capped at CLUSTER_MAX_NODES.
 *
 * This file holds the checks, the leases and the limiter; store/cluster/limiter_cluster_map.c the
 * nodes and the map (store/cluster/limiter_cluster_private.h ties them). */
#include "store/cluster/limiter_cluster_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"
#include "store/redis/limiter_redis_node.h"
#include "store/redis/redis_tls.h"
#include "store/redis/store_status.h"

#define PROBE_TIMEOUT_MIN_MS 1000
#define MAX_REDIRECTS 2         /* MOVED/ASK followed per check: a loop ends here */
/* TRYAGAIN (a check whose keys a reshard has half moved: some on each node, for the
 * moment between two MIGRATE calls): the check is sent again this much later, this many
 * times at most, then LIMITER_UNAVAILABLE. */
#define TRYAGAIN_DELAY_MS 10
#define TRYAGAIN_MAX 10
#define SPARE_CHECKS 256

static const struct limiter_ops cluster_ops;

/* ---- checks ---- */

static struct cluster_check *check_get(struct cluster_limiter *cl)
{
    struct cluster_check *c = cl->spare;
    if (c != NULL) {
        cl->spare = c->next;
        cl->n_spare--;
        return c;
    }
    c = malloc(sizeof(*c));
    if (c != NULL)
        c->retry = NULL;
    return c;
}

static void check_free(struct cluster_check *c)
{
    if (c->retry != NULL)
        event_free(c->retry);
    free(c);
}

static void check_put(struct cluster_limiter *cl, struct cluster_check *c)
{
    if (cl->n_spare >= SPARE_CHECKS || cl->destroying) {
        check_free(c);
        return;
    }
    c->next = cl->spare;
    cl->spare = c;
    cl->n_spare++;
}

static void finish(struct cluster_check *c, const struct limiter_result *result)
{
    limiter_done_fn *done = c->done;
    void *arg = c->arg;
    check_put(c->cl, c);
    done(arg, result);
}

/* A check its node could not answer (the per-node error count of /metrics). */
static void count_error(struct cluster_check *c)
{
    atomic_fetch_add_explicit(&c->cl->nodes[c->node]->errors, 1, memory_order_relaxed);
}

static void finish_unavailable(struct cluster_check *c)
{
    struct limiter_result res;
    limiter_result_unavailable(&res, c->n);
    finish(c, &res);
}

static void on_node_done(void *arg, const struct limiter_result *result);
static void on_redirect(void *arg, const struct cluster_redirect *redirect);

static int send_to(struct cluster_check *c, size_t node, bool asking)
{
    struct cluster_limiter *cl = c->cl;
    c->node = node;
    return limiter_redis_node_call(cl->nodes[node]->redis, c->subject, c->subject_len, c->rules, c->n, c->now_ms,
                                   c->leased ? c->lease_id : NULL, c->leased ? c->lease_id_len : 0, c->peek,
                                   asking, on_redirect, on_node_done, c);
}

static void on_node_done(void *arg, const struct limiter_result *result)
{
    struct cluster_check *c = arg;
    struct cluster_limiter *cl = c->cl;
    /* a node that went: the map may have moved its slots to a promoted replica */
    if (result->status == LIMITER_UNAVAILABLE && !cl->destroying) {
        count_error(c);
        if (!limiter_available(cl->nodes[c->node]->redis))
            cluster_refresh_request(cl);
    }
    finish(c, result);
}

static void waiting_remove(struct cluster_limiter *cl, struct cluster_check *c)
{
    if (c->wprev != NULL)
        c->wprev->wnext = c->wnext;
    else
        cl->waiting = c->wnext;
    if (c->wnext != NULL)
        c->wnext->wprev = c->wprev;
    c->wprev = c->wnext = NULL;
}

/* TRYAGAIN's moment is over: the check goes to its slot's master again, from the start. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct cluster_check *c = arg;
    struct cluster_limiter *cl = c->cl;
    waiting_remove(cl, c);
    unsigned slot = cluster_limiter_key_slot(cl->prefix, cl->prefix_len, c->subject, c->subject_len, c->rules[0].id);
    int node = (int)cl->owner[slot] - 1;
    c->redirects = 0;
    if (node < 0 || send_to(c, (size_t)node, false) != 0) {
        count_error(c);
        finish_unavailable(c);
    }
}

/* TRYAGAIN: sends c again in a moment (or gives up). */
static void try_again_later(struct cluster_check *c)
{
    struct cluster_limiter *cl = c->cl;
    if (cl->destroying || c->tries >= TRYAGAIN_MAX) {
        count_error(c);
        finish_unavailable(c);
        return;
    }
    c->tries++;
    if (c->retry == NULL)
        c->retry = evtimer_new(cl->evbase, on_retry, c);
    if (c->retry == NULL) {
        count_error(c);
        finish_unavailable(c);
        return;
    }
    c->wprev = NULL;
    c->wnext = cl->waiting;
    if (cl->waiting != NULL)
        cl->waiting->wprev = c;
    cl->waiting = c;
    struct timeval tv = store_ms_to_timeval(TRYAGAIN_DELAY_MS);
    evtimer_add(c->retry, &tv);
}

static void on_redirect(void *arg, const struct cluster_redirect *redirect)
{
    struct cluster_check *c = arg;
    struct cluster_limiter *cl = c->cl;
    if (redirect == NULL) {
        try_again_later(c);
        return;
    }
    if (cl->destroying || c->redirects >= MAX_REDIRECTS) {
        count_error(c);
        finish_unavailable(c);
        return;
    }
    c->redirects++;
    int node = cluster_node_find_or_add(cl, redirect->host, redirect->port);
    if (redirect->kind == CLUSTER_REDIRECT_MOVED) {
        /* the slot is served there now: the next checks of it go there at once */
        if (node >= 0 && redirect->slot < CLUSTER_SLOT_COUNT)
            cl->owner[redirect->slot] = (uint16_t)(node + 1);
        cluster_refresh_request(cl);
    }
    /* a node just made is still connecting: this check is not held for it */
    if (node < 0 || !limiter_available(cl->nodes[node]->redis)) {
        count_error(c);   /* counted where the check was sent: that node redirected it */
        finish_unavailable(c);
    } else if (send_to(c, (size_t)node, redirect->kind == CLUSTER_REDIRECT_ASK) != 0) {
        count_error(c);
        finish_unavailable(c);
    }
}

static int cluster_call(struct limiter *limiter, const char *subject, size_t subject_len,
                        const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                        size_t lease_id_len, bool peek, limiter_done_fn *done, void *arg)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    if (lease_id != NULL) {
        /* limiter.c looked in this limiter's own (empty) table: a lease id a node holds
           already is refused as it would be by one Redis */
        for (size_t i = 0; i < n; i++) {
            if (rules[i].kind != LIMIT_CONCURRENCY)
                continue;
            for (size_t k = 0; k < cl->n_nodes; k++)
                if (lease_table_find(&cl->nodes[k]->redis->leases, subject, subject_len, rules[i].id, lease_id,
                                     lease_id_len) != NULL)
                    return -EINVAL;
        }
    }
    unsigned slot = cluster_limiter_key_slot(cl->prefix, cl->prefix_len, subject, subject_len, rules[0].id);
    int node = (int)cl->owner[slot] - 1;
    if (node < 0) {
        struct limiter_result res;
        limiter_result_unavailable(&res, n);
        cluster_refresh_request(cl);
        done(arg, &res);
        return 0;
    }
    struct cluster_check *c = check_get(cl);
    if (c == NULL)
        return -ENOMEM;
    c->cl = cl;
    c->done = done;
    c->arg = arg;
    c->peek = peek;
    c->redirects = 0;
    c->tries = 0;
    c->wprev = c->wnext = NULL;
    c->now_ms = now_ms;
    c->n = n;
    memcpy(c->rules, rules, n * sizeof(*rules));
    c->subject_len = subject_len;
    memcpy(c->subject, subject, subject_len);
    c->leased = lease_id != NULL;
    c->lease_id_len = c->leased ? lease_id_len : 0;
    if (c->leased)
        memcpy(c->lease_id, lease_id, lease_id_len);
    int r = send_to(c, (size_t)node, false);
    if (r != 0)
        check_put(cl, c);
    return r;
}

static int cluster_check(struct limiter *limiter, const char *subject, size_t subject_len,
                         const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                         size_t lease_id_len, limiter_done_fn *done, void *arg)
{
    return cluster_call(limiter, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, false, done, arg);
}

static int cluster_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                        const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg)
{
    return cluster_call(limiter, subject, subject_len, rules, n, now_ms, NULL, 0, true, done, arg);
}

/* ---- leases ---- */

/* Calls done once every part has called back (a count of parts still to answer). */
struct join {
    int left;
    void (*done)(void *arg);
    void *arg;
};

static void join_one(void *arg)
{
    struct join *j = arg;
    if (--j->left > 0)
        return;
    void (*done)(void *) = j->done;
    void *done_arg = j->arg;
    free(j);
    done(done_arg);
}

static void cluster_release(struct limiter *limiter, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    /* only the node limiter holding the lease finds it */
    for (size_t i = 0; i < cl->n_nodes; i++) {
        struct cluster_node *node = cl->nodes[i];
        size_t held = lease_table_count(&node->redis->leases);
        if (held == 0)
            continue;
        node->redis->ops->release(node->redis, subject, subject_len, rules, n, lease_id, lease_id_len);
        if (lease_table_count(&node->redis->leases) < held)
            node->released = true;
    }
}

static void cluster_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    struct join *j = malloc(sizeof(*j));
    if (j == NULL) {
        for (size_t i = 0; i < cl->n_nodes; i++)
            limiter_release_all(cl->nodes[i]->redis, NULL, NULL);
        done(arg);
        return;
    }
    *j = (struct join){.left = 1, .done = done, .arg = arg};
    for (size_t i = 0; i < cl->n_nodes; i++) {
        j->left++;
        limiter_release_all(cl->nodes[i]->redis, join_one, j);
    }
    join_one(j);
}

static void cluster_sync(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    struct join *j = malloc(sizeof(*j));
    if (j == NULL) {
        done(arg);
        return;
    }
    *j = (struct join){.left = 1, .done = done, .arg = arg};
    /* a PING where a release went (one node for one request), not on every master */
    for (size_t i = 0; i < cl->n_nodes; i++) {
        struct limiter *node = cl->nodes[i]->redis;
        if (!cl->nodes[i]->released)
            continue;
        cl->nodes[i]->released = false;
        if (limiter_available(node)) {
            j->left++;
            limiter_sync(node, join_one, j);
        }
    }
    join_one(j);
}

static size_t cluster_lease_count(const struct limiter *limiter)
{
    const struct cluster_limiter *cl = (const struct cluster_limiter *)limiter;
    size_t sum = 0;
    for (size_t i = 0; i < cl->n_nodes; i++)
        sum += lease_table_count(&cl->nodes[i]->redis->leases);
    return sum;
}

/* A lease goes to the master of its key's slot (none known yet: -EAGAIN, still the caller's). */
static int cluster_adopt(struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id,
                         int64_t ttl_ms, const char *id, size_t id_len)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    unsigned slot = cluster_limiter_key_slot(cl->prefix, cl->prefix_len, subject, subject_len, rule_id);
    int owner = (int)cl->owner[slot] - 1;
    if (owner < 0)
        return -EAGAIN;
    return limiter_redis_node_adopt(cl->nodes[owner]->redis, subject, subject_len, rule_id, ttl_ms, id, id_len);
}

static void cluster_set_ready_hook(struct limiter *limiter, void (*fn)(void *arg), void *arg)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    cl->ready_fn = fn;
    cl->ready_arg = arg;
    for (size_t i = 0; i < cl->n_nodes; i++)
        limiter_set_ready_hook(cl->nodes[i]->redis, fn, arg);
}

static void cluster_set_event_hook(struct limiter *limiter, limiter_event_fn *fn, void *arg)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    cl->event_fn = fn;
    cl->event_arg = arg;
    for (size_t i = 0; i < cl->n_nodes; i++)
        limiter_set_event_hook(cl->nodes[i]->redis, fn, arg);
}

/* A master that answers with errors makes the store's health ERROR; with no master
 * answering (or no map yet) it is UNREACHABLE; some down is OK here (/health lists the
 * masters and says degraded). From any thread, as cluster_nodes. */
static enum limiter_health cluster_health(const struct limiter *limiter, char *reason, size_t reason_len)
{
    const struct cluster_limiter *cl = (const struct cluster_limiter *)limiter;
    size_t n = cl->n_nodes, up = 0;
    enum limiter_health worst = LIMITER_HEALTH_UNREACHABLE;
    if (reason_len > 0)
        snprintf(reason, reason_len, "no master answers: %.*s", (int)sizeof(cl->last_error), cl->last_error);
    for (size_t i = 0; i < n; i++) {
        if (!cl->nodes[i]->master)
            continue;
        char why[STORE_REASON_MAX];
        enum limiter_health h = limiter_health(cl->nodes[i]->redis, why, sizeof(why));
        if (h == LIMITER_HEALTH_ERROR) {
            snprintf(reason, reason_len, "%s", why);
            return h;
        }
        up += h == LIMITER_HEALTH_OK;
    }
    if (cl->have_map && up > 0)
        worst = LIMITER_HEALTH_OK;
    return worst;
}

/* ---- the rest ---- */

/* For /health: every master of the map connected. Read from the admin thread: the node
 * array is only read here (its pointer and count change on the loop thread when a node is
 * added; a stale read is a stale answer, the array is never freed before destroy). */
static bool cluster_available(const struct limiter *limiter)
{
    return cluster_masters_all_up((const struct cluster_limiter *)limiter);
}

static size_t cluster_nodes(const struct limiter *limiter,
                            void (*fn)(void *arg, const struct limiter_node_info *node), void *arg)
{
    const struct cluster_limiter *cl = (const struct cluster_limiter *)limiter;
    size_t n = cl->n_nodes, listed = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cluster_node *node = cl->nodes[i];
        if (!node->master)
            continue;
        struct limiter_node_info info = {
            .name = node->name,
            .up = limiter_available(node->redis),
            .errors = atomic_load_explicit(&node->errors, memory_order_relaxed),
        };
        fn(arg, &info);
        listed++;
    }
    return listed;
}

static void cluster_destroy(struct limiter *limiter)
{
    struct cluster_limiter *cl = (struct cluster_limiter *)limiter;
    cl->destroying = true;   /* checks failed by the nodes' end are passed on as they are */
    while (cl->waiting != NULL) {   /* checks waiting after TRYAGAIN: answered now */
        struct cluster_check *c = cl->waiting;
        waiting_remove(cl, c);
        evtimer_del(c->retry);
        finish_unavailable(c);
    }
    event_free(cl->refresh_timer);
    event_free(cl->probe_timer);
    cluster_probe_drop(cl, false);
    for (size_t i = 0; i < cl->n_nodes; i++) {
        limiter_destroy(cl->nodes[i]->redis);
        free(cl->nodes[i]);
    }
    while (cl->spare != NULL) {
        struct cluster_check *c = cl->spare;
        cl->spare = c->next;
        check_free(c);
    }
    explicit_bzero(cl->seeds, cl->n_seeds * sizeof(*cl->seeds));
    free(cl->seeds);
    SSL_CTX_free(cl->tls);
    free(cl->prefix);
    free(cl);
}

static const struct limiter_shared_ops cluster_shared_ops = LIMITER_SHARED_OPS(cluster, cluster_adopt, cluster_nodes);
/* A backend, not a wrapper: the denial cache is the cluster limiter's (its nodes are
 * called without theirs), as a single Redis limiter's. */
static const struct limiter_ops cluster_ops = LIMITER_OPS(cluster, cluster_lease_count, &cluster_shared_ops);

int limiter_redis_cluster_prefix_check(const char *key_prefix, char *err, size_t errlen)
{
    if (key_prefix != NULL && strchr(key_prefix, '{') != NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen,
                     "a key prefix with '{' would make Redis Cluster put every subject in one slot "
                     "(the hash tag is the subject): remove the '{' in cluster mode");
        return -EINVAL;
    }
    return 0;
}

static void say(char *err, size_t errlen, const char *what)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", what);
}

/* Frees what cluster_limiter_new made of a limiter that never started. */
static void cluster_limiter_discard(struct cluster_limiter *cl)
{
    cl->destroying = true;
    if (cl->refresh_timer)
        event_free(cl->refresh_timer);
    if (cl->probe_timer)
        event_free(cl->probe_timer);
    explicit_bzero(cl->seeds, REDIS_SEEDS_MAX * sizeof(*cl->seeds));
    free(cl->seeds);
    free(cl->prefix);
    free(cl);
}

/* The limiter's state around its parsed seeds, before any connection: timers, the key
 * prefix, TLS for rediss:// seeds. NULL (why in err) when any of it cannot be had. */
static struct cluster_limiter *cluster_limiter_new(struct event_base *base, const struct redis_store_options *options,
                                                   const char *prefix, struct redis_url *seeds, int n, char *err,
                                                   size_t errlen)
{
    struct cluster_limiter *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        explicit_bzero(seeds, REDIS_SEEDS_MAX * sizeof(*seeds));
        free(seeds);
        say(err, errlen, "out of memory");
        return NULL;
    }
    cl->base.ops = &cluster_ops;
    lease_table_init(&cl->base.leases);
    cl->evbase = base;
    cl->seeds = seeds;
    cl->n_seeds = (size_t)n;
    cl->options = *options;
    cl->options.url = NULL;
    cl->prefix = strdup(prefix);
    cl->prefix_len = strlen(prefix);
    cl->options.key_prefix = cl->prefix;
    cl->probe_timeout_ms = options->command_timeout_ms > PROBE_TIMEOUT_MIN_MS ? options->command_timeout_ms
                                                                             : PROBE_TIMEOUT_MIN_MS;
    cl->probe_started_ms = store_mono_ms() - REFRESH_GAP_MS;
    cl->refresh_timer = evtimer_new(base, cluster_on_refresh_timer, cl);
    cl->probe_timer = evtimer_new(base, cluster_on_probe_timer, cl);
    char why[400] = "out of memory";
    bool no_tls = seeds[0].tls && (cl->tls = redis_tls_context_new(options->tls_ca_file, why, sizeof(why))) == NULL;
    if (no_tls || cl->prefix == NULL || cl->refresh_timer == NULL || cl->probe_timer == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s%s", no_tls ? "[limits] redis_ca_file: " : "", why);
        cluster_limiter_discard(cl);
        return NULL;
    }
    return cl;
}

struct limiter *limiter_redis_cluster_create(struct event_base *base, const struct redis_store_options *options,
                                             char *err, size_t errlen)
{
    say(err, errlen, "");
    if (base == NULL || options == NULL || options->url == NULL) {
        say(err, errlen, "no event loop, options or seeds");
        return NULL;
    }
    const char *prefix = options->key_prefix ? options->key_prefix : "tierproxy:";
    if (limiter_redis_cluster_prefix_check(prefix, err, errlen) != 0)
        return NULL;
    struct redis_url *seeds = calloc(REDIS_SEEDS_MAX, sizeof(*seeds));
    if (seeds == NULL) {
        say(err, errlen, "out of memory");
        return NULL;
    }
    int n = redis_seed_list_parse(options->url, seeds, REDIS_SEEDS_MAX, err, errlen);
    if (n <= 0) {
        explicit_bzero(seeds, REDIS_SEEDS_MAX * sizeof(*seeds));
        free(seeds);
        return NULL;
    }
    struct cluster_limiter *cl = cluster_limiter_new(base, options, prefix, seeds, n, err, errlen);
    if (cl == NULL)
        return NULL;
    cluster_refresh_start(cl);
    return &cl->base;
}
