/* Unit tests for proxy/health.c: /health is 200 whenever the proxy serves as configured
 * and 503 only when its requests would get 503 (SPEC "Day two"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "proxy/health.h"

#define LOCAL LIMITER_STORE_ERROR_LOCAL
#define OPEN LIMITER_STORE_ERROR_OPEN
#define CLOSED LIMITER_STORE_ERROR_CLOSED

static struct health_verdict decide(enum health_store store, enum health_plans plans, enum limiter_store_error rate,
                                    enum limiter_store_error concurrency)
{
    struct health_input in = { .store = store, .plans = plans, .rate = rate, .concurrency = concurrency };
    return health_decide(&in);
}

static void assert_verdict(struct health_verdict v, unsigned http, const char *status, const char *store)
{
    assert_int_equal(v.http_status, http);
    assert_string_equal(v.status, status);
    assert_string_equal(v.store, store);
}

static void test_all_well_is_ok(void **state)
{
    (void)state;
    struct health_verdict v = decide(HEALTH_STORE_OK, HEALTH_PLANS_OK, CLOSED, CLOSED);
    assert_verdict(v, 200, "ok", "ok");
    assert_string_equal(v.plans, "ok");
    assert_null(v.concurrency);
}

static void test_an_unreachable_store_names_what_decides(void **state)
{
    (void)state;
    assert_verdict(decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, LOCAL, LOCAL), 200, "degraded", "local");
    assert_verdict(decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, OPEN, OPEN), 200, "degraded", "open");
    assert_verdict(decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, CLOSED, CLOSED), 503, "unavailable",
                   "unreachable");
    assert_null(decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, LOCAL, LOCAL).concurrency);
}

static void test_a_store_answering_errors_is_decided_the_same_way(void **state)
{
    (void)state;
    assert_verdict(decide(HEALTH_STORE_ERROR, HEALTH_PLANS_OK, LOCAL, LOCAL), 200, "degraded", "error");
    assert_verdict(decide(HEALTH_STORE_ERROR, HEALTH_PLANS_OK, OPEN, OPEN), 200, "degraded", "error");
    assert_verdict(decide(HEALTH_STORE_ERROR, HEALTH_PLANS_OK, CLOSED, CLOSED), 503, "unavailable", "error");
}

static void test_on_store_error_decides_the_status_and_concurrency_is_named(void **state)
{
    (void)state;
    /* concurrency closed: only plans with a concurrency limit get 503 */
    struct health_verdict v = decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, LOCAL, CLOSED);
    assert_verdict(v, 200, "degraded", "local");
    assert_string_equal(v.concurrency, "closed");
    /* rates closed: nearly every request gets 503 */
    v = decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_OK, CLOSED, LOCAL);
    assert_verdict(v, 503, "unavailable", "unreachable");
    assert_string_equal(v.concurrency, "local");
    v = decide(HEALTH_STORE_ERROR, HEALTH_PLANS_OK, OPEN, LOCAL);
    assert_verdict(v, 200, "degraded", "error");
    assert_string_equal(v.concurrency, "local");
    /* the store answering: nothing to name */
    assert_null(decide(HEALTH_STORE_OK, HEALTH_PLANS_OK, LOCAL, CLOSED).concurrency);
}

static void test_a_cluster_with_some_masters_serves(void **state)
{
    (void)state;
    assert_verdict(decide(HEALTH_STORE_PARTIAL, HEALTH_PLANS_OK, CLOSED, CLOSED), 200, "degraded", "degraded");
    assert_verdict(decide(HEALTH_STORE_PARTIAL, HEALTH_PLANS_OK, LOCAL, LOCAL), 200, "degraded", "degraded");
    assert_null(decide(HEALTH_STORE_PARTIAL, HEALTH_PLANS_OK, LOCAL, CLOSED).concurrency);
}

static void test_no_catalog_is_503_an_unreachable_one_serves(void **state)
{
    (void)state;
    struct health_verdict v = decide(HEALTH_STORE_OK, HEALTH_PLANS_MISSING, LOCAL, LOCAL);
    assert_verdict(v, 503, "unavailable", "ok");
    assert_string_equal(v.plans, "missing");
    v = decide(HEALTH_STORE_OK, HEALTH_PLANS_UNREACHABLE, LOCAL, LOCAL);
    assert_verdict(v, 200, "degraded", "ok");
    assert_string_equal(v.plans, "unreachable");
    assert_verdict(decide(HEALTH_STORE_UNREACHABLE, HEALTH_PLANS_MISSING, LOCAL, LOCAL), 503, "unavailable", "local");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_well_is_ok),
        cmocka_unit_test(test_an_unreachable_store_names_what_decides),
        cmocka_unit_test(test_a_store_answering_errors_is_decided_the_same_way),
        cmocka_unit_test(test_on_store_error_decides_the_status_and_concurrency_is_named),
        cmocka_unit_test(test_a_cluster_with_some_masters_serves),
        cmocka_unit_test(test_no_catalog_is_503_an_unreachable_one_serves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
