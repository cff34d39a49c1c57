/* The slot map of a Redis Cluster: which master serves each of the 16384 slots, built from
 * a CLUSTER SLOTS reply (issue 14). No I/O: the Redis limiter asks a node for CLUSTER SLOTS
 * and hands the reply here. Private to store/. */
#pragma once
#include <stddef.h>

#include <hiredis.h>

#include "store/redis/cluster_slot.h"

#define CLUSTER_MAP_MAX_MASTERS 1024   /* Redis' own advice caps a cluster near 1000 nodes */

struct cluster_master {
    char host[CLUSTER_HOST_MAX];
    int port;
};

struct cluster_map;

/* Builds a map from a CLUSTER SLOTS reply: an array of [first slot, last slot,
 * [master host, master port, id...], replicas...]. A master whose host is empty or "?"
 * (Redis 7: endpoint unknown) gets answering_host, the host of the node that answered.
 * Masters are numbered 0.. in the order they first appear. Slots no entry covers have no
 * master. Returns the map (the caller frees it with cluster_map_destroy), or NULL with the
 * reason in err: not the reply's shape, a slot out of range or covered twice, a bad port,
 * a host too long, more than CLUSTER_MAP_MAX_MASTERS masters, or out of memory. */
struct cluster_map *cluster_map_from_reply(const redisReply *reply, const char *answering_host, char *err,
                                           size_t errlen);
void cluster_map_destroy(struct cluster_map *map);

/* The index of the master serving slot, or -1 when none does (or slot >= 16384). */
int cluster_map_master_of_slot(const struct cluster_map *map, unsigned slot);

/* Masters, indexed 0 .. cluster_map_master_count() - 1; the pointer lives as long as map. */
size_t cluster_map_master_count(const struct cluster_map *map);
const struct cluster_master *cluster_map_master(const struct cluster_map *map, size_t index);

/* The index of the master at host:port, or -1 when the map has none there (a MOVED to a
 * node the map does not know means the map is stale). */
int cluster_map_find_master(const struct cluster_map *map, const char *host, int port);

/* Slots that have no master (0 when the cluster covers them all, as cluster_state:ok needs). */
size_t cluster_map_uncovered_slots(const struct cluster_map *map);
