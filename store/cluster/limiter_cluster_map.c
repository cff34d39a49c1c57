/* The Redis Cluster limiter's nodes (one Redis node limiter per master) and its slot map:
 * CLUSTER SLOTS asked of one node at a time on a connection of its own, at start, on a
 * timer and when a check asks for it; leases moved to their slot's new master after each
 * new map. Part of the cluster limiter (store/cluster/limiter_cluster.c says how it works). */
#include "store/cluster/limiter_cluster_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"
#include "store/cluster/cluster_map.h"
#include "store/redis/limiter_redis_node.h"
#include "store/redis/redis_async.h"

void cluster_note_error(struct cluster_limiter *cl, const char *what, const char *detail)
{
    /* cut to fit (a debugger's aid): the precisions keep the compiler's check quiet */
    snprintf(cl->last_error, sizeof(cl->last_error), "%.60s: %.120s", what, detail ? detail : "?");
}

/* ---- nodes ---- */

static int node_find(const struct cluster_limiter *cl, const char *host, int port)
{
    for (size_t i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return (int)i;
    return -1;
}

/* The index of the node at host:port, made (and connecting) when new; -1 past the cap or
 * out of memory. */
int cluster_node_find_or_add(struct cluster_limiter *cl, const char *host, int port)
{
    int found = node_find(cl, host, port);
    if (found >= 0) {
        limiter_redis_node_park(cl->nodes[found]->redis, false);
        return found;
    }
    size_t host_len = strnlen(host, CLUSTER_HOST_MAX);
    if (cl->n_nodes >= CLUSTER_MAX_NODES || host_len >= CLUSTER_HOST_MAX || host_len >= sizeof(cl->seeds[0].host))
        return -1;
    struct cluster_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return -1;
    /* every node with the first seed's credentials: one cluster, one set of users */
    struct redis_url url = cl->seeds[0];
    memcpy(url.host, host, host_len + 1);
    url.port = port;
    char err[200];
    struct limiter *redis = limiter_redis_node_create(cl->evbase, &cl->options, &url, cl->tls, err, sizeof(err));
    explicit_bzero(&url, sizeof(url));
    if (redis == NULL) {
        cluster_note_error(cl, "node", err);
        free(node);
        return -1;
    }
    memcpy(node->host, host, host_len + 1);
    node->port = port;
    snprintf(node->name, sizeof(node->name), "%s:%d", host, port);
    node->redis = redis;
    limiter_set_event_hook(redis, cl->event_fn, cl->event_arg);
    if (cl->ready_fn != NULL)
        limiter_set_ready_hook(redis, cl->ready_fn, cl->ready_arg);
    size_t index = cl->n_nodes;
    cl->nodes[index] = node;
    cl->n_nodes = index + 1;   /* after the entry: seq_cst */
    return (int)index;
}

bool cluster_masters_all_up(const struct cluster_limiter *cl)
{
    if (!cl->have_map)
        return false;
    size_t n = cl->n_nodes;
    for (size_t i = 0; i < n; i++)
        if (cl->nodes[i]->master && !limiter_available(cl->nodes[i]->redis))
            return false;
    return true;
}

/* ---- the slot map ---- */

static void probe_next(struct cluster_limiter *cl);
void cluster_refresh_request(struct cluster_limiter *cl);

/* Leases whose slot another master serves now go to that master's limiter. */
static void move_leases(struct cluster_limiter *cl)
{
    for (size_t i = 0; i < cl->n_nodes; i++) {
        struct lease_table *t = &cl->nodes[i]->redis->leases;
        struct lease_group *g = t->groups;
        while (g != NULL) {
            struct lease_group *gnext = g->next;
            unsigned slot = cluster_limiter_key_slot(cl->prefix, cl->prefix_len, g->subject, g->subject_len,
                                                     g->rule_id);
            int owner = (int)cl->owner[slot] - 1;
            if (owner >= 0 && (size_t)owner != i) {
                struct limiter *heir = cl->nodes[owner]->redis;
                struct lease *l = g->first;
                while (l != NULL) {   /* the last remove frees g: g is not read after it */
                    struct lease *lnext = l->next;
                    limiter_redis_node_adopt(heir, g->subject, g->subject_len, g->rule_id, g->ttl_ms, l->id,
                                             l->id_len);
                    lease_table_remove(t, l);
                    l = lnext;
                }
            }
            g = gnext;
        }
    }
}

/* The node limiter of the master serving key's slot, or NULL. */
static struct limiter *owner_of_key(void *arg, const char *key, size_t key_len)
{
    struct cluster_limiter *cl = arg;
    int owner = (int)cl->owner[cluster_key_slot(key, key_len)] - 1;
    return owner >= 0 ? cl->nodes[owner]->redis : NULL;
}

static void apply_map(struct cluster_limiter *cl, const struct cluster_map *map)
{
    size_t masters = cluster_map_master_count(map);
    uint16_t *owner_of = calloc(masters > 0 ? masters : 1, sizeof(*owner_of));
    if (owner_of == NULL) {
        cluster_note_error(cl, "map", "out of memory");
        return;
    }
    for (size_t i = 0; i < masters; i++) {
        const struct cluster_master *m = cluster_map_master(map, i);
        int node = cluster_node_find_or_add(cl, m->host, m->port);
        owner_of[i] = node >= 0 ? (uint16_t)(node + 1) : 0;
    }
    for (size_t i = 0; i < cl->n_nodes; i++)
        cl->nodes[i]->master = false;
    for (size_t i = 0; i < masters; i++)
        if (owner_of[i] != 0)
            cl->nodes[owner_of[i] - 1]->master = true;
    for (unsigned slot = 0; slot < CLUSTER_SLOT_COUNT; slot++) {
        int m = cluster_map_master_of_slot(map, slot);
        cl->owner[slot] = m >= 0 ? owner_of[m] : 0;
    }
    free(owner_of);
    cl->have_map = true;
    move_leases(cl);
    /* releases a node out of the map held back while it was down: to their slot's master */
    for (size_t i = 0; i < cl->n_nodes; i++)
        if (!cl->nodes[i]->master)
            limiter_redis_node_hand_over(cl->nodes[i]->redis, owner_of_key, cl);
    /* a node out of the map with no lease left (a dead master its replica replaced) stops
       reconnecting; it is woken if a map or a redirect names it again */
    for (size_t i = 0; i < cl->n_nodes; i++)
        limiter_redis_node_park(cl->nodes[i]->redis,
                                !cl->nodes[i]->master && lease_table_count(&cl->nodes[i]->redis->leases) == 0);
}

static void refresh_arm(struct cluster_limiter *cl, int64_t ms)
{
    if (cl->destroying)
        return;
    struct timeval tv = store_ms_to_timeval(ms);
    evtimer_add(cl->refresh_timer, &tv);   /* replaces a later deadline */
}

/* The refresh is over (a map applied, or no candidate answered): the next one. */
static void probe_finished(struct cluster_limiter *cl)
{
    cl->probing = false;
    if (cl->probe_again) {
        cl->probe_again = false;
        refresh_arm(cl, REFRESH_GAP_MS);
        return;
    }
    refresh_arm(cl, cluster_masters_all_up(cl) ? REFRESH_MS : REFRESH_FAST_MS);
}

/* Lets go of the probe's connection (never from its connect or disconnect callback). */
void cluster_probe_drop(struct cluster_limiter *cl, bool graceful)
{
    redisAsyncContext *ac = cl->probe;
    if (ac == NULL)
        return;
    cl->probe = NULL;
    ac->data = NULL;
    if (graceful)
        redisAsyncDisconnect(ac);
    else
        redisAsyncFree(ac);   /* inside a reply callback hiredis defers this until it returns */
}

/* The candidate failed: the next one, from the loop (not from inside hiredis). */
static void probe_failed(struct cluster_limiter *cl, const char *why)
{
    if (cl->event_fn != NULL && !cl->have_map)
        cl->event_fn(cl->event_arg, LIMITER_HEALTH_UNREACHABLE, why);
    cluster_note_error(cl, cl->probe_host, why);
    struct timeval now = {0, 0};
    evtimer_add(cl->probe_timer, &now);
}

static void on_slots(redisAsyncContext *ac, void *r, void *privdata)
{
    struct cluster_limiter *cl = privdata;
    redisReply *reply = r;
    if (reply == NULL || cl->probe != ac)
        return;   /* the probe is going away; that is handled where it goes */
    if (reply->type == REDIS_REPLY_ERROR) {
        cluster_probe_drop(cl, false);
        probe_failed(cl, reply->str);
        return;
    }
    char err[200];
    struct cluster_map *map = cluster_map_from_reply(reply, cl->probe_host, err, sizeof(err));
    cluster_probe_drop(cl, true);
    if (map == NULL || cluster_map_master_count(map) == 0) {
        cluster_map_destroy(map);
        probe_failed(cl, map == NULL ? err : "no master");
        return;
    }
    evtimer_del(cl->probe_timer);
    size_t total = cl->n_nodes + cl->n_seeds;
    cl->probe_start = (cl->probe_start + cl->probe_tried - 1) % total;   /* before apply_map adds nodes */
    apply_map(cl, map);
    cluster_map_destroy(map);
    probe_finished(cl);
}

static void on_probe_connect(const redisAsyncContext *cac, int status)
{
    struct cluster_limiter *cl = cac->data;
    if (cl == NULL || cl->probe != cac || status == REDIS_OK)
        return;
    cl->probe = NULL;   /* hiredis frees the context when this returns */
    probe_failed(cl, cac->errstr);
}

static void on_probe_disconnect(const redisAsyncContext *cac, int status)
{
    struct cluster_limiter *cl = cac->data;
    if (cl == NULL || cl->probe != cac)
        return;
    cl->probe = NULL;
    probe_failed(cl, cac->errstr[0] ? cac->errstr : "disconnected");
}

/* Candidates: the nodes known (masters first come first in the map), then the seeds. */
static const struct redis_url *candidate(const struct cluster_limiter *cl, size_t k, const char **host, int *port)
{
    if (k < cl->n_nodes) {
        *host = cl->nodes[k]->host;
        *port = cl->nodes[k]->port;
        return &cl->seeds[0];
    }
    const struct redis_url *seed = &cl->seeds[k - cl->n_nodes];
    *host = seed->host;
    *port = seed->port;
    return seed;
}

static void probe_next(struct cluster_limiter *cl)
{
    size_t total = cl->n_nodes + cl->n_seeds;
    while (cl->probe_tried < total && !cl->destroying) {
        const char *host;
        int port;
        const struct redis_url *cred = candidate(cl, (cl->probe_start + cl->probe_tried) % total, &host, &port);
        cl->probe_tried++;
        snprintf(cl->probe_host, sizeof(cl->probe_host), "%s", host);
        char why[128];
        redisAsyncContext *ac = redis_async_open(cl->evbase, cl->tls, host, port, NULL, cl, on_probe_connect,
                                                 on_probe_disconnect, why, sizeof(why));
        if (ac == NULL) {
            cluster_note_error(cl, host, why);
            continue;
        }
        cl->probe = ac;
        /* pipelined: a rejected AUTH makes CLUSTER SLOTS fail (NOAUTH), the next is tried */
        if (cred->has_password) {
            const char *argv[3] = {"AUTH", cred->username, cred->password};
            if (cred->username[0] != '\0')
                redisAsyncCommandArgv(ac, NULL, NULL, 3, argv, NULL);
            else {
                argv[1] = cred->password;
                redisAsyncCommandArgv(ac, NULL, NULL, 2, argv, NULL);
            }
        }
        const char *slots[2] = {"CLUSTER", "SLOTS"};
        if (redisAsyncCommandArgv(ac, on_slots, cl, 2, slots, NULL) != REDIS_OK) {
            cluster_probe_drop(cl, false);
            continue;
        }
        struct timeval tv = store_ms_to_timeval(cl->probe_timeout_ms);
        evtimer_add(cl->probe_timer, &tv);
        return;
    }
    probe_finished(cl);   /* nobody answered: again soon */
}

void cluster_on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    struct cluster_limiter *cl = arg;
    if (cl->probe != NULL) {
        cluster_note_error(cl, cl->probe_host, "CLUSTER SLOTS timed out");
        cluster_probe_drop(cl, false);
    }
    probe_next(cl);
}

void cluster_refresh_start(struct cluster_limiter *cl)
{
    if (cl->destroying)
        return;
    if (cl->probing) {
        cl->probe_again = true;
        return;
    }
    cl->probing = true;
    cl->probe_tried = 0;
    cl->probe_started_ms = store_mono_ms();
    probe_next(cl);
}

void cluster_on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    cluster_refresh_start(arg);
}

/* A MOVED, or a node that could not answer: a new map soon, not at once for each. */
void cluster_refresh_request(struct cluster_limiter *cl)
{
    if (cl->destroying)
        return;
    if (cl->probing) {
        cl->probe_again = true;
        return;
    }
    int64_t since = store_mono_ms() - cl->probe_started_ms;
    refresh_arm(cl, since >= REFRESH_GAP_MS ? 0 : REFRESH_GAP_MS - since);
}

