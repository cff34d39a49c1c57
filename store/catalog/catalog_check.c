/* Checks of names and values before they enter the catalog. See catalog.h. */
#include "store/catalog/catalog.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "store/catalog/utf8.h"

/* Says why a value was refused, in one line of UTF-8 text: control characters of the value
 * quoted in it (a route method "G\nET") and bytes that are not UTF-8 become '?'. */
__attribute__((format(printf, 3, 4)))
static int invalid(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) {
        vsnprintf(err, errlen, fmt, ap);
        for (char *p = err; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        utf8_repair(err, strlen(err));
    }
    va_end(ap);
    return CATALOG_INVALID;
}

int catalog_check_plan_name(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    if (n == 0 || n > CATALOG_NAME_MAX)
        return invalid(err, errlen, "a plan name has 1 to %d characters", CATALOG_NAME_MAX);
    if (!isalnum((unsigned char)name[0]))
        return invalid(err, errlen, "invalid plan name \"%s\": it starts with a letter or digit", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(isascii(c) && (isalnum(c) || c == '-' || c == '_' || c == '.')))
            return invalid(err, errlen, "invalid plan name \"%s\": use letters, digits, '-', '_', '.'", name);
    }
    return 0;
}

int catalog_check_user_id(const char *id, char *err, size_t errlen)
{
    size_t n = strlen(id);
    if (n == 0 || n > CATALOG_USER_ID_MAX)
        return invalid(err, errlen, "a user id has 1 to %d characters", CATALOG_USER_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!(isascii(c) && (isalnum(c) || strchr("-_.@:+=/~", c))))
            return invalid(err, errlen,
                           "invalid user id: use letters, digits and - _ . @ : + = / ~");
    }
    return 0;
}

int catalog_check_label(const char *label, char *err, size_t errlen)
{
    size_t n = strlen(label);
    if (n > CATALOG_LABEL_MAX)
        return invalid(err, errlen, "a label has at most %d bytes", CATALOG_LABEL_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)label[i] < 0x20 || label[i] == 0x7f)
            return invalid(err, errlen, "a label has no control characters");
    if (!utf8_valid(label, n))
        return invalid(err, errlen, "a label is UTF-8 text: \"%s\" is not", label);
    return 0;
}

int catalog_check_route(const char *method, const char *prefix, char *err, size_t errlen)
{
    size_t m = strlen(method);
    if (m == 0 || m > CATALOG_METHOD_MAX)
        return invalid(err, errlen, "invalid route method \"%s\"", method);
    if (strcmp(method, "*") != 0) {
        for (size_t i = 0; i < m; i++)
            if (!(method[i] >= 'A' && method[i] <= 'Z') && method[i] != '-' && method[i] != '_')
                return invalid(err, errlen,
                               "invalid route method \"%s\": upper-case letters, or * for any", method);
    }
    size_t n = strlen(prefix);
    if (n == 0 || prefix[0] != '/' || n > CATALOG_PREFIX_MAX)
        return invalid(err, errlen, "a route prefix starts with / and has at most %d bytes",
                       CATALOG_PREFIX_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)prefix[i];
        if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#')
            return invalid(err, errlen, "invalid route prefix: no spaces, controls, '?' or '#'");
    }
    return 0;
}

int catalog_check_limit(const struct catalog_limit *limit, char *err, size_t errlen)
{
    switch (limit->kind) {
    case CATALOG_LIMIT_RATE:
    case CATALOG_LIMIT_WS_MESSAGES: {
        if (limit->kind == CATALOG_LIMIT_WS_MESSAGES && (limit->burst != 0 || limit->algorithm != LIMIT_SLIDING_LOG))
            return invalid(err, errlen, "a ws_messages limit has no burst or algorithm");
        struct limit_rule rule = {
            .id = limit->id, .kind = limit->algorithm, .rate = limit->amount,
            .burst = limit->burst, .window_ms = limit->window_ms,
        };
        if (limit_kind_name(limit->algorithm) == NULL || limit_rule_validate(&rule) != 0)
            return invalid(err, errlen, "invalid %s limit: %lld/%lld ms burst %lld",
                           catalog_limit_kind_name(limit->kind), (long long)limit->amount,
                           (long long)limit->window_ms, (long long)limit->burst);
        break;
    }
    case CATALOG_LIMIT_QUOTA: {
        struct limit_rule rule = {
            .id = limit->id, .kind = LIMIT_QUOTA, .rate = limit->amount, .window_ms = 1,
            .period = limit->period,
        };
        if (limit->window_ms != 0 || limit->burst != 0 || limit->algorithm != LIMIT_SLIDING_LOG ||
            limit_rule_validate(&rule) != 0)
            return invalid(err, errlen, "invalid quota: %lld per %s", (long long)limit->amount,
                           limit_period_name(limit->period));
        break;
    }
    case CATALOG_LIMIT_CONCURRENCY:
        if (limit->amount < 1 || limit->amount > CATALOG_MAX_CONCURRENCY)
            return invalid(err, errlen, "a concurrency limit is 1 to %d", CATALOG_MAX_CONCURRENCY);
        if (limit->window_ms != 0 || limit->burst != 0 || limit->algorithm != LIMIT_SLIDING_LOG)
            return invalid(err, errlen, "a concurrency limit has no window, burst or algorithm");
        break;
    default:
        return invalid(err, errlen, "unknown limit kind %d", (int)limit->kind);
    }
    if (limit->kind != CATALOG_LIMIT_QUOTA && limit->period != LIMIT_PERIOD_NONE)
        return invalid(err, errlen, "only a quota has a period");
    if ((limit->route_method == NULL) != (limit->route_prefix == NULL))
        return invalid(err, errlen, "a route has both a method and a prefix");
    if (limit->route_method)
        return catalog_check_route(limit->route_method, limit->route_prefix, err, errlen);
    return 0;
}

int catalog_check_time(const char *text, char *err, size_t errlen)
{
    /* YYYY-MM-DDTHH:MM:SSZ */
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    if (strlen(text) != sizeof(shape) - 1)
        goto bad;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd' ? !isdigit((unsigned char)text[i]) : text[i] != shape[i])
            goto bad;
    }
    return 0;
bad:
    return invalid(err, errlen, "invalid time \"%s\" (YYYY-MM-DDTHH:MM:SSZ)", text);
}

int catalog_check_cost(const struct catalog_cost *cost, char *err, size_t errlen)
{
    if (cost->cost < 1 || cost->cost > CATALOG_MAX_COST)
        return invalid(err, errlen, "a cost is 1 to %d", CATALOG_MAX_COST);
    if (!cost->route_method || !cost->route_prefix)
        return invalid(err, errlen, "a cost needs a route");
    return catalog_check_route(cost->route_method, cost->route_prefix, err, errlen);
}
