/* Unit tests for store/denial_cache.c and its use in store/limiter.c: a rejection by rate
 * rules is answered locally until it must end, with the reset counted down; anything
 * else (allowed, concurrency, another rule list, an explicit clock) goes to the store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "store/denial_cache.h"
#include "store/limiter_impl.h"

static const struct limit_rule per_minute = { .id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 1, .window_ms = 60000 };
static const struct limit_rule slots = { .id = 2, .kind = LIMIT_CONCURRENCY, .rate = 1, .window_ms = 30000 };

static struct limiter_result rejection(int64_t reset_ms)
{
    struct limiter_result r = { .status = LIMITER_DECIDED, .allowed = false, .now_ms = 1000000, .n = 1 };
    r.verdicts[0] = (struct limit_verdict){ .allowed = false, .limit = 1, .remaining = 0, .reset_ms = reset_ms };
    return r;
}

static void rejection_is_answered_until_its_reset(void **state)
{
    (void)state;
    struct denial_cache *c = denial_cache_create();
    assert_non_null(c);
    uint64_t key = denial_cache_key("u:1", 3, &per_minute, 1);
    struct limiter_result r = rejection(500);
    denial_cache_remember(c, key, "u:1", 3, 0, &r, 10000);

    struct limiter_result got;
    assert_true(denial_cache_lookup(c, key, "u:1", 3, 10100, &got));
    assert_true(got.remembered);
    assert_false(got.allowed);
    assert_int_equal(got.verdicts[0].remaining, 0);
    assert_int_equal(got.verdicts[0].reset_ms, 400);
    assert_int_equal(got.now_ms, 1000100);
    assert_true(denial_cache_lookup(c, key, "u:1", 3, 10499, &got));
    assert_int_equal(got.verdicts[0].reset_ms, 1);
    /* At the reset the store must be asked again. */
    assert_false(denial_cache_lookup(c, key, "u:1", 3, 10500, &got));
    assert_false(denial_cache_lookup(c, key, "u:1", 3, 10100, &got));
    denial_cache_destroy(c);
}

static void other_subjects_and_rules_are_not_answered(void **state)
{
    (void)state;
    struct denial_cache *c = denial_cache_create();
    uint64_t key = denial_cache_key("u:1", 3, &per_minute, 1);
    struct limiter_result r = rejection(5000);
    denial_cache_remember(c, key, "u:1", 3, 0, &r, 0);
    struct limiter_result got;
    assert_false(denial_cache_lookup(c, denial_cache_key("u:2", 3, &per_minute, 1), "u:2", 3, 1, &got));
    struct limit_rule raised = per_minute;
    raised.rate = 2; /* the plan was changed: the old rejection says nothing */
    assert_int_not_equal(denial_cache_key("u:1", 3, &raised, 1), key);
    assert_true(denial_cache_lookup(c, key, "u:1", 3, 1, &got));
    denial_cache_destroy(c);
}

static void allowed_and_concurrency_answers_are_not_remembered(void **state)
{
    (void)state;
    struct denial_cache *c = denial_cache_create();
    struct limit_rule both[2] = { per_minute, slots };
    const uint32_t slots_rule = 1u << 1; /* both[1] is the concurrency rule */
    uint64_t key = denial_cache_key("u:1", 3, both, 2);
    struct limiter_result got;

    struct limiter_result allowed = rejection(0);
    allowed.allowed = true;
    allowed.verdicts[0].allowed = true;
    denial_cache_remember(c, key, "u:1", 3, slots_rule, &allowed, 0);
    assert_false(denial_cache_lookup(c, key, "u:1", 3, 1, &got));

    /* The concurrency rule rejects: a slot may free at any moment. */
    struct limiter_result busy = { .status = LIMITER_DECIDED, .allowed = false, .n = 2 };
    busy.verdicts[0] = (struct limit_verdict){ .allowed = true, .limit = 1, .remaining = 0 };
    busy.verdicts[1] = (struct limit_verdict){ .allowed = false, .limit = 1, .remaining = 0, .reset_ms = 1000 };
    denial_cache_remember(c, key, "u:1", 3, slots_rule, &busy, 0);
    assert_false(denial_cache_lookup(c, key, "u:1", 3, 1, &got));

    struct limiter_result down = { .status = LIMITER_UNAVAILABLE, .n = 2 };
    denial_cache_remember(c, key, "u:1", 3, slots_rule, &down, 0);
    assert_false(denial_cache_lookup(c, key, "u:1", 3, 1, &got));
    denial_cache_destroy(c);
}

