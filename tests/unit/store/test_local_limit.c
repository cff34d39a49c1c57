/* Unit tests for store/memory/local_limit.c: one rule of one connection, which must count exactly
 * as the memory store counts the same rule for one subject. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/limiter_impl.h"
#include "store/memory/local_limit.h"

static void on_done(void *arg, const struct limiter_result *result)
{
    *(struct limiter_result *)arg = *result;
}

/* Random walks of every rate algorithm (time mostly forward, sometimes backwards): the
 * local counter and the memory store agree on every verdict. (The rule stays fixed within
 * a walk: the memory store forgets a state on a schedule computed from the rule it was
 * written under, which a changed rule may see differently.) */
static void test_same_as_memory_store(void **state)
{
    srand(777);
    for (int round = 0; round < 40; round++) {
        struct memory_store *store = memory_store_create();
        struct limiter *mem = limiter_memory_create(store);
        struct local_limit *local = local_limit_create();
        assert_non_null(local);
        struct limit_rule rule = {.id = 1, .kind = (enum limit_kind)(round % 4), .rate = 1 + rand() % 5,
                                  .burst = rand() % 3, .window_ms = 50 + rand() % 1000};
        int64_t now = 1000000 + rand() % 1000;
        for (int i = 0; i < 400; i++) {
            int r = rand() % 20;
            if (r < 8)
                ;
            else if (r < 18)
                now += rand() % (rule.window_ms / 2 + 1);
            else if (r == 18)
                now -= rand() % rule.window_ms;
            else
                now += rand() % (3 * rule.window_ms);
            struct limiter_result res;
            assert_int_equal(limiter_check(mem, "conn", 4, &rule, 1, now, on_done, &res), 0);
            struct limit_verdict v;
            bool allowed = local_limit_check(local, &rule, now, &v);
            assert_int_equal(allowed, res.allowed);
            assert_int_equal(v.allowed, res.verdicts[0].allowed);
            assert_int_equal(v.limit, res.verdicts[0].limit);
            assert_int_equal(v.remaining, res.verdicts[0].remaining);
            assert_int_equal(v.reset_ms, res.verdicts[0].reset_ms);
        }
        local_limit_destroy(local);
        limiter_destroy(mem);
        memory_store_destroy(store);
    }
}

static void test_messages_per_window(void **state)
{
    struct local_limit *l = local_limit_create();
    struct limit_rule r = {.id = 9, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 1000};
    for (int i = 0; i < 3; i++)
        assert_true(local_limit_check(l, &r, 5000 + i, NULL));   /* v is optional */
    struct limit_verdict v;
    assert_false(local_limit_check(l, &r, 5500, &v));
    assert_int_equal(v.remaining, 0);
    assert_int_equal(v.reset_ms, 500);
    assert_true(local_limit_check(l, &r, 6000, &v));
    assert_int_equal(v.remaining, 0);
    /* a reload raises the limit: the messages already counted still count (5002, 6000) */
    r.rate = 5;
    assert_true(local_limit_check(l, &r, 6001, &v));
    assert_int_equal(v.remaining, 2);
    /* another kind starts afresh */
    r.kind = LIMIT_FIXED_WINDOW;
    assert_true(local_limit_check(l, &r, 6002, &v));
    assert_int_equal(v.remaining, 4);
    local_limit_destroy(l);
}

static void test_bad_rules(void **state)
{
    struct local_limit *l = local_limit_create();
    struct limit_verdict v = {.allowed = true, .limit = 5};
    struct limit_rule bad = {.id = 1, .kind = LIMIT_FIXED_WINDOW, .rate = 0, .burst = 0, .window_ms = 1000};
    assert_false(local_limit_check(l, &bad, 0, &v));
    assert_false(v.allowed);
    assert_int_equal(v.limit, 0);
    /* a concurrency rule has no meaning here */
    struct limit_rule cc = {.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 5, .burst = 0, .window_ms = 1000};
    assert_false(local_limit_check(l, &cc, 0, &v));
    assert_false(local_limit_check(NULL, &cc, 0, NULL));
    assert_false(local_limit_check(l, NULL, 0, NULL));
    /* nothing was recorded by those */
    struct limit_rule one = {.id = 3, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 1000};
    assert_true(local_limit_check(l, &one, 0, NULL));
    assert_false(local_limit_check(l, &one, 0, NULL));
    local_limit_destroy(l);
    local_limit_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_memory_store),
        cmocka_unit_test(test_messages_per_window),
        cmocka_unit_test(test_bad_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
