/* The concurrency leases one limiter holds: (subject, rule id, lease id), grouped by
 * (subject, rule id) -- one Redis key, or one memory-store slot -- with the rule's TTL.
 * Two chained hash tables (groups; leases by group and lease id), each entry also on a
 * list, so that adding, finding and removing a lease are O(1) and walking every group
 * (renewal, release of everything) is O(groups + leases). Private to store/.
 *
 * Not locked: one table belongs to one limiter, used by one thread. Only the count may be
 * read from another thread (lease_table_count). */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEASE_ID_MAX 64

struct lease;

struct lease_group {
    struct lease_group *hnext;          /* hash chain */
    struct lease_group *prev, *next;    /* list of every group */
    struct lease *first;                /* this group's leases */
    uint64_t hash;
    int64_t rule_id;
    int64_t ttl_ms;                     /* of the most recent lease added */
    size_t nleases;
    size_t subject_len;
    char subject[];
};

struct lease {
    struct lease *hnext;                /* hash chain */
    struct lease *prev, *next;          /* the group's list */
    struct lease_group *group;
    uint64_t hash;
    size_t id_len;
    char id[];
};

struct lease_table {
    struct lease_group **gbuckets;
    struct lease **lbuckets;
    size_t ngbuckets, nlbuckets;        /* powers of two, 0 before the first add */
    size_t ngroups;
    _Atomic size_t count;               /* leases */
    struct lease_group *groups;         /* list head */
};

/* An empty table (all zero is empty too). Allocates nothing. */
void lease_table_init(struct lease_table *t);
/* Frees every group and lease; the table is empty afterwards and may be used again. */
void lease_table_clear(struct lease_table *t);

/* Adds a lease. Copies subject and id (id_len 1..LEASE_ID_MAX). Returns 0, -EEXIST when
 * the table holds it already (nothing changed), or -ENOMEM (nothing changed). */
int lease_table_add(struct lease_table *t, const char *subject, size_t subject_len, int64_t rule_id,
                    int64_t ttl_ms, const char *id, size_t id_len);

/* Finds a lease. Returns it or NULL; it stays the table's. */
struct lease *lease_table_find(const struct lease_table *t, const char *subject, size_t subject_len,
                               int64_t rule_id, const char *id, size_t id_len);

/* Leases held for (subject, rule id): one group's count, 0 when none. */
size_t lease_table_group_count(const struct lease_table *t, const char *subject, size_t subject_len, int64_t rule_id);

/* Removes and frees a lease (and its group when that becomes empty). */
void lease_table_remove(struct lease_table *t, struct lease *l);

/* Leases held; safe to call from any thread (a relaxed read). */
size_t lease_table_count(const struct lease_table *t);
