/* The limiter entry points: argument checks, the denial cache (a repeat of a lasting
 * rejection is answered without the store: store/denial_cache.h), then the store's own
 * implementation. The leases a limiter holds are tracked here, in its lease table
 * (store/lease_table.h); the stores add to it when a leased check is allowed. */
#include "store/limiter_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"
#include "store/denial_cache.h"

/* The limiter's denial cache (store/denial_cache.h), created at its first check on the
 * store's own clock. NULL when that allocation fails: every check then asks the store. */
static struct denial_cache *denials_of(struct limiter *limiter)
{
    if (limiter->denials == NULL)
        limiter->denials = denial_cache_create();
    return limiter->denials;
}

void limiter_result_unavailable(struct limiter_result *result, size_t n)
{
    memset(result, 0, sizeof(*result));
    result->status = LIMITER_UNAVAILABLE;
    result->now_ms = -1;
    result->n = n;
}

/* Checks the arguments; bit i of *concurrency is set when rules[i] is a concurrency rule. */
static int check_args(const struct limiter *limiter, const char *subject, size_t subject_len,
                      const struct limit_rule *rules, size_t n, limiter_done_fn *done, uint32_t *concurrency)
{
    if (limiter == NULL || subject == NULL || subject_len == 0 || subject_len > LIMITER_MAX_SUBJECT ||
        rules == NULL || n < 1 || n > LIMITER_MAX_RULES || done == NULL)
        return -EINVAL;
    uint32_t mask = 0;
    for (size_t i = 0; i < n; i++) {
        if (limit_rule_validate(&rules[i]) != 0)
            return -EINVAL;
        /* Two rules with one id would share (and race on) one state. */
        for (size_t j = 0; j < i; j++)
            if (rules[j].id == rules[i].id)
                return -EINVAL;
        if (rules[i].kind == LIMIT_CONCURRENCY)
            mask |= (uint32_t)1 << i;
    }
    *concurrency = mask;
    return 0;
}

int limiter_check(struct limiter *limiter, const char *subject, size_t subject_len,
                  const struct limit_rule *rules, size_t n, int64_t now_ms,
                  limiter_done_fn *done, void *arg)
{
    return limiter_check_leased(limiter, subject, subject_len, rules, n, now_ms, NULL, done, arg);
}

int limiter_check_leased(struct limiter *limiter, const char *subject, size_t subject_len,
                         const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                         limiter_done_fn *done, void *arg)
{
    uint32_t concurrency = 0;
    int r = check_args(limiter, subject, subject_len, rules, n, done, &concurrency);
    if (r != 0)
        return r;
    size_t id_len = 0;
    if (concurrency == 0) {
        lease_id = NULL;
    } else {
        if (lease_id == NULL)
            return -EINVAL;
        id_len = strnlen(lease_id, LEASE_ID_MAX + 1);
        if (id_len == 0 || id_len > LEASE_ID_MAX)
            return -EINVAL;
        /* A lease id names one request: this limiter must not hold it already. */
        for (size_t i = 0; i < n; i++)
            if (rules[i].kind == LIMIT_CONCURRENCY &&
                lease_table_find(&limiter->leases, subject, subject_len, rules[i].id, lease_id, id_len) != NULL)
                return -EINVAL;
    }
    return limiter_check_checked(limiter, subject, subject_len, rules, n, now_ms, lease_id, id_len, concurrency, done,
                                 arg);
}

int limiter_check_checked(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                          size_t id_len, uint32_t concurrency, limiter_done_fn *done, void *arg)
{
    /* An explicit clock (tests) always asks the store; a wrapper's parts keep their own. */
    struct denial_cache *denials = now_ms < 0 && subject_len <= DENIAL_CACHE_SUBJECT_MAX && limiter->inner == NULL
                                       ? denials_of(limiter) : NULL;
    if (denials == NULL)
        return limiter->ops->check(limiter, subject, subject_len, rules, n, now_ms, lease_id, id_len, done, arg);
    uint64_t key = denial_cache_key(subject, subject_len, rules, n);
    int64_t asked_ms = store_mono_ms();
    struct limiter_result remembered;
    if (denial_cache_lookup(denials, key, subject, subject_len, asked_ms, &remembered)) {
        done(arg, &remembered);
        return 0;
    }
    struct denial_cache_asked *asked =
        denial_cache_ask(denials, key, subject, subject_len, concurrency, asked_ms, done, arg);
    if (asked == NULL)
        return -ENOMEM;
    int r = limiter->ops->check(limiter, subject, subject_len, rules, n, now_ms, lease_id, id_len, denial_cache_answer,
                                asked);
    if (r != 0)
        denial_cache_drop(asked);
    return r;
}

