/* The limiter store interface: one atomic check of every rule (rate, quota and
 * concurrency) that applies to a request, each counting the request's cost (limit.h).
 * Backends: memory (one process, shared by all worker threads: store/memory/), redis (a
 * fleet of proxies; one async connection per worker thread, one script call per check:
 * store/redis/) and Redis Cluster (store/cluster/); the local fallback (store/fallback/)
 * wraps a shared one. In front of each, the limiter's denial cache answers a repeat of a
 * lasting rejection without the store (store/denial_cache.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"
#include "store/limiter_result.h"

struct event_base;
struct limiter;
struct memory_store;

struct redis_store_options {
    const char *url;            /* redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path */
    const char *tls_ca_file;    /* rediss://: the server's certificate is verified against these CAs
                                   (a PEM file; NULL or "": the system's) */
    const char *key_prefix;     /* e.g. "tierproxy:" */
    int64_t command_timeout_ms; /* a reply slower than this counts as a store failure */
    int64_t lease_ttl_ms;       /* leases are renewed every lease_ttl_ms / 3 (0: 30000) */
};

/* The state of the memory store, shared by every worker thread of one process.
 * Returns NULL on allocation failure. Free with memory_store_destroy. */
struct memory_store *memory_store_create(void);
void memory_store_destroy(struct memory_store *store);

/* The most subjects the store holds ([limits] memory_max_subjects; 1000000 until set, 0
 * counts as 1). Past it, a check that adds a subject evicts the least recently checked
 * subject that holds no concurrency lease (its counts are forgotten), those of
 * memory_store_set_evict_first before any other. Set it before the store is shared. */
void memory_store_set_max_subjects(struct memory_store *store, size_t max_subjects);

/* Subjects that begin with `prefix` (at most 15 bytes; NULL or "": none) are evicted before
 * any other, and only they lose a quota's count of the current period to eviction: the
 * proxy's anonymous clients ("ip:..."), of which one /64 holds more than any cap, never
 * make a keyed user's month start over. Set it before the store is shared. */
void memory_store_set_evict_first(struct memory_store *store, const char *prefix);

/* A limiter over a shared memory store; done is called before limiter_check returns.
 * Does not take ownership of `store`, which must outlive the limiter. */
struct limiter *limiter_memory_create(struct memory_store *store);

/* Checks a Redis URL the way limiter_redis_create reads it, without connecting (for
 * `tierproxy --check`). Returns 0, or -EINVAL with a reason in err that never holds the
 * password. */
int limiter_redis_url_check(const char *url, char *err, size_t errlen);

/* Checks the seed list of a Redis Cluster ([limits] redis with redis_mode = cluster:
 * comma-separated redis:// URLs, database 0) without connecting. Returns 0, or -EINVAL
 * with a reason naming the bad seed in err, never a password. */
int limiter_redis_cluster_seeds_check(const char *seeds, char *err, size_t errlen);

/* A limiter over Redis for one event loop (one worker thread). Connects in the
 * background and reconnects with backoff; while it is down, checks answer
 * LIMITER_UNAVAILABLE at once. Returns NULL with a reason in err on a bad URL. */
struct limiter *limiter_redis_create(struct event_base *base, const struct redis_store_options *options,
                                     char *err, size_t errlen);

/* A limiter over a Redis Cluster for one event loop (one worker thread): options->url holds
 * the seed nodes, comma-separated redis:// URLs (as limiter_redis_cluster_seeds_check
 * reads them). Learns the slot map from the seeds (CLUSTER SLOTS, in the background) and
 * keeps one connection per master, with the first seed's credentials; each check goes to
 * the master of its subject's slot, following MOVED and ASK. A master that is down answers
 * LIMITER_UNAVAILABLE at once for its slots only. Returns NULL with a reason in err (never
 * a password) on a bad seed list or a key prefix holding '{'. */
struct limiter *limiter_redis_cluster_create(struct event_base *base, const struct redis_store_options *options,
                                             char *err, size_t errlen);

/* A key prefix cluster mode can use: one without '{' (the hash tag of every key must be
 * its subject). Returns 0, or -EINVAL with the reason in err. */
int limiter_redis_cluster_prefix_check(const char *key_prefix, char *err, size_t errlen);

/* Frees the limiter. Pending redis checks get their done callback with
 * LIMITER_UNAVAILABLE before this returns (and a pending limiter_release_all its done).
 * Leases still held: the memory store gives them back; the redis store sends nothing, so
 * they stop counting at their TTL as a crashed proxy's would (call limiter_release_all
 * first on a clean shutdown). */
