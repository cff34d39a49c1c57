/* The embedded limiter store: one process, shared by every worker thread.
 *
 * Subjects are spread over STRIPES independent stripes by a hash of the subject; each stripe
 * has its own mutex and chained hash table, so threads working on different subjects rarely
 * meet. A check locks the one stripe of its subject and holds it while deciding and
 * recording every rule, which makes the check atomic.
 *
 * Memory stays bounded: every rule state knows from when it is equivalent to no state at
 * all (algo_dead_ms). One window after that it is dropped -- the extra window keeps a clock
 * that steps back by less than a window clamped, as Redis keeps a key for its TTL -- when
 * its chain is walked; each check also sweeps one more bucket of its stripe, so idle
 * subjects go away as traffic flows. On top of that the store holds at most max_subjects
 * subjects ([limits] memory_max_subjects): a check that adds one past it evicts the least
 * recently checked subject that holds nothing kept (forgetting its counts, as Redis's
 * allkeys-lru would): never a subject holding a concurrency lease (its slots would be
 * handed out again), nor a keyed one holding a quota's count of its current period; the
 * subjects memory_store_set_evict_first names (the proxy's anonymous clients) go before
 * any other (one IPv6 /64 holds more clients than any cap: a keyed user's month must not
 * start over because of them). Each stripe keeps two last-use
 * orders, those evicted first and the others; the eviction compares the stripes' oldest
 * evictable ones by a store-wide use counter, taking one stripe lock at a time, and moves
 * the kept entries it meets to their order's newest end, at most EVICT_WALK a stripe. With
 * several threads the store may hold a few more subjects than the cap for a moment (one per
 * concurrent insert) and the one evicted may be not quite the oldest.
 *
 * Concurrency rules (LIMIT_CONCURRENCY) are a count of leases per (subject, rule) in the
 * same slots, taken in the same locked step as the rate rules. The lease ids are tracked
 * per limiter (its lease table), so a release gives back only a lease that limiter holds
 * and a count cannot go negative. The TTL plays no part in one process: a slot that holds
 * leases is never evicted, and limiter_destroy gives back everything its limiter holds. */
#include "store/limiter_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store/memory/algorithms.h"
#include "store/clock.h"
#include "store/keyed_hash.h"

#define STRIPES 64            /* power of two */
#define INITIAL_BUCKETS 16    /* per stripe, power of two */
#define DEFAULT_MAX_SUBJECTS 1000000

struct mem_slot {
    int64_t id;
    int64_t evict_ms;         /* dead (algo_dead_ms) + one window */
    struct algo_state st;
};

struct mem_entry {
    struct mem_entry *next;
    struct mem_entry *older, *newer;   /* the stripe's last-use order */
    uint64_t used;                     /* store-wide use counter at the last check */
    bool first;                        /* evicted first (memory_store_set_evict_first) */
    uint64_t hash;
    int64_t evict_ms;         /* max over slots */
    uint32_t nslots, cap;
    struct mem_slot *slots;
    size_t subject_len;
    char subject[];
};

struct mem_stripe {
    pthread_mutex_t lock;
    struct mem_entry **buckets;
    size_t nbuckets;
    size_t count;
    size_t sweep;             /* next bucket the incremental sweep visits */
    /* last-use order, one list for the subjects evicted first and one for the others */
    struct mem_entry *oldest[2], *newest[2];
} __attribute__((aligned(64)));

struct memory_store {
    struct mem_stripe stripes[STRIPES];
    size_t max_subjects;
    char first_prefix[16];    /* subjects evicted first begin with it ("" : none) */
    size_t first_prefix_len;
    atomic_size_t subjects;   /* sum of the stripes' counts */
    atomic_uint_fast64_t uses;
};

struct memory_limiter {
    struct limiter base;
    struct memory_store *store;
};

static const struct limiter_ops memory_ops;

/* Subjects are client addresses and user ids: keyed, so no client can aim at a stripe or
 * a bucket. */
static uint64_t hash_subject(const char *s, size_t len)
{
    return hash_keyed(s, len);
}