static void a_hundred_denied_subjects_are_all_remembered(void **state)
{
    (void)state;
    struct denial_cache *c = denial_cache_create();
    char subject[32];
    struct limiter_result r = rejection(60000);
    for (int i = 0; i < 100; i++) {
        int len = snprintf(subject, sizeof(subject), "u:%d", i);
        denial_cache_remember(c, denial_cache_key(subject, (size_t)len, &per_minute, 1), subject, (size_t)len, 0, &r, 0);
    }
    int found = 0;
    struct limiter_result got;
    for (int i = 0; i < 100; i++) {
        int len = snprintf(subject, sizeof(subject), "u:%d", i);
        found += denial_cache_lookup(c, denial_cache_key(subject, (size_t)len, &per_minute, 1), subject, (size_t)len,
                                     1000, &got);
    }
    assert_int_equal(found, 100);
    denial_cache_destroy(c);
}

/* ---- through the memory limiter ---- */

struct answer {
    int calls;
    struct limiter_result last;
};

static void on_done(void *arg, const struct limiter_result *result)
{
    struct answer *a = arg;
    a->calls++;
    a->last = *result;
}

static void limiter_answers_repeat_rejections_alike(void **state)
{
    (void)state;
    struct memory_store *store = memory_store_create();
    struct limiter *l = limiter_memory_create(store);
    assert_non_null(l);
    struct answer a = { 0 };
    assert_int_equal(limiter_check(l, "u:1", 3, &per_minute, 1, -1, on_done, &a), 0);
    assert_true(a.last.allowed);
    assert_int_equal(limiter_check(l, "u:1", 3, &per_minute, 1, -1, on_done, &a), 0);
    struct limiter_result from_store = a.last;
    assert_false(from_store.allowed);
    assert_false(from_store.remembered);
    assert_true(from_store.verdicts[0].reset_ms > 59000);
    /* From the cache now: the same answer, the reset no later than the store's. */
    assert_int_equal(limiter_check(l, "u:1", 3, &per_minute, 1, -1, on_done, &a), 0);
    assert_int_equal(a.calls, 3);
    assert_true(a.last.remembered);
    assert_false(a.last.allowed);
    assert_int_equal(a.last.verdicts[0].limit, 1);
    assert_int_equal(a.last.verdicts[0].remaining, 0);
    assert_true(a.last.verdicts[0].reset_ms <= from_store.verdicts[0].reset_ms);
    assert_true(a.last.verdicts[0].reset_ms > 58000);
    /* Another subject is unaffected. */
    assert_int_equal(limiter_check(l, "u:2", 3, &per_minute, 1, -1, on_done, &a), 0);
    assert_true(a.last.allowed);
    limiter_destroy(l);
    memory_store_destroy(store);
}

/* A remembered rejection answers only a request of the same cost: a cost-10 request over
 * the limit says nothing of a cost-1 one, which the store still admits. (Cost 0 means 1.) */
static void rejection_of_one_cost_is_not_another_costs(void **state)
{
    (void)state;
    struct limit_rule r = {.id = 5, .kind = LIMIT_SLIDING_LOG, .rate = 100, .window_ms = 60000};
    struct limit_rule r1 = r, r10 = r;
    r1.cost = 1;
    r10.cost = 10;
    assert_int_equal(denial_cache_key("u:1", 3, &r, 1), denial_cache_key("u:1", 3, &r1, 1));
    assert_true(denial_cache_key("u:1", 3, &r1, 1) != denial_cache_key("u:1", 3, &r10, 1));
    struct memory_store *store = memory_store_create();
    struct limiter *l = limiter_memory_create(store);
    assert_non_null(l);
    struct answer a = { 0 };
    struct limit_rule r95 = r;
    r95.cost = 95;
    assert_int_equal(limiter_check(l, "u:1", 3, &r95, 1, -1, on_done, &a), 0);
    assert_true(a.last.allowed);
    assert_int_equal(limiter_check(l, "u:1", 3, &r10, 1, -1, on_done, &a), 0);
    assert_false(a.last.allowed);
    assert_false(a.last.remembered);
    assert_int_equal(limiter_check(l, "u:1", 3, &r10, 1, -1, on_done, &a), 0);
    assert_false(a.last.allowed);
    assert_true(a.last.remembered);   /* the same cost: from the cache */
    for (int i = 0; i < 5; i++) {     /* 5 units were left for cost-1 requests */
        assert_int_equal(limiter_check(l, "u:1", 3, &r1, 1, -1, on_done, &a), 0);
        assert_true(a.last.allowed);
        assert_false(a.last.remembered);
        assert_int_equal(a.last.verdicts[0].remaining, 4 - i);
    }
    assert_int_equal(limiter_check(l, "u:1", 3, &r1, 1, -1, on_done, &a), 0);
    assert_false(a.last.allowed);
    limiter_destroy(l);
    memory_store_destroy(store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rejection_is_answered_until_its_reset),
        cmocka_unit_test(other_subjects_and_rules_are_not_answered),
        cmocka_unit_test(allowed_and_concurrency_answers_are_not_remembered),
        cmocka_unit_test(a_hundred_denied_subjects_are_all_remembered),
        cmocka_unit_test(limiter_answers_repeat_rejections_alike),
        cmocka_unit_test(rejection_of_one_cost_is_not_another_costs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
