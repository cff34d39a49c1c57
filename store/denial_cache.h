/* Rejections remembered until they must end. A rate rule that rejects keeps rejecting at
 * least until its reset: a rejected request is not recorded, and nothing but time frees
 * room in a window or a bucket (other proxies can only use more of it). So a repeat
 * request of the same subject under the same rules inside that time is answered from
 * here, exactly as the store would answer it, without a store call: an abusive client
 * costs no round trip. Rejections by a concurrency rule are never remembered (a slot
 * frees whenever a request ends).
 *
 * One cache per limiter, used from its thread only; 512 entries in 4-way sets, a new
 * rejection taking a free or ended entry of its set, else the one that ends first. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"

struct denial_cache;

/* Longer subjects are not remembered (the proxy's are "u:<id>" or "ip:<address>"). */
#define DENIAL_CACHE_SUBJECT_MAX 160

/* Times are CLOCK_MONOTONIC ms (store/clock.h). Returns NULL on allocation failure. */
struct denial_cache *denial_cache_create(void);
void denial_cache_destroy(struct denial_cache *cache);

/* The key of one subject under one list of rules (any change of a rule changes it). */
uint64_t denial_cache_key(const char *subject, size_t subject_len, const struct limit_rule *rules, size_t n);

/* True, with *result filled as the store would answer at now_mono_ms (reset_ms counted
 * down, the store clock moved on), when a remembered rejection still holds. */
bool denial_cache_lookup(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len,
                         int64_t now_mono_ms, struct limiter_result *result);

/* Remembers result when it is a rejection by rate rules only (bit i of concurrency_mask
 * set: rule i is a concurrency rule). asked_mono_ms is when the check was sent: the store
 * decided at or after it, so the rejection holds at least until asked_mono_ms plus the
 * smallest reset of the rules that rejected. */
void denial_cache_remember(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len,
                           uint32_t concurrency_mask, const struct limiter_result *result, int64_t asked_mono_ms);
