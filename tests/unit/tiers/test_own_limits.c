/* A user's own limits take the store state (the rule id) of the plan limits they replace,
 * so that what the user used still counts (SPEC "Faults keep their promises"). Pure: limits
 * made here, no catalog. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tiers/own_limits.h"

static struct tier_limit limit(int64_t id, enum tier_limit_kind kind, int64_t window_ms, const char *prefix)
{
    struct tier_limit l = {.id = id, .kind = kind};
    l.rule = (struct limit_rule){.id = id, .kind = LIMIT_SLIDING_LOG, .rate = 5, .window_ms = window_ms};
    if (kind == TIER_LIMIT_QUOTA) {
        l.rule.kind = LIMIT_QUOTA;
        l.rule.period = window_ms == 86400000 ? LIMIT_PERIOD_DAY : LIMIT_PERIOD_MONTH;
    }
    if (prefix) {
        l.has_route = true;
        memcpy(l.route_method, "GET", 4);
        l.route_prefix = prefix;
    }
    return l;
}

static void test_an_own_limit_takes_the_state_of_the_one_it_replaces(void **state)
{
    (void)state;
    struct tier_limit plan[] = {
        limit(1, TIER_LIMIT_RATE, 60000, NULL), limit(2, TIER_LIMIT_QUOTA, 86400000, NULL),
        limit(3, TIER_LIMIT_CONCURRENCY, 0, NULL), limit(4, TIER_LIMIT_RATE, 1000, "/up"),
        limit(5, TIER_LIMIT_WS_MESSAGES, 1000, NULL),
    };
    struct tier_limit own[] = {
        limit(10, TIER_LIMIT_QUOTA, 86400000, NULL), limit(11, TIER_LIMIT_RATE, 1000, "/up"),
        limit(12, TIER_LIMIT_CONCURRENCY, 0, NULL), limit(13, TIER_LIMIT_RATE, 1000, "/down"),
        limit(14, TIER_LIMIT_WS_MESSAGES, 1000, NULL),
    };
    tier_own_limits_take_state(plan, 5, own, 5);
    assert_int_equal(own[0].rule.id, 2);    /* the quota's count */
    assert_int_equal(own[1].rule.id, 4);    /* on its route: the route's */
    assert_int_equal(own[2].rule.id, 3);    /* the slots held */
    assert_int_equal(own[3].rule.id, 13);   /* a route the plan has no limit on: its own */
    assert_int_equal(own[4].rule.id, 14);   /* counted per connection: its own */
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(own[i].id, 10 + (int64_t)i);   /* tierctl's ids stay */
}

static void test_of_a_burst_and_a_sustained_rate_it_takes_its_windows(void **state)
{
    (void)state;
    struct tier_limit plan[] = {limit(1, TIER_LIMIT_RATE, 3600000, NULL), limit(2, TIER_LIMIT_RATE, 1000, NULL)};
    struct tier_limit own[] = {limit(10, TIER_LIMIT_RATE, 1000, NULL)};
    tier_own_limits_take_state(plan, 2, own, 1);
    assert_int_equal(own[0].rule.id, 2);    /* the second, of the same window */
    own[0] = limit(10, TIER_LIMIT_RATE, 60000, NULL);
    tier_own_limits_take_state(plan, 2, own, 1);
    assert_int_equal(own[0].rule.id, 1);    /* no window matches: the first */
    /* two of the user's: each takes one, a window's match first whatever the order */
    struct tier_limit two[] = {limit(10, TIER_LIMIT_RATE, 60000, NULL), limit(11, TIER_LIMIT_RATE, 3600000, NULL)};
    tier_own_limits_take_state(plan, 2, two, 2);
    assert_int_equal(two[1].rule.id, 1);
    assert_int_equal(two[0].rule.id, 2);
    /* three of the user's for two: the last keeps its own */
    struct tier_limit three[] = {limit(10, TIER_LIMIT_RATE, 1000, NULL), limit(11, TIER_LIMIT_RATE, 1000, NULL),
                                 limit(12, TIER_LIMIT_RATE, 1000, NULL)};
    tier_own_limits_take_state(plan, 2, three, 3);
    assert_int_equal(three[0].rule.id, 2);
    assert_int_equal(three[1].rule.id, 1);
    assert_int_equal(three[2].rule.id, 12);
}

static void test_a_user_on_another_plan_takes_that_plans(void **state)
{
    (void)state;
    struct tier_limit first[] = {limit(1, TIER_LIMIT_QUOTA, 86400000, NULL)};
    struct tier_limit second[] = {limit(7, TIER_LIMIT_QUOTA, 86400000, NULL)};
    struct tier_limit own[] = {limit(10, TIER_LIMIT_QUOTA, 86400000, NULL)};
    tier_own_limits_take_state(first, 1, own, 1);
    assert_int_equal(own[0].rule.id, 1);
    tier_own_limits_take_state(second, 1, own, 1);
    assert_int_equal(own[0].rule.id, 7);
    tier_own_limits_take_state(NULL, 0, own, 1);   /* a plan without one: its own again */
    assert_int_equal(own[0].rule.id, 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_own_limit_takes_the_state_of_the_one_it_replaces),
        cmocka_unit_test(test_of_a_burst_and_a_sustained_rate_it_takes_its_windows),
        cmocka_unit_test(test_a_user_on_another_plan_takes_that_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
