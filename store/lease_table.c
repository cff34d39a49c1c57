/* The leases one limiter holds (see lease_table.h). */
#include "store/lease_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/hash.h"
#include "store/keyed_hash.h"

#define INITIAL_BUCKETS 16

/* The subject is a client's address or a user id: keyed; the rule id is the catalog's. */
static uint64_t group_hash(const char *subject, size_t subject_len, int64_t rule_id)
{
    return hash_mix(hash_fnv1a(hash_keyed(subject, subject_len), &rule_id, sizeof(rule_id)));
}

static uint64_t lease_hash(uint64_t ghash, const char *id, size_t id_len)
{
    return hash_mix(hash_fnv1a(ghash, id, id_len));
}

void lease_table_init(struct lease_table *t)
{
    memset(t, 0, sizeof(*t));
}

void lease_table_clear(struct lease_table *t)
{
    struct lease_group *g = t->groups;
    while (g != NULL) {
        struct lease_group *gnext = g->next;
        struct lease *l = g->first;
        while (l != NULL) {
            struct lease *lnext = l->next;
            free(l);
            l = lnext;
        }
        free(g);
        g = gnext;
    }
    free(t->gbuckets);
    free(t->lbuckets);
    lease_table_init(t);
}

size_t lease_table_count(const struct lease_table *t)
{
    return atomic_load_explicit(&t->count, memory_order_relaxed);
}

/* Doubles a bucket array when its entries outnumber its buckets. Best effort: on failure
 * the chains just get longer. */
static void grow_groups(struct lease_table *t)
{
    if (t->ngroups <= t->ngbuckets)
        return;
    size_t nb = t->ngbuckets * 2;
    struct lease_group **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (struct lease_group *g = t->groups; g != NULL; g = g->next) {
        size_t i = (size_t)g->hash & (nb - 1);
        g->hnext = b[i];
        b[i] = g;
    }
    free(t->gbuckets);
    t->gbuckets = b;
    t->ngbuckets = nb;
}

static void grow_leases(struct lease_table *t)
{
    size_t count = lease_table_count(t);
    if (count <= t->nlbuckets)
        return;
    size_t nb = t->nlbuckets * 2;
    struct lease **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (struct lease_group *g = t->groups; g != NULL; g = g->next) {
        for (struct lease *l = g->first; l != NULL; l = l->next) {
            size_t i = (size_t)l->hash & (nb - 1);
            l->hnext = b[i];
            b[i] = l;
        }
    }
    free(t->lbuckets);
    t->lbuckets = b;
    t->nlbuckets = nb;
}

static struct lease_group *find_group(const struct lease_table *t, uint64_t h, const char *subject,
                                      size_t subject_len, int64_t rule_id)
{
    if (t->ngbuckets == 0)
        return NULL;
    for (struct lease_group *g = t->gbuckets[(size_t)h & (t->ngbuckets - 1)]; g != NULL; g = g->hnext)
        if (g->hash == h && g->rule_id == rule_id && g->subject_len == subject_len &&
            memcmp(g->subject, subject, subject_len) == 0)
            return g;
    return NULL;
}

static struct lease *find_in(const struct lease_table *t, const struct lease_group *g, uint64_t h, const char *id,
                             size_t id_len)
{
    for (struct lease *l = t->lbuckets[(size_t)h & (t->nlbuckets - 1)]; l != NULL; l = l->hnext)
        if (l->hash == h && l->group == g && l->id_len == id_len && memcmp(l->id, id, id_len) == 0)
            return l;
    return NULL;
}

struct lease *lease_table_find(const struct lease_table *t, const char *subject, size_t subject_len,
                               int64_t rule_id, const char *id, size_t id_len)
{
    uint64_t gh = group_hash(subject, subject_len, rule_id);
    struct lease_group *g = find_group(t, gh, subject, subject_len, rule_id);
    if (g == NULL)
        return NULL;
    return find_in(t, g, lease_hash(gh, id, id_len), id, id_len);
}

