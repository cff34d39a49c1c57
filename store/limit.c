/* Limit rules: kind names, the N/WINDOW rate syntax, range checks. */
#include "store/limit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    [LIMIT_SLIDING_LOG] = "sliding-log",
    [LIMIT_SLIDING_WINDOW] = "sliding-window",
    [LIMIT_TOKEN_BUCKET] = "token-bucket",
    [LIMIT_FIXED_WINDOW] = "fixed-window",
    [LIMIT_CONCURRENCY] = "concurrency",
    [LIMIT_QUOTA] = "quota",
};

#define N_KINDS (sizeof(kind_names) / sizeof(kind_names[0]))
/* limit_kind_parse only knows the rate kinds (tierctl --algorithm); a concurrency
 * rule comes from a --concurrency limit, a quota from --quota, never from a name. */
#define N_RATE_KINDS ((size_t)LIMIT_CONCURRENCY)

const char *limit_kind_name(enum limit_kind kind)
{
    if ((unsigned)kind >= N_KINDS)
        return "unknown";
    return kind_names[kind];
}

int limit_kind_parse(const char *text, enum limit_kind *pkind)
{
    if (text == NULL)
        return -EINVAL;
    for (size_t i = 0; i < N_RATE_KINDS; i++) {
        if (strcmp(text, kind_names[i]) == 0) {
            *pkind = (enum limit_kind)i;
            return 0;
        }
    }
    return -EINVAL;
}

struct unit {
    const char *name;
    int64_t ms;
};

/* Every spelling the parser takes; the first of each length is the canonical one. */
static const struct unit units[] = {
    {"ms", 1},
    {"s", 1000}, {"sec", 1000}, {"secs", 1000}, {"second", 1000}, {"seconds", 1000},
    {"min", 60000}, {"m", 60000}, {"mins", 60000}, {"minute", 60000}, {"minutes", 60000},
    {"h", 3600000}, {"hr", 3600000}, {"hour", 3600000}, {"hours", 3600000},
    {"day", 86400000}, {"d", 86400000}, {"days", 86400000},
};

/* Parses a decimal count of at least 1 from the start of text: digits only, no sign, no
 * space. Returns 0 with *pvalue and *pend set, or -EINVAL. */
static int parse_count(const char *text, int64_t *pvalue, const char **pend)
{
    if (*text < '0' || *text > '9')
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE || end == text || v < 1)
        return -EINVAL;
    *pvalue = (int64_t)v;
    *pend = end;
    return 0;
}

int limit_rate_parse(const char *text, int64_t *pcount, int64_t *pwindow_ms)
{
    if (text == NULL || pcount == NULL || pwindow_ms == NULL)
        return -EINVAL;

    int64_t count = 0;
    const char *p = NULL;
    if (parse_count(text, &count, &p) != 0 || *p != '/')
        return -EINVAL;
    p++;

    /* Optional multiplier before the unit: "15s", "1min". */
    int64_t multiplier = 1;
    if (*p >= '0' && *p <= '9') {
        if (parse_count(p, &multiplier, &p) != 0)
            return -EINVAL;
    }

    const struct unit *unit = NULL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].name) == 0) {
            unit = &units[i];
            break;
        }
    }
    if (unit == NULL)
        return -EINVAL;
    if (multiplier > INT64_MAX / unit->ms)
        return -EINVAL;
    int64_t window_ms = multiplier * unit->ms;
    if (count >= LIMIT_MAX_PRODUCT / window_ms + 1 || count * window_ms >= LIMIT_MAX_PRODUCT)
        return -EINVAL;

    *pcount = count;
    *pwindow_ms = window_ms;
    return 0;
}

/* The largest unit that divides window_ms exactly, and how many of it. */
static const struct unit *window_unit(int64_t window_ms, int64_t *pmultiplier)
{
    static const struct unit canonical[] = {
        {"day", 86400000}, {"h", 3600000}, {"min", 60000}, {"s", 1000}, {"ms", 1},
    };
    const struct unit *u = &canonical[4];
    for (size_t i = 0; i < 5; i++) {
        if (window_ms % canonical[i].ms == 0) {
            u = &canonical[i];
            break;
        }
    }
    *pmultiplier = window_ms / u->ms;
    return u;
}

char *limit_rate_format(int64_t count, int64_t window_ms, char *buf, size_t buflen)
{
    if (buf == NULL || buflen == 0)
        return buf;
    if (window_ms < 1) {
        snprintf(buf, buflen, "%" PRId64 "/?", count);
        return buf;
    }
    int64_t multiplier;
    const struct unit *u = window_unit(window_ms, &multiplier);
    if (multiplier == 1)
        snprintf(buf, buflen, "%" PRId64 "/%s", count, u->name);
    else
        snprintf(buf, buflen, "%" PRId64 "/%" PRId64 "%s", count, multiplier, u->name);
    return buf;
}

