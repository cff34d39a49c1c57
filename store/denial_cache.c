/* The denial cache (denial_cache.h): a fixed table that a new rejection evicts from, never
 * grows, and the records of checks asked, on a free list. Its limiter's thread only: no
 * lock. An entry answers while now < until_ms, counted from when the check was sent, so it
 * never outlasts the store's rejection; it matches on the whole subject, not the hash
 * alone. A rejection in which a concurrency rule refused is never kept. A record goes back
 * to the free list before its check's done is called. */
#include "store/denial_cache.h"

#include <stdlib.h>
#include <string.h>

#include "store/hash.h"
#include "store/keyed_hash.h"

/* 4-way sets: a direct-mapped table let 100 denied subjects evict each other (~18% of
 * their repeats still asked the store). Each key has two sets (its key's low bits and bits
 * 32 and up) and goes to the one holding fewer live entries: with the keyed hash placing
 * subjects at random, one set per key overflowed for 100 subjects in about 14% of
 * processes (a simulation of 200,000), two choices in none of 300,000. */
#define SETS 128
#define WAYS 4

struct denial {
    uint64_t key;                 /* 0: empty */
    int64_t asked_ms;
    int64_t until_ms;
    size_t subject_len;
    char subject[DENIAL_CACHE_SUBJECT_MAX];
    struct limiter_result result;
};

struct denial_cache_asked {
    struct denial_cache_asked *next_free;
    struct denial_cache *cache;
    limiter_done_fn *done;
    void *arg;
    uint64_t key;
    int64_t asked_ms;
    uint32_t concurrency_mask;
    size_t subject_len;
    char subject[DENIAL_CACHE_SUBJECT_MAX];
};

struct denial_cache {
    struct denial slots[SETS][WAYS];
    struct denial_cache_asked *free_asked;   /* records of answered checks, for reuse */
};

struct denial_cache *denial_cache_create(void)
{
    return calloc(1, sizeof(struct denial_cache));
}

void denial_cache_destroy(struct denial_cache *cache)
{
    if (cache == NULL)
        return;
    while (cache->free_asked != NULL) {
        struct denial_cache_asked *a = cache->free_asked;
        cache->free_asked = a->next_free;
        free(a);
    }
    free(cache);
}

uint64_t denial_cache_key(const char *subject, size_t subject_len, const struct limit_rule *rules, size_t n)
{
    /* the subject keyed (a client chooses it), the rules (the catalog's) mixed in a word at
       a time: hash_mix is a bijection, so two rule lists differ in the key unless crafted */
    uint64_t h = hash_keyed(subject, subject_len);
    for (size_t i = 0; i < n; i++) {
        /* The cost too: a rejection of a cost-10 request says nothing of a cost-1 one. */
        int64_t fields[7] = { rules[i].id, (int64_t)rules[i].kind, rules[i].rate, rules[i].burst,
                              rules[i].window_ms, (int64_t)rules[i].period, limit_rule_cost(&rules[i]) };
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
            h = hash_mix(h ^ (uint64_t)fields[f]);
    }
    return h != 0 ? h : 1;
}

static struct denial *set_of(struct denial_cache *cache, uint64_t key, int choice)
{
    return cache->slots[(choice == 0 ? key : key >> 32) % SETS];
}

static struct denial *find(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len)
{
    for (int c = 0; c < 2; c++) {
        struct denial *set = set_of(cache, key, c);
        for (int i = 0; i < WAYS; i++)
            if (set[i].key == key && set[i].subject_len == subject_len &&
                memcmp(set[i].subject, subject, subject_len) == 0)
                return &set[i];
    }
    return NULL;
}

static bool live(const struct denial *d, int64_t now_ms)
{
    return d->key != 0 && d->until_ms > now_ms;
}

static int live_count(const struct denial *set, int64_t now_ms)
{
    int n = 0;
    for (int i = 0; i < WAYS; i++)
        n += live(&set[i], now_ms);
    return n;
}

/* Where a new rejection goes: its own old entry, else a free or ended one of its set with
 * fewer live entries, else of its two sets the one that ends first. */
