/* Unit tests for store/limit.c: kind names, N/WINDOW parsing and formatting, quotas and
 * their calendar periods, rule range checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    r.kind = (enum limit_kind)(LIMIT_QUOTA + 1);
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

/* Costs: never negative; a rate rule or quota refuses one it could never admit; a
 * concurrency rule ignores it. */
static void test_validate_cost(void **state)
{
    struct limit_rule r = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 100, .burst = 5, .window_ms = 60000};
    for (int kind = LIMIT_SLIDING_LOG; kind <= LIMIT_FIXED_WINDOW; kind++) {
        r.kind = (enum limit_kind)kind;
        r.cost = 0;
        assert_int_equal(limit_rule_validate(&r), 0);
        assert_int_equal(limit_rule_cost(&r), 1);
        r.cost = 105;   /* rate + burst: admissible on an empty state */
        assert_int_equal(limit_rule_validate(&r), 0);
        assert_int_equal(limit_rule_cost(&r), 105);
        r.cost = 106;
        assert_int_equal(limit_rule_validate(&r), -EINVAL);
        r.cost = -1;
        assert_int_equal(limit_rule_validate(&r), -EINVAL);
    }
    struct limit_rule cc = {.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 2, .window_ms = 30000, .cost = 500};
    assert_int_equal(limit_rule_validate(&cc), 0);
    cc.cost = -1;
    assert_int_equal(limit_rule_validate(&cc), -EINVAL);
    struct limit_rule q = {.id = 3, .kind = LIMIT_QUOTA, .rate = 50, .period = LIMIT_PERIOD_MONTH, .cost = 50};
    assert_int_equal(limit_rule_validate(&q), 0);
    q.cost = 51;
    assert_int_equal(limit_rule_validate(&q), -EINVAL);
}

static void test_validate_quota(void **state)
{
    struct limit_rule q = {.id = 3, .kind = LIMIT_QUOTA, .rate = 10000, .period = LIMIT_PERIOD_MONTH};
    assert_int_equal(limit_rule_validate(&q), 0);   /* window_ms 0: ignored */
    q.window_ms = INT64_MAX;                         /* any window: ignored, no product */
    assert_int_equal(limit_rule_validate(&q), 0);
    q.rate = LIMIT_MAX_PRODUCT - 1;
    assert_int_equal(limit_rule_validate(&q), 0);
    q.rate = LIMIT_MAX_PRODUCT;
    assert_int_equal(limit_rule_validate(&q), -EINVAL);
    q.rate = 10;
    q.burst = 1;
    assert_int_equal(limit_rule_validate(&q), -EINVAL);
    q.burst = 0;
    q.period = LIMIT_PERIOD_NONE;
    assert_int_equal(limit_rule_validate(&q), -EINVAL);
    q.period = (enum limit_period)4;
    assert_int_equal(limit_rule_validate(&q), -EINVAL);
    /* a period on another kind is a mistake */
    struct limit_rule r = {.id = 1, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 1000, .period = LIMIT_PERIOD_DAY};
    assert_int_equal(limit_rule_validate(&r), -EINVAL);
    assert_string_equal(limit_kind_name(LIMIT_QUOTA), "quota");
    enum limit_kind k;
    assert_int_equal(limit_kind_parse("quota", &k), -EINVAL);   /* not an --algorithm */
}

static void test_quota_parse(void **state)
{
    static const struct { const char *text; int64_t n; enum limit_period p; } good[] = {
        {"10000/month", 10000, LIMIT_PERIOD_MONTH}, {"50/week", 50, LIMIT_PERIOD_WEEK},
        {"1/day", 1, LIMIT_PERIOD_DAY}, {"4503599627370495/day", LIMIT_MAX_PRODUCT - 1, LIMIT_PERIOD_DAY},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t n = 0;
        enum limit_period p = LIMIT_PERIOD_NONE;
        if (limit_quota_parse(good[i].text, &n, &p) != 0)
            fail_msg("\"%s\" was rejected", good[i].text);
        assert_int_equal(n, good[i].n);
        assert_int_equal(p, good[i].p);
        char buf[48];
        assert_string_equal(limit_quota_format(n, p, buf, sizeof(buf)), good[i].text);
    }
    static const char *const bad[] = {
        "", "10", "10/", "/month", "0/month", "-1/month", "10/months", "10/Month", "10/1month", "10/min",
        "10/year", "10/day ", " 10/day", "10 /day", "4503599627370496/day", "99999999999999999999/day",
        "10/d", "1.5/day",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t n = 7;
        enum limit_period p = LIMIT_PERIOD_WEEK;
        if (limit_quota_parse(bad[i], &n, &p) != -EINVAL)
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_int_equal(n, 7);
        assert_int_equal(p, LIMIT_PERIOD_WEEK);
    }
    int64_t n;
    enum limit_period p;
    assert_int_equal(limit_quota_parse(NULL, &n, &p), -EINVAL);
    assert_string_equal(limit_period_name(LIMIT_PERIOD_DAY), "day");
    assert_string_equal(limit_period_name(LIMIT_PERIOD_WEEK), "week");
    assert_string_equal(limit_period_name(LIMIT_PERIOD_MONTH), "month");
    assert_string_equal(limit_period_name(LIMIT_PERIOD_NONE), "none");
    assert_string_equal(limit_period_name((enum limit_period)9), "unknown");
}

