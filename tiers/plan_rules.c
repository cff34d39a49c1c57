/* The path as routes match it, and a plan's limits as limiter rules. See plan_rules.h. */
#include "tiers/plan_rules.h"

#include <stdbool.h>
#include <string.h>

/* The largest selection of limits one request can meet (rate, concurrency, messages). */
#define MAX_SELECTED 48

char *tier_path_normalize(const char *in, char *out, size_t outlen)
{
    size_t o = 0;
    if (outlen < 2)
        return NULL;
    out[o++] = '/';
    const char *p = in;
    while (*p != '\0') {
        while (*p == '/')
            p++;
        const char *seg = p;
        while (*p != '\0' && *p != '/')
            p++;
        size_t len = (size_t)(p - seg);
        bool trailing = *p == '/';
        if (len == 0 || (len == 1 && seg[0] == '.')) {
            continue;
        }
        if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            if (o > 1) {
                o--; /* the '/' after the last segment */
                while (o > 1 && out[o - 1] != '/')
                    o--;
            }
            continue;
        }
        if (o + len + 1 >= outlen)
            return NULL;
        memcpy(out + o, seg, len);
        o += len;
        if (trailing)
            out[o++] = '/';
    }
    out[o] = '\0';
    return out;
}

size_t tier_plan_rules(const struct tier_plan *plan, const char *method, const char *path, int64_t lease_ttl_ms,
                       struct limit_rule *rules, const struct tier_limit **checked, const struct tier_limit **pws)
{
    const struct tier_limit *selected[MAX_SELECTED];
    const struct tier_limit *ws = NULL;
    size_t n = tier_plan_select(plan, method, path, strlen(path), selected, MAX_SELECTED);
    if (n > MAX_SELECTED)
        n = MAX_SELECTED;
    size_t n_rules = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tier_limit *l = selected[i];
        if (l->kind == TIER_LIMIT_WS_MESSAGES) {
            if (ws == NULL)
                ws = l;
            continue;
        }
        if (n_rules == LIMITER_MAX_RULES)
            continue;
        struct limit_rule rule = l->rule;
        if (l->kind == TIER_LIMIT_CONCURRENCY) {
            rule.algorithm = LIMIT_CONCURRENCY;
            rule.burst = 0;
            rule.window_ms = lease_ttl_ms;
        }
        rules[n_rules] = rule;
        checked[n_rules++] = l;
    }
    if (pws != NULL)
        *pws = ws;
    return n_rules;
}