static void lru_unlink(struct mem_stripe *st, struct mem_entry *e)
{
    if (e->older)
        e->older->newer = e->newer;
    else
        st->oldest[e->first] = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        st->newest[e->first] = e->older;
    e->older = e->newer = NULL;
}

/* Puts e at the newest end of its list. */
static void lru_to_newest(struct mem_stripe *st, struct mem_entry *e)
{
    if (st->newest[e->first] == e)
        return;
    if (e->older || e->newer || st->oldest[e->first] == e)
        lru_unlink(st, e);
    e->older = st->newest[e->first];
    if (e->older)
        e->older->newer = e;
    else
        st->oldest[e->first] = e;
    st->newest[e->first] = e;
}

/* Makes e the stripe's most recently used entry. */
static void lru_touch(struct memory_store *store, struct mem_stripe *st, struct mem_entry *e)
{
    lru_to_newest(st, e);
    e->used = atomic_fetch_add_explicit(&store->uses, 1, memory_order_relaxed);
}

static void entry_free(struct mem_entry *e)
{
    for (uint32_t i = 0; i < e->nslots; i++)
        algo_state_clear(&e->slots[i].st);
    free(e->slots);
    free(e);
}

/* Takes *pp (an entry of st) out of its chain and the use order and frees it. */
static void entry_drop(struct memory_store *store, struct mem_stripe *st, struct mem_entry **pp)
{
    struct mem_entry *e = *pp;
    *pp = e->next;
    lru_unlink(st, e);
    entry_free(e);
    st->count--;
    atomic_fetch_sub_explicit(&store->subjects, 1, memory_order_relaxed);
}

/* Drops the dead entries of one chain. */
static void sweep_chain(struct memory_store *store, struct mem_stripe *st, struct mem_entry **pp, int64_t now)
{
    while (*pp != NULL) {
        struct mem_entry *e = *pp;
        if (e->evict_ms <= now) {
            entry_drop(store, st, pp);
        } else {
            pp = &e->next;
        }
    }
}

static size_t bucket_of(const struct mem_stripe *st, uint64_t hash)
{
    return (size_t)(hash >> 8) & (st->nbuckets - 1);
}

/* Doubles the table when it got crowded (after a full sweep did not help). Best effort. */
static void maybe_grow(struct memory_store *store, struct mem_stripe *st, int64_t now)
{
    if (st->count <= st->nbuckets * 2)
        return;
    for (size_t i = 0; i < st->nbuckets; i++)
        sweep_chain(store, st, &st->buckets[i], now);
    if (st->count <= st->nbuckets)
        return;
    size_t nb = st->nbuckets * 2;
    struct mem_entry **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < st->nbuckets; i++) {
        struct mem_entry *e = st->buckets[i];
        while (e != NULL) {
            struct mem_entry *next = e->next;
            size_t j = (size_t)(e->hash >> 8) & (nb - 1);
            e->next = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = nb;
    st->sweep = 0;
}

struct memory_store *memory_store_create(void)
{
    struct memory_store *store = aligned_alloc(64, sizeof(*store));   /* stripes are cache-line aligned */
    if (store == NULL)
        return NULL;
    memset(store, 0, sizeof(*store));
    for (size_t i = 0; i < STRIPES; i++) {
        struct mem_stripe *st = &store->stripes[i];
        st->buckets = calloc(INITIAL_BUCKETS, sizeof(*st->buckets));
        if (st->buckets == NULL || pthread_mutex_init(&st->lock, NULL) != 0) {
            free(st->buckets);
            for (size_t j = 0; j < i; j++) {
                free(store->stripes[j].buckets);
                pthread_mutex_destroy(&store->stripes[j].lock);
            }
            free(store);
            return NULL;
        }
        st->nbuckets = INITIAL_BUCKETS;
    }
    store->max_subjects = DEFAULT_MAX_SUBJECTS;
    atomic_init(&store->subjects, 0);
    atomic_init(&store->uses, 0);
    return store;
}

void memory_store_set_max_subjects(struct memory_store *store, size_t max_subjects)
{
    store->max_subjects = max_subjects > 0 ? max_subjects : 1;
}

void memory_store_set_evict_first(struct memory_store *store, const char *prefix)
{
    size_t len = prefix != NULL ? strlen(prefix) : 0;
    if (len >= sizeof(store->first_prefix))
        len = 0;
    memcpy(store->first_prefix, prefix != NULL ? prefix : "", len);
    store->first_prefix_len = len;
}


void memory_store_destroy(struct memory_store *store)
{
    if (store == NULL)
        return;
    for (size_t i = 0; i < STRIPES; i++) {
        struct mem_stripe *st = &store->stripes[i];
        for (size_t b = 0; b < st->nbuckets; b++) {
            struct mem_entry *e = st->buckets[b];
            while (e != NULL) {
                struct mem_entry *next = e->next;
                entry_free(e);
                e = next;
            }
        }
        free(st->buckets);
        pthread_mutex_destroy(&st->lock);
    }
    free(store);
}

size_t memory_store_subjects(struct memory_store *store)
{
    size_t total = 0;
    for (size_t i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&store->stripes[i].lock);
        total += store->stripes[i].count;
        pthread_mutex_unlock(&store->stripes[i].lock);
    }
    return total;
}