void limiter_destroy(struct limiter *limiter);

/* Checks every rule for `subject` in one atomic step and records the request in each
 * rule's state only when all of them allow it. now_ms < 0 uses the store's clock (the
 * Redis server's TIME for redis, CLOCK_REALTIME for memory); now_ms >= 0 is an explicit
 * clock for tests. n must be 1..LIMITER_MAX_RULES; every rule must pass
 * limit_rule_validate (a cost a rule could never admit is -EINVAL). On the store's clock, a
 * repeat check (same subject, same rules and costs) while an earlier rejection by rate
 * rules or quotas still holds is answered from the denial cache before this returns
 * (result->remembered).
 * Returns 0 when done has been or will be called; -EINVAL (bad arguments) or -ENOMEM
 * otherwise, in which case done is never called. */
int limiter_check(struct limiter *limiter, const char *subject, size_t subject_len,
                  const struct limit_rule *rules, size_t n, int64_t now_ms,
                  limiter_done_fn *done, void *arg);

/* What limiter_check would answer now for `subject` under `rules` (costs included), with
 * nothing recorded anywhere (for `tierctl usage`): in the store's one call, never from
 * the denial cache, no lease taken (concurrency rules need no lease id). Per rule:
 * allowed = a request of the rule's cost would be, limit, remaining (units admissible now;
 * 0 when the rule would reject), reset_ms as limit.h says; used = limit - remaining when
 * allowed (a quota: the units used this period; a concurrency rule: the leases held).
 * result->allowed: every rule would allow. Same arguments, clock and returns as
 * limiter_check (done before this returns for memory; from the loop for redis). */
int limiter_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                 const struct limit_rule *rules, size_t n, int64_t now_ms,
                 limiter_done_fn *done, void *arg);

/* limiter_check, for checks that may hold concurrency slots. lease_id names this
 * request's leases (unique per process and request, e.g. "<instance>:<worker>:<seq>",
 * at most 64 bytes); it is required when any rule is LIMIT_CONCURRENCY. When the check is
 * allowed, every concurrency rule holds a lease named lease_id, counted fleet-wide (redis)
 * or process-wide (memory), until limiter_release. The limiter keeps track of the leases
 * it holds and renews them all in one batched store call per interval, so a process that
 * dies stops counting within the lease TTL. Same returns as limiter_check.
 * A concurrency rule's verdict: limit N, remaining = N - leases held after this check
 * (0 when it rejects), reset_ms 1000 when it rejects, else 0. lease_id is -EINVAL when
 * missing, empty, over 64 bytes, or already held by this limiter for one of the rules;
 * ignored when no rule is a concurrency rule. limiter_check with a concurrency rule is
 * -EINVAL. Redis: the leases are tracked when the allowed reply arrives; a check that ends
 * LIMITER_UNAVAILABLE holds nothing (should Redis have recorded it, a ZREM of it is sent
 * first thing when Redis is back; failing that it ends at its TTL). */
int limiter_check_leased(struct limiter *limiter, const char *subject, size_t subject_len,
                         const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                         limiter_done_fn *done, void *arg);

/* Gives back the leases an allowed limiter_check_leased took (rules and lease_id as
 * passed to it; rules that are not concurrency rules are ignored). Fire and forget: when
 * Redis cannot be told now, it is told first thing when it is back (a bounded number held
 * back; past that, or if this limiter is destroyed first, the lease stops counting at its
 * TTL). */
void limiter_release(struct limiter *limiter, const char *subject, size_t subject_len,
                     const struct limit_rule *rules, size_t n, const char *lease_id);

/* limiter_release, then done(arg) once the store has applied it: at once for memory or
 * when the store cannot be told (down; the lease then stops counting at its TTL), else
 * when Redis has answered. A caller that sends its client the end of a response only
 * after done can never have that client's next request refused by its own old slot. */
void limiter_release_notify(struct limiter *limiter, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, const char *lease_id,
                            void (*done)(void *arg), void *arg);

/* Gives back every lease this limiter still holds, in one store call, then calls done
 * (from the loop; at once for memory or when the store is down). For SIGTERM.
 * The limiter holds nothing when this returns (limiter_lease_count is 0); done is called
 * exactly once, at the latest from limiter_destroy, and may be NULL. Leases of checks
 * still in flight are not covered: they are held when their reply comes. Redis: one call
 * per 16384 leases. Do not destroy the limiter from inside done. */
