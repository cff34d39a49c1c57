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
};

#define N_KINDS (sizeof(kind_names) / sizeof(kind_names[0]))
/* limit_kind_parse only knows the rate kinds (tierctl --algorithm); a concurrency
 * rule comes from a --concurrency limit, never from a name. */
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
    if (rule->id < 0 || rule->rate < 1 || rule->burst < 0 || rule->window_ms < 1)
        return -EINVAL;
    if (rule->rate >= LIMIT_MAX_PRODUCT || rule->burst >= LIMIT_MAX_PRODUCT)
        return -EINVAL;
    if (rule->kind == LIMIT_CONCURRENCY && rule->burst != 0)
        return -EINVAL;   /* N slots, no burst */
    int64_t capacity = rule->rate + rule->burst;   /* < 2^53, no overflow */
    if (capacity >= LIMIT_MAX_PRODUCT / rule->window_ms + 1 || capacity * rule->window_ms >= LIMIT_MAX_PRODUCT)
        return -EINVAL;
    return 0;
}
