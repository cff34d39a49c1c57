/* The snapshot: key lookup by hash, revoked keys absent, plans with named limits, and the
 * route selection the proxy runs per request. */
#include "helpers.h"

#include <errno.h>

#include "tiers/snapshot.h"

struct fixture {
    struct tmpdb db;
    struct snapshot *snap;
    int64_t free_rate, free_conc, free_rate2, route_get_v1, route_any_v1, route_any_search,
        route_get_v1_conc, route_post_v1;
    int64_t revoked_key;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    tmpdb_make(&f->db);
    struct catalog *cat = tmpdb_begin(&f->db);
    int64_t free_plan = add_plan(cat, "free");
    int64_t pro = add_plan(cat, "pro");
    f->free_rate = add_limit(cat, free_plan, 'r', 100, 60000, NULL, NULL);
    f->free_conc = add_limit(cat, free_plan, 'c', 10, 0, NULL, NULL);
    f->route_get_v1 = add_limit(cat, free_plan, 'r', 10, 1000, "GET", "/v1");
    f->route_get_v1_conc = add_limit(cat, free_plan, 'c', 2, 0, "GET", "/v1");
    f->route_any_v1 = add_limit(cat, free_plan, 'r', 20, 1000, "*", "/v1");
    f->route_post_v1 = add_limit(cat, free_plan, 'r', 5, 1000, "POST", "/v1");
    f->route_any_search = add_limit(cat, free_plan, 'r', 1, 1000, "*", "/v1/search");
    f->free_rate2 = add_limit(cat, free_plan, 'r', 1000, 3600000, NULL, NULL);
    add_limit(cat, pro, 'r', 20000, 60000, NULL, NULL);
    add_user(cat, "alice", free_plan);
    add_user(cat, "bob", pro);
    add_user(cat, "carol", pro);
    add_key(cat, "alice", "tp_alice_1");
    add_key(cat, "alice", "tp_alice_2");
    add_key(cat, "bob", "tp_bob");
    f->revoked_key = add_key(cat, "bob", "tp_bob_old");
    assert_int_equal(catalog_key_revoke(cat, f->revoked_key), 0);
    add_key(cat, "carol", "tp_carol");
    assert_int_equal(catalog_user_remove(cat, "carol", NULL), 0);
    tmpdb_commit(cat);

    char err[256];
    int r = snapshot_load(f->db.path, &f->snap, err, sizeof(err));
    if (r)
        fail_msg("snapshot_load: %s", err);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    snapshot_unref(f->snap);
    tmpdb_remove(&f->db);
    free(f);
    return 0;
}

static void test_counts(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(snapshot_user_count(f->snap), 2);
    assert_int_equal(snapshot_key_count(f->snap), 3);   /* revoked and removed-user keys absent */
    assert_int_equal(snapshot_plan_count(f->snap), 2);
}

static void test_find_key(void **state)
{
    struct fixture *f = *state;
    const struct tier_user *u = snapshot_find_key(f->snap, "tp_alice_2", 10);
    assert_non_null(u);
    assert_string_equal(u->id, "alice");
    assert_string_equal(u->plan->name, "free");
    u = snapshot_find_key(f->snap, "tp_bob", 6);
    assert_non_null(u);
    assert_string_equal(u->plan->name, "pro");
    /* The length is the key's: a prefix of a key is another key. */
    assert_null(snapshot_find_key(f->snap, "tp_alice_2", 9));
    assert_null(snapshot_find_key(f->snap, "tp_nobody", 9));
    assert_null(snapshot_find_key(f->snap, "", 0));
}

static void test_revoked_key_absent(void **state)
{
    struct fixture *f = *state;
    assert_null(snapshot_find_key(f->snap, "tp_bob_old", 10));
    /* A removed user's keys were revoked with them. */
    assert_null(snapshot_find_key(f->snap, "tp_carol", 8));
    assert_null(snapshot_find_user(f->snap, "carol"));
    assert_non_null(snapshot_find_user(f->snap, "bob"));
}

static void test_plans_and_limit_names(void **state)
{
    struct fixture *f = *state;
    const struct tier_plan *p = snapshot_find_plan(f->snap, "free");
    assert_non_null(p);
    assert_null(snapshot_find_plan(f->snap, "gold"));
    assert_int_equal(p->n_limits, 8);
    /* Names from plan, route and window (never a limit id), as the ietf headers show them. */
    const struct {
        int64_t id;
        const char *name;
    } names[] = {
        {f->free_rate, "free-1min"},          {f->free_conc, "free-concurrency"},
        {f->route_get_v1, "free-GET /v1-1s"}, {f->route_get_v1_conc, "free-GET /v1-concurrency"},
        {f->route_any_v1, "free-* /v1-1s"},   {f->route_post_v1, "free-POST /v1-1s"},
        {f->route_any_search, "free-* /v1/search-1s"}, {f->free_rate2, "free-1h"},
    };
    for (size_t i = 0; i < p->n_limits; i++) {
        const struct tier_limit *l = &p->limits[i];
        assert_int_equal(l->rule.id, l->id);
        bool named = false;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (names[k].id == l->id) {
                assert_string_equal(l->name, names[k].name);
                named = true;
            }
        }
        assert_true(named);
        if (l->id == f->free_rate) {
            assert_int_equal(l->kind, TIER_LIMIT_RATE);
            assert_int_equal(l->rule.rate, 100);
            assert_int_equal(l->rule.window_ms, 60000);
            assert_false(l->has_route);
        }
        if (l->id == f->free_conc) {
            assert_int_equal(l->kind, TIER_LIMIT_CONCURRENCY);
            assert_int_equal(l->rule.rate, 10);
        }
        if (l->id == f->route_get_v1) {
            assert_true(l->has_route);
            assert_string_equal(l->route_method, "GET");
            assert_string_equal(l->route_prefix, "/v1");
            assert_int_equal(l->route_prefix_len, 3);
        }
    }
}

