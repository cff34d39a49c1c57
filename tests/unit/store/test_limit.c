/* Unit tests for store/limit.c: kind names, N/WINDOW parsing and formatting, rule
 * range checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/limit.h"

static void expect_rate(const char *text, int64_t count, int64_t window_ms)
{
    int64_t c = -1, w = -1;
    int r = limit_rate_parse(text, &c, &w);
    if (r != 0)
        fail_msg("\"%s\" was rejected", text);
    assert_int_equal(c, count);
    assert_int_equal(w, window_ms);
}

static void expect_bad(const char *text)
{
    int64_t c = 7, w = 7;
    if (limit_rate_parse(text, &c, &w) != -EINVAL)
        fail_msg("\"%s\" was accepted", text);
    /* a failed parse leaves the outputs alone */
    assert_int_equal(c, 7);
    assert_int_equal(w, 7);
}

static void test_parse_units(void **state)
{
    expect_rate("100/min", 100, 60000);
    expect_rate("7/s", 7, 1000);
    expect_rate("1/h", 1, 3600000);
    expect_rate("5/day", 5, 86400000);
    expect_rate("10/15s", 10, 15000);
    expect_rate("3000/1min", 3000, 60000);
    expect_rate("5/2h", 5, 7200000);
    /* the long and short spellings the brief allows */
    expect_rate("1/sec", 1, 1000);
    expect_rate("1/second", 1, 1000);
    expect_rate("1/m", 1, 60000);
    expect_rate("1/minute", 1, 60000);
    expect_rate("1/hour", 1, 3600000);
    expect_rate("1/d", 1, 86400000);
    expect_rate("2/3d", 2, 3 * 86400000LL);
    expect_rate("5/1500ms", 5, 1500);
}

static void test_parse_rejects(void **state)
{
    const char *bad[] = {
        "", "/", "100", "100/", "/min", "0/min", "-1/min", "+1/min", " 1/min", "1 /min", "1/ min",
        "1/min ", "1/0s", "1/-5s", "1/+5s", "1/15", "1/mins2", "1/minutes/", "1/MIN", "1/x", "1/5 s",
        "1.5/min", "1/1.5min", "abc/min", "1/min\n", "0x10/s", "1e3/s",
        /* overflow and the exact-integer bound */
        "99999999999999999999/s", "1/99999999999999999999s", "9223372036854775807/day",
        "1/9223372036854775807day", "4503599627371/s",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_bad(bad[i]);
    assert_int_equal(limit_rate_parse(NULL, NULL, NULL), -EINVAL);
}

static void test_parse_bound(void **state)
{
    /* count * window_ms must stay under 2^52 */
    int64_t c, w;
    assert_int_equal(limit_rate_parse("4503599627370/s", &c, &w), 0);       /* 4503599627370000 < 2^52 */
    assert_int_equal(limit_rate_parse("4503599627371/s", &c, &w), -EINVAL); /* 4503599627371000 >= 2^52 */
    assert_int_equal(limit_rate_parse("4503599627370495/ms", &c, &w), 0);
    assert_int_equal(limit_rate_parse("4503599627370496/ms", &c, &w), -EINVAL);
}

static void expect_format(int64_t count, int64_t window_ms, const char *want)
{
    char buf[64];
    assert_ptr_equal(limit_rate_format(count, window_ms, buf, sizeof(buf)), buf);
    assert_string_equal(buf, want);
    /* the canonical form parses back to the same numbers */
    int64_t c, w;
    assert_int_equal(limit_rate_parse(buf, &c, &w), 0);
    assert_int_equal(c, count);
    assert_int_equal(w, window_ms);
}

static void test_format(void **state)
{
    expect_format(100, 60000, "100/min");
    expect_format(10, 15000, "10/15s");
    expect_format(1, 3600000, "1/h");
    expect_format(5, 86400000, "5/day");
    expect_format(7, 1000, "7/s");
    expect_format(3000, 60000, "3000/min");
    expect_format(5, 7200000, "5/2h");
    expect_format(5, 90000, "5/90s");
    expect_format(5, 1500, "5/1500ms");
    expect_format(2, 2 * 86400000LL, "2/2day");
    char small[4];
    limit_rate_format(100, 60000, small, sizeof(small));
    assert_string_equal(small, "100");   /* truncated, still terminated */
}

static void test_window_format(void **state)
{
    /* the same units as the rate, the count always written (ietf item names) */
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {1000, "1s"},   {10000, "10s"},     {60000, "1min"},  {90000, "90s"},
        {120000, "2min"}, {3600000, "1h"}, {7200000, "2h"},  {86400000, "1day"},
        {2 * 86400000LL, "2day"}, {1500, "1500ms"}, {0, "?"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_ptr_equal(limit_window_format(cases[i].ms, buf, sizeof(buf)), buf);
        assert_string_equal(buf, cases[i].want);
    }
}

static void test_kind_names(void **state)
{
    const char *names[] = {"sliding-log", "sliding-window", "token-bucket", "fixed-window"};
    for (int i = 0; i < 4; i++) {
        enum limit_kind a;
        assert_string_equal(limit_kind_name((enum limit_kind)i), names[i]);
        assert_int_equal(limit_kind_parse(names[i], &a), 0);
        assert_int_equal(a, i);
    }
    enum limit_kind a = LIMIT_TOKEN_BUCKET;
    assert_int_equal(limit_kind_parse("Sliding-Log", &a), -EINVAL);
    assert_int_equal(limit_kind_parse("", &a), -EINVAL);
    assert_int_equal(limit_kind_parse(NULL, &a), -EINVAL);
    assert_int_equal(a, LIMIT_TOKEN_BUCKET);
    assert_string_equal(limit_kind_name((enum limit_kind)42), "unknown");
    /* a concurrency rule has a name, but --algorithm cannot ask for one */
    assert_string_equal(limit_kind_name(LIMIT_CONCURRENCY), "concurrency");
    assert_int_equal(limit_kind_parse("concurrency", &a), -EINVAL);
}

static void test_validate(void **state)
{
    struct limit_rule ok = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 100, .burst = 0, .window_ms = 60000};
    assert_int_equal(limit_rule_validate(&ok), 0);
    struct limit_rule r = ok;
    r.rate = 0;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    r = ok;
    r.burst = -1;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    r = ok;
    r.window_ms = 0;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    r = ok;
    r.kind = (enum limit_kind)(LIMIT_CONCURRENCY + 1);
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    /* a concurrency rule: N slots, the lease TTL as window, no burst */
    struct limit_rule cc = {.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 10, .burst = 0, .window_ms = 30000};
    assert_int_equal(limit_rule_validate(&cc), 0);
    cc.burst = 1;
    assert_int_equal(limit_rule_validate(&cc), -EINVAL);
    r = ok;
    r.id = -1;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    /* (rate + burst) * window must stay under 2^52, burst included */
    r = ok;
    r.window_ms = 1;
    r.rate = LIMIT_MAX_PRODUCT - 1;
    assert_int_equal(limit_rule_validate(&r), 0);
    r.burst = 1;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    r = ok;
    r.rate = INT64_MAX;
    r.burst = INT64_MAX;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    r = ok;
    r.window_ms = INT64_MAX;
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    assert_int_equal(limit_rule_validate(NULL), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_units),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_parse_bound),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_window_format),
        cmocka_unit_test(test_kind_names),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
