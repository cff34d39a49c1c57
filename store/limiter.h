/* The limiter store interface: one atomic check of every rate rule that applies to a
 * request. Two implementations: memory (one process, shared by all worker threads) and
 * redis (a fleet of proxies; one async connection per worker thread, one script call per
 * check). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"

struct event_base;

#define LIMITER_MAX_RULES 16

enum limiter_status {
    LIMITER_DECIDED = 0,       /* verdicts are valid */
    LIMITER_UNAVAILABLE = 1,   /* the store could not be asked (down, breaker open, timeout) */
};

struct limiter_result {
    enum limiter_status status;
    bool allowed;                  /* every rule allowed; only then was the request recorded */
    int64_t now_ms;                /* the store clock the decision used (Unix ms) */
    size_t n;                      /* == the n passed to limiter_check */
    struct limit_verdict verdicts[LIMITER_MAX_RULES];
};

/* Called exactly once per limiter_check that returned 0. `result` is only valid during
 * the call. */
typedef void limiter_done_fn(void *arg, const struct limiter_result *result);

struct limiter;
struct memory_store;

struct redis_store_options {
    const char *url;            /* redis://[:password@]host:port/db or unix:///path */
    const char *key_prefix;     /* e.g. "tierproxy:" */
    int64_t command_timeout_ms; /* a reply slower than this counts as a store failure */
};

/* The state of the memory store, shared by every worker thread of one process.
 * Returns NULL on allocation failure. Free with memory_store_destroy. */
struct memory_store *memory_store_create(void);
void memory_store_destroy(struct memory_store *store);

/* A limiter over a shared memory store; done is called before limiter_check returns.
 * Does not take ownership of `store`, which must outlive the limiter. */
struct limiter *limiter_memory_create(struct memory_store *store);

/* A limiter over Redis for one event loop (one worker thread). Connects in the
 * background and reconnects with backoff; while it is down, checks answer
 * LIMITER_UNAVAILABLE at once. Returns NULL with a reason in err on a bad URL. */
struct limiter *limiter_redis_create(struct event_base *base, const struct redis_store_options *options,
                                     char *err, size_t errlen);

/* Frees the limiter. Pending redis checks get their done callback with
 * LIMITER_UNAVAILABLE before this returns. */
void limiter_destroy(struct limiter *limiter);

/* Checks every rule for `subject` in one atomic step and records the request in each
 * rule's state only when all of them allow it. now_ms < 0 uses the store's clock (the
 * Redis server's TIME for redis, CLOCK_REALTIME for memory); now_ms >= 0 is an explicit
 * clock for tests. n must be 1..LIMITER_MAX_RULES.
 * Returns 0 when done has been or will be called; -EINVAL (bad arguments) or -ENOMEM
 * otherwise, in which case done is never called. */
int limiter_check(struct limiter *limiter, const char *subject, size_t subject_len,
                  const struct limit_rule *rules, size_t n, int64_t now_ms,
                  limiter_done_fn *done, void *arg);

/* True while the store answers (for /health). */
bool limiter_available(const struct limiter *limiter);