static struct mem_entry *find_entry(struct mem_stripe *st, size_t b, uint64_t hash, const char *subject,
                                    size_t subject_len)
{
    struct mem_entry *e = st->buckets[b];
    while (e != NULL && !(e->hash == hash && e->subject_len == subject_len &&
                          memcmp(e->subject, subject, subject_len) == 0))
        e = e->next;
    return e;
}

/* How long a quota's state outlives its period, as its Redis key does (check.lua's
 * QUOTA_GRACE): a clock that steps back over the period's end still finds it. */
#define QUOTA_GRACE_MS 60000

/* When a slot may be dropped: one window after its state is dead (a quota: a minute after
 * its period ends); never while it holds leases. */
static int64_t slot_evict_ms(const struct mem_slot *slot, const struct limit_rule *rule)
{
    int64_t dead = algo_dead_ms(&slot->st, rule);
    if (dead == INT64_MIN || dead == INT64_MAX)
        return dead;
    return dead + (rule->kind == LIMIT_QUOTA ? QUOTA_GRACE_MS : rule->window_ms);
}

static struct mem_slot *find_slot(struct mem_entry *e, int64_t id)
{
    if (e == NULL)
        return NULL;
    for (uint32_t i = 0; i < e->nslots; i++)
        if (e->slots[i].id == id)
            return &e->slots[i];
    return NULL;
}

size_t limiter_memory_held(const struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id)
{
    if (limiter->ops != &memory_ops)
        return 0;
    struct memory_store *store = ((const struct memory_limiter *)limiter)->store;
    uint64_t hash = hash_subject(subject, subject_len);
    struct mem_stripe *st = &store->stripes[hash & (STRIPES - 1)];
    pthread_mutex_lock(&st->lock);
    struct mem_slot *slot = find_slot(find_entry(st, bucket_of(st, hash), hash, subject, subject_len), rule_id);
    int64_t held = slot != NULL && slot->st.kind == LIMIT_CONCURRENCY ? slot->st.u.cc.held : 0;
    pthread_mutex_unlock(&st->lock);
    return held > 0 ? (size_t)held : 0;
}

/* Drops the entry's long-dead rule states (they are equivalent to none). */
static void prune_slots(struct mem_entry *e, int64_t now)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < e->nslots; i++) {
        if (e->slots[i].evict_ms <= now)
            algo_state_clear(&e->slots[i].st);
        else
            e->slots[j++] = e->slots[i];
    }
    e->nslots = j;
}

/* Makes sure the subject has an entry with a slot for every rule. Returns the entry or
 * NULL (-ENOMEM); on failure nothing that matters changed (at most an empty entry/slot was
 * added, which is equivalent to none). */
