/* A user's own limits against the plan's. See own_limits.h. */
#include "tiers/own_limits.h"

#include <string.h>

bool tier_own_limit_replaces(const struct tier_limit *own, const struct tier_limit *plan_limit)
{
    if (own->kind != plan_limit->kind || own->has_route != plan_limit->has_route)
        return false;
    return !own->has_route || (strcmp(own->route_method, plan_limit->route_method) == 0 &&
                               strcmp(own->route_prefix, plan_limit->route_prefix) == 0);
}

static bool same_window(const struct tier_limit *a, const struct tier_limit *b)
{
    return a->rule.window_ms == b->rule.window_ms && a->rule.period == b->rule.period;
}

/* Whether one of own[0, n) already took the state of the limit with that id. */
static bool taken(const struct tier_limit *own, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (own[i].rule.id == id)
            return true;
    return false;
}

/* One pass: each own limit that has not taken a state yet (its rule.id is still its id)
 * takes the first plan limit it replaces that nobody took, of its window when window_only. */
static void take(const struct tier_limit *plan_limits, size_t n_plan, struct tier_limit *own, size_t n_own,
                 bool window_only)
{
    for (size_t i = 0; i < n_own; i++) {
        if (own[i].rule.id != own[i].id || own[i].kind == TIER_LIMIT_WS_MESSAGES)
            continue;
        for (size_t k = 0; k < n_plan; k++) {
            const struct tier_limit *l = &plan_limits[k];
            if (tier_own_limit_replaces(&own[i], l) && (!window_only || same_window(&own[i], l)) &&
                !taken(own, n_own, l->id)) {
                own[i].rule.id = l->id;
                break;
            }
        }
    }
}

void tier_own_limits_take_state(const struct tier_limit *plan_limits, size_t n_plan, struct tier_limit *own,
                                size_t n_own)
{
    for (size_t i = 0; i < n_own; i++)
        own[i].rule.id = own[i].id;
    take(plan_limits, n_plan, own, n_own, true);
    take(plan_limits, n_plan, own, n_own, false);
}
