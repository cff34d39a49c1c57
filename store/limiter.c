/* The limiter entry points: argument checks, then the store's own implementation. */
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

int limiter_check(struct limiter *limiter, const char *subject, size_t subject_len,
                  const struct limit_rule *rules, size_t n, int64_t now_ms,
                  limiter_done_fn *done, void *arg)
{
    if (limiter == NULL || subject == NULL || subject_len == 0 || subject_len > LIMITER_MAX_SUBJECT ||
        rules == NULL || n < 1 || n > LIMITER_MAX_RULES || done == NULL)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (limit_rule_validate(&rules[i]) != 0)
            return -EINVAL;
        /* Two rules with one id would share (and race on) one state. */
        for (size_t j = 0; j < i; j++)
            if (rules[j].id == rules[i].id)
                return -EINVAL;
    }
    return limiter->ops->check(limiter, subject, subject_len, rules, n, now_ms, done, arg);
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