static void expect_period(enum limit_period p, int64_t at, int64_t start, int64_t end)
{
    if (limit_period_start_ms(p, at) != start || limit_period_end_ms(p, at) != end)
        fail_msg("%s at %lld: [%lld, %lld), want [%lld, %lld)", limit_period_name(p), (long long)at,
                 (long long)limit_period_start_ms(p, at), (long long)limit_period_end_ms(p, at), (long long)start,
                 (long long)end);
}

/* Calendar periods at their edges (values from Python's datetime, UTC). */
static void test_periods_edges(void **state)
{
    const int64_t D = 86400000;
    /* the end of a month: 2027-01-31 23:59:59.999 -> 2027-02-01 (February 2027: 28 days) */
    expect_period(LIMIT_PERIOD_MONTH, 1801440000000 - 1, 1798761600000, 1801440000000);
    expect_period(LIMIT_PERIOD_MONTH, 1801440000000, 1801440000000, 1803859200000);
    /* a leap day: 2028-02-28 -> 02-29 -> 03-01 */
    expect_period(LIMIT_PERIOD_DAY, 1835395200000 - 1, 1835308800000, 1835395200000);
    expect_period(LIMIT_PERIOD_DAY, 1835395200000, 1835395200000, 1835481600000);
    expect_period(LIMIT_PERIOD_MONTH, 1835395200000 + 5, 1832976000000, 1835481600000);   /* 29 days */
    expect_period(LIMIT_PERIOD_MONTH, 1835481600000, 1835481600000, 1835481600000 + 31 * D);
    /* centuries: 2100 is no leap year, 2000 is */
    expect_period(LIMIT_PERIOD_MONTH, 4105123200000, 4105123200000, 4107542400000);
    expect_period(LIMIT_PERIOD_MONTH, 949363200000, 949363200000, 951868800000);
    /* a week: Sunday 2027-01-10 23:59:59.999 is in the week of Monday 01-04; Monday
     * 2027-01-11 00:00 starts the next */
    expect_period(LIMIT_PERIOD_WEEK, 1799625600000 - 1, 1799020800000, 1799625600000);
    expect_period(LIMIT_PERIOD_WEEK, 1799625600000, 1799625600000, 1799625600000 + 7 * D);
    expect_period(LIMIT_PERIOD_WEEK, 0, -259200000, -259200000 + 7 * D);   /* 1970-01-01, a Thursday */
    /* December to January */
    expect_period(LIMIT_PERIOD_MONTH, 1798761600000 - 1, 1798761600000 - 31 * D, 1798761600000);
    assert_int_equal(limit_period_start_ms(LIMIT_PERIOD_NONE, 5), -1);
    assert_int_equal(limit_period_end_ms((enum limit_period)7, 5), -1);
}

/* Against the C library's calendar (gmtime_r / timegm) at random times, 1970..2200. */
static void test_periods_against_libc(void **state)
{
    srand(77);
    for (int i = 0; i < 200000; i++) {
        int64_t ms = ((int64_t)rand() << 20 ^ rand()) % (7258118400000LL);
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        assert_non_null(gmtime_r(&secs, &tm));
        struct tm day = tm;
        day.tm_hour = day.tm_min = day.tm_sec = 0;
        int64_t day_start = (int64_t)timegm(&day) * 1000;
        expect_period(LIMIT_PERIOD_DAY, ms, day_start, day_start + 86400000);
        int back = (tm.tm_wday + 6) % 7;   /* days since Monday */
        expect_period(LIMIT_PERIOD_WEEK, ms, day_start - back * 86400000LL, day_start + (7 - back) * 86400000LL);
        struct tm first = day;
        first.tm_mday = 1;
        struct tm next = first;
        next.tm_mon += 1;   /* timegm normalizes December + 1 */
        expect_period(LIMIT_PERIOD_MONTH, ms, (int64_t)timegm(&first) * 1000, (int64_t)timegm(&next) * 1000);
    }
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
        cmocka_unit_test(test_validate_cost),
        cmocka_unit_test(test_validate_quota),
        cmocka_unit_test(test_quota_parse),
        cmocka_unit_test(test_periods_edges),
        cmocka_unit_test(test_periods_against_libc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
