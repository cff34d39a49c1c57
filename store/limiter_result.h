/* What a limiter check answers: the result type the store interface (limiter.h) and the
 * denial cache (denial_cache.h) share, apart so that neither includes the other. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"

#define LIMITER_MAX_RULES 16

enum limiter_status {
    LIMITER_DECIDED = 0,       /* verdicts are valid */
    LIMITER_UNAVAILABLE = 1,   /* the store could not be asked (down, breaker open, timeout) */
};

struct limiter_result {
    enum limiter_status status;
    bool allowed;                  /* every rule allowed; only then was the request recorded */
    int64_t now_ms;                /* the store clock the decision used (Unix ms) */
    bool remembered;               /* answered by the limiter's denial cache, not the store */
    bool local;                    /* decided by the local fallback while the store was away
                                      (limiter_local_fallback_create) */
    size_t n;                      /* == the n passed to limiter_check */
    struct limit_verdict verdicts[LIMITER_MAX_RULES];
};

/* Called exactly once per limiter_check that returned 0. `result` is only valid during
 * the call. */
typedef void limiter_done_fn(void *arg, const struct limiter_result *result);
