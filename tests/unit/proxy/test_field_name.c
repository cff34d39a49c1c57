/* Unit tests for proxy/field_name.h: header names compared as CGI-like stacks read them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "proxy/field_name.h"

#define N(s) (s), strlen(s)

static void test_underscore(void **state)
{
    (void)state;
    assert_true(field_name_has_underscore(N("X_Tier_User")));
    assert_true(field_name_has_underscore(N("_")));
    assert_false(field_name_has_underscore(N("X-Tier-User")));
    assert_false(field_name_has_underscore("X-A_", 3)); /* by length */
}

static void test_prefix_folded(void **state)
{
    (void)state;
    assert_true(field_name_has_prefix_folded(N("X-Tier-User"), "X-Tier-"));
    assert_true(field_name_has_prefix_folded(N("x_tier_plan"), "X-Tier-"));
    assert_true(field_name_has_prefix_folded(N("X-TIER_"), "X-Tier-"));
    assert_false(field_name_has_prefix_folded(N("X-Tier"), "X-Tier-"));
    assert_false(field_name_has_prefix_folded(N("X-Tiers"), "X-Tier-"));
    assert_false(field_name_has_prefix_folded(N("Y_Tier_User"), "X-Tier-"));
}

static void test_equal_folded(void **state)
{
    (void)state;
    assert_true(field_name_equal_folded(N("x_forwarded_for"), "X-Forwarded-For"));
    assert_true(field_name_equal_folded(N("X-Api_Key"), "X-Api-Key"));
    assert_false(field_name_equal_folded(N("X-Forwarded-Fo"), "X-Forwarded-For"));
    assert_false(field_name_equal_folded(N("X-Forwarded-Forx"), "X-Forwarded-For"));
    assert_true(field_name_equal_folded(N("Host"), "host"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_underscore),
        cmocka_unit_test(test_prefix_folded),
        cmocka_unit_test(test_equal_folded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
