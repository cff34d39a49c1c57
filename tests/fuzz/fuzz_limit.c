/* Fuzzes the rate and route parsers behind tierctl's LIMIT-FLAGS and the catalog checks:
 * limit_rate_parse / limit_rate_format (round trip both ways), limit_quota_parse /
 * limit_quota_format, the calendar periods, limit_kind_parse, limit_rule_validate,
 * catalog_check_route and the other catalog_check_* name checks.
 *
 * Input: the bytes as one NUL-terminated string (the text a user types); the first 32
 * bytes also give raw numbers for format/validate. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/catalog.h"
#include "store/limit.h"

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t take_i64(const uint8_t *data, size_t size, size_t at)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++)
        v = (v << 8) | (at + i < size ? data[at + i] : 0);
    return (int64_t)v;
}

/* A parsed rate is in range, and formats to a canonical text that parses back to it. */
static void check_parsed_rate(int64_t count, int64_t window_ms)
{
    char buf[64], again[64];
    int64_t c2 = 0, w2 = 0;
    CHECK(count >= 1 && window_ms >= 1);
    CHECK(count < LIMIT_MAX_PRODUCT / window_ms + 1);
    CHECK((__int128)count * window_ms < LIMIT_MAX_PRODUCT);
    limit_rate_format(count, window_ms, buf, sizeof(buf));
    CHECK(limit_rate_parse(buf, &c2, &w2) == 0);
    CHECK(c2 == count && w2 == window_ms);
    limit_rate_format(c2, w2, again, sizeof(again));
    CHECK(strcmp(buf, again) == 0);
}

static void fuzz_rate_text(const char *s)
{
    int64_t count = -7, window_ms = -7;
    int r = limit_rate_parse(s, &count, &window_ms);
    CHECK(r == 0 || r == -EINVAL);
    if (r == 0)
        check_parsed_rate(count, window_ms);
}

/* limit_rate_format on any numbers: never writes past buflen, always terminates, and a
 * valid rate round-trips. */
static void fuzz_rate_numbers(int64_t count, int64_t window_ms, size_t buflen)
{
    char *buf = malloc(buflen ? buflen : 1);
    CHECK(buf != NULL);
    CHECK(limit_rate_format(count, window_ms, buf, buflen) == buf);
    if (buflen > 0)
        CHECK(memchr(buf, '\0', buflen) != NULL);
    free(buf);
    if (count >= 1 && window_ms >= 1 && (__int128)count * window_ms < LIMIT_MAX_PRODUCT)
        check_parsed_rate(count, window_ms);
}

static void fuzz_kind_name(const char *s)
{
    enum limit_kind a = (enum limit_kind)99;
    if (limit_kind_parse(s, &a) == 0) {
        CHECK(a != LIMIT_CONCURRENCY && (unsigned)a <= LIMIT_FIXED_WINDOW);
        CHECK(strcmp(limit_kind_name(a), s) == 0);
    }
}

/* A quota's text round-trips; its period bounds hold the time they are asked about. */
static void fuzz_quota_text(const char *s)
{
    int64_t count = -7;
    enum limit_period period = LIMIT_PERIOD_NONE;
    int r = limit_quota_parse(s, &count, &period);
    CHECK(r == 0 || r == -EINVAL);
    if (r != 0)
        return;
    CHECK(count >= 1 && count < LIMIT_MAX_PRODUCT && period >= LIMIT_PERIOD_DAY && period <= LIMIT_PERIOD_MONTH);
    char buf[64];
    int64_t c2 = 0;
    enum limit_period p2 = LIMIT_PERIOD_NONE;
    limit_quota_format(count, period, buf, sizeof(buf));
    CHECK(limit_quota_parse(buf, &c2, &p2) == 0 && c2 == count && p2 == period);
}

static void fuzz_periods(int64_t ms)
{
    const int64_t day = 86400000;
    ms = (int64_t)((uint64_t)ms % ((uint64_t)1 << 47));   /* up to year 6429 */
    for (int p = LIMIT_PERIOD_DAY; p <= LIMIT_PERIOD_MONTH; p++) {
        int64_t start = limit_period_start_ms((enum limit_period)p, ms), end = limit_period_end_ms((enum limit_period)p, ms);
        CHECK(start <= ms && ms < end && start % day == 0);
        CHECK(limit_period_start_ms((enum limit_period)p, start) == start);
        CHECK(limit_period_start_ms((enum limit_period)p, end) == end);
        int64_t days = (end - start) / day;
        CHECK(p == LIMIT_PERIOD_DAY ? days == 1 : p == LIMIT_PERIOD_WEEK ? days == 7 : days >= 28 && days <= 31);
    }
}

