/* tiers/limit_bounds.c: the route prefixes tierctl refuses, the most limits one request
 * of a plan can meet, and the snapshot and catalog checks built on it. */
#include "helpers.h"

#include "store/limiter.h"
#include "tiers/limit_bounds.h"
#include "tiers/snapshot.h"

static void test_prefixes_no_request_can_match(void **state)
{
    static const char *const refused[] = {
        "/a\\b", "/a%00", "/a%2Fb", "/a%2f", "/a%5cb", "/a//b", "//", "/a/./b", "/a/../b",
        "/a/%2e/b", "/a/.%2E/b", "/%75pload", "/v%31",
    };
    char err[512];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        err[0] = '\0';
        assert_int_equal(tier_route_prefix_check(refused[i], err, sizeof(err)), -1);
        assert_non_null(strstr(err, refused[i]));
        assert_null(strchr(err, '\n'));
    }
    /* the hint names the spelling requests are matched in */
    assert_int_equal(tier_route_prefix_check("/%75pload", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "\"/upload\""));
    static const char *const kept[] = {
        "/", "/v1", "/v1/", "/a/.well-known", "/a/..b", "/a/.", "/a%20b", "/caf%C3%A9", "/a%3Fb", "/~u",
    };
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        assert_int_equal(tier_route_prefix_check(kept[i], err, sizeof(err)), 0);
}

static void test_worst_rules(void **state)
{
    struct tier_route_ref refs[] = {
        {"GET", "/v1"}, {"*", "/v1"}, {"GET", "/v1"}, {"POST", "/v1"}, {"GET", "/V1"}, {"GET", "/v2"},
    };
    /* GET /v1 and /V1 are one route when paths compare ignoring case: 3 */
    assert_int_equal(tier_worst_rules(2, refs, 6), 5);
    assert_int_equal(tier_worst_rules(4, NULL, 0), 4);
}

static int64_t plan_with(struct catalog *cat, const char *name, int plan_wide, int on_route)
{
    int64_t plan = add_plan(cat, name);
    for (int i = 0; i < plan_wide; i++)
        add_limit(cat, plan, 'r', 10 + i, 1000, NULL, NULL);
    add_limit(cat, plan, 'w', 5, 1000, NULL, NULL);   /* no limiter rule: not counted */
    for (int i = 0; i < on_route; i++)
        add_limit(cat, plan, 'r', 100 + i, 60000, "GET", "/v1");
    add_limit(cat, plan, 'r', 1, 1000, "GET", "/v2");
    return plan;
}

static void test_catalog_and_snapshot_refuse_17(void **state)
{
    struct tmpdb db;
    tmpdb_make(&db);
    struct catalog *cat = tmpdb_begin(&db);
    plan_with(cat, "fits", 2, LIMITER_MAX_RULES - 2);
    char err[512] = "";
    assert_int_equal(tier_catalog_check_bounds(cat, err, sizeof(err)), 0);
    struct snapshot *snap = NULL;
    tmpdb_commit(cat);
    assert_int_equal(snapshot_load(db.path, &snap, err, sizeof(err)), 0);
    snapshot_unref(snap);

    cat = tmpdb_begin(&db);
    plan_with(cat, "over", 3, LIMITER_MAX_RULES - 2);
    assert_int_equal(tier_catalog_check_bounds(cat, err, sizeof(err)), CATALOG_INVALID);
    assert_non_null(strstr(err, "plan \"over\""));
    assert_non_null(strstr(err, "17 limits"));
    tmpdb_commit(cat);
    snap = NULL;
    assert_true(snapshot_load(db.path, &snap, err, sizeof(err)) < 0);
    assert_null(snap);
    assert_non_null(strstr(err, "plan \"over\""));
    assert_non_null(strstr(err, "17 limits"));
    tmpdb_remove(&db);
}

/* A cost meets a limit it can share a request with; a longer cost prefix covering the
 * limit's whole route takes the shorter one's place there. */
static void test_cost_meets_limit(void **state)
{
    (void)state;
    struct tier_cost_ref costs[] = {
        {"*", "/api", 5}, {"POST", "/api/cheap", 1}, {"GET", "/other", 3},
    };
    const size_t n = sizeof(costs) / sizeof(costs[0]);
    assert_true(tier_cost_meets_limit(&costs[0], costs, n, NULL, NULL));            /* plan-wide */
    assert_true(tier_cost_meets_limit(&costs[0], costs, n, "*", "/api/x"));         /* under it */
    assert_true(tier_cost_meets_limit(&costs[0], costs, n, "GET", "/"));            /* over it */
    assert_false(tier_cost_meets_limit(&costs[0], costs, n, "*", "/elsewhere"));   /* disjoint */
    assert_false(tier_cost_meets_limit(&costs[2], costs, n, "POST", "/other"));    /* methods differ */
    /* POST /api/cheap/... costs 1, not 5 */
    assert_false(tier_cost_meets_limit(&costs[0], costs, n, "POST", "/api/cheap/x"));
    /* but GET /api/cheap/... still costs 5 */
    assert_true(tier_cost_meets_limit(&costs[0], costs, n, "GET", "/api/cheap/x"));
    assert_true(tier_cost_meets_limit(&costs[0], costs, n, "*", "/api/cheap"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost_meets_limit),
        cmocka_unit_test(test_prefixes_no_request_can_match),
        cmocka_unit_test(test_worst_rules),
        cmocka_unit_test(test_catalog_and_snapshot_refuse_17),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
