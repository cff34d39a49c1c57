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

static void add_cost(struct catalog *cat, int64_t plan, const char *method, const char *prefix, int64_t n)
{
    struct catalog_cost c = {.plan_id = plan, .route_method = method, .route_prefix = prefix, .cost = n};
    if (catalog_cost_set(cat, &c, NULL))
        fail_msg("cost_set: %s", catalog_errmsg(cat));
}

/* The route's cost (longest prefix; a named method beats "*" on the same prefix) on every
 * rate rule and quota, never on a concurrency slot; a quota named after its period. */
static void test_costs_and_quotas(void **state)
{
    (void)state;
    struct tmpdb db;
    tmpdb_make(&db);
    struct catalog *cat = tmpdb_begin(&db);
    int64_t plan = add_plan(cat, "m");
    add_limit(cat, plan, 'r', 1000, 60000, NULL, NULL);
    add_limit(cat, plan, 'c', 3, 0, NULL, NULL);
    struct catalog_limit quota = {.plan_id = plan, .kind = CATALOG_LIMIT_QUOTA, .amount = 500,
                                  .period = LIMIT_PERIOD_DAY};
    assert_int_equal(catalog_limit_add(cat, &quota, NULL), 0);
    add_cost(cat, plan, "*", "/api", 2);
    add_cost(cat, plan, "POST", "/api", 3);
    add_cost(cat, plan, "*", "/api/batch", 50);
    tmpdb_commit(cat);
    struct snapshot *snap = NULL;
    char err[256];
    assert_int_equal(snapshot_load(db.path, &snap, err, sizeof(err)), 0);
    const struct tier_plan *p = snapshot_find_plan(snap, "m");
    assert_int_equal(p->priority, 0);   /* helpers' add_plan leaves it 0 */
    assert_int_equal(tier_plan_cost(p, "GET", "/other", 6, false), 1);
    assert_int_equal(tier_plan_cost(p, "GET", "/api/x", 6, false), 2);
    assert_int_equal(tier_plan_cost(p, "POST", "/api/x", 6, false), 3);
    assert_int_equal(tier_plan_cost(p, "POST", "/api/batch", 10, false), 50);
    assert_int_equal(tier_plan_cost(p, "GET", "/API/BATCH", 10, true), 50);
    assert_int_equal(tier_plan_cost(p, "GET", "/API/BATCH", 10, false), 1);

    struct limit_rule rules[LIMITER_MAX_RULES];
    const struct tier_limit *checked[LIMITER_MAX_RULES];
    size_t n = tier_plan_rules(p, "PUT", "/api/batch/1", 12, false, 30000, rules, checked, NULL);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind == LIMIT_CONCURRENCY) {
            assert_int_equal(limit_rule_cost(&rules[i]), 1);
        } else {
            assert_int_equal(rules[i].cost, 50);
        }
        if (rules[i].kind == LIMIT_QUOTA) {
            assert_int_equal(rules[i].period, LIMIT_PERIOD_DAY);
            assert_int_equal(rules[i].rate, 500);
            assert_string_equal(checked[i]->name, "m-day");
            assert_int_equal(rules[i].window_ms, 86400000);
            assert_int_equal(limit_rule_validate(&rules[i]), 0);
        }
    }
    snapshot_unref(snap);
    tmpdb_remove(&db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_become_rules_as_the_proxy_sends_them),
        cmocka_unit_test(test_costs_and_quotas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