static struct mem_entry *ensure_slots(struct memory_store *store, struct mem_stripe *st, struct mem_entry *e,
                                      uint64_t hash,
                                      const char *subject, size_t subject_len,
                                      const struct limit_rule *rules, size_t n)
{
    if (e == NULL) {
        e = calloc(1, sizeof(*e) + subject_len);
        if (e == NULL)
            return NULL;
        e->hash = hash;
        e->evict_ms = INT64_MIN;
        e->first = store->first_prefix_len > 0 && subject_len >= store->first_prefix_len &&
                   memcmp(subject, store->first_prefix, store->first_prefix_len) == 0;
        e->subject_len = subject_len;
        memcpy(e->subject, subject, subject_len);
        size_t b = bucket_of(st, hash);
        e->next = st->buckets[b];
        st->buckets[b] = e;
        st->count++;
        atomic_fetch_add_explicit(&store->subjects, 1, memory_order_relaxed);
    }
    for (size_t i = 0; i < n; i++) {
        if (find_slot(e, rules[i].id) != NULL)
            continue;
        if (e->nslots == e->cap) {
            uint32_t cap = e->cap ? e->cap * 2 : 4;
            struct mem_slot *s = realloc(e->slots, cap * sizeof(*s));
            if (s == NULL)
                return NULL;
            e->slots = s;
            e->cap = cap;
        }
        struct mem_slot *slot = &e->slots[e->nslots++];
        slot->id = rules[i].id;
        slot->evict_ms = INT64_MIN;
        algo_state_init(&slot->st);
    }
    return e;
}

/* A sliding log recorded under a shorter window than its rule's now (tierctl changed the
 * limit in place) is kept for the new window, though this check recorded nothing: its
 * entries still count, and would otherwise be dropped on the old window's time. Redis does
 * the same with the key's TTL (check.lua). */
static void keep_grown_log(struct mem_entry *e, struct mem_slot *slot, const struct limit_rule *rule)
{
    if (rule->kind != LIMIT_SLIDING_LOG || slot->st.kind != LIMIT_SLIDING_LOG ||
        slot->st.window_ms >= rule->window_ms)
        return;
    int64_t evict = slot_evict_ms(slot, rule);
    if (evict > slot->evict_ms)
        slot->evict_ms = evict;
    if (evict > e->evict_ms)
        e->evict_ms = evict;
}

/* Whether forgetting e would hand out what it holds: a lease (its slot again), or, for a
 * subject not evicted first, a quota's count in its period (a keyed user's month must not
 * start over because many anonymous clients came). */
static bool entry_kept(const struct mem_entry *e, int64_t now)
{
    for (uint32_t i = 0; i < e->nslots; i++) {
        const struct mem_slot *slot = &e->slots[i];
        if (slot->st.kind == LIMIT_CONCURRENCY && slot->st.u.cc.held > 0)
            return true;
        if (!e->first && slot->st.kind == LIMIT_QUOTA && slot->evict_ms > now)
            return true;
    }
    return false;
}

/* Entries kept that an eviction walks past before giving up on a list: each is moved to
 * the list's newest end, so the next walk meets others (a store full of quota holders
 * costs each insert a few steps, not a walk of every subject). */
#define EVICT_WALK 8

/* The least recently used entry of one list of the stripe that may be forgotten, or NULL. */
static struct mem_entry *oldest_evictable(struct mem_stripe *st, int list, int64_t now)
{
    for (int steps = 0; steps < EVICT_WALK; steps++) {
        struct mem_entry *e = st->oldest[list];
        if (e == NULL || !entry_kept(e, now))
            return e;
        if (e == st->newest[list])
            return NULL;
        lru_to_newest(st, e);
    }
    return NULL;
}

/* The stripe whose evictable entry of `list` was used least recently, or STRIPES. */
static size_t pick_stripe(struct memory_store *store, int list, int64_t now)
{
    size_t pick = STRIPES;
    uint64_t pick_used = UINT64_MAX;
    for (size_t i = 0; i < STRIPES; i++) {
        struct mem_stripe *st = &store->stripes[i];
        pthread_mutex_lock(&st->lock);
        const struct mem_entry *e = oldest_evictable(st, list, now);
        if (e != NULL && e->used < pick_used) {
            pick = i;
            pick_used = e->used;
        }
        pthread_mutex_unlock(&st->lock);
    }
    return pick;
}

/* While the store holds more than max_subjects subjects, forgets the least recently used
 * one that holds nothing kept (entry_kept), those evicted first before any other: the
 * oldest of the stripes' oldest. One stripe lock at a time, so it runs after the check let
 * go of its own. Stops when only subjects that are kept are left. */
