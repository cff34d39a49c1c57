/* The Redis limiter's concurrency leases: the table of those it holds, renewed with one
 * renew.lua call per interval, given back one ZREM each (held back while Redis is away)
 * or all at once, and handed over between the nodes of a cluster. Part of the Redis
 * limiter (store/redis/limiter_redis.c says how it works). */
#include "store/redis/limiter_redis_private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"

/* Releases held back while Redis is away, replayed when it is back (a bound on memory: past
 * it, a released lease ends at its TTL as before). */
#define MAX_DEFERRED_RELEASES 65536
#ifndef RENEW_BATCH
#define RENEW_BATCH 16384     /* leases per renew.lua call (a bound on one call's Redis time) */
#endif

void redis_renew_arm(struct redis_limiter *rl)
{
    if (rl->destroying || evtimer_pending(rl->renew_timer, NULL))
        return;
    struct timeval tv = store_ms_to_timeval(rl->renew_every_ms);
    evtimer_add(rl->renew_timer, &tv);
}

/* A batch: at most RENEW_BATCH leases from a cursor, and what its call needs. */
struct batch_size {
    size_t keys, leases, bytes;
};

/* Counts the batch from the cursor (g, l) on. */
static struct batch_size batch_size(const struct redis_limiter *rl, struct lease_group *g, struct lease *l)
{
    struct batch_size b = {.bytes = 64};   /* numkeys, op, now */
    while (g != NULL && b.leases < RENEW_BATCH) {
        b.keys++;
        b.bytes += redis_key_max(rl, g->subject_len) + 2 * 24;
        for (; l != NULL && b.leases < RENEW_BATCH; l = l->next) {
            b.leases++;
            b.bytes += l->id_len;
        }
        if (l == NULL) {
            g = g->next;
            l = g != NULL ? g->first : NULL;
        }
    }
    return b;
}

/* The call's KEYS (none for a cluster node, whose keys go with their leases) and its op
 * and clock arguments. */
static void put_head(struct redis_limiter *rl, struct pending *p, size_t *off, enum pending_kind kind,
                     struct lease_group *g, size_t keys)
{
    redis_put_int(p, off, rl->cluster_node ? 0 : (int64_t)keys);
    for (size_t k = 0; k < keys && !rl->cluster_node; k++) {
        redis_put_key(rl, p, off, g->subject, g->subject_len, g->rule_id);
        g = g->next;
    }
    static const char renew[] = "renew", release[] = "release";
    if (kind == P_RENEW)
        redis_put_arg(p, off, renew, sizeof(renew) - 1);
    else
        redis_put_arg(p, off, release, sizeof(release) - 1);
    redis_put_int(p, off, -1);   /* now: the server's clock */
    if (rl->cluster_node)
        redis_put_int(p, off, (int64_t)keys);
}

/* Each key's TTL, lease count and lease ids, moving the cursor past them. */
static void put_leases(struct redis_limiter *rl, struct pending *p, size_t *off, const struct batch_size *b,
                       struct lease_group **pg, struct lease **pl)
{
    struct lease_group *g = *pg;
    struct lease *l = *pl;
    size_t left = b->leases;
    for (size_t k = 0; k < b->keys; k++) {
        size_t m = 0;
        for (const struct lease *x = l; x != NULL && m < left; x = x->next)
            m++;
        if (rl->cluster_node)
            redis_put_key(rl, p, off, g->subject, g->subject_len, g->rule_id);
        redis_put_int(p, off, g->ttl_ms);
        redis_put_int(p, off, (int64_t)m);
        for (size_t j = 0; j < m; j++, l = l->next)
            redis_put_arg(p, off, l->id, l->id_len);
        left -= m;
        if (l == NULL) {
            g = g->next;
            l = g != NULL ? g->first : NULL;
        }
    }
    *pg = g;
    *pl = l;
}

/* Builds one renew.lua call ("renew" or "release") for the leases from *pg / *pl on, at most
 * RENEW_BATCH of them, and moves the cursor past them (*pg NULL: all done). Returns NULL
 * on allocation failure (the cursor is then unchanged). */