char *limit_window_format(int64_t window_ms, char *buf, size_t buflen)
{
    if (buf == NULL || buflen == 0)
        return buf;
    if (window_ms < 1) {
        snprintf(buf, buflen, "?");
        return buf;
    }
    int64_t multiplier;
    const struct unit *u = window_unit(window_ms, &multiplier);
    snprintf(buf, buflen, "%" PRId64 "%s", multiplier, u->name);
    return buf;
}

int limit_rule_validate(const struct limit_rule *rule)
{
    if (rule == NULL)
        return -EINVAL;
    if ((unsigned)rule->kind >= N_KINDS)
        return -EINVAL;
    if (rule->id < 0 || rule->rate < 1 || rule->burst < 0 || rule->cost < 0)
        return -EINVAL;
    if (rule->rate >= LIMIT_MAX_PRODUCT || rule->burst >= LIMIT_MAX_PRODUCT)
        return -EINVAL;
    if (rule->kind == LIMIT_QUOTA) {
        /* N units per period; the window plays no part, so no product to bound. */
        if (rule->burst != 0 || rule->period <= LIMIT_PERIOD_NONE || rule->period > LIMIT_PERIOD_MONTH)
            return -EINVAL;
        return limit_rule_cost(rule) > rule->rate ? -EINVAL : 0;
    }
    if (rule->period != LIMIT_PERIOD_NONE || rule->window_ms < 1)
        return -EINVAL;
    if (rule->kind == LIMIT_CONCURRENCY && rule->burst != 0)
        return -EINVAL;   /* N slots, no burst */
    int64_t capacity = rule->rate + rule->burst;   /* < 2^53, no overflow */
    if (capacity >= LIMIT_MAX_PRODUCT / rule->window_ms + 1 || capacity * rule->window_ms >= LIMIT_MAX_PRODUCT)
        return -EINVAL;
    /* A request that costs more than the capacity could never be admitted. */
    if (rule->kind != LIMIT_CONCURRENCY && limit_rule_cost(rule) > capacity)
        return -EINVAL;
    return 0;
}

/* ---- quotas: calendar periods in UTC ---- */

static const char *const period_names[] = {
    [LIMIT_PERIOD_NONE] = "none",
    [LIMIT_PERIOD_DAY] = "day",
    [LIMIT_PERIOD_WEEK] = "week",
    [LIMIT_PERIOD_MONTH] = "month",
};

const char *limit_period_name(enum limit_period period)
{
    if ((unsigned)period >= sizeof(period_names) / sizeof(period_names[0]))
        return "unknown";
    return period_names[period];
}

int limit_quota_parse(const char *text, int64_t *pcount, enum limit_period *pperiod)
{
    if (text == NULL || pcount == NULL || pperiod == NULL)
        return -EINVAL;
    int64_t count = 0;
    const char *p = NULL;
    if (parse_count(text, &count, &p) != 0 || *p != '/' || count >= LIMIT_MAX_PRODUCT)
        return -EINVAL;
    p++;
    for (int i = LIMIT_PERIOD_DAY; i <= LIMIT_PERIOD_MONTH; i++) {
        if (strcmp(p, period_names[i]) == 0) {
            *pcount = count;
            *pperiod = (enum limit_period)i;
            return 0;
        }
    }
    return -EINVAL;
}

char *limit_quota_format(int64_t count, enum limit_period period, char *buf, size_t buflen)
{
    if (buf != NULL && buflen > 0)
        snprintf(buf, buflen, "%" PRId64 "/%s", count, limit_period_name(period));
    return buf;
}

#define DAY_MS 86400000

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's
 * days_from_civil / civil_from_days; check.lua has the same). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = limit_floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *py, int64_t *pm)
{
    z += 719468;
    int64_t era = limit_floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    *py = yoe + era * 400 + (m <= 2);
    *pm = m;
}

int64_t limit_period_start_ms(enum limit_period period, int64_t unix_ms)
{
    int64_t day = limit_floor_div(unix_ms, DAY_MS);
    switch (period) {
    case LIMIT_PERIOD_DAY:
        return day * DAY_MS;
    case LIMIT_PERIOD_WEEK:
        /* 1970-01-01 was a Thursday: Monday is 3 days before it. */
        return (day - (day + 3 - limit_floor_div(day + 3, 7) * 7)) * DAY_MS;
    case LIMIT_PERIOD_MONTH: {
        int64_t y, m;
        civil_from_days(day, &y, &m);
        return days_from_civil(y, m, 1) * DAY_MS;
    }
    default:
        return -1;
    }
}

int64_t limit_period_end_ms(enum limit_period period, int64_t unix_ms)
{
    int64_t start = limit_period_start_ms(period, unix_ms);
    switch (period) {
    case LIMIT_PERIOD_DAY:
        return start + DAY_MS;
    case LIMIT_PERIOD_WEEK:
        return start + 7 * (int64_t)DAY_MS;
    case LIMIT_PERIOD_MONTH: {
        int64_t y, m;
        civil_from_days(limit_floor_div(start, DAY_MS), &y, &m);
        return days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * DAY_MS;
    }
    default:
        return -1;
    }
}