static void evict_over_cap(struct memory_store *store, int64_t now)
{
    while (atomic_load_explicit(&store->subjects, memory_order_relaxed) > store->max_subjects) {
        int list = 1;
        size_t pick = pick_stripe(store, list, now);
        if (pick == STRIPES)
            pick = pick_stripe(store, list = 0, now);
        if (pick == STRIPES)
            return;   /* every subject is kept: leases go when released, quotas with their period */
        struct mem_stripe *st = &store->stripes[pick];
        pthread_mutex_lock(&st->lock);
        struct mem_entry *e = oldest_evictable(st, list, now);
        if (e != NULL && atomic_load_explicit(&store->subjects, memory_order_relaxed) > store->max_subjects) {
            struct mem_entry **pp = &st->buckets[bucket_of(st, e->hash)];
            while (*pp != e)
                pp = &(*pp)->next;
            entry_drop(store, st, pp);
        }
        pthread_mutex_unlock(&st->lock);
    }
}

/* Removes the leases a check added to the table before it was decided. */
static void untrack(struct limiter *limiter, const char *subject, size_t subject_len,
                    const struct limit_rule *rules, size_t n, const char *lease_id, size_t id_len)
{
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind != LIMIT_CONCURRENCY)
            continue;
        struct lease *l = lease_table_find(&limiter->leases, subject, subject_len, rules[i].id, lease_id, id_len);
        if (l != NULL)
            lease_table_remove(&limiter->leases, l);
    }
}

/* Where a check (or a peek) of one subject starts: its clock, its stripe, and a result
 * of n verdicts to fill. */
struct mem_check {
    int64_t now;
    uint64_t hash;
    struct mem_stripe *st;
    struct limiter_result result;
};

static void mem_check_begin(struct mem_check *c, struct memory_limiter *ml, const char *subject, size_t subject_len,
                            int64_t now_ms, size_t n)
{
    c->now = now_ms >= 0 ? now_ms : store_realtime_ms();
    c->hash = hash_subject(subject, subject_len);
    c->st = &ml->store->stripes[c->hash & (STRIPES - 1)];
    memset(&c->result, 0, sizeof(c->result));
    c->result.status = LIMITER_DECIDED;
    c->result.now_ms = c->now;
    c->result.n = n;
}

/* A peek: every rule decided and answered as memory_check would, nothing recorded. */
static int memory_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                       const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg)
{
    struct mem_check c;
    mem_check_begin(&c, (struct memory_limiter *)limiter, subject, subject_len, now_ms, n);
    struct algo_state empty;
    algo_state_init(&empty);
    bool all = true;
    pthread_mutex_lock(&c.st->lock);
    struct mem_entry *e = find_entry(c.st, bucket_of(c.st, c.hash), c.hash, subject, subject_len);
    for (size_t i = 0; i < n; i++) {
        struct mem_slot *slot = find_slot(e, rules[i].id);
        /* a slot past its eviction time is equivalent to none (it waits for a sweep) */
        const struct algo_state *s = slot != NULL && slot->evict_ms > c.now ? &slot->st : &empty;
        struct algo_eval ev;
        algo_decide(s, &rules[i], c.now, &ev);
        algo_verdict(s, &rules[i], &ev, &c.result.verdicts[i]);
        all = all && ev.allowed;
    }
    pthread_mutex_unlock(&c.st->lock);
    c.result.allowed = all;
    done(arg, &c.result);
    return 0;
}

/* Adds the check's leases to the table before the store records anything, so that nothing
 * can fail after it did; on failure the ones added are taken out again. */
static int track_leases(struct limiter *limiter, const char *subject, size_t subject_len,
                        const struct limit_rule *rules, size_t n, const char *lease_id, size_t id_len)
{
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind != LIMIT_CONCURRENCY)
            continue;
        int r = lease_table_add(&limiter->leases, subject, subject_len, rules[i].id, rules[i].window_ms, lease_id,
                                id_len);
        if (r != 0) {
            untrack(limiter, subject, subject_len, rules, i, lease_id, id_len);
            return r == -ENOMEM ? -ENOMEM : -EINVAL;
        }
    }
    return 0;
}

