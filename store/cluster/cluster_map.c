/* The slot map of a Redis Cluster, from CLUSTER SLOTS. */
#include "store/cluster/cluster_map.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_MASTER UINT16_MAX

struct cluster_map {
    size_t n_masters;
    struct cluster_master *masters;          /* n_masters, grown as they appear */
    size_t masters_cap;
    uint16_t owner[CLUSTER_SLOT_COUNT];      /* index into masters, NO_MASTER: none */
};

static void *fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

void cluster_map_destroy(struct cluster_map *map)
{
    if (map == NULL)
        return;
    free(map->masters);
    free(map);
}

int cluster_map_find_master(const struct cluster_map *map, const char *host, int port)
{
    for (size_t i = 0; i < map->n_masters; i++)
        if (map->masters[i].port == port && strcmp(map->masters[i].host, host) == 0)
            return (int)i;
    return -1;
}

/* The index of host:port in map's masters, added when new; -1 when the cap is reached or
 * memory runs out. */
static int intern_master(struct cluster_map *map, const char *host, int port)
{
    int found = cluster_map_find_master(map, host, port);
    if (found >= 0)
        return found;
    if (map->n_masters >= CLUSTER_MAP_MAX_MASTERS)
        return -1;
    if (map->n_masters == map->masters_cap) {
        size_t cap = map->masters_cap ? map->masters_cap * 2 : 8;
        struct cluster_master *grown = realloc(map->masters, cap * sizeof(*grown));
        if (grown == NULL)
            return -1;
        map->masters = grown;
        map->masters_cap = cap;
    }
    struct cluster_master *m = &map->masters[map->n_masters];
    snprintf(m->host, sizeof(m->host), "%s", host);
    m->port = port;
    return (int)map->n_masters++;
}

static int is_integer(const redisReply *r, long long lo, long long hi)
{
    return r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

struct cluster_map *cluster_map_from_reply(const redisReply *reply, const char *answering_host, char *err,
                                           size_t errlen)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY)
        return fail(err, errlen, "CLUSTER SLOTS did not answer an array");
    struct cluster_map *map = calloc(1, sizeof(*map));
    if (map == NULL)
        return fail(err, errlen, "out of memory");
    for (size_t s = 0; s < CLUSTER_SLOT_COUNT; s++)
        map->owner[s] = NO_MASTER;
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *e = reply->element[i];
        if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 3) {
            fail(err, errlen, "CLUSTER SLOTS entry %zu is not [first, last, master, ...]", i);
            goto bad;
        }
        if (!is_integer(e->element[0], 0, CLUSTER_SLOT_COUNT - 1) ||
            !is_integer(e->element[1], e->element[0]->integer, CLUSTER_SLOT_COUNT - 1)) {
            fail(err, errlen, "CLUSTER SLOTS entry %zu has a bad slot range", i);
            goto bad;
        }
        const redisReply *m = e->element[2];
        if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0] == NULL ||
            m->element[0]->type != REDIS_REPLY_STRING || !is_integer(m->element[1], 1, 65535)) {
            fail(err, errlen, "CLUSTER SLOTS entry %zu has no master host and port", i);
            goto bad;
        }
        const char *host = m->element[0]->str;
        size_t host_len = m->element[0]->len;
        if (host_len == 0 || (host_len == 1 && host[0] == '?')) {
            host = answering_host != NULL ? answering_host : "";
            host_len = strlen(host);
        }
        if (host_len >= CLUSTER_HOST_MAX || memchr(host, '\0', host_len) != NULL) {
            fail(err, errlen, "CLUSTER SLOTS entry %zu has a master host that is too long or not text", i);
            goto bad;
        }
        int index = intern_master(map, host, (int)m->element[1]->integer);
        if (index < 0) {
            fail(err, errlen, "CLUSTER SLOTS names more than %d masters, or memory ran out",
                 CLUSTER_MAP_MAX_MASTERS);
            goto bad;
        }
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++) {
            if (map->owner[s] != NO_MASTER) {
                fail(err, errlen, "CLUSTER SLOTS gives slot %lld twice", s);
                goto bad;
            }
            map->owner[s] = (uint16_t)index;
        }
    }
    return map;
bad:
    cluster_map_destroy(map);
    return NULL;
}

int cluster_map_master_of_slot(const struct cluster_map *map, unsigned slot)
{
    if (slot >= CLUSTER_SLOT_COUNT || map->owner[slot] == NO_MASTER)
        return -1;
    return map->owner[slot];
}

size_t cluster_map_master_count(const struct cluster_map *map)
{
    return map->n_masters;
}

const struct cluster_master *cluster_map_master(const struct cluster_map *map, size_t index)
{
    return index < map->n_masters ? &map->masters[index] : NULL;
}

size_t cluster_map_uncovered_slots(const struct cluster_map *map)
{
    size_t n = 0;
    for (size_t s = 0; s < CLUSTER_SLOT_COUNT; s++)
        n += map->owner[s] == NO_MASTER;
    return n;
}