static struct pending *lease_batch(struct redis_limiter *rl, enum pending_kind kind, struct lease_group **pg,
                                   struct lease **pl)
{
    struct batch_size b = batch_size(rl, *pg, *pl);
    /* EVALSHA sha numkeys key... op now (ttl m id...)...; a cluster node:
       EVALSHA sha 0 op now nkeys (key ttl m id...)... */
    struct pending *p = redis_pending_new(rl, kind, redis_on_lease_reply, 6 + 3 * b.keys + b.leases, b.bytes);
    if (p == NULL)
        return NULL;
    p->script = &rl->renew;
    p->argc = 2;
    size_t off = 0;
    put_head(rl, p, &off, kind, *pg, b.keys);
    put_leases(rl, p, &off, &b, pg, pl);
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
        if (redis_send_pending(rl, p) != 0) {
            redis_pending_free(p);
            break;
        }
        sent++;
    }
    return sent;
}

/* Renews every held lease now, unless the store is down (then: when it is READY again) or
 * a renewal is still in flight. */
void redis_renew_now(struct redis_limiter *rl)
{
    if (lease_table_count(&rl->base.leases) == 0)
        return;
    redis_renew_arm(rl);
    if (rl->state != CONN_READY || rl->ac == NULL || rl->renewing > 0)
        return;
    rl->renewing += send_leases(rl, P_RENEW, NULL);
}

void redis_on_renew_timer(evutil_socket_t fd, short what, void *arg)
{
    redis_renew_now(arg);   /* re-arms itself while leases are held */
}

void redis_on_lease_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    if (redis_script_sent_again(ac, p, r))
        return;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    bool failed = reply == NULL || reply->type == REDIS_REPLY_ERROR;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
        redis_note_error(rl, p->kind == P_RELEASE_ALL ? "release all" : "renew", reply->str);
    struct release_all *all = p->all;
    if (p->kind == P_RENEW)
        rl->renewing--;
    if (failed && p->kind != P_RELEASE_ALL)
        rl->unregistered = true;     /* some leases may be missing: renewed before the next check */
    else if (p->kind == P_RENEW && rl->renewing == 0)
        rl->unregistered = false;
    redis_pending_free(p);
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
        redis_pending_free(p);
        return;
    }
    p->next = rl->deferred;
    rl->deferred = p;
    rl->n_deferred++;
}

/* The held-back releases, taken off the limiter (which then holds none). */
static struct pending *take_deferred(struct redis_limiter *rl)
{
    struct pending *p = rl->deferred;
    rl->deferred = NULL;
    rl->n_deferred = 0;
    return p;
}

void redis_flush_deferred(struct redis_limiter *rl)
{
    struct pending *p = take_deferred(rl);
    while (p != NULL) {
        struct pending *next = p->next;
        p->next = NULL;
        if (redis_send_pending(rl, p) != 0)
            defer_release(rl, p);
        p = next;
    }
}

void redis_on_zrem_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    redisReply *reply = r;
    redis_inflight_remove(p->rl, p);
    if (reply == NULL && p->is_release) {
        /* the connection went before Redis answered: it may not have seen the ZREM */
        defer_release(p->rl, p);
        return;
    }
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
        redis_note_error(p->rl, "release", reply->str);
    void (*synced)(void *) = p->synced;
    void *synced_arg = p->synced_arg;
    redis_pending_free(p);
    if (synced != NULL)
        synced(synced_arg);
}

/* ZREM <key> <lease id>, fire and forget. While the store is down (or when the connection
 * goes before Redis answered) it is held back and sent first once Redis is READY again, so
 * a slot given back during an outage does not count there after it; past
 * MAX_DEFERRED_RELEASES the lease ends at its TTL. */
void redis_send_zrem(struct redis_limiter *rl, const char *subject, size_t subject_len, int64_t rule_id,
                      const char *id, size_t id_len)
{
    struct pending *p = redis_pending_new(rl, P_ZREM, redis_on_zrem_reply, 3, 4 + redis_key_max(rl, subject_len) + id_len);
    if (p == NULL)
        return;
    p->is_release = true;
    size_t off = 0;
    redis_put_arg(p, &off, "ZREM", 4);
    redis_put_key(rl, p, &off, subject, subject_len, rule_id);
    redis_put_arg(p, &off, id, id_len);
    if (rl->state != CONN_READY || rl->ac == NULL || redis_send_pending(rl, p) != 0)
        defer_release(rl, p);
}

void redis_give_back(struct limiter *limiter, struct lease *lease)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    const struct lease_group *g = lease->group;
    redis_send_zrem(rl, g->subject, g->subject_len, g->rule_id, lease->id, lease->id_len);
    lease_table_remove(&limiter->leases, lease);
}

/* Calls done once Redis has applied every command sent on this connection before: one
 * connection's commands run in order, so the reply to a PING sent now says so. At once
 * when the store is down. */