/* Under the stripe lock: an incremental sweep of one other bucket, then of the subject's
 * own chain; returns the subject's entry (NULL when none), pruned and touched, since a
 * check is a use, allowed or not. */
static struct mem_entry *sweep_and_find(struct memory_store *store, struct mem_stripe *st, uint64_t hash,
                                        const char *subject, size_t subject_len, int64_t now)
{
    sweep_chain(store, st, &st->buckets[st->sweep], now);
    st->sweep = (st->sweep + 1) & (st->nbuckets - 1);
    size_t b = bucket_of(st, hash);
    sweep_chain(store, st, &st->buckets[b], now);
    struct mem_entry *e = find_entry(st, b, hash, subject, subject_len);
    if (e != NULL) {
        prune_slots(e, now);
        lru_touch(store, st, e);
    }
    return e;
}

/* Decides every rule into ev; whether all of them allow. */
static bool decide_all(struct mem_entry *e, const struct limit_rule *rules, size_t n, int64_t now,
                       struct algo_eval *ev)
{
    struct algo_state empty;
    algo_state_init(&empty);
    bool all = true;
    for (size_t i = 0; i < n; i++) {
        struct mem_slot *slot = find_slot(e, rules[i].id);
        algo_decide(slot ? &slot->st : &empty, &rules[i], now, &ev[i]);
        all = all && ev[i].allowed;
    }
    return all;
}

/* Gives the subject an entry with a slot per rule and reserves what each rule takes, so
 * the commit cannot fail; NULL when out of memory. */
static struct mem_entry *reserve_all(struct memory_store *store, struct mem_stripe *st, struct mem_entry *e,
                                     uint64_t hash, const char *subject, size_t subject_len,
                                     const struct limit_rule *rules, size_t n, struct algo_eval *ev, int64_t now)
{
    bool fresh = e == NULL;
    if (fresh)
        maybe_grow(store, st, now);
    e = ensure_slots(store, st, e, hash, subject, subject_len, rules, n);
    if (e == NULL)
        return NULL;
    if (fresh)
        lru_touch(store, st, e);
    for (size_t i = 0; i < n; i++)
        if (algo_reserve(&find_slot(e, rules[i].id)->st, &rules[i], &ev[i]) != 0)
            return NULL;
    return e;
}

/* Records an allowed check in every rule's slot and answers it; the entry is evicted
 * when the last of its slots is. */
static void commit_all(struct mem_entry *e, const struct limit_rule *rules, size_t n, struct algo_eval *ev,
                       struct limit_verdict *verdicts)
{
    int64_t evict = INT64_MIN;
    for (size_t i = 0; i < e->nslots; i++)
        if (e->slots[i].evict_ms > evict)
            evict = e->slots[i].evict_ms;
    for (size_t i = 0; i < n; i++) {
        struct mem_slot *slot = find_slot(e, rules[i].id);
        algo_commit(&slot->st, &rules[i], &ev[i]);
        algo_verdict(&slot->st, &rules[i], &ev[i], &verdicts[i]);
        slot->evict_ms = slot_evict_ms(slot, &rules[i]);   /* never empty after a commit */
        if (slot->evict_ms > evict)
            evict = slot->evict_ms;
    }
    e->evict_ms = evict;
}

/* A refused check records nothing: each rule is answered from the state as it is, and a
 * log that a rule now keeps for longer is kept that long (keep_grown_log). */
static void answer_refused(struct mem_entry *e, const struct limit_rule *rules, size_t n,
                           const struct algo_eval *ev, struct limit_verdict *verdicts)
{
    struct algo_state empty;
    algo_state_init(&empty);
    for (size_t i = 0; i < n; i++) {
        struct mem_slot *slot = find_slot(e, rules[i].id);
        algo_verdict(slot ? &slot->st : &empty, &rules[i], &ev[i], &verdicts[i]);
        if (slot != NULL)
            keep_grown_log(e, slot, &rules[i]);
    }
}