size_t lease_table_group_count(const struct lease_table *t, const char *subject, size_t subject_len, int64_t rule_id)
{
    const struct lease_group *g = find_group(t, group_hash(subject, subject_len, rule_id), subject, subject_len, rule_id);
    return g != NULL ? g->nleases : 0;
}

static int ensure_buckets(struct lease_table *t)
{
    if (t->ngbuckets == 0) {
        t->gbuckets = calloc(INITIAL_BUCKETS, sizeof(*t->gbuckets));
        if (t->gbuckets == NULL)
            return -ENOMEM;
        t->ngbuckets = INITIAL_BUCKETS;
    }
    if (t->nlbuckets == 0) {
        t->lbuckets = calloc(INITIAL_BUCKETS, sizeof(*t->lbuckets));
        if (t->lbuckets == NULL)
            return -ENOMEM;
        t->nlbuckets = INITIAL_BUCKETS;
    }
    return 0;
}

int lease_table_add(struct lease_table *t, const char *subject, size_t subject_len, int64_t rule_id,
                    int64_t ttl_ms, const char *id, size_t id_len)
{
    if (id_len == 0 || id_len > LEASE_ID_MAX)
        return -EINVAL;
    int r = ensure_buckets(t);
    if (r != 0)
        return r;
    uint64_t gh = group_hash(subject, subject_len, rule_id);
    uint64_t lh = lease_hash(gh, id, id_len);
    struct lease_group *g = find_group(t, gh, subject, subject_len, rule_id);
    if (g != NULL && find_in(t, g, lh, id, id_len) != NULL)
        return -EEXIST;

    struct lease *l = malloc(sizeof(*l) + id_len);
    if (l == NULL)
        return -ENOMEM;
    if (g == NULL) {
        g = calloc(1, sizeof(*g) + subject_len);
        if (g == NULL) {
            free(l);
            return -ENOMEM;
        }
        g->hash = gh;
        g->rule_id = rule_id;
        g->subject_len = subject_len;
        memcpy(g->subject, subject, subject_len);
        size_t b = (size_t)gh & (t->ngbuckets - 1);
        g->hnext = t->gbuckets[b];
        t->gbuckets[b] = g;
        g->next = t->groups;
        if (t->groups != NULL)
            t->groups->prev = g;
        t->groups = g;
        t->ngroups++;
        grow_groups(t);
    }
    g->ttl_ms = ttl_ms;

    l->group = g;
    l->hash = lh;
    l->id_len = id_len;
    memcpy(l->id, id, id_len);
    size_t b = (size_t)lh & (t->nlbuckets - 1);
    l->hnext = t->lbuckets[b];
    t->lbuckets[b] = l;
    l->prev = NULL;
    l->next = g->first;
    if (g->first != NULL)
        g->first->prev = l;
    g->first = l;
    g->nleases++;
    atomic_store_explicit(&t->count, lease_table_count(t) + 1, memory_order_relaxed);
    grow_leases(t);
    return 0;
}

void lease_table_remove(struct lease_table *t, struct lease *l)
{
    struct lease **pp = &t->lbuckets[(size_t)l->hash & (t->nlbuckets - 1)];
    while (*pp != l)
        pp = &(*pp)->hnext;
    *pp = l->hnext;
    struct lease_group *g = l->group;
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        g->first = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    free(l);
    atomic_store_explicit(&t->count, lease_table_count(t) - 1, memory_order_relaxed);

    if (--g->nleases > 0)
        return;
    struct lease_group **gp = &t->gbuckets[(size_t)g->hash & (t->ngbuckets - 1)];
    while (*gp != g)
        gp = &(*gp)->hnext;
    *gp = g->hnext;
    if (g->prev != NULL)
        g->prev->next = g->next;
    else
        t->groups = g->next;
    if (g->next != NULL)
        g->next->prev = g->prev;
    t->ngroups--;
    free(g);
}