static void fuzz_validate(const uint8_t *data, size_t size)
{
    struct limit_rule rule = {
        .id = take_i64(data, size, 0),
        .kind = (enum limit_kind)(size > 0 ? data[0] % 8 : 0),
        .rate = take_i64(data, size, 8),
        .burst = take_i64(data, size, 16),
        .window_ms = take_i64(data, size, 24),
        .period = (enum limit_period)(size > 1 ? data[1] % 5 : 0),
        .cost = size > 2 ? (int64_t)(int8_t)data[2] : 0,
    };
    if (limit_rule_validate(&rule) == 0) {
        CHECK(rule.rate >= 1 && rule.burst >= 0 && rule.id >= 0 && rule.cost >= 0);
        if (rule.kind == LIMIT_QUOTA) {
            CHECK(rule.burst == 0 && rule.rate < LIMIT_MAX_PRODUCT && limit_rule_cost(&rule) <= rule.rate);
            CHECK(rule.period >= LIMIT_PERIOD_DAY && rule.period <= LIMIT_PERIOD_MONTH);
        } else {
            CHECK(rule.window_ms >= 1 && rule.period == LIMIT_PERIOD_NONE);
            CHECK((__int128)(rule.rate + rule.burst) * rule.window_ms < LIMIT_MAX_PRODUCT);
            CHECK(rule.kind == LIMIT_CONCURRENCY || limit_rule_cost(&rule) <= rule.rate + rule.burst);
        }
    }
}

/* "METHOD /prefix" split at the first space, as import does; the check accepts only what
 * the snapshot and the route matcher can hold. */
static void fuzz_route(const char *s)
{
    char err[256];
    const char *space = strchr(s, ' ');
    if (space == NULL)
        return;
    size_t m = (size_t)(space - s);
    char *method = strndup(s, m);
    CHECK(method != NULL);
    const char *prefix = space + 1;
    err[0] = '\0';
    int r = catalog_check_route(method, prefix, err, sizeof(err));
    if (r == 0) {
        CHECK(m >= 1 && m <= CATALOG_METHOD_MAX);
        if (strcmp(method, "*") != 0)
            for (size_t i = 0; i < m; i++)
                CHECK((method[i] >= 'A' && method[i] <= 'Z') || method[i] == '-' || method[i] == '_');
        CHECK(prefix[0] == '/' && strlen(prefix) <= CATALOG_PREFIX_MAX);
        for (const unsigned char *p = (const unsigned char *)prefix; *p; p++)
            CHECK(*p > 0x20 && *p < 0x7f && *p != '?' && *p != '#');
    } else {
        CHECK(r == CATALOG_INVALID && err[0] != '\0' && strchr(err, '\n') == NULL);
    }
    free(method);
}

static void fuzz_names(const char *s)
{
    char err[256];
    enum catalog_limit_kind kind;
    size_t n = strlen(s);
    if (catalog_check_plan_name(s, err, sizeof(err)) == 0)
        CHECK(n >= 1 && n <= CATALOG_NAME_MAX);
    if (catalog_check_user_id(s, err, sizeof(err)) == 0)
        CHECK(n >= 1 && n <= CATALOG_USER_ID_MAX);
    if (catalog_check_label(s, err, sizeof(err)) == 0)
        CHECK(n <= CATALOG_LABEL_MAX);
    if (catalog_check_time(s, err, sizeof(err)) == 0)
        CHECK(n == 20 && s[19] == 'Z');
    if (catalog_limit_kind_parse(s, &kind) == 0)
        CHECK(strcmp(catalog_limit_kind_name(kind), s) == 0);
    /* a tiny error buffer is always terminated and never overrun */
    char tiny[3];
    if (catalog_check_route(s, s, tiny, sizeof(tiny)) != 0)
        CHECK(memchr(tiny, '\0', sizeof(tiny)) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    fuzz_rate_text(s);
    fuzz_quota_text(s);
    fuzz_periods(take_i64(data, size, 0));
    fuzz_kind_name(s);
    fuzz_route(s);
    fuzz_names(s);
    fuzz_validate(data, size);
    fuzz_rate_numbers(take_i64(data, size, 0), take_i64(data, size, 8),
                      size > 16 ? data[16] % 40 : 32);
    free(s);
    return 0;
}