void redis_sync(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    struct pending *p = NULL;
    if (rl->state == CONN_READY && rl->ac != NULL)
        p = redis_pending_new(rl, P_ZREM, redis_on_zrem_reply, 1, 4);
    if (p == NULL) {
        done(arg);
        return;
    }
    p->synced = done;
    p->synced_arg = arg;
    size_t off = 0;
    redis_put_arg(p, &off, "PING", 4);
    if (redis_send_pending(rl, p) != 0) {
        redis_pending_free(p);
        done(arg);
    }
}

void redis_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
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
int redis_track_leases(struct redis_limiter *rl, const struct lease_req *lr)
{
    struct lease_table *t = &rl->base.leases;
    size_t i = 0;
    for (; i < lr->n; i++) {
        int r = lease_add(rl, lr->subject, lr->subject_len, lr->rule_id[i], lr->ttl_ms[i], lr->id, lr->id_len);
        if (r != 0 && r != -EEXIST)   /* EEXIST: the same id twice in flight (a caller's bug); held once */
            break;
    }
    if (i == lr->n) {
        redis_renew_arm(rl);
        return 0;
    }
    /* Out of memory: give back what Redis recorded, tracked or not. */
    for (size_t j = 0; j < lr->n; j++) {
        struct lease *l = lease_table_find(t, lr->subject, lr->subject_len, lr->rule_id[j], lr->id, lr->id_len);
        if (l != NULL)
            lease_table_remove(t, l);
        redis_send_zrem(rl, lr->subject, lr->subject_len, lr->rule_id[j], lr->id, lr->id_len);
    }
    return -ENOMEM;
}

void limiter_redis_node_hand_over(struct limiter *from,
                                  struct limiter *(*route)(void *arg, const char *key, size_t key_len), void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)from;
    struct pending *p = take_deferred(rl);
    while (p != NULL) {
        struct pending *next = p->next;
        p->next = NULL;
        /* a held-back release is "ZREM <key> <lease id>", back to back in buf */
        struct limiter *to = p->argc == 3 ? route(arg, p->buf + p->lens[0], p->lens[1]) : NULL;
        struct redis_limiter *heir = to != NULL ? (struct redis_limiter *)to : rl;
        p->rl = heir;
        if (heir->state != CONN_READY || heir->ac == NULL || redis_send_pending(heir, p) != 0)
            defer_release(heir, p);
        p = next;
    }
}

/* renew.lua for one lease: registers it (ZADD with the server's clock, the key kept alive),
 * ahead of any check sent after it on this connection. */
static void send_register(struct redis_limiter *rl, const char *subject, size_t subject_len, int64_t rule_id,
                          int64_t ttl_ms, const char *id, size_t id_len)
{
    struct pending *p = redis_pending_new(rl, P_REGISTER, redis_on_lease_reply, 10, 128 + redis_key_max(rl, subject_len) + id_len);
    if (p == NULL) {
        rl->unregistered = true;
        return;
    }
    p->script = &rl->renew;
    p->argc = 2;
    size_t off = 0;
    /* EVALSHA sha 1 key renew now ttl 1 id; a cluster node: EVALSHA sha 0 renew now 1 key ttl 1 id */
    redis_put_int(p, &off, rl->cluster_node ? 0 : 1);
    if (!rl->cluster_node)
        redis_put_key(rl, p, &off, subject, subject_len, rule_id);
    redis_put_arg(p, &off, "renew", 5);
    redis_put_int(p, &off, -1);
    if (rl->cluster_node) {
        redis_put_int(p, &off, 1);
        redis_put_key(rl, p, &off, subject, subject_len, rule_id);
    }
    redis_put_int(p, &off, ttl_ms);
    redis_put_int(p, &off, 1);
    redis_put_arg(p, &off, id, id_len);
    if (redis_send_pending(rl, p) != 0) {
        redis_pending_free(p);
        rl->unregistered = true;
    }
}

int limiter_redis_node_adopt(struct limiter *node, const char *subject, size_t subject_len, int64_t rule_id,
                             int64_t ttl_ms, const char *id, size_t id_len)
{
    struct redis_limiter *rl = (struct redis_limiter *)node;
    int r = lease_add(rl, subject, subject_len, rule_id, ttl_ms, id, id_len);
    if (r != 0)
        return r;
    redis_renew_arm(rl);
    if (rl->state == CONN_READY && rl->ac != NULL)
        send_register(rl, subject, subject_len, rule_id, ttl_ms, id, id_len);
    return 0;
}