static struct denial *place_for(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len,
                                int64_t now_ms)
{
    struct denial *d = find(cache, key, subject, subject_len);
    if (d != NULL)
        return d;
    struct denial *a = set_of(cache, key, 0), *b = set_of(cache, key, 1);
    struct denial *set = live_count(b, now_ms) < live_count(a, now_ms) ? b : a;
    for (int i = 0; i < WAYS; i++)
        if (!live(&set[i], now_ms))
            return &set[i];
    struct denial *victim = &a[0];
    for (int i = 0; i < WAYS; i++) {
        if (a[i].until_ms < victim->until_ms)
            victim = &a[i];
        if (b[i].until_ms < victim->until_ms)
            victim = &b[i];
    }
    return victim;
}

bool denial_cache_lookup(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len,
                         int64_t now_mono_ms, struct limiter_result *result)
{
    struct denial *d = find(cache, key, subject, subject_len);
    if (d == NULL)
        return false;
    if (now_mono_ms >= d->until_ms) {
        d->key = 0;
        return false;
    }
    int64_t elapsed = now_mono_ms > d->asked_ms ? now_mono_ms - d->asked_ms : 0;
    *result = d->result;
    result->remembered = true;
    if (result->now_ms >= 0)
        result->now_ms += elapsed;
    for (size_t i = 0; i < result->n; i++) {
        struct limit_verdict *v = &result->verdicts[i];
        v->reset_ms = v->reset_ms > elapsed ? v->reset_ms - elapsed : 0;
    }
    return true;
}

void denial_cache_remember(struct denial_cache *cache, uint64_t key, const char *subject, size_t subject_len,
                           uint32_t concurrency_mask, const struct limiter_result *result, int64_t asked_mono_ms)
{
    if (result->status != LIMITER_DECIDED || result->allowed || subject_len > DENIAL_CACHE_SUBJECT_MAX)
        return;
    int64_t holds_ms = -1;
    for (size_t i = 0; i < result->n; i++) {
        const struct limit_verdict *v = &result->verdicts[i];
        if (v->allowed)
            continue;
        if (i >= 32 || (concurrency_mask & ((uint32_t)1 << i)))
            return;
        if (holds_ms < 0 || v->reset_ms < holds_ms)
            holds_ms = v->reset_ms;
    }
    if (holds_ms <= 0)
        return;
    struct denial *d = place_for(cache, key, subject, subject_len, asked_mono_ms);
    d->key = key;
    d->asked_ms = asked_mono_ms;
    d->until_ms = asked_mono_ms + holds_ms;
    d->subject_len = subject_len;
    memcpy(d->subject, subject, subject_len);
    d->result = *result;
}

struct denial_cache_asked *denial_cache_ask(struct denial_cache *cache, uint64_t key, const char *subject,
                                            size_t subject_len, uint32_t concurrency_mask, int64_t asked_mono_ms,
                                            limiter_done_fn *done, void *arg)
{
    if (subject_len > DENIAL_CACHE_SUBJECT_MAX)
        return NULL;
    struct denial_cache_asked *a = cache->free_asked;
    if (a != NULL)
        cache->free_asked = a->next_free;
    else if ((a = malloc(sizeof(*a))) == NULL)
        return NULL;
    a->cache = cache;
    a->done = done;
    a->arg = arg;
    a->key = key;
    a->asked_ms = asked_mono_ms;
    a->concurrency_mask = concurrency_mask;
    a->subject_len = subject_len;
    memcpy(a->subject, subject, subject_len);
    return a;
}

void denial_cache_drop(struct denial_cache_asked *a)
{
    a->next_free = a->cache->free_asked;
    a->cache->free_asked = a;
}

void denial_cache_answer(void *asked, const struct limiter_result *result)
{
    struct denial_cache_asked *a = asked;
    denial_cache_remember(a->cache, a->key, a->subject, a->subject_len, a->concurrency_mask, result, a->asked_ms);
    limiter_done_fn *done = a->done;
    void *done_arg = a->arg;
    denial_cache_drop(a);
    done(done_arg, result);
}