static int memory_check(struct limiter *limiter, const char *subject, size_t subject_len,
                        const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                        size_t lease_id_len, limiter_done_fn *done, void *arg)
{
    struct memory_limiter *ml = (struct memory_limiter *)limiter;
    if (lease_id != NULL) {
        int r = track_leases(limiter, subject, subject_len, rules, n, lease_id, lease_id_len);
        if (r != 0)
            return r;
    }
    struct mem_check c;
    mem_check_begin(&c, ml, subject, subject_len, now_ms, n);
    struct algo_eval ev[LIMITER_MAX_RULES];
    pthread_mutex_lock(&c.st->lock);
    struct mem_entry *e = sweep_and_find(ml->store, c.st, c.hash, subject, subject_len, c.now);
    bool all = decide_all(e, rules, n, c.now, ev);
    if (all) {
        e = reserve_all(ml->store, c.st, e, c.hash, subject, subject_len, rules, n, ev, c.now);
        if (e == NULL) {
            pthread_mutex_unlock(&c.st->lock);
            if (lease_id != NULL)
                untrack(limiter, subject, subject_len, rules, n, lease_id, lease_id_len);
            return -ENOMEM;
        }
        commit_all(e, rules, n, ev, c.result.verdicts);
    } else {
        answer_refused(e, rules, n, ev, c.result.verdicts);
    }
    pthread_mutex_unlock(&c.st->lock);
    if (!all && lease_id != NULL)
        untrack(limiter, subject, subject_len, rules, n, lease_id, lease_id_len);
    evict_over_cap(ml->store, c.now);
    c.result.allowed = all;
    done(arg, &c.result);
    return 0;
}

/* Gives back `count` leases of one (subject, rule) to the shared store. */
static void give_back(struct memory_limiter *ml, const struct lease_group *g, size_t count)
{
    uint64_t hash = hash_subject(g->subject, g->subject_len);
    struct mem_stripe *st = &ml->store->stripes[hash & (STRIPES - 1)];
    pthread_mutex_lock(&st->lock);
    struct mem_entry *e = find_entry(st, bucket_of(st, hash), hash, g->subject, g->subject_len);
    struct mem_slot *slot = find_slot(e, g->rule_id);
    if (slot != NULL) {
        while (count-- > 0 && algo_release(&slot->st))
            ;
        if (slot->st.kind == LIMIT_CONCURRENCY && slot->st.u.cc.held == 0)
            slot->evict_ms = INT64_MIN;   /* equivalent to no state: the next walk drops it */
        int64_t evict = INT64_MIN;
        for (uint32_t i = 0; i < e->nslots; i++)
            if (e->slots[i].evict_ms > evict)
                evict = e->slots[i].evict_ms;
        e->evict_ms = evict;
    }
    pthread_mutex_unlock(&st->lock);
}

static void memory_give_back(struct limiter *limiter, struct lease *lease)
{
    give_back((struct memory_limiter *)limiter, lease->group, 1);
    lease_table_remove(&limiter->leases, lease);
}

static void give_back_all(struct memory_limiter *ml)
{
    for (struct lease_group *g = ml->base.leases.groups; g != NULL; g = g->next)
        give_back(ml, g, g->nleases);
    lease_table_clear(&ml->base.leases);
}

static void memory_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    give_back_all((struct memory_limiter *)limiter);
    done(arg);
}

/* The process keeps running without this limiter (one worker of several, or a reload):
 * its leases are given back rather than held forever. */
static void memory_destroy(struct limiter *limiter)
{
    give_back_all((struct memory_limiter *)limiter);
    free(limiter);
}

static void memory_release(struct limiter *limiter, const char *subject, size_t subject_len,
                           const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len)
{
    limiter_release_held(limiter, subject, subject_len, rules, n, lease_id, lease_id_len, memory_give_back);
}

static const struct limiter_ops memory_ops = LIMITER_OPS(memory, limiter_leases_held, NULL);

struct limiter *limiter_memory_create(struct memory_store *store)
{
    if (store == NULL)
        return NULL;
    struct memory_limiter *ml = calloc(1, sizeof(*ml));
    if (ml == NULL)
        return NULL;
    ml->base.ops = &memory_ops;
    lease_table_init(&ml->base.leases);
    ml->store = store;
    return &ml->base;
}
