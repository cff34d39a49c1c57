/* What the two limiter stores share behind store/limiter.h. Private to store/ (and its
 * unit tests). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"

/* Longest subject limiter_check accepts (bytes). */
#define LIMITER_MAX_SUBJECT 512

struct limiter_ops {
    /* Arguments are already validated by limiter_check. */
    int (*check)(struct limiter *limiter, const char *subject, size_t subject_len,
                 const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg);
    void (*destroy)(struct limiter *limiter);
    bool (*available)(const struct limiter *limiter);
};

struct limiter {
    const struct limiter_ops *ops;
};

/* Fills result as LIMITER_UNAVAILABLE for n rules. */
void limiter_result_unavailable(struct limiter_result *result, size_t n);

/* Number of subjects the memory store holds (for tests of eviction). Takes every lock. */
size_t memory_store_subjects(struct memory_store *store);
