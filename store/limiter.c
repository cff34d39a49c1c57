/* The limiter entry points: argument checks, then the store's own implementation. The
 * leases a limiter holds are tracked here, in its lease table (store/lease_table.h); the
 * stores add to it when a leased check is allowed. */
#include "store/limiter_impl.h"

#include <errno.h>
#include <string.h>

void limiter_result_unavailable(struct limiter_result *result, size_t n)
{
    memset(result, 0, sizeof(*result));
    result->status = LIMITER_UNAVAILABLE;
    result->now_ms = -1;
    result->n = n;
}

/* Checks the arguments; *pleased tells whether some rule is a concurrency rule. */
static int check_args(const struct limiter *limiter, const char *subject, size_t subject_len,
                      const struct limit_rule *rules, size_t n, limiter_done_fn *done, bool *pleased)
{
    if (limiter == NULL || subject == NULL || subject_len == 0 || subject_len > LIMITER_MAX_SUBJECT ||
        rules == NULL || n < 1 || n > LIMITER_MAX_RULES || done == NULL)
        return -EINVAL;
    bool leased = false;
    for (size_t i = 0; i < n; i++) {
        if (limit_rule_validate(&rules[i]) != 0)
            return -EINVAL;
        /* Two rules with one id would share (and race on) one state. */
        for (size_t j = 0; j < i; j++)
            if (rules[j].id == rules[i].id)
                return -EINVAL;
        leased = leased || rules[i].algorithm == LIMIT_CONCURRENCY;
    }
    *pleased = leased;
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
    bool leased = false;
    int r = check_args(limiter, subject, subject_len, rules, n, done, &leased);
    if (r != 0)
        return r;
    size_t id_len = 0;
    if (!leased) {
        lease_id = NULL;
    } else {
        if (lease_id == NULL)
            return -EINVAL;
        id_len = strnlen(lease_id, LEASE_ID_MAX + 1);
        if (id_len == 0 || id_len > LEASE_ID_MAX)
            return -EINVAL;
        /* A lease id names one request: this limiter must not hold it already. */
        for (size_t i = 0; i < n; i++)
            if (rules[i].algorithm == LIMIT_CONCURRENCY &&
                lease_table_find(&limiter->leases, subject, subject_len, rules[i].id, lease_id, id_len) != NULL)
                return -EINVAL;
    }
    return limiter->ops->check(limiter, subject, subject_len, rules, n, now_ms, lease_id, id_len, done, arg);
}

void limiter_release(struct limiter *limiter, const char *subject, size_t subject_len,
                     const struct limit_rule *rules, size_t n, const char *lease_id)
{
    if (limiter == NULL || subject == NULL || rules == NULL || lease_id == NULL || n > LIMITER_MAX_RULES)
        return;
    size_t id_len = strnlen(lease_id, LEASE_ID_MAX + 1);
    if (id_len == 0 || id_len > LEASE_ID_MAX)
        return;
    for (size_t i = 0; i < n; i++) {
        if (rules[i].algorithm != LIMIT_CONCURRENCY)
            continue;
        /* Only a lease this limiter holds is given back: a second release finds none. */
        struct lease *l = lease_table_find(&limiter->leases, subject, subject_len, rules[i].id, lease_id, id_len);
        if (l != NULL)
            limiter->ops->release(limiter, l);
    }
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
    if (limiter == NULL || limiter->ops->sync == NULL) {
        done(arg);
        return;
    }
    limiter->ops->sync(limiter, done, arg);
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
    return limiter != NULL ? lease_table_count(&limiter->leases) : 0;
}

void limiter_destroy(struct limiter *limiter)
{
    if (limiter != NULL)
        limiter->ops->destroy(limiter);
}

bool limiter_available(const struct limiter *limiter)
{
    return limiter != NULL && limiter->ops->available(limiter);
}