int limiter_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                 const struct limit_rule *rules, size_t n, int64_t now_ms,
                 limiter_done_fn *done, void *arg)
{
    uint32_t concurrency = 0;
    int r = check_args(limiter, subject, subject_len, rules, n, done, &concurrency);
    if (r != 0)
        return r;
    return limiter->ops->peek(limiter, subject, subject_len, rules, n, now_ms, done, arg);
}

void limiter_release(struct limiter *limiter, const char *subject, size_t subject_len,
                     const struct limit_rule *rules, size_t n, const char *lease_id)
{
    if (limiter == NULL || subject == NULL || rules == NULL || lease_id == NULL || n > LIMITER_MAX_RULES)
        return;
    size_t id_len = strnlen(lease_id, LEASE_ID_MAX + 1);
    if (id_len == 0 || id_len > LEASE_ID_MAX)
        return;
    limiter->ops->release(limiter, subject, subject_len, rules, n, lease_id, id_len);
}

void limiter_release_held(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len,
                          void (*give_back)(struct limiter *limiter, struct lease *lease))
{
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind != LIMIT_CONCURRENCY)
            continue;
        /* Only a lease this limiter holds is given back: a second release finds none. */
        struct lease *l = lease_table_find(&limiter->leases, subject, subject_len, rules[i].id, lease_id,
                                           lease_id_len);
        if (l != NULL)
            give_back(limiter, l);
    }
}

size_t limiter_leases_held(const struct limiter *limiter)
{
    return lease_table_count(&limiter->leases);
}

/* The shared store behind a limiter: its own, or its inner's for a wrapper; NULL for a
 * store of this process. */
static const struct limiter_shared_ops *shared_of(const struct limiter *limiter, struct limiter **owner)
{
    while (limiter != NULL && limiter->ops->shared == NULL)
        limiter = limiter->inner;
    if (owner != NULL)
        *owner = (struct limiter *)limiter;
    return limiter != NULL ? limiter->ops->shared : NULL;
}

static void no_done(void *arg)
{
}

void limiter_release_notify(struct limiter *limiter, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, const char *lease_id,
                            void (*done)(void *arg), void *arg)
{
    if (done == NULL)
        done = no_done;
    limiter_release(limiter, subject, subject_len, rules, n, lease_id);
    limiter_sync(limiter, done, arg);
}

void limiter_sync(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    if (shared == NULL)
        done(arg);
    else
        shared->sync(owner, done, arg);
}

void limiter_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    if (done == NULL)
        done = no_done;
    if (limiter == NULL) {
        done(arg);
        return;
    }
    limiter->ops->release_all(limiter, done, arg);
}

size_t limiter_lease_count(const struct limiter *limiter)
{
    return limiter != NULL ? limiter->ops->lease_count(limiter) : 0;
}

void limiter_destroy(struct limiter *limiter)
{
    if (limiter == NULL)
        return;
    /* Checks still pending are answered inside destroy, through the denial cache: it is
     * destroyed after the store. */
    struct denial_cache *denials = limiter->denials;
    limiter->ops->destroy(limiter);
    denial_cache_destroy(denials);
}

size_t limiter_nodes(const struct limiter *limiter, void (*fn)(void *arg, const struct limiter_node_info *node),
                     void *arg)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    if (fn == NULL || shared == NULL || shared->nodes == NULL)
        return 0;
    return shared->nodes(owner, fn, arg);
}

/* A store of this process is always there and always OK. */
bool limiter_available(const struct limiter *limiter)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    return limiter != NULL && (shared == NULL || shared->available(owner));
}

enum limiter_health limiter_health(const struct limiter *limiter, char *reason, size_t reason_len)
{
    if (reason_len > 0)
        reason[0] = '\0';
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    return shared != NULL ? shared->health(owner, reason, reason_len) : LIMITER_HEALTH_OK;
}

void limiter_set_event_hook(struct limiter *limiter, limiter_event_fn *fn, void *arg)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    if (shared != NULL)
        shared->set_event_hook(owner, fn, arg);
}

int limiter_lease_adopt(struct limiter *limiter, const char *subject, size_t subject_len, int64_t rule_id,
                        int64_t ttl_ms, const char *id, size_t id_len)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    if (shared == NULL)
        return -ENOTSUP;
    return shared->adopt(owner, subject, subject_len, rule_id, ttl_ms, id, id_len);
}

void limiter_set_ready_hook(struct limiter *limiter, void (*fn)(void *arg), void *arg)
{
    struct limiter *owner;
    const struct limiter_shared_ops *shared = shared_of(limiter, &owner);
    if (shared != NULL)
        shared->set_ready_hook(owner, fn, arg);
}
