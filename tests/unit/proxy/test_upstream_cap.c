/* Unit tests for proxy/upstream_cap.c: the priority thresholds (in_flight * 10 <
 * cap * (P + 1)), no cap at 0, and a shared counter that never passes a taker's threshold
 * under racing threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>

#include "proxy/upstream_cap.h"

/* The most a priority ever has in flight: the first in_flight it is refused at. */
static int64_t first_refused(int64_t cap, int priority)
{
    int64_t n = 0;
    while (upstream_cap_admits(n, cap, priority))
        n++;
    return n;
}

static void test_thresholds_of_a_cap_of_20(void **state)
{
    (void)state;
    /* cap * (P + 1) / 10: 2, 4, ..., 20 */
    for (int p = 0; p <= 9; p++)
        assert_int_equal(first_refused(20, p), 2 * (p + 1));
}

static void test_fractions_are_compared_exactly(void **state)
{
    (void)state;
    /* cap 7: P0 = 0.7 -> one may go (0 < 0.7), none with one in flight */
    assert_int_equal(first_refused(7, 0), 1);
    assert_int_equal(first_refused(7, 4), 4);    /* 3.5 */
    assert_int_equal(first_refused(7, 5), 5);    /* 4.2 */
    assert_int_equal(first_refused(7, 9), 7);
    /* cap 1: every priority may have the one place when it is free */
    for (int p = 0; p <= 9; p++)
        assert_int_equal(first_refused(1, p), 1);
    assert_int_equal(first_refused(1000000000, 9), 1000000000);
}

static void test_no_cap_admits_everything(void **state)
{
    (void)state;
    assert_true(upstream_cap_admits(0, 0, 0));
    assert_true(upstream_cap_admits(1000000, 0, 0));
    struct upstream_cap c = { 0 };
    bool counted = true;
    assert_true(upstream_cap_take(&c, 0, &counted));
    assert_false(counted);
    assert_int_equal(atomic_load(&c.inflight), 0);
}

static void test_priorities_out_of_range_clamp(void **state)
{
    (void)state;
    assert_int_equal(first_refused(20, -3), first_refused(20, 0));
    assert_int_equal(first_refused(20, 42), first_refused(20, 9));
}

static void test_take_and_give(void **state)
{
    (void)state;
    struct upstream_cap c = { 0 };
    upstream_cap_set(&c, 20);
    bool counted = false;
    for (int i = 0; i < 12; i++) {
        assert_true(upstream_cap_take(&c, 5, &counted));
        assert_true(counted);
    }
    assert_false(upstream_cap_take(&c, 5, &counted));   /* 12 * 10 < 120 fails */
    assert_false(counted);
    assert_false(upstream_cap_take(&c, 0, &counted));
    assert_true(upstream_cap_take(&c, 9, &counted));    /* 13th: priority 9 still goes */
    upstream_cap_give(&c);
    upstream_cap_give(&c);
    assert_true(upstream_cap_take(&c, 5, &counted));
    assert_int_equal(atomic_load(&c.inflight), 12);
}

struct racer {
    struct upstream_cap *cap;
    _Atomic int64_t *now, *peak;
    int priority;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < 200000; i++) {
        bool counted;
        if (!upstream_cap_take(r->cap, r->priority, &counted))
            continue;
        int64_t n = atomic_fetch_add(r->now, 1) + 1;
        int64_t p = atomic_load(r->peak);
        while (n > p && !atomic_compare_exchange_weak(r->peak, &p, n))
            ;
        atomic_fetch_sub(r->now, 1);
        upstream_cap_give(r->cap);
    }
    return NULL;
}

static void test_racing_takers_never_pass_the_cap(void **state)
{
    (void)state;
    struct upstream_cap c = { 0 };
    upstream_cap_set(&c, 3);
    _Atomic int64_t now = 0, peak = 0;
    struct racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){ &c, &now, &peak, 9 };
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_true(atomic_load(&peak) <= 3);
    assert_int_equal(atomic_load(&c.inflight), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thresholds_of_a_cap_of_20),
        cmocka_unit_test(test_fractions_are_compared_exactly),
        cmocka_unit_test(test_no_cap_admits_everything),
        cmocka_unit_test(test_priorities_out_of_range_clamp),
        cmocka_unit_test(test_take_and_give),
        cmocka_unit_test(test_racing_takers_never_pass_the_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