/* Runs tier_plan_select and checks the exact set of limit ids chosen. */
static void expect_select(const struct tier_plan *p, const char *method, const char *path,
                          const int64_t *want, size_t n_want)
{
    const struct tier_limit *out[16];
    size_t n = tier_plan_select(p, method, path, strlen(path), out, 16);
    if (n != n_want)
        fail_msg("%s %s: %zu limits selected, want %zu", method, path, n, n_want);
    for (size_t i = 0; i < n_want; i++) {
        bool found = false;
        for (size_t j = 0; j < n; j++)
            found |= out[j]->id == want[i];
        if (!found)
            fail_msg("%s %s: limit %lld not selected", method, path, (long long)want[i]);
    }
}

static void test_select_routes(void **state)
{
    struct fixture *f = *state;
    const struct tier_plan *p = snapshot_find_plan(f->snap, "free");
    int64_t base[] = {f->free_rate, f->free_conc, f->free_rate2};
    /* No route matches: the route-less limits only. */
    expect_select(p, "GET", "/v2/x", base, 3);
    expect_select(p, "GET", "/", base, 3);
    /* GET /v1 beats * /v1 on the same prefix; both GET /v1 limits apply. */
    int64_t get_v1[] = {f->free_rate, f->free_conc, f->free_rate2, f->route_get_v1, f->route_get_v1_conc};
    expect_select(p, "GET", "/v1", get_v1, 5);
    expect_select(p, "GET", "/v1/users/7", get_v1, 5);
    expect_select(p, "GET", "/v1?page=2", get_v1, 5);
    /* Plain byte prefix, like an nginx prefix location: /v1x is under "/v1". */
    expect_select(p, "GET", "/v1x", get_v1, 5);
    /* Other methods: their own route if any, else the "*" one. */
    int64_t post_v1[] = {f->free_rate, f->free_conc, f->free_rate2, f->route_post_v1};
    expect_select(p, "POST", "/v1/items", post_v1, 4);
    int64_t any_v1[] = {f->free_rate, f->free_conc, f->free_rate2, f->route_any_v1};
    expect_select(p, "DELETE", "/v1/items", any_v1, 4);
    /* The longest prefix wins, even over a method-specific shorter one. */
    int64_t search[] = {f->free_rate, f->free_conc, f->free_rate2, f->route_any_search};
    expect_select(p, "GET", "/v1/search?q=x", search, 4);
    /* Methods are case-sensitive, as in HTTP. */
    expect_select(p, "get", "/v1", any_v1, 4);
}

/* path_case = insensitive: route prefixes compare in any ASCII case; methods do not. */
static void test_select_routes_ignoring_case(void **state)
{
    struct fixture *f = *state;
    const struct tier_plan *p = snapshot_find_plan(f->snap, "free");
    const struct tier_limit *out[16];
    assert_int_equal(tier_plan_select_case(p, "GET", "/V1/users", 9, true, out, 16), 5);
    assert_int_equal(tier_plan_select_case(p, "GET", "/V1/users", 9, false, out, 16), 3);
    size_t n = tier_plan_select_case(p, "GET", "/v1/SEARCH", 10, true, out, 16);
    assert_int_equal(n, 4);
    bool search = false;
    for (size_t i = 0; i < n; i++)
        search |= out[i]->id == f->route_any_search;
    assert_true(search);
    assert_int_equal(tier_plan_select_case(p, "get", "/v1", 3, true, out, 16), 4); /* the "*" route */
}

static void test_select_reports_count_beyond_max(void **state)
{
    struct fixture *f = *state;
    const struct tier_plan *p = snapshot_find_plan(f->snap, "free");
    const struct tier_limit *out[2] = {NULL, NULL};
    assert_int_equal(tier_plan_select(p, "GET", "/v1", 3, out, 2), 5);
    assert_non_null(out[0]);
    assert_non_null(out[1]);
    assert_int_equal(tier_plan_select(NULL, "GET", "/", 1, out, 2), 0);
}

static void test_refcount(void **state)
{
    struct fixture *f = *state;
    struct snapshot *extra = snapshot_ref(f->snap);
    assert_ptr_equal(extra, f->snap);
    snapshot_unref(extra);
    /* Still alive: the fixture's reference remains. */
    assert_non_null(snapshot_find_key(f->snap, "tp_bob", 6));
}

static void test_load_errors(void **state)
{
    (void)state;
    struct snapshot *snap = NULL;
    char err[256];
    assert_int_equal(snapshot_load("/nonexistent/plans.db", &snap, err, sizeof(err)), -ENOENT);
    assert_null(snap);
    assert_true(strlen(err) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoked_key_absent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plans_and_limit_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_routes_ignoring_case, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_reports_count_beyond_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refcount, setup, teardown),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
