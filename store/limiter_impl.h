/* The interface every limiter backend fills behind store/limiter.h: memory, redis and
 * cluster are backends; the local fallback is a wrapper round one of them. Private to
 * store/ (and its unit tests).
 *
 * A backend fills every slot of struct limiter_ops: decide a request (check), read its
 * state (peek), give leases back (release, release_all), count them, and end. A store
 * that other processes share adds struct limiter_shared_ops: its connection, its health,
 * its hooks and the leases it can take over. A wrapper (limiter.inner set) fills
 * limiter_ops too; every shared call on it reaches its inner, and it keeps no denial cache
 * of its own (its parts keep theirs).
 *
 * Includes run one way: limiter.h <- limiter_impl.h <- limiter.c and each backend; and
 * limiter.h <- denial_cache.h <- limiter.c (struct denial_cache is only declared here). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/lease_table.h"
#include "store/limiter.h"

/* Longest subject limiter_check accepts (bytes). */
#define LIMITER_MAX_SUBJECT 512

struct limiter_ops {
    /* Arguments are already validated by limiter_check / limiter_check_leased; lease_id
     * (with its length) is non-NULL exactly when some rule is LIMIT_CONCURRENCY. */
    int (*check)(struct limiter *limiter, const char *subject, size_t subject_len,
                 const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                 size_t lease_id_len, limiter_done_fn *done, void *arg);
    /* limiter_peek, arguments validated. */
    int (*peek)(struct limiter *limiter, const char *subject, size_t subject_len, const struct limit_rule *rules,
                size_t n, int64_t now_ms, limiter_done_fn *done, void *arg);
    /* Gives back the leases of one request (lease_id under each concurrency rule of rules)
     * that this limiter holds; a second release finds none. Arguments validated. */
    void (*release)(struct limiter *limiter, const char *subject, size_t subject_len, const struct limit_rule *rules,
                    size_t n, const char *lease_id, size_t lease_id_len);
    /* Gives back every lease it holds (none are left when this returns) and calls done
     * exactly once. */
    void (*release_all)(struct limiter *limiter, void (*done)(void *arg), void *arg);
    size_t (*lease_count)(const struct limiter *limiter);
    void (*destroy)(struct limiter *limiter);
    /* NULL: a store of this process only (memory), or a wrapper (its inner's). */
    const struct limiter_shared_ops *shared;
};

/* What a store shared by the fleet adds; every slot filled but nodes. */
struct limiter_shared_ops {
    /* limiter_available: connected and ready for checks. */
    bool (*available)(const struct limiter *limiter);
    /* limiter_health and limiter_set_event_hook. */
    enum limiter_health (*health)(const struct limiter *limiter, char *reason, size_t reason_len);
    void (*set_event_hook)(struct limiter *limiter, limiter_event_fn *fn, void *arg);
    /* Calls done once every release sent so far is applied in the store (exactly once). */
    void (*sync)(struct limiter *limiter, void (*done)(void *arg), void *arg);
    /* limiter_lease_adopt and limiter_set_ready_hook. */
    int (*adopt)(struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id,
                 int64_t ttl_ms, const char *id, size_t id_len);
    void (*set_ready_hook)(struct limiter *limiter, void (*fn)(void *arg), void *arg);
    /* limiter_nodes (NULL: no nodes of its own). */
    size_t (*nodes)(const struct limiter *limiter, void (*fn)(void *arg, const struct limiter_node_info *node),
                    void *arg);
};

/* A backend's table, its functions named after it (memory_check, memory_peek, ...). */
#define LIMITER_OPS(name, lease_count_fn, shared_ops)                                                          \
    {                                                                                                          \
        .check = name##_check, .peek = name##_peek, .release = name##_release,                                 \
        .release_all = name##_release_all, .lease_count = (lease_count_fn), .destroy = name##_destroy,         \
        .shared = (shared_ops)                                                                                 \
    }

/* A shared store's table, named the same way. */
#define LIMITER_SHARED_OPS(name, adopt_fn, nodes_fn)                                                           \
    {                                                                                                          \
        .available = name##_available, .health = name##_health, .set_event_hook = name##_set_event_hook,       \
        .sync = name##_sync, .adopt = (adopt_fn), .set_ready_hook = name##_set_ready_hook, .nodes = (nodes_fn) \
    }

struct denial_cache;

struct limiter {
    const struct limiter_ops *ops;
    struct lease_table leases;     /* the concurrency leases this limiter holds */
    struct denial_cache *denials;  /* remembered rejections (store/denial_cache.h); made by
                                    * limiter.c when first needed, NULL until then */
    struct limiter *inner;         /* a wrapper's: the limiter it wraps; NULL for a backend */
};

/* For a backend whose leases are its lease table's: release through give_back, one
 * lease at a time, and their count. */
void limiter_release_held(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len,
                          void (*give_back)(struct limiter *limiter, struct lease *lease));
size_t limiter_leases_held(const struct limiter *limiter);

/* Calls done once every release sent so far is applied in the store behind limiter (at
 * once for a store of this process). */
void limiter_sync(struct limiter *limiter, void (*done)(void *arg), void *arg);

/* limiter_check_leased once its arguments are checked (concurrency: bit i set when
 * rules[i] is a concurrency rule; lease_id NULL exactly when it is 0): the denial cache,
 * then the store. Same returns. */
int limiter_check_checked(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                          size_t id_len, uint32_t concurrency, limiter_done_fn *done, void *arg);

/* Takes over a lease the caller holds without the store knowing of it (one taken locally
 * while the store was away): the limiter tracks it as its own from now on, so its next
 * renewal registers it in the store, and a release gives it back there. Returns 0,
 * -EEXIST when the limiter holds it already, -ENOMEM, or -ENOTSUP (a store that keeps no
 * leases of its own: memory). */
int limiter_lease_adopt(struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id,
                        int64_t ttl_ms, const char *id, size_t id_len);

/* fn(arg) is called on the limiter's thread each time its connection to the store is ready
 * again, before the leases it holds are renewed (and before any check is sent on it), so
 * that leases adopted from inside fn are registered first. No-op for a memory limiter. */
void limiter_set_ready_hook(struct limiter *limiter, void (*fn)(void *arg), void *arg);

/* The leases of (subject, rule id) the memory store behind a memory limiter holds for the
 * whole process (every limiter over that store, every thread). 0 for other limiters. */
size_t limiter_memory_held(const struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id);

/* Fills result as LIMITER_UNAVAILABLE for n rules. */
void limiter_result_unavailable(struct limiter_result *result, size_t n);

/* Number of subjects the memory store holds (for tests of eviction). Takes every lock. */
size_t memory_store_subjects(struct memory_store *store);
