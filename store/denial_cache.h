/* Rejections remembered until they must end. A rate rule or quota that rejects keeps
 * rejecting a request of the same cost at least until its reset: a rejected request is
 * not recorded, and nothing but time frees room in a window, a bucket or a period (other
 * proxies can only use more of it). So a repeat
 * request of the same subject under the same rules inside that time is answered from
 * here, exactly as the store would answer it, without a store call: an abusive client
 * costs no round trip. Rejections by a concurrency rule are never remembered (a slot
 * frees whenever a request ends).
 *
 * One cache per limiter (struct limiter's `denials`, created by store/limiter.c at its
 * first check on the store's own clock), used from its thread only; 512 entries in 4-way
 * sets, a new rejection taking a free or ended entry of its set, else the one that ends
 * first. It also keeps the checks on their way to the store, so that their answers come
 * through it (denial_cache_ask).
 *
 * Includes store/limiter_result.h for the result types; store/limiter.c includes this
 * file, and nothing here includes store/limiter.h or store/limiter_impl.h.
 *
 * A remembered rejection is counted from when the check was sent, so it never outlasts the
 * store's own reset. Each key may sit in either of two sets (by the keyed hash of the
 * subject, store/keyed_hash.h) and a new one goes to the emptier: with one set per key,
 * placed at random, 100 denied subjects overflowed a set in about 14% of processes.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter_result.h"

struct denial_cache;

/* Longer subjects are not remembered (the proxy's are "u:<id>" or "ip:<address>"). */
#define DENIAL_CACHE_SUBJECT_MAX 160

/* A check on its way to the store (denial_cache_ask). */
struct denial_cache_asked;

/* Times are CLOCK_MONOTONIC ms (store/clock.h). Returns NULL on allocation failure. */
struct denial_cache *denial_cache_create(void);
/* Frees the cache and its kept records. Every check asked through it must have been
 * answered or dropped (limiter_destroy destroys the store, which answers its pending
 * checks, before the cache). */
void denial_cache_destroy(struct denial_cache *cache);

/* The key of one subject under one list of rules (any change of a rule changes it, its
 * cost included: a request of another cost is another question, asked of the store). */
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

/* Records a check about to be sent to the store so that its answer is remembered when it
 * is a lasting rejection: send it with denial_cache_answer as its done callback and the
 * returned record as its arg; the record then calls done(arg, result). The record comes
 * from a free list kept by the cache (no allocation per check in the steady state); it
 * goes back there when answered, or through denial_cache_drop when the check could not be
 * sent. subject_len is at most DENIAL_CACHE_SUBJECT_MAX. Returns NULL on allocation
 * failure. */
struct denial_cache_asked *denial_cache_ask(struct denial_cache *cache, uint64_t key, const char *subject,
                                            size_t subject_len, uint32_t concurrency_mask, int64_t asked_mono_ms,
                                            limiter_done_fn *done, void *arg);

/* The done callback of a check recorded by denial_cache_ask (asked is its record):
 * remembers the answer (denial_cache_remember), gives the record back, then calls the
 * check's own done. */
void denial_cache_answer(void *asked, const struct limiter_result *result);

/* Gives back the record of a check that was not sent (its done will not be called). */
void denial_cache_drop(struct denial_cache_asked *asked);