void limiter_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg);

/* Leases this limiter holds now (for tests and metrics): one per concurrency rule of each
 * allowed leased check not yet released. May be read from any thread. */
size_t limiter_lease_count(const struct limiter *limiter);

/* True while the store answers (for /health). A Redis Cluster limiter: while every master
 * of its slot map is connected. */
bool limiter_available(const struct limiter *limiter);

/* What a limiter last met of its store. */
enum limiter_health {
    LIMITER_HEALTH_OK = 0,           /* it answers (a memory limiter always) */
    LIMITER_HEALTH_UNREACHABLE,      /* not connected, or a command timed out */
    LIMITER_HEALTH_ERROR,            /* it answers with errors: a wrong password (WRONGPASS,
                                        NOAUTH), OOM, a script error, ... */
};

/* The store's health as this limiter last met it, and when not OK the reason in reason
 * ("127.0.0.1:6379: check: OOM command not allowed ...": where, the step, what Redis or
 * the connection said; never a password). The local fallback reports its primary's; a
 * Redis Cluster limiter ERROR when a master answers with errors, UNREACHABLE when it has
 * no master connected, else OK. Back to OK once the store answers a check. May be called
 * from any thread. */
enum limiter_health limiter_health(const struct limiter *limiter, char *reason, size_t reason_len);

/* Told, on the limiter's thread, each time the store could not decide a check or lost its
 * connection (health and reason as limiter_health says), and once when it answers again
 * (LIMITER_HEALTH_OK, reason ""). reason is valid during the call only. */
typedef void limiter_event_fn(void *arg, enum limiter_health health, const char *reason);

/* Sets the hook (NULL: none) before the limiter is used; a wrapper passes it to its
 * primary, a cluster limiter to every master's connection. A memory limiter never calls
 * it. */
void limiter_set_event_hook(struct limiter *limiter, limiter_event_fn *fn, void *arg);

/* One node of a store made of several (a Redis Cluster's masters), for /health and
 * /metrics. */
struct limiter_node_info {
    const char *name;      /* "host:port"; valid during the callback only */
    bool up;               /* this limiter's connection to it answers */
    uint64_t errors;       /* checks it answered LIMITER_UNAVAILABLE, since the start */
};

/* Calls fn once per node of the limiter's store (a cluster's masters in its current slot
 * map; a limiter over one store has none) and returns how many. May be called from any
 * thread (a view at most a moment old). */
size_t limiter_nodes(const struct limiter *limiter, void (*fn)(void *arg, const struct limiter_node_info *node),
                     void *arg);

/* What a check the store could not decide becomes, per kind of rule (rate rules, and
 * concurrency rules): passed on as LIMITER_UNAVAILABLE for the caller to forward (open)
 * or refuse (closed), or decided by a local limiter (local). */
enum limiter_store_error {
    LIMITER_STORE_ERROR_CLOSED = 0,
    LIMITER_STORE_ERROR_OPEN = 1,
    LIMITER_STORE_ERROR_LOCAL = 2,
};

struct local_fallback_options {
    enum limiter_store_error rate;          /* [limits] on_store_error */
    enum limiter_store_error concurrency;   /* [limits] concurrency_on_store_error */
    double share;                           /* local_share, 0 < share <= 1 */
};

/* A limiter that asks `primary` (Redis) and, when primary answers LIMITER_UNAVAILABLE,
 * decides the rules whose kind is LIMITER_STORE_ERROR_LOCAL with `local` (a memory limiter,
 * over one memory_store per process) on scaled rules: rate, burst and concurrency times
 * share (floored, rate and concurrency at least 1). A local concurrency rule also counts
 * the leases this limiter still holds in primary for the same subject and rule. Such a
 * result has local = true; rules left to open get an allowed verdict of their full limit;
 * a closed rule (or no local rule) passes LIMITER_UNAVAILABLE on. Takes ownership of both
 * (destroyed with it); NULL (both destroyed) on allocation failure. Releases go to
 * whichever limiter holds the lease. With no local kind the check is primary's, no copy. */
struct limiter *limiter_local_fallback_create(struct limiter *primary, struct limiter *local,
                                              const struct local_fallback_options *options);

/* Changes the options (a reload), on the limiter's thread. A no-op for other limiters. */
void limiter_local_fallback_set(struct limiter *limiter, const struct local_fallback_options *options);
