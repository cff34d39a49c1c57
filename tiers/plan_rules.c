/* A plan's limits for one request as limiter rules. See plan_rules.h. */
#include "tiers/plan_rules.h"


/* The largest selection of limits one request can meet (rate, concurrency, messages). */
#define MAX_SELECTED 48

size_t tier_plan_rules(const struct tier_plan *plan, const char *method, const char *path, size_t path_len,
                       bool ignore_case, int64_t lease_ttl_ms, struct limit_rule *rules,
                       const struct tier_limit **checked, const struct tier_limit **pws)
{
    const struct tier_limit *selected[MAX_SELECTED];
    const struct tier_limit *ws = NULL;
    size_t n = tier_plan_select_case(plan, method, path, path_len, ignore_case, selected, MAX_SELECTED);
    if (n > MAX_SELECTED)
        n = MAX_SELECTED;
    size_t n_rules = 0;
    int64_t cost = tier_plan_cost(plan, method, path, path_len, ignore_case);
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
            rule.kind = LIMIT_CONCURRENCY;
            rule.burst = 0;
            rule.window_ms = lease_ttl_ms;
        } else if (cost > 1) {
            rule.cost = cost;   /* every rate limit and quota; never a concurrency slot */
        }
        rules[n_rules] = rule;
        checked[n_rules++] = l;
    }
    if (pws != NULL)
        *pws = ws;
    return n_rules;
}
