/* What the proxy and the replay share: a plan's selected limits as the limiter's rules
 * (the path as routes match it is tested in test_request_target.c). */
#include "helpers.h"

#include "tiers/plan_rules.h"

static void test_limits_become_rules_as_the_proxy_sends_them(void **state)
{
    struct tmpdb db;
    tmpdb_make(&db);
    struct catalog *cat = tmpdb_begin(&db);
    int64_t plan = add_plan(cat, "p");
    int64_t rate = add_limit(cat, plan, 'r', 10, 1000, NULL, NULL);
    int64_t conc = add_limit(cat, plan, 'c', 3, 0, NULL, NULL);
    int64_t ws = add_limit(cat, plan, 'w', 5, 1000, NULL, NULL);
    int64_t route = add_limit(cat, plan, 'r', 1, 1000, "POST", "/up");
    for (int i = 0; i < LIMITER_MAX_RULES - 2; i++)
        add_limit(cat, plan, 'r', 100 + i, 60000, "GET", "/many");
    tmpdb_commit(cat);
    struct snapshot *snap = NULL;
    char err[256];
    assert_int_equal(snapshot_load(db.path, &snap, err, sizeof(err)), 0);
    const struct tier_plan *p = snapshot_find_plan(snap, "p");

    struct limit_rule rules[LIMITER_MAX_RULES];
    const struct tier_limit *checked[LIMITER_MAX_RULES], *pws = NULL;
    size_t n = tier_plan_rules(p, "POST", "/up/x", 5, false, 30000, rules, checked, &pws);
    assert_int_equal(n, 3);
    assert_int_equal(rules[0].id, rate);
    assert_int_equal(rules[1].id, conc);
    assert_int_equal(rules[1].kind, LIMIT_CONCURRENCY);
    assert_int_equal(rules[1].rate, 3);
    assert_int_equal(rules[1].burst, 0);
    assert_int_equal(rules[1].window_ms, 30000);
    assert_int_equal(rules[2].id, route);
    assert_int_equal(checked[2]->id, route);
    assert_non_null(pws);
    assert_int_equal(pws->id, ws);

    n = tier_plan_rules(p, "GET", "/up", 3, false, 30000, rules, checked, NULL);
    assert_int_equal(n, 2);
    /* 2 plan-wide + 14 route limits: the most a snapshot lets one request meet, all checked */
    n = tier_plan_rules(p, "GET", "/many", 5, false, 30000, rules, checked, NULL);
    assert_int_equal(n, LIMITER_MAX_RULES);
    snapshot_unref(snap);
    tmpdb_remove(&db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_become_rules_as_the_proxy_sends_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
